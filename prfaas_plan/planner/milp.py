"""Exact mode: the bucketed MILP of docs/design.md section 5, its solvers, and its verification.

The length distribution is cut into buckets; the offloaded and locally prefilled request rates per
bucket are decision variables (``y_b + z_b = Lambda * p_b``), the P:D split is integer, and the
capacities use ``E[T(L)]`` instead of ``T(E[L])``, so any routing policy is allowed. A second
solve keeps ``Lambda`` at its optimum (less :data:`HEADROOM_REL`) and minimises the busiest
prefill stage's utilisation, so that ties are broken towards headroom. The reported ``t`` is the
shortest offloaded bucket; ``is_threshold`` says whether the optimal offload set is one.

Solvers: HiGHS in-process first, through scipy's bundled HiGHS bindings loaded on their own
(:func:`_highs_core`; the model and options exactly as :func:`scipy.optimize.milp` and
``linprog(method="highs-ds")`` pass them, so the answers are theirs, without importing
``scipy.optimize``, 0.66 s of start-up). Its answer stands when it is
feasible in the model written the plain way and the fixed-count LP (:func:`fixed_count_lp`, a
different formulation) at its split agrees on Lambda; otherwise CBC (pulp's bundled binary,
imported only then) solves the same model. From :data:`LP_PATH_MIN_BUCKETS` buckets up, the model
with both prefill paths open is solved as a few LPs instead (:func:`lp_path_solution`, exact: the
split by a hill climb on a concave function), its answer verified the same way. A "no
rate" answer stands only when :func:`best_fixed_count_lp` agrees. Rates are requests/s, times
seconds, link rates Gbit/s inside the models.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from functools import lru_cache
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from prfaas_plan.errors import InvalidInput
from prfaas_plan.planner.inputs import split_cache_buckets
from prfaas_plan.planner.result import Plan, PlanPoint, make_plan
from prfaas_plan.quiet import c_stdout_silenced
from prfaas_plan.units import BITS_PER_BYTE, GBPS_BITS_PER_S

if TYPE_CHECKING:
    from scipy.sparse import csc_array

    from prfaas_plan.planner.inputs import Buckets, PlanInputs

RATE_TOL_RPS = 1e-9
"""Request rates at or below this (req/s) are solver round-off of zero."""
HEADROOM_REL = 1e-6
"""The tie-break stage may give up this share of the optimal Lambda for headroom."""
CHECK_REL = 1e-7
"""Relative slack of the verification (solver tolerances are 1e-9 or tighter)."""
PER_CLUSTER_ITERATIONS = 4
"""Replays of a trace with one prefix cache per cluster before the threshold is taken as settled."""
THRESHOLD_SETTLED_REL = 0.02
"""A threshold that moves less than this (relative) between replays has settled."""


@dataclass(frozen=True)
class Pools:
    """What one solve may use: instances in the PrfaaS pool and the local PD pool, whether either
    prefill path may be used, and the fewest local instances that must decode."""

    n_prfaas: int
    n_local: int
    allow_remote: bool = True
    allow_local_prefill: bool = True
    min_decode: int = 1

    @property
    def decode_floor(self) -> int:
        return min(self.min_decode, self.n_local)

    @property
    def max_n_p(self) -> int:
        """The most local instances that may prefill: at least one (and the floor) decodes."""
        return self.n_local - max(self.decode_floor, 1)


@dataclass(frozen=True)
class ExactSolution:
    """An optimum of the bucketed model: Lambda and the per-bucket offloaded (y) and locally
    prefilled (z) request rates, all requests/s, and the P:D split. ``solver``: ``"highs"`` or
    ``"cbc"`` (the MILP), or ``"lp"`` (the best fixed-count LP, :func:`best_fixed_count_lp`)."""

    lambda_rps: float
    y_rps: np.ndarray
    z_rps: np.ndarray
    n_p: int
    n_d: int
    solver: str = "highs"


@dataclass(frozen=True)
class _Coefficients:
    """The model's rows per unit of bucket probability: PrfaaS busy instances, PD-P busy
    instances and egress Gbit/s per request/s offloaded (or kept local) in each bucket."""

    remote: np.ndarray
    local: np.ndarray
    egress_gbps: np.ndarray
    link_gbps: float
    decode_rps: float

    @classmethod
    def of(cls, inp: PlanInputs, b: Buckets) -> _Coefficients:
        return cls(b.probs * b.t_remote_s, b.probs * b.t_local_s,
                   b.probs * BITS_PER_BYTE * b.kv_bytes / GBPS_BITS_PER_S,
                   inp.link_bits_per_s / GBPS_BITS_PER_S, inp.decode_rps_per_instance)


# ----------------------------------------------------------------------------- HiGHS
MILP_OPTIONS = {"log_to_console": False, "mip_rel_gap": 0.0, "mip_detect_symmetry": False}
"""HiGHS options of the MILP: as ``scipy.optimize.milp(options={"disp": False, "mip_rel_gap": 0, ...})`` sets
them. Symmetry detection is off: two integer columns have no symmetry to find, and the answers are
the same floats, bit for bit (measured on the 221 cells of benchmarks/bench_plan_solvers.py at 128
and 512 buckets). The feasibility-jump heuristic stays on here: where it finds the optimum first (the
baselines, a few columns after presolve), its point is the answer, and switching it off moved that
Lambda by an ulp in 10 of 120 baseline MILPs at 512 buckets."""
ROUTING_MILP_OPTIONS = {**MILP_OPTIONS, "mip_heuristic_run_feasibility_jump": False}
"""HiGHS options of the MILP with both prefill paths open (one free routing column per bucket): the
feasibility jump off too. In no such model measured was its point the optimum, so the LP's optimum
is the answer either way, bit for bit (the 221 cells at 128 buckets, 40 at 512, 12 at 2,048;
tests/test_planner_verify.py checks four), and it took 9-24% of their solve time."""
LP_OPTIONS = {"presolve": "on", "solver": "simplex", "log_to_console": False, "output_flag": False,
              "simplex_strategy": 1}
"""HiGHS options of the fixed-count LP: as ``scipy.optimize.linprog(method="highs-ds")`` sets them (1 = dual)."""
HEADROOM_LP_OPTIONS = {**LP_OPTIONS, "dual_feasibility_tolerance": 1e-10}
"""HiGHS options of the LP path's tie-break (:func:`_headroom_lp`): the dual tolerance at 1e-10, not
1e-7: its objective varies by ~1e-6 over the stage, and the reduced costs of tail buckets (weighted
by probabilities down to 1e-9) fall under 1e-7, so at the default it stopped 2e-7 short of the
least utilisation (case study, 2,048 buckets); at 1e-10 it is CBC's to 1e-11, with CBC's offload
share to 6e-9."""
LP_CHECK_TOL = 10 * 1e-9 ** 0.5
"""Residual tolerance of linprog's check of a HiGHS LP answer (``10 sqrt(tol)``, tol 1e-9)."""


