"""Where a run's records go: the sink (in memory, running totals, parquet streams) and the output folder.

The :class:`Sink` takes request records and time-series rows a chunk at a time (numpy columns),
keeps them (:class:`Records`: frames built on first access), or folds them into
:class:`result.Totals` (runs beyond ``MAX_ROWS_IN_MEMORY``), and appends them to parquet files;
:func:`write_outputs` and ``--out`` write requests.parquet, timeseries.parquet, summary.json and
manifest.json all or none.
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
from prfaas_plan.tabular import Columns

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


def requests_frame(columns: Columns) -> pd.DataFrame:
    """Request records (:data:`ring.REQUEST_COLUMNS`) as the frame of :attr:`SimResult.requests`
    (``path`` categorical: pd_p, prfaas)."""
    import pandas as pd

    frame = dict(columns)
    frame["path"] = pd.Categorical.from_codes(columns["path"].astype(np.int64), PATH_NAMES)
    return pd.DataFrame(frame)


def timeseries_frame(columns: Columns | None) -> pd.DataFrame:
    """Time-series rows (:data:`TIMESERIES_COLUMNS`) as the frame of :attr:`SimResult.timeseries`
    (None: no rows, an empty frame of those columns)."""
    import pandas as pd

    if columns is None:
        return pd.DataFrame.from_records([], columns=TIMESERIES_COLUMNS)
    return pd.DataFrame(columns)


def frame_of(kind: str, columns: Columns | None) -> pd.DataFrame:
    """Records of ``kind`` (requests, timeseries) as the frame :class:`SimResult` gives for it."""
    return requests_frame(columns) if kind == "requests" else timeseries_frame(columns)


def columns_of(kind: str, frame: pd.DataFrame) -> Columns:
    """A frame of ``kind`` (requests, timeseries; as read back from parquet) as numpy columns."""
    columns = {name: frame[name].to_numpy() for name in frame.columns}
    if kind == "requests":
        import pandas as pd

        columns["path"] = pd.Categorical(frame["path"], categories=PATH_NAMES).codes.astype(np.int8)
    return columns


class Records:
    """A run's records kept in memory as numpy column chunks, (requests, timeseries) by index: each
    a pandas DataFrame built on first access (``records[0]``: requests), so a run that only
    summarises needs no pandas."""

    def __init__(self, chunks: dict[str, list[Columns]]) -> None:
        self.chunks = chunks
        self._columns: dict[str, Columns | None] = {}
        self._frames: dict[int, pd.DataFrame] = {}

    def columns(self, kind: str) -> Columns | None:
        """The whole run's columns of ``kind`` (requests, timeseries), chunks joined (None: no rows)."""
        if kind not in self._columns:
            chunks = self.chunks[kind]
            self._columns[kind] = (None if not chunks else chunks[0] if len(chunks) == 1
                                   else {name: np.concatenate([c[name] for c in chunks]) for name in chunks[0]})
            self.chunks[kind] = []
        return self._columns[kind]

    def __getitem__(self, index: int) -> pd.DataFrame:
        if index not in self._frames:
            kind = ("requests", "timeseries")[index]
            self._frames[index] = frame_of(kind, self.columns(kind))
        return self._frames[index]

    def __len__(self) -> int:
        return 2


class Sink:
    """Where a run's records go, in order, a chunk at a time (numpy columns): requests (in arrival
    order) and time-series rows. Kept in memory, or (``totals`` given) only folded into those
    running totals; appended to a parquet file per kind where ``paths`` name one."""

    def __init__(self, totals: Totals | None = None, paths: dict[str, Path] | None = None) -> None:
        self.totals, self.paths = totals, paths or {}
        self.kept: dict[str, list[Columns]] | None = {"requests": [], "timeseries": []} if totals is None else None
        self.writers: dict = {}
        self.tokens = np.zeros((len(PATH_NAMES), 2), dtype=np.int64)  # per path: hit, input tokens

    def add(self, kind: str, columns: Columns) -> None:
        if kind in self.paths:
            self.write_file(kind, frame_of(kind, columns))
        if kind == "requests":
            codes = columns["path"]
            for code in range(len(PATH_NAMES)):
                on = codes == code
                self.tokens[code] += (columns["hit_tokens"][on].sum(), columns["input_tokens"][on].sum())
        if self.kept is not None:
            self.kept[kind].append(columns)
        else:
            self.totals.add(kind, columns)

    def add_timeseries(self, columns: Columns) -> None:
        """Take time-series rows as float64 columns (:data:`TIMESERIES_COLUMNS`); the counts are cast
        to int64 (whole numbers, exact as floats); each column is kept as a contiguous copy."""
        self.add("timeseries", {name: columns[name].astype(np.int64) if name in _TIMESERIES_INTEGERS
                                else np.array(columns[name], dtype=np.float64) for name in TIMESERIES_COLUMNS})

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

    def close(self) -> Records | None:
        """Finish the files; the records when kept in memory, else None."""
        records = None if self.kept is None else Records(self.kept)
        if "timeseries" in self.paths and "timeseries" not in self.writers:  # a run shorter than one period
            timeseries_frame(None).to_parquet(self.paths["timeseries"], index=False)
        self.abort()
        return records

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
