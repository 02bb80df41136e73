"""HTML reports (prfaas_plan.report): the numbers in the tables are the planner's, every chart is
declared and has a spec, the page references nothing on the network, and bad input leaves no file.

Tables carry exact values in ``data-value`` (repr of floats), so equality here is exact. Browser
rendering is checked in test_report_browser.py.
"""

from __future__ import annotations

import json
import math
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

import prfaas_plan as pp
from prfaas_plan import report as rpt
from prfaas_plan.data import atomic_write
from prfaas_plan.errors import PlanError

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- helpers
class _Page(HTMLParser):
    """Collects tables (name -> row -> col -> data-value), chart divs, body attributes, scripts."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, dict[str, dict[str, str]]] = {}
        self.table_rows: dict[str, list[dict[str, str]]] = {}
        self.charts: list[str] = []
        self.body: dict[str, str] = {}
        self.scripts: list[dict[str, str]] = []
        self.links: list[dict[str, str]] = []
        self.meta: list[dict[str, str]] = []
        self._table: list[str] = []
        self._row: str | None = None
        self._rowvals: dict[str, str] | None = None
        self._in_script: dict[str, str] | None = None
        self.script_text: dict[str, str] = {}

    def handle_starttag(self, tag, attrs):
        a = {k: (v or "") for k, v in attrs}
        if tag == "table":
            name = a.get("data-table", "")
            self._table.append(name)
            self.tables.setdefault(name, {})
            self.table_rows.setdefault(name, [])
        elif tag == "tr" and self._table:
            self._row = a.get("data-row")
            self._rowvals = {}
        elif tag == "td" and self._table and self._rowvals is not None and "data-col" in a:
            self._rowvals[a["data-col"]] = a.get("data-value", "")
        elif tag == "div" and "data-chart" in a:
            self.charts.append(a["data-chart"])
        elif tag == "body":
            self.body = a
        elif tag == "script":
            self.scripts.append(a)
            self._in_script = a
        elif tag == "link":
            self.links.append(a)
        elif tag == "meta":
            self.meta.append(a)

    def handle_endtag(self, tag):
        if tag == "tr" and self._table and self._rowvals:
            name = self._table[-1]
            self.table_rows[name].append(self._rowvals)
            if self._row is not None:
                self.tables[name][self._row] = self._rowvals
            self._rowvals, self._row = None, None
        elif tag == "table" and self._table:
            self._table.pop()
        elif tag == "script":
            self._in_script = None

    def handle_data(self, data):
        if self._in_script is not None and self._in_script.get("id"):
            self.script_text[self._in_script["id"]] = self.script_text.get(self._in_script["id"], "") + data


def parse(path_or_text) -> _Page:
    text = path_or_text.read_text(encoding="utf-8") if isinstance(path_or_text, Path) else path_or_text
    p = _Page()
    p.feed(text)
    return p


def num(v: str) -> float:
    return float(v) if v not in ("", "None") else math.nan


def same(a, b) -> bool:
    a, b = float(a), float(b)
    return (math.isnan(a) and math.isnan(b)) or a == b


# ----------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def paper():
    """The case study in paper mode, its report written once (simulation off: deterministic, fast)."""
    sc = pp.load_scenario("paper-case-study")
    res = pp.plan(sc, mode="paper")
    return sc, res


@pytest.fixture(scope="module")
def paper_report(paper):
    """The case study's plan report (exact-mode layout of the paper-mode result), built once, no simulation."""
    sc, res = paper
    return rpt.build_report(sc, result=res, simulate=False)


@pytest.fixture(scope="module")
def paper_page(paper, tmp_path_factory):
    sc, res = paper
    path = tmp_path_factory.mktemp("report") / "paper.html"
    rpt.write_report(sc, path, mode="paper", result=res, simulate=False)
    return path, parse(path), path.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def compare_page(tmp_path_factory):
    path = tmp_path_factory.mktemp("compare") / "compare.html"
    rpt.write_compare(None, path)
    return path, parse(path), path.read_text(encoding="utf-8")


# ----------------------------------------------------------------------------- plan report: numbers
def test_baseline_table_equals_planner_frame(paper, paper_page):
    _, res = paper
    _, page, _ = paper_page
    frame = res.to_frame()
    table = page.tables["baselines"]
    assert set(table) == set(frame["plan"])
    cols = ["threshold_tokens", "n_prfaas", "n_pd_p", "n_pd_d", "lambda_max_rps", "throughput_vs_this",
            "offload_fraction", "egress_gbps", "link_utilisation", "usd_per_million_tokens", "p90_ttft_s_common_rate"]
    for _, row in frame.iterrows():
        for c in cols:
            assert same(num(table[row["plan"]][c]), row[c]), (row["plan"], c)
        assert table[row["plan"]]["binding"] == row["binding"]
    assert not res.slo_rps and not any("slo_rps" in r for r in table.values())  # no TTFT SLO, no column
    assert "Simulation was turned off for this report; the TTFT curves are the queueing model only." in paper_page[2]


def _layers(spec: dict) -> list[tuple[dict, list[dict]]]:
    """Each layer of a chart spec with the rows of its dataset."""
    return [(layer, spec["datasets"][layer["data"]["name"]]) for layer in spec["layer"]]


def test_a_ttft_slo_is_a_column_of_rates_and_a_rule_on_the_ttft_curves(tmp_path):
    """With a P90 TTFT SLO of 30 s: the baseline table gives each plan's rate within it (the
    planner's), and both TTFT CDFs draw it as a vertical rule at 30 s; the simulated requests are the
    dashed curve, in the colour legend."""
    sc = pp.load_scenario("paper-case-study").with_updates(**{"slo.ttft_s": 30.0})
    res = pp.plan(sc, mode="paper")
    rep = rpt.build_report(sc, result=res, simulate=True, sim_duration_s=60, seed=1)
    path = tmp_path / "slo.html"
    path.write_text(rep.to_html(), encoding="utf-8")
    table = parse(path).tables["baselines"]
    assert set(res.slo_rps) == set(table) and all(rate > 0 for rate in res.slo_rps.values())
    for name, rate in res.slo_rps.items():
        assert num(table[name]["slo_rps"]) == rate
    for figure in ("ttft-cdf-common-rate", "ttft-cdf-own-load"):
        rules = [rows for layer, rows in _layers(rep.specs()[figure])
                 if layer["mark"]["type"] == "rule" and "x" in layer["encoding"]]
        assert rules == [[{"x": 30.0, "label": "P90 SLO 30 s"}]], figure
    own = _layers(rep.specs()["ttft-cdf-own-load"])
    label = f"PrfaaS-PD (simulated, {len(rep.data['simulation'].requests):,} requests)"
    dashed = [rows for layer, rows in own if layer["mark"].get("strokeDash") == [5, 3]]
    assert len(dashed) == 1 and {r["label"] for r in dashed[0]} == {label}
    assert own[0][0]["encoding"]["color"]["scale"]["domain"][-1] == label
    assert "the TTFT curves are the queueing model only" not in path.read_text(encoding="utf-8")


