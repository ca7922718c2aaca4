"""Program steps: code a model writes is run for real in a limited process; its real output
follows the step, and a program that fails (or an output the model wrote) is a reason to
recompute."""

import os

import pytest

from specguard_graph import CallableStepModel, SpecGuardConfig, StepOutput, build_graph
from specguard_graph.program.executor import PythonExecutor
from specguard_graph.steps import ProgramSteps

Q = {"question": "Natalia sold 48 clips in April and half as many in May. How many in total?"}
CODE = "```python\nprint(48 + 48 // 2)\n```"


@pytest.fixture(scope="module")
def run_code():
    return PythonExecutor(timeout_s=3, cpu_s=3, memory_mb=256)


def test_a_program_runs_and_prints(run_code):
    obs = run_code("print(48 + 48 // 2)")
    assert obs.ok and obs.stdout == "72\n" and obs.exit_status == 0 and obs.time_s < 3


@pytest.mark.parametrize(
    "code, error",
    [
        ("while True: pass", "timed out"),
        ("import time; time.sleep(60)", "timed out"),
        ("x = bytearray(2 * 1024**3)", "MemoryError"),
        ("1 / 0", "ZeroDivisionError"),
        ("open('big', 'w').write('x' * 10**8)", "File too large"),
    ],
)
def test_what_goes_wrong_is_contained_and_reported(run_code, code, error):
    obs = run_code(code)
    assert not obs.ok and error in obs.error


def test_a_busy_loop_runs_out_of_cpu_time_before_the_wall_clock():
    obs = PythonExecutor(timeout_s=30, cpu_s=1)("while True: pass")
    assert obs.timed_out and not obs.ok and "CPU time" in obs.error and obs.time_s < 10


def test_huge_output_is_capped(run_code):
    obs = run_code("while True: print('x' * 1000)")
    assert obs.truncated and len(obs.stdout) <= run_code.output_chars


def test_a_fork_bomb_is_contained(run_code):
    code = ("import os\nfor _ in range(200):\n    try:\n        os.fork()\n"
            "    except OSError:\n        break\n")  # fmt: skip
    before = len(os.listdir("/proc"))
    run_code(code)
    assert len(os.listdir("/proc")) < before + 20  # the whole process group was killed


def test_no_environment_and_no_writes_outside_its_directory(run_code, tmp_path):
    os.environ["SPECGUARD_TEST_SECRET"] = "hunter2"
    obs = run_code("import os; print(sorted(os.environ))")
    assert "SPECGUARD_TEST_SECRET" not in obs.stdout and "hunter2" not in obs.stdout
    target = tmp_path / "outside.txt"
    obs = run_code(f"open({str(target)!r}, 'w').write('x')")
    assert not target.exists() and not obs.ok
    obs = run_code("import os; print(open(f'/proc/{os.getppid()}/environ').read())")
    assert "hunter2" not in obs.stdout


def scripted(*steps):
    """A draft that writes `steps` in order (a step ending in a program counts as one)."""

    def fn(prompt, n, **kw):
        done = sum(prompt.count(s) for s in steps[:-1])
        return [StepOutput(text=steps[min(done, len(steps) - 1)], token_logprobs=[-0.1])] * n

    return CallableStepModel(fn, has_logprobs=True)


def run(tiny, draft, **cfg):
    base = dict(k=1, beta=1.0, tau=0.0, max_steps=5, max_step_tokens=64)
    config = SpecGuardConfig(**{**base, **cfg})
    return build_graph(draft, tiny.target, steps=ProgramSteps(), config=config).compile().invoke(Q)


def test_the_real_output_follows_a_program_step(tiny):
    out = run(tiny, scripted("Let me compute it.", CODE, "So she sold \\boxed{72} clips."))
    sources = [s["source"] for s in out["steps"]]
    assert sources == ["draft", "draft", "tool", "draft"] and out["answer"] == "72"
    tool = out["steps"][2]
    assert tool["text"] == "```output\n72\n```" and tool["observation"]["stdout"] == "72\n"
    assert "```output\n72\n```" in out["text"] and out["counts"]["tool_steps"] == 1


def test_a_failing_program_is_recomputed_whatever_its_score(tiny):
    bad = "```python\nprint(48 / 0)\n```"
    out = run(tiny, scripted(bad, "done \\boxed{1}"), max_steps=1)  # τ = 0 accepts any score
    (step,) = out["steps"]
    assert step["source"] == "target" and step["reason"].startswith("program failed")
    assert "ZeroDivisionError" in step["reason"]
    out = run(tiny, scripted(bad, "x"), max_steps=2, reject_failed_programs=False)
    assert out["steps"][0]["source"] == "draft" and out["steps"][1]["source"] == "tool"
    assert "ZeroDivisionError" in out["steps"][1]["text"]  # the real error is the observation


