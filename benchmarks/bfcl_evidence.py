"""BFCL evidence from a `specguard bench --dataset bfcl...` results directory.

.venv/bin/python benchmarks/bfcl_evidence.py DIR [--budget 0.7] [--methods target,specguard-greedy]

Prints, on the problems every method finished:
- accuracy per category of every method, beside the BFCL paper's Qwen2.5-Instruct figures;
- AUROC of each signal of the draft's message against its exact label (BFCL's AST checker on
  the draft candidate), with a bootstrap interval, on all messages and on the schema-valid ones
  (which signal catches a call that is valid but wrong);
- a τ replay for SpecGuard k = 1 from the draft and target records (what each τ would have
  accepted: the draft's message when its schema check passes and its score reaches τ, else the
  target's), and the τ it picks: the most accurate within the latency budget (× target).

The k = 1 record is `specguard-greedy.jsonl` or the first `specguard-greedy@….jsonl`; k = 4 is
`specguard.jsonl`. A directory without a `draft` record (a long test run of `target` and one
SpecGuard point) gets one from the k = 1 record: every SpecGuard record holds the draft's
message, and what the draft's part of it cost.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

from specguard_graph.bench import bfcl
from specguard_graph.evidence.stats import auroc, bootstrap
from specguard_graph.machine import describe

METHODS = ("target", "draft", "sd", "specguard-greedy", "specguard")
CATS = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")
# BFCL paper (ICML 2025) Table 1, FC mode, Qwen2.5-Instruct (not Coder); simple = Python+Java+JS
PAPER = {"target": (72.4, 87.0, 81.5, 75.5, 62.7), "draft": (61.2, 78.0, 60.0, 50.0, 46.2)}


def _read(path: Path) -> dict[str, dict]:
    return {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}


def _draft_from(k1: dict[str, dict]) -> dict[str, dict]:
    """The `draft` method's record as the k = 1 SpecGuard record saw it: its message, graded,
    and its latency (the draft's decode plus the check; what the target then did is left out)."""
    out = {}
    for i, r in k1.items():
        step = r["step_records"][0]
        text = step.get("draft_text") or step["text"]
        spent = step["spent"]
        out[i] = {"id": i, "text": text, "correct": bfcl.grade(r["gold"], r["question"], text)[
            "valid"], "latency_s": spent["draft_s"] + spent["verify_s"]}  # fmt: skip
    return out


def load(out: Path, methods: tuple[str, ...] = METHODS) -> dict[str, dict[str, dict]]:
    runs = {}
    for m in methods:
        path = out / f"{m}.jsonl"
        if m == "specguard-greedy" and not path.exists():
            path = next(iter(sorted(out.glob("specguard-greedy@*.jsonl"))), path)
        if path.exists():
            runs[m] = _read(path)
    if "draft" not in runs and "specguard-greedy" in runs:
        runs["draft"] = _draft_from(runs["specguard-greedy"])
    common = set.intersection(*(set(r) for r in runs.values()))
    return {m: {i: r for i, r in rs.items() if i in common} for m, rs in runs.items()}


def category(item_id: str) -> str:
    return item_id.rsplit("_", 1)[0]


def accuracy_table(runs: dict[str, dict[str, dict]]) -> None:
    print("| method | " + " | ".join(CATS) + " | all |")
    print("|---" * (len(CATS) + 2) + "|")
    for m, rs in runs.items():
        cells = []
        for c in CATS:
            got = [r["correct"] for i, r in rs.items() if category(i) == c]
            cells.append(f"{sum(got)}/{len(got)}" if got else "—")
        print(f"| {m} | " + " | ".join(cells) + f" | {sum(r['correct'] for r in rs.values())}"
              f"/{len(rs)} |")  # fmt: skip
    for m, figs in PAPER.items():
        print(f"| BFCL paper, {m}'s Instruct size (%) | " + " | ".join(map(str, figs)) + " | |")


def draft_signals(runs: dict[str, dict[str, dict]]) -> list[dict]:
    """Per item: the draft message the graph scored, its signals and its exact label."""
    rows = []
    for i, r in runs.get("specguard-greedy", {}).items():
        step = r["step_records"][0]
        text = step.get("draft_text") or step["text"]
        cand = (step.get("candidate_signals") or [{}])[0]
        row = {"id": i, "right": bfcl.grade(r["gold"], r["question"], text)["valid"],
               "logprob min": step["logprob"], "logprob mean": cand.get("logprob_mean"),
               "grounding": step["grounding"], "score": step["score"],
               "schema valid": float(step.get("checked") == "ok"),
               "length (tokens)": float(cand.get("tokens") or 0)}  # fmt: skip
        k4 = runs.get("specguard", {}).get(i)
        if k4:
            s4 = k4["step_records"][0]
            sel = s4["candidate_signals"][s4["selected"]]
            row["vote share (k=4)"] = sel.get("vote")
            row["k4 right"] = bfcl.grade(k4["gold"], k4["question"],
                                         s4.get("draft_text") or s4["text"])["valid"]  # fmt: skip
        rows.append(row)
    return rows


def auroc_table(rows: list[dict], title: str, label: str = "right") -> None:
    print(f"\n{title} (n = {len(rows)}, {sum(r[label] for r in rows)} right)")
    print("| signal | AUROC | 95 % interval |\n|---|---|---|")
    for name in ("logprob min", "logprob mean", "grounding", "score", "schema valid",
                 "length (tokens)", "vote share (k=4)"):  # fmt: skip
        pairs = [(r[name], r[label if name != "vote share (k=4)" else "k4 right"])
                 for r in rows if r.get(name) is not None]  # fmt: skip
        a = auroc([s for s, _ in pairs], [g for _, g in pairs]) if pairs else None
        ci = bootstrap([[p] for p in pairs]) if a is not None else None
        cell = "—" if a is None else f"{a:.2f}"
        print(f"| {name} | {cell} | {'—' if ci is None else f'{ci[0]:.2f}–{ci[1]:.2f}'} |")


def mixed(row: dict, beta: float) -> float | None:
    """The graph's score of the row at β (the default fixed normalisation ranges)."""
    lp, g = row["logprob min"], row["grounding"]
    if lp is None or (beta < 1 and g is None):
        return None
    lpn = min(1.0, max(0.0, (lp + 10.0) / 10.0))
    gn = min(1.0, max(0.0, (g or 0.0) / 0.875))
    return beta * lpn + (1 - beta) * gn


def replay(runs: dict[str, dict[str, dict]], rows: list[dict], budget: float,
           beta: float) -> tuple[float, int, float] | None:  # fmt: skip
    t, d = runs["target"], runs["draft"]
    base = statistics.median(r["latency_s"] for r in t.values())
    print(
        f"\nτ replay, SpecGuard k = 1 at β = {beta} (from the draft and target records; "
        f"median target {base:.1f} s; rows where the accepted set changes)\n"
        "| τ | accepted | accuracy | latency × target |\n|---|---|---|---|"
    )
    best, last = None, None
    for tau in [x / 100 for x in range(0, 101)]:
        acc, lat, taken = 0, [], 0
        for row in rows:
            i, score = row["id"], mixed(row, beta)
            ok = row["schema valid"] == 1.0 and score is not None and score >= tau
            taken += ok
            acc += d[i]["correct"] if ok else t[i]["correct"]
            lat.append(d[i]["latency_s"] + (0 if ok else t[i]["latency_s"]))
        ratio = statistics.median(lat) / base
        if taken != last:
            print(f"| {tau:.2f} | {taken}/{len(rows)} | {acc}/{len(rows)} | {ratio:.2f} |")
            last = taken
        if ratio <= budget and (best is None or acc > best[1]):
            best = (tau, acc, ratio)
    if best:
        print(
            f"chosen τ = {best[0]:.2f} (the first τ of the most accurate within the budget): "
            f"{best[1]}/{len(rows)} at {best[2]:.2f}× (budget {budget})"
        )
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--budget", type=float, default=0.70, help="latency budget × target")
    ap.add_argument("--methods", default=",".join(METHODS),
                    help="records to read (a partial one would cut the common items)")  # fmt: skip
    args = ap.parse_args()
    methods = tuple(args.methods.split(","))
    if unknown := set(methods) - set(METHODS):
        ap.error(f"--methods: unknown {sorted(unknown)}; expected some of {', '.join(METHODS)}")
    print(describe())
    runs = load(args.out, methods)
    n = len(next(iter(runs.values())))
    print(f"{n} problems finished by every method in {args.out}\n")
    accuracy_table(runs)
    lat = {m: statistics.median(r["latency_s"] for r in rs.values()) for m, rs in runs.items()}
    print("\nmedian latency s: " + ", ".join(f"{m} {v:.1f} ({v / lat['target']:.2f}×)"
                                             for m, v in lat.items()))  # fmt: skip
    if "sd" in runs:
        same = sum(runs["sd"][i]["text"] == runs["target"][i]["text"] for i in runs["target"])
        print(f"sd text = target text on {same}/{n}")
    rows = draft_signals(runs)
    auroc_table(rows, "AUROC against the draft message's AST label, all messages")
    auroc_table(
        [r for r in rows if r["schema valid"] == 1.0],
        "AUROC on the schema-valid draft messages (valid but wrong vs right)",
    )
    by_cat = defaultdict(list)
    for r in rows:
        by_cat[category(r["id"])].append(r)
    print(
        "\nschema-invalid draft messages per category: "
        + ", ".join(
            f"{c} {sum(r['schema valid'] == 0 for r in v)}/{len(v)}" for c, v in by_cat.items()
        )
    )
    for beta in (0.3, 1.0):
        replay(runs, rows, args.budget, beta)


if __name__ == "__main__":
    main()