def test_plan_table_equals_recommended_plan(paper, paper_page):
    _, res = paper
    _, page, _ = paper_page
    t = page.tables["plan"]
    p = res.plan
    assert num(t["threshold_tokens"]["value"]) == p.threshold_tokens
    assert num(t["lambda_max_rps"]["value"]) == p.lambda_max_rps
    assert num(t["egress_gbps"]["value"]) == p.egress_gbps
    assert num(t["cost_usd_per_hour"]["value"]) == p.cost_usd_per_hour
    assert num(t["usd_per_million_tokens"]["value"]) == p.usd_per_million_tokens
    assert int(t["n_prfaas"]["value"]) == p.instances["prfaas"]
    assert int(t["n_pd_p"]["value"]) == p.instances["pd_p"]
    assert int(t["n_pd_d"]["value"]) == p.instances["pd_d"]
    assert int(t["gpus_remote"]["value"]) == p.gpus["prfaas"]
    assert int(t["gpus_local"]["value"]) == p.gpus["pd_p"] + p.gpus["pd_d"]
    assert t["binding"]["value"] == p.binding
    local_gpus = p.gpus["pd_p"] + p.gpus["pd_d"]
    g = math.gcd(p.gpus["prfaas"], local_gpus)
    assert t["gpu_ratio"]["value"] == f"{p.gpus['prfaas'] // g} : {local_gpus // g}" == "1 : 2"  # 32 H200 : 64 H20
    from prfaas_plan.report.plan_report import _gpu_ratio

    assert (_gpu_ratio(0, 64), _gpu_ratio(32, 0), _gpu_ratio(24, 40)) == ("0 : 64", "32 : 0", "3 : 5")
    # stage capacities: Eq. 6's terms, the smallest is Lambda_max
    s = page.tables["stages"]
    for k in ("prfaas", "pd_p", "pd_d"):
        assert num(s[k]["rate_rps"]) == p.stage_rps[k]
    assert min(num(r["rate_rps"]) for r in s.values()) == pytest.approx(p.lambda_max_rps, rel=1e-9)


def test_ttft_and_cost_tables_equal_planner(paper, paper_page):
    _, res = paper
    _, page, _ = paper_page
    t = page.tables["ttft"]
    assert len(t) == len(res.ttft)
    for _, r in res.ttft.iterrows():
        row = t[f"{r.plan}|{r.basis}|{r.path}"]
        for c in ("rate_rps", "mean_s", "p50_s", "p90_s", "p99_s"):
            assert same(num(row[c]), r[c])
    c = page.tables["cost"]
    for name, plan in res.plans.items():
        assert num(c[name]["cost_usd_per_hour"]) == plan.cost_usd_per_hour
        assert num(c[name]["usd_per_million_tokens"]) == plan.usd_per_million_tokens
        assert num(c[name]["rps_per_usd_hour"]) == plan.rps_per_usd_hour


def test_figure5_sweeps_are_the_planners(paper, paper_page):
    from prfaas_plan.planner import sweep_np

    _, res = paper
    _, page, _ = paper_page
    rows = page.table_rows["sweep-threshold"]
    assert len(rows) > 50
    # the sweep's best Lambda is the paper-mode optimum (same grid family, N_p fixed at the optimum)
    best = max(num(r["lambda_max_rps"]) for r in rows)
    assert best == pytest.approx(res.plan.lambda_max_rps, rel=0.02)
    ref = sweep_np(res.inputs, res.plan.threshold_tokens)
    got = page.tables["sweep-np"]
    for _, r in ref.iterrows():
        assert same(num(got[str(int(r.n_pd_p))]["lambda_max_rps"]), r.lambda_max_rps)


def test_analytic_ttft_cdf_matches_queueing_model(paper, paper_report):
    import pandas as pd

    from prfaas_plan.planner import ttft_at

    sc, res = paper
    rep = paper_report
    assert {"plan", "baselines", "ttft-cdf-common-rate-data"} <= set(rep.tables)  # the page's tables and charts' data
    data = pd.DataFrame(rep.tables["ttft-cdf-common-rate-data"].df)
    for plan_name, grp in data.groupby("plan"):
        rate = float(grp.rate_rps.iloc[0])
        want = ttft_at(res.inputs, res.plans[plan_name], res.buckets, rate)["all"].cdf(grp.ttft_s.to_numpy())
        assert grp.cdf.to_numpy() == pytest.approx(want, abs=1e-12)
        # the P90 in the TTFT table sits where the CDF crosses 0.9
        p90 = float(res.ttft[(res.ttft.plan == plan_name) & (res.ttft.basis == "common rate")
                             & (res.ttft.path == "all")].p90_s.iloc[0])
        dist = ttft_at(res.inputs, res.plans[plan_name], res.buckets, rate)["all"]
        assert dist.cdf(p90) >= 0.9 - 1e-9


# ----------------------------------------------------------------------------- plan report: page
def test_chart_count_matches_declared_and_specs(paper, paper_page):
    _, page, text = paper_page
    specs = json.loads(page.script_text["report-specs"])
    n = int(page.body["data-chart-count"])
    assert n == len(page.charts) == len(specs) == len(set(page.charts))
    assert set(page.charts) == set(specs)
    assert {"throughput-vs-baselines", "lambda-vs-threshold", "lambda-vs-pd-split", "ttft-cdf-common-rate",
            "ttft-cdf-own-load", "cost-per-million-tokens", "length-distribution"} <= set(specs)
    for name, spec in specs.items():
        assert spec["$schema"].startswith("https://vega.github.io/schema/vega-lite/"), name
        assert spec["config"]["font"] == rpt.charts.FONT


