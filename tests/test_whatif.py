"""The plan report's what-if section (prfaas_plan.report.whatif): its precomputed grid is what the
planner gives for each slider setting, the page carries it as Vega-Lite params bound to range
inputs, the page stays one offline file under 3 MB, and in Chromium moving the sliders changes the
headline and the charts to the precomputed values.

Expected numbers are computed here independently: ``pp.plan(scenario with that link and those
pools, mode="paper")`` for a cell's optimum, and ``paper_stage_rates`` on that scenario's own
inputs (plan_inputs of the modified scenario, one cell at a time, its own N_p range) for the
best split at a slider's t. The chart data are rounded (``whatif.ROUND`` decimals), so the page's
numbers are compared to within half a unit of the last digit shown; the ``whatif-grid`` table
carries exact values and is compared exactly.
"""

from __future__ import annotations

import html
import json
import math
import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from test_report import parse, same
from test_report_browser import ARTIFACTS, CHROMIUM, FLAGS

import prfaas_plan as pp
from prfaas_plan import planner as P
from prfaas_plan import report as rpt
from prfaas_plan.report import whatif as W
from prfaas_plan.units import BITS_PER_BYTE, GBPS_BITS_PER_S

SCENARIO_CELL = (100.0, 32, 64)
MOVED = {"link_gbps": 6.25, "prfaas_gpus": 24, "local_gpus": 72, "t_step": 50}
"""Where the browser test moves the sliders (link 6.25 Gbps is link-bound: every number changes)."""
OTHER_CELLS = [(6.25, 24, 72), (3.125, 48, 48), (400.0, 16, 80), (25.0, 40, 56)]


# ----------------------------------------------------------------------------- independent numbers
def cell_scenario(link_gbps: float, prfaas_gpus: int, local_gpus: int):
    return pp.load_scenario("paper-case-study").with_updates(
        **{"link.gbps": link_gbps, "prfaas.gpus": prfaas_gpus, "local.gpus": local_gpus})


def paper_optimum(link_gbps: float, prfaas_gpus: int, local_gpus: int) -> dict:
    """pp.plan in paper mode for the scenario with this link and these pools."""
    p = pp.plan(cell_scenario(link_gbps, prfaas_gpus, local_gpus), mode="paper").plan
    return {"threshold_tokens": p.threshold_tokens, "n_prfaas": p.instances["prfaas"], "n_pd_p": p.instances["pd_p"],
            "n_pd_d": p.instances["pd_d"], "lambda_max_rps": p.lambda_max_rps,
            "offload_fraction": p.offload_fraction, "egress_gbps": p.egress_gbps}


def best_split_at(link_gbps: float, prfaas_gpus: int, local_gpus: int, t_tokens) -> dict:
    """Eqs. 3-6 at thresholds ``t_tokens`` on the modified scenario's inputs: the best N_p per t
    (first maximum), its Lambda_max, the offloaded share and the egress."""
    inp = P.plan_inputs(cell_scenario(link_gbps, prfaas_gpus, local_gpus))
    t = np.atleast_1d(np.asarray(t_tokens, dtype=float))
    g = P.paper_stage_rates(inp, t, np.arange(inp.n_local))
    j = np.argmax(g["lambda"], axis=1)
    rows = np.arange(len(t))
    lam, p, l_long = g["lambda"][rows, j], g["p"][rows, 0], g["l_long"][rows, 0]
    egress = np.where(p > 0, lam * p * BITS_PER_BYTE * inp.kv_bytes(np.nan_to_num(l_long, nan=1.0)) / GBPS_BITS_PER_S,
                      0.0)
    return {"t_tokens": t, "n_pd_p": j, "n_pd_d": inp.n_local - j, "lambda_max_rps": lam, "offload_fraction": p,
            "egress_gbps": egress}


def slider_t_grid() -> np.ndarray:
    return P.threshold_grid(P.plan_inputs(pp.load_scenario("paper-case-study")), W.T_POINTS)


