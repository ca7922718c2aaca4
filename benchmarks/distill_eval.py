"""Stock draft against distilled drafts on gsm8k-100 (never trained on), in one interleaved run.

Three sections, each a list of per-problem records in `OUT/records.jsonl` (the run resumes
where it stopped):

- agreement: teacher-forced on the target's own answers (`results/gsm8k-100/target.jsonl`),
  the share of positions where each draft's argmax is the target's token, the share of whole
  steps every position of which agrees, and the mean run of agreeing tokens;
- lossless: problems OFFSET.. of gsm8k-100, the target alone and `sd-verify` with each draft,
  interleaved per problem: text = target's, the median of per-problem latency ratios, and
  target tokens kept per target forward;
- alone: each draft alone, greedy, graded by math-verify.

    .venv/bin/python benchmarks/distill_eval.py \
        --drafts distilled:target-text,distilled:hard-positions \
        --out benchmarks/results/distill/eval
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

import torch

from specguard_graph.bench.data import gsm8k_100
from specguard_graph.bench.grade import grade_problem
from specguard_graph.bench.methods import plain, verified_sd
from specguard_graph.distill.agreement import answer_counts, summary
from specguard_graph.machine import describe
from specguard_graph.models.loading import load_lm

TARGET_RECORDS = Path("benchmarks/results/gsm8k-100/target.jsonl")


def done_keys(path: Path) -> set[tuple[str, str, str]]:
    if not path.is_file():
        return set()
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {(r["section"], r["model"], r["id"]) for r in rows}


def summarize(rows: list[dict], names: list[str]) -> list[str]:
    out = []
    for name in names:
        a = [r for r in rows if r["section"] == "agreement" and r["model"] == name]
        if a:
            got = summary(a)
            out.append(f"agreement {name}: top-1 {got['top1']:.4f}, whole steps "
                       f"{got['steps_equal']:.4f}, mean run {got['mean_run']:.2f} "
                       f"({len(a)} answers, {got['positions']} positions)")  # fmt: skip
        s = [r for r in rows if r["section"] == "lossless" and r["model"] == name]
        if s:
            ratio = statistics.median(r["ratio"] for r in s)
            kept = sum(r["tokens"] for r in s) / sum(r["forwards"] for r in s)
            out.append(f"sd-verify {name}: text = target {sum(r['same'] for r in s)}/{len(s)}, "
                       f"latency / target median {ratio:.3f}, tokens per target forward "
                       f"{kept:.2f}")  # fmt: skip
        g = [r for r in rows if r["section"] == "alone" and r["model"] == name]
        if g:
            out.append(f"alone {name}: {sum(r['correct'] for r in g)}/{len(g)} correct")
    return out


def run(args, lms: dict, target, sink) -> None:
    done = done_keys(args.out / "records.jsonl")
    recs = [json.loads(x) for x in TARGET_RECORDS.read_text().splitlines()][: args.agreement]
    for i, rec in enumerate(recs):
        for name, lm in lms.items():
            if ("agreement", name, rec["id"]) not in done:
                sink({"section": "agreement", "model": name, "id": rec["id"],
                      **answer_counts(lm, rec["question"], rec["text"])})  # fmt: skip
        print(f"agreement {i + 1}/{len(recs)}", flush=True)
    problems = gsm8k_100()[args.offset : args.offset + args.lossless]
    alone = gsm8k_100()[: args.alone]
    solve_t = plain(target, args.max_tokens)
    for lm in lms.values():  # warm-up, not timed: the first calls pay one-time costs
        verified_sd(target, lm, 16)("What is 2 + 2?")
    plain(target, 16)("What is 2 + 2?")
    for p in problems:
        if all(("lossless", n, p["id"]) in done for n in lms):
            continue
        ref = solve_t(p["question"])
        for name, lm in lms.items():
            r = verified_sd(target, lm, args.max_tokens)(p["question"])
            v = r["verified"]
            sink({"section": "lossless", "model": name, "id": p["id"], "same": r["text"] ==
                  ref["text"], "ratio": r["latency_s"] / ref["latency_s"], "tokens": r["tokens"],
                  "forwards": v["forwards"], "latency_s": r["latency_s"],
                  "target_s": ref["latency_s"]})  # fmt: skip
        print(f"lossless {p['id']}", flush=True)
    for p in alone:
        for name, lm in lms.items():
            if ("alone", name, p["id"]) not in done:
                r = plain(lm, args.max_tokens)(p["question"])
                sink({"section": "alone", "model": name, "id": p["id"],
                      "correct": grade_problem(p, r), "answer": r["answer"]})  # fmt: skip
        print(f"alone {p['id']}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--drafts", required=True, help="comma-separated: distilled:NAME or paths")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--agreement", type=int, default=100, help="first N target answers")
    ap.add_argument("--lossless", type=int, default=10, help="N problems from --offset")
    ap.add_argument("--offset", type=int, default=30)
    ap.add_argument("--alone", type=int, default=0, help="first N problems, each draft alone")
    ap.add_argument("--max-tokens", type=int, default=512)
    args = ap.parse_args()
    os.environ.setdefault("SPECGUARD_PREFIX_DISK", "off")
    names = ["stock", *args.drafts.split(",")]
    lms = {n: load_lm("draft", None if n == "stock" else n, quantize="gguf") for n in names}
    target = load_lm("target", quantize="gguf")
    args.out.mkdir(parents=True, exist_ok=True)
    header = f"{describe()}; stock draft against {', '.join(names[1:])}"
    print(header, flush=True)

    def sink(row: dict) -> None:
        with (args.out / "records.jsonl").open("a") as f:
            f.write(json.dumps(row) + "\n")

    with torch.inference_mode():
        run(args, lms, target, sink)
    rows = [json.loads(x) for x in (args.out / "records.jsonl").read_text().splitlines()]
    lines = [header, *summarize(rows, names)]
    (args.out / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
