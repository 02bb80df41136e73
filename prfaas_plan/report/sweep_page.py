"""The sweep page: heatmaps of throughput, cost and P90 TTFT over two axes of a sweep (:func:`sweep_report`).

The numbers are :func:`prfaas_plan.sweeps.heatmap_data`'s; this module draws them on the report
page template (its Content-Security-Policy, inlined Vega, chart error reporting), every grid
string escaped, and writes the page atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from prfaas_plan.report.charts import _alt, unvalidated
from prfaas_plan.report.files import _write
from prfaas_plan.report.page import Col, Figure, Report, Section, Table, _e, _table_html

if TYPE_CHECKING:
    import pandas as pd

    from prfaas_plan.sweeps.heatmaps import HeatmapData


def _panel(alt, h: HeatmapData, col: str, label: str, scheme: str, lower: bool, filters: list[str]):
    """One metric's heatmap: coloured cells, their values written in, grey where no cell planned."""
    from prfaas_plan.sweeps.heatmaps import safe_name

    sc, safe = alt.Scale(scheme=scheme, reverse=lower), safe_name(col)
    enc = {"x": alt.X(f"{safe_name(h.x)}:O", title=h.x, sort=h.order[h.x])}
    if h.y is not None:
        enc["y"] = alt.Y(f"{safe_name(h.y)}:O", title=h.y, sort=list(reversed(h.order[h.y])))
    tips = [alt.Tooltip(f"{safe_name(a)}:N", title=a) for a in h.axes]
    tips += [alt.Tooltip(f"{safe_name(c)}:Q", title=c, format=".4g") for c, *_ in h.metrics]
    tips += [alt.Tooltip("failed:Q", title="failed cells"), alt.Tooltip("error:N", title="error")]
    base = alt.Chart(h.data)
    for f in filters:
        base = base.transform_filter(f)
    rect = base.mark_rect(stroke="white").encode(
        **enc, color=alt.ColorValue(**alt.condition(f"isValid(datum['{safe}'])", alt.Color(f"{safe}:Q", title=None, scale=sc),
                                                 alt.value("#dddddd"))), tooltip=tips)
    ink = alt.Scale(type="quantize", range=["black", "white"] if lower else ["white", "black"])
    text = base.mark_text(fontSize=11).encode(
        **enc, text=alt.TextValue(**alt.condition(f"isValid(datum['{safe}'])", alt.Text(f"{safe}:Q", format=".3g"),
                                                alt.value("failed"))),
        color=alt.ColorValue(**alt.condition(f"isValid(datum['{safe}'])", alt.Color(f"{safe}:Q", scale=ink, legend=None),
                                          alt.value("black"))))
    return alt.layer(rect, text).resolve_scale(color="independent").properties(
        title=label, width=alt.Step(56), height=alt.Step(34) if h.y is not None else 40)


@unvalidated
def _chart(h: HeatmapData):
    """The panels side by side, with a drop-down per other axis."""
    from prfaas_plan.sweeps.heatmaps import safe_name

    alt = _alt()
    params, filters = [], []
    for a in h.others:
        values = h.choices[a]
        p = alt.param(name=f"sel_{safe_name(a)}", value=values[0],
                      bind=alt.binding_select(options=values, name=f"{a} "))
        params.append(p)
        filters.append(f"datum['{safe_name(a)}'] == {p.name}")
    chart = alt.hconcat(*[_panel(alt, h, *m, filters) for m in h.metrics]).resolve_scale(color="independent")
    return chart.add_params(*params) if params else chart


def sweep_report(df: pd.DataFrame, path: str | Path, x: str | None = None, y: str | None = None,
                 title: str | None = None) -> Path:
    """A self-contained (offline) HTML page of heatmaps of throughput, cost and P90 TTFT over
    the axes ``x`` and ``y`` of a sweep table (as returned by ``sweep`` or ``read_results``).
    Other axes get a drop-down each; seeds are averaged; cells that did not plan are grey."""
    from prfaas_plan.sweeps.heatmaps import heatmap_data

    h = heatmap_data(df, x, y)
    bad = df[df["status"] != "ok"]
    name = title or f"Sweep {df.attrs.get('grid', '')}".strip()
    subtitle = (f"Base scenario <code>{_e(df.attrs.get('scenario', ''))}</code>; run: {_e(df.attrs.get('run', ''))}; "
                f"{len(df)} rows; axes: "
                + ", ".join(f"<code>{_e(a)}</code> ({df[a].nunique(dropna=False)})" for a in h.axes)
                + f"; {len(bad)} failed.")
    lead = ("Colours run from worse (dark) to better (bright) in each panel; grey cells failed "
            "(hover for the error). Values are the PrfaaS-PD plan per cell"
            + (" (simulated fields averaged over seeds)" if "seed" in df.columns else "") + ".")
    blocks: list = [Figure("heatmaps", _chart(h))]
    if len(bad):
        failed = Table("failed-cells", bad.head(50), [Col(a, a, fmt="text", text=True) for a in h.axes]
                       + [Col("status", "status", fmt="text", text=True), Col("error", "error", fmt="text", text=True)])
        blocks.append(f"<details><summary>Failed cells</summary>{_table_html(failed)}</details>")
    report = Report("sweep", name, subtitle, [], _e(lead), [Section("heatmaps", "Heatmaps", blocks)])
    return _write(report, Path(path), None)
