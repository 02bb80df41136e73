"""The performance model's front door: prefill time, decode step, decode capacity of an instance.

Every caller (planner, link arithmetic, CLI, reports) asks here. The time of a forward pass comes
from the kernel model (:mod:`prfaas_plan.perf.ops`: measured kernel tables of the instance's GPU
or of the nearest measured one, under the instance's parallel layout and serving-engine profile),
or from a measured end-to-end profile where a scenario gives one. The analytic roofline
(:mod:`prfaas_plan.perf.roofline`) stays what the microbenchmark harness calibrates.

Decode capacity (Eq. 5): the largest batch whose step meets the TPOT SLO and whose caches fit,
on every GPU, beside the layout's share of the weights and the engine's reserve.

Speculative decoding (the engine profile's ``speculative`` block, :class:`~prfaas_plan.engine.Speculative`,
method ``mtp``): a step verifies ``k + 1`` tokens per request, timed as a decode step at batch
``b (k + 1)`` (GEMMs at ``m = b (k+1)``; the attention of ``k + 1`` queries over a context
approximated by the generation attention of ``b (k+1)`` requests at that context: an upper bound
on its memory traffic), plus the drafting (:func:`draft_step_s`); a request gains the profile's
mean accepted tokens per step, so its time per output token is the step over them. Memory holds
the model's MTP layers (:meth:`~prfaas_plan.model.arch.ModelSpec.with_mtp_layers`: their weights
and their KV, one more attention layer each) and ``k`` more KV slots per request. With no
``speculative`` block every figure is the plain decode step's.
Token counts are tokens; times seconds; memory bytes (GiB = 2^30 B where named).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prfaas_plan.errors import InvalidInput
from prfaas_plan.hardware import Instance
from prfaas_plan.kvcache import CacheSettings, per_gpu_kv_bytes, requests_per_instance_memory
from prfaas_plan.layout import instance_layout, weight_bytes_per_gpu
from prfaas_plan.model.arch import ModelSpec
from prfaas_plan.perf.ops import OpBreakdown, decode_ops, engine_tables, prefill_ops
from prfaas_plan.perf.roofline import MeasuredProfile, check_tokens
from prfaas_plan.units import GIB_BYTES

if TYPE_CHECKING:
    from prfaas_plan.engine import Speculative

KV_MEMORY_FRACTION = 0.90
"""Fraction of each GPU's memory the engine manages (vLLM's default ``gpu_memory_utilization``)."""

ENGINE_RESERVE_GIB_PER_GPU = 9.15
"""GiB per GPU the engine keeps, inside that fraction, for activations, CUDA graphs and
communication buffers: what vLLM left of Kimi-K2-Thinking (INT4, TP8, 8xH200) beside the weights
one GPU holds (76.18 GB = 70.95 GiB: :func:`~prfaas_plan.layout.weight_bytes_per_gpu`, the
TP-split 594.2 GB / 8 plus the MLA down-projections and routers every rank keeps whole) and the
46.80 GiB it reported as KV cache: 0.9 x 141 - 70.95 - 46.80 = 9.15 GiB (vllm-project/recipes,
https://github.com/vllm-project/recipes/blob/main/moonshotai/Kimi-K2-Think.md)."""


def _kv_dtype(settings: CacheSettings | None) -> str:
    return settings.kv_dtype if settings is not None else "bf16"


def prefill_latency(model: ModelSpec, inst: Instance, tokens, settings: CacheSettings | None = None,
                    every_rank: bool = False) -> OpBreakdown:
    """The kernel model's prefill latency of one request of ``tokens`` tokens on ``inst``, with
    its parts per op family and the source of every op's time; ``every_rank``: with every
    attention-DP rank prefilling such a request at once (the shared MoE sees all of them)."""
    l = check_tokens(model, tokens)
    instance_layout(model, inst)
    return prefill_ops(model, inst, l, inst.engine_profile, _kv_dtype(settings), every_rank)


def prefill_time_s(model: ModelSpec, inst: Instance, tokens, profile: MeasuredProfile | None = None,
                   settings: CacheSettings | None = None):
    """``T_prefill(l)`` in seconds: the measured profile when given, else the kernel model."""
    if profile is not None:
        check_tokens(model, tokens)
        return profile.prefill_time_s(tokens)
    return prefill_latency(model, inst, tokens, settings).total_s


def decode_step(model: ModelSpec, inst: Instance, batch: int, context_tokens: float,
                settings: CacheSettings | None = None) -> OpBreakdown:
    """One decode step for ``batch`` requests of ``context_tokens`` context each (kernel model)."""
    if batch <= 0:
        raise InvalidInput("batch: must be at least 1")
    return decode_ops(model, inst, int(batch), float(context_tokens), inst.engine_profile, _kv_dtype(settings))


def decode_step_s(model: ModelSpec, inst: Instance, batch: int, context_tokens: float,
                  settings: CacheSettings | None = None) -> float:
    """Decode step time in seconds (see :func:`decode_step`)."""
    return float(decode_step(model, inst, batch, context_tokens, settings).total_s)


def speculative(model: ModelSpec, inst: Instance) -> Speculative | None:
    """The instance's speculative decoding (its engine profile's block), or None when off; MTP on
    a model without MTP layers is a one-line InvalidInput."""
    spec = inst.engine_profile.speculative
    if spec is not None and spec.method == "mtp" and model.mtp is None:
        raise InvalidInput(f"engine.speculative: {model.id} has no MTP layers for method mtp; turn speculative "
                           "decoding off or use a model whose checkpoint ships MTP modules")
    return spec


def tokens_per_step(model: ModelSpec, inst: Instance) -> float:
    """Mean output tokens a request gains per decode step: 1, or the accepted tokens under
    speculative decoding."""
    spec = speculative(model, inst)
    return 1.0 if spec is None else spec.accepted_tokens


def draft_step_s(model: ModelSpec, inst: Instance, batch: int, context_tokens: float,
                 settings: CacheSettings | None = None) -> float:
    """Seconds drafting ``k`` tokens for ``batch`` requests (0 without speculative decoding):
    per draft token one transformer layer (the mean layer of the batch-``batch`` decode step's
    kernels, overhead and LM head left out) plus the LM head: the shape of an MTP module, one
    transformer block sharing the output head (arXiv 2412.19437, section 2.2)."""
    spec = speculative(model, inst)
    if spec is None or spec.draft_tokens == 0 or batch == 0:
        return 0.0
    d = decode_ops(model, inst, int(batch), float(context_tokens), inst.engine_profile, _kv_dtype(settings))
    head = float(d.ops.get("lm_head", 0.0))
    layer = (float(d.total_s) - float(d.families["overhead"]) - head) / model.layers.count
    return spec.draft_tokens * (layer + head)


def speculative_step_s(model: ModelSpec, inst: Instance, batch: int, context_tokens: float,
                       settings: CacheSettings | None = None) -> float:
    """Seconds of one decode step of ``batch`` requests as the instance's engine runs it: the
    plain decode step, or under speculative decoding the verify step at ``batch (k + 1)`` tokens
    plus the drafting (see the module docstring)."""
    spec = speculative(model, inst)
    k = 0 if spec is None else spec.draft_tokens
    return decode_step_s(model, inst, batch * (k + 1), context_tokens, settings) + \
        draft_step_s(model, inst, batch, context_tokens, settings)


def _resident(model: ModelSpec, inst: Instance) -> tuple[ModelSpec, int]:
    """(the model whose weights and caches the instance holds: MTP layers included when
    speculative decoding is on, the extra KV slots per request)."""
    spec = speculative(model, inst)
    return (model, 0) if spec is None else (model.with_mtp_layers(), spec.draft_tokens)


@dataclass(frozen=True)
class DecodeCapacity:
    """Largest decode batch that meets a TPOT SLO and fits memory, and its time per output token
    (``step_s``: the decode step; under speculative decoding the verify step over the mean
    accepted tokens, ``tokens_per_step``)."""

    batch_max: int
    step_s: float
    binding: str  # "tpot" or "memory"
    memory_batch_max: int
    cache_bytes_per_gpu: float  # left for caches on each GPU after weights and the engine's reserve
    request_bytes_per_gpu: float  # one request's cache on the busiest GPU that holds it
    tokens_per_step: float = 1.0  # mean output tokens per request per engine step

    @property
    def memory_note(self) -> str:
        """The memory arithmetic in words, e.g. for a report."""
        return (f"{self.cache_bytes_per_gpu / GIB_BYTES:.1f} GiB per GPU for caches, "
                f"{self.request_bytes_per_gpu / GIB_BYTES:.2f} GiB per request per GPU")

    def requests_per_s(self, output_tokens: float) -> float:
        """Eq. 5 for one instance: ``BS_max / (T_decode * L_out)`` requests per second."""
        return self.batch_max / (self.step_s * output_tokens)


def free_cache_bytes_per_gpu(model: ModelSpec, inst: Instance,
                             reserve_gib_per_gpu: float = ENGINE_RESERVE_GIB_PER_GPU) -> float:
    """Bytes per GPU left for caches: the engine's share of memory less the layout's weights (the
    MTP layers' too, and their replicated ``eh_proj``, under speculative decoding) and the
    engine's reserve; weights that do not fit are a one-line PlanError. An engine launched with a
    static share (:attr:`~prfaas_plan.engine.EngineProfile.static_memory_fraction`, SGLang's
    ``--mem-fraction-static``) gives weights and KV that share whole: its activations live outside
    it, so ``reserve_gib_per_gpu`` does not apply."""
    static = inst.engine_profile.static_memory_fraction
    usable = (inst.gpu.memory_bytes * static if static is not None
              else inst.gpu.memory_bytes * KV_MEMORY_FRACTION - reserve_gib_per_gpu * GIB_BYTES)
    resident, _ = _resident(model, inst)
    weights = weight_bytes_per_gpu(resident, instance_layout(resident, inst))
    if resident is not model:
        weights += model.mtp_projection_bytes()
    if weights >= usable:
        room = "in its static share" if static is not None else "after the engine's reserve"
        raise InvalidInput(
            f"memory: {model.id}'s weights ({weights / GIB_BYTES:.1f} GiB per GPU) do not fit {inst.name} "
            f"({usable / GIB_BYTES:.1f} GiB per GPU {room}); use more GPUs per instance"
        )
    return usable - weights


def requests_fit(model: ModelSpec, inst: Instance, tokens: float, free_bytes_per_gpu: float,
                 settings: CacheSettings | None = None) -> int:
    """Requests of ``tokens`` tokens whose caches fit ``free_bytes_per_gpu`` on every GPU
    (:func:`~prfaas_plan.kvcache.requests_per_instance_memory`), under speculative decoding with
    the MTP layers' KV and ``k`` more slots per request."""
    resident, extra = _resident(model, inst)
    return requests_per_instance_memory(resident, instance_layout(resident, inst), tokens + extra, free_bytes_per_gpu, settings)


def request_bytes_per_gpu(model: ModelSpec, inst: Instance, tokens: float,
                          settings: CacheSettings | None = None) -> int:
    """One request's cache bytes on the busiest GPU that holds it
    (:func:`~prfaas_plan.kvcache.per_gpu_kv_bytes`), under speculative decoding with the MTP
    layers' KV and ``k`` more slots."""
    resident, extra = _resident(model, inst)
    return per_gpu_kv_bytes(resident, tokens + extra, instance_layout(resident, inst), settings)


ON_DEMAND_KV_ENGINES = frozenset({"vllm", "sglang"})
"""Engines (``kernel_engine``) that allocate KV pages on demand as tokens are written, so a
running request holds its prompt and the tokens generated so far, not its final length: vLLM's
PagedAttention (Kwon et al., SOSP 2023, arXiv 2309.06180; V1's ``allocate_slots`` per step,
https://blog.vllm.ai/2025/09/05/anatomy-of-vllm.html) and SGLang's token-to-KV pool
(https://docs.sglang.ai/advanced_features/hyperparameter_tuning.html: "KV cache pool is full.
Retract requests."). When the pool runs out vLLM preempts by recompute (the request's KV is
freed and re-prefilled later, https://docs.vllm.ai/en/stable/configuration/optimization/) and
SGLang retracts decode requests the same way. TensorRT-LLM's default capacity policy,
``GUARANTEED_NO_EVICT``, admits a request only if its whole prompt plus maximum output fits
(https://nvidia.github.io/TensorRT-LLM/performance/performance-tuning-guide/useful-runtime-flags.html),
so ``trtllm`` is charged the final length."""


def held_context_tokens(inst: Instance, isl_tokens: float, osl_tokens: float) -> float:
    """Mean tokens of cache one running request of an ``isl_tokens`` / ``osl_tokens`` workload
    holds in the engine's pool, in steady state with fixed lengths: on demand
    (:data:`ON_DEMAND_KV_ENGINES`) its prompt plus the tokens generated so far, which at a decode
    step ``j = 1 .. osl - 1`` is ``isl + j``, ``isl + osl / 2`` on average over its output (the
    running requests' progress spread uniformly); reserved up front (``trtllm``) ``isl + osl``."""
    if inst.engine_profile.kernel_engine in ON_DEMAND_KV_ENGINES:
        return float(isl_tokens) + float(osl_tokens) / 2.0
    return float(isl_tokens) + float(osl_tokens)


def decode_capacity(model: ModelSpec, inst: Instance, context_tokens: float, tpot_s: float,
                    settings: CacheSettings | None = None,
                    reserve_gib_per_gpu: float = ENGINE_RESERVE_GIB_PER_GPU) -> DecodeCapacity:
    """``BS_max`` and ``T_decode`` of Eq. 5: the largest batch whose step time meets ``tpot_s``
    and whose caches fit beside the weights and the engine's reserve (placed by the instance's
    layout: :func:`requests_fit`). Under speculative decoding the time per output token is the
    verify step over the mean accepted tokens, and the memory holds the MTP layers."""
    free = free_cache_bytes_per_gpu(model, inst, reserve_gib_per_gpu)
    mem_max = requests_fit(model, inst, context_tokens, free, settings)
    if mem_max < 1:
        raise InvalidInput(f"memory: one {context_tokens:.0f}-token request does not fit beside the weights on {inst.name}")
    gain = tokens_per_step(model, inst)

    @functools.cache  # the bisection's last batch that met the SLO is asked again at the end
    def per_token_s(b: int) -> float:
        return speculative_step_s(model, inst, b, context_tokens, settings) / gain

    step1 = per_token_s(1)
    if step1 > tpot_s:
        raise InvalidInput(
            f"tpot: even batch 1 takes {step1 * 1e3:.1f} ms per token on {inst.name}, above the "
            f"{tpot_s * 1e3:.1f} ms SLO; relax the TPOT SLO or use faster decode GPUs"
        )
    lo, hi = 1, mem_max
    while lo < hi:  # step time is increasing in the batch: bisect on integers
        mid = (lo + hi + 1) // 2
        if per_token_s(mid) <= tpot_s:
            lo = mid
        else:
            hi = mid - 1
    binding = "memory" if lo == mem_max else "tpot"
    per_req = float(request_bytes_per_gpu(model, inst, context_tokens, settings))
    return DecodeCapacity(lo, per_token_s(lo), binding, mem_max, free, per_req, gain)


__all__ = ["DecodeCapacity", "ENGINE_RESERVE_GIB_PER_GPU", "KV_MEMORY_FRACTION", "ON_DEMAND_KV_ENGINES",
           "decode_capacity", "decode_step", "decode_step_s", "draft_step_s", "free_cache_bytes_per_gpu",
           "held_context_tokens", "latency_source", "prefill_latency",
           "prefill_time_s", "request_bytes_per_gpu", "requests_fit", "speculative", "speculative_step_s", "tokens_per_step"]


def latency_source(inst: Instance) -> str:
    """Where an instance's modelled latencies come from, in words (reports, the CLI)."""
    eng = inst.engine_profile
    tables = engine_tables(inst, eng)
    basis = (f"{inst.gpu.id}'s measured kernel tables" if tables.basis == inst.gpu.id
             else f"{tables.basis}'s measured kernel tables transferred to {inst.gpu.id} (peaks, SMs, bandwidth)")
    marlin = ", MXFP4 experts on Marlin" if eng.mxfp4_moe_kernel == "marlin" else ""
    return f"kernel model: {basis}, {eng.kernel_engine} {eng.kernel_version} kernels{marlin}, engine profile {eng.id}"