# ----------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def grid():
    return W.whatif_grid(P.plan_inputs(pp.load_scenario("paper-case-study")))


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """The paper-mode plan report (simulation off), written once."""
    path = tmp_path_factory.mktemp("whatif") / "plan.html"
    rpt.write_report(pp.load_scenario("paper-case-study"), path, mode="paper", simulate=False)
    parsed = parse(path)
    return path, parsed, json.loads(parsed.script_text["report-specs"])["what-if"]


def cell_row(columns, link_gbps, prfaas_gpus, local_gpus, rows: int = 1):
    """The ``rows`` rows of the grid's ``columns`` for one cell (1 in ``cells``, one per t in ``curve``)."""
    import pandas as pd

    frame = pd.DataFrame(columns)
    sel = frame[(frame.link_gbps == link_gbps) & (frame.prfaas_gpus == prfaas_gpus) & (frame.local_gpus == local_gpus)]
    assert len(sel) == rows, (link_gbps, prfaas_gpus, local_gpus)
    return sel


# ----------------------------------------------------------------------------- the grid
def test_grid_axes_centre_on_the_scenario(grid):
    assert grid.link_gbps.tolist() == [3.125, 6.25, 12.5, 25.0, 50.0, 100.0, 200.0, 400.0]
    assert grid.prfaas_gpus.tolist() == [16, 24, 32, 40, 48]
    assert grid.local_gpus.tolist() == [48, 56, 64, 72, 80]
    assert grid.t_tokens.tolist() == slider_t_grid().tolist()
    assert {len(v) for v in grid.cells.values()} == {8 * 5 * 5}
    assert {len(v) for v in grid.curve.values()} == {8 * 5 * 5 * len(grid.t_tokens)}


def test_a_scenario_without_a_link_gets_0_gbps_and_commodity_lines():
    """Link 0 Gbps: the grid is 0 Gbps and 12.5 Gbps x 2^-5 .. 2^2 (0.39 to 50 Gbps); its 0 Gbps
    cells offload nothing and are the paper-mode plans of those pools without a link."""
    grid = W.whatif_grid(P.plan_inputs(cell_scenario(0.0, 32, 64)))
    assert grid.link_gbps.tolist() == [0.0, 0.390625, 0.78125, 1.5625, 3.125, 6.25, 12.5, 25.0, 50.0]
    cells = cell_row(grid.cells, 0.0, 32, 64).iloc[0]
    want = paper_optimum(0.0, 32, 64)
    assert want["offload_fraction"] == 0 and want["threshold_tokens"] is None
    for k, v in want.items():
        assert same(cells[k], np.nan if v is None else v), (k, cells[k], v)


@pytest.mark.parametrize("cell", [SCENARIO_CELL, *OTHER_CELLS])
def test_cell_optimum_is_the_paper_mode_plan(grid, cell):
    got = cell_row(grid.cells, *cell).iloc[0]
    want = paper_optimum(*cell)
    for k, v in want.items():
        assert same(got[k], np.nan if v is None else v), (cell, k, got[k], v)


def test_scenario_cell_is_the_reports_paper_plan(grid):
    res = pp.plan(pp.load_scenario("paper-case-study"), mode="paper")
    got = cell_row(grid.cells, *SCENARIO_CELL).iloc[0]
    assert got.lambda_max_rps == res.lambda_max_rps and got.threshold_tokens == res.threshold_tokens
    assert (got.n_prfaas, got.n_pd_p, got.n_pd_d) == (res.instances["prfaas"], res.instances["pd_p"],
                                                      res.instances["pd_d"])


