"""Parameter sweeps: a grid of scenario variants planned (or simulated) in parallel, resumably.

A **grid** (a YAML file or a dict) names a base scenario and the axes to vary::

    scenario: paper-case-study          # built-in id, or a path (relative to the grid file)
    run: plan                           # plan | simulate
    mode: exact                         # planner mode for every cell (or make it an axis)
    axes:                               # any dotted scenario field; also mode, n_buckets, duration_s, policy
      link.gbps: [10, 25, 50, 100]
      prfaas.gpus: [16, 32, 48]
    fixed: {workload.sigma: 1.0}        # overrides applied to every cell
    # simulate only: seeds: 3 (or a list), duration_s: 600, policy: fixed|short|dual
    # both: load: 0.8 (sets the scenario's load), n_buckets: 128

Cells are the product of the axes (times the seeds for ``run: simulate``). Before anything
runs, every cell's scenario is built with :meth:`Scenario.with_updates` (and its model and GPUs
resolved), so a bad axis name or value is a :class:`PlanError` naming the field. Cells run on a
local process pool (``executor="local"``; fork on Linux while the caller is single-threaded,
else forkserver, which needs the usual ``if __name__ == "__main__"`` guard in scripts), a
dask.distributed cluster (``"dask"``: a ``LocalCluster`` of ``workers`` processes, or the
scheduler at ``scheduler``), or in this process (``"serial"``, for debugging). A task is one
cell, except that the seeds of a simulated cell share a task where that leaves every worker
about two tasks (the worker then plans once for all of them).

**Resume**: with an output path ``OUT``, each finished cell is written as
``OUT.cells/<cell_id>.json`` the moment it completes (atomically), keyed by a stable hash of the
cell's inputs (the full resolved scenario except its id, name, description and assumptions; the
run kind, planner mode and buckets, simulation seed, duration and policy; the package
version). A rerun of the same grid reuses those records and computes only the missing cells,
then assembles ``OUT`` (parquet, the grid in its metadata) atomically. A cell whose planner raises :class:`PlanError` (e.g. an
infeasible combination) is a finished cell with its error string; any other exception, and a
worker lost by the executor, is reported in the table but not saved, so a rerun retries it.

The table has one row per cell (and seed): ``cell``, ``cell_id``, the axis values (columns named
as the axes), ``run``, ``mode``, ``seed``, ``status``, ``error``, then the outputs of the
PrfaaS-PD plan (``lambda_max_rps``, ``threshold_tokens``, ``n_pd_p``, ``n_pd_d``, ``egress_gbps``,
``binding``, costs, ``ttft_*_s`` at the scenario's load, ratios against each baseline) and, for
``run: simulate``, the simulator's summary fields prefixed ``sim_``.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import itertools
import json
import math
import os
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, ValidationError

from prfaas_plan import __version__
from prfaas_plan.data import atomic_write, is_dir, is_file, read_yaml, validate, validation_message
from prfaas_plan.errors import InvalidInput, PlanError, did_you_mean, shown
from prfaas_plan.scenario import Scenario, ScenarioSpec, load_scenario

SCHEMA = 1
"""Version of the cell record layout; part of every cell's hash."""

from prfaas_plan.defaults import DEFAULT_BUCKETS

RUN_AXES = ("mode", "n_buckets", "duration_s", "policy")
"""Axes that vary how a cell runs rather than its scenario."""
HASH_EXCLUDED = ("id", "name", "description", "assumptions")
"""Scenario fields that do not change any result, left out of the cell hash."""
EXECUTORS = ("local", "dask", "serial")


