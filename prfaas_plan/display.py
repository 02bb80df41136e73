"""Notebook display: the compact HTML table and one-line text that result objects show.

Jupyter calls ``_repr_html_`` on the last value of a cell; the objects of this package answer
with a small table of (quantity, value, unit) rows built here, so that every unit sits in a
header or a unit column and no object dumps its whole state.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

Row = tuple[str, object, str]
"""(quantity, value, unit); a value is shown with thousands separators and at most 4 significant
digits when it is a float."""


def fmt(value: object) -> str:
    """Integers with separators, floats to 4 significant digits (3.326, 22,554, 0.0118)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def html_table(title: str, rows: Sequence[Row]) -> str:
    """A titled three-column table (quantity, value, unit); every string is HTML-escaped."""
    body = "".join(f"<tr><td style='text-align:left'>{html.escape(q)}</td><td>{html.escape(fmt(v))}</td>"
                   f"<td style='text-align:left'>{html.escape(u)}</td></tr>" for q, v, u in rows)
    return (f"<table><caption style='text-align:left'><b>{html.escape(title)}</b></caption>"
            f"<thead><tr><th>quantity</th><th>value</th><th>unit</th></tr></thead><tbody>{body}</tbody></table>")