@pytest.mark.parametrize("cell", [SCENARIO_CELL, OTHER_CELLS[0], OTHER_CELLS[1]])
def test_curve_is_the_best_split_at_each_t(grid, cell):
    got = cell_row(grid.curve, *cell, rows=W.T_POINTS)
    want = best_split_at(*cell, slider_t_grid())
    assert got.t_tokens.tolist() == want["t_tokens"].tolist()
    assert got.n_pd_p.tolist() == want["n_pd_p"].tolist()
    for k in ("lambda_max_rps", "offload_fraction", "egress_gbps"):
        assert got[k].to_numpy() == pytest.approx(want[k], rel=1e-12, abs=1e-12), k


# ----------------------------------------------------------------------------- the page
def test_sliders_are_range_params_over_the_grid(page, grid):
    _, _, spec = page
    params = {p["name"]: p for p in spec["params"]}
    ranges = {n: p["bind"] for n, p in params.items() if "bind" in p}
    assert {n: b["input"] for n, b in ranges.items()} == dict.fromkeys(
        ["wi_link_step", "wi_t_step", "wi_prfaas_gpus", "wi_local_gpus"], "range")
    assert (ranges["wi_prfaas_gpus"]["min"], ranges["wi_prfaas_gpus"]["max"], ranges["wi_prfaas_gpus"]["step"]) == (16, 48, 8)
    assert (ranges["wi_local_gpus"]["min"], ranges["wi_local_gpus"]["max"], ranges["wi_local_gpus"]["step"]) == (48, 80, 8)
    assert (ranges["wi_link_step"]["min"], ranges["wi_link_step"]["max"]) == (0, 7)
    assert (ranges["wi_t_step"]["min"], ranges["wi_t_step"]["max"]) == (0, W.T_POINTS - 1)
    # the step sliders index the grid values named in the expressions, and start at the scenario
    links = json.loads(params["wi_link_gbps"]["expr"].split("][")[0] + "]")
    ts = json.loads(params["wi_t_tokens"]["expr"].split("][")[0] + "]")
    assert links == grid.link_gbps.tolist() and ts == slider_t_grid().astype(int).tolist()
    assert links[params["wi_link_step"]["value"]] == 100.0
    assert (params["wi_prfaas_gpus"]["value"], params["wi_local_gpus"]["value"]) == (32, 64)
    t0 = ts[params["wi_t_step"]["value"]]
    t_plan = pp.plan(pp.load_scenario("paper-case-study"), mode="paper").threshold_tokens
    assert min(ts, key=lambda t: abs(math.log(t / t_plan))) == t0  # the grid t nearest the plan's


def test_chart_data_are_the_rounded_grid(page):
    _, _, spec = page
    rows = spec["datasets"][W.DATASET]
    assert len(rows) == 200
    for cell in [SCENARIO_CELL, *OTHER_CELLS[:2]]:
        row = next(r for r in rows if (r["link_gbps"], r["prfaas_gpus"], r["local_gpus"]) == cell)
        want = paper_optimum(*cell)
        assert (row["threshold_tokens"], row["n_prfaas"], row["n_pd_p"], row["n_pd_d"]) == (
            want["threshold_tokens"], want["n_prfaas"], want["n_pd_p"], want["n_pd_d"])
        for k, d in W.ROUND.items():
            assert abs(row[k] - want[k]) <= 0.5 * 10 ** -d + 1e-12, (cell, k)
        curve = best_split_at(*cell, row["t_tokens"])
        assert row["t_n_pd_p"] == curve["n_pd_p"].tolist()
        for k, d in W.ROUND.items():
            assert np.all(np.abs(np.array(row[f"t_{k}"]) - curve[k]) <= 0.5 * 10 ** -d + 1e-12), (cell, k)


def test_grid_table_carries_the_exact_optima(page):
    _, parsed, _ = page
    table = parsed.tables["whatif-grid"]
    assert len(table) == 200
    for cell in [SCENARIO_CELL, OTHER_CELLS[1]]:
        row = table[f"{cell[0]:g}|{cell[1]}|{cell[2]}"]
        for k, v in paper_optimum(*cell).items():
            assert float(row[k]) == v, (cell, k)


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """The case study as scripts/make_reports.py writes it (exact mode, simulation on)."""
    return rpt.write_report(pp.load_scenario("paper-case-study"), tmp_path_factory.mktemp("example") / "p.html",
                            mode="exact")


