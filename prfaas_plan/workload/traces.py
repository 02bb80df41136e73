"""Request traces: Mooncake JSONL, Azure LLM 2023 CSV and generic CSV files, read into one table.

:func:`load_trace` reads a file once into a DataFrame sorted by arrival: ``arrival_s`` (seconds
since the first request), ``input_tokens`` and ``output_tokens`` (int64 tokens), and for Mooncake
traces ``hash_ids`` (each request's prefix block hashes, one per 512-token block);
:func:`read_trace` gives the same columns as a :class:`Trace` of numpy arrays (a Mooncake file
without importing pandas). Every problem with a file is one line naming the file, the column and
the line, and the fix.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from prfaas_plan.errors import InvalidInput, did_you_mean
from prfaas_plan.units import MS_PER_S  # Mooncake timestamps are milliseconds
from prfaas_plan.vocab import TRACE_FORMATS, TraceFormat

if TYPE_CHECKING:
    import pandas as pd

TRACE_COLUMNS: tuple[str, ...] = ("arrival_s", "input_tokens", "output_tokens")
_MOONCAKE_FIELDS: tuple[str, ...] = ("timestamp", "input_length", "output_length", "hash_ids")
_AZURE_COLUMNS: tuple[str, ...] = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_INT_ONLY = frozenset({int})  # json.loads gives int for a JSON integer (bool for true/false)
_JSON_WHITESPACE = " \t\n\r"  # what json.loads skips around a value (str.strip() strips more)
_JSON_NUMBERS = frozenset({int, float})
_EXACT_INT_FLOAT = 2.0**53  # every integer of smaller magnitude is exactly a double


@dataclass(frozen=True, eq=False)
class Trace:
    """A request trace as numpy columns, sorted by arrival (ties keep file order): the columns of
    :func:`load_trace`'s frame (:meth:`frame`) without pandas. It reads like that frame where the
    planner and the simulator read it: ``trace[name]`` (a column: an array, ``hash_ids`` a list of
    lists), ``trace.columns``, ``trace.attrs`` (``path``, ``format``) and ``len(trace)``.

    arrival_s: seconds since the first request (float64); input_tokens, output_tokens: int64
    tokens; hash_ids: each request's prefix block hashes (Mooncake), or None."""

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    hash_ids: list[list[int]] | None = None
    attrs: dict = field(default_factory=dict)

    @property
    def columns(self) -> tuple[str, ...]:
        return TRACE_COLUMNS + (() if self.hash_ids is None else ("hash_ids",))

    def __len__(self) -> int:
        return len(self.arrival_s)

    def __getitem__(self, name: str) -> np.ndarray | list[list[int]]:
        if name not in self.columns:
            raise KeyError(name)
        return getattr(self, name)

    def sorted(self) -> Trace:
        """This trace in arrival order (itself when it is; a stable sort: ties keep their order)."""
        if np.all(self.arrival_s[1:] >= self.arrival_s[:-1]):
            return self
        order = np.argsort(self.arrival_s, kind="stable")
        hash_ids = None if self.hash_ids is None else [self.hash_ids[i] for i in order.tolist()]
        return Trace(self.arrival_s[order], self.input_tokens[order], self.output_tokens[order], hash_ids, self.attrs)

    def frame(self) -> pd.DataFrame:
        """The trace as :func:`load_trace`'s DataFrame (``attrs`` included)."""
        import pandas as pd

        data = {"arrival_s": self.arrival_s, "input_tokens": self.input_tokens, "output_tokens": self.output_tokens}
        if self.hash_ids is not None:
            data["hash_ids"] = pd.Series(self.hash_ids, dtype=object)
        frame = pd.DataFrame(data)
        frame.attrs = dict(self.attrs)
        return frame

    @classmethod
    def of_frame(cls, frame: pd.DataFrame) -> Trace:
        """A DataFrame of trace columns (:data:`TRACE_COLUMNS`, optionally ``hash_ids``) as a Trace, rows as they are."""
        hash_ids = ([h if type(h) is list else list(h) for h in frame["hash_ids"].tolist()]
                    if "hash_ids" in frame.columns else None)
        return cls(frame["arrival_s"].to_numpy(dtype=float), frame["input_tokens"].to_numpy(dtype=np.int64),
                   frame["output_tokens"].to_numpy(dtype=np.int64), hash_ids, dict(frame.attrs))


