"""Benchmark: MILP solve time with 256 length buckets, and the wall time of
`prfaas-plan plan paper-case-study` (imports included).

Run: python benchmarks/bench_plan.py   (targets: MILP < 200 ms; CLI < 3 s on 2 cores)
"""

from __future__ import annotations

import subprocess
import sys
import time

import prfaas_plan as pp
from prfaas_plan import planner as P


def main() -> None:
    sc = pp.load_scenario("paper-case-study")
    inp = P.plan_inputs(sc)
    b = P.buckets(inp, 256)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        P.solve_exact(inp, b, inp.n_prfaas, inp.n_local)
        times.append(time.perf_counter() - t0)
    print(f"MILP, 256 buckets (two solves, CBC): best {min(times) * 1e3:.0f} ms, median {sorted(times)[2] * 1e3:.0f} ms")
    walls = []
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "prfaas_plan.cli", "plan", "paper-case-study"],
                       check=True, capture_output=True)
        walls.append(time.perf_counter() - t0)
    print(f"prfaas-plan plan paper-case-study: best {min(walls):.2f} s, median {sorted(walls)[1]:.2f} s wall")


if __name__ == "__main__":
    main()
