"""transformers' decoder-layer forward against the lean one (`lean_layers.py`), interleaved:
its Python ops, and its ops issued from C++ (`kernels/layer.cpp`).

    .venv/bin/python benchmarks/probes/lean_ab.py --model draft --format gguf --rows 1,2,4
    .venv/bin/python benchmarks/probes/lean_ab.py --model target --format int8 --rounds 15

Whole forwards of an embedded model after a 400-token cache, then m tokens: each round runs
transformers' forward and the two lean ones back to back on the same cache (a decode is 1 row, a
verification 2-4). Before timing, all must give the same logits at every row count: the
lean forwards issue the same ops, so only the time may differ. Prints the median per forward
and the lean/transformers ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from specguard_graph.machine import describe
from specguard_graph.models.loading import OPTIONS, load_lm
from specguard_graph.models.local import lean_layers
from specguard_graph.models.local.kv_cache import new_cache

ROOT = Path(__file__).parents[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["draft", "target"], default="draft")
    ap.add_argument("--format", choices=["int8", "gguf"], default="gguf")
    ap.add_argument("--rows", default="1,2,4")
    ap.add_argument("--rounds", type=int, default=11)
    args = ap.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    if min(rows) < 1 or args.rounds < 1:
        ap.error("--rows and --rounds must be positive")
    print(describe())
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from engine_speed import prompt_ids

    lm = load_lm(args.model, **OPTIONS[args.format])
    if not lm.lean:
        raise SystemExit(f"{args.model} in {args.format}: its layers cannot be made lean")
    model = lm.model
    ids = prompt_ids(lm, 400 + max(rows))
    glues = [la.__dict__.get("_glue") for la in model.model.layers]
    if not all(glues):
        raise SystemExit(f"{args.model} in {args.format}: not every layer runs the C++ glue")

    def lean(glue: bool) -> None:
        lean_layers.install(model)
        for la, g in zip(model.model.layers, glues, strict=True):
            la.__dict__["_glue"] = g if glue else None

    ways = {"transformers": lean_layers.uninstall, "python": lambda m: lean(False),
            "glue": lambda m: lean(True)}  # fmt: skip
    times: dict[tuple[str, int], list[float]] = {(w, m): [] for w in ways for m in rows}
    with torch.inference_mode():
        cache = new_cache(model.config)
        model(input_ids=torch.tensor([ids[:400]]), cache=cache, use_cache=True)
        for r in range(args.rounds + 1):  # round 0 warms both up and checks the bits
            for m in rows:
                x = torch.tensor([ids[400 : 400 + m]])
                logits = {}
                for way, switch in ways.items():
                    switch(model)
                    t0 = time.perf_counter()
                    logits[way] = model(input_ids=x, cache=cache, use_cache=True).logits
                    if r:
                        times[way, m].append(time.perf_counter() - t0)
                    cache.crop(-m)
                if not r and not all(torch.equal(logits["transformers"], v)
                                     for v in logits.values()):  # fmt: skip
                    raise SystemExit(f"{m} rows: a lean forward's logits differ")
    lean(True)
    print(f"bits: the lean forwards' logits equal transformers' at every row count {rows}")
    med = {key: statistics.median(v) * 1000 for key, v in times.items()}
    print(f"\nms per {args.model} forward in {args.format} (a 400-token cache, then m tokens), "
          f"median of {args.rounds} interleaved rounds")  # fmt: skip
    print("| rows | transformers ms | lean, Python ops ms | lean, C++ glue ms | Python / "
          "transformers | glue / transformers |\n|---|---|---|---|---|---|")  # fmt: skip
    for m in rows:
        t, py, glue = med["transformers", m], med["python", m], med["glue", m]
        print(f"| {m} | {t:.2f} | {py:.2f} | {glue:.2f} | {py / t:.3f} | {glue / t:.3f} |")


if __name__ == "__main__":
    main()
