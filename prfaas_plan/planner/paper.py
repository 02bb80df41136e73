"""The paper's closed-form mode: Eqs. 3-8 of the PrfaaS paper exactly as written.

Requests whose uncached length exceeds ``t`` go to the PrfaaS cluster; stage throughputs use
``T(l_long)``, ``T(l_short)`` and ``S_kv(l_long)``; a 2-D grid search over ``t`` and the local
prefill count ``N_p`` picks the best plan. The baselines use the mean length. The Figure 5 sweeps
(Lambda_max against t, against N_p) come from the same equations. Rates are requests/s, lengths
tokens, link rates bit/s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from prfaas_plan.errors import InvalidInput
from prfaas_plan.planner.result import PATHS, Plan, PlanPoint, make_plan
from prfaas_plan.units import BITS_PER_BYTE
from prfaas_plan.workload.lengths import rint_quantiles

if TYPE_CHECKING:
    import pandas as pd

    from prfaas_plan.planner.inputs import PlanInputs
    from prfaas_plan.tabular import Columns

T_GRID_POINTS = 400
"""Thresholds tried by paper mode's grid search (log-spaced; about 1% apart over 128-128K tokens)."""
T_GRID_QUANTILES = (0.001, 0.999)
"""The grid spans these quantiles of the length distribution (the extremes route almost nothing)."""


def threshold_grid(inp: PlanInputs, points: int = T_GRID_POINTS) -> np.ndarray:
    """Candidate thresholds (tokens): ``points`` log-spaced over the workload's length range (its
    :data:`T_GRID_QUANTILES`), rounded to whole tokens, distinct (``rint_quantiles``: the exact
    quantiles' grid, without importing scipy.special for them)."""
    def spaced(lo_hi_tokens: np.ndarray) -> np.ndarray:
        lo, hi = (float(v) for v in lo_hi_tokens)
        return np.geomspace(max(lo, 1.0), max(hi, lo + 1.0), points)

    return np.unique(rint_quantiles(inp.lengths, T_GRID_QUANTILES, spaced))


def paper_stage_rates(inp: PlanInputs, t: np.ndarray, n_p: np.ndarray, n_pf: int | np.ndarray | None = None,
                      n_local: int | np.ndarray | None = None,
                      link_bits_per_s: float | np.ndarray | None = None) -> dict[str, np.ndarray]:
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
    egress = lam * p * BITS_PER_BYTE * float(inp.kv_bytes(g["l_long"][i, j])) if p > 0 else 0.0
    return make_plan(inp, PlanPoint(
        "prfaas-pd", "paper", float(t[i]) if p > 0 else None, inp.n_prfaas, int(n_p[j]), inp.n_local - int(n_p[j]),
        lam, p, {k: float(g[k][i, j]) for k in PATHS}, egress, float(g["link"][i, j])))


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
        out["homogeneous-pd"] = make_plan(inp, PlanPoint(
            "homogeneous-pd", "paper", None, 0, int(n_p[j]), n - int(n_p[j]), float(lam[j]), 0.0, stage, 0.0))
    if inp.n_prfaas >= 1 and inp.n_local >= 1:
        compute = inp.n_prfaas / float(inp.t_remote(l_avg))
        link = inp.link_nominal_bits_per_s / (BITS_PER_BYTE * float(inp.kv_bytes(l_avg)))
        stage = {"prfaas": min(compute, link), "pd_p": np.inf, "pd_d": inp.n_local * inp.decode_rps_per_instance}
        lam = min(stage["prfaas"], stage["pd_d"])
        out["naive-heterogeneous"] = make_plan(inp, PlanPoint(
            "naive-heterogeneous", "paper", 0.0, inp.n_prfaas, 0, inp.n_local, lam, 1.0, stage,
            lam * BITS_PER_BYTE * float(inp.kv_bytes(l_avg)), link))
    return out


def sweep_threshold_columns(inp: PlanInputs, n_p: int, points: int = T_GRID_POINTS) -> Columns:
    """Lambda_max and each stage's rate (requests/s) against t at a fixed N_p (paper model), as
    numpy columns: threshold_tokens, offload_fraction, prfaas_rps, pd_p_rps, pd_d_rps, lambda_max_rps."""
    t = threshold_grid(inp, points)
    g = paper_stage_rates(inp, t, np.array([n_p]))
    return {"threshold_tokens": t, "offload_fraction": g["p"][:, 0], "prfaas_rps": g["prfaas"][:, 0],
            "pd_p_rps": g["pd_p"][:, 0], "pd_d_rps": g["pd_d"][:, 0], "lambda_max_rps": g["lambda"][:, 0]}


def sweep_threshold(inp: PlanInputs, n_p: int, points: int = T_GRID_POINTS) -> pd.DataFrame:
    """Lambda_max and each stage's rate against t at a fixed N_p (paper model):
    :func:`sweep_threshold_columns` as a DataFrame."""
    import pandas as pd

    return pd.DataFrame(sweep_threshold_columns(inp, n_p, points))


def sweep_np_columns(inp: PlanInputs, threshold_tokens: float) -> Columns:
    """Lambda_max and each stage's rate (requests/s) against N_p at a fixed t (paper model), as
    numpy columns: n_pd_p, n_pd_d, prfaas_rps, pd_p_rps, pd_d_rps, lambda_max_rps."""
    n_p = np.arange(0, inp.n_local)
    g = paper_stage_rates(inp, np.array([threshold_tokens]), n_p)
    return {"n_pd_p": n_p, "n_pd_d": inp.n_local - n_p, "prfaas_rps": g["prfaas"][0],
            "pd_p_rps": g["pd_p"][0], "pd_d_rps": g["pd_d"][0], "lambda_max_rps": g["lambda"][0]}


def sweep_np(inp: PlanInputs, threshold_tokens: float) -> pd.DataFrame:
    """Lambda_max and each stage's rate against N_p at a fixed t (paper model):
    :func:`sweep_np_columns` as a DataFrame."""
    import pandas as pd

    return pd.DataFrame(sweep_np_columns(inp, threshold_tokens))