def test_no_network_references(paper_page, compare_page):
    for _, page, text in (paper_page, compare_page):
        for s in page.scripts:
            assert "src" not in s, s
        for link in page.links:
            assert not re.match(r"https?://", link.get("href", "")), link
        assert not re.search(r"<(script|link|img|iframe)\b[^>]*(src|href)\s*=\s*[\"']?https?://", text, re.I)
        assert not re.search(r"@import\s+(url\()?[\"']?https?://", text, re.I)
        assert not re.search(r"url\(\s*[\"']?https?://", text.split("<script>", 1)[0], re.I)
        csp = [m for m in page.meta if m.get("http-equiv", "").lower() == "content-security-policy"]
        assert csp and "default-src 'none'" in csp[0]["content"]


def test_javascript_inlined_once(paper_page, compare_page):
    for _, page, text in (paper_page, compare_page):
        assert text.count("window.vegaEmbed=") == 1
        assert text.count("vegaEmbed(el, spec") == 1
        assert int(page.body["data-chart-count"]) >= 6


def test_the_javascript_bundle_is_built_once_and_read_back_from_its_cache(tmp_path, monkeypatch):
    """A cached bundle (it defines window.vegaEmbed) is read back as it is; one without it (a
    partial write) is rebuilt and the cache rewritten; an unwritable cache folder is skipped."""
    import vl_convert

    from prfaas_plan.report import bundle

    built = "/* built */ window.vegaEmbed = 1;"
    calls = []
    monkeypatch.setattr(vl_convert, "javascript_bundle", lambda **kw: calls.append(kw) or built)
    monkeypatch.setenv("PRFAAS_PLAN_CACHE_DIR", str(tmp_path))
    bundle.vega_bundle.cache_clear()
    try:
        assert bundle.vega_bundle() == built and len(calls) == 1
        (cached,) = tmp_path.iterdir()
        assert cached.read_text() == built and cached.name.startswith("vega-bundle-vlconvert")
        bundle.vega_bundle.cache_clear()
        cached.write_text("/* cached */ window.vegaEmbed = 2;")
        assert bundle.vega_bundle() == "/* cached */ window.vegaEmbed = 2;" and len(calls) == 1
        bundle.vega_bundle.cache_clear()
        cached.write_text("/* cut short */")
        assert bundle.vega_bundle() == built and len(calls) == 2 and cached.read_text() == built
        bundle.vega_bundle.cache_clear()
        monkeypatch.setenv("PRFAAS_PLAN_CACHE_DIR", str(cached / "not-a-folder"))
        assert bundle.vega_bundle() == built and len(calls) == 3
    finally:
        bundle.vega_bundle.cache_clear()


def test_every_chart_spec_is_valid_vega_lite(paper_report):
    """Pages skip altair's schema validation when they are written (0.1 s a page): it runs here, once."""
    for rep in (paper_report, rpt.build_compare(None)):
        for f in rep.figures:
            assert f.spec(validate=True) == f.spec(), f.name


def _sympy_formula(per: int, windows: tuple, fixed: int):
    import sympy

    l = sympy.Symbol("l", positive=True, integer=True)
    return sympy.sympify(per * l + sum(b * sympy.Piecewise((l, l <= w), (w, True)) for b, w in windows) + fixed)


@pytest.mark.parametrize("terms", [
    (23040, ((199680, 128),), 5000), (0, ((7, 128), (199680, 4096)), 0), (23040, ((3, 1024), (5, 131072)), 12),
    (0, ((5, 8),), 12), (0, (), 0), (0, (), 12), (1, (), 0), (1, ((1, 128),), 0), (0, ((1, 128),), 7),
])
def test_formula_text_is_what_sympy_prints(terms):
    """S_kv(l) is written without sympy (a second to import and print): the same text, every shape of term."""
    import sympy

    from prfaas_plan.analysis import KvFormula
    from prfaas_plan.report.formulas import kv_latex, kv_pretty

    f, expr = KvFormula(*terms), _sympy_formula(*terms)
    assert kv_pretty(f) == sympy.pretty(expr, use_unicode=True)
    assert kv_latex(f) == sympy.latex(expr)


def test_every_models_formula_is_kvcache_kv_bytes_expr():
    import sympy

    from prfaas_plan.analysis import kv_formula
    from prfaas_plan.kvcache import kv_bytes_expr
    from prfaas_plan.report.formulas import kv_latex, kv_pretty

    for mid in pp.list_models()["id"]:
        m = pp.load_model(mid)
        f = kv_formula(m)
        assert kv_pretty(f) == sympy.pretty(kv_bytes_expr(m), use_unicode=True), mid
        assert kv_latex(f) == sympy.latex(kv_bytes_expr(m)), mid


def test_formulas_assumptions_and_provenance(paper, paper_page):
    import html

    import sympy

    from prfaas_plan.kvcache import kv_bytes_expr

    sc, res = paper
    _, _, text = paper_page
    plain = html.unescape(text)
    assert sympy.pretty(kv_bytes_expr(sc.model, sc.cache), use_unicode=True) in plain
    assert sympy.latex(kv_bytes_expr(sc.model, sc.cache)) in plain
    for eq in ("Eq. 1", "Eq. 2", "Eq. 3", "Eq. 4", "Eq. 5", "Eq. 6"):
        assert eq in plain
    for a in sc.spec.assumptions:
        assert a in plain
    assert res.inputs.decode_source in plain
    assert sc.prfaas_profile.source in plain
    from prfaas_plan.perf.latency import latency_source

    assert sc.engine.provenance in plain
    assert latency_source(sc.local_instance) in plain  # H20: the kernel model, from a measured Hopper's tables
    assert "measured" in plain and "modelled" in plain


def test_analytic_ttft_cdf_runs_to_a_quarter_past_the_largest_p99(paper):
    """Both TTFT CDFs the report computes share one time axis: 241 points from 0 to 1.25 x the
    largest finite P99 of the plans (homogeneous PD's 19.5 s at its own load), so every plan's tail
    is drawn."""
    import pandas as pd

    from prfaas_plan.analysis import analyse_plan

    sc, res = paper
    p99 = res.ttft[res.ttft.path == "all"].p99_s.to_numpy()
    rep = analyse_plan(sc, result=res, simulate=False)
    for rows in (rep.ttft_cdf_common, rep.ttft_cdf_own):
        grid = pd.DataFrame(rows).groupby("plan").ttft_s
        assert (grid.size() == 241).all() and (grid.min() == 0).all()
        assert grid.max().to_numpy() == pytest.approx(1.25 * max(x for x in p99 if math.isfinite(x)), rel=1e-12)


