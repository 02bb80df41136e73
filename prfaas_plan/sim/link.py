"""The inter-DC link: its capacity over time (link drops, link traces) and processor sharing.

Link events ``(start_s, end_s, gbps)`` give the nominal rate in a window; :func:`capacity_schedule`
turns them into usable capacity steps. :class:`Link` shares the usable capacity equally among
the active transfers and finds when the earliest one finishes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from heapq import heappop, heappush
from pathlib import Path

import numpy as np

from prfaas_plan.errors import InvalidInput
from prfaas_plan.units import GBPS_BITS_PER_S

LinkEvent = tuple[float, float, float]  # (start_s, end_s, gbps): nominal link rate in that window


def parse_link_drop(text: str) -> list[LinkEvent]:
    """Parse ``--link-drop 100:20@600-1200`` (from 100 to 20 Gbps between 600 s and 1200 s).

    Several drops may be separated by commas. The first number (the rate before the drop) is
    informational; outside the windows the scenario's link rate applies. Returns link events
    ``(start_s, end_s, gbps)``.
    """
    events = []
    for part in [p.strip() for p in str(text).split(",") if p.strip()]:
        try:
            rates, window = part.split("@")
            _before, after = (float(x) for x in rates.split(":"))
            start, end = (float(x) for x in window.split("-"))
        except ValueError:
            raise InvalidInput(f"--link-drop: {part!r} is not FROM:TO@START-END (e.g. 100:20@600-1200, Gbps and seconds)") from None
        events.append((start, end, after))
    if not events:
        raise InvalidInput("--link-drop: give FROM:TO@START-END, e.g. 100:20@600-1200")
    return check_link_events(events, "--link-drop")


def read_link_trace(path: str | Path) -> list[LinkEvent]:
    """Read a link-capacity trace: CSV with columns ``time_s,gbps`` (nominal Gbps from that time on,
    until the next row; the last row holds forever). Returns link events."""
    import pandas as pd

    file_path = Path(path)
    if not file_path.is_file():
        raise InvalidInput(f"--link-trace: {file_path} not found; give a CSV with columns time_s,gbps")
    try:
        frame = pd.read_csv(file_path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
        raise InvalidInput(f"--link-trace: {file_path} is not a readable CSV with columns time_s,gbps") from None
    for col in ("time_s", "gbps"):
        if col not in frame.columns:
            raise InvalidInput(f"--link-trace: {file_path} has no column {col!r} (it has {', '.join(map(str, frame.columns))}); "
                               "give columns time_s,gbps")
    times = pd.to_numeric(frame["time_s"], errors="coerce").to_numpy(dtype=float)
    rates = pd.to_numeric(frame["gbps"], errors="coerce").to_numpy(dtype=float)
    if len(times) == 0 or not (np.all(np.isfinite(times)) and np.all(np.isfinite(rates))):
        raise InvalidInput(f"--link-trace: {file_path}: every row needs numeric time_s and gbps")
    if np.any(np.diff(times) <= 0):
        raise InvalidInput(f"--link-trace: {file_path}: time_s must be strictly increasing")
    ends = np.append(times[1:], math.inf)
    return check_link_events(list(zip(times.tolist(), ends.tolist(), rates.tolist())), "--link-trace")


def check_link_events(events: Sequence[LinkEvent], field_name: str = "link_events") -> list[LinkEvent]:
    """The events as float triples; InvalidInput naming ``field_name`` for a bad window or rate."""
    out = []
    for ev in events:
        try:
            start, end, gbps = (float(x) for x in ev)
        except (TypeError, ValueError):
            raise InvalidInput(f"{field_name}: {ev!r} is not (start_s, end_s, gbps)") from None
        if not (math.isfinite(start) and start >= 0 and end > start):
            raise InvalidInput(f"{field_name}: window {start:g}-{end:g} s must start at >= 0 s and end after it starts")
        if not (math.isfinite(gbps) and gbps > 0):
            raise InvalidInput(f"{field_name}: {gbps!r} Gbps must be a positive rate (model an outage with a small one, "
                               "e.g. 0.001)")
        out.append((start, end, gbps))
    return out


def capacity_schedule(events: Sequence[LinkEvent], base_bits_per_s: float, efficiency: float) -> list[tuple[float, float]]:
    """Piecewise-constant usable link capacity as (time_s, bits/s) steps; where windows overlap,
    the latest-starting active event wins."""
    events = sorted(events, key=lambda e: e[0])
    times = sorted({0.0, *[e[0] for e in events], *[e[1] for e in events if math.isfinite(e[1])]})
    steps: list[tuple[float, float]] = []
    for t in times:
        active = [e for e in events if e[0] <= t < e[1]]
        cap = active[-1][2] * GBPS_BITS_PER_S * efficiency if active else base_bits_per_s
        if not steps or steps[-1][1] != cap:
            steps.append((t, cap))
    return steps


class Link:
    """Processor-sharing link: every active transfer gets ``capacity_bps / n`` bits/s.

    Virtual time ``v`` is the service (bits) each active transfer has received since the link was
    last idle; a transfer of ``B`` bits that joins at ``v0`` finishes when ``v = v0 + B``.
    ``finish`` is a heap of (virtual finish bits, request id). ``bits_sent`` integrates capacity
    over busy time (bits delivered), ``capacity_time`` over all time (bit-capacity offered).
    """

    __slots__ = ("capacity_bps", "n", "v", "last_s", "finish", "bits_sent", "capacity_time")

    def __init__(self, capacity_bps: float) -> None:
        self.capacity_bps = capacity_bps
        self.n = 0
        self.v = 0.0
        self.last_s = 0.0
        self.finish: list[tuple[float, int]] = []
        self.bits_sent = 0.0
        self.capacity_time = 0.0

    def advance(self, now: float) -> None:
        """Serve the active transfers up to ``now`` (seconds)."""
        dt = now - self.last_s
        if dt > 0:
            cap = self.capacity_bps
            self.capacity_time += dt * cap
            if self.n:
                self.v += dt * cap / self.n
                self.bits_sent += dt * cap
            self.last_s = now

    def next_done_s(self, now: float) -> float:
        """When the earliest active transfer finishes if nothing changes (inf: none active)."""
        if not self.n or self.capacity_bps <= 0:
            return math.inf
        return now + max(self.finish[0][0] - self.v, 0.0) * self.n / self.capacity_bps

    # join and pop_due run once per remote request: they spell out advance and next_done_s,
    # the same operations in the same order, to save the calls
    def join(self, now: float, bits: float, rid: int) -> float:
        """Transfer ``rid`` of ``bits`` joins at ``now``; returns :meth:`next_done_s`."""
        cap, n = self.capacity_bps, self.n
        dt = now - self.last_s
        if dt > 0:
            self.capacity_time += dt * cap
            if n:
                self.v += dt * cap / n
                self.bits_sent += dt * cap
            self.last_s = now
        self.n = n = n + 1
        finish = self.finish
        heappush(finish, (self.v + bits, rid))
        if cap <= 0:
            return math.inf
        ahead = finish[0][0] - self.v
        return now + (0.0 if 0.0 > ahead else ahead) * n / cap

    def pop_due(self, now: float) -> tuple[list[int], float]:
        """At :meth:`next_done_s`: the transfers that finish now (the earliest, with any due at the
        same virtual time), removed, and then :meth:`next_done_s`."""
        n, v, cap = self.n, self.v, self.capacity_bps
        dt = now - self.last_s
        if dt > 0:
            self.capacity_time += dt * cap
            if n:
                v += dt * cap / n
                self.bits_sent += dt * cap
            self.last_s = now
        finish = self.finish
        # the earliest transfer is due now: finish it even if float rounding of ``now`` left ``v``
        # a hair short (otherwise the event could repeat without progress)
        if finish and finish[0][0] > v:
            v = finish[0][0]
        limit = v + 1e-9 * (abs(v) + 1.0)
        due = []
        while finish and finish[0][0] <= limit:
            due.append(heappop(finish)[1])
        self.n = n = n - len(due)
        if n == 0:
            self.v = 0.0  # keep virtual time small
            return due, math.inf
        self.v = v
        if cap <= 0:
            return due, math.inf
        ahead = finish[0][0] - v
        return due, now + (0.0 if 0.0 > ahead else ahead) * n / cap
