"""Pareto frontiers of sizing (prfaas_plan.sizing.pareto) and the sizing page (prfaas_plan.report.sizing_page).

The ``pareto`` flag is checked against a brute-force dominance search written here, on random
frames and on real frontiers; the frontiers are monotone where buying for a looser SLO or a lower
rate can reuse the tighter plan; serial and dask give the same frame; an infeasible point is a
row, not an exception; the page carries the candidates, the bill of materials and the frontier
charts, escapes every user string and loads nothing from the network.
"""

from __future__ import annotations

import html
import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prfaas_plan.errors import InvalidInput
from prfaas_plan.sizing.pareto import pareto_flags


def brute_force_pareto(df: pd.DataFrame, minimize: list[str], maximize: list[str]) -> list[bool]:
    """Row by row: feasible, finite, and no other feasible finite row of its series is no worse in
    every objective and strictly better in one."""
    def key(r):
        return [r[c] for c in minimize] + [-r[c] for c in maximize]

    rows = df.to_dict("records")
    ok = [r["feasible"] and all(np.isfinite(v) for v in key(r)) for r in rows]
    out = []
    for i, r in enumerate(rows):
        dominated = any(ok[j] and s["series"] == r["series"] and all(a <= b for a, b in zip(key(s), key(r)))
                        and any(a < b for a, b in zip(key(s), key(r))) for j, s in enumerate(rows))
        out.append(bool(ok[i] and not dominated))
    return out


_value = st.one_of(st.integers(0, 4).map(float), st.just(float("nan")))  # few values: many ties


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["winner", "prfaas-pd"]), st.booleans(), _value, _value), max_size=12))
def test_pareto_flags_agree_with_brute_force_on_random_frames(rows):
    df = pd.DataFrame(rows, columns=["series", "feasible", "usd_per_hour", "lambda_max_rps"])
    for lo, hi in ((["usd_per_hour"], ["lambda_max_rps"]), (["usd_per_hour", "lambda_max_rps"], [])):
        assert pareto_flags(df, lo, hi).tolist() == brute_force_pareto(df, lo, hi)


def test_pareto_flags_need_an_objective():
    with pytest.raises(InvalidInput, match="at least one column"):
        pareto_flags(pd.DataFrame({"series": [], "feasible": []}))


# ----------------------------------------------------------------------------- the page
PAYLOAD = '</script><script>window.__pwned=1</script>"\'><img id=pwned src=x onerror=window.__pwned=2><!--&amp;'


def hand_result(tag: str = ""):
    """A SizingResult built by hand from the contract's dataclasses (``tag`` goes into every user string)."""
    from prfaas_plan.sizing.result import SizedPlan, SizedPool, SizingResult, SizingSLO
    from prfaas_plan.sizing.tiers import LinkTier

    link = LinkTier("line-100g" + tag, 100.0, usd_per_month=16425.0)
    common = dict(target_rps=2.0, energy_kwh_per_million_tokens=0.5, tokens_per_request=30000.0)
    pd_plan = SizedPlan("prfaas-pd", "PrfaaS-PD h200 -> h20" + tag, (
        SizedPool("prfaas_prefill", "prfaas", "h200" + tag, 8, "tp8", 4),
        SizedPool("local_prefill", "local", "h20", 8, "tp8", 2),
        SizedPool("local_decode", "local", "h20", 8, "dp8-ep8", 6)), link, 19400.0, lambda_max_rps=2.4,
        ttft_quantile_s=1.8, tpot_s=0.03, gpu_usd_per_hour=300.0, link_usd_per_hour=22.5, energy_usd_per_hour=20.0,
        binding="decode", feasible=True, egress_gbps=40.0, **common)
    homo = SizedPlan("homogeneous-pd", "Homogeneous PD h20", (
        SizedPool("local_prefill", "local", "h20", 8, "tp8", 8), SizedPool("local_decode", "local", "h20", 8, "tp8", 6)),
        None, None, lambda_max_rps=2.1, ttft_quantile_s=1.5, tpot_s=0.03, gpu_usd_per_hour=330.0,
        link_usd_per_hour=0.0, energy_usd_per_hour=22.0, binding="prefill", feasible=True, **common)
    colo = SizedPlan("colocated", "Colocated a100-80g", (SizedPool("colocated", "local", "a100-80g", 8, "tp8", 0),),
                     None, None, lambda_max_rps=0.0, ttft_quantile_s=None, tpot_s=None, gpu_usd_per_hour=0.0,
                     link_usd_per_hour=0.0, energy_usd_per_hour=0.0, binding="memory", feasible=False,
                     reason="memory: the weights do not fit" + tag, **common)
    return SizingResult(2.0, SizingSLO(ttft_s=2.0), pd_plan, (pd_plan, homo, colo), 3, "the cap moved < 1%" + tag)


