"""Does a weight format compute the float32 model, and the same model however tokens are fed?

For each model and option, over GSM8K reference solutions (prompt + solution, teacher-forced):

* top-1: how often the option's most likely next token is float32's, over the solution tokens;
* NLL ratio: the option's mean negative log-likelihood of the solution over float32's;
* feeding invariance: the solution fed after its prompt as one forward, token by token with a
  KV cache, in chunks of 16, and as row 0 of a 4-row batch (the other rows other texts): the
  max |Δ log p| of the solution tokens against one forward, and how many argmax tokens differ;
* greedy: each prompt prefilled in those four ways, then 64 tokens decoded greedily one at a
  time (the 4-row batch decodes all four rows, as k-sampling does): on how many prompts all
  four continuations are identical.

    .venv/bin/python benchmarks/fidelity.py                       # 20 problems, both models
    .venv/bin/python benchmarks/fidelity.py --models draft --options int8x2 --problems 4
    .venv/bin/python benchmarks/fidelity.py --options int8 --checks greedy   # no fp32 needed
    .venv/bin/python benchmarks/fidelity.py --options gguf --checks top1     # no feeding checks

float32 is the reference and always runs first. Issue 12's goals for the default (int8):
top-1 >= 99 %, NLL within 1 %, greedy identical on >= 19 of 20 prompts.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from dataclasses import dataclass

import torch

from specguard_graph.bench.data import gsm8k_100
from specguard_graph.machine import describe
from specguard_graph.models.loading import OPTIONS, load_lm
from specguard_graph.models.local.hf import LocalCausalLM
from specguard_graph.steps import ReasoningSteps
from specguard_graph.testing import FEEDINGS, batch_of_4, feed, greedy

SPEC = ReasoningSteps()


@dataclass
class Text:
    ids: list[int]
    start: int  # first solution token


@dataclass
class Scored:
    """Per solution token: the model's most likely token and log p of the reference token."""

    argmax: torch.Tensor
    gold: torch.Tensor


def _teacher_forced(lm: LocalCausalLM, texts: list[Text], feeding: str) -> list[Scored]:
    res = []
    for t in texts:
        rows = [t.ids]
        if feeding == "row of 4":
            rows = batch_of_4(t.ids, [u.ids for u in texts if u is not t])
        # the prompt in one forward; the solution (the scored tokens) in the feeding
        lp, _ = feed(lm.model, rows, feeding, start=t.start - 1)
        lp = lp[0, t.start - 1 : len(t.ids) - 1]
        gold = torch.tensor(t.ids[t.start :])
        res.append(Scored(lp.argmax(-1), lp.gather(1, gold[:, None])[:, 0]))
    return res


def measure(
    lm: LocalCausalLM,
    texts: list[Text],
    prompts: list[list[int]],
    new: int,
    ref: list[Scored] | None,
    checks: set[str],
) -> tuple[dict[str, float], list[Scored]]:
    """One option's row; with `ref` None (float32 itself) only the one-forward scores."""
    if not checks & {"forced", "top1"}:
        return {"tokens": 0.0, "greedy same": _greedy(lm, prompts, new)}, []
    one = _teacher_forced(lm, texts, "one forward")
    nll = -torch.cat([s.gold for s in one])
    row: dict[str, float] = {"tokens": float(nll.numel()), "nll": float(nll.mean())}
    if ref is None:
        return row, one
    agree = torch.cat([a.argmax == b.argmax for a, b in zip(one, ref, strict=True)])
    row["top1"] = float(agree.float().mean())
    row["nll_ratio"] = float(nll.mean() / -torch.cat([s.gold for s in ref]).mean())
    print(f"  {lm.name}: {row}", file=sys.stderr, flush=True)  # partial rows, as they come
    for feeding in FEEDINGS[1:] if "forced" in checks else ():
        pairs = list(zip(one, _teacher_forced(lm, texts, feeding), strict=True))
        row[f"dlp {feeding}"] = max(float((a.gold - b.gold).abs().max()) for a, b in pairs)
        row[f"flips {feeding}"] = float(sum(int((a.argmax != b.argmax).sum()) for a, b in pairs))
        print(f"  {lm.name}: {row}", file=sys.stderr, flush=True)
    if "greedy" in checks:
        row["greedy same"] = _greedy(lm, prompts, new)
        print(f"  {lm.name}: {row}", file=sys.stderr, flush=True)
    return row, one


