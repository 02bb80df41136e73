"""The performance model: prefill latency, decode step time, and which bound dominates.

A per-layer roofline (docs/design.md section 4), in the spirit of LLM-Viewer's tables:

* **compute** (every efficiency is a fraction of the dense *bf16* peak, whatever the weight dtype:
  factors fitted on FP8 checkpoints absorb FP8's speed-up; per-dtype peaks need per-dtype
  calibration data we do not have yet): GEMM FLOPs of the attention projections and the dense or active-expert FFN
  (``2 * params * tokens``), causal attention's quadratic term (``2 * H * (d_qk + d_v) * l^2 / 2``
  for full/MLA layers, ``l * W`` pairs for sliding windows), and the chunked linear-attention
  term (``~4 * d_k * d_v`` per token and head plus the intra-chunk part), each over the
  instance's dense bf16 peak times a named efficiency (:class:`prfaas_plan.hardware.Efficiency`);
* **memory**: weights (and, in decode, what each tensor-parallel rank holds of every request's
  KV cache and state) over HBM bandwidth; decode batches must also fit each GPU's memory;
* **communication**: tensor-parallel all-reduces after attention and dense FFNs, expert-parallel
  all-to-all for MoE layers, over the scale-up bandwidth (not overlapped: a conservative choice);
* a fixed overhead per prefill request and per decode step.

``time = max(compute, memory) + communication + overhead``; the reported bound is the largest of
the three terms. Measured profiles (:class:`MeasuredProfile`, e.g. the PrfaaS paper's Table 5)
replace the analytic prefill time through the same interface, interpolated in ``l``.
Latencies only: what they imply for the link (Eq. 1, Eq. 2) is :mod:`prfaas_plan.bandwidth`'s.
All token counts are tokens; times are seconds; FLOPs are floating-point operations.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from prfaas_plan.errors import InvalidInput
from prfaas_plan.hardware import Instance
from prfaas_plan.kvcache import CacheSettings, kv_bytes, per_gpu_kv_bytes
from prfaas_plan.model.arch import ModelSpec
from prfaas_plan.model.kinds import LINEAR_ATTN_CHUNK_TOKENS  # noqa: F401 - re-exported for the bench harness
from prfaas_plan.units import DTYPE_BYTES, GIB_BYTES

ACTIVATION_BYTES = 2
"""Bytes per activation element moved by collectives (bf16)."""


@dataclass(frozen=True)
class LayerCosts:
    """Per-model constants of the roofline, computed once (all layers summed).

    gemm_flops_per_token: FLOPs per token of projections and active FFNs.
    attn_flops_per_pair: FLOPs per (query, key) pair of quadratic attention, full/MLA layers.
    swa: tuples (flops_per_pair, window_tokens) for sliding-window layers.
    linear_flops_per_token: FLOPs per token of chunked linear attention.
    weight_bytes / dense_weight_bytes / expert_bytes: bytes of all weights, of the weights
    outside the routed experts, and of one routed expert (``dense_weight_dtype`` and
    ``weight_dtype`` with its group scales).
    """

    gemm_flops_per_token: float
    attn_flops_per_pair: float
    swa: tuple[tuple[float, int], ...]
    linear_flops_per_token: float
    weight_bytes: float
    dense_weight_bytes: float
    expert_bytes: float
    moe_layers: int
    attn_layers: int
    dense_ffn_layers: int
    decode_attn_flops_per_ctx_token: float


def weight_bytes_per_param(model: ModelSpec) -> float:
    """Bytes per routed-expert weight (every weight of a dense model), group scales included:
    int4 with one bf16 scale per 32 weights is 0.5 + 2 / 32 = 0.5625 B."""
    scale = DTYPE_BYTES["bf16"] / model.weight_group_size if model.weight_group_size else 0.0
    return DTYPE_BYTES[model.weight_dtype] + scale


def layer_costs(model: ModelSpec) -> LayerCosts:
    """Sum the per-layer FLOP and byte constants of ``model`` (its layer kinds' FLOPs, its
    :meth:`~prfaas_plan.model.arch.ModelSpec.param_counts` in bytes)."""
    wbytes = weight_bytes_per_param(model)
    dense_wbytes = DTYPE_BYTES[model.dense_weight_dtype] if model.dense_weight_dtype else wbytes
    params = model.param_counts()
    kinds = [model.attention[name] for name in model.layer_kinds]
    # lm_head runs for the last token only in prefill: its 2 * h * vocab FLOPs are left out
    return LayerCosts(
        gemm_flops_per_token=2.0 * params.gemm_per_token,
        attn_flops_per_pair=float(sum(a.pair_flops for a in kinds if a.window is None)),
        swa=tuple((float(a.pair_flops), a.window) for a in kinds if a.window is not None),
        linear_flops_per_token=float(sum(a.linear_flops_per_token for a in kinds)),
        weight_bytes=params.outside_routed * dense_wbytes + params.routed * wbytes,
        dense_weight_bytes=params.outside_routed * dense_wbytes,
        expert_bytes=params.routed_expert * wbytes,
        moe_layers=params.moe_layers,
        attn_layers=model.layers.count,
        dense_ffn_layers=model.layers.count - params.moe_layers,
        decode_attn_flops_per_ctx_token=float(sum(a.decode_flops_per_context_token for a in kinds)),
    )


@dataclass(frozen=True)
class Latency:
    """A latency and its parts (seconds; arrays when the input was an array of lengths)."""

    total_s: np.ndarray | float
    compute_s: np.ndarray | float
    memory_s: np.ndarray | float
    comm_s: np.ndarray | float
    overhead_s: float
    parts: dict = field(default_factory=dict)

    @property
    def bound(self) -> np.ndarray | str:
        """'compute', 'memory' or 'communication': the largest term (per length for arrays)."""
        terms = np.stack(np.broadcast_arrays(self.compute_s, self.memory_s, self.comm_s))
        names = np.array(["compute", "memory", "communication"])
        out = names[np.argmax(terms, axis=0)]
        return str(out) if out.ndim == 0 else out


def _check_tokens(model: ModelSpec, tokens) -> np.ndarray:
    l = np.asarray(tokens, dtype=float)
    if np.any(l <= 0):
        raise InvalidInput("context: token counts must be positive")
    if np.any(l > model.max_context_tokens):
        raise InvalidInput(
            f"context: {int(np.max(l))} tokens exceeds {model.id}'s maximum of {model.max_context_tokens} tokens"
        )
    return l


def analytic_prefill(model: ModelSpec, inst: Instance, tokens, costs: LayerCosts | None = None,
                     settings: CacheSettings | None = None) -> Latency:
    """Roofline prefill latency of one request of ``tokens`` tokens on one instance (``settings``:
    the cache dtypes of the KV written, default bf16 / vLLM)."""
    l = _check_tokens(model, tokens)
    c = costs or layer_costs(model)
    eff = inst.gpu.efficiency
    pairs = l * (l + 1) / 2
    swa_flops = sum(p * np.where(l <= w, pairs, w * (w + 1) / 2 + (l - w) * w) for p, w in c.swa)
    gemm_s = c.gemm_flops_per_token * l / (inst.peak_flops * eff.gemm)
    attn_s = (c.attn_flops_per_pair * pairs + swa_flops) / (inst.peak_flops * eff.attention)
    lin_s = c.linear_flops_per_token * l / (inst.peak_flops * eff.linear_attention)
    compute_s = gemm_s + attn_s + lin_s
    memory_s = (c.weight_bytes + kv_bytes(model, l, settings)) / (inst.memory_bytes_per_s * eff.memory)
    comm_s = _collective_s(model, inst, l, c)
    total = np.maximum(compute_s, memory_s) + comm_s + eff.prefill_overhead_s
    return Latency(total, compute_s, memory_s, comm_s, eff.prefill_overhead_s,
                   {"gemm_s": gemm_s, "attention_s": attn_s, "linear_attention_s": lin_s})


def _collective_s(model: ModelSpec, inst: Instance, tokens, c: LayerCosts) -> np.ndarray:
    """TP all-reduce after every attention block and dense FFN, EP all-to-all (dispatch and
    combine) in MoE layers, ring algorithms, bf16 activations."""
    n = inst.gpus
    if n == 1:
        return np.zeros_like(np.asarray(tokens, dtype=float))
    act = np.asarray(tokens, dtype=float) * model.hidden_size * ACTIVATION_BYTES
    allreduce_bytes = 2 * (n - 1) / n * act * (c.attn_layers + c.dense_ffn_layers)
    a2a_bytes = 2 * (n - 1) / n * act * model.ffn.experts_per_token * c.moe_layers / n
    bw = inst.gpu.scaleup_bytes_per_s * inst.gpu.efficiency.comm
    return (allreduce_bytes + a2a_bytes) / bw


@dataclass(frozen=True)
class MeasuredProfile:
    """A measured prefill profile of one model on one instance: ``T_prefill`` (and optionally
    ``S_kv``) at a few lengths, interpolated piecewise-linearly in ``l`` (linear extrapolation
    beyond the last point from the last two)."""

    tokens: tuple[int, ...]
    prefill_s: tuple[float, ...]
    kv_bytes: tuple[float, ...] | None = None
    source: str = ""

    def __post_init__(self) -> None:
        if len(self.tokens) < 2 or len(self.tokens) != len(self.prefill_s):
            raise InvalidInput("profile: give at least two (tokens, prefill_s) points of equal length")
        if list(self.tokens) != sorted(set(self.tokens)) or min(self.prefill_s) <= 0:
            raise InvalidInput("profile: tokens must be strictly increasing and times positive")

    def prefill_time_s(self, tokens) -> np.ndarray | float:
        return _interp(tokens, self.tokens, self.prefill_s)

    def kv_bytes_at(self, tokens) -> np.ndarray | float:
        if self.kv_bytes is None:
            raise InvalidInput("profile: this profile has no S_kv column")
        return _interp(tokens, self.tokens, self.kv_bytes)


def _interp(x, xs, ys):
    x = np.asarray(x, dtype=float)
    xs_a, ys_a = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    y = np.interp(x, xs_a, ys_a)
    lo_slope = (ys_a[1] - ys_a[0]) / (xs_a[1] - xs_a[0])
    hi_slope = (ys_a[-1] - ys_a[-2]) / (xs_a[-1] - xs_a[-2])
    y = np.where(x < xs_a[0], ys_a[0] + (x - xs_a[0]) * lo_slope, y)
    y = np.where(x > xs_a[-1], ys_a[-1] + (x - xs_a[-1]) * hi_slope, y)
    y = np.maximum(y, 1e-9)
    return float(y) if y.ndim == 0 else y


def prefill_time_s(model: ModelSpec, inst: Instance, tokens, profile: MeasuredProfile | None = None,
                   settings: CacheSettings | None = None):
    """``T_prefill(l)`` in seconds: the measured profile when given, else the roofline."""
    if profile is not None:
        _check_tokens(model, tokens)
        return profile.prefill_time_s(tokens)
    return analytic_prefill(model, inst, tokens, settings=settings).total_s


def expected_experts_touched(num_experts: int, top_k: int, batch: int) -> float:
    """Expected distinct experts a batch of ``batch`` tokens activates per MoE layer, assuming
    uniform independent routing: ``E * (1 - (1 - k/E)^B)``."""
    if num_experts == 0:
        return 0.0
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** batch)


def decode_step(model: ModelSpec, inst: Instance, batch: int, context_tokens: float,
                settings: CacheSettings | None = None, costs: LayerCosts | None = None) -> Latency:
    """One decode step for ``batch`` requests of ``context_tokens`` context each, attention
    tensor-parallel over the instance's GPUs (vLLM's default layout).

    Memory: the weights outside the routed experts, the experts the batch touches, and what each
    rank holds of every request's cache (:func:`per_gpu_kv_bytes`: the MLA latent has no head
    axis, so every rank holds and reads all of it), plus the linear-attention states written back.
    Compute: projections and active experts for ``batch`` tokens plus attention over the context.
    """
    if batch <= 0:
        raise InvalidInput("batch: must be at least 1")
    c = costs or layer_costs(model)
    eff = inst.gpu.efficiency
    experts = expected_experts_touched(model.ffn.num_experts, model.ffn.experts_per_token, batch)
    weight_read = c.dense_weight_bytes + c.moe_layers * experts * c.expert_bytes
    # KV caches are read (one token appended); recurrent states are read and written back
    held = per_gpu_kv_bytes(model, context_tokens, inst.gpus, settings)
    states = per_gpu_kv_bytes(model, 0, inst.gpus, settings)  # zero tokens: the fixed states alone
    cache_read = batch * inst.gpus * float(held + states)
    memory_s = (weight_read + cache_read) / (inst.memory_bytes_per_s * eff.memory)
    compute_s = (batch * c.gemm_flops_per_token / (inst.peak_flops * eff.gemm)
                 + batch * (c.decode_attn_flops_per_ctx_token * context_tokens + c.linear_flops_per_token)
                 / (inst.peak_flops * eff.attention))
    comm_s = float(_collective_s(model, inst, batch, c))
    total = max(compute_s, memory_s) + comm_s + eff.decode_step_overhead_s
    return Latency(total, compute_s, memory_s, comm_s, eff.decode_step_overhead_s)


def decode_step_s(model: ModelSpec, inst: Instance, batch: int, context_tokens: float,
                  settings: CacheSettings | None = None, costs: LayerCosts | None = None) -> float:
    """Decode step time in seconds (see :func:`decode_step`)."""
    return float(decode_step(model, inst, batch, context_tokens, settings, costs).total_s)


KV_MEMORY_FRACTION = 0.90
"""Fraction of each GPU's memory the engine manages (vLLM's default ``gpu_memory_utilization``)."""

ENGINE_RESERVE_GIB_PER_GPU = 10.9
"""GiB per GPU the engine keeps, inside that fraction, for activations, CUDA graphs and
communication buffers: what vLLM left of Kimi-K2-Thinking (INT4, TP8, 8xH200) beside its
modelled weights (594.2 GB / 8 = 69.2 GiB) and the 46.80 GiB it reported as KV cache:
0.9 x 141 - 69.2 - 46.8 = 10.9 GiB (vllm-project/recipes, moonshotai/Kimi-K2-Think.md,
https://github.com/vllm-project/recipes/blob/main/moonshotai/Kimi-K2-Think.md)."""


@dataclass(frozen=True)
class DecodeCapacity:
    """Largest decode batch that meets a TPOT SLO and fits memory, and its step time."""

    batch_max: int
    step_s: float
    binding: str  # "tpot" or "memory"
    memory_batch_max: int
    cache_bytes_per_gpu: float  # left for caches on each GPU after weights and the engine's reserve
    request_bytes_per_gpu: float  # one request's cache on each GPU

    @property
    def memory_note(self) -> str:
        """The memory arithmetic in words, e.g. for a report."""
        return (f"{self.cache_bytes_per_gpu / GIB_BYTES:.1f} GiB per GPU for caches, "
                f"{self.request_bytes_per_gpu / GIB_BYTES:.2f} GiB per request per GPU")

    def requests_per_s(self, output_tokens: float) -> float:
        """Eq. 5 for one instance: ``BS_max / (T_decode * L_out)`` requests per second."""
        return self.batch_max / (self.step_s * output_tokens)


def decode_capacity(model: ModelSpec, inst: Instance, context_tokens: float, tpot_s: float,
                    settings: CacheSettings | None = None,
                    reserve_gib_per_gpu: float = ENGINE_RESERVE_GIB_PER_GPU) -> DecodeCapacity:
    """``BS_max`` and ``T_decode`` of Eq. 5: the largest batch whose step time meets ``tpot_s``
    and whose caches fit, on every GPU, beside its shard of the weights and the engine's reserve
    (attention tensor-parallel: each rank holds :func:`per_gpu_kv_bytes` of every request)."""
    c = layer_costs(model)
    usable = inst.gpu.memory_bytes * KV_MEMORY_FRACTION - reserve_gib_per_gpu * GIB_BYTES
    weights = c.weight_bytes / inst.gpus
    if weights >= usable:
        raise InvalidInput(
            f"memory: {model.id}'s weights ({weights / GIB_BYTES:.1f} GiB per GPU) do not fit {inst.name} "
            f"({usable / GIB_BYTES:.1f} GiB per GPU after the engine's reserve); use more GPUs per instance"
        )
    per_req = float(per_gpu_kv_bytes(model, context_tokens, inst.gpus, settings))
    mem_max = int((usable - weights) // per_req)
    if mem_max < 1:
        raise InvalidInput(f"memory: one {context_tokens:.0f}-token request does not fit beside the weights on {inst.name}")
    step1 = decode_step_s(model, inst, 1, context_tokens, settings, c)
    if step1 > tpot_s:
        raise InvalidInput(
            f"tpot: even batch 1 takes {step1 * 1e3:.1f} ms per token on {inst.name}, above the "
            f"{tpot_s * 1e3:.1f} ms SLO; relax the TPOT SLO or use faster decode GPUs"
        )
    lo, hi = 1, mem_max
    while lo < hi:  # step time is increasing in the batch: bisect on integers
        mid = (lo + hi + 1) // 2
        if decode_step_s(model, inst, mid, context_tokens, settings, c) <= tpot_s:
            lo = mid
        else:
            hi = mid - 1
    step = decode_step_s(model, inst, lo, context_tokens, settings, c)
    binding = "memory" if lo == mem_max else "tpot"
    return DecodeCapacity(lo, step, binding, mem_max, usable - weights, per_req)
