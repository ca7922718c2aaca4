"""Evidence: step labels from text (known answers), AUROC (known values), and the command
on bench records written by tiny models."""

import json
import re

import pytest
from typer.testing import CliRunner

from specguard_graph.arithmetic import arithmetic, equations, evaluate, false_equation
from specguard_graph.cli import app
from specguard_graph.evidence.labels import contains_code, fabricated_output
from specguard_graph.evidence.stats import auroc, bootstrap, roc


@pytest.mark.parametrize(
    "text, verdict",
    [
        ("She sold 48 / 2 = 24 clips in May.", True),
        ("She sold 48 / 2 = 25 clips in May.", False),
        (r"That is $3 \times 4 = 12$ apples.", True),
        (r"\frac{10}{4} = 2.5", True),
        (r"\( 12 \div 4 = 3 \)", True),
        ("1,200 + 300 = 1,500 dollars", True),
        ("1,200 + 300 = 1,600 dollars", False),
        ("50% * 80 = 40", True),
        (r"\[ \left( \frac{7}{20} \right) \times 100 = 35\% \]", True),  # hundredths
        (r"\frac{7}{20} \times 100 = 45\%", False),
        ("7 / 20 = 35%", True),
        (r"\[ x + 2 = 12 \]", None),  # a name's term, not arithmetic
        (r"we get \( V - 10 = 50 \).", None),
        (r"- \(0.40 \times 60 = 24\) questions are easy.", True),  # a list item, not a minus
        (r"\(100\% - 40\% = 60\% = 30\)", True),  # "60% = 30" states no operation
        ("-5 + 3 = -2", True),
        ("10 / 3 = 3.33 hours", True),  # rounded to the digits written
        ("10 / 3 = 3.4 hours", False),
        ("2^10 = 1024", True),
        ("So 5 * 6 = 30 and 30 + 2 = 33.", False),  # the second one is wrong
        ("Let x = 5 be the number of apples.", None),  # no computation stated
        ("The answer is \\boxed{72}.", None),
    ],
)
def test_arithmetic_labels(text, verdict):
    assert arithmetic(text) is verdict, equations(text)


def test_the_live_refusal_names_the_first_false_equation_and_spares_a_cut_last_line():
    assert false_equation("So 5 * 6 = 30 and 30 + 2 = 33.") == "30 + 2 = 33"
    assert false_equation(r"$3 \times 4 = 12$") is None
    cut = "First 6 * 12 = 72 clips.\nThen 72 * 2 = 14"  # cut at the token limit inside "144"
    assert false_equation(cut) == "72 * 2 = 14"
    assert false_equation(cut, cut=True) is None
    assert false_equation("6 * 12 = 7", cut=True) is None  # one cut line: nothing to check


def test_the_parser_evaluates_arithmetic_only():
    assert evaluate("(1 + 2) * 3 - 4 / 2") == 7.0
    assert evaluate("__import__('os').getcwd()") is None
    assert evaluate("2 ** 100000") is None and evaluate("1 / 0") is None
    assert evaluate("abs(-3)") is None


def test_fabricated_output_and_code():
    step = "```python\nprint(48 + 24)\n```\n```output\n72\n```"
    assert fabricated_output(step) and contains_code(step)
    assert fabricated_output("Output:\n72") and not fabricated_output("The output is 72.")
    assert not contains_code("48 + 24 = 72")


def test_auroc_known_values():
    assert auroc([3, 2, 1, 0], [True, True, False, False]) == 1.0
    assert auroc([0, 1, 2, 3], [True, True, False, False]) == 0.0
    assert auroc([1, 1, 1, 1], [True, False, True, False]) == 0.5
    assert auroc([0.9, 0.2, 0.6, 0.4], [True, False, False, True]) == 0.75
    assert auroc([1.0, 2.0], [True, True]) is None
    groups = [[(0.9, True), (0.1, False)], [(0.8, True), (0.3, False)], [(0.4, True), (0.6, False)]]
    lo, hi = bootstrap(groups, draws=400)
    a = auroc([s for g in groups for s, _ in g], [y for g in groups for _, y in g])
    assert 0.0 <= lo <= a <= hi <= 1.0
    fpr, tpr = roc([3, 2, 1, 0], [True, True, False, False])
    assert fpr[0] == tpr[0] == 0 and fpr[-1] == tpr[-1] == 1 and tpr[2] == 1 and fpr[2] == 0