@dataclass(frozen=True)
class _Csc:
    """A sparse matrix in compressed-column form as HiGHS takes it: column starts, row indices
    (ascending within a column), values, no stored zeros; the canonical form, the same arrays
    ``scipy.sparse.csc_array`` holds for the same matrix (built here without importing scipy.sparse)."""

    start: np.ndarray
    index: np.ndarray
    value: np.ndarray
    shape: tuple[int, int]

    @classmethod
    def of(cls, rows: np.ndarray, cols: np.ndarray, values: np.ndarray, shape: tuple[int, int]) -> _Csc:
        """From entries (row, column, value), each position at most once; zeros are left out."""
        keep = values != 0
        rows, cols, values = rows[keep], cols[keep], values[keep]
        order = np.lexsort((rows, cols))
        start = np.r_[0, np.cumsum(np.bincount(cols, minlength=shape[1]))]
        return cls(start.astype(np.int32), rows[order].astype(np.int32), values[order].astype(np.float64), shape)

    @classmethod
    def dense(cls, m: np.ndarray) -> _Csc:
        rows, cols = np.nonzero(m)
        return cls.of(rows, cols, m[rows, cols], m.shape)

    def scipy(self) -> csc_array:
        from scipy.sparse import csc_array

        return csc_array((self.value, self.index, self.start), shape=self.shape)


@lru_cache(maxsize=1)
def _highs_core() -> ModuleType | None:
    """scipy's bundled HiGHS bindings (the ``highspy`` API, scipy's own HiGHS build), loaded on
    their own: importing them as ``scipy.optimize._highspy._core`` first runs ``scipy.optimize``'s
    package (linalg, fft, ...; 0.66 s), which ``plan`` does not need. None when this scipy lays
    them out otherwise; the solves then go through ``scipy.optimize`` (same HiGHS, same answers)."""
    from pathlib import Path

    import scipy

    from prfaas_plan.extensions import load_extension

    core = load_extension(Path(scipy.__file__).parent / "optimize" / "_highspy", "_core", "scipy.optimize._highspy._core")
    return core if all(hasattr(core, a) for a in ("_Highs", "HighsOptions", "MatrixFormat", "ObjSense")) else None


