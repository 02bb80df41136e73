"""The plan report's what-if section laid out: sliders for the inter-DC link, the two pool sizes and
the threshold t, over the grid :func:`prfaas_plan.analysis.whatif_grid` computed.

Every number comes from the paper's model (Eqs. 3-8), not from the exact-mode MILP; the grid's
axes and cells are described in :class:`~prfaas_plan.analysis.WhatIfGrid`. P90 TTFT is not
precomputed per cell: the queueing model costs about 6 ms a cell, over a second for the grid.

The chart is one Vega-Lite spec (its sliders are Vega-Lite params bound to range inputs; the
link and t sliders move over grid steps, ``*_step``, and the page shows their values in the
headline); the data travel rounded to the precision shown (:data:`ROUND`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np

from prfaas_plan.analysis import T_POINTS, WhatIf, WhatIfGrid, initial_steps, whatif_grid
from prfaas_plan.report.charts import AssembledSpec, _alt, _log_token_axis, props
from prfaas_plan.report.page import Col, Figure, Section, Table, _e, _tokens
from prfaas_plan.tabular import columns_rows

if TYPE_CHECKING:
    from prfaas_plan.planner import PlanResult
    from prfaas_plan.scenario import Scenario

__all__ = ["T_POINTS", "WhatIfGrid", "chart_rows", "initial_steps", "whatif_chart", "whatif_grid", "whatif_section"]

ROUND = {"lambda_max_rps": 3, "egress_gbps": 2, "offload_fraction": 3}
"""Decimals the chart data keep (and the headline shows)."""


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
    c, cv, n = g.cells, g.curve, len(g.cells["link_gbps"])
    per_t = {"t_tokens": cv["t_tokens"].astype(int).reshape(n, -1).tolist(),
             "t_n_pd_p": cv["n_pd_p"].astype(int).reshape(n, -1).tolist(),
             **{f"t_{k}": _rounded(cv[k].reshape(n, -1), d) for k, d in ROUND.items()}}
    cols = {"link_gbps": c["link_gbps"].astype(float).tolist(), "prfaas_gpus": c["prfaas_gpus"].astype(int).tolist(),
            "local_gpus": c["local_gpus"].astype(int).tolist(),
            "threshold_tokens": _rounded(c["threshold_tokens"], 0),
            **{k: c[k].astype(int).tolist() for k in ("n_prfaas", "n_pd_p", "n_pd_d")},
            "n_local": (c["n_pd_p"] + c["n_pd_d"]).astype(int).tolist(),
            **{k: _rounded(c[k], d) for k, d in ROUND.items()}, **per_t}
    return [dict(zip(cols, vals)) for vals in zip(*cols.values())]


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
    return props(alt.layer(*[ln.encode(x=alt.XValue(0), y=alt.YValue(4 + 24 * i), text=alt.Text("text:N"))
                             for i, ln in enumerate(lines)]), width=width, height=74, name="wi_headline", view=alt.ViewConfig(stroke=None))


def _curve_chart(alt, g: WhatIfGrid, start: dict, ymax: float, width: int, height: int):
    scenario = (f"datum.link_gbps == {float(g.link_gbps[start['link_step']])} && datum.prfaas_gpus == "
                f"{start['prfaas_gpus']} && datum.local_gpus == {start['local_gpus']}")
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
                                               scale=alt.Scale(domain=kinds, range=[[1, 0], [5, 3]]))))
    lines = props(lines, name="wi_curve")
    rule = _at_t(alt).mark_rule(color="#c8443c", strokeDash=[2, 2]).encode(x=x)
    point = props(_at_t(alt).mark_point(filled=True, size=70, color="#c8443c").encode(x=x, y=y), name="wi_at_t")
    best = (alt.Chart().transform_filter(CELL_NOW).mark_point(shape="diamond", filled=True, size=90, color="#1d2330")
            .encode(x=alt.X("threshold_tokens:Q"), y=alt.Y("lambda_max_rps:Q")))
    return props(alt.layer(lines, rule, point, best), width=width, height=height, title=alt.Title(
        "Λmax against t at these settings", subtitle="red: the slider's t; diamond: the best t (paper model, Eqs. 3-8)"))


def _link_chart(alt, g: WhatIfGrid, ymax: float, width: int, height: int):
    """Best Lambda_max over the link grid (one category per grid value: evenly spaced, as the
    values double, and a 0 Gbps link needs no log scale) for the sliders' pools."""
    pools = "datum.prfaas_gpus == wi_prfaas_gpus && datum.local_gpus == wi_local_gpus"
    x = alt.X("link_gbps:O", sort=[float(v) for v in g.link_gbps],
              axis=alt.Axis(title="inter-DC link (Gbps)", labelAngle=0, format="~g"))
    y = alt.Y("lambda_max_rps:Q", title="best Λmax (requests/s)", scale=alt.Scale(domain=[0, ymax]))
    base = alt.Chart().transform_filter(pools)
    now = props(alt.Chart().transform_filter(CELL_NOW).mark_point(filled=True, size=90, color="#c8443c")
                .encode(x=x, y=y), name="wi_link_now")
    return props(alt.layer(base.mark_line(color="#1f6fb2", point=True).encode(x=x, y=y), now),
                 width=width, height=height, title=alt.Title("Best Λmax against the link", subtitle="these pools; red: the slider's link"))


