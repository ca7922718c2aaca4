"""An agent's BFCL multi-turn calls replayed on llama.cpp and on the project's exact methods,
side by side in one run: the time per call and per task (issue 73).

Engines with other numerics write other conversations, so the conversation is the project's
target's: it runs each task as its agent (`create_agent`, BFCL's tools and prompt, calls in
order), and at every one of its calls the same input is replayed, interleaved:
- `llama.cpp`: llama.cpp's server (`xllamacpp`, a child process) on the same Q4_K_M GGUF, one
  slot, `cache_prompt` on (the slot keeps the previous prompt's KV: what a CPU agent builder
  runs), fed the target's own prompt tokens and asked for exactly as many tokens as the target
  wrote, its end-of-turn token included (`ignore_eos`);
- `target-lookup` and `specguard-lossless`: the project's exact methods, each on its own prefix
  store over the same weights, given the same messages and tools; their message must equal
  the target's (content and calls).
The target's own call is timed as the agent makes it, its prefix store warm from its earlier
calls, as in any run. No store is emptied between tasks, nor llama.cpp's slot: a long-lived
agent process. The disk tier is off (the stores would share its entries).

One JSON line per task in `--out`; a rerun skips the tasks already there, so a long run resumes.
`--report` prints the tables from the file alone.

    .venv/bin/python benchmarks/bfcl_replay.py --tasks 20
    .venv/bin/python benchmarks/bfcl_replay.py --tasks 10 --quantize gguf-a8 \
        --out benchmarks/results/bfcl-multi/replay-a8.jsonl      # int8 activations
    .venv/bin/python benchmarks/bfcl_replay.py --report
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
import torch

OUT = Path(__file__).parent / "results" / "bfcl-multi" / "replay.jsonl"
METHODS = ("target", "llama.cpp", "target-lookup", "specguard-lossless")


def same_message(a: Any, b: Any) -> bool:
    calls = [[(c["name"], c["args"]) for c in m.tool_calls] for m in (a, b)]
    return a.content == b.content and calls[0] == calls[1]


def llama_caller(url: str):
    """`call(ids, n)`: seconds for llama.cpp to write n tokens after `ids`, and the prompt
    tokens it computed (the rest came from its slot's cache)."""
    client = httpx.Client(base_url=url.removesuffix("/v1"), timeout=3600)

    def call(ids: list[int], n: int) -> tuple[float, int]:
        body = {"prompt": ids, "n_predict": n, "temperature": 0, "ignore_eos": True,
                "cache_prompt": True}  # fmt: skip
        t0 = time.perf_counter()
        r = client.post("/completion", json=body)
        elapsed = time.perf_counter() - t0
        r.raise_for_status()
        out = r.json()
        if out["timings"]["predicted_n"] != n:
            raise SystemExit(f"llama.cpp wrote {out['timings']['predicted_n']} tokens, not {n}")
        return elapsed, int(out["timings"]["prompt_n"])

    return call


def replaying_model(target: Any, others: dict[str, Any], llama: Any, calls: list[dict]) -> Any:
    """The target alone as the agent's model; each of its calls is replayed on `others` and
    llama.cpp, and a row per call goes to `calls`."""
    from specguard_graph.agents.chat_model import SPEC
    from specguard_graph.agents.plain import PlainChatModel

    class Replaying(PlainChatModel):
        def _generate(self, messages, stop=None, run_manager=None, *, tools=(),
                      tool_choice=None, **kw):  # type: ignore[no-untyped-def]  # fmt: skip
            t0 = time.perf_counter()
            result = super()._generate(messages, stop, run_manager, tools=tools,
                                       tool_choice=tool_choice, **kw)  # fmt: skip
            msg = result.generations[0].message
            row = {"target": time.perf_counter() - t0, "prompt": msg.usage_metadata["input_tokens"],
                   "output": msg.usage_metadata["output_tokens"],
                   "target_fed": msg.response_metadata["fed"]["prefill"]}  # fmt: skip
            for name, model in others.items():
                t0 = time.perf_counter()
                other = model._generate(messages, tools=tools, tool_choice=tool_choice)
                row[name] = time.perf_counter() - t0
                row[f"{name} same"] = same_message(other.generations[0].message, msg)
            prompt = SPEC.render_prompt(self.question(messages, tools, tool_choice),
                                        self.lm.tokenizer)  # fmt: skip
            # the same tokens written: the target's, and its end-of-turn token unless it was cut
            row["written"] = row["output"] + (msg.response_metadata["finish_reason"] != "length")
            row["llama.cpp"], row["llama_fed"] = llama(self.lm.encode(prompt), row["written"])
            calls.append(row)
            print(f"    call {len(calls)}: {row['prompt']} tokens in, {row['output']} out; "
                  + ", ".join(f"{m} {row[m]:.1f} s" for m in METHODS), flush=True)  # fmt: skip
            return result

    return Replaying(lm=target, system_prompt=None)


def run(args: argparse.Namespace) -> None:
    os.environ["SPECGUARD_PREFIX_DISK"] = "off"
    from specguard_graph.agents.chat_model import SpecGuardChatModel, chat_config
    from specguard_graph.agents.plain import PlainChatModel
    from specguard_graph.bench.bfcl import multi_turn as mt
    from specguard_graph.machine import describe
    from specguard_graph.models.install.installer import gguf_path
    from specguard_graph.models.install.registry import DEFAULTS
    from specguard_graph.models.loading import load_lm
    from specguard_graph.models.local.hf import LocalCausalLM
    from specguard_graph.models.served.llamacpp import LlamaServer

    done = {json.loads(line)["task"] for line in args.out.open()} if args.out.exists() else set()
    todo = [f"multi_turn_base_{i}" for i in range(args.tasks)]
    todo = [t for t in todo if t not in done]
    print(f"{describe()}; {len(done)} tasks done, {len(todo)} to run", flush=True)
    draft, target = (load_lm(role, quantize=args.quantize) for role in ("draft", "target"))
    torch.set_num_threads(args.threads)

    def own(name: str) -> LocalCausalLM:  # the same weights, its own prefix store
        return LocalCausalLM(target.model, target.tokenizer, name=f"target ({name})")

    others = {
        "target-lookup": PlainChatModel(lm=own("lookup"), system_prompt=None, lookup=True),
        "specguard-lossless": SpecGuardChatModel(draft=draft, target=own("lossless"),
                                                 config=chat_config(lossless=True),
                                                 system_prompt=None),
    }  # fmt: skip
    server = LlamaServer(gguf_path(DEFAULTS["target"]), threads=args.threads, parallel=1,
                         ctx=args.ctx)  # fmt: skip
    with server as url:
        llama = llama_caller(url)
        for task in todo:
            print(f"  {task}", flush=True)
            calls: list[dict] = []
            t0 = time.perf_counter()
            mt.run_task(replaying_model(target, others, llama, calls), task)
            record = {"task": task, "calls": calls, "wall_s": time.perf_counter() - t0,
                      "machine": describe(), "threads": args.threads,
                      "quantize": args.quantize}  # fmt: skip
            with args.out.open("a") as f:
                f.write(json.dumps(record) + "\n")
    report(args.out)


def report(path: Path) -> None:
    rows = [json.loads(line) for line in path.open()]
    if not rows:
        raise SystemExit(f"{path}: no task recorded yet")
    print(f"\n{len(rows)} tasks; {rows[0]['machine']}; {rows[0]['threads']} threads; "
          f"--quantize {rows[0].get('quantize', 'auto')}")  # fmt: skip
    print("| task | calls | first prompt | " + " | ".join(f"{m} s" for m in METHODS)
          + " | exact |")  # fmt: skip
    print("|---|---|---|" + "---|" * len(METHODS) + "---|")
    per_task = {m: [] for m in METHODS}
    for r in rows:
        totals = {m: sum(c[m] for c in r["calls"]) for m in METHODS}
        for m in METHODS:
            per_task[m].append(totals[m] / totals["llama.cpp"])
        exact = all(c[k] for c in r["calls"] for k in c if k.endswith(" same"))
        print(f"| {r['task']} | {len(r['calls'])} | {r['calls'][0]['prompt']} | "
              + " | ".join(f"{totals[m]:.1f}" for m in METHODS) + f" | {exact} |")  # fmt: skip
    calls = [c for r in rows for c in r["calls"]]
    groups = {"first call": [r["calls"][0] for r in rows],
              "later calls": [c for r in rows for c in r["calls"][1:]]}  # fmt: skip
    print("\n| × llama.cpp (median) | " + " | ".join(METHODS) + " |")
    print("|---|" + "---|" * len(METHODS))
    print("| per task | " + " | ".join(f"{statistics.median(per_task[m]):.3f}" for m in METHODS)
          + " |")  # fmt: skip
    for what, got in groups.items():
        if got:
            vals = [statistics.median(c[m] / c["llama.cpp"] for c in got) for m in METHODS]
            print(f"| {what} | " + " | ".join(f"{v:.3f}" for v in vals) + " |")
    exact = all(c[k] for c in calls for k in c if k.endswith(" same"))
    print(f"\n{len(calls)} calls; every replayed message equals the target's: {exact}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=20, help="multi_turn_base_0 … N-1")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=16384, help="llama.cpp's context")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--quantize", default="auto", choices=["auto", "gguf", "gguf-a8"],
                    help="the project's weight format (auto: gguf here)")  # fmt: skip
    ap.add_argument("--report", action="store_true", help="only print the tables from --out")
    args = ap.parse_args()
    if args.report:
        return report(args.out)
    run(args)


if __name__ == "__main__":
    main()