def test_section_says_which_model(page, example):
    path, _, _ = page
    text = html.unescape(path.read_text(encoding="utf-8"))
    assert "What if: link, pools and threshold (paper model)" in text
    assert "Every number here comes from the paper's model (Eqs. 3-8" in text
    paper = pp.plan(pp.load_scenario("paper-case-study"), mode="paper")
    said = f"{paper.lambda_max_rps:.3f} req/s at t = {paper.threshold_tokens:,.0f}"
    assert f"At the scenario's settings they are the plan above: {said}" in text
    exact = parse(example).tables["plan"]["lambda_max_rps"]["value"]
    text = html.unescape(example.read_text(encoding="utf-8"))
    assert f"They are not the exact-mode plan above ({float(exact):.3f} req/s" in text
    assert f"the paper model gives {said}" in text


def test_the_example_report_with_sliders_is_one_offline_file_under_3_mb(example):
    size = example.stat().st_size
    parsed = parse(example)
    assert size < 3_000_000, f"{size / 1e6:.2f} MB"
    assert "what-if" in parsed.charts and all("src" not in s for s in parsed.scripts)
    assert not re.search(r"\b(src|href)\s*=\s*[\"']?https?://", example.read_text(encoding="utf-8"), re.I)


# ----------------------------------------------------------------------------- in Chromium
PROBE_JS = r"""
<script>
(function(){
  var out = {};
  function state(){
    var el = document.querySelector('[data-chart="what-if"]');
    var view = window.__reportViews['what-if'];
    var texts = Array.prototype.map.call(el.querySelectorAll('g.mark-text.role-mark text'), function(t){ return t.textContent; });
    var marks = {};
    (function walk(node){
      if (!node) return;
      if (node.marktype && node.name) {  // altair names a layer's mark NAME_<index>; Vega adds _marks
        var key = node.name.replace(/_marks$/, '').replace(/_\d+$/, '');
        marks[key] = (marks[key] || []).concat(node.items.map(function(i){ return i.datum || {}; }));
      }
      (node.items || []).forEach(function(i){ (i.items || []).forEach(walk); });
    })(view.scenegraph().root);
    function pick(name, keys){
      return (marks[name] || []).map(function(d){ var o = {}; keys.forEach(function(k){ o[k] = d[k]; }); return o; });
    }
    return {headline: texts.slice(0, 3),
            curve: pick('wi_curve', ['series', 't_tokens', 't_lambda_max_rps']),
            at_t: pick('wi_at_t', ['t_tokens', 't_lambda_max_rps', 't_n_pd_p']),
            link_now: pick('wi_link_now', ['link_gbps', 'lambda_max_rps']),
            inputs: Array.prototype.map.call(document.querySelectorAll('#whatif-controls input'), function(i){ return i.name; })};
  }
  function set(name, value){
    var input = document.querySelector('#whatif-controls input[name="' + name + '"]');
    input.value = String(value);
    input.dispatchEvent(new Event('input', {bubbles: true}));
    input.dispatchEvent(new Event('change', {bubbles: true}));
  }
  function done(){
    var pre = document.createElement('pre');
    pre.id = 'whatif-probe';
    pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
    var style = document.createElement('style');  // the screenshot shows the what-if section only
    style.textContent = 'header, section:not(#whatif){display:none}';
    document.head.appendChild(style);
  }
  var tries = 0;
  (function wait(){
    if (!document.body.hasAttribute('data-charts-rendered') && tries++ < 150) { setTimeout(wait, 100); return; }
    try {
      out.before = state();
      var moved = MOVED;
      set('wi_link_step', moved.link_step);
      set('wi_prfaas_gpus', moved.prfaas_gpus);
      set('wi_local_gpus', moved.local_gpus);
      set('wi_t_step', moved.t_step);
      window.__reportViews['what-if'].runAsync().then(function(){
        setTimeout(function(){ out.after = state(); done(); }, 300);
      });
    } catch (e) { out.error = String(e); done(); }
  })();
})();
</script>
"""


