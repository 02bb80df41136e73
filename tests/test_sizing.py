"""Sizing (prfaas_plan.sizing): the cheapest plan for a target rate, checked against an exhaustive
search that judges every instance count and link tier with the planner's own fixed-count LP;
the case study at the fixed plan's Lambda_max; the kinds of candidate; bad input in one line.

The exhaustive search sorts every (PrfaaS type, local type, instance counts, tier) of a small grid
by $/hour (known before any solve: the tiers are fixed-price lines and energy is at TDP) and
walks it from the cheapest, so the first feasible one is the grid's optimum.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

import prfaas_plan as pp
from prfaas_plan.errors import Infeasible, InvalidInput
from prfaas_plan.layout import Layout
from prfaas_plan.planner import Pools, fixed_count_lp
from prfaas_plan.sizing import SizingSLO, load_link_tiers, size, sizing_context
from prfaas_plan.sizing.colocated import REL_TOL
from prfaas_plan.sizing.pools import layout_label, parse_layout, pool_layout, pool_profile
from prfaas_plan.sizing.search import check_counts, combination_inputs, instance_usd_per_hour
from prfaas_plan.sizing.tiers import HOURS_PER_MONTH

N_BUCKETS = 16
MAX_N = 8
GPUS = ("h200", "h20")


@pytest.fixture(scope="module")
def sc():
    return pp.load_scenario("paper-case-study")


@pytest.fixture(scope="module")
def lines():
    """Three fixed-price lines of the bundled file (10, 30 and 100 Gbps)."""
    return tuple(t for t in load_link_tiers() if t.usd_per_gb == 0)[:3]


def exhaustive(sc, target_rps, slo, tiers):
    """The cheapest PrfaaS-PD plan of the grid: the $/hour and its (remote, local, n_r, n_p, n_d, tier)."""
    from prfaas_plan.energy import default_sites

    ctx = sizing_context(sc, target_rps, slo, tiers, default_sites(), MAX_N, N_BUCKETS)
    profs = {g: profile(sc, ctx, g) for g in GPUS}
    grid = []
    for r, lo in itertools.product(GPUS, GPUS):
        cr, cl = (instance_usd_per_hour(profs[g], ctx.sites[s]) for g, s in ((r, "prfaas"), (lo, "local")))
        for n_r, n_p, n_d, tier in itertools.product(range(MAX_N + 1), range(MAX_N + 1), range(1, MAX_N + 1),
                                                     (None, *tiers)):
            if (tier is None) != (n_r == 0):
                continue
            cost = n_r * cr + (n_p + n_d) * cl + (tier.fixed_usd_per_hour if tier else 0.0)
            grid.append((cost, r, lo, n_r, n_p, n_d, tier))
    grid.sort(key=lambda x: x[0])
    for cost, r, lo, n_r, n_p, n_d, tier in grid:
        inp, b = combination_inputs(ctx, profs[r], profs[lo], profs[lo], tier)
        lam = fixed_count_lp(inp, b, Pools(n_r, n_p + n_d, allow_remote=n_r > 0), n_p).lambda_rps
        if lam < target_rps * (1 - 1e-9):
            continue
        if slo.ttft_s is None or check_counts(ctx, profs[r], profs[lo], profs[lo], n_r, n_p, n_d, tier):
            return cost, (r, lo, n_r, n_p, n_d, tier), (ctx, profs)
    return math.inf, None, (ctx, profs)


def profile(sc, ctx, gpu, pool=None):
    """``gpu``'s pool profile at the context's bucket lengths, laid out as the scenario's ``pool`` (default local)."""
    return pool_profile(sc, gpu, pool_layout(pool or sc.spec.local, sc.model), ctx.b.tokens)


def counts(plan):
    by = {p.role: p for p in plan.pools}
    return tuple(by[k].instances if k in by else 0 for k in ("prfaas_prefill", "local_prefill", "local_decode"))


