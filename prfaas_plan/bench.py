"""The microbenchmark harness: measure a device, calibrate the performance model, validate it.

``prfaas-plan bench run`` times, with torch (CUDA when present, else the CPU):

* **GEMMs** over shapes (bf16 on GPUs, fp32 on CPUs), in FLOP/s;
* **causal attention prefill** (``torch.nn.functional.scaled_dot_product_attention``) over
  lengths, and **sliding-window attention** (blocked, see :func:`sliding_window_attention`);
* a **chunked linear-attention forward** in plain torch (chunk 64 tokens; Gated DeltaNet, KDA and
  Lightning flavours, :func:`chunked_linear_attention`);
* **memory-copy bandwidth** (bytes read plus bytes written per second);
* **scaled-down models** built from a ``model_db`` entry's real layer pattern (fewer layers, a
  smaller hidden size, the same attention kinds in the same ratios, :func:`scale_model`). The
  scaled model is an ordinary :class:`~prfaas_plan.arch.ModelSpec`, so the *same*
  :func:`prfaas_plan.perf.analytic_prefill` predicts it; its prefill forward
  (:class:`ScaledModel`) is timed end to end and returns real KV tensors and states, whose bytes
  must equal :func:`prfaas_plan.kvcache.kv_bytes` exactly;
* **KV transfer**: that cache serialised and sent over loopback TCP (127.0.0.1 only) with 1..N
  parallel connections, in Gbps.

``prfaas-plan bench calibrate`` turns a results file into a hardware YAML entry (peak FLOP/s
from the fastest GEMM or the datasheet, memory bandwidth from the copy test, efficiency factors
fitted with :func:`prfaas_plan.calibration.fit_prefill` on the *calibration* cases only, a link
efficiency from the transfer test); ``prfaas-plan bench validate`` compares the model's
predictions with every *held-out* case.

Torch is imported only inside the functions that run on a device: this module imports without
it, so that calibration and validation work on any machine. Units: seconds, bytes, FLOP, tokens,
Gbps = 1e9 bit/s, GB = 1e9 bytes, MiB = 2**20 bytes; names carry their unit.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import platform
import re
import socket
import statistics
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ._data import atomic_write
from .arch import FFN, ModelSpec, Layers, load_model
from .errors import PlanError
from .kvcache import DEFAULT_SETTINGS, CacheSettings, kv_bytes, recurrent_dtype
from .perf import LINEAR_ATTN_CHUNK_TOKENS, layer_costs
from .units import BITS_PER_BYTE, DTYPE_BYTES, GBPS_BITS_PER_S, GB_BYTES, GIB_BYTES, MIB_BYTES, TB_BYTES

RESULTS_SCHEMA = "prfaas-plan-bench/1"
"""Identifier written into every results file (bumped when the layout changes)."""

LOOPBACK_HOST = "127.0.0.1"
"""The only address the transfer test binds and connects to."""

DIM_ALIGN = 8
"""Scaled head dims, ranks and intermediate sizes are rounded to multiples of this many elements
(and never below it), so that GEMM shapes stay vector-friendly and RoPE dims stay even."""

LINEAR_LOG_DECAY_FLOOR = -1.0
"""Most negative per-token log decay of the benchmark's linear-attention gates (decay >= e^-1
per token). Random weights would otherwise give arbitrary decays; bounding them keeps the
chunked form's exp(+-cumulative decay) within fp32/bf16 range over half a chunk (32 tokens)."""

SWA_QUERY_BLOCK_FRACTION = 0.5
"""Sliding-window attention runs in query blocks of ``window * fraction`` tokens, each attending
to ``window + block`` keys under a band mask: 1.5x the useful (query, key) pairs at 0.5."""

ROPE_BASE = 10000.0
"""Rotary embedding base (the benchmark's layers use RoPE like the real models; the value only
changes the numbers, not the cost)."""

LINEAR_CONV_KERNEL_FALLBACK = 4
"""Short-convolution width used only if a spec lacks one (all model_db entries give it)."""

MEMORY_STREAM_EFFICIENCY_MEASURED = 1.0
"""Memory efficiency written for a device whose memory bandwidth *is* the measured copy rate
(CPUs, or GPUs without a datasheet entry): streaming reaches what was measured, by construction."""

DEFAULT_COMM_EFFICIENCY = 0.70
"""Collective efficiency written when no collective was measured (single-device harness; the
value does not enter 1-device predictions). Same value as the datasheet entries' default."""

DEFAULT_DECODE_STEP_OVERHEAD_S = 0.003
"""Decode-step overhead written when none was measured (the harness times prefill only)."""

DEFAULT_NOMINAL_LINE_GBPS = 100.0
"""Nominal line rate (Gbps) the loopback transfer is compared with when neither
``--nominal-gbps`` nor a base GPU entry's ``nic_gbps`` says otherwise."""

CPU_PLACEHOLDER_TDP_W = 200.0
"""Power written for a CPU entry unless ``--tdp-w`` is given: a placeholder, not a measurement
(the harness does not read power); the YAML says so."""

CPU_PLACEHOLDER_PRICE_USD_PER_HOUR = 1.0
"""Price per device-hour written for a CPU entry unless ``--price-usd-per-hour`` is given:
a placeholder, not a quote; the YAML says so."""

MEASURED_SOURCE_URL = "https://pytorch.org/docs/stable/benchmark_utils.html"
"""URL recorded as the ``sources`` entry of a measured hardware YAML (the schema wants an http
URL); the note beside it names the results file and its SHA-256, the actual provenance."""

TRANSFER_BUFFER_BYTES = 1 * MIB_BYTES
"""Receive buffer per connection in the loopback transfer."""

TRANSFER_TIMEOUT_S = 60.0
"""Socket timeout of the loopback transfer: no single setting may run longer."""

TRANSFER_HEADER = struct.Struct("!Q")
"""Framing: every connection starts with the number of payload bytes it will send (uint64)."""

OBSERVATION_FIT_PARAMS = ("gemm", "attention", "prefill_overhead_s")
"""Efficiency factors fitted from an observations YAML by default (linear-attention FLOPs are
too small a share of published end-to-end latencies to identify their efficiency)."""

RESULTS_FIT_PARAMS = ("gemm", "attention", "linear_attention", "prefill_overhead_s")
"""Efficiency factors fitted from a harness results file (its calibration cases include
linear-attention hybrids, so all four are identifiable)."""

STATISTICS = ("min", "median")
"""Per-case timing statistics calibration and validation can use. The default, ``min``, is the
least-disturbed repeat: interference from other processes only ever adds time, so the fastest
repeat is the best estimate of the device's own speed (the median is kept in the results too)."""

DEFAULT_STATISTIC = "min"

CPU_DEFAULT_THREADS = 1
"""torch intra-op threads of the CPU profiles. One thread: with several, every small op ends in
an OpenMP barrier, and on a shared machine a descheduled worker stalls it for a whole time slice
(observed: the same forward varying 30x on 2 busy cores). ``bench run --threads`` overrides."""

FIT_LOWER_START = 1e-3
"""Smallest starting value handed to the least-squares fit for an efficiency factor."""

FLOPS_PER_TFLOP = 1e12
MS_PER_S = 1e3

GATE_A_LOG_RANGE = (-1.0, 0.5)
"""Uniform range of the Gated DeltaNet / KDA ``A_log`` parameters (decay rate = exp(A_log))."""

GATE_DT_BIAS_RANGE = (-1.0, 1.0)
"""Uniform range of the decay gates' ``dt_bias``."""

LIGHTNING_SLOPE_EXPONENT = 8.0
"""Lightning's per-head decay slopes are ``2^(-8 (h + 1) / H)`` (ALiBi's geometric slopes)."""

MICRO_LOG_DECAY_MAX = 0.1
"""The linear-attention microbenchmark draws per-token log decays uniformly in [-0.1, 0]."""

YAML_SIGNIFICANT_DIGITS = 5
"""Measured and fitted numbers are written to YAML with this many significant digits."""

SHA_SHORT_CHARS = 16
"""Characters of a results file's SHA-256 quoted in provenance strings (the header has all 64)."""


# --------------------------------------------------------------------------------------------
# Profiles: what each harness run measures
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScaleSpec:
    """How :func:`scale_model` shrinks a model.

    hidden_size: hidden size of the scaled model (elements).
    dim_scale: factor applied to per-head dims and low ranks (MLA latent, q LoRA rank).
    layers: layer count of the scaled model; each attention kind keeps its share.
    max_experts: routed experts kept at most (MoE).
    max_experts_per_token: top-k at most; the expert width grows by ``k / k_scaled`` so that
        active FFN FLOPs per token keep their ratio to the hidden size.
    vocab_size: vocabulary of the scaled model (tokens).
    """

    hidden_size: int
    dim_scale: float
    layers: int
    max_experts: int
    max_experts_per_token: int
    vocab_size: int


@dataclass(frozen=True)
class Profile:
    """Everything one harness run measures (shapes, lengths, repeats), per device and mode."""

    name: str
    dtype: str  # "fp32" on CPUs, "bf16" on GPUs
    threads: int | None  # torch intra-op threads (None: torch's default)
    warmup: int
    repeats: int
    gemm_shapes: tuple[tuple[int, int, int], ...]  # (m, k, n): [m, k] @ [k, n]
    attention_lengths_tokens: tuple[int, ...]
    attention_heads: int
    attention_head_dim: int
    swa_window_tokens: int
    swa_lengths_tokens: tuple[int, ...]
    linear_lengths_tokens: tuple[int, ...]
    copy_sizes_mib: tuple[int, ...]
    scale: ScaleSpec
    calibration_models: tuple[str, ...]
    validation_models: tuple[str, ...]
    calibration_lengths_tokens: tuple[int, ...]
    holdout_lengths_tokens: tuple[int, ...]
    validation_lengths_tokens: tuple[int, ...]
    transfer_connections: tuple[int, ...]
    transfer_bytes_per_setting: int
    kv_settings: dict = field(default_factory=lambda: {"kv_dtype": "bf16", "engine": "vllm"})


CALIBRATION_MODELS = ("deepseek-v3", "qwen3-next-80b-a3b", "ring-2.5-1t")
"""Layer mixes whose scaled-down forwards the efficiency factors are fitted to: MLA + MoE,
Gated DeltaNet + GQA + MoE, Lightning + MLA + MoE (dense FFN layers included)."""

VALIDATION_MODELS = ("llama-3.1-70b", "kimi-linear-48b-a3b", "mimo-v2-flash")
"""Held-out layer mixes, never seen by the fit: dense GQA, KDA + MLA hybrid, SWA + GQA hybrid."""

_CPU_SCALE = ScaleSpec(hidden_size=256, dim_scale=0.25, layers=8, max_experts=8,
                       max_experts_per_token=2, vocab_size=4096)
_GPU_SCALE = ScaleSpec(hidden_size=2048, dim_scale=1.0, layers=8, max_experts=16,
                       max_experts_per_token=4, vocab_size=32768)

