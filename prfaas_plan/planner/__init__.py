"""The planner: threshold t, instance counts, throughput, egress, cost, and TTFT of a scenario.

:func:`plan` runs one of two modes over the same inputs (:mod:`.inputs`) and returns a
:class:`PlanResult` (:mod:`.result`):

* **paper** (:mod:`.paper`): Eqs. 3-8 of the PrfaaS paper exactly as written, grid search over
  ``t`` and ``N_p``;
* **exact** (:mod:`.milp`): the bucketed MILP (HiGHS, verified; CBC as the fallback), with
  ``E[T(L)]`` instead of ``T(E[L])`` and any routing policy;

then the homogeneous-PD and naive-heterogeneous baselines, and TTFT percentiles and the TTFT-SLO
rate from the queueing model (:mod:`.ttft`). Rates are requests per second, times seconds, lengths
tokens (uncached prefill lengths), link rates Gbps, prices US dollars.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prfaas_plan.defaults import DEFAULT_BUCKETS
from prfaas_plan.errors import Infeasible, InvalidInput
from prfaas_plan.handoff import MIN_LINK_SHARE
from prfaas_plan.planner.inputs import Buckets, PlanInputs, buckets, plan_inputs, split_cache_buckets
from prfaas_plan.planner.milp import (
    RATE_TOL_RPS,
    ExactSolution,
    Pools,
    baselines_exact,
    best_fixed_count_lp,
    exact_plan,
    fixed_count_lp,
    plan_exact,
    plan_exact_per_cluster,
    solve_exact,
)
from prfaas_plan.planner.paper import (
    T_GRID_POINTS,
    T_GRID_QUANTILES,
    baselines_paper,
    paper_stage_rates,
    plan_paper,
    sweep_np,
    sweep_threshold,
    threshold_grid,
)
from prfaas_plan.planner.result import PATHS, Plan, PlanPoint, PlanResult, make_plan
from prfaas_plan.planner.staging import buffer_capped, held_decode_bytes, staged
from prfaas_plan.planner.ttft import (
    offload_fractions,
    slo_rate,
    ttft_at,
    ttft_records,
    ttft_table,
    unhidden_transfer_s,
)
from prfaas_plan.vocab import PLAN_MODES

if TYPE_CHECKING:
    from prfaas_plan.scenario import Scenario
    from prfaas_plan.vocab import PlanMode

__all__ = [
    "DEFAULT_BUCKETS", "MIN_LINK_SHARE", "PATHS", "RATE_TOL_RPS", "T_GRID_POINTS", "T_GRID_QUANTILES",
    "Buckets", "ExactSolution", "Plan", "PlanInputs", "PlanPoint", "PlanResult", "Pools",
    "baselines_exact", "baselines_paper", "best_fixed_count_lp", "buckets", "exact_plan", "fixed_count_lp",
    "held_decode_bytes", "make_plan", "offload_fractions", "paper_stage_rates", "plan", "plan_exact", "plan_exact_per_cluster",
    "plan_inputs", "plan_paper", "slo_rate", "solve_exact", "split_cache_buckets", "sweep_np",
    "sweep_threshold", "threshold_grid", "ttft_at", "ttft_records", "ttft_table", "unhidden_transfer_s",
]


def plan(sc: Scenario, mode: PlanMode = "exact", load: float | None = None,
         n_buckets: int = DEFAULT_BUCKETS) -> PlanResult:
    """Plan a scenario: PrfaaS-PD (threshold t, instance split, Lambda_max, egress, cost), the
    homogeneous and naive baselines, and TTFT percentiles from the queueing model.

    ``load``: the fraction of each plan's Lambda_max at which TTFT is reported (default the
    scenario's); ``n_buckets``: exact mode's length buckets. Raises :class:`InvalidInput` for a bad
    mode or load and :class:`Infeasible` when no rate can be served or the TTFT SLO cannot be met.
    """
    if mode not in PLAN_MODES:
        raise InvalidInput(f"--mode: {mode!r} is not a planner mode; use exact or paper")
    load = sc.spec.load if load is None else float(load)
    if not 0 < load < 1:
        raise InvalidInput("--load: give a fraction of the maximum rate between 0 and 1 (e.g. 0.8)")
    inp = plan_inputs(sc)
    b = buckets(inp, n_buckets)
    per_cluster = mode == "exact" and inp.trace is not None and inp.cache_blocks != 0 and inp.n_prfaas > 0
    staging: dict = {}
    best_inp, best, b_best = _staged(inp, lambda i: _solve_best(i, b, mode, per_cluster, n_buckets), staging,
                                     "prfaas-pd")
    # the baselines run one cluster each, so one shared prefix cache is exact for them
    base = _baselines(inp, b, mode, staging)
    if best.lambda_max_rps <= 0:
        raise Infeasible(f"infeasible: no request rate can be served; binding constraint: {best.binding}")
    plans = {best.name: best, **base}
    plan_buckets = {name: (b_best if name == best.name else b) for name in plans}
    ttft = tuple(ttft_records(inp, plans, plan_buckets, load))
    for name, record in staging.items():  # the estimate the simulator's held memory is checked against
        p = plans[name]
        record["load"] = load
        record["held_bytes_per_gpu_at_load"] = held_decode_bytes(best_inp, p, plan_buckets[name], load * p.lambda_max_rps)
    slo = {}
    s = sc.spec.slo
    if s.ttft_s is not None:
        slo = {name: slo_rate(inp, p, plan_buckets[name], s.ttft_quantile, s.ttft_s) for name, p in plans.items()
               if p.lambda_max_rps > 0}
        if slo[best.name] <= 0:
            floor_s = ttft_at(inp, best, b_best, 0.0)["all"].quantile(s.ttft_quantile)
            raise Infeasible(
                f"infeasible: slo.ttft_s: P{round(s.ttft_quantile * 100)} TTFT is {floor_s:.2f} s even at "
                f"vanishing load, above the {s.ttft_s:g} s SLO (prefill of the longest requests plus KV "
                f"transfer); relax slo.ttft_s, add link bandwidth or faster prefill GPUs"
            )
    return PlanResult(sc, mode, best, base, best_inp, b_best, ttft, slo, b, staging or None)


def _solve_best(inp: PlanInputs, b: Buckets, mode: PlanMode, per_cluster: bool, n_buckets: int) -> tuple[Plan, Buckets]:
    """The PrfaaS-PD plan of ``inp`` and the buckets it was solved on (per-cluster caches for a trace)."""
    best = plan_exact(inp, b) if mode == "exact" else plan_paper(inp)
    return plan_exact_per_cluster(inp, best, n_buckets) if per_cluster else (best, b)


def _staged(inp: PlanInputs, solve, staging: dict, name: str) -> tuple[PlanInputs, Plan, Buckets]:
    """One plan made by ``solve`` (returning the plan and its buckets), with staging memory charged
    (:func:`.staging.staged`, recorded in ``staging[name]``) when the scenario asks, then capped by
    the PrfaaS transfer buffer."""
    if inp.staging is None:
        p, b_p = solve(inp)
    else:
        inp, p, b_p, staging[name] = staged(inp, solve)
    return inp, buffer_capped(inp, p, b_p), b_p


def _baselines(inp: PlanInputs, b: Buckets, mode: PlanMode, staging: dict) -> dict[str, Plan]:
    """The homogeneous-PD and naive-heterogeneous baselines, each with its own staging fixed point."""
    solved: dict[int, dict[str, Plan]] = {}  # by BS_max: both baselines come from one call

    def solve_all(i: PlanInputs) -> dict[str, Plan]:
        if i.decode_batch_max not in solved:
            solved[i.decode_batch_max] = baselines_exact(i, b) if mode == "exact" else baselines_paper(i)
        return solved[i.decode_batch_max]

    base = solve_all(inp)
    if inp.staging is None and inp.transfer_buffer_bytes is None:
        return base
    return {name: _staged(inp, lambda i, n=name: (solve_all(i)[n], b), staging, name)[1] for name in base}