# ----------------------------------------------------------------------------- the grid
class GridSpec(BaseModel):
    """A sweep grid file."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str | None = None
    description: str | None = None
    scenario: str
    run: Literal["plan", "simulate"] = "plan"
    mode: Literal["exact", "paper"] = "exact"
    n_buckets: PositiveInt = DEFAULT_BUCKETS
    load: float | None = Field(default=None, gt=0, lt=1, description="sets the scenario's load in every cell")
    seeds: PositiveInt | list[int] | None = Field(default=None, description="simulate: K (seeds 0..K-1) or a list")
    duration_s: PositiveFloat | None = Field(default=None, description="simulate: simulated seconds per run")
    policy: Literal["fixed", "short", "dual"] | None = Field(default=None, description="simulate: scheduler policy")
    fixed: dict[str, Any] = {}
    axes: dict[str, list[Any]] = {}


class _RunOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    mode: Literal["exact", "paper"]
    n_buckets: PositiveInt
    duration_s: PositiveFloat | None = None
    policy: Literal["fixed", "short", "dual"] | None = None


@dataclass(frozen=True)
class Cell:
    """One unit of work: a resolved scenario (as a dict) and how to run it.

    ``cell_id`` hashes everything that determines the result; ``plan_key`` the part that
    determines the plan (the same for all seeds of a simulated cell).
    """

    index: int
    cell_id: str
    plan_key: str
    inputs: dict
    run: str
    mode: str
    n_buckets: int
    duration_s: float | None
    policy: str | None
    seed: int | None
    spec: dict
    origin: str
    model_dirs: tuple[str, ...]


def _flat_fields(data: dict, prefix: str = "") -> list[str]:
    out = []
    for key, value in data.items():
        name = f"{prefix}{key}"
        out.append(name)
        if isinstance(value, dict):
            out.extend(_flat_fields(value, f"{name}."))
    return out


def _digest(payload: dict) -> str:
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _jsonable(value: Any) -> Any:
    """A table cell for an axis value: scalars as they are, lists/dicts as JSON text."""
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True)
    return value


def _load_grid(grid: dict | str | Path) -> tuple[GridSpec, str, Path | None]:
    if isinstance(grid, GridSpec):
        return grid, grid.name or "grid", None
    if isinstance(grid, dict):
        return validate(GridSpec, grid, "grid"), "grid", None
    path = Path(grid)
    if not is_file(path):
        raise InvalidInput(f"grid file {shown(grid)!r} {'is a folder' if is_dir(path) else 'not found'}")
    spec = validate(GridSpec, read_yaml(path), str(path))
    if spec.name is None:
        spec = spec.model_copy(update={"name": path.stem})
    return spec, str(path), path.parent


def grid_axes(grid: dict | str | Path) -> list[str]:
    """The axis names of a grid (validates the grid file's shape only)."""
    return list(_load_grid(grid)[0].axes)


def _base_scenario(ref: str, origin: str, folder: Path | None) -> Scenario:
    """The grid's base scenario: a path relative to the grid file, else as given (id or path)."""
    if folder is not None and not Path(ref).is_absolute():
        beside = folder / ref
        if beside.is_file():
            return load_scenario(beside)
    try:
        return load_scenario(ref)
    except PlanError as exc:
        raise InvalidInput(f"{origin}: scenario: {exc}") from None


def _resolve(sc: Scenario, seen: set) -> None:
    """Resolve a cell's model and GPUs once per distinct value (load_scenario does this for files)."""
    s = sc.spec
    for key, attr in ((("model", s.model), "model"), (("prfaas", s.prfaas.gpu, s.prfaas.gpus_per_instance), "prfaas_instance"),
                      (("local", s.local.gpu, s.local.gpus_per_instance), "local_instance")):
        if key not in seen:
            getattr(sc, attr)
            seen.add(key)


def _describe(assign: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in assign.items())


def expand_grid(grid: dict | str | Path) -> tuple[GridSpec, Scenario, list[Cell]]:
    """Validate a grid and build every cell; any bad axis name or value raises PlanError
    (naming it) before anything runs."""
    g, origin, folder = _load_grid(grid)
    base = _base_scenario(g.scenario, origin, folder)
    fields = _flat_fields(base.spec.model_dump())
    simulate = g.run == "simulate"
    if not simulate and (g.seeds is not None or g.duration_s is not None or g.policy is not None):
        raise InvalidInput(f"{origin}: seeds/duration_s/policy: only for run: simulate")
    for name in ("duration_s", "policy"):
        if not simulate and name in g.axes:
            raise InvalidInput(f"{origin}: axes.{name}: only for run: simulate")
    seeds: list[int | None]
    if not simulate:
        seeds = [None]
    elif isinstance(g.seeds, list):
        if not g.seeds or len(set(g.seeds)) != len(g.seeds):
            raise InvalidInput(f"{origin}: seeds: give a positive count or a list of distinct integers")
        seeds = list(g.seeds)
    else:
        seeds = list(range(g.seeds or 1))

    fixed = dict(g.fixed)
    if g.load is not None:
        if "load" in fixed or "load" in g.axes:
            raise InvalidInput(f"{origin}: load: given twice (top level and in fixed/axes); keep one")
        fixed["load"] = g.load
    for name, values in g.axes.items():
        if name in fixed:
            raise InvalidInput(f"{origin}: axes.{name}: also set in fixed; keep one")
        if not values:
            raise InvalidInput(f"{origin}: axes.{name}: give at least one value")
        if len({json.dumps(v, sort_keys=True, default=str) for v in values}) != len(values):
            raise InvalidInput(f"{origin}: axes.{name}: repeated values {values}")
    for name in [*fixed, *g.axes]:
        if name not in RUN_AXES and name not in fields:
            raise InvalidInput(f"{origin}: axes/fixed: {name!r} is not a scenario field"
                            f"{did_you_mean(name, [*fields, *RUN_AXES])}; use dotted names such as link.gbps")
    if any(name in fixed for name in RUN_AXES):
        raise InvalidInput(f"{origin}: fixed: set {', '.join(RUN_AXES)} at the top level of the grid")

    seen: set = set()
    try:
        base = base.with_updates(**fixed) if fixed else base
        _resolve(base, seen)
    except PlanError as exc:
        raise InvalidInput(f"{origin}: fixed: {exc}") from None
    scen_axes = {k: v for k, v in g.axes.items() if k not in RUN_AXES}
    # each value alone first, so that an error names the one value at fault
    for name, values in scen_axes.items():
        for v in values:
            try:
                _resolve(base.with_updates(**{name: v}), seen)
            except PlanError as exc:
                raise InvalidInput(f"{origin}: axes.{name} = {v!r}: {exc}") from None
    names = list(g.axes)
    cells: list[Cell] = []
    version = {"sweep": SCHEMA, "version": __version__}
    dirs = tuple(str(d) for d in base.extra_model_dirs)
    for combo in itertools.product(*(g.axes[n] for n in names)):
        assign = dict(zip(names, combo))
        try:
            opts = _RunOptions.model_validate({"mode": assign.get("mode", g.mode),
                                               "n_buckets": assign.get("n_buckets", g.n_buckets),
                                               "duration_s": assign.get("duration_s", g.duration_s),
                                               "policy": assign.get("policy", g.policy)})
        except ValidationError as exc:
            raise InvalidInput(validation_message(f"{origin}: axes ({_describe(assign)})", exc)) from None
        updates = {k: v for k, v in assign.items() if k not in RUN_AXES}
        try:
            sc = base.with_updates(**updates) if updates else base
            _resolve(sc, seen)
        except PlanError as exc:
            raise InvalidInput(f"{origin}: cell {_describe(assign)}: {exc}") from None
        spec = sc.spec.model_dump(mode="json")
        hashed = {k: v for k, v in spec.items() if k not in HASH_EXCLUDED}
        plan_key = _digest({**version, "scenario": hashed, "mode": opts.mode, "n_buckets": opts.n_buckets})
        for seed in seeds:
            cid = _digest({**version, "plan": plan_key, "run": g.run, "seed": seed,
                           "duration_s": opts.duration_s, "policy": opts.policy})
            cells.append(Cell(len(cells), cid, plan_key, {k: _jsonable(v) for k, v in assign.items()}, g.run,
                              opts.mode, opts.n_buckets, opts.duration_s, opts.policy, seed, spec, sc.origin, dirs))
    return g, base, cells


# ----------------------------------------------------------------------------- one cell (runs on a worker)
_PLANS: dict[str, Any] = {}
_PLAN_CACHE_SIZE = 4


def _scalar(v: Any) -> Any:
    """A JSON-friendly Python scalar (numpy scalars unwrapped)."""
    if hasattr(v, "item") and callable(v.item) and getattr(v, "ndim", 1) == 0:
        v = v.item()
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


def plan_outputs(res) -> dict:
    """The sweep columns of a :class:`~prfaas_plan.planner.PlanResult`: the PrfaaS-PD plan,
    TTFT at the scenario's load, and ratios against each baseline."""
    p = res.plan
    row = {k: v for k, v in p.row().items() if k not in ("plan", "mode")}
    row["rps_per_usd_hour"] = p.rps_per_usd_hour
    row["is_threshold"] = bool(p.is_threshold)
    tt = res.ttft

    def ttft(name: str, basis: str) -> dict:
        sel = tt[(tt.plan == name) & (tt.path == "all") & (tt.basis == basis)]
        if not len(sel):
            return {}
        r = sel.iloc[0]
        return {"rate_rps": float(r.rate_rps), "mean_s": float(r.mean_s), "p50_s": float(r.p50_s),
                "p90_s": float(r.p90_s), "p99_s": float(r.p99_s)}

    own = ttft(p.name, "own load")
    row["ttft_rate_rps"] = own.get("rate_rps", math.nan)
    for q in ("mean", "p50", "p90", "p99"):
        row[f"ttft_{q}_s"] = own.get(f"{q}_s", math.nan)
    common = ttft(p.name, "common rate").get("p90_s", math.nan)
    row["ttft_p90_s_common_rate"] = common
    if p.name in res.slo_rps:
        row["slo_rps"] = res.slo_rps[p.name]
    for name, b in res.baselines.items():
        key = name.replace("-", "_")
        row[f"{key}_rps"] = b.lambda_max_rps
        row[f"vs_{key}"] = p.lambda_max_rps / b.lambda_max_rps if b.lambda_max_rps > 0 else math.nan
        row[f"cost_vs_{key}"] = (p.usd_per_million_tokens / b.usd_per_million_tokens
                                 if b.lambda_max_rps > 0 and p.lambda_max_rps > 0 else math.nan)
        bc = ttft(name, "common rate").get("p90_s", math.nan)
        row[f"ttft_p90_vs_{key}"] = common / bc if bc and bc > 0 else math.nan
    return {k: _scalar(v) for k, v in row.items()}


def summary_outputs(summary: Any) -> dict:
    """The simulator's summary (a dict, Series or one-row frame) as ``sim_*`` columns."""
    if isinstance(summary, pd.DataFrame):
        if len(summary) == 1:
            summary = summary.iloc[0].to_dict()
        else:  # one row per group: flatten as sim_<group>_<field>
            first = summary.columns[0]
            summary = {f"{g}_{c}": v for g, r in summary.set_index(first).iterrows() for c, v in r.items()}
    elif isinstance(summary, pd.Series):
        summary = summary.to_dict()
    elif not isinstance(summary, dict):
        summary = dict(summary)
    out = {}
    for k, v in summary.items():
        if isinstance(v, dict):
            out.update({f"sim_{k}_{kk}": _scalar(vv) for kk, vv in v.items()})
        else:
            out[f"sim_{k}"] = _scalar(v)
    return out


def _scenario(cell: Cell) -> Scenario:
    return Scenario(ScenarioSpec.model_validate(cell.spec), cell.origin, tuple(Path(d) for d in cell.model_dirs))


def _plan(cell: Cell, sc: Scenario):
    from prfaas_plan.planner import plan

    res = _PLANS.get(cell.plan_key)
    if res is None:
        res = plan(sc, mode=cell.mode, n_buckets=cell.n_buckets)
        if len(_PLANS) >= _PLAN_CACHE_SIZE:
            _PLANS.pop(next(iter(_PLANS)))
        _PLANS[cell.plan_key] = res
    return res


def run_cell(cell: Cell) -> dict:
    """Run one cell; returns its record. A PlanError (bad or infeasible input) is recorded as
    the cell's result; other exceptions are recorded but marked not to be saved (retried on
    resume). KeyboardInterrupt and SystemExit propagate."""
    t0 = time.perf_counter()
    rec: dict[str, Any] = {"cell_id": cell.cell_id, "error": None, "save": True, "outputs": {}}
    try:
        sc = _scenario(cell)
        res = _plan(cell, sc)
        out = plan_outputs(res)
        if cell.run == "simulate":
            from prfaas_plan.sim import simulate

            kwargs = {"load": sc.spec.load, "seed": cell.seed}
            if cell.duration_s is not None:
                kwargs["duration_s"] = cell.duration_s
            if cell.policy is not None:
                kwargs["policy"] = cell.policy
            out.update(summary_outputs(simulate(sc, res, **kwargs).summary()))
        rec["outputs"] = out
    except PlanError as exc:
        rec["error"] = str(exc)
    except Exception as exc:  # noqa: BLE001 - any failure is this cell's, not the sweep's
        import traceback

        where = traceback.extract_tb(exc.__traceback__)[-1]
        rec["error"] = f"{type(exc).__name__}: {exc} (at {Path(where.filename).name}:{where.lineno} in {where.name})"
        rec["save"] = False
    rec.update(elapsed_s=time.perf_counter() - t0, host=socket.gethostname(), pid=os.getpid())
    return rec


def run_unit(cells: list[Cell]) -> list[dict]:
    """Run cells that share a plan (the seeds of a simulated cell) in one task, planning once."""
    return [run_cell(c) for c in cells]


# ----------------------------------------------------------------------------- executors
def _units(todo: list[Cell], slots: int) -> list[list[Cell]]:
    """Tasks: cells sharing a plan go together (the worker plans once), split only as far as
    needed to give each of ``slots`` workers about two tasks. A plan grid is one cell per task."""
    groups: dict[str, list[Cell]] = {}
    for c in todo:
        groups.setdefault(c.plan_key, []).append(c)
    per = max(1, math.ceil(2 * max(1, slots) / max(1, len(groups))))
    units = []
    for cells in groups.values():
        size = math.ceil(len(cells) / min(per, len(cells)))
        units += [cells[i:i + size] for i in range(0, len(cells), size)]
    return units


def _lost(cell: Cell, exc: BaseException) -> dict:
    """The record of a cell whose worker failed outside the cell (not saved: retried on resume)."""
    return {"cell_id": cell.cell_id, "error": f"executor: {type(exc).__name__}: {exc}", "save": False,
            "outputs": {}, "elapsed_s": math.nan, "host": None, "pid": None}


def _run_serial(todo: list[Cell], workers: int | None, scheduler, stack) -> Iterator[tuple[Cell, dict]]:
    return ((cell, run_cell(cell)) for cell in todo)


def _pool_context():
    """Fork on Linux while this process has a single thread (fast, and scripts need no
    ``if __name__ == "__main__"`` guard); otherwise forkserver (Linux) or the platform default."""
    import multiprocessing as mp
    import threading

    if sys.platform.startswith("linux"):
        if threading.active_count() == 1:
            return mp.get_context("fork")
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["prfaas_plan.sweeps", "prfaas_plan.planner"])
        return ctx
    return mp.get_context()


