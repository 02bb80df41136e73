"""The plan report's what-if section: sliders for the inter-DC link, the two pool sizes and the
threshold t, over a grid computed when the report is written.

Every number comes from the paper's model (Eqs. 3-8, :func:`~prfaas_plan.planner.paper_stage_rates`
broadcast over all cells at once), not from the exact-mode MILP. The grid:

* link: the scenario's nominal Gbps times 2^k, k = -5..2 (paper mode uses the nominal B_out);
* PrfaaS and local pools: five instance counts each around the scenario's, in GPUs (multiples of
  ``gpus_per_instance``; the local pool keeps at least two instances, one to prefill, one to decode);
* t: :data:`T_POINTS` log-spaced thresholds (tokens) for the slider and the Lambda_max-vs-t curve.

Per (link, PrfaaS, local) cell, :func:`whatif_grid` finds the paper-mode optimum on the planner's
own grid (``threshold_grid`` plus t = infinity, every N_p), which is what
``pp.plan(scenario with those pools and link, mode="paper")`` returns, and, per slider t, the best
N_p with its Lambda_max (req/s) and egress (Gbps). P90 TTFT is not precomputed per cell: the
queueing model costs about 6 ms a cell, over a second for the grid.

The chart is one Vega-Lite spec (its sliders are Vega-Lite params bound to range inputs; the
link and t sliders move over grid steps, ``*_step``, and the page shows their values in the
headline); the data travel rounded to the precision shown (:data:`ROUND`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

LINK_EXPONENTS = np.arange(-5, 3)
"""Link grid: the scenario's Gbps times 2 to these powers (100 Gbps: 3.125 ... 400 Gbps)."""
POOL_STEPS = 5
"""Instance counts per pool slider."""
T_POINTS = 64
"""Thresholds on the t slider and the Lambda_max-vs-t curve (log-spaced, tokens)."""
NO_LINK_BASE_GBPS = 12.5
"""Link grid base for a scenario without a link (0 Gbps): 0.39 ... 50 Gbps, commodity lines."""
ROUND = {"lambda_max_rps": 3, "egress_gbps": 2, "offload_fraction": 3}
"""Decimals the chart data keep (and the headline shows)."""


@dataclass(frozen=True)
class WhatIfGrid:
    """The precomputed what-if grid (paper model).

    cells: one row per (link_gbps, prfaas_gpus, local_gpus): the paper-mode optimum
        ``threshold_tokens`` (NaN: nothing offloaded), ``n_prfaas``, ``n_pd_p``, ``n_pd_d``
        (instances), ``lambda_max_rps``, ``offload_fraction``, ``egress_gbps``.
    curve: one row per cell and slider t (``t_tokens``): the best ``n_pd_p`` at that t, its
        ``lambda_max_rps``, ``offload_fraction`` and ``egress_gbps``.
    """

    link_gbps: np.ndarray
    prfaas_gpus: np.ndarray
    local_gpus: np.ndarray
    t_tokens: np.ndarray
    cells: pd.DataFrame
    curve: pd.DataFrame


