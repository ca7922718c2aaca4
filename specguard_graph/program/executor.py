"""Run a step's Python in a short-lived, limited process.

What it is: a separate process with no inherited environment, an empty temporary working
directory, Python's isolated mode (`-I`), CPU-time, memory, file-size and process-count limits,
a wall-clock timeout that kills its whole process group, and capped output; run as `nobody`
when the caller is root (so it cannot write outside world-writable places or read other
processes' environments). What it is not: a security boundary against a determined attacker
(no seccomp, no namespaces). Pass your own `executor` (any callable `code -> Observation`, a
LangGraph ToolNode wrapper, a remote sandbox) to replace it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from typing import IO, Any

NOBODY = 65534


@dataclass(frozen=True)
class Observation:
    stdout: str
    error: str | None  # the traceback's last line, a limit that was hit, or None
    exit_status: int | None
    time_s: float
    timed_out: bool = False
    truncated: bool = False

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
    """`executor(code) -> Observation`; the limits are per run."""

    def __init__(self, *, timeout_s: float = 5.0, cpu_s: int = 5, memory_mb: int = 512,
                 file_kb: int = 1024, processes: int = 8, output_chars: int = 4000,
                 python: str | None = None):  # fmt: skip
        self.timeout_s, self.cpu_s, self.memory_mb = timeout_s, cpu_s, memory_mb
        self.file_kb, self.processes, self.output_chars = file_kb, processes, output_chars
        self.demote = os.geteuid() == 0
        # root's interpreter may sit where `nobody` cannot read it: a system Python then
        system = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
        self.python = python or (system if self.demote and system else sys.executable)

    def _limits(self) -> None:  # runs in the child, before exec
        import resource

        mem = self.memory_mb << 20
        # soft < hard: the soft limit sends SIGXCPU (reported as a time limit); with soft ==
        # hard Linux sends a bare SIGKILL, which reads like any other kill
        resource.setrlimit(resource.RLIMIT_CPU, (self.cpu_s, self.cpu_s + 1))
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_FSIZE, (self.file_kb << 10, self.file_kb << 10))
        resource.setrlimit(resource.RLIMIT_NPROC, (self.processes, self.processes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if self.demote:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)

    def __call__(self, code: str) -> Observation:
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="specguard-run-") as cwd:
            if self.demote:
                os.chown(cwd, NOBODY, NOBODY)
            proc = subprocess.Popen(
                [self.python, "-I", "-c", code], cwd=cwd, env={}, stdin=subprocess.DEVNULL,
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
                try:  # the whole group: children it forked die with it
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
            for r in readers:
                r.join(timeout=2)
        stdout = b"".join(out).decode("utf-8", "replace")
        truncated = over.is_set() or len(stdout) > self.output_chars
        stderr = b"".join(err).decode("utf-8", "replace").strip()
        error = self._error(proc.returncode, stderr, timed_out)
        status = None if timed_out else proc.returncode
        timed_out = timed_out or status == -signal.SIGXCPU  # out of CPU time is a time limit too
        return Observation(
            stdout=stdout[: self.output_chars], error=error,
            exit_status=status,
            time_s=time.perf_counter() - t0, timed_out=timed_out, truncated=truncated,
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
        last = stderr.splitlines()[-1] if stderr else f"exit status {status}"
        return last[:300]
