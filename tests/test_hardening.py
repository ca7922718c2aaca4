"""Hostile and careless input: each ends in one `error:` line and exit code 2 (or a typed
error through the API), never a traceback, and nothing a user already has is touched."""

import json
import os

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from specguard_graph import (
    CallableStepModel,
    ConfigError,
    InputError,
    SpecGuardConfig,
    StepOutput,
    build_graph,
)
from specguard_graph.cli import app
from specguard_graph.steps import ReasoningSteps

runner = CliRunner()
Q = {"question": "What is 2 + 3?"}


def one_line_error(res, *needles):
    assert res.exit_code == 2, (res.exit_code, res.output)
    assert "Traceback" not in res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), res.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def solve(*extra):
    return runner.invoke(app, ["solve", "--draft", "/nonexistent/draft", *extra])


# --- 2. --out that cannot be written: refused before any model loads --------------------------
def test_out_that_is_a_directory_fails_before_the_models_load(tmp_path):
    one_line_error(solve("--out", str(tmp_path), "q"), "cannot write", str(tmp_path))


def test_out_in_a_symlink_loop_fails_before_the_models_load(tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    one_line_error(solve("--out", str(loop), "q"), "cannot write")


def test_bench_out_that_is_a_file_fails_before_the_models_load(tmp_path):
    f = tmp_path / "results"
    f.write_text("mine\n")
    res = runner.invoke(app, ["bench", "--methods", "target", "--out", str(f), "--draft", "/no"])
    one_line_error(res, "cannot write")
    assert f.read_text() == "mine\n"


# --- 3. text that is not UTF-8 --------------------------------------------------------------
def test_brackets_in_an_error_are_printed_not_read_as_markup(tmp_path):
    """`pip install 'specguard-graph[bench]'` once lost its `[bench]` to rich's markup."""
    cfg = tmp_path / "run[bench]" / "config.json"
    line = one_line_error(solve("--config", str(cfg), "q"))
    assert "run[bench]" in line, line


def test_a_question_that_is_not_utf8_is_refused():
    one_line_error(solve("caf\udce9?"), "not valid UTF-8")  # argv bytes 0xe9, surrogate-escaped


def test_a_lone_surrogate_through_the_api_is_an_input_error(tiny):
    graph = build_graph(tiny.draft, tiny.target, config=SpecGuardConfig(k=1)).compile()
    with pytest.raises(InputError, match="UTF-8"):
        graph.invoke({"question": "half a pair \ud800"})


def test_a_file_line_that_is_not_utf8_names_the_line(tmp_path):
    f = tmp_path / "q.jsonl"
    f.write_bytes(b'{"question": "ok"}\n{"question": "caf\xe9"}\n')
    one_line_error(solve("--file", str(f)), f"{f}:2", "UTF-8")


def test_a_config_in_utf16_is_refused(tmp_path):
    f = tmp_path / "cfg.json"
    f.write_bytes(b"\xff\xfe{\x00}\x00")
    one_line_error(solve("--config", str(f), "q"), "not UTF-8")


# --- 4. config files that are JSON but not a config -----------------------------------------
@pytest.mark.parametrize(
    "text, needle",
    [("[1, 2]", "JSON object"), ("null", "JSON object"), ('{"max_steps": true}', "max_steps"),
     ('{"tau": "0.5"}', "tau"), ('{"k": 2.5}', "k")],
)  # fmt: skip
def test_config_files_that_are_not_configs(tmp_path, text, needle):
    f = tmp_path / "cfg.json"
    f.write_text(text)
    one_line_error(solve("--config", str(f), "q"), needle)
    with pytest.raises(ConfigError, match=needle):
        SpecGuardConfig.from_file(f)  # what studio.py reads from SPECGUARD_CONFIG


# --- 5. device and threads ------------------------------------------------------------------
def test_an_unknown_device_is_one_line(model_dirs_cli):
    res = runner.invoke(app, [*model_dirs_cli, "--device", "bogus", "q"])
    one_line_error(res, "unknown device 'bogus'")


@pytest.mark.parametrize("value", ["abc", "0", "-3"])
def test_bad_specguard_threads_is_one_line(model_dirs_cli, monkeypatch, value):
    monkeypatch.setenv("SPECGUARD_THREADS", value)
    one_line_error(runner.invoke(app, [*model_dirs_cli, "q"]), "SPECGUARD_THREADS")


# --- 6. a callable backend keeps the step rules ---------------------------------------------
def test_a_callable_step_is_cut_at_max_step_tokens_and_ended_is_checked(tiny):
    def huge(prompt, n, **kw):
        return [StepOutput(text="x" * 200_000, token_logprobs=[-0.1])] * n

    draft = CallableStepModel(huge, has_logprobs=True)
    cfg = SpecGuardConfig(k=1, beta=1.0, tau=0.0, max_steps=1, max_step_tokens=8)
    out = build_graph(draft, tiny.target, config=cfg).compile().invoke(Q)
    (step,) = out["steps"]
    assert step["text"] == "x" * 8 and step["ended"] == "length" and step["cut"]

    def odd(prompt, n, **kw):
        return [StepOutput(text="a step", token_logprobs=[-0.1], ended="finished")] * n

    bad = CallableStepModel(odd, has_logprobs=True)
    with pytest.raises(InputError, match="ended must be one of"):
        build_graph(bad, tiny.target, config=cfg).compile().invoke(Q)


# --- 7. wrong arguments to build_graph ------------------------------------------------------
@pytest.mark.parametrize("role", ["draft", "target"])
@pytest.mark.parametrize("value", ["draft", None, 3])
def test_build_graph_names_the_argument_that_is_not_a_model(tiny, role, value):
    models = {"draft": tiny.draft, "target": tiny.target, role: value}
    with pytest.raises(ConfigError, match=f"^{role} must be a step model"):
        build_graph(models["draft"], models["target"], config=SpecGuardConfig(k=1))


def test_build_graph_refuses_a_dict_config_and_an_empty_delimiter(tiny):
    with pytest.raises(ConfigError, match="config must be a SpecGuardConfig"):
        build_graph(tiny.draft, tiny.target, config={"k": 1})
    with pytest.raises(ConfigError, match="delimiter"):
        build_graph(tiny.draft, tiny.target, steps=ReasoningSteps(delimiter=""),
                    config=SpecGuardConfig(k=1))  # fmt: skip


def test_a_missing_signal_is_not_called_an_empty_step(tiny):
    def no_logprobs(prompt, n, **kw):
        return ["A real step with words."] * n

    draft = CallableStepModel(no_logprobs, has_logprobs=True)  # claims log-probs, gives none
    cfg = SpecGuardConfig(k=1, beta=1.0, max_steps=1, max_step_tokens=40)
    (step,) = build_graph(draft, tiny.target, config=cfg).compile().invoke(Q)["steps"]
    assert step["source"] == "target"
    assert "empty step" not in step["reason"] and "no log-probs" in step["reason"]


# --- the property: random bytes, JSON values and flag strings --------------------------------
FLAGS = ["--k", "--tau", "--beta", "--max-steps", "--max-step-tokens", "--seed", "--steps",
         "--signal-model", "--quantize", "--dtype", "--device", "--config", "--file"]  # fmt: skip
BENCH_FLAGS = ["--methods", "--taus", "--limit", "--offset", "--max-tokens", "--dataset"]
CALIBRATE_FLAGS = ["--budget", "--limit", "--seed", "--dataset", "--quantize"]
text = st.text(st.characters(blacklist_categories=["Cc"]), max_size=12)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)