def test_bench_records_keep_each_step_and_evidence_reads_them(tmp_path, model_args):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(
        json.dumps({"question": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n"
        for i in range(3)
    ))  # fmt: skip
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"k": 3, "max_steps": 3, "max_step_tokens": 8, "tau": 0.5}))
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["bench", "--data", str(data), "--out", str(out), "--config",
                                   str(cfg), "--max-tokens", "24", "--methods", "specguard",
                                   *model_args])  # fmt: skip
    assert res.exit_code == 0, res.output
    records = [json.loads(x) for x in (out / "specguard.jsonl").open()]
    for rec in records:
        assert len(rec["step_records"]) == rec["steps"]
        for s in rec["step_records"]:
            spent = s["spent"]
            assert set(spent) == {"draft_s", "verify_s", "target_s", "draft_prefill_s",
                                  "target_prefill_s"}  # fmt: skip
            assert (
                abs(spent["draft_s"] + spent["verify_s"] + spent["target_s"] - s["time_s"]) < 1e-6
            )
            assert 0 <= spent["draft_prefill_s"] <= spent["draft_s"]
            assert 0 <= spent["target_prefill_s"] <= spent["target_s"]
            cands = s["candidate_signals"]
            assert len(cands) == 3 and all(c["vote"] is not None for c in cands)
            chosen = cands[s["selected"]]
            assert chosen["grounding"] == s["grounding"] and chosen["logprob"] == s["logprob"]
            assert chosen["vote"] == max(c["vote"] for c in cands)
            assert all(c["grounding"] is not None for c in cands if c["tokens"] > 1)
    res = CliRunner().invoke(app, ["evidence", str(out), "--draws", "200"])
    assert res.exit_code == 0, res.output
    md = (out / "evidence.md").read_text()
    steps = sum(r["steps"] for r in records)
    assert f"{steps} scored draft steps from 3 (method, problem) runs" in md
    for row in ("grounding (ABGV)", "log-prob (LPBV, min)", "vote share", "score (β-mix)"):
        assert f"| {row} |" in md
    assert (out / "evidence_roc.png").exists()
    k3_path = tmp_path / "reports" / "k3.md"  # a folder that does not exist yet
    res = CliRunner().invoke(app, ["evidence", str(out), "--draws", "200",
                                   "--out", str(k3_path)])  # fmt: skip
    assert res.exit_code == 0, res.output
    k3 = k3_path.read_text()
    assert k3.splitlines()[0].endswith(f"--out {k3_path}`")
    assert k3.split("\n", 1)[1] == md.split("\n", 1)[1]
    assert k3_path.with_name("k3_roc.png").exists()
    target = model_args[model_args.index("--target") + 1]
    res = CliRunner().invoke(app, ["evidence", str(out), "--draws", "200", "--annotate",
                                   "--target", target, "--quantize", "none"])  # fmt: skip
    assert res.exit_code == 0, res.output
    notes = [json.loads(x) for x in (out / "target_labels.jsonl").open()]
    assert len(notes) == 3 and sum(len(n["steps"]) for n in notes) == steps
    for n in notes:
        for v in n["steps"].values():
            assert v["target_logprob_min"] <= v["target_logprob_mean"] <= 0
            assert 0 <= v["judge"] <= 1
    md = (out / "evidence.md").read_text()
    assert "| judge ≥ 5 of 9 |" in md.splitlines()[4]  # the header gains the judge label
    assert "| target log-prob min |" in md and "| target log-prob mean |" in md
    assert "Decision rules scored on problems they were not fitted on" in md
    from specguard_graph.evidence.report import units

    scored = [c for _, rows in units(out, None) for _, c, _ in rows]
    assert len(scored) == steps and all("judge" in c and "target_logprob_min" in c for c in scored)
    res = CliRunner().invoke(app, ["evidence", str(out), "--draws", "200", "--value", "2",
                                   "--target", target, "--quantize", "none"])  # fmt: skip
    assert res.exit_code == 0, res.output
    values = [json.loads(x) for x in (out / "value_labels.jsonl").open()]
    assert len(values) == 2 and all(isinstance(v["value_with"], bool)
                                    for n in values for v in n["steps"].values())  # fmt: skip
    assert "| value: target reaches gold from it |" in (out / "evidence.md").read_text()