def _run_local(todo: list[Cell], workers: int | None, scheduler, stack) -> Iterator[tuple[Cell, dict]]:
    """Start a process pool and submit every unit now (before any progress-bar thread exists);
    iterate the returned generator for (cell, record) as they finish."""
    import concurrent.futures as cf

    units = _units(todo, workers or os.cpu_count() or 1)
    n = max(1, min(workers or os.cpu_count() or 1, len(units)))
    pool = cf.ProcessPoolExecutor(max_workers=n, mp_context=_pool_context())
    stack.callback(pool.shutdown, wait=True, cancel_futures=True)
    futures = {pool.submit(run_unit, u): u for u in units}

    def results():
        for fut in cf.as_completed(futures):
            unit = futures[fut]
            try:
                recs = fut.result()
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as exc:  # noqa: BLE001 - a broken pool fails the remaining cells, unsaved
                recs = [_lost(c, exc) for c in unit]
            yield from zip(unit, recs)

    return results()


def _dask_client(workers: int | None, scheduler, stack):
    """A client for a scheduler address, a Client, a cluster, or a new LocalCluster; whatever
    is created here is closed when ``stack`` unwinds."""
    import logging

    from dask.distributed import Client, LocalCluster

    if scheduler is None:
        cluster = stack.enter_context(LocalCluster(
            n_workers=workers or os.cpu_count() or 1, threads_per_worker=1, processes=True,
            dashboard_address=None, silence_logs=logging.ERROR))
        return stack.enter_context(Client(cluster))
    if workers is not None:
        raise InvalidInput("--workers: with --scheduler the cluster's own workers run the cells; drop --workers")
    if isinstance(scheduler, Client):
        return scheduler
    if isinstance(scheduler, str):
        try:
            client = Client(scheduler, timeout="10s")
        except (OSError, TimeoutError) as exc:
            raise InvalidInput(f"--scheduler: cannot reach a dask scheduler at {scheduler} ({exc})") from None
        return stack.enter_context(client)
    return stack.enter_context(Client(scheduler))  # a cluster object


