"""Benchmark: Phi_kv (Eq. 1) for every model in model_db at 1,000 lengths, vectorised.

Run: python benchmarks/bench_phi.py   (target: well under 100 ms for all models)
"""

from __future__ import annotations

import time

import numpy as np

import prfaas_plan as pp
from prfaas_plan.model.arch import list_model_specs
from prfaas_plan.perf.roofline import layer_costs


def main() -> None:
    inst = pp.instance("h200", 8)
    models = list_model_specs()
    costs = {m.id: layer_costs(m) for m in models}  # per-model constants, computed once
    best_s = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for m in models:
            lengths = np.geomspace(1024, m.max_context_tokens, 1000).round()
            s = pp.kv_bytes(m, lengths)
            t = pp.perf.analytic_prefill(m, inst, lengths, costs[m.id]).total_s
            _ = s * 8 / t / 1e9
        best_s = min(best_s, time.perf_counter() - t0)
    print(f"Phi_kv: {len(models)} models x 1,000 lengths in {best_s * 1e3:.1f} ms (best of 5)")


if __name__ == "__main__":
    main()
