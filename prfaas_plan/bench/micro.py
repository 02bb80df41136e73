"""Timing with torch's benchmark utilities and the microbenchmarks: GEMM, causal and sliding-window
attention, the chunked linear-attention forward and memory copy, each returning a timing record
(:func:`summarize`) with its FLOP/s or GB/s. Torch is imported only inside the functions.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from prfaas_plan.bench.kernels import (
    _torch,
    attention_pair_flops,
    causal_attention,
    chunked_linear_attention,
    linear_attention_flops_per_token,
    sliding_window_attention,
    torch_dtype,
)
from prfaas_plan.units import GB_BYTES, MIB_BYTES

if TYPE_CHECKING:
    import torch

FLOPS_PER_TFLOP = 1e12

MICRO_LOG_DECAY_MAX = 0.1
"""The linear-attention microbenchmark draws per-token log decays uniformly in [-0.1, 0]."""

TIMER_WARMUP_CALLS = 2
"""Untimed calls ``torch.utils.benchmark.Timer.timeit(number=1)`` makes before its timed call
(``max(number // 100, 2)``): every microbenchmark repeat is warmed up by these."""


# --------------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------------


def summarize(times_s: Sequence[float], warmup: int) -> dict:
    """A timing record: every repeat (s), median, min, spread ((max - min) / median, %), and the
    untimed calls made before each repeat (``warmup``)."""
    t = [float(x) for x in times_s]
    med = statistics.median(t)
    return {"times_s": t, "median_s": med, "min_s": min(t), "spread_pct": 100.0 * (max(t) - min(t)) / med,
            "warmup": int(warmup), "repeats": len(t)}


def clock_s() -> float:
    """Seconds on ``torch.utils.benchmark.timer``, the clock of torch's ``Timer``: it
    synchronises the accelerator first, so a difference of two readings spans complete kernels."""
    from torch.utils.benchmark import timer

    return timer()


def time_call(fn: Callable[[], Any], repeats: int) -> dict:
    """Time ``repeats`` single calls of ``fn`` with ``torch.utils.benchmark.Timer.timeit(1)``
    (it makes :data:`TIMER_WARMUP_CALLS` untimed calls before each and synchronises the device
    around it) in torch's current thread count; a :func:`summarize` record."""
    torch = _torch()
    from torch.utils.benchmark import Timer

    timer = Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return summarize([timer.timeit(number=1).times[0] for _ in range(repeats)], TIMER_WARMUP_CALLS)


# --------------------------------------------------------------------------------------------
# Microbenchmarks
# --------------------------------------------------------------------------------------------


def _rand(shape: tuple[int, ...], device: str, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Standard-normal values of ``shape`` (drawn on the CPU from ``seed``), on ``device`` in ``dtype``."""
    torch = _torch()
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen).to(device, dtype)


def bench_gemm(m: int, k: int, n: int, device: str, dtype: str, repeats: int) -> dict:
    """``[m, k] @ [k, n]``: 2 m k n FLOP per call."""
    a, b = _rand((m, k), device, torch_dtype(dtype)), _rand((k, n), device, torch_dtype(dtype), 1)
    rec = time_call(lambda: a @ b, repeats)
    flops = 2.0 * m * k * n
    return {"m": m, "k": k, "n": n, "dtype": dtype, "flops": flops, **rec,
            "tflops_per_s": flops / rec["median_s"] / FLOPS_PER_TFLOP, "tflops_per_s_best": flops / rec["min_s"] / FLOPS_PER_TFLOP}


def bench_attention(tokens: int, heads: int, head_dim: int, device: str, dtype: str, repeats: int,
                    window_tokens: int | None = None) -> dict:
    """Causal (or sliding-window) attention of one ``tokens``-token sequence; FLOPs are the useful
    pairs (``l (l + 1) / 2``, or the window's), as in :func:`prfaas_plan.perf.analytic_prefill`."""
    dt = torch_dtype(dtype)
    q, k, v = (_rand((heads, tokens, head_dim), device, dt, s) for s in range(3))
    scale = 1.0 / math.sqrt(head_dim)
    if window_tokens is None:
        fn = lambda: causal_attention(q, k, v, scale)  # noqa: E731
        pairs = tokens * (tokens + 1) / 2
    else:
        fn = lambda: sliding_window_attention(q, k, v, window_tokens, scale)  # noqa: E731
        w = window_tokens
        pairs = tokens * (tokens + 1) / 2 if tokens <= w else w * (w + 1) / 2 + (tokens - w) * w
    rec = time_call(fn, repeats)
    flops = pairs * attention_pair_flops(heads, head_dim, head_dim)
    return {"tokens": tokens, "heads": heads, "head_dim": head_dim, "window_tokens": window_tokens, "dtype": dtype,
            "flops": flops, **rec, "tflops_per_s": flops / rec["median_s"] / FLOPS_PER_TFLOP}


def bench_linear_attention(tokens: int, heads: int, head_dim: int, flavour: str, device: str, dtype: str,
                           repeats: int) -> dict:
    """The chunked forward alone: 'gdn' (delta rule, scalar decay), 'kda' (delta rule, per-channel
    decay) or 'lightning' (no delta rule, fixed decay)."""
    torch = _torch()
    import torch.nn.functional as F

    dt = torch_dtype(dtype)
    q = F.normalize(_rand((heads, tokens, head_dim), device, dt, 0), dim=-1) / math.sqrt(head_dim)
    k = F.normalize(_rand((heads, tokens, head_dim), device, dt, 1), dim=-1)
    v = _rand((heads, tokens, head_dim), device, dt, 2)
    width = head_dim if flavour == "kda" else 1
    g = (-torch.rand(heads, tokens, width) * MICRO_LOG_DECAY_MAX).to(device, dt)
    beta = None if flavour == "lightning" else torch.rand(heads, tokens).to(device, dt)
    rec = time_call(lambda: chunked_linear_attention(q, k, v, g, beta), repeats)
    flops = tokens * linear_attention_flops_per_token(heads, head_dim, head_dim)
    return {"tokens": tokens, "heads": heads, "head_dim": head_dim, "flavour": flavour, "dtype": dtype,
            "flops": flops, **rec, "tflops_per_s": flops / rec["median_s"] / FLOPS_PER_TFLOP}


def bench_copy(size_mib: int, device: str, repeats: int) -> dict:
    """Device-to-device copy of ``size_mib`` MiB; bandwidth counts bytes read plus bytes written."""
    torch = _torch()
    n = size_mib * MIB_BYTES
    src = torch.empty(n, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    rec = time_call(lambda: dst.copy_(src), repeats)
    moved = 2.0 * n
    return {"size_mib": size_mib, "bytes_moved": moved, **rec, "gb_per_s": moved / rec["median_s"] / GB_BYTES,
            "gb_per_s_best": moved / rec["min_s"] / GB_BYTES}
