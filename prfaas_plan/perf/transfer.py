"""Kernel latencies on a GPU without measured tables, carried over from one that has them.

A method, not a fitted factor: its only inputs are the two GPUs' published specs (dense peak of
the dtype, HBM bandwidth, SM count, boost clock, scale-up bandwidth) and the latency the source
GPU measured. For a kernel of ``flops``, ``bytes_moved`` and ``tiles`` output tiles:

1. **Launch floor.** ``floor_s``, the smallest latency the source measured for that table (e.g.
   2.4 us for a GEMM, 16 us for a fused MoE on H200 with SGLang 0.5.14), is kept unchanged: launch
   and prologue cost is set by the driver and host (A100 and H200 both measure 2.4-2.5 us).
2. **Split the rest by the source's roofline.** ``roof = max(flops / (peak * u), bytes / hbm)``
   with ``peak`` the dense tensor-core peak *of the dtype* (fp8, fp8_block and mxfp4_w4a8 on the FP8
   peak, nvfp4 on the FP4 peak; int4_w4a16 and mxfp4_w4a16 compute in bf16 and only their bytes
   shrink) and ``u`` the wave utilisation below.
   The kernel's efficiency on the source, ``busy = roof_src / (t_src - floor)`` (contract A's
   convention, above the floor), is the share of its time the bounding resource works at peak.
3. **Carry the efficiency over.** That share scales with the target's own roofline
   (``roof_dst / roof_src``: its peak for the dtype, its HBM bandwidth, its SM count); the other
   ``1 - busy`` is latency-bound (dependent instructions, pipeline fill, too few CTAs) and scales
   with the number of waves and the inverse SM clock. A dtype the target has no tensor cores
   for (fp8 on A100) is bad input naming the dtype, not a silent bf16.
4. **Wave quantisation.** ``tiles`` equal tiles run in ``ceil(tiles / SMs)`` waves; the last
   leaves SMs idle, so the compute roofline is divided by ``u = tiles / (waves * SMs)`` on each
   GPU (132 tiles fill an H200's 132 SMs once but need two waves on an H20's 78: u = 0.85).
   Without ``tiles`` both GPUs count as full (split-KV decode kernels fill the machine).
5. **Communication** has no FLOPs: above the floor it scales with the scale-up (NVLink / PCIe)
   bandwidth ratio.

What it assumes: a kernel's efficiency is a property of its code and shape, not of the chip. That
holds within an architecture and the same kernels (H200 -> H100: median error 1-8% per table);
across architectures the engines pick other kernels (FA2 on A100, FlashInfer on Ada) and some
chips reach a smaller fraction of their datasheet peak (L40S under its 350 W), which this method
cannot know: ``benchmarks/bench_kernel_transfer.py`` prints the error per family, dtype and GPU.
L2 size and clocks under power capping are not modelled.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from prfaas_plan.errors import InvalidInput, did_you_mean
from prfaas_plan.hardware import FP8_RATE_DTYPES, GPU, load_gpu
from prfaas_plan.vocab import GEMM_DTYPES, KERNEL_FAMILIES

TILE_ROWS = 128
"""Rows (and columns) of one output tile: the 128x128 CTA tile of Hopper/Ampere GEMM and
FlashAttention kernels (CUTLASS, DeepGEMM, FA2/FA3 defaults)."""


def peak_flops_per_s(gpu: GPU, dtype: str) -> float:
    """Dense tensor-core FLOP/s of ``gpu`` for ``dtype`` (:meth:`~prfaas_plan.hardware.GPU.gemm_peak_flops`),
    refusing what a transfer cannot carry: an unknown dtype, and an FP8-rate kernel onto a GPU
    without FP8 tensor cores (the roofline alone would price it at the bf16 rate)."""
    if dtype not in GEMM_DTYPES:
        raise InvalidInput(f"dtype: unknown GEMM dtype {dtype!r}{did_you_mean(dtype, list(GEMM_DTYPES))}; "
                           f"use one of {', '.join(GEMM_DTYPES)}")
    if dtype in FP8_RATE_DTYPES and gpu.fp8_dense_tflops is None:
        raise InvalidInput(f"dtype: {gpu.id} has no FP8 tensor cores (no fp8_dense_tflops), so it cannot run "
                           f"{dtype} kernels; use bf16 or int4_w4a16 on it")
    return gpu.gemm_peak_flops(dtype)


def _sm_count(gpu: GPU) -> int:
    if gpu.sm_count is None:
        raise InvalidInput(f"sm_count: {gpu.id} has no sm_count, which the kernel transfer needs for wave "
                           "quantisation; add it to the GPU's YAML with a source")
    return gpu.sm_count


def _waves(tiles: np.ndarray, gpu: GPU) -> np.ndarray:
    return np.ceil(np.maximum(tiles, 1.0) / _sm_count(gpu))


def wave_utilisation(tiles, gpu: GPU) -> np.ndarray:
    """Fraction of SM-slots busy when ``tiles`` equal tiles run in waves over ``gpu``'s SMs."""
    tiles = np.maximum(np.asarray(tiles, dtype=float), 1.0)
    return tiles / (_waves(tiles, gpu) * _sm_count(gpu))


def roofline_s(flops, bytes_moved, gpu: GPU, dtype: str, tiles=None) -> np.ndarray:
    """max(compute, memory) seconds on ``gpu``, the compute side stretched by its wave tail."""
    util = 1.0 if tiles is None else wave_utilisation(tiles, gpu)
    return np.maximum(np.asarray(flops, dtype=float) / (peak_flops_per_s(gpu, dtype) * util),
                      np.asarray(bytes_moved, dtype=float) / gpu.memory_bytes_per_s)


