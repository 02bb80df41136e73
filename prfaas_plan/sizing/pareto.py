"""Pareto frontiers of sizing: the cheapest plan as the TTFT SLO or the target rate moves.

:func:`frontier_cost_vs_ttft` sizes one target rate under a sweep of percentile TTFT SLOs;
:func:`frontier_cost_vs_rate` sizes a sweep of target rates under one SLO. Each point is one
:func:`prfaas_plan.sizing.size_prepared` call on a setup :func:`prfaas_plan.sizing.prepare` made
once (the instance types, and the MILP solves and TTFT quantiles the points share: the answer is
``size``'s), run in this process (``executor="serial"``) or on a dask.distributed cluster
(``executor="dask"``, a LocalCluster unless a ``scheduler`` is given; one task per worker, each
preparing once), with a rich progress bar on stderr; points come back in the order given on either
executor.

The frame is long (tidy): per point, one ``series="winner"`` row (the plan ``size`` picks) and one
row per candidate kind (``series`` = the kind: its cheapest feasible candidate over the GPU types,
else its cheapest infeasible one with the reason). A point that ``size`` finds infeasible is a
single winner row with ``feasible=False`` and the message in ``reason``; it never stops the
other points. ``pareto`` marks the feasible rows no other feasible row of the same series
dominates (:func:`pareto_flags`): on the TTFT frontier both $/hour and the achieved TTFT
percentile are minimised; on the rate frontier $/hour is minimised and the rate the bought plan
can serve (``lambda_max_rps``) maximised.

Units: rates in requests/s, times in seconds, money in US dollars ($/hour, $/M tokens).
"""

from __future__ import annotations

import contextlib
import math
import re
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from prfaas_plan.errors import Infeasible, InvalidInput
from prfaas_plan.sizing.result import SizingSLO

if TYPE_CHECKING:
    import pandas as pd

    from prfaas_plan.scenario import Scenario
    from prfaas_plan.sizing import SizingSetup
    from prfaas_plan.sizing.result import SizedPlan, SizingResult

FRONTIER_EXECUTORS = ("serial", "dask")
"""Where the points of a frontier run."""

OBJECTIVES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "ttft": (("usd_per_hour", "ttft_quantile_s"), ()),
    "rate": (("usd_per_hour",), ("lambda_max_rps",)),
}
"""Per frontier: (columns minimised, columns maximised) by the dominance check."""


# ----------------------------------------------------------------------------- dominance
def pareto_flags(df: pd.DataFrame, minimize: Sequence[str] = (), maximize: Sequence[str] = (),
                 by: str | None = "series") -> np.ndarray:
    """True for each row that is feasible, has finite objectives, and that no other such row of the
    same ``by`` group dominates (no worse in every objective and better in one)."""
    cols = list(minimize) + list(maximize)
    if not cols:
        raise InvalidInput("pareto_flags: name at least one column to minimise or maximise")
    vals = df[cols].to_numpy(dtype=float) * np.array([1.0] * len(minimize) + [-1.0] * len(maximize))
    ok = df["feasible"].to_numpy(dtype=bool) & np.isfinite(vals).all(axis=1)
    groups = df[by].to_numpy() if by is not None else np.zeros(len(df))
    out = np.zeros(len(df), dtype=bool)
    for g in dict.fromkeys(groups[ok]):
        idx = np.flatnonzero(ok & (groups == g))
        v = vals[idx]
        le = (v[:, None, :] <= v[None, :, :]).all(axis=2)  # le[j, i]: row j no worse than row i everywhere
        lt = (v[:, None, :] < v[None, :, :]).any(axis=2)
        out[idx] = ~(le & lt).any(axis=0)
    return out


# ----------------------------------------------------------------------------- rows
BASE_COLUMNS = ("series", "kind", "label", "feasible", "usd_per_hour", "usd_per_million_tokens", "gpu_usd_per_hour",
                "link_usd_per_hour", "energy_usd_per_hour", "lambda_max_rps", "ttft_quantile_s", "tpot_s", "gpus",
                "link", "threshold_tokens", "binding", "bill_of_materials", "reason")
"""Columns every frontier frame has (a plan's row carries more: :meth:`SizedPlan.row`)."""


