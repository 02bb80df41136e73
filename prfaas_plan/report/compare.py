"""The model comparison page: KV traffic by model (:func:`build_compare`, :func:`write_compare`).

KV bytes per token and fixed state per model, ``S_kv(l)`` and ``Phi_kv(l)`` over 1K-1M tokens, the
egress of a prefill cluster against standard 10 / 100 / 400 Gbps lines, and a table of every number.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from prfaas_plan.data import check_output_path
from prfaas_plan.defaults import DEFAULT_COMPARE_MODELS, DEFAULT_LINK_EFFICIENCY
from prfaas_plan.errors import InvalidInput
from prfaas_plan.report.charts import (
    BAR_WIDTH,
    CHART_HEIGHT,
    CHART_WIDTH,
    SERIES_COLORS,
    _alt,
    _decade_axis,
    _finite,
    _log_token_axis,
    _token_ticks,
)
from prfaas_plan.report.files import _check_png_dir, _write
from prfaas_plan.report.page import Col, Figure, Report, Section, Table, _e, _table_html, _tokens

FLAGSHIP_PAIR = ("mimo-v2-flash", "minimax-m2.5")
"""(hybrid, dense) pair the comparison page leads with when both are on it."""

STANDARD_LINES_GBPS = (10.0, 100.0, 400.0)


def _headline_pair(table: pd.DataFrame) -> tuple[str, str] | None:
    """The (hybrid, dense) model ids the page leads with: :data:`FLAGSHIP_PAIR` when both are on
    the page and reach the reference length, else the lowest and highest Phi_kv there; None when
    fewer than two models reach it (or all emit the same)."""
    phi = table.set_index("model")["phi_gbps_ref"].dropna()
    if set(FLAGSHIP_PAIR) <= set(phi.index):
        return FLAGSHIP_PAIR
    lo, hi = (phi.idxmin(), phi.idxmax()) if len(phi) >= 2 else (None, None)
    return (lo, hi) if lo != hi else None


def _fewer(ratio: float, fewer: str = "less") -> str:
    """``ratio`` = theirs / ours as '3.0× less' (or, below 1, '2.5× more')."""
    return f"{ratio:.1f}× {fewer}" if ratio >= 1 else f"{1 / ratio:.1f}× more"


def _short_name(m) -> str:
    """A model's display name without a parenthesised remark ('Kimi-Linear-1T (PrfaaS ...)' -> 'Kimi-Linear-1T')."""
    return m.name.split(" (")[0].strip() or m.id


