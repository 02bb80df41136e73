"""The performance model's front door: prefill time, decode step, decode capacity of an instance.

Every caller (planner, link arithmetic, CLI, reports) asks here. The time of a forward pass comes
from the kernel model (:mod:`prfaas_plan.perf.ops`: measured kernel tables of the instance's GPU
or of the nearest measured one, under the instance's parallel layout and serving-engine profile),
or from a measured end-to-end profile where a scenario gives one. The analytic roofline
(:mod:`prfaas_plan.perf.roofline`) stays what the microbenchmark harness calibrates.

Decode capacity (Eq. 5): the largest batch whose step meets the TPOT SLO and whose caches fit,
on every GPU, beside the layout's share of the weights and the engine's reserve.
Token counts are tokens; times seconds; memory bytes (GiB = 2^30 B where named).
"""

from __future__ import annotations

from dataclasses import dataclass

from prfaas_plan.errors import InvalidInput
from prfaas_plan.hardware import Instance
from prfaas_plan.kvcache import CacheSettings, per_gpu_kv_bytes, requests_per_instance_memory
from prfaas_plan.layout import check_layout, weight_bytes_per_gpu
from prfaas_plan.model.arch import ModelSpec
from prfaas_plan.perf.kernels import kernel_tables
from prfaas_plan.perf.ops import OpBreakdown, decode_ops, prefill_ops
from prfaas_plan.perf.roofline import MeasuredProfile, check_tokens
from prfaas_plan.units import GIB_BYTES

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


def prefill_latency(model: ModelSpec, inst: Instance, tokens, settings: CacheSettings | None = None) -> OpBreakdown:
    """The kernel model's prefill latency of one request of ``tokens`` tokens on ``inst``, with
    its parts per op family and the source of every op's time."""
    l = check_tokens(model, tokens)
    check_layout(model, inst.parallel)
    return prefill_ops(model, inst, l, inst.engine_profile, _kv_dtype(settings))


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


@dataclass(frozen=True)
class DecodeCapacity:
    """Largest decode batch that meets a TPOT SLO and fits memory, and its step time."""

    batch_max: int
    step_s: float
    binding: str  # "tpot" or "memory"
    memory_batch_max: int
    cache_bytes_per_gpu: float  # left for caches on each GPU after weights and the engine's reserve
    request_bytes_per_gpu: float  # one request's cache on the busiest GPU that holds it

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
    """Bytes per GPU left for caches: the engine's share of memory less the layout's weights and
    the engine's reserve; weights that do not fit are a one-line PlanError."""
    usable = inst.gpu.memory_bytes * KV_MEMORY_FRACTION - reserve_gib_per_gpu * GIB_BYTES
    weights = weight_bytes_per_gpu(model, check_layout(model, inst.parallel))
    if weights >= usable:
        raise InvalidInput(
            f"memory: {model.id}'s weights ({weights / GIB_BYTES:.1f} GiB per GPU) do not fit {inst.name} "
            f"({usable / GIB_BYTES:.1f} GiB per GPU after the engine's reserve); use more GPUs per instance"
        )
    return usable - weights


def decode_capacity(model: ModelSpec, inst: Instance, context_tokens: float, tpot_s: float,
                    settings: CacheSettings | None = None,
                    reserve_gib_per_gpu: float = ENGINE_RESERVE_GIB_PER_GPU) -> DecodeCapacity:
    """``BS_max`` and ``T_decode`` of Eq. 5: the largest batch whose step time meets ``tpot_s``
    and whose caches fit beside the weights and the engine's reserve (placed by the instance's
    layout: :func:`~prfaas_plan.kvcache.requests_per_instance_memory`)."""
    free = free_cache_bytes_per_gpu(model, inst, reserve_gib_per_gpu)
    layout = inst.parallel
    mem_max = requests_per_instance_memory(model, layout, context_tokens, free, settings)
    if mem_max < 1:
        raise InvalidInput(f"memory: one {context_tokens:.0f}-token request does not fit beside the weights on {inst.name}")
    step1 = decode_step_s(model, inst, 1, context_tokens, settings)
    if step1 > tpot_s:
        raise InvalidInput(
            f"tpot: even batch 1 takes {step1 * 1e3:.1f} ms per token on {inst.name}, above the "
            f"{tpot_s * 1e3:.1f} ms SLO; relax the TPOT SLO or use faster decode GPUs"
        )
    lo, hi = 1, mem_max
    while lo < hi:  # step time is increasing in the batch: bisect on integers
        mid = (lo + hi + 1) // 2
        if decode_step_s(model, inst, mid, context_tokens, settings) <= tpot_s:
            lo = mid
        else:
            hi = mid - 1
    step = decode_step_s(model, inst, lo, context_tokens, settings)
    binding = "memory" if lo == mem_max else "tpot"
    per_req = float(per_gpu_kv_bytes(model, context_tokens, layout, settings))
    return DecodeCapacity(lo, step, binding, mem_max, free, per_req)


__all__ = ["DecodeCapacity", "ENGINE_RESERVE_GIB_PER_GPU", "KV_MEMORY_FRACTION", "decode_capacity", "decode_step",
           "decode_step_s", "free_cache_bytes_per_gpu", "latency_source", "prefill_latency", "prefill_time_s"]



def latency_source(inst: Instance) -> str:
    """Where an instance's modelled latencies come from, in words (reports, the CLI)."""
    eng = inst.engine_profile
    tables = kernel_tables(inst.gpu, eng.kernel_engine, eng.kernel_version)
    basis = (f"{inst.gpu.id}'s measured kernel tables" if tables.basis == inst.gpu.id
             else f"{tables.basis}'s measured kernel tables transferred to {inst.gpu.id} (peaks, SMs, bandwidth)")
    return f"kernel model: {basis}, {eng.kernel_engine} {eng.kernel_version} kernels, engine profile {eng.id}"
