"""Where a run's records go: the sink (in memory, running totals, parquet streams) and the output folder.

The :class:`Sink` takes request records and time-series rows a chunk at a time, keeps them, or
folds them into :class:`result.Totals` (runs beyond ``MAX_ROWS_IN_MEMORY``), and appends them to
parquet files; :func:`write_outputs` and ``--out`` write requests.parquet, timeseries.parquet,
summary.json and manifest.json all or none.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from prfaas_plan.data import staged_files
from prfaas_plan.errors import InvalidInput, shown
from prfaas_plan.sim.ring import PATH_NAMES

if TYPE_CHECKING:
    import pandas as pd

    from prfaas_plan.sim.result import SimResult, Totals

TIMESERIES_COLUMNS = (
    "time_s", "egress_gbps", "link_utilisation", "egress_demand", "link_capacity_gbps", "active_transfers",
    "remote_queue", "local_queue", "decode_queue", "decode_busy", "decode_slots", "threshold_tokens",
    "n_pd_p", "n_pd_d",
)
_TIMESERIES_INTEGERS = frozenset(("active_transfers", "remote_queue", "local_queue", "decode_queue", "decode_busy",
                                   "decode_slots", "n_pd_p", "n_pd_d"))  # counts; the other columns are floats
TIMESERIES_CHUNK_ROWS = 1 << 14  # time-series rows handed on at a time
MAX_ROWS_IN_MEMORY = 1_000_000  # longer runs keep running totals instead of their records (simulate)


class Sink:
    """Where a run's records go, in order, a chunk at a time: requests (in arrival order) and
    time-series rows. Kept in memory, or (``totals`` given) only folded into those running totals;
    appended to a parquet file per kind where ``paths`` name one."""

    def __init__(self, totals: Totals | None = None, paths: dict[str, Path] | None = None) -> None:
        self.totals, self.paths = totals, paths or {}
        self.kept: dict[str, list[pd.DataFrame]] | None = {"requests": [], "timeseries": []} if totals is None else None
        self.writers: dict = {}
        self.tokens = np.zeros((len(PATH_NAMES), 2), dtype=np.int64)  # per path: hit, input tokens

    def add(self, kind: str, frame: pd.DataFrame) -> None:
        if kind in self.paths:
            self.write_file(kind, frame)
        if kind == "requests":
            codes = frame.path.cat.codes.to_numpy()
            for code in range(len(PATH_NAMES)):
                on = codes == code
                self.tokens[code] += (frame.hit_tokens.to_numpy()[on].sum(), frame.input_tokens.to_numpy()[on].sum())
        if self.kept is not None:
            self.kept[kind].append(frame)
        else:
            self.totals.add(kind, frame)

    def add_timeseries(self, columns: dict[str, np.ndarray]) -> None:
        """Take time-series rows as float64 columns (:data:`TIMESERIES_COLUMNS`); the counts are cast
        to int64 (whole numbers, exact as floats)."""
        import pandas as pd

        self.add("timeseries", pd.DataFrame({
            name: columns[name].astype(np.int64) if name in _TIMESERIES_INTEGERS else columns[name]
            for name in TIMESERIES_COLUMNS}))

    def write_file(self, kind: str, frame: pd.DataFrame) -> None:
        """Append a frame of ``kind`` (requests, timeseries) to its parquet file."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        writer = self.writers.get(kind)
        table = pa.Table.from_pandas(frame, preserve_index=False, schema=writer.schema if writer else None)
        if writer is None:  # dictionary-encode the path only: trying it on floats costs 2/3 of the time
            writer = self.writers[kind] = pq.ParquetWriter(self.paths[kind], table.schema,
                                                           use_dictionary=[c for c in table.schema.names if c == "path"])
        writer.write_table(table)

    def close(self) -> tuple[pd.DataFrame, pd.DataFrame] | None:
        """Finish the files; the (requests, timeseries) frames when kept in memory, else None."""
        import pandas as pd

        frames = None
        if self.kept is not None:
            ts = self.kept["timeseries"]
            frames = (pd.concat(self.kept["requests"], ignore_index=True),
                      pd.concat(ts, ignore_index=True) if ts else pd.DataFrame.from_records([], columns=TIMESERIES_COLUMNS))
        if "timeseries" in self.paths and "timeseries" not in self.writers:  # a run shorter than one period
            pd.DataFrame.from_records([], columns=TIMESERIES_COLUMNS).to_parquet(self.paths["timeseries"], index=False)
        self.abort()
        return frames

    def abort(self) -> None:
        """Close the files (a failed run's staged files are removed by their folder)."""
        for writer in self.writers.values():
            writer.close()
        self.writers = {}