def _best_of_kinds(res: SizingResult) -> list[SizedPlan]:
    """Each kind's cheapest feasible candidate (else its cheapest infeasible one), kinds in order of appearance."""
    best: dict[str, SizedPlan] = {}
    for c in res.candidates:
        cur = best.get(c.kind)
        if cur is None or (c.feasible, -c.usd_per_hour) > (cur.feasible, -cur.usd_per_hour):
            best[c.kind] = c
    return list(best.values())


def size_point(setup: SizingSetup, target_rps: float, slo: SizingSLO | None) -> list[dict[str, Any]]:
    """The rows of one frontier point: :func:`~prfaas_plan.sizing.size_prepared`'s winner and the
    best of each candidate kind; a single infeasible winner row when it raises
    :class:`~prfaas_plan.errors.Infeasible` (``binding``: the constraint its message names after
    "binding constraint: ")."""
    from prfaas_plan.sizing import size_prepared

    try:
        res = size_prepared(setup, target_rps, slo)
    except Infeasible as exc:
        binding = re.search(r"binding constraint: ([\w.-]+)", str(exc))
        return [{"series": "winner", "feasible": False, "binding": binding.group(1) if binding else "",
                 "reason": str(exc)}]
    return [{"series": "winner", **res.winner.row()}] + [{"series": p.kind, **p.row()} for p in _best_of_kinds(res)]


def size_points(sc: Scenario, points: list[tuple[int, float, SizingSLO | None]],
                size_kwargs: dict) -> list[tuple[int, list[dict[str, Any]]]]:
    """The rows of several points ``(index, target_rps, slo)`` of one frontier, on one
    :func:`~prfaas_plan.sizing.prepare` of ``size_kwargs`` (instance types built once, solves and
    TTFT quantiles shared): what one dask task runs."""
    from prfaas_plan.sizing import prepare

    setup = prepare(sc, points[0][2], **size_kwargs)
    return [(i, size_point(setup, rps, slo)) for i, rps, slo in points]


# ----------------------------------------------------------------------------- executors
def _run_points(sc: Scenario, points: list[tuple[float, SizingSLO | None]], size_kwargs: dict, executor: str,
                workers: int | None, scheduler: Any, progress: bool | None, name: str) -> list[list[dict]]:
    """Each point's rows, in the order of ``points``, computed on ``executor``: serially on one
    setup, or on dask as one task per worker, each preparing its setup once and sizing every
    ``k``-th point (round robin, so that the slow tight-SLO points spread over the workers)."""
    from prfaas_plan.sizing import prepare
    from prfaas_plan.sweeps.run import progress_bar

    show = (sys.stderr.isatty() and len(points) > 1) if progress is None else progress
    out: list[list[dict] | None] = [None] * len(points)
    indexed = [(i, rps, slo) for i, (rps, slo) in enumerate(points)]
    with contextlib.ExitStack() as stack:
        if executor == "dask":
            from dask.distributed import as_completed

            from prfaas_plan.sweeps.executors import dask_client

            client = dask_client(workers, scheduler, stack)
            k = max(1, min(len(points), sum(client.nthreads().values())))
            futures = [client.submit(size_points, sc, indexed[j::k], size_kwargs, pure=False) for j in range(k)]
            stack.callback(lambda: client.cancel([f for f in futures if not f.done()]))
            done = (pair for f in as_completed(futures) for pair in f.result())
        else:
            setup = prepare(sc, points[0][1], **size_kwargs)
            done = ((i, size_point(setup, rps, slo)) for i, rps, slo in indexed)
        bar = stack.enter_context(progress_bar(show))  # after every dask task is submitted
        task = bar.add_task(name, total=len(points))
        for i, rows in done:
            out[i] = rows
            bar.update(task, advance=1)
    return [rows or [] for rows in out]


def _frame(rows_per_point: list[list[dict]], swept: str, values: Sequence[float], frontier: str,
           extra: dict[str, Any]) -> pd.DataFrame:
    import pandas as pd

    recs = [{"point": i, swept: float(v), **extra, **r} for i, (v, rows) in enumerate(zip(values, rows_per_point))
            for r in rows]
    df = pd.DataFrame.from_records(recs)
    df = df.reindex(columns=list(dict.fromkeys(["point", swept, *extra, *BASE_COLUMNS, *df.columns])))
    df["feasible"] = df["feasible"].astype(bool)
    lo, hi = OBJECTIVES[frontier]
    df["pareto"] = pareto_flags(df, lo, hi) if len(df) else np.zeros(0, dtype=bool)
    df.attrs.update(frontier=frontier, swept=swept)
    return df


