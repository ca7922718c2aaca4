"""An engine's server in a child process on a free loopback port, for tests and benchmarks:
its threads and memory go when it stops, and its log goes to a file (a pipe nobody drains
would stall it). `with Server(...) as url:` waits until `/health` answers."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from typing import IO

from ...errors import ModelLoadError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ChildServer:
    """The lifecycle every engine shares; subclasses say what to run (`cmd`) and its name."""

    engine = "server"

    def __init__(self, cmd: list[str], *, port: int, start_timeout: float,
                 env: dict[str, str] | None = None):  # fmt: skip
        self.cmd, self.port, self.start_timeout = cmd, port, start_timeout
        self.env = {**os.environ, **(env or {})}
        self.url = f"http://127.0.0.1:{port}/v1"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: IO[bytes] | None = None

    def log_tail(self, lines: int = 1) -> list[str]:
        if self.log is None:
            return []
        self.log.seek(0)
        return self.log.read().decode(errors="replace").strip().splitlines()[-lines:]

    def __enter__(self) -> str:
        import httpx

        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=self.env, start_new_session=True)  # fmt: skip
        health = self.url.removesuffix("/v1") + "/health"
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_tail()
                self.__exit__()
                raise ModelLoadError(f"the {self.engine} server exited while starting: "
                                     f"{(tail or ['no output'])[0]}")  # fmt: skip
            try:
                if httpx.get(health, timeout=2).status_code == 200:
                    return self.url
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.__exit__()
        raise ModelLoadError(f"the {self.engine} server did not start in {self.start_timeout:g} s")

    def kill(self) -> None:
        """SIGKILL the server and everything it started (a crash, for resume tests)."""
        if self.proc is not None and self.proc.poll() is None:
            _signal_group(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                _signal_group(self.proc.pid, signal.SIGTERM)  # vLLM's engine: its own child
                try:
                    self.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self.kill()
            self.proc = None
        if self.log is not None:
            self.log.close()
            self.log = None


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:  # it ended between the poll and the signal
        pass
