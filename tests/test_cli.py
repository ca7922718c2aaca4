"""The `specguard` command on tiny models saved to disk, as a user would call it."""

import json

import pytest
from typer.testing import CliRunner

from specguard_graph.cli import app

runner = CliRunner()


def args(root, *extra):
    return [
        "solve",
        "--draft", str(root / "draft"),
        "--target", str(root / "target"),
        "--embedder", str(root / "embedder"),
        "--max-steps", "3",
        "--max-step-tokens", "12",
        *extra,
    ]  # fmt: skip


def test_solve_json_prints_the_contract(model_dirs):
    res = runner.invoke(app, [*args(model_dirs, "--json", "--k", "2"), "What is 2 + 3?"])
    assert res.exit_code == 0, res.output
    trace = json.loads(res.stdout.strip().splitlines()[-1])
    assert set(trace) >= {"question", "answer", "text", "steps", "timing", "counts"}
    assert set(trace["timing"]) == {"total_s", "draft_s", "verify_s", "target_s"}
    assert set(trace["counts"]) == {"steps", "target_steps", "draft_tokens", "target_tokens"}
    assert len(trace["steps"]) == trace["counts"]["steps"] == 3
    step_keys = {"index", "text", "source", "grounding", "logprob", "score", "accepted"}
    assert set(trace["steps"][0]) == step_keys | {"candidates", "cut"}
    assert len(trace["steps"][0]["candidates"]) == 2


def test_solve_file_prints_one_json_line_per_question(model_dirs, tmp_path):
    f = tmp_path / "q.jsonl"
    f.write_text('{"question": "What is 1 + 1?"}\n\n{"question": "What is 2 + 2?"}\n')
    res = runner.invoke(app, [*args(model_dirs, "--k", "1"), "--file", str(f)])
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in res.stdout.strip().splitlines() if x.startswith("{")]
    assert [x["question"] for x in lines] == ["What is 1 + 1?", "What is 2 + 2?"]


def test_solve_live_view_shows_steps_and_answer(model_dirs):
    res = runner.invoke(app, [*args(model_dirs, "--k", "2"), "What is 2 + 3?"])
    assert res.exit_code == 0, res.output
    assert "answer:" in res.stdout and "status=max_steps" in res.stdout
    # piped output: the live view's last line (a candidate) ends before the answer line starts
    answer = [line for line in res.stdout.splitlines() if "answer:" in line]
    assert len(answer) == 1 and answer[0].startswith("answer:"), res.stdout


@pytest.mark.parametrize(
    "extra, message",
    [
        (["   "], "question is empty"),
        (["--k", "0", "q"], "k:"),
        (["--tau", "-0.5", "q"], "tau:"),
        (["--beta", "-1", "q"], "beta:"),
        (["--signal-model", "judge", "q"], "'judge' is not one of"),
        (["--steps", "poem", "q"], "'poem' is not one of"),
        (["--k", "abc", "q"], "--k"),
        (["--draft", "/nonexistent/model", "q"], "does not exist"),
    ],
)
def test_bad_input_is_one_line_and_non_zero(model_dirs, extra, message):
    base = args(model_dirs)
    if extra[0] == "--draft":
        base[base.index("--draft") + 1] = extra[1]
        extra = extra[2:]
    res = runner.invoke(app, [*base, *extra])
    assert res.exit_code == 2
    assert "Traceback" not in res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], res.stderr


def test_truncated_gguf_is_named(model_dirs, tmp_path):
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 10)
    base = args(model_dirs)
    base[base.index("--target") + 1] = str(bad)
    res = runner.invoke(app, [*base, "q"])
    assert res.exit_code == 2 and "cut.gguf" in res.stderr and "Traceback" not in res.output


def test_too_long_a_question_is_a_clear_error(model_dirs):
    res = runner.invoke(app, [*args(model_dirs, "--k", "1"), "word " * 5000])
    assert res.exit_code == 2 and "window" in res.stderr, res.output