def _clock_ratio(src: GPU, dst: GPU) -> float:
    """How much longer a latency-bound cycle count takes on ``dst`` (src / dst boost clock; 1
    when either clock is unpublished, i.e. the same clock is assumed)."""
    if src.boost_clock_ghz is None or dst.boost_clock_ghz is None:
        return 1.0
    return src.boost_clock_ghz / dst.boost_clock_ghz


def transfer_latency_s(family: str, src_latency_s, flops, bytes_moved, src: GPU, dst: GPU, dtype: str,
                       tiles=None, *, floor_s: float | None = None) -> np.ndarray:
    """Seconds a kernel measured at ``src_latency_s`` on ``src`` takes on ``dst`` (arrays broadcast).

    ``flops`` and ``bytes_moved`` are the kernel's work and HBM traffic (``comm``: the bytes a rank
    sends over the scale-up link; flops and dtype are ignored); ``tiles`` its output tiles
    (:func:`gemm_tiles`, ...) or None. ``floor_s`` is the launch floor, the smallest latency
    measured on ``src`` in the kernel's table; None takes the smallest of ``src_latency_s``,
    which is that floor only when a whole measured table is passed.
    """
    if family not in KERNEL_FAMILIES:
        raise InvalidInput(f"family: unknown kernel family {family!r}{did_you_mean(family, list(KERNEL_FAMILIES))}; "
                           f"use one of {', '.join(KERNEL_FAMILIES)}")
    t_src = np.asarray(src_latency_s, dtype=float)
    if t_src.size == 0 or not np.all(np.isfinite(t_src)) or np.any(t_src <= 0):
        raise InvalidInput("src_latency_s: measured latencies must be positive finite seconds")
    floor = float(np.min(t_src)) if floor_s is None else float(floor_s)
    work_s = np.maximum(t_src - floor, 0.0)
    if family == "comm":
        return floor + work_s * (src.scaleup_bytes_per_s / dst.scaleup_bytes_per_s)
    tiles = None if tiles is None else np.asarray(tiles, dtype=float)
    roof_src = roofline_s(flops, bytes_moved, src, dtype, tiles)
    roof_dst = roofline_s(flops, bytes_moved, dst, dtype, tiles)
    busy = np.clip(roof_src / np.maximum(work_s, 1e-15), 0.0, 1.0)
    waves = 1.0 if tiles is None else _waves(tiles, dst) / _waves(tiles, src)
    return floor + work_s * (busy * roof_dst / roof_src + (1 - busy) * waves * _clock_ratio(src, dst))


def _tiles(rows, cols) -> np.ndarray:
    return np.ceil(np.asarray(rows, dtype=float) / TILE_ROWS) * np.ceil(np.asarray(cols, dtype=float) / TILE_ROWS)


def gemm_tiles(m, n) -> np.ndarray:
    """Output tiles of a GEMM with an ``[m x n]`` result."""
    return _tiles(m, n)


def moe_tiles(tokens, inter, topk, experts, moe_tp, moe_ep) -> np.ndarray:
    """Tiles of one rank's fused-MoE gate+up GEMM under balanced routing: the ``tokens * topk /
    moe_ep`` routed rows spread over the experts that got one, each ``2 * inter / moe_tp`` wide."""
    rows = np.asarray(tokens, dtype=float) * topk / moe_ep
    hit = np.minimum(experts / moe_ep, np.maximum(np.ceil(rows), 1.0))
    return hit * _tiles(rows / hit, 2 * inter / moe_tp)


def context_attention_tiles(batch, isl_tokens, heads) -> np.ndarray:
    """Blocks of a FlashAttention prefill: one per 128 queries per head per sequence."""
    return np.asarray(batch, dtype=float) * heads * np.ceil(np.asarray(isl_tokens, dtype=float) / TILE_ROWS)


def _log_distance(a: GPU, b: GPU) -> float:
    """Sum of |log ratio| of two GPUs' bf16 peak, HBM bandwidth and SM count."""
    pairs = [(a.peak_flops, b.peak_flops), (a.memory_bytes_per_s, b.memory_bytes_per_s),
             (float(a.sm_count or 1), float(b.sm_count or 1))]
    return float(sum(abs(np.log(x / y)) for x, y in pairs))


def nearest_measured(dst: GPU, measured_ids: Sequence[str]) -> str:
    """The measured GPU whose tables ``dst`` borrows: ``dst`` itself when measured, else the same
    architecture first, then the smallest sum of |log ratio| of bf16 peak, HBM bandwidth and SM
    count; ties go to the earlier id. Ids are ``hardware_db`` ids (``h200``, ``a100-80g``, ...)."""
    ids = list(dict.fromkeys(measured_ids))
    if not ids:
        raise InvalidInput("measured_ids: no GPU with measured kernel tables to transfer from; import some with "
                           "`prfaas-plan bench import-kernels`")
    if dst.id in ids:
        return dst.id
    return min((_bundled_gpu(i) for i in ids), key=lambda g: (g.arch != dst.arch, _log_distance(g, dst))).id


@functools.lru_cache(maxsize=32)
def _bundled_gpu(gpu_id: str) -> GPU:
    """A measured GPU's hardware entry, read once (the kernel tables are bundled, so are their GPUs)."""
    return load_gpu(gpu_id)
