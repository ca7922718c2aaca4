"""Which int8 rounding of the activations would keep top-1 agreement with float32? Emulated.

`gguf-a8` rounds each row's activations to int8 per group of 32 (dx = max|x| / 127) and keeps
99.33 % (draft) and 99.60 % (target) top-1 against the GGUF's float32, where issue 73 asks
99.9 % (docs/numerics.md). Before any kernel is written for another rounding, this probe
emulates each candidate in float: the float32 model (the GGUF's weights dequantized) with every
linear's input replaced by its rounded values (`x -> dx * round(x / dx)`), the products in
float32 (whose order alone flips nothing: `gguf`, int16, keeps 100 %). Per rounding: top-1
flips against float32, the NLL ratio and the mean KL(float32 || rounding), over
`benchmarks/fidelity.py`'s GSM8K texts, teacher-forced in one forward.

Roundings (`--roundings`): `g32` gguf-a8's own (its emulation should flip about as often as
the kernel does), `g16`/`g8` smaller groups, `g32-top1` a group's largest |x| kept exact and
the rest rounded against the second largest (`-top2`: the two largest), `g16-static1` per 16
with one channel per group kept exact, the same for every row (the channel of largest mean |x|
on GSM8K's last ten problems, never scored), `g32-r16` the row's 16 largest |x| exact wherever
they fall (`-p64`: the row's K/64 largest) and the rest per group, `i16` int16 per 32 (the
`gguf` default).

    .venv/bin/python benchmarks/probes/a8_rounding.py --model target --problems 25 \
        --roundings g32 g16 g32-top1
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # fidelity.py
from a8_parts import agreement, gsm8k_texts, scores
from fidelity import Text

from specguard_graph.bench.data import gsm8k_100
from specguard_graph.machine import describe
from specguard_graph.models.loading import OPTIONS, load_lm


def rounded(x: torch.Tensor, rounding: str, fixed: torch.Tensor | None = None) -> torch.Tensor:
    """x's values as the rounding keeps them, row by row, group by group (last dim); `fixed`:
    per group, the channel `static1` keeps exact."""
    name, _, extra = rounding.partition("-")
    group, levels = (32, 32767.0) if name == "i16" else (int(name[1:]), 127.0)
    shape = x.shape
    g = x.reshape(-1, shape[-1] // group, group)
    mag = g.abs()
    if extra == "static1":  # one channel per group, the same for every row, kept exact
        assert fixed is not None
        keep = torch.zeros(g.shape[1:], dtype=torch.bool).scatter_(-1, fixed[:, None], True)
        scale = mag.masked_fill(keep, 0).amax(-1, keepdim=True) / levels
        q = torch.round(g / scale.clamp_min(1e-30)).clamp(-127, 127) * scale
        return torch.where(keep, g, torch.where(scale > 0, q, 0.0)).reshape(shape)
    if extra[:1] in ("r", "p"):  # the row's k largest |x| exact (rK: k = K; pF: k = row / F)
        k = int(extra[1:]) if extra[0] == "r" else shape[-1] // int(extra[1:])
        rows = x.reshape(-1, shape[-1])
        keep = torch.zeros_like(rows, dtype=torch.bool)
        keep.scatter_(-1, rows.abs().topk(k, dim=-1).indices, True)
        keep = keep.reshape(g.shape)
        scale = mag.masked_fill(keep, 0).amax(-1, keepdim=True) / levels
        q = torch.where(scale > 0, torch.round(g / scale.clamp_min(1e-30)), 0.0) * scale
        return torch.where(keep, g, q).reshape(shape)
    if extra.startswith("top"):  # the n largest kept exact, the rest against the next largest
        n = int(extra[3:])
        top = mag.topk(n + 1, dim=-1)
        scale = top.values[..., n : n + 1] / levels
        q = torch.where(scale > 0, torch.round(g / scale.clamp_min(1e-30)).clamp(-127, 127), 0.0)
        out = q * scale
        keep = torch.zeros_like(g, dtype=torch.bool).scatter_(-1, top.indices[..., :n], True)
        out = torch.where(keep, g, out)
    else:
        scale = mag.amax(-1, keepdim=True) / levels
        out = torch.where(scale > 0, torch.round(g / scale.clamp_min(1e-30)) * scale, 0.0)
    return out.reshape(shape)


def install(model: torch.nn.Module, rounding: str | None) -> None:
    """Every nn.Linear rounds its input (None: the plain float32 model)."""
    for m in model.modules():
        if not isinstance(m, torch.nn.Linear):
            continue
        if rounding is None:
            m.forward = torch.nn.Linear.forward.__get__(m)  # type: ignore[method-assign]
            continue

        def forward(x: torch.Tensor, m: torch.nn.Linear = m) -> torch.Tensor:
            return torch.nn.functional.linear(rounded(x, rounding, getattr(m, "fixed", None)),
                                              m.weight, m.bias)  # fmt: skip

        m.forward = forward  # type: ignore[method-assign]


def calibrate(model: torch.nn.Module, texts: list[Text], group: int) -> None:
    """Per linear and group, the channel with the largest mean |x| over `texts` (disjoint from
    the scored ones): what `static1` keeps exact. (Recorded in `forward` itself: the lean
    layers call it directly, past any hook.)"""
    sums: dict[torch.nn.Linear, torch.Tensor] = {}
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    for m in linears:

        def forward(x: torch.Tensor, m: torch.nn.Linear = m) -> torch.Tensor:
            sums[m] = sums.get(m, 0) + x.reshape(-1, x.shape[-1]).abs().sum(0)  # type: ignore[assignment]
            return torch.nn.functional.linear(x, m.weight, m.bias)

        m.forward = forward  # type: ignore[method-assign]
    scores(model, texts)
    for m, total in sums.items():
        m.fixed = total.reshape(-1, group).argmax(-1)  # type: ignore[assignment]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="target", choices=["draft", "target"])
    ap.add_argument("--problems", type=int, default=25)
    ap.add_argument("--skip", type=int, default=0, help="start at this GSM8K problem")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--roundings", nargs="+", default=["g32", "g16", "g32-top1"])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    last = args.skip + args.problems - 1
    print(f"{describe()}; {args.model}, GSM8K texts {args.skip}-{last}, emulated roundings")
    print(f"# .venv/bin/python benchmarks/probes/a8_rounding.py {' '.join(sys.argv[1:])}")
    lm = load_lm(args.model, **OPTIONS["fp32"])
    texts = gsm8k_texts(lm, gsm8k_100()[args.skip : args.skip + args.problems])
    install(lm.model, None)
    ref = scores(lm.model, texts)
    if statics := [r for r in args.roundings if r.endswith("-static1")]:
        calib = gsm8k_texts(lm, gsm8k_100()[90:])  # score texts from the first 90 only
        (group,) = {int(r.split("-")[0][1:]) for r in statics}
        calibrate(lm.model, calib, group)
    gold = [torch.tensor(t.ids[t.start :]) for t in texts]
    tokens = sum(len(g) for g in gold)
    nll_ref = -sum(float(r.gather(1, g[:, None]).sum()) for r, g in zip(ref, gold, strict=True))
    print("| rounding | tokens | top-1 vs fp32 | flips | NLL / fp32 | mean KL ×1e3 | s |\n"
          "|---|---|---|---|---|---|---|")  # fmt: skip
    for rounding in args.roundings:
        install(lm.model, rounding)
        t0 = time.perf_counter()
        got = scores(lm.model, texts)
        flips, nll, kl = agreement(got, ref, gold)
        kl /= tokens
        print(f"| {rounding} | {tokens} | {100 * (1 - flips / tokens):.2f} % | {flips} | "
              f"{nll / nll_ref:.4f} | {1e3 * kl:.3f} | {time.perf_counter() - t0:.0f} |",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