def _run_dask(todo: list[Cell], workers: int | None, scheduler, stack) -> Iterator[tuple[Cell, dict]]:
    """Submit every unit to a dask cluster now; iterate for (cell, record) as they finish."""
    from dask.distributed import as_completed

    client = _dask_client(workers, scheduler, stack)
    units = _units(todo, sum(client.nthreads().values()))
    futures = [client.submit(run_unit, u, key=f"prfaas-cells-{u[0].cell_id}-{len(u)}", pure=False) for u in units]
    stack.callback(lambda: client.cancel([f for f in futures if not f.done()]))
    by_key = {f.key: u for f, u in zip(futures, units)}

    def results():
        for fut in as_completed(futures):
            unit = by_key[fut.key]
            try:
                recs = fut.result()
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as exc:  # noqa: BLE001 - e.g. KilledWorker
                recs = [_lost(c, exc) for c in unit]
            fut.release()
            yield from zip(unit, recs)

    return results()


# ----------------------------------------------------------------------------- sidecar
def sidecar_dir(out: str | Path) -> Path:
    """Where a sweep written to ``out`` keeps its per-cell records."""
    out = Path(out)
    return out.with_name(out.name + ".cells")


def read_sidecar(folder: str | Path) -> dict[str, dict]:
    """The saved cell records in a sidecar folder, by cell id (unreadable files are skipped)."""
    out = {}
    folder = Path(folder)
    if not folder.is_dir():
        return out
    for path in folder.glob("*.json"):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict) and rec.get("cell_id") == path.stem:
            out[path.stem] = rec
    return out