def _chromium(url: str, *extra: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="prfaas-chromium-") as profile:
        return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=20000", *extra,
                               url], capture_output=True, text=True, timeout=180)


def _drive(path: Path, moved: dict) -> tuple[dict, list[str]]:
    """Open the page in Chromium (offline), move the sliders, return what the probe read and the
    console lines; a screenshot of the moved section goes to test-artifacts/whatif-moved.png."""
    text = path.read_text(encoding="utf-8")
    at = text.rfind("</body>")
    probed = path.with_name(path.stem + ".whatif.html")
    probed.write_text(text[:at] + PROBE_JS.replace("MOVED", json.dumps(moved)) + text[at:], encoding="utf-8")
    r = _chromium(probed.resolve().as_uri(), "--enable-logging=stderr", "--v=0", "--window-size=1400,3000",
                  "--dump-dom")
    m = re.search(r'<pre id="whatif-probe">(.*?)</pre>', r.stdout, re.S)
    assert m, f"the probe never reported (rc {r.returncode}): {r.stderr[-2000:]}"
    ARTIFACTS.mkdir(exist_ok=True)
    _chromium(probed.resolve().as_uri(), "--window-size=1400,1000", f"--screenshot={ARTIFACTS / 'whatif-moved.png'}")
    return json.loads(html.unescape(m.group(1))), [ln for ln in r.stderr.splitlines() if ":CONSOLE" in ln]


def _numbers(line: str) -> list[float]:
    """The numbers of a headline line, in order (not the digits of a GPU name such as H200)."""
    return [float(x.replace(",", "")) for x in re.findall(r"(?<![\w.])\d+(?:,\d{3})*(?:\.\d+)?", line)]