def _tables(page: str) -> set[str]:
    return set(re.findall(r'<table data-table="([^"]+)"', page))


def test_page_has_the_tables_and_charts_and_loads_nothing_remote(tmp_path, ttft_frontier, rate_frontier):
    from prfaas_plan.report.sizing_page import build_sizing_report, sizing_page

    res = hand_result()
    frontiers = {"ttft": ttft_frontier, "rate": rate_frontier}
    path = sizing_page(res, frontiers, tmp_path / "s.html")
    page = path.read_text(encoding="utf-8")
    assert {"candidates", "bill-of-materials", "cost", "equal-cost", "frontier-ttft", "frontier-rate"} <= _tables(page)
    charts = re.findall(r'<div class="chart" data-chart="([^"]+)"', page)
    assert charts == ["frontier-ttft-usd_per_hour", "frontier-rate-usd_per_hour", "frontier-rate-usd_per_million_tokens"]
    assert f'data-chart-count="{len(charts)}"' in page
    # the winner's row is highlighted and carries its exact $/hour
    rows = re.findall(r'<tr data-row="([^"]+)"( class="hl")?>(.*?)</tr>', page)
    cand = [r for r in rows if r[0] in {html.escape(c.label) for c in res.candidates}]
    assert len(cand) == len(res.candidates) and [r[0] for r in cand if r[1]] == [html.escape(res.winner.label)]
    assert f'data-col="usd_per_hour" data-value="{res.winner.usd_per_hour!r}"' in next(r[2] for r in cand if r[1])
    # the frontier's numbers are the frame's, exactly
    win = _winners(ttft_frontier)
    numbers = re.search(r'<table data-table="frontier-ttft">(.*?)</table>', page, re.S).group(1)
    shown = re.findall(r'data-col="usd_per_hour" data-value="([^"]*)"', numbers)
    assert shown == [repr(float(v)) for v in win["usd_per_hour"]]
    # an infeasible candidate has no price
    colo = next(r for r in cand if r[0].startswith("Colocated"))[2]
    assert re.search(r'data-col="usd_per_hour" data-value="nan">–<', colo)
    # the bill of materials lists every pool of the winner
    bom = re.search(r'<table data-table="bill-of-materials">(.*?)</table>', page, re.S).group(1)
    assert re.findall(r'data-col="instances" data-value="(\d+)"', bom) == [str(p.instances) for p in res.winner.pools]
    # offline: no script or resource from the network, and the CSP forbids fetches
    assert not re.search(r"<script[^>]+src=", page) and not re.search(r"""(?:src|href)\s*=\s*["']?https?:""", page)
    assert "default-src 'none'" in page and page.count("vegaEmbed(el, spec") == 1
    for f in build_sizing_report(res, frontiers).figures:  # pages skip altair's validation; it runs here
        assert f.spec(validate=True) == f.spec(), f.name


def test_a_frontier_without_a_feasible_point_says_so_in_place_of_its_chart(tmp_path, ttft_frontier, rate_frontier):
    from prfaas_plan.report.sizing_page import sizing_page

    nowhere = ttft_frontier.assign(feasible=False, pareto=False, reason="every point infeasible (test)")
    page = sizing_page(hand_result(), {"ttft": nowhere, "rate": rate_frontier}, tmp_path / "s.html").read_text("utf-8")
    charts = re.findall(r'<div class="chart" data-chart="([^"]+)"', page)
    assert charts == ["frontier-rate-usd_per_hour", "frontier-rate-usd_per_million_tokens"]
    assert page.count("No point of this frontier has a feasible plan to draw.") == 1
    assert {"frontier-ttft", "infeasible-ttft", "frontier-rate"} <= _tables(page)


