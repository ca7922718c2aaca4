"""Issue 2's numbers: verification share of a step, tokens fed per step, attention memory.

    .venv/bin/python benchmarks/step_overhead.py            # tiny models and the real pair
    .venv/bin/python benchmarks/step_overhead.py --tiny-only

Prints (1) per run: median step wall time, verification (select + both scores + decide)
as a share of the total, (2) per step: tokens fed to each model (prefill = context the
model had not seen; decode = generated), (3) bytes of captured attention when capturing
the last 3 layers vs all layers, at two context lengths.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from specguard_graph import SpecGuardConfig, build_graph
from specguard_graph.machine import describe
from specguard_graph.steps import ReasoningSteps

QUESTION = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many "
    "clips in May. How many clips did Natalia sell altogether in April and May?"
)


def run(name, draft, target, embedder, cfg):
    graph = build_graph(draft, target, embedder=embedder, config=cfg).compile()
    graph.invoke({"question": QUESTION})  # warm-up
    out = graph.invoke({"question": QUESTION})
    t, steps = out["timing"], out["steps"]
    share = t["verify_s"] / t["total_s"]
    per_step = statistics.median(s.get("time_s", 0) or t["total_s"] / len(steps) for s in steps)
    print(f"\n## {name}: k={cfg.k}, tau={cfg.tau}, signal_model={cfg.signal_model}")
    print(
        f"steps {len(steps)} (target {out['counts'].get('target_steps', 0)}), "
        f"total {t['total_s']:.2f}s, draft {t['draft_s']:.2f}s, verify {t['verify_s']:.3f}s, "
        f"target {t.get('target_s', 0):.2f}s -> verification share {100 * share:.1f}% "
        f"(median step {per_step:.2f}s)"
    )
    print("| step | by | tokens | draft prefill | draft decode | target prefill | target decode |")
    print("|---|---|---|---|---|---|---|")
    for s in steps:
        f = s["fed"]
        print(
            f"| {s['index']} | {s['source']} | {s['tokens']} | {f['draft_prefill']} | "
            f"{f['draft_decode']} | {f['target_prefill']} | {f['target_decode']} |"
        )
    return share


def attention_memory(name, lm):
    spec = ReasoningSteps()
    print(f"\n## captured attention bytes, {name} ({lm.num_layers} layers), k=4, 16 tokens")
    print("| context tokens | last 3 layers | all layers | ratio |")
    print("|---|---|---|---|")
    for repeat in (1, 4):
        question = " ".join([QUESTION] * repeat)
        sizes = []
        for layers in (3, lm.num_layers):
            pc = lm.new_prefix(spec.render_prompt(question, lm.tokenizer))
            s = lm.sample(
                pc,
                n=4,
                delimiter="\x00never",
                max_new_tokens=16,
                temperature=0.7,
                capture_layers=lm.capture_layers(layers),
            )
            sizes.append(s.capture.nbytes)
        print(
            f"| {len(pc.ids)} | {sizes[0] / 1e6:.2f} MB | {sizes[1] / 1e6:.2f} MB | "
            f"{sizes[1] / sizes[0]:.1f}x |"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiny-only", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(describe())
    from specguard_graph.testing import tiny_models

    m = tiny_models()
    for tau in (0.6, 0.0):
        run(
            "tiny models",
            m.draft,
            m.target,
            m.embedder,
            SpecGuardConfig(k=4, tau=tau, max_steps=8, max_step_tokens=32),
        )
    attention_memory("tiny draft", m.draft)
    if args.tiny_only:
        return
    from specguard_graph.models.loading import load_embedder, load_lm

    d, t, e = load_lm("draft"), load_lm("target"), load_embedder()
    cfg = SpecGuardConfig(k=4, tau=0.7, max_steps=6, max_step_tokens=48)
    run("embedded Qwen pair (int8, CPU)", d, t, e, cfg)
    attention_memory("Qwen 0.5B draft", d)


if __name__ == "__main__":
    main()
