"""Benchmark: simulated requests per wall-clock second.

1. The Mooncake conversation trace (12,031 requests, per-cluster prefix caches on) replayed on the
   paper case study planned for that trace (target < 2 s);
2. one million Poisson requests at 80% of the case study's Lambda_max (target < 60 s on one core).

Times cover the simulation only (the plan and the trace loading are done once, before timing).
Run: python benchmarks/bench_simulate.py [--requests 1000000] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from pathlib import Path

import prfaas_plan as pp
from prfaas_plan.sim import simulate

TRACE = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "mooncake_conversation.jsonl"


def bench_trace() -> None:
    if not TRACE.is_file():
        print(f"Mooncake trace: skipped ({TRACE} not found)")
        return
    sc = pp.load_scenario("paper-case-study").with_updates(**{
        "workload.kind": "trace", "workload.trace": str(TRACE), "workload.output_tokens": None,
        "workload.prefix_cache_blocks": None})
    res = pp.plan(sc)
    trace = pp.load_trace(TRACE)
    walls = []
    for _ in range(3):
        t0 = time.perf_counter()
        sim = simulate(sc, res, trace=trace, duration_s=None)
        walls.append(time.perf_counter() - t0)
    n = len(sim.requests)
    best = min(walls)
    print(f"Mooncake conversation trace, {n:,} requests, prefix caches on: best {best:.3f} s "
          f"({n / best:,.0f} requests/s; {sim.info['events'] / best:,.0f} events/s), target < 2 s")


def bench_poisson(requests: int, profile: bool) -> None:
    sc = pp.load_scenario("paper-case-study")
    res = pp.plan(sc)
    rate = 0.8 * res.lambda_max_rps
    duration = requests / rate
    t0 = time.perf_counter()
    if profile:
        prof = cProfile.Profile()
        sim = prof.runcall(simulate, sc, res, rate_rps=rate, duration_s=duration, seed=0)
    else:
        sim = simulate(sc, res, rate_rps=rate, duration_s=duration, seed=0)
    wall = time.perf_counter() - t0
    n = sim.summary()["requests"]  # over a million requests the run keeps totals, not its records
    print(f"Poisson, {n:,} requests ({duration:,.0f} simulated s at {rate:.2f} req/s): {wall:.2f} s "
          f"({n / wall:,.0f} requests/s; {sim.info['events'] / wall:,.0f} events/s), target < 60 s")
    if profile:
        pstats.Stats(prof).sort_stats("tottime").print_stats(12)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000, help="Poisson requests to simulate")
    ap.add_argument("--profile", action="store_true", help="cProfile the Poisson run")
    args = ap.parse_args()
    bench_trace()
    bench_poisson(args.requests, args.profile)


if __name__ == "__main__":
    main()