def _not_a_config(path) -> bool:
    try:
        SpecGuardConfig.from_file(path)
    except ConfigError:
        return True
    return False


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    command=st.sampled_from(["solve", "bench", "calibrate"]),
    config=st.one_of(st.binary(max_size=40), json_values.map(lambda v: json.dumps(v).encode())),
    flags=st.lists(st.tuples(st.sampled_from(FLAGS), text), max_size=3),
)
def test_no_input_ends_in_a_traceback_or_touches_out(tmp_path_factory, command, config, flags):
    tmp = tmp_path_factory.mktemp("prop")
    cfg, data, out = tmp / "cfg.json", tmp / "data.jsonl", tmp / "out"
    cfg.write_bytes(config)
    data.write_text('{"question": "1 + 1?", "answer": "2"}\n')
    assume(_not_a_config(cfg))
    if command == "solve":
        out.write_bytes(b'{"key": "mine"}\n')
        argv = ["solve", "--config", str(cfg), "--out", str(out), "--draft", "/nonexistent"]
        flags = [f for f in flags if f[0] not in ("--config", "--file")]
        argv += [x for f in flags for x in f] + ["q"]
    else:
        out.mkdir()
        (out / "target.jsonl").write_bytes(b'{"id": "mine"}\n')
        argv = [command, "--config", str(cfg), "--out", str(out / "cfg.out" if command ==
                "calibrate" else out), "--data", str(data), "--draft", "/nonexistent"]  # fmt: skip
        if command == "bench":
            argv += ["--methods", "target"]
        own = BENCH_FLAGS if command == "bench" else CALIBRATE_FLAGS
        argv += [x for (flag, value) in flags for x in (own[FLAGS.index(flag) % len(own)], value)]
    before = {p: p.read_bytes() for p in tmp.rglob("*") if p.is_file()}
    res = runner.invoke(app, argv)
    assert res.exit_code == 2, (argv, res.output)
    assert "Traceback" not in res.output and res.stderr.startswith("error:"), res.output
    assert {p: p.read_bytes() for p in before} == before


@pytest.fixture(scope="module")
def model_dirs_cli(model_dirs):
    return ["solve", "--draft", str(model_dirs / "draft"), "--target", str(model_dirs / "target"),
            "--k", "1", "--max-steps", "1"]  # fmt: skip


os.environ.setdefault("HF_HUB_OFFLINE", "1")
