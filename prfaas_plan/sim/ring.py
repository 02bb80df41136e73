"""The ring of requests in flight: per-request results kept until their chunk's records go on.

The engine writes each request's results (path, cache hit, waits, TTFT, ...) into arrays indexed
by ``rid & (cap - 1)``; a chunk of requests becomes numpy columns of :attr:`SimResult.requests`
(:func:`records`) once every request of it holds a decode slot.
"""

from __future__ import annotations

import math
from array import array
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from prfaas_plan.sim.arrivals import Arrivals
    from prfaas_plan.sim.outputs import Sink

PATH_NAMES = ("pd_p", "prfaas")  # path codes 0 (local prefill) and 1 (PrfaaS)

# per-request results the engine fills in: name, array typecode (numpy dtype), value before the
# request has it. array.array: the engine stores Python numbers at list speed, the records read
# them as numpy arrays without a copy.
RING_FIELDS = (
    ("path", "b", 0), ("hit_tokens", "q", 0), ("uncached", "q", 0), ("route_tokens", "q", 0),
    ("wait", "d", math.nan), ("prefill", "d", math.nan), ("transfer", "d", 0.0),
    ("decode_wait", "d", math.nan), ("ttft", "d", math.nan), ("end", "d", math.nan),
)
_DTYPES = {"b": np.int8, "q": np.int64, "d": np.float64}


def _filled(typecode: str, fill: float, size: int) -> array:
    return array(typecode, [fill]) * size


def _as_numpy(values: array) -> np.ndarray:
    return np.frombuffer(values, dtype=_DTYPES[values.typecode])


REQUEST_COLUMNS = (
    "arrival_s", "path", "input_tokens", "hit_tokens", "uncached_tokens", "route_tokens", "output_tokens", "wait_s",
    "prefill_s", "transfer_s", "decode_wait_s", "ttft_s", "tpot_s", "end_s",
)  # the columns of SimResult.requests, in order; "path" holds codes into PATH_NAMES (int8)


def records(a: Arrivals, r: dict[str, np.ndarray], decode_step_s: float) -> dict[str, np.ndarray]:
    """One chunk of per-request records: :data:`REQUEST_COLUMNS` -> numpy arrays (copies), the path as
    codes into :data:`PATH_NAMES` (:func:`outputs.requests_frame` makes them a frame)."""
    path = r["path"]
    return dict(zip(REQUEST_COLUMNS, (
        np.array(a.arrival_s), np.array(path), np.array(a.input_tokens), np.array(r["hit_tokens"]),
        np.array(r["uncached"]), np.array(r["route_tokens"]), np.array(a.output_tokens), np.array(r["wait"]),
        np.array(r["prefill"]), np.where(path == 1, r["transfer"], 0.0), np.array(r["decode_wait"]),
        np.array(r["ttft"]), np.where(np.isfinite(r["end"]), decode_step_s, np.nan), np.array(r["end"]))))


class Ring:
    """Per-request results (``arrays``: name -> array.array) of the requests whose records are not yet with the sink.

    Request ``rid`` lives at ``rid & (cap - 1)`` of arrays whose length ``cap`` is a power of two
    holding whole chunks of ``chunk`` requests (a power of two). A chunk goes to the sink, in
    arrival order, once each of its requests holds a decode slot; the arrays double when the
    requests in flight outgrow them (an overloaded system), so memory follows what is in flight."""

    def __init__(self, chunk: int, n: int, decode_step_s: float) -> None:
        if chunk < 1 or chunk & (chunk - 1):
            raise ValueError(f"chunk {chunk} must be a power of two")
        self.chunk, self.step = chunk, decode_step_s
        self.cap = 1 << max(min(n, 2 * chunk) - 1, 0).bit_length()
        self.arrays = {name: _filled(code, fill, self.cap) for name, code, fill in RING_FIELDS}
        # what the engine reads back: arrival time, decode time (output tokens, at least one, x the decode step)
        self.arrival: list[float] = [0.0] * self.cap
        self.decode_s: list[float] = [0.0] * self.cap
        self.inputs: dict[int, Arrivals] = {}  # chunk number -> its arrivals, until it goes to the sink
        self.added = 0  # chunks taken
        self.done = 0  # chunks handed to the sink

    def add(self, a: Arrivals, arrival: list[float], sink: Sink) -> None:
        """Take the next chunk of arrivals, after handing finished chunks to the sink (freeing slots)."""
        self.flush(sink)
        lo, m = self.added * self.chunk, len(arrival)
        while lo + m - self.done * self.chunk > self.cap:
            self._grow(lo)
        j = lo & (self.cap - 1)
        for name, code, fill in RING_FIELDS:
            self.arrays[name][j:j + m] = _filled(code, fill, m)
        self.arrival[j:j + m] = arrival
        output = a.output_tokens
        self.decode_s[j:j + m] = (np.where(output == 0, 1, output) * self.step).tolist()  # (output or 1) * step
        self.inputs[self.added] = a
        self.added += 1

    def put(self, rid: int, **values: np.ndarray) -> None:
        """Write results of consecutive requests from ``rid`` on (field name -> their values)."""
        j = rid & (self.cap - 1)
        for name, v in values.items():
            _as_numpy(self.arrays[name])[j:j + len(v)] = v

    def _grow(self, lo: int) -> None:
        """Double the arrays, keeping the requests in flight (ids from the first chunk not yet handed
        over up to ``lo``) in their new places."""
        old, cap = self.cap - 1, 2 * self.cap
        ids = np.arange(self.done * self.chunk, lo)
        for name, code, fill in RING_FIELDS:
            grown = _filled(code, fill, cap)
            _as_numpy(grown)[ids & (cap - 1)] = _as_numpy(self.arrays[name])[ids & old]
            self.arrays[name] = grown
        for attr, fill in (("arrival", 0.0), ("decode_s", 0.0)):
            was, grown = getattr(self, attr), [fill] * cap
            for rid in ids.tolist():
                grown[rid & (cap - 1)] = was[rid & old]
            setattr(self, attr, grown)
        self.cap = cap

    def flush(self, sink: Sink, everything: bool = False) -> None:
        """Hand the leading finished chunks (each request holds a decode slot: its end is set; all
        chunks: ``everything``) to the sink, in order."""
        while self.done < self.added:
            j, m = (self.done * self.chunk) & (self.cap - 1), len(self.inputs[self.done].arrival_s)
            r = {name: _as_numpy(v)[j:j + m] for name, v in self.arrays.items()}
            if not (everything or np.isfinite(r["end"]).all()):
                return
            sink.add("requests", records(self.inputs.pop(self.done), r, self.step))
            self.done += 1

