"""The numbers a report shows, computed: a plan report's (:class:`PlanReport`) and a model comparison's (:class:`CompareReport`).

The report pages (``prfaas_plan.report``) lay these objects out and compute nothing. A
:class:`PlanReport` holds the scenario, its plan and baselines, the simulation (when it ran), each
stage's capacity, Lambda_max against t and the P:D split (the paper's Figure 5), the what-if grid
(paper model over links, pools and thresholds), the analytic TTFT distributions, the egress time
series, the length distribution by route, the model's numbers at a few lengths, the paper's
equations at the plan and ``S_kv(l)`` as a formula. A :class:`CompareReport` holds, per model,
the cache bytes, ``S_kv(l)``, ``Phi_kv(l)`` (Eq. 1) and cluster egress (Eq. 2) over 1K-1M tokens,
and the link lines a prefill cluster needs.

Units: rates in requests/s, lengths in tokens (K = 1024), times in seconds, link rates in Gbps
(1e9 bit/s), cache sizes in MiB (2^20 B), money in US dollars.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from prfaas_plan.defaults import (
    DEFAULT_CLUSTER_GPUS,
    DEFAULT_COMPARE_MODELS,
    DEFAULT_CONTEXT_TOKENS,
    DEFAULT_LINK_EFFICIENCY,
    DEFAULT_SIM_DURATION_S,
)
from prfaas_plan.errors import InvalidInput, PlanError
from prfaas_plan.tabular import Columns, Rows, centred_mean, downsample, finite, frame_rows
from prfaas_plan.units import BITS_PER_BYTE, GBPS_BITS_PER_S, MIB_BYTES

if TYPE_CHECKING:
    from prfaas_plan.hardware import Instance
    from prfaas_plan.kvcache import CacheSettings
    from prfaas_plan.model.arch import ModelSpec
    from prfaas_plan.planner import PlanInputs, PlanResult
    from prfaas_plan.scenario import Scenario
    from prfaas_plan.sim import SimResult


def _sim_columns(sim: SimResult, kind: str) -> Columns | None:
    """The simulation's records of ``kind`` (``requests`` or ``timeseries``) as numpy columns
    (:meth:`SimResult.columns`, no frame built): the one place the report reads the simulator's output."""
    return sim.columns(kind)


# ----------------------------------------------------------------------------- S_kv(l) as a formula
@dataclass(frozen=True)
class KvFormula:
    """``S_kv(l) = per_token_bytes * l + sum(b * min(l, W) for b, W in windows) + fixed_bytes``, bytes,
    exact (no paging): the terms of :func:`prfaas_plan.kvcache.kv_bytes_expr`, like terms collected."""

    per_token_bytes: int
    windows: tuple[tuple[int, int], ...]  # (bytes per token kept, window W in tokens), by W
    fixed_bytes: int


def kv_formula(model: ModelSpec, settings: CacheSettings | None = None) -> KvFormula:
    """The coefficients of ``S_kv(l)`` for ``model`` (from :func:`prfaas_plan.kvcache.per_layer_table`)."""
    from prfaas_plan.kvcache import per_layer_table

    per, fixed, windows = 0, 0, {}
    for r in per_layer_table(model, settings):
        b = r["layers"] * r["bytes_per_token"]
        if r["window_tokens"] is not None:
            windows[r["window_tokens"]] = windows.get(r["window_tokens"], 0) + b
        else:
            per += b
        fixed += r["layers"] * (r["conv_bytes"] + r["recurrent_bytes"])
    return KvFormula(per, tuple((b, w) for w, b in sorted(windows.items()) if b), fixed)


# ----------------------------------------------------------------------------- the what-if grid
LINK_EXPONENTS = np.arange(-5, 3)
"""Link grid: the scenario's Gbps times 2 to these powers (100 Gbps: 3.125 ... 400 Gbps)."""
POOL_STEPS = 5
"""Instance counts per pool slider."""
T_POINTS = 64
"""Thresholds on the t slider and the Lambda_max-vs-t curve (log-spaced, tokens)."""
NO_LINK_BASE_GBPS = 12.5
"""Link grid base for a scenario without a link (0 Gbps): 0.39 ... 50 Gbps, commodity lines."""


