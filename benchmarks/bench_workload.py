"""Benchmark: the workload package against the previous implementation (``_baseline.BASELINE_REV``), side by side.

Times, each in a fresh process of either tree (min and median of several runs): the paper
distribution's moments and bucket partial means at 128 and 2,048 buckets, loading the Mooncake
trace, one pass of ``split_cache_replay`` (one prefix cache per cluster) on the frame, the
planner's four fixed-point passes of ``split_cache_buckets`` (replay and per-request prefill
times, on one ``PlanInputs``, as ``planner.milp.plan_exact_per_cluster`` makes them),
``plan_inputs`` of the case study on the trace, one ``prefix_cache_replay``, and ``import
prfaas_plan.workload``. With ``--cli`` also the wall time of ``prfaas-plan simulate
paper-case-study --trace TRACE`` (issue #18's goal: <= 1.5 s).

Run: python benchmarks/bench_workload.py [--cli] [TRACE]
(default TRACE: ../shared/traces/mooncake_conversation.jsonl, else the test fixture)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _baseline import BASELINE_REV, ROOT, baseline_root, cli_wall_s, python_wall_s, stats  # noqa: E402

FULL_TRACE = ROOT.parent / "shared" / "traces" / "mooncake_conversation.jsonl"
FIXTURE_TRACE = ROOT / "tests" / "fixtures" / "traces" / "mooncake_conversation_rows4183-4212.jsonl"
REPEATS = 5
THRESHOLD_TOKENS = 20_000.0  # a routing threshold near the trace plans' (any value exercises the same loop)

# Runs in a fresh process of either tree; prints {case: [seconds per run]} as JSON.
TIMING_CODE = """
import json, sys, time
import numpy as np
from prfaas_plan.workload import load_trace, paper_lengths, prefix_cache_replay, split_cache_replay

path, repeats, threshold = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
pass_thresholds = [float(t) for t in sys.argv[4].split(",")]
def runs(fn, inner=1):
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        out.append((time.perf_counter() - t0) / inner)
    return out
dist = paper_lengths()
def moments(n):
    lengths, probs = dist.buckets(n)
    edges = dist.bucket_edges(n)
    return dist.mean_tokens(), dist.tail_prob(edges), dist.mean_above(edges), dist.mean_below(edges), lengths
trace = load_trace(path)
from prfaas_plan.planner.inputs import plan_inputs, split_cache_buckets
from prfaas_plan.scenario import load_scenario
scenario = load_scenario("paper-case-study").with_trace(path, None)
plan_inputs(scenario)  # kernel tables read once, as in a command
def four_passes():
    inp = plan_inputs(scenario)
    t0 = time.perf_counter()
    for t in pass_thresholds:
        split_cache_buckets(inp, t, 128)
    return time.perf_counter() - t0
print(json.dumps({
    "moments, 128 buckets": runs(lambda: moments(128), 50),
    "moments, 2048 buckets": runs(lambda: moments(2048), 20),
    "load_trace": runs(lambda: load_trace(path)),
    "plan_inputs (case study on the trace)": runs(lambda: plan_inputs(scenario)),
    "split_cache_replay, one pass": runs(lambda: split_cache_replay(trace, None, threshold)),
    "split_cache_buckets, the planner's four passes": [four_passes() for _ in range(repeats)],
    "prefix_cache_replay": runs(lambda: prefix_cache_replay(trace, None)),
}))
"""
PASS_THRESHOLDS = (7344.404255319149, 8790.436170212766, 9269.797872340425, 8971.22340425532)
"""The thresholds the case study's fixed-point passes try on the Mooncake conversation trace."""


def timings(pythonpath: Path | None, trace: Path) -> dict[str, list[float]]:
    """Per-case seconds from a fresh process of the tree on ``pythonpath`` (None = this checkout)."""
    env_root = pythonpath or ROOT
    done = subprocess.run([sys.executable, "-c", TIMING_CODE, str(trace), str(REPEATS), str(THRESHOLD_TOKENS),
                           ",".join(map(repr, PASS_THRESHOLDS))],
                          check=True, capture_output=True, text=True, cwd=env_root,
                          env={**os.environ, "PYTHONPATH": str(env_root)})
    return json.loads(done.stdout)


def main(argv: list[str]) -> None:
    cli = "--cli" in argv
    paths = [a for a in argv if a != "--cli"]
    trace = Path(paths[0]).resolve() if paths else FULL_TRACE if FULL_TRACE.is_file() else FIXTURE_TRACE
    old_root = baseline_root()
    print(f"trace: {trace}; {2 * REPEATS} runs per case (two processes per tree, interleaved); new = this checkout, before = commit {BASELINE_REV}")
    new: dict[str, list[float]] = {}
    old: dict[str, list[float]] = {}
    for root, into in ((None, new), (old_root, old), (None, new), (old_root, old)):  # interleaved: same load on both
        for case, runs in timings(root, trace).items():
            into.setdefault(case, []).extend(runs)
    for case in new:
        unit = "us" if case.startswith("moments") else "ms"
        print(stats(case, new[case], old[case], unit))
    import_new = [python_wall_s("import prfaas_plan.workload", ROOT) for _ in range(REPEATS)]
    import_old = [python_wall_s("import prfaas_plan.workload", old_root) for _ in range(REPEATS)]
    print(stats("import prfaas_plan.workload (fresh process)", import_new, import_old))
    if cli:
        for command in ("plan", "simulate"):
            args = [command, "paper-case-study", "--trace", str(trace)]
            wall_new, wall_old = [], []
            for _ in range(3):  # interleaved: the same load on both trees
                wall_new.append(cli_wall_s(args, ROOT))
                wall_old.append(cli_wall_s(args, old_root))
            print(stats(f"prfaas-plan {command} paper-case-study --trace (wall, imports included)", wall_new, wall_old))


if __name__ == "__main__":
    main(sys.argv[1:])
