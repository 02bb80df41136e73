"""The errors users see: :class:`PlanError`, and its two kinds, bad input and an infeasible plan.

Every problem with user input (a data file, a CLI flag) raises :class:`InvalidInput`; a valid
request that no deployment can serve raises :class:`Infeasible`. Both carry a one-line message that
names the field (or the binding constraint) and the fix. The CLI turns either into that line on
stderr and exit code 2; notebooks get an ordinary ``ValueError``; a sweep records the two apart.
"""

from __future__ import annotations

import difflib


class PlanError(ValueError):
    """Bad input or an infeasible request, with a one-line, user-facing message."""


class InvalidInput(PlanError):
    """A data file, flag or argument that is wrong: the message names the field and the fix."""


class Infeasible(PlanError):
    """Valid input that no deployment can serve: the message names the binding constraint."""


class Unsustainable(InvalidInput):
    """A request rate beyond what an engine sustains (its prefill budget or memory): the message
    names ``rate_rps`` and says to lower it. Searches over rates catch this kind alone, so any other
    bad input still stops them."""


def did_you_mean(name: str, choices: list[str]) -> str:
    """A ' (did you mean X?)' suffix for an unknown name, or '' when nothing is close."""
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


MAX_SHOWN_CHARS = 120  # longer names, paths and values are shortened in messages


def shown(text: object) -> str:
    """``text`` for a one-line message: as it is, or its start and its length when very long."""
    text = str(text)
    return text if len(text) <= MAX_SHOWN_CHARS else f"{text[:40]}... ({len(text):,} characters)"