def test_page_escapes_user_strings(tmp_path):
    from prfaas_plan.report.sizing_page import sizing_page

    page = sizing_page(hand_result(PAYLOAD), None, tmp_path / "x.html").read_text(encoding="utf-8")
    for piece in ("<img id=pwned", "<script>window.__pwned", "<!--&amp;"):
        assert piece not in page
    assert "PrfaaS-PD h200 -&gt; h20&lt;/script&gt;" in page  # shown as text


def test_page_refuses_a_frame_that_is_no_frontier(tmp_path):
    from prfaas_plan.report.sizing_page import sizing_page

    with pytest.raises(InvalidInput, match=r"frontiers\['x'\]: not a frontier frame"):
        sizing_page(hand_result(), {"x": pd.DataFrame({"a": [1]})}, tmp_path / "x.html")
    assert not (tmp_path / "x.html").exists()


# ----------------------------------------------------------------------------- frontiers of real sizings
TARGET_RPS = 1.0
TTFT_SLOS_S = (0.01, 6.0, 20.0)
"""P90 TTFT SLOs; the first is below the bare prefill time of the longest request (infeasible)."""
RATES_RPS = (0.5, 1.0, 2.0)
RATE_SLO_S = 10.0


def _size_kwargs() -> dict:
    """A small grid: two GPU types, two leased lines, few instances, 16 length buckets."""
    from prfaas_plan.sizing.tiers import load_link_tiers

    tiers = {t.id: t for t in load_link_tiers()}
    return {"gpus": ("h200", "h20"), "link_tiers": (tiers["line-10g"], tiers["line-100g"]),
            "max_instances_per_role": 16, "n_buckets": 16}


@pytest.fixture(scope="module")
def case():
    import prfaas_plan as pp

    return pp.load_scenario("paper-case-study")


@pytest.fixture(scope="module")
def ttft_frontier(case):
    from prfaas_plan.sizing.pareto import frontier_cost_vs_ttft

    return frontier_cost_vs_ttft(case, TARGET_RPS, TTFT_SLOS_S, progress=False, **_size_kwargs())


@pytest.fixture(scope="module")
def rate_frontier(case):
    from prfaas_plan.sizing.pareto import frontier_cost_vs_rate
    from prfaas_plan.sizing.result import SizingSLO

    return frontier_cost_vs_rate(case, RATES_RPS, SizingSLO(ttft_s=RATE_SLO_S), progress=False, **_size_kwargs())


def _winners(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["series"] == "winner"].reset_index(drop=True)


def test_an_infeasible_slo_is_a_row_and_the_other_points_are_sized(ttft_frontier):
    w = _winners(ttft_frontier)
    assert w["ttft_slo_s"].tolist() == list(TTFT_SLOS_S)
    assert not w["feasible"][0] and "ttft" in w["reason"][0].lower() and not w["pareto"][0]
    assert w["binding"][0] == "ttft_p90"  # the constraint the message names
    assert w["feasible"][1:].all() and (w["usd_per_hour"][1:] > 0).all()


def test_cost_does_not_rise_as_the_ttft_slo_relaxes(ttft_frontier):
    """A plan meeting a tighter SLO meets a looser one, so the cheapest can only get cheaper."""
    for series, g in ttft_frontier.groupby("series"):
        ok = g.sort_values("ttft_slo_s")["feasible"].to_numpy()
        assert (np.diff(ok.astype(int)) >= 0).all(), f"{series}: feasible, then infeasible under a looser SLO"
        cost = g[g["feasible"]].sort_values("ttft_slo_s")["usd_per_hour"].to_numpy()
        assert (np.diff(cost) <= 1e-9 * cost[:-1]).all(), (series, cost)
        achieved = g[g["feasible"]]
        assert (achieved["ttft_quantile_s"] <= achieved["ttft_slo_s"] * (1 + 1e-9)).all(), series