def test_a_simulation_too_long_to_chart_says_so(paper, monkeypatch):
    """A run past the simulator's in-memory limit keeps totals, not records (here a limit of 100
    rows, patched in): the page leaves its charts out and says how many requests ran and what to do."""
    import functools

    import prfaas_plan.sim

    sc, res = paper
    monkeypatch.setattr(prfaas_plan.sim, "simulate", functools.partial(prfaas_plan.sim.simulate, max_rows_in_memory=100))
    rep = rpt.build_report(sc, result=res, simulate=True, sim_duration_s=120, seed=1)
    assert rep.data["simulation"] is None
    assert re.search(r"The simulation \(\d[\d,]* requests\) was too long to chart; give a shorter --sim-duration",
                     rep.to_html())
    assert "egress-timeseries" not in {f.name for f in rep.figures}


def test_without_simulation_the_page_says_so(paper_report):
    rep = paper_report
    names = {f.name for f in rep.figures}
    assert "egress-timeseries" not in names
    html_text = rep.to_html()
    assert "Simulation was turned off for this report" in html_text
    assert "no egress or queue time series are shown" in html_text


def test_a_failing_simulator_does_not_cost_the_report(paper, monkeypatch):
    sc, res = paper

    def broken(*a, **k):
        raise IndexError("boom")

    import prfaas_plan.sim

    monkeypatch.setattr(prfaas_plan.sim, "simulate", broken)
    rep = rpt.build_report(sc, result=res)
    assert "The simulation failed (IndexError: boom)" in rep.to_html()


def test_with_simulator_time_series_and_simulated_cdf(paper):
    sc, res = paper
    rep = rpt.build_report(sc, result=res, simulate=True, sim_duration_s=120, seed=1)
    names = {f.name for f in rep.figures}
    assert {"egress-timeseries", "queue-timeseries"} <= names
    sim = rep.data["simulation"]
    assert sim is not None and len(sim.requests) > 0
    spec = rep.specs()["ttft-cdf-own-load"]
    assert "simulated" in json.dumps(spec)
    for f in rep.figures:  # the time series too (the other pages' charts: test_every_chart_spec_is_valid_vega_lite)
        f.spec(validate=True)


def test_mooncake_trace_report(tmp_path):
    trace = ROOT.parent / "shared" / "traces" / "mooncake_conversation.jsonl"
    if not trace.is_file():
        pytest.skip(f"{trace} not present")
    sc = pp.load_scenario("paper-case-study").with_updates(
        **{"workload.kind": "trace", "workload.trace": str(trace), "workload.prefix_cache_blocks": None})
    res = pp.plan(sc)
    path = rpt.write_report(sc, tmp_path / "m.html", result=res, simulate=False)
    page = parse(path)
    assert num(page.tables["plan"]["lambda_max_rps"]["value"]) == res.plan.lambda_max_rps
    assert "unlimited prefix cache" in path.read_text(encoding="utf-8")


def test_the_formula_says_when_the_planner_ships_measured_bytes_instead(paper, paper_page):
    """The case study's PrfaaS profile measures S_kv: the cache formula is shown for comparison and
    the page says so; with the profile's times alone the formula is what the planner ships."""
    note = "The planner ships the measured S_kv of the PrfaaS profile"
    assert note in paper_page[2]
    sc = paper[0].with_updates(**{"prfaas.profile.kv_mib": None})
    assert sc.prfaas_profile is not None and sc.prfaas_profile.kv_bytes is None
    text = rpt.build_report(sc, result=pp.plan(sc, mode="paper"), simulate=False).to_html(bundle="")
    assert note not in text and "MiB (cache model)" in text


def test_per_length_table_is_eq1_of_the_scenarios_profile(paper, paper_page):
    """S_kv, T_prefill and Phi_kv at a few lengths: the measured profile's, and Eq. 1 from bandwidth."""
    from prfaas_plan.bandwidth import kv_throughput_gbps
    from prfaas_plan.units import MIB_BYTES

    sc, _ = paper
    _, page, _ = paper_page
    rows = page.tables["per-length"]
    assert list(rows) == ["1024", "4096", "8192", "32768", "131072"]
    prof = sc.prfaas_profile
    for tokens, r in rows.items():
        l = float(tokens)
        assert num(r["t_remote_s"]) == prof.prefill_time_s(l)
        assert num(r["kv_mib"]) == prof.kv_bytes_at(l) / MIB_BYTES
        assert num(r["phi_gbps"]) == float(kv_throughput_gbps(sc.model, sc.prfaas_instance, l, settings=sc.cache,
                                                                profile=prof))


# ----------------------------------------------------------------------------- comparison
def _lead(page: str) -> str:
    """A page's lead paragraph (HTML)."""
    return re.search(r'<p class="lead">(.*?)</p>', page, re.S).group(1)


def test_compare_numbers_equal_library(compare_page):
    from prfaas_plan.bandwidth import kv_throughput_gbps
    from prfaas_plan.kvcache import fixed_state_bytes, kv_bytes, kv_bytes_per_token
    from prfaas_plan.units import MIB_BYTES

    _, page, _ = compare_page
    t = page.tables["models"]
    assert list(t) == list(rpt.DEFAULT_COMPARE_MODELS)
    inst = pp.instance("h200", gpus=8)
    for mid in rpt.DEFAULT_COMPARE_MODELS:
        m = pp.load_model(mid)
        assert int(t[mid]["kv_bytes_per_token"]) == kv_bytes_per_token(m)
        assert num(t[mid]["fixed_state_mib"]) == fixed_state_bytes(m) / MIB_BYTES
        assert num(t[mid]["kv_mib_ref"]) == pytest.approx(kv_bytes(m, 32768) / MIB_BYTES, rel=1e-12)
        phi = float(kv_throughput_gbps(m, inst, 32768))
        assert num(t[mid]["phi_gbps_ref"]) == pytest.approx(phi, rel=1e-9)
        assert num(t[mid]["cluster_gbps_ref"]) == pytest.approx(512 / 8 * phi, rel=1e-9)
        assert num(t[mid]["util_100g"]) == pytest.approx(512 / 8 * phi / 100, rel=1e-9)
    # the flagship: MiMo-V2-Flash ships an order of magnitude less KV than MiniMax-M2.5 at 32K, next
    # to the paper's own measurement of the same pair, setting and length
    ratio = num(t["minimax-m2.5"]["phi_gbps_ref"]) / num(t["mimo-v2-flash"]["phi_gbps_ref"])
    assert 8 < ratio < 16
    lead = _lead(compare_page[2])
    assert "(The PrfaaS paper's Table 3 measures 60 vs 4.66 Gbps, 12.9×, on 8×H200;" in lead