def test_evidence_without_step_records_is_one_line(tmp_path):
    (tmp_path / "target.jsonl").write_text('{"id": "1", "answer": "2", "correct": true}\n')
    res = CliRunner().invoke(app, ["evidence", str(tmp_path)])
    assert res.exit_code == 2 and "no step records" in res.stderr


def test_the_target_scores_each_draft_step_in_its_own_context(tiny):
    """Known answer: the offline annotation equals one plain forward of the whole text."""
    import torch

    from specguard_graph.evidence.annotate import SPEC, problem_labels

    target = tiny.target
    steps = [
        {"text": "First 2 + 2 = 4.", "ended": "delimiter", "selected": 0,
         "candidate_signals": [{"text": "First 2 + 2 = 4."}]},
        {"text": "So 5.", "ended": "eos", "selected": 1,
         "candidate_signals": [{"text": "x"}, {"text": "Then 4 + 1 = 5."}]},
    ]  # fmt: skip
    notes = problem_labels(target, "What is 2 + 2 + 1?", steps)
    prompt = SPEC.render_prompt("What is 2 + 2 + 1?", target.tokenizer)
    context = target.encode(prompt + "First 2 + 2 = 4." + SPEC.delimiter)
    step = target.encode("Then 4 + 1 = 5.")
    with torch.inference_mode():
        logits = target.model(input_ids=torch.tensor([context + step])).logits[0].float()
    lp = torch.log_softmax(logits, -1)[len(context) - 1 : -1].gather(1, torch.tensor(step)[:, None])
    assert notes["1"]["target_logprob_mean"] == pytest.approx(float(lp.mean()), abs=1e-4)
    assert notes["1"]["target_logprob_min"] == pytest.approx(float(lp.min()), abs=1e-4)
    assert set(notes) == {"0", "1"} and 0 <= notes["0"]["judge"] <= 1


def test_the_value_label_compares_the_targets_continuation_with_and_without_the_step():
    """Known answer: a target that answers 0 once the context holds a wrong turn, else 5."""
    from specguard_graph import CallableStepModel
    from specguard_graph.evidence.value import problem_values

    calls = []

    def target(prompt, n, **kw):
        calls.append(prompt)
        return [" so \\boxed{0}." if "wrong turn" in prompt else " so \\boxed{5}."]

    steps = [
        {"text": "2 + 2 = 4.", "ended": "delimiter", "selected": 0,
         "candidate_signals": [{"text": "2 + 2 = 4.", "ended": "delimiter"}]},
        {"text": "Then 4 + 1 = 5.", "ended": "delimiter", "source": "target", "selected": 1,
         "candidate_signals": [{"text": "x"}, {"text": "A wrong turn.", "ended": "delimiter"}]},
        {"text": "So \\boxed{5}.", "ended": "eos", "selected": 0,
         "candidate_signals": [{"text": "So \\boxed{5}.", "ended": "eos"}]},
    ]  # fmt: skip
    values = problem_values(CallableStepModel(target), "2 + 2 + 1?", "5", steps, budget=64)
    assert values == {
        "0": {"value_with": True, "value_without": True},
        "1": {"value_with": False, "value_without": True},  # the rejected draft step hurt
        "2": {"value_with": True, "value_without": True},
    }
    # "without step i + 1" is "with step i" when step i was accepted: 5 prefixes, 5 calls
    assert len(calls) == 5 and len(set(calls)) == 5


