"""Request traces: Mooncake JSONL, Azure LLM 2023 CSV and generic CSV files, read into one frame.

:func:`load_trace` reads a file once into a DataFrame sorted by arrival: ``arrival_s`` (seconds
since the first request), ``input_tokens`` and ``output_tokens`` (int64 tokens), and for Mooncake
traces ``hash_ids`` (each request's prefix block hashes, one per 512-token block). Every problem
with a file is one line naming the file, the column and the line, and the fix.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from prfaas_plan.errors import InvalidInput, did_you_mean
from prfaas_plan.vocab import TRACE_FORMATS, TraceFormat

if TYPE_CHECKING:
    import pandas as pd

MS_PER_S = 1000.0  # Mooncake timestamps are milliseconds

TRACE_COLUMNS: tuple[str, ...] = ("arrival_s", "input_tokens", "output_tokens")
_MOONCAKE_FIELDS: tuple[str, ...] = ("timestamp", "input_length", "output_length", "hash_ids")
_AZURE_COLUMNS: tuple[str, ...] = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_INT_ONLY = frozenset({int})  # json.loads gives int for a JSON integer (bool for true/false)
_JSON_WHITESPACE = " \t\n\r"  # what json.loads skips around a value (str.strip() strips more)
_JSON_NUMBERS = frozenset({int, float})
_EXACT_INT_FLOAT = 2.0**53  # every integer of smaller magnitude is exactly a double


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


def _read_mooncake(path: Path) -> pd.DataFrame:
    """Mooncake JSONL: one object per line with timestamp (ms), input_length, output_length, hash_ids."""
    import pandas as pd

    records, line_numbers = _mooncake_records(path)
    lines = np.asarray(line_numbers)
    timestamps_ms = _seconds_column([r["timestamp"] for r in records], path, "timestamp", lines, 1.0)
    hash_ids = _hash_id_lists(records, path, line_numbers)
    return pd.DataFrame(
        {
            "arrival_s": (timestamps_ms - timestamps_ms.min()) / MS_PER_S,
            "input_tokens": _token_column([r["input_length"] for r in records], path, "input_length", lines, 1),
            "output_tokens": _token_column([r["output_length"] for r in records], path, "output_length", lines, 0),
            "hash_ids": pd.Series(hash_ids, dtype=object),
        }
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
    """Read a request trace into a DataFrame sorted by arrival (ties keep file order).

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
        frame = _read_mooncake(file_path)
    elif fmt == "azure":
        frame = _read_azure(file_path)
    else:
        frame = _read_generic_csv(file_path, columns)
    if not frame["arrival_s"].is_monotonic_increasing:
        frame = frame.sort_values("arrival_s", kind="stable").reset_index(drop=True)
    frame.attrs = {"path": str(file_path), "format": fmt}
    return frame
