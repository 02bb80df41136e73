"""The colocated (aggregated) candidate of a sizing: instances that prefill and decode together,
each taking the largest Poisson rate that meets the SLOs, bought in whole instances.

Per instance the rate comes from :func:`prfaas_plan.serving.colocated_open_loop` at the
workload's **mean** input length (rounded to whole tokens) and mean output length: the serving
model is a closed form for one request shape, so a length distribution is represented by its
mean. The rate is :func:`prfaas_plan.serving.max_sustainable_rate`'s bisection (log space, to
:data:`REL_TOL`) on whether :func:`~prfaas_plan.serving.colocated_open_loop` sustains it (prefill
budget, memory), with the SLOs added: TPOT at most the SLO and, with a TTFT SLO, an
**estimate** of the TTFT quantile at most the SLO: the serving model gives no percentile,
so the estimate is the model's TTFT at the rate for the mean-length request, less its bare TTFT
(at vanishing load), plus the bare TTFT of the quantile input length (TTFT grows with the
length). It is exact when every request waits the same and optimistic by the spread of the wait.
Rates are requests/s, times seconds, prices $/hour.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from prfaas_plan.energy import energy_usd_per_hour, facility_power_w, kwh_per_million_tokens
from prfaas_plan.errors import PlanError, Unsustainable
from prfaas_plan.sizing.result import SizedPlan, SizedPool

if TYPE_CHECKING:
    from prfaas_plan.sizing.pools import PoolProfile
    from prfaas_plan.sizing.search import Context

REL_TOL = 1e-3
"""Relative precision of the per-instance rate."""
RATE_RANGE_RPS = (1e-3, 1e4)
"""The per-instance rate is bisected (in log space) between these, as max_sustainable_rate does."""


VANISHING_RPS = 1e-6
"""The rate (requests/s) at which a bare TTFT (no waiting) is read off the serving model."""


def _rate_at_slo(ctx: Context, prof: PoolProfile) -> tuple[float, str, Callable[[float], tuple[float, float]]]:
    """The largest rate one instance serves within the SLOs, what binds it, and the (TTFT
    quantile estimate, TPOT) of one instance at a rate."""
    from prfaas_plan.hardware import Instance
    from prfaas_plan.serving import colocated_open_loop

    sc = ctx.inp.scenario
    inst = Instance(prof.gpu, prof.gpus_per_instance, prof.layout, sc.engine)
    isl, osl = max(1, round(ctx.inp.mean_tokens)), max(1, round(ctx.inp.output_tokens))
    tpot_slo, ttft_slo = sc.spec.slo.tpot_s, ctx.slo.ttft_s

    def point(rate: float, length: int = isl):
        return colocated_open_loop(sc.model, inst, length, osl, rate, sc.cache)

    isl_q = max(1, round(float(ctx.inp.lengths.quantile(ctx.slo.ttft_quantile))))
    shift = point(VANISHING_RPS, isl_q).ttft_s - point(VANISHING_RPS).ttft_s

    def at(rate: float) -> tuple[float, float]:
        p = point(rate)
        return p.ttft_s + shift, p.tpot_s

    def meets(rate: float) -> bool:
        try:
            ttft, tpot = at(rate)
        except Unsustainable:  # past what the engine sustains (prefill budget, memory)
            return False
        return tpot <= tpot_slo and (ttft_slo is None or ttft <= ttft_slo)

    lo, hi = RATE_RANGE_RPS
    if not meets(lo):
        return 0.0, "tpot" if at(lo)[1] > tpot_slo else ctx.slo.ttft_label, at
    while hi / lo > 1 + REL_TOL:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if meets(mid) else (lo, mid)
    try:
        binding = "tpot" if at(hi)[1] > tpot_slo else f"{ctx.slo.ttft_label} (estimate)"
    except Unsustainable:
        binding = "prefill budget or memory"
    return lo, binding, at


def size_colocated(ctx: Context, prof: PoolProfile) -> SizedPlan:
    """The cheapest colocated plan on one instance type for the target, or why there is none; its
    TTFT quantile (estimate) and TPOT at the load each bought instance carries."""
    label = f"colocated {prof.name}"
    tokens = ctx.tokens_per_request
    try:
        rate, binding, at = _rate_at_slo(ctx, prof)
    except PlanError as exc:
        rate, binding, why = 0.0, "memory", str(exc)
    else:
        why = f"{binding}: no rate meets the SLOs on {prof.name}" if rate <= 0 else ""
    n = math.ceil(ctx.target_rps / rate * (1 - 1e-12)) if rate > 0 else 0
    if rate > 0 and n > ctx.max_instances:
        binding = "instances"
        why = (f"instances: {n} colocated instances of {prof.name} needed, above max_instances_per_role "
               f"{ctx.max_instances}; raise max_instances_per_role (--max-instances) to at least {n} "
               "or lower the target")
    if why:
        return SizedPlan.infeasible("colocated", label, ctx.target_rps, binding.split(" ")[0], why, tokens)
    site = ctx.sites["local"]
    util = ctx.target_rps / (n * rate)
    gpus = n * prof.gpus_per_instance
    ttft, tpot = at(ctx.target_rps / n)
    power = facility_power_w(prof.gpu, gpus, util, site)
    return SizedPlan("colocated", label, (SizedPool("colocated", "local", prof.gpu.id, prof.gpus_per_instance,
                                                    prof.label, n),),
                     None, None, ctx.target_rps, n * rate, ttft, tpot, n * prof.usd_per_hour, 0.0,
                     energy_usd_per_hour(prof.gpu, gpus, util, site),
                     kwh_per_million_tokens(power, ctx.target_rps * tokens), binding, True,
                     tokens_per_request=tokens)


__all__ = ["REL_TOL", "size_colocated"]
