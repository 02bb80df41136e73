"""Benchmark: kernel-table load and 1,000-length vectorised lookups (perf.kernels).

Run: python benchmarks/bench_kernels.py   (prints min and median over the repeats)
Cold load clears the loader caches, so it times reading every family file of one GPU and the
first lookup per op (grid build); warm lookups reuse the cached grids, as a planner sweep does.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from prfaas_plan.hardware import load_gpu
from prfaas_plan.perf import kernels
from prfaas_plan.perf.kernels import kernel_tables

REPEATS = 20
LENGTHS = np.geomspace(1, 131072, 1000).round()


def _lookups(kt: kernels.KernelTables) -> None:
    kt.gemm(LENGTHS, 8192, 8192, "fp8_block")
    kt.moe(LENGTHS, 3072, 1536, 8, 256, 8, 1, "fp8_block")
    kt.context_attention(1, LENGTHS, 6, 1, 128, None, "bf16")
    kt.generation_attention(64, LENGTHS, 6, 1, 128, None, "bf16")
    kt.mla_generation(64, LENGTHS, 16, 512, 64)
    kt.linear_attention("gdn", "context", 1, LENGTHS, 8, 128, 128, k_heads=4)
    kt.all_reduce(LENGTHS * 3072 * 2, 8)


def _clear() -> None:
    kernels.clear_caches()


def _stats(name: str, samples: list[float]) -> None:
    print(f"{name}: min {min(samples) * 1e3:.2f} ms, median {statistics.median(samples) * 1e3:.2f} ms "
          f"({len(samples)} repeats)")


def main() -> None:
    gpu = load_gpu("h200")
    cold, warm, per_op = [], [], []
    for _ in range(REPEATS):
        _clear()
        t0 = time.perf_counter()
        kt = kernel_tables(gpu, "sglang")
        _lookups(kt)
        cold.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        _lookups(kt)
        warm.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        kt.gemm(LENGTHS, 8192, 8192, "fp8_block")
        per_op.append(time.perf_counter() - t0)
    _stats("cold: kernel_tables(h200) + load + 7 ops x 1,000 lengths", cold)
    _stats("warm: 7 ops x 1,000 lengths", warm)
    _stats("warm: one gemm x 1,000 lengths", per_op)


if __name__ == "__main__":
    main()
