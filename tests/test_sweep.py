"""Sweeps (prfaas_plan.sweeps): grid validation, executors agree, resume, failed cells, report, CLI.

The grids are small (exact mode with 16 length buckets: about 0.3 s a cell) so that the file
runs in well under a minute on two cores.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from prfaas_plan.cli import main
from prfaas_plan.errors import Infeasible, InvalidInput, PlanError
from prfaas_plan.report import sweep_report
from prfaas_plan.scenario import load_scenario
from prfaas_plan.sweeps import cells as cell_mod
from prfaas_plan.sweeps import expand_grid, read_results, read_sidecar, run_cell, sidecar_dir, summary_outputs, sweep

ROOT = Path(__file__).resolve().parents[1]

PLAN_GRID = {
    "name": "tiny",
    "scenario": "paper-case-study",
    "n_buckets": 16,
    "axes": {"link.gbps": [10, 100], "prfaas.gpus": [16, 32], "slo.ttft_s": [None, 1.0]},
}
"""8 plan cells; the 4 with a 1 s P90 TTFT SLO are infeasible (PlanError) and must be recorded."""

SIM_GRID = {
    "name": "tiny-sim",
    "scenario": "paper-case-study",
    "run": "simulate",
    "n_buckets": 16,
    "seeds": 2,
    "duration_s": 120,
    "axes": {"link.gbps": [100]},
}
"""1 cell x 2 seeds."""


@pytest.fixture(scope="module")
def local_tables():
    return {"plan": sweep(PLAN_GRID, executor="local", workers=2),
            "simulate": sweep(SIM_GRID, executor="local", workers=2)}


@pytest.fixture(scope="module")
def dask_tables():
    pytest.importorskip("dask.distributed")
    from dask.distributed import Client, LocalCluster

    # a dask sweep's own cluster (no scheduler), one named by its address, a cluster object and a client
    plan_table = sweep(PLAN_GRID, executor="dask", workers=2)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        one_cell = {**PLAN_GRID, "axes": {"link.gbps": [10]}}
        assert sweep(one_cell, executor="dask", scheduler=cluster)["lambda_max_rps"].tolist() == \
            sweep(one_cell, executor="dask", scheduler=client)["lambda_max_rps"].tolist()
        return {"plan": plan_table, "simulate": sweep(SIM_GRID, executor="dask", scheduler=cluster.scheduler_address)}


# ----------------------------------------------------------------------------- executors agree
def test_plan_grid_is_identical_on_local_pool_and_dask(local_tables, dask_tables):
    a, b = local_tables["plan"], dask_tables["plan"]
    assert len(a) == 8 and list(a["cell"]) == list(range(8))
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    # one row per cell, inputs as columns, outputs next to them
    for col in ("link.gbps", "prfaas.gpus", "slo.ttft_s", "mode", "lambda_max_rps", "threshold_tokens", "n_pd_p",
                "n_pd_d", "egress_gbps", "binding", "cost_usd_per_hour", "vs_homogeneous_pd", "ttft_p90_s"):
        assert col in a.columns, col


def test_simulate_grid_is_identical_on_local_pool_and_dask(local_tables, dask_tables):
    a, b = local_tables["simulate"], dask_tables["simulate"]
    assert list(a["seed"]) == [0, 1] and (a["status"] == "ok").all(), a["error"].tolist()
    assert any(c.startswith("sim_") for c in a.columns)
    pd.testing.assert_frame_equal(a, b, check_exact=True)


def test_failed_cells_are_recorded_and_do_not_stop_the_sweep(local_tables):
    df = local_tables["plan"]
    bad = df[df["slo.ttft_s"] == 1.0]
    good = df[df["slo.ttft_s"].isna()]
    # an unmeetable SLO is a valid request no deployment serves: infeasible, not an error
    assert (bad["status"] == "infeasible").all() and bad["error"].str.contains("slo.ttft_s").all()
    assert bad["lambda_max_rps"].isna().all()
    assert (good["status"] == "ok").all() and good["error"].isna().all()
    assert (df.attrs["failed"], df.attrs["infeasible"]) == (0, 4)
    # more PrfaaS GPUs and a faster link never lower throughput
    g = good.set_index(["link.gbps", "prfaas.gpus"])["lambda_max_rps"]
    assert g[(100, 32)] >= g[(10, 32)] >= g[(10, 16)] - 1e-9


@pytest.mark.parametrize("axes", [{"slo.ttft_s": [30.0]}, {"link.gbps": [0]}], ids=["ttft-slo", "no-link"])
def test_a_plan_cells_outputs_are_its_plans_own_figures(axes):
    """A cell's columns are what planning its scenario directly gives: the plan's row, TTFT at its
    own load and at the common rate, the rate within the TTFT SLO (only with one), and each
    baseline's ratios, NaN against a baseline that serves nothing (no link: naive-heterogeneous)."""
    from prfaas_plan.planner import plan

    _, base, (cell,) = expand_grid({"name": "one", "scenario": "paper-case-study", "n_buckets": 16, "axes": axes})
    rec = run_cell(cell)
    assert rec["status"] == "ok", rec["error"]
    out = rec["outputs"]
    res = plan(base.with_updates(**{k: v[0] for k, v in axes.items()}), mode=cell.mode, n_buckets=16)
    p, tt = res.plan, res.ttft.set_index(["plan", "basis", "path"])
    assert (out["n_prfaas"], out["n_pd_p"], out["n_pd_d"]) == (p.instances["prfaas"], p.instances["pd_p"], p.instances["pd_d"])
    assert all(type(out[k]) is int for k in ("n_prfaas", "n_pd_p", "n_pd_d"))
    assert out["lambda_max_rps"] == p.lambda_max_rps and out["binding"] == p.binding
    own = tt.loc[("prfaas-pd", "own load", "all")]
    assert (out["ttft_rate_rps"], out["ttft_p50_s"], out["ttft_p90_s"]) == (own.rate_rps, own.p50_s, own.p90_s)
    assert out["ttft_p90_s_common_rate"] == tt.loc[("prfaas-pd", "common rate", "all")].p90_s
    assert ("slo_rps" in out) == ("slo.ttft_s" in axes)
    if "slo.ttft_s" in axes:
        assert out["slo_rps"] == res.slo_rps["prfaas-pd"] > 0
    for name, b in res.baselines.items():
        key = name.replace("-", "_")
        assert out[f"{key}_rps"] == b.lambda_max_rps
        if b.lambda_max_rps > 0:
            assert out[f"vs_{key}"] == pytest.approx(p.lambda_max_rps / b.lambda_max_rps)
            assert out[f"ttft_p90_vs_{key}"] == pytest.approx(
                out["ttft_p90_s_common_rate"] / tt.loc[(name, "common rate", "all")].p90_s)
        else:
            assert math.isnan(out[f"vs_{key}"]) and math.isnan(out[f"ttft_p90_vs_{key}"])
    assert ("naive-heterogeneous" in res.baselines and res.baselines["naive-heterogeneous"].lambda_max_rps == 0) == (
        "link.gbps" in axes)