def _greedy(lm: LocalCausalLM, prompts: list[list[int]], new: int) -> float:
    """On how many prompts the greedy continuation is the same for all four feedings."""
    same = 0
    for i, p in enumerate(prompts):
        batch = batch_of_4(p, prompts[:i] + prompts[i + 1 :])
        rows = {f: batch if f == "row of 4" else [p] for f in FEEDINGS}
        same += len({tuple(greedy(lm.model, rows[f], f, new)) for f in FEEDINGS}) == 1
        print(f"  greedy identical on {same} of {i + 1} prompts", file=sys.stderr, flush=True)
    return float(same)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["draft", "target"], choices=["draft", "target"])
    ap.add_argument("--options", nargs="+", default=["int8", "int8x2", "dynamic-int8"],
                    choices=[o for o in OPTIONS if o != "fp32"])  # fmt: skip
    ap.add_argument(
        "--problems", type=int, default=25, help="GSM8K reference solutions (25: > 2,000 tokens)"
    )
    ap.add_argument("--prompts", type=int, default=20, help="prompts for the greedy check")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--checks", nargs="+", default=["forced", "greedy"], choices=["forced", "top1", "greedy"],
        help="forced: top-1, NLL and feeding Δ (needs fp32); top1: top-1 and NLL only; "
        "greedy: the 64-token check",
    )  # fmt: skip
    args = ap.parse_args()
    checks = set(args.checks)
    torch.set_num_threads(args.threads)
    problems = gsm8k_100()[: args.problems]
    print(f"{describe()}; {len(problems)} GSM8K problems, "
          f"greedy {args.new_tokens} tokens", flush=True)  # fmt: skip
    head = ["model", "option", "tokens", "top-1 vs fp32", "NLL", "NLL / fp32"]
    head += [f"max Δlp {p}" for p in FEEDINGS[1:]] + [f"argmax flips {p}" for p in FEEDINGS[1:]]
    head += ["greedy identical (4 feedings)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for role in args.models:
        ref = None
        for option in ["fp32", *args.options] if checks & {"forced", "top1"} else args.options:
            t0 = time.perf_counter()
            lm = load_lm(role, **OPTIONS[option])
            texts, prompts = [], []
            for p in problems:
                prompt = lm.encode(SPEC.render_prompt(p["question"], lm.tokenizer))
                texts.append(Text(prompt + lm.encode(p["solution"]), len(prompt)))
                prompts.append(prompt)
            prompts = prompts[: args.prompts]
            row, one = measure(lm, texts, prompts, args.new_tokens, ref, checks)
            if option == "fp32":
                ref = one
            cells = [
                role,
                option,
                f"{row['tokens']:.0f}" if row["tokens"] else "—",
                f"{100 * row['top1']:.2f} %" if "top1" in row else "—",
                f"{row['nll']:.4f}" if "nll" in row else "—",
                f"{row['nll_ratio']:.4f}" if "nll_ratio" in row else "—",
            ]
            if ref is not one:
                cells += [
                    f"{row[f'dlp {p}']:.2g}" if f"dlp {p}" in row else "—" for p in FEEDINGS[1:]
                ]
                cells += [
                    f"{row[f'flips {p}']:.0f}" if f"flips {p}" in row else "—" for p in FEEDINGS[1:]
                ]
                cells += [
                    f"{row['greedy same']:.0f} / {len(prompts)}" if "greedy same" in row else "—"
                ]
            else:
                cells += ["(reference)"] * (2 * len(FEEDINGS) - 1)
            lines.append("| " + " | ".join(cells) + " |")
            print(lines[-1], f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
            del lm
            gc.collect()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
