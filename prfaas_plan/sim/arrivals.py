"""Arrivals: Poisson, Markov-modulated (:class:`Bursty`) and trace requests, a chunk at a time.

A run reads its requests as a :class:`Source` of :class:`Arrivals` chunks in arrival order. The
random draws reproduce, value for value, one generator drawing all arrival times, then all
lengths, then all routing draws, whatever the chunk size.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from prfaas_plan.defaults import DEFAULT_SIM_DURATION_S
from prfaas_plan.errors import InvalidInput

if TYPE_CHECKING:
    from pathlib import Path

    import pandas as pd

    from prfaas_plan.planner import PlanResult
    from prfaas_plan.scenario import Scenario
    from prfaas_plan.sim.params import Setup
    from prfaas_plan.workload.traces import Trace

CHUNK_REQUESTS = 1 << 16  # requests generated, and records handed on, at a time (a power of two)
MAX_SIM_REQUESTS = 100_000_000  # expected arrivals of one synthetic run (~1e6 simulate in a minute)


@dataclass(frozen=True)
class Bursty:
    """Markov-modulated Poisson arrivals with two states.

    on_rps / off_rps: Poisson rate in the burst and in the quiet state (requests/s).
    mean_on_s / mean_off_s: mean (exponential) time spent in each state, seconds.
    The process starts in its stationary state distribution; its mean rate is
    ``(on_rps * mean_on_s + off_rps * mean_off_s) / (mean_on_s + mean_off_s)``.
    """

    on_rps: float
    off_rps: float
    mean_on_s: float
    mean_off_s: float

    def __post_init__(self) -> None:
        for key in ("on_rps", "off_rps"):
            value = getattr(self, key)
            if not (math.isfinite(value) and value >= 0):
                raise InvalidInput(f"bursty.{key}: {value!r} must be a finite rate >= 0 requests/s")
        for key in ("mean_on_s", "mean_off_s"):
            value = getattr(self, key)
            if not (math.isfinite(value) and value > 0):
                raise InvalidInput(f"bursty.{key}: {value!r} must be a positive number of seconds")
        if self.mean_rps <= 0:
            raise InvalidInput("bursty: both rates are 0; give a positive on_rps")

    @property
    def mean_rps(self) -> float:
        """Long-run mean arrival rate, requests/s."""
        return (self.on_rps * self.mean_on_s + self.off_rps * self.mean_off_s) / (self.mean_on_s + self.mean_off_s)


@dataclass
class Arrivals:
    """Requests in arrival order: arrival_s (seconds), input/output tokens (numpy arrays), hash_ids
    (Mooncake prefix blocks, a list of lists, or None); route_u: the uniform draw that routes each
    request's partial bucket (drawn from the run's generator when None)."""

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    hash_ids: list | None = None
    route_u: np.ndarray | None = None


@dataclass(frozen=True)
class Source:
    """The arrivals of a run as the engine reads them: ``n`` requests over ``horizon_s``, as
    :class:`Arrivals` chunks (with route_u) of ``chunk`` requests each (the last may be shorter),
    in order. hash_ids (traces) and input_tokens (every request's, in-memory arrivals) cover all requests."""

    n: int
    horizon_s: float
    chunks: Iterator[Arrivals]
    chunk: int
    hash_ids: list | None = None
    input_tokens: np.ndarray | None = None


def poisson_chunks(rate_rps: float, start_s: float, end_s: float, rng: np.random.Generator,
                   chunk: int | None = None) -> Iterator[np.ndarray]:
    """Arrival times of a Poisson process on [start_s, end_s), in order, at most ``chunk`` at a time.

    Gaps are drawn in blocks whose size depends only on the expected count and summed in order
    (the running sum carried from chunk to chunk), so the times, and the generator's state after
    them, do not depend on ``chunk``."""
    if rate_rps <= 0 or end_s <= start_s:
        return
    mean_n = rate_rps * (end_s - start_s)
    block = int(mean_n + 6 * math.sqrt(mean_n) + 16)
    step = block if chunk is None else min(chunk, block)
    t = start_s
    while t < end_s:
        total = 0.0  # sum of the block's gaps so far
        for drawn in range(0, block, step):
            sums = np.cumsum(np.concatenate(([total], rng.exponential(1.0 / rate_rps, size=min(step, block - drawn)))))[1:]
            total = float(sums[-1])
            times = t + sums
            yield times[times < end_s]
        t += total


def poisson_times(rate_rps: float, start_s: float, end_s: float, rng: np.random.Generator) -> np.ndarray:
    """All arrival times (s) of a Poisson process at ``rate_rps`` on [start_s, end_s)."""
    return np.concatenate([np.empty(0), *poisson_chunks(rate_rps, start_s, end_s, rng)])


def bursty_chunks(process: Bursty, duration_s: float, rng: np.random.Generator,
                  chunk: int | None = None) -> Iterator[np.ndarray]:
    """Arrival times of the Markov-modulated process on [0, duration_s), in order (see poisson_chunks)."""
    on = rng.random() < process.mean_on_s / (process.mean_on_s + process.mean_off_s)
    t = 0.0
    while t < duration_s:
        end = min(t + rng.exponential(process.mean_on_s if on else process.mean_off_s), duration_s)
        yield from poisson_chunks(process.on_rps if on else process.off_rps, t, end, rng, chunk)
        t, on = end, not on


def rechunk(parts: Iterable[np.ndarray], size: int) -> Iterator[np.ndarray]:
    """The concatenation of ``parts`` cut into arrays of ``size`` (the last may be shorter)."""
    buf, have = [], 0
    for part in parts:
        buf.append(part)
        have += part.size
        while have >= size:
            whole = np.concatenate(buf)
            yield whole[:size]
            buf, have = [whole[size:]], whole.size - size
    if have:
        yield np.concatenate(buf)


def chunked(arr: Arrivals, horizon_s: float, rng: np.random.Generator, chunk: int) -> Source:
    """In-memory arrivals as a source; route_u, where ``arr`` has none, drawn from ``rng`` in order."""
    n = len(arr.arrival_s)

    def chunks() -> Iterator[Arrivals]:
        for lo in range(0, n, chunk):
            hi = min(lo + chunk, n)
            u = rng.random(hi - lo) if arr.route_u is None else arr.route_u[lo:hi]
            yield Arrivals(arr.arrival_s[lo:hi], arr.input_tokens[lo:hi], arr.output_tokens[lo:hi], None, u)

    return Source(n, horizon_s, chunks(), chunk, arr.hash_ids, arr.input_tokens)


def synthetic(setup: Setup, times: Callable[[np.random.Generator, int], Iterator[np.ndarray]], horizon_s: float,
              rng: np.random.Generator, chunk: int) -> Source:
    """Generated arrivals as a source, a chunk at a time, with the very draws of an in-memory run:
    one generator gives all the arrival times, then all the lengths, then all the routing draws.
    A first pass over the times and the lengths (kept nowhere) finds where each of the three
    streams starts; then they are replayed side by side from copies of the generator."""
    at_times = copy.deepcopy(rng)
    n = sum(part.size for part in times(rng, chunk))
    if n == 0:
        raise InvalidInput("no request arrives in the simulated time; raise the rate or the duration")
    at_lengths = copy.deepcopy(rng)
    skip = getattr(setup.lengths, "skip", setup.lengths.sample)  # a distribution may advance rng without sampling
    for lo in range(0, n, chunk):  # the lengths' draws, skipped
        skip(min(chunk, n - lo), rng)
    at_route = rng
    output_tokens = max(int(round(setup.output_tokens)), 1)

    def chunks() -> Iterator[Arrivals]:
        for t in rechunk(times(at_times, chunk), chunk):
            lengths = np.maximum(np.asarray(setup.lengths.sample(t.size, at_lengths), dtype=np.int64), 1)
            yield Arrivals(t, lengths, np.full(t.size, output_tokens, dtype=np.int64), None, at_route.random(t.size))

    return Source(n, horizon_s, chunks(), chunk)


def as_trace(trace: str | Path | pd.DataFrame | Trace) -> Trace:
    """A trace file (:func:`workload.read_trace`), :class:`workload.traces.Trace` or DataFrame (as
    :func:`workload.load_trace` makes it) as a :class:`Trace` sorted by arrival."""
    from pathlib import Path

    from prfaas_plan.workload.traces import Trace, read_trace

    if isinstance(trace, (str, Path)):
        return read_trace(trace)
    if isinstance(trace, Trace):
        return trace.sorted()
    for col in ("arrival_s", "input_tokens", "output_tokens"):
        if col not in getattr(trace, "columns", ()):
            raise InvalidInput(f"trace: no {col!r} column; load traces with load_trace()")
    return Trace.of_frame(trace).sorted()


def trace_source(trace: str | Path | pd.DataFrame | Trace, duration_s: float | None, rate_scale: float,
                 rng: np.random.Generator) -> Source:
    """A trace's requests arriving before ``duration_s`` (all: None), timestamps divided by ``rate_scale``."""
    tr = as_trace(trace)
    t = tr.arrival_s
    t = (t - (t.min() if len(t) else 0.0)) / rate_scale
    keep = np.ones(len(t), bool) if duration_s is None else t < duration_s
    if not keep.any():
        raise InvalidInput("--duration: no trace request arrives within it; lengthen it")
    # block ids as lists: a list is taken as it is (the engine only reads them; copying 10^4 costs 20 ms)
    hashes = None if tr.hash_ids is None else [h for h, k in zip(tr.hash_ids, keep.tolist()) if k]
    horizon = float(duration_s) if duration_s is not None else float(t[keep].max())
    arr = Arrivals(t[keep], tr.input_tokens[keep], tr.output_tokens[keep], hashes)
    return chunked(arr, horizon, rng, CHUNK_REQUESTS)


def source_for(setup: Setup, sc: Scenario, res: PlanResult, rate_rps: float | None, load: float | None,
               duration_s: float | None, trace: str | Path | pd.DataFrame | Trace | None, rate_scale: float,
               arrivals: str | Bursty | None, rng: np.random.Generator) -> Source:
    """The arrivals :func:`sim.simulate` asks for: a trace (given, or the scenario's own), a
    :class:`Bursty` process, or Poisson at ``rate_rps`` or ``load`` x Lambda_max."""
    if trace is None and rate_rps is None and load is None and arrivals is None and sc.spec.workload.kind == "trace":
        from prfaas_plan.scenario import resolve_trace

        planned = res.inputs.trace if res.scenario.spec.workload == sc.spec.workload else None
        trace = planned if planned is not None else resolve_trace(sc, sc.spec.workload.trace)  # parse once
    if trace is not None:
        if rate_rps is not None or load is not None or arrivals is not None:
            raise InvalidInput("trace: a trace brings its own arrivals; scale them with rate_scale instead of rate_rps/load")
        return trace_source(trace, duration_s, rate_scale, rng)
    duration = DEFAULT_SIM_DURATION_S if duration_s is None else float(duration_s)
    if not (math.isfinite(duration) and duration > 0):
        raise InvalidInput(f"--duration: {duration_s!r} must be a positive number of seconds")
    if isinstance(arrivals, Bursty):
        if rate_rps is not None or load is not None:
            raise InvalidInput("arrivals: a Bursty process sets its own rates; drop rate_rps/load")
        bursty = arrivals
        return synthetic(setup, lambda g, c: bursty_chunks(bursty, duration, g, c), duration, rng, CHUNK_REQUESTS)
    if arrivals not in (None, "poisson"):
        raise InvalidInput(f"arrivals: {arrivals!r} must be 'poisson' or a Bursty(...)")
    if rate_rps is not None and load is not None:
        raise InvalidInput("give either rate_rps or load, not both")
    if rate_rps is None:
        load = sc.spec.load if load is None else load
        if not (math.isfinite(load) and load > 0):
            raise InvalidInput(f"--load: {load!r} must be a positive fraction of the plan's maximum rate")
        rate_rps = load * res.lambda_max_rps
    if not (math.isfinite(rate_rps) and rate_rps > 0):
        raise InvalidInput(f"rate_rps: {rate_rps!r} must be a positive request rate")
    rate = float(rate_rps) * rate_scale
    check_expected_requests(rate, duration)
    return synthetic(setup, lambda g, c: poisson_chunks(rate, 0.0, duration, g, c), duration, rng, CHUNK_REQUESTS)


def check_expected_requests(rate_rps: float, duration_s: float) -> None:
    """Refuse a run of more than MAX_SIM_REQUESTS expected arrivals (hours of work: a typo)."""
    if rate_rps * duration_s > MAX_SIM_REQUESTS:
        raise InvalidInput(f"--duration/--rate-scale: {duration_s:,.3g} s at {rate_rps:,.3g} req/s is "
                           f"{rate_rps * duration_s:,.3g} requests, more than the {MAX_SIM_REQUESTS:,} one run "
                           "simulates; shorten --duration")
