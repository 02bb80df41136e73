"""Benchmark: warm kernel-table lookups inside the op-based prefill model (perf.ops + perf.kernels).

Run: python benchmarks/bench_prefill_lookups.py   (prints min and median over the repeats)
Every model_db model, 1,000 prompt lengths (1K-128K tokens) as one array, 8xH200 under the
``paper-sglang-0.5.9`` engine profile: one ``prefill_ops`` call per model, after a warm-up call
that fills the per-shape caches; also the same loop with the table lookups stubbed out (the
share of the time spent outside perf.kernels). Then, side by side with the previous
implementation (``_baseline.BASELINE_REV``, each in a fresh process): the case study's local
prefill (8xH20, timed from H200 tables through the transfer method) at the ~7,000 distinct
lengths a per-cluster replay pass of the Mooncake trace asks for, and at 100,000 lengths (the
simulator's table of every cacheable length).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _baseline import BASELINE_REV, ROOT, baseline_root, stats  # noqa: E402

from prfaas_plan.data import builtin_dir  # noqa: E402
from prfaas_plan.engine import load_engine  # noqa: E402
from prfaas_plan.hardware import instance  # noqa: E402
from prfaas_plan.model import load_model  # noqa: E402
from prfaas_plan.perf import kernels  # noqa: E402
from prfaas_plan.perf.ops import prefill_ops  # noqa: E402

REPEATS = 15
LENGTHS = np.linspace(1000, 128000, 1000)
SIDE_BY_SIDE_REPEATS = 7

# Runs in a fresh process of either tree; prints {case: [seconds per run]} as JSON.
TIMING_CODE = """
import json, sys, time
import numpy as np
from prfaas_plan.perf.ops import prefill_ops
from prfaas_plan.scenario import load_scenario
repeats = int(sys.argv[1])
sc = load_scenario("paper-case-study")
inst = sc.local_instance
out = {}
for n in (7_000, 100_000):
    lengths = np.arange(1, n + 1, dtype=float) * (128_000 / n)
    prefill_ops(sc.model, inst, lengths[:10], inst.engine_profile)
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        prefill_ops(sc.model, inst, lengths, inst.engine_profile)
        runs.append(time.perf_counter() - t0)
    out[f"case-study local prefill_ops (8xH20 via transfer), {n:,} lengths"] = runs
print(json.dumps(out))
"""


def _loop(models, inst, engine) -> float:
    t0 = time.perf_counter()
    for model in models:
        prefill_ops(model, inst, LENGTHS, engine)
    return time.perf_counter() - t0


def _side_by_side() -> None:
    old_root = baseline_root()
    results: dict[str, tuple[list[float], list[float]]] = {}
    for root in (None, old_root, None, old_root):  # interleaved: the same load on both trees
        env_root = root or ROOT
        done = subprocess.run([sys.executable, "-c", TIMING_CODE, str(SIDE_BY_SIDE_REPEATS)], check=True,
                              capture_output=True, text=True, cwd=env_root, env={**os.environ, "PYTHONPATH": str(env_root)})
        for case, runs in json.loads(done.stdout).items():
            results.setdefault(case, ([], []))[root is not None].extend(runs)
    print(f"side by side: new = this checkout, before = commit {BASELINE_REV}")
    for case, (new, old) in results.items():
        print(stats(case, new, old, "ms"))


def main() -> None:
    engine, inst = load_engine("paper-sglang-0.5.9"), instance("h200", 8)
    models = [load_model(p.stem) for p in sorted(builtin_dir("prfaas_plan.data.model_db").glob("*.yaml"))]
    _loop(models, inst, engine)
    warm = [_loop(models, inst, engine) for _ in range(REPEATS)]
    original = kernels.KernelTables._op
    kernels.KernelTables._op = lambda self, table, exact, near, axes, cost, tiles=None, extra=(): kernels.OpTime(
        np.zeros(LENGTHS.shape), "stub")
    try:
        stubbed = [_loop(models, inst, engine) for _ in range(REPEATS)]
    finally:
        kernels.KernelTables._op = original
    for name, samples in ((f"warm: {len(models)} models x 1,000 lengths prefill_ops (8xH200)", warm),
                          ("same, table lookups stubbed (time outside perf.kernels)", stubbed)):
        print(f"{name}: min {min(samples) * 1e3:.1f} ms, median {statistics.median(samples) * 1e3:.1f} ms "
              f"({len(samples)} repeats)")
    _side_by_side()


if __name__ == "__main__":
    main()