def pool_values(instances: int, gpus_per_instance: int, min_instances: int) -> np.ndarray:
    """:data:`POOL_STEPS` pool sizes in GPUs, centred on ``instances`` where the floor allows."""
    start = max(min_instances, instances - POOL_STEPS // 2)
    return gpus_per_instance * np.arange(start, start + POOL_STEPS)


def link_values(gbps: float) -> np.ndarray:
    """The link grid in Gbps: ``gbps * 2**k``; a scenario without a link also gets 0 Gbps."""
    if gbps > 0:
        return gbps * 2.0 ** LINK_EXPONENTS
    return np.r_[0.0, NO_LINK_BASE_GBPS * 2.0 ** LINK_EXPONENTS]


def _rates(inp, t: np.ndarray, n_pf: np.ndarray, n_loc: np.ndarray, link_gbps: np.ndarray):
    """Eqs. 3-6 over (link, PrfaaS, local, t, N_p); N_p >= the cell's local count is NaN."""
    from prfaas_plan.planner import paper_stage_rates
    from prfaas_plan.units import GBPS_BITS_PER_S

    n_p = np.arange(int(n_loc.max()))
    g = paper_stage_rates(inp, t, n_p, n_pf=n_pf[None, :, None, None, None].astype(float),
                          n_local=n_loc[None, None, :, None, None].astype(float),
                          link_bits_per_s=link_gbps[:, None, None, None, None] * GBPS_BITS_PER_S)
    lam = np.where(n_p < n_loc[None, None, :, None, None], g["lambda"], np.nan)
    return lam, g["p"][0, 0, 0, :, 0], g["l_long"][0, 0, 0, :, 0]


def _egress_gbps(inp, lam, p, l_long) -> np.ndarray:
    """Eq. 2 at a rate: lam (req/s) x p x 8 S_kv(l_long) in Gbps; 0 where nothing is offloaded."""
    from prfaas_plan.units import BITS_PER_BYTE, GBPS_BITS_PER_S

    bits = BITS_PER_BYTE * inp.kv_bytes(np.nan_to_num(l_long, nan=1.0))
    return np.where(p > 0, lam * p * bits / GBPS_BITS_PER_S, 0.0)


def _index(shape) -> dict[str, np.ndarray]:
    k, f, l = np.indices(shape).reshape(3, -1)
    return {"k": k, "f": f, "l": l}


def whatif_grid(inp) -> WhatIfGrid:
    """The what-if grid of a scenario's :class:`~prfaas_plan.planner.PlanInputs` (see the module)."""
    from prfaas_plan.planner import threshold_grid

    spec = inp.scenario.spec
    links = link_values(spec.link.gbps)
    pf_gpus = pool_values(spec.prfaas.instances, spec.prfaas.gpus_per_instance, 0)
    loc_gpus = pool_values(spec.local.instances, spec.local.gpus_per_instance, 2)
    n_pf, n_loc = pf_gpus // spec.prfaas.gpus_per_instance, loc_gpus // spec.local.gpus_per_instance
    idx = _index((len(links), len(pf_gpus), len(loc_gpus)))
    base = {"link_gbps": links[idx["k"]], "prfaas_gpus": pf_gpus[idx["f"]], "local_gpus": loc_gpus[idx["l"]]}

    # the optimum on plan_paper's grid: t = threshold_grid + infinity, every N_p, first maximum
    t_full = np.r_[threshold_grid(inp), np.inf]
    lam, p, l_long = _rates(inp, t_full, n_pf, n_loc, links)
    flat = lam.reshape(lam.shape[:3] + (-1,))
    best = np.nanargmax(flat, axis=-1).ravel()
    i, j = np.divmod(best, lam.shape[-1])
    lam_best = flat.reshape(-1, flat.shape[-1])[np.arange(best.size), best]
    cells = pd.DataFrame({
        **base, "threshold_tokens": np.where(p[i] > 0, t_full[i], np.nan),
        "n_prfaas": n_pf[idx["f"]], "n_pd_p": j, "n_pd_d": n_loc[idx["l"]] - j, "lambda_max_rps": lam_best,
        "offload_fraction": p[i], "egress_gbps": _egress_gbps(inp, lam_best, p[i], l_long[i])})

    # per slider t: the best N_p at that t
    t_grid = threshold_grid(inp, T_POINTS)
    lam, p, l_long = _rates(inp, t_grid, n_pf, n_loc, links)
    j = np.nanargmax(lam, axis=-1)  # (link, PrfaaS, local, t)
    lam_t = np.nanmax(lam, axis=-1)
    nt = len(t_grid)
    curve = pd.DataFrame({
        **{k: np.repeat(v, nt) for k, v in base.items()}, "t_tokens": np.tile(t_grid, len(idx["k"])),
        "n_pd_p": j.ravel(), "lambda_max_rps": lam_t.ravel(), "offload_fraction": np.tile(p, len(idx["k"])),
        "egress_gbps": _egress_gbps(inp, lam_t, p, l_long).ravel()})
    return WhatIfGrid(links, pf_gpus, loc_gpus, t_grid, cells, curve)


# ----------------------------------------------------------------------------- the section
CELL_NOW = ("datum.link_gbps == wi_link_gbps && datum.prfaas_gpus == wi_prfaas_gpus "
            "&& datum.local_gpus == wi_local_gpus")
"""Vega expression: this row is the cell the sliders select."""
CURVE_FIELDS = ["t_tokens", "t_lambda_max_rps", "t_n_pd_p", "t_offload_fraction", "t_egress_gbps"]
"""The per-t arrays of a chart row (flattened into one row per slider t)."""


def _rounded(values, decimals: int) -> list:
    """Rounded to ``decimals`` for the chart data, NaN as null (any shape, as nested lists)."""
    a = np.round(np.asarray(values, dtype=float), decimals).astype(object)
    a[~np.isfinite(np.asarray(values, dtype=float))] = None
    return a.tolist()


def chart_rows(g: WhatIfGrid) -> list[dict]:
    """The chart's data: one row per cell, the optimum as fields, the per-t curve as arrays
    (``t_tokens``, ``t_n_pd_p`` and ``t_`` + each :data:`ROUND` key)."""
    c, n = g.cells, len(g.cells)
    per_t = {"t_tokens": g.curve.t_tokens.to_numpy().astype(int).reshape(n, -1).tolist(),
             "t_n_pd_p": g.curve.n_pd_p.to_numpy().astype(int).reshape(n, -1).tolist(),
             **{f"t_{k}": _rounded(g.curve[k].to_numpy().reshape(n, -1), d) for k, d in ROUND.items()}}
    cols = {"link_gbps": c.link_gbps.astype(float).tolist(), "prfaas_gpus": c.prfaas_gpus.astype(int).tolist(),
            "local_gpus": c.local_gpus.astype(int).tolist(),
            "threshold_tokens": _rounded(c.threshold_tokens, 0),
            **{k: c[k].astype(int).tolist() for k in ("n_prfaas", "n_pd_p", "n_pd_d")},
            "n_local": (c.n_pd_p + c.n_pd_d).astype(int).tolist(),
            **{k: _rounded(c[k], d) for k, d in ROUND.items()}, **per_t}
    return [dict(zip(cols, vals)) for vals in zip(*cols.values())]


def initial_steps(g: WhatIfGrid, sc, t_best: float | None) -> dict[str, float]:
    """Slider start values: the scenario's link and pools (nearest grid value) and the grid t
    nearest (in log) to ``t_best``, the paper-mode optimum there (the middle step without one)."""
    spec = sc.spec
    near = lambda grid, v: int(np.argmin(np.abs(np.asarray(grid, dtype=float) - v)))  # noqa: E731
    t_step = (len(g.t_tokens) // 2 if t_best is None
              else int(np.argmin(np.abs(np.log(g.t_tokens) - np.log(t_best)))))
    return {"link_step": near(g.link_gbps, spec.link.gbps),
            "prfaas_gpus": int(g.prfaas_gpus[near(g.prfaas_gpus, spec.prfaas.gpus)]),
            "local_gpus": int(g.local_gpus[near(g.local_gpus, spec.local.gpus)]), "t_step": t_step}


CONTROLS_ID = "whatif-controls"
"""The page element the sliders are drawn in (above the chart; the section's HTML has it)."""


def _params(alt, g: WhatIfGrid, start: dict, gpu_r: str, gpu_l: str) -> list:
    """The four sliders (range inputs; ``*_step`` ones move over grid steps, whose values
    ``wi_link_gbps`` and ``wi_t_tokens`` the headline shows) and the GPU names as values."""
    def rng(name, lo, hi, step, label, value):
        return alt.param(name=name, value=value, bind=alt.binding_range(
            min=lo, max=hi, step=step, name=label, element=f"#{CONTROLS_ID}"))

    pf, lc = g.prfaas_gpus, g.local_gpus
    return [
        rng("wi_link_step", 0, len(g.link_gbps) - 1, 1, "Inter-DC link (Gbps)", start["link_step"]),
        alt.param(name="wi_link_gbps", expr=f"{json.dumps([float(v) for v in g.link_gbps])}[wi_link_step]"),
        rng("wi_t_step", 0, len(g.t_tokens) - 1, 1, "Threshold t (tokens)", start["t_step"]),
        alt.param(name="wi_t_tokens", expr=f"{json.dumps([int(t) for t in g.t_tokens])}[wi_t_step]"),
        rng("wi_prfaas_gpus", int(pf[0]), int(pf[-1]), int(pf[1] - pf[0]), f"PrfaaS GPUs ({gpu_r})",
            start["prfaas_gpus"]),
        rng("wi_local_gpus", int(lc[0]), int(lc[-1]), int(lc[1] - lc[0]), f"Local GPUs ({gpu_l})",
            start["local_gpus"]),
        alt.param(name="wi_gpu_r", value=gpu_r), alt.param(name="wi_gpu_l", value=gpu_l),
    ]


HEADLINE = {
    "settings": ("'Settings: link ' + format(datum.link_gbps, '~g') + ' Gbps · PrfaaS pool ' + datum.prfaas_gpus"
                 " + ' × ' + wi_gpu_r + ' (' + datum.n_prfaas + ' instances) · local pool ' + datum.local_gpus"
                 " + ' × ' + wi_gpu_l + ' (' + datum.n_local + ' instances)'"),
    "best": ("'Best plan: Λmax = ' + format(datum.lambda_max_rps, '.3f') + ' req/s ' + (isValid(datum.threshold_tokens)"
             " ? 'at t = ' + format(datum.threshold_tokens, ',d') + ' tokens (' + format(datum.offload_fraction, '.1%')"
             " + ' offloaded)' : 'with nothing offloaded') + ', ' + datum.n_prfaas + ' PrfaaS + ' + datum.n_pd_p"
             " + ' PD-P + ' + datum.n_pd_d + ' PD-D, egress ' + format(datum.egress_gbps, '.2f') + ' Gbps'"),
    "at_t": ("'At the slider t = ' + format(datum.t_tokens, ',d') + ' tokens: Λmax = ' + format(datum.t_lambda_max_rps,"
             " '.3f') + ' req/s, best split ' + datum.t_n_pd_p + ' PD-P + ' + (datum.n_local - datum.t_n_pd_p)"
             " + ' PD-D, ' + format(datum.t_offload_fraction, '.1%') + ' offloaded, egress '"
             " + format(datum.t_egress_gbps, '.2f') + ' Gbps'"),
}
"""The headline lines (Vega expressions over the selected row), in the order drawn."""


def _at_t(alt):
    """The selected cell flattened to one row per t, at the slider's t."""
    return (alt.Chart().transform_filter(CELL_NOW).transform_flatten(CURVE_FIELDS)
            .transform_filter("datum.t_tokens == wi_t_tokens"))


def _headline(alt, width: int):
    cell = alt.Chart().transform_filter(CELL_NOW)
    style = {"align": "left", "baseline": "top", "fontSize": 13, "color": "#1d2330"}
    lines = [
        cell.transform_calculate(text=HEADLINE["settings"]).mark_text(**{**style, "color": "#5b6578"}),
        cell.transform_calculate(text=HEADLINE["best"]).mark_text(**{**style, "fontSize": 15, "fontWeight": 600}),
        _at_t(alt).transform_calculate(text=HEADLINE["at_t"]).mark_text(**style),
    ]
    return alt.layer(*[ln.encode(x=alt.value(0), y=alt.value(4 + 24 * i), text="text:N") for i, ln in enumerate(lines)]
                     ).properties(width=width, height=74, name="wi_headline", view=alt.ViewConfig(stroke=None))


def _curve_chart(alt, g: WhatIfGrid, start: dict, ymax: float, width: int, height: int):
    scenario = (f"datum.link_gbps == {float(g.link_gbps[start['link_step']])} && datum.prfaas_gpus == "
                f"{start['prfaas_gpus']} && datum.local_gpus == {start['local_gpus']}")
    from prfaas_plan.report.charts import _log_token_axis

    lo, hi = float(g.t_tokens[0]), float(g.t_tokens[-1])
    x = alt.X("t_tokens:Q", scale=alt.Scale(type="log", domain=[lo, hi], nice=False),
              axis=_log_token_axis("threshold t (uncached prompt tokens, log scale)"))
    y = alt.Y("t_lambda_max_rps:Q", title="Λmax with the best N_p at t (requests/s)", scale=alt.Scale(domain=[0, ymax]))
    kinds = ["these settings", "the scenario as written"]
    lines = (alt.Chart().transform_filter(f"({CELL_NOW}) || ({scenario})")
             .transform_calculate(series=f"({CELL_NOW}) ? {json.dumps(kinds[0])} : {json.dumps(kinds[1])}")
             .transform_flatten(CURVE_FIELDS).mark_line(clip=True)
             .encode(x=x, y=y, color=alt.Color("series:N", title=None,
                                               scale=alt.Scale(domain=kinds, range=["#1f6fb2", "#9aa3b2"])),
                     strokeDash=alt.StrokeDash("series:N", title=None,
                                               scale=alt.Scale(domain=kinds, range=[[1, 0], [5, 3]])))
             .properties(name="wi_curve"))
    rule = _at_t(alt).mark_rule(color="#c8443c", strokeDash=[2, 2]).encode(x=x)
    point = _at_t(alt).mark_point(filled=True, size=70, color="#c8443c").encode(x=x, y=y).properties(name="wi_at_t")
    best = (alt.Chart().transform_filter(CELL_NOW).mark_point(shape="diamond", filled=True, size=90, color="#1d2330")
            .encode(x=alt.X("threshold_tokens:Q"), y=alt.Y("lambda_max_rps:Q")))
    return alt.layer(lines, rule, point, best).properties(width=width, height=height, title=alt.Title(
        "Λmax against t at these settings", subtitle="red: the slider's t; diamond: the best t (paper model, Eqs. 3-8)"))


def _link_chart(alt, g: WhatIfGrid, ymax: float, width: int, height: int):
    """Best Lambda_max over the link grid (one category per grid value: evenly spaced, as the
    values double, and a 0 Gbps link needs no log scale) for the sliders' pools."""
    pools = "datum.prfaas_gpus == wi_prfaas_gpus && datum.local_gpus == wi_local_gpus"
    x = alt.X("link_gbps:O", sort=[float(v) for v in g.link_gbps],
              axis=alt.Axis(title="inter-DC link (Gbps)", labelAngle=0, format="~g"))
    y = alt.Y("lambda_max_rps:Q", title="best Λmax (requests/s)", scale=alt.Scale(domain=[0, ymax]))
    base = alt.Chart().transform_filter(pools)
    now = (alt.Chart().transform_filter(CELL_NOW).mark_point(filled=True, size=90, color="#c8443c")
           .encode(x=x, y=y).properties(name="wi_link_now"))
    return alt.layer(base.mark_line(color="#1f6fb2", point=True).encode(x=x, y=y), now).properties(
        width=width, height=height, title=alt.Title("Best Λmax against the link", subtitle="these pools; red: the slider's link"))


DATASET = "whatif-grid"
"""The name of the chart's dataset (:func:`chart_rows`), inlined by :class:`~.page.Figure`."""


def whatif_chart(g: WhatIfGrid, start: dict, gpu_r: str, gpu_l: str):
    """The what-if chart (its data are the dataset :data:`DATASET`): headline lines over
    Lambda_max-vs-t and Lambda_max-vs-link, with the sliders."""
    from prfaas_plan.report.charts import _alt

    alt = _alt()
    ymax = max(float(np.nanmax(g.cells.lambda_max_rps)) * 1.1, 1e-3)
    body = alt.hconcat(_curve_chart(alt, g, start, ymax, 430, 240), _link_chart(alt, g, ymax, 300, 240))
    params = [p.param for p in _params(alt, g, start, gpu_r, gpu_l)]  # not add_params: it copies every layer
    return alt.vconcat(_headline(alt, 860), body, data=alt.Data(name=DATASET), params=params)


def _cell(g: WhatIfGrid, start: dict) -> pd.Series:
    """The grid cell at the sliders' start values."""
    c = g.cells
    return c[(c.link_gbps == g.link_gbps[start["link_step"]]) & (c.prfaas_gpus == start["prfaas_gpus"])
             & (c.local_gpus == start["local_gpus"])].iloc[0]


def _grid_table(g: WhatIfGrid, gpu_r: str, gpu_l: str):
    from prfaas_plan.report.page import Col, Table

    keys = [f"{c.link_gbps:g}|{c.prfaas_gpus}|{c.local_gpus}" for c in g.cells.itertuples()]
    return Table("whatif-grid", g.cells.assign(key=keys), [
        Col("link_gbps", "Link", "Gbps", "{:g}"), Col("prfaas_gpus", "PrfaaS", f"{gpu_r} GPUs", "int"),
        Col("local_gpus", "Local", f"{gpu_l} GPUs", "int"), Col("threshold_tokens", "Best t", "tokens", "int"),
        Col("n_prfaas", "PrfaaS", "instances", "int"), Col("n_pd_p", "PD-P", "instances", "int"),
        Col("n_pd_d", "PD-D", "instances", "int"), Col("lambda_max_rps", "Λmax", "requests/s", "{:.3f}"),
        Col("offload_fraction", "Offloaded", "share of requests", "pct"),
        Col("egress_gbps", "Egress", "Gbps", "{:.2f}")], row_key="key",
        caption="Paper-mode optimum of each grid cell (Eqs. 3-8; exact values in data-value)")


def whatif_section(sc, res):
    """The report's "What if" section: what its numbers are, the sliders, the chart and the grid."""
    from prfaas_plan.report.page import Figure, Section, _e, _tokens

    g = whatif_grid(res.inputs)
    gpu_r, gpu_l = sc.prfaas_instance.gpu.id.upper(), sc.local_instance.gpu.id.upper()
    here = _cell(g, initial_steps(g, sc, None))
    t_here = None if np.isnan(here.threshold_tokens) else float(here.threshold_tokens)
    start = initial_steps(g, sc, t_here)
    best = (f"{here.lambda_max_rps:.3f} req/s at "
            + (f"t = {_tokens(t_here)} tokens" if t_here is not None else "no offload")
            + f", {int(here.n_prfaas)} + {int(here.n_pd_p)} + {int(here.n_pd_d)} instances")
    if res.mode == "paper":
        vs = f"At the scenario's settings they are the plan above: {best}."
    else:
        vs = (f"They are not the {res.mode}-mode plan above ({res.plan.lambda_max_rps:.3f} req/s, the MILP over "
              f"length buckets on the usable link): at the scenario's settings the paper model gives {best}.")
    text = (
        "<p>Move the sliders to see what another link, pool size or threshold would give. <b>Every number here "
        "comes from the paper's model (Eqs. 3-8: grid search over t and N_p, nominal link)</b>, precomputed when "
        f"the report was written over {len(g.link_gbps)} links ({_e(', '.join(f'{v:g}' for v in g.link_gbps))} "
        f"Gbps) × {len(g.prfaas_gpus)} PrfaaS pools × {len(g.local_gpus)} local pools × {len(g.t_tokens)} "
        f"thresholds. {_e(vs)} The t slider fixes the threshold; the last headline line gives the best local "
        "split at it. TTFT is not recomputed per setting (the queueing model takes about 6 ms a cell, over a "
        "second for the grid); the TTFT section has the plan's.</p>"
        f'<div id="{CONTROLS_ID}" class="whatif-controls" aria-label="what-if sliders"></div>')
    fig = Figure("what-if", whatif_chart(g, start, gpu_r, gpu_l),
                 "The headline and both charts follow the sliders; the grey dashed curve stays at the scenario "
                 "as written.", _grid_table(g, gpu_r, gpu_l), datasets={DATASET: chart_rows(g)})
    return Section("whatif", "What if: link, pools and threshold (paper model)", [text, fig])
