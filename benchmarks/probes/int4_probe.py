"""Would weight-only int4 keep the numerics contract? Fake-quantised int4, measured as fidelity.

Issue 41 lists int4 weights for the body as a way to fewer bytes per decoded token. This probe
rounds chosen float32 Linear weights of one model to group-wise symmetric int4 (one scale per
`--group` inputs, the format of torch's and llama.cpp's int4 packs, computed in float32) and
measures top-1 agreement and the NLL ratio against float32 on `benchmarks/fidelity.py`'s GSM8K
texts, teacher-forced. If a body part cannot hold 99 % top-1 there, no int4 kernel can.

    .venv/bin/python benchmarks/probes/int4_probe.py --model target --problems 6
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # fidelity.py
from fidelity import SPEC, Text, _teacher_forced

from specguard_graph.bench.data import gsm8k_100
from specguard_graph.machine import describe
from specguard_graph.models.loading import OPTIONS, load_lm

PARTS = {
    "gate+up": ("gate_proj", "up_proj"),
    "down": ("down_proj",),
    "mlp": ("gate_proj", "up_proj", "down_proj"),
    "attention": ("q_proj", "k_proj", "v_proj", "o_proj"),
}


def int4(w: torch.Tensor, group: int) -> torch.Tensor:
    """`w` rounded to symmetric int4 with one scale per `group` inputs, back in float32."""
    out, inp = w.shape
    g = w.reshape(out, inp // group, group)
    scale = (g.abs().amax(-1, keepdim=True) / 7).clamp(min=torch.finfo(torch.float32).tiny)
    return (torch.round(g / scale).clamp(-8, 7) * scale).reshape(out, inp)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="target", choices=["draft", "target"])
    ap.add_argument("--problems", type=int, default=6)
    ap.add_argument("--group", type=int, default=32)
    ap.add_argument("--parts", nargs="+", default=["gate+up", "down", "mlp"], choices=PARTS)
    args = ap.parse_args()
    print(f"{describe()}; {args.model}, {args.problems} GSM8K texts, int4 group {args.group}")
    lm = load_lm(args.model, **OPTIONS["fp32"])
    texts = []
    for p in gsm8k_100()[: args.problems]:
        prompt = lm.encode(SPEC.render_prompt(p["question"], lm.tokenizer))
        texts.append(Text(prompt + lm.encode(p["solution"]), len(prompt)))
    ref = _teacher_forced(lm, texts, "one forward")
    tokens = sum(r.argmax.numel() for r in ref)
    nll_ref = -sum(float(r.gold.sum()) for r in ref) / tokens
    linears = {n: m for n, m in lm.model.named_modules() if isinstance(m, torch.nn.Linear)}
    original = {n: m.weight.detach().clone() for n, m in linears.items()}
    print("| int4 part | tokens | top-1 vs fp32 | NLL / fp32 |\n|---|---|---|---|")
    for part in args.parts:
        with torch.no_grad():
            for n, m in linears.items():
                chosen = n.rsplit(".", 1)[-1] in PARTS[part]
                m.weight.copy_(int4(original[n], args.group) if chosen else original[n])
        got = _teacher_forced(lm, texts, "one forward")
        same = sum(int((g.argmax == r.argmax).sum()) for g, r in zip(got, ref, strict=True))
        nll = -sum(float(g.gold.sum()) for g in got) / tokens
        print(f"| {part} | {tokens} | {100 * same / tokens:.1f} % | {nll / nll_ref:.4f} |")


if __name__ == "__main__":
    main()
