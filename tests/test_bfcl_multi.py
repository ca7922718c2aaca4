"""BFCL multi-turn as an agent runs it: BFCL's backends execute the calls a LangGraph agent
makes, turn after turn, and BFCL's multi-turn checker grades the trajectory."""

from __future__ import annotations

import ast
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from specguard_graph.bench.bfcl import multi_turn as mt
from specguard_graph.bench.data import load
from specguard_graph.bench.grade import grade_problem
from specguard_graph.errors import ConfigError, InputError

TASK = "multi_turn_base_0"


def as_call(text: str) -> dict[str, Any]:
    """A gold call string as a tool call (positional arguments named from the function doc)."""
    node = ast.parse(text, mode="eval").body
    doc = next(f for f in mt.tasks()[TASK][0]["function"] if f["name"] == node.func.id)
    args = dict(
        zip(doc["parameters"]["properties"], map(ast.literal_eval, node.args), strict=False)
    )
    return {
        "name": node.func.id,
        "args": {**args, **{k.arg: ast.literal_eval(k.value) for k in node.keywords}},
    }


class Scripted(BaseChatModel):
    """Answers each turn with the gold calls, one message per call, then a closing text."""

    script: list[list[str]]
    turn: int = 0
    made: int = 0

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Scripted:
        return self

    def _generate(self, messages: list[BaseMessage], *a: Any, **k: Any) -> ChatResult:
        calls = self.script[self.turn]
        if self.made < len(calls):
            c = as_call(calls[self.made])
            self.made += 1
            msg = AIMessage("", tool_calls=[{**c, "id": f"c{self.turn}{self.made}"}])
        else:
            msg = AIMessage("done")
            self.turn, self.made = self.turn + 1, 0
        return ChatResult(generations=[ChatGeneration(message=msg)])


@pytest.fixture(scope="module")
def gold() -> list[list[str]]:
    return mt.tasks()[TASK][1]


def test_the_splits_hold_every_task_once():
    dev, test = load("bfcl-multi-dev"), load("bfcl-multi")
    assert [p["id"] for p in dev] == [f"multi_turn_base_{i}" for i in range(10)]
    assert len(test) == 190 and test[0]["id"] == "multi_turn_base_10"
    assert all(p["grader"] == "bfcl-multi" for p in dev + test)
    with pytest.raises(InputError, match="bfcl-multi"):
        mt.problems("bfcl-multi-all")


def test_the_gold_trajectory_passes_bfcls_checker_on_every_turn(gold):
    result = {"turns": [{"decoded": [[c] for c in turn]} for turn in gold]}
    verdict = mt.grade(json.dumps(gold), TASK, result)
    assert verdict == {"valid": True, "error_type": None, "turns_ok": len(gold),
                       "turns": len(gold)}  # fmt: skip
    wrong = {"turns": [*result["turns"][:2], {"decoded": [["sort('previous_report.pdf')"]]}]}
    verdict = mt.grade(json.dumps(gold), TASK, wrong)
    assert not verdict["valid"] and verdict["turns_ok"] == 2


def test_an_agent_making_the_gold_calls_runs_on_bfcls_backends_and_passes(gold):
    result = mt.run_task(Scripted(script=gold), TASK)
    assert len(result["turns"]) == len(gold) and result["force_quit"] is None
    first = result["turns"][0]["messages"]
    assert first[0]["role"] == "human" and first[-1] == {"role": "assistant", "text": "done",
        "calls": [], "invalid": 0, **dict.fromkeys(("source", "reason", "checked", "score",
        "draft_text", "time_s", "fed", "timing", "spent", "prefill_s", "decode_s"))}  # fmt: skip
    tools = [m["text"] for m in first if m["role"] == "tool"]
    assert len(tools) == len(gold[0]) and "Error" not in " ".join(tools)  # the backend ran them
    problem = {"id": TASK, "question": TASK, "answer": json.dumps(gold), "grader": "bfcl-multi"}
    assert grade_problem(problem, result) and result["bfcl"]["turns_ok"] == len(gold)


