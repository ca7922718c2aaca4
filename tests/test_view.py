"""The run page, checked as a person would see it: headless Chromium opens it from disk."""

import json
import shutil
import subprocess

import pytest
from typer.testing import CliRunner

from specguard_graph.cli import app
from specguard_graph.view import page


@pytest.fixture(scope="module")
def chromium():
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], capture_output=True,
                       timeout=900)  # fmt: skip
        found = shutil.which("chromium")
    if found is None:
        pytest.skip("no chromium and it cannot be installed here (apt-get install chromium)")
    return found


def render(chromium, path, tmp_path):
    """The DOM after the page loaded, and a full-page screenshot."""
    base = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}"]  # fmt: skip
    dom = subprocess.run([*base, "--dump-dom", path.as_uri()], capture_output=True, text=True,
                         timeout=120).stdout  # fmt: skip
    shot = tmp_path / "shot.png"
    subprocess.run([*base, f"--screenshot={shot}", "--window-size=1200,2400", path.as_uri()],
                   capture_output=True, timeout=120)  # fmt: skip
    return dom, shot


def test_solve_html_shows_why_each_step_was_kept_or_recomputed(model_dirs_view, chromium,
                                                               tmp_path):  # fmt: skip
    html = tmp_path / "run.html"
    res = CliRunner().invoke(app, [*model_dirs_view, "--json", "--html", str(html),
                                   "What is 2 + 3?"])  # fmt: skip
    assert res.exit_code == 0, res.output
    trace = json.loads(res.stdout.strip().splitlines()[-1])
    dom, shot = render(chromium, html, tmp_path)
    assert dom.count('<section class="step') == len(trace["steps"]) > 0
    rejected = sum(s["source"] == "target" for s in trace["steps"])
    assert dom.count('class="step rejected"') == rejected > 0
    assert dom.count("recomputed:") == rejected and "the target wrote instead" in dom
    fallbacks = [d["fallback"] for s, d in zip(trace["steps"], trace["detail"], strict=True)
                 if s["source"] == "target"]  # fmt: skip
    assert dom.count("the target kept the first") == fallbacks.count("verify")
    assert dom.count("the target rewrote it") == fallbacks.count("rewrite")
    assert dom.count('class="tok"') > 10 and "background:rgba(220,40,40" in dom
    assert dom.count('<span class="spent">(draft ') == len(trace["steps"])  # time per model
    assert "What is 2 + 3?" in dom and "http" not in html.read_text().split("<body>")[0]
    assert shot.stat().st_size > 10_000


def test_a_40_step_run_stays_readable_and_view_reads_saved_traces(chromium, tmp_path):
    steps = [{"index": i, "text": f"Step {i}: 2 + {i} = {2 + i}.", "source": "draft" if i % 3
              else "target", "grounding": 0.6, "logprob": -1.5, "score": 0.6, "accepted": i % 3 > 0,
              "candidates": []} for i in range(40)]  # fmt: skip
    detail = [{"tau": 0.5, "reason": None if i % 3 else "score 0.4 < tau 0.5",
               "detail": {"pieces": ["Step", f" {i}", ":", " ok"], "logprobs": [-0.1, -3, -0.2],
                          "grounding": [0.9, 0.2, 0.5]}} for i in range(40)]  # fmt: skip
    for d in detail[::3]:  # the target kept the draft's first two tokens of four
        d |= {"fallback": "verify", "verified": {"kept": 2, "candidate": 4, "drafted": 3,
                                                 "proposed": 4, "forwards": 4}}  # fmt: skip
    trace = {"question": "forty steps", "answer": "42", "status": "max_steps", "steps": steps,
             "detail": detail, "timing": {"total_s": 12.0}}  # fmt: skip
    saved = tmp_path / "runs.jsonl"
    saved.write_text(json.dumps(trace) + "\n")
    out = tmp_path / "forty.html"
    res = CliRunner().invoke(app, ["view", str(saved), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert out.read_text() == page([trace])
    dom, shot = render(chromium, out, tmp_path)
    assert dom.count('<section class="step') == 40 and dom.count("step rejected") == 14
    assert dom.count("the target kept the first 2 of 4 drafted tokens") == 14
    assert dom.count('class="tok kept"') == 2 * 14
    assert shot.stat().st_size > 10_000


def test_view_of_a_file_that_holds_no_runs_is_one_line(tmp_path):
    bad = tmp_path / "x.jsonl"
    bad.write_text('{"hello": 1}\n')
    res = CliRunner().invoke(app, ["view", str(bad)])
    assert res.exit_code == 2 and res.stderr.startswith("error:")


@pytest.fixture(scope="module")
def model_dirs_view(model_dirs):
    root = model_dirs
    return ["solve", "--draft", str(root / "draft"), "--target", str(root / "target"),
            "--embedder", str(root / "embedder"), "--k", "3", "--tau", "0.7", "--seed", "5",
            "--max-steps", "5", "--max-step-tokens", "12"]  # fmt: skip


def test_bench_html_dir_links_every_finished_problem_to_its_page(model_args, chromium, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} + 1?", "answer": str(i + 1)})
                            + "\n" for i in range(2)))  # fmt: skip
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"k": 3, "max_steps": 3, "max_step_tokens": 8, "tau": 0.7}))
    out, pages = tmp_path / "out", tmp_path / "pages"
    res = CliRunner().invoke(app, ["bench", "--data", str(data), "--out", str(out), "--config",
                                   str(cfg), "--max-tokens", "24", "--methods", "target,specguard",
                                   "--html-dir", str(pages), *model_args])  # fmt: skip
    assert res.exit_code == 0, res.output
    dom, _ = render(chromium, pages / "index.html", tmp_path)
    assert dom.count('<a class="grade') == 4  # 2 problems × 2 methods, each a link
    records = [json.loads(x) for x in (out / "specguard.jsonl").open()]
    for rec in records:
        dom, _ = render(chromium, pages / "specguard" / f"{rec['id']}.html", tmp_path)
        assert dom.count('<section class="step') == rec["steps"] > 0
        rejected = sum(s["source"] == "target" for s in rec["step_records"])
        assert dom.count('class="step rejected"') == rejected
        mark = "correct" if rec["correct"] else "wrong"
        assert rec["question"] in dom and f'<p class="grade {mark}">' in dom
    target = json.loads((out / "target.jsonl").read_text().splitlines()[0])
    dom, _ = render(chromium, pages / "target" / f"{target['id']}.html", tmp_path)
    assert html_text(target["text"]) in dom


def html_text(text):
    import html

    return html.escape(text, quote=False)


def test_bench_html_dir_that_cannot_be_written_fails_before_any_model_loads(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    args = ["bench", "--methods", "target", "--out", str(tmp_path / "o"), "--html-dir",
            str(blocker / "pages"), "--draft", "/no"]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and res.stderr.startswith("error: --html-dir")
