"""The run's parameters: the :class:`Setup` the engine needs, resolved from a scenario and a plan.

A :class:`Setup` holds the pools (instance counts, decode batch), the time functions of the
plan's :class:`planner.PlanInputs` (prefill seconds and KV bytes by uncached tokens), the link
(bits/s, efficiency, rtt) and the plan's :class:`Routing` (offload probability by routing length).
Tests build one by hand to configure the engine as a textbook queue.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from prfaas_plan.errors import InvalidInput

if TYPE_CHECKING:
    from prfaas_plan.handoff import Staging
    from prfaas_plan.planner import Buckets, Plan, PlanResult
    from prfaas_plan.scenario import Scenario
    from prfaas_plan.workload import LengthDist


@dataclass(frozen=True)
class Routing:
    """Offload probability by routing length (tokens): ``fracs[i]`` for lengths in
    ``(edges_tokens[i-1], edges_tokens[i]]`` (the last entry for longer ones), after dividing the
    length by the policy's threshold factor. ``threshold_tokens``: the plan's t (None: no single t)."""

    edges_tokens: tuple[float, ...]
    fracs: tuple[float, ...]
    threshold_tokens: float | None

    def offload_probability(self, tokens: float, factor: float = 1.0) -> float:
        """Probability that a request of ``tokens`` routing tokens goes to PrfaaS when t is scaled by ``factor``."""
        bucket = bisect_left(self.edges_tokens, tokens / factor)
        return self.fracs[min(bucket, len(self.fracs) - 1)]

    def offload_probabilities(self, tokens: np.ndarray) -> np.ndarray:
        """:meth:`offload_probability` at factor 1 for an array of routing lengths (the same comparisons)."""
        bucket = np.searchsorted(np.asarray(self.edges_tokens, dtype=float), np.asarray(tokens, dtype=float), side="left")
        return np.asarray(self.fracs, dtype=float)[np.minimum(bucket, len(self.fracs) - 1)]

    @classmethod
    def threshold(cls, t_tokens: float) -> Routing:
        """Everything above ``t_tokens`` offloaded, everything up to it local."""
        return cls((float(t_tokens),), (0.0, 1.0), float(t_tokens))


def bucket_upper_edges(lengths: LengthDist, buckets: Buckets) -> np.ndarray:
    """The upper length edge (tokens) of each planner bucket, so a length can be mapped to its bucket."""
    n = len(buckets.tokens)
    if hasattr(lengths, "bucket_edges"):  # TruncatedLogNormal: its n buckets' log-spaced edges
        return np.asarray(lengths.bucket_edges(n), dtype=float)[1:]
    tokens = getattr(lengths, "tokens", None)
    if tokens is not None:  # EmpiricalLengths: contiguous runs of the sorted sample
        tokens = np.asarray(tokens, dtype=float)
        bounds = np.rint(np.cumsum(buckets.probs) * tokens.size).astype(np.int64)
        bounds = np.clip(bounds, 1, tokens.size)
        return tokens[bounds - 1]
    reps = np.asarray(buckets.tokens, dtype=float)  # fallback: midpoints between representatives
    return np.append((reps[1:] + reps[:-1]) / 2, np.inf)


@dataclass(frozen=True)
class Setup:
    """Everything the engine needs, resolved from a plan (:meth:`from_plan`) or built by hand in tests.

    Pools: ``n_prfaas``, ``n_pd_p``, ``n_pd_d`` instances, ``decode_batch_max`` slots per PD-D
    instance, ``decode_step_s`` per output token. Link: ``link_bits_per_s`` usable, nominal
    ``link_efficiency`` (for link events in Gbps), ``rtt_s``; the model's ``n_layers`` pipeline the
    transfer. ``t_remote``/``t_local`` (s) and ``kv_bytes`` (bytes) map uncached tokens to a
    request's prefill time and shipped cache. ``lengths``/``output_tokens``: synthetic requests.
    ``cache_blocks``: prefix-cache blocks per cluster (0 off, None unlimited;
    ``remote_cache_blocks`` None = the same). SLOs in seconds (None: none).
    ``staging``: decode staging memory (:class:`prfaas_plan.handoff.Staging`; None: not limited);
    ``transfer_buffer_bytes``: the PrfaaS transfer buffer, pooled over its instances (None: unlimited).
    """

    n_prfaas: int
    n_pd_p: int
    n_pd_d: int
    decode_batch_max: int
    decode_step_s: float
    n_layers: int
    rtt_s: float
    link_bits_per_s: float
    link_efficiency: float
    t_remote: Callable[[np.ndarray], np.ndarray]
    t_local: Callable[[np.ndarray], np.ndarray]
    kv_bytes: Callable[[np.ndarray], np.ndarray]
    routing: Routing
    lengths: LengthDist
    output_tokens: float
    cache_blocks: int | None = 0
    ttft_slo_s: float | None = None
    tpot_slo_s: float | None = None
    remote_cache_blocks: int | None = None
    staging: Staging | None = None
    transfer_buffer_bytes: float | None = None

    def __post_init__(self) -> None:
        if self.n_pd_d < 1 or self.decode_batch_max < 1:
            raise InvalidInput("simulate: the plan has no decode instance (or BS_max is 0); nothing can decode")
        if self.n_prfaas + self.n_pd_p < 1:
            raise InvalidInput("simulate: the plan has no prefill instance")

    @classmethod
    def from_plan(cls, res: PlanResult, sc: Scenario | None = None, plan: Plan | None = None) -> Setup:
        """The plan's pools, routing and time functions; the prefix-cache size and SLOs come from
        ``sc`` (default: the plan's own scenario), so one plan can be simulated with caching on
        and off."""
        from prfaas_plan.planner import offload_fractions

        inp, buckets = res.inputs, res.buckets
        plan = res.plan if plan is None else plan
        sc = inp.scenario if sc is None else sc
        fracs = offload_fractions(plan, buckets)
        routing = Routing(tuple(bucket_upper_edges(inp.lengths, buckets).tolist()),
                          tuple(np.asarray(fracs, float).tolist()), plan.threshold_tokens)
        slo = sc.spec.slo
        return cls(
            n_prfaas=plan.instances.get("prfaas", 0), n_pd_p=plan.instances.get("pd_p", 0),
            n_pd_d=plan.instances.get("pd_d", 0), decode_batch_max=inp.decode_batch_max,
            decode_step_s=inp.decode_step_s, n_layers=inp.scenario.model.layers.count,
            rtt_s=inp.scenario.spec.link.rtt_s, link_bits_per_s=inp.link_bits_per_s,
            link_efficiency=inp.scenario.spec.link.efficiency,
            t_remote=inp.t_remote, t_local=inp.t_local, kv_bytes=inp.kv_bytes, routing=routing,
            lengths=inp.lengths, output_tokens=inp.output_tokens,
            cache_blocks=sc.spec.workload.prefix_cache_blocks, ttft_slo_s=slo.ttft_s, tpot_slo_s=slo.tpot_s,
            staging=inp.staging,
            transfer_buffer_bytes=(None if inp.transfer_buffer_bytes is None
                                   else inp.transfer_buffer_bytes * plan.instances.get("prfaas", 0)),
        )