def test_compare_curves_stop_at_max_context(compare_page):
    from prfaas_plan.analysis import short_name

    _, page, _ = compare_page
    rows = page.table_rows["curves"]
    for mid in rpt.DEFAULT_COMPARE_MODELS:
        m = pp.load_model(mid)
        toks = [int(r["tokens"]) for r in rows if r["name"] == short_name(m)]
        assert min(toks) == 1024 and max(toks) == min(m.max_context_tokens, 2 ** 20)
        assert toks == sorted(set(toks))  # a max context on the grid (2^17, 2^18) is not drawn twice
    specs = json.loads(page.script_text["report-specs"])
    assert len(specs) == 6 == int(page.body["data-chart-count"])


def test_compare_png_and_svg_export(tmp_path):
    out = tmp_path / "slides"
    path = rpt.write_compare(["mimo-v2-flash", "minimax-m2.5"], tmp_path / "c.html", png_dir=out)
    page = parse(path)
    for name in page.charts:
        png = (out / f"{name}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
        assert (out / f"{name}.svg").read_text(encoding="utf-8").lstrip().startswith("<svg")
    assert not list(out.glob("*.part")) and not list(tmp_path.glob(".*.part"))


def test_a_report_of_a_scenario_named_by_its_id_is_the_report_of_the_loaded_scenario(paper, paper_page, tmp_path):
    _, res = paper
    path = rpt.write_report("paper-case-study", tmp_path / "r.html", mode="paper", result=res, simulate=False)
    assert path.read_bytes() == paper_page[0].read_bytes()


@pytest.mark.parametrize("value, how, shown", [
    (0.0, "num", "0"), (27937.0, "num", "27,937"), (512.3, "num", "512.3"), (3.14159, "num", "3.14"),
    (0.0421, "num", "0.042"), (0.00123456, "num", "0.00123"), (-2.5e-5, "num", "-2.5e-05"),
    (None, "int", "–"), (math.nan, "pct", "–"), (math.inf, "num", "∞"), (-math.inf, "num", "−∞"),
    (True, "num", "yes"), (False, "int", "no"), ("h200", "num", "h200"), (7, "text", "7"),
    (1234.6, "int", "1,235"), (0.1234, "pct", "12.3%"), (1.5, "ratio", "1.50×"), (1234.567, "usd", "$1,234.57"),
    (1234.567, "usd3", "$1,234.567"), (32768.0, "tokens", "32K"), (1048576.0, "tokens", "1M"),
    (1025.0 * 1024, "tokens", "1025K"), (27937.0, "tokens", "27,937 (27.3K)"), (1000.0, "tokens", "1,000"),
    (0.5, "{:.2e}", "5.00e-01"),
    (3, lambda v: f"<{v}>", "<3>"),
])
def test_a_table_cell_shows_its_value_in_its_format(value, how, shown):
    """What a reader sees in a table cell (the tests read the exact value from data-value; this is the text)."""
    from prfaas_plan.report.page import _fmt

    assert _fmt(value, how) == shown


def test_a_table_cells_data_value_is_its_exact_value():
    import numpy as np

    from prfaas_plan.report.page import _raw

    values = (None, True, np.bool_(False), 7, np.int64(-3), 0.1, np.float32(0.5), 1e-300, "h200 → h20")
    assert [_raw(v) for v in values] == ["", "true", "false", "7", "-3", "0.1", "0.5", "1e-300", "h200 → h20"]
    assert float(_raw(2 / 3)) == 2 / 3  # repr round-trips


# ----------------------------------------------------------------------------- bad input
def _no_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*")]


def test_unknown_model_is_planerror_and_leaves_no_file(tmp_path):
    with pytest.raises(PlanError, match="no-such-model"):
        rpt.write_compare(["mimo-v2-flash", "no-such-model"], tmp_path / "c.html", png_dir=tmp_path / "png")
    assert _no_files(tmp_path) == []


def test_unknown_hardware_and_bad_sizes_are_planerrors(tmp_path):
    with pytest.raises(PlanError):
        rpt.write_compare(None, tmp_path / "c.html", hardware="no-such-gpu")
    with pytest.raises(PlanError, match="^--cluster-gpus: a cluster needs at least 1 GPU"):
        rpt.write_compare(None, tmp_path / "c.html", cluster_gpus=0)
    with pytest.raises(PlanError, match="^--gpus: an instance needs at least 1 GPU"):
        rpt.write_compare(None, tmp_path / "c.html", gpus=0)
    for efficiency in (0.0, 1.5):
        with pytest.raises(PlanError, match=r"^link efficiency must be in \(0, 1\]"):
            rpt.write_compare(None, tmp_path / "c.html", link_efficiency=efficiency)
    with pytest.raises(PlanError, match="twice"):
        rpt.write_compare(["mimo-v2-flash", "mimo-v2-flash"], tmp_path / "c.html")
    with pytest.raises(PlanError, match="mode"):
        rpt.write_report(pp.load_scenario("paper-case-study"), tmp_path / "r.html", mode="fast")
    assert _no_files(tmp_path) == []


@pytest.mark.parametrize("kind", ["missing-folder", "is-a-folder", "parent-is-a-file"])
def test_unwritable_path_is_planerror_and_leaves_no_file(tmp_path, kind):
    if kind == "missing-folder":
        target = tmp_path / "nope" / "r.html"
    elif kind == "is-a-folder":
        target = tmp_path / "adir"
        target.mkdir()
    else:
        (tmp_path / "afile").write_text("x")
        target = tmp_path / "afile" / "r.html"
    before = sorted(_no_files(tmp_path))
    with pytest.raises(PlanError):
        rpt.write_compare(["mimo-v2-flash"], target)
    with pytest.raises(PlanError):
        rpt.write_report("paper-case-study", target, mode="paper", simulate=False)
    assert sorted(_no_files(tmp_path)) == before


def test_png_dir_that_is_a_file_is_planerror(tmp_path):
    (tmp_path / "png").write_text("x")
    with pytest.raises(PlanError, match=f"^--png: {re.escape(str(tmp_path / 'png'))} exists and is not a folder$"):
        rpt.write_compare(["mimo-v2-flash"], tmp_path / "c.html", png_dir=tmp_path / "png")
    assert not (tmp_path / "c.html").exists()


def test_a_png_folder_that_cannot_be_written_says_which_before_any_work(tmp_path, monkeypatch):
    """A folder it may not write into, or may not create (the nearest existing parent is not
    writable): one line naming it; a missing folder under a writable parent is fine (created
    later). The tests run as root, for whom every folder is writable, so permission is faked."""
    from prfaas_plan.report import files

    locked = tmp_path / "locked"
    locked.mkdir()
    monkeypatch.setattr(files.os, "access", lambda path, mode: Path(path) != locked)
    with pytest.raises(PlanError, match=f"^--png: cannot write to folder {re.escape(str(locked))} \\(permission denied\\)$"):
        rpt.write_compare(["mimo-v2-flash"], tmp_path / "c.html", png_dir=locked)
    deep = locked / "a" / "b"
    with pytest.raises(PlanError, match=re.escape(f"--png: cannot create folder {deep} (parent {locked} is not writable)")):
        rpt.write_compare(["mimo-v2-flash"], tmp_path / "c.html", png_dir=deep)
    assert not (tmp_path / "c.html").exists() and list(locked.iterdir()) == []
    free = tmp_path / "free" / "a"
    assert files._check_png_dir(free) == free and not free.exists()  # made when the images are written
    assert files._check_png_dir(tmp_path) == tmp_path  # an existing folder it may write into


def test_failure_while_rendering_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "c.html"
    target.write_text("old report")

    def explode(*a, **k):
        raise RuntimeError("renderer crashed")

    monkeypatch.setattr(rpt.page, "_page_html", explode)  # the page module renders; the package only re-exports
    with pytest.raises(RuntimeError):
        rpt.write_compare(["mimo-v2-flash"], target)
    assert target.read_text() == "old report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.html"]


