"""A run that survives a crash: SQLite checkpoints after every node, so a killed process
restarted with the same thread id continues from the last accepted step.

    python examples/persistent_run.py --db runs.sqlite --thread demo-1 [--tiny]

Prints each decided step as a JSON line (and `{"event": "resumed", ...}` when the thread
already had steps). Events are at-least-once across a crash: the node that was running when
the process died runs again on resume and emits its events again (the saved state is exact);
a consumer that must not see a step twice keeps the last `index` it handled.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from langgraph.checkpoint.sqlite import SqliteSaver

from specguard_graph import SpecGuardConfig, build_graph


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", required=True)
    ap.add_argument("--thread", required=True)
    ap.add_argument("--tiny", action="store_true", help="use the offline tiny models")
    ap.add_argument("--max-steps", type=int, default=8)
    ap.add_argument("--question", default="A farmer has 3 baskets with 4 apples each. "
                    "He gives away 5 apples. How many are left?")  # fmt: skip
    args = ap.parse_args()
    if args.tiny:
        from specguard_graph.testing import tiny_models

        draft, target, embedder = tiny_models()
    else:
        from specguard_graph.models.loading import load_embedder, load_lm

        draft, target, embedder = load_lm("draft"), load_lm("target"), load_embedder()
    cfg = SpecGuardConfig(k=2, tau=0.7, max_steps=args.max_steps, max_step_tokens=24)
    builder = build_graph(draft, target, embedder=embedder, config=cfg)
    # checkpoints hold the questions and answers: readable by their owner only (SQLite gives
    # its -wal and -shm files the database file's permissions)
    os.close(os.open(args.db, os.O_CREAT | os.O_RDWR, 0o600))
    os.chmod(args.db, 0o600)
    with SqliteSaver.from_conn_string(args.db) as saver:
        graph = builder.compile(checkpointer=saver)
        thread = {"configurable": {"thread_id": args.thread}}
        snapshot = graph.get_state(thread)
        done = len(snapshot.values.get("steps", [])) if snapshot.values else 0
        fresh = not snapshot.next and not done
        if not fresh:
            print(json.dumps({"event": "resumed", "steps": done}), flush=True)
        stream = graph.stream(
            {"question": args.question} if fresh else None,
            thread,
            stream_mode="custom",
            durability="sync",  # the checkpoint is on disk before the next node starts
        )
        for event in stream:
            if event["event"] in ("draft", "step", "done"):
                keep = ("event", "step", "index", "text", "source", "status")
                print(json.dumps({k: event[k] for k in keep if k in event}), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
