"""What each harness run measures, and how a model_db entry is scaled down for it.

:class:`ScaleSpec` and :class:`Profile` (the CPU/CUDA quick/full profiles in :data:`PROFILES`,
:func:`profile_for`), the calibration and validation model lists, and the pure-Python scaling
of a :class:`~prfaas_plan.model.arch.ModelSpec` (:func:`scale_model`, :func:`scaled_layer_counts`,
:func:`extra_params`, :func:`layer_mix`). No torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from prfaas_plan.errors import InvalidInput
from prfaas_plan.model.arch import FFN, Layers, ModelSpec
from prfaas_plan.model.kinds import Attention
from prfaas_plan.model.quant import GemmDtypes
from prfaas_plan.units import MIB_BYTES

DIM_ALIGN = 8
"""Scaled head dims, ranks and intermediate sizes are rounded to multiples of this many elements
(and never below it), so that GEMM shapes stay vector-friendly and RoPE dims stay even."""

CPU_DEFAULT_THREADS = 1
"""torch intra-op threads of the CPU profiles. One thread: with several, every small op ends in
an OpenMP barrier, and on a shared machine a descheduled worker stalls it for a whole time slice
(observed: the same forward varying 30x on 2 busy cores). ``bench run --threads`` overrides."""


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
        raise InvalidInput(f"scale: {layers} layers cannot hold {model.id}'s {len(names)} attention kinds")
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


def _scale_attention(attn: Attention, head_factor: float, dim_scale: float) -> Attention:
    """One attention config with scaled head counts (``head_factor``) and dims (``dim_scale``)."""
    return attn.scaled(lambda n: _count(n * head_factor), lambda v: _align(v * dim_scale))


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


def extra_params(attn: Attention, hidden: int) -> int:
    """Parameters of an attention layer that are not GEMM weights (short-conv filters, decay
    parameters): the kind's :meth:`~prfaas_plan.model.kinds.GQA.vector_params`."""
    return attn.vector_params(hidden)


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
        raise InvalidInput("scale: layers, hidden size and dim scale must be positive")
    ratio = spec.hidden_size / model.hidden_size
    head_factor = ratio / spec.dim_scale
    attention = {name: _scale_attention(a, head_factor, spec.dim_scale) for name, a in model.attention.items()}
    pattern = _scaled_pattern(model, spec.layers)
    attention = {n: a for n, a in attention.items() if n in pattern.at or n == pattern.default}
    ffn = _scale_ffn(model.ffn, ratio, model.layers.count, spec.layers, spec)
    draft = model.model_copy(update={
        "id": f"{model.id}-scaled", "name": f"{model.name} (scaled down for benchmarking)",
        "hidden_size": spec.hidden_size, "vocab_size": spec.vocab_size, "attention": attention,
        "layers": pattern, "ffn": ffn,
        "gemm_dtypes": GemmDtypes.uniform(weight_dtype),  # the torch draft is one dtype throughout
        "total_params": 1.0, "active_params": 1.0,
        "notes": f"scaled from {model.id}: hidden {model.hidden_size}->{spec.hidden_size}, "
                 f"layers {model.layers.count}->{spec.layers}, dims x{spec.dim_scale}",
    })
    draft = ModelSpec.model_validate(draft.model_dump())
    counts = draft.param_counts()
    return ModelSpec.model_validate({**draft.model_dump(), "total_params": float(counts.total),
                                     "active_params": float(counts.active)})


def layer_mix(model: ModelSpec) -> str:
    """A short description of the layer mix, e.g. ``6 kda + 2 mla, MoE 8x2``."""
    counts = model.layer_counts()
    kinds = " + ".join(f"{c} {model.attention[n].kind}" for n, c in sorted(counts.items(), key=lambda kv: -kv[1]) if c)
    f = model.ffn
    return kinds + (f", MoE {f.num_experts}x{f.experts_per_token}" if f.num_experts else ", dense FFN")
