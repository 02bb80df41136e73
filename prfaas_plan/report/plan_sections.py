"""The plan report's reference sections laid out: the scenario's inputs (with the length
distribution and the per-length model numbers), the formulas (S_kv(l), the paper's equations,
the exact-mode program) and the assumptions with their provenance (measured or modelled)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from prfaas_plan.defaults import PREFIX_BLOCK_TOKENS
from prfaas_plan.perf.latency import latency_source
from prfaas_plan.report.charts import CHART_HEIGHT, CHART_WIDTH, _log_token_axis, chart_data, props
from prfaas_plan.report.formulas import kv_latex, kv_pretty
from prfaas_plan.report.page import Col, Figure, Table, _e, _tokens
from prfaas_plan.tabular import columns_rows, frame_rows

if TYPE_CHECKING:
    from prfaas_plan.analysis import PlanReport
    from prfaas_plan.planner import PlanResult
    from prfaas_plan.scenario import Scenario
    from prfaas_plan.sim import SimResult


def _inputs_blocks(a: PlanReport, alt) -> list:
    sc, res = a.scenario, a.result
    spec, inp = sc.spec, res.inputs
    w = spec.workload
    m = sc.model
    mix = " + ".join(f"{n} {m.attention[k].kind}" for k, n in m.layer_counts().items())
    if w.kind == "lognormal":
        wl = (f"truncated log-normal lengths, μ = {w.mu:g}, σ = {w.sigma:g}, in [{w.min_tokens:,}, "
              f"{w.max_tokens:,}] tokens")
    else:
        blocks = w.prefix_cache_blocks
        pc = ("no prefix cache" if blocks == 0
              else f"unlimited prefix cache ({PREFIX_BLOCK_TOKENS}-token blocks)" if blocks is None
              else f"LRU prefix cache of {blocks:,} blocks of {PREFIX_BLOCK_TOKENS} tokens")
        wl = f"trace {Path(w.trace).name} ({w.trace_format}), {pc}; lengths are the uncached suffixes"
    rows = [
        ("model", "Model", f"{m.name} ({m.id}): {m.layers.count} layers, {mix}; "
                           f"{m.total_params / 1e9:,.0f}B total / {m.active_params / 1e9:,.1f}B active parameters"),
        ("cache", "Cache storage", f"{spec.cache.kv_dtype} KV, {spec.cache.engine} state dtypes"
                                   + (f", states {spec.cache.state_dtype}" if spec.cache.state_dtype else "")),
        ("prfaas", "PrfaaS pool", f"{spec.prfaas.gpus} × {sc.prfaas_instance.gpu.name} = "
                                  f"{spec.prfaas.instances} instances of {spec.prfaas.gpus_per_instance} GPUs"),
        ("local", "Local PD pool", f"{spec.local.gpus} × {sc.local_instance.gpu.name} = "
                                   f"{spec.local.instances} instances of {spec.local.gpus_per_instance} GPUs"),
        ("baseline", "Homogeneous baseline", f"{sc.baseline_instances * spec.local.gpus_per_instance} × "
                                             f"{sc.local_instance.gpu.name} ({sc.baseline_instances} instances)"),
        ("link", "Inter-DC link", f"{spec.link.gbps:g} Gbps nominal × {spec.link.efficiency:g} usable, RTT "
                                  f"{spec.link.rtt_s * 1e3:g} ms, ${spec.link.price_usd_per_hour:g}/hour"),
        ("workload", "Workload", wl),
        ("mean_tokens", "Mean uncached input", f"{inp.mean_tokens:,.0f} tokens"),
        ("output", "Output per request", f"{inp.output_tokens:,.0f} tokens"),
        ("decode_context", "Decode context (mean)", f"{inp.decode_context_tokens:,.0f} tokens (mean total input + half the output)"),
        ("slo", "SLOs", f"TPOT {spec.slo.tpot_s * 1e3:g} ms ({1 / spec.slo.tpot_s:g} tokens/s per request); "
                        + (f"{spec.slo.ttft_quantile:.0%} TTFT ≤ {spec.slo.ttft_s:g} s" if spec.slo.ttft_s
                           else f"TTFT reported at P{round(spec.slo.ttft_quantile * 100)}, no bound")),
        ("decode", "Decode capacity (Eq. 5)", f"BS_max = {inp.decode_batch_max}, T_decode = {inp.decode_step_s * 1e3:.2f} ms, "
                                              f"{inp.decode_rps_per_instance:.3f} requests/s per instance; "
                                              f"{inp.decode_source}"),
        ("load", "Load for TTFT", f"{spec.load:.0%} of Λmax"),
    ]
    inputs_tbl = Table("inputs", [{"key": k, "item": a, "value": v} for k, a, v in rows],
                       [Col("item", "Input", text=True), Col("value", "Value", text=True)], row_key="key",
                       caption=f"Scenario {spec.id} ({sc.origin_label})")

    # length distribution, split by route
    dist = a.length_distribution
    edges = [float(dist["lo_tokens"][0]), float(dist["hi_tokens"][-1])]
    lo, hi, remote = dist["lo_tokens"].tolist(), dist["hi_tokens"].tolist(), dist["prfaas"].tolist()
    long = [  # stacked by hand: remote at the bottom, local on top
        *({"lo_tokens": a, "hi_tokens": b, "path": "PrfaaS (remote prefill)", "y0": 0.0, "y1": y}
          for a, b, y in zip(lo, hi, remote)),
        *({"lo_tokens": a, "hi_tokens": b, "path": "PD-P (local prefill)", "y0": y0, "y1": y1}
          for a, b, y0, y1 in zip(lo, hi, remote, (dist["prfaas"] + dist["local"]).tolist()))]
    long = [r for r in long if r["y1"] > r["y0"]]
    hist = props(alt.Chart(chart_data(long)).mark_rect(stroke="white", strokeWidth=0.5).encode(
        x=alt.X("lo_tokens:Q", scale=alt.Scale(type="log", domain=[float(edges[0]), float(edges[-1])], nice=False),
                axis=_log_token_axis("uncached prompt length (tokens, log scale)")),
        x2=alt.X2("hi_tokens:Q"),
        y=alt.Y("y0:Q", title="share of requests per bin", axis=alt.Axis(format="%")), y2=alt.Y2("y1:Q"),
        color=alt.Color("path:N", title=None, scale=alt.Scale(
            domain=["PrfaaS (remote prefill)", "PD-P (local prefill)"], range=["#1f6fb2", "#e08a2c"])),
    ), width=CHART_WIDTH, height=CHART_HEIGHT, title=alt.Title(
        "Where requests are prefilled", subtitle=f"the workload's uncached lengths, routed by the {res.mode}-mode plan"))
    dist_tbl = Table("length-distribution", columns_rows(dist), [
        Col("lo_tokens", "From", "tokens", "int"), Col("hi_tokens", "To", "tokens", "int"),
        Col("prfaas", "PrfaaS", "share", "{:.4f}"), Col("local", "PD-P", "share", "{:.4f}")])

    # per-length model numbers
    per = a.per_length
    r_src = "measured" if sc.prfaas_profile is not None else "modelled"
    l_src = "measured" if sc.local_profile is not None else "modelled"
    k_src = "measured" if sc.prfaas_profile is not None and sc.prfaas_profile.kv_bytes is not None else "cache model"
    per_tbl = Table("per-length", columns_rows(per), [
        Col("tokens", "Length", "tokens", "tokens"),
        Col("t_remote_s", f"T_prefill {sc.prfaas_instance.name}", f"s ({r_src})"),
        Col("t_local_s", f"T_prefill {sc.local_instance.name}", f"s ({l_src})"),
        Col("kv_mib", "S_kv", f"MiB ({k_src})"), Col("phi_gbps", f"Φ_kv {sc.prfaas_instance.name}", "Gbps (Eq. 1)")],
        row_key="tokens", caption="The functions the planner uses, at a few lengths")
    return [inputs_tbl, Figure("length-distribution", hist, "Stacked: requests prefilled remotely and locally, "
                               "per log-spaced length bin.", dist_tbl), per_tbl]


def _formula_blocks(a: PlanReport) -> list:
    sc, res = a.scenario, a.result
    m = sc.model
    pretty, latex = kv_pretty(a.kv_formula), kv_latex(a.kv_formula)
    prof = sc.prfaas_profile
    prof_note = ""
    if prof is not None and prof.kv_bytes is not None:
        prof_note = (" The planner ships the measured S_kv of the PrfaaS profile (interpolated piecewise-linearly "
                     "in l), not this formula; the formula is shown for comparison.")
    best = res.plan
    t, at = a.equations_t_tokens, a.equations
    labels = {"p": ("p = P(L > t)", ""), "l_long": ("l_long = E[L | L > t]", "tokens"),
              "l_short": ("l_short = E[L | L ≤ t]", "tokens"), "theta_prfaas": ("Θ_prfaas (Eq. 3)", "requests/s"),
              "theta_pdp": ("Θ_pdp (Eq. 4)", "requests/s"), "theta_pdd": ("Θ_pdd (Eq. 5)", "requests/s"),
              "lambda_max": ("Λmax (Eq. 6)", "requests/s")}
    eq_rows = frame_rows([{"key": k, "quantity": q, "value": at[k], "unit": u} for k, (q, u) in labels.items()])
    eq_tbl = Table("equations-at-plan", eq_rows, [Col("quantity", "Quantity", text=True), Col("value", "Value"),
                                                  Col("unit", "Unit", text=True)], row_key="key",
                   caption=f"The paper's equations evaluated at this plan's t = {_tokens(t)} and N_p = {best.instances['pd_p']}")
    eqs = """Eq. 1  Φ_kv(l) = S_kv(l) / T_prefill(l)                                  KV throughput of one instance (bit/s)
