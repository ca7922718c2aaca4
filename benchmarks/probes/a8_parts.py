"""Which layers cost `gguf-a8` its agreement with float32? Int8 activations, part by part.

`gguf-a8` rounds every BlockLinear's activations to int8 per group of 32 and loses 0.4-0.7 % of
top-1 against the GGUF's float32 (docs/numerics.md), where `gguf` (int16) keeps 100 %. This
probe loads the `gguf-a8` model once and puts chosen parts back to int16 (`act = 16`, the lean
layers' glue rebuilt), then measures top-1, the NLL ratio and the mean KL(float32 || option)
over `benchmarks/fidelity.py`'s GSM8K texts, teacher-forced in one forward. A part that holds
most of the flips can stay int16 while the rest takes int8's speed.

    .venv/bin/python benchmarks/probes/a8_parts.py --model target --problems 25 \
        --keep none head down down,head qkv,o,gate_up,down,head
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # fidelity.py
from fidelity import SPEC, Text

from specguard_graph.bench.data import gsm8k_100
from specguard_graph.machine import describe
from specguard_graph.models.loading import OPTIONS, load_lm
from specguard_graph.models.local import lean_layers
from specguard_graph.models.local.blocks import BlockLinear
from specguard_graph.testing import feed

# a part's name -> the module names (last component) whose activations it sets
PARTS = {
    "qkv": ("fused_proj", "q_proj", "k_proj", "v_proj"),
    "o": ("o_proj",),
    "gate_up": ("gate_up", "gate_proj", "up_proj"),
    "down": ("down_proj",),
    "head": ("lm_head",),
}


@torch.inference_mode()
def scores(model: torch.nn.Module, texts: list[Text]) -> list[torch.Tensor]:
    """Per text, the log-probs after each solution position's prefix (one forward)."""
    out = []
    for t in texts:
        lp, _ = feed(model, [t.ids], "one forward", start=t.start - 1)
        out.append(lp[0, t.start - 1 : len(t.ids) - 1].clone())
    return out


def gsm8k_texts(lm: object, problems: list[dict]) -> list[Text]:
    """Each problem's prompt in the graph's format and the dataset's solution, as token ids."""
    out = []
    for p in problems:
        prompt = lm.encode(SPEC.render_prompt(p["question"], lm.tokenizer))
        out.append(Text(prompt + lm.encode(p["solution"]), len(prompt)))
    return out


def agreement(got: list[torch.Tensor], ref: list[torch.Tensor], gold: list[torch.Tensor]
              ) -> tuple[int, float, float]:  # fmt: skip
    """Positions whose argmax differs from the reference's, the NLL of the gold tokens, and the
    KL(reference || got) summed over positions."""
    pairs = list(zip(got, ref, strict=True))
    flips = sum(int((a.argmax(-1) != b.argmax(-1)).sum()) for a, b in pairs)
    nll = -sum(float(a.gather(1, g[:, None]).sum()) for a, g in zip(got, gold, strict=True))
    kl = sum(float((b.exp() * (b - a)).sum()) for a, b in pairs)
    return flips, nll, kl


def set_int16(lm: object, keep: set[str], layers: set[int] | None) -> int:
    """Every BlockLinear to int8, then those of `keep`'s parts (in `layers`, all if None) to
    int16; the lean glue, which holds each projection's activation bits, is rebuilt."""
    kept = 0
    names = {n for p in keep for n in PARTS[p]}
    for name, m in lm.model.named_modules():
        if type(m) is not BlockLinear:
            continue
        parts = name.split(".")
        index = int(parts[parts.index("layers") + 1]) if "layers" in parts else None
        chosen = parts[-1] in names and (layers is None or index is None or index in layers)
        m.act = 16 if chosen else 8
        kept += chosen
    lean_layers.uninstall(lm.model)
    if not lean_layers.install(lm.model):
        raise SystemExit("the lean layers did not install")
    return kept


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="target", choices=["draft", "target"])
    ap.add_argument("--problems", type=int, default=25)
    ap.add_argument("--skip", type=int, default=0, help="start at this GSM8K problem (held out)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--keep", nargs="+", default=["none", "head", "down", "down,head"],
        help=f"comma-joined parts kept at int16, one row each: {', '.join(PARTS)}, or none; "
        "part@0-3+27: that part in those layers only",
    )  # fmt: skip
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    last = args.skip + args.problems - 1
    print(f"{describe()}; {args.model}, GSM8K texts {args.skip}-{last}, int8 activations by part")
    print(f"# .venv/bin/python benchmarks/probes/a8_parts.py {' '.join(sys.argv[1:])}")
    ref_lm = load_lm(args.model, **OPTIONS["fp32"])
    texts = gsm8k_texts(ref_lm, gsm8k_100()[args.skip : args.skip + args.problems])
    ref = scores(ref_lm.model, texts)
    del ref_lm
    gold = [torch.tensor(t.ids[t.start :]) for t in texts]
    tokens = sum(len(g) for g in gold)
    nll_ref = -sum(float(r.gather(1, g[:, None]).sum()) for r, g in zip(ref, gold, strict=True))
    lm = load_lm(args.model, **OPTIONS["gguf-a8"])
    print("| int16 parts | linears int16 | tokens | top-1 vs fp32 | flips | NLL / fp32 "
          "| mean KL ×1e3 | s |\n|---|---|---|---|---|---|---|---|")  # fmt: skip
    for row in args.keep:
        keep, layers = set(), None
        for item in row.split(",") if row != "none" else []:
            part, _, where = item.partition("@")
            if part not in PARTS:
                raise SystemExit(f"--keep: unknown part {part!r} (one of {', '.join(PARTS)})")
            keep.add(part)
            if where:
                layers = (layers or set()) | _indices(where)
        kept = set_int16(lm, keep, layers)
        t0 = time.perf_counter()
        got = scores(lm.model, texts)
        flips, nll, kl = agreement(got, ref, gold)
        kl /= tokens
        print(f"| {row} | {kept} | {tokens} | {100 * (1 - flips / tokens):.2f} % | {flips} | "
              f"{nll / nll_ref:.4f} | {1e3 * kl:.3f} | {time.perf_counter() - t0:.0f} |",
              flush=True)  # fmt: skip


def _indices(spec: str) -> set[int]:
    """'0-3+27' -> {0, 1, 2, 3, 27} (layer indices; '+' joins, since ',' joins parts)."""
    out: set[int] = set()
    for piece in spec.split("+"):
        lo, _, hi = piece.partition("-")
        out |= set(range(int(lo), int(hi or lo) + 1))
    return out


if __name__ == "__main__":
    main()