def test_a_combiner_scored_on_held_out_problems_beats_each_signal_when_both_matter():
    """Known answer: a step is good when a + b > 0, a and b independent: each alone ranks
    steps partly (AUROC ~0.75), the logistic combiner, fitted on other problems, nearly
    perfectly; a label unrelated to both stays at chance."""
    import random

    from specguard_graph.evidence.rules import held_out, held_out_scores, markdown

    rng = random.Random(0)
    problems = []
    for p in range(40):
        rows = []
        for _ in range(10):
            a, b = rng.gauss(0, 1), rng.gauss(0, 1)
            rows.append(({"a": a, "b": b}, {"noise": rng.random() < 0.5}, False))
        problems.append((f"p{p}", rows))
    signals = {"a": lambda s, c: s["a"], "b": lambda s, c: s["b"],
               "absent": lambda s, c: None}  # fmt: skip
    labels = {"a + b > 0": lambda s, c, r: s["a"] + s["b"] > 0,
              "noise": lambda s, c, r: c["noise"]}  # fmt: skip
    res = held_out(problems, signals, labels)
    assert "absent" not in res  # a signal missing on some step takes no part
    assert res["logistic (all signals)"]["a + b > 0"] > 0.97
    assert 0.65 < res["a"]["a + b > 0"] < 0.85 and 0.65 < res["b"]["a + b > 0"] < 0.85
    assert abs(res["logistic (all signals)"]["noise"] - 0.5) < 0.1
    # the table gives each held-out AUROC a bootstrap interval over problems
    md = markdown(held_out_scores(problems, signals, labels), draws=200)
    row = next(line for line in md.splitlines() if line.startswith("| logistic (all signals) |"))
    (a, lo, hi), (n, n_lo, n_hi) = (
        [float(v) for v in re.findall(r"\d\.\d\d", cell)] for cell in row.split(" | ")[1:3]
    )
    assert a == round(res["logistic (all signals)"]["a + b > 0"], 2) and lo <= a <= hi
    assert n_lo <= n <= n_hi < 0.6  # no signal found in noise


def test_a_tau_per_step_position_fitted_on_other_problems_beats_one_tau_when_the_bar_moves():
    """Known answer: a step is good when its score clears a bar that rises with its position
    (0.1 for the first step, 0.9 from the fifth on). One τ ranks the steps partly; the score
    with a fitted offset per position, scored on held-out problems, nearly perfectly."""
    import random

    from specguard_graph.evidence.rules import PER_POSITION, SCORE, held_out

    rng = random.Random(1)
    bar = [0.1, 0.3, 0.5, 0.7, 0.9, 0.9, 0.9]
    problems = []
    for p in range(40):
        rows = []
        for i in range(7):
            score = rng.random()
            rows.append(({"score": score}, {"position": i, "good": score > bar[i]}, False))
        problems.append((f"p{p}", rows))
    signals = {SCORE: lambda s, c: s["score"]}
    labels = {"good": lambda s, c, r: c["good"]}
    res = held_out(problems, signals, labels)
    assert res[PER_POSITION]["good"] > 0.97
    assert res[SCORE]["good"] < 0.9


def test_refusing_fabricated_output_ranks_invented_program_results_below_every_step():
    """Known answer: steps that write their own ```output``` block are bad whatever their
    score; the rule that refuses them ranks every one of them last, the score alone does not."""
    import random

    from specguard_graph.evidence.rules import NO_FABRICATED, SCORE, held_out

    rng = random.Random(2)
    made_up = "```python\nprint(2 + 2)\n```\n```output\n5\n```"
    problems = []
    for p in range(30):
        rows = []
        for i in range(6):
            fab = i == 5
            score = rng.random()
            good = not fab and score > 0.3
            c = {"position": i, "text": made_up if fab else "2 + 2 = 4", "good": good}
            rows.append(({"score": score}, c, False))
        problems.append((f"p{p}", rows))
    res = held_out(problems, {SCORE: lambda s, c: s["score"]}, {"good": lambda s, c, r: c["good"]})
    assert res[NO_FABRICATED]["good"] > 0.97
    assert res[SCORE]["good"] < 0.9


def test_step_position_is_a_baseline_that_exposes_a_label_tracking_position():
    """The judge rates partial solutions low: a label that only follows position must show
    up as a perfect AUROC for the position baseline, not as a merit of some signal."""
    from specguard_graph.evidence.report import table

    def step(i: int) -> tuple:
        return {"score": 0.5}, {"position": i, "judge": 0.9 if i >= 3 else 0.1}, True

    problems = [(f"p{k}", [step(i) for i in range(5)]) for k in range(4)]
    md, _ = table(problems, draws=100)
    row = next(line for line in md.splitlines() if line.startswith("| step position (later)"))
    judge = row.split(" | ")[3]  # signal, arithmetic, no fabricated output, judge
    assert judge.startswith("1.00 ") and "(8/12)" in judge