@pytest.mark.parametrize("target_rps, ttft_s", [(1.6, None), (1.0, 7.0), (1.4, 5.0), (2.0, 7.0)])
def test_no_cheaper_plan_in_an_exhaustive_search(sc, lines, target_rps, ttft_s):
    slo = SizingSLO(ttft_s=ttft_s, tpot_s=sc.spec.slo.tpot_s)
    best, where, (ctx, profs) = exhaustive(sc, target_rps, slo, lines)
    res = size(sc, target_rps, slo, gpus=GPUS, link_tiers=lines, max_instances_per_role=MAX_N, n_buckets=N_BUCKETS)
    pd = next(c for c in res.candidates if c.kind == "prfaas-pd")
    assert where is not None and pd.feasible
    assert pd.usd_per_hour <= best * (1 + 1e-9), (pd.bill_of_materials(), where)
    # and what sizing bought passes the exhaustive search's own judgement, so it is not cheaper by cheating
    n_r, n_p, n_d = counts(pd)
    r = next(p.gpu for p in pd.pools if p.role == "prfaas_prefill") if n_r else "h200"
    lo = next(p.gpu for p in pd.pools if p.role == "local_decode")
    inp, b = combination_inputs(ctx, profs[r], profs[lo], profs[lo], pd.link)
    lp_rps = fixed_count_lp(inp, b, Pools(n_r, n_p + n_d, allow_remote=n_r > 0), n_p).lambda_rps
    assert lp_rps >= target_rps * (1 - 1e-9)
    # what it can serve under its own routing: every stage it uses counted, so no more than the LP's best routing
    assert target_rps * (1 - 1e-9) <= pd.lambda_max_rps <= lp_rps * (1 + 1e-9)
    if ttft_s is not None:
        assert check_counts(ctx, profs[r], profs[lo], profs[lo], n_r, n_p, n_d, pd.link)
        assert pd.ttft_quantile_s <= ttft_s
    assert pd.usd_per_hour >= best * (1 - 1e-9)  # the search's optimum is the true one: equal


def test_a_plan_bound_by_local_prefill_serves_what_its_local_prefill_sustains(sc, lines):
    """All-H20 PrfaaS-PD at 2.5 req/s: 8 local prefill instances (the limit) bind, so the plan serves
    the rate those sustain under its routing: at least the target, at most the fixed-count LP's best
    routing of the same instances (measured 2.646 req/s)."""
    from prfaas_plan.energy import default_sites

    slo = SizingSLO(ttft_s=None, tpot_s=sc.spec.slo.tpot_s)
    res = size(sc, 2.5, slo, gpus=("h20",), link_tiers=lines, max_instances_per_role=MAX_N, n_buckets=N_BUCKETS)
    pd = next(c for c in res.candidates if c.kind == "prfaas-pd")
    n_r, n_p, n_d = counts(pd)
    assert pd.feasible and pd.binding == "local prefill" and n_p == MAX_N
    ctx = sizing_context(sc, 2.5, slo, lines, default_sites(), MAX_N, N_BUCKETS)
    h20 = profile(sc, ctx, "h20")
    inp, b = combination_inputs(ctx, h20, h20, h20, pd.link)
    lp_rps = fixed_count_lp(inp, b, Pools(n_r, n_p + n_d), n_p).lambda_rps
    assert 2.5 <= pd.lambda_max_rps <= lp_rps * (1 + 1e-9)


def test_case_study_at_lambda_max_costs_no_more_than_the_fixed_plan(sc):
    fixed = pp.plan(sc)
    lam = fixed.lambda_max_rps
    res = size(sc, lam)
    from prfaas_plan.energy import default_sites

    tiers = {t.id: t for t in load_link_tiers()}
    sites = default_sites()
    ctx = sizing_context(sc, lam, res.slo, tuple(tiers.values()), sites, 64, 128)
    h200 = profile(sc, ctx, "h200", sc.spec.prfaas)
    h20 = profile(sc, ctx, "h20")
    # the fixed plan's bill, priced the same way: 4 x 8xH200 + 8 x 8xH20 + the 100 Gbps line
    n = fixed.plan.instances
    fixed_usd = (n["prfaas"] * instance_usd_per_hour(h200, sites["prfaas"])
                 + (n["pd_p"] + n["pd_d"]) * instance_usd_per_hour(h20, sites["local"]) + tiers["line-100g"].fixed_usd_per_hour)
    assert (n["prfaas"], n["pd_p"] + n["pd_d"]) == (4, 8)
    assert res.winner.feasible and res.winner.usd_per_hour <= fixed_usd * (1 + 1e-9)
    assert res.winner.lambda_max_rps >= lam * (1 - 1e-6)
    assert res.winner.gpu_usd_per_hour <= fixed.plan.cost_usd_per_hour + 1e-9


