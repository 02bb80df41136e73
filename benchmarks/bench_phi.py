"""Benchmark: Phi_kv (Eq. 1) for every model in model_db at 1,000 lengths, vectorised.

The kernel model (``prfaas_plan.bandwidth.kv_throughput_gbps``: measured kernel tables on 8xH200, or
8xB200 for a model whose GEMM dtypes need Blackwell's tensor cores: NVFP4 releases) beside the
analytic roofline it replaced for planning, side by side in the same run.
Run: python benchmarks/bench_phi.py   (target, #13: <= 20 ms for all models with the kernel model)
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from prfaas_plan.bandwidth import kv_throughput_gbps, phi_kv_gbps
from prfaas_plan.errors import InvalidInput
from prfaas_plan.hardware import Instance, instance
from prfaas_plan.kvcache import kv_bytes
from prfaas_plan.model import list_model_specs
from prfaas_plan.perf.roofline import analytic_prefill, layer_costs
from prfaas_plan.vocab import GEMM_CLASSES

REPEATS = 7


def _instance_for(model) -> Instance:
    """8xH200, or the first GPU of 8 that has the tensor cores every GEMM class of ``model`` needs."""
    for gpu in ("h200", "b200"):
        inst = instance(gpu, 8)
        try:
            for cls in GEMM_CLASSES:
                inst.gpu.check_gemm_dtype(model.gemm_dtype(cls))
        except InvalidInput:
            continue
        return inst
    raise SystemExit(f"{model.id}: no GPU of h200, b200 runs its GEMM dtypes")


def main() -> None:
    models = list_model_specs()
    instances = {m.id: _instance_for(m) for m in models}
    lengths = {m.id: np.geomspace(1024, m.max_context_tokens, 1000).round() for m in models}
    costs = {m.id: layer_costs(m) for m in models}

    def kernel_model() -> None:
        for m in models:
            kv_throughput_gbps(m, instances[m.id], lengths[m.id])

    def roofline() -> None:
        for m in models:
            phi_kv_gbps(kv_bytes(m, lengths[m.id]), analytic_prefill(m, instances[m.id], lengths[m.id], costs[m.id]).total_s)

    t0 = time.perf_counter()
    kernel_model()  # loads the tables and resolves every shape once
    print(f"first call (tables loaded): {(time.perf_counter() - t0) * 1e3:.1f} ms")
    results = {}
    for name, fn in (("kernel model", kernel_model), ("roofline", roofline)):
        samples = []
        for _ in range(REPEATS):
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
        results[name] = samples
        print(f"Phi_kv, {name}: {len(models)} models x 1,000 lengths: min {min(samples) * 1e3:.1f} ms, "
              f"median {statistics.median(samples) * 1e3:.1f} ms ({REPEATS} runs)")
    ratio = min(results["kernel model"]) / min(results["roofline"])
    print(f"kernel model / roofline (min): {ratio:.1f}x")


if __name__ == "__main__":
    main()