def test_the_calls_of_one_message_run_one_after_another_in_order(monkeypatch):
    """BFCL's backends keep state (log in, then send): a message's calls run in its order, not
    in the agent's parallel threads. The first call is made slow, so threads would finish it
    last."""
    import time

    utils = mt._checker()[1]
    original, done = utils.execute_multi_turn_func_call, []

    def slow_first(calls, *args):  # type: ignore[no-untyped-def]
        if calls[0].startswith("pwd"):
            time.sleep(0.3)
        out = original(calls, *args)
        done.append(calls[0].partition("(")[0])
        return out

    monkeypatch.setattr(utils, "execute_multi_turn_func_call", slow_first)
    names = ["pwd", "ls", "mkdir", "cd", "pwd"]
    args = [{}, {"a": True}, {"dir_name": "new"}, {"folder": "new"}, {}]
    calls = [{"name": n, "args": a, "id": f"c{i}"}
             for i, (n, a) in enumerate(zip(names, args, strict=True))]  # fmt: skip
    message = AIMessage("", tool_calls=calls)

    class OneMessage(Scripted):
        def _generate(self, messages: list[BaseMessage], *a: Any, **k: Any) -> ChatResult:
            self.made += 1
            msg = message if self.made == 1 else AIMessage("done")
            return ChatResult(generations=[ChatGeneration(message=msg)])

    result = mt.run_task(OneMessage(script=[]), TASK)
    assert done[:5] == names
    tools = [m["text"] for m in result["turns"][0]["messages"] if m["role"] == "tool"]
    assert "new" in tools[4] and "new" not in tools[0]  # pwd after the cd, not before it


def test_a_model_that_keeps_calling_is_stopped_at_bfcls_step_limit(gold):
    loop = Scripted(script=[["ls(a=True)"] * 100])
    result = mt.run_task(loop, TASK)
    assert result["force_quit"] == 0 and len(result["turns"]) == 1
    problem = {"id": TASK, "question": TASK, "answer": json.dumps(gold), "grader": "bfcl-multi"}
    assert not grade_problem(problem, result)
    assert result["bfcl"]["error_type"] == "multi_turn:force_quit"


def test_method_names_are_checked_before_models_run(tiny):
    with pytest.raises(ConfigError):
        mt.solvers(["sd-verify"], tiny.draft, tiny.target)
    with pytest.raises(ConfigError, match="row-invariant"):  # float32: lookup would not be exact
        mt.solvers(["target-lookup"], tiny.draft, tiny.target)
    import copy

    from specguard_graph.models.local import numerics
    from specguard_graph.models.local.hf import LocalCausalLM

    int8 = LocalCausalLM(numerics.apply(copy.deepcopy(tiny.target.model), "int8", "cpu"),
                         tiny.target.tokenizer)  # fmt: skip
    looked = mt.agent_model("target-lookup", tiny.draft, int8)
    assert looked.lookup and looked.lm is int8 and looked.system_prompt is None  # BFCL's prompt
    assert not mt.agent_model("target", tiny.draft, int8).lookup
    assert set(mt.solvers(["target", "draft", "specguard-lossless", "specguard@tau=0.4"],
                          tiny.draft, tiny.target)) == {"target", "draft", "specguard-lossless",
                                                        "specguard@tau=0.4"}  # fmt: skip


def _record(task: str, ok: bool, latency: float, messages: list[dict], turns_ok: int) -> dict:
    return {"id": task, "correct": ok, "latency_s": latency,
            "bfcl": {"turns_ok": turns_ok, "turns": 2},
            "turns": [{"messages": [{"role": "human", "text": "q"}, *messages]}]}  # fmt: skip


def _msg(text: str, source: str, seconds: float, checked: str = "ok", draft: str | None = None):
    return {"role": "assistant", "text": text, "calls": [], "source": source,
            "checked": checked, "draft_text": draft, "time_s": seconds,
            "fed": {"prefill": 10, "decode": 2}}  # fmt: skip


