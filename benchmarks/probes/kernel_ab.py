"""The CPU kernel of a git revision against the working tree's, interleaved in one process.

    .venv/bin/python benchmarks/probes/kernel_ab.py --model target --format gguf --rows 1,16,512
    .venv/bin/python benchmarks/probes/kernel_ab.py --model target --format gguf-a8 --rows 1,5,64
    .venv/bin/python benchmarks/probes/kernel_ab.py --model target --rows 1,2,3,4
    .venv/bin/python benchmarks/probes/kernel_ab.py [--base HEAD] [--rows 1,2,3,4,6,8] [--rounds 9]

The revision's kernel sources (`int8_kernel.SOURCES` and `INCLUDES`) are compiled once, under
$SPECGUARD_HOME/kernels/ab-*, as a module of their own beside the working tree's kernel.

Without `--model`: one layer of each of the target's matrices (q+k+v, o, gate+up, down at
Qwen2.5-1.5B's sizes) with random int8 weights, the int8 matmul only. Prints the median time per
layer for each row count, its ratio to the first row count, and the new/old ratio.

With `--model`: whole forwards of an embedded model in `--format` (int8 or a gguf option), a
400-token cache then m tokens, the two kernels' matmuls swapped into the same layers (attention
stays the working tree's). One layer's 46 MB can sit in a large L3, where it times cache, not
the memory stream a decode is; a forward of many rows is a prefill.

Before timing, both must give the same bits at every row count (the outputs, or the model's
logits): the kernel's contract is that a change of speed never changes a sum.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch.utils.cpp_extension import load_inline

from specguard_graph.machine import describe
from specguard_graph.models.install.registry import home
from specguard_graph.models.local import int8_kernel

ROOT = Path(__file__).parents[2]
SHAPES = [(2048, 1536), (1536, 1536), (17920, 1536), (1536, 8960)]  # (out, in) per layer


def build(base: str):
    """The kernel as it is at git revision `base`, compiled under a module name of its own."""
    return compile_texts(revision_texts(base))


def revision_texts(base: str) -> dict[str, str]:
    """The kernel's sources and includes at git revision `base`, by file name."""
    texts = {}
    for f in int8_kernel.SOURCES + int8_kernel.INCLUDES:
        rel = f.relative_to(ROOT).as_posix()
        shown = subprocess.run(["git", "show", f"{base}:{rel}"], cwd=ROOT, capture_output=True,
                               text=True)  # fmt: skip
        if shown.returncode and f in int8_kernel.INCLUDES:  # a file newer than `base`
            texts[f.name] = ""
            continue
        shown.check_returncode()
        texts[f.name] = shown.stdout
    return texts


def through(layers: list, xs: list[torch.Tensor], kernel) -> tuple[list[torch.Tensor], float]:
    """Every layer on its input with `kernel` swapped in: the outputs, and the seconds the pass
    took (the probes that swap kernels into a model's layers check bits and time with it)."""
    for m in layers:
        m._kernel = kernel
    t0 = time.perf_counter()
    out = [m(x) for m, x in zip(layers, xs, strict=True)]
    return out, time.perf_counter() - t0


