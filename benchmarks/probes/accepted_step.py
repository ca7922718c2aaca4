"""What an accepted draft step costs against a bare draft decode, on one problem, interleaved.

Runs `draft` and SpecGuard at tau = 0.2 (every step accepted on this problem) with and without
attention capture (beta = 1 captures none), twice each, and prints ms per token and the draft's
forwards. Issue 37's goal: an accepted step at <= 1.10x the draft's per-token time.

    .venv/bin/python benchmarks/probes/accepted_step.py \
        draft,specguard-greedy@tau=0.2,specguard-greedy@tau=0.2+beta=1 160
"""

import collections
import json
import sys
import threading
import time

from specguard_graph.bench.methods import make
from specguard_graph.config import SpecGuardConfig
from specguard_graph.machine import describe
from specguard_graph.models.loading import OPTIONS, load_embedder, load_lm

print(describe())
d = load_lm("draft", **OPTIONS["int8"])
t = load_lm("target", **OPTIONS["int8"])
e = load_embedder()
threads = collections.Counter()
fwd = collections.defaultdict(float)
calls = collections.Counter()
orig = d.model.forward


def f(*a, **k):
    threads[threading.current_thread().name] += 1
    s = time.perf_counter()
    out = orig(*a, **k)
    fwd[cur[0]] += time.perf_counter() - s
    calls[cur[0]] += 1
    return out


d.model.forward = f
cur = [""]
q = json.loads(open("benchmarks/results/gsm8k-100/target.jsonl").readline())["question"]
base = SpecGuardConfig.model_validate_json(
    open("benchmarks/results/gsm8k-100/calibrated.json").read()
)
names = sys.argv[1].split(",")
solves = {n: make(n, d, t, e, base, int(sys.argv[2])) for n in names}
for rep in range(2):
    for n in names:
        cur[0] = n
        fwd[n] = 0
        calls[n] = 0
        r = solves[n](q)
        tok = r.get("tokens") or r.get("draft_tokens")
        print(
            rep,
            n,
            f"{r['latency_s']:.2f}s {tok} tok {1000 * r['latency_s'] / tok:.1f} ms/tok;",
            f"draft forwards {calls[n]} at {1000 * fwd[n] / max(calls[n], 1):.1f} ms",
            flush=True,
        )
print(threads)
