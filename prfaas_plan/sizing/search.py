"""Sizing one combination of instance types: the cost MILP, then the percentile-TTFT loop, priced
and named as a :class:`~prfaas_plan.sizing.result.SizedPlan`.

The percentile TTFT SLO is not linear in the decision variables. The loop (:func:`size_combination`):
solve the MILP (:func:`~prfaas_plan.sizing.milp.solve_cost`) with every utilisation cap at 1;
evaluate the plan's TTFT at the target rate with the planner's queueing model
(:func:`prfaas_plan.planner.ttft_at`); if the SLO percentile is over the SLO, take the path whose
percentile is larger (PrfaaS or local prefill), and on the PrfaaS path the busier of its compute
and its link, and set that pool's cap to :data:`TIGHTEN` times the smaller of its cap and its
utilisation; re-solve. :data:`STOPPING_RULE` says when it stops. MILP solves, balanced routings
and TTFT quantiles are memoised in the context (:func:`memoised`), keyed by what they depend on,
so the three loops of a combination, the descent and the points of a frontier compute each once.

With staging memory on (``decode.staging_memory``), a solution's decode pool is raised to the
fewest instances whose staged ``BS_max`` covers the target (:func:`staged_decode`: the held bytes
at the target rate under the solution's routing, a direct computation since the rate is fixed);
the MILP itself prices decode unstaged (a lower bound), the descent prices it staged.

Rates are requests/s, times seconds, prices $/hour, link rates Gbps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from prfaas_plan.energy import energy_usd_per_hour, facility_power_w, kwh_per_million_tokens
from prfaas_plan.sizing.milp import CostProblem, CostSolution, Routing, solve_cost
from prfaas_plan.sizing.result import SizedPlan, SizedPool
from prfaas_plan.units import BITS_PER_BYTE, GBPS_BITS_PER_S

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from prfaas_plan.energy import SiteEnergy
    from prfaas_plan.planner import Buckets, PlanInputs
    from prfaas_plan.sizing.pools import PoolProfile
    from prfaas_plan.sizing.result import PlanKind, SizingSLO
    from prfaas_plan.sizing.tiers import LinkTier

TIGHTEN = 0.8
"""Factor by which the loop lowers the utilisation cap of the pool whose wait dominates."""
CAP_FLOOR = 0.05
"""A cap that would fall below this utilisation ends the loop: the plan is infeasible."""
MAX_ITERATIONS = 60
"""Most MILP solves of one combination (the floor ends the loop before: 0.8^14 < 0.05 per pool)."""
SWAP_MOST = 2
"""The descent may trade one instance of a prefill role for up to this many of the other."""
STOPPING_RULE = (
    f"per combination: stop when the P-quantile TTFT at the target rate meets the SLO (feasible); "
    f"otherwise lower the utilisation cap of the dominating pool (PrfaaS prefill, local prefill or link) to "
    f"{TIGHTEN} x min(cap, its utilisation) and re-solve; when a cap would fall below {CAP_FLOOR}, drop that "
    f"prefill path (PrfaaS, with its link, or local) and start the other's caps afresh; infeasible when it is "
    f"the last path, "
    f"when no plan within the instance limit meets the caps, or after {MAX_ITERATIONS} solves; infeasible at once "
    f"when the quantile at vanishing load (each length on its faster path) is over the SLO. A feasible plan is "
    f"then descended: one instance fewer of a prefill role (and up to {SWAP_MOST} more of the other; opening the "
    f"PrfaaS path takes each tier, closing it drops the line) or another tier, the cheapest such move kept while "
    f"the SLO holds, until none lowers the cost. A "
    f"PrfaaS-PD combination also runs the loop with everything and with nothing offloaded and keeps the cheapest. "
    f"PrfaaS-PD pairs of instance types are visited in the order of a lower bound (decode pool plus each length "
    f"prefilled where it costs least, fractional instances, free link); the search stops at the first pair whose "
    f"bound is not below the best feasible cost found, and skips a pair whose MILP cost with every cap at 1 "
    f"(caps only raise cost) is not below it."
)
STAGE_LABELS = {"prfaas": "PrfaaS prefill", "pd_p": "local prefill", "pd_d": "decode", "link": "link"}
"""How the binding stage is named."""


@dataclass(frozen=True)
class Context:
    """What every combination of one sizing shares: the planner's inputs and buckets of the
    (TPOT-adjusted) scenario, the target, the SLOs, the link tiers and efficiency, the sites'
    energy, and the instance limit per role; and ``memo``, the solves and TTFT quantiles already
    computed (:func:`memoised`), which a context made with :func:`dataclasses.replace` for another
    target or SLO shares: every key holds what the value depends on (instance types, target rate,
    caps, counts, quantile), never the SLO limits, so a frontier reuses them across its points."""

    inp: PlanInputs
    b: Buckets
    target_rps: float
    slo: SizingSLO
    tiers: tuple[LinkTier, ...]
    sites: Mapping[str, SiteEnergy]
    max_instances: int
    memo: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def link_efficiency(self) -> float:
        return self.inp.scenario.spec.link.efficiency

    @property
    def tokens_per_request(self) -> float:
        return self.inp.mean_tokens + self.inp.output_tokens


def memoised(ctx: Context, key: tuple, compute: Callable[[], Any]) -> Any:
    """``ctx.memo[key]``, computed by ``compute()`` the first time (the values are pure functions of
    their keys and never mutated)."""
    if key not in ctx.memo:
        ctx.memo[key] = compute()
    return ctx.memo[key]


def _name(prof: PoolProfile | None) -> str | None:
    return prof.name if prof is not None else None


def cost_solution(ctx: Context, pb: CostProblem, remote: PoolProfile | None, local: PoolProfile | None,
                  caps: Routing) -> CostSolution | None:
    """:func:`~prfaas_plan.sizing.milp.solve_cost` of ``pb`` (the :func:`problem` of these instance
    types at the context's target), once per context memo."""
    return memoised(ctx, ("milp", _name(remote), _name(local), ctx.target_rps, caps), lambda: solve_cost(pb, caps))


def instance_usd_per_hour(prof: PoolProfile, site: SiteEnergy) -> float:
    """Rental plus energy at full load of one instance, $/hour (what the MILP minimises)."""
    return prof.usd_per_hour + energy_usd_per_hour(prof.gpu, prof.gpus_per_instance, 1.0, site)


def decode_pool(ctx: Context, profiles: list[PoolProfile]) -> tuple[PoolProfile, int] | None:
    """The cheapest decode pool among ``profiles`` for the target: ``(profile, instances)``, with
    ``ceil(target / decode rate)`` instances (at least one); None when none fits the limit."""
    best = None
    for p in profiles:
        if p.decode_rps is None or p.decode_rps <= 0:
            continue
        n = max(1, math.ceil(ctx.target_rps / p.decode_rps * (1 - 1e-12)))
        cost = n * instance_usd_per_hour(p, ctx.sites["local"])
        if n <= ctx.max_instances and (best is None or cost < best[0]):
            best = (cost, p, n)
    return None if best is None else (best[1], best[2])


def combination_inputs(ctx: Context, remote: PoolProfile | None, local: PoolProfile | None, decode: PoolProfile,
                       tier: LinkTier | None) -> tuple[PlanInputs, Buckets]:
    """The planner's inputs and buckets of one combination: PrfaaS and local prefill seconds of
    the two instance types, the decode profile's batch and step, the tier's usable link rate. What
    the TTFT check and :func:`prfaas_plan.planner.fixed_count_lp` run on."""
    from prfaas_plan.planner import Buckets

    none = np.zeros_like(ctx.b.tokens)  # a path without instances carries no requests
    t_r = remote.prefill_s if remote is not None else none
    t_l = local.prefill_s if local is not None else none
    link = tier.gbps * ctx.link_efficiency * GBPS_BITS_PER_S if tier is not None else 0.0
    inp = replace(ctx.inp, decode_batch_max=decode.decode_batch_max, decode_step_s=decode.decode_step_s,
                  staging=decode.staging, link_bits_per_s=link, link_nominal_bits_per_s=tier.gbps * GBPS_BITS_PER_S if tier else 0.0)
    return inp, Buckets(ctx.b.tokens, ctx.b.probs, t_r, t_l, ctx.b.kv_bytes)


def _key(c: _Combo, ctx: Context, sol: CostSolution) -> tuple:
    """What a solution's evaluation depends on (for :func:`memoised`)."""
    return (_name(c.remote), _name(c.local), _name(c.decode), c.n_d, ctx.target_rps, sol.n_remote, sol.n_local,
            sol.tier, sol.offload.tobytes())


def staged_decode(ctx: Context, c: _Combo, sol: CostSolution) -> tuple[int, int] | None:
    """Decode instances and ``BS_max`` per instance that serve the target under the solution's
    routing: ``(c.n_d, BS_max)`` without staging memory; with it (the decode profile's
    :class:`~prfaas_plan.handoff.Staging`), the fewest instances ``n >= c.n_d`` whose staged
    ``BS(n) = batch_max_with(H / n)`` gives ``n BS(n) / (T_decode L_out) >= target``, ``H`` the bytes
    per GPU staged requests hold at the target (:func:`prfaas_plan.planner.held_decode_bytes` of the
    plan with one decode instance). At a fixed rate ``H`` does not depend on ``BS_max``: a direct
    computation, not the planner's fixed point. None when more than the instance limit are needed."""
    if c.decode.staging is None:
        return c.n_d, c.decode.decode_batch_max
    return memoised(ctx, ("staged", *_key(c, ctx, sol)), lambda: _staged_now(ctx, c, sol))


def _staged_now(ctx: Context, c: _Combo, sol: CostSolution) -> tuple[int, int] | None:
    from prfaas_plan.planner import ExactSolution, exact_plan, held_decode_bytes

    inp, b = combination_inputs(ctx, c.remote, c.local, c.decode, sol.tier)
    lam = ctx.target_rps
    es = ExactSolution(lam, lam * b.probs * sol.offload, lam * b.probs * (1 - sol.offload), sol.n_local, 1, "lp")
    held = held_decode_bytes(inp, exact_plan(inp, b, "prfaas-pd", es, sol.n_remote), b, lam)
    running = lam * c.decode.decode_step_s * ctx.inp.output_tokens  # requests decoding at once (Little's law)
    for n in range(c.n_d, ctx.max_instances + 1):
        bs = c.decode.staging.batch_max_with(held / n)
        if n * bs >= running * (1 - 1e-12):
            return n, bs
    return None


def _stage_rates(ctx: Context, sol: CostSolution, decode: PoolProfile, n_d: int,
                 remote: PoolProfile | None, local: PoolProfile | None, batch_max: int | None = None) \
        -> dict[str, float]:
    """The rate each stage alone sustains under the solution's routing (requests/s), decode at
    ``batch_max`` per instance (default the profile's)."""
    p, off = ctx.b.probs, sol.offload
    bs = decode.decode_batch_max if batch_max is None else batch_max
    rates = {"pd_d": n_d * (decode.decode_rps if batch_max is None else bs / (decode.decode_step_s
                                                                               * ctx.inp.output_tokens))}
    if remote is not None and off.any():
        rates["prfaas"] = sol.n_remote / float(np.dot(p * remote.prefill_s, off))
        bits = float(np.dot(p * BITS_PER_BYTE * ctx.b.kv_bytes, off))
        if sol.tier is not None and bits > 0:
            rates["link"] = sol.tier.gbps * ctx.link_efficiency * GBPS_BITS_PER_S / bits
    if local is not None and (off < 1).any():
        rates["pd_p"] = sol.n_local / float(np.dot(p * local.prefill_s, 1 - off))
    return rates


VANISHING_SHARE = 1e-9
"""A path's bare TTFT quantile is read at this share of the target rate (no waiting)."""


def _ttft(ctx: Context, sol: CostSolution, rates: dict[str, float], remote: PoolProfile | None,
          local: PoolProfile | None, decode: PoolProfile, n_d: int) -> tuple[dict[str, float], dict[str, float]]:
    """The SLO quantile of TTFT (seconds) at the target rate per path and over all (``"all"``),
    and per path how much of it is waiting (that quantile less the one at vanishing load)."""
    key = ("ttft", _name(remote), _name(local), _name(decode), n_d, ctx.target_rps, ctx.slo.ttft_quantile,
           sol.n_remote, sol.n_local, sol.tier, sol.offload.tobytes(), tuple(sorted(rates.items())))
    return memoised(ctx, key, lambda: _ttft_now(ctx, sol, rates, remote, local, decode, n_d))


def _ttft_now(ctx: Context, sol: CostSolution, rates: dict[str, float], remote: PoolProfile | None,
              local: PoolProfile | None, decode: PoolProfile, n_d: int) -> tuple[dict[str, float], dict[str, float]]:
    """:func:`_ttft`, computed."""
    from prfaas_plan.planner import ExactSolution, exact_plan, ttft_at

    inp, b = combination_inputs(ctx, remote, local, decode, sol.tier)
    lam = min(rates.values())
    es = ExactSolution(lam, lam * b.probs * sol.offload, lam * b.probs * (1 - sol.offload), sol.n_local, n_d, "lp")
    plan = exact_plan(inp, b, "prfaas-pd", es, sol.n_remote)
    q = ctx.slo.ttft_quantile
    loaded = {path: d.quantile(q) for path, d in ttft_at(inp, plan, b, ctx.target_rps).items()}
    bare = {path: d.quantile(q) for path, d in ttft_at(inp, plan, b, ctx.target_rps * VANISHING_SHARE).items()}
    return loaded, {path: loaded[path] - bare[path] for path in loaded if path != "all"}


def _tightened(caps: Routing, waits: dict[str, float], util: dict[str, float]) -> tuple[Routing, str, float]:
    """The caps with the lowered cap of the pool whose wait dominates (the path whose TTFT quantile
    grows most from vanishing load to the target; on the PrfaaS path the busier of its compute and
    its link): (new caps, that pool, its new cap)."""
    remote_w, local_w = waits.get("prfaas", -math.inf), waits.get("pd_p", -math.inf)
    if local_w >= remote_w:
        pool, field = "pd_p", "cap_local"
    elif util.get("link", 0.0) > util.get("prfaas", 0.0):
        pool, field = "link", "cap_link"
    else:
        pool, field = "prfaas", "cap_remote"
    cap = TIGHTEN * min(getattr(caps, field), util.get(pool, 1.0))
    return replace(caps, **{field: cap}), pool, cap


def ttft_floor_s(ctx: Context, remote: PoolProfile | None, local: PoolProfile | None,
                 decode: PoolProfile) -> float:
    """The SLO quantile of TTFT at vanishing load with each length bucket on its faster path
    (PrfaaS prefill plus the unhidden transfer on the fastest tier, or local prefill) plus one
    decode step: no plan of these instance types does better (seconds)."""
    from prfaas_plan.planner import unhidden_transfer_s

    paths = []
    if local is not None:
        paths.append(local.prefill_s)
    if remote is not None and ctx.tiers:
        fastest = max(ctx.tiers, key=lambda t: t.gbps)
        inp, b = combination_inputs(ctx, remote, local, decode, fastest)
        paths.append(remote.prefill_s + unhidden_transfer_s(inp, b, 0.0))
    if not paths:
        return math.inf
    bare = np.min(paths, axis=0) + decode.decode_step_s
    order = np.argsort(bare)
    cum = np.cumsum(ctx.b.probs[order])
    return float(bare[order][min(np.searchsorted(cum, ctx.slo.ttft_quantile * cum[-1]), len(cum) - 1)])


@dataclass(frozen=True)
class _Combo:
    """One combination being sized: its MILP data, instance types and decode pool."""

    pb: CostProblem
    remote: PoolProfile | None
    local: PoolProfile | None
    decode: PoolProfile
    n_d: int


def _evaluate(ctx: Context, c: _Combo, sol: CostSolution) \
        -> tuple[dict[str, float], dict[str, float], dict[str, float], bool]:
    """A solution's stage rates, TTFT quantiles and waits at the target (:func:`_ttft`), and
    whether it meets the TTFT SLO."""
    n_d, bs = staged_decode(ctx, c, sol)
    rates = _stage_rates(ctx, sol, c.decode, n_d, c.remote, c.local, None if c.decode.staging is None else bs)
    if ctx.slo.ttft_s is None:
        return rates, {}, {}, True
    ttft, waits = _ttft(ctx, sol, rates, c.remote, c.local, c.decode, n_d)
    return rates, ttft, waits, ttft["all"] <= ctx.slo.ttft_s


def _at_counts(ctx: Context, c: _Combo, n_r: int, n_p: int, tier: LinkTier | None) -> CostSolution | None:
    """The balanced routing of these bought pools at caps 1, when it serves the target within the
    TTFT SLO; else None."""
    from prfaas_plan.sizing.milp import balanced_routing

    key = ("balanced", _name(c.remote), _name(c.local), ctx.target_rps, n_r, n_p, tier)
    sol = memoised(ctx, key, lambda: balanced_routing(c.pb, Routing(), n_r, n_p, tier))
    return sol if sol is not None and staged_decode(ctx, c, sol) is not None and _evaluate(ctx, c, sol)[3] else None


def check_counts(ctx: Context, remote: PoolProfile | None, local: PoolProfile | None, decode: PoolProfile,
                 n_remote: int, n_local: int, n_decode: int, tier: LinkTier | None) -> bool:
    """Whether these bought pools serve the target within the SLOs, as the sizing judges a plan:
    decode capacity, the balanced routing (:func:`~prfaas_plan.sizing.milp.balanced_routing`) at
    utilisation caps 1, and the TTFT quantile at the target rate."""
    if n_decode * (decode.decode_rps or 0.0) < ctx.target_rps * (1 - 1e-12):
        return False
    c = _Combo(problem(ctx, remote, local), remote, local, decode, n_decode)
    return _at_counts(ctx, c, n_remote, n_local, tier) is not None


def _descend(ctx: Context, c: _Combo, sol: CostSolution) -> CostSolution:
    """Local search below a feasible solution: one instance fewer of a prefill role (and up to
    :data:`SWAP_MOST` more of the other; a move that opens the PrfaaS path takes each tier, one
    that closes it drops the line), or another tier (:func:`_at_counts`); the cheapest feasible
    move that lowers the cost is kept, until there is none."""
    decode_usd = instance_usd_per_hour(c.decode, ctx.sites["local"])

    def cost(x: CostSolution) -> float:  # decode is fixed without staging memory, so left out
        staged = 0.0 if c.decode.staging is None else staged_decode(ctx, c, x)[0] * decode_usd
        return x.prefill_usd_per_hour + x.link_usd_per_hour + staged

    while True:
        n_r, n_p, tier = sol.n_remote, sol.n_local, sol.tier
        counts = [(n_r - 1, n_p + k) for k in range(SWAP_MOST + 1)] + [(n_r + k, n_p - 1) for k in range(SWAP_MOST + 1)]
        # opening the PrfaaS path buys a line (each tier tried); closing it drops the line
        moves = [(a, b, t) for a, b in counts
                 for t in ((tier,) if (a > 0) == (n_r > 0) else c.pb.tiers if a > 0 else (None,))]
        moves += [(n_r, n_p, t) for t in (*c.pb.tiers, None) if t != tier]
        found = [x for a, b, t in moves if 0 <= a <= ctx.max_instances and 0 <= b <= ctx.max_instances
                 and (x := _at_counts(ctx, c, a, b, t)) and cost(x) < cost(sol) * (1 - 1e-12)]
        if not found:
            return sol
        sol = min(found, key=cost)


def size_combination(ctx: Context, kind: PlanKind, label: str, remote: PoolProfile | None,
                     local: PoolProfile | None, decode_profiles: list[PoolProfile],
                     first: CostSolution | None = None) -> tuple[SizedPlan, int]:
    """The cheapest plan of one combination meeting the target and SLOs (or why none does), and
    the MILP solves it took. ``first``: the solve with every cap at 1, when already done. A
    PrfaaS-PD combination also sizes its two corners, everything offloaded and nothing
    offloaded (plans of the same types), and keeps the cheapest."""
    dec = decode_pool(ctx, decode_profiles)
    if dec is None:
        why = "; ".join(dict.fromkeys(p.decode_problem for p in decode_profiles if p.decode_problem)) or \
            f"decode: more than {ctx.max_instances} instances needed"
        return _infeasible(ctx, kind, label, "decode", why), 0
    caps = Routing(remote=kind != "homogeneous-pd", local=kind != "naive-heterogeneous")
    remote, local = (remote if caps.remote else None), (local if caps.local else None)
    c = _Combo(problem(ctx, remote, local), remote, local, dec[0], dec[1])
    if ctx.slo.ttft_s is not None:
        floor = ttft_floor_s(ctx, remote, local, c.decode)
        if floor > ctx.slo.ttft_s:
            return _infeasible(ctx, kind, label, ctx.slo.ttft_label, (
                f"{ctx.slo.ttft_label}: P{round(ctx.slo.ttft_quantile * 100)} TTFT is {floor:.2f} s even at "
                f"vanishing load (bare prefill and KV transfer of the longest requests), above the "
                f"{ctx.slo.ttft_s:g} s SLO; relax the TTFT SLO or use faster prefill GPUs")), 0
    runs = [_loop(ctx, c, caps, kind, label, first)]
    if ctx.slo.ttft_s is not None and remote is not None and local is not None:
        runs += [_loop(ctx, c, Routing(remote=True, local=False), kind, label),
                 _loop(ctx, c, Routing(remote=False, local=True), kind, label)]
    ok = [p for p, _ in runs if p.feasible]
    best = min(ok, key=lambda p: p.usd_per_hour) if ok else runs[0][0]
    return best, sum(it for _, it in runs)


def _loop(ctx: Context, c: _Combo, caps: Routing, kind: PlanKind, label: str,
          first: CostSolution | None = None) -> tuple[SizedPlan, int]:
    """The percentile-TTFT loop of one combination from ``caps`` (:data:`STOPPING_RULE`)."""
    sol, note = first, ""
    for it in range(1, MAX_ITERATIONS + 1):
        sol = sol if it == 1 and sol is not None else cost_solution(ctx, c.pb, c.remote, c.local, caps)
        if sol is None:
            why = note or f"instances: no plan within {ctx.max_instances} instances per role serves " \
                f"{ctx.target_rps:g} req/s"
            return _infeasible(ctx, kind, label, note.split(" (")[0] if note else "instances", why), it
        if staged_decode(ctx, c, sol) is None:
            return _infeasible(ctx, kind, label, "decode", f"decode: with staging memory more than {ctx.max_instances} "
                               "decode instances are needed"), it
        rates, ttft, waits, met = _evaluate(ctx, c, sol)
        if met:
            if ctx.slo.ttft_s is not None:
                sol = _descend(ctx, c, sol)
                rates, ttft, _, _ = _evaluate(ctx, c, sol)
            else:  # reported, not constrained
                ttft = _ttft(ctx, sol, rates, c.remote, c.local, c.decode, staged_decode(ctx, c, sol)[0])[0]
            util = {k: ctx.target_rps / v for k, v in rates.items()}
            binding = note.split(" (")[0] if note else STAGE_LABELS[max(util, key=util.get)]
            pools = (c.remote, c.local, c.decode, staged_decode(ctx, c, sol)[0])
            return _priced(ctx, kind, label, sol, rates, ttft, pools, binding), it
        util = {k: ctx.target_rps / v for k, v in rates.items()}
        caps, pool, cap = _tightened(caps, waits, util)
        note = (f"{ctx.slo.ttft_label} (via {STAGE_LABELS[pool]} utilisation cap {cap:.2f}): "
                f"P{round(ctx.slo.ttft_quantile * 100)} TTFT {ttft['all']:.2f} s at {ctx.target_rps:g} req/s "
                f"against the {ctx.slo.ttft_s:g} s SLO")
        if cap < CAP_FLOOR and caps.remote and caps.local:  # that path is too slow at any load: drop it
            caps = Routing(remote=pool == "pd_p", local=pool != "pd_p")
        elif cap < CAP_FLOOR:
            return _infeasible(ctx, kind, label, ctx.slo.ttft_label, note + f"; the {STAGE_LABELS[pool]} cap fell "
                               f"below {CAP_FLOOR} (relax the TTFT SLO or use faster prefill GPUs)"), it
        sol = None
    return _infeasible(ctx, kind, label, ctx.slo.ttft_label, note + f" after {MAX_ITERATIONS} solves"), MAX_ITERATIONS


def problem(ctx: Context, remote: PoolProfile | None, local: PoolProfile | None) -> CostProblem:
    """The MILP data of a combination (no PrfaaS tier when there is no PrfaaS pool)."""
    return CostProblem(
        ctx.b.probs, remote.prefill_s if remote is not None else None,
        local.prefill_s if local is not None else None, ctx.b.kv_bytes,
        instance_usd_per_hour(remote, ctx.sites["prfaas"]) if remote is not None else 0.0,
        instance_usd_per_hour(local, ctx.sites["local"]) if local is not None else 0.0,
        ctx.tiers if remote is not None else (), ctx.link_efficiency, ctx.max_instances, ctx.target_rps)


def _priced(ctx: Context, kind: PlanKind, label: str, sol: CostSolution, rates: dict[str, float],
            ttft: dict[str, float], pools: tuple, binding: str) -> SizedPlan:
    """A feasible plan with its bill of materials, costs split, energy and routing threshold."""
    remote, local, decode, n_d = pools
    util = {k: ctx.target_rps / v for k, v in rates.items()}
    bought = [(remote, "prfaas_prefill", "prfaas", sol.n_remote, util.get("prfaas", 0.0)),
              (local, "local_prefill", "local", sol.n_local, util.get("pd_p", 0.0)),
              (decode, "local_decode", "local", n_d, util["pd_d"])]
    bought = [x for x in bought if x[0] is not None and x[3] > 0]
    pools_out = tuple(SizedPool(role, site, p.gpu.id, p.gpus_per_instance, p.label, n) for p, role, site, n, _ in bought)
    gpu_cost = sum(p.usd_per_hour * n for p, _, _, n, _ in bought)
    energy = sum(energy_usd_per_hour(p.gpu, p.gpus_per_instance * n, u, ctx.sites[site]) for p, _, site, n, u in bought)
    power = sum(facility_power_w(p.gpu, p.gpus_per_instance * n, u, ctx.sites[site]) for p, _, site, n, u in bought)
    off = sol.offload
    t = float(ctx.b.tokens[np.argmax(off > 0)]) if off.any() and np.all(np.diff(off) >= -1e-9) else None
    t = 0.0 if np.all(off >= 1) else t  # everything offloaded: t = 0, as the planner shows it
    return SizedPlan(kind, label, pools_out, sol.tier, t, ctx.target_rps, min(rates.values()),
                     ttft.get("all"), decode.decode_step_s, gpu_cost, sol.link_usd_per_hour, energy,
                     kwh_per_million_tokens(power, ctx.target_rps * ctx.tokens_per_request), binding, True,
                     tokens_per_request=ctx.tokens_per_request, egress_gbps=sol.egress_gbps)


def _infeasible(ctx: Context, kind: PlanKind, label: str, binding: str, reason: str) -> SizedPlan:
    """A candidate that cannot meet the target and SLOs, and why."""
    return SizedPlan.infeasible(kind, label, ctx.target_rps, binding, reason, ctx.tokens_per_request)


__all__ = ["CAP_FLOOR", "Context", "MAX_ITERATIONS", "STOPPING_RULE", "TIGHTEN", "check_counts", "combination_inputs",
           "cost_solution", "decode_pool", "instance_usd_per_hour", "memoised", "problem", "size_combination",
           "staged_decode", "ttft_floor_s"]