# ----------------------------------------------------------------------------- the sweep
class _NoBar:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def add_task(self, *a, **k):
        return 0

    def update(self, *a, **k):
        pass


def _bar(enabled: bool):
    if not enabled:
        return _NoBar()
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=Console(stderr=True), transient=False)


def _assemble(g: GridSpec, base: Scenario, cells: list[Cell], records: dict[str, dict]) -> pd.DataFrame:
    rows = []
    for c in cells:
        rec = records[c.cell_id]
        row = {"cell": c.index, "cell_id": c.cell_id, **c.inputs, "run": c.run, "mode": c.mode}
        if c.run == "simulate":
            row.setdefault("policy", c.policy or "fixed")
            row["seed"] = c.seed
        row["status"] = "error" if rec.get("error") else "ok"
        row["error"] = rec.get("error")
        for k, v in rec.get("outputs", {}).items():
            row.setdefault(k, v)
        rows.append(row)
    df = pd.DataFrame(rows)
    df.attrs.update(grid=g.name or "grid", scenario=base.spec.id, axes=list(g.axes), run=g.run)
    return df


def _write_parquet(df: pd.DataFrame, out: Path, g: GridSpec, base: Scenario) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(df, preserve_index=False)
    meta = dict(table.schema.metadata or {})
    meta[b"prfaas_plan.sweeps"] = json.dumps({"grid": g.model_dump(mode="json"), "scenario": base.spec.id,
                                             "axes": list(g.axes), "version": __version__}).encode()
    sink = pa.BufferOutputStream()
    pq.write_table(table.replace_schema_metadata(meta), sink)
    atomic_write(out, sink.getvalue().to_pybytes())