def test_candidates_cover_every_kind_and_the_table_compares_them(sc):
    res = size(sc, 1.5, gpus=GPUS, n_buckets=N_BUCKETS)
    kinds = [c.kind for c in res.candidates]
    assert kinds.count("prfaas-pd") == 1 and kinds.count("naive-heterogeneous") == 1
    assert kinds.count("homogeneous-pd") == 2 and kinds.count("colocated") == 2
    df = res.table()
    assert len(df) == len(res.candidates)
    win = df[df["winner"]]
    assert len(win) == 1 and win["margin_vs_winner"].iloc[0] == 0.0
    assert (df["margin_vs_winner"].dropna() >= 0).all()
    assert res.winner.usd_per_hour == min(c.usd_per_hour for c in res.candidates if c.feasible)
    eq = res.equal_cost_rps()
    own = eq[eq["label"] == res.winner.label]
    assert own["rps_at_equal_cost"].iloc[0] == pytest.approx(1.5) and (eq["vs_winner"] <= 1 + 1e-12).all()
    for c in res.candidates:
        if c.feasible:
            assert c.lambda_max_rps >= 1.5 * (1 - 1e-9)
            assert c.usd_per_hour == pytest.approx(c.gpu_usd_per_hour + c.link_usd_per_hour + c.energy_usd_per_hour)
            row = eq[eq["label"] == c.label]
            assert row["rps_at_equal_cost"].iloc[0] == pytest.approx(1.5 * res.winner.usd_per_hour / c.usd_per_hour)


def test_naive_offloads_everything_and_homogeneous_nothing(sc):
    res = size(sc, 1.5, gpus=GPUS, n_buckets=N_BUCKETS)
    naive = next(c for c in res.candidates if c.kind == "naive-heterogeneous")
    homo = [c for c in res.candidates if c.kind == "homogeneous-pd"]
    assert naive.threshold_tokens == 0.0 and counts(naive)[1] == 0 and naive.link is not None
    assert all(c.link is None and counts(c)[0] == 0 and c.egress_gbps == 0 for c in homo)
    # naive is a PrfaaS-PD plan, so PrfaaS-PD is never dearer
    pd = next(c for c in res.candidates if c.kind == "prfaas-pd")
    assert pd.usd_per_hour <= naive.usd_per_hour * (1 + 1e-9)


def test_colocated_buys_whole_instances_at_the_rate_the_serving_model_gives(sc):
    from prfaas_plan.hardware import instance
    from prfaas_plan.serving import colocated_open_loop

    res = size(sc, 1.5, gpus=("h200",), n_buckets=N_BUCKETS)
    colo = next(c for c in res.candidates if c.kind == "colocated")
    (pool,) = colo.pools
    per_instance = colo.lambda_max_rps / pool.instances
    assert pool.instances == math.ceil(1.5 / per_instance)
    from prfaas_plan.planner import plan_inputs

    inp = plan_inputs(sc)
    isl, osl = round(inp.mean_tokens), round(inp.output_tokens)
    inst = instance("h200", 8, engine=sc.engine)
    at_rate = colocated_open_loop(sc.model, inst, isl, osl, per_instance, sc.cache)  # the rate it was sized at
    bought = colocated_open_loop(sc.model, inst, isl, osl, 1.5 / pool.instances, sc.cache)  # the load it carries
    assert at_rate.tpot_s <= sc.spec.slo.tpot_s and colo.tpot_s == pytest.approx(bought.tpot_s)
    try:  # one step of the bisection more is past the model's ceiling or over the TPOT SLO
        above = colocated_open_loop(sc.model, inst, isl, osl, per_instance * (1 + 2 * REL_TOL), sc.cache)
    except InvalidInput:
        pass
    else:
        assert above.tpot_s > sc.spec.slo.tpot_s
    assert colo.gpu_usd_per_hour == pytest.approx(pool.instances * 8 * pp.load_gpu("h200").price_usd_per_gpu_hour)


def test_tpot_slo_moves_decode_capacity(sc):
    loose = size(sc, 1.5, SizingSLO(tpot_s=0.05), gpus=("h20",), n_buckets=N_BUCKETS)
    tight = size(sc, 1.5, SizingSLO(tpot_s=0.025), gpus=("h20",), n_buckets=N_BUCKETS)
    homo = [next(c for c in r.candidates if c.kind == "homogeneous-pd") for r in (loose, tight)]
    assert counts(homo[0])[2] <= counts(homo[1])[2]
    assert homo[0].tpot_s <= 0.05 and homo[1].tpot_s <= 0.025


