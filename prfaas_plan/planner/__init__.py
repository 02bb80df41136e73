"""The planner: threshold t, instance counts, throughput, egress, cost, and TTFT.

Two modes over the same inputs (:class:`PlanInputs`):

* **paper** (Eqs. 3-8 of the PrfaaS paper, exactly as written): requests whose uncached length
  exceeds ``t`` go to the PrfaaS cluster; stage throughputs use ``T(l_long)``, ``T(l_short)`` and
  ``S_kv(l_long)``; a 2-D grid search over ``t`` and the local prefill count ``N_p``.
* **exact** (MILP, pulp/CBC): the length distribution is cut into buckets and the offloaded and
  local request rates per bucket are decision variables (``y_b + z_b = Lambda * p_b``), with
  integer ``N_p``/``N_d``; capacities use ``E[T(L)]`` instead of ``T(E[L])`` and any routing policy
  is allowed. A second solve keeps ``Lambda`` at its optimum and minimises the busiest prefill
  stage's utilisation, so that ties are broken towards headroom. The reported ``t`` is the
  shortest offloaded bucket; ``is_threshold`` says whether the optimal offload set is one.
  A MILP answer of "no rate" is only believed when HiGHS's LP at every fixed split agrees.

Rates are requests per second, times seconds, lengths tokens (uncached prefill lengths), link
rates Gbps (1e9 bit/s), prices US dollars.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from prfaas_plan.errors import Infeasible, InvalidInput
from prfaas_plan.kvcache import kv_bytes
from prfaas_plan.perf.roofline import analytic_prefill, decode_capacity
from prfaas_plan.scenario import Scenario, build_workload
from prfaas_plan.units import BITS_PER_BYTE, GBPS_BITS_PER_S

PATHS = ("prfaas", "pd_p", "pd_d")


@dataclass(frozen=True)
class PlanInputs:
    """Everything the planner needs, resolved from a scenario.

    t_remote / t_local: vectorised prefill seconds on one PrfaaS / local instance.
    kv_bytes: vectorised bytes shipped per request (S_kv).
    decode_rps_per_instance: Eq. 5 per local decode instance (``BS_max / (T_decode * L_out)``).
    """

    scenario: Scenario
    lengths: object  # a workload.LengthDist of uncached input lengths
    output_tokens: float
    decode_context_tokens: float
    t_remote: Callable[[np.ndarray], np.ndarray]
    t_local: Callable[[np.ndarray], np.ndarray]
    kv_bytes: Callable[[np.ndarray], np.ndarray]
    decode_batch_max: int
    decode_step_s: float
    decode_source: str
    n_prfaas: int
    n_local: int
    n_baseline: int
    link_bits_per_s: float  # usable: nominal x efficiency (exact mode)
    link_nominal_bits_per_s: float  # B_out as written in Eq. 3 (paper mode)
    trace: object | None = None  # trace to replay with one prefix cache per cluster (exact mode)
    cache_blocks: int | None = 0

    @property
    def decode_rps_per_instance(self) -> float:
        return self.decode_batch_max / (self.decode_step_s * self.output_tokens)

    @property
    def mean_tokens(self) -> float:
        return float(self.lengths.mean_tokens())


def plan_inputs(sc: Scenario) -> PlanInputs:
    """Resolve a scenario: workload, prefill time functions (measured profile when the scenario
    gives one, else the roofline), cache bytes, and decode capacity."""
    resolved = build_workload(sc)
    wl, total_input_tokens = resolved.workload, resolved.mean_input_tokens
    model, cache = sc.model, sc.cache
    prof_r, prof_l = sc.prfaas_profile, sc.local_profile

    def timer(inst, prof):
        if prof is not None:
            return lambda l: np.asarray(prof.prefill_time_s(np.asarray(l, dtype=float)), dtype=float)
        return lambda l: np.asarray(analytic_prefill(model, inst, np.asarray(l, dtype=float)).total_s, dtype=float)

    if prof_r is not None and prof_r.kv_bytes is not None:
        kvf = lambda l: np.asarray(prof_r.kv_bytes_at(np.asarray(l, dtype=float)), dtype=float)  # noqa: E731
    else:
        kvf = lambda l: np.asarray(kv_bytes(model, np.asarray(l, dtype=float), cache), dtype=float)  # noqa: E731

    out = float(wl.output_tokens)
    ctx = total_input_tokens + out / 2
    d = sc.spec.decode
    if d.batch_max and d.step_s:
        bs, step, src = d.batch_max, d.step_s, d.source or "scenario"
    else:
        cap = decode_capacity(model, sc.local_instance, ctx, sc.spec.slo.tpot_s, cache, d.reserve_gib_per_gpu)
        bs, step, src = (d.batch_max or cap.batch_max, d.step_s or cap.step_s,
                         f"performance model ({cap.binding}-bound; {cap.memory_note})")
    if sc.spec.local.instances == 0 and sc.baseline_instances == 0:
        raise InvalidInput("local.gpus: the local PD pool has no GPUs, so nothing can decode; add local GPUs")
    return PlanInputs(
        scenario=sc, lengths=wl.lengths, output_tokens=out, decode_context_tokens=ctx,
        t_remote=timer(sc.prfaas_instance, prof_r), t_local=timer(sc.local_instance, prof_l), kv_bytes=kvf,
        decode_batch_max=int(bs), decode_step_s=float(step), decode_source=src,
        n_prfaas=sc.spec.prfaas.instances, n_local=sc.spec.local.instances, n_baseline=sc.baseline_instances,
        link_bits_per_s=sc.spec.link.gbps * sc.spec.link.efficiency * GBPS_BITS_PER_S,
        link_nominal_bits_per_s=sc.spec.link.gbps * GBPS_BITS_PER_S,
        trace=resolved.trace, cache_blocks=resolved.cache_blocks,
    )


@dataclass(frozen=True)
class Plan:
    """One deployment's capacity plan (PrfaaS-PD or a baseline).

    stage_rps: the request rate each stage alone could sustain (Eq. 6's three terms).
    routing: per-bucket offloaded fraction (exact mode) as a DataFrame, else None.
    """

    name: str
    mode: str
    threshold_tokens: float | None
    instances: dict[str, int]
    gpus: dict[str, int]
    lambda_max_rps: float
    offload_fraction: float
    stage_rps: dict[str, float]
    egress_gbps: float
    link_gbps: float
    binding: str
    cost_usd_per_hour: float
    mean_input_tokens: float
    output_tokens: float
    is_threshold: bool = True
    routing: pd.DataFrame | None = field(default=None, compare=False, repr=False)

    @property
    def routing_kind(self) -> str:
        """``"none"`` (nothing offloaded), ``"all"`` (everything offloaded, t = 0), ``"threshold"``
        (lengths above ``threshold_tokens`` offloaded) or ``"per-bucket"`` (offload shares per
        length bucket that no single threshold expresses: see :meth:`offload_bands`)."""
        if self.offload_fraction <= 0 or self.threshold_tokens is None:
            return "none"
        if self.offload_fraction >= 1 - 1e-9:
            return "all"
        return "threshold" if self.is_threshold else "per-bucket"

    def offload_bands(self) -> list[tuple[float, float, float]]:
        """Runs of consecutive length buckets with one offload share, as ``(first_tokens,
        last_tokens, share)`` (bucket representative lengths in tokens; share 0-1), shortest
        first. Empty for paper-mode plans, which route by threshold and have no buckets."""
        if self.routing is None:
            return []
        tokens = self.routing["tokens"].to_numpy(dtype=float)
        share = self.routing["offload_fraction"].to_numpy(dtype=float).round(3)
        starts = np.flatnonzero(np.r_[True, np.diff(share) != 0])
        ends = np.r_[starts[1:] - 1, len(share) - 1]
        return [(float(tokens[a]), float(tokens[b]), float(share[a])) for a, b in zip(starts, ends)]

    def routing_text(self) -> str:
        """One line saying how requests are routed, e.g. ``t = 22,051 tokens (offload 44%)``."""
        kind = self.routing_kind
        if kind == "none":
            return "no offload: every request is prefilled locally (no threshold applies)"
        if kind == "all":
            return "t = 0: every request is prefilled on the PrfaaS cluster"
        if kind == "threshold":
            return f"t = {self.threshold_tokens:,.0f} tokens (offload {self.offload_fraction:.0%})"
        bands = ", ".join(f"{lo:,.0f}{f'-{hi:,.0f}' if hi > lo else ''} tokens: {share:.0%}"
                          for lo, hi, share in self.offload_bands())
        return (f"not a threshold: {self.offload_fraction:.0%} of requests offloaded by per-bucket shares "
                f"(uncached length: share offloaded) {bands}")

    @property
    def link_utilisation(self) -> float:
        return self.egress_gbps / self.link_gbps if self.link_gbps > 0 else 0.0

    @property
    def utilisation(self) -> dict[str, float]:
        """Busy fraction of each stage when running at ``lambda_max_rps``."""
        return {k: (self.lambda_max_rps / v if v > 0 else 0.0) for k, v in self.stage_rps.items() if np.isfinite(v)}

    @property
    def usd_per_million_tokens(self) -> float:
        """Dollars per million tokens served (input + output) at ``lambda_max_rps``."""
        tokens_per_hour = self.lambda_max_rps * 3600 * (self.mean_input_tokens + self.output_tokens)
        return self.cost_usd_per_hour / tokens_per_hour * 1e6 if tokens_per_hour > 0 else float("inf")

    @property
    def rps_per_usd_hour(self) -> float:
        return self.lambda_max_rps / self.cost_usd_per_hour if self.cost_usd_per_hour else float("inf")

    def row(self) -> dict:
        return {
            "plan": self.name, "mode": self.mode, "routing": self.routing_kind,
            "threshold_tokens": self.threshold_tokens if self.threshold_tokens is not None else np.nan,
            "n_prfaas": self.instances.get("prfaas", 0), "n_pd_p": self.instances.get("pd_p", 0),
            "n_pd_d": self.instances.get("pd_d", 0), "lambda_max_rps": self.lambda_max_rps,
            "offload_fraction": self.offload_fraction, "egress_gbps": self.egress_gbps,
            "link_utilisation": self.link_utilisation, "binding": self.binding,
            "cost_usd_per_hour": self.cost_usd_per_hour, "usd_per_million_tokens": self.usd_per_million_tokens,
        }


def _price(inp: PlanInputs, prfaas_inst: int, local_inst: int) -> float:
    sc = inp.scenario
    return (prfaas_inst * sc.prfaas_instance.price_usd_per_hour + local_inst * sc.local_instance.price_usd_per_hour
            + (sc.spec.link.price_usd_per_hour if prfaas_inst else 0.0))


def _binding(stage_rps: dict[str, float], lam: float, link_rps: float | None = None) -> str:
    # which of decode's two limits (TPOT SLO, memory) sets BS_max is PlanInputs.decode_source
    names = {"prfaas": "PrfaaS prefill (compute)", "pd_p": "local prefill (PD-P)",
             "pd_d": "decode (PD-D)", "link": "inter-DC link bandwidth"}
    candidates = dict(stage_rps)
    if link_rps is not None:
        candidates["link"] = link_rps
    key = min(candidates, key=lambda k: candidates[k])
    if candidates[key] <= 0:  # nothing served: name every stage without capacity
        return " and ".join(names[k] for k in ("link", *PATHS) if candidates.get(k, 1.0) <= 0)
    return names[key]


def _plan(inp: PlanInputs, name: str, mode: str, t, n_pf: int, n_p: int, n_d: int, lam: float, p: float,
          stage: dict[str, float], egress_bits: float, binding: str, routing=None, is_threshold=True) -> Plan:
    sc = inp.scenario
    gpi_r, gpi_l = sc.spec.prfaas.gpus_per_instance, sc.spec.local.gpus_per_instance
    return Plan(
        name=name, mode=mode, threshold_tokens=t,
        instances={"prfaas": n_pf, "pd_p": n_p, "pd_d": n_d},
        gpus={"prfaas": n_pf * gpi_r, "pd_p": n_p * gpi_l, "pd_d": n_d * gpi_l},
        lambda_max_rps=float(lam), offload_fraction=float(p), stage_rps=stage,
        egress_gbps=float(egress_bits / GBPS_BITS_PER_S), link_gbps=sc.spec.link.gbps, binding=binding,
        cost_usd_per_hour=_price(inp, n_pf, n_p + n_d), mean_input_tokens=inp.mean_tokens,
        output_tokens=inp.output_tokens, is_threshold=is_threshold, routing=routing,
    )


# ----------------------------------------------------------------------------- paper mode
T_GRID_POINTS = 400
"""Thresholds tried by paper mode's grid search (log-spaced; about 1% apart over 128-128K tokens)."""
T_GRID_QUANTILES = (0.001, 0.999)
"""The grid spans these quantiles of the length distribution (the extremes route almost nothing)."""


def threshold_grid(inp: PlanInputs, points: int = T_GRID_POINTS) -> np.ndarray:
    """Candidate thresholds: log-spaced over the workload's length range."""
    lo, hi = (float(inp.lengths.quantile(q)) for q in T_GRID_QUANTILES)
    return np.unique(np.geomspace(max(lo, 1.0), max(hi, lo + 1.0), points).round())


def paper_stage_rates(inp: PlanInputs, t: np.ndarray, n_p: np.ndarray, n_pf: int | None = None,
                      n_local=None, link_bits_per_s=None) -> dict[str, np.ndarray]:
    """Eqs. 3-6 on a grid (t along axis 0, N_p along axis 1). Returns request rates each stage
    supports (already divided by p or 1 - p) and Lambda_max.

    n_pf / n_local (instances) and link_bits_per_s (Eq. 3's nominal B_out, bit/s) default to the
    scenario's; arrays shaped ``(..., 1, 1)`` broadcast in front of the (t, N_p) axes, so one call
    evaluates a grid of pools and links (the report's what-if section)."""
    n_pf = inp.n_prfaas if n_pf is None else n_pf
    n_local = inp.n_local if n_local is None else n_local
    b_out = inp.link_nominal_bits_per_s if link_bits_per_s is None else link_bits_per_s
    t = np.asarray(t, dtype=float)[:, None]
    n_p = np.asarray(n_p, dtype=float)[None, :]
    p = np.asarray(inp.lengths.tail_prob(t[:, 0]), dtype=float)[:, None]
    l_long = np.asarray(inp.lengths.mean_above(t[:, 0]), dtype=float)[:, None]  # nan where p = 0
    l_short = np.asarray(inp.lengths.mean_below(t[:, 0]), dtype=float)[:, None]  # nan where p = 1
    with np.errstate(divide="ignore", invalid="ignore"):
        compute = n_pf / inp.t_remote(np.nan_to_num(l_long, nan=1.0))
        link = b_out / (BITS_PER_BYTE * inp.kv_bytes(np.nan_to_num(l_long, nan=1.0)))
        theta_prfaas = np.minimum(compute, link)
        theta_pdp = n_p / inp.t_local(np.nan_to_num(l_short, nan=1.0))
        theta_pdd = (n_local - n_p) * inp.decode_rps_per_instance
        r_prfaas = np.where(p > 0, theta_prfaas / p, np.inf)
        r_pdp = np.where(p < 1, theta_pdp / (1 - p), np.inf)
        link_r = np.where(p > 0, link / p, np.inf)
    r_prfaas, r_pdp, r_pdd = np.broadcast_arrays(r_prfaas, r_pdp, theta_pdd * np.ones_like(p))
    lam = np.minimum(np.minimum(r_prfaas, r_pdp), r_pdd)
    return {"p": p * np.ones_like(lam), "l_long": l_long * np.ones_like(lam), "l_short": l_short * np.ones_like(lam),
            "prfaas": r_prfaas, "pd_p": r_pdp, "pd_d": r_pdd, "link": link_r * np.ones_like(lam), "lambda": lam}


def plan_paper(inp: PlanInputs) -> Plan:
    """Paper mode: exhaustive grid over t and N_p (Eqs. 3-8)."""
    if inp.n_local < 1:
        raise InvalidInput("local.gpus: PrfaaS-PD needs at least one local instance to decode")
    t = np.r_[threshold_grid(inp), np.inf]  # t = inf: offload nothing (a dead link, a slow PrfaaS pool)
    n_p = np.arange(0, inp.n_local)  # keep at least one decode instance
    g = paper_stage_rates(inp, t, n_p)
    i, j = np.unravel_index(np.nanargmax(g["lambda"]), g["lambda"].shape)
    lam, p = float(g["lambda"][i, j]), float(g["p"][i, j])
    stage = {k: float(g[k][i, j]) for k in PATHS}
    egress = lam * p * BITS_PER_BYTE * float(inp.kv_bytes(g["l_long"][i, j])) if p > 0 else 0.0
    return _plan(inp, "prfaas-pd", "paper", float(t[i]) if p > 0 else None, inp.n_prfaas, int(n_p[j]), inp.n_local - int(n_p[j]),
                 lam, p, stage, egress, _binding(stage, lam, float(g["link"][i, j])))


def baselines_paper(inp: PlanInputs) -> dict[str, Plan]:
    """Homogeneous PD (all local-type GPUs, best N_p) and naive heterogeneous (all prefill on
    the PrfaaS pool, all local instances decode), with Eqs. 3-6 at the mean length."""
    out = {}
    l_avg = inp.mean_tokens
    n = inp.n_baseline
    if n >= 2:
        n_p = np.arange(1, n)
        pre = n_p / float(inp.t_local(l_avg))
        dec = (n - n_p) * inp.decode_rps_per_instance
        lam = np.minimum(pre, dec)
        j = int(np.argmax(lam))
        stage = {"prfaas": np.inf, "pd_p": float(pre[j]), "pd_d": float(dec[j])}
        out["homogeneous-pd"] = _plan(inp, "homogeneous-pd", "paper", None, 0, int(n_p[j]), n - int(n_p[j]),
                                      float(lam[j]), 0.0, stage, 0.0, _binding(stage, float(lam[j])))
    if inp.n_prfaas >= 1 and inp.n_local >= 1:
        compute = inp.n_prfaas / float(inp.t_remote(l_avg))
        link = inp.link_nominal_bits_per_s / (BITS_PER_BYTE * float(inp.kv_bytes(l_avg)))
        stage = {"prfaas": min(compute, link), "pd_p": np.inf, "pd_d": inp.n_local * inp.decode_rps_per_instance}
        lam = min(stage["prfaas"], stage["pd_d"])
        out["naive-heterogeneous"] = _plan(inp, "naive-heterogeneous", "paper", 0.0, inp.n_prfaas, 0, inp.n_local,
                                           lam, 1.0, stage, lam * BITS_PER_BYTE * float(inp.kv_bytes(l_avg)),
                                           _binding(stage, lam, link))
    return out


# ----------------------------------------------------------------------------- exact mode
from prfaas_plan.defaults import DEFAULT_BUCKETS


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
    l, p = inp.lengths.buckets(n)
    l = np.asarray(l, dtype=float)
    return Buckets(l, np.asarray(p, dtype=float), inp.t_remote(l), inp.t_local(l), inp.kv_bytes(l))


RATE_TOL_RPS = 1e-9
"""Request rates at or below this (req/s) are solver round-off of zero."""


@dataclass(frozen=True)
class ExactSolution:
    """An optimum of the bucketed model: Lambda and the per-bucket offloaded (y) and locally
    prefilled (z) request rates, all requests/s, and the P:D split. ``solver``: ``"cbc"`` (the
    MILP) or ``"highs"`` (the fixed-count LP check, :func:`best_fixed_count_lp`)."""

    lambda_rps: float
    y_rps: np.ndarray
    z_rps: np.ndarray
    n_p: int
    n_d: int
    solver: str = "cbc"


def _solve(prob) -> bool:
    """Solve with CBC (shipped in pulp's wheel); True when CBC reports an optimum."""
    import pulp

    return pulp.LpStatus[prob.solve(pulp.PULP_CBC_CMD(msg=False))] == "Optimal"


def solve_exact(inp: PlanInputs, b: Buckets, n_pf: int, n_local: int, allow_remote: bool = True,
                allow_local_prefill: bool = True, min_decode: int = 1) -> ExactSolution:
    """The bucketed MILP of docs/design.md section 5 for given pools, checked: CBC's answer stands when it
    serves a positive rate; "no rate" (Lambda = 0, or no optimum) stands only when the independent
    :func:`best_fixed_count_lp` agrees, and otherwise that check's best LP is the answer."""
    import warnings

    with warnings.catch_warnings():  # pulp 3.3 announces API changes for 4.0 on every variable
        warnings.simplefilter("ignore", DeprecationWarning)
        sol = _solve_exact(inp, b, n_pf, n_local, allow_remote, allow_local_prefill, min_decode)
    if sol is not None and sol.lambda_rps > RATE_TOL_RPS:
        return sol
    return best_fixed_count_lp(inp, b, n_pf, n_local, allow_remote, allow_local_prefill, min_decode)


def _solve_exact(inp: PlanInputs, b: Buckets, n_pf: int, n_local: int, allow_remote: bool,
                 allow_local_prefill: bool, min_decode: int) -> ExactSolution | None:
    """CBC on the MILP, then on the headroom tie-break; None when CBC finds no optimum.

    The rate variables are per unit of bucket probability (``y_b = p_b * off_b``, ``z_b = p_b *
    loc_b``), so every balance row is ``off_b + loc_b = Lambda`` with unit coefficients and the
    probabilities (down to 1e-9 in a log-normal's tail) only weight the capacity sums. Written as
    ``y_b + z_b = p_b * Lambda``, CBC 2.10's preprocessing reduced such models to nothing and
    reported Lambda = 0 as optimal. The link row is in Gbit/s, like the other rows' O(1-100) sizes."""
    import pulp

    nb, p = len(b.tokens), b.probs
    prob = pulp.LpProblem("prfaas", pulp.LpMaximize)
    lam = pulp.LpVariable("lam", lowBound=0)
    off = [pulp.LpVariable(f"off{i}", lowBound=0) for i in range(nb)]
    loc = [pulp.LpVariable(f"loc{i}", lowBound=0) for i in range(nb)]
    np_ = pulp.LpVariable("n_p", lowBound=0, upBound=n_local, cat="Integer")
    nd = pulp.LpVariable("n_d", lowBound=min(min_decode, n_local), upBound=n_local, cat="Integer")
    remote_busy = pulp.lpSum(float(p[i] * b.t_remote_s[i]) * off[i] for i in range(nb))  # instances
    local_busy = pulp.lpSum(float(p[i] * b.t_local_s[i]) * loc[i] for i in range(nb))
    egress_gbps = pulp.lpSum(float(p[i] * BITS_PER_BYTE * b.kv_bytes[i] / GBPS_BITS_PER_S) * off[i] for i in range(nb))
    prob += lam
    cons = [off[i] + loc[i] == lam for i in range(nb)]
    cons += [off[i] == 0 for i in range(nb) if not allow_remote]
    cons += [loc[i] == 0 for i in range(nb) if not allow_local_prefill]
    cons += [np_ + nd <= n_local, remote_busy <= n_pf, local_busy <= np_,
             egress_gbps <= inp.link_bits_per_s / GBPS_BITS_PER_S, lam <= inp.decode_rps_per_instance * nd]
    for c in cons:
        prob += c
    if not _solve(prob):
        return None
    lam_star = float(lam.value() or 0.0)
    if lam_star > 0:
        # second stage: same throughput, most headroom on the busier prefill stage
        u = pulp.LpVariable("u", lowBound=0)
        prob2 = pulp.LpProblem("prfaas_headroom", pulp.LpMinimize)
        prob2 += u
        for c in cons:
            prob2 += c
        prob2 += lam >= lam_star * (1 - 1e-6)
        prob2 += remote_busy <= u * max(n_pf, 1)
        prob2 += local_busy <= u * n_local
        if not _solve(prob2):  # numerically tiny optima: keep the first solution
            _solve(prob)

    def rates(vs: list) -> np.ndarray:
        return p * np.array([v.value() or 0.0 for v in vs])

    return ExactSolution(float(lam.value() or 0.0), rates(off), rates(loc),
                         int(round(np_.value() or 0)), int(round(nd.value() or 0)))


def best_fixed_count_lp(inp: PlanInputs, b: Buckets, n_pf: int, n_local: int, allow_remote: bool = True,
                        allow_local_prefill: bool = True, min_decode: int = 1) -> ExactSolution:
    """The independent check of the MILP: with N_p and N_d fixed the model is an LP; solve it with
    HiGHS (scipy), in the plain rates of docs/design.md section 5 (``y_b + z_b = p_b * Lambda``), for every
    split that uses all ``n_local`` instances (an idle instance never raises Lambda, so no other
    split can do better), and return the best. Lambda = 0 (all rates zero) when none serves more
    than RATE_TOL_RPS."""
    from scipy.optimize import linprog
    from scipy.sparse import csr_array, eye, hstack

    nb = len(b.tokens)  # variables: Lambda, y_0..y_nb-1, z_0..z_nb-1 (requests/s)
    a_eq = hstack([csr_array(-b.probs[:, None]), eye(nb), eye(nb)])
    a_ub = np.zeros((4, 1 + 2 * nb))
    a_ub[0, 0] = 1.0  # Lambda <= decode rate
    a_ub[1, 1:nb + 1] = b.t_remote_s  # busy PrfaaS instances
    a_ub[2, 1:nb + 1] = BITS_PER_BYTE * b.kv_bytes / GBPS_BITS_PER_S  # egress Gbps
    a_ub[3, nb + 1:] = b.t_local_s  # busy PD-P instances
    bounds = [(0, None)] + [(0, None if allow_remote else 0)] * nb + [(0, None if allow_local_prefill else 0)] * nb
    best = ExactSolution(0.0, np.zeros(nb), np.zeros(nb), 0, n_local, "highs")
    for n_p in range(n_local - min(min_decode, n_local) + 1):
        n_d = n_local - n_p
        b_ub = [inp.decode_rps_per_instance * n_d, n_pf, inp.link_bits_per_s / GBPS_BITS_PER_S, n_p]
        r = linprog(-np.eye(1, 1 + 2 * nb).ravel(), A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=np.zeros(nb),
                    bounds=bounds, method="highs")
        if r.status == 0 and -r.fun > max(best.lambda_rps, RATE_TOL_RPS):
            best = ExactSolution(float(-r.fun), r.x[1:nb + 1], r.x[nb + 1:], n_p, n_d, "highs")
    return best


def _exact_plan(inp: PlanInputs, b: Buckets, name: str, sol: ExactSolution, n_pf: int) -> Plan:
    lam, y, z = sol.lambda_rps, sol.y_rps, sol.z_rps
    n_p, n_d = sol.n_p, sol.n_d
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(b.probs > 0, y / np.maximum(lam * b.probs, 1e-300), 0.0) if lam > 0 else np.zeros_like(y)
    frac = np.clip(frac, 0.0, 1.0)
    frac = np.where(frac < 1e-6, 0.0, np.where(frac > 1 - 1e-6, 1.0, frac))  # solver round-off
    offloaded = frac > 0
    # a threshold set: offload fractions non-decreasing in length, at most one partial bucket
    partial = np.sum((frac > 1e-6) & (frac < 1 - 1e-6))
    is_threshold = bool(np.all(np.diff(frac) >= -1e-6) and partial <= 1)
    t = float(b.tokens[np.argmax(offloaded)]) if offloaded.any() else None
    remote_busy = float(np.dot(y, b.t_remote_s))
    local_busy = float(np.dot(z, b.t_local_s))
    egress = float(np.dot(y, BITS_PER_BYTE * b.kv_bytes))
    p = float(y.sum() / lam) if lam > 0 else 0.0
    stage = {
        "prfaas": lam * n_pf / remote_busy if remote_busy > 0 else np.inf,
        "pd_p": lam * n_p / local_busy if local_busy > 0 else np.inf,
        "pd_d": n_d * inp.decode_rps_per_instance,
    }
    link_r = lam * inp.link_bits_per_s / egress if egress > 0 else None
    if lam <= 0:  # nothing served: the prefill paths without capacity are what stop this plan
        if name != "homogeneous-pd":
            stage["prfaas"] = stage["prfaas"] if n_pf else 0.0
            link_r = None if inp.link_bits_per_s > 0 else 0.0
        if name != "naive-heterogeneous" and n_p == 0:
            stage["pd_p"] = 0.0
    routing = pd.DataFrame({"tokens": b.tokens, "prob": b.probs, "offload_fraction": frac,
                            "t_remote_s": b.t_remote_s, "t_local_s": b.t_local_s, "kv_bytes": b.kv_bytes})
    return _plan(inp, name, "exact", t, n_pf, n_p, n_d, lam, p,
                 stage, egress, _binding(stage, lam, link_r), routing, is_threshold)


def plan_exact(inp: PlanInputs, b: Buckets) -> Plan:
    """Exact mode for the scenario's pools: maximise Lambda over routing and the P:D split."""
    if inp.n_local < 1:
        raise InvalidInput("local.gpus: PrfaaS-PD needs at least one local instance to decode")
    sol = solve_exact(inp, b, inp.n_prfaas, inp.n_local, allow_remote=inp.n_prfaas > 0)
    return _exact_plan(inp, b, "prfaas-pd", sol, inp.n_prfaas)


PER_CLUSTER_ITERATIONS = 4
THRESHOLD_SETTLED_REL = 0.02


def split_cache_buckets(inp: PlanInputs, threshold_tokens: float, n: int) -> Buckets:
    """Buckets of a trace replayed with one prefix cache per cluster, routed by ``threshold_tokens``
    on the local uncached length (what the router sees). Requests are grouped by that length;
    each group's remote prefill time and shipped bytes average the lengths left uncached by the
    PrfaaS cluster's own cache, which only holds what it prefilled."""
    from prfaas_plan.workload import split_cache_replay

    r = split_cache_replay(inp.trace, inp.cache_blocks, threshold_tokens)
    l_loc = r.local_uncached_tokens.astype(float)
    l_rem = r.remote_uncached_tokens.astype(float)
    groups = [g for g in np.array_split(np.argsort(l_loc, kind="stable"), min(n, l_loc.size)) if g.size]
    per_request = {"tokens": l_loc, "t_local_s": inp.t_local(l_loc), "t_remote_s": inp.t_remote(l_rem),
                   "kv_bytes": inp.kv_bytes(l_rem)}
    mean = {k: np.array([v[g].mean() for g in groups]) for k, v in per_request.items()}
    probs = np.array([g.size for g in groups], dtype=float) / l_loc.size
    return Buckets(mean["tokens"], probs, mean["t_remote_s"], mean["t_local_s"], mean["kv_bytes"])


def plan_exact_per_cluster(inp: PlanInputs, first: Plan, n: int) -> tuple[Plan, Buckets]:
    """Re-plan a trace workload with one prefix cache per cluster: replay the trace routed by the
    plan's t, rebuild the buckets, solve again, until t settles (a fixed-point iteration; the
    first plan assumed one cache shared by both clusters, which overstates hits)."""
    plan_, b = first, None
    for _ in range(PER_CLUSTER_ITERATIONS):
        t = plan_.threshold_tokens if plan_.threshold_tokens is not None else np.inf
        b = split_cache_buckets(inp, t, n)
        new = plan_exact(inp, b)
        new_t = new.threshold_tokens if new.threshold_tokens is not None else np.inf
        settled = new_t == t or abs(new_t - t) <= THRESHOLD_SETTLED_REL * t
        plan_ = new
        if settled:
            break
    return plan_, b


def baselines_exact(inp: PlanInputs, b: Buckets) -> dict[str, Plan]:
    """The two baselines with expectations over the bucketed workload."""
    out = {}
    if inp.n_baseline >= 2:
        sol = solve_exact(inp, b, 0, inp.n_baseline, allow_remote=False)
        out["homogeneous-pd"] = _exact_plan(inp, b, "homogeneous-pd", sol, 0)
    if inp.n_prfaas >= 1 and inp.n_local >= 1:
        sol = solve_exact(inp, b, inp.n_prfaas, inp.n_local, allow_local_prefill=False, min_decode=inp.n_local)
        out["naive-heterogeneous"] = _exact_plan(inp, b, "naive-heterogeneous", sol, inp.n_prfaas)
    return out


# ----------------------------------------------------------------------------- TTFT
MIN_LINK_SHARE = 0.05
"""Smallest fraction of the link a transfer is assumed to get when the link is saturated."""


def offload_fractions(plan: Plan, b: Buckets) -> np.ndarray:
    """Fraction of each bucket's requests that the plan sends to the PrfaaS cluster."""
    if plan.routing is not None and len(plan.routing) == len(b.tokens):
        return plan.routing["offload_fraction"].to_numpy()
    if plan.instances.get("prfaas", 0) == 0 or plan.threshold_tokens is None:
        return np.zeros_like(b.tokens)
    return (b.tokens > plan.threshold_tokens).astype(float)


def unhidden_transfer_s(inp: PlanInputs, b: Buckets, egress_bits_per_s: float) -> np.ndarray:
    """KV transfer time that layer-wise pipelining does not hide, per bucket (seconds).

    A request's transfer gets the link's free share ``bw = link * max(1 - utilisation, 5%)``
    and takes ``X = 8 * S / bw``. Layer ``i``'s cache leaves as layer ``i`` finishes, so after the
    prefill ends only the last layer's share ``X / L`` remains, or ``X - T * (1 - 1/L)`` when the
    link is slower than the prefill; plus half a round trip.
    """
    n_layers = inp.scenario.model.layers.count
    link = inp.link_bits_per_s
    if link <= 0:
        return np.full_like(b.tokens, np.inf)
    share = max(1.0 - egress_bits_per_s / link, MIN_LINK_SHARE)
    x = BITS_PER_BYTE * b.kv_bytes / (link * share)
    return np.maximum(x / n_layers, x - b.t_remote_s * (1 - 1 / n_layers)) + inp.scenario.spec.link.rtt_s / 2


def ttft_at(inp: PlanInputs, plan: Plan, b: Buckets, rate_rps: float):
    """TTFT distributions at ``rate_rps`` (Poisson): per path and over all requests."""
    from prfaas_plan.queueing import ServiceMix, mixed_ttft, ttft_distribution

    frac = offload_fractions(plan, b)
    w_remote = b.probs * frac
    w_local = b.probs * (1 - frac)
    p_remote = float(w_remote.sum())
    egress = rate_rps * float(np.dot(w_remote, BITS_PER_BYTE * b.kv_bytes))
    step = inp.decode_step_s
    parts, out = [], {}
    if p_remote > 1e-12:
        mix = ServiceMix(b.t_remote_s, w_remote / p_remote)
        extra = unhidden_transfer_s(inp, b, egress)
        out["prfaas"] = ttft_distribution(rate_rps * p_remote, plan.instances["prfaas"], mix, extra, step)
        parts.append((p_remote, out["prfaas"]))
    if 1 - p_remote > 1e-12:
        n_local = plan.instances["pd_p"]
        if n_local < 1:
            raise InvalidInput(f"{plan.name}: requests are routed to local prefill but it has no instances")
        mix = ServiceMix(b.t_local_s, w_local / w_local.sum())
        out["pd_p"] = ttft_distribution(rate_rps * (1 - p_remote), n_local, mix, 0.0, step)
        parts.append((1 - p_remote, out["pd_p"]))
    total = sum(w for w, _ in parts)
    out["all"] = mixed_ttft([(w / total, d) for w, d in parts])
    return out


def slo_rate(inp: PlanInputs, plan: Plan, b: Buckets, quantile: float, slo_s: float) -> float:
    """Largest Poisson rate (requests/s, at most Lambda_max) whose TTFT quantile meets the SLO;
    0 when even a vanishing load misses it."""
    from scipy.optimize import brentq

    def slack(rate: float) -> float:
        return slo_s - ttft_at(inp, plan, b, rate)["all"].quantile(quantile)

    hi = plan.lambda_max_rps * (1 - 1e-6)
    if hi <= 0 or slack(hi * 1e-6) < 0:
        return 0.0
    if slack(hi) >= 0:
        return hi
    return float(brentq(slack, hi * 1e-6, hi, xtol=hi * 1e-5))


# ----------------------------------------------------------------------------- top level
@dataclass(frozen=True)
class PlanResult:
    """A scenario's plan, its baselines, and their latencies.

    ttft: one row per plan and path (prfaas, pd_p, all) with mean/P50/P90/P99 TTFT in seconds,
        at the scenario's ``load`` times the plan's own Lambda_max (``basis = "own load"``) and at
        one common rate all plans can serve (``basis = "common rate"``).
    slo_rps: the largest rate meeting the TTFT percentile SLO, per plan (when the SLO is set).
    """

    scenario: Scenario
    mode: str
    plan: Plan
    baselines: dict[str, Plan]
    inputs: PlanInputs
    buckets: Buckets  # the recommended plan's (per-cluster caches for trace workloads)
    ttft: pd.DataFrame
    slo_rps: dict[str, float]
    baseline_buckets: Buckets | None = None  # the baselines' (one shared cache); None = ``buckets``

    def __repr__(self) -> str:
        p = self.plan
        ratios = ", ".join(f"{self.ratio(k):.2f}x {k}" for k in self.baselines)
        return (f"PlanResult({self.scenario.spec.id}, {self.mode} mode: {p.routing_text()}; PrfaaS "
                f"{p.instances['prfaas']} + PD-P {p.instances['pd_p']} + PD-D {p.instances['pd_d']}, "
                f"Lambda_max {p.lambda_max_rps:.3f} req/s, egress {p.egress_gbps:.1f} Gbps; {ratios})")

    def _repr_html_(self) -> str:
        """The plans side by side, one row each, units in the headers."""
        import html

        cols = {"plan": "plan", "routing": "routing", "threshold_tokens": "t (tokens)", "n_prfaas": "PrfaaS inst.",
                "n_pd_p": "PD-P inst.", "n_pd_d": "PD-D inst.", "lambda_max_rps": "Λ_max (req/s)",
                "egress_gbps": "egress (Gbps)", "cost_usd_per_hour": "cost ($/h)",
                "usd_per_million_tokens": "$/M tokens", "binding": "binding"}
        from prfaas_plan.display import fmt

        df = self.display_frame()[list(cols)].rename(columns=cols)
        head = html.escape(f"{self.scenario.spec.name} ({self.mode} mode): {self.plan.routing_text()}")
        return f"<p><b>{head}</b></p>" + df.to_html(index=False, float_format=fmt, na_rep="-")

    def buckets_for(self, name: str) -> Buckets:
        """The length buckets plan ``name``'s TTFT and SLO rate were computed on."""
        if name == self.plan.name or self.baseline_buckets is None:
            return self.buckets
        return self.baseline_buckets

    @property
    def threshold_tokens(self) -> float | None:
        return self.plan.threshold_tokens

    @property
    def instances(self) -> dict[str, int]:
        return self.plan.instances

    @property
    def lambda_max_rps(self) -> float:
        return self.plan.lambda_max_rps

    @property
    def egress_gbps(self) -> float:
        return self.plan.egress_gbps

    @property
    def plans(self) -> dict[str, Plan]:
        return {self.plan.name: self.plan, **self.baselines}

    def ratio(self, baseline: str) -> float:
        """PrfaaS-PD throughput over a baseline's (NaN when the baseline serves nothing)."""
        other = self.baselines[baseline].lambda_max_rps
        return self.plan.lambda_max_rps / other if other > 0 else float("nan")

    def display_frame(self) -> pd.DataFrame:
        """:meth:`to_frame` as tables show it to people: ``threshold_tokens`` is 0 where everything
        is offloaded and blank (NaN) where no single threshold describes the routing."""
        df = self.to_frame()
        df.loc[df["routing"] == "per-bucket", "threshold_tokens"] = np.nan
        df.loc[df["routing"] == "all", "threshold_tokens"] = 0.0
        return df

    def to_frame(self) -> pd.DataFrame:
        """One row per plan: routing, instances, Lambda_max, egress, binding, cost, P90 TTFT."""
        rows = []
        q = self.scenario.spec.slo.ttft_quantile
        for name, p in self.plans.items():
            r = p.row()
            r["throughput_vs_this"] = self.plan.lambda_max_rps / p.lambda_max_rps if p.lambda_max_rps else np.nan
            r["rps_per_usd_hour"] = p.rps_per_usd_hour
            sel = self.ttft[(self.ttft.plan == name) & (self.ttft.path == "all") & (self.ttft.basis == "common rate")]
            r[f"p{round(q * 100)}_ttft_s_common_rate"] = float(sel[f"p{round(q * 100)}_s"].iloc[0]) if len(sel) else np.nan
            if name in self.slo_rps:
                r["slo_rps"] = self.slo_rps[name]
            rows.append(r)
        return pd.DataFrame(rows)


def plan(sc: Scenario, mode: str = "exact", load: float | None = None, n_buckets: int = DEFAULT_BUCKETS) -> PlanResult:
    """Plan a scenario: PrfaaS-PD (threshold t, instance split, Lambda_max, egress, cost), the
    homogeneous and naive baselines, and TTFT percentiles from the queueing model."""
    if mode not in ("exact", "paper"):
        raise InvalidInput(f"--mode: {mode!r} is not a planner mode; use exact or paper")
    load = sc.spec.load if load is None else float(load)
    if not 0 < load < 1:
        raise InvalidInput("--load: give a fraction of the maximum rate between 0 and 1 (e.g. 0.8)")
    inp = plan_inputs(sc)
    b = buckets(inp, n_buckets)
    best = plan_exact(inp, b) if mode == "exact" else plan_paper(inp)
    b_best = b
    if mode == "exact" and inp.trace is not None and inp.n_prfaas > 0:
        best, b_best = plan_exact_per_cluster(inp, best, n_buckets)
    # the baselines run one cluster each, so one shared prefix cache is exact for them
    base = baselines_exact(inp, b) if mode == "exact" else baselines_paper(inp)
    if best.lambda_max_rps <= 0:
        raise Infeasible(f"infeasible: no request rate can be served; binding constraint: {best.binding}")
    plans = {best.name: best, **base}
    bk = {name: (b_best if name == best.name else b) for name in plans}
    common = load * min(p.lambda_max_rps for p in plans.values() if p.lambda_max_rps > 0)
    rows = []
    for name, p in plans.items():
        if p.lambda_max_rps <= 0:
            continue
        for basis, rate in (("own load", load * p.lambda_max_rps), ("common rate", common)):
            for path, dist in ttft_at(inp, p, bk[name], rate).items():
                pc = dist.percentiles()
                rows.append({"plan": name, "basis": basis, "path": path, "rate_rps": rate,
                             "mean_s": pc["mean"], "p50_s": pc["p50"], "p90_s": pc["p90"], "p99_s": pc["p99"]})
    slo = {}
    s = sc.spec.slo
    if s.ttft_s is not None:
        slo = {name: slo_rate(inp, p, bk[name], s.ttft_quantile, s.ttft_s) for name, p in plans.items()
               if p.lambda_max_rps > 0}
        if slo[best.name] <= 0:
            floor = ttft_at(inp, best, b_best, best.lambda_max_rps * 1e-6)["all"].quantile(s.ttft_quantile)
            raise InvalidInput(
                f"infeasible: slo.ttft_s: P{round(s.ttft_quantile * 100)} TTFT is {floor:.2f} s even at "
                f"vanishing load, above the {s.ttft_s:g} s SLO (prefill of the longest requests plus KV "
                f"transfer); relax slo.ttft_s, add link bandwidth or faster prefill GPUs"
            )
    return PlanResult(sc, mode, best, base, inp, b_best, pd.DataFrame(rows), slo, b)


# ----------------------------------------------------------------------------- sweeps (Figure 5)
def sweep_threshold(inp: PlanInputs, n_p: int, points: int = T_GRID_POINTS) -> pd.DataFrame:
    """Lambda_max and each stage's rate against t at a fixed N_p (paper model)."""
    t = threshold_grid(inp, points)
    g = paper_stage_rates(inp, t, np.array([n_p]))
    return pd.DataFrame({"threshold_tokens": t, "offload_fraction": g["p"][:, 0],
                         "prfaas_rps": g["prfaas"][:, 0], "pd_p_rps": g["pd_p"][:, 0],
                         "pd_d_rps": g["pd_d"][:, 0], "lambda_max_rps": g["lambda"][:, 0]})


def sweep_np(inp: PlanInputs, threshold_tokens: float) -> pd.DataFrame:
    """Lambda_max and each stage's rate against N_p at a fixed t (paper model)."""
    n_p = np.arange(0, inp.n_local)
    g = paper_stage_rates(inp, np.array([threshold_tokens]), n_p)
    return pd.DataFrame({"n_pd_p": n_p, "n_pd_d": inp.n_local - n_p, "prfaas_rps": g["prfaas"][0],
                         "pd_p_rps": g["pd_p"][0], "pd_d_rps": g["pd_d"][0], "lambda_max_rps": g["lambda"][0]})