DATASET = "whatif-grid"
"""The name of the chart's dataset (:func:`chart_rows`), inlined by :class:`~.page.Figure`."""


def whatif_chart(g: WhatIfGrid, start: dict, gpu_r: str, gpu_l: str) -> AssembledSpec:
    """The what-if chart (its data are the dataset :data:`DATASET`): headline lines over
    Lambda_max-vs-t and Lambda_max-vs-link, with the sliders. The spec of
    ``alt.vconcat(headline, alt.hconcat(curve, link), data=..., params=...)``: altair writes the
    top level (data, params, theme, schema) and each of the two rows (as parts of that chart),
    which are put in its ``vconcat`` as they are, not copied again with every level."""
    alt = _alt()
    ymax = max(float(np.nanmax(g.cells["lambda_max_rps"])) * 1.1, 1e-3)
    data = alt.Data(name=DATASET)
    body = alt.hconcat(_curve_chart(alt, g, start, ymax, 430, 240), _link_chart(alt, g, ymax, 300, 240))
    params = [p.param for p in _params(alt, g, start, gpu_r, gpu_l)]  # not add_params: it copies every layer
    spec = alt.VConcatChart(data=data, params=params).to_dict(validate=False)
    part = {"top_level": False, "data": data}  # what the top level passes its rows: they use its data
    spec["vconcat"] = [row.to_dict(validate=False, context=part) for row in (_headline(alt, 860), body)]
    return AssembledSpec(spec)


def _grid_table(g: WhatIfGrid, gpu_r: str, gpu_l: str) -> Table:
    rows = [{**r, "key": f"{r['link_gbps']:g}|{r['prfaas_gpus']}|{r['local_gpus']}"} for r in columns_rows(g.cells)]
    return Table("whatif-grid", rows, [
        Col("link_gbps", "Link", "Gbps", "{:g}"), Col("prfaas_gpus", "PrfaaS", f"{gpu_r} GPUs", "int"),
        Col("local_gpus", "Local", f"{gpu_l} GPUs", "int"), Col("threshold_tokens", "Best t", "tokens", "int"),
        Col("n_prfaas", "PrfaaS", "instances", "int"), Col("n_pd_p", "PD-P", "instances", "int"),
        Col("n_pd_d", "PD-D", "instances", "int"), Col("lambda_max_rps", "Λmax", "requests/s", "{:.3f}"),
        Col("offload_fraction", "Offloaded", "share of requests", "pct"),
        Col("egress_gbps", "Egress", "Gbps", "{:.2f}")], row_key="key",
        caption="Paper-mode optimum of each grid cell (Eqs. 3-8; exact values in data-value)")


def whatif_section(sc: Scenario, res: PlanResult, w: WhatIf) -> Section:
    """The report's "What if" section: what its numbers are, the sliders, the chart and the grid."""
    g, here, t_here, start = w.grid, w.here, w.t_tokens, w.start
    gpu_r, gpu_l = sc.prfaas_instance.gpu.id.upper(), sc.local_instance.gpu.id.upper()
    best = (f"{here['lambda_max_rps']:.3f} req/s at "
            + (f"t = {_tokens(t_here)} tokens" if t_here is not None else "no offload")
            + f", {int(here['n_prfaas'])} + {int(here['n_pd_p'])} + {int(here['n_pd_d'])} instances")
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