def test_staging_memory_buys_the_decode_that_covers_the_target_at_its_held_memory(sc):
    """With ``decode.staging_memory`` on, every candidate keeps at least the decode instances it has
    with it off, and a homogeneous PD plan (nothing offloaded) has the fewest decode instances whose
    staged BS_max covers the target: the held bytes by Little's law over the local path
    (planner.staging's hold, handoff.held_bytes), BS_max = Staging.batch_max_with(held / n)."""
    from prfaas_plan.energy import default_sites
    from prfaas_plan.handoff import hold_s

    on = sc.with_updates(**{"decode.staging_memory": True})
    target = 1.6
    off_res, on_res = (size(x, target, gpus=GPUS, n_buckets=N_BUCKETS) for x in (sc, on))
    raised = 0
    for off_c, on_c in zip(off_res.candidates, on_res.candidates):
        assert on_c.kind == off_c.kind and on_c.feasible
        if on_c.label == off_c.label and on_c.kind != "colocated":
            assert counts(on_c)[2] >= counts(off_c)[2], on_c.label
            raised += counts(on_c)[2] > counts(off_c)[2]
        assert on_c.lambda_max_rps >= target * (1 - 1e-9)
    ctx = sizing_context(on, target, on_res.slo, load_link_tiers(), default_sites(), 64, N_BUCKETS)
    for g in GPUS:
        plan = next(c for c in on_res.candidates if c.label == f"homogeneous PD {g}")
        prof = pool_profile(on, g, pool_layout(on.spec.local, on.model), ctx.b.tokens)
        st = prof.staging
        hold = hold_s(st.reserve_at, False, prof.prefill_s, 0.0, on.model.layers.count)
        held = target * float(np.sum(ctx.b.probs * hold * st.staged_bytes(ctx.b.tokens)))
        assert held > 0
        rps = {n: n * st.batch_max_with(held / n) / (prof.decode_step_s * ctx.inp.output_tokens) for n in range(1, 65)}
        n_d = counts(plan)[2]
        assert rps[n_d] >= target * (1 - 1e-12)
        assert n_d == 1 or rps[n_d - 1] < target or n_d == math.ceil(target / prof.decode_rps * (1 - 1e-12))
    assert raised >= 1  # staging moves the case study's decode


def test_a_shared_setup_sizes_as_a_fresh_one_and_reuses_its_solves(sc):
    """Points sized on one prepared setup (a frontier's way) give each fresh ``size``'s table, and a
    point sized again computes nothing new (every solve and quantile comes from the memo)."""
    from dataclasses import replace

    from prfaas_plan.sizing import prepare, size_prepared

    setup = prepare(sc, gpus=GPUS, n_buckets=N_BUCKETS)
    tables = {}
    for target, ttft_s in ((1.4, None), (1.0, 7.0), (1.4, 5.0)):
        slo = replace(setup.slo, ttft_s=ttft_s)
        tables[target, ttft_s] = size_prepared(setup, target, slo).table()
        pd.testing.assert_frame_equal(tables[target, ttft_s], size(sc, target, slo, gpus=GPUS,
                                                                   n_buckets=N_BUCKETS).table())
    known = len(setup.ctx.memo)
    again = size_prepared(setup, 1.4, replace(setup.slo, ttft_s=5.0)).table()
    assert len(setup.ctx.memo) == known > 0
    pd.testing.assert_frame_equal(again, tables[1.4, 5.0])
    with pytest.raises(InvalidInput, match="slo.tpot_s: 0.01 is not the"):
        size_prepared(setup, 1.4, replace(setup.slo, tpot_s=0.01))


def test_infeasible_slo_names_the_constraint(sc):
    with pytest.raises(Infeasible, match=r"ttft_p90: P90 TTFT is [\d.]+ s even at vanishing load"):
        size(sc, 1.0, SizingSLO(ttft_s=0.5), gpus=GPUS, n_buckets=N_BUCKETS)
    with pytest.raises(Infeasible, match="instances"):
        size(sc, 50.0, gpus=GPUS, max_instances_per_role=2, n_buckets=N_BUCKETS)


def test_no_gpu_holds_the_weights(sc):
    with pytest.raises(Infeasible, match=r"binding constraint: memory: kimi-linear-1t's weights .* do not fit 8xl40s"):
        size(sc, 1.0, gpus=("l40s",), n_buckets=N_BUCKETS)


