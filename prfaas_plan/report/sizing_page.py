"""The sizing page: what to buy for a target load, the candidates compared, and the cost frontiers (:func:`sizing_page`).

The numbers are :func:`prfaas_plan.sizing.size`'s and :mod:`prfaas_plan.sizing.pareto`'s; this
module lays them out on the report page template (Content-Security-Policy, Vega inlined, no
network): the candidates table (winner highlighted, margin over the winner's $/hour, what each
binds on), the winner's bill of materials and cost split, the throughput of each candidate at the
winner's $/hour, and one chart per frontier quantity ($/hour against the achieved TTFT percentile;
$/hour and $/M tokens against the target rate), a line per candidate kind, Pareto points filled,
the winner at each point ringed. Every user string is escaped; the page is written atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from prfaas_plan.errors import InvalidInput
from prfaas_plan.report.charts import PLAN_COLORS, PLAN_LABELS, _alt, _finite, unvalidated
from prfaas_plan.report.files import _write
from prfaas_plan.report.page import Col, Figure, Report, Section, Table, _e, _num

if TYPE_CHECKING:
    import pandas as pd

    from prfaas_plan.sizing.result import SizedPlan, SizingResult

KIND_LABELS = {**PLAN_LABELS, "colocated": "Colocated"}
KIND_COLORS = {**PLAN_COLORS, "colocated": "#3a9b5c"}
FRONTIER_CHARTS: dict[str, list[tuple[str, str, str, str]]] = {
    "ttft": [("ttft_quantile_s", "usd_per_hour", "TTFT percentile of the plan (s)", "$/hour")],
    "rate": [("target_rps", "usd_per_hour", "target rate (requests/s)", "$/hour"),
             ("target_rps", "usd_per_million_tokens", "target rate (requests/s)", "$/M tokens")],
}
"""Per frontier kind (``df.attrs['frontier']``): its charts as (x column, y column, x title, y title)."""
FRONTIER_TITLES = {"ttft": "Frontier: $/hour against the TTFT SLO",
                   "rate": "Frontier: $/hour and $/M tokens against the target rate"}


def _text(key: str, label: str, unit: str = "") -> Col:
    return Col(key, label, unit, fmt="text", text=True)


# ----------------------------------------------------------------------------- tables
def _candidates_table(result: SizingResult) -> Table:
    """:meth:`SizingResult.table`'s rows (cheapest first), the winner highlighted."""
    df = result.table()
    for col in ("usd_per_hour", "usd_per_million_tokens"):  # an infeasible plan has no price
        df[col] = df[col].where(df["feasible"])
    df = df.assign(kind_label=[KIND_LABELS.get(k, k) for k in df["kind"]], tpot_ms=1e3 * df["tpot_s"])
    q = f"P{100 * result.slo.ttft_quantile:g} TTFT"
    cols = [_text("label", "candidate"), _text("kind_label", "kind"), Col("feasible", "feasible"),
            Col("usd_per_hour", "cost", "$/hour", fmt="usd"),
            Col("margin_vs_winner", "over winner", "of $/hour", fmt="pct"),
            Col("usd_per_million_tokens", "cost", "$/M tokens", fmt="usd3"), Col("lambda_max_rps", "Λmax", "req/s"),
            Col("ttft_quantile_s", q, "s"), Col("tpot_ms", "TPOT", "ms"), Col("gpus", "GPUs", fmt="int"),
            _text("bill_of_materials", "bill of materials"), _text("binding", "binds on"),
            _text("reason", "why infeasible")]
    return Table("candidates", df, cols, row_key="label", highlight=result.winner.label,
                 caption="The best plan of each kind and GPU choice, cheapest first; the winner highlighted")


def _bom_tables(w: SizedPlan) -> list[Table]:
    import pandas as pd

    pools = pd.DataFrame.from_records([{"role": p.role, "site": p.site, "gpu": p.gpu, "layout": p.layout,
                                        "gpus_per_instance": p.gpus_per_instance, "instances": p.instances,
                                        "gpus": p.gpus} for p in w.pools])
    link = w.link
    cost = pd.DataFrame.from_records([
        {"item": "GPUs", "usd_per_hour": w.gpu_usd_per_hour},
        {"item": "link" + (f" ({link.id}, {link.gbps:g} Gbps)" if link is not None else " (none)"),
         "usd_per_hour": w.link_usd_per_hour},
        {"item": "energy", "usd_per_hour": w.energy_usd_per_hour},
        {"item": "total", "usd_per_hour": w.usd_per_hour}])
    return [Table("bill-of-materials", pools, [
        _text("role", "role"), _text("site", "site"), _text("gpu", "GPU"), _text("layout", "layout"),
        Col("gpus_per_instance", "GPUs per instance", fmt="int"), Col("instances", "instances", fmt="int"),
        Col("gpus", "GPUs", fmt="int")], row_key="role", caption="The winner's pools"),
        Table("cost", cost, [_text("item", "item"), Col("usd_per_hour", "cost", "$/hour", fmt="usd")],
              row_key="item", caption=f"{w.energy_kwh_per_million_tokens:.3g} kWh per million tokens")]