def test_failure_while_writing_leaves_no_partial_file(tmp_path, monkeypatch):
    import os as _os

    target = tmp_path / "c.html"

    def bad_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_os, "replace", bad_replace)
    with pytest.raises(PlanError, match="No space left"):
        atomic_write(target, b"x" * 1000)
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- CLI
def cli(*args: str) -> int:
    """Run the CLI in this process (typer exits with the status code)."""
    from prfaas_plan.cli import main

    try:
        main(list(args))
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_cli_compare_and_report(tmp_path, capsys):
    assert cli("compare", "mimo-v2-flash", "minimax-m2.5", "-o", str(tmp_path / "c.html"), "--cluster-gpus", "256") == 0
    page = parse(tmp_path / "c.html")
    assert set(page.tables["models"]) == {"mimo-v2-flash", "minimax-m2.5"}
    assert "256-GPU" in (tmp_path / "c.html").read_text(encoding="utf-8")
    assert cli("report", "paper-case-study", "-o", str(tmp_path / "r.html"), "--mode", "paper", "--no-simulate") == 0
    assert parse(tmp_path / "r.html").body["data-report"] == "plan"
    assert "wrote" in capsys.readouterr().err


def test_cli_bad_input_exit_2_and_no_file(tmp_path, capsys):
    assert cli("compare", "no-such-model", "-o", str(tmp_path / "c.html")) == 2
    assert "prfaas-plan: error:" in capsys.readouterr().err
    assert cli("report", "paper-case-study", "-o", str(tmp_path / "missing" / "r.html")) == 2
    assert cli("report", "paper-case-study", "-o", str(tmp_path / "r.html"), "--sim-duration", "0") == 2
    assert list(tmp_path.iterdir()) == []


def test_the_flagship_pair_leads_whatever_else_is_compared():
    """With MiMo-V2-Flash and MiniMax-M2.5 on the page, the headline is theirs even where another
    model ships less (DeepSeek-V3) or more (Llama-3.1-8B) KV per second: at 32K on 8xH200 the ratios
    are MiniMax's over MiMo's (independently: kvcache.kv_bytes, bandwidth.kv_throughput_gbps)."""
    from prfaas_plan.analysis import analyse_compare

    models = ("deepseek-v3", "mimo-v2-flash", "minimax-m2.5", "llama-3.1-8b")
    inst = pp.instance("h200", 8)
    phi = {m: float(pp.kv_throughput_gbps(pp.load_model(m), inst, 32768)) for m in models}
    assert min(phi, key=phi.get) == "deepseek-v3" and max(phi, key=phi.get) == "llama-3.1-8b"
    rep = analyse_compare(models)
    assert rep.pair == ("mimo-v2-flash", "minimax-m2.5")
    assert rep.phi_ratio == pytest.approx(phi["minimax-m2.5"] / phi["mimo-v2-flash"], rel=1e-12)
    kv = {m: float(pp.kv_bytes(pp.load_model(m), 32768)) for m in rep.pair}
    assert rep.kv_ratio == pytest.approx(kv["minimax-m2.5"] / kv["mimo-v2-flash"], rel=1e-12)


def test_a_reference_length_beyond_a_models_context_leaves_its_row_empty():
    """At 64K (K = 1024) Qwen3-32B (40,960 tokens of context) has no numbers, only the reason; MiMo
    has its own; with one model reaching the length there is no headline pair."""
    from prfaas_plan.analysis import analyse_compare

    rep = analyse_compare(["qwen3-32b", "mimo-v2-flash"], context_tokens=65536)
    by = {r["model"]: r for r in rep.table}
    short = by["qwen3-32b"]
    assert short["bound_ref"] == "beyond max context" and short["smallest_line"] == "–"
    assert all(math.isnan(short[k]) for k in ("kv_mib_ref", "prefill_s_ref", "phi_gbps_ref", "cluster_gbps_ref",
                                              "lines_100g", "util_100g"))
    mimo = pp.load_model("mimo-v2-flash")
    assert by["mimo-v2-flash"]["kv_mib_ref"] == pytest.approx(float(pp.kv_bytes(mimo, 65536)) / 2 ** 20, rel=1e-12)
    assert rep.pair is None and math.isnan(rep.kv_ratio)