def test_the_share_of_a_rejected_step_the_target_kept_is_a_signal_of_rejected_steps_only():
    """Verified steps say how much of the rejected candidate the target agreed with; accepted
    steps (no `verified`) and empty candidates carry no value for it."""
    from specguard_graph.evidence.report import table

    def step(kept: int | None, arith_ok: bool) -> tuple:
        verified = None if kept is None else {"kept": kept, "candidate": 10}
        text = "2 + 2 = 4" if arith_ok else "2 + 2 = 5"
        return {"verified": verified}, {"text": text}, True

    rows = [step(9, True), step(8, True), step(1, False), step(2, False), step(None, False),
            ({"verified": {"kept": 0, "candidate": 0}}, {"text": "2 + 2 = 5"}, True)]  # fmt: skip
    md, _ = table([("p0", rows), ("p1", rows)], draws=100)
    row = next(x for x in md.splitlines() if x.startswith("| target kept (share, rejected"))
    assert row.split(" | ")[1].startswith("1.00 ") and "(4/4)" in row.split(" | ")[1]


def test_refusing_false_arithmetic_ranks_steps_with_a_wrong_equation_last():
    """Known answer: a step that states a false equation hurts whatever its score; the rule
    that refuses it ranks those steps below all others, the score alone does not."""
    import random

    from specguard_graph.evidence.rules import NO_FALSE_MATH, SCORE, held_out

    rng = random.Random(3)
    problems = []
    for p in range(30):
        rows = []
        for i in range(6):
            wrong, score = i == 2, rng.random()
            text = "So 48 / 2 = 26 clips." if wrong else "So 48 / 2 = 24 clips."
            c = {"position": i, "text": text, "good": not wrong and score > 0.3}
            rows.append(({"score": score}, c, False))
        problems.append((f"p{p}", rows))
    res = held_out(problems, {SCORE: lambda s, c: s["score"]}, {"good": lambda s, c, r: c["good"]})
    assert res[NO_FALSE_MATH]["good"] > 0.97 and res[SCORE]["good"] < 0.9


def test_the_gate_cost_is_the_share_a_threshold_sends_to_catch_the_steps_that_hurt():
    """Known answer: 10 value-labelled steps, 2 of them hurt, scored 0.1 and 0.3. A threshold
    catching one sends the steps at or below 0.1 (1 of 10), catching both those at or below 0.3
    (3 of 10); an oracle sends the 2 alone; a signal that is constant sends everything."""
    from specguard_graph.evidence.gate import hurts, markdown, share_to_catch

    assert hurts({"value_with": False, "value_without": True}) is True
    assert hurts({"value_with": True, "value_without": True}) is False
    assert hurts({"value_with": True, "value_without": False}) is False  # it helps
    assert hurts({}) is None
    scores = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    rows = [({"score": v}, {"value_with": v not in (0.1, 0.3), "value_without": True}, True)
            for v in scores]  # fmt: skip
    values = [(s["score"], bool(hurts(c))) for s, c, _ in rows]
    assert share_to_catch(values, 0.5) == 0.1 and share_to_catch(values, 0.8) == 0.3
    assert share_to_catch(values, 1.0) == 0.3 and share_to_catch([(0.5, False)], 1.0) is None
    unlabelled = ({"score": 0.0}, {}, True)  # no value label: not counted
    md = markdown([("p", [*rows, unlabelled])],
                  {"score": lambda s, c: s["score"], "flat": lambda s, c: 1.0,
                   "absent": lambda s, c: None})  # fmt: skip
    assert "2 of 10 value-labelled steps hurt" in md and "sends 20% of the steps" in md
    assert "| score | 10% | 30% | 30% |" in md and "| flat | 100% | 100% | 100% |" in md
    assert "absent" not in md
    assert markdown([("p", rows[3:5])], {"score": lambda s, c: s["score"]}) is None  # none hurts
