"""What the planner plans from: a scenario resolved into :class:`PlanInputs`, and length buckets.

:func:`plan_inputs` turns a scenario into prefill-time and cache-byte functions of the uncached
length (a measured profile where the scenario gives one, else the kernel model), the decode capacity
and the pool sizes. :func:`buckets` cuts the length distribution into :class:`Buckets` for exact
mode; :func:`split_cache_buckets` rebuilds them for a trace replayed with one prefix cache per
cluster. Lengths are tokens (uncached prefill lengths), times seconds, link rates bit/s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING

import numpy as np

from prfaas_plan.defaults import DEFAULT_BUCKETS
from prfaas_plan.errors import InvalidInput
from prfaas_plan.handoff import Staging
from prfaas_plan.kvcache import kv_bytes
from prfaas_plan.perf.latency import decode_capacity, free_cache_bytes_per_gpu, prefill_time_s, request_bytes_per_gpu
from prfaas_plan.scenario import Scenario, build_workload
from prfaas_plan.units import GBPS_BITS_PER_S, GIB_BYTES

if TYPE_CHECKING:
    from prfaas_plan.hardware import Instance
    from prfaas_plan.perf.roofline import MeasuredProfile
    from prfaas_plan.workload import LengthDist
    from prfaas_plan.workload.prefix_cache import TraceBlocks
    from prfaas_plan.workload.traces import Trace

LengthFn = Callable[[np.ndarray], np.ndarray]
"""A vectorised function of uncached lengths (tokens): prefill seconds, or bytes shipped."""


@dataclass(frozen=True)
class PlanInputs:
    """Everything the planner needs, resolved from a scenario.

    t_remote / t_local: prefill seconds of one request on one PrfaaS / local instance.
    kv_bytes: bytes shipped per offloaded request (S_kv).
    decode_batch_max, decode_step_s: BS_max and T_decode of one local decode instance.
    n_prfaas / n_local / n_baseline: instances in the PrfaaS pool, the local PD pool, and the
    homogeneous baseline.
    link_bits_per_s: usable link rate (nominal x efficiency; exact mode);
    link_nominal_bits_per_s: B_out as written in Eq. 3 (paper mode).
    trace / cache_blocks: the loaded trace of a trace workload (a :class:`~prfaas_plan.workload.traces.Trace`;
    None otherwise) and its prefix-cache
    size in blocks (None = unlimited, 0 = off); with cache_blocks != 0, exact mode replays one cache
    per cluster. The simulator replays the same trace rather than reading the file again.
    blocks: the trace as prepared for the workload's replay (None: prepared on first use).
    staging: the decode side's staging memory (``decode.staging_memory``; None: not charged); with
    it, ``decode_batch_max`` is what :func:`prfaas_plan.planner.staging.staged_inputs` leaves.
    transfer_buffer_bytes: PrfaaS-side bytes per instance for KV waiting on the link (None: unlimited).
    """

    scenario: Scenario
    lengths: LengthDist
    output_tokens: float
    decode_context_tokens: float
    t_remote: LengthFn
    t_local: LengthFn
    kv_bytes: LengthFn
    decode_batch_max: int
    decode_step_s: float
    decode_source: str
    n_prfaas: int
    n_local: int
    n_baseline: int
    link_bits_per_s: float
    link_nominal_bits_per_s: float
    trace: Trace | None = None
    cache_blocks: int | None = 0
    staging: Staging | None = None
    transfer_buffer_bytes: float | None = None
    blocks: TraceBlocks | None = None

    @property
    def decode_rps_per_instance(self) -> float:
        """Eq. 5 per local decode instance, requests/s: ``BS_max / (T_decode * L_out)``."""
        return self.decode_batch_max / (self.decode_step_s * self.output_tokens)

    @cached_property
    def mean_tokens(self) -> float:
        """Mean uncached input length, tokens."""
        return float(self.lengths.mean_tokens())

    @cached_property
    def trace_blocks(self) -> TraceBlocks:
        """The trace prepared once for the per-cluster replays (one per fixed-point pass): the
        workload's own (``blocks``) when given."""
        if self.blocks is not None:
            return self.blocks
        from prfaas_plan.workload.prefix_cache import TraceBlocks

        return TraceBlocks(self.trace)


def _prefill_timer(sc: Scenario, inst: Instance, prof: MeasuredProfile | None) -> LengthFn:
    """Prefill seconds on ``inst``: the measured profile when given, else the kernel model."""
    if prof is not None:
        return lambda tokens: np.asarray(prof.prefill_time_s(np.asarray(tokens, dtype=float)), dtype=float)
    return lambda tokens: np.asarray(prefill_time_s(sc.model, inst, np.asarray(tokens, dtype=float),
                                                    settings=sc.cache), dtype=float)


def _kv_bytes_fn(sc: Scenario) -> LengthFn:
    """Bytes shipped per request: the PrfaaS profile's measured sizes when given, else the model's."""
    prof = sc.prfaas_profile
    if prof is not None and prof.kv_bytes is not None:
        return lambda tokens: np.asarray(prof.kv_bytes_at(np.asarray(tokens, dtype=float)), dtype=float)
    return lambda tokens: np.asarray(kv_bytes(sc.model, np.asarray(tokens, dtype=float), sc.cache), dtype=float)