def _generic_table(name: str, df: pd.DataFrame, caption: str) -> Table:
    from pandas.api.types import is_numeric_dtype

    cols = [Col(c, c.replace("_", " ")) if is_numeric_dtype(df[c]) else _text(c, c.replace("_", " "))
            for c in df.columns]
    return Table(name, df, cols, caption=caption)


# ----------------------------------------------------------------------------- charts
@unvalidated
def _frontier_chart(df: pd.DataFrame, x: str, y: str, x_title: str, y_title: str, swept: str):
    """A line per candidate kind over the feasible points (ordered by the swept value), Pareto
    points filled, others hollow, and the winner of each point ringed in black; None with nothing to draw."""
    alt = _alt()
    cols = ["point", swept, x, y, "series", "kind", "label", "binding", "bill_of_materials", "link", "pareto"]
    ok = _finite(df[df["feasible"]][list(dict.fromkeys(cols))]).dropna(subset=[x, y])
    ok = ok.assign(kind_label=[KIND_LABELS.get(k, k) for k in ok["kind"]])
    kinds = ok[ok["series"] != "winner"]
    names = list(dict.fromkeys(kinds["kind"]))
    color = alt.Color("kind_label:N", title="candidate", scale=alt.Scale(
        domain=[KIND_LABELS.get(k, k) for k in names], range=[KIND_COLORS.get(k, "#5b6578") for k in names]))
    enc = {"x": alt.X(f"{x}:Q", title=x_title, scale=alt.Scale(zero=False)),
           "y": alt.Y(f"{y}:Q", title=y_title, scale=alt.Scale(zero=False)),
           "tooltip": [alt.Tooltip("label:N"), alt.Tooltip(f"{swept}:Q", format=",.4g"),
                       alt.Tooltip(f"{x}:Q", format=",.4g"), alt.Tooltip(f"{y}:Q", format=",.4g"),
                       "binding:N", "bill_of_materials:N", "link:N", "pareto:N"]}
    pareto = kinds["pareto"].astype(bool)
    layers = [alt.Chart(kinds).mark_line().encode(**enc, color=color, order=alt.Order(f"{swept}:Q")),
              alt.Chart(kinds[~pareto]).mark_point(size=60, strokeWidth=2, fill="white").encode(**enc, color=color),
              alt.Chart(kinds[pareto]).mark_point(size=60, filled=True, opacity=1).encode(**enc, color=color),
              alt.Chart(ok[ok["series"] == "winner"]).mark_point(size=190, color="#1d2330", strokeWidth=1.4)
              .encode(**enc)]
    shown = [layer for layer in layers if len(layer.data)]  # an empty layer has an infinite extent
    return alt.layer(*shown).properties(title=f"{y_title} against {x_title}") if shown else None


def _frontier_kind(name: str, df: pd.DataFrame) -> str:
    """"ttft" or "rate": the frame's ``attrs['frontier']`` (else its name, when that is one of the two)."""
    kind = df.attrs.get("frontier", name)
    if kind not in FRONTIER_CHARTS:
        raise InvalidInput(f"frontiers[{name!r}]: not a frontier frame; build it with frontier_cost_vs_ttft "
                           "or frontier_cost_vs_rate")
    return kind