def test_gpus_the_model_cannot_fit_are_skipped_with_the_reason(sc):
    res = size(sc, 1.0, gpus=("h20", "l40s"), n_buckets=N_BUCKETS)
    assert any(s.startswith("8xl40s tp8: memory:") for s in res.skipped)
    assert all("l40s" not in p.gpu for c in res.candidates if c.feasible for p in c.pools)


@pytest.mark.parametrize("label", ["tp8", "tp8-ep8", "dp8-ep8", "tp16", "tp8-dcp8", "dp4", "dp8-atp2-ep8"])
def test_layout_labels_round_trip(label):
    assert layout_label(parse_layout(label)) == label


def test_attention_tp_layouts_keep_their_own_label():
    """A TP x DP layout's label carries its TP group, parses back to it, and differs from pure DP's."""
    tp_dp, dp = Layout(8, "dp", "ep", 1, 2), Layout(8, "dp", "ep")
    assert layout_label(tp_dp) == "dp8-atp2-ep8" and layout_label(dp) == "dp8-ep8"
    assert parse_layout(layout_label(tp_dp)) == tp_dp
    assert layout_label(parse_layout(layout_label(tp_dp))) == layout_label(tp_dp)
    assert layout_label(tp_dp) != layout_label(dp)


@pytest.mark.parametrize("bad, why", [("tp", "is not a layout"), ("ep8", "is not a layout"), ("tp8-ep4", "is not a layout"),
                                      ("tp0", "has no GPUs; give at least 1"), ("8", "is not a layout"),
                                      ("tp8-atp2", "is not a layout"), ("dp8-atp3", "attention_tp")])
def test_bad_layout_label(bad, why):
    with pytest.raises(InvalidInput, match=f"^--layouts: '{bad}'.*{why}"):
        parse_layout(bad)


def test_a_tp_by_dp_layout_is_sized_as_itself(sc):
    """The pool of a ``dp8-atp2-ep8`` candidate is four attention replicas of TP 2, not eight of TP 1:
    the variant scenario the sizing builds for it keeps the TP group (and so its cache per GPU)."""
    from prfaas_plan.sizing.pools import _pool_update

    layout = parse_layout("dp8-atp2-ep8")
    variant = sc.with_updates(prfaas=_pool_update(sc, "h200", layout))
    assert variant.prfaas_instance.layout == layout and variant.prfaas_instance.layout.attention_tp == 2


def test_link_tiers_file(tmp_path: Path):
    tiers = load_link_tiers()
    assert {"line-10g", "line-100g", "line-400g", "vpc-egress"} <= {t.id for t in tiers}
    t100 = next(t for t in tiers if t.id == "line-100g")
    assert t100.fixed_usd_per_hour == pytest.approx(t100.usd_per_month / HOURS_PER_MONTH)
    vpc = next(t for t in tiers if t.id == "vpc-egress")
    # 10 Gbps for an hour is 4,500 GB
    assert vpc.usd_per_hour(10.0) == pytest.approx(4500 * vpc.usd_per_gb)
    assert all(t.source.startswith("https://") for t in tiers)
    dup = tmp_path / "dup.yaml"
    dup.write_text("read: x\ntiers:\n  - {id: a, gbps: 1, source: 'https://x'}\n  - {id: a, gbps: 2, source: 'https://y'}\n")
    with pytest.raises(InvalidInput, match="--link-tiers.*unique"):
        load_link_tiers(dup)


def test_metered_egress_is_chosen_when_cheaper(sc):
    """A tiny rate ships little: metered egress costs less than any line's port, and is chosen."""
    tiers = load_link_tiers()
    res = size(sc, 0.05, gpus=("h200", "h20"), link_tiers=tiers, n_buckets=N_BUCKETS)
    pd = next(c for c in res.candidates if c.kind == "prfaas-pd")
    if pd.link is not None:
        cheapest = min((t for t in tiers if t.gbps * 0.9 >= pd.egress_gbps), key=lambda t: t.usd_per_hour(pd.egress_gbps))
        assert pd.link.usd_per_hour(pd.egress_gbps) == pytest.approx(cheapest.usd_per_hour(pd.egress_gbps))
        assert pd.link_usd_per_hour == pytest.approx(pd.link.usd_per_hour(pd.egress_gbps))