Eq. 2  B_out ≈ (N_gpus / gpus_per_instance) · Φ_kv(L_avg)                  cluster egress
       p = P(L > t),  l_long = E[L | L > t],  l_short = E[L | L ≤ t],  L_out = mean output tokens
Eq. 3  Θ_prfaas = min( N_prfaas / T_prefill,H200(l_long),  B_out / S_kv(l_long) )
Eq. 4  Θ_pdp    = N_p / T_prefill,H20(l_short)
Eq. 5  Θ_pdd    = N_d · BS_max / (T_decode · L_out)          BS_max, T_decode: largest batch meeting the TPOT SLO that fits memory
Eq. 6  Λ_max    = min( Θ_prfaas / p,  Θ_pdp / (1 − p),  Θ_pdd )"""
    blocks = [
        f"<h3>Cache bytes of one request, S_kv(l), for {_e(m.name)}</h3>"
        f"<p>In bytes, l = tokens kept; from kvcache.kv_bytes_expr ({_e(sc.cache.kv_dtype)} KV, "
        f"{_e(sc.cache.engine)} state dtypes).{prof_note}</p>"
        f"<pre>S_kv(l) =\n{_e(pretty)}</pre>"
        f"<details><summary>LaTeX</summary><pre>{_e(latex)}</pre></details>",
        f"<h3>The paper's model (PrfaaS, arXiv 2604.15039)</h3><pre>{_e(eqs)}</pre>",
    ]
    if res.mode == "exact":
        blocks.append(
            "<h3>Exact mode (the plan above)</h3><pre>"
            + _e("""maximise Λ over y_b, z_b ≥ 0 (offloaded / local request rate of length bucket b), integers N_p, N_d
  y_b + z_b = Λ · p_b                          for every bucket b
  Σ_b y_b · T_H200(l_b)      ≤ N_prfaas         PrfaaS prefill busy time
  Σ_b z_b · T_H20(l_b)       ≤ N_p              local prefill busy time
  8 · Σ_b y_b · S_kv(l_b)    ≤ link_efficiency · B_link
  Λ ≤ N_d · BS_max / (T_decode · L_out),   N_p + N_d ≤ N_local
