"""The model comparison page: KV traffic by model laid out (:func:`build_compare`, :func:`write_compare`).

KV bytes per token and fixed state per model, ``S_kv(l)`` and ``Phi_kv(l)`` over 1K-1M tokens, the
egress of a prefill cluster against standard 10 / 100 / 400 Gbps lines, and a table of every number;
the numbers are :func:`prfaas_plan.analysis.analyse_compare`'s.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from prfaas_plan.analysis import FLAGSHIP_PAIR, STANDARD_LINES_GBPS
from prfaas_plan.data import check_output_path
from prfaas_plan.defaults import (
    DEFAULT_CLUSTER_GPUS,
    DEFAULT_COMPARE_MODELS,
    DEFAULT_CONTEXT_TOKENS,
    DEFAULT_LINK_EFFICIENCY,
)
from prfaas_plan.perf.latency import latency_source
from prfaas_plan.report.charts import (
    BAR_WIDTH,
    CHART_HEIGHT,
    CHART_WIDTH,
    SERIES_COLORS,
    _alt,
    _decade_axis,
    _log_token_axis,
    _token_ticks,
    chart_data,
    props,
    unvalidated,
)
from prfaas_plan.report.files import _check_png_dir, _write
from prfaas_plan.report.formulas import kv_pretty
from prfaas_plan.report.page import Col, Figure, Report, Section, Table, _e, _table_html, _tokens

if TYPE_CHECKING:
    from prfaas_plan.analysis import CompareReport
    from prfaas_plan.kvcache import CacheSettings
    from prfaas_plan.tabular import Rows

__all__ = ["DEFAULT_COMPARE_MODELS", "FLAGSHIP_PAIR", "build_compare", "compare_page", "write_compare"]


def _fewer(ratio: float, fewer: str = "less") -> str:
    """``ratio`` = theirs / ours as '3.0× less' (or, below 1, '2.5× more')."""
    return f"{ratio:.1f}× {fewer}" if ratio >= 1 else f"{1 / ratio:.1f}× more"


def _pick(rows: Rows, keys: list[str]) -> Rows:
    """Those columns of ``rows``, in that order."""
    return [{k: r[k] for k in keys} for r in rows]


# ----------------------------------------------------------------------------- the comparison
def build_compare(models: Iterable[str] | None = None, hardware: str = "h200", gpus: int = 8,
                  cluster_gpus: int = DEFAULT_CLUSTER_GPUS, context_tokens: int = DEFAULT_CONTEXT_TOKENS,
                  settings: CacheSettings | None = None, link_efficiency: float = DEFAULT_LINK_EFFICIENCY,
                  extra_model_dirs: tuple = (), extra_hardware_dirs: tuple = ()) -> Report:
    """The model comparison: :func:`prfaas_plan.analysis.analyse_compare` (same arguments) laid out."""
    from prfaas_plan.analysis import analyse_compare

    return compare_page(analyse_compare(models, hardware=hardware, gpus=gpus, cluster_gpus=cluster_gpus,
                                        context_tokens=context_tokens, settings=settings,
                                        link_efficiency=link_efficiency, extra_model_dirs=extra_model_dirs,
                                        extra_hardware_dirs=extra_hardware_dirs))


@unvalidated
def compare_page(c: CompareReport) -> Report:
    """Lay out a :class:`~prfaas_plan.analysis.CompareReport` as the comparison page."""
    alt = _alt()
    table, curve, inst, settings = c.table, c.curve, c.instance, c.settings
    specs, names, ref, n_inst = c.models, list(c.names), c.ref_tokens, c.cluster_instances
    cluster_gpus, link_efficiency, gpus = c.cluster_gpus, c.link_efficiency, inst.gpus
    ref_txt = _tokens(ref)
    inst_txt = f"{gpus}×{inst.gpu.id.upper()}"

    # ---- headline
    pair = c.pair
    cards, lead = [], ""
    if pair is not None:
        by = {r["model"]: r for r in table}
        a, z = by[pair[0]], by[pair[1]]
        kv_ratio, phi_ratio = c.kv_ratio, c.phi_ratio
        cards = [
            (f"KV per {ref_txt} request", _fewer(kv_ratio), f"{a['name']} {a['kv_mib_ref']:,.0f} MiB vs {z['name']} {z['kv_mib_ref']:,.0f} MiB"),
            (f"KV traffic per {inst_txt}", _fewer(phi_ratio), f"{a['phi_gbps_ref']:.2f} vs {z['phi_gbps_ref']:.1f} Gbps (Eq. 1, {ref_txt} prompts)"),
            (f"Egress of {cluster_gpus} GPUs", f"{a['cluster_gbps_ref']:,.0f} vs {z['cluster_gbps_ref']:,.0f} Gbps",
             f"{a['lines_100g']:.0f} vs {z['lines_100g']:.0f} lines of 100 Gbps at {link_efficiency:.0%} usable (Eq. 2)"),
        ]
        lead = (f"At {ref_txt}-token prompts, <b>{_e(a['name'])}</b> ships <b>{_fewer(kv_ratio, 'fewer')} KV bytes</b> per "
                f"request than <b>{_e(z['name'])}</b> and, prefilling back to back on one {_e(inst_txt)} instance, emits "
                f"<b>{_fewer(phi_ratio)} KV traffic</b> ({a['phi_gbps_ref']:.2f} vs {z['phi_gbps_ref']:.1f} Gbps). "
                f"A {cluster_gpus}-GPU prefill cluster of {_e(a['name'])} emits {a['cluster_gbps_ref']:,.0f} Gbps "
                f"({a['lines_100g']:.0f}× 100 Gbps lines); of {_e(z['name'])}, {z['cluster_gbps_ref']:,.0f} Gbps "
                f"({z['lines_100g']:.0f}× 100 Gbps lines).")
        if pair == FLAGSHIP_PAIR and ref == 32768 and inst.gpu.id == "h200" and gpus == 8:
            lead += (" (The PrfaaS paper's Table 3 measures 60 vs 4.66 Gbps, 12.9×, on 8×H200; the numbers here are "
                     f"the kernel model on {_e(inst_txt)}.)")
    lines_txt = " / ".join(f"{v:g}" for v in STANDARD_LINES_GBPS)
    cards.append(("Models", str(len(specs)), ", ".join(names)))

    model_dom = names
    model_scale = alt.Scale(domain=model_dom, range=(SERIES_COLORS * 4)[:len(model_dom)])
    color = alt.Color("name:N", title=None, scale=model_scale)

    def bars(col, title, axis_title, subtitle, fmt):
        d = [{"name": r["name"], col: r[col], "text": fmt(r[col])} for r in table]
        top = float(np.nanmax([r[col] for r in table]))
        base = alt.Chart(chart_data(d)).encode(y=alt.Y("name:N", sort=model_dom, title=None, axis=alt.Axis(labelLimit=170)),
                                                x=alt.X(f"{col}:Q", title=axis_title,
                                                        scale=alt.Scale(domain=[0, top * 1.3 or 1])))
        return props(alt.layer(base.mark_bar(height=22).encode(color=alt.Color("name:N", scale=model_scale, legend=None)),
                         base.mark_text(align="left", dx=4, fontSize=11.5, color="#1d2330").encode(text=alt.Text("text:N"))
                         ), width=BAR_WIDTH, height=34 * len(specs) + 10,
                     title=alt.Title(title, subtitle=subtitle))

    per_tok = bars("kv_kib_per_token", "KV cache per token (growing part)", "KiB per token (all layers)",
                   f"{settings.kv_dtype} KV; full-attention / MLA layers only", lambda v: f"{v:,.1f} KiB")
    fixed = bars("fixed_state_mib", "Fixed state per request", "MiB per request",
                 f"linear-attention states + full sliding windows; {settings.engine} state dtypes",
                 lambda v: f"{v:,.1f} MiB")

    tick_vals = _token_ticks(1024, 2 ** 20)
    xenc = alt.X("tokens:Q", scale=alt.Scale(type="log", domain=[1024, 2 ** 20], nice=False),
                 axis=_log_token_axis("prompt length l (tokens, log scale)", tick_vals))

    curve_data = chart_data(curve)

    def curve_chart(col, title, ytitle, subtitle, extra=(), width=CHART_WIDTH):
        base = alt.Chart(curve_data).mark_line(point=alt.OverlayMarkDef(size=14, filled=True)).encode(
            x=xenc, y=alt.Y(f"{col}:Q", scale=alt.Scale(type="log"), axis=_decade_axis(ytitle)), color=color,
            tooltip=[alt.Tooltip("name:N", title="model"), alt.Tooltip("tokens:Q", format=","),
                     alt.Tooltip(f"{col}:Q", format=",.3~g")])
        return props(alt.layer(base, *extra), width=width, height=CHART_HEIGHT + 30,
                     title=alt.Title(title, subtitle=subtitle))

    s_chart = curve_chart("kv_mib", "KV cache of one request, S_kv(l)", "S_kv (MiB, log scale)",
                          "each model stops at its maximum context")
    phi_chart = curve_chart("phi_gbps", f"KV throughput of one {inst_txt} instance, Φ_kv(l)",
                            "Φ_kv (Gbps, log scale)", f"Eq. 1: S_kv(l) / T_prefill(l), kernel model on {inst_txt}")
    lines_df = chart_data([{"y": v, "label": f"{v:g} Gbps"} for v in STANDARD_LINES_GBPS])
    link_width = CHART_WIDTH - 60  # the line labels sit right of the plot, clear of the bars and curves
    rules = (alt.Chart(lines_df).mark_rule(color="#c8443c", strokeDash=[4, 3]).encode(y=alt.Y("y:Q")),
             alt.Chart(lines_df).mark_text(align="left", baseline="middle", dx=4, color="#c8443c", fontSize=10.5).encode(
                 y=alt.Y("y:Q"), x=alt.XValue(link_width), text=alt.Text("label:N")))
    egress_chart = curve_chart("cluster_gbps", f"Egress of a {cluster_gpus}-GPU prefill cluster, B_out(l)",
                               "B_out (Gbps, log scale)",
                               f"Eq. 2: {n_inst:g} instances of {inst_txt}, all prefilling; dashed: {lines_txt} Gbps lines",
                               rules, link_width)
    eg = [{"name": r["name"], "cluster_gbps_ref": r["cluster_gbps_ref"], "text": f"{r['cluster_gbps_ref']:,.0f} Gbps",
           "base": 1.0}  # log-scale bars need a positive baseline
          for r in table if not math.isnan(r["cluster_gbps_ref"])]
    ymax = max(max((r["cluster_gbps_ref"] for r in eg), default=1.0), STANDARD_LINES_GBPS[-1]) * 3
    eg_base = alt.Chart(chart_data(eg)).encode(x=alt.X("name:N", sort=model_dom, title=None, axis=alt.Axis(labelAngle=-25, labelLimit=160)))
    eg_chart = props(alt.layer(
        eg_base.mark_bar(width=34).encode(y=alt.Y("cluster_gbps_ref:Q", axis=_decade_axis("cluster egress (Gbps, log scale)"),
                                                   scale=alt.Scale(type="log", domain=[1, ymax])), y2=alt.Y2("base:Q"),
                                          color=alt.Color("name:N", scale=model_scale, legend=None)),
        eg_base.mark_text(dy=-7, fontSize=11, color="#1d2330").encode(y=alt.Y("cluster_gbps_ref:Q"), text=alt.Text("text:N")),
        *rules,
    ), width=link_width, height=CHART_HEIGHT + 30, title=alt.Title(
        f"Link a {cluster_gpus}-GPU prefill cluster needs at {ref_txt}",
        subtitle=f"Eq. 2 on {inst_txt}; dashed: {lines_txt} Gbps lines (nominal)"))

    cols = [Col("name", "Model", text=True), Col("layer_mix", "Layers", text=True),
            Col("max_context_tokens", "Max context", "tokens", "tokens"),
            Col("kv_bytes_per_token", "KV per token", "bytes", "int"),
            Col("fixed_state_mib", "Fixed state", "MiB/request"),
            Col("kv_mib_ref", f"S_kv({ref_txt})", "MiB"), Col("prefill_s_ref", f"T_prefill({ref_txt})", f"s, {inst_txt}"),
            Col("phi_gbps_ref", f"Φ_kv({ref_txt})", "Gbps/instance"),
            Col("cluster_gbps_ref", "B_out", f"Gbps, {cluster_gpus} GPUs"),
            *[Col(f"util_{v:g}g", f"÷ {v:g} Gbps", "line load", "{:,.2f}") for v in STANDARD_LINES_GBPS],
            Col("lines_100g", "100 Gbps lines", f"needed, {link_efficiency:.0%} usable", "int"),
            Col("max_gpus_100g", "Prefill GPUs", "one 100 Gbps line feeds", "int")]
    main_tbl = Table("models", table, cols, row_key="model",
                     caption=f"At {ref_txt}-token prompts (1K = 1024). What bounds T_prefill: "
                             + ", ".join(f"{r['name']} {r['bound_ref']}" for r in table)
                             + ". Line load = B_out ÷ nominal line rate (above 1: the line is too small).")
    curve_tbl = Table("curves", curve, [Col("name", "Model", text=True), Col("tokens", "l", "tokens", "int"),
                                        Col("kv_mib", "S_kv", "MiB"), Col("prefill_s", "T_prefill", f"s, {inst_txt}"),
                                        Col("phi_gbps", "Φ_kv", "Gbps"), Col("cluster_gbps", "B_out", f"Gbps, {cluster_gpus} GPUs")])

    formula_txt = "\n\n".join(f"{m.name}:\nS_kv(l) =\n{kv_pretty(f)}" for m, f in zip(specs, c.formulas))
    eqs = ("Eq. 1  Φ_kv(l) = S_kv(l) / T_prefill(l)                     one instance prefilling back to back\n"
           "Eq. 2  B_out   = (N_gpus / gpus_per_instance) · Φ_kv(l)     every instance of the cluster busy\n"
           "       max prefill GPUs on a line = floor(line · efficiency / Φ_kv(l)) · gpus_per_instance")
    assumptions = [
        f"Cache bytes: exact arithmetic from each model's architecture ({settings.kv_dtype} KV cache, "
        f"{settings.engine} state dtypes; no paging).",
        f"T_prefill on {_e(inst_txt)} ({_e(inst.gpu.name)}), no measured profile: {_e(latency_source(inst))}.",
        f"Link lines are nominal; 'smallest line' and 'max prefill GPUs' assume {link_efficiency:.0%} of it is usable.",
        "Token counts: K = 1024, M = 1024²; MiB = 2²⁰ B; Gbps = 10⁹ bit/s.",
        "Models whose maximum context is below a length are not drawn beyond it.",
    ]
    sections = [
        Section("bytes", "Cache bytes per token and per request", [
            Figure("kv-bytes-per-token", per_tok, "The part of the cache that grows with every token.",
                   Table("kv-bytes-per-token-data", _pick(table, ["model", "name", "kv_bytes_per_token", "kv_kib_per_token"]),
                         [Col("name", "Model", text=True), Col("kv_bytes_per_token", "KV", "bytes/token", "int"),
                          Col("kv_kib_per_token", "KV", "KiB/token")], row_key="model")),
            Figure("fixed-state", fixed, "Bytes every request holds whatever its length (recurrent + conv states, "
                   "full sliding windows).",
                   Table("fixed-state-data", _pick(table, ["model", "name", "fixed_state_bytes", "fixed_state_mib"]),
                         [Col("name", "Model", text=True), Col("fixed_state_bytes", "Fixed state", "bytes", "int"),
                          Col("fixed_state_mib", "Fixed state", "MiB")], row_key="model"))]),
        Section("curves", "KV cache and KV throughput against prompt length", [
            Figure("s-kv-curve", s_chart, "One request's cache bytes, 1K to 1M tokens.",
                   Table("s-kv-curve-data", curve, curve_tbl.cols[:3])),
            Figure("phi-kv-curve", phi_chart, "The KV stream one prefill instance emits (Eq. 1).",
                   Table("phi-kv-curve-data", curve, [curve_tbl.cols[0], curve_tbl.cols[1], curve_tbl.cols[3], curve_tbl.cols[4]]))]),
        Section("link", "The link a prefill cluster needs", [
            Figure("cluster-egress-curve", egress_chart, f"{cluster_gpus} GPUs of prefill ({n_inst:g} instances) against "
                   f"standard {lines_txt} Gbps lines.", Table("cluster-egress-curve-data", curve,
                                                               [curve_tbl.cols[0], curve_tbl.cols[1], curve_tbl.cols[5]])),
            Figure("cluster-egress-bars", eg_chart, f"The same at {ref_txt}-token prompts.",
                   Table("cluster-egress-bars-data", _pick(table, ["model", "name", "cluster_gbps_ref"]),
                         [Col("name", "Model", text=True), Col("cluster_gbps_ref", "B_out", "Gbps")], row_key="model"))]),
        Section("table", "The numbers behind the charts", [main_tbl,
                                                           f"<details><summary>Every curve point ({len(curve)} rows)</summary>{_table_html(curve_tbl)}</details>"]),
        Section("formulas", "Formulas", [f"<pre>{_e(eqs)}</pre>", f"<h3>S_kv(l) per model (bytes)</h3><pre>{_e(formula_txt)}</pre>"]),
        Section("assumptions", "Assumptions", ["<ul>" + "".join(f"<li>{x}</li>" for x in assumptions) + "</ul>"]),
    ]
    title = "KV traffic by model: what crosses the datacenter link"
    subtitle = (f"{len(specs)} models · prefill on {_e(inst_txt)} ({_e(inst.gpu.name)}) · {cluster_gpus}-GPU cluster · "
                f"reference prompt {ref_txt} tokens · {settings.kv_dtype} KV, {settings.engine} state dtypes")
    return Report("compare", title, subtitle, cards, lead, sections,
                  data={"models": table, "curves": curve, "instance": inst})


def write_compare(models: Iterable[str] | None, path: str | Path, hardware: str = "h200", gpus: int = 8,
                  cluster_gpus: int = DEFAULT_CLUSTER_GPUS, png_dir: str | Path | None = None,
                  context_tokens: int = DEFAULT_CONTEXT_TOKENS, settings: CacheSettings | None = None,
                  link_efficiency: float = DEFAULT_LINK_EFFICIENCY, extra_model_dirs: tuple = (),
                  extra_hardware_dirs: tuple = ()) -> Path:
    """Write the model comparison to ``path`` (one self-contained HTML file, written atomically):
    KV bytes per token and fixed state (bars), S_kv(l) and Phi_kv(l) over 1K-1M tokens, the egress
    of a ``cluster_gpus``-GPU prefill cluster of ``gpus``-GPU ``hardware`` instances against 10 /
    100 / 400 Gbps lines, and a table of every number. ``models`` None or empty = the paper's
    models (:data:`DEFAULT_COMPARE_MODELS`). With ``png_dir``, also every chart as PNG and SVG.
    Bad input (an unknown model, an unwritable path) raises :class:`PlanError` and leaves no file."""
    path = check_output_path(path)
    png = _check_png_dir(png_dir)
    report = build_compare(models, hardware=hardware, gpus=gpus, cluster_gpus=cluster_gpus,
                           context_tokens=context_tokens, settings=settings, link_efficiency=link_efficiency,
                           extra_model_dirs=extra_model_dirs, extra_hardware_dirs=extra_hardware_dirs)
    return _write(report, path, png)
