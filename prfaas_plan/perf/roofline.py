"""The analytic roofline: prefill latency from FLOPs, bytes and named efficiency factors.

Planning times come from the kernel model (:mod:`prfaas_plan.perf.latency`, measured kernel
tables); this roofline is what the microbenchmark harness measures against and ``prfaas-plan
bench calibrate`` fits (docs/design.md section 4), in the spirit of LLM-Viewer's per-layer tables:

* **compute** (every efficiency is a fraction of the dense *bf16* peak, whatever the weight
  dtype): GEMM FLOPs of the attention projections and the dense or active-expert FFN
  (``2 * params * tokens``), causal attention's quadratic term (``2 * H * (d_qk + d_v) * l^2 / 2``
  for full/MLA layers, ``l * W`` pairs for sliding windows), and the chunked linear-attention
  term (``~4 * d_k * d_v`` per token and head plus the intra-chunk part), each over the
  instance's dense bf16 peak times a named efficiency (:class:`prfaas_plan.hardware.Efficiency`);
* **memory**: weights and the KV written over HBM bandwidth;
* **communication**: tensor-parallel all-reduces after attention and dense FFNs, expert-parallel
  all-to-all for MoE layers, over the scale-up bandwidth (not overlapped: a conservative choice);
* a fixed overhead per prefill request.

``time = max(compute, memory) + communication + overhead``; the reported bound is the largest of
the three terms. Measured end-to-end profiles (:class:`MeasuredProfile`, e.g. the PrfaaS paper's
Table 5) replace the model's prefill time where a scenario gives one, interpolated in ``l``.
All token counts are tokens; times are seconds; FLOPs are floating-point operations.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from prfaas_plan.errors import InvalidInput
from prfaas_plan.hardware import Instance
from prfaas_plan.kvcache import CacheSettings, kv_bytes
from prfaas_plan.layout import ACTIVATION_BYTES
from prfaas_plan.model.arch import ModelSpec
from prfaas_plan.model.kinds import LINEAR_ATTN_CHUNK_TOKENS  # noqa: F401 - re-exported for the bench harness
from prfaas_plan.perf.kernels import causal_pairs


@dataclass(frozen=True)
class LayerCosts:
    """Per-model constants of the roofline, computed once (all layers summed).

    gemm_flops_per_token: FLOPs per token of projections and active FFNs.
    attn_flops_per_pair: FLOPs per (query, key) pair of attention that sees every earlier key
        (full/MLA layers, DSA's indexer).
    swa: tuples (flops_per_pair over all such layers, keys per query) of attention that sees at
        most that many keys (sliding windows, DSA's top-k selection), one per distinct cap.
    linear_flops_per_token: FLOPs per token of chunked linear attention.
    weight_bytes: bytes of all weights (each GEMM class in its checkpoint dtype, scales included).
    """

    gemm_flops_per_token: float
    attn_flops_per_pair: float
    swa: tuple[tuple[float, int], ...]
    linear_flops_per_token: float
    weight_bytes: float
    moe_layers: int
    attn_layers: int
    dense_ffn_layers: int


def _capped_pair_flops(kinds) -> tuple[tuple[float, int], ...]:
    """(FLOPs per pair summed over the layers, keys per query) for each distinct cap of the layers
    whose queries see a fixed number of keys: one term per cap, not per layer."""
    caps: dict[int, float] = {}
    for a in kinds:
        if a.capped_pairs is not None:
            flops, keys = a.capped_pairs
            caps[keys] = caps.get(keys, 0.0) + flops
    return tuple((flops, keys) for keys, flops in caps.items())


def layer_costs(model: ModelSpec) -> LayerCosts:
    """Sum the per-layer FLOP and byte constants of ``model`` (its layer kinds' FLOPs, its
    :meth:`~prfaas_plan.model.arch.ModelSpec.weight_bytes`)."""
    w = model.weight_bytes()
    params = model.param_counts()
    kinds = [model.attention[name] for name in model.layer_kinds]
    # lm_head runs for the last token only in prefill: its 2 * h * vocab FLOPs are left out
    return LayerCosts(
        gemm_flops_per_token=2.0 * params.gemm_per_token,
        attn_flops_per_pair=float(sum(a.full_pair_flops for a in kinds)),
        swa=_capped_pair_flops(kinds),
        linear_flops_per_token=float(sum(a.linear_flops_per_token for a in kinds)),
        weight_bytes=w.total_bytes,
        moe_layers=params.moe_layers,
        attn_layers=model.layers.count,
        dense_ffn_layers=model.layers.count - params.moe_layers,
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


def check_tokens(model: ModelSpec, tokens) -> np.ndarray:
    l = np.asarray(tokens, dtype=float)
    if np.any(l <= 0):
        raise InvalidInput("context: token counts must be positive")
    if np.any(l > model.max_context_tokens):
        raise InvalidInput(
            f"context: {int(np.max(l))} tokens exceeds {model.id}'s maximum of {model.max_context_tokens} tokens"
        )
    return l


@dataclass(frozen=True)
class PrefillFlops:
    """FLOPs of one request's prefill, by the efficiency class that times them (arrays for an
    array of lengths): GEMMs (projections, dense or active-expert FFN), attention (causal pairs of
    full, MLA and capped layers), chunked linear attention. The LM head is left out (it runs for
    the last token only)."""

    gemm: np.ndarray | float
    attention: np.ndarray | float
    linear_attention: np.ndarray | float

    @property
    def total(self) -> np.ndarray | float:
        return self.gemm + self.attention + self.linear_attention


def prefill_flops(model: ModelSpec, tokens, costs: LayerCosts | None = None) -> PrefillFlops:
    """FLOPs of prefilling one request of ``tokens`` tokens (:class:`PrefillFlops`), from the
    per-model constants of :func:`layer_costs`."""
    return _prefill_flops(check_tokens(model, tokens), costs or layer_costs(model))


def _prefill_flops(l: np.ndarray, c: LayerCosts) -> PrefillFlops:
    """:func:`prefill_flops` of lengths already checked."""
    swa_flops = sum(p * causal_pairs(l, w) for p, w in c.swa)
    return PrefillFlops(c.gemm_flops_per_token * l, c.attn_flops_per_pair * l * (l + 1) / 2 + swa_flops,
                        c.linear_flops_per_token * l)


def analytic_prefill(model: ModelSpec, inst: Instance, tokens, costs: LayerCosts | None = None,
                     settings: CacheSettings | None = None) -> Latency:
    """Roofline prefill latency of one request of ``tokens`` tokens on one instance (``settings``:
    the cache dtypes of the KV written, default bf16 / vLLM)."""
    l = check_tokens(model, tokens)
    c = costs or layer_costs(model)
    eff = inst.gpu.efficiency
    f = _prefill_flops(l, c)
    gemm_s = f.gemm / (inst.peak_flops * eff.gemm)
    attn_s = f.attention / (inst.peak_flops * eff.attention)
    lin_s = f.linear_attention / (inst.peak_flops * eff.linear_attention)
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