def test_an_output_block_the_model_writes_is_never_accepted(tiny):
    out = run(tiny, scripted("```output\n72\n```"), max_steps=1)
    (step,) = out["steps"]
    assert step["source"] == "target" and step["reason"] == "writes its own program output"


@pytest.mark.parametrize(
    "option, text, reason, method",
    [
        ("reject_fabricated_output", "```python\nprint(6 * 12)\n```\n```output\n72\n```",
         "writes a program output nothing executed", "specguard-refuse-fabricated"),
        ("reject_false_arithmetic", r"She sold $6 \times 12 = 74$ clips.",
         "states a false equation: 6 * 12 = 74", "specguard-refuse-false-arithmetic"),
    ],
)  # fmt: skip
def test_plain_steps_can_refuse_a_step_that_fails_a_text_check(tiny, option, text, reason, method):
    """The evidence rules for plain reasoning: an invented program output or a false equation
    goes to the target, whatever its score."""
    from specguard_graph.bench.methods import ABLATIONS

    def build(draft_text, **cfg):
        config = SpecGuardConfig(k=1, beta=1.0, tau=0.0, max_steps=1, max_step_tokens=64, **cfg)
        return build_graph(scripted(draft_text), tiny.target, config=config).compile().invoke(Q)

    (step,) = build(text)["steps"]  # off by default: accepted at τ = 0
    assert step["source"] == "draft"
    (step,) = build(text, **{option: True})["steps"]
    assert step["source"] == "target" and step["reason"] == reason
    assert step["draft_text"] == text  # the refused step stays in the record
    (step,) = build("She sold 6 * 12 = 72 clips.", **{option: True})["steps"]
    assert step["source"] == "draft"  # a step that passes the check is still accepted
    assert ABLATIONS[method] == {option: True}


def test_plain_specs_keep_the_plain_graph(tiny):
    from specguard_graph import NODES

    g = build_graph(tiny.draft, tiny.target, embedder=tiny.embedder)
    assert set(g.nodes) == set(NODES)
    g = build_graph(tiny.draft, tiny.target, embedder=tiny.embedder, steps=ProgramSteps())
    assert set(g.nodes) == {*NODES, "check_program", "run_program"}


def test_bench_methods_with_program_steps(tiny):
    from specguard_graph.bench.methods import make

    draft = scripted("Let me compute it.", CODE, "So she sold \\boxed{72} clips.")
    base = SpecGuardConfig(beta=1.0, max_step_tokens=64)
    solve = make("draft-program", draft, tiny.target, None, base, 256)
    out = solve(Q["question"])
    assert out["answer"] == "72" and out["tool_steps"] == 1 and out["target_steps"] == 0
    tool = next(s for s in out["step_records"] if s["source"] == "tool")
    assert tool["observation"]["stdout"] == "72\n"


def test_the_bench_summary_counts_the_steps_execution_caught(tiny):
    from specguard_graph.bench.program_stats import program_markdown

    bad = "```python\nprint(48 / 0)\n```"
    recs = {}
    for i, draft in enumerate((scripted(bad, "done \\boxed{1}"), scripted(CODE, "\\boxed{72}"))):
        out = run(tiny, draft, max_steps=1)
        recs[str(i)] = {"step_records": out["steps"], "correct": i == 1}
    md = program_markdown({"specguard-program": recs, "target-program": recs})
    assert "execution sent 1 of 2 draft steps (50.0 %)" in md and "program failed: 1" in md
    assert "the 1 problems with such a step ended right 0 times" in md
    assert "`target-program`: execution" not in md  # one model alone: nothing is sent anywhere


MADE_UP = "\n```output\n99\n```\nSo she sold \\boxed{99} clips."


def by_observation(before: str, after: str, seen: list[str] | None = None):
    """A model that writes `before` until a real output is in its context, then `after`;
    `seen` collects every context it was given."""

    def fn(prompt, n, **kw):
        if seen is not None:
            seen.append(prompt)
        text = after if "```output\n" in prompt else before
        return [StepOutput(text=text, token_logprobs=[-0.1] * 4)] * n

    return CallableStepModel(fn, has_logprobs=True)


def test_a_step_ends_at_its_programs_closing_fence(tiny):
    """A step that closes its program and goes on with an output (and answer) of its own is
    cut at the fence: what it made up is kept aside, the real output follows, no model sees 99."""
    seen: list[str] = []
    draft = by_observation(CODE + MADE_UP, "So she sold \\boxed{72} clips.", seen)
    out = run(tiny, draft, max_step_tokens=200)
    assert [s["source"] for s in out["steps"]] == ["draft", "tool", "draft"]
    first = out["steps"][0]
    assert first["text"] == CODE and first["dropped"] == MADE_UP and not first["cut"]
    assert out["steps"][1]["observation"]["stdout"] == "72\n" and out["answer"] == "72"
    assert "99" not in out["text"] and not any("99" in p for p in seen)