OUTPUT_FILES = ("requests.parquet", "timeseries.parquet", "summary.json", "manifest.json")  # in writing order
WRITER = "prfaas-plan simulate"


def previous_outputs(folder: Path) -> set[str]:
    """The output files a previous run wrote into ``folder``: those its manifest.json lists."""
    try:
        doc = json.loads((folder / "manifest.json").read_text())
    except (OSError, ValueError):
        return set()
    if not isinstance(doc, dict) or doc.get("written_by") != WRITER:
        return set()
    return set(OUTPUT_FILES) & {str(name) for name in doc.get("files", ())}


def check_out_dir(out_dir: str | Path) -> Path:
    """Fail early (before a run) when ``out_dir`` cannot take a run's outputs: it must be a folder,
    or not exist yet inside an existing folder, and any file there named like an output
    (:data:`OUTPUT_FILES`) must be a previous run's, listed in its manifest.json."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InvalidInput(f"--out: {shown(out)} is a file; give a folder (it is created if missing)")
    if not out.exists():
        if out.parent.is_file():
            raise InvalidInput(f"--out: {shown(out.parent)} is a file, so no folder can be made in it; choose another folder")
        if not out.parent.is_dir():
            raise InvalidInput(f"--out: folder {shown(out.parent)} does not exist; create it or choose another folder")
        folder = out.parent
    else:
        folder, ours = out, previous_outputs(out)
        for name in OUTPUT_FILES:
            if (out / name).exists() and name not in ours:
                raise InvalidInput(f"--out: {shown(out / name)} was not written by {WRITER} (no manifest.json of ours lists it); "
                                "move it away or choose another folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InvalidInput(f"--out: cannot write to folder {shown(folder)} (permission denied)")
    return out


@contextmanager
def output_folder(out_dir: str | Path) -> Iterator[Callable[[str], Path]]:
    """Stage a run's outputs in ``out_dir`` (see :func:`write_outputs`); yields ``stage(name)``.
    The manifest is staged last; a folder created here is removed again when the block fails."""
    out = check_out_dir(out_dir)
    created = not out.exists()
    try:
        out.mkdir(exist_ok=True)
    except OSError as exc:
        raise InvalidInput(f"--out: cannot create folder {shown(out)} ({exc.strerror or exc})") from None
    try:
        with staged_files(out, what=f"--out: {shown(out)}") as stage:
            yield stage
            manifest = {"written_by": WRITER, "files": list(OUTPUT_FILES)}
            stage("manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
            check_out_dir(out)  # still nothing of anyone else's under our names
    except BaseException:
        if created:
            with suppress(OSError):
                out.rmdir()  # empty: the staged files are gone
        raise


def stage_summary(result: SimResult, stage: Callable[[str], Path]) -> None:
    summary = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in result.summary().items()}
    summary["policy"] = result.policy.name
    summary["duration_s"] = result.duration_s
    summary.update({f"info_{k}": v for k, v in result.info.items() if isinstance(v, (int, float, str))})
    stage("summary.json").write_text(json.dumps(summary, indent=2) + "\n")


def write_outputs(result: SimResult, out_dir: str | Path) -> Path:
    """Write a run's requests.parquet, timeseries.parquet, summary.json and manifest.json (the
    list of the files written) into ``out_dir``, created if missing, all or none: each is staged
    beside its final name and renamed over it once all are written, so a failure leaves the
    folder as it was. Other files in the folder are never touched; a file of one of those names
    that no manifest.json of ours lists is never overwritten (PlanError instead). A run that
    streamed into ``out_dir`` (``simulate(..., out_dir=)``) is already there."""
    out = Path(out_dir)
    if result.out_dir is not None and out.resolve() == result.out_dir.resolve():
        return out
    with output_folder(out) as stage:
        result.requests.to_parquet(stage("requests.parquet"), index=False)
        result.timeseries.to_parquet(stage("timeseries.parquet"), index=False)
        stage_summary(result, stage)
    return out
