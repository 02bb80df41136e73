"""The one error type users see.

Every problem with user input (a data file, a CLI flag, an infeasible plan) raises
:class:`PlanError` with a one-line message that names the field and the fix. The CLI turns
it into that line on stderr and exit code 2; notebooks get an ordinary ``ValueError``.
"""

from __future__ import annotations

import difflib


class PlanError(ValueError):
    """Bad input or an infeasible request, with a one-line, user-facing message."""


def did_you_mean(name: str, choices: list[str]) -> str:
    """A ' (did you mean X?)' suffix for an unknown name, or '' when nothing is close."""
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


MAX_SHOWN_CHARS = 120  # longer names, paths and values are shortened in messages


def shown(text: object) -> str:
    """``text`` for a one-line message: as it is, or its start and its length when very long."""
    text = str(text)
    return text if len(text) <= MAX_SHOWN_CHARS else f"{text[:40]}... ({len(text):,} characters)"
