"""Queue lengths at the sampling ticks, counted afterwards from logs of when each waiting entry ends.

A plain run's loop (:meth:`engine.Engine._loop_plain`) appends to a log, instead of pushing onto
a heap, each time that lies ahead when it is set (a prefill's or a decode slot's start that has
to wait, an admitted request's end); a tick records only how long each log is. Since every such
time is later than the event that sets it, the entries still ahead at a tick at ``T`` are those
logged before it less those whose time is ``<= T``: what a heap would hold after popping the
times ``<= T`` (:meth:`Engine._on_sampling_tick`), counted for many ticks at once with a sort
and a ``searchsorted`` instead of a push and a pop per entry.
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