def test_a_target_step_ends_at_its_programs_closing_fence(tiny):
    seen: list[str] = []
    draft = by_observation("```python\nprint(48 / 0)\n```", "So she sold \\boxed{72} clips.", seen)
    target = by_observation(CODE + MADE_UP, "unused", seen)
    config = SpecGuardConfig(k=1, beta=1.0, tau=0.0, max_steps=5, max_step_tokens=200)
    graph = build_graph(draft, target, steps=ProgramSteps(), config=config).compile()
    out = graph.invoke(Q)
    assert [s["source"] for s in out["steps"]] == ["target", "tool", "draft"]
    first = out["steps"][0]
    assert first["text"] == CODE and first["dropped"] == MADE_UP
    assert out["answer"] == "72" and not any("99" in p for p in seen)


def test_a_cut_target_step_leaves_the_kv_cache_as_if_only_the_kept_text_was_fed(tiny):
    """The target adopts its sampled rows, then the step is cut: the cache must be cropped to
    the kept text, so the next logits equal those of a fresh context holding just that text."""
    import torch

    model = tiny.target
    prompt = "Question: what is 6 * 12?\nAnswer:\n"
    pc = model.new_prefix(prompt)
    sample = model.sample(pc, n=1, delimiter="\n\n", max_new_tokens=12, temperature=0.0,
                          fork=False)  # fmt: skip
    model.adopt(pc, sample, 0)
    pc.ids = pc.ids[: len(pc.ids) - len(sample.candidates[0].token_ids)]
    model.append_text(pc, CODE + "\n\n")
    fresh = model.new_prefix(prompt + CODE + "\n\n")
    assert pc.ids == fresh.ids
    assert torch.allclose(model.next_logits(pc), model.next_logits(fresh), atol=1e-5)


def test_an_answer_written_inside_the_program_waits_for_the_program_to_run(tiny):
    """`\\boxed{}` inside the code is not an answer: the step ends at its fence, the program
    runs (here it fails on the LaTeX), and the run goes on to the real answer."""
    code = "```python\nprint(48 + 24)\n\\boxed{72}\n```"
    out = run(tiny, by_observation(code, "So \\boxed{72}."), max_step_tokens=200, max_steps=3,
              reject_failed_programs=False)  # fmt: skip
    assert [s["source"] for s in out["steps"]][:2] == ["draft", "tool"]
    assert "SyntaxError" in out["steps"][1]["text"]
    assert not ProgramSteps().is_final(code, eos=True)
    assert ProgramSteps().is_final("So \\boxed{72}.", eos=False)


def test_a_programs_output_does_not_spend_the_token_budget(tiny):
    code = "```python\nprint('x' * 300)\n```"  # 300 characters out; the callable's tokens
    out = run(tiny, by_observation(code, "So \\boxed{72}."), max_step_tokens=64,
              max_total_tokens=100, max_steps=5)  # fmt: skip
    assert [s["source"] for s in out["steps"]] == ["draft", "tool", "draft"]
    assert out["status"] == "final" and out["steps"][1]["tokens"] > 100


def test_a_cut_step_keeps_the_tokens_that_hold_its_text():
    """A server's own tokens (texts given back with their log-probs) decide where the kept
    part ends, so the log-prob signal reads the program and not the made-up output."""
    from specguard_graph.nodes.program import kept_tokens

    pieces = ["print", "(x", ")\n", "```", "\n```", "output", "\n", "9"]
    assert kept_tokens("print(x)\n```", pieces, None) == 4
    assert kept_tokens("print(x)\n``", pieces, None) == 4  # the token that holds the fence


def test_the_bench_summary_compares_the_outputs_models_wrote_with_the_real_ones(tiny):
    from specguard_graph.bench.program_stats import program_markdown

    recs = {}
    for i, made_up in enumerate((MADE_UP, MADE_UP.replace("99", "72"))):
        out = run(tiny, by_observation(CODE + made_up, "So \\boxed{72}."), max_step_tokens=200)
        recs[str(i)] = {"step_records": out["steps"], "correct": True}
    recs["2"] = {"step_records": [], "correct": False}
    md = program_markdown({"target-program": recs})
    assert "`target-program`: 2 of 3 problems ran code (2 programs); 2 steps" in md
    assert "it matched the real output 1 times" in md
