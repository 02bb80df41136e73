"""The plan report page: a scenario's capacity plan laid out (:func:`build_report`, :func:`write_report`).

The page shows a scenario's inputs, the recommended PrfaaS-PD plan and its binding constraint, the
baselines, Lambda_max against the threshold and the P:D split (the paper's Figure 5), what-if sliders
(:mod:`.whatif`), TTFT distributions, egress and queue time series (when the simulator ran), cost,
the formulas and every assumption. Every number is :func:`prfaas_plan.analysis.analyse_plan`'s;
this module only formats and draws them. The inputs, formulas and assumptions sections are built
in :mod:`.plan_sections`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from prfaas_plan.data import check_output_path
from prfaas_plan.defaults import DEFAULT_SIM_DURATION_S
from prfaas_plan.report.charts import (
    BAR_WIDTH,
    CHART_HEIGHT,
    CHART_WIDTH,
    PLAN_COLORS,
    PLAN_LABELS,
    _alt,
    _log_token_axis,
    _plan_scale,
    chart_data,
    props,
    unvalidated,
)
from prfaas_plan.report.files import _check_png_dir, _write
from prfaas_plan.report.page import Col, Columns, Figure, Report, Section, Table, _e, _fmt, _tokens
from prfaas_plan.report.plan_sections import _assumption_blocks, _formula_blocks, _inputs_blocks
from prfaas_plan.report.whatif import whatif_section
from prfaas_plan.tabular import columns_rows, frame_rows, melt

if TYPE_CHECKING:
    from prfaas_plan.analysis import PlanReport
    from prfaas_plan.planner import PlanResult
    from prfaas_plan.scenario import Scenario
    from prfaas_plan.tabular import Rows


# ----------------------------------------------------------------------------- the plan report
def build_report(sc: Scenario, mode: str = "exact", result: PlanResult | None = None, simulate: bool | None = None,
                 sim_duration_s: float = DEFAULT_SIM_DURATION_S, seed: int = 0, load: float | None = None) -> Report:
    """The plan report of scenario ``sc``: :func:`prfaas_plan.analysis.analyse_plan` (see it for the
    arguments) laid out."""
    from prfaas_plan.analysis import analyse_plan

    return plan_page(analyse_plan(sc, mode=mode, result=result, simulate=simulate, sim_duration_s=sim_duration_s,
                                  seed=seed, load=load))


def write_report(sc: Scenario | str | Path, path: str | Path, mode: str = "exact", png_dir: str | Path | None = None,
                 result: PlanResult | None = None, simulate: bool | None = None,
                 sim_duration_s: float = DEFAULT_SIM_DURATION_S, seed: int = 0, load: float | None = None) -> Path:
    """Write the plan report of scenario ``sc`` (a Scenario, built-in id or YAML path) to ``path``
    (one self-contained HTML file, written atomically); with ``png_dir``, also every chart as PNG
    and SVG. Returns the path. Bad input raises :class:`PlanError` and leaves no file."""
    path = check_output_path(path)
    png = _check_png_dir(png_dir)
    if not hasattr(sc, "spec"):
        from prfaas_plan.scenario import load_scenario

        sc = load_scenario(sc)
    report = build_report(sc, mode=mode, result=result, simulate=simulate, sim_duration_s=sim_duration_s,
                          seed=seed, load=load)
    return _write(report, path, png)


def _max(values) -> float:
    """The largest value that is not NaN (pandas' ``Series.max``; NaN if none)."""
    return max((v for v in values if v == v), default=math.nan)


def _gpu_ratio(a: int, b: int) -> str:
    if a == 0:
        return f"0 : {b}"
    if b == 0:
        return f"{a} : 0"
    g = math.gcd(a, b)
    return f"{a // g} : {b // g}"


@unvalidated
def plan_page(a: PlanReport) -> Report:
    """Lay out a :class:`~prfaas_plan.analysis.PlanReport` as the plan report page."""
    alt = _alt()
    sc, res, sim, sim_note, seed = a.scenario, a.result, a.simulation, a.sim_note, a.seed
    inp, best = res.inputs, res.plan
    spec = sc.spec
    gpu_r, gpu_l = sc.prfaas_instance.gpu, sc.local_instance.gpu
    q = spec.slo.ttft_quantile
    qn = f"P{round(q * 100)}"
    frame = [{**r, "label": PLAN_LABELS.get(r["plan"], r["plan"])} for r in a.plans]
    gains = {n: res.ratio(n) for n in res.baselines if res.baselines[n].lambda_max_rps > 0}
    ttft_col = f"p{round(q * 100)}_ttft_s_common_rate"
    common_rate = a.common_rate_rps
    r_gpus, l_gpus = best.gpus["prfaas"], best.gpus["pd_p"] + best.gpus["pd_d"]
    t_best = best.threshold_tokens

    # ---- header
    title = f"PrfaaS capacity plan: {spec.name}"
    subtitle = (f"Scenario <code>{_e(spec.id)}</code> · planner mode <b>{_e(res.mode)}</b> · model "
                f"{_e(sc.model.name)} · PrfaaS pool {spec.prfaas.gpus}×{_e(gpu_r.id.upper())}, local pool "
                f"{spec.local.gpus}×{_e(gpu_l.id.upper())}, link {spec.link.gbps:g} Gbps · workload "
                + (f"trace {_e(Path(spec.workload.trace).name)}" if spec.workload.kind == "trace"
                   else "truncated log-normal lengths"))
    gain_txt = ", ".join(f"{g - 1:+.0%} vs {PLAN_LABELS.get(n, n)}" for n, g in gains.items())
    t_txt = _tokens(t_best) if t_best is not None else "none (nothing offloaded)"
    ttft_best = float(next(r[ttft_col] for r in frame if r["plan"] == best.name))
    cards = [
        ("Throughput Λmax", f"{best.lambda_max_rps:.2f} req/s", gain_txt or "no baseline"),
        ("Threshold t", f"{t_best / 1024:.1f}K" if t_best else "none",
         (f"{t_best:,.0f} tokens; " if t_best else "") + f"{best.offload_fraction:.1%} of requests prefilled remotely"),
        ("Instances", f"{best.instances['prfaas']} + {best.instances['pd_p']} + {best.instances['pd_d']}",
         f"PrfaaS + PD-P + PD-D · {gpu_r.id.upper()}:{gpu_l.id.upper()} GPUs = {_gpu_ratio(r_gpus, l_gpus)}"),
        ("Inter-DC egress", f"{best.egress_gbps:.1f} Gbps", f"{best.link_utilisation:.0%} of the {spec.link.gbps:g} Gbps link"),
        ("Cost per M tokens", f"${best.usd_per_million_tokens:.3f}", f"input + output; ${best.cost_usd_per_hour:,.2f} per hour"),
        (f"{qn} TTFT", f"{ttft_best:.2f} s", f"at {common_rate:.2f} req/s, a rate every plan serves"),
    ]
    lead = (f"<b>Binding constraint: {_e(best.binding)}.</b> Requests whose uncached prompt exceeds "
            f"t = {_e(t_txt)} tokens are prefilled on the PrfaaS cluster and their KV cache shipped over the "
            f"link; the rest are prefilled locally. PrfaaS-PD serves {best.lambda_max_rps:.2f} requests/s "
            f"({a.tokens_per_s:,.0f} tokens/s in + out)"
            + (f", {_e(gain_txt)}" if gain_txt else "") + ".")

    sections = []

    # ---- recommended plan
    kv = [
        ("threshold_tokens", "Threshold t (uncached prompt length)", t_best if t_best is not None else float("nan"), "tokens", "tokens"),
        ("offload_fraction", "Requests prefilled on PrfaaS (p)", best.offload_fraction, "", "pct"),
        ("n_prfaas", "PrfaaS instances", best.instances["prfaas"], f"of {spec.prfaas.gpus_per_instance}×{gpu_r.id.upper()}", "int"),
        ("n_pd_p", "Local prefill instances (PD-P)", best.instances["pd_p"], f"of {spec.local.gpus_per_instance}×{gpu_l.id.upper()}", "int"),
        ("n_pd_d", "Local decode instances (PD-D)", best.instances["pd_d"], f"of {spec.local.gpus_per_instance}×{gpu_l.id.upper()}", "int"),
        ("gpus_remote", f"{gpu_r.id.upper()} GPUs (PrfaaS)", r_gpus, "GPUs", "int"),
        ("gpus_local", f"{gpu_l.id.upper()} GPUs (PD-P + PD-D)", l_gpus, "GPUs", "int"),
        ("gpu_ratio", f"{gpu_r.id.upper()} : {gpu_l.id.upper()} GPU ratio", _gpu_ratio(r_gpus, l_gpus), "", "text"),
        ("lambda_max_rps", "Throughput Λmax", best.lambda_max_rps, "requests/s", "num"),
        ("tokens_per_s", "Token throughput (input + output)", a.tokens_per_s, "tokens/s", "int"),
        ("egress_gbps", "Mean inter-DC egress at Λmax", best.egress_gbps, "Gbps", "num"),
        ("link_utilisation", "Link utilisation (of nominal)", best.link_utilisation, "", "pct"),
        ("binding", "Binding constraint", best.binding, "", "text"),
        ("cost_usd_per_hour", "Cost", best.cost_usd_per_hour, "$/hour", "usd"),
        ("usd_per_million_tokens", "Cost per million tokens", best.usd_per_million_tokens, "$/M tokens", "usd3"),
        ("is_threshold", "Optimal routing is a threshold", best.is_threshold, "", "text"),
    ]
    plan_df = frame_rows([{"key": k, "quantity": lab, "value": v, "unit": u, "value_text": _fmt(v, f)}
                          for k, lab, v, u, f in kv])
    plan_tbl = Table("plan", plan_df, [Col("quantity", "Quantity", text=True), Col("value", "Value", display="value_text"),
                                       Col("unit", "Unit", text=True)], row_key="key",
                     caption=f"The recommended plan ({res.mode} mode)")

    stage_names = {"prfaas": "PrfaaS prefill (Eq. 3 compute, ÷ p)", "pd_p": "Local prefill PD-P (Eq. 4, ÷ (1 − p))",
                   "pd_d": "Decode PD-D (Eq. 5)", "link": "Inter-DC link (Eq. 3 bandwidth, ÷ p)"}
    stages = [{"stage": r["stage"], "name": stage_names[r["stage"]], **r} for r in a.stages]
    stage_tbl = Table("stages", stages,
                      [Col("name", "Stage", text=True), Col("rate_rps", "Rate it alone sustains", "requests/s"),
                       Col("utilisation", "Busy at Λmax", fmt="pct"), Col("instances", "Instances", fmt="int")],
                      row_key="stage", caption="Each stage's capacity; the smallest one is Λmax (Eq. 6)")
    stage_tbl.highlight = str(min((r for r in stages if r["rate_rps"] == r["rate_rps"]),
                                  key=lambda r: r["rate_rps"])["stage"])
    # ---- baselines
    names = [r["plan"] for r in frame]
    bar_df = [{k: r[k] for k in ("plan", "label", "lambda_max_rps", "throughput_vs_this")} for r in frame]
    for r in bar_df:
        r["text"] = f"{r['lambda_max_rps']:.2f} req/s" + (
            "" if r["plan"] == best.name else f"  (PrfaaS-PD: {r['throughput_vs_this']:.2f}×)")
    base = alt.Chart(chart_data(bar_df)).encode(
        y=alt.Y("label:N", sort=[PLAN_LABELS.get(n, n) for n in names], title=None),
        x=alt.X("lambda_max_rps:Q", title="maximum throughput Λmax (requests/s)", scale=alt.Scale(nice=True)))
    bars = base.mark_bar(height=26).encode(color=alt.Color("label:N", scale=_plan_scale(names), legend=None))
    labels = base.mark_text(align="left", dx=4, fontSize=11.5, color="#1d2330").encode(text=alt.Text("text:N"))
    xmax = float(_max(r["lambda_max_rps"] for r in bar_df)) * 1.45
    bars_chart = props(alt.layer(bars, labels).encode(x=alt.X("lambda_max_rps:Q", scale=alt.Scale(domain=[0, xmax]),
                                                        title="maximum throughput Λmax (requests/s)")),
        width=BAR_WIDTH, height=40 * len(names) + 20,
        title=alt.Title("Throughput: PrfaaS-PD vs the baselines", subtitle=f"{res.mode} mode, same scenario inputs"))
    base_cols = [
        Col("label", "Plan", text=True), Col("threshold_tokens", "t", "tokens", "tokens"),
        Col("n_prfaas", "PrfaaS", "instances", "int"), Col("n_pd_p", "PD-P", "instances", "int"),
        Col("n_pd_d", "PD-D", "instances", "int"), Col("lambda_max_rps", "Λmax", "requests/s"),
        Col("throughput_vs_this", "PrfaaS-PD ÷ this", "throughput ratio", "ratio"),
        Col("offload_fraction", "Offloaded", "share of requests", "pct"),
        Col("egress_gbps", "Egress", "Gbps"), Col("link_utilisation", "Link", "utilisation", "pct"),
        Col("binding", "Binding constraint", text=True), Col("usd_per_million_tokens", "Cost", "$/M tokens", "usd3"),
        Col(ttft_col, f"{qn} TTFT", f"s, at {common_rate:.2f} req/s"),
    ]
    if res.slo_rps:
        base_cols.append(Col("slo_rps", "TTFT-SLO rate", "requests/s"))
    sections.append(Section("plan", "Recommended plan", [
        f"<p>{_e(best.binding[0].upper() + best.binding[1:])} binds: it is the stage with the smallest "
        f"capacity below. The other stages have headroom at Λmax; adding capacity there does not raise "
        f"throughput. {'The optimal routing is a length threshold.' if best.is_threshold else 'The optimal routing is <b>not</b> a pure threshold (some lengths are split between paths).'}</p>",
        Columns([plan_tbl, Figure("throughput-vs-baselines", bars_chart,
                                  "Λmax of each plan; the ratio is PrfaaS-PD's throughput over the plan's.")]),
        stage_tbl]))

    base_tbl = Table("baselines", frame, base_cols, row_key="plan", highlight=best.name,
                     caption="One row per plan (planner.PlanResult.to_frame); t = 0 means every request is prefilled remotely")
    sections.append(Section("baselines", "PrfaaS-PD vs the baselines", [
        "<p>Homogeneous PD runs prefill and decode on the local GPU type only "
        f"({sc.baseline_instances * spec.local.gpus_per_instance}×{_e(gpu_l.id.upper())}); naive heterogeneous "
        "prefills every request on the PrfaaS pool and decodes on all local instances, with no threshold.</p>",
        base_tbl]))

    # ---- Figure 5: sweeps
    n_p_best = best.instances["pd_p"]
    t_ref, sw_t, sw_n = a.t_ref_tokens, a.sweep_threshold, a.sweep_np
    series = {"lambda_max_rps": "Λmax (Eq. 6)", "prfaas_rps": "PrfaaS: Θprfaas / p",
              "pd_p_rps": "PD-P: Θpdp / (1 − p)", "pd_d_rps": "PD-D: Θpdd"}
    s_colors = ["#1d2330", "#1f6fb2", "#e08a2c", "#3a9b5c"]
    lam_peak = float(np.nanmax(sw_t["lambda_max_rps"])) if len(sw_t["lambda_max_rps"]) else best.lambda_max_rps
    ymax = max(lam_peak, best.lambda_max_rps) * 2.2

    def sweep_chart(df, xcol, xenc, title, subtitle, rule_x, rule_label):
        long = [r for r in melt(df, xcol, "key", "rps", series, label="series") if r["rps"] == r["rps"]]
        lines = alt.Chart(chart_data(long)).mark_line(clip=True, interpolate="linear").encode(
            x=xenc, y=alt.Y("rps:Q", title="request rate (requests/s)", scale=alt.Scale(domain=[0, ymax])),
            color=alt.Color("series:N", title=None, scale=alt.Scale(domain=list(series.values()), range=s_colors)),
            strokeDash=alt.StrokeDashValue(**alt.condition(alt.datum.key == "lambda_max_rps", alt.value([1, 0]),
                                                            alt.value([5, 3]))),
            size=alt.SizeValue(**alt.condition(alt.datum.key == "lambda_max_rps", alt.value(3.2), alt.value(1.8))))
        rule_data = chart_data(frame_rows([{xcol: rule_x, "label": rule_label}]))
        rule = alt.Chart(rule_data).mark_rule(color="#c8443c", strokeDash=[2, 2]).encode(x=alt.X(f"{xcol}:Q"))
        text = alt.Chart(rule_data).mark_text(align="left", dx=4, dy=-6, color="#c8443c", fontSize=11).encode(
            x=alt.X(f"{xcol}:Q"), y=alt.YValue(8), text=alt.Text("label:N"))
        return props(alt.layer(lines, rule, text), width=CHART_WIDTH, height=CHART_HEIGHT,
                                                       title=alt.Title(title, subtitle=subtitle))

    lo_t, hi_t = float(np.nanmin(sw_t["threshold_tokens"])), float(np.nanmax(sw_t["threshold_tokens"]))
    ch_t = sweep_chart(
        sw_t, "threshold_tokens",
        alt.X("threshold_tokens:Q", scale=alt.Scale(type="log", domain=[lo_t, hi_t], nice=False),
              axis=_log_token_axis("threshold t (uncached prompt tokens, log scale)")),
        "Λmax against the threshold t", f"paper model (Eqs. 3-6), N_p = {n_p_best} PD-P of {inp.n_local} local instances",
        t_ref, f"t = {_tokens(t_ref)}")
    ch_n = sweep_chart(
        sw_n, "n_pd_p",
        alt.X("n_pd_p:Q", title="local prefill instances N_p (the rest decode)",
              scale=alt.Scale(domain=[0, max(inp.n_local - 1, 1)]), axis=alt.Axis(tickMinStep=1, format="d")),
        "Λmax against the P:D split", f"paper model (Eqs. 3-6), t = {_tokens(t_ref)} tokens", n_p_best,
        f"N_p = {n_p_best}")
    sw_t_tbl = Table("sweep-threshold", columns_rows(sw_t), [
        Col("threshold_tokens", "t", "tokens", "int"), Col("offload_fraction", "p", "", "pct"),
        Col("prfaas_rps", "PrfaaS", "requests/s"), Col("pd_p_rps", "PD-P", "requests/s"),
        Col("pd_d_rps", "PD-D", "requests/s"), Col("lambda_max_rps", "Λmax", "requests/s")])
    sw_n_tbl = Table("sweep-np", columns_rows(sw_n), [
        Col("n_pd_p", "N_p", "instances", "int"), Col("n_pd_d", "N_d", "instances", "int"),
        Col("prfaas_rps", "PrfaaS", "requests/s"), Col("pd_p_rps", "PD-P", "requests/s"),
        Col("pd_d_rps", "PD-D", "requests/s"), Col("lambda_max_rps", "Λmax", "requests/s")], row_key="n_pd_p")
    sections.append(Section("sweeps", "Λmax against t and the P:D split (the paper's Figure 5)", [
        "<p>Each curve is the request rate one stage could sustain on its own; Λmax is their minimum. "
        "The optimum sits where the two prefill stages cross (Eq. 7) and where prefill output meets decode "
        "capacity (Eq. 8). Curves above the plot are clipped.</p>",
        Figure("lambda-vs-threshold", ch_t, "Solid black: Λmax. Red: the plan's threshold.", sw_t_tbl),
        Figure("lambda-vs-pd-split", ch_n, "Solid black: Λmax. Red: the plan's P:D split.", sw_n_tbl)]))
    sections.append(whatif_section(sc, res, a.whatif))

    # ---- TTFT
    def cdf_frame(rows: Rows) -> Rows:
        return [{"ttft_s": r["ttft_s"], "cdf": r["cdf"], "plan": r["plan"],
                 "label": PLAN_LABELS.get(r["plan"], r["plan"]) + " (model)", "rate_rps": r["rate_rps"]} for r in rows]

    def cdf_chart(df, title, subtitle, extra=None):
        plans_here = list(dict.fromkeys(r["plan"] for r in df))
        dom = [PLAN_LABELS.get(n, n) + " (model)" for n in plans_here]
        rng = [PLAN_COLORS.get(n, "#5b6578") for n in plans_here]
        layers = []
        if extra is not None:
            dom.append(extra[0]["label"])
            rng.append("#c8443c")
        color = alt.Color("label:N", title=None, scale=alt.Scale(domain=dom, range=rng), legend=alt.Legend(columns=2))
        layers.append(alt.Chart(chart_data(df)).mark_line().encode(
            x=alt.X("ttft_s:Q", title="time to first token (s)"),
            y=alt.Y("cdf:Q", title="share of requests with TTFT ≤ x", axis=alt.Axis(format="%"),
                    scale=alt.Scale(domain=[0, 1])), color=color))
        if extra is not None:
            layers.append(alt.Chart(chart_data(extra)).mark_line(strokeDash=[5, 3], clip=True).encode(
                x=alt.X("ttft_s:Q"), y=alt.Y("cdf:Q"), color=color))
        if spec.slo.ttft_s is not None:
            slo_df = frame_rows([{"x": spec.slo.ttft_s, "label": f"{qn} SLO {spec.slo.ttft_s:g} s"}])
            layers.append(alt.Chart(chart_data(slo_df)).mark_rule(color="#c8443c", strokeDash=[2, 2]).encode(x=alt.X("x:Q")))
        q_df = chart_data(frame_rows([{"y": q, "label": qn}]))
        layers.append(alt.Chart(q_df).mark_rule(color="#9aa3b2", strokeDash=[2, 3]).encode(y=alt.Y("y:Q")))
        layers.append(alt.Chart(q_df).mark_text(align="right", dy=-6, color="#5b6578", fontSize=10.5).encode(
            y=alt.Y("y:Q"), x=alt.XValue(CHART_WIDTH - 2), text=alt.Text("label:N")))
        return props(alt.layer(*layers), width=CHART_WIDTH, height=CHART_HEIGHT,
                                             title=alt.Title(title, subtitle=subtitle))

    cdf_common = cdf_frame(a.ttft_cdf_common)
    sim_cdf = None
    if a.sim_ttft_cdf is not None:
        sim_label = f"PrfaaS-PD (simulated, {a.sim_requests:,} requests)"
        sim_cdf = [{**r, "label": sim_label} for r in columns_rows(a.sim_ttft_cdf)]
    sim_load = spec.load
    cdf_own = cdf_frame(a.ttft_cdf_own)
    ch_c = cdf_chart(cdf_common, "TTFT distribution at a common rate",
                     f"{common_rate:.2f} req/s for every plan ({spec.load:.0%} of the smallest Λmax); M/G/c model", None)
    ch_o = cdf_chart(cdf_own, "TTFT distribution at each plan's own load",
                     f"each plan at {spec.load:.0%} of its own Λmax; M/G/c model"
                     + ("; dashed: simulation" if sim_cdf is not None else ""), sim_cdf)
    ttft_rows = [{**r, "label": PLAN_LABELS.get(r["plan"], r["plan"]), "key": f"{r['plan']}|{r['basis']}|{r['path']}"}
                 for r in frame_rows(list(res.ttft_records))]
    ttft_tbl = Table("ttft", ttft_rows,
                     [Col("label", "Plan", text=True), Col("basis", "Rate basis", text=True),
                      Col("path", "Path", text=True), Col("rate_rps", "Rate", "requests/s"),
                      Col("mean_s", "Mean", "s"), Col("p50_s", "P50", "s"), Col("p90_s", "P90", "s"),
                      Col("p99_s", "P99", "s")], row_key="key",
                     caption="TTFT percentiles from the queueing model (planner.PlanResult.ttft); path all = every request")
    ttft_blocks = [
        "<p>TTFT = wait for a prefill instance (M/G/c, Poisson arrivals) + prefill + the KV transfer that "
        "layer-wise pipelining does not hide + the first decode step. Paths: <i>prfaas</i> (long requests, "
        "remote prefill), <i>pd_p</i> (short requests, local prefill), <i>all</i> (the mixture).</p>",
        Figure("ttft-cdf-common-rate", ch_c, "Analytic CDFs (queueing.TTFTDist.cdf) over a grid of TTFT values.",
               Table("ttft-cdf-common-rate-data", cdf_common[::8],
                     [Col("label", "Plan", text=True), Col("ttft_s", "TTFT", "s"), Col("cdf", "P(TTFT ≤ x)", "", "pct")])),
        Figure("ttft-cdf-own-load", ch_o, "Each plan at the same fraction of its own capacity"
               + (" (dashed: the simulator's requests)." if sim_cdf is not None else "."),
               Table("ttft-cdf-own-load-data", cdf_own[::8],
                     [Col("label", "Plan", text=True), Col("ttft_s", "TTFT", "s"), Col("cdf", "P(TTFT ≤ x)", "", "pct")])),
        ttft_tbl,
    ]
    if sim is None:
        ttft_blocks.insert(1, f'<p class="note">{_e(sim_note)}; the TTFT curves are the queueing model only.</p>')
    sections.append(Section("ttft", "Time to first token", ttft_blocks))

    # ---- time series
    ts_blocks: list = []
    if a.timeseries is not None:
        ts, dt, win = a.timeseries.frame, a.timeseries.dt_s, a.timeseries.window
        usable = spec.link.gbps * spec.link.efficiency
        link_df = chart_data(frame_rows([{"y": spec.link.gbps, "label": f"link {spec.link.gbps:g} Gbps"},
                                         {"y": usable, "label": f"usable {usable:g} Gbps"}]))
        eg_df = {"time_s": ts["time_s"], "raw": ts["egress_gbps"], "mean": a.timeseries.egress_mean_gbps}
        eg_long = melt(eg_df, "time_s", "key", "gbps", {"raw": f"per {dt:g} s", "mean": f"{win * dt:g} s moving mean"},
                        label="kind")
        plan_mean = a.egress_at_load_gbps
        # the planner's mean lies inside the series, so it is named in the legend, not by a label on it
        mean_df = frame_rows([{"y": plan_mean, "kind": f"planner mean {plan_mean:.1f} Gbps"}])
        kinds = alt.Scale(domain=[f"per {dt:g} s", f"{win * dt:g} s moving mean", mean_df[0]["kind"]],
                          range=["#a9c8e6", "#1f4f82", "#e08a2c"])
        eg = props(alt.layer(
            alt.Chart(chart_data(eg_long)).mark_line().encode(
                x=alt.X("time_s:Q", title="simulated time (s)"), y=alt.Y("gbps:Q", title="inter-DC egress (Gbps)"),
                color=alt.Color("kind:N", title=None, scale=kinds),
                strokeWidth=alt.StrokeWidthValue(**alt.condition(alt.datum.key == "raw", alt.value(1.0), alt.value(2.4)))),
            alt.Chart(chart_data(mean_df)).mark_rule(strokeDash=[6, 3], strokeWidth=2).encode(
                y=alt.Y("y:Q"), color=alt.Color("kind:N", title=None, scale=kinds)),
            alt.Chart(link_df).mark_rule(color="#c8443c", strokeDash=[4, 3]).encode(y=alt.Y("y:Q")),
            alt.Chart(link_df).mark_text(align="right", dx=-4, dy=-5, color="#c8443c", fontSize=10.5).encode(
                y=alt.Y("y:Q"), x=alt.XValue(CHART_WIDTH), text=alt.Text("label:N")),
        ), width=CHART_WIDTH, height=CHART_HEIGHT, title=alt.Title(
            "Inter-DC egress over time", subtitle=f"simulation at {sim_load:.0%} of Λmax, seed {seed}"))
        queues = {"remote_queue": "PrfaaS prefill queue", "local_queue": "local prefill queue"}
        qlong = melt(ts, "time_s", "queue", "waiting", {k: v for k, v in queues.items() if k in ts})
        qc = props(alt.Chart(chart_data(qlong)).mark_line(strokeWidth=1.5).encode(
            x=alt.X("time_s:Q", title="simulated time (s)"), y=alt.Y("waiting:Q", title="requests waiting"),
            color=alt.Color("queue:N", title=None)),
            width=CHART_WIDTH, height=CHART_HEIGHT, title=alt.Title("Prefill queues over time", subtitle="simulation"))
        ts_blocks += [Figure("egress-timeseries", eg, "Egress the simulated link carried."),
                      Figure("queue-timeseries", qc, "Requests waiting for a prefill instance.")]
    else:
        ts_blocks.append(
            f'<p class="note">{_e(sim_note)}, so no egress or queue time series are shown. The planner\'s '
            f"steady-state mean egress at Λmax is {best.egress_gbps:.2f} Gbps ({best.link_utilisation:.1%} of the "
            f"{spec.link.gbps:g} Gbps link); at {spec.load:.0%} load it is {a.egress_at_load_gbps:.2f} Gbps.</p>")
    sections.append(Section("timeseries", "Egress and queues over time", ts_blocks))

    # ---- cost
    cost_keys = ("plan", "label", "cost_usd_per_hour", "usd_per_million_tokens", "rps_per_usd_hour", "gpus_remote",
                 "gpus_local", "lambda_max_rps", "remote_usd_per_hour", "local_usd_per_hour", "link_usd_per_hour")
    cost = [{**{k: r[k] for k in cost_keys}, "text": f"${r['usd_per_million_tokens']:.3f}"} for r in frame]
    cb = alt.Chart(chart_data(cost)).encode(
        y=alt.Y("label:N", sort=[PLAN_LABELS.get(n, n) for n in names], title=None),
        x=alt.X("usd_per_million_tokens:Q", title="cost ($ per million tokens, input + output)",
                scale=alt.Scale(domain=[0, float(_max(r["usd_per_million_tokens"] for r in cost
                                                      if r["usd_per_million_tokens"] != math.inf)) * 1.3])))
    cost_chart = props(alt.layer(
        cb.mark_bar(height=26).encode(color=alt.Color("label:N", scale=_plan_scale(names), legend=None)),
        cb.mark_text(align="left", dx=4, fontSize=11.5, color="#1d2330").encode(text=alt.Text("text:N")),
    ), width=BAR_WIDTH, height=40 * len(names) + 20, title=alt.Title(
        "Cost per million tokens", subtitle=f"at each plan's Λmax; {gpu_r.id.upper()} ${gpu_r.price_usd_per_gpu_hour:.2f}, "
        f"{gpu_l.id.upper()} ${gpu_l.price_usd_per_gpu_hour:.2f} per GPU-hour"))
    cost_tbl = Table("cost", cost, [
        Col("label", "Plan", text=True), Col("remote_usd_per_hour", f"{gpu_r.id.upper()} GPUs", "$/hour", "usd"),
        Col("local_usd_per_hour", f"{gpu_l.id.upper()} GPUs", "$/hour", "usd"),
        Col("link_usd_per_hour", "Link", "$/hour", "usd"), Col("cost_usd_per_hour", "Total", "$/hour", "usd"),
        Col("lambda_max_rps", "Λmax", "requests/s"), Col("rps_per_usd_hour", "Throughput per cost", "requests/s per $/hour", "{:.4f}"),
        Col("usd_per_million_tokens", "Cost", "$/M tokens", "usd3")], row_key="plan", highlight=best.name,
        caption=f"GPU prices from hardware_db ({gpu_r.id}: {gpu_r.price_date}; {gpu_l.id}: {gpu_l.price_date}); "
                f"tokens = mean uncached input ({best.mean_input_tokens:,.0f}) + output ({best.output_tokens:,.0f}) per request")
    sections.append(Section("cost", "Cost", [
        Figure("cost-per-million-tokens", cost_chart, "Dollars per million tokens served at Λmax (lower is better)."),
        cost_tbl]))

    # ---- inputs
    sections.append(Section("inputs", "Inputs", _inputs_blocks(a, alt)))

    # ---- formulas and assumptions
    sections.append(Section("formulas", "Formulas", _formula_blocks(a)))
    sections.append(Section("assumptions", "Assumptions and provenance", _assumption_blocks(sc, res, sim, sim_note)))
    return Report("plan", title, subtitle, cards, lead, sections, result=res,
                  data={"simulation": sim, "sweep_threshold": sw_t, "sweep_np": sw_n, "analysis": a})
