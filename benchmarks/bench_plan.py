"""Benchmark: warm ``plan()`` of the paper case study at 128 and 2,048 length buckets, this checkout
against the previous implementation (benchmarks/_baseline.py), and one solve of the exact MILP (at 256
buckets, planner.milp.LP_PATH_MIN_BUCKETS, by the LP path).

Run: python benchmarks/bench_plan.py [--repeats 5] [--baseline REV]   (targets, issue #18, on 2 cores: warm plan()
<= 0.1 s at 128 buckets and <= 0.5 s at 2,048)

Each figure is min and median of ``--repeats`` runs after one warm-up run (wall and CPU time: CPU
time is steadier where other processes share the cores), in one process per tree
(then, for this tree, one warm ``plan()`` split into HiGHS's MILP solves, the LP path's LPs (from
planner.milp.LP_PATH_MIN_BUCKETS buckets up), the verification's LPs and the rest);
the previous implementation runs in a subprocess with ``PYTHONPATH`` set to its extracted copy (and
its folder as the working directory). Other processes on these CPUs skew the figures: the load
average is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from _baseline import BASELINE_REV, ROOT, baseline_root, stats  # benchmarks/ is on sys.path: it holds this script

TIMER = """
import json, sys, time
import prfaas_plan as pp
from prfaas_plan import planner as P
sc = pp.load_scenario("paper-case-study")
out = {}
for n in (128, 2048):
    pp.plan(sc, n_buckets=n)
    runs, cpu = [], []
    for _ in range(int(sys.argv[1])):
        t0, c0 = time.perf_counter(), time.process_time()
        pp.plan(sc, n_buckets=n)
        runs.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    out[f"plan() warm, {n} buckets"] = runs
    out[f"plan() warm, {n} buckets, CPU time"] = cpu
inp = P.plan_inputs(sc)
b = P.buckets(inp, 256)
runs = []
for _ in range(int(sys.argv[1])):
    t0 = time.perf_counter()
    P.solve_exact(inp, b, inp.n_prfaas, inp.n_local)
    runs.append(time.perf_counter() - t0)
out["solve_exact (PrfaaS-PD, both stages), 256 buckets"] = runs
print(json.dumps(out))
"""


SPLIT = """
import json, sys, time
import prfaas_plan as pp
from prfaas_plan.planner import milp
sc = pp.load_scenario("paper-case-study")
n = int(sys.argv[1])
pp.plan(sc, n_buckets=n)
runs, run, lp_path, inside = [], milp._highs_run, milp.lp_path_solution, []
def timed(cost, *args):
    t0 = time.perf_counter()
    out = run(cost, *args)
    kind = "milp" if args[-2].any() else "lp path" if inside else "lp"
    runs.append((kind, time.perf_counter() - t0))
    return out
def timed_path(*args):
    inside.append(1)
    try:
        return lp_path(*args)
    finally:
        inside.pop()
milp._highs_run, milp.lp_path_solution = timed, timed_path
t0 = time.perf_counter()
pp.plan(sc, n_buckets=n)
print(json.dumps({"plan_s": time.perf_counter() - t0, "runs": runs}))
"""
"""One warm ``plan()`` with each HiGHS run timed: MILP stages, the LP path's LPs
(planner.milp.lp_path_solution) and the verification's fixed-count LPs apart."""


def split(n_buckets: int) -> str:
    """Where one warm ``plan()`` of this tree spends its time: HiGHS's MILPs, the LP path, the
    verification's LPs, the rest."""
    ran = subprocess.run([sys.executable, "-c", SPLIT, str(n_buckets)], check=True, capture_output=True, text=True,
                         cwd=ROOT)
    got = json.loads(ran.stdout.strip().splitlines()[-1])
    milp_s = [s for kind, s in got["runs"] if kind == "milp"]
    path_s = [s for kind, s in got["runs"] if kind == "lp path"]
    lp_s = sum(s for kind, s in got["runs"] if kind == "lp")
    rest_s = got["plan_s"] - sum(milp_s) - sum(path_s) - lp_s
    path = (f" + the LP path (PrfaaS-PD) {len(path_s)} LPs {sum(path_s):.3f} s ({', '.join(f'{t:.3f}' for t in path_s)})"
            if path_s else "")
    return (f"  one warm plan() at {n_buckets:,} buckets: {got['plan_s']:.3f} s = {len(milp_s)} HiGHS MILPs "
            f"{sum(milp_s):.3f} s ({', '.join(f'{t:.3f}' for t in milp_s)}: two stages per model, in the order "
            f"{'' if path_s else 'PrfaaS-PD, '}homogeneous PD, naive heterogeneous){path} + the verification's fixed-count LPs {lp_s:.3f} s + "
            f"the rest {rest_s:.3f} s (inputs, buckets, TTFT quantiles, verification)")


def timings(repeats: int, pythonpath: Path | None) -> dict[str, list[float]]:
    """{label: seconds per run} from a fresh process of one tree."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    ran = subprocess.run([sys.executable, "-c", TIMER, str(repeats)], check=True, capture_output=True, text=True,
                         env=env, cwd=pythonpath or ROOT)
    return json.loads(ran.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--baseline", default=BASELINE_REV, help="the commit to compare against (default %(default)s)")
    args = ap.parse_args()
    print(f"# {os.cpu_count()} CPUs, load average before: {os.getloadavg()[0]:.2f}; before = commit {args.baseline}")
    new = timings(args.repeats, None)
    old = timings(args.repeats, baseline_root(args.baseline))
    for label, runs in new.items():
        print(stats(label, runs, old.get(label)))
    for n in (128, 2048):
        print(split(n))
    print(f"# load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