def _highs_run(cost: np.ndarray, a: _Csc, row_lo: np.ndarray, row_hi: np.ndarray, col_lo: np.ndarray,
               col_hi: np.ndarray, integral: np.ndarray, options: dict) -> tuple[np.ndarray, float] | None:
    """HiGHS on ``min cost x`` s.t. ``row_lo <= a x <= row_hi``,
    ``col_lo <= x <= col_hi``, columns with ``integral == 1`` integer: ``(x, objective)``, or None
    without an optimum. The model and options are passed as scipy.optimize's HiGHS wrapper passes
    them, so the answer is the one scipy.optimize.milp / linprog give; the arrays go in as numpy
    buffers (HiGHS's pointer interface), not converted element by element."""
    h = _highs_core()
    if h is None:
        return _scipy_run(cost, a, row_lo, row_hi, col_lo, col_hi, integral, options)
    highs, opts = h._Highs(), h.HighsOptions()
    for key, value in options.items():
        setattr(opts, key, value)
    if highs.passOptions(opts) == h.HighsStatus.kError:
        return None
    floats = (np.ascontiguousarray(v, dtype=np.float64) for v in (cost, col_lo, col_hi, row_lo, row_hi))
    kinds = np.asarray(integral, dtype=np.int32).reshape(len(cost))  # HiGHS reads one per column
    if highs.passModel(len(cost), len(row_hi), len(a.value), int(h.MatrixFormat.kColwise), int(h.ObjSense.kMinimize),
                       0.0, *floats, a.start, a.index, a.value, kinds) == h.HighsStatus.kError:
        return None
    with c_stdout_silenced() if integral.any() else contextlib.nullcontext():  # HiGHS's stray MIP printf
        status = highs.run()
    if status == h.HighsStatus.kError or highs.getModelStatus() != h.HighsModelStatus.kOptimal:
        return None
    return np.array(highs.getSolution().col_value), float(highs.getInfo().objective_function_value)


