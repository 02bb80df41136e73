"""Benchmark: Phi_kv (Eq. 1) for every model in model_db at 1,000 lengths, vectorised.

Run: python benchmarks/bench_phi.py   (target: well under 100 ms for all models)
"""

from __future__ import annotations

import time

import numpy as np

from prfaas_plan.bandwidth import phi_kv_gbps
from prfaas_plan.hardware import instance
from prfaas_plan.kvcache import kv_bytes
from prfaas_plan.model import list_model_specs
from prfaas_plan.perf.roofline import analytic_prefill, layer_costs


def main() -> None:
    inst = instance("h200", 8)
    models = list_model_specs()
    costs = {m.id: layer_costs(m) for m in models}  # per-model constants, computed once
    best_s = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for m in models:
            lengths = np.geomspace(1024, m.max_context_tokens, 1000).round()
            s = kv_bytes(m, lengths)
            t = analytic_prefill(m, inst, lengths, costs[m.id]).total_s
            _ = phi_kv_gbps(s, t)  # Eq. 1
        best_s = min(best_s, time.perf_counter() - t0)
    print(f"Phi_kv: {len(models)} models x 1,000 lengths in {best_s * 1e3:.1f} ms (best of 5)")


if __name__ == "__main__":
    main()
