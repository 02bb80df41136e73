"""Running a sweep: every cell of a grid computed (or reused from the sidecar) on an executor, with progress.

:func:`sweep` validates the whole grid first, reuses the cells a previous run saved beside the
output, runs the rest on the chosen executor (:mod:`prfaas_plan.sweeps.executors`) while a
``rich`` progress bar counts them, saves each finished cell the moment it arrives, and assembles
the table (and the parquet) at the end.
"""

from __future__ import annotations

import contextlib
import sys
import uuid
from pathlib import Path

import pandas as pd

from prfaas_plan.errors import InvalidInput
from prfaas_plan.sweeps.executors import EXECUTORS, check_executor_flags
from prfaas_plan.sweeps.grid import Cell, GridSpec, expand_grid
from prfaas_plan.sweeps.results import read_sidecar, results_table, save_record, sidecar_dir, write_parquet
from prfaas_plan.vocab import SWEEP_EXECUTORS


def progress_bar(enabled: bool):
    """A rich progress bar on stderr (``disable``: nothing drawn)."""
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
                    TimeElapsedColumn(), TimeRemainingColumn(), console=Console(stderr=True), transient=False,
                    disable=not enabled)


def _sidecar(out: Path | None, cells: list[Cell], retry_failed: bool) -> tuple[Path | None, dict[str, dict]]:
    """The sidecar folder (created) and the saved records this grid can reuse."""
    if out is None:
        return None, {}
    if out.is_dir():
        raise InvalidInput(f"--output: {out} is a folder; give a file name such as results.parquet")
    if not out.parent.is_dir():
        raise InvalidInput(f"--output: folder {out.parent} does not exist")
    side = sidecar_dir(out)
    side.mkdir(exist_ok=True)
    wanted = {c.cell_id for c in cells}
    return side, {k: v for k, v in read_sidecar(side).items()
                  if k in wanted and not (retry_failed and v.get("error"))}


def sweep(grid: GridSpec | dict | str | Path, executor: str = "local", workers: int | None = None, scheduler=None,
          out: str | Path | None = None, *, progress: bool | None = None, retry_failed: bool = False) -> pd.DataFrame:
    """Run every cell of ``grid`` (a dict or a YAML path) and return one row per cell (and seed).

    executor: ``local`` (process pool of ``workers``, default one per CPU), ``dask`` (a
    LocalCluster of ``workers`` processes, or the cluster at ``scheduler``: an address such as
    ``tcp://host:8786``, a ``Client`` or a cluster object) or ``serial`` (this process).
    out: the parquet to write; finished cells are kept in ``OUT.cells/`` and reused by a rerun
    (``retry_failed`` reruns the cells saved with an error or found infeasible). ``df.attrs`` has
    ``computed``, ``reused``, ``failed`` (status error) and ``infeasible`` counts.
    """
    check_executor_flags(executor, workers, scheduler, SWEEP_EXECUTORS)
    g, base, cells = expand_grid(grid)  # every cell validated before anything runs
    out_path = Path(out) if out is not None else None
    side, records = _sidecar(out_path, cells, retry_failed)
    unique: dict[str, Cell] = {}
    for c in cells:
        if c.cell_id not in records:
            unique.setdefault(c.cell_id, c)
    todo = list(unique.values())
    reused = len({c.cell_id for c in cells} & records.keys())
    run_id = uuid.uuid4().hex[:12]
    name = f"sweep {g.name or 'grid'}"
    failed = 0
    with contextlib.ExitStack() as stack:
        # the executor starts (and every cell is submitted) before the progress bar's thread
        it = EXECUTORS[executor](todo, workers, scheduler, stack) if todo else iter(())
        bar = stack.enter_context(progress_bar(sys.stderr.isatty() if progress is None else progress))
        task = bar.add_task(name, total=len(todo) + reused, completed=reused)
        for cell, rec in it:
            rec.update(run_id=run_id, inputs=cell.inputs)
            failed += bool(rec.get("error"))
            records[cell.cell_id] = rec
            if side is not None and rec.get("save", True):
                save_record(side, rec)
            bar.update(task, advance=1, description=name + (f" ({failed} failed)" if failed else ""))
    df = results_table(g, base, cells, records)
    df.attrs.update(computed=len(todo), reused=reused, failed=int((df["status"] == "error").sum()),
                    infeasible=int((df["status"] == "infeasible").sum()), run_id=run_id,
                    sidecar=str(side) if side else None)
    if out_path is not None:
        write_parquet(df, out_path, g, base)
    return df
