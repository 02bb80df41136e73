"""Benchmark: one sizing run over 5 GPU types x 4 link tiers x 3 layouts, and a 20-point Pareto
frontier ($/hour against the P90 TTFT SLO) serial and on dask.

Run: python benchmarks/bench_size.py [--repeats 3] [--points 20] [--executor serial,dask] [--workers 2]
     [--frontier-grid default|full]
(targets, issue #15, on 2 cores: the sizing run <= 10 s; the 20-point frontier <= 60 s)

The frontier sizes the scenario's own grid by default (its two GPU types and layouts, every link
tier of ``cost_db/link_tiers.yaml``); ``--frontier-grid full`` sizes the 5 x 4 x 3 grid at every point.

Each figure is min and median of ``--repeats`` runs after one warm-up run (which loads the kernel
tables and the scenario's workload), in this process. A dask run includes the start of its
LocalCluster of ``--workers`` processes, whose workers import the package cold. Other processes
on these CPUs skew the figures: the load average is printed.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
from _baseline import stats  # benchmarks/ is on sys.path: it holds this script

import prfaas_plan as pp
from prfaas_plan.sizing import size
from prfaas_plan.sizing.pareto import frontier_cost_vs_ttft
from prfaas_plan.sizing.result import SizingSLO
from prfaas_plan.sizing.tiers import load_link_tiers

GPUS = ("h200", "h20", "h100", "b200", "a100-80g")
LAYOUTS = ("tp8", "tp8-ep8", "dp8-ep8")


def _timed(fn, repeats: int) -> tuple[list[float], object]:
    out = fn()  # warm-up
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        runs.append(time.perf_counter() - t0)
    return runs, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", default="paper-case-study")
    ap.add_argument("--target-rps", type=float, default=2.0, help="requests/s to size for")
    ap.add_argument("--ttft-p90-s", type=float, default=None, help="P90 TTFT SLO of the sizing run (s)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--points", type=int, default=20, help="TTFT SLOs on the frontier (0: no frontier)")
    ap.add_argument("--slo-range-s", default="2,60", help="lowest,highest P90 TTFT SLO (s), log-spaced")
    ap.add_argument("--executor", default="serial,dask")
    ap.add_argument("--workers", type=int, default=2, help="dask worker processes")
    ap.add_argument("--layouts", default=",".join(LAYOUTS))
    ap.add_argument("--frontier-grid", choices=("default", "full"), default="default")
    args = ap.parse_args()
    sc = pp.load_scenario(args.scenario)
    tiers = tuple(t for t in load_link_tiers() if t.usd_per_gb == 0)[:4]
    kw = {"gpus": GPUS, "link_tiers": tiers, "layouts": tuple(args.layouts.split(","))}
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"# load average before: {os.getloadavg()[0]:.2f} (other processes on these CPUs skew the figures)")
    print(f"# {args.scenario}, target {args.target_rps:g} req/s; GPUs {','.join(GPUS)}; link tiers "
          f"{','.join(t.id for t in tiers)}; layouts {args.layouts}")
    slo = SizingSLO(ttft_s=args.ttft_p90_s)
    runs, res = _timed(lambda: size(sc, args.target_rps, slo, **kw), args.repeats)
    print(stats(f"size(), {len(GPUS)} GPUs x {len(tiers)} link tiers x {len(kw['layouts'])} layouts", runs)
          + f"  -> {res.winner.label}, ${res.winner.usd_per_hour:,.2f}/h, {len(res.candidates)} candidates")
    lo, hi = (float(v) for v in args.slo_range_s.split(","))
    slos = [float(s) for s in np.geomspace(lo, hi, args.points)]
    fkw = kw if args.frontier_grid == "full" else {}
    for ex in [e for e in args.executor.split(",") if e] if args.points > 0 else []:
        workers = args.workers if ex == "dask" else None
        runs, df = _timed(lambda ex=ex, workers=workers: frontier_cost_vs_ttft(
            sc, args.target_rps, slos, executor=ex, workers=workers, progress=False, **fkw), args.repeats)
        win = df[df["series"] == "winner"]
        print(stats(f"{args.points}-point frontier $/hour vs P90 TTFT ({args.frontier_grid} grid), {ex}"
                    + (f" ({workers} workers)" if workers else ""), runs)
              + f"  -> {int(win['feasible'].sum())} feasible, {int(win['pareto'].sum())} Pareto")
    print(f"# load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
