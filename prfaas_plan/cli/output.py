"""The CLI's shared options and output: table/JSON/CSV printing fitted to the terminal, flag checks."""

from __future__ import annotations

import numbers
import re
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from prfaas_plan.defaults import PREFIX_BLOCK_TOKENS
from prfaas_plan.errors import InvalidInput, shown
from prfaas_plan.vocab import Engine, KvDtype, PlanMode, TableFormat

FormatOpt = Annotated[TableFormat, typer.Option("--format", "-f", help="table (human), json or csv")]
ModelDbOpt = Annotated[Optional[list[Path]], typer.Option("--model-db", help="extra folder of model YAML files")]
HardwareDbOpt = Annotated[Optional[list[Path]], typer.Option("--hardware-db", help="extra folder of hardware YAML files")]
ContextOpt = Annotated[str, typer.Option("--context", "-c", help="comma-separated token counts, K = 1024 (e.g. 1K,8K,32K,128K)")]
KvDtypeOpt = Annotated[KvDtype, typer.Option(help="element type of the KV cache")]
EngineOpt = Annotated[Engine, typer.Option(help="whose state-dtype rules to use")]
EngineProfileOpt = Annotated[str, typer.Option(
    help="serving-engine profile (engine_db id or YAML path): kernel tables and version, host overheads")]
ScenarioArg = Annotated[str, typer.Argument(help="scenario id (paper-case-study) or YAML path")]
ModeOpt = Annotated[PlanMode, typer.Option(help="exact (MILP over length buckets) or paper (Eqs. 3-8, grid search)")]
TraceOpt = Annotated[Optional[Path], typer.Option(help="workload from a trace (Mooncake JSONL, Azure CSV)")]
PrefixCacheOpt = Annotated[Optional[int], typer.Option(
    help=f"with --trace: LRU prefix cache in {PREFIX_BLOCK_TOKENS}-token blocks (0 = off; omit = unlimited)")]
CONTEXTS = "1K,8K,32K,128K"
"""The context lengths ``kv``, ``bandwidth`` and ``profile`` tabulate by default."""
PREFILL_GPU = "h200"
"""The prefill GPU of ``bandwidth`` and ``compare``."""

Records = list[dict[str, Any]]
"""A table the CLI builds itself, one dict per row (printed without importing pandas)."""


def db_dirs(paths: Optional[list[Path]]) -> tuple[Path, ...]:
    """The extra database folders of ``--model-db``/``--hardware-db``, each checked to be a folder."""
    from prfaas_plan.data import is_dir

    for p in paths or []:
        if not is_dir(p):
            raise InvalidInput(f"--model-db/--hardware-db: {shown(p)} is not a folder")
    return tuple(paths or ())


def check_count(value: int, flag: str, most: int, what: str) -> int:
    """A count option within 1..``most`` (``what`` it counts, for the message)."""
    if not 1 <= value <= most:
        raise InvalidInput(f"{flag}: {value:,} {what} is out of range; give 1 to {most:,}")
    return value


def check_positive(value: float, flag: str, unit: str) -> float:
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


def _record_column(values: list[object]) -> tuple[list[object], bool]:
    """One column of records as a DataFrame would hold it, and whether it is numeric: whole numbers
    stay ``int``; numbers with a fraction or a gap (None) are all ``float`` (NaN for the gap)."""
    def number(v: object) -> bool:
        return isinstance(v, numbers.Real) and not isinstance(v, bool)

    if values and all(number(v) and isinstance(v, numbers.Integral) for v in values):
        return [int(v) for v in values], True
    if any(number(v) for v in values) and all(v is None or number(v) for v in values):
        return [float("nan") if v is None else float(v) for v in values], True
    return values, False


def _columns(table) -> tuple[list[str], list[list[object]], list[bool]]:
    """Column names, rows and which columns are numeric (right-aligned) of a DataFrame or of records."""
    if isinstance(table, list):
        names = list(dict.fromkeys(key for row in table for key in row))
        columns = [_record_column([row.get(n) for row in table]) for n in names]
        return names, [list(row) for row in zip(*(values for values, _ in columns))], [num for _, num in columns]
    numeric = [kind in "iuf" for kind in (dtype.kind for dtype in table.dtypes)]
    return [str(c) for c in table.columns], [list(row) for row in table.itertuples(index=False)], numeric


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


def emit(table, fmt: TableFormat, title: str = "", floats: str = "{:,.3f}",
         col_floats: dict[str, str] | None = None) -> None:
    """Print a table (a DataFrame, or :data:`Records`) as a rich table, JSON records or CSV
    (``col_floats``: a float format per column of the table, e.g. whole tokens). The table fits
    the terminal: headers wrap at spaces, values are never cut, and columns that do not fit go to
    a further block. JSON and CSV are pandas' own (records are made a DataFrame first)."""
    if fmt != "table":
        if isinstance(table, list):
            import pandas as pd

            table = pd.DataFrame(table)
        typer.echo(table.to_json(orient="records", indent=2) if fmt == "json" else table.to_csv(index=False),
                   nl=fmt == "json")
        return
    _print_table(*_columns(table), title, floats, col_floats or {})


def _print_table(names: list[str], values: list[list[object]], numeric: list[bool], title: str, floats: str,
                 col_floats: dict[str, str]) -> None:
    """The rich table(s) of :func:`emit`: cells formatted, columns fitted to the terminal's width."""
    from rich.cells import cell_len
    from rich.console import Console
    from rich.table import Table

    console = Console()
    headers = [table_header(c) for c in names]
    col_fmts = [col_floats.get(c, floats) for c in names]
    rows = [[_cell(v, ffmt) for v, ffmt in zip(row, col_fmts)] for row in values]
    texts = [(h, *(r[i] for r in rows)) for i, h in enumerate(headers)]
    narrowest = [max(cell_len(word) for text in column for word in text.split() or [""]) for column in texts]
    widest = [max([cell_len(text) for text in column[1:]] or [0]) for column in texts]
    if texts:  # the row names (column 0, repeated in every block) stay on one line
        narrowest[0] = max(narrowest[0], min(widest[0], console.width // 3))
    whole = [max(v, cell_len(h)) for v, h in zip(widest, headers)]
    for n, block in enumerate(_column_blocks(narrowest, console.width) if headers else [[]]):
        widths = _fit_widths([narrowest[i] for i in block], [[max(widest[i], narrowest[i]) for i in block],
                                                             [whole[i] for i in block]], console.width)
        table = Table(title=(title if n == 0 else "(continued)") or None, header_style="bold", title_justify="left")
        for i, w in zip(block, widths):
            table.add_column(headers[i], justify="right" if numeric[i] else "left", width=w, overflow="fold")
        for r in rows:
            table.add_row(*(r[i] for i in block))
        console.print(table)
