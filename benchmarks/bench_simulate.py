"""Benchmark: the simulator's speed, this checkout beside the previous implementation (commit 846aa07).

1. One million Poisson requests at 80% of the paper case study's Lambda_max (issue #18: target
   <= 2 us per event, never slower than before): events, events per request, and us per event
   (min and median over ``--repeats`` runs) for the new code and for the baseline side by side,
   and their ratio (``PRFAAS_SIM_BASELINE_REV`` picks another commit).
2. The Mooncake conversation trace (12,031 requests, per-cluster prefix caches on) replayed on
   the paper case study planned for that trace, both trees side by side (target < 2 s).

Each run is a fresh process of one tree (the baseline with ``PYTHONPATH=baseline_root()``, in that
folder); runs alternate old/new so that a busy machine slows both alike. Times are the process's
CPU time of ``simulate`` (one thread; the plan is made, the trace parsed and pandas imported
before timing), which a loaded machine disturbs far less than wall time.
``events`` counts arrivals and every event scheduled, a link completion superseded before it was
due included (the definition both implementations share, so the counts agree).
Run: python benchmarks/bench_simulate.py [--requests 1000000] [--repeats 3] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
from pathlib import Path

from _baseline import ROOT, baseline_root, stats  # benchmarks/ is on sys.path: it holds this script

# before this round's work (arrivals as events; PRFAAS_SIM_BASELINE_REV=8cdb510: before numpy records and queue logs)
SIM_BASELINE_REV = os.environ.get("PRFAAS_SIM_BASELINE_REV", "846aa07")

TRACE = ROOT.parent / "shared" / "traces" / "mooncake_conversation.jsonl"
POISSON = """
import json, time
import pandas  # imported untimed by both trees (the baseline imports it with prfaas_plan.sim)
import prfaas_plan as pp
from prfaas_plan.sim import simulate
sc = pp.load_scenario("paper-case-study")
res = pp.plan(sc)
rate = 0.8 * res.lambda_max_rps
t0 = time.process_time()
sim = simulate(sc, res, rate_rps=rate, duration_s={requests!r} / rate, seed=0)
cpu_s = time.process_time() - t0
print(json.dumps({{"cpu_s": cpu_s, "events": sim.info["events"], "requests": sim.summary()["requests"]}}))
"""
MOONCAKE = """
import json, time
import pandas  # imported untimed by both trees (the baseline imports it with prfaas_plan.sim)
import prfaas_plan as pp
from prfaas_plan.sim import simulate
sc = pp.load_scenario("paper-case-study").with_updates(**{{
    "workload.kind": "trace", "workload.trace": {trace!r}, "workload.output_tokens": None,
    "workload.prefix_cache_blocks": None}})
res = pp.plan(sc)
trace = pp.load_trace({trace!r})
t0 = time.process_time()
sim = simulate(sc, res, trace=trace, duration_s=None)
cpu_s = time.process_time() - t0
print(json.dumps({{"cpu_s": cpu_s, "events": sim.info["events"], "requests": len(sim.requests)}}))
"""


def timed_run(code: str, pythonpath: Path | None) -> dict:
    """``code`` in a fresh process of this checkout (None) or the baseline tree: the JSON it prints
    last (CPU seconds, events, requests)."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, env=env, cwd=pythonpath or ROOT).stdout
    return json.loads(out.strip().splitlines()[-1])


def side_by_side(code: str, repeats: int) -> dict[str, list[dict]]:
    """``code``'s runs in both trees, alternating old and new."""
    old_root = baseline_root(SIM_BASELINE_REV)
    runs: dict[str, list[dict]] = {"new": [], "old": []}
    for _ in range(repeats):
        runs["old"].append(timed_run(code, old_root))
        runs["new"].append(timed_run(code, None))
    return runs


def report(title: str, runs: dict[str, list[dict]], target: str) -> None:
    """Events, events per request, median CPU s of each tree; us per event and CPU s side by side."""
    print(title)
    for label in ("new", "old"):
        first = runs[label][0]
        print(f"{'this checkout' if label == 'new' else f'before ({SIM_BASELINE_REV})':>16}: {first['requests']:,} requests, "
              f"{first['events']:,} events ({first['events'] / first['requests']:.3f} per request), "
              f"median {statistics.median(r['cpu_s'] for r in runs[label]):.2f} s CPU")
    per_event = {label: [r["cpu_s"] / r["events"] for r in runs[label]] for label in runs}
    print(stats("  per event", per_event["new"], per_event["old"], unit="us") + f"; target {target}")


def bench_poisson(requests: int, repeats: int) -> None:
    report("Poisson arrivals, fixed policy:", side_by_side(POISSON.format(requests=requests), repeats), "<= 2 us/event")


def bench_trace(repeats: int) -> None:
    """The Mooncake conversation trace with prefix caches, both trees."""
    if not TRACE.is_file():
        print(f"Mooncake trace: skipped ({TRACE} not found)")
        return
    runs = side_by_side(MOONCAKE.format(trace=str(TRACE)), repeats)
    report("Mooncake conversation trace, prefix caches on:", runs, "replay < 2 s")
    print(stats("  replay", [r["cpu_s"] for r in runs["new"]], [r["cpu_s"] for r in runs["old"]]))


def profile_poisson(requests: int) -> None:
    """cProfile of one Poisson run of this checkout: the 15 functions with the most own time."""
    import prfaas_plan as pp
    from prfaas_plan.sim import simulate

    sc = pp.load_scenario("paper-case-study")
    res = pp.plan(sc)
    rate = 0.8 * res.lambda_max_rps
    prof = cProfile.Profile()
    prof.runcall(simulate, sc, res, rate_rps=rate, duration_s=requests / rate, seed=0)
    pstats.Stats(prof).sort_stats("tottime").print_stats(15)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000, help="Poisson requests to simulate")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each implementation")
    ap.add_argument("--profile", action="store_true", help="also cProfile one Poisson run of this checkout")
    args = ap.parse_args()
    bench_poisson(args.requests, args.repeats)
    bench_trace(args.repeats)
    if args.profile:
        profile_poisson(args.requests)


if __name__ == "__main__":
    main()