@pytest.mark.parametrize("target", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_target(sc, target):
    with pytest.raises(InvalidInput, match="--target-rps"):
        size(sc, target)


def test_unknown_gpu(sc):
    with pytest.raises(InvalidInput, match=r"--gpus: unknown GPU 'h2000'.*did you mean"):
        size(sc, 1.0, gpus=("h2000",))


# ----------------------------------------------------------------------------- the CLI
def _app():
    from prfaas_plan.cli.sizing import size as size_cmd

    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command()(size_cmd)
    app.command("noop")(lambda: None)  # two commands: typer keeps the command name
    return app


def cli(*args: str):
    """Run the command as the real CLI does: PlanError -> one line on stderr, exit 2."""
    from prfaas_plan.errors import PlanError

    runner = CliRunner()
    res = runner.invoke(_app(), ["size", *args], catch_exceptions=True)
    if isinstance(res.exception, PlanError):
        return 2, str(res.exception), res.stdout
    return res.exit_code, "", res.stdout


@pytest.mark.parametrize("args, needle", [
    (["--target-rps", "0"], "--target-rps"),
    (["--target-rps", "-2"], "--target-rps"),
    (["--target-rps", "1", "--gpus", "h2000"], "--gpus: unknown GPU"),
    (["--target-rps", "1", "--link-tiers", "no-such-file.yaml"], "--link-tiers"),
    (["--target-rps", "1", "--tpot-ms", "0"], "--tpot-ms"),
    (["--target-rps", "1", "--layouts", "tp8-ep3"], "--layouts"),
    (["--target-rps", "1", "--gpus", " , "], "--gpus: give at least one name, comma-separated (e.g. h200,h20)"),
    (["--target-rps", "1", "--layouts", ","], "--layouts: give at least one name, comma-separated"),
    (["--target-rps", "1", "--pareto", "0"], "--pareto: 0 points is out of range; give 1 to 200"),
])
def test_cli_bad_input_is_one_line(args, needle):
    code, err, _ = cli("paper-case-study", *args)
    assert code == 2 and needle in err and "\n" not in err


def test_cli_malformed_tier_file(tmp_path: Path):
    bad = tmp_path / "tiers.yaml"
    bad.write_text("read: x\ntiers:\n  - {id: a, gbps: -1, source: 'https://x'}\n")
    code, err, _ = cli("paper-case-study", "--target-rps", "1", "--link-tiers", str(bad))
    assert code == 2 and "--link-tiers" in err and "gbps" in err
    broken = tmp_path / "broken.yaml"
    broken.write_text("tiers: [\n")
    code, err, _ = cli("paper-case-study", "--target-rps", "1", "--link-tiers", str(broken))
    assert code == 2 and "malformed YAML" in err


def test_cli_json_and_out_file(tmp_path: Path):
    import json

    out = tmp_path / "size.json"
    code, err, stdout = cli("paper-case-study", "--target-rps", "1.5", "--gpus", "h200,h20", "--format", "json",
                            "--out", str(out))
    assert code == 0, err
    rows = json.loads(stdout)
    doc = json.loads(out.read_text())
    assert [r["label"] for r in rows] == [c["label"] for c in doc["candidates"]]
    assert doc["winner"]["label"] == rows[0]["label"] and doc["target_rps"] == 1.5
    assert np.isclose(doc["winner"]["usd_per_hour"], rows[0]["usd_per_hour"])


def test_cli_pareto_frontier_in_the_json(tmp_path: Path):
    import json

    out = tmp_path / "size.json"
    code, err, _ = cli("paper-case-study", "--target-rps", "1.5", "--pareto", "2", "--out", str(out), "--format", "csv")
    assert code == 0, err
    frontiers = json.loads(out.read_text())["frontiers"]
    assert list(frontiers) == ["rate"]  # no TTFT SLO, no TTFT frontier
    assert sorted({r["target_rps"] for r in frontiers["rate"]}) == pytest.approx([1.5 * 0.25, 1.5 * 4.0])
    code, err, _ = cli("paper-case-study", "--target-rps", "1.5", "--ttft-p90-s", "20", "--pareto", "2", "--out", str(out),
                       "--format", "csv")
    assert code == 0, err
    ttft = json.loads(out.read_text())["frontiers"]["ttft"]
    assert sorted({r["ttft_slo_s"] for r in ttft}) == pytest.approx([20 * 0.5, 20 * 2.0])


def test_the_decode_pool_is_the_cheapest_that_covers_the_target_whatever_the_order(sc, lines):
    """At 1.6 req/s: ceil(target / decode rate) instances of each type at its $/hour (rental and
    energy); the cheaper total wins in either order, and a type needing more instances than the
    limit is not a candidate."""
    from prfaas_plan.energy import default_sites
    from prfaas_plan.sizing.search import decode_pool

    slo = SizingSLO(ttft_s=None, tpot_s=sc.spec.slo.tpot_s)
    ctx = sizing_context(sc, 1.6, slo, lines, default_sites(), MAX_N, N_BUCKETS)
    profs = [profile(sc, ctx, g) for g in GPUS]
    need = [math.ceil(1.6 / p.decode_rps) for p in profs]
    usd = [n * instance_usd_per_hour(p, ctx.sites["local"]) for n, p in zip(need, profs)]
    cheapest = int(np.argmin(usd))
    assert usd[0] != usd[1]
    for order in (profs, profs[::-1]):
        prof, n = decode_pool(ctx, order)
        assert (prof.gpu.id, n) == (profs[cheapest].gpu.id, need[cheapest])
    tight = dataclasses.replace(ctx, max_instances=min(need) - 1)
    assert decode_pool(tight, profs) is None


def test_a_colocated_pool_that_misses_the_ttft_slo_at_any_rate_says_so(sc, lines):
    """A P90 TTFT SLO of 0.5 s: the 1T model's colocated instances miss it even at the lowest rate
    searched (1e-3 req/s), so no rate is sized (not 1,000 instances at that rate) and the reason
    names the TTFT SLO."""
    from prfaas_plan.energy import default_sites
    from prfaas_plan.sizing.colocated import size_colocated

    ctx = sizing_context(sc, 1.0, SizingSLO(ttft_s=0.5, tpot_s=sc.spec.slo.tpot_s), lines, default_sites(), MAX_N,
                         N_BUCKETS)
    for gpu in GPUS:
        colo = size_colocated(ctx, profile(sc, ctx, gpu))
        assert not colo.feasible and colo.binding == "ttft_p90"
        assert colo.reason == f"ttft_p90: no rate meets the SLOs on 8x{gpu} tp8"


def test_the_cost_milp_buys_one_link_not_two_that_add_up(sc, lines):
    """All-remote prefill of 5.5 req/s on up to 16 H200 instances ships 28.6 Gbps: more than the
    30 Gbps LAG carries at 90% efficiency (27), less than a 10 Gbps line and the LAG together (36,
    $9.00/h). A PrfaaS cluster has one link, so the MILP buys the 100 Gbps line ($22.50/h)."""
    from prfaas_plan.energy import default_sites
    from prfaas_plan.sizing.milp import Routing, solve_cost
    from prfaas_plan.sizing.search import problem

    slo = SizingSLO(ttft_s=None, tpot_s=sc.spec.slo.tpot_s)
    ctx = sizing_context(sc, 5.5, slo, lines, default_sites(), 16, N_BUCKETS)
    h200 = profile(sc, ctx, "h200", sc.spec.prfaas)
    sol = solve_cost(problem(ctx, h200, None), Routing(remote=True, local=False))
    assert 27.0 < sol.egress_gbps < 36.0
    assert sol.tier.id == "line-100g" and sol.link_usd_per_hour == pytest.approx(22.5)


def test_a_ttft_slo_that_rules_out_local_prefill_is_what_binds(sc, lines):
    """0.02 req/s under a 5 s P90 TTFT SLO, H200 PrfaaS and H20 local: H20's bare P90 prefill is
    over 5 s at any load (its longest buckets), H200's plus the transfer is not, so the joint loop
    drops the local path when its cap falls below CAP_FLOOR at once (0.02 req/s loads nothing) and
    buys one PrfaaS and one decode instance, everything offloaded (t = 0). At that rate no stage is
    busy: what binds is the TTFT SLO, and the plan says so (not "PrfaaS prefill")."""
    from prfaas_plan.energy import default_sites
    from prfaas_plan.sizing.search import ttft_floor_s

    slo = SizingSLO(ttft_s=5.0, tpot_s=sc.spec.slo.tpot_s)
    ctx = sizing_context(sc, 0.02, slo, lines, default_sites(), MAX_N, N_BUCKETS)
    h200, h20 = profile(sc, ctx, "h200"), profile(sc, ctx, "h20")
    assert ttft_floor_s(ctx, None, h20, h20) > 5.0 > ttft_floor_s(ctx, h200, None, h20)
    res = size(sc, 0.02, slo, gpus=GPUS, link_tiers=lines, max_instances_per_role=MAX_N, n_buckets=N_BUCKETS)
    pd = next(c for c in res.candidates if c.kind == "prfaas-pd")
    assert pd.feasible and counts(pd) == (1, 0, 1) and pd.threshold_tokens == 0.0
    assert pd.binding == "ttft_p90" and pd.ttft_quantile_s <= 5.0


def test_a_path_too_slow_at_any_load_ends_its_loop_at_the_cap_floor(sc, lines):
    """The all-local corner of H200 PrfaaS + H20 local at 0.2 req/s under a 7 s P90 SLO (64
    instances allowed): H20's P90 stays at its bare 10 s whatever its load, so the loop lowers the
    local cap by TIGHTEN per solve and stops, infeasible, once it would fall below CAP_FLOOR: within
    1 + ceil(log CAP_FLOOR / log TIGHTEN) solves, not by the instance limit or MAX_ITERATIONS."""
    from prfaas_plan.energy import default_sites
    from prfaas_plan.sizing.milp import Routing
    from prfaas_plan.sizing.search import CAP_FLOOR, TIGHTEN, _Combo, _loop, decode_pool, problem

    slo = SizingSLO(ttft_s=7.0, tpot_s=sc.spec.slo.tpot_s)
    ctx = sizing_context(sc, 0.2, slo, lines, default_sites(), 64, N_BUCKETS)
    h200, h20 = profile(sc, ctx, "h200"), profile(sc, ctx, "h20")
    combo = _Combo(problem(ctx, h200, h20), h200, h20, *decode_pool(ctx, [h20]))
    plan, solves = _loop(ctx, combo, Routing(remote=False, local=True), "prfaas-pd", "x")
    assert not plan.feasible and plan.binding == "ttft_p90"
    assert f"the local prefill cap fell below {CAP_FLOOR}" in plan.reason
    assert solves <= 1 + math.ceil(math.log(CAP_FLOOR) / math.log(TIGHTEN))


def test_staging_memory_that_needs_more_decode_than_the_limit_is_infeasible_by_decode(sc, lines):
    """Naive heterogeneous H200 -> H20 at 1.6 req/s: 3 H20 decode instances cover the target
    unstaged, but the staged KV of everything offloaded lowers BS_max so that 4 are needed. With 3
    allowed per role the combination is infeasible, bound by decode, and says staging is why; with 4
    it buys the 4."""
    from prfaas_plan.energy import default_sites
    from prfaas_plan.sizing.search import size_combination

    on = sc.with_updates(**{"decode.staging_memory": True})
    slo = SizingSLO(ttft_s=None, tpot_s=sc.spec.slo.tpot_s)
    sized = {}
    for x, n in ((sc, 3), (on, 3), (on, 4)):
        ctx = sizing_context(x, 1.6, slo, lines, default_sites(), n, N_BUCKETS)
        h200, h20 = profile(x, ctx, "h200", x.spec.prfaas), profile(x, ctx, "h20")
        sized[x is on, n] = size_combination(ctx, "naive-heterogeneous", "naive", h200, None, [h20])[0]
    assert sized[False, 3].feasible and counts(sized[False, 3])[2] == 3
    tight = sized[True, 3]
    assert not tight.feasible and tight.binding == "decode"
    assert tight.reason == "decode: with staging memory more than 3 decode instances are needed"
    assert sized[True, 4].feasible and counts(sized[True, 4])[2] == 4


def test_a_pool_that_cannot_decode_still_prefills_at_its_measured_profile():
    """Under a 1 ms TPOT SLO no 8xH200 instance decodes (even batch 1 is slower), but the case
    study's H200 pool still prefills, and at its measured profile: Table 5's 0.44, 0.72, 1.84 and
    7.40 s at 1K, 8K, 32K and 128K tokens (K = 1,024), not the kernel model's times."""
    sc = pp.load_scenario("paper-case-study").with_updates(**{"slo.tpot_s": 0.001})
    tokens = np.array([1024.0, 8192.0, 32768.0, 131072.0])
    h200 = pool_profile(sc, "h200", pool_layout(sc.spec.prfaas, sc.model), tokens)
    assert h200.decode_rps is None and h200.decode_problem.startswith("tpot: even batch 1 takes")
    assert h200.problem == ""
    np.testing.assert_allclose(h200.prefill_s, [0.44, 0.72, 1.84, 7.40], rtol=1e-12)
