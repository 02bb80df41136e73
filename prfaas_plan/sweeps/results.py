"""A sweep's files and table: the resumable sidecar of cell records, the results table and its parquet.

With an output path ``OUT``, each finished cell is written as ``OUT.cells/<cell_id>.json`` the
moment it completes (atomically); a rerun of the same grid reuses those records. The table has
one row per cell (and seed): ``cell``, ``cell_id``, the axis values (columns named as the axes),
``run``, ``mode``, ``seed``, ``status`` (ok, infeasible or error), ``error``, then the cell's outputs.
The parquet keeps the grid in its metadata, which :func:`read_results` puts back in ``df.attrs``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from prfaas_plan import __version__
from prfaas_plan.data import atomic_write

if TYPE_CHECKING:
    from prfaas_plan.scenario import Scenario
    from prfaas_plan.sweeps.grid import Cell, GridSpec

META_KEY = b"prfaas_plan.sweeps"
"""The parquet metadata key of the grid description."""


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


def save_record(folder: Path, rec: dict) -> None:
    """Write one finished cell's record into the sidecar (atomically)."""
    atomic_write(folder / f"{rec['cell_id']}.json", json.dumps(rec, default=str).encode())


def status_of(rec: dict) -> str:
    """A record's status (records saved before statuses existed: error when they carry one)."""
    return rec.get("status") or ("error" if rec.get("error") else "ok")


def results_table(g: GridSpec, base: Scenario, cells: list[Cell], records: dict[str, dict]) -> pd.DataFrame:
    """One row per cell (and seed), in cell order, with the grid in ``df.attrs``."""
    rows = []
    for c in cells:
        rec = records[c.cell_id]
        row = {"cell": c.index, "cell_id": c.cell_id, **c.inputs, "run": c.run, "mode": c.mode}
        if c.run == "simulate":
            row.setdefault("policy", c.policy or "fixed")
            row["seed"] = c.seed
        row["status"] = status_of(rec)
        row["error"] = rec.get("error")
        for k, v in rec.get("outputs", {}).items():
            row.setdefault(k, v)
        rows.append(row)
    df = pd.DataFrame(rows)
    df.attrs.update(grid=g.name or "grid", scenario=base.spec.id, axes=list(g.axes), run=g.run)
    return df


def write_parquet(df: pd.DataFrame, out: Path, g: GridSpec, base: Scenario) -> None:
    """The table as parquet, the grid in its metadata, written atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(df, preserve_index=False)
    meta = dict(table.schema.metadata or {})
    meta[META_KEY] = json.dumps({"grid": g.model_dump(mode="json"), "scenario": base.spec.id,
                                 "axes": list(g.axes), "version": __version__}).encode()
    sink = pa.BufferOutputStream()
    pq.write_table(table.replace_schema_metadata(meta), sink)
    atomic_write(out, sink.getvalue().to_pybytes())


def read_results(path: str | Path) -> pd.DataFrame:
    """A sweep's parquet with its grid description in ``df.attrs`` (``grid``, ``axes``...)."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    df = table.to_pandas()
    raw = (table.schema.metadata or {}).get(META_KEY)
    if raw:
        meta = json.loads(raw)
        df.attrs.update(grid=meta["grid"].get("name") or "grid", scenario=meta.get("scenario"),
                        axes=meta.get("axes", []), run=meta["grid"].get("run"))
    return df