then, at the optimal Λ, minimise the busier prefill stage's utilisation (headroom tie-break).
t = shortest offloaded bucket; it uses E[T(L)] where the paper uses T(E[L]).""")
            + f"</pre><p>{len(res.buckets.tokens)} buckets. Solver: CBC via pulp.</p>")
    blocks.append(eq_tbl)
    return blocks


def _assumption_blocks(sc: Scenario, res: PlanResult, sim: SimResult | None, sim_note: str) -> list:
    spec, inp = sc.spec, res.inputs
    gpu_r, gpu_l = sc.prfaas_instance.gpu, sc.local_instance.gpu

    def tag(measured: bool) -> str:
        return '<span class="tag m">measured</span>' if measured else '<span class="tag d">modelled</span>'

    pr, pl = sc.prfaas_profile, sc.local_profile
    items = [
        f"{tag(pr is not None)}T_prefill on {_e(sc.prfaas_instance.name)}: "
        + (f"profile — {_e(pr.source)} (points at {', '.join(_tokens(t) for t in pr.tokens)} tokens, "
           "interpolated piecewise-linearly in l, extrapolated linearly)" if pr is not None
           else _e(latency_source(sc.prfaas_instance))),
        f"{tag(pr is not None and pr.kv_bytes is not None)}S_kv (bytes shipped per request): "
        + ("the same measured profile" if pr is not None and pr.kv_bytes is not None
           else "the cache model (exact bytes from the model's architecture)"),
        f"{tag(pl is not None)}T_prefill on {_e(sc.local_instance.name)}: "
        + (f"profile — {_e(pl.source)}" if pl is not None
           else _e(latency_source(sc.local_instance))),
        f"{tag(not inp.decode_source.startswith('performance model'))}Decode batch size and step time: "
        f"{_e(inp.decode_source)} (BS_max = {inp.decode_batch_max}, T_decode = {inp.decode_step_s * 1e3:.2f} ms)",
        f"Serving engine: {_e(sc.engine.name)} — {_e(sc.engine.provenance)}",
        f"Prices: {_e(gpu_r.id)} ${gpu_r.price_usd_per_gpu_hour:.2f}/GPU-hour ({_e(gpu_r.price_date)}), "
        f"{_e(gpu_l.id)} ${gpu_l.price_usd_per_gpu_hour:.2f}/GPU-hour ({_e(gpu_l.price_date)}), link "
        f"${spec.link.price_usd_per_hour:g}/hour.",
        f"The link delivers {spec.link.efficiency:.0%} of its nominal {spec.link.gbps:g} Gbps to KV transfers "
        "(multi-stream TCP); transfers are pipelined layer by layer, so only the last layer's share and half "
        "a round trip add to TTFT unless the link is slower than the prefill.",
        "TTFT uses an M/G/c approximation per prefill path (Poisson arrivals, FCFS); see prfaas_plan.queueing "
        "for its measured error. The common rate is the scenario load times the smallest Λmax of all plans.",
        f"Planner mode {res.mode}: " + ("Eqs. 3-8 exactly as the paper writes them, grid search over t and N_p."
                                       if res.mode == "paper" else
                                       "bucketed MILP over routing and the P:D split (expectations E[T(L)]).")
        + " Λmax against t and N_p (Figure 5) always uses the paper's equations.",
        ("Time series and the simulated TTFT come from prfaas_plan.sim." if sim is not None
         else _e(sim_note) + "."),
    ]
    own = "".join(f"<li>{_e(a)}</li>" for a in spec.assumptions) or "<li>(none stated)</li>"
    return [f"<h3>Stated in the scenario file</h3><ul>{own}</ul>",
            "<h3>Measured and modelled numbers</h3><ul>" + "".join(f"<li>{i}</li>" for i in items) + "</ul>"]