def _staging(sc: Scenario, batch_max: int, context_tokens: float) -> Staging:
    """The decode side's staging memory: the cache memory of one decode GPU, one running request's
    bytes at the mean context, and a staged request's full prompt KV (per GPU, by the layout)."""
    model, inst, cache = sc.model, sc.local_instance, sc.cache

    @lru_cache(maxsize=1 << 17)  # the planner asks for the same bucket lengths at every probe
    def per_gpu(tokens: float) -> float:
        return float(request_bytes_per_gpu(model, inst, tokens, cache))

    def staged_bytes(tokens: np.ndarray) -> np.ndarray:
        tokens = np.asarray(tokens, dtype=float)
        unique, back = np.unique(tokens, return_inverse=True)
        return np.array([per_gpu(float(t)) for t in unique], dtype=float)[back].reshape(tokens.shape)

    return Staging(sc.engine.kv_reserve_at, free_cache_bytes_per_gpu(model, inst, sc.spec.decode.reserve_gib_per_gpu),
                   float(request_bytes_per_gpu(model, inst, context_tokens, cache)), int(batch_max), staged_bytes)


def plan_inputs(sc: Scenario) -> PlanInputs:
    """Resolve a scenario: workload, prefill time functions (measured profile when the scenario
    gives one, else the kernel model), cache bytes, and decode capacity."""
    resolved = build_workload(sc)
    wl = resolved.workload
    out_tokens = float(wl.output_tokens)
    ctx_tokens = resolved.mean_input_tokens + out_tokens / 2
    d = sc.spec.decode
    if d.batch_max and d.step_s:
        batch, step_s, source = d.batch_max, d.step_s, d.source or "scenario"
    else:
        cap = decode_capacity(sc.model, sc.local_instance, ctx_tokens, sc.spec.slo.tpot_s, sc.cache,
                              d.reserve_gib_per_gpu)
        batch, step_s = d.batch_max or cap.batch_max, d.step_s or cap.step_s
        source = f"performance model ({cap.binding}-bound; {cap.memory_note})"
    if sc.spec.local.instances == 0 and sc.baseline_instances == 0:
        raise InvalidInput("local.gpus: the local PD pool has no GPUs, so nothing can decode; add local GPUs")
    return PlanInputs(
        scenario=sc, lengths=wl.lengths, output_tokens=out_tokens, decode_context_tokens=ctx_tokens,
        t_remote=_prefill_timer(sc, sc.prfaas_instance, sc.prfaas_profile),
        t_local=_prefill_timer(sc, sc.local_instance, sc.local_profile), kv_bytes=_kv_bytes_fn(sc),
        decode_batch_max=int(batch), decode_step_s=float(step_s), decode_source=source,
        n_prfaas=sc.spec.prfaas.instances, n_local=sc.spec.local.instances, n_baseline=sc.baseline_instances,
        link_bits_per_s=sc.spec.link.gbps * sc.spec.link.efficiency * GBPS_BITS_PER_S,
        link_nominal_bits_per_s=sc.spec.link.gbps * GBPS_BITS_PER_S,
        trace=resolved.trace, cache_blocks=resolved.cache_blocks, blocks=resolved.blocks,
        staging=_staging(sc, int(batch), ctx_tokens) if d.staging_memory else None,
        transfer_buffer_bytes=(None if sc.spec.prfaas.transfer_buffer_gib is None
                               else sc.spec.prfaas.transfer_buffer_gib * GIB_BYTES),
    )


@dataclass(frozen=True)
class Buckets:
    """The discretised workload: representative uncached lengths (tokens), probabilities, and
    per-bucket prefill seconds (remote, local) and shipped bytes."""

    tokens: np.ndarray
    probs: np.ndarray
    t_remote_s: np.ndarray
    t_local_s: np.ndarray
    kv_bytes: np.ndarray


def buckets(inp: PlanInputs, n: int = DEFAULT_BUCKETS) -> Buckets:
    """``n`` length buckets of the workload's distribution, with their prefill times and bytes."""
    tokens, probs = inp.lengths.buckets(n)
    tokens = np.asarray(tokens, dtype=float)
    return Buckets(tokens, np.asarray(probs, dtype=float), inp.t_remote(tokens), inp.t_local(tokens),
                   inp.kv_bytes(tokens))


def _per_length(fns: tuple[LengthFn, ...], tokens: np.ndarray) -> list[np.ndarray]:
    """Each of ``fns`` at every one of ``tokens``, evaluated once per distinct length and spread
    back: the same floats as evaluating them on ``tokens`` (the length functions are elementwise,
    and their branches depend on the set of lengths only, which is the same)."""
    unique, back = np.unique(tokens, return_inverse=True)
    return [fn(unique)[back] for fn in fns]


def split_cache_buckets(inp: PlanInputs, threshold_tokens: float, n: int) -> Buckets:
    """Buckets of a trace replayed with one prefix cache per cluster, routed by ``threshold_tokens``
    on the local uncached length (what the router sees). Requests are grouped by that length;
    each group's remote prefill time and shipped bytes average the lengths left uncached by the
    PrfaaS cluster's own cache, which only holds what it prefilled."""
    from prfaas_plan.workload import split_cache_replay

    replay = split_cache_replay(inp.trace_blocks, inp.cache_blocks, threshold_tokens)
    local_tokens = replay.local_uncached_tokens.astype(float)
    remote_tokens = replay.remote_uncached_tokens.astype(float)
    order = np.argsort(local_tokens, kind="stable")
    groups = [g for g in np.array_split(order, min(n, local_tokens.size)) if g.size]
    (t_local_s,) = _per_length((inp.t_local,), local_tokens)
    t_remote_s, shipped_bytes = _per_length((inp.t_remote, inp.kv_bytes), remote_tokens)
    per_request = {"tokens": local_tokens, "t_local_s": t_local_s, "t_remote_s": t_remote_s, "kv_bytes": shipped_bytes}
    mean = {k: np.array([v[g].mean() for g in groups]) for k, v in per_request.items()}
    probs = np.array([g.size for g in groups], dtype=float) / local_tokens.size
    return Buckets(mean["tokens"], probs, mean["t_remote_s"], mean["t_local_s"], mean["kv_bytes"])