def test_the_multi_turn_report_compares_methods_on_the_same_tasks(tmp_path):
    from specguard_graph.bench.bfcl import multi_report

    target = [_record("t1", True, 10.0, [_msg("a", "plain", 6.0), _msg("b", "plain", 4.0)], 2),
              _record("t2", False, 20.0, [_msg("c", "plain", 20.0)], 1)]  # fmt: skip
    lossless = [
        _record("t1", True, 8.0, [_msg("a", "target", 7.0), _msg("b", "target", 1.0)], 2),
        _record("t2", False, 10.0, [_msg("c", "target", 10.0)], 1),
        _record("t3", True, 1.0, [], 2),
    ]  # t3: the target has not run it yet
    fast = [_record("t1", False, 2.0, [_msg("x", "draft", 2.0),
                                       _msg("b", "target", 1.0, "repeats", draft="b")], 0),
            _record("t2", False, 4.0, [_msg("y", "target", 4.0, "empty", draft="")],
                    0)]  # fmt: skip
    for name, rows in (("target", target), ("lossless", lossless), ("fast", fast)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    runs = multi_report.load(tmp_path, ["target", "lossless", "fast"])
    rows = {r["method"]: r for r in multi_report.summary(runs)}
    assert rows["lossless"]["tasks"] == 2 and rows["lossless"]["accuracy"] == 0.5
    assert rows["lossless"]["latency_ratio"] == pytest.approx(0.65)  # median of 0.8 and 0.5
    assert rows["lossless"]["same_trajectory"] == 2 and rows["fast"]["same_trajectory"] == 0
    assert rows["lossless"]["later_calls"] == pytest.approx(0.25)  # 1 s against 4 s
    assert rows["fast"]["turn_success"] == 0 and rows["target"]["turn_success"] == 0.75
    assert rows["fast"]["checks"] == {"repeats": {"fired": 1, "target_differed": 0},
                                      "empty": {"fired": 1, "target_differed": 1}}  # fmt: skip
    assert rows["target"]["fed"] == {"prefill": 30, "decode": 6}
    assert "| `lossless` | 2 | 50.0 % " in multi_report.markdown(list(rows.values()))


def test_the_report_splits_each_models_seconds_into_prefill_and_the_rest():
    from specguard_graph.bench.bfcl import multi_report

    plain = _record("t1", True, 3.0, [{**_msg("a", "plain", 3.0), "prefill_s": 2.0,
                                       "decode_s": 1.0}], 1)  # fmt: skip
    spent = {"draft_s": 1.5, "target_s": 4.0, "verify_s": 0.5, "draft_prefill_s": 1.0,
             "target_prefill_s": 3.0}  # fmt: skip
    ours = _record("t1", True, 6.0, [{**_msg("a", "target", 6.0), "spent": spent}], 1)
    zero = dict.fromkeys(multi_report.SECONDS, 0.0)
    assert multi_report.seconds("target", {"t1": plain}) == {
        **zero,
        "target prefill": 2.0,
        "target decode + checks": 1.0,
    }
    assert multi_report.seconds("draft", {"t1": plain}) == {
        **zero,
        "draft prefill": 2.0,
        "draft decode": 1.0,
    }
    assert multi_report.seconds("lossless", {"t1": ours}) == {
        "draft prefill": 1.0, "draft decode": 0.5, "target prefill": 3.0,
        "target decode + checks": 1.0, "rest": 0.5}  # fmt: skip
    old = _record("t1", True, 1.0, [_msg("a", "plain", 1.0)], 1)  # before the split was kept
    assert multi_report.seconds("target", {"t1": old}) is None
    rows = multi_report.summary({"target": {"t1": plain}, "lossless": {"t1": ours}})
    assert multi_report.prefill_floor(rows) == pytest.approx(2 / 3)  # 2 s of the target's 3
    assert "its time is at least 0.67× the target's" in multi_report.markdown(rows)
    assert multi_report.prefill_floor(multi_report.summary({"target": {"t1": old}})) is None


def test_the_bench_refuses_a_method_an_agent_cannot_run_before_loading_models(tmp_path):
    from typer.testing import CliRunner

    from specguard_graph.cli import app

    res = CliRunner().invoke(app, ["bench", "--dataset", "bfcl-multi", "--methods",
                                   "target,sd-verify", "--out", str(tmp_path / "o")])  # fmt: skip
    assert res.exit_code != 0 and "not sd-verify" in res.output
    assert not (tmp_path / "o").exists()


def test_report_only_writes_the_multi_turn_report(tmp_path):
    from typer.testing import CliRunner

    from specguard_graph.cli import app

    row = _record(TASK, False, 3.0, [_msg("a", "plain", 3.0)], 0)
    for name in ("target", "draft"):
        (tmp_path / f"{name}.jsonl").write_text(json.dumps(row) + "\n")
    args = ["bench", "--dataset", "bfcl-multi", "--methods", "target,draft", "--out",
            str(tmp_path), "--report-only"]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "| `draft` | 1 | 0.0 % (0–79) |" in (tmp_path / "multi-turn.md").read_text()
    assert "trajectory = target's" in res.output


def test_the_report_script_reads_every_recorded_method_the_target_first(tmp_path):
    import subprocess
    import sys

    script = Path(__file__).parents[1] / "benchmarks" / "bfcl_multi_report.py"
    row = _record(TASK, False, 3.0, [_msg("a", "plain", 3.0)], 0)
    for name in ("target-lookup", "target"):  # a run of two methods, not the default four
        (tmp_path / f"{name}.jsonl").write_text(json.dumps(row) + "\n")
    run = lambda *a: subprocess.run([sys.executable, str(script), str(tmp_path), *a],  # noqa: E731
                                    capture_output=True, text=True)  # fmt: skip
    res = run()
    assert res.returncode == 0, res.stderr
    table = (tmp_path / "multi-turn.md").read_text()
    assert table.index("| `target` | 1 |") < table.index("| `target-lookup` | 1 |")
    res = run("--methods", "target,draft")
    assert res.returncode != 0 and "no records of draft" in res.stderr