@dataclass(frozen=True)
class WhatIfGrid:
    """The what-if grid (paper model, Eqs. 3-8, over links, pool sizes and thresholds).

    cells: columns, one value per (link_gbps, prfaas_gpus, local_gpus): the paper-mode optimum
        ``threshold_tokens`` (NaN: nothing offloaded), ``n_prfaas``, ``n_pd_p``, ``n_pd_d``
        (instances), ``lambda_max_rps``, ``offload_fraction``, ``egress_gbps``; it is what
        ``pp.plan(scenario with those pools and link, mode="paper")`` returns.
    curve: columns, one value per cell and slider t (``t_tokens``), cell by cell: the best
        ``n_pd_p`` at that t, its ``lambda_max_rps``, ``offload_fraction`` and ``egress_gbps``.
    """

    link_gbps: np.ndarray
    prfaas_gpus: np.ndarray
    local_gpus: np.ndarray
    t_tokens: np.ndarray
    cells: Columns
    curve: Columns


def pool_values(instances: int, gpus_per_instance: int, min_instances: int) -> np.ndarray:
    """:data:`POOL_STEPS` pool sizes in GPUs, centred on ``instances`` where the floor allows."""
    start = max(min_instances, instances - POOL_STEPS // 2)
    return gpus_per_instance * np.arange(start, start + POOL_STEPS)


def link_values(gbps: float) -> np.ndarray:
    """The link grid in Gbps: ``gbps * 2**k``; a scenario without a link also gets 0 Gbps."""
    if gbps > 0:
        return gbps * 2.0 ** LINK_EXPONENTS
    return np.r_[0.0, NO_LINK_BASE_GBPS * 2.0 ** LINK_EXPONENTS]


def _rates(inp: PlanInputs, t: np.ndarray, n_pf: np.ndarray, n_loc: np.ndarray, link_gbps: np.ndarray):
    """Eqs. 3-6 over (link, PrfaaS, local, t, N_p); N_p >= the cell's local count is NaN."""
    from prfaas_plan.planner import paper_stage_rates

    n_p = np.arange(int(n_loc.max()))
    g = paper_stage_rates(inp, t, n_p, n_pf=n_pf[None, :, None, None, None].astype(float),
                          n_local=n_loc[None, None, :, None, None].astype(float),
                          link_bits_per_s=link_gbps[:, None, None, None, None] * GBPS_BITS_PER_S)
    lam = np.where(n_p < n_loc[None, None, :, None, None], g["lambda"], np.nan)
    return lam, g["p"][0, 0, 0, :, 0], g["l_long"][0, 0, 0, :, 0]


def _egress_gbps(inp: PlanInputs, lam, p, l_long) -> np.ndarray:
    """Eq. 2 at a rate: lam (req/s) x p x 8 S_kv(l_long) in Gbps; 0 where nothing is offloaded."""
    bits = BITS_PER_BYTE * inp.kv_bytes(np.nan_to_num(l_long, nan=1.0))
    return np.where(p > 0, lam * p * bits / GBPS_BITS_PER_S, 0.0)


def whatif_grid(inp: PlanInputs) -> WhatIfGrid:
    """The what-if grid of a scenario's :class:`~prfaas_plan.planner.PlanInputs`: per (link,
    PrfaaS, local) cell the optimum on the planner's own grid (``threshold_grid`` plus t =
    infinity, every N_p, first maximum), and per slider t the best N_p."""
    from prfaas_plan.planner import threshold_grid

    spec = inp.scenario.spec
    links = link_values(spec.link.gbps)
    pf_gpus = pool_values(spec.prfaas.instances, spec.prfaas.gpus_per_instance, 0)
    loc_gpus = pool_values(spec.local.instances, spec.local.gpus_per_instance, 2)
    n_pf, n_loc = pf_gpus // spec.prfaas.gpus_per_instance, loc_gpus // spec.local.gpus_per_instance
    k, f, loc = np.indices((len(links), len(pf_gpus), len(loc_gpus))).reshape(3, -1)
    base = {"link_gbps": links[k], "prfaas_gpus": pf_gpus[f], "local_gpus": loc_gpus[loc]}

    t_full = np.r_[threshold_grid(inp), np.inf]
    lam, p, l_long = _rates(inp, t_full, n_pf, n_loc, links)
    flat = lam.reshape(lam.shape[:3] + (-1,))
    best = np.nanargmax(flat, axis=-1).ravel()
    i, j = np.divmod(best, lam.shape[-1])
    lam_best = flat.reshape(-1, flat.shape[-1])[np.arange(best.size), best]
    cells = {
        **base, "threshold_tokens": np.where(p[i] > 0, t_full[i], np.nan),
        "n_prfaas": n_pf[f], "n_pd_p": j, "n_pd_d": n_loc[loc] - j, "lambda_max_rps": lam_best,
        "offload_fraction": p[i], "egress_gbps": _egress_gbps(inp, lam_best, p[i], l_long[i])}

    t_grid = threshold_grid(inp, T_POINTS)
    lam, p, l_long = _rates(inp, t_grid, n_pf, n_loc, links)
    j = np.nanargmax(lam, axis=-1)  # (link, PrfaaS, local, t)
    lam_t = np.nanmax(lam, axis=-1)
    nt = len(t_grid)
    curve = {
        **{c: np.repeat(v, nt) for c, v in base.items()}, "t_tokens": np.tile(t_grid, len(k)),
        "n_pd_p": j.ravel(), "lambda_max_rps": lam_t.ravel(), "offload_fraction": np.tile(p, len(k)),
        "egress_gbps": _egress_gbps(inp, lam_t, p, l_long).ravel()}
    return WhatIfGrid(links, pf_gpus, loc_gpus, t_grid, cells, curve)


def initial_steps(g: WhatIfGrid, sc: Scenario, t_best: float | None) -> dict[str, int]:
    """Slider start values: the scenario's link and pools (nearest grid value) and the grid t
    nearest (in log) to ``t_best``, the paper-mode optimum there (the middle step without one)."""
    spec = sc.spec

    def near(grid, v) -> int:
        return int(np.argmin(np.abs(np.asarray(grid, dtype=float) - v)))

    t_step = (len(g.t_tokens) // 2 if t_best is None
              else int(np.argmin(np.abs(np.log(g.t_tokens) - np.log(t_best)))))
    return {"link_step": near(g.link_gbps, spec.link.gbps),
            "prfaas_gpus": int(g.prfaas_gpus[near(g.prfaas_gpus, spec.prfaas.gpus)]),
            "local_gpus": int(g.local_gpus[near(g.local_gpus, spec.local.gpus)]), "t_step": t_step}


def grid_cell(g: WhatIfGrid, start: dict[str, int]) -> dict[str, float | int]:
    """The grid cell at the sliders' start values (its ``cells`` values, as Python numbers)."""
    c = g.cells
    i = int(np.flatnonzero((c["link_gbps"] == g.link_gbps[start["link_step"]])
                           & (c["prfaas_gpus"] == start["prfaas_gpus"]) & (c["local_gpus"] == start["local_gpus"]))[0])
    return {k: v[i].item() for k, v in c.items()}


@dataclass(frozen=True)
class WhatIf:
    """The what-if section's numbers: the grid, the sliders' start values, and the cell they start
    on (the scenario as written, in the paper model; ``t_tokens`` None: nothing offloaded)."""

    grid: WhatIfGrid
    start: dict[str, int]
    here: dict[str, float | int]
    t_tokens: float | None


def whatif(sc: Scenario, inp: PlanInputs) -> WhatIf:
    """The what-if grid of a scenario and where its sliders start."""
    g = whatif_grid(inp)
    here = grid_cell(g, initial_steps(g, sc, None))
    t_here = None if math.isnan(here["threshold_tokens"]) else float(here["threshold_tokens"])
    return WhatIf(g, initial_steps(g, sc, t_here), here, t_here)


# ----------------------------------------------------------------------------- the plan report
@dataclass(frozen=True)
class Timeseries:
    """The simulated egress and queues, downsampled to about 1,500 points: ``frame`` (columns
    time_s in s, egress_gbps, remote_queue and local_queue in requests, ...), its step ``dt_s``
    (s) and the moving mean of egress (Gbps) over ``window`` steps (about 30 s)."""

    frame: Columns
    dt_s: float
    window: int
    egress_mean_gbps: np.ndarray


@dataclass(frozen=True)
class PlanReport:
    """Everything the plan report shows, computed (see the module); tables as records
    (:data:`Rows`, typed as a DataFrame's) or numpy :data:`Columns`.

    plans: ``PlanResult.records()`` plus each plan's ``gpus_remote``, ``gpus_local`` and its cost
    split (``remote_usd_per_hour``, ``local_usd_per_hour``, ``link_usd_per_hour``). stages: per
    stage (prfaas, pd_p, pd_d, link) the rate it alone sustains (requests/s), how busy it is at
    Lambda_max, its instances. sweep_threshold, sweep_np: Lambda_max and each stage's rate
    (requests/s) against t (tokens) at the plan's N_p, and against N_p at ``t_ref_tokens`` (paper
    model; +-inf as NaN). ttft_cdf_*: the queueing model's TTFT CDF per plan (``ttft_s``, ``cdf``,
    ``plan``, ``rate_rps``) at the common rate and at each plan's own load; sim_ttft_cdf: the
    simulated requests' (``ttft_s``, ``cdf``) over ``sim_requests`` requests. length_distribution:
    the share of requests per length bin (``lo_tokens``, ``hi_tokens``) prefilled remotely
    (``prfaas``) and locally (``local``). per_length: ``tokens``, ``t_remote_s``, ``t_local_s``,
    ``kv_mib`` (MiB), ``phi_gbps``. equations: the paper's Eqs. 3-6 terms at the plan's t
    (``equations_t_tokens``) and N_p. tokens_per_s: the plan's input + output tokens per second at
    Lambda_max; egress_at_load_gbps: its mean egress at the scenario's load.
    """

    scenario: Scenario
    result: PlanResult
    simulation: SimResult | None
    sim_note: str
    seed: int
    plans: Rows
    tokens_per_s: float
    egress_at_load_gbps: float
    common_rate_rps: float
    stages: Rows
    sweep_threshold: Columns
    sweep_np: Columns
    t_ref_tokens: float
    whatif: WhatIf
    ttft_cdf_common: Rows
    ttft_cdf_own: Rows
    sim_ttft_cdf: Columns | None
    sim_requests: int
    timeseries: Timeseries | None
    length_distribution: Columns
    per_length: Columns
    equations: dict[str, float]
    equations_t_tokens: float
    kv_formula: KvFormula


def _simulation(sc: Scenario, res: PlanResult, simulate: bool | None, load: float | None, duration_s: float,
                seed: int) -> tuple[SimResult | None, str]:
    """The simulation at the scenario's load (or ``load``), or None and why not."""
    if simulate is not None and not simulate:
        return None, "Simulation was turned off for this report"
    from prfaas_plan.sim import simulate as run_simulation

    try:
        sim = run_simulation(sc, res, load=sc.spec.load if load is None else load, duration_s=duration_s, seed=seed)
    except PlanError as exc:
        return None, f"The simulation could not run: {exc}"
    except Exception as exc:  # noqa: BLE001 - a simulator bug must not cost the user the whole report
        return None, f"The simulation failed ({type(exc).__name__}: {exc})"
    if sim.frames is None:  # too long to keep per-request records in memory
        return None, (f"The simulation ({sim.summary()['requests']:,} requests) was too long to chart; "
                      "give a shorter --sim-duration")
    return sim, ""


def _plans(sc: Scenario, res: PlanResult) -> Rows:
    """One row per plan: ``records()``, its GPUs on each side and its cost per hour split."""
    rows = []
    for r in res.records():
        p = res.plans[r["plan"]]
        remote, local = p.gpus["prfaas"], p.gpus["pd_p"] + p.gpus["pd_d"]
        rows.append({**r, "gpus_remote": remote, "gpus_local": local,
                     "remote_usd_per_hour": remote * sc.prfaas_instance.gpu.price_usd_per_gpu_hour,
                     "local_usd_per_hour": local * sc.local_instance.gpu.price_usd_per_gpu_hour,
                     "link_usd_per_hour": sc.spec.link.price_usd_per_hour if remote else 0.0})
    return frame_rows(rows)


def _stages(res: PlanResult) -> Rows:
    """Each stage's capacity alone (the link's: Lambda_max scaled by usable link over egress)."""
    inp, best = res.inputs, res.plan
    link_rps = (best.lambda_max_rps * inp.link_bits_per_s / (best.egress_gbps * GBPS_BITS_PER_S)
                if best.egress_gbps > 0 else math.inf)
    rows = []
    for key in ("prfaas", "pd_p", "pd_d", "link"):
        rate = link_rps if key == "link" else best.stage_rps[key]
        rows.append({"stage": key, "rate_rps": rate,
                     "utilisation": best.lambda_max_rps / rate if rate and math.isfinite(rate) else 0.0,
                     "instances": best.instances.get(key, np.nan) if key != "link" else np.nan})
    return frame_rows(rows)


def _sweeps(inp: PlanInputs, n_p: int, t_ref: float) -> tuple[Columns, Columns]:
    """Lambda_max and each stage's rate (requests/s; paper model, +-inf as NaN) against t at N_p =
    ``n_p`` (120 thresholds) and against N_p at t = ``t_ref``."""
    from prfaas_plan.planner.paper import sweep_np_columns, sweep_threshold_columns

    return finite(sweep_threshold_columns(inp, n_p, 120)), finite(sweep_np_columns(inp, t_ref))


def _ttft_cdf(res: PlanResult, basis: str) -> Rows:
    """The queueing model's TTFT CDF of every plan at a rate basis, on 241 points up to 1.25 x the
    largest P99 (s)."""
    from prfaas_plan.planner import ttft_at

    rows = [r for r in frame_rows(list(res.ttft_records)) if r["path"] == "all" and r["basis"] == basis]
    p99 = np.array([r["p99_s"] for r in rows], dtype=float)
    hi = float(np.nanmax(np.where(np.isfinite(p99), p99, np.nan))) * 1.25 if rows else 10.0
    if not math.isfinite(hi) or hi <= 0:
        hi = 10.0
    grid = np.linspace(0.0, hi, 241)
    out = []
    for r in rows:
        rate = float(r["rate_rps"])
        cdf = ttft_at(res.inputs, res.plans[r["plan"]], res.buckets_for(r["plan"]), rate)["all"].cdf(grid)
        out += [{"ttft_s": x, "cdf": c, "plan": r["plan"], "rate_rps": rate}
                for x, c in zip(grid.tolist(), np.asarray(cdf).tolist())]
    return out


def _sim_ttft_cdf(sim: SimResult | None) -> tuple[Columns | None, int]:
    """The simulated requests' TTFT CDF (201 quantiles, s) and how many requests it is over."""
    if sim is None:
        return None, 0
    tt = np.asarray(_sim_columns(sim, "requests")["ttft_s"], dtype=float)
    tt = tt[np.isfinite(tt)]
    if not tt.size:
        return None, 0
    qs = np.linspace(0, 1, 201)
    return {"ttft_s": np.quantile(tt, qs), "cdf": qs}, int(tt.size)


def _timeseries(sim: SimResult | None) -> Timeseries | None:
    cols = None if sim is None else _sim_columns(sim, "timeseries")
    if cols is None or not len(cols.get("time_s", ())):
        return None
    ts = downsample(cols, "time_s", 1500)
    dt = float(np.median(np.diff(ts["time_s"]))) if len(ts["time_s"]) > 1 else 1.0
    win = max(1, int(round(30.0 / dt))) if dt > 0 else 1
    return Timeseries(ts, dt, win, centred_mean(ts["egress_gbps"], win))


def _length_distribution(res: PlanResult) -> Columns:
    """The share of requests per log-spaced length bin (40 bins), prefilled remotely and locally."""
    from prfaas_plan.planner import offload_fractions

    b = res.buckets
    frac = offload_fractions(res.plan, b)
    lo, hi = float(np.min(b.tokens)), float(np.max(b.tokens))
    edges = np.geomspace(lo * 0.999, hi * 1.001, 41)
    idx = np.clip(np.digitize(b.tokens, edges) - 1, 0, 39)
    remote = np.bincount(idx, weights=b.probs * frac, minlength=40)
    local = np.bincount(idx, weights=b.probs * (1 - frac), minlength=40)
    return {"lo_tokens": edges[:-1], "hi_tokens": edges[1:], "prfaas": remote, "local": local}


def _per_length(sc: Scenario, res: PlanResult) -> Columns:
    """T_prefill on both sides, S_kv and Phi_kv (Eq. 1) at 1K, 4K, 8K, 32K and 128K tokens (those
    the model holds, near the workload's lengths)."""
    from prfaas_plan.bandwidth import kv_throughput_gbps

    inp, b = res.inputs, res.buckets
    lo, hi = float(np.min(b.tokens)), float(np.max(b.tokens))
    lens = [n for n in (1024, 4096, 8192, 32768, 131072) if n <= sc.model.max_context_tokens]
    lens = [n for n in lens if lo * 0.5 <= n <= hi * 2] or lens
    arr = np.asarray(lens, dtype=float)
    phi = kv_throughput_gbps(sc.model, sc.prfaas_instance, arr, settings=sc.cache, profile=sc.prfaas_profile)
    return {"tokens": np.asarray(lens, dtype=np.int64), "t_remote_s": np.asarray(inp.t_remote(arr)),
            "t_local_s": np.asarray(inp.t_local(arr)), "kv_mib": np.asarray(inp.kv_bytes(arr) / MIB_BYTES),
            "phi_gbps": np.asarray(phi, dtype=float)}


def _equations(res: PlanResult) -> tuple[float, dict[str, float]]:
    """The paper's terms (p, l_long, l_short, Eqs. 3-6) at the plan's t (the median length when
    nothing is offloaded) and N_p."""
    from prfaas_plan.planner import paper_stage_rates

    inp, best = res.inputs, res.plan
    t = best.threshold_tokens if best.threshold_tokens else float(inp.lengths.quantile(0.5))
    g = paper_stage_rates(inp, np.array([t]), np.array([best.instances["pd_p"]]))
    at = {k: float(np.asarray(v)[0, 0]) for k, v in g.items()}
    p = at["p"]
    return t, {"p": p, "l_long": at["l_long"], "l_short": at["l_short"], "theta_prfaas": at["prfaas"] * p,
               "theta_pdp": at["pd_p"] * (1 - p), "theta_pdd": at["pd_d"], "lambda_max": at["lambda"]}


def analyse_plan(sc: Scenario, mode: str = "exact", result: PlanResult | None = None, simulate: bool | None = None,
                 sim_duration_s: float = DEFAULT_SIM_DURATION_S, seed: int = 0,
                 load: float | None = None) -> PlanReport:
    """Everything the plan report shows for scenario ``sc``: its plan (``result``, else
    ``planner.plan(sc, mode, load)``), the simulation (``simulate`` None = yes) of ``sim_duration_s``
    seconds with ``seed`` at ``load`` (default: the scenario's), and the numbers derived from them."""
    from prfaas_plan.planner import plan

    res = result if result is not None else plan(sc, mode=mode, load=load)
    sim, sim_note = _simulation(sc, res, simulate, load, sim_duration_s, seed)
    inp, best = res.inputs, res.plan
    t_best = best.threshold_tokens
    t_ref = float(t_best) if t_best is not None and t_best > 0 else float(inp.lengths.quantile(0.5))
    sim_cdf, sim_requests = _sim_ttft_cdf(sim)
    eq_t, eqs = _equations(res)
    sw_t, sw_n = _sweeps(inp, best.instances["pd_p"], t_ref)
    return PlanReport(
        scenario=sc, result=res, simulation=sim, sim_note=sim_note, seed=seed, plans=_plans(sc, res),
        tokens_per_s=best.lambda_max_rps * (best.mean_input_tokens + best.output_tokens),
        egress_at_load_gbps=best.egress_gbps * sc.spec.load,
        common_rate_rps=res.common_rate_rps, stages=_stages(res), sweep_threshold=sw_t, sweep_np=sw_n,
        t_ref_tokens=t_ref, whatif=whatif(sc, inp),
        ttft_cdf_common=_ttft_cdf(res, "common rate"), ttft_cdf_own=_ttft_cdf(res, "own load"),
        sim_ttft_cdf=sim_cdf, sim_requests=sim_requests, timeseries=_timeseries(sim),
        length_distribution=_length_distribution(res), per_length=_per_length(sc, res), equations=eqs,
        equations_t_tokens=eq_t, kv_formula=kv_formula(sc.model, sc.cache))


# ----------------------------------------------------------------------------- the model comparison
FLAGSHIP_PAIR = ("mimo-v2-flash", "minimax-m2.5")
"""(hybrid, dense) pair the comparison page leads with when both are on it."""
STANDARD_LINES_GBPS = (10.0, 100.0, 400.0)
"""Nominal line rates the comparison measures egress against."""
CURVE_TOKENS = np.unique(np.round(1024 * 2 ** (np.arange(0, 41) / 4)).astype(np.int64))
"""Prompt lengths of the comparison's curves: 1K to 1M tokens, 4 per octave."""


@dataclass(frozen=True)
class CompareReport:
    """Everything the model comparison shows, computed.

    table: one row per model: ids and names, layer mix, max context, cache bytes per token and
    fixed state, and at ``ref_tokens``: S_kv (MiB), T_prefill (s) and its bound, Phi_kv (Gbps),
    cluster egress (Gbps), load on each standard line, the smallest line that fits, 100 Gbps
    lines needed and the prefill GPUs one 100 Gbps line feeds. curve: per model and length
    (:data:`CURVE_TOKENS` up to its max context): S_kv, T_prefill, Phi_kv, cluster egress.
    pair: the (low, high) Phi_kv model ids the page leads with (None: fewer than two differ), with
    the ratios of their S_kv and Phi_kv at ``ref_tokens``.
    """

    models: tuple[ModelSpec, ...]
    names: tuple[str, ...]
    instance: Instance
    settings: CacheSettings
    cluster_gpus: int
    cluster_instances: float
    ref_tokens: int
    link_efficiency: float
    table: Rows
    curve: Rows
    formulas: tuple[KvFormula, ...]
    pair: tuple[str, str] | None
    kv_ratio: float
    phi_ratio: float


def short_name(m: ModelSpec) -> str:
    """A model's display name without a parenthesised remark ('Kimi-Linear-1T (PrfaaS ...)' -> 'Kimi-Linear-1T')."""
    return m.name.split(" (")[0].strip() or m.id


def headline_pair(table: Rows) -> tuple[str, str] | None:
    """The (hybrid, dense) model ids a comparison leads with: :data:`FLAGSHIP_PAIR` when both are
    on it and reach the reference length, else the lowest and highest Phi_kv there (the first
    model of each, in ``table``'s order); None when fewer than two models reach it (or all emit
    the same)."""
    phi = {r["model"]: r["phi_gbps_ref"] for r in table if not math.isnan(r["phi_gbps_ref"])}
    if set(FLAGSHIP_PAIR) <= set(phi):
        return FLAGSHIP_PAIR
    lo, hi = (min(phi, key=phi.__getitem__), max(phi, key=phi.__getitem__)) if len(phi) >= 2 else (None, None)
    return (lo, hi) if lo != hi else None


def _curve(m: ModelSpec, inst: Instance, cluster_gpus: int, settings: CacheSettings) -> Rows:
    from prfaas_plan.bandwidth import cluster_egress_gbps, kv_throughput_gbps
    from prfaas_plan.kvcache import kv_bytes
    from prfaas_plan.perf.latency import prefill_latency

    g = CURVE_TOKENS[CURVE_TOKENS <= m.max_context_tokens]
    if m.max_context_tokens not in g and m.max_context_tokens >= 1024:
        g = np.append(g, m.max_context_tokens)
    g = g.astype(float)
    s = np.asarray(kv_bytes(m, g, settings), dtype=float)
    t = np.asarray(prefill_latency(m, inst, g, settings).total_s, dtype=float)
    cols = {"tokens": g.astype(np.int64), "kv_mib": s / MIB_BYTES, "prefill_s": t,
            "phi_gbps": np.asarray(kv_throughput_gbps(m, inst, g, settings=settings), dtype=float),
            "cluster_gbps": np.asarray(cluster_egress_gbps(m, inst, cluster_gpus, g, settings=settings), dtype=float)}
    name = short_name(m)
    return [{"model": m.id, "name": name, **dict(zip(cols, vals))}
            for vals in zip(*(np.broadcast_to(v, g.shape).tolist() for v in cols.values()))]


def _at_ref(m: ModelSpec, inst: Instance, cluster_gpus: int, ref: int, settings: CacheSettings,
            link_efficiency: float) -> dict:
    """One model's numbers at the reference length (NaN beyond its max context)."""
    from prfaas_plan.bandwidth import cluster_egress_gbps, kv_throughput_gbps, max_prefill_gpus
    from prfaas_plan.kvcache import kv_bytes
    from prfaas_plan.perf.latency import prefill_latency

    if ref > m.max_context_tokens:
        return {"kv_mib_ref": np.nan, "prefill_s_ref": np.nan, "bound_ref": "beyond max context",
                "phi_gbps_ref": np.nan, "cluster_gbps_ref": np.nan, "max_gpus_100g": np.nan, "lines_100g": np.nan,
                "smallest_line": "–", **{f"util_{line:g}g": np.nan for line in STANDARD_LINES_GBPS}}
    lr = prefill_latency(m, inst, float(ref), settings)
    phi = float(kv_throughput_gbps(m, inst, float(ref), settings=settings))
    cluster = float(cluster_egress_gbps(m, inst, cluster_gpus, float(ref), settings=settings))
    row = {"kv_mib_ref": float(kv_bytes(m, float(ref), settings)) / MIB_BYTES, "prefill_s_ref": float(lr.total_s),
           "bound_ref": str(lr.bound), "phi_gbps_ref": phi, "cluster_gbps_ref": cluster}
    for line in STANDARD_LINES_GBPS:
        row[f"util_{line:g}g"] = cluster / line
    row["max_gpus_100g"] = max_prefill_gpus(m, inst, ref, 100.0, link_efficiency, settings=settings)
    fits = [line for line in STANDARD_LINES_GBPS if cluster <= line * link_efficiency]
    row["smallest_line"] = f"{fits[0]:g} Gbps" if fits else f"more than {STANDARD_LINES_GBPS[-1]:g} Gbps"
    row["lines_100g"] = int(math.ceil(cluster / (100.0 * link_efficiency)))
    return row


def _model_row(m: ModelSpec, settings: CacheSettings) -> dict:
    from prfaas_plan.kvcache import fixed_state_bytes, kv_bytes_per_token

    per, fixed = kv_bytes_per_token(m, settings), fixed_state_bytes(m, settings)
    return {"model": m.id, "name": short_name(m), "full_name": m.name,
            "layer_mix": " + ".join(f"{n} {m.attention[k].kind}" for k, n in m.layer_counts().items()),
            "max_context_tokens": m.max_context_tokens, "kv_bytes_per_token": per, "fixed_state_bytes": fixed,
            "kv_kib_per_token": per / 1024, "fixed_state_mib": fixed / MIB_BYTES}


def analyse_compare(models: Iterable[str] | None = None, hardware: str = "h200", gpus: int = 8,
                    cluster_gpus: int = DEFAULT_CLUSTER_GPUS, context_tokens: int = DEFAULT_CONTEXT_TOKENS,
                    settings: CacheSettings | None = None, link_efficiency: float = DEFAULT_LINK_EFFICIENCY,
                    extra_model_dirs: tuple = (), extra_hardware_dirs: tuple = ()) -> CompareReport:
    """Everything the model comparison shows: ``models`` (None or empty: the paper's,
    :data:`~prfaas_plan.defaults.DEFAULT_COMPARE_MODELS`) prefilling on ``gpus``-GPU ``hardware``
    instances, a ``cluster_gpus``-GPU prefill cluster, at ``context_tokens`` tokens."""
    from prfaas_plan.hardware import instance
    from prfaas_plan.kvcache import DEFAULT_SETTINGS
    from prfaas_plan.model import load_model

    ids = list(models) if models else list(DEFAULT_COMPARE_MODELS)
    if len(set(ids)) != len(ids):
        raise InvalidInput("models: a model is listed twice")
    if gpus < 1:
        raise InvalidInput("--gpus: an instance needs at least 1 GPU")
    if not 0 < link_efficiency <= 1:
        raise InvalidInput("link efficiency must be in (0, 1]")
    settings = settings or DEFAULT_SETTINGS
    specs = tuple(load_model(i, tuple(extra_model_dirs)) for i in ids)
    inst = instance(hardware, gpus, tuple(extra_hardware_dirs))
    ref = int(context_tokens)
    table = frame_rows([{**_model_row(m, settings), **_at_ref(m, inst, cluster_gpus, ref, settings, link_efficiency)}
                        for m in specs])
    curve = [row for m in specs for row in _curve(m, inst, cluster_gpus, settings)]
    pair = headline_pair(table)
    kv_ratio = phi_ratio = math.nan
    if pair is not None:
        by = {r["model"]: r for r in table}
        a, z = by[pair[0]], by[pair[1]]
        kv_ratio, phi_ratio = z["kv_mib_ref"] / a["kv_mib_ref"], z["phi_gbps_ref"] / a["phi_gbps_ref"]
    return CompareReport(specs, tuple(short_name(m) for m in specs), inst, settings, cluster_gpus, cluster_gpus / gpus,
                         ref, link_efficiency, table, curve, tuple(kv_formula(m, settings) for m in specs), pair,
                         kv_ratio, phi_ratio)