def test_a_simulated_cells_sim_columns_are_its_runs_summary(local_tables):
    """Each seed's ``sim_*`` columns are the summary of simulating the cell's plan with that seed
    (for 120 s); a grid that names a policy and no duration runs that policy for simulate's
    default duration (the dual policy's rebalancer moves t here: its summary is not the fixed one's)."""
    from prfaas_plan.planner import plan
    from prfaas_plan.sim import simulate

    _, base, cells = expand_grid(SIM_GRID)
    sc = base.with_updates(**{"link.gbps": 100})
    res = plan(sc, mode=cells[0].mode, n_buckets=16)
    table = local_tables["simulate"].set_index("seed")
    for seed in (0, 1):
        expected = summary_outputs(simulate(sc, res, load=sc.spec.load, seed=seed, duration_s=120).summary())
        assert expected and {k: table.loc[seed, k] for k in expected} == expected
        assert all(type(v) in (int, float) for v in expected.values())
    _, _, (dual_cell,) = expand_grid({k: v for k, v in SIM_GRID.items() if k not in ("seeds", "duration_s")}
                                     | {"policy": "dual"})
    dual = summary_outputs(simulate(sc, res, load=sc.spec.load, seed=0, policy="dual").summary())
    assert {k: v for k, v in run_cell(dual_cell)["outputs"].items() if k.startswith("sim_")} == dual
    assert dual != summary_outputs(simulate(sc, res, load=sc.spec.load, seed=0).summary())


