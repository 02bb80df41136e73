"""Benchmark: warm kernel-table lookups inside the op-based prefill model (perf.ops + perf.kernels).

Run: python benchmarks/bench_prefill_lookups.py   (prints min and median over the repeats)
Every model_db model, 1,000 prompt lengths (1K-128K tokens) as one array, 8xH200 under the
``paper-sglang-0.5.9`` engine profile: one ``prefill_ops`` call per model, after a warm-up call
that fills the per-shape caches; also the same loop with the table lookups stubbed out (the
share of the time spent outside perf.kernels).
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from prfaas_plan.data import builtin_dir
from prfaas_plan.engine import load_engine
from prfaas_plan.hardware import instance
from prfaas_plan.model import load_model
from prfaas_plan.perf import kernels
from prfaas_plan.perf.ops import prefill_ops

REPEATS = 15
LENGTHS = np.linspace(1000, 128000, 1000)


def _loop(models, inst, engine) -> float:
    t0 = time.perf_counter()
    for model in models:
        prefill_ops(model, inst, LENGTHS, engine)
    return time.perf_counter() - t0


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


if __name__ == "__main__":
    main()
