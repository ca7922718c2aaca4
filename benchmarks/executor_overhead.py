"""What running a program step costs: `PythonExecutor` per executed step, on this CPU.

Side by side, interleaved round by round, on the kind of program a Coder model writes for a
GSM8K step (arithmetic, a loop, `fractions`, `math`):

* sandboxed executor: `PythonExecutor()(code)`, the default: bubblewrap namespaces (no
  network, a read-only minimal root, private /tmp, own PID namespace) plus the limits;
* executor, sandbox=False: limits, a temporary directory, a new process group, `nobody`
  when root, output capture — the unisolated opt-out;
* bare process: `python -I -c code` through `subprocess.run`, nothing else — the floor of any
  out-of-process executor;
* in process: `exec` of the same code — what an unsafe executor would cost.

    .venv/bin/python benchmarks/executor_overhead.py --rounds 30
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import subprocess
import sys
import time

from specguard_graph.machine import describe
from specguard_graph.program.executor import PythonExecutor

PROGRAMS = [
    "print(48 + 48 // 2)",
    "total = 0\nfor day in range(7):\n    total += 3 * 12\nprint(total)",
    "from fractions import Fraction\nprint(Fraction(3, 4) * 120 - Fraction(1, 3) * 45)",
    "import math\nprint(math.ceil(1250 / 48) * 7.5)",
    "prices = {'apple': 0.5, 'pear': 0.75}\nprint(sum(p * 12 for p in prices.values()))",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    a = ap.parse_args()
    print(describe(), flush=True)
    run = PythonExecutor()
    unboxed = PythonExecutor(sandbox=False, processes=64)  # room for bwrap's orphans (docs)
    times: dict[str, list[float]] = {"sandboxed executor": [], "executor, sandbox=False": [],
                                     "bare process": [], "in process": []}  # fmt: skip

    def bare(code: str) -> None:
        subprocess.run([run.python, "-I", "-c", code], capture_output=True, check=True)

    def inproc(code: str) -> None:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(code, "<step>", "exec"), {})  # the unsafe reference

    def executor(code: str, ex: PythonExecutor = run) -> None:
        obs = ex(code)
        if not obs.ok:
            raise SystemExit(f"{code!r}: {obs.error}")

    for _ in range(a.rounds):
        for code in PROGRAMS:
            for name, fn in (("sandboxed executor", executor),
                             ("executor, sandbox=False", lambda c: executor(c, unboxed)),
                             ("bare process", bare), ("in process", inproc)):  # fmt: skip
                t0 = time.perf_counter()
                fn(code)
                times[name].append((time.perf_counter() - t0) * 1000)
    print(f"python {sys.version.split()[0]}, {a.rounds} rounds x {len(PROGRAMS)} programs; "
          f"executor runs {run.python}{' as nobody' if run.demote else ''}")  # fmt: skip
    print("| how | median ms | p90 ms |\n|---|---|---|")
    for name, ts in times.items():
        p90 = sorted(ts)[int(0.9 * len(ts))]
        print(f"| {name} | {statistics.median(ts):.1f} | {p90:.1f} |")
    med = {name: statistics.median(ts) for name, ts in times.items()}
    print(f"sandbox overhead (sandboxed - sandbox=False, medians): "
          f"{med['sandboxed executor'] - med['executor, sandbox=False']:.1f} ms; "
          f"executor, sandbox=False / bare process: "
          f"{med['executor, sandbox=False'] / med['bare process']:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