def _scipy_run(cost: np.ndarray, a: _Csc, row_lo: np.ndarray, row_hi: np.ndarray, col_lo: np.ndarray,
               col_hi: np.ndarray, integral: np.ndarray, options: dict) -> tuple[np.ndarray, float] | None:
    """:func:`_highs_run` through scipy.optimize (where scipy's HiGHS bindings cannot be loaded alone)."""
    import warnings

    from scipy.optimize import Bounds, LinearConstraint, linprog, milp

    if integral.any():  # milp passes the HiGHS options it does not know on verbatim, with a warning
        milp_options = {"disp": False, **{k: v for k, v in options.items() if k != "log_to_console"}}
        with c_stdout_silenced(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Unrecognized options", RuntimeWarning)
            r = milp(cost, integrality=integral, bounds=Bounds(col_lo, col_hi),
                     constraints=LinearConstraint(a.scipy(), row_lo, row_hi), options=milp_options)
    else:  # the LP's rows are all "<="
        r = linprog(cost, A_ub=a.scipy().toarray(), b_ub=row_hi, bounds=np.c_[col_lo, col_hi], method="highs-ds")
    return None if r.status != 0 or r.x is None else (r.x, float(r.fun))


def _highs_model(k: _Coefficients, pools: Pools) -> tuple:
    """Both stages' rows over ``x = [Lambda, off_0..off_n-1, N_p, N_d, u]``, ``off_b`` the offloaded
    rate per unit of probability (``loc_b = Lambda - off_b``). Rows: ``off_b <= Lambda``; the pool;
    PrfaaS busy; PD-P busy; link; decode; and the tie-break's two utilisation rows (open in stage 1).
    Returns the rows (:class:`_Csc`) and their lower and upper sides."""
    n = len(k.remote)
    rows = np.zeros((7, n + 4))
    rows[0, [n + 1, n + 2]] = 1.0  # N_p + N_d <= n_local
    rows[1, 1:n + 1] = k.remote  # PrfaaS busy instances <= n_prfaas
    rows[2, 0], rows[2, 1:n + 1], rows[2, n + 1] = k.local.sum(), -k.local, -1.0  # PD-P busy <= N_p
    rows[3, 1:n + 1] = k.egress_gbps  # egress <= link
    rows[4, 0], rows[4, n + 2] = 1.0, -k.decode_rps  # Lambda <= decode rate
    rows[5, 1:n + 1], rows[5, n + 3] = k.remote, -max(pools.n_prfaas, 1)  # PrfaaS busy <= u * pool
    rows[6, 0], rows[6, 1:n + 1], rows[6, n + 3] = k.local.sum(), -k.local, -pools.n_local  # PD-P busy <= u * pool
    dense_r, dense_c = np.nonzero(rows)
    balance = np.arange(n)  # row b: off_b - Lambda <= 0
    a = _Csc.of(np.r_[balance, balance, n + dense_r], np.r_[np.zeros(n, dtype=int), balance + 1, dense_c],
                np.r_[-np.ones(n), np.ones(n), rows[dense_r, dense_c]], (n + 7, n + 4))
    lower = np.r_[np.full(n, 0.0 if not pools.allow_local_prefill else -np.inf), np.full(7, -np.inf)]
    upper = np.r_[np.zeros(n), pools.n_local, pools.n_prfaas, 0.0, k.link_gbps, 0.0, np.inf, np.inf]
    return a, lower, upper


def _highs_milp(k: _Coefficients, pools: Pools) -> tuple[np.ndarray, float, int, int] | None:
    """HiGHS on the MILP, then on the headroom tie-break: ``(off, Lambda, N_p, N_d)``, or None when
    HiGHS reports no optimum for the first stage."""
    n = len(k.remote)
    a, lower, upper = _highs_model(k, pools)
    integral = np.zeros(n + 4, dtype=np.uint8)
    integral[[n + 1, n + 2]] = 1
    lo = np.r_[0.0, np.zeros(n), 0.0, pools.decode_floor, 0.0]
    hi = np.r_[np.inf, np.full(n, np.inf if pools.allow_remote else 0.0), pools.n_local, pools.n_local, 0.0]
    cost = np.zeros(n + 4)
    cost[0] = -1.0
    options = ROUTING_MILP_OPTIONS if pools.allow_remote and pools.allow_local_prefill else MILP_OPTIONS
    first = _highs_run(cost, a, lower, upper, lo, hi, integral, options)
    if first is None:
        return None
    x, lam = first[0], float(first[0][0])
    if lam > 0:  # second stage: same throughput, most headroom on the busier prefill stage
        lo[0], hi[-1] = lam * (1 - HEADROOM_REL), np.inf
        upper[-2:] = 0.0
        cost[:] = 0.0
        cost[-1] = 1.0
        second = _highs_run(cost, a, lower, upper, lo, hi, integral, options)
        if second is not None:  # numerically tiny optima: keep the first
            x, lam = second[0], float(second[0][0])
    off = np.clip(x[1:n + 1], 0.0, lam)
    return off, lam, int(round(x[n + 1])), int(round(x[n + 2]))


def highs_solution(inp: PlanInputs, b: Buckets, pools: Pools) -> ExactSolution | None:
    """The MILP by HiGHS, unverified; None when HiGHS reports no optimum. With both prefill paths
    open and at least :data:`LP_PATH_MIN_BUCKETS` buckets, as LPs (:func:`lp_path_solution`) where
    those LPs all have optima."""
    routing = pools.allow_remote and pools.allow_local_prefill
    if routing and len(b.tokens) >= LP_PATH_MIN_BUCKETS:
        sol = lp_path_solution(inp, b, pools)
        if sol is not None:
            return sol
    k = _Coefficients.of(inp, b)
    found = _highs_milp(k, pools)
    if found is None:
        return None
    off, lam, n_p, n_d = found
    return ExactSolution(lam, b.probs * off, b.probs * (lam - off), n_p, n_d, "highs")


# ----------------------------------------------------------------------------- the LP path (many buckets)
LP_PATH_MIN_BUCKETS = 256
"""From this many buckets up, the MILP with both prefill paths open is solved as a few LPs
(:func:`lp_path_solution`), whose cost grows ~n in buckets where HiGHS's MILP grows ~n^2 (its
presolve's dominated-column search and its root LP over the n balance rows). Both stages, paper case
study, MILP against the LP path: 256 buckets 22 vs 13 ms, 512: 53 vs 24, 2,048: 571 vs 127, 4,096:
2,157 vs 289 ms. At the default 128 buckets the MILP stays, so that its answers stay the floats they
were, bit for bit: the LP path finds the same optimum (there to 1.4e-16), but not the same floats."""


def lp_path_solution(inp: PlanInputs, b: Buckets, pools: Pools) -> ExactSolution | None:
    """The MILP's two stages as LPs, exactly. Lambda at a fixed split, :func:`fixed_count_lp`, is a
    concave function of N_p (an LP's optimum is concave in its right-hand side, and N_p, N_d =
    n_local - N_p enter only there; an idle instance never helps), so a hill climb from the LP
    relaxation's N_p (:func:`_relaxed_n_p`) stops at the best split. The tie-break then runs at
    ``Lambda = (1 - HEADROOM_REL) Lambda*`` (where, the rates scaled down, it finds no less headroom
    than anywhere above) on every split that reaches it (:func:`_headroom_lp`). None (the MILP
    then solves it) when the relaxation has no optimum or a split the climb visits serves nothing
    (HiGHS found no optimum of that fixed-count LP, or there is none)."""
    k = _Coefficients.of(inp, b)
    start = _relaxed_n_p(k, pools)
    if start is None:
        return None
    top = pools.max_n_p
    lp: dict[int, ExactSolution] = {}

    def at(n_p: int) -> float:
        if n_p not in lp:
            lp[n_p] = fixed_count_lp(inp, b, pools, n_p)
        return lp[n_p].lambda_rps

    best = min(max(int(np.floor(start)), 0), top)
    while True:
        step = max((j for j in (best - 1, best + 1) if 0 <= j <= top), key=at, default=best)
        if at(step) <= at(best):
            break
        best = step
    if min(s.lambda_rps for s in lp.values()) <= RATE_TOL_RPS:  # a split serves nothing: leave it to the MILP
        return None
    lam = at(best) * (1 - HEADROOM_REL)
    lo = hi = best
    while lo > 0 and at(lo - 1) >= lam:
        lo -= 1
    while hi < top and at(hi + 1) >= lam:
        hi += 1
    headroom = [(found[1], n_p, found[0]) for n_p in range(lo, hi + 1)
                if (found := _headroom_lp(k, pools, lam, n_p)) is not None]
    if not headroom:  # numerically tiny optima: keep the first stage's
        return replace(lp[best], solver="highs")
    _, n_p, off = min(headroom, key=lambda h: h[:2])
    off = np.clip(off, 0.0, lam)
    return ExactSolution(lam, b.probs * off, b.probs * (lam - off), n_p, pools.n_local - n_p, "highs")


def _relaxed_n_p(k: _Coefficients, pools: Pools) -> float | None:
    """N_p of the LP relaxation (N_p continuous, ``N_d = n_local - N_p``): :func:`fixed_count_lp`'s
    LP with ``q = N_p w`` a variable too, minimise ``w`` subject to ``sum_b p_b T_H200(l_b) f_b <=
    n_prfaas w``, egress ``<= link w``, ``sum_b p_b T_H20(l_b) (1 - f_b) <= q``, ``(n_local w - q)
    x decode rate >= 1``, ``q <= (n_local - decode floor) w``, ``0 <= f_b <= 1``; N_p = q / w.
    None without an optimum."""
    n = len(k.remote)
    a = np.zeros((5, n + 2))  # variables f_0..f_n-1, w, q
    a[0, :n], a[0, n] = k.remote, -pools.n_prfaas
    a[1, :n], a[1, n] = k.egress_gbps, -k.link_gbps
    a[2, :n], a[2, n + 1] = -k.local, -1.0
    a[3, n], a[3, n + 1] = -k.decode_rps * pools.n_local, k.decode_rps
    a[4, n], a[4, n + 1] = -pools.max_n_p, 1.0
    row_hi = np.array([0.0, 0.0, -k.local.sum(), -1.0, 0.0])
    cost = np.zeros(n + 2)
    cost[n] = 1.0
    found = _highs_run(cost, _Csc.dense(a), np.full(5, -np.inf), row_hi, np.zeros(n + 2),
                       np.r_[np.ones(n), np.inf, np.inf], np.zeros(n + 2, dtype=np.uint8), LP_OPTIONS)
    if found is None or not found[0][n] > 0:
        return None
    return float(found[0][n + 1] / found[0][n])


def _headroom_lp(k: _Coefficients, pools: Pools, lam: float, n_p: int) -> tuple[np.ndarray, float] | None:
    """The tie-break at ``Lambda = lam`` (req/s) and ``N_p = n_p``, where the balance rows are the
    bounds ``0 <= off_b <= lam``: minimise ``u`` subject to PrfaaS busy ``<= n_prfaas`` and ``<= u
    max(n_prfaas, 1)``, PD-P busy ``sum_b p_b T_H20(l_b) (lam - off_b) <= n_p`` and ``<= u n_local``,
    egress ``<= link``; with ``n_p = 0``, ``off_b = lam``. ``(off, u)``, or None without an optimum."""
    n = len(k.remote)
    a = np.zeros((5, n + 1))  # variables off_0..off_n-1, u
    a[0, :n] = k.remote
    a[1, :n] = -k.local
    a[2, :n] = k.egress_gbps
    a[3, :n], a[3, n] = k.remote, -max(pools.n_prfaas, 1)
    a[4, :n], a[4, n] = -k.local, -pools.n_local
    busy = lam * k.local.sum()
    row_hi = np.array([pools.n_prfaas, n_p - busy, k.link_gbps, 0.0, -busy])
    cost = np.zeros(n + 1)
    cost[n] = 1.0
    col_lo = np.r_[np.full(n, lam if n_p == 0 else 0.0), 0.0]  # no PD-P instance: every bucket offloaded
    found = _highs_run(cost, _Csc.dense(a), np.full(5, -np.inf), row_hi, col_lo, np.r_[np.full(n, lam), np.inf],
                       np.zeros(n + 1, dtype=np.uint8), HEADROOM_LP_OPTIONS)
    return None if found is None else (found[0][:n], found[1])


# ----------------------------------------------------------------------------- CBC (the fallback)
def cbc_solution(inp: PlanInputs, b: Buckets, pools: Pools) -> ExactSolution | None:
    """CBC on the MILP, then on the headroom tie-break; None when CBC finds no optimum.

    The rate variables are per unit of bucket probability (``y_b = p_b * off_b``, ``z_b = p_b *
    loc_b``), so every balance row is ``off_b + loc_b = Lambda`` with unit coefficients and the
    probabilities (down to 1e-9 in a log-normal's tail) only weight the capacity sums. Written as
    ``y_b + z_b = p_b * Lambda``, CBC 2.10's preprocessing reduced such models to nothing and
    reported Lambda = 0 as optimal. The link row is in Gbit/s, like the other rows' O(1-100) sizes."""
    import warnings

    import pulp

    def solved(prob: pulp.LpProblem) -> bool:
        # primal and dual tolerances at 1e-10 (CBC's default 1e-7 left link-bound optima up to 2.9e-5 low)
        cmd = pulp.PULP_CBC_CMD(msg=False, options=["primalT 1e-10", "dualT 1e-10"])
        return pulp.LpStatus[prob.solve(cmd)] == "Optimal"

    k, nb, n_local = _Coefficients.of(inp, b), len(b.tokens), pools.n_local
    with warnings.catch_warnings():  # pulp 3.3 announces API changes for 4.0 on every variable
        warnings.simplefilter("ignore", DeprecationWarning)
        prob = pulp.LpProblem("prfaas", pulp.LpMaximize)
        lam = pulp.LpVariable("lam", lowBound=0)
        off = [pulp.LpVariable(f"off{i}", lowBound=0) for i in range(nb)]
        loc = [pulp.LpVariable(f"loc{i}", lowBound=0) for i in range(nb)]
        n_p = pulp.LpVariable("n_p", lowBound=0, upBound=n_local, cat="Integer")
        n_d = pulp.LpVariable("n_d", lowBound=pools.decode_floor, upBound=n_local, cat="Integer")
        remote_busy = pulp.lpSum(float(k.remote[i]) * off[i] for i in range(nb))  # instances
        local_busy = pulp.lpSum(float(k.local[i]) * loc[i] for i in range(nb))
        egress_gbps = pulp.lpSum(float(k.egress_gbps[i]) * off[i] for i in range(nb))
        prob += lam
        cons = [off[i] + loc[i] == lam for i in range(nb)]
        cons += [off[i] == 0 for i in range(nb) if not pools.allow_remote]
        cons += [loc[i] == 0 for i in range(nb) if not pools.allow_local_prefill]
        cons += [n_p + n_d <= n_local, remote_busy <= pools.n_prfaas, local_busy <= n_p,
                 egress_gbps <= k.link_gbps, lam <= k.decode_rps * n_d]
        for c in cons:
            prob += c
        if not solved(prob):
            return None
        lam_star = float(lam.value() or 0.0)
        if lam_star > 0:
            u = pulp.LpVariable("u", lowBound=0)
            prob2 = pulp.LpProblem("prfaas_headroom", pulp.LpMinimize)
            prob2 += u
            for c in cons:
                prob2 += c
            prob2 += lam >= lam_star * (1 - HEADROOM_REL)
            prob2 += remote_busy <= u * max(pools.n_prfaas, 1)
            prob2 += local_busy <= u * n_local
            if not solved(prob2):  # numerically tiny optima: keep the first solution
                solved(prob)

    def rates(vs: list[pulp.LpVariable]) -> np.ndarray:
        return b.probs * np.array([v.value() or 0.0 for v in vs])

    return ExactSolution(float(lam.value() or 0.0), rates(off), rates(loc),
                         int(round(n_p.value() or 0)), int(round(n_d.value() or 0)), "cbc")


# ----------------------------------------------------------------------------- the independent check
def fixed_count_lp(inp: PlanInputs, b: Buckets, pools: Pools, n_p: int) -> ExactSolution:
    """The model with ``N_p = n_p`` and ``N_d = n_local - n_p`` fixed, an LP, written apart from the
    MILP: with ``f_b`` the offloaded share of bucket ``b`` and ``w = 1 / Lambda`` (Charnes-Cooper),
    minimise ``w`` subject to ``sum_b p_b T_H200(l_b) f_b <= n_prfaas w``, egress ``<= link w``,
    ``sum_b p_b T_H20(l_b) (1 - f_b) <= N_p w``, ``w >= 1 / (N_d x decode rate)``, ``0 <= f_b <= 1``.
    Solved by HiGHS's dual simplex, as ``scipy.optimize.linprog(method="highs-ds")`` solves it, with
    linprog's residual check. Lambda = 0 (all rates zero) when no rate is feasible."""
    k, nb = _Coefficients.of(inp, b), len(b.tokens)
    n_d = pools.n_local - n_p
    none = ExactSolution(0.0, np.zeros(nb), np.zeros(nb), n_p, n_d, "lp")
    if n_d < max(pools.decode_floor, 1) or n_p < 0:
        return none
    a_ub = np.zeros((3, nb + 1))  # variables f_0..f_nb-1, w
    a_ub[0, :nb], a_ub[0, nb] = k.remote, -pools.n_prfaas
    a_ub[1, :nb], a_ub[1, nb] = k.egress_gbps, -k.link_gbps
    a_ub[2, :nb], a_ub[2, nb] = -k.local, -n_p
    b_ub = np.array([0.0, 0.0, -k.local.sum()])
    f_lo = 0.0 if pools.allow_local_prefill else 1.0
    f_hi = 1.0 if pools.allow_remote else 0.0
    bounds = np.r_[np.tile([f_lo, f_hi], (nb, 1)), [[1.0 / (k.decode_rps * n_d), np.inf]]]
    cost = np.zeros(nb + 1)
    cost[nb] = 1.0
    found = _highs_run(cost, _Csc.dense(a_ub), np.full(3, -np.inf), b_ub, bounds[:, 0].copy(), bounds[:, 1].copy(),
                       np.zeros(nb + 1, dtype=np.uint8), LP_OPTIONS)
    if found is None or not _lp_checked(found[0], found[1], a_ub, b_ub, bounds) or not found[1] > 0:
        return none
    x, fun = found
    lam = 1.0 / fun
    if lam <= RATE_TOL_RPS:
        return none
    share = np.clip(x[:nb], 0.0, 1.0)
    return ExactSolution(lam, lam * b.probs * share, lam * b.probs * (1 - share), n_p, n_d, "lp")


def _lp_checked(x: np.ndarray, fun: float, a_ub: np.ndarray, b_ub: np.ndarray, bounds: np.ndarray) -> bool:
    """linprog's check of an optimal LP answer: no NaN, within the bounds and the rows to
    :data:`LP_CHECK_TOL` (else linprog reports status 4, numerical difficulties)."""
    if np.isnan(x).any() or np.isnan(fun):
        return False
    slack = b_ub - a_ub @ x
    return bool(np.all((x >= bounds[:, 0] - LP_CHECK_TOL) & (x <= bounds[:, 1] + LP_CHECK_TOL))
                and not (slack < -LP_CHECK_TOL).any())


def best_fixed_count_lp(inp: PlanInputs, b: Buckets, n_pf: int, n_local: int, allow_remote: bool = True,
                        allow_local_prefill: bool = True, min_decode: int = 1) -> ExactSolution:
    """The best :func:`fixed_count_lp` over every split that uses all ``n_local`` instances (an
    idle instance never raises Lambda, so no other split can do better). Lambda = 0 (all rates
    zero) when none serves more than RATE_TOL_RPS."""
    pools = Pools(n_pf, n_local, allow_remote, allow_local_prefill, min_decode)
    nb = len(b.tokens)
    best = ExactSolution(0.0, np.zeros(nb), np.zeros(nb), 0, n_local, "lp")
    for n_p in range(n_local - pools.decode_floor + 1):
        sol = fixed_count_lp(inp, b, pools, n_p)
        if sol.lambda_rps > max(best.lambda_rps, RATE_TOL_RPS):
            best = sol
    return best


def _feasible(inp: PlanInputs, b: Buckets, pools: Pools, sol: ExactSolution) -> bool:
    """The solution's rates satisfy the model written the plain way (``y_b + z_b = p_b Lambda``)."""
    y, z, lam, rel = sol.y_rps, sol.z_rps, sol.lambda_rps, 1 + CHECK_REL
    return bool(np.allclose(y + z, lam * b.probs, rtol=1e-6, atol=1e-12) and y.min() >= -1e-12 and z.min() >= -1e-12
                and (pools.allow_remote or y.max() <= 1e-12) and (pools.allow_local_prefill or z.max() <= 1e-12)
                and sol.n_p + sol.n_d <= pools.n_local and sol.n_d >= pools.decode_floor
                and np.dot(y, b.t_remote_s) <= pools.n_prfaas * rel + 1e-12
                and np.dot(z, b.t_local_s) <= sol.n_p * rel + 1e-12
                and np.dot(y, BITS_PER_BYTE * b.kv_bytes) <= inp.link_bits_per_s * rel + 1e-3
                and lam <= sol.n_d * inp.decode_rps_per_instance * rel)


def verified(inp: PlanInputs, b: Buckets, pools: Pools, sol: ExactSolution) -> bool:
    """The MILP's answer is feasible in the model written the plain way (:func:`_feasible`), the
    :func:`fixed_count_lp` at its split agrees on Lambda (up to the tie-break's headroom), and
    neither neighbouring split serves more: Lambda at a fixed split is concave in N_p
    (:func:`lp_path_solution`), so a split no neighbour beats is the best one (HiGHS's MILP took
    a split 1.4% short at 2,048 buckets in one sweep cell; tests/test_planner_verify.py)."""
    if not _feasible(inp, b, pools, sol):
        return False
    lp_rps = fixed_count_lp(inp, b, pools, sol.n_p).lambda_rps
    if not lp_rps * (1 - HEADROOM_REL) * (1 - CHECK_REL) <= sol.lambda_rps <= lp_rps * (1 + CHECK_REL):
        return False
    top = pools.max_n_p
    return all(fixed_count_lp(inp, b, pools, n_p).lambda_rps <= lp_rps * (1 + CHECK_REL)
               for n_p in (sol.n_p - 1, sol.n_p + 1) if 0 <= n_p <= top)


def solve_exact(inp: PlanInputs, b: Buckets, n_pf: int, n_local: int, allow_remote: bool = True,
                allow_local_prefill: bool = True, min_decode: int = 1) -> ExactSolution:
    """The bucketed MILP for given pools, checked: HiGHS's answer stands when :func:`verified`;
    else CBC's, when it serves a positive rate; "no rate" stands only when the independent
    :func:`best_fixed_count_lp` agrees, and otherwise that check's best LP is the answer."""
    pools = Pools(n_pf, n_local, allow_remote, allow_local_prefill, min_decode)
    sol = highs_solution(inp, b, pools)
    if sol is not None and sol.lambda_rps > RATE_TOL_RPS and verified(inp, b, pools, sol):
        return sol
    sol = cbc_solution(inp, b, pools)
    if sol is not None and sol.lambda_rps > RATE_TOL_RPS:
        return sol
    return best_fixed_count_lp(inp, b, n_pf, n_local, allow_remote, allow_local_prefill, min_decode)


# ----------------------------------------------------------------------------- plans
def exact_plan(inp: PlanInputs, b: Buckets, name: str, sol: ExactSolution, n_pf: int) -> Plan:
    """The plan of an optimum: offload shares per bucket, t, stage rates, egress, binding."""
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
    routing = {"tokens": b.tokens, "prob": b.probs, "offload_fraction": frac,
               "t_remote_s": b.t_remote_s, "t_local_s": b.t_local_s, "kv_bytes": b.kv_bytes}
    return make_plan(inp, PlanPoint(name, "exact", t, n_pf, n_p, n_d, lam, p, stage, egress, link_r, routing,
                                    is_threshold))


def plan_exact(inp: PlanInputs, b: Buckets) -> Plan:
    """Exact mode for the scenario's pools: maximise Lambda over routing and the P:D split."""
    if inp.n_local < 1:
        raise InvalidInput("local.gpus: PrfaaS-PD needs at least one local instance to decode")
    sol = solve_exact(inp, b, inp.n_prfaas, inp.n_local, allow_remote=inp.n_prfaas > 0)
    return exact_plan(inp, b, "prfaas-pd", sol, inp.n_prfaas)


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
        out["homogeneous-pd"] = exact_plan(inp, b, "homogeneous-pd", sol, 0)
    if inp.n_prfaas >= 1 and inp.n_local >= 1:
        sol = solve_exact(inp, b, inp.n_prfaas, inp.n_local, allow_local_prefill=False, min_decode=inp.n_local)
        out["naive-heterogeneous"] = exact_plan(inp, b, "naive-heterogeneous", sol, inp.n_prfaas)
    return out
