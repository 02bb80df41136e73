"""Benchmark: one sizing run over 5 GPU types x 4 link tiers x 3 layouts, and a 20-point Pareto
frontier ($/hour against the P90 TTFT SLO) serial and on dask, beside the previous implementation.

Run: python benchmarks/bench_size.py [--repeats 3] [--points 20] [--executor serial,dask] [--workers 2]
     [--ttft-p90-s 4] [--frontier-grid default|full] [--baseline 7c6c8d0] [--baseline-repeats 1]
(targets, issue #15, on 2 cores: the sizing run <= 10 s; the 20-point frontier <= 60 s)

The frontier sizes the scenario's own grid by default (its two GPU types and layouts, every link
tier of ``cost_db/link_tiers.yaml``); ``--frontier-grid full`` sizes the 5 x 4 x 3 grid at every point.

Each figure is min and median of ``--repeats`` runs in this process, after one warm-up sizing
(which loads the kernel tables and the scenario's workload). ``--baseline REV`` (default the
commit before the sizing speed work; empty: none) runs the same figures on commit ``REV``
(:func:`_baseline.baseline_root`) in a fresh process, ``--baseline-repeats`` times each, and
prints before / after and the ratio of the medians. Both trees run the same scenario, but each its
own kernel and serving model: a change there moves both the answer and the time. A dask run
includes the start of its LocalCluster of ``--workers`` processes, whose workers import the package
cold. Other processes on these CPUs skew the figures: the load average is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np
from _baseline import baseline_root, stats  # benchmarks/ is on sys.path: it holds this script

import prfaas_plan as pp
from prfaas_plan.sizing import size
from prfaas_plan.sizing.pareto import frontier_cost_vs_ttft
from prfaas_plan.sizing.result import SizingSLO
from prfaas_plan.sizing.tiers import load_link_tiers

GPUS = ("h200", "h20", "h100", "b200", "a100-80g")
LAYOUTS = ("tp8", "tp8-ep8", "dp8-ep8")
SPEED_BASELINE_REV = "7c6c8d0"
"""The commit before the sizing speed work (one setup per frontier, memoised solves and quantiles)."""


def _timed(fn, repeats: int) -> tuple[list[float], object]:
    runs, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        runs.append(time.perf_counter() - t0)
    return runs, out


def _measure(args: argparse.Namespace, repeats: int) -> list[tuple[str, list[float], str]]:
    """(label, run seconds, what it found) of every figure, on the ``prfaas_plan`` imported here."""
    sc = pp.load_scenario(args.scenario)
    tiers = tuple(t for t in load_link_tiers() if t.usd_per_gb == 0)[:4]
    kw = {"gpus": GPUS, "link_tiers": tiers, "layouts": tuple(args.layouts.split(","))}
    size(sc, args.target_rps)  # warm-up: kernel tables, workload
    slo = SizingSLO(ttft_s=args.ttft_p90_s)
    runs, res = _timed(lambda: size(sc, args.target_rps, slo, **kw), repeats)
    slo_note = f", P90 TTFT <= {args.ttft_p90_s:g} s" if args.ttft_p90_s else ""
    out = [(f"size(), {len(GPUS)} GPUs x {len(tiers)} link tiers x {len(kw['layouts'])} layouts{slo_note}", runs,
            f"{res.winner.label}, ${res.winner.usd_per_hour:,.2f}/h, {len(res.candidates)} candidates")]
    lo, hi = (float(v) for v in args.slo_range_s.split(","))
    slos = [float(s) for s in np.geomspace(lo, hi, args.points)]
    fkw = kw if args.frontier_grid == "full" else {}
    for ex in [e for e in args.executor.split(",") if e] if args.points > 0 else []:
        workers = args.workers if ex == "dask" else None
        runs, df = _timed(lambda ex=ex, workers=workers: frontier_cost_vs_ttft(
            sc, args.target_rps, slos, executor=ex, workers=workers, progress=False, **fkw), repeats)
        win = df[df["series"] == "winner"]
        out.append((f"{args.points}-point frontier $/hour vs P90 TTFT ({args.frontier_grid} grid), {ex}"
                    + (f" ({workers} workers)" if workers else ""), runs,
                    f"{int(win['feasible'].sum())} feasible, {int(win['pareto'].sum())} Pareto, "
                    f"${float(win['usd_per_hour'].sum()):,.2f}/h summed"))
    return out


def _baseline_runs(rev: str, argv: list[str], repeats: int) -> dict[str, tuple[list[float], str]]:
    """The figures of commit ``rev``: this script in a fresh process on that tree's package."""
    root = baseline_root(rev)
    env = dict(os.environ, PYTHONPATH=str(root))
    cmd = [sys.executable, __file__, *argv, "--baseline", "", "--repeats", str(repeats), "--emit-json"]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, cwd=root)
    return {label: (runs, note) for label, runs, note in json.loads(done.stdout.strip().splitlines()[-1])}


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
    ap.add_argument("--baseline", default=SPEED_BASELINE_REV, help="commit to compare with ('': none)")
    ap.add_argument("--baseline-repeats", type=int, default=1)
    ap.add_argument("--emit-json", action="store_true", help=argparse.SUPPRESS)  # the baseline's child process
    args = ap.parse_args()
    if args.emit_json:
        print(json.dumps(_measure(args, args.repeats)))
        return
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"# load average before: {os.getloadavg()[0]:.2f} (other processes on these CPUs skew the figures)")
    print(f"# {args.scenario}, target {args.target_rps:g} req/s; GPUs {','.join(GPUS)}; layouts {args.layouts}")
    argv = [a for a in sys.argv[1:]]
    old = _baseline_runs(args.baseline, argv, args.baseline_repeats) if args.baseline else {}
    for label, runs, note in _measure(args, args.repeats):
        before = old.get(label)
        print(stats(label, runs, before[0] if before else None) + f"  -> {note}"
              + (f"  (before: {before[1]})" if before else ""))
    print(f"# load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