def read_results(path: str | Path) -> pd.DataFrame:
    """A sweep's parquet with its grid description in ``df.attrs`` (``grid``, ``axes``...)."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    df = table.to_pandas()
    raw = (table.schema.metadata or {}).get(b"prfaas_plan.sweeps")
    if raw:
        meta = json.loads(raw)
        df.attrs.update(grid=meta["grid"].get("name") or "grid", scenario=meta.get("scenario"),
                        axes=meta.get("axes", []), run=meta["grid"].get("run"))
    return df


def sweep(grid: dict | str | Path, executor: str = "local", workers: int | None = None, scheduler=None,
          out: str | Path | None = None, *, progress: bool | None = None, retry_failed: bool = False) -> pd.DataFrame:
    """Run every cell of ``grid`` (a dict or a YAML path) and return one row per cell (and seed).

    executor: ``local`` (process pool of ``workers``, default one per CPU), ``dask`` (a
    LocalCluster of ``workers`` processes, or the cluster at ``scheduler``: an address such as
    ``tcp://host:8786``, a ``Client`` or a cluster object) or ``serial`` (this process).
    out: the parquet to write; finished cells are kept in ``OUT.cells/`` and reused by a rerun
    (``retry_failed`` reruns the cells saved with an error). ``df.attrs`` has ``computed``,
    ``reused`` and ``failed`` counts.
    """
    if executor not in EXECUTORS:
        raise InvalidInput(f"--executor: {executor!r} is not an executor; use {', '.join(EXECUTORS)}")
    if workers is not None and workers < 1:
        raise InvalidInput("--workers: give at least 1")
    if scheduler is not None and executor != "dask":
        raise InvalidInput("--scheduler: only with --executor dask")
    if executor == "dask" and importlib.util.find_spec("distributed") is None:
        raise InvalidInput("--executor dask: dask.distributed is not installed; pip install 'prfaas-plan[sweep]'")
    g, base, cells = expand_grid(grid)  # every cell validated before anything runs
    out_path = Path(out) if out is not None else None
    side = None
    records: dict[str, dict] = {}
    if out_path is not None:
        if out_path.is_dir():
            raise InvalidInput(f"--output: {out_path} is a folder; give a file name such as results.parquet")
        if not out_path.parent.is_dir():
            raise InvalidInput(f"--output: folder {out_path.parent} does not exist")
        side = sidecar_dir(out_path)
        side.mkdir(exist_ok=True)
        saved = read_sidecar(side)
        wanted = {c.cell_id for c in cells}
        records = {k: v for k, v in saved.items() if k in wanted and not (retry_failed and v.get("error"))}
    unique: dict[str, Cell] = {}
    for c in cells:
        if c.cell_id not in records:
            unique.setdefault(c.cell_id, c)
    todo = list(unique.values())
    reused = len({c.cell_id for c in cells} & records.keys())
    run_id = uuid.uuid4().hex[:12]
    runner = {"local": _run_local, "serial": _run_serial, "dask": _run_dask}[executor]
    show = sys.stderr.isatty() if progress is None else progress
    failed = 0
    with contextlib.ExitStack() as stack:
        # the executor starts (and every cell is submitted) before the progress bar's thread
        it = runner(todo, workers, scheduler, stack) if todo else iter(())
        bar = stack.enter_context(_bar(show))
        task = bar.add_task(f"sweep {g.name or 'grid'}", total=len(todo) + reused, completed=reused)
        for cell, rec in it:
            rec["run_id"] = run_id
            rec["inputs"] = cell.inputs
            if rec.get("error"):
                failed += 1
            records[cell.cell_id] = rec
            if side is not None and rec.get("save", True):
                atomic_write(side / f"{cell.cell_id}.json", json.dumps(rec, default=str).encode())
            bar.update(task, advance=1,
                       description=f"sweep {g.name or 'grid'}" + (f" ({failed} failed)" if failed else ""))
    df = _assemble(g, base, cells, records)
    df.attrs.update(computed=len(todo), reused=reused, failed=int((df["status"] == "error").sum()), run_id=run_id,
                    sidecar=str(side) if side else None)
    if out_path is not None:
        _write_parquet(df, out_path, g, base)
    return df


# ----------------------------------------------------------------------------- report
METRICS = (
    ("lambda_max_rps", "Throughput Λmax (req/s)", "viridis", False),
    ("usd_per_million_tokens", "Cost ($ per million tokens)", "viridis", True),
    ("ttft_p90_s", "P90 TTFT at the scenario's load (s)", "viridis", True),
)
"""(column, title, colour scheme, lower is better) of the report's heatmaps; a simulated sweep adds
its ``sim_ttft_p90_s``."""


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in name)


def _spec_value(v: Any) -> Any:
    """An axis value for the chart spec, which is strict JSON: a missing value (NaN) is null."""
    v = _scalar(v)
    return None if isinstance(v, float) and math.isnan(v) else v


def _metrics(df: pd.DataFrame) -> list[tuple[str, str, str, bool]]:
    out = [m for m in METRICS if m[0] in df.columns]
    sim = [c for c in ("sim_ttft_p90_s", "sim_throughput_rps") if c in df.columns]
    titles = {"sim_ttft_p90_s": ("Simulated P90 TTFT (s, mean over seeds)", True),
              "sim_throughput_rps": ("Simulated throughput (req/s, mean over seeds)", False)}
    out += [(c, titles[c][0], "viridis", titles[c][1]) for c in sim]
    return out


def sweep_report(df: pd.DataFrame, path: str | Path, x: str | None = None, y: str | None = None,
                 title: str | None = None) -> Path:
    """A self-contained (offline) HTML page of heatmaps of throughput, cost and P90 TTFT over
    the axes ``x`` and ``y`` of a sweep table (as returned by :func:`sweep` or
    :func:`read_results`). Other axes get a drop-down each; seeds are averaged."""
    import altair as alt

    axes = list(df.attrs.get("axes") or [])
    if not axes:
        raise InvalidInput("--html: this table does not say its axes; pass the frame returned by sweep()")
    x = x or axes[0]
    if y is None and len(axes) > 1:
        y = next(a for a in axes if a != x)
    for flag, a in (("--x", x), ("--y", y)):
        if a is not None and a not in axes:
            raise InvalidInput(f"{flag}: {a!r} is not an axis of this sweep{did_you_mean(a, axes)}; axes: {', '.join(axes)}")
    if x == y:
        raise InvalidInput("--x/--y: give two different axes")
    metrics = _metrics(df)
    if not metrics:
        raise InvalidInput("--html: the sweep has no throughput/cost/TTFT columns (did every cell fail?)")
    others = [a for a in axes if a not in (x, y)]
    keys = [a for a in axes]
    cols = [m[0] for m in metrics]
    ok = df[df["status"] == "ok"]
    agg = df.groupby(keys, dropna=False, sort=False).agg(
        cells=("status", "size"), failed=("status", lambda s: int((s == "error").sum())),
        error=("error", lambda s: next((e for e in s if isinstance(e, str) and e), ""))).reset_index()
    if len(ok):
        means = ok.groupby(keys, dropna=False, sort=False)[cols].mean(numeric_only=True).reset_index()
        agg = agg.merge(means, on=keys, how="left")
    for c in cols:
        if c not in agg:
            agg[c] = math.nan
    data = agg.rename(columns={a: _safe(a) for a in axes} | {c: _safe(c) for c in cols})
    data = data.replace([math.inf, -math.inf], math.nan)

    params, filters = [], []
    for a in others:
        values = list(pd.unique(df[a]))
        p = alt.param(name=f"sel_{_safe(a)}", value=_spec_value(values[0]),
                      bind=alt.binding_select(options=[_spec_value(v) for v in values], name=f"{a} "))
        params.append(p)
        filters.append(f"datum['{_safe(a)}'] == {p.name}")

    def sort_of(a: str) -> list:
        vals = list(pd.unique(df[a]))
        try:
            return [_spec_value(v) for v in sorted(vals)]
        except TypeError:
            return [_spec_value(v) for v in vals]

    charts = []
    for col, label, scheme, lower in metrics:
        sc, safe = alt.Scale(scheme=scheme, reverse=lower), _safe(col)
        enc = {"x": alt.X(f"{_safe(x)}:O", title=x, sort=sort_of(x))}
        if y is not None:
            enc["y"] = alt.Y(f"{_safe(y)}:O", title=y, sort=list(reversed(sort_of(y))))
        tips = [alt.Tooltip(f"{_safe(a)}:N", title=a) for a in axes]
        tips += [alt.Tooltip(f"{_safe(c)}:Q", title=c, format=".4g") for c in cols]
        tips += [alt.Tooltip("failed:Q", title="failed cells"), alt.Tooltip("error:N", title="error")]
        base = alt.Chart(data)
        for f in filters:
            base = base.transform_filter(f)
        rect = base.mark_rect(stroke="white").encode(
            **enc, color=alt.condition(f"isValid(datum['{safe}'])", alt.Color(f"{safe}:Q", title=None, scale=sc),
                                       alt.value("#dddddd")), tooltip=tips)
        ink = alt.Scale(type="quantize", range=["black", "white"] if lower else ["white", "black"])
        text = base.mark_text(fontSize=11).encode(
            **enc, text=alt.condition(f"isValid(datum['{safe}'])", alt.Text(f"{safe}:Q", format=".3g"),
                                      alt.value("failed")),
            color=alt.condition(f"isValid(datum['{safe}'])", alt.Color(f"{safe}:Q", scale=ink, legend=None),
                                alt.value("black")))
        charts.append(alt.layer(rect, text).resolve_scale(color="independent").properties(title=label, width=alt.Step(56),
                                                       height=alt.Step(34) if y is not None else 40))
    chart = alt.hconcat(*charts).resolve_scale(color="independent")
    if params:
        chart = chart.add_params(*params)
    return _write_sweep_page(df, axes, chart, Path(path), title)


def _write_sweep_page(df: pd.DataFrame, axes: list[str], chart, path: Path, title: str | None) -> Path:
    """The heatmaps on the plan report's page template (its Content-Security-Policy, inlined Vega,
    chart error reporting), every grid string escaped; written atomically."""
    from prfaas_plan.report.files import _write
    from prfaas_plan.report.page import Col, Figure, Report, Section, Table, _e, _table_html

    bad = df[df["status"] == "error"]
    name = title or f"Sweep {df.attrs.get('grid', '')}".strip()
    subtitle = (f"Base scenario <code>{_e(df.attrs.get('scenario', ''))}</code>; run: {_e(df.attrs.get('run', ''))}; "
                f"{len(df)} rows; axes: "
                + ", ".join(f"<code>{_e(a)}</code> ({df[a].nunique(dropna=False)})" for a in axes)
                + f"; {len(bad)} failed.")
    lead = ("Colours run from worse (dark) to better (bright) in each panel; grey cells failed "
            "(hover for the error). Values are the PrfaaS-PD plan per cell"
            + (" (simulated fields averaged over seeds)" if "seed" in df.columns else "") + ".")
    blocks: list = [Figure("heatmaps", chart)]
    if len(bad):
        failed = Table("failed-cells", bad.head(50), [Col(a, a, fmt="text", text=True) for a in axes]
                       + [Col("error", "error", fmt="text", text=True)])
        blocks.append(f"<details><summary>Failed cells</summary>{_table_html(failed)}</details>")
    report = Report("sweep", name, subtitle, [], _e(lead), [Section("heatmaps", "Heatmaps", blocks)])
    return _write(report, path, None)
