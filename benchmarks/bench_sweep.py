"""Sweep throughput: cells per second on 1 and 2 workers, local process pool and dask.

    python benchmarks/bench_sweep.py                      # 200 plan cells + 20 simulate cells
    python benchmarks/bench_sweep.py --executors local --workers 1,2,4 --plan-cells 40

Each run starts from an empty output (nothing to resume), writes the per-cell sidecar and the
parquet like a real sweep, and includes the executor's start-up (process pool, or a dask
LocalCluster of that many worker processes). Scaling is cells/s over the 1-worker figure of the
same executor. The plan grid is the paper case study over link.gbps x prfaas.gpus x workload.mu
(exact mode, --n-buckets buckets); the simulate grid is link.gbps x seeds for --duration-s
simulated seconds.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from prfaas_plan.sweeps import read_sidecar, sidecar_dir, sweep


def plan_grid(cells: int, n_buckets: int) -> dict:
    gpus = [8, 16, 24, 32, 40, 48, 56, 64]
    mus = [9.5, 9.9, 10.3, 10.7]
    per = max(1, -(-cells // (len(gpus[:5]) * len(mus))))
    links = [float(round(x, 1)) for x in np.geomspace(5, 200, per)]
    grid = {"name": f"bench-plan-{cells}", "scenario": "paper-case-study", "n_buckets": n_buckets,
            "axes": {"link.gbps": links, "prfaas.gpus": gpus[:5], "workload.mu": mus}}
    return grid


def sim_grid(cells: int, duration_s: float) -> dict:
    links = [10, 25, 50, 100]
    seeds = max(1, cells // len(links))
    return {"name": f"bench-sim-{cells}", "scenario": "paper-case-study", "run": "simulate", "n_buckets": 64,
            "seeds": seeds, "duration_s": duration_s, "axes": {"link.gbps": links}}


def timed(grid: dict, executor: str, workers: int) -> tuple[int, float, int, float, str | None]:
    """(cells, wall seconds, cells that did not plan (error or infeasible), summed seconds inside the
    cells on the workers, the first such cell's error)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.parquet"
        t0 = time.perf_counter()
        df = sweep(grid, executor=executor, workers=workers, out=out, progress=False)
        dt = time.perf_counter() - t0
        busy = sum(r.get("elapsed_s") or 0.0 for r in read_sidecar(sidecar_dir(out)).values())
    errors = df["error"].dropna() if "error" in df else []
    failed = int(df.attrs["failed"]) + int(df.attrs.get("infeasible", 0))  # neither planned
    return len(df), dt, failed, busy, (errors.iloc[0] if len(errors) else None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plan-cells", type=int, default=200)
    ap.add_argument("--sim-cells", type=int, default=20)
    ap.add_argument("--n-buckets", type=int, default=128)
    ap.add_argument("--duration-s", type=float, default=7200.0)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--executors", default="local,dask")
    args = ap.parse_args()
    workers = [int(w) for w in args.workers.split(",")]
    executors = args.executors.split(",")
    grids = [("plan", plan_grid(args.plan_cells, args.n_buckets))]
    if args.sim_cells > 0:
        grids.append(("simulate", sim_grid(args.sim_cells, args.duration_s)))
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"# load average before: {os.getloadavg()[0]:.2f} (other processes on these CPUs skew the figures)")
    print("# cell s: mean seconds inside one cell on its worker; busy: sum of those / (workers x wall)")
    print(f"{'grid':<10} {'executor':<8} {'workers':>7} {'cells':>6} {'failed':>6} {'seconds':>8} {'cells/s':>8} "
          f"{'scaling':>8} {'cell s':>7} {'busy':>5}")
    for kind, grid in grids:
        for ex in executors:
            base = None
            for w in workers:
                n, dt, failed, busy, error = timed(grid, ex, w)
                cps = n / dt
                base = base or cps
                print(f"{kind:<10} {ex:<8} {w:>7} {n:>6} {failed:>6} {dt:>8.1f} {cps:>8.2f} {cps / base:>7.2f}x "
                      f"{busy / n:>7.3f} {busy / (w * dt):>5.0%}", flush=True)
                if failed:  # a failed cell stops early, so it flatters cells/s
                    print(f"# {failed} cells failed (cells/s overstates), e.g.: {error}")
    print(f"# load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