def _numbers(raw: Sequence[object] | pd.Series) -> tuple[np.ndarray, Sequence[object]]:
    """A raw column as floats (NaN where a value is not a number) and its values by position.
    JSON numbers (Python int and float, each exactly a double below 2^53) go straight to numpy;
    anything else (CSV text, booleans, huge integers, NaN) through ``pandas.to_numeric``, which
    gives the same floats for plain numbers."""
    if isinstance(raw, list) and set(map(type, raw)) <= _JSON_NUMBERS:
        numeric = np.array(raw, dtype=float)
        if numeric.size and np.abs(numeric).max() < _EXACT_INT_FLOAT:
            return numeric, raw
    import pandas as pd

    raw_series = pd.Series(list(raw) if not isinstance(raw, pd.Series) else raw.to_list(), dtype=object)
    return pd.to_numeric(raw_series, errors="coerce").to_numpy(dtype=float), raw_series.to_list()


def _token_column(
    raw: Sequence[object] | pd.Series, path: Path, column: str, line_numbers: np.ndarray, minimum_tokens: int
) -> np.ndarray:
    """Validate a column of token counts: whole numbers >= minimum_tokens; int64 array."""
    numeric, values = _numbers(raw)
    fixes = f"token counts must be whole numbers >= {minimum_tokens}"
    checks = (
        (~np.isfinite(numeric), "is not a number"),
        (numeric < 0, "is negative"),
        (numeric != np.round(numeric), "is not a whole number"),
        (numeric < minimum_tokens, f"is below {minimum_tokens}"),
    )
    for bad, what in checks:
        if bad.any():
            i = int(np.argmax(bad))
            raise InvalidInput(
                f"{path}: column {column!r}, line {line_numbers[i]}: {values[i]!r} {what}; {fixes}"
            )
    return numeric.astype(np.int64)


def _seconds_column(
    raw: Sequence[object] | pd.Series, path: Path, column: str, line_numbers: np.ndarray, scale_s: float
) -> np.ndarray:
    """Validate a numeric time column and convert it to float seconds (value * scale_s)."""
    numeric, values = _numbers(raw)
    bad = ~np.isfinite(numeric)
    if bad.any():
        i = int(np.argmax(bad))
        raise InvalidInput(
            f"{path}: column {column!r}, line {line_numbers[i]}: {values[i]!r} is not a number; "
            "arrival times must be numbers"
        )
    return numeric * scale_s


def _json_line_error(path: Path, line_number: int, line: str) -> InvalidInput:
    """The one-line error for a line that is not one JSON object (json.loads names the problem)."""
    try:
        json.loads(line)
    except json.JSONDecodeError as err:
        return InvalidInput(
            f"{path}: line {line_number} is not valid JSON ({err.msg}); Mooncake traces have one JSON object per line"
        )
    return InvalidInput(f"{path}: line {line_number} is not a JSON object; Mooncake traces have one object per line")


def _mooncake_records(path: Path) -> tuple[list[dict], list[int]]:
    """The objects on the non-blank lines of a Mooncake JSONL file, and their line numbers.

    Each line goes through the C scanner ``json.loads`` runs (without its per-call wrappers, a
    third of the parse); any line it does not read as exactly one object is handed to
    ``json.loads`` for the error message."""
    scan = json.JSONDecoder().scan_once
    fields = frozenset(_MOONCAKE_FIELDS)
    records: list[dict] = []
    line_numbers: list[int] = []
    with path.open(encoding="utf-8") as handle:
        lines = handle.read().split("\n")  # universal newlines, as iterating the file splits
    for line_number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        text = line.strip(_JSON_WHITESPACE)
        try:
            record, end = scan(text, 0)
        except (StopIteration, json.JSONDecodeError):
            end = -1
        if end != len(text) or not isinstance(record, dict):
            raise _json_line_error(path, line_number, line)
        if not fields <= record.keys():
            missing = next(name for name in _MOONCAKE_FIELDS if name not in record)
            raise InvalidInput(
                f"{path}: line {line_number} has no {missing!r} field; Mooncake traces need "
                f"{', '.join(_MOONCAKE_FIELDS)} (or use fmt='csv' with columns=...)"
            )
        records.append(record)
        line_numbers.append(line_number)
    if not records:
        raise InvalidInput(f"{path}: no requests in the file; give a trace with at least one request")
    return records, line_numbers