def _check_state(state: dict, cell: tuple, t_tokens: float) -> None:
    """The headline lines and the chart marks equal the independent numbers for ``cell``, ``t``."""
    best, at = paper_optimum(*cell), best_split_at(*cell, [t_tokens])
    settings, head, at_line = state["headline"]
    assert _numbers(settings) == [cell[0], cell[1], cell[1] // 8, cell[2], cell[2] // 8], settings
    lam, t, share, n_pf, n_p, n_d, egress = _numbers(head)
    assert (t, n_pf, n_p, n_d) == (best["threshold_tokens"], best["n_prfaas"], best["n_pd_p"], best["n_pd_d"]), head
    assert abs(lam - best["lambda_max_rps"]) <= 5e-4 + 1e-12 and abs(egress - best["egress_gbps"]) <= 5e-3 + 1e-12
    assert abs(share / 100 - best["offload_fraction"]) <= 5e-4 + 1e-12, head
    t_shown, lam_t, np_t, nd_t, share_t, egress_t = _numbers(at_line)
    assert (t_shown, np_t, nd_t) == (t_tokens, at["n_pd_p"][0], at["n_pd_d"][0]), at_line
    assert abs(lam_t - at["lambda_max_rps"][0]) <= 5e-4 + 1e-12 and abs(egress_t - at["egress_gbps"][0]) <= 5e-3 + 1e-12
    assert abs(share_t / 100 - at["offload_fraction"][0]) <= 5e-4 + 1e-12
    # the charts: the curve of these settings, the point at the slider's t, the link point
    mine = [d for d in state["curve"] if d["series"] == "these settings"]
    curve = best_split_at(*cell, [d["t_tokens"] for d in mine])
    assert len(mine) == W.T_POINTS
    assert np.all(np.abs(np.array([d["t_lambda_max_rps"] for d in mine]) - curve["lambda_max_rps"]) <= 5e-4 + 1e-12)
    assert len(state["at_t"]) == 1 and state["at_t"][0]["t_tokens"] == t_tokens
    assert state["at_t"][0]["t_n_pd_p"] == at["n_pd_p"][0]
    assert abs(state["at_t"][0]["t_lambda_max_rps"] - at["lambda_max_rps"][0]) <= 5e-4 + 1e-12
    assert len(state["link_now"]) == 1 and state["link_now"][0]["link_gbps"] == cell[0]
    assert abs(state["link_now"][0]["lambda_max_rps"] - best["lambda_max_rps"]) <= 5e-4 + 1e-12


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (apt-get install chromium)")
def test_moving_the_sliders_changes_headline_and_charts_to_the_precomputed_values(page, grid):
    path, _, spec = page
    ts = slider_t_grid()
    moved = {"link_step": grid.link_gbps.tolist().index(MOVED["link_gbps"]), "prfaas_gpus": MOVED["prfaas_gpus"],
             "local_gpus": MOVED["local_gpus"], "t_step": MOVED["t_step"]}
    got, console = _drive(path, moved)
    assert "error" not in got, got.get("error")
    assert console == [], "console output:\n" + "\n".join(console)
    assert got["before"]["inputs"] == ["wi_link_step", "wi_t_step", "wi_prfaas_gpus", "wi_local_gpus"]
    t_start = float(ts[next(p for p in spec["params"] if p["name"] == "wi_t_step")["value"]])
    _check_state(got["before"], SCENARIO_CELL, t_start)
    _check_state(got["after"], (MOVED["link_gbps"], MOVED["prfaas_gpus"], MOVED["local_gpus"]), float(ts[MOVED["t_step"]]))
    assert got["after"]["headline"] != got["before"]["headline"]
    assert got["after"]["at_t"] != got["before"]["at_t"] and got["after"]["link_now"] != got["before"]["link_now"]


# ----------------------------------------------------------------------------- the spec
def test_the_assembled_spec_is_altairs_nested_chart(grid):
    """whatif_chart puts altair's rows into altair's top level: the spec is the one altair's own
    ``vconcat(headline, hconcat(curve, link), data, params)`` gives, key order included."""
    from altair.utils.schemapi import debug_mode

    from prfaas_plan.report.charts import _alt

    alt = _alt()
    start = W.initial_steps(grid, pp.load_scenario("paper-case-study"), None)
    ymax = max(float(np.nanmax(grid.cells["lambda_max_rps"])) * 1.1, 1e-3)
    with debug_mode(False):
        nested = alt.vconcat(
            W._headline(alt, 860),
            alt.hconcat(W._curve_chart(alt, grid, start, ymax, 430, 240), W._link_chart(alt, grid, ymax, 300, 240)),
            data=alt.Data(name=W.DATASET), params=[p.param for p in W._params(alt, grid, start, "H200", "H20")])
        want = json.dumps(nested.to_dict(validate=True))
        chart = W.whatif_chart(grid, start, "H200", "H20")
    assert json.dumps(chart.to_dict(validate=True)) == want
    names = re.findall(r'"name": "(wi_[a-z_]+\d*)"', want)
    assert {"wi_curve_0", "wi_at_t_0", "wi_link_now_1"} <= set(names)  # altair's names inside the hconcat


def test_an_assembled_spec_is_validated_and_copied():
    from prfaas_plan.report.charts import AssembledSpec

    good = AssembledSpec({"mark": "point", "data": {"values": [{"x": 1}]}})
    spec = good.to_dict()
    spec["mark"] = "line"
    assert good.to_dict()["mark"] == "point"  # a copy: a page's changes stay on the page
    with pytest.raises(Exception, match="bogus"):
        AssembledSpec({"mark": "point", "bogus": 1}).to_dict(validate=True)
    assert AssembledSpec({"mark": "point", "bogus": 1}).to_dict(validate=False)["bogus"] == 1
