"""The cost-minimising MILP of one combination of instance types: integer instances per prefill
role, a binary choice of link tier, and per-bucket routing, at a fixed target rate.

With ``Lambda`` fixed at the target, the planner's bucketed model (:mod:`prfaas_plan.planner.milp`)
turns into a cost minimisation. Variables: ``f_b`` in [0, 1], the share of length bucket ``b``
prefilled on the PrfaaS site; ``N_r``, ``N_p`` instances of PrfaaS prefill and local prefill;
``s_k`` in {0, 1}, link tier ``k`` bought; ``e_k >= 0``, Gbit/s carried on tier ``k``. Rows
(``p_b`` bucket probability, ``T`` prefill seconds, ``S`` shipped bytes, ``u`` utilisation caps):

* PrfaaS prefill ``Lambda sum_b p_b T_r(l_b) f_b <= u_r N_r``;
* local prefill ``Lambda sum_b p_b T_p(l_b) (1 - f_b) <= u_p N_p``;
* link ``Lambda sum_b p_b 8 S(l_b) f_b / 1e9 = sum_k e_k``, ``e_k <= u_l eta G_k s_k`` (``eta`` the
  scenario's link efficiency, ``G_k`` the tier's Gbps), ``sum_k s_k <= 1``;

minimising ``c_r N_r + c_p N_p + sum_k (F_k s_k + g_k e_k)`` ($/hour of instances with their
energy, the tiers' fixed prices and their metered price per Gbit/s-hour). Decode is separable at a
fixed rate (``N_d = ceil(Lambda / mu_d)``) and priced outside. Solved by HiGHS through
``scipy.optimize.milp`` (imported when a sizing runs). Rates are requests/s, times seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from prfaas_plan.quiet import c_stdout_silenced
from prfaas_plan.units import BITS_PER_BYTE, GBPS_BITS_PER_S

if TYPE_CHECKING:
    from prfaas_plan.sizing.tiers import LinkTier

INTEGER_TOL = 1e-6
"""An instance count within this of a whole number is that number (HiGHS's integrality tolerance)."""


@dataclass(frozen=True)
class Routing:
    """What one solve may use: PrfaaS prefill (``remote``), local prefill (``local``), and the
    utilisation caps of PrfaaS prefill, local prefill and the link (each in (0, 1])."""

    remote: bool = True
    local: bool = True
    cap_remote: float = 1.0
    cap_local: float = 1.0
    cap_link: float = 1.0


@dataclass(frozen=True)
class CostProblem:
    """The data of one combination: bucket probabilities, prefill seconds on the PrfaaS and local
    prefill instance types, shipped bytes, $/hour per instance (energy included), link tiers and
    the link's usable fraction, the most instances per role, and the target rate."""

    probs: np.ndarray
    t_remote_s: np.ndarray | None
    t_local_s: np.ndarray | None
    kv_bytes: np.ndarray
    usd_per_hour_remote: float
    usd_per_hour_local: float
    tiers: tuple[LinkTier, ...]
    link_efficiency: float
    max_instances: int
    target_rps: float

    def loads(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per bucket at the target rate, were all of it routed there: busy PrfaaS prefill instances,
        busy local prefill instances (zeros for a role without an instance type), and link Gbit/s."""
        per_s = self.target_rps * self.probs
        zeros = np.zeros(len(self.probs))
        busy_r = per_s * (self.t_remote_s if self.t_remote_s is not None else zeros)
        busy_l = per_s * (self.t_local_s if self.t_local_s is not None else zeros)
        return busy_r, busy_l, per_s * BITS_PER_BYTE * self.kv_bytes / GBPS_BITS_PER_S


@dataclass(frozen=True)
class CostSolution:
    """An optimum: offload share per bucket, instance counts, the tier bought (None: no link) and
    its egress (Gbit/s), and the $/hour of the prefill pools and of the link."""

    offload: np.ndarray
    n_remote: int
    n_local: int
    tier: LinkTier | None
    egress_gbps: float
    prefill_usd_per_hour: float
    link_usd_per_hour: float


def solve_cost(pb: CostProblem, routing: Routing) -> CostSolution | None:
    """The cheapest prefill pools, link and routing that serve ``pb.target_rps`` under the caps;
    None when none exists within ``pb.max_instances`` per role (or HiGHS finds no optimum)."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    nb, nk = len(pb.probs), len(pb.tiers)
    remote = routing.remote and pb.t_remote_s is not None
    local = routing.local and pb.t_local_s is not None
    if not (remote or local):
        return None
    busy_r, busy_l, gbps = pb.loads()
    n = nb + 2 + 2 * nk  # f_b, N_r, N_p, s_k, e_k
    i_r, i_p, i_s, i_e = nb, nb + 1, nb + 2, nb + 2 + nk
    rows, lo, hi = [], [], []

    def row(coef: list[tuple[int | slice, np.ndarray | float]], low: float, high: float) -> None:
        r = np.zeros(n)
        for idx, v in coef:
            r[idx] = v
        rows.append(r), lo.append(low), hi.append(high)

    row([(slice(0, nb), busy_r), (i_r, -routing.cap_remote)], -np.inf, 0.0)
    row([(slice(0, nb), -busy_l), (i_p, -routing.cap_local)], -np.inf, -busy_l.sum())
    row([(slice(0, nb), gbps), (slice(i_e, i_e + nk), -1.0)], 0.0, 0.0)
    for k, t in enumerate(pb.tiers):
        row([(i_e + k, 1.0), (i_s + k, -routing.cap_link * pb.link_efficiency * t.gbps)], -np.inf, 0.0)
    if nk:
        row([(slice(i_s, i_s + nk), 1.0)], 0.0, 1.0)
    cost = np.zeros(n)
    cost[i_r], cost[i_p] = pb.usd_per_hour_remote, pb.usd_per_hour_local
    cost[i_s:i_s + nk] = [t.fixed_usd_per_hour for t in pb.tiers]
    cost[i_e:i_e + nk] = [t.usd_per_hour(1.0) - t.fixed_usd_per_hour for t in pb.tiers]
    f_lo, f_hi = (0.0 if local else 1.0), (1.0 if remote else 0.0)
    upper = np.r_[np.full(nb, f_hi), pb.max_instances if remote else 0, pb.max_instances if local else 0,
                  np.ones(nk) if remote else np.zeros(nk), np.full(nk, np.inf)]
    lower = np.r_[np.full(nb, f_lo), np.zeros(2 + 2 * nk)]
    integral = np.r_[np.zeros(nb), np.ones(2 + nk), np.zeros(nk)]
    with c_stdout_silenced():  # HiGHS prints some MIP lines whatever "disp" says
        res = milp(cost, constraints=LinearConstraint(np.array(rows), lo, hi), integrality=integral,
                   bounds=Bounds(lower, upper), options={"disp": False, "mip_rel_gap": 0.0})
    if res.status != 0 or res.x is None:
        return None
    sol = _solution(pb, res.x, nb, nk)
    return balanced_routing(pb, routing, sol.n_remote, sol.n_local, sol.tier) or sol


def balanced_routing(pb: CostProblem, routing: Routing, n_remote: int, n_local: int,
                     tier: LinkTier | None) -> CostSolution | None:
    """With ``n_remote`` and ``n_local`` prefill instances and ``tier`` bought, the shares ``f_b``
    that minimise the largest capped utilisation ``u <= 1`` of PrfaaS prefill, local prefill and
    the link at the target (an LP; the planner's MILP breaks its ties towards headroom too). The
    cost-minimal routings are many (only whole instances are priced); this one spreads the slack
    over the pools and is a threshold or close to one. None when these pools cannot serve the
    target within the caps."""
    from scipy.optimize import linprog

    nb = len(pb.probs)
    busy_r, busy_l, gbps = pb.loads()
    link = routing.cap_link * pb.link_efficiency * tier.gbps if tier is not None else 0.0
    a = np.array([np.r_[busy_r, -routing.cap_remote * n_remote], np.r_[-busy_l, -routing.cap_local * n_local],
                  np.r_[gbps, -link]])
    b = np.array([0.0, -busy_l.sum(), 0.0])
    f_lo = 0.0 if n_local > 0 and pb.t_local_s is not None else 1.0
    f_hi = 1.0 if n_remote > 0 and pb.t_remote_s is not None else 0.0
    if f_lo > f_hi:
        return None
    res = linprog(np.r_[np.zeros(nb), 1.0], A_ub=a, b_ub=b, bounds=[(f_lo, f_hi)] * nb + [(0.0, 1.0)], method="highs")
    if res.status != 0 or res.x is None:
        return None
    off = np.clip(res.x[:nb], 0.0, 1.0)
    off = np.where(off < INTEGER_TOL, 0.0, np.where(off > 1 - INTEGER_TOL, 1.0, off))
    egress = float(np.dot(gbps, off))
    return CostSolution(off, n_remote, n_local, tier, egress,
                        n_remote * pb.usd_per_hour_remote + n_local * pb.usd_per_hour_local,
                        tier.usd_per_hour(egress) if tier is not None else 0.0)


def _solution(pb: CostProblem, x: np.ndarray, nb: int, nk: int) -> CostSolution:
    """The solution of HiGHS's column values: counts rounded, round-off shares snapped to 0 or 1."""
    off = np.clip(x[:nb], 0.0, 1.0)
    off = np.where(off < INTEGER_TOL, 0.0, np.where(off > 1 - INTEGER_TOL, 1.0, off))
    n_r, n_p = int(round(x[nb])), int(round(x[nb + 1]))
    chosen = [k for k in range(nk) if x[nb + 2 + k] > 0.5]
    egress = float(np.dot(pb.loads()[2], off))
    tier = pb.tiers[chosen[0]] if chosen else None
    link = tier.usd_per_hour(egress) if tier is not None else 0.0
    return CostSolution(off, n_r, n_p, tier, egress, n_r * pb.usd_per_hour_remote + n_p * pb.usd_per_hour_local, link)


__all__ = ["CostProblem", "CostSolution", "Routing", "balanced_routing", "solve_cost"]