def compile_texts(texts: dict[str, str], defines: tuple[str, ...] = ()):
    """The kernel from `texts` (file name -> source), built with `-D` `defines`, as a module of
    its own under $SPECGUARD_HOME/kernels/ab-*, beside the working tree's kernel."""
    flags = [*int8_kernel.FLAGS, *(f"-D{d}" for d in defines)]
    digest = hashlib.sha256("\0".join([*texts.values(), *flags, torch.__version__]).encode())
    digest = digest.hexdigest()
    where = home() / "kernels" / f"ab-{digest[:12]}"
    (where / "src").mkdir(parents=True, exist_ok=True)
    for f in int8_kernel.INCLUDES:
        (where / "src" / f.name).write_text(texts[f.name])
    sources = [texts[f.name] for f in int8_kernel.SOURCES]
    return load_inline(f"ab_{digest[:12]}", cpp_sources=sources,
                       functions=int8_kernel.FUNCTIONS, extra_include_paths=[str(where / "src")],
                       extra_cflags=flags, extra_ldflags=["-fopenmp"],
                       build_directory=str(where))  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="HEAD", help="git revision of the old kernel")
    ap.add_argument("--rows", default="1,2,3,4,6,8")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--model", choices=["draft", "target"], help="whole forwards of this model")
    ap.add_argument("--format", choices=["int8", "gguf", "gguf-a8", "gguf-a8o"], default="int8",
                    help="the model's weight format (with --model)")  # fmt: skip
    args = ap.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    if min(rows) < 1:
        ap.error(f"--rows must be positive, got {args.rows}")
    print(describe())
    new = int8_kernel.load()
    if new is None:
        raise SystemExit("the project's CPU kernel is not built here")
    kernels = {"old": build(args.base), "new": new}
    if args.model:
        return whole_model(args.model, args.format, args.base, kernels, rows, args.rounds)
    torch.manual_seed(0)
    weights = [(torch.randint(-127, 128, (n, k), dtype=torch.int8), torch.rand(n) * 0.01)
               for n, k in SHAPES]  # fmt: skip
    packed = {name: [(m.pack(q), s) for q, s in weights] for name, m in kernels.items()}
    xs = {m: [torch.randn(m, k) for _, k in SHAPES] for m in rows}
    for m in rows:
        for (bo, s), (bn, _), x in zip(packed["old"], packed["new"], xs[m], strict=True):
            if not torch.equal(kernels["old"].mm(x, bo, s), kernels["new"].mm(x, bn, s)):
                raise SystemExit(f"{m} rows: the new kernel's bits differ from {args.base}'s")
    print(f"bits: new = {args.base} at every row count {rows}")
    times: dict[tuple[str, int], list[float]] = {(n, m): [] for n in kernels for m in rows}
    for _ in range(args.rounds):
        for m in rows:
            for name, kernel in kernels.items():
                t0 = time.perf_counter()
                for _ in range(3):
                    for (b, s), x in zip(packed[name], xs[m], strict=True):
                        kernel.mm(x, b, s)
                times[name, m].append((time.perf_counter() - t0) / 3)
    med = {key: statistics.median(v) * 1000 for key, v in times.items()}
    table(f"ms per layer (q+k+v, o, gate+up, down), median of {args.rounds} interleaved rounds",
          med, rows)  # fmt: skip


def whole_model(role: str, fmt: str, base: str, kernels: dict, rows: list[int],
                rounds: int) -> None:  # fmt: skip
    """Whole forwards of `role` after a 400-token cache, each kernel swapped into its layers."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from engine_speed import prompt_ids

    from specguard_graph.models.loading import OPTIONS, load_lm
    from specguard_graph.models.local.blocks import BlockLinear
    from specguard_graph.models.local.kv_cache import new_cache
    from specguard_graph.models.local.numerics import Int8WeightOnlyLinear

    lm = load_lm(role, **OPTIONS[fmt])
    kind = BlockLinear if fmt.startswith("gguf") else Int8WeightOnlyLinear
    layers = [m for m in lm.model.modules() if isinstance(m, kind)]
    ids = prompt_ids(lm, 400 + max(rows))
    times: dict[tuple[str, int], list[float]] = {(n, m): [] for n in kernels for m in rows}
    with torch.inference_mode():
        cache = new_cache(lm.model.config)
        lm.model(input_ids=torch.tensor([ids[:400]]), cache=cache, use_cache=True)
        for r in range(rounds + 1):
            for m in rows:
                x = torch.tensor([ids[400 : 400 + m]])
                logits = {}
                for name, kernel in kernels.items():
                    for layer in layers:
                        layer._kernel = kernel
                    t0 = time.perf_counter()
                    logits[name] = lm.model(input_ids=x, cache=cache, use_cache=True).logits
                    if r:  # the first round warms both up
                        times[name, m].append(time.perf_counter() - t0)
                    cache.crop(-m)
                if not r and not torch.equal(logits["old"], logits["new"]):
                    raise SystemExit(f"{m} rows: the new kernel's logits differ from {base}'s")
        print(f"bits: the logits equal {base}'s at every row count {rows}")
    med = {key: statistics.median(v) * 1000 for key, v in times.items()}
    table(f"ms per {role} forward in {fmt} (a 400-token cache, then m tokens), median of {rounds} "
          "interleaved rounds", med, rows)  # fmt: skip


def table(title: str, med: dict[tuple[str, int], float], rows: list[int]) -> None:
    print(f"\n{title}")
    print("| rows | old ms | old × 1 row | new ms | new × 1 row | new / old |")
    print("|---|---|---|---|---|---|")
    for m in rows:
        o, n = med["old", m], med["new", m]
        print(f"| {m} | {o:.2f} | {o / med['old', rows[0]]:.2f} | {n:.2f} | "
              f"{n / med['new', rows[0]]:.2f} | {n / o:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