def test_cost_does_not_fall_as_the_target_rate_grows(rate_frontier):
    for series, g in rate_frontier.groupby("series"):
        g = g[g["feasible"]].sort_values("target_rps")
        cost = g["usd_per_hour"].to_numpy()
        assert (np.diff(cost) >= -1e-9 * cost[:-1]).all(), (series, cost)
        assert (g["lambda_max_rps"] >= g["target_rps"] * (1 - 1e-9)).all(), series
    assert len(_winners(rate_frontier)) == len(RATES_RPS) and _winners(rate_frontier)["feasible"].all()


def test_the_winner_is_the_cheapest_kind_at_each_point(ttft_frontier, rate_frontier):
    for df in (ttft_frontier, rate_frontier):
        for point, g in df[df["feasible"]].groupby("point"):
            kinds = g[g["series"] != "winner"]
            win = g[g["series"] == "winner"].iloc[0]
            assert win["usd_per_hour"] == kinds["usd_per_hour"].min(), point
            assert win["kind"] in set(kinds["kind"])


def test_pareto_flag_agrees_with_brute_force_on_the_frontiers(ttft_frontier, rate_frontier):
    assert ttft_frontier["pareto"].tolist() == brute_force_pareto(ttft_frontier, ["usd_per_hour", "ttft_quantile_s"], [])
    assert rate_frontier["pareto"].tolist() == brute_force_pareto(rate_frontier, ["usd_per_hour"], ["lambda_max_rps"])
    assert _winners(ttft_frontier)["pareto"].any() and _winners(rate_frontier)["pareto"].all()


def test_the_serial_executor_starts_no_cluster(case, monkeypatch):
    import prfaas_plan.sweeps.executors as executors
    from prfaas_plan.sizing.pareto import frontier_cost_vs_rate

    def no_cluster(*args, **kwargs):
        raise AssertionError("a serial frontier asked for a dask client")

    monkeypatch.setattr(executors, "dask_client", no_cluster)
    df = frontier_cost_vs_rate(case, [TARGET_RPS], executor="serial", progress=False, **_size_kwargs())
    assert df[df.series == "winner"].feasible.tolist() == [True]


def test_dask_gives_the_serial_frame(case, ttft_frontier):
    """The 3-point TTFT frontier (its first point infeasible) on a LocalCluster: every point crosses a process
    boundary (one worker process keeps the test short; the benchmark runs two)."""
    pytest.importorskip("dask.distributed")
    from dask.distributed import Client, LocalCluster, get_task_stream

    from prfaas_plan.sizing.pareto import frontier_cost_vs_ttft

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client, get_task_stream(client) as stream:
        df = frontier_cost_vs_ttft(case, TARGET_RPS, TTFT_SLOS_S, executor="dask", scheduler=client, progress=False,
                                   **_size_kwargs())
    pd.testing.assert_frame_equal(df, ttft_frontier)
    assert [str(t["key"]).split("-")[0] for t in stream.data] == ["size_points"]  # one task, on the worker


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"executor": "local"}, "--executor: 'local' is not an executor; use serial, dask"),
    ({"workers": 0}, "--workers: give at least 1"),
    ({"scheduler": "tcp://127.0.0.1:1"}, "--scheduler: only with --executor dask"),
    ({"rates": []}, "rates_rps: give at least one value"),
    ({"rates": [1.0, -2.0]}, "rates_rps: -2.0 is not a positive number of requests/s"),
])
def test_bad_frontier_input_fails_before_any_point_runs(case, kwargs, needle, monkeypatch):
    import prfaas_plan.sizing
    from prfaas_plan.sizing.pareto import frontier_cost_vs_rate

    monkeypatch.setattr(prfaas_plan.sizing, "size", lambda *a, **k: pytest.fail("a point ran"))
    rates = kwargs.pop("rates", [1.0])
    with pytest.raises(InvalidInput, match=re.escape(needle)):
        frontier_cost_vs_rate(case, rates, **kwargs)