def test_table_values_are_plain_json_scalars():
    """Numpy scalars (a planner's counts, a frame's axis values) become the Python scalars JSON
    writes; anything else that is not a JSON scalar is written as its text."""
    import numpy as np

    for value, plain in ((np.int64(3), 3), (np.bool_(True), True), (np.float64(0.5), 0.5), (None, None), ("a", "a")):
        got = cell_mod.json_scalar(value)
        assert got == plain and type(got) is type(plain)
    assert json.dumps([cell_mod.json_scalar(np.int64(7)), cell_mod.json_scalar((16, 32))]) == '[7, "(16, 32)"]'


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the start method is chosen this way on Linux")
def test_the_pool_forks_only_while_this_process_has_one_thread(monkeypatch):
    """Forking a process that runs other threads can copy a lock one of them holds: with a second
    thread alive the pool starts its workers from a fork server instead."""
    import threading

    from prfaas_plan.sweeps.executors import _pool_context

    for threads, method in ((1, "fork"), (2, "forkserver")):
        monkeypatch.setattr(threading, "active_count", lambda n=threads: n)
        assert _pool_context().get_start_method() == method


def test_a_dask_scheduler_out_of_reach_or_with_workers_is_one_line(monkeypatch):
    pytest.importorskip("dask.distributed")
    from prfaas_plan.sweeps import executors

    monkeypatch.setattr(executors, "SCHEDULER_TIMEOUT_S", 0.5)
    with pytest.raises(InvalidInput, match=r"^--scheduler: cannot reach a dask scheduler at tcp://127\.0\.0\.1:9 \("):
        sweep(PLAN_GRID, executor="dask", scheduler="tcp://127.0.0.1:9")
    with pytest.raises(InvalidInput, match="^--workers: with --scheduler the cluster's own workers run the cells"):
        sweep(PLAN_GRID, executor="dask", scheduler="tcp://127.0.0.1:9", workers=2)


def test_serial_executor_matches_too(local_tables):
    df = sweep(PLAN_GRID, executor="serial")
    pd.testing.assert_frame_equal(df, local_tables["plan"], check_exact=True)