def _positive(values: Sequence[float], field: str, unit: str) -> list[float]:
    out = [float(v) for v in values]
    if not out:
        raise InvalidInput(f"{field}: give at least one value")
    bad = [v for v in out if not (math.isfinite(v) and v > 0)]
    if bad:
        raise InvalidInput(f"{field}: {bad[0]!r} is not a positive number of {unit}")
    return out


# ----------------------------------------------------------------------------- frontiers
def frontier_cost_vs_ttft(sc: Scenario, target_rps: float, ttft_slos_s: Sequence[float], *,
                          ttft_quantile: float | None = None, tpot_s: float | None = None, executor: str = "serial",
                          workers: int | None = None, scheduler: Any = None, progress: bool | None = None,
                          **size_kwargs: Any) -> pd.DataFrame:
    """$/hour (and $/M tokens) of the cheapest plan for ``target_rps`` (requests/s) under each
    percentile TTFT SLO in ``ttft_slos_s`` (seconds), the ``ttft_quantile`` percentile (default
    the scenario's) and TPOT SLO ``tpot_s`` (seconds per token, default the scenario's) held at
    every point. ``size_kwargs`` go to every :func:`~prfaas_plan.sizing.size` call. Rows as the
    module says; columns ``point``, ``ttft_slo_s``, ``target_rps``, ``ttft_quantile``, ``series``,
    ``kind``, ``label``, ``feasible``, the costs, ``lambda_max_rps``, ``ttft_quantile_s``,
    ``tpot_s``, ``binding``, ``reason``, the rest of :meth:`SizedPlan.row`, and ``pareto``."""
    from dataclasses import replace

    from prfaas_plan.sweeps.executors import check_executor_flags  # (the sweeps package imports pandas)

    check_executor_flags(executor, workers, scheduler, FRONTIER_EXECUTORS)
    slos = _positive(ttft_slos_s, "ttft_slos_s", "seconds")
    rps = _positive([target_rps], "target_rps", "requests/s")[0]
    base = SizingSLO.of_scenario(sc)
    base = replace(base, ttft_quantile=base.ttft_quantile if ttft_quantile is None else ttft_quantile,
                   tpot_s=base.tpot_s if tpot_s is None else tpot_s)
    points = [(rps, replace(base, ttft_s=s)) for s in slos]
    rows = _run_points(sc, points, size_kwargs, executor, workers, scheduler, progress,
                       f"frontier $/hour vs TTFT ({len(points)} SLOs)")
    return _frame(rows, "ttft_slo_s", slos, "ttft", {"target_rps": rps, "ttft_quantile": base.ttft_quantile})


def frontier_cost_vs_rate(sc: Scenario, rates_rps: Sequence[float], slo: SizingSLO | None = None, *,
                          executor: str = "serial", workers: int | None = None, scheduler: Any = None,
                          progress: bool | None = None, **size_kwargs: Any) -> pd.DataFrame:
    """$/hour (and $/M tokens) of the cheapest plan for each target rate in ``rates_rps``
    (requests/s) under one ``slo`` (None: the scenario's, as ``size`` takes it). Rows and columns
    as :func:`frontier_cost_vs_ttft`, with ``target_rps`` swept and ``ttft_slo_s`` fixed (NaN: no
    TTFT SLO)."""
    from prfaas_plan.sweeps.executors import check_executor_flags  # (the sweeps package imports pandas)

    check_executor_flags(executor, workers, scheduler, FRONTIER_EXECUTORS)
    rates = _positive(rates_rps, "rates_rps", "requests/s")
    slo = slo if slo is not None else SizingSLO.of_scenario(sc)
    rows = _run_points(sc, [(r, slo) for r in rates], size_kwargs, executor, workers, scheduler, progress,
                       f"frontier $/hour vs rate ({len(rates)} rates)")
    fixed = {"ttft_slo_s": slo.ttft_s if slo.ttft_s is not None else math.nan, "ttft_quantile": slo.ttft_quantile}
    return _frame(rows, "target_rps", rates, "rate", fixed)


__all__ = ["FRONTIER_EXECUTORS", "frontier_cost_vs_rate", "frontier_cost_vs_ttft", "pareto_flags", "size_point", "size_points"]
