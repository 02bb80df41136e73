"""One sweep cell, run on a worker: its plan (and simulation), recorded as outputs and a status.

A cell's record is a dict: ``cell_id``, ``status`` (:data:`STATUSES`), ``error`` (the message, or
None), ``save`` (False for a failure that is not the cell's answer, retried on resume),
``outputs`` (the table's columns), ``elapsed_s``, ``host`` and ``pid``. A planner that finds no
deployment raises :class:`~prfaas_plan.errors.Infeasible`: the cell's answer, status
``infeasible``; bad input (:class:`~prfaas_plan.errors.InvalidInput`) is status ``error``, and so is
any other exception (then not saved).
"""

from __future__ import annotations

import math
import os
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prfaas_plan.errors import Infeasible, PlanError
from prfaas_plan.scenario import Scenario, ScenarioSpec

if TYPE_CHECKING:
    from prfaas_plan.planner import PlanResult
    from prfaas_plan.sweeps.grid import Cell

STATUSES = ("ok", "infeasible", "error")
"""A cell's status: planned, no deployment can serve it, or it failed (bad input or a bug)."""


def json_scalar(v: Any) -> Any:
    """A JSON-friendly Python scalar (numpy scalars unwrapped)."""
    if hasattr(v, "item") and callable(v.item) and getattr(v, "ndim", 1) == 0:
        v = v.item()
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


def _ttft(res: PlanResult, name: str, basis: str) -> dict[str, float]:
    """TTFT statistics of plan ``name`` over all requests at a rate basis ({} when absent)."""
    tt = res.ttft
    sel = tt[(tt.plan == name) & (tt.path == "all") & (tt.basis == basis)]
    if not len(sel):
        return {}
    r = sel.iloc[0]
    return {"rate_rps": float(r.rate_rps), "mean_s": float(r.mean_s), "p50_s": float(r.p50_s),
            "p90_s": float(r.p90_s), "p99_s": float(r.p99_s)}


def plan_outputs(res: PlanResult) -> dict:
    """The sweep columns of a :class:`~prfaas_plan.planner.PlanResult`: the PrfaaS-PD plan,
    TTFT at the scenario's load, and ratios against each baseline."""
    p = res.plan
    row = {k: v for k, v in p.row().items() if k not in ("plan", "mode")}
    row["rps_per_usd_hour"] = p.rps_per_usd_hour
    row["is_threshold"] = bool(p.is_threshold)
    own = _ttft(res, p.name, "own load")
    row["ttft_rate_rps"] = own.get("rate_rps", math.nan)
    for q in ("mean", "p50", "p90", "p99"):
        row[f"ttft_{q}_s"] = own.get(f"{q}_s", math.nan)
    common = _ttft(res, p.name, "common rate").get("p90_s", math.nan)
    row["ttft_p90_s_common_rate"] = common
    if p.name in res.slo_rps:
        row["slo_rps"] = res.slo_rps[p.name]
    for name, b in res.baselines.items():
        key = name.replace("-", "_")
        row[f"{key}_rps"] = b.lambda_max_rps
        row[f"vs_{key}"] = p.lambda_max_rps / b.lambda_max_rps if b.lambda_max_rps > 0 else math.nan
        row[f"cost_vs_{key}"] = (p.usd_per_million_tokens / b.usd_per_million_tokens
                                 if b.lambda_max_rps > 0 and p.lambda_max_rps > 0 else math.nan)
        bc = _ttft(res, name, "common rate").get("p90_s", math.nan)
        row[f"ttft_p90_vs_{key}"] = common / bc if bc and bc > 0 else math.nan
    return {k: json_scalar(v) for k, v in row.items()}


def summary_outputs(summary: dict[str, Any]) -> dict:
    """The simulator's summary (:meth:`~prfaas_plan.sim.SimResult.summary`: figure name -> scalar)
    as ``sim_*`` columns."""
    return {f"sim_{k}": json_scalar(v) for k, v in summary.items()}


def _scenario(cell: Cell) -> Scenario:
    return Scenario(ScenarioSpec.model_validate(cell.spec), cell.origin, tuple(Path(d) for d in cell.model_dirs))


def _outputs(cell: Cell, plans: dict[str, PlanResult]) -> dict:
    """Plan the cell (once per ``plan_key`` in ``plans``) and simulate it for ``run: simulate``."""
    from prfaas_plan.planner import plan

    sc = _scenario(cell)
    res = plans.get(cell.plan_key)
    if res is None:
        res = plans[cell.plan_key] = plan(sc, mode=cell.mode, n_buckets=cell.n_buckets)
    out = plan_outputs(res)
    if cell.run == "simulate":
        from prfaas_plan.sim import simulate

        kwargs: dict[str, Any] = {"load": sc.spec.load, "seed": cell.seed}
        if cell.duration_s is not None:
            kwargs["duration_s"] = cell.duration_s
        if cell.policy is not None:
            kwargs["policy"] = cell.policy
        out.update(summary_outputs(simulate(sc, res, **kwargs).summary()))
    return out


def run_cell(cell: Cell, plans: dict[str, PlanResult] | None = None) -> dict:
    """Run one cell; returns its record (see the module). ``plans`` memoises plans by
    ``plan_key`` across the cells of one task. KeyboardInterrupt and SystemExit propagate."""
    t0 = time.perf_counter()
    rec: dict[str, Any] = {"cell_id": cell.cell_id, "status": "ok", "error": None, "save": True, "outputs": {}}
    try:
        rec["outputs"] = _outputs(cell, {} if plans is None else plans)
    except PlanError as exc:
        rec.update(status="infeasible" if isinstance(exc, Infeasible) else "error", error=str(exc))
    except Exception as exc:  # noqa: BLE001 - any failure is this cell's, not the sweep's
        import traceback

        where = traceback.extract_tb(exc.__traceback__)[-1]
        rec.update(status="error", save=False,
                   error=f"{type(exc).__name__}: {exc} (at {Path(where.filename).name}:{where.lineno} in {where.name})")
    rec.update(elapsed_s=time.perf_counter() - t0, host=socket.gethostname(), pid=os.getpid())
    return rec


def lost(cell: Cell, exc: BaseException) -> dict:
    """The record of a cell whose worker failed outside the cell (not saved: retried on resume)."""
    return {"cell_id": cell.cell_id, "status": "error", "error": f"executor: {type(exc).__name__}: {exc}",
            "save": False, "outputs": {}, "elapsed_s": math.nan, "host": None, "pid": None}


def run_unit(cells: list[Cell]) -> list[dict]:
    """Run cells that share a plan (the seeds of a simulated cell) in one task, planning once."""
    plans: dict[str, PlanResult] = {}
    return [run_cell(c, plans) for c in cells]