def _frontier_figures(name: str, kind: str, df: pd.DataFrame) -> list:
    swept = "ttft_slo_s" if kind == "ttft" else "target_rps"
    q = df["ttft_quantile"].dropna() if "ttft_quantile" in df else ()
    pct = f"P{100 * float(q.iloc[0]):g}" if len(q) else "percentile"
    win = df[df["series"] == "winner"]
    numbers = Table(f"frontier-{name}", win, [
        Col(swept, swept.replace("_", " ")), _text("label", "winner"), Col("usd_per_hour", "cost", "$/hour", fmt="usd"),
        Col("usd_per_million_tokens", "cost", "$/M tokens", fmt="usd3"), Col("ttft_quantile_s", f"{pct} TTFT", "s"),
        Col("lambda_max_rps", "Λmax", "req/s"), _text("binding", "binds on"), Col("feasible", "feasible"),
        Col("pareto", "Pareto"), _text("reason", "why infeasible")], row_key="point")
    blocks: list = []
    for x, y, xt, yt in FRONTIER_CHARTS[kind]:
        chart = _frontier_chart(df, x, y, xt.replace("TTFT percentile", f"{pct} TTFT"), yt, swept)
        if chart is not None:
            blocks.append(Figure(f"frontier-{name}-{y}", chart, "One line per candidate kind (its cheapest plan at "
                                 "each point); filled points are Pareto-optimal within their kind, the black ring is "
                                 "the winner at each point.", data=None if blocks else numbers))
    if not blocks:
        blocks = ["<p>No point of this frontier has a feasible plan to draw.</p>", numbers]
    bad = df[~df["feasible"].astype(bool)]
    if len(bad):
        blocks.append(_generic_table(f"infeasible-{name}", bad[[swept, "series", "binding", "reason"]],
                                     "Points and kinds with no feasible plan, and why"))
    return blocks


# ----------------------------------------------------------------------------- page
def build_sizing_report(result: SizingResult, frontiers: dict[str, pd.DataFrame] | None = None,
                        title: str | None = None) -> Report:
    """The sizing page of ``result`` and its ``frontiers`` (name -> a frame of
    :func:`~prfaas_plan.sizing.pareto.frontier_cost_vs_ttft` or ``frontier_cost_vs_rate``), not yet written."""
    w, slo = result.winner, result.slo
    q = f"P{100 * slo.ttft_quantile:g}"
    slos = [f"{q} TTFT &le; {_e(_num(slo.ttft_s))} s" if slo.ttft_s is not None else "",
            f"TPOT &le; {_e(_num(1e3 * slo.tpot_s))} ms" if slo.tpot_s is not None else ""]
    subtitle = (f"Target {_e(_num(result.target_rps))} requests/s; SLO: {', '.join(s for s in slos if s) or 'none'}; "
                f"{len(result.candidates)} candidates; {result.iterations} pass(es) of the SLO loop "
                f"({_e(result.stopping_rule)}).")
    cards = [("winner", w.label, f"binds on {w.binding}"), ("cost", f"${w.usd_per_hour:,.2f}/h",
                                                            f"${w.usd_per_million_tokens:,.3f} per M tokens"),
             ("Λmax", f"{_num(w.lambda_max_rps)} req/s", f"target {_num(result.target_rps)} req/s")]
    if w.ttft_quantile_s is not None:
        cards.append((f"{q} TTFT", f"{_num(w.ttft_quantile_s)} s", "queueing model at the target"))
    skipped = [f"<p>Not sized: {_e('; '.join(result.skipped))}.</p>"] if result.skipped else []
    sections = [Section("candidates", "Candidates", [_candidates_table(result)] + skipped),
                Section("bill", "Bill of materials of the winner", _bom_tables(w)),
                Section("equal-cost", "Throughput at the winner's cost",
                        [_generic_table("equal-cost", result.equal_cost_rps(),
                                        "What each candidate serves for the winner's $/hour")])]
    for name, df in (frontiers or {}).items():
        kind = _frontier_kind(name, df)
        sections.append(Section(f"frontier-{name}", FRONTIER_TITLES[kind], _frontier_figures(name, kind, df)))
    lead = _e(f"Buy {w.label} for ${w.usd_per_hour:,.2f}/hour"
              + (f", link {w.link.id}" if w.link is not None else "")
              + (f", threshold t = {w.threshold_tokens:,.0f} tokens" if w.threshold_tokens is not None else "") + ".")
    return Report("sizing", title or f"Sizing for {_num(result.target_rps)} requests/s", subtitle, cards, lead,
                  sections)


def sizing_page(result: SizingResult, frontiers: dict[str, pd.DataFrame] | None, path: str | Path,
                title: str | None = None) -> Path:
    """Write :func:`build_sizing_report` to ``path`` as one offline HTML file (atomically) and return the path."""
    return _write(build_sizing_report(result, frontiers, title), Path(path), None)


__all__ = ["build_sizing_report", "sizing_page"]