def _hash_id_lists(records: list[dict], path: Path, line_numbers: list[int]) -> list[list[int]]:
    """Each record's hash_ids, checked to be a list of integers (one pass over all of them; the
    first bad line is looked for only when there is one)."""
    hash_ids = [r["hash_ids"] for r in records]
    if set(map(type, hash_ids)) <= {list} and set(map(type, chain.from_iterable(hash_ids))) <= _INT_ONLY:
        return hash_ids
    for ids, line_number in zip(hash_ids, line_numbers):
        if not isinstance(ids, list) or not set(map(type, ids)) <= _INT_ONLY:
            raise InvalidInput(
                f"{path}: column 'hash_ids', line {line_number}: {ids!r} is not a list of integers; "
                "hash_ids must be a JSON list of block hash integers"
            )
    return hash_ids


def _read_mooncake(path: Path) -> Trace:
    """Mooncake JSONL: one object per line with timestamp (ms), input_length, output_length, hash_ids."""
    records, line_numbers = _mooncake_records(path)
    lines = np.asarray(line_numbers)
    timestamps_ms = _seconds_column([r["timestamp"] for r in records], path, "timestamp", lines, 1.0)
    hash_ids = _hash_id_lists(records, path, line_numbers)
    return Trace(
        (timestamps_ms - timestamps_ms.min()) / MS_PER_S,
        _token_column([r["input_length"] for r in records], path, "input_length", lines, 1),
        _token_column([r["output_length"] for r in records], path, "output_length", lines, 0),
        hash_ids,
    )


def _read_csv_text(path: Path) -> pd.DataFrame:
    import pandas as pd

    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:
        raise InvalidInput(f"{path}: the file is empty; give a CSV trace with a header row") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise InvalidInput(f"{path}: not a readable CSV ({first_line}); check the file") from None
    if frame.empty:
        raise InvalidInput(f"{path}: no requests in the file; give a trace with at least one request")
    return frame


def _require_columns(frame: pd.DataFrame, path: Path, wanted: Sequence[str], fix: str) -> None:
    present = [str(c) for c in frame.columns]
    for name in wanted:
        if name not in present:
            raise InvalidInput(
                f"{path}: no column {name!r}{did_you_mean(name, present)} "
                f"(the file has {', '.join(present)}); {fix}"
            )


def _read_azure(path: Path) -> pd.DataFrame:
    """Azure LLM inference trace 2023: TIMESTAMP (datetime string), ContextTokens, GeneratedTokens."""
    import pandas as pd

    frame = _read_csv_text(path)
    _require_columns(
        frame,
        path,
        _AZURE_COLUMNS,
        "Azure LLM 2023 traces have TIMESTAMP, ContextTokens, GeneratedTokens; "
        "for other CSVs use fmt='csv' with columns={'arrival_s': ..., 'input_tokens': ..., 'output_tokens': ...}",
    )
    lines = np.arange(len(frame)) + 2  # line 1 is the header
    stamps = pd.to_datetime(frame["TIMESTAMP"], format="ISO8601", errors="coerce")
    if stamps.isna().any():
        i = int(np.argmax(stamps.isna().to_numpy()))
        raise InvalidInput(
            f"{path}: column 'TIMESTAMP', line {lines[i]}: {frame['TIMESTAMP'].iloc[i]!r} is not a date-time; "
            "use e.g. 2023-11-16 18:15:46.6805900"
        )
    arrival_s = (stamps - stamps.min()).dt.total_seconds().to_numpy(dtype=float)
    return pd.DataFrame(
        {
            "arrival_s": arrival_s,
            "input_tokens": _token_column(frame["ContextTokens"], path, "ContextTokens", lines, 1),
            "output_tokens": _token_column(frame["GeneratedTokens"], path, "GeneratedTokens", lines, 0),
        }
    )


def _column_mapping(columns: Mapping[str, str] | None) -> dict[str, str]:
    """The file's column name for each trace column (unmapped ones keep their own name)."""
    mapping = {name: name for name in TRACE_COLUMNS}
    for key, source in (columns or {}).items():
        if key not in TRACE_COLUMNS:
            raise InvalidInput(
                f"columns: {key!r} is not a trace column{did_you_mean(key, list(TRACE_COLUMNS))}; "
                f"map {', '.join(TRACE_COLUMNS)} to the file's column names"
            )
        mapping[key] = str(source)
    return mapping