def test_models_list_runs_without_models(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECGUARD_HOME", str(tmp_path))
    res = runner.invoke(app, ["models", "list"])
    assert res.exit_code == 0 and "qwen2.5-coder-0.5b" in res.stdout


def test_default_models_missing_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECGUARD_HOME", str(tmp_path))
    res = runner.invoke(app, ["solve", "What is 2 + 3?"])
    assert res.exit_code == 2 and "specguard models install" in res.stderr


def test_out_file_survives_a_kill_and_resumes(model_dirs, tmp_path):
    """Kill `solve --file --out` mid-run: finished traces stay, a rerun does only the rest."""
    import os
    import signal
    import subprocess
    import sys
    import time

    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(f'{{"question": "What is {i} + {i}?"}}\n' for i in range(6)))
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "specguard_graph.cli", *args(model_dirs, "--k", "1"),
           "--max-step-tokens", "40", "--file", str(questions), "--out", str(out)]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.time() + 120
    while time.time() < deadline and (not out.exists() or len(out.read_text().splitlines()) < 2):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    kept = [json.loads(x) for x in out.read_text().splitlines() if x.endswith("}")]
    assert 2 <= len(kept) < 6, "killed after two finished questions"
    res = runner.invoke(app, [*args(model_dirs, "--k", "1"), "--max-step-tokens", "40",
                              "--file", str(questions), "--out", str(out)])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert f"resuming: {len(kept)} already" in res.stderr
    final = [json.loads(x) for x in out.read_text().splitlines()]
    assert sorted(r["key"] for r in final) == sorted(f"{i}:What is {i} + {i}?" for i in range(6))
    assert final[: len(kept)] == kept  # finished results were never rewritten


NASTY = ["Is \\[ x \\] the same as [/INST] here?", "[bold]not bold[/bold] and [/x]",
         "a lone ] and [", "\\[ 3 \\times 4 = 12 \\]"]  # fmt: skip


@pytest.mark.parametrize("nasty", NASTY)
def test_the_live_view_shows_user_and_model_text_verbatim(nasty):
    """Question, draft step, target step and candidates are data, never rich markup: `[/x]`
    once ended the run with a MarkupError and `\\[` lost its backslash."""
    from rich.console import Console

    from specguard_graph.cli.live import LiveView

    view = LiveView(f"Q: {nasty}")
    for i, source in enumerate(["draft", "target"]):
        view.handle({"event": "step", "index": i, "source": source, "text": f"{source}: {nasty}",
                     "grounding": 0.5, "logprob": -0.1, "score": 0.6})  # fmt: skip
    view.handle({"event": "draft", "step": 2, "candidates": [f"cand: {nasty}"]})
    console = Console(record=True, width=400, color_system=None)
    console.print(view.render())
    shown = console.export_text()
    for where in ("Q", "draft", "target", "cand"):
        assert f"{where}: {nasty}" in shown, (where, shown)


def test_solve_in_a_real_terminal_shows_a_bracketed_question_verbatim(model_dirs, tmp_path):
    """`specguard solve` in tmux: the live view draws on a real terminal and ends normally."""
    import shutil
    import subprocess
    import sys
    import time
    from pathlib import Path

    tmux = shutil.which("tmux")
    if tmux is None:
        pytest.fail("tmux is needed for the terminal test (apt-get install tmux)")
    cli = str(Path(sys.executable).with_name("specguard"))
    cmd = [cli, *args(model_dirs, "--k", "2"), NASTY[0]]
    script = tmp_path / "run.sh"
    script.write_text(f"{subprocess.list2cmdline(cmd)}\necho EXIT=$?\nsleep 60\n")
    sock = str(tmp_path / "tmux.sock")
    subprocess.run([tmux, "-S", sock, "new-session", "-d", "-x", "220", "-y", "60",
                    f"bash {script}"], check=True)  # fmt: skip
    try:
        screen = ""
        for _ in range(240):
            screen = subprocess.run([tmux, "-S", sock, "capture-pane", "-p", "-J"],
                                    capture_output=True, text=True).stdout  # fmt: skip
            if "EXIT=" in screen:
                break
            time.sleep(0.5)
    finally:
        subprocess.run([tmux, "-S", sock, "kill-server"], capture_output=True)
    assert "EXIT=0" in screen, screen
    assert NASTY[0] in screen and "answer:" in screen, screen
