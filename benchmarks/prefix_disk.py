"""An agent's first call in a new process, after another process prefilled its prompt: the disk
tier of the prefix store (`models/local/prefix_store/disk.py`) against a cold call.

The prompt is the first call of a BFCL multi-turn task (its tools and the user's first
message), recorded from the agent as `prefix_reuse.py` records it. Each round runs three
processes one after another, each loading `--model` and timing one call (`next_logits`, from the
prompt to the next token's logits; the model's load is not timed):

* `off`: the disk tier off: a cold call;
* `write`: the disk tier on, in a new empty folder: a cold call that also writes the entry;
* `read`: a new process on the same folder: it reads the entry (and computes the model's
  fingerprint, once per process) and feeds the prompt's last token.

The three next-token logits must be equal, bit for bit. Medians over `--rounds`.

    .venv/bin/python benchmarks/prefix_disk.py --task multi_turn_base_0 --model target
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import json, sys, time, torch
from specguard_graph.models.loading import load_lm
lm = load_lm(sys.argv[1])
prompt = open(sys.argv[2]).read()
pc = lm.new_prefix(prompt)
t0 = time.perf_counter()
logits = lm.next_logits(pc)
took = time.perf_counter() - t0
torch.save(logits, sys.argv[3])
print(json.dumps({"s": took, "tokens": len(pc.ids), "fed": pc.prefill_tokens,
                  "reused": pc.reused_tokens}))
"""


def first_prompt(task: str, model: str) -> str:
    from prefix_reuse import record_prompts

    from specguard_graph.models.loading import load_lm

    return record_prompts(load_lm(model), task, 1)[0]


def child(model: str, prompt: Path, out: Path, disk: str, threads: int) -> dict:
    env = dict(os.environ, SPECGUARD_PREFIX_DISK=disk, OMP_NUM_THREADS=str(threads))
    done = subprocess.run([sys.executable, "-c", CHILD, model, str(prompt), str(out)], env=env,
                          check=True, capture_output=True, text=True)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="multi_turn_base_0")
    ap.add_argument("--model", default="target", choices=["draft", "target"])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    import torch

    from specguard_graph.machine import describe

    torch.set_num_threads(args.threads)
    print(f"{describe()}; {args.model}, first call of {args.task}; median of {args.rounds}\n")
    times: dict[str, list[float]] = {"off": [], "write": [], "read": []}
    with tempfile.TemporaryDirectory() as tmp:
        prompt = Path(tmp) / "prompt.txt"
        prompt.write_text(first_prompt(args.task, args.model))
        for r in range(args.rounds):
            folder = Path(tmp) / f"disk{r}"
            runs = {
                "off": child(args.model, prompt, Path(tmp) / "off.pt", "off", args.threads),
                "write": child(args.model, prompt, Path(tmp) / "w.pt", str(folder), args.threads),
                "read": child(args.model, prompt, Path(tmp) / "r.pt", str(folder), args.threads),
            }
            logits = [torch.load(Path(tmp) / f) for f in ("off.pt", "w.pt", "r.pt")]
            same = all(torch.equal(logits[0], x) for x in logits[1:])
            size = sum(f.stat().st_size for f in folder.rglob("*.kv")) / 2**20
            for k, v in runs.items():
                times[k].append(v["s"])
            print(f"round {r + 1}: " + ", ".join(f"{k} {v['s']:.2f} s (fed {v['fed']} of "
                                                  f"{v['tokens']})" for k, v in runs.items())
                  + f"; entry {size:.0f} MiB; logits equal: {same}", flush=True)  # fmt: skip
            if not same:
                raise SystemExit("the logits differ")
    med = {k: statistics.median(v) for k, v in times.items()}
    print("\n| call | seconds (median) | × cold |\n|---|---|---|")
    for k, what in (("off", "cold (disk tier off)"), ("write", "cold, writing the entry"),
                    ("read", "new process, entry on disk")):  # fmt: skip
        print(f"| {what} | {med[k]:.2f} | {med[k] / med['off']:.3f} |")


if __name__ == "__main__":
    main()
