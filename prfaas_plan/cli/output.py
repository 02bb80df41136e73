"""The CLI's shared options and output: table/JSON/CSV printing fitted to the terminal, flag checks."""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from prfaas_plan.errors import InvalidInput, shown


class Format(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="table (human), json or csv")]
ModelDbOpt = Annotated[Optional[list[Path]], typer.Option("--model-db", help="extra folder of model YAML files")]
HardwareDbOpt = Annotated[Optional[list[Path]], typer.Option("--hardware-db", help="extra folder of hardware YAML files")]
ContextOpt = Annotated[str, typer.Option("--context", "-c", help="comma-separated token counts, K = 1024 (e.g. 1K,8K,32K,128K)")]


def _dirs(paths: Optional[list[Path]]) -> tuple[Path, ...]:
    from prfaas_plan.data import is_dir

    for p in paths or []:
        if not is_dir(p):
            raise InvalidInput(f"--model-db/--hardware-db: {shown(p)} is not a folder")
    return tuple(paths or ())


def _check_count(value: int, flag: str, most: int, what: str) -> int:
    """A count option within 1..``most`` (``what`` it counts, for the message)."""
    if not 1 <= value <= most:
        raise InvalidInput(f"{flag}: {value:,} {what} is out of range; give 1 to {most:,}")
    return value


def _check_positive(value: float, flag: str, unit: str) -> float:
    """A float option that must be positive and finite (``unit`` for the message)."""
    if not 0 < value < float("inf"):  # rejects NaN too
        raise InvalidInput(f"{flag}: {value!r} is not a positive, finite number of {unit}")
    return value


HEADERS: dict[str, str] = {
    "lambda_max_rps": "Lambda_max (req/s)", "threshold_tokens": "t (tokens)", "n_prfaas": "PrfaaS",
    "n_pd_p": "PD-P", "n_pd_d": "PD-D", "usd_per_million_tokens": "cost ($/M tokens)",
    "ttft_p90_s": "P90 TTFT (s)", "vs_homogeneous_pd": "vs homogeneous PD (x)", "decode_bs_max": "decode BS_max",
    "kv_bytes_measured": "KV measured (B)", "kv_bytes_model": "KV model (B)", "kv_match": "KV match",
}
"""Human table headers for machine column names (JSON and CSV keep the machine names)."""
_UNIT_SUFFIXES = {"s": "s", "ms": "ms", "pct": "%", "gbps": "Gbps", "rps": "req/s", "mib": "MiB", "gib": "GiB",
                  "bytes": "B", "tokens": "tokens", "usd": "$", "w": "W"}
TABLE_BORDER_CELLS = 3  # a column's padding (1 + 1) and the rule after it in rich's default box


def table_header(column: str) -> str:
    """The human header of a column: ``HEADERS``, else ``prefill_s`` -> ``prefill (s)``; names
    that are already human (no underscore) are kept."""
    if column in HEADERS:
        return HEADERS[column]
    if not re.fullmatch(r"[a-z0-9_]+", column):
        return column
    words = column.split("_")
    if len(words) > 1 and words[-1] in _UNIT_SUFFIXES:
        return f"{' '.join(words[:-1])} ({_UNIT_SUFFIXES[words[-1]]})"
    return " ".join(words)


def _cell(v, ffmt: str) -> str:
    if isinstance(v, float) and v != v:
        return "-"  # NaN: not applicable
    if isinstance(v, float):
        return ffmt.format(v) if abs(v) < 1e15 else f"{v:.3g}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def _column_blocks(widths: list[int], room: int) -> list[list[int]]:
    """Split columns (their narrowest widths, in cells) into blocks that each fit ``room`` cells;
    every block repeats column 0, the row's name (as pandas wraps a wide frame)."""
    blocks, block, used = [], [0], 1 + widths[0] + TABLE_BORDER_CELLS
    for i, w in enumerate(widths[1:], start=1):
        if used + w + TABLE_BORDER_CELLS > room and len(block) > 1:
            blocks.append(block)
            block, used = [0], 1 + widths[0] + TABLE_BORDER_CELLS
        block.append(i)
        used += w + TABLE_BORDER_CELLS
    return [*blocks, block]


def _fit_widths(narrowest: list[int], wanted: list[list[int]], room: int) -> list[int]:
    """Column widths that fill at most ``room`` cells: each column its narrowest width, then, for
    each tier of ``wanted`` widths in turn (values unwrapped, then headers unwrapped), the columns
    that need least first grow while room is left; a column too wide on its own shrinks (folds)."""
    widths = list(narrowest)
    spare = room - 1 - sum(w + TABLE_BORDER_CELLS for w in widths)
    if spare < 0:
        i = widths.index(max(widths))
        widths[i] = max(1, widths[i] + spare)
    for target in wanted:
        for i in sorted(range(len(widths)), key=lambda i: target[i] - widths[i]):
            grow = max(0, min(target[i] - widths[i], spare))
            widths[i] += grow
            spare -= grow
    return widths


def emit(df, fmt: Format, title: str = "", floats: str = "{:,.3f}", col_floats: dict[str, str] | None = None) -> None:
    """Print a DataFrame as a rich table, JSON records or CSV (``col_floats``: a float format per
    column of the table, e.g. whole tokens). The table fits the terminal: headers wrap at spaces,
    values are never cut, and columns that do not fit go to a further block."""
    if fmt is Format.json:
        typer.echo(df.to_json(orient="records", indent=2))
        return
    if fmt is Format.csv:
        typer.echo(df.to_csv(index=False), nl=False)
        return
    from rich.cells import cell_len
    from rich.console import Console
    from rich.table import Table

    console = Console()
    headers = [table_header(str(c)) for c in df.columns]
    col_fmts = [(col_floats or {}).get(str(c), floats) for c in df.columns]
    rows = [[_cell(v, ffmt) for v, ffmt in zip(row, col_fmts)] for row in df.itertuples(index=False)]
    texts = [(h, *(r[i] for r in rows)) for i, h in enumerate(headers)]
    narrowest = [max(cell_len(word) for text in column for word in text.split() or [""]) for column in texts]
    values = [max([cell_len(text) for text in column[1:]] or [0]) for column in texts]
    if texts:  # the row names (column 0, repeated in every block) stay on one line
        narrowest[0] = max(narrowest[0], min(values[0], console.width // 3))
    whole = [max(v, cell_len(h)) for v, h in zip(values, headers)]
    for n, block in enumerate(_column_blocks(narrowest, console.width) if headers else [[]]):
        widths = _fit_widths([narrowest[i] for i in block], [[max(values[i], narrowest[i]) for i in block],
                                                             [whole[i] for i in block]], console.width)
        table = Table(title=(title if n == 0 else "(continued)") or None, header_style="bold", title_justify="left")
        for i, w in zip(block, widths):
            table.add_column(headers[i], justify="right" if df.dtypes.iloc[i].kind in "iuf" else "left",
                             width=w, overflow="fold")
        for r in rows:
            table.add_row(*(r[i] for i in block))
        console.print(table)