# ----------------------------------------------------------------------------- defects found by new users
@pytest.mark.parametrize("models", [
    ("mimo-v2-flash", "qwen3.5-397b-a17b"), ("mimo-v2-flash", "deepseek-v3"), ("mimo-v2-flash", "llama-3.1-70b"),
    ("mimo-v2-flash", "qwen3-235b-a22b", "kimi-k2"),
])
def test_compare_headline_pairs_the_models_given(models, tmp_path):
    """Without minimax-m2.5 the page used to die with KeyError: the headline pairs the lowest and the
    highest Phi_kv of the models given, at 32K on 8xH200 (independently: bandwidth.kv_throughput_gbps)."""
    from typer.testing import CliRunner

    from prfaas_plan.cli import app

    r = CliRunner().invoke(app, ["compare", *models, "-o", str(tmp_path / "c.html")])
    assert r.exit_code == 0, r.output
    text = (tmp_path / "c.html").read_text(encoding="utf-8")
    inst = pp.instance("h200", 8)
    specs = {m: pp.load_model(m) for m in models}
    phi = {m: float(pp.kv_throughput_gbps(s, inst, 32768)) for m, s in specs.items()}
    lo, hi = min(phi, key=phi.get), max(phi, key=phi.get)
    name = {m: s.name.split(" (")[0] for m, s in specs.items()}
    lead = _lead(text)
    assert f"<b>{name[lo]}</b> ships" in lead and f"than <b>{name[hi]}</b>" in lead
    assert "Table 3" not in lead  # the paper measured only MiMo-V2-Flash against MiniMax-M2.5
    cards = dict(re.findall(r'<div class="k">(.*?)</div><div class="v">(.*?)</div>', text))
    assert cards["KV traffic per 8×H200"] == f"{phi[hi] / phi[lo]:.1f}× less"
    kv = float(pp.kv_bytes(specs[hi], 32768)) / float(pp.kv_bytes(specs[lo], 32768))
    assert cards["KV per 32K request"] == (f"{kv:.1f}× less" if kv >= 1 else f"{1 / kv:.1f}× more")


def _drawn_cdfs(report, figure: str):
    """The CDF points a TTFT chart draws, per plan (from its Vega-Lite spec)."""
    import pandas as pd

    spec = next(f for f in report.figures if f.name == figure).spec()
    rows = [r for d in spec["datasets"].values() for r in d if {"ttft_s", "cdf", "plan"} <= set(r)]
    return {p: g.sort_values("ttft_s") for p, g in pd.DataFrame(rows).groupby("plan")}


def test_trace_report_cdfs_cross_the_table_percentiles():
    """A trace plan's baselines use the shared-cache buckets, the recommended plan per-cluster ones;
    each drawn CDF must cross 50% and 90% at the P50 and P90 the TTFT table gives for that plan
    (it drew every plan on PrfaaS-PD's buckets: Homogeneous PD at 33% at its own P50)."""
    import numpy as np

    trace = ROOT / "tests" / "fixtures" / "traces" / "mooncake_conversation_rows4183-4212.jsonl"
    sc = pp.load_scenario("paper-case-study").with_updates(
        **{"workload.kind": "trace", "workload.trace": str(trace), "workload.prefix_cache_blocks": None})
    rep = rpt.build_report(sc, simulate=False)
    res = rep.result
    for basis, figure in (("common rate", "ttft-cdf-common-rate"), ("own load", "ttft-cdf-own-load")):
        drawn = _drawn_cdfs(rep, figure)
        rows = res.ttft[(res.ttft.basis == basis) & (res.ttft.path == "all")]
        assert set(drawn) == set(rows.plan) == set(res.plans)
        for r in rows.itertuples():
            x, cdf = drawn[r.plan].ttft_s.to_numpy(), drawn[r.plan].cdf.to_numpy()
            for q, t in ((0.5, r.p50_s), (0.9, r.p90_s)):
                i = int(np.searchsorted(x, t))  # x[i-1] < t <= x[i]
                assert cdf[i - 1] <= q + 1e-6 and cdf[i] >= q - 1e-6, (r.plan, basis, q, t, cdf[i - 1], cdf[i])


def test_charts_built_without_alt_debug_mode_have_the_same_specs():
    # the pages build and serialise their charts with altair's per-object schema check off
    # (report.charts.unvalidated); built with it on, as altair does by default, every spec is the same
    from altair.utils import schemapi

    from prfaas_plan.analysis import analyse_compare
    from prfaas_plan.report.compare import compare_page
    from prfaas_plan.report.page import Report

    seen = []
    c = analyse_compare(["mimo-v2-flash", "minimax-m2.5"])
    with schemapi.debug_mode(True):
        checked = Report.specs.__wrapped__(compare_page.__wrapped__(c))
        fast = compare_page(c)
        seen.append(schemapi.DEBUG_MODE)
    specs = fast.specs()
    assert seen == [True] and schemapi.DEBUG_MODE  # restored after each call
    assert list(specs) == list(checked) and len(specs) >= 3
    assert json.dumps(specs, sort_keys=True) == json.dumps(checked, sort_keys=True)
    for f in fast.figures:  # and every one still passes the schema
        f.spec(validate=True)


# ----------------------------------------------------------------------------- chart data without pandas
def _frame_with_every_kind():
    import numpy as np
    import pandas as pd

    return pd.DataFrame({"name": ["a", "b", "c", "d"], "count": np.array([1, 2, 3, 4], dtype=np.int64),
                         "x": [0.5, np.nan, np.inf, 1024.0], "y": [-np.inf, 2.0, 3.0, 4.0]})