def _read_generic_csv(path: Path, columns: Mapping[str, str] | None) -> pd.DataFrame:
    """A CSV with arrival times in seconds and token counts, under names given by ``columns``."""
    import pandas as pd

    mapping = _column_mapping(columns)
    frame = _read_csv_text(path)
    present = [str(c) for c in frame.columns]
    for key, source in mapping.items():
        if source not in present:
            raise InvalidInput(
                f"{path}: no column {source!r} for {key}{did_you_mean(source, present)} "
                f"(the file has {', '.join(present)}); pass columns={{{key!r}: '<column name>'}}"
            )
    lines = np.arange(len(frame)) + 2
    arrival_s = _seconds_column(frame[mapping["arrival_s"]], path, mapping["arrival_s"], lines, 1.0)
    tokens = {key: frame[mapping[key]] for key in ("input_tokens", "output_tokens")}
    return pd.DataFrame(
        {
            "arrival_s": arrival_s - arrival_s.min(),
            "input_tokens": _token_column(tokens["input_tokens"], path, mapping["input_tokens"], lines, 1),
            "output_tokens": _token_column(tokens["output_tokens"], path, mapping["output_tokens"], lines, 0),
        }
    )


def _detect_format(path: Path, columns: Mapping[str, str] | None) -> TraceFormat:
    """Guess the format from the content: a JSON object per line is Mooncake, else a CSV header."""
    with path.open(encoding="utf-8", errors="replace") as handle:
        first = next((line for line in handle if line.strip()), "")
    if first.lstrip().startswith("{"):
        return "mooncake"
    if columns is not None:
        return "csv"
    header = {name.strip().strip('"') for name in first.strip().split(",")}
    if set(_AZURE_COLUMNS) <= header:
        return "azure"
    if set(TRACE_COLUMNS) <= header:
        return "csv"
    raise InvalidInput(
        f"{path}: cannot tell the trace format from its first line; pass fmt='mooncake', 'azure' or "
        "'csv' (with columns={'arrival_s': ..., 'input_tokens': ..., 'output_tokens': ...})"
    )


def load_trace(
    path: str | Path, fmt: TraceFormat = "auto", columns: Mapping[str, str] | None = None
) -> pd.DataFrame:
    """Read a request trace into a DataFrame sorted by arrival (ties keep file order): :func:`read_trace`'s
    :class:`Trace` as a frame.

    Columns: ``arrival_s`` (float, seconds since the first request), ``input_tokens`` and
    ``output_tokens`` (int64 tokens; input >= 1, output >= 0), and for Mooncake traces
    ``hash_ids`` (list of int per request: prefix block hashes, 512 tokens per block).
    ``frame.attrs`` records ``path`` and ``format``. The file is read and parsed once.

    fmt: ``"mooncake"`` (JSONL: ``timestamp`` in ms, ``input_length``, ``output_length``,
        ``hash_ids``), ``"azure"`` (Azure LLM 2023 CSV: ``TIMESTAMP`` date-times,
        ``ContextTokens``, ``GeneratedTokens``), ``"csv"`` (generic: arrival in seconds), or
        ``"auto"`` (JSON lines -> mooncake; a CSV header with the Azure names -> azure; else csv
        when ``columns`` is given or the header has the canonical names).
    columns: for ``fmt="csv"``, the file's column name for each of ``arrival_s``,
        ``input_tokens``, ``output_tokens`` (unmapped ones default to those names).

    Raises :class:`InvalidInput` (one line naming the file, column and line, and the fix) for a
    missing file, unknown format, missing column, or a non-numeric, fractional or negative value.
    """
    return read_trace(path, fmt, columns).frame()


def read_trace(path: str | Path, fmt: TraceFormat = "auto", columns: Mapping[str, str] | None = None) -> Trace:
    """:func:`load_trace`'s columns as a :class:`Trace` (numpy; a Mooncake file read without pandas)."""
    file_path = Path(path)
    if fmt not in TRACE_FORMATS:
        raise InvalidInput(
            f"fmt: {fmt!r} is not a trace format{did_you_mean(str(fmt), list(TRACE_FORMATS))}; "
            f"use one of {', '.join(TRACE_FORMATS)}"
        )
    if not file_path.is_file():
        raise InvalidInput(f"{file_path}: no such trace file; check the path")
    if fmt == "auto":
        fmt = _detect_format(file_path, columns)
    if columns is not None and fmt != "csv":
        raise InvalidInput(f"columns: only applies to fmt='csv'; {file_path} is read as {fmt!r}, drop columns=")
    if fmt == "mooncake":
        trace = _read_mooncake(file_path)
    else:
        trace = Trace.of_frame(_read_azure(file_path) if fmt == "azure" else _read_generic_csv(file_path, columns))
    return Trace(trace.arrival_s, trace.input_tokens, trace.output_tokens, trace.hash_ids,
                 {"path": str(file_path), "format": fmt}).sorted()
