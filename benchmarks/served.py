"""Served models on this CPU: the embedded pair behind llama.cpp's server (`xllamacpp`, the
GGUFs) or, with `--engine vllm`, behind vLLM's CPU build (`make vllm`, the model directories).

Parts (each prints its numbers; all servers are started here, on 127.0.0.1, and stopped):

* `demo`: the demo question answered with local in-process models and with the same weights
  served, side by side.
* `overhead`: what the HTTP round trip adds to a step: wall time of `ServedStepModel.sample`
  minus the compute the server reports for the request (llama.cpp: the response's `timings`;
  vLLM: its `/metrics` `request_inference_time_seconds`), per step, median.
* `concurrency`: N graph runs against one served draft and target, one after another and then
  at once (threads, one thread id each), same seeds: throughput ratio and equal outputs.
* `calibrate`: `specguard calibrate` on served models (β = 1: engines return no attention),
  on fresh gsm-symbolic dev problems; prints the fitted τ and the same rule on the default
  log-prob range, as a bench method name (`specguard-logprob-only@tau=…`; with `--k 1
  --temperature 0`, `specguard-greedy@beta=1+tau=…`).
* `bench`: `specguard bench` on served models, the anchors beside SpecGuard: llama.cpp
  target-only (`target`), llama.cpp's own draft-model speculative decoding (`sd`, a target
  server with the draft GGUF inside), and SpecGuard with served draft and target (log-prob
  signal only: engines return no attention). Resumable, like any bench run.

    .venv/bin/python benchmarks/served.py demo [--engine vllm]
    .venv/bin/python benchmarks/served.py overhead --steps 30
    .venv/bin/python benchmarks/served.py concurrency --runs 4
    .venv/bin/python benchmarks/served.py calibrate --limit 10 --budget 0.3 --k 1 --temperature 0
    .venv/bin/python benchmarks/served.py bench --limit 50 --out benchmarks/results/gsm8k-served \
        --methods target,sd,specguard-greedy@beta=1+tau=…  # τ as calibrate printed it

Each server gets `--threads` threads (2 = this machine's cores); only one is busy at a time
except in `concurrency`, where the N runs share them.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import signal
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from specguard_graph.machine import describe
from specguard_graph.models.install.installer import gguf_path
from specguard_graph.models.install.registry import DRAFT, TARGET
from specguard_graph.models.served.client import ServedStepModel
from specguard_graph.models.served.llamacpp import LlamaServer

DEMO = Path(__file__).parent.parent / "examples" / "demo_question.txt"


def servers(stack: ExitStack, a: argparse.Namespace, *, spec: bool = False) -> dict[str, str]:
    if a.engine == "vllm":
        from specguard_graph.models.install.registry import model_dir
        from specguard_graph.models.served.vllm import VllmServer

        if spec:
            raise SystemExit("--engine vllm: no `sd` server here (vLLM serves one model)")
        urls = {role: stack.enter_context(VllmServer(model_dir(role)))
                for role in ("draft", "target")}  # fmt: skip
        for role, url in urls.items():
            print(f"# {role}: vLLM {url}", flush=True)
        return urls
    urls = {
        "draft": stack.enter_context(LlamaServer(gguf_path(DRAFT), threads=a.threads,
                                                 parallel=a.parallel)),
        "target": stack.enter_context(LlamaServer(gguf_path(TARGET), threads=a.threads,
                                                  parallel=a.parallel)),
    }  # fmt: skip
    if spec:
        urls["sd"] = stack.enter_context(LlamaServer(gguf_path(TARGET), draft=gguf_path(DRAFT),
                                                     threads=a.threads, parallel=1))  # fmt: skip
    for role, url in urls.items():
        print(f"# {role}: {url}", flush=True)
    return urls


def solve_json(args: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "specguard_graph.cli", "solve", "--json", *args]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise SystemExit(res.stderr.strip().splitlines()[-1])
    return json.loads(res.stdout.strip().splitlines()[-1])


def demo(a: argparse.Namespace) -> None:
    question = DEMO.read_text().strip()
    common = ["--k", "4", "--beta", "1", "--seed", "0", "--max-steps", "12", question]
    local = solve_json(common)
    with ExitStack() as stack:
        urls = servers(stack, a)
        served = solve_json(["--draft", urls["draft"], "--target", urls["target"], *common])
    print("| models | answer | status | steps | by target | seconds |\n|---|---|---|---|---|---|")
    engine = "vLLM, bfloat16" if a.engine == "vllm" else "llama.cpp, Q4_K_M"
    for name, t in (("local (transformers, int8)", local), (f"served ({engine})", served)):
        print(f"| {name} | {t['answer']} | {t['status']} | {t['counts']['steps']} | "
              f"{t['counts']['target_steps']} | {t['timing']['total_s']:.1f} |")  # fmt: skip


def overhead(a: argparse.Namespace) -> None:
    """Per request: client wall time and the server's own prompt + decode time."""
    from specguard_graph.bench.data import load
    from specguard_graph.steps import ReasoningSteps

    spec = ReasoningSteps()
    with ExitStack() as stack:
        url = servers(stack, a)["target"]
        model = ServedStepModel(url)
        seen: list[dict[str, Any]] = []
        create = model.client.completions.create

        def spy(**kw: Any) -> Any:
            before = engine_seconds(url) if a.engine == "vllm" else 0.0
            r = create(**kw)
            if a.engine == "vllm":  # the engine's own compute time for the request
                seen.append({"prompt_ms": 1000 * (engine_seconds(url) - before),
                             "predicted_n": r.usage.completion_tokens})  # fmt: skip
            else:
                seen.append(r.model_extra.get("timings") or {})
            return r

        model.client.completions.create = spy  # type: ignore[method-assign]
        rows = []
        for p in load("gsm8k", limit=a.problems):
            pc = model.new_prefix(spec.render_prompt(p["question"], model.tokenizer))
            for _ in range(a.steps // a.problems):
                t0 = time.perf_counter()
                s = model.sample(pc, n=1, delimiter=spec.delimiter, max_new_tokens=96,
                                 temperature=0.0)  # fmt: skip
                wall = (time.perf_counter() - t0) * 1000
                t = seen[-1]
                server = float(t.get("prompt_ms", 0)) + float(t.get("predicted_ms", 0))
                rows.append((wall, server, t.get("predicted_n", 0)))
                model.adopt(pc, s, 0)
                c = s.candidates[0]
                if spec.is_final(c.text, eos=c.ended == "eos"):
                    break
    extra = [w - s for w, s, _ in rows]
    share = statistics.median(e / w for e, (w, _, _) in zip(extra, rows, strict=True))
    print(f"steps {len(rows)}, tokens per step median {statistics.median(r[2] for r in rows)}")
    print(
        f"wall per step median {statistics.median(r[0] for r in rows):.1f} ms, "
        f"server compute median {statistics.median(r[1] for r in rows):.1f} ms"
    )
    print(
        f"HTTP round trip + client (wall - server) per step: median "
        f"{statistics.median(extra):.1f} ms, p90 {sorted(extra)[int(0.9 * len(extra))]:.1f} ms, "
        f"{100 * share:.1f}% of a step"
    )


def engine_seconds(url: str) -> float:
    """vLLM's running total of request compute (prefill + decode), from its /metrics."""
    import httpx

    text = httpx.get(url.removesuffix("/v1") + "/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith("vllm:request_inference_time_seconds_sum"):
            return float(line.rsplit(" ", 1)[1])
    raise SystemExit("vLLM's /metrics has no request_inference_time_seconds")


def concurrency(a: argparse.Namespace) -> None:
    from specguard_graph import SpecGuardConfig, build_graph
    from specguard_graph.bench.data import load
    from specguard_graph.models.loading import load_embedder

    problems = load("gsm8k", limit=a.runs)
    with ExitStack() as stack:
        urls = servers(stack, a)
        draft, target = ServedStepModel(urls["draft"]), ServedStepModel(urls["target"])
        step = min(SpecGuardConfig().max_step_tokens, a.max_tokens)
        cfg = SpecGuardConfig(k=a.k, beta=1.0, seed=0, max_total_tokens=a.max_tokens,
                              max_step_tokens=step, temperature=a.temperature)  # fmt: skip
        graph = build_graph(draft, target, embedder=load_embedder(), config=cfg).compile()

        def one(i: int) -> str:
            out = graph.invoke({"question": problems[i]["question"]},
                               {"configurable": {"thread_id": f"run-{i}"}})  # fmt: skip
            return str(out["text"])

        one(0)  # warm both servers' prompt caches equally for the two phases
        t0 = time.perf_counter()
        serial = [one(i) for i in range(a.runs)]
        t_serial = time.perf_counter() - t0
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(a.runs) as pool:
            together = list(pool.map(one, range(a.runs)))
        t_together = time.perf_counter() - t0
    same = sum(x == y for x, y in zip(serial, together, strict=True))
    print(
        f"{a.runs} runs: serial {t_serial:.1f} s, concurrent {t_together:.1f} s, "
        f"throughput ratio {t_serial / t_together:.2f}x; outputs equal {same}/{a.runs}"
    )


def calibrate(a: argparse.Namespace) -> None:
    from specguard_graph import SpecGuardConfig
    from specguard_graph.scoring import normalise

    a.out.mkdir(parents=True, exist_ok=True)
    base, fitted = a.out / f"calibrate-base-k{a.k}.json", a.out / f"calibrated-k{a.k}.json"
    SpecGuardConfig(k=a.k, beta=1.0, temperature=a.temperature,
                    max_total_tokens=a.max_tokens).to_file(base)  # fmt: skip
    with ExitStack() as stack:
        urls = servers(stack, a)
        cmd = [sys.executable, "-m", "specguard_graph.cli", "calibrate", "--limit", str(a.limit),
               "--budget", str(a.budget), "--config", str(base), "--out", str(fitted),
               "--draft", urls["draft"], "--target", urls["target"]]  # fmt: skip
        print("#", " ".join(cmd[2:]), flush=True)
        subprocess.run(cmd, check=True)
    cfg = SpecGuardConfig.from_file(fitted)
    lo, hi = cfg.logprob_range  # β = 1: accept iff the step's min log-prob ≥ this
    threshold = lo + cfg.tau * (hi - lo)
    tau = normalise(threshold, *SpecGuardConfig().logprob_range)
    greedy = a.k == 1 and a.temperature == 0
    method = (
        f"specguard-greedy@beta=1+tau={tau:.3f}"
        if greedy
        else f"specguard-logprob-only@tau={tau:.3f}"
    )
    print(f"accept when min log-prob >= {threshold:.3f}: method {method}")


def bench(a: argparse.Namespace) -> None:
    with ExitStack() as stack:
        urls = servers(stack, a, spec=True)
        cmd = [sys.executable, "-m", "specguard_graph.cli", "bench", "--dataset", "gsm8k",
               "--limit", str(a.limit), "--methods", a.methods, "--out", str(a.out),
               "--max-tokens", str(a.max_tokens), "--draft", urls["draft"], "--target",
               urls["target"], "--sd-target", urls["sd"]]  # fmt: skip
        print("#", " ".join(cmd[2:]), flush=True)
        subprocess.run(cmd, check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", choices=["demo", "overhead", "concurrency", "calibrate", "bench"])
    ap.add_argument("--engine", choices=["llama.cpp", "vllm"], default="llama.cpp")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=4, help="server slots")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--problems", type=int, default=5)
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--limit", type=int, default=50)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--budget", type=float, default=0.3, help="calibrate: target share")
    ap.add_argument("--methods", default="target,sd,specguard-logprob-only,"
                    "specguard-greedy@beta=1")  # fmt: skip
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/gsm8k-served"))
    a = ap.parse_args()
    print(describe(), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers on the way out
    parts = {"demo": demo, "overhead": overhead, "concurrency": concurrency,
             "calibrate": calibrate, "bench": bench}  # fmt: skip
    parts[a.part](a)


if __name__ == "__main__":
    main()