PROFILES: dict[str, Profile] = {
    "cpu-quick": Profile(
        name="cpu-quick", dtype="fp32", threads=CPU_DEFAULT_THREADS, warmup=1, repeats=5,
        gemm_shapes=((512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048),
                     (1024, 256, 1024), (1024, 256, 768), (512, 1024, 256)),
        attention_lengths_tokens=(256, 512, 1024), attention_heads=8, attention_head_dim=32,
        swa_window_tokens=128, swa_lengths_tokens=(512, 1024), linear_lengths_tokens=(512, 1024),
        copy_sizes_mib=(64, 256), scale=_CPU_SCALE,
        calibration_models=CALIBRATION_MODELS, validation_models=VALIDATION_MODELS,
        calibration_lengths_tokens=(128, 256, 512, 1024), holdout_lengths_tokens=(384, 768),
        validation_lengths_tokens=(256, 512, 1024),
        transfer_connections=(1, 2, 4), transfer_bytes_per_setting=64 * MIB_BYTES,
    ),
    "cpu-full": Profile(
        name="cpu-full", dtype="fp32", threads=CPU_DEFAULT_THREADS, warmup=1, repeats=5,
        gemm_shapes=((256, 256, 256), (512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048),
                     (1024, 256, 1024), (2048, 256, 768), (512, 1024, 256), (4096, 256, 1024)),
        attention_lengths_tokens=(256, 512, 1024, 2048), attention_heads=8, attention_head_dim=32,
        swa_window_tokens=128, swa_lengths_tokens=(512, 1024, 2048),
        linear_lengths_tokens=(512, 1024, 2048), copy_sizes_mib=(64, 256, 1024), scale=_CPU_SCALE,
        calibration_models=CALIBRATION_MODELS, validation_models=VALIDATION_MODELS,
        calibration_lengths_tokens=(256, 512, 1024, 2048), holdout_lengths_tokens=(384, 768, 1536),
        validation_lengths_tokens=(256, 512, 1024, 2048),
        transfer_connections=(1, 2, 4, 8), transfer_bytes_per_setting=256 * MIB_BYTES,
    ),
    "cuda-quick": Profile(
        name="cuda-quick", dtype="bf16", threads=None, warmup=2, repeats=3,
        gemm_shapes=((4096, 4096, 4096), (8192, 8192, 8192), (8192, 2048, 14336), (4096, 2048, 4096)),
        attention_lengths_tokens=(2048, 8192), attention_heads=16, attention_head_dim=128,
        swa_window_tokens=128, swa_lengths_tokens=(8192,), linear_lengths_tokens=(8192,),
        copy_sizes_mib=(1024,), scale=_GPU_SCALE,
        calibration_models=CALIBRATION_MODELS, validation_models=VALIDATION_MODELS,
        calibration_lengths_tokens=(1024, 4096, 16384), holdout_lengths_tokens=(8192,),
        validation_lengths_tokens=(2048, 8192),
        transfer_connections=(1, 4), transfer_bytes_per_setting=256 * MIB_BYTES,
    ),
    "cuda-full": Profile(
        name="cuda-full", dtype="bf16", threads=None, warmup=2, repeats=5,
        gemm_shapes=((2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
                     (8192, 2048, 14336), (16384, 2048, 4096), (4096, 2048, 4096), (2048, 7168, 2048)),
        attention_lengths_tokens=(2048, 4096, 8192, 16384), attention_heads=16, attention_head_dim=128,
        swa_window_tokens=128, swa_lengths_tokens=(4096, 16384), linear_lengths_tokens=(4096, 16384),
        copy_sizes_mib=(1024, 4096), scale=_GPU_SCALE,
        calibration_models=CALIBRATION_MODELS, validation_models=VALIDATION_MODELS,
        calibration_lengths_tokens=(1024, 4096, 16384), holdout_lengths_tokens=(2048, 8192),
        validation_lengths_tokens=(2048, 8192, 16384),
        transfer_connections=(1, 2, 4, 8, 16), transfer_bytes_per_setting=1024 * MIB_BYTES,
    ),
}


def profile_for(device_kind: str, quick: bool) -> Profile:
    """The profile for ``device_kind`` ('cpu' or 'cuda') in quick or full mode."""
    return PROFILES[f"{device_kind}-{'quick' if quick else 'full'}"]


# --------------------------------------------------------------------------------------------
# Scaling a model_db entry down (pure Python: no torch)
# --------------------------------------------------------------------------------------------


def _align(value: float) -> int:
    """Round to a positive multiple of :data:`DIM_ALIGN`."""
    return max(DIM_ALIGN, int(round(value / DIM_ALIGN)) * DIM_ALIGN)


def _count(value: float) -> int:
    """Round a head or expert count, never below one."""
    return max(1, int(round(value)))


def scaled_layer_counts(model: ModelSpec, layers: int) -> dict[str, int]:
    """Layers per attention config in a ``layers``-layer copy of ``model``: each config keeps its
    share (largest remainder), every config keeps at least one layer, ties go to the rarer one."""
    counts = model.layer_counts()
    names = [n for n in counts if counts[n] > 0]
    if layers < len(names):
        raise PlanError(f"scale: {layers} layers cannot hold {model.id}'s {len(names)} attention kinds")
    exact = {n: counts[n] * layers / model.layers.count for n in names}
    out = {n: max(1, math.floor(exact[n])) for n in names}
    order = sorted(names, key=lambda n: (-(exact[n] - math.floor(exact[n])), counts[n]))
    i = 0
    while sum(out.values()) < layers:
        out[order[i % len(order)]] += 1
        i += 1
    while sum(out.values()) > layers:  # only when the at-least-one rule overshot
        biggest = max(names, key=lambda n: out[n])
        out[biggest] -= 1
    return out


def _scaled_pattern(model: ModelSpec, layers: int) -> Layers:
    """The scaled layer pattern: the majority config by default, every other config spread evenly
    (its j-th layer at ``floor((j + 1) * layers / count) - 1``, as the real periodic patterns)."""
    counts = scaled_layer_counts(model, layers)
    default = max(counts, key=lambda n: (counts[n], n == model.layers.default))
    taken: set[int] = set()
    at: dict[str, list[int]] = {}
    for name, c in sorted(counts.items(), key=lambda kv: kv[1]):
        if name == default:
            continue
        idx = []
        for j in range(c):
            pos = math.floor((j + 1) * layers / c) - 1
            while pos in taken:  # two minority configs landing on one layer: shift down
                pos = (pos - 1) % layers
            taken.add(pos)
            idx.append(pos)
        at[name] = sorted(idx)
    return Layers(count=layers, default=default, at=at)


def _scale_attention(attn, head_factor: float, dim_scale: float):
    """One attention config with scaled head counts (``head_factor``) and dims (``dim_scale``)."""
    d = lambda v: _align(v * dim_scale)  # noqa: E731 - a one-line helper
    if attn.kind in ("gqa", "swa"):
        kvh = _count(attn.num_kv_heads * head_factor)
        heads = kvh * _count(attn.num_heads * head_factor / kvh)
        return attn.model_copy(update={"num_heads": heads, "num_kv_heads": kvh,
                                       "head_dim_k": d(attn.head_dim_k), "head_dim_v": d(attn.head_dim_v)})
    if attn.kind == "mla":
        return attn.model_copy(update={
            "num_heads": _count(attn.num_heads * head_factor), "kv_lora_rank": d(attn.kv_lora_rank),
            "q_lora_rank": d(attn.q_lora_rank) if attn.q_lora_rank else None,
            "qk_nope_head_dim": d(attn.qk_nope_head_dim), "qk_rope_head_dim": d(attn.qk_rope_head_dim),
            "v_head_dim": d(attn.v_head_dim)})
    if attn.kind == "gdn":
        qk = _count(attn.num_qk_heads * head_factor)
        ratio = max(1, attn.num_v_heads // attn.num_qk_heads)
        return attn.model_copy(update={"num_qk_heads": qk, "num_v_heads": qk * ratio,
                                       "head_dim_k": d(attn.head_dim_k), "head_dim_v": d(attn.head_dim_v)})
    if attn.kind == "kda":
        if attn.num_k_heads not in (None, attn.num_heads) or attn.head_dim_k not in (None, attn.head_dim):
            raise PlanError("scale: KDA with separate key heads or dims is not supported by the bench layers")
        return attn.model_copy(update={"num_heads": _count(attn.num_heads * head_factor),
                                       "head_dim": d(attn.head_dim)})
    return attn.model_copy(update={"num_heads": _count(attn.num_heads * head_factor),
                                   "head_dim": d(attn.head_dim)})


def _scale_ffn(ffn: FFN, ratio: float, layers_orig: int, layers: int, spec: ScaleSpec) -> FFN:
    """FFN widths scaled with the hidden size; top-k capped (expert width compensating so that
    active FLOPs per token keep their ratio); first dense layers keep their share (at least one)."""
    upd: dict[str, Any] = {}
    if ffn.dense_intermediate:
        upd["dense_intermediate"] = _align(ffn.dense_intermediate * ratio)
    if ffn.num_experts:
        k = min(ffn.experts_per_token, spec.max_experts_per_token)
        e = min(ffn.num_experts, max(spec.max_experts, k + 1))
        upd.update(num_experts=e, experts_per_token=k,
                   expert_intermediate=_align(ffn.expert_intermediate * ratio * ffn.experts_per_token / k),
                   shared_intermediate=_align(ffn.shared_intermediate * ratio) if ffn.num_shared_experts else 0)
        if ffn.first_dense_layers:
            upd["first_dense_layers"] = min(layers - 1, max(1, round(ffn.first_dense_layers * layers / layers_orig)))
    return ffn.model_copy(update=upd)


def extra_params(attn, hidden: int) -> int:
    """Parameters of an attention layer that are not GEMM weights (short-conv filters, decay and
    gate biases): counted in ``total_params`` but not in the roofline's weight bytes."""
    if attn.kind == "gdn":
        channels = 2 * attn.num_qk_heads * attn.head_dim_k + attn.num_v_heads * attn.head_dim_v
        return channels * attn.conv_kernel + 2 * attn.num_v_heads  # conv, A_log, dt_bias
    if attn.kind == "kda":
        inner = attn.num_heads * attn.head_dim
        return 3 * inner * attn.conv_kernel + attn.num_heads + inner  # q/k/v convs, A_log, dt_bias
    return 0


def scale_model(model: ModelSpec, spec: ScaleSpec, weight_dtype: str = "fp32") -> ModelSpec:
    """A scaled-down copy of ``model`` (a :class:`ModelSpec`, built with ``model_copy``).

    Kept: every attention kind and FFN kind, their layer shares (:func:`scaled_layer_counts`),
    sliding windows in tokens, GQA group sizes where the head count allows, MoE-vs-dense layers.
    Scaled: hidden size to ``spec.hidden_size`` (ratio ``r``); head dims and ranks by
    ``spec.dim_scale``; head counts by ``r / dim_scale`` (so heads x dims keep their ratio to the
    hidden size); FFN widths by ``r``; experts and top-k capped. Parameter counts are recomputed.
    The copy is re-validated, which also drops ``layer_kinds`` cached on the original.
    """
    if spec.layers < 1 or spec.hidden_size < DIM_ALIGN or spec.dim_scale <= 0:
        raise PlanError("scale: layers, hidden size and dim scale must be positive")
    ratio = spec.hidden_size / model.hidden_size
    head_factor = ratio / spec.dim_scale
    attention = {name: _scale_attention(a, head_factor, spec.dim_scale) for name, a in model.attention.items()}
    pattern = _scaled_pattern(model, spec.layers)
    attention = {n: a for n, a in attention.items() if n in pattern.at or n == pattern.default}
    ffn = _scale_ffn(model.ffn, ratio, model.layers.count, spec.layers, spec)
    draft = model.model_copy(update={
        "id": f"{model.id}-scaled", "name": f"{model.name} (scaled down for benchmarking)",
        "hidden_size": spec.hidden_size, "vocab_size": spec.vocab_size, "attention": attention,
        "layers": pattern, "ffn": ffn, "weight_dtype": weight_dtype, "activation_dtype": weight_dtype,
        "total_params": 1.0, "active_params": 1.0,
        "notes": f"scaled from {model.id}: hidden {model.hidden_size}->{spec.hidden_size}, "
                 f"layers {model.layers.count}->{spec.layers}, dims x{spec.dim_scale}",
    })
    draft = ModelSpec.model_validate(draft.model_dump())
    gemm_params = layer_costs(draft).weight_bytes / DTYPE_BYTES[weight_dtype]
    extra = sum(extra_params(draft.attention[k], draft.hidden_size) for k in draft.layer_kinds)
    f = draft.ffn
    moe_layers = sum(draft.is_moe_layer(i) for i in range(draft.layers.count))
    inactive = moe_layers * (f.num_experts - f.experts_per_token) * 3 * draft.hidden_size * f.expert_intermediate
    total = float(round(gemm_params) + extra)
    return ModelSpec.model_validate({**draft.model_dump(), "total_params": total,
                                     "active_params": total - inactive})


def layer_mix(model: ModelSpec) -> str:
    """A short description of the layer mix, e.g. ``6 kda + 2 mla, MoE 8x2``."""
    counts = model.layer_counts()
    kinds = " + ".join(f"{c} {model.attention[n].kind}" for n, c in sorted(counts.items(), key=lambda kv: -kv[1]) if c)
    f = model.ffn
    return kinds + (f", MoE {f.num_experts}x{f.experts_per_token}" if f.num_experts else ", dense FFN")


# --------------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------------


def summarize(times_s: Sequence[float], warmup: int) -> dict:
    """A timing record: every repeat (s), median, min, spread ((max - min) / median, %)."""
    t = [float(x) for x in times_s]
    med = statistics.median(t)
    return {"times_s": t, "median_s": med, "min_s": min(t), "spread_pct": 100.0 * (max(t) - min(t)) / med,
            "warmup": int(warmup), "repeats": len(t)}


def _torch():
    """Import torch, or say how to install it (a PlanError, one line)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - depends on the environment
        raise PlanError("bench: this command needs torch; install it with pip install 'prfaas-plan[gpu]'") from None
    return torch


TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "fp8": "float8_e4m3fn"}
"""Our dtype names -> torch attribute names."""


def torch_dtype(name: str):
    """The torch dtype for one of our dtype names (fp32, bf16, fp16, fp8)."""
    return getattr(_torch(), TORCH_DTYPES[name])


def _sync(device: str) -> Callable[[], None]:
    torch = _torch()
    if device.startswith("cuda"):
        return torch.cuda.synchronize
    return lambda: None


def time_call(fn: Callable[[], Any], device: str, warmup: int, repeats: int) -> dict:
    """Time ``fn`` ``repeats`` times after ``warmup`` untimed calls (device synchronised around
    each call, so GPU times are complete kernels plus launch overhead)."""
    sync = _sync(device)
    for _ in range(warmup):
        fn()
    sync()
    out = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        out.append(time.perf_counter() - t0)
    return summarize(out, warmup)


# --------------------------------------------------------------------------------------------
# Torch kernels: attention and chunked linear attention
# --------------------------------------------------------------------------------------------


def causal_attention(q, k, v, scale: float):
    """Causal softmax attention with torch SDPA.

    q: [H, T, dq]; k: [Hkv, T, dq]; v: [Hkv, T, dv]; returns [H, T, dv]. Query head ``i`` reads KV
    head ``i // (H / Hkv)`` (GQA, SDPA's ``enable_gqa``). When ``dq != dv`` the narrower side is zero-padded to the wider one (as
    vLLM pads MLA's V for FlashAttention); ``scale`` is passed explicitly so padding does not
    change the scores.
    """
    torch = _torch()
    import torch.nn.functional as F

    dq, dv = q.shape[-1], v.shape[-1]
    width = max(dq, dv)
    if dq < width:
        q, k = F.pad(q, (0, width - dq)), F.pad(k, (0, width - dq))
    if dv < width:
        v = F.pad(v, (0, width - dv))
    o = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True, scale=scale,
                                       enable_gqa=k.shape[0] != q.shape[0])[0]
    del torch
    return o[..., :dv]


def sliding_window_attention(q, k, v, window_tokens: int, scale: float):
    """Causal sliding-window attention: token ``i`` attends to tokens ``i - W + 1 .. i``.

    Queries run in blocks of ``B = W * SWA_QUERY_BLOCK_FRACTION`` tokens; block ``b`` attends to the
    ``W + B`` keys before its end under a band mask, all blocks in one SDPA call. Shapes as
    :func:`causal_attention` (KV heads repeated to the query heads here).
    """
    torch = _torch()
    import torch.nn.functional as F

    heads, tokens, kv_heads = q.shape[0], q.shape[1], k.shape[0]
    if kv_heads != heads:  # materialised: SDPA's masked (memory-efficient) kernels may lack enable_gqa
        k = k.repeat_interleave(heads // kv_heads, dim=0)
        v = v.repeat_interleave(heads // kv_heads, dim=0)
    dq, dv = q.shape[-1], v.shape[-1]
    width = max(dq, dv)
    if dq < width:
        q, k = F.pad(q, (0, width - dq)), F.pad(k, (0, width - dq))
    if dv < width:
        v = F.pad(v, (0, width - dv))
    w = window_tokens
    block = max(1, int(w * SWA_QUERY_BLOCK_FRACTION))
    nblocks = -(-tokens // block)
    pad_end = nblocks * block - tokens
    qp = F.pad(q, (0, 0, 0, pad_end))
    kp = F.pad(k, (0, 0, w, pad_end))  # w zero keys in front: key index j <-> position j - w
    vp = F.pad(v, (0, 0, w, pad_end))
    span = w + block
    kb = kp.unfold(1, span, block).transpose(-1, -2)  # [H, nblocks, span, d]
    vb = vp.unfold(1, span, block).transpose(-1, -2)
    qb = qp.view(heads, nblocks, block, width)
    i = torch.arange(block, device=q.device)[:, None]
    j = torch.arange(span, device=q.device)[None, :]
    band = (j > i) & (j <= i + w)  # key position b*B - w + j within (pos - w, pos]
    start = torch.arange(nblocks, device=q.device)[:, None, None] * block
    mask = band[None] & ((start - w + j[None]) >= 0)  # no keys before position 0
    o = F.scaled_dot_product_attention(qb.transpose(0, 1), kb.transpose(0, 1), vb.transpose(0, 1),
                                       attn_mask=mask[:, None], scale=scale)
    o = o.transpose(0, 1).reshape(heads, nblocks * block, width)[:, :tokens]
    return o[..., :dv]


def chunked_linear_attention(q, k, v, log_decay, beta=None, chunk_tokens: int = LINEAR_ATTN_CHUNK_TOKENS,
                             initial_state=None):
    """Chunked (gated) linear attention, plain torch, the way chunked kernels compute it.

    Recurrence per head, state ``S`` [dk, dv], ``a_t = exp(log_decay_t)`` (per key channel, or one
    value per head broadcast over dk), ``o_t = S_t^T q_t``:

    * delta rule (``beta`` given; Gated DeltaNet, KDA):
      ``S_t = diag(a_t) S_{t-1} + beta_t k_t (v_t - (diag(a_t) S_{t-1})^T k_t)^T``;
    * plain decay (``beta`` None; Lightning): ``S_t = diag(a_t) S_{t-1} + k_t v_t^T``.

    Within a chunk of C tokens the delta rule's WY form ``W = (I + A)^-1 (beta V - beta (K*G) S0)``
    is solved for all chunks at once (one batched unit-lower-triangular solve, fp32); only the
    state is carried chunk to chunk. Decays are taken
    relative to the chunk's middle token so that exp() stays in range.

    q, k: [H, T, dk]; v: [H, T, dv]; log_decay: [H, T, dk] or [H, T, 1] (<= 0); beta: [H, T] or
    None; initial_state: [H, dk, dv] or None. Returns (o [H, T, dv], final state [H, dk, dv]),
    computed in q's dtype except the triangular solve (fp32).
    """
    torch = _torch()
    import torch.nn.functional as F

    heads, tokens, dk = q.shape
    dv = v.shape[-1]
    c = chunk_tokens
    n = -(-tokens // c)
    pad = n * c - tokens
    if pad:  # padded tokens: k = v = 0, beta = 0, no decay -> they change nothing
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        log_decay = F.pad(log_decay, (0, 0, 0, pad))
        beta = F.pad(beta, (0, pad)) if beta is not None else None
    q, k, v = (x.reshape(heads, n, c, x.shape[-1]) for x in (q, k, v))
    g = log_decay.reshape(heads, n, c, log_decay.shape[-1]).cumsum(dim=2)
    g_mid = g[:, :, c // 2: c // 2 + 1]
    rel = torch.exp(g - g_mid)  # Gamma_t / Gamma_mid: the one full-size exp
    k_rel = k / rel  # k_s * Gamma_mid / Gamma_s
    q_rel = q * rel  # q_t * Gamma_t / Gamma_mid
    incl = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()
    a_qk = (q_rel @ k_rel.transpose(-1, -2)).masked_fill(~incl, 0.0)  # [H, n, C, C]
    mid_from_start = torch.exp(g_mid)  # Gamma_mid
    q_abs = q_rel * mid_from_start  # q_t * Gamma_t: decay from the chunk start (inter-chunk term)
    k_end = k_rel * torch.exp(g[:, :, -1:] - g_mid)  # k_s * Gamma_C / Gamma_s: decay to the chunk end
    state_decay = torch.exp(g[:, :, -1:]).transpose(-1, -2)  # [H, n, dk or 1, 1]
    if beta is not None:
        b = beta.reshape(heads, n, c, 1)
        strict = torch.ones(c, c, dtype=torch.bool, device=q.device).tril(-1)
        k_fwd = b * k * rel  # beta_s k_s Gamma_s / Gamma_mid
        a_kk = (k_fwd @ k_rel.transpose(-1, -2)).masked_fill(~strict, 0.0)
        rhs = torch.cat((b * v, k_fwd * mid_from_start), dim=-1).float()  # [beta V, beta (K * Gamma)]
        # (I + A) [U, W_k] = rhs; the diagonal is 1 (unitriangular: A's diagonal is never read)
        sol = torch.linalg.solve_triangular(a_kk.float(), rhs, upper=False, unitriangular=True).to(q.dtype)
        u, w_k = sol[..., :dv], sol[..., dv:]  # [H, n, C, dv], [H, n, C, dk]
    else:
        u, w_k = v, None
    s = initial_state if initial_state is not None else torch.zeros(heads, dk, dv, dtype=q.dtype, device=q.device)
    s = s.to(q.dtype)
    out = torch.empty(heads, n, c, dv, dtype=q.dtype, device=q.device)
    for i in range(n):
        w = u[:, i] - w_k[:, i] @ s if w_k is not None else u[:, i]
        out[:, i] = q_abs[:, i] @ s + a_qk[:, i] @ w
        s = state_decay[:, i] * s + k_end[:, i].transpose(-1, -2) @ w
    return out.reshape(heads, n * c, dv)[:, :tokens], s


def recurrent_linear_attention(q, k, v, log_decay, beta=None, initial_state=None):
    """Token-by-token reference of :func:`chunked_linear_attention` (same arguments; slow, for tests)."""
    torch = _torch()
    heads, tokens, dk = q.shape
    dv = v.shape[-1]
    s = initial_state.clone() if initial_state is not None else torch.zeros(heads, dk, dv, dtype=q.dtype)
    out = torch.empty(heads, tokens, dv, dtype=q.dtype)
    for t in range(tokens):
        a = torch.exp(log_decay[:, t]).expand(heads, dk)
        s = a[..., None] * s
        if beta is not None:
            pred = torch.einsum("hkv,hk->hv", s, k[:, t])
            s = s + beta[:, t, None, None] * k[:, t, :, None] * (v[:, t] - pred)[:, None, :]
        else:
            s = s + k[:, t, :, None] * v[:, t, None, :]
        out[:, t] = torch.einsum("hkv,hk->hv", s, q[:, t])
    return out, s


# --------------------------------------------------------------------------------------------
# Torch layers of the scaled-down models (plain classes holding tensors: no nn.Module needed for
# an inference-only forward, and this module stays importable without torch)
# --------------------------------------------------------------------------------------------


class _Init:
    """Seeded random weights, drawn on the device itself (a GPU's generator is fast for the
    billion-parameter scaled models of the GPU profiles; the same seed on another device gives
    other numbers, which only the timing-irrelevant values see)."""

    def __init__(self, device: str, dtype, seed: int) -> None:
        torch = _torch()
        self.gen = torch.Generator(device=device).manual_seed(seed)
        self.device, self.dtype = device, dtype

    def weight(self, fan_in: int, *shape: int):
        """A GEMM weight of ``shape`` with std ``1 / sqrt(fan_in)``."""
        torch = _torch()
        w = torch.randn(*shape, generator=self.gen, device=self.device)
        return w.mul_(1.0 / math.sqrt(fan_in)).to(self.dtype)

    def uniform(self, low: float, high: float, *shape: int):
        torch = _torch()
        u = torch.rand(*shape, generator=self.gen, device=self.device)
        return (low + (high - low) * u).to(self.dtype)


def _rms(x):
    import torch.nn.functional as F

    return F.rms_norm(x, (x.shape[-1],))


def _rope(x, cos, sin):
    """Rotate-half RoPE on the last dim of ``x`` [..., T, d]; cos/sin [T, d/2]."""
    torch = _torch()
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class RopeTable:
    """cos/sin tables per rotary dim for one forward of ``tokens`` tokens."""

    def __init__(self, tokens: int, device: str, dtype) -> None:
        self.tokens, self.device, self.dtype = tokens, device, dtype
        self._tables: dict[int, tuple] = {}

    def get(self, dim: int):
        if dim not in self._tables:
            torch = _torch()
            inv = ROPE_BASE ** (-torch.arange(0, dim, 2, dtype=torch.float32) / dim)
            ang = torch.arange(self.tokens, dtype=torch.float32)[:, None] * inv[None]
            self._tables[dim] = (ang.cos().to(self.device, self.dtype), ang.sin().to(self.device, self.dtype))
        return self._tables[dim]


def _cache_tokens(x, settings: CacheSettings, keep: int | None = None):
    """A length-growing cache tensor [T, ...] as stored: the last ``keep`` tokens (windows), cast to
    the KV dtype, zero-padded to whole pages when ``settings.block_tokens`` is set. Paged windows
    keep the most recent ``min(ceil(T/B), ceil((W-1)/B) + 1)`` pages (kvcache's rule)."""
    torch = _torch()
    tokens = x.shape[0]
    block = settings.block_tokens
    if block is None:
        kept = x if keep is None else x[max(0, tokens - keep):]
        return kept.to(torch_dtype(settings.kv_dtype)).contiguous()
    pages = -(-tokens // block)
    if keep is not None:
        pages = min(pages, -(-(keep - 1) // block) + 1)
    first_page = -(-tokens // block) - pages
    body = x[first_page * block:]
    out = torch.zeros(pages * block, *x.shape[1:], dtype=torch_dtype(settings.kv_dtype), device=x.device)
    out[: body.shape[0]] = body.to(out.dtype)
    return out


def _conv_state(x, kernel: int, settings: CacheSettings):
    """The short convolution's state: the last ``kernel - 1`` inputs [kernel - 1, channels]
    (zero rows in front when fewer tokens were seen), in the conv dtype."""
    torch = _torch()
    rows = kernel - 1
    tail = x[-rows:] if rows else x[:0]
    out = torch.zeros(rows, x.shape[-1], dtype=torch_dtype(settings.conv_dtype), device=x.device)
    if tail.shape[0]:
        out[rows - tail.shape[0]:] = tail.to(out.dtype)
    return out


def _short_conv(x, weight):
    """Depthwise causal conv1d over tokens with SiLU: x [T, C], weight [C, K] -> [T, C]; tap j
    multiplies the input ``K - 1 - j`` tokens back (``F.conv1d``'s convention), as K fused
    multiply-adds (much faster on CPUs than a grouped convolution with C groups)."""
    torch = _torch()
    import torch.nn.functional as F

    kernel, tokens = weight.shape[-1], x.shape[0]
    xp = F.pad(x, (0, 0, kernel - 1, 0))
    y = xp[kernel - 1:] * weight[:, kernel - 1]
    for j in range(kernel - 1):
        y = torch.addcmul(y, xp[j: j + tokens], weight[:, j])
    return F.silu(y)


def _l2norm(x, factor: float = 1.0):
    """``factor * x / ||x||`` over the last dim, via the fused RMS norm (``||x|| = sqrt(d) rms(x)``)."""
    return _rms(x) * (factor / math.sqrt(x.shape[-1]))


class _Layer:
    """Base of the benchmark layers: ``gemm`` holds the GEMM weights (what the roofline counts),
    ``extra`` the other parameters."""

    gemm: dict
    extra: dict

    def parameters(self) -> list:
        return [*self.gemm.values(), *self.extra.values()]

    def gemm_params(self) -> int:
        return sum(int(w.numel()) for w in self.gemm.values())


class GQALayer(_Layer):
    """Full causal (or sliding-window, for an SWA spec) attention with RoPE; caches K and V."""

    def __init__(self, attn, hidden: int, init: _Init) -> None:
        h, nh, nkv, dk, dv = hidden, attn.num_heads, attn.num_kv_heads, attn.head_dim_k, attn.head_dim_v
        self.attn = attn
        self.gemm = {"wq": init.weight(h, h, nh * dk), "wk": init.weight(h, h, nkv * dk),
                     "wv": init.weight(h, h, nkv * dv), "wo": init.weight(nh * dv, nh * dv, h)}
        self.extra = {}

    def forward(self, x, rope: RopeTable, settings: CacheSettings):
        a, t = self.attn, x.shape[0]
        q = (x @ self.gemm["wq"]).view(t, a.num_heads, a.head_dim_k).transpose(0, 1)
        k = (x @ self.gemm["wk"]).view(t, a.num_kv_heads, a.head_dim_k).transpose(0, 1)
        v = (x @ self.gemm["wv"]).view(t, a.num_kv_heads, a.head_dim_v).transpose(0, 1)
        cos, sin = rope.get(a.head_dim_k)
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        scale = 1.0 / math.sqrt(a.head_dim_k)
        window = getattr(a, "window_tokens", None)
        o = causal_attention(q, k, v, scale) if window is None else sliding_window_attention(q, k, v, window, scale)
        y = o.transpose(0, 1).reshape(t, a.num_heads * a.head_dim_v) @ self.gemm["wo"]
        cache = {"k": _cache_tokens(k.transpose(0, 1), settings, window),
                 "v": _cache_tokens(v.transpose(0, 1), settings, window)}
        return y, cache


class MLALayer(_Layer):
    """Multi-head latent attention, prefill form (latent decompressed into per-head K and V);
    caches the normalised latent and the roped shared key, ``kv_lora_rank + qk_rope_head_dim``
    elements per token."""

    def __init__(self, attn, hidden: int, init: _Init) -> None:
        h, a = hidden, attn
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        self.attn = a
        if a.q_lora_rank:
            self.gemm = {"wq_a": init.weight(h, h, a.q_lora_rank), "wq_b": init.weight(a.q_lora_rank, a.q_lora_rank, a.num_heads * qk)}
        else:
            self.gemm = {"wq": init.weight(h, h, a.num_heads * qk)}
        self.gemm.update({
            "wkv_a": init.weight(h, h, a.kv_lora_rank + a.qk_rope_head_dim),
            "wkv_b": init.weight(a.kv_lora_rank, a.kv_lora_rank, a.num_heads * (a.qk_nope_head_dim + a.v_head_dim)),
            "wo": init.weight(a.num_heads * a.v_head_dim, a.num_heads * a.v_head_dim, h)})
        self.extra = {}

    def forward(self, x, rope: RopeTable, settings: CacheSettings):
        torch = _torch()
        a, t = self.attn, x.shape[0]
        nope, rdim, qk = a.qk_nope_head_dim, a.qk_rope_head_dim, a.qk_nope_head_dim + a.qk_rope_head_dim
        if a.q_lora_rank:
            q = _rms(x @ self.gemm["wq_a"]) @ self.gemm["wq_b"]
        else:
            q = x @ self.gemm["wq"]
        q = q.view(t, a.num_heads, qk).transpose(0, 1)
        kv_a = x @ self.gemm["wkv_a"]
        latent, k_rope = _rms(kv_a[:, : a.kv_lora_rank]), kv_a[:, a.kv_lora_rank:]
        cos, sin = rope.get(rdim)
        k_rope = _rope(k_rope, cos, sin)  # [T, rope], shared by all heads
        q = torch.cat((q[..., :nope], _rope(q[..., nope:], cos, sin)), dim=-1)
        kv = (latent @ self.gemm["wkv_b"]).view(t, a.num_heads, nope + a.v_head_dim).transpose(0, 1)
        k = torch.cat((kv[..., :nope], k_rope[None].expand(a.num_heads, t, rdim)), dim=-1)
        o = causal_attention(q, k, kv[..., nope:], 1.0 / math.sqrt(qk))
        y = o.transpose(0, 1).reshape(t, a.num_heads * a.v_head_dim) @ self.gemm["wo"]
        return y, {"latent": _cache_tokens(latent, settings), "k_rope": _cache_tokens(k_rope, settings)}


def _bounded_log_decay(raw):
    """Log decay <= 0 from a gate pre-activation, floored at :data:`LINEAR_LOG_DECAY_FLOOR`."""
    import torch.nn.functional as F

    return (-F.softplus(raw)).clamp(min=LINEAR_LOG_DECAY_FLOOR)


class GDNLayer(_Layer):
    """Gated DeltaNet: q/k/v short convs, L2-normalised q/k, scalar decay and beta per v-head,
    gated RMS-normed output; caches the conv state and the ``num_v_heads x dk x dv`` state."""

    def __init__(self, attn, hidden: int, init: _Init) -> None:
        a, h = attn, hidden
        self.attn = a
        qkvz = 2 * a.num_qk_heads * a.head_dim_k + 2 * a.num_v_heads * a.head_dim_v
        self.channels = 2 * a.num_qk_heads * a.head_dim_k + a.num_v_heads * a.head_dim_v
        self.gemm = {"w_qkvz": init.weight(h, h, qkvz), "w_ba": init.weight(h, h, 2 * a.num_v_heads),
                     "wo": init.weight(a.num_v_heads * a.head_dim_v, a.num_v_heads * a.head_dim_v, h)}
        self.extra = {"conv": init.weight(a.conv_kernel, self.channels, a.conv_kernel),
                      "a_log": init.uniform(*GATE_A_LOG_RANGE, a.num_v_heads),
                      "dt_bias": init.uniform(*GATE_DT_BIAS_RANGE, a.num_v_heads)}

    def forward(self, x, rope: RopeTable, settings: CacheSettings):
        torch = _torch()
        import torch.nn.functional as F

        a, t = self.attn, x.shape[0]
        qk_w, v_w = a.num_qk_heads * a.head_dim_k, a.num_v_heads * a.head_dim_v
        proj = x @ self.gemm["w_qkvz"]
        mixed, z = proj[:, : self.channels], proj[:, self.channels:]
        conv_state = _conv_state(mixed, a.conv_kernel, settings)
        mixed = _short_conv(mixed, self.extra["conv"])
        rep = a.num_v_heads // a.num_qk_heads
        q = _l2norm(mixed[:, :qk_w].view(t, a.num_qk_heads, a.head_dim_k), 1.0 / math.sqrt(a.head_dim_k))
        k = _l2norm(mixed[:, qk_w: 2 * qk_w].view(t, a.num_qk_heads, a.head_dim_k))
        q = q.transpose(0, 1).repeat_interleave(rep, dim=0)
        k = k.transpose(0, 1).repeat_interleave(rep, dim=0)
        v = mixed[:, 2 * qk_w:].view(t, a.num_v_heads, a.head_dim_v).transpose(0, 1)
        ba = x @ self.gemm["w_ba"]
        beta = torch.sigmoid(ba[:, : a.num_v_heads]).t()  # [H, T]
        g = _bounded_log_decay(ba[:, a.num_v_heads:] + self.extra["dt_bias"]) * self.extra["a_log"].exp()
        g = g.clamp(min=LINEAR_LOG_DECAY_FLOOR).t()[..., None]  # [H, T, 1]
        o, state = chunked_linear_attention(q, k, v, g, beta)
        o = _rms(o.transpose(0, 1)).reshape(t, v_w) * F.silu(z)
        cache = {"conv": conv_state, "recurrent": state.to(torch_dtype(recurrent_dtype(a, settings))).contiguous()}
        return o @ self.gemm["wo"], cache


class KDALayer(_Layer):
    """Kimi Delta Attention: like Gated DeltaNet with a per-channel decay from a low-rank gate,
    separate q/k/v convs, sigmoid output gate; caches conv states and ``H x d x d`` states."""

    def __init__(self, attn, hidden: int, init: _Init) -> None:
        a, h = attn, hidden
        self.attn = a
        inner = a.num_heads * a.head_dim
        self.gemm = {"w_qkv": init.weight(h, h, 3 * inner), "w_g": init.weight(h, h, inner),
                     "wo": init.weight(inner, inner, h), "w_f_a": init.weight(h, h, a.head_dim),
                     "w_f_b": init.weight(a.head_dim, a.head_dim, inner), "w_beta": init.weight(h, h, a.num_heads)}
        self.extra = {"conv": init.weight(a.conv_kernel, 3 * inner, a.conv_kernel),
                      "a_log": init.uniform(*GATE_A_LOG_RANGE, a.num_heads),
                      "dt_bias": init.uniform(*GATE_DT_BIAS_RANGE, inner)}

    def forward(self, x, rope: RopeTable, settings: CacheSettings):
        torch = _torch()

        a, t = self.attn, x.shape[0]
        inner, d, nh = a.num_heads * a.head_dim, a.head_dim, a.num_heads
        mixed = x @ self.gemm["w_qkv"]
        conv_state = _conv_state(mixed, a.conv_kernel, settings)
        mixed = _short_conv(mixed, self.extra["conv"])
        q = _l2norm(mixed[:, :inner].view(t, nh, d), 1.0 / math.sqrt(d)).transpose(0, 1)
        k = _l2norm(mixed[:, inner: 2 * inner].view(t, nh, d)).transpose(0, 1)
        v = mixed[:, 2 * inner:].view(t, nh, d).transpose(0, 1)
        f = (x @ self.gemm["w_f_a"]) @ self.gemm["w_f_b"] + self.extra["dt_bias"]
        g = (_bounded_log_decay(f).view(t, nh, d) * self.extra["a_log"].exp()[:, None]).clamp(min=LINEAR_LOG_DECAY_FLOOR)
        beta = torch.sigmoid(x @ self.gemm["w_beta"]).t()
        o, state = chunked_linear_attention(q, k, v, g.transpose(0, 1), beta)
        o = _rms(o.transpose(0, 1)).reshape(t, inner) * torch.sigmoid(x @ self.gemm["w_g"])
        cache = {"conv": conv_state, "recurrent": state.to(torch_dtype(recurrent_dtype(a, settings))).contiguous()}
        return o @ self.gemm["wo"], cache


class LightningLayer(_Layer):
    """Lightning attention: linear attention with a fixed per-head decay (ALiBi-style slopes),
    no delta rule and no conv; caches the ``H x d x d`` state."""

    def __init__(self, attn, hidden: int, init: _Init) -> None:
        a, h = attn, hidden
        self.attn = a
        inner = a.num_heads * a.head_dim
        self.gemm = {"w_qkv": init.weight(h, h, 3 * inner), "w_g": init.weight(h, h, inner),
                     "wo": init.weight(inner, inner, h)}
        self.extra = {}

    def forward(self, x, rope: RopeTable, settings: CacheSettings):
        torch = _torch()
        import torch.nn.functional as F

        a, t = self.attn, x.shape[0]
        inner, d, nh = a.num_heads * a.head_dim, a.head_dim, a.num_heads
        qkv = F.silu(x @ self.gemm["w_qkv"])
        q = qkv[:, :inner].view(t, nh, d).transpose(0, 1) / math.sqrt(d)
        k = qkv[:, inner: 2 * inner].view(t, nh, d).transpose(0, 1)
        v = qkv[:, 2 * inner:].view(t, nh, d).transpose(0, 1)
        slopes = torch.tensor([2.0 ** (-LIGHTNING_SLOPE_EXPONENT * (i + 1) / nh) for i in range(nh)], device=x.device, dtype=x.dtype)
        g = (-slopes)[:, None, None].expand(nh, t, 1)
        o, state = chunked_linear_attention(q, k, v, g, None)
        o = _rms(o.transpose(0, 1)).reshape(t, inner) * torch.sigmoid(x @ self.gemm["w_g"])
        cache = {"recurrent": state.to(torch_dtype(recurrent_dtype(a, settings))).contiguous()}
        return o @ self.gemm["wo"], cache


ATTENTION_LAYERS = {"gqa": GQALayer, "swa": GQALayer, "mla": MLALayer, "gdn": GDNLayer,
                    "kda": KDALayer, "lightning": LightningLayer}


def _swiglu(x, w_gate_up, w_down):
    import torch.nn.functional as F

    gate, up = (x @ w_gate_up).chunk(2, dim=-1)
    return (F.silu(gate) * up) @ w_down


class DenseFFN(_Layer):
    """SwiGLU FFN of ``intermediate`` width (gate and up fused)."""

    def __init__(self, hidden: int, intermediate: int, init: _Init) -> None:
        self.gemm = {"w_gate_up": init.weight(hidden, hidden, 2 * intermediate),
                     "w_down": init.weight(intermediate, intermediate, hidden)}
        self.extra = {}

    def forward(self, x):
        return _swiglu(x, self.gemm["w_gate_up"], self.gemm["w_down"])


class MoEFFN(_Layer):
    """Routed SwiGLU experts (softmax over the top-k router logits), tokens grouped per expert,
    plus shared experts (fused into one SwiGLU of ``num_shared * shared_intermediate``)."""

    def __init__(self, hidden: int, ffn: FFN, init: _Init) -> None:
        e, i = ffn.num_experts, ffn.expert_intermediate
        self.top_k = ffn.experts_per_token
        self.gemm = {"router": init.weight(hidden, hidden, e), "w_gate_up": init.weight(hidden, e, hidden, 2 * i),
                     "w_down": init.weight(i, e, i, hidden)}
        if ffn.num_shared_experts:
            s = ffn.num_shared_experts * ffn.shared_intermediate
            self.gemm.update({"shared_gate_up": init.weight(hidden, hidden, 2 * s), "shared_down": init.weight(s, s, hidden)})
        self.extra = {}

    def forward(self, x):
        torch = _torch()
        t, e = x.shape[0], self.gemm["router"].shape[1]
        weights, experts = (x @ self.gemm["router"]).topk(self.top_k, dim=-1)
        weights = torch.softmax(weights.float(), dim=-1).to(x.dtype)
        flat = experts.reshape(-1)
        order = flat.argsort()
        counts = torch.bincount(flat, minlength=e).tolist()
        token = order // self.top_k
        xs = x[token]  # tokens grouped by expert
        ys = torch.empty_like(xs)
        start = 0
        for j, n in enumerate(counts):
            if n:
                ys[start: start + n] = _swiglu(xs[start: start + n], self.gemm["w_gate_up"][j], self.gemm["w_down"][j])
            start += n
        ys.mul_(weights.reshape(-1)[order, None])
        out = torch.zeros_like(x).index_add_(0, token, ys)
        if "shared_gate_up" in self.gemm:
            out = out + _swiglu(x, self.gemm["shared_gate_up"], self.gemm["shared_down"])
        del t
        return out


class ScaledModel:
    """A runnable model for a (scaled-down) :class:`ModelSpec`: embeddings, one attention layer of
    the spec's kind per layer, dense or MoE SwiGLU FFNs, pre-norms, an LM head on the last token.

    Its GEMM weights are exactly the ones :func:`prfaas_plan.perf.layer_costs` counts (tested), so
    the roofline's FLOPs are this model's FLOPs; elementwise work (norms, RoPE, gates) is what the
    fitted efficiency factors absorb.
    """

    def __init__(self, spec: ModelSpec, device: str = "cpu", dtype: str | None = None, seed: int = 0) -> None:
        self.spec, self.device = spec, device
        self.dtype = torch_dtype(dtype or spec.weight_dtype)
        init = _Init(device, self.dtype, seed)
        h = spec.hidden_size
        self.embed = init.weight(1, spec.vocab_size, h)
        self.lm_head = init.weight(h, h, spec.vocab_size)
        self.layers = []
        for i, name in enumerate(spec.layer_kinds):
            attn = ATTENTION_LAYERS[spec.attention[name].kind](spec.attention[name], h, init)
            ffn = MoEFFN(h, spec.ffn, init) if spec.is_moe_layer(i) else DenseFFN(h, spec.ffn.dense_intermediate, init)
            self.layers.append((attn, ffn))

    def gemm_params(self) -> int:
        """GEMM weights (embedding and LM head included): what the roofline's weight bytes count."""
        return int(self.embed.numel() + self.lm_head.numel()) + sum(a.gemm_params() + f.gemm_params() for a, f in self.layers)

    def total_params(self) -> int:
        return int(self.embed.numel() + self.lm_head.numel()) + sum(
            sum(int(p.numel()) for p in (*a.parameters(), *f.parameters())) for a, f in self.layers)

    def prefill(self, token_ids, settings: CacheSettings | None = None):
        """One request's prefill: returns (last-token logits [vocab], cache), the cache one dict of
        tensors per layer, stored as ``settings`` says (KV dtype, state dtypes, pages)."""
        torch = _torch()
        settings = settings or DEFAULT_SETTINGS
        with torch.inference_mode():
            x = self.embed[token_ids]
            rope = RopeTable(x.shape[0], self.device, self.dtype)
            cache = []
            for attn, ffn in self.layers:
                y, c = attn.forward(_rms(x), rope, settings)
                x = x + y
                x = x + ffn.forward(_rms(x))
                cache.append(c)
            logits = _rms(x[-1:]) @ self.lm_head
        return logits[0], cache

    def token_ids(self, tokens: int, seed: int = 0):
        torch = _torch()
        gen = torch.Generator().manual_seed(seed)
        return torch.randint(0, self.spec.vocab_size, (tokens,), generator=gen).to(self.device)


def cache_nbytes(cache: list[dict]) -> int:
    """Bytes of a cache as returned by :meth:`ScaledModel.prefill` (sum of ``tensor.nbytes``)."""
    return sum(int(t.nbytes) for layer in cache for t in layer.values())


# --------------------------------------------------------------------------------------------
# Serialising a cache (for the transfer test)
# --------------------------------------------------------------------------------------------


def serialise_cache(cache: list[dict]) -> bytes:
    """Frame a cache as bytes: uint64 header length, a JSON header (per tensor: layer, name,
    dtype, shape, nbytes), then every tensor's raw bytes in header order (host copies)."""
    torch = _torch()
    header, blobs = [], []
    for i, layer in enumerate(cache):
        for name, t in layer.items():
            t = t.detach().contiguous().cpu()
            header.append({"layer": i, "name": name, "dtype": str(t.dtype).removeprefix("torch."),
                           "shape": list(t.shape), "nbytes": int(t.nbytes)})
            blobs.append(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    head = json.dumps(header).encode()
    return TRANSFER_HEADER.pack(len(head)) + head + b"".join(blobs)


def deserialise_cache(data: bytes) -> list[dict]:
    """Inverse of :func:`serialise_cache` (CPU tensors)."""
    torch = _torch()
    (n,) = TRANSFER_HEADER.unpack_from(data, 0)
    offset = TRANSFER_HEADER.size
    header = json.loads(data[offset: offset + n])
    offset += n
    layers: list[dict] = []
    for item in header:
        while len(layers) <= item["layer"]:
            layers.append({})
        raw = torch.frombuffer(bytearray(data[offset: offset + item["nbytes"]]), dtype=torch.uint8) \
            if item["nbytes"] else torch.empty(0, dtype=torch.uint8)
        layers[item["layer"]][item["name"]] = raw.view(getattr(torch, item["dtype"])).reshape(item["shape"])
        offset += item["nbytes"]
    return layers


# --------------------------------------------------------------------------------------------
# Loopback TCP transfer (no torch)
# --------------------------------------------------------------------------------------------


def loopback_transfer(payload: bytes, connections: int, total_bytes: int, timeout_s: float = TRANSFER_TIMEOUT_S,
                      keep_received: bool = False) -> dict:
    """Send ``total_bytes`` (``payload`` repeated; split evenly over ``connections`` parallel TCP
    connections) to a receiver on 127.0.0.1 and time it.

    Each connection sends a uint64 byte count, then its share; the clock runs from the moment all
    connections are open until every receiver has read its share. Returns bytes, seconds, Gbps
    and, with ``keep_received``, the bytes each connection received (for integrity tests: keep
    ``total_bytes`` small). Bounded: sockets time out after ``timeout_s``.
    """
    if connections < 1 or total_bytes < 1 or not payload:
        raise PlanError("transfer: connections and bytes must be positive and the payload non-empty")
    shares = [total_bytes // connections + (1 if i < total_bytes % connections else 0) for i in range(connections)]
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((LOOPBACK_HOST, 0))
    server.listen(connections)
    server.settimeout(timeout_s)
    port = server.getsockname()[1]
    received = [0] * connections
    kept: list[bytearray] = [bytearray() for _ in range(connections)]
    errors: list[BaseException] = []
    ready = threading.Barrier(connections + 1, timeout=timeout_s)
    done = threading.Barrier(connections + 1, timeout=timeout_s)

    def receive(conn: socket.socket, slot: int) -> None:
        try:
            conn.settimeout(timeout_s)
            head = b""
            while len(head) < TRANSFER_HEADER.size:
                chunk = conn.recv(TRANSFER_HEADER.size - len(head))
                if not chunk:
                    raise ConnectionError("closed before the header")
                head += chunk
            (expected,) = TRANSFER_HEADER.unpack(head)
            buf = bytearray(TRANSFER_BUFFER_BYTES)
            view = memoryview(buf)
            got = 0
            while got < expected:
                n = conn.recv_into(view, min(len(buf), expected - got))
                if n == 0:
                    raise ConnectionError("closed early")
                if keep_received:
                    kept[slot] += view[:n]
                got += n
            received[slot] = got
        except BaseException as exc:  # noqa: BLE001 - reported to the caller below
            errors.append(exc)
        finally:
            conn.close()

    def send(share: int) -> None:
        try:
            sock = socket.create_connection((LOOPBACK_HOST, port), timeout=timeout_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            ready.wait()
            sock.sendall(TRANSFER_HEADER.pack(share))
            view = memoryview(payload)
            left = share
            while left > 0:
                n = min(left, len(view))
                sock.sendall(view[:n])
                left -= n
            sock.close()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
            ready.abort()

    senders = [threading.Thread(target=send, args=(s,), daemon=True) for s in shares]
    for th in senders:
        th.start()
    receivers = []
    try:
        for slot in range(connections):
            conn, _ = server.accept()
            th = threading.Thread(target=lambda c=conn, s=slot: (receive(c, s), done.wait()), daemon=True)
            th.start()
            receivers.append(th)
        ready.wait()
        t0 = time.perf_counter()
        done.wait()
        elapsed = time.perf_counter() - t0
    except (threading.BrokenBarrierError, OSError) as exc:
        raise PlanError(f"transfer: loopback test failed ({errors[0] if errors else exc})") from None
    finally:
        server.close()
    for th in (*senders, *receivers):
        th.join(timeout_s)
    if errors or sum(received) != total_bytes:
        raise PlanError(f"transfer: loopback test failed ({errors[0] if errors else 'short read'})")
    out = {"connections": connections, "bytes": total_bytes, "seconds": elapsed,
           "gbps": total_bytes * BITS_PER_BYTE / elapsed / GBPS_BITS_PER_S}
    if keep_received:
        out["received"] = [bytes(k) for k in kept]
    return out


# --------------------------------------------------------------------------------------------
# Microbenchmarks
# --------------------------------------------------------------------------------------------


def _rand(shape, device: str, dtype, seed: int = 0):
    torch = _torch()
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen).to(device, dtype)


def bench_gemm(m: int, k: int, n: int, device: str, dtype: str, warmup: int, repeats: int) -> dict:
    """``[m, k] @ [k, n]``: 2 m k n FLOP per call."""
    a, b = _rand((m, k), device, torch_dtype(dtype)), _rand((k, n), device, torch_dtype(dtype), 1)
    rec = time_call(lambda: a @ b, device, warmup, repeats)
    flops = 2.0 * m * k * n
    return {"m": m, "k": k, "n": n, "dtype": dtype, "flops": flops, **rec,
            "tflops_per_s": flops / rec["median_s"] / FLOPS_PER_TFLOP, "tflops_per_s_best": flops / rec["min_s"] / FLOPS_PER_TFLOP}


def attention_pair_flops(heads: int, dk: int, dv: int) -> float:
    """FLOPs per (query, key) pair of softmax attention, as the roofline counts: 2 H (dk + dv)."""
    return 2.0 * heads * (dk + dv)


def bench_attention(tokens: int, heads: int, head_dim: int, device: str, dtype: str, warmup: int, repeats: int,
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
    rec = time_call(fn, device, warmup, repeats)
    flops = pairs * attention_pair_flops(heads, head_dim, head_dim)
    return {"tokens": tokens, "heads": heads, "head_dim": head_dim, "window_tokens": window_tokens, "dtype": dtype,
            "flops": flops, **rec, "tflops_per_s": flops / rec["median_s"] / FLOPS_PER_TFLOP}


def linear_attention_flops_per_token(heads: int, dk: int, dv: int) -> float:
    """FLOPs per token of chunked linear attention as the roofline counts them (perf.layer_costs):
    ``H (4 dk dv + 2 C (dk + dv))``."""
    return heads * (4.0 * dk * dv + 2.0 * LINEAR_ATTN_CHUNK_TOKENS * (dk + dv))


def bench_linear_attention(tokens: int, heads: int, head_dim: int, flavour: str, device: str, dtype: str,
                           warmup: int, repeats: int) -> dict:
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
    rec = time_call(lambda: chunked_linear_attention(q, k, v, g, beta), device, warmup, repeats)
    flops = tokens * linear_attention_flops_per_token(heads, head_dim, head_dim)
    return {"tokens": tokens, "heads": heads, "head_dim": head_dim, "flavour": flavour, "dtype": dtype,
            "flops": flops, **rec, "tflops_per_s": flops / rec["median_s"] / FLOPS_PER_TFLOP}


def bench_copy(size_mib: int, device: str, warmup: int, repeats: int) -> dict:
    """Device-to-device copy of ``size_mib`` MiB; bandwidth counts bytes read plus bytes written."""
    torch = _torch()
    n = size_mib * MIB_BYTES
    src = torch.empty(n, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    rec = time_call(lambda: dst.copy_(src), device, warmup, repeats)
    moved = 2.0 * n
    return {"size_mib": size_mib, "bytes_moved": moved, **rec, "gb_per_s": moved / rec["median_s"] / GB_BYTES,
            "gb_per_s_best": moved / rec["min_s"] / GB_BYTES}


# --------------------------------------------------------------------------------------------
# The harness
# --------------------------------------------------------------------------------------------


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when torch sees a GPU, else 'cpu'; 'cuda' without a GPU is an error."""
    torch = _torch()
    if device not in ("auto", "cpu", "cuda"):
        raise PlanError(f"--device: {device!r} is not one of auto, cpu, cuda")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise PlanError("--device cuda: torch sees no CUDA device; use --device cpu or auto")
    return device


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_info(device: str) -> dict:
    """Name, memory and software versions of the device a run measures."""
    torch = _torch()
    info = {"kind": device, "torch": torch.__version__, "python": platform.python_version(),
            "platform": platform.platform(), "threads": torch.get_num_threads(), "cpu": _cpu_name(),
            "cpu_count": os.cpu_count()}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        info.update(name=props.name, memory_bytes=int(props.total_memory), cuda=torch.version.cuda,
                    capability=f"{props.major}.{props.minor}", multiprocessors=props.multi_processor_count)
    else:
        try:
            memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
            memory = 0
        info.update(name=info["cpu"], memory_bytes=int(memory))
    return info


@dataclass
class _Step:
    """One unit of work of the harness (the progress bar advances once per step)."""

    label: str
    run: Callable[[], None]


def model_case_name(model_id: str, tokens: int) -> str:
    return f"{model_id}@{tokens}"


def run_harness(device: str = "auto", quick: bool = False, threads: int | None = None, progress: bool = True,
                profile: Profile | None = None, seed: int = 0) -> dict:
    """Run every microbenchmark, the scaled-down model prefills and the transfer test; return the
    results (JSON-serialisable). Model cases are timed round-robin (one repeat of every case per
    round) so that a transient slowdown of the machine spreads over all cases instead of biasing one."""
    torch = _torch()
    dev = resolve_device(device)
    prof = profile or profile_for(dev, quick)
    threads = prof.threads if threads is None else threads
    if threads is not None and threads < 1:
        raise PlanError("--threads: give at least 1 thread")
    threads_before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(int(threads))
    try:
        return _run_profile(torch, dev, quick, prof, progress, seed)
    finally:
        torch.set_num_threads(threads_before)


def _run_profile(torch, dev: str, quick: bool, prof: Profile, progress: bool, seed: int) -> dict:
    """The body of :func:`run_harness` (threads already set)."""
    dtype = prof.dtype
    settings = CacheSettings(**prof.kv_settings)
    results: dict[str, Any] = {
        "schema": RESULTS_SCHEMA, "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": device_info(dev), "quick": quick, "profile": asdict(prof),
        "settings": {"dtype": dtype, "warmup": prof.warmup, "repeats": prof.repeats, "seed": seed,
                     "cache_settings": asdict(settings), "linear_chunk_tokens": LINEAR_ATTN_CHUNK_TOKENS,
                     "linear_log_decay_floor": LINEAR_LOG_DECAY_FLOOR,
                     "swa_query_block_fraction": SWA_QUERY_BLOCK_FRACTION,
                     "timing": "wall clock around each call, device synchronised; model cases round-robin"},
        "gemm": [], "attention": [], "swa": [], "linear_attention": [], "memory": [], "models": [], "transfer": {},
    }
    w, r = prof.warmup, prof.repeats
    steps: list[_Step] = []
    for m, k, n in prof.gemm_shapes:
        steps.append(_Step(f"gemm {m}x{k}x{n}", lambda m=m, k=k, n=n: results["gemm"].append(
            bench_gemm(m, k, n, dev, dtype, w, r))))
    for l in prof.attention_lengths_tokens:
        steps.append(_Step(f"attention {l}", lambda l=l: results["attention"].append(
            bench_attention(l, prof.attention_heads, prof.attention_head_dim, dev, dtype, w, r))))
    for l in prof.swa_lengths_tokens:
        steps.append(_Step(f"swa {l}", lambda l=l: results["swa"].append(
            bench_attention(l, prof.attention_heads, prof.attention_head_dim, dev, dtype, w, r, prof.swa_window_tokens))))
    for l in prof.linear_lengths_tokens:
        for flavour in ("gdn", "kda", "lightning"):
            steps.append(_Step(f"linear {flavour} {l}", lambda l=l, f=flavour: results["linear_attention"].append(
                bench_linear_attention(l, prof.attention_heads, prof.attention_head_dim, f, dev, dtype, w, r))))
    for size in prof.copy_sizes_mib:
        steps.append(_Step(f"copy {size} MiB", lambda s=size: results["memory"].append(bench_copy(s, dev, w, r))))

    # scaled-down models: build once, warm up, then time round-robin
    cases: list[dict] = []
    models: dict[str, ScaledModel] = {}
    for model_id in (*prof.calibration_models, *prof.validation_models):
        spec = scale_model(load_model(model_id), prof.scale, dtype)
        calibration_model = model_id in prof.calibration_models
        if calibration_model:
            plan = [(l, "calibration") for l in prof.calibration_lengths_tokens] + \
                   [(l, "validation") for l in prof.holdout_lengths_tokens]
        else:
            plan = [(l, "validation") for l in prof.validation_lengths_tokens]
        for l, role in sorted(plan):
            cases.append({"case": model_case_name(model_id, l), "source_model": model_id, "layer_mix": layer_mix(spec),
                          "held_out": "length" if (calibration_model and role == "validation") else
                          ("model" if role == "validation" else ""),
                          "role": role, "tokens": l, "spec": spec.model_dump(mode="json"), "_times": []})

    def build(model_id: str, spec_dump: dict) -> None:
        spec = ModelSpec.model_validate(spec_dump)
        models[model_id] = ScaledModel(spec, dev, dtype, seed)

    def warm_and_check(case: dict) -> None:
        model = models[case["source_model"]]
        ids = model.token_ids(case["tokens"], seed)
        case["_ids"] = ids
        for _ in range(w):
            _, cache = model.prefill(ids, settings)
        if not w:
            _, cache = model.prefill(ids, settings)
        measured = cache_nbytes(cache)
        predicted = int(kv_bytes(model.spec, case["tokens"], settings))
        case.update(kv_bytes_measured=measured, kv_bytes_model=predicted, kv_match=measured == predicted,
                    gemm_params=model.gemm_params(), total_params=model.total_params())
        if case["source_model"] == prof.validation_models[0] and case["tokens"] == max(prof.validation_lengths_tokens):
            results["_transfer_cache"] = cache

    sync = _sync(dev)

    def timed_round(case: dict) -> None:
        model = models[case["source_model"]]
        sync()
        t0 = time.perf_counter()
        model.prefill(case["_ids"], settings)
        sync()
        case["_times"].append(time.perf_counter() - t0)

    for model_id in dict.fromkeys(c["source_model"] for c in cases):
        dump = next(c["spec"] for c in cases if c["source_model"] == model_id)
        steps.append(_Step(f"build {model_id}", lambda m=model_id, d=dump: build(m, d)))
    for case in cases:
        steps.append(_Step(f"warm-up {case['case']}", lambda c=case: warm_and_check(c)))
    for rep in range(r):
        for case in cases:
            steps.append(_Step(f"round {rep + 1}/{r} {case['case']}", lambda c=case: timed_round(c)))

    def transfer() -> None:
        cache = results.pop("_transfer_cache")
        t0 = time.perf_counter()
        payload = serialise_cache(cache)
        serialise_s = time.perf_counter() - t0
        check = loopback_transfer(payload, 1, len(payload), keep_received=True)
        intact = check["received"][0] == payload
        restored = deserialise_cache(check["received"][0])
        intact = intact and all(torch.equal(restored[i][n], cache[i][n].cpu()) for i in range(len(cache)) for n in cache[i])
        rows = [loopback_transfer(payload, c, prof.transfer_bytes_per_setting) for c in prof.transfer_connections]
        results["transfer"] = {
            "host": LOOPBACK_HOST, "payload": f"KV cache of {prof.validation_models[0]} (scaled) at "
                                              f"{max(prof.validation_lengths_tokens)} tokens, serialised",
            "payload_bytes": len(payload), "cache_bytes": cache_nbytes(cache), "serialise_s": serialise_s,
            "integrity_ok": bool(intact), "bytes_per_setting": prof.transfer_bytes_per_setting, "rows": rows}

    steps.append(_Step("transfer", transfer))
    t_start = time.perf_counter()
    _run_steps(steps, progress)
    for case in cases:
        case.pop("_ids", None)
        case.update(summarize(case.pop("_times"), w))
        results["models"].append(case)
    results["elapsed_s"] = time.perf_counter() - t_start
    return results


def _run_steps(steps: list[_Step], progress: bool) -> None:
    """Run the steps, with a rich progress bar on stderr when ``progress``."""
    if not progress:
        for s in steps:
            s.run()
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("[bold]bench[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=Console(stderr=True)) as bar:
        task = bar.add_task("", total=len(steps))
        for s in steps:
            bar.update(task, description=s.label)
            s.run()
            bar.advance(task)


def write_results(results: dict, path: str | Path) -> Path:
    """Write a results dict as JSON, atomically (see :func:`_data.atomic_write`)."""
    return atomic_write(path, json.dumps(results, indent=1, default=_json_default))


def _json_default(obj):
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")


def load_results(path: str | Path) -> dict:
    """Read a results file written by ``bench run`` (one-line PlanError when it is not one)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise PlanError(f"{p}: file not found") from None
    except json.JSONDecodeError as exc:
        raise PlanError(f"{p}: not a JSON results file ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict) or data.get("schema") != RESULTS_SCHEMA:
        raise PlanError(f"{p}: not a bench results file (expected schema {RESULTS_SCHEMA}); run prfaas-plan bench run")
    return data


# --------------------------------------------------------------------------------------------
# Calibration (no torch)
# --------------------------------------------------------------------------------------------


def case_seconds(record: dict, statistic: str = DEFAULT_STATISTIC) -> float:
    """The time of one timing record under ``statistic`` ('median' or 'min' of the repeats)."""
    if statistic not in STATISTICS:
        raise PlanError(f"--statistic: {statistic!r} is not one of {', '.join(STATISTICS)}")
    return float(record[f"{statistic}_s"])


@dataclass
class Calibration:
    """What ``bench calibrate`` derives from a results file.

    gpu: the complete hardware entry (validated :class:`~prfaas_plan.hardware.GPU`).
    peak_source / memory_source: where peak FLOP/s and memory bandwidth came from.
    micro: efficiencies read directly off the microbenchmarks (the fit's starting point).
    residuals: one row per calibration case (measured, predicted, error %).
    link: one row per connection count (measured Gbps, nominal Gbps, efficiency).
    link_efficiency / link_connections: the best multi-connection efficiency and its count.
    header: comment lines written above the YAML (provenance).
    """

    gpu: Any
    peak_source: str
    memory_source: str
    micro: dict
    residuals: Any
    link: Any
    link_efficiency: float | None
    link_connections: int | None
    nominal_gbps: float
    header: list[str]

    def yaml_text(self) -> str:
        """The hardware YAML: provenance comments, then the entry."""
        import yaml

        entry = _round_floats(self.gpu.model_dump(mode="json", exclude_none=True), YAML_SIGNIFICANT_DIGITS)
        body = yaml.safe_dump(entry, sort_keys=False, width=110)
        return "".join(f"# {line}\n" if line else "#\n" for line in self.header) + body


def _round_floats(obj, digits: int):
    """Round every float in a nested dict/list to ``digits`` significant digits."""
    if isinstance(obj, float):
        return float(f"{obj:.{digits}g}")
    if isinstance(obj, dict):
        return {k: _round_floats(v, digits) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_round_floats(v, digits) for v in obj]
    return obj


def _file_sha256(path: str | Path | None) -> str:
    if not path or not Path(path).is_file():
        return "unknown"
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def match_datasheet_gpu(device_name: str):
    """The ``hardware_db`` entry whose id (or the id's part before a '-') appears in a CUDA device
    name (``NVIDIA H200`` -> h200, ``NVIDIA A100-SXM4-80GB`` -> a100-80g; the longest id wins), or
    None. ``bench calibrate --gpu`` overrides it."""
    from .hardware import list_gpus

    squashed = device_name.lower().replace(" ", "").replace("-", "")
    hits = [g for g in list_gpus() if g.id.replace("-", "") in squashed or g.id.split("-")[0] in squashed]
    return max(hits, key=lambda g: len(g.id)) if hits else None


def _median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def link_table(results: dict, nominal_gbps: float):
    """Measured loopback Gbps per connection count and the link efficiency each implies,
    ``min(1, measured / nominal)`` (loopback can exceed a real line: then the host is not the limit)."""
    import pandas as pd

    rows = results.get("transfer", {}).get("rows", [])
    return pd.DataFrame([{"connections": int(r["connections"]), "bytes": int(r["bytes"]), "seconds": float(r["seconds"]),
                          "measured_gbps": float(r["gbps"]), "nominal_gbps": float(nominal_gbps),
                          "link_efficiency": min(1.0, float(r["gbps"]) / nominal_gbps)} for r in rows])


def calibrate_results(results: dict, name: str, results_path: str | Path | None = None, base=None,
                      nominal_gbps: float | None = None, params: tuple[str, ...] = RESULTS_FIT_PARAMS,
                      statistic: str = DEFAULT_STATISTIC, tdp_w: float | None = None,
                      price_usd_per_hour: float | None = None) -> Calibration:
    """Build a hardware entry for the measured device.

    Peak FLOP/s: the datasheet's bf16 peak when ``base`` (a :class:`GPU`) is given or the CUDA
    device matches a ``hardware_db`` entry; otherwise the fastest GEMM measured (then the GEMM
    efficiency is relative to what this device's GEMMs reach at best). Memory bandwidth: the copy
    test on the largest buffer (as the bandwidth itself without a datasheet, else as the memory
    efficiency). Efficiency factors ``params``: :func:`prfaas_plan.calibration.fit_prefill` on the
    calibration cases only, started from the microbenchmarks' efficiencies. Link efficiency: the
    transfer test over ``nominal_gbps`` (default: the base entry's NIC, else
    :data:`DEFAULT_NOMINAL_LINE_GBPS`).
    """
    from .calibration import PrefillObservation, fit_prefill
    from .hardware import GPU, Efficiency

    if not re_id(name):
        raise PlanError(f"--name: {name!r} must be a short id of letters, digits, '-', '_' or '.'")
    info = results["device"]
    if base is None and info["kind"] == "cuda":
        base = match_datasheet_gpu(info.get("name", ""))
    gemm = results.get("gemm") or []
    copies = results.get("memory") or []
    calib = [c for c in results.get("models", []) if c["role"] == "calibration"]
    if not gemm or not copies or not calib:
        raise PlanError("calibrate: the results file lacks GEMM, copy or calibration model cases; rerun bench run")
    achieved = [g["flops"] / case_seconds(g, statistic) for g in gemm]
    if base is not None:
        peak_flops = base.peak_flops
        fastest = gemm[int(np.argmax(achieved))]
        peak_source = (f"datasheet ({base.id}: {base.bf16_dense_tflops} TFLOP/s dense bf16); fastest measured GEMM "
                       f"{max(achieved) / FLOPS_PER_TFLOP:.1f} TFLOP/s at {fastest['m']}x{fastest['k']}x{fastest['n']}")
    else:
        i = int(np.argmax(achieved))
        peak_flops = achieved[i]
        g = gemm[i]
        peak_source = (f"fastest measured GEMM: {peak_flops / FLOPS_PER_TFLOP:.4f} TFLOP/s ({g['dtype']}) at "
                       f"{g['m']}x{g['k']}x{g['n']} ({statistic} of {g['repeats']})")
    big = max(copies, key=lambda c: c["size_mib"])
    copy_bytes_per_s = big["bytes_moved"] / case_seconds(big, statistic)
    if base is not None:
        memory_bytes_per_s = base.memory_bytes_per_s
        memory_eff = min(1.0, copy_bytes_per_s / memory_bytes_per_s)
        memory_source = (f"datasheet {base.memory_tb_per_s} TB/s; copy test {copy_bytes_per_s / TB_BYTES:.3f} TB/s "
                         f"(read + write, {big['size_mib']} MiB) -> memory efficiency {memory_eff:.3f}")
    else:
        memory_bytes_per_s = copy_bytes_per_s
        memory_eff = MEMORY_STREAM_EFFICIENCY_MEASURED
        memory_source = f"copy test: {copy_bytes_per_s / GB_BYTES:.2f} GB/s (read + write, {big['size_mib']} MiB)"
    micro = {
        "gemm": _median([g["flops"] / case_seconds(g, statistic) / peak_flops for g in gemm]),
        "attention": _median([a["flops"] / case_seconds(a, statistic) / peak_flops for a in results.get("attention", [])]),
        "swa": _median([a["flops"] / case_seconds(a, statistic) / peak_flops for a in results.get("swa", [])]),
        "linear_attention": _median([a["flops"] / case_seconds(a, statistic) / peak_flops
                                     for a in results.get("linear_attention", [])]),
        "memory": memory_eff,
    }
    base_eff = base.efficiency if base is not None else None
    start = Efficiency(
        gemm=float(np.clip(micro["gemm"], FIT_LOWER_START, 1.0)),
        attention=float(np.clip(np.nan_to_num(micro["attention"], nan=micro["gemm"]), FIT_LOWER_START, 1.0)),
        linear_attention=float(np.clip(np.nan_to_num(micro["linear_attention"], nan=micro["gemm"]), FIT_LOWER_START, 1.0)),
        memory=float(np.clip(memory_eff, FIT_LOWER_START, 1.0)),
        comm=base_eff.comm if base_eff else DEFAULT_COMM_EFFICIENCY,
        prefill_overhead_s=0.0,
        decode_step_overhead_s=base_eff.decode_step_overhead_s if base_eff else DEFAULT_DECODE_STEP_OVERHEAD_S,
        provenance="microbenchmarks (fit start)")
    nominal = float(nominal_gbps or (base.nic_gbps if base is not None else DEFAULT_NOMINAL_LINE_GBPS))
    if nominal <= 0:
        raise PlanError("--nominal-gbps: the nominal line rate must be positive")
    today = _dt.date.today()
    if base is not None:
        entry = base.model_dump(mode="json")
        entry.update(id=name, name=f"{base.name} (measured: {info.get('name', '')})", efficiency=start.model_dump())
        entry["sources"] = [*entry["sources"]]
    else:
        entry = {
            "id": name, "name": f"{info.get('name', 'CPU')} ({info.get('threads')} threads, torch {info.get('torch')}, "
                                f"{results['settings']['dtype']})",
            "bf16_dense_tflops": peak_flops / FLOPS_PER_TFLOP, "memory_gib": info.get("memory_bytes", 0) / GIB_BYTES or 1.0,
            "memory_tb_per_s": memory_bytes_per_s / TB_BYTES, "scaleup_gb_per_s": memory_bytes_per_s / GB_BYTES,
            "nic_gbps": nominal, "tdp_w": float(tdp_w or CPU_PLACEHOLDER_TDP_W),
            "price_usd_per_gpu_hour": float(price_usd_per_hour or CPU_PLACEHOLDER_PRICE_USD_PER_HOUR),
            "price_date": today.strftime("%Y-%m"), "efficiency": start.model_dump(), "sources": []}
    sha = _file_sha256(results_path)
    entry["sources"].append({"url": MEASURED_SOURCE_URL,
                             "covers": ["efficiency"] + ([] if base is not None else ["bf16_dense_tflops", "memory_tb_per_s"]),
                             "note": f"measured by prfaas-plan bench run on {results.get('created_utc', '?')}; results "
                                     f"{results_path or '(in memory)'} sha256 {sha[:SHA_SHORT_CHARS]}"})
    gpu_start = GPU.model_validate(entry)
    obs = [PrefillObservation(ModelSpec.model_validate(c["spec"]), gpu_start, 1, int(c["tokens"]),
                              case_seconds(c, statistic), c["case"]) for c in calib]
    cal_models = sorted({c["source_model"] for c in calib})
    cal_lengths = sorted({int(c["tokens"]) for c in calib})
    fitted, rel = fit_prefill(obs, start, tuple(params))
    import pandas as pd

    residuals = pd.DataFrame([{"case": o.label, "tokens": o.tokens, "measured_ms": o.prefill_s * MS_PER_S,
                               "predicted_ms": o.prefill_s * (1 + e) * MS_PER_S, "error_pct": 100 * e}
                              for o, e in zip(obs, rel)])
    link = link_table(results, nominal)
    link_eff = float(link["link_efficiency"].max()) if len(link) else None
    link_conn = int(link.loc[link["link_efficiency"].idxmax(), "connections"]) if len(link) else None
    res_txt = ", ".join(f"{r.case} {r.error_pct:+.0f}%" for r in residuals.itertuples())
    provenance = (f"bench calibrate: {', '.join(params)} fitted (fit_prefill, log least squares) to {len(obs)} "
                  f"calibration prefills of scaled-down {', '.join(cal_models)} at {', '.join(map(str, cal_lengths))} "
                  f"tokens, {statistic} of {results['settings']['repeats']} repeats, results sha256 {sha[:SHA_SHORT_CHARS]}; "
                  f"peak: {peak_source}; memory: {memory_source}")
    fitted = fitted.model_copy(update={"provenance": provenance})
    gpu = GPU.model_validate({**entry, "efficiency": fitted.model_dump()})
    notes = [f"Measured with prfaas-plan bench ({results.get('profile', {}).get('name', '?')}) on {info.get('name')}; "
             f"torch {info.get('torch')}, python {info.get('python')}, {info.get('threads')} threads."]
    if base is None:
        notes.append("bf16_dense_tflops holds the peak of the dtype the harness ran in "
                     f"({results['settings']['dtype']}); scaleup_gb_per_s is the copy bandwidth (no scale-up fabric); "
                     f"nic_gbps is the nominal line rate the transfer test was compared with; tdp_w and price are "
                     f"placeholders unless given on the command line.")
    if link_eff is not None:
        notes.append("Loopback KV transfer: " + ", ".join(f"{r.connections} conn {r.measured_gbps:.1f} Gbps"
                                                          for r in link.itertuples())
                     + f"; link efficiency vs {nominal:g} Gbps nominal = {link_eff:.3f} at {link_conn} connections "
                       f"(use as scenario link.efficiency / --link-efficiency).")
    gpu = gpu.model_copy(update={"notes": " ".join(notes)})
    header = [f"{name}: hardware entry measured by `prfaas-plan bench calibrate`.",
              f"results: {results_path or '(in memory)'} (sha256 {sha}), created {results.get('created_utc')}",
              f"device: {info.get('name')} ({info.get('kind')}), torch {info.get('torch')}, dtype {results['settings']['dtype']}",
              f"peak: {peak_source}", f"memory: {memory_source}",
              "microbenchmark efficiencies (fit start): " + ", ".join(f"{k} {v:.3f}" for k, v in micro.items()),
              f"fitted ({', '.join(params)}) on calibration cases {', '.join(cal_models)} x {cal_lengths} tokens:",
              f"  residuals: {res_txt}"]
    if link_eff is not None:
        header.append(f"link efficiency: {link_eff:.3f} (best of {len(link)} connection counts, {link_conn} connections, "
                      f"nominal {nominal:g} Gbps)")
    return Calibration(gpu, peak_source, memory_source, micro, residuals, link, link_eff, link_conn, nominal, header)


def re_id(name: str) -> bool:
    """Whether ``name`` is a valid hardware id (letters, digits, '-', '_', '.')."""
    return bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", name or ""))


def calibrate_observations(path: str | Path, gpu_ref: str, params: tuple[str, ...] = OBSERVATION_FIT_PARAMS):
    """Fit ``params`` to an observations YAML (``calibration.load_observations`` format) for the
    GPU ``gpu_ref``, starting from that entry's efficiency. Returns (fitted GPU, residuals table)."""
    import pandas as pd

    from .calibration import fit_prefill, load_observations
    from .hardware import load_gpu

    gpu = load_gpu(gpu_ref)
    obs = [o for o in load_observations(path) if o.gpu.id == gpu.id]
    if not obs:
        raise PlanError(f"{path}: no observations for gpu {gpu.id}; check --gpu")
    obs = [replace(o, gpu=gpu) for o in obs]
    provenance = (f"bench calibrate: {', '.join(params)} fitted (fit_prefill, log least squares) to {len(obs)} "
                  f"observations in {path}")
    fitted, rel = fit_prefill(obs, gpu.efficiency, tuple(params), provenance)
    table = pd.DataFrame([{"label": o.label, "model": o.model.id, "gpus": o.gpus, "tokens": o.tokens,
                           "measured_s": o.prefill_s, "predicted_s": o.prefill_s * (1 + e), "error_pct": 100 * e}
                          for o, e in zip(obs, rel)])
    return gpu.model_copy(update={"efficiency": fitted}), table


# --------------------------------------------------------------------------------------------
# Validation (no torch)
# --------------------------------------------------------------------------------------------


def validate_results(results: dict, gpu, statistic: str = DEFAULT_STATISTIC, roles: tuple[str, ...] = ("validation",)):
    """Predicted (``perf.analytic_prefill`` on ``gpu``, one device) vs measured prefill for every
    held-out model case. Returns a DataFrame (case, layer mix, what is held out, tokens,
    predicted/measured ms, error %, bound)."""
    import pandas as pd

    from .hardware import Instance
    from .perf import analytic_prefill

    rows = []
    for c in results.get("models", []):
        if c["role"] not in roles:
            continue
        spec = ModelSpec.model_validate(c["spec"])
        lat = analytic_prefill(spec, Instance(gpu, 1), int(c["tokens"]))
        measured = case_seconds(c, statistic)
        predicted = float(lat.total_s)
        rows.append({"case": c["case"], "layer_mix": c["layer_mix"], "held_out": c.get("held_out") or c["role"],
                     "tokens": int(c["tokens"]), "predicted_ms": predicted * MS_PER_S, "measured_ms": measured * MS_PER_S,
                     "error_pct": 100.0 * (predicted / measured - 1.0), "spread_pct": float(c["spread_pct"]),
                     "bound": str(lat.bound)})
    if not rows:
        raise PlanError("validate: the results file has no held-out model cases")
    return pd.DataFrame(rows)


def median_abs_error_pct(table) -> float:
    """Median of |error %| over a validation table (NaN for an empty one)."""
    errors = np.abs(table["error_pct"].to_numpy())
    return float(np.median(errors)) if errors.size else float("nan")
