"""The colocated serving model (issue #14): figures and time per call.

Prints, for MiniMax-M2.5 (vLLM profile) and DeepSeek-V3 (SGLang profile) on 8xH200 TP8 at
ISL 1024 / OSL 1024, TTFT and TPOT at concurrency 1, 16, 64, 256; the DeepSeek-V3 MTP speed-up
curve with its break-even batch (k = 1; acceptance 0.85-0.90 per arXiv 2412.19437); and the time per
``colocated_closed_loop`` call the way the validator calls it (5,221 CSV rows; target <= 3 ms
per call): groups of (model, instance, ISL, OSL) each swept over concurrencies, every group's
step times computed afresh ("cold": the first call of a group times its grid points), and the
same calls again ("warm").

Run: python benchmarks/bench_serving.py
(figures depend on the machine and its load: the target is for 2 idle cores).
"""

from __future__ import annotations

import time

from prfaas_plan import serving
from prfaas_plan.hardware import instance
from prfaas_plan.model import load_model
from prfaas_plan.serving import SpecDecode, colocated_closed_loop, speedup_curve

CASES = [("minimax-m2.5", "vllm"), ("deepseek-v3", "sglang")]
LENGTHS = [(1024, 1024), (2048, 512), (4096, 1024), (8192, 256), (512, 2048), (1024, 128)]
CONCURRENCIES = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def figures() -> None:
    for model_id, engine in CASES:
        model, inst = load_model(model_id), instance("h200", 8, engine=engine)
        for c in (1, 16, 64, 256):
            p = colocated_closed_loop(model, inst, 1024, 1024, c)
            print(f"{model_id:13s} {engine:6s} c={c:4d}  TTFT {p.ttft_s * 1e3:7.1f} ms  TPOT {p.tpot_s * 1e3:6.2f} ms  "
                  f"batch {p.batch:6.1f}  {p.throughput_rps:6.2f} req/s  {p.output_tokens_per_s:7.0f} tok/s  "
                  f"prefill share {p.prefill_share:.3f}  {' '.join(p.notes)}")
    model, inst = load_model("deepseek-v3"), instance("h200", 8, engine="sglang")
    print(speedup_curve(model, inst, 2048.0, [1, 4, 16, 64, 256, 1024], [0.7, 0.85, 0.9], k=1).to_string())
    mtp = SpecDecode(1, acceptance_rates=(0.85,))
    for c in (1, 16, 64, 256):
        base, spec = (colocated_closed_loop(model, inst, 1024, 1024, c, spec=x) for x in (None, mtp))
        print(f"deepseek-v3 MTP k=1 r=0.85 c={c:4d}  TPOT {base.tpot_s * 1e3:6.2f} -> {spec.tpot_s * 1e3:6.2f} ms "
              f"({base.tpot_s / spec.tpot_s:.2f}x)  TTFT {base.ttft_s * 1e3:6.1f} -> {spec.ttft_s * 1e3:6.1f} ms")


def timing() -> None:
    calls, cold_s, warm_s = 0, 0.0, 0.0
    serving._table.cache_clear()  # the step tables' caches (private: a benchmark measures them cold)
    serving._point_times.cache_clear()
    for model_id, engine in CASES:
        model, inst = load_model(model_id), instance("h200", 8, engine=engine)
        colocated_closed_loop(model, inst, 100, 100, 1)  # load the kernel tables once
        for isl, osl in LENGTHS:
            t = time.perf_counter()
            for c in CONCURRENCIES:
                colocated_closed_loop(model, inst, isl, osl, c)
            cold_s += time.perf_counter() - t
            t = time.perf_counter()
            for c in CONCURRENCIES:
                colocated_closed_loop(model, inst, isl, osl, c)
            warm_s += time.perf_counter() - t
            calls += len(CONCURRENCIES)
    print(f"closed_loop: {calls} calls in {len(CASES) * len(LENGTHS)} groups; cold {cold_s / calls * 1e3:.2f} ms per call, "
          f"warm {warm_s / calls * 1e3:.2f} ms per call (target <= 3 ms); {serving._point_times.cache_info().currsize} "
          f"grid points timed")


if __name__ == "__main__":
    figures()
    timing()
