"""Queue lengths and running totals at the sampling ticks, counted afterwards from logs of times.

A plain run's loop (:meth:`engine.Engine._loop_plain`) appends to a log, instead of pushing onto
a heap, each time that lies ahead when it is set (a decode slot's start that has to wait, an
admitted request's end); a tick records only how long each log is. Since every such time is
later than the event that sets it, the entries still ahead at a tick at ``T`` are those logged
before it less those whose time is ``<= T``: what a heap would hold after popping the times
``<= T`` (:meth:`Engine._on_sampling_tick`), counted for many ticks at once with a sort and a
``searchsorted`` instead of a push and a pop per entry (:class:`Tallies`).

What the arrivals set is known a chunk ahead, so it needs no log at the ticks at all: a prefill
queue holds the requests that arrived before ``T`` and start after it (:class:`Spans`), and the
bits routed to PrfaaS by ``T`` are a running sum over the arrivals before it (:class:`Running`).
A tick is handled before an arrival at the same time, so "before ``T``" is strictly before.
"""

from __future__ import annotations

import numpy as np


class Tallies:
    """Logs of times (``logs``, one list per queue) and what earlier settles left of them.

    ``pushed``: entries logged before the lists were last emptied; ``done``: entries whose time
    had passed then (``<=`` that settle's ``now``); ``ahead``: the sorted times that had not."""

    def __init__(self, queues: int) -> None:
        self.logs: tuple[list[float], ...] = tuple([] for _ in range(queues))
        self.pushed = [0] * queues
        self.done = [0] * queues
        self.ahead = [np.empty(0)] * queues

    def size(self) -> int:
        """Entries held in the logs now."""
        return sum(map(len, self.logs))

    def settle(self, lengths: np.ndarray, times_s: np.ndarray, now: float) -> np.ndarray:
        """The queue lengths at ticks at ``times_s`` (ascending, none after ``now``) whose log
        lengths were ``lengths`` (one row per tick, a column per queue, as float); the logs are
        emptied into the counts, keeping only the times after ``now`` (no later tick is before it).
        Returns float rows (the counts are whole numbers)."""
        out = np.empty_like(lengths)
        for q, log in enumerate(self.logs):
            times = np.sort(np.concatenate([self.ahead[q], np.array(log, dtype=np.float64)]))
            out[:, q] = self.pushed[q] + lengths[:, q] - (self.done[q] + np.searchsorted(times, times_s, "right"))
            self.pushed[q] += len(log)
            log.clear()
            passed = int(np.searchsorted(times, now, "right"))
            self.done[q] += passed
            self.ahead[q] = times[passed:]
        return out


class Spans:
    """A queue whose entries are known ahead: each joins at an in-time and leaves at a later
    out-time (seconds); its length at ``T`` counts the entries in before ``T`` and out after it."""

    def __init__(self) -> None:
        self.ins: list[np.ndarray] = []  # in-times not yet passed, ascending across the arrays
        self.outs: list[np.ndarray] = []  # their out-times (and those of entries whose in-time passed)
        self.held = 0  # entries whose in-time had passed at the last count, less those whose out-time had

    def add(self, in_s: np.ndarray, out_s: np.ndarray) -> None:
        """Entries joining at ``in_s`` (ascending, none before those added earlier) and leaving at ``out_s``."""
        self.ins.append(in_s)
        self.outs.append(out_s)

    def size(self) -> int:
        """Times held now."""
        return sum(map(len, self.ins)) + sum(map(len, self.outs))

    def counts(self, times_s: np.ndarray, now: float) -> np.ndarray:
        """The lengths at ticks at ``times_s`` (ascending, none after ``now``; no later count is
        for a time before ``now``), as int64; the times up to ``now`` are folded into ``held``."""
        ins = np.concatenate([np.empty(0), *self.ins])
        outs = np.sort(np.concatenate([np.empty(0), *self.outs]))
        out = self.held + np.searchsorted(ins, times_s, "left") - np.searchsorted(outs, times_s, "right")
        passed_in, passed_out = int(np.searchsorted(ins, now, "right")), int(np.searchsorted(outs, now, "right"))
        self.held += passed_in - passed_out
        self.ins, self.outs = [ins[passed_in:]], [outs[passed_out:]]
        return out


class Running:
    """A running total that steps at known times (seconds): its value at ``T`` is the one
    after the last step before ``T``."""

    def __init__(self) -> None:
        self.times: list[np.ndarray] = []  # step times not yet passed, ascending across the arrays
        self.values: list[np.ndarray] = []  # the total after each step
        self.last = 0.0  # the total after the last step that had passed at the last look-up

    def add(self, times_s: np.ndarray, totals: np.ndarray) -> None:
        """Steps at ``times_s`` (ascending, none before those added earlier) to ``totals``."""
        self.times.append(times_s)
        self.values.append(totals)

    def size(self) -> int:
        """Steps held now."""
        return sum(map(len, self.times))

    def at(self, times_s: np.ndarray, now: float) -> np.ndarray:
        """The totals at ``times_s`` (ascending, none after ``now``; no later look-up is for a
        time before ``now``) as float64; the steps up to ``now`` are dropped."""
        times = np.concatenate([np.empty(0), *self.times])
        values = np.concatenate([[self.last], *self.values])
        out = values[np.searchsorted(times, times_s, "left")]
        passed = int(np.searchsorted(times, now, "right"))
        self.last = float(values[passed])
        self.times, self.values = [times[passed:]], [values[passed + 1:]]
        return out