# ----------------------------------------------------------------------------- the comparison
def build_compare(models: Iterable[str] | None = None, hardware: str = "h200", gpus: int = 8, cluster_gpus: int = 512,
                  context_tokens: int = 32768, settings=None, link_efficiency: float = DEFAULT_LINK_EFFICIENCY,
                  extra_model_dirs: tuple = (), extra_hardware_dirs: tuple = ()) -> Report:
    """Compute and lay out the model comparison (see :func:`write_compare`)."""
    from prfaas_plan.hardware import instance
    from prfaas_plan.kvcache import DEFAULT_SETTINGS, fixed_state_bytes, kv_bytes, kv_bytes_expr, kv_bytes_per_token
    from prfaas_plan.model.arch import load_model
    from prfaas_plan.perf.roofline import analytic_prefill
    from prfaas_plan.units import MIB_BYTES

    alt = _alt()
    ids = list(models) if models else list(DEFAULT_COMPARE_MODELS)
    if len(set(ids)) != len(ids):
        raise InvalidInput("models: a model is listed twice")
    if gpus < 1:
        raise InvalidInput("--gpus: an instance needs at least 1 GPU")
    if cluster_gpus < 1:
        raise InvalidInput("--cluster-gpus: a cluster needs at least 1 GPU")
    if not 0 < link_efficiency <= 1:
        raise InvalidInput("link efficiency must be in (0, 1]")
    settings = settings or DEFAULT_SETTINGS
    specs = [load_model(i, tuple(extra_model_dirs)) for i in ids]
    inst = instance(hardware, gpus, tuple(extra_hardware_dirs))
    n_inst = cluster_gpus / gpus
    ref = int(context_tokens)

    names = [_short_name(m) for m in specs]
    rows, curves, exprs = [], [], []
    grid_all = np.unique(np.round(1024 * 2 ** (np.arange(0, 41) / 4)).astype(np.int64))  # 1K..1M, 4 per octave
    for m in specs:
        g = grid_all[grid_all <= m.max_context_tokens]
        if m.max_context_tokens not in g and m.max_context_tokens >= 1024:
            g = np.append(g, m.max_context_tokens)
        g = g.astype(float)
        s = np.asarray(kv_bytes(m, g, settings), dtype=float)
        lat = analytic_prefill(m, inst, g)
        t = np.asarray(lat.total_s, dtype=float)
        phi = s * 8 / t / 1e9
        curves.append(pd.DataFrame({"model": m.id, "name": _short_name(m), "tokens": g.astype(np.int64), "kv_mib": s / MIB_BYTES,
                                    "prefill_s": t, "phi_gbps": phi, "cluster_gbps": n_inst * phi}))
        mix = " + ".join(f"{n} {m.attention[k].kind}" for k, n in m.layer_counts().items())
        row = {"model": m.id, "name": _short_name(m), "full_name": m.name, "layer_mix": mix, "max_context_tokens": m.max_context_tokens,
               "kv_bytes_per_token": kv_bytes_per_token(m, settings),
               "fixed_state_bytes": fixed_state_bytes(m, settings)}
        row["kv_kib_per_token"] = row["kv_bytes_per_token"] / 1024
        row["fixed_state_mib"] = row["fixed_state_bytes"] / MIB_BYTES
        if ref <= m.max_context_tokens:
            lr = analytic_prefill(m, inst, float(ref))
            s_ref = float(kv_bytes(m, float(ref), settings))
            t_ref = float(lr.total_s)
            phi_ref = s_ref * 8 / t_ref / 1e9
            row.update({"kv_mib_ref": s_ref / MIB_BYTES, "prefill_s_ref": t_ref, "bound_ref": str(lr.bound),
                        "phi_gbps_ref": phi_ref, "cluster_gbps_ref": n_inst * phi_ref})
            for line in STANDARD_LINES_GBPS:
                row[f"util_{line:g}g"] = n_inst * phi_ref / line
            row["max_gpus_100g"] = int(np.floor(100.0 * link_efficiency / phi_ref)) * gpus
            fits = [line for line in STANDARD_LINES_GBPS if n_inst * phi_ref <= line * link_efficiency]
            row["smallest_line"] = f"{fits[0]:g} Gbps" if fits else f"more than {STANDARD_LINES_GBPS[-1]:g} Gbps"
            row["lines_100g"] = int(math.ceil(n_inst * phi_ref / (100.0 * link_efficiency)))
        else:
            row.update({"kv_mib_ref": np.nan, "prefill_s_ref": np.nan, "bound_ref": "beyond max context",
                        "phi_gbps_ref": np.nan, "cluster_gbps_ref": np.nan, "max_gpus_100g": np.nan, "lines_100g": np.nan,
                        "smallest_line": "–", **{f"util_{line:g}g": np.nan for line in STANDARD_LINES_GBPS}})
        rows.append(row)
        exprs.append((m, kv_bytes_expr(m, settings)))
    table = pd.DataFrame(rows)
    curve = pd.concat(curves, ignore_index=True)
    ref_txt = _tokens(ref)
    inst_txt = f"{gpus}×{inst.gpu.id.upper()}"

    # ---- headline
    pair = _headline_pair(table)
    cards, lead = [], ""
    if pair is not None:
        by = table.set_index("model")
        a, z = by.loc[pair[0]], by.loc[pair[1]]
        kv_ratio = z["kv_mib_ref"] / a["kv_mib_ref"]
        phi_ratio = z["phi_gbps_ref"] / a["phi_gbps_ref"]
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
                     f"the roofline model on {_e(inst_txt)}.)")
    lines_txt = " / ".join(f"{v:g}" for v in STANDARD_LINES_GBPS)
    cards.append(("Models", str(len(specs)), ", ".join(names)))

    model_dom = names
    model_scale = alt.Scale(domain=model_dom, range=(SERIES_COLORS * 4)[:len(model_dom)])
    color = alt.Color("name:N", title=None, scale=model_scale)

    def bars(df, col, title, axis_title, subtitle, fmt):
        d = df[["name", col]].copy()
        d["text"] = [fmt(v) for v in d[col]]
        base = alt.Chart(_finite(d)).encode(y=alt.Y("name:N", sort=model_dom, title=None, axis=alt.Axis(labelLimit=170)),
                                            x=alt.X(f"{col}:Q", title=axis_title,
                                                    scale=alt.Scale(domain=[0, float(np.nanmax(d[col])) * 1.3 or 1])))
        return alt.layer(base.mark_bar(height=22).encode(color=alt.Color("name:N", scale=model_scale, legend=None)),
                         base.mark_text(align="left", dx=4, fontSize=11.5, color="#1d2330").encode(text="text:N")
                         ).properties(width=BAR_WIDTH, height=34 * len(specs) + 10,
                                      title=alt.Title(title, subtitle=subtitle))

    per_tok = bars(table, "kv_kib_per_token", "KV cache per token (growing part)", "KiB per token (all layers)",
                   f"{settings.kv_dtype} KV; full-attention / MLA layers only", lambda v: f"{v:,.1f} KiB")
    fixed = bars(table, "fixed_state_mib", "Fixed state per request", "MiB per request",
                 f"linear-attention states + full sliding windows; {settings.engine} state dtypes",
                 lambda v: f"{v:,.1f} MiB")

    tick_vals = _token_ticks(1024, 2 ** 20)
    xenc = alt.X("tokens:Q", scale=alt.Scale(type="log", domain=[1024, 2 ** 20], nice=False),
                 axis=_log_token_axis("prompt length l (tokens, log scale)", tick_vals))

    def curve_chart(col, title, ytitle, subtitle, extra=(), width=CHART_WIDTH):
        base = alt.Chart(_finite(curve)).mark_line(point=alt.OverlayMarkDef(size=14, filled=True)).encode(
            x=xenc, y=alt.Y(f"{col}:Q", scale=alt.Scale(type="log"), axis=_decade_axis(ytitle)), color=color,
            tooltip=[alt.Tooltip("name:N", title="model"), alt.Tooltip("tokens:Q", format=","),
                     alt.Tooltip(f"{col}:Q", format=",.3~g")])
        return alt.layer(base, *extra).properties(width=width, height=CHART_HEIGHT + 30,
                                                  title=alt.Title(title, subtitle=subtitle))

    s_chart = curve_chart("kv_mib", "KV cache of one request, S_kv(l)", "S_kv (MiB, log scale)",
                          "each model stops at its maximum context")
    phi_chart = curve_chart("phi_gbps", f"KV throughput of one {inst_txt} instance, Φ_kv(l)",
                            "Φ_kv (Gbps, log scale)", f"Eq. 1: S_kv(l) / T_prefill(l), roofline model on {inst_txt}")
    lines_df = pd.DataFrame({"y": list(STANDARD_LINES_GBPS), "label": [f"{v:g} Gbps" for v in STANDARD_LINES_GBPS]})
    link_width = CHART_WIDTH - 60  # the line labels sit right of the plot, clear of the bars and curves
    rules = (alt.Chart(lines_df).mark_rule(color="#c8443c", strokeDash=[4, 3]).encode(y="y:Q"),
             alt.Chart(lines_df).mark_text(align="left", baseline="middle", dx=4, color="#c8443c", fontSize=10.5).encode(
                 y="y:Q", x=alt.value(link_width), text="label:N"))
    egress_chart = curve_chart("cluster_gbps", f"Egress of a {cluster_gpus}-GPU prefill cluster, B_out(l)",
                               "B_out (Gbps, log scale)",
                               f"Eq. 2: {n_inst:g} instances of {inst_txt}, all prefilling; dashed: {lines_txt} Gbps lines",
                               rules, link_width)
    eg = table[["name", "cluster_gbps_ref"]].dropna().copy()
    eg["text"] = [f"{v:,.0f} Gbps" for v in eg.cluster_gbps_ref]
    eg["base"] = 1.0  # log-scale bars need a positive baseline
    ymax = max(float(eg.cluster_gbps_ref.max()) if len(eg) else 1.0, STANDARD_LINES_GBPS[-1]) * 3
    eg_base = alt.Chart(eg).encode(x=alt.X("name:N", sort=model_dom, title=None, axis=alt.Axis(labelAngle=-25, labelLimit=160)))
    eg_chart = alt.layer(
        eg_base.mark_bar(width=34).encode(y=alt.Y("cluster_gbps_ref:Q", axis=_decade_axis("cluster egress (Gbps, log scale)"),
                                                   scale=alt.Scale(type="log", domain=[1, ymax])), y2="base:Q",
                                          color=alt.Color("name:N", scale=model_scale, legend=None)),
        eg_base.mark_text(dy=-7, fontSize=11, color="#1d2330").encode(y="cluster_gbps_ref:Q", text="text:N"),
        *rules,
    ).properties(width=link_width, height=CHART_HEIGHT + 30, title=alt.Title(
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
                             + ", ".join(f"{n} {b}" for n, b in zip(table.name, table.bound_ref))
                             + ". Line load = B_out ÷ nominal line rate (above 1: the line is too small).")
    curve_tbl = Table("curves", curve, [Col("name", "Model", text=True), Col("tokens", "l", "tokens", "int"),
                                        Col("kv_mib", "S_kv", "MiB"), Col("prefill_s", "T_prefill", f"s, {inst_txt}"),
                                        Col("phi_gbps", "Φ_kv", "Gbps"), Col("cluster_gbps", "B_out", f"Gbps, {cluster_gpus} GPUs")])

    formula_txt = "\n\n".join(f"{m.name}:\nS_kv(l) =\n{__import__('sympy').pretty(e, use_unicode=True)}" for m, e in exprs)
    eqs = ("Eq. 1  Φ_kv(l) = S_kv(l) / T_prefill(l)                     one instance prefilling back to back\n"
           "Eq. 2  B_out   = (N_gpus / gpus_per_instance) · Φ_kv(l)     every instance of the cluster busy\n"
           "       max prefill GPUs on a line = floor(line · efficiency / Φ_kv(l)) · gpus_per_instance")
    assumptions = [
        f"Cache bytes: exact arithmetic from each model's architecture ({settings.kv_dtype} KV cache, "
        f"{settings.engine} state dtypes; no paging).",
        f"T_prefill: the roofline performance model on {_e(inst_txt)} ({_e(inst.gpu.name)}), no measured profile; "
        f"efficiency factors: {_e(inst.gpu.efficiency.provenance)}.",
        f"Link lines are nominal; 'smallest line' and 'max prefill GPUs' assume {link_efficiency:.0%} of it is usable.",
        "Token counts: K = 1024, M = 1024²; MiB = 2²⁰ B; Gbps = 10⁹ bit/s.",
        "Models whose maximum context is below a length are not drawn beyond it.",
    ]
    sections = [
        Section("bytes", "Cache bytes per token and per request", [
            Figure("kv-bytes-per-token", per_tok, "The part of the cache that grows with every token.",
                   Table("kv-bytes-per-token-data", table[["model", "name", "kv_bytes_per_token", "kv_kib_per_token"]],
                         [Col("name", "Model", text=True), Col("kv_bytes_per_token", "KV", "bytes/token", "int"),
                          Col("kv_kib_per_token", "KV", "KiB/token")], row_key="model")),
            Figure("fixed-state", fixed, "Bytes every request holds whatever its length (recurrent + conv states, "
                   "full sliding windows).",
                   Table("fixed-state-data", table[["model", "name", "fixed_state_bytes", "fixed_state_mib"]],
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
                   Table("cluster-egress-bars-data", table[["model", "name", "cluster_gbps_ref"]],
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


def write_compare(models: Iterable[str] | None, path, hardware: str = "h200", gpus: int = 8, cluster_gpus: int = 512,
                  png_dir=None, context_tokens: int = 32768, settings=None, link_efficiency: float = DEFAULT_LINK_EFFICIENCY,
                  extra_model_dirs: tuple = (), extra_hardware_dirs: tuple = ()) -> Path:
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
