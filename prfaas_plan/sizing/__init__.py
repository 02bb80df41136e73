"""Sizing: what to buy, where, and which line to lease, to serve a target rate within the SLOs at
the lowest cost: the inverse of :func:`prfaas_plan.planner.plan`.

:func:`size` enumerates the instance types (GPU type x parallel layout, :mod:`.pools`) per site
and role, solves each combination's cost MILP (:mod:`.milp`: instances per role, link tier,
routing) inside the percentile-TTFT loop (:mod:`.search`), and compares the best plan of each kind
in one :class:`~prfaas_plan.sizing.result.SizingResult`: PrfaaS-PD (cross-site), homogeneous PD on
each GPU type, colocated serving on each GPU type (:mod:`.colocated`), and naive heterogeneous
(every request prefilled on the PrfaaS site, the local site only decodes: the planner's
baseline). Costs are $/hour of GPUs (hardware_db rental prices) + link (:mod:`.tiers`) + energy
(:mod:`prfaas_plan.energy`). :func:`prepare` builds what does not depend on the target rate or
the TTFT SLO once (a :class:`SizingSetup`); :func:`size_prepared` sizes one target on it, as a
frontier does per point. Rates are requests/s, times seconds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from prfaas_plan.defaults import DEFAULT_BUCKETS
from prfaas_plan.errors import Infeasible, InvalidInput, did_you_mean
from prfaas_plan.sizing.result import SizedPlan, SizedPool, SizingResult, SizingSLO
from prfaas_plan.sizing.tiers import LinkTier, load_link_tiers

if TYPE_CHECKING:
    from prfaas_plan.energy import SiteEnergy
    from prfaas_plan.scenario import Scenario
    from prfaas_plan.sizing.pools import PoolProfile
    from prfaas_plan.sizing.search import Context

MAX_INSTANCES_LIMIT = 10_000
"""The largest ``max_instances_per_role`` accepted (a larger one is a typo)."""


def _check(target_rps: float, max_instances_per_role: int, slo: SizingSLO | None) -> None:
    if isinstance(target_rps, bool) or not isinstance(target_rps, int | float) or not 0 < target_rps < math.inf:
        raise InvalidInput(f"--target-rps: {target_rps!r} is not a positive, finite rate; give requests/s, e.g. 3.0")
    if isinstance(max_instances_per_role, bool) or not isinstance(max_instances_per_role, int) \
            or not 1 <= max_instances_per_role <= MAX_INSTANCES_LIMIT:
        raise InvalidInput(f"max_instances_per_role: give a whole number from 1 to {MAX_INSTANCES_LIMIT:,}, "
                           f"got {max_instances_per_role!r}")
    if slo is not None and not isinstance(slo, SizingSLO):
        raise InvalidInput("slo: give a SizingSLO(ttft_s=..., ttft_quantile=..., tpot_s=...) or None")


def _gpu_ids(sc: Scenario, gpus: tuple[str, ...] | None) -> tuple[str, ...]:
    """The candidate GPU ids (default: the scenario's two types), each checked to exist."""
    from prfaas_plan.data import list_entries

    ids = tuple(dict.fromkeys(gpus if gpus else (sc.spec.prfaas.gpu, sc.spec.local.gpu)))
    known = [p.stem for p in list_entries("prfaas_plan.data.hardware_db")]
    for g in ids:
        if g not in known:
            raise InvalidInput(f"--gpus: unknown GPU {g!r}{did_you_mean(g, known)}; known: {', '.join(known)}")
    return ids


def _scenario_for(sc: Scenario, slo: SizingSLO) -> Scenario:
    """The scenario with the sizing's TPOT SLO (decode capacity is computed at it)."""
    if slo.tpot_s is not None and slo.tpot_s != sc.spec.slo.tpot_s:
        return sc.with_updates(**{"slo.tpot_s": slo.tpot_s})
    return sc


def sizing_context(sc: Scenario, target_rps: float, slo: SizingSLO, tiers: tuple[LinkTier, ...],
                   sites: Mapping[str, SiteEnergy], max_n: int, n_buckets: int) -> Context:
    """What every combination of a sizing shares (:class:`~prfaas_plan.sizing.search.Context`): the
    planner's inputs of the scenario (its decode numbers are replaced per combination, so
    placeholder constants spare a decode-capacity solve here) and its buckets."""
    from prfaas_plan.planner import buckets, plan_inputs
    from prfaas_plan.sizing.search import Context

    base = sc.with_updates(**{"decode.batch_max": 1, "decode.step_s": sc.spec.slo.tpot_s})
    inp = plan_inputs(base)
    return Context(inp, buckets(inp, n_buckets), float(target_rps), slo, tiers, sites, max_n)


def _profiles(sc: Scenario, ids: tuple[str, ...], layouts: tuple[str, ...] | None, tokens: np.ndarray) \
        -> tuple[list[PoolProfile], list[PoolProfile], tuple[str, ...]]:
    """PrfaaS-site and local-site instance types, and a note per type that cannot be used (for
    anything, or for decode only)."""
    from prfaas_plan.sizing.pools import parse_layout, pool_layout, pool_profile

    if layouts:
        remote_l = local_l = tuple(dict.fromkeys(parse_layout(x) for x in layouts))
    else:
        remote_l, local_l = (pool_layout(sc.spec.prfaas, sc.model),), (pool_layout(sc.spec.local, sc.model),)
    cache: dict = {}

    def prof(g: str, lay) -> PoolProfile:
        if (g, lay) not in cache:
            cache[g, lay] = pool_profile(sc, g, lay, tokens)
        return cache[g, lay]

    remote = [prof(g, lay) for g in ids for lay in remote_l]
    local = [prof(g, lay) for g in ids for lay in local_l]
    skipped = tuple(f"{p.name}: {p.problem}" if p.problem else f"{p.name} (for decode): {p.decode_problem}"
                    for p in cache.values() if p.problem or p.decode_problem)
    return remote, local, skipped


def _best(plans: list[SizedPlan]) -> SizedPlan:
    """The cheapest feasible plan, else the first infeasible one (its reason names the constraint)."""
    ok = [p for p in plans if p.feasible]
    return min(ok, key=lambda p: p.usd_per_hour) if ok else plans[0]


def _prefill_bound(ctx: Context, remote: PoolProfile, local: PoolProfile) -> float:
    """A lower bound on a pair's prefill $/hour: every length bucket prefilled where its busy
    instance-seconds cost least, fractional instances, a free link (no solve needed)."""
    from prfaas_plan.sizing.search import instance_usd_per_hour

    cr, cl = instance_usd_per_hour(remote, ctx.sites["prfaas"]), instance_usd_per_hour(local, ctx.sites["local"])
    return float(ctx.target_rps * np.dot(ctx.b.probs, np.minimum(cr * remote.prefill_s, cl * local.prefill_s)))


def _prfaas_pd(ctx: Context, remote: list[PoolProfile], local: list[PoolProfile]) -> tuple[SizedPlan, int]:
    """The cheapest PrfaaS-PD plan over every (PrfaaS, local) instance-type pair, visited in the
    order of a lower bound (decode pool + :func:`_prefill_bound`); a pair whose bound, or whose
    MILP cost with every cap at 1, is not below the best plan found is skipped
    (:data:`~prfaas_plan.sizing.search.STOPPING_RULE`)."""
    from prfaas_plan.sizing.milp import Routing
    from prfaas_plan.sizing.search import cost_solution, decode_pool, instance_usd_per_hour, problem, size_combination

    pairs = []
    for r, lp in ((r, lp) for r in remote for lp in local if r.prefill_s is not None and lp.prefill_s is not None):
        decs = [p for p in local if p.gpu.id == lp.gpu.id]
        dec = decode_pool(ctx, decs)
        decode_usd = dec[1] * instance_usd_per_hour(dec[0], ctx.sites["local"]) if dec is not None else math.inf
        pairs.append((decode_usd + _prefill_bound(ctx, r, lp), decode_usd, r, lp, decs))
    pairs.sort(key=lambda x: x[0])
    plans, solves = [], 0
    for bound, decode_usd, r, lp, decs in pairs:
        best = _best(plans) if plans else None
        beaten = best is not None and best.feasible
        if beaten and bound >= best.usd_per_hour * (1 - 1e-12):
            break
        first = cost_solution(ctx, problem(ctx, r, lp), r, lp, Routing())
        solves += 1
        if beaten and (first is None or first.prefill_usd_per_hour + first.link_usd_per_hour + decode_usd
                       >= best.usd_per_hour * (1 - 1e-12)):
            continue
        plan, it = size_combination(ctx, "prfaas-pd", f"PrfaaS-PD {r.name} -> {lp.gpu.id}", r, lp, decs, first)
        plans.append(plan)
        solves += max(it - 1, 0)
    if not plans:
        return _none(ctx, "prfaas-pd", "PrfaaS-PD", remote + local), solves
    return _best(plans), solves


def _none(ctx: Context, kind: str, label: str, profiles: list[PoolProfile]) -> SizedPlan:
    """A kind without a usable instance type: infeasible, naming why the types were skipped."""
    why = "; ".join(dict.fromkeys(p.problem or p.decode_problem for p in profiles if p.problem or p.decode_problem))
    return SizedPlan.infeasible(kind, label, ctx.target_rps, "memory", why or "no instance type to buy",
                                ctx.tokens_per_request)


def _others(ctx: Context, ids: tuple[str, ...], remote: list[PoolProfile], local: list[PoolProfile]) \
        -> tuple[list[SizedPlan], int]:
    """Homogeneous PD and colocated on each GPU type, and the best naive-heterogeneous plan."""
    from prfaas_plan.sizing.colocated import size_colocated
    from prfaas_plan.sizing.search import size_combination

    out, solves = [], 0
    for g in ids:
        mine = [p for p in local if p.gpu.id == g]
        homo = []
        for lp in (p for p in mine if p.prefill_s is not None):
            plan, it = size_combination(ctx, "homogeneous-pd", f"homogeneous PD {g}", None, lp, mine)
            homo.append(plan)
            solves += it
        out.append(_best(homo) if homo else _none(ctx, "homogeneous-pd", f"homogeneous PD {g}", mine))
        colo = [size_colocated(ctx, p) for p in mine if not p.problem]
        out.append(_best(colo) if colo else _none(ctx, "colocated", f"colocated {g}", mine))
    naive = []
    for r in (p for p in remote if p.prefill_s is not None):
        for g in ids:
            decs = [p for p in local if p.gpu.id == g]
            plan, it = size_combination(ctx, "naive-heterogeneous", f"naive heterogeneous {r.name} -> {g}", r, None,
                                        decs)
            naive.append(plan)
            solves += it
    out.append(_best(naive) if naive else _none(ctx, "naive-heterogeneous", "naive heterogeneous", remote))
    return out, solves


@dataclass(frozen=True)
class SizingSetup:
    """What every sizing of one scenario, grid and TPOT SLO shares, whatever the target rate or
    TTFT SLO: the :class:`~prfaas_plan.sizing.search.Context` (planner inputs, buckets, tiers,
    sites, instance limit, and the memo of solves and TTFT quantiles), the GPU ids, the PrfaaS-site
    and local-site instance types (:func:`_profiles`) and the notes on those skipped. Made by
    :func:`prepare`; :func:`size_prepared` sizes one target on it (a frontier prepares once)."""

    ctx: Context
    ids: tuple[str, ...]
    remote: tuple[PoolProfile, ...]
    local: tuple[PoolProfile, ...]
    skipped: tuple[str, ...]

    @property
    def slo(self) -> SizingSLO:
        """The SLOs it was prepared with (the TPOT SLO is fixed; the TTFT SLO may change per sizing)."""
        return self.ctx.slo


def prepare(sc: Scenario, slo: SizingSLO | None = None, *, gpus: tuple[str, ...] | None = None,
            link_tiers: tuple[LinkTier, ...] | None = None, layouts: tuple[str, ...] | None = None,
            max_instances_per_role: int = 64, sites: Mapping[str, SiteEnergy] | None = None,
            n_buckets: int = DEFAULT_BUCKETS) -> SizingSetup:
    """The :class:`SizingSetup` of :func:`size`'s arguments but the target rate (``slo``: its TPOT
    SLO sets the decode capacity; default the scenario's SLOs)."""
    from prfaas_plan.energy import default_sites

    _check(1.0, max_instances_per_role, slo)
    slo = slo or SizingSLO.of_scenario(sc)
    sc = _scenario_for(sc, slo)
    ids = _gpu_ids(sc, gpus)
    tiers = load_link_tiers() if link_tiers is None else tuple(link_tiers)
    ctx = sizing_context(sc, 1.0, slo, tiers, sites or default_sites(), max_instances_per_role, n_buckets)
    remote, local, skipped = _profiles(sc, ids, layouts, ctx.b.tokens)
    return SizingSetup(ctx, ids, tuple(remote), tuple(local), skipped)


def size_prepared(setup: SizingSetup, target_rps: float, slo: SizingSLO | None = None) -> SizingResult:
    """:func:`size` on a prepared setup: ``target_rps`` (requests/s) within ``slo`` (default the
    setup's; its TPOT SLO must be the setup's, the TTFT SLO and percentile may differ)."""
    _check(target_rps, setup.ctx.max_instances, slo)
    slo = slo or setup.slo
    if slo.tpot_s != setup.slo.tpot_s:
        raise InvalidInput(f"slo.tpot_s: {slo.tpot_s!r} is not the {setup.slo.tpot_s!r} the setup was prepared "
                           "with (decode capacity depends on it); prepare another setup for that TPOT SLO")
    from dataclasses import replace

    from prfaas_plan.sizing.search import STOPPING_RULE

    ctx = replace(setup.ctx, target_rps=float(target_rps), slo=slo)  # the memo is shared
    remote, local = list(setup.remote), list(setup.local)
    best_pd, solves = _prfaas_pd(ctx, remote, local)
    others, more = _others(ctx, setup.ids, remote, local)
    candidates = (best_pd, *others)
    feasible = [c for c in candidates if c.feasible]
    if not feasible:
        raise Infeasible(f"infeasible: no deployment serves {target_rps:g} req/s within the SLOs; binding "
                         f"constraint: {best_pd.reason}")
    return SizingResult(float(target_rps), slo, min(feasible, key=lambda c: c.usd_per_hour), candidates,
                        solves + more, STOPPING_RULE, setup.skipped)


def size(sc: Scenario, target_rps: float, slo: SizingSLO | None = None, *, gpus: tuple[str, ...] | None = None,
         link_tiers: tuple[LinkTier, ...] | None = None, layouts: tuple[str, ...] | None = None,
         max_instances_per_role: int = 64, sites: Mapping[str, SiteEnergy] | None = None,
         n_buckets: int = DEFAULT_BUCKETS) -> SizingResult:
    """The cheapest deployment serving ``target_rps`` (requests/s) within ``slo`` (default: the
    scenario's TTFT and TPOT SLOs), over GPU types ``gpus`` (default the scenario's two) per site
    and role, parallel layouts ``layouts`` (labels such as ``tp8``, ``dp8-ep8``; default each
    pool's own), link tiers (default ``cost_db/link_tiers.yaml``), at most
    ``max_instances_per_role`` instances per pool, site energy ``sites`` (default
    ``cost_db/sites.yaml``), on ``n_buckets`` length buckets (the planner's default, so that a target of ``plan``'s Lambda_max
    is sized on the same model): :func:`size_prepared` on :func:`prepare`. Raises :class:`InvalidInput` for bad
    input and :class:`Infeasible` (naming the binding constraint) when no candidate can serve it."""
    _check(target_rps, max_instances_per_role, slo)
    setup = prepare(sc, slo, gpus=gpus, link_tiers=link_tiers, layouts=layouts,
                    max_instances_per_role=max_instances_per_role, sites=sites, n_buckets=n_buckets)
    return size_prepared(setup, target_rps)


__all__ = ["LinkTier", "SizedPlan", "SizedPool", "SizingResult", "SizingSLO", "SizingSetup", "load_link_tiers", "prepare",
           "size", "size_prepared", "sizing_context"]