def test_chart_data_gives_the_spec_of_altair_own_dataframe_path():
    # the pages hand altair records (report.charts.chart_data) instead of DataFrames: same specs,
    # dataset names included, for one chart and for layers of one base (data hoisted to the layer)
    import altair as alt
    import numpy as np

    from prfaas_plan.report.charts import chart_data

    df = _frame_with_every_kind()
    finite = df.replace([np.inf, -np.inf], np.nan)  # what the pages gave altair before
    for data_of in (lambda: chart_data(df), lambda: chart_data(df.to_dict("records"))):
        one = alt.Chart(data_of()).mark_point().encode(x="x:Q", y="y:Q", color="name:N")
        assert one.to_dict() == alt.Chart(finite).mark_point().encode(x="x:Q", y="y:Q", color="name:N").to_dict()
        base, old = alt.Chart(data_of()).encode(y="name:N"), alt.Chart(finite).encode(y="name:N")
        new_layers = alt.layer(base.mark_bar().encode(x="count:Q"), base.mark_text().encode(text="x:Q"))
        old_layers = alt.layer(old.mark_bar().encode(x="count:Q"), old.mark_text().encode(text="x:Q"))
        spec = new_layers.to_dict()
        assert spec == old_layers.to_dict() and "data" in spec and len(spec["datasets"]) == 1
    (values,) = alt.Chart(chart_data(df, ["x", "name"])).mark_point().to_dict()["datasets"].values()
    assert values == [{"x": 0.5, "name": "a"}, {"x": None, "name": "b"}, {"x": None, "name": "c"},
                      {"x": 1024.0, "name": "d"}]


def test_chart_data_is_shared_not_copied_by_layers():
    import altair as alt

    from prfaas_plan.report.charts import chart_data

    data = chart_data(_frame_with_every_kind())
    layered = alt.layer(alt.Chart(data).mark_point(), alt.Chart(data).mark_rule(), alt.Chart().mark_text())
    assert all(layer.data is data for layer in layered.layer[:2])


def test_frame_rows_types_columns_as_a_dataframe_does():
    import numpy as np
    import pandas as pd

    from prfaas_plan.tabular import frame_rows

    rows = [{"m": "a", "n": 3, "k": np.int64(7), "v": np.float64(1.5), "flag": True, "s": "x", "i": 1, "t": "p"},
            {"m": "b", "n": float("nan"), "k": np.int64(8), "v": 2, "flag": False, "s": "y", "i": None, "t": None,
             "late": 4},  # a missing value, in a number and in a string column; a key only one row has
            {"m": "c", "n": 5, "k": np.int64(9), "v": 3, "flag": None, "s": "z", "i": 3, "t": "q"}]
    got = frame_rows([dict(r) for r in rows])
    want = pd.DataFrame(rows).to_dict("records")
    assert json.dumps(got) == json.dumps(want, default=lambda v: v.item())  # values and their int/float types
    assert [type(r[k]) for r in got for k in r] == [type(v.item() if isinstance(v, np.generic) else v)
                                                    for r in want for v in r.values()]


def test_compare_page_is_built_without_pandas():
    # `prfaas-plan compare` never imports pandas (half a second): the comparison is records end to end
    import subprocess
    import sys

    code = ("import sys\nfrom prfaas_plan.report.compare import build_compare\n"
            "r = build_compare(['mimo-v2-flash', 'minimax-m2.5'])\nr.to_html(bundle='', specs=r.specs())\n"
            "print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False"]


@pytest.mark.parametrize("simulate", [False, True])
def test_plan_page_is_built_without_pandas(simulate):
    # `prfaas-plan report` never imports pandas: the plan report, and the simulation's records it
    # reads (SimResult.columns), are records and numpy columns end to end
    import subprocess
    import sys

    code = ("import sys\nimport prfaas_plan as pp\nfrom prfaas_plan.report.plan_report import build_report\n"
            f"r = build_report(pp.load_scenario('paper-case-study'), simulate={simulate}, sim_duration_s=60.0)\n"
            "r.to_html(bundle='', specs=r.specs())\nprint('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False"]


def _series(n: int, seed: int) -> dict:
    """Simulator-like time series columns: increasing time, floats with repeats, runs of zeros and an
    infinity, integer queues."""
    import numpy as np

    rng = np.random.default_rng(seed)
    egress = np.round(rng.random(n) * 4) * 12.5 + np.where(rng.random(n) < 0.5, rng.random(n) * 1e-3, 0.0)
    egress[rng.random(n) < 0.2] = 0.0
    util = rng.random(n)
    util[n // 3] = np.inf
    return {"time_s": np.cumsum(rng.random(n) + 0.5), "egress_gbps": egress, "link_utilisation": util,
            "remote_queue": rng.integers(0, 40, n), "local_queue": rng.integers(0, 3, n)}


@pytest.mark.parametrize("n", [1, 600, 1501, 7000])
def test_timeseries_numbers_are_pandas_to_the_bit(n):
    # the report's egress series: downsampled by equal-width time bins (pandas' groupby mean: reduceat
    # over sorted bins, Kahan sums when a float column has a NaN) and its centred 30-step moving mean
    # (pandas' rolling mean: running Kahan sum, repeated values, sign clamp); computed without pandas,
    # they must be pandas' numbers bit for bit, as the page printed them before
    import numpy as np
    import pandas as pd

    from prfaas_plan.tabular import centred_mean, columns_rows, downsample

    cols = _series(n, n)
    frame = pd.DataFrame(cols).replace([np.inf, -np.inf], np.nan)
    if n > 1500:
        x = frame.time_s.to_numpy(dtype=float)
        idx = np.clip(np.digitize(x, np.linspace(x.min(), x.max(), 1501)) - 1, 0, 1499)
        want = frame.select_dtypes("number").groupby(idx).mean().reset_index(drop=True)
        no_nan = frame.fillna(0.0)  # float columns without NaN: pandas takes its reduceat path
        assert all(np.array_equal(v, no_nan.groupby(idx).mean()[k].to_numpy())
                   for k, v in downsample({k: no_nan[k].to_numpy() for k in no_nan}, "time_s", 1500).items())
    else:
        want = frame
    got = downsample(cols, "time_s", 1500)
    assert json.dumps(columns_rows(got)) == json.dumps(want.to_dict("records"))  # values and int/float types
    for window in (1, 2, 7, 30):
        mean = want.egress_gbps.rolling(window, min_periods=1, center=True).mean().to_numpy()
        assert np.array_equal(centred_mean(got["egress_gbps"], window), mean, equal_nan=True), window


def test_unsorted_bins_take_the_kahan_means():
    import numpy as np
    import pandas as pd

    from prfaas_plan.tabular import group_means

    rng = np.random.default_rng(3)
    x = rng.normal(size=3000) * 1e3
    labels = rng.integers(0, 40, 3000)
    want = pd.DataFrame({"x": x}).groupby(labels).mean()["x"].to_numpy()
    assert np.array_equal(group_means({"x": x}, labels)["x"], want)