# ----------------------------------------------------------------------------- validation before running
@pytest.mark.parametrize("axes, needles", [
    ({"link.gbsp": [10]}, ["link.gbsp", "did you mean 'link.gbps'"]),
    ({"link.gbps": [10, -5]}, ["axes.link.gbps = -5", "link.gbps"]),
    ({"prfaas.gpus": [16, 12]}, ["axes.prfaas.gpus = 12", "multiple of gpus_per_instance"]),
    ({"model": ["no-such-model"]}, ["axes.model", "no-such-model"]),
    ({"prfaas.gpu": ["h2000"]}, ["axes.prfaas.gpu", "h2000"]),
    ({"mode": ["exact", "fast"]}, ["mode", "fast"]),
    ({"link.gbps": 10}, ["axes.link.gbps"]),
    ({"link.gbps": [10, 10]}, ["axes.link.gbps", "repeated"]),
])
def test_bad_axis_fails_before_any_cell_runs(axes, needles, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(cell_mod, "run_cell", lambda cell, plans=None: calls.append(cell))
    out = tmp_path / "r.parquet"
    with pytest.raises(PlanError) as err:
        sweep({"scenario": "paper-case-study", "axes": axes}, executor="serial", out=out)
    for needle in needles:
        assert needle in str(err.value), str(err.value)
    assert calls == [] and not out.exists() and not sidecar_dir(out).exists()


def test_an_output_that_cannot_be_a_file_fails_before_any_cell_runs(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(cell_mod, "run_cell", lambda cell, plans=None: calls.append(cell))
    with pytest.raises(PlanError, match=f"^--output: {re.escape(str(tmp_path))} is a folder; give a file name"):
        sweep(PLAN_GRID, executor="serial", out=tmp_path)
    with pytest.raises(PlanError, match=f"^--output: folder {re.escape(str(tmp_path / 'no'))} does not exist$"):
        sweep(PLAN_GRID, executor="serial", out=tmp_path / "no" / "r.parquet")
    assert calls == [] and list(tmp_path.iterdir()) == []


def test_jointly_invalid_cell_fails_before_any_cell_runs():
    grid = {"scenario": "paper-case-study", "axes": {"prfaas.gpus": [16, 32], "prfaas.gpus_per_instance": [8, 32]}}
    with pytest.raises(PlanError, match=r"cell prfaas.gpus=16, prfaas.gpus_per_instance=32: .*multiple"):
        expand_grid(grid)


def test_grid_shape_errors_name_the_field():
    with pytest.raises(PlanError, match="seeds"):
        expand_grid({"scenario": "paper-case-study", "seeds": 3})
    with pytest.raises(PlanError, match="field axis: unknown field"):
        expand_grid({"scenario": "paper-case-study", "axis": {"link.gbps": [1]}})
    with pytest.raises(PlanError, match="unknown scenario"):
        expand_grid({"scenario": "no-such-scenario"})
    with pytest.raises(PlanError, match="^grid: axes.duration_s: only for run: simulate$"):
        expand_grid({"scenario": "paper-case-study", "axes": {"duration_s": [60, 120]}})
    from prfaas_plan.sweeps.grid import GridSpec

    with pytest.raises(PlanError, match="^tiny: axes.duration_s: only for run: simulate$"):  # a spec says its name
        expand_grid(GridSpec.model_validate({**PLAN_GRID, "axes": {"duration_s": [60, 120]}}))


def test_a_grid_file_is_found_named_and_its_mapping_values_kept_as_json(tmp_path):
    """A grid file without a name takes its file's; a missing file or a folder is one line; an
    axis whose values are mappings (GEMM dtype overrides) is a JSON column of the table."""
    with pytest.raises(PlanError, match="^grid file .*nothing.yaml' not found$"):
        expand_grid(tmp_path / "nothing.yaml")
    with pytest.raises(PlanError, match="is a folder$"):
        expand_grid(tmp_path)
    axes = {"gemm_dtypes": [{}, {"experts": "bf16", "attention": "bf16"}]}
    (tmp_path / "dtype-check.yaml").write_text(yaml.safe_dump({"scenario": "paper-case-study", "axes": axes}))
    g, _, cells = expand_grid(tmp_path / "dtype-check.yaml")
    assert g.name == "dtype-check"
    (tmp_path / "named.yaml").write_text(yaml.safe_dump({"name": "mine", "scenario": "paper-case-study", "axes": axes}))
    assert expand_grid(tmp_path / "named.yaml")[0].name == "mine"  # a name given stays
    assert [c.inputs["gemm_dtypes"] for c in cells] == ["{}", '{"attention": "bf16", "experts": "bf16"}']


def test_a_grids_seeds_and_load_reach_every_cell():
    """A plan grid's cells have no seed; a simulated one's are 0..K-1 or the list given (distinct);
    a top-level load is every cell's scenario load, unless fixed or an axis sets it too."""
    assert {c.seed for c in expand_grid(PLAN_GRID)[2]} == {None}
    assert [c.seed for c in expand_grid({**SIM_GRID, "seeds": [7, 3]})[2]] == [7, 3]
    for seeds in ([], [1, 1]):
        with pytest.raises(PlanError, match="^grid: seeds: give a positive count or a list of distinct integers$"):
            expand_grid({**SIM_GRID, "seeds": seeds})
    _, base, cells = expand_grid({**PLAN_GRID, "load": 0.6})
    assert base.spec.load == 0.6 != load_scenario("paper-case-study").spec.load
    assert {c.spec["load"] for c in cells} == {0.6}
    with pytest.raises(PlanError, match="^grid: load: given twice"):
        expand_grid({**PLAN_GRID, "load": 0.6, "fixed": {"load": 0.5}})
    with pytest.raises(PlanError, match="^grid: axes.link.gbps: also set in fixed; keep one$"):
        expand_grid({**PLAN_GRID, "fixed": {"link.gbps": 10}})
    with pytest.raises(PlanError, match="^grid: axes.link.gbps: give at least one value$"):
        expand_grid({**PLAN_GRID, "axes": {"link.gbps": []}})


# ----------------------------------------------------------------------------- cell identity
def test_cell_ids_are_stable_and_only_follow_inputs(tmp_path):
    _, _, a = expand_grid(PLAN_GRID)
    _, _, b = expand_grid(PLAN_GRID)
    assert [c.cell_id for c in a] == [c.cell_id for c in b] and len({c.cell_id for c in a}) == 8
    # the grid as a file, and a renamed/re-described copy of the scenario: same cells
    sc = yaml.safe_load((ROOT / "prfaas_plan" / "data" / "scenarios" / "paper-case-study.yaml").read_text())
    sc.update(id="renamed", name="another name", description="edited")
    (tmp_path / "sc.yaml").write_text(yaml.safe_dump(sc))
    (tmp_path / "g.yaml").write_text(yaml.safe_dump({**PLAN_GRID, "scenario": "sc.yaml"}))
    _, _, c = expand_grid(tmp_path / "g.yaml")
    assert [x.cell_id for x in c] == [x.cell_id for x in a]
    # a different planner mode or bucket count is a different cell
    _, _, d = expand_grid({**PLAN_GRID, "n_buckets": 32})
    assert not {x.cell_id for x in d} & {x.cell_id for x in a}


def test_example_grid_file_expands():
    g, base, cells = expand_grid(ROOT / "prfaas_plan" / "data" / "scenarios" / "grids" / "paper-link-threshold.yaml")
    assert base.spec.id == "paper-case-study" and list(g.axes) == ["link.gbps", "prfaas.gpus"]
    assert len(cells) == 20 and cells[-1].inputs == {"link.gbps": 100, "prfaas.gpus": 64}


# ----------------------------------------------------------------------------- resume
def test_interrupted_sweep_resumes_with_only_the_missing_cells(tmp_path, monkeypatch):
    out = tmp_path / "r.parquet"
    real = cell_mod.run_cell
    calls = []

    def interrupted(cell, plans=None):
        if len(calls) == 3:
            raise KeyboardInterrupt
        calls.append(cell.cell_id)
        return real(cell, plans)

    monkeypatch.setattr(cell_mod, "run_cell", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sweep(PLAN_GRID, executor="serial", out=out)
    assert not out.exists()  # the parquet is only assembled at the end
    saved = read_sidecar(sidecar_dir(out))
    assert set(saved) == set(calls) and len(saved) == 3

    again = []
    monkeypatch.setattr(cell_mod, "run_cell", lambda cell, plans=None: again.append(cell.cell_id) or real(cell, plans))
    df = sweep(PLAN_GRID, executor="serial", out=out)
    assert len(again) == 5 and not set(again) & set(calls)
    assert df.attrs["computed"] == 5 and df.attrs["reused"] == 3
    assert len(read_sidecar(sidecar_dir(out))) == 8  # failed (PlanError) cells are saved too
    pd.testing.assert_frame_equal(read_results(out), df, check_exact=True)

    # a third run computes nothing, even the failed cells; --retry-failed reruns exactly those
    again.clear()
    assert sweep(PLAN_GRID, executor="serial", out=out).attrs["computed"] == 0 and again == []
    df = sweep(PLAN_GRID, executor="serial", out=out, retry_failed=True)
    assert len(again) == 4 and df.attrs["computed"] == 4
    assert not {"policy", "seed"} & set(df.columns)  # a plan grid's rows have neither


def test_a_sidecar_keeps_only_the_records_that_are_what_their_name_says(tmp_path):
    """A record is reused only from a file named by its own cell id: a file cut short, one of
    another shape or one renamed is recomputed; no folder is no record."""
    assert read_sidecar(tmp_path / "missing") == {}
    side = tmp_path / "r.parquet.cells"
    side.mkdir()
    (side / "aaa.json").write_text(json.dumps({"cell_id": "aaa", "status": "ok", "outputs": {}}))
    (side / "bbb.json").write_text(json.dumps({"cell_id": "ccc", "status": "ok", "outputs": {}}))
    (side / "ddd.json").write_text('{"cell_id": "ddd", "sta')
    (side / "eee.json").write_text(json.dumps(["eee"]))
    assert list(read_sidecar(side)) == ["aaa"]


def test_a_parquet_file_without_a_grid_reads_as_a_plain_table(tmp_path):
    pd.DataFrame({"lambda_max_rps": [1.0, 2.0]}).to_parquet(tmp_path / "plain.parquet")
    df = read_results(tmp_path / "plain.parquet")
    assert df["lambda_max_rps"].tolist() == [1.0, 2.0] and "axes" not in df.attrs


def test_killed_cli_sweep_resumes_with_only_the_missing_cells(tmp_path):
    grid = {**PLAN_GRID, "axes": {"link.gbps": [5, 10, 20, 40, 100], "prfaas.gpus": [16, 32]}}
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(grid))
    out = tmp_path / "r.parquet"
    side = sidecar_dir(out)
    proc = subprocess.Popen([sys.executable, "-m", "prfaas_plan.cli", "sweep", str(tmp_path / "g.yaml"), "-o", str(out),
                             "--workers", "1", "--no-progress"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None and len(read_sidecar(side)) < 3:
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the sweep, its process pool and solvers: its own group
        _, err = proc.communicate()
    first = read_sidecar(side)
    if proc.returncode == 0 or len(first) == 10:
        pytest.fail(f"the sweep finished before it could be killed: {err.decode()}")
    assert proc.returncode == -signal.SIGKILL and 3 <= len(first) < 10 and not out.exists()

    df = sweep(tmp_path / "g.yaml", executor="local", workers=2, out=out)
    assert df.attrs["reused"] == len(first) and df.attrs["computed"] == 10 - len(first)
    after = read_sidecar(side)
    assert len(after) == 10
    assert all(after[k] == v for k, v in first.items())  # finished cells untouched
    assert sum(r["run_id"] == df.attrs["run_id"] for r in after.values()) == 10 - len(first)
    assert len(read_results(out)) == 10 and (df["status"] == "ok").all()


@pytest.mark.parametrize("error, status, saved", [
    (Infeasible("infeasible: the link binds"), "infeasible", True),
    (InvalidInput("workload.mu: bad"), "error", True),
    (ZeroDivisionError("a bug"), "error", False),
])
def test_cell_status_follows_the_exception_type(error, status, saved, monkeypatch):
    """Infeasible is the cell's answer, InvalidInput a bad cell, anything else a crash (not saved:
    retried on resume); the status comes from the exception's type, not its message."""
    import prfaas_plan.planner

    def plan(*a, **k):
        raise error

    monkeypatch.setattr(prfaas_plan.planner, "plan", plan)
    _, _, cells = expand_grid(PLAN_GRID)
    rec = run_cell(cells[0])
    assert (rec["status"], rec["save"], rec["outputs"]) == (status, saved, {})
    assert str(error) in rec["error"]


def test_infeasible_and_error_cells_get_their_own_status_in_the_table(monkeypatch):
    import prfaas_plan.planner

    real = prfaas_plan.planner.plan

    def plan(sc, **k):
        if sc.spec.link.gbps == 10:
            raise Infeasible("infeasible: no rate")
        if sc.spec.prfaas.gpus == 16:
            raise InvalidInput("prfaas.gpus: bad")
        return real(sc, **k)

    monkeypatch.setattr(prfaas_plan.planner, "plan", plan)
    df = sweep({**PLAN_GRID, "axes": {"link.gbps": [10, 100], "prfaas.gpus": [16, 32]}}, executor="serial")
    assert df["status"].tolist() == ["infeasible", "infeasible", "error", "ok"]
    assert (df.attrs["infeasible"], df.attrs["failed"]) == (2, 1)


# ----------------------------------------------------------------------------- report
def test_report_is_offline_html_with_heatmaps(local_tables, tmp_path):
    df = local_tables["plan"]
    path = sweep_report(df, tmp_path / "r.html", x="link.gbps", y="prfaas.gpus")
    page = path.read_text()
    assert not re.search(r"<script[^>]+src=", page) and not re.search(r"""(?:src|href)\s*=\s*["']?https?:""", page)
    assert "vegaEmbed(" in page and "Throughput" in page and "P90 TTFT" in page and "Cost" in page
    assert "Failed cells" in page and "slo.ttft_s" in page  # the third axis is a drop-down
    with pytest.raises(PlanError, match="--y: 'prfaas.gpu' is not an axis"):
        sweep_report(df, tmp_path / "x.html", x="link.gbps", y="prfaas.gpu")


def test_each_heatmap_panel_has_a_y_axis_only_when_the_sweep_has_a_second(local_tables, tmp_path):
    """Two axes: every panel's cells are placed by both; one axis (the simulated grid): a single row
    of cells, and with no failed cell no failed-cells table."""
    from prfaas_plan.report.sweep_page import _chart
    from prfaas_plan.sweeps import heatmap_data

    def y_fields(df):
        panels = _chart(heatmap_data(df)).to_dict()["hconcat"]
        return [layer["encoding"].get("y", {}).get("field") for p in panels for layer in p["layer"]]

    assert set(y_fields(local_tables["plan"])) == {"prfaas_gpus"}
    assert set(y_fields(local_tables["simulate"])) == {None}
    page = sweep_report(local_tables["simulate"], tmp_path / "s.html").read_text()
    assert "Failed cells" not in page and "0 failed" in page


def test_heatmap_data_is_the_tables_cells_on_the_axes_asked_for(local_tables):
    """The first two axes by default (the third a drop-down), or the ones named; a cell's figures
    are its own row's, a failed cell's none (its error kept); tables without axes, figures or two
    distinct axes are one line."""
    from prfaas_plan.sweeps import heatmap_data

    df = local_tables["plan"]
    hm = heatmap_data(df)
    assert (hm.x, hm.y, hm.others) == ("link.gbps", "prfaas.gpus", ["slo.ttft_s"])
    assert hm.choices == {"slo.ttft_s": [None, 1.0]} and hm.order["link.gbps"] == [10, 100]
    cells = hm.data.set_index(["link_gbps", "prfaas_gpus", "slo_ttft_s"])
    for _, r in df.iterrows():
        got = cells.loc[(r["link.gbps"], r["prfaas.gpus"], r["slo.ttft_s"])]
        assert got.cells == 1 and got.failed == (r.status != "ok")
        if r.status == "ok":
            assert got.lambda_max_rps == r.lambda_max_rps and got.ttft_p90_s == r.ttft_p90_s
        else:
            assert math.isnan(got.lambda_max_rps) and "slo.ttft_s" in got.error
    swapped = heatmap_data(df, x="prfaas.gpus")
    assert (swapped.x, swapped.y, swapped.others) == ("prfaas.gpus", "link.gbps", ["slo.ttft_s"])
    with pytest.raises(PlanError, match="^--x/--y: give two different axes$"):
        heatmap_data(df, x="link.gbps", y="link.gbps")
    bare = df.copy()
    bare.attrs = {}
    with pytest.raises(PlanError, match="^--html: this table does not say its axes"):
        heatmap_data(bare)
    all_failed = df[df.status != "ok"]
    all_failed.attrs = df.attrs
    assert heatmap_data(all_failed).data["lambda_max_rps"].isna().all()  # no cell to average: blank, not missing
    failed = df[df.status != "ok"].dropna(axis=1, how="all")  # every cell failed: no figure columns
    failed.attrs = df.attrs
    with pytest.raises(PlanError, match=r"^--html: the sweep has no throughput/cost/TTFT columns \(did every cell fail\?\)$"):
        heatmap_data(failed)


def test_report_of_a_simulated_sweep_averages_seeds(local_tables, tmp_path):
    page = sweep_report(local_tables["simulate"], tmp_path / "s.html").read_text()  # one axis: a strip
    assert "Simulated P90 TTFT" in page and "Simulated throughput" in page


# ----------------------------------------------------------------------------- CLI
def test_cli_sweep_writes_parquet_and_report(tmp_path, capsys):
    (tmp_path / "g.yaml").write_text(yaml.safe_dump({**PLAN_GRID, "axes": {"link.gbps": [10, 100]}}))
    out, page = tmp_path / "r.parquet", tmp_path / "r.html"
    with pytest.raises(SystemExit) as exc:
        main(["sweep", str(tmp_path / "g.yaml"), "-o", str(out), "--executor", "serial", "--no-progress",
              "--html", str(page), "--format", "json"])
    assert exc.value.code == 0
    cap = capsys.readouterr()
    rows = json.loads(cap.out)
    assert len(rows) == 2 and rows[1]["link.gbps"] == 100 and "2 rows (2 computed, 0 reused, 0 infeasible, 0 failed)" in cap.err
    assert len(pd.read_parquet(out)) == 2 and page.is_file()


@pytest.mark.parametrize("args, needle", [
    (("--executor", "serial", "--html", "{tmp}/r.html", "--x", "link.gbs"), "--x: 'link.gbs' is not an axis"),
    (("--executor", "local", "--scheduler", "tcp://127.0.0.1:1"), "--scheduler: only with --executor dask"),
    (("--workers", "0",), "--workers"),
])
def test_cli_sweep_bad_flags_exit_2(args, needle, tmp_path, capsys):
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(PLAN_GRID))
    with pytest.raises(SystemExit) as exc:
        main(["sweep", str(tmp_path / "g.yaml"), "-o", str(tmp_path / "r.parquet"), "--no-progress",
              *(a.replace("{tmp}", str(tmp_path)) for a in args)])
    assert exc.value.code == 2
    assert needle in capsys.readouterr().err
    assert not sidecar_dir(tmp_path / "r.parquet").exists()


def test_cli_and_sweep_module_do_not_import_dask_at_start_up():
    code = "import sys, prfaas_plan.cli, prfaas_plan.sweeps; print(any(m.split('.')[0] in ('dask', 'distributed') for m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip() == "False", r.stderr
