"""Benchmark: what staging memory costs in time, and its figures on the case study.

1. ``plan(paper-case-study)`` with ``decode.staging_memory`` off and on (the fixed point solves a
   few plans per deployment: PrfaaS-PD and both baselines);
2. ``simulate`` at load 0.8 for 6,000 s with staging off and on (on: gated prefill pools and
   event-driven decode admission).

Prints min and median of several runs, then the planner's held memory at load 0.8 against the
simulator's mean / P50 / P99 (GiB per decode GPU), at 100 Gbps and on a 10 Gbps link.
Run: python benchmarks/bench_staging.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _baseline import stats  # noqa: E402

import prfaas_plan as pp  # noqa: E402
from prfaas_plan.sim import simulate  # noqa: E402
from prfaas_plan.units import GIB_BYTES  # noqa: E402


def _timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    sc = pp.load_scenario("paper-case-study")
    on = sc.with_updates(**{"decode.staging_memory": True})
    res, res_on = pp.plan(sc), pp.plan(on)
    print(stats("plan, staging on", _timed(lambda: pp.plan(on), args.repeat),
                _timed(lambda: pp.plan(sc), args.repeat)).replace("before", "staging off"))
    print(stats("simulate 6,000 s at load 0.8, staging on",
                _timed(lambda: simulate(on, res_on, load=0.8, duration_s=6_000), args.repeat),
                _timed(lambda: simulate(sc, res, load=0.8, duration_s=6_000), args.repeat)).replace("before", "staging off"))
    rec = res_on.staging["prfaas-pd"]
    print(f"Lambda_max {res.lambda_max_rps:.3f} -> {res_on.lambda_max_rps:.3f} req/s, binding {res_on.plan.binding}, "
          f"BS_max {rec['batch_max_unstaged']} -> {rec['batch_max']} ({rec['plans_solved']} plans)")
    print(f"planner held at load 0.8: {rec['held_bytes_per_gpu_at_load'] / GIB_BYTES:.3f} GiB per decode GPU "
          f"(of {rec['memory_bytes_per_gpu'] / GIB_BYTES:.2f})")
    for label, events in (("100 Gbps", ()), ("10 Gbps", ((0.0, 1e9, 10.0),))):
        s = simulate(on, res_on, load=0.8, duration_s=6_000, link_events=events).summary()
        print(f"simulated, {label}: mean {s['held_decode_gib_mean']:.3f}, P50 {s['held_decode_gib_p50']:.3f}, "
              f"P99 {s['held_decode_gib_p99']:.3f} GiB per decode GPU")


if __name__ == "__main__":
    main()
