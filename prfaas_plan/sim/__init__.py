"""Discrete-event simulation of a PrfaaS-PD deployment (docs/design.md section 6).

The simulator replays or generates requests and follows each one through the system the planner
plans for, so that the closed forms of :mod:`planner` and :mod:`queueing` can be checked and what
they cannot express (bursts, link degradation, scheduler reaction, prefix caches) can be measured.

What is modelled, and the assumptions
-------------------------------------
* **Arrivals**: Poisson at ``rate_rps`` (or ``load`` x the plan's Lambda_max), a two-state
  Markov-modulated Poisson process (:class:`Bursty`), or a trace's timestamps divided by
  ``rate_scale``. Synthetic prompts draw their uncached length from the scenario's length
  distribution and have the scenario's (mean) output length; traces give both per request.
* **Prefix caches**: one LRU cache of 512-token blocks per cluster (Mooncake ``hash_ids``),
  ``workload.prefix_cache_blocks`` blocks each (0 = off, None = unlimited), with the logic of
  :func:`workload.prefix_cache_replay`: a hit is the run of leading blocks present; a request's
  blocks are inserted tail first, then the LRU evicts. Look-up is at arrival, insertion when the
  request's prefill ends on that cluster. KV shipped to the local cluster is transfer cache and is
  not kept (docs/design.md section 1), so each cluster caches only what it prefilled.
* **Router**: a request's routing length is its incremental length (prompt minus the longer of
  its two cached prefixes, as the planner's single-cache workload sees it). The ``fixed`` policy
  offloads it to PrfaaS with the plan's per-bucket probability (:func:`planner.offload_fractions`,
  i.e. the threshold t with at most one partial bucket). The chosen cluster prefills the prompt
  minus *its own* cached prefix (at least one token).
* **Prefill pools**: FCFS, ``c`` identical servers, one request at a time each; service time
  ``T_remote(l)`` / ``T_local(l)`` of :class:`planner.PlanInputs`. FCFS multi-server queues are
  computed with the Kiefer-Wolfowitz recursion (a request starts on the server that frees first),
  which is exact and needs no events for service starts.
* **Inter-DC link**: processor sharing of the usable bit rate (nominal Gbps x the scenario's link
  efficiency) among active transfers, with capacity changing at link events. A remote request's
  transfer of ``8 S_kv(l)`` bits joins the link when its first layer is done (prefill start +
  ``T/L``, L layers; the cache leaves layer by layer, so the transfer can run ahead of the prefill);
  its KV is ready at ``max(prefill end + last layer's share, transfer end) + rtt/2``, where the
  last layer's share is ``8 S / L`` bits at the per-transfer rate at prefill end. On a lightly
  loaded link this is :func:`planner.unhidden_transfer_s`: ``max(x/L, x - T (1 - 1/L)) + rtt/2``
  (tested request by request); on a loaded one it is processor sharing, whose mean slowdown
  ``1 / (1 - rho)`` is the planner's ``share = 1 - utilisation`` (M/G/1-PS, also tested). The
  transfer itself is not limited by the rate the prefill produces the cache; PrfaaS memory for
  KV waiting on the link is not limited.
* **Decode**: each PD-D instance runs continuous batching with ``BS_max`` slots; a request holds
  one slot for ``output_tokens x T_decode`` seconds (``T_decode = PlanInputs.decode_step_s``,
  independent of batch occupancy, so TPOT is ``T_decode``), FCFS for slots when all are busy.
* **TTFT** = arrival -> first token = prefill wait + prefill + unhidden transfer + decode-slot
  wait + one decode step.
* **Policies** (:class:`Policy`): ``fixed`` (the plan's routing), ``short`` (the paper's
  short-term rule: every ``period_s`` raise t by ``raise_factor`` when link utilisation exceeds
  ``high`` (egress demand over usable capacity) or the PrfaaS queue exceeds ``queue_high`` per
  instance, unless the local prefill queue is already long; relax it back towards the plan when
  both are below the low levels or local prefill is the congested side; while bandwidth is scarce
  route by the *local* cluster's uncached length, so requests whose prefix is cached locally stay
  local), and ``dual`` (``short`` plus the long-term rebalancer: every ``rebalance_period_s`` move
  one local instance between the PD-P and PD-D roles when one side is much busier than the other,
  and re-plan t on the recently observed lengths). A converted instance first finishes the work
  already assigned to it.
* **Trace replay is open loop**: timestamps are kept whatever the latency, so under overload a
  conversation's next turn can arrive before the previous turn's prefill ended (and miss the
  cache), which a real client, waiting for the answer, would not do.

Records and memory
------------------
Arrivals are generated, and per-request records handed on, a chunk of ``CHUNK_REQUESTS`` at a time
(in arrival order, once every request of the chunk holds a decode slot); time-series rows likewise.
A run of at most ``max_rows_in_memory`` requests and rows keeps them in memory (exact percentiles);
a longer one keeps only running sums and a t-digest (``fastdigest``) for percentiles, so its
memory stays flat whatever its length, and ``out_dir`` streams the records to parquet files.

Everything is deterministic for a seed: the random draws are made with numpy in chunks that
reproduce, value for value, one generator drawing all arrival times, then all lengths, then all
routing draws; the event loop (``heapq``, plain Python) breaks ties by event kind and request id.

Units: seconds (``_s``), requests per second (``_rps``), tokens (``_tokens``), Gbps = 1e9 bit/s.
"""

from __future__ import annotations

import copy
import heapq
import json
import math
import os
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from prfaas_plan.data import staged_files
from prfaas_plan.errors import InvalidInput, shown
from prfaas_plan.units import BITS_PER_BYTE, GBPS_BITS_PER_S
from prfaas_plan.workload import MOONCAKE_BLOCK_TOKENS, LRUPrefixCache

__all__ = [
    "Policy",
    "Bursty",
    "SimResult",
    "simulate",
    "parse_link_drop",
    "read_link_trace",
    "write_outputs",
    "check_out_dir",
]

POLICIES = ("fixed", "short", "dual")
CACHE_AWARE = ("scarce", "always", "never")
BLOCK_TOKENS = MOONCAKE_BLOCK_TOKENS  # tokens per hash-id block
PATH_NAMES = ("pd_p", "prfaas")  # path codes 0 (local prefill) and 1 (PrfaaS)
TIMESERIES_COLUMNS = (
    "time_s", "egress_gbps", "link_utilisation", "egress_demand", "link_capacity_gbps", "active_transfers",
    "remote_queue", "local_queue", "decode_queue", "decode_busy", "decode_slots", "threshold_tokens",
    "n_pd_p", "n_pd_d",
)
REPLAN_MIN_REQUESTS = 200  # the rebalancer re-plans t only on at least this many observed lengths
REPLAN_WINDOW_REQUESTS = 2000  # ... and on at most this many of the most recent ones
CHUNK_REQUESTS = 1 << 16  # requests generated, and records handed on, at a time (a power of two)
TIMESERIES_CHUNK_ROWS = 1 << 14  # time-series rows handed on at a time
MAX_ROWS_IN_MEMORY = 1_000_000  # longer runs keep running totals instead of their records (simulate)
MAX_SIM_REQUESTS = 100_000_000  # expected arrivals of one synthetic run (~1e6 simulate in a minute)

# Event kinds, in the order they are handled at equal times.
_EV_LINK_CAP = 0  # the link's capacity changes (payload: index into the schedule)
_EV_LINK_DONE = 1  # the earliest link transfer finishes (payload: generation, stale if old)
_EV_JOIN = 2  # a remote request's transfer joins the link (payload: request id)
_EV_REMOTE_END = 3  # a PrfaaS prefill ends (payload: request id)
_EV_LOCAL_END = 4  # a PD-P prefill ends (payload: request id)
_EV_READY = 5  # a remote request's KV is ready at the decode cluster (payload: request id)


# ----------------------------------------------------------------------------------------------
# Parameters
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    """A scheduling policy and its levels.

    name: ``fixed`` (the plan's routing, nothing adapts), ``short`` (short-term threshold rule),
        ``dual`` (short-term rule plus the long-term P:D rebalancer).
    period_s: how often the short-term rule looks (and the time-series sampling period), seconds.
    high, low: egress demand as a fraction of the link's usable capacity (KV bits routed to
        PrfaaS per period over the bits the link can carry in it, smoothed over ``smooth_s``)
        above which t rises, and below which it may relax. Demand, not bits sent: the link's own
        utilisation lags (it stays at 1 while a backlog drains) and makes the rule overshoot.
    queue_high, queue_low: requests waiting for a PrfaaS instance, per instance, above which t
        rises and below which it may relax.
    local_queue_high: requests waiting for a PD-P instance, per instance. Raising t moves work
        onto local prefill, so t rises only while the local queue is at most this, and falls back
        when the local queue exceeds it while the PrfaaS side is not congested.
    smooth_s: time constant of the exponential smoothing of egress demand (seconds; one request
        ships up to gigabytes, so one period's demand is noisy).
    raise_factor: t is multiplied by this when raised and divided by it when relaxed, never below
        the plan's t; max_factor caps the multiplier.
    cache_aware: when to route by the *local* cluster's own uncached length instead of the
        incremental length (so requests whose prefix is cached locally stay local): ``"scarce"``
        (while bandwidth is scarce: t raised or utilisation above ``high``; only adaptive
        policies ever see scarcity), ``"always"`` or ``"never"``.
    rebalance_period_s: how often the long-term rebalancer looks (``dual``), seconds.
    rebalance_high: a side (prefill or decode) is overloaded when its offered utilisation over
        the last rebalance period (work arrived / capacity) exceeds this; one instance moves to it
        from the other side if the other side would stay below it after losing one instance.
        Prefill counts the PrfaaS and PD-P pools together (re-planning t balances them).
    rebalance_imbalance: the rebalancer re-plans t (for the provisioned link; deviations of the
        link are the short-term rule's job) when one prefill pool's offered utilisation exceeds
        the other's by this factor, and after every move.
    """

    name: str = "fixed"
    period_s: float = 1.0
    high: float = 0.8
    low: float = 0.5
    queue_high: float = 4.0
    queue_low: float = 1.0
    local_queue_high: float = 1.0
    smooth_s: float = 10.0
    raise_factor: float = 1.25
    max_factor: float = 64.0
    cache_aware: str = "scarce"
    rebalance_period_s: float = 60.0
    rebalance_high: float = 0.9
    rebalance_imbalance: float = 1.25

    def __post_init__(self) -> None:
        if self.name not in POLICIES:
            raise InvalidInput(f"--policy: {self.name!r} is not a policy; use one of {', '.join(POLICIES)}")
        for key in ("period_s", "smooth_s", "rebalance_period_s", "max_factor", "raise_factor", "high", "rebalance_high",
                    "rebalance_imbalance"):
            value = getattr(self, key)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise InvalidInput(f"policy.{key}: {value!r} must be a positive number")
        if not 0 <= self.low <= self.high:
            raise InvalidInput(f"policy.low: {self.low!r} must lie between 0 and policy.high ({self.high})")
        if not self.local_queue_high >= 0:
            raise InvalidInput(f"policy.local_queue_high: {self.local_queue_high!r} must be >= 0")
        if not 0 <= self.queue_low <= self.queue_high:
            raise InvalidInput(f"policy.queue_low: {self.queue_low!r} must lie between 0 and queue_high ({self.queue_high})")
        if self.cache_aware not in CACHE_AWARE:
            raise InvalidInput(f"policy.cache_aware: {self.cache_aware!r} must be one of {', '.join(CACHE_AWARE)}")
        if self.raise_factor <= 1 or self.max_factor < 1:
            raise InvalidInput("policy.raise_factor must exceed 1 and policy.max_factor must be at least 1")

    @property
    def adapts_threshold(self) -> bool:
        return self.name in ("short", "dual")

    @property
    def rebalances(self) -> bool:
        return self.name == "dual"


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
        return (self.on_rps * self.mean_on_s + self.off_rps * self.mean_off_s) / (self.mean_on_s + self.mean_off_s)


LinkEvent = tuple[float, float, float]  # (start_s, end_s, gbps): nominal link rate in that window

from prfaas_plan.defaults import DEFAULT_SIM_DURATION_S

"""Seconds of Poisson or bursty arrivals simulated when no duration is given."""


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
    return _check_link_events(events, "--link-drop")


def read_link_trace(path: str | Path) -> list[LinkEvent]:
    """Read a link-capacity trace: CSV with columns ``time_s,gbps`` (nominal Gbps from that time on,
    until the next row; the last row holds forever). Returns link events."""
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
    return _check_link_events(list(zip(times.tolist(), ends.tolist(), rates.tolist())), "--link-trace")


def _check_link_events(events: Sequence[LinkEvent], field_name: str = "link_events") -> list[LinkEvent]:
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


def _capacity_schedule(events: Sequence[LinkEvent], base_bits_per_s: float, efficiency: float) -> list[tuple[float, float]]:
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


# ----------------------------------------------------------------------------------------------
# Building blocks
# ----------------------------------------------------------------------------------------------


class _Link:
    """Processor-sharing link: every active transfer gets ``capacity / n`` bits/s.

    Virtual time ``v`` is the service (bits) each active transfer has received since the link
    was created; a transfer of ``B`` bits that joins at ``v0`` finishes when ``v = v0 + B``.
    ``gen`` invalidates scheduled completion events when the set or the capacity changes.
    """

    __slots__ = ("capacity_bps", "n", "v", "last_s", "finish", "gen", "bits_sent", "capacity_time")

    def __init__(self, capacity_bps: float) -> None:
        self.capacity_bps = capacity_bps
        self.n = 0
        self.v = 0.0
        self.last_s = 0.0
        self.finish: list[tuple[float, int]] = []  # (virtual finish, request id)
        self.gen = 0
        self.bits_sent = 0.0  # integral of capacity over busy time = bits delivered
        self.capacity_time = 0.0  # integral of capacity over all time (bit-capacity offered)

    def advance(self, now: float) -> None:
        dt = now - self.last_s
        if dt > 0:
            cap = self.capacity_bps
            self.capacity_time += dt * cap
            if self.n:
                self.v += dt * cap / self.n
                self.bits_sent += dt * cap
            self.last_s = now

    def next_done_s(self, now: float) -> float:
        if not self.n or self.capacity_bps <= 0:
            return math.inf
        return now + max(self.finish[0][0] - self.v, 0.0) * self.n / self.capacity_bps


@dataclass(frozen=True)
class _Routing:
    """Offload probability by routing length: ``fracs[i]`` for lengths in
    ``(edges[i-1], edges[i]]`` (the last entry for longer ones), after dividing the length by the
    policy's threshold factor."""

    edges_tokens: tuple[float, ...]
    fracs: tuple[float, ...]
    threshold_tokens: float | None

    def offload_probability(self, tokens: float, factor: float = 1.0) -> float:
        i = bisect_left(self.edges_tokens, tokens / factor)
        return self.fracs[min(i, len(self.fracs) - 1)]

    @classmethod
    def threshold(cls, t_tokens: float) -> _Routing:
        return cls((float(t_tokens),), (0.0, 1.0), float(t_tokens))


def _bucket_upper_edges(lengths, b) -> np.ndarray:
    """The upper length edge of each planner bucket, so a length can be mapped to its bucket."""
    n = len(b.tokens)
    if hasattr(lengths, "bucket_edges"):  # TruncatedLogNormal: log-spaced edges
        edges = np.asarray(lengths.bucket_edges(n), dtype=float)[1:]
        if len(edges) == n:
            return edges
    tokens = getattr(lengths, "tokens", None)
    if tokens is not None:  # EmpiricalLengths: contiguous runs of the sorted sample
        tokens = np.asarray(tokens, dtype=float)
        bounds = np.rint(np.cumsum(b.probs) * tokens.size).astype(np.int64)
        bounds = np.clip(bounds, 1, tokens.size)
        return tokens[bounds - 1]
    reps = np.asarray(b.tokens, dtype=float)  # fallback: midpoints between representatives
    return np.append((reps[1:] + reps[:-1]) / 2, np.inf)


@dataclass(frozen=True)
class _Setup:
    """Everything the engine needs, resolved from a plan (or built by hand in tests)."""

    n_prfaas: int
    n_pd_p: int
    n_pd_d: int
    decode_batch_max: int
    decode_step_s: float
    n_layers: int
    rtt_s: float
    link_bits_per_s: float
    link_efficiency: float
    t_remote: Callable[[np.ndarray], np.ndarray]
    t_local: Callable[[np.ndarray], np.ndarray]
    kv_bytes: Callable[[np.ndarray], np.ndarray]
    routing: _Routing
    lengths: object  # LengthDist for synthetic arrivals
    output_tokens: float
    cache_blocks: int | None = 0
    ttft_slo_s: float | None = None
    tpot_slo_s: float | None = None
    remote_cache_blocks: int | None = None  # None = same as cache_blocks

    def __post_init__(self) -> None:
        if self.n_pd_d < 1 or self.decode_batch_max < 1:
            raise InvalidInput("simulate: the plan has no decode instance (or BS_max is 0); nothing can decode")
        if self.n_prfaas + self.n_pd_p < 1:
            raise InvalidInput("simulate: the plan has no prefill instance")

    @classmethod
    def from_plan(cls, res, sc=None, plan=None) -> _Setup:
        """The plan's pools, routing and time functions; the prefix-cache size and SLOs come from
        ``sc`` (default: the plan's own scenario), so one plan can be simulated with caching on
        and off."""
        from prfaas_plan.planner import offload_fractions

        inp, b = res.inputs, res.buckets
        plan = res.plan if plan is None else plan
        sc = inp.scenario if sc is None else sc
        fracs = offload_fractions(plan, b)
        routing = _Routing(tuple(_bucket_upper_edges(inp.lengths, b).tolist()), tuple(np.asarray(fracs, float).tolist()),
                           plan.threshold_tokens)
        slo = sc.spec.slo
        return cls(
            n_prfaas=plan.instances.get("prfaas", 0), n_pd_p=plan.instances.get("pd_p", 0),
            n_pd_d=plan.instances.get("pd_d", 0), decode_batch_max=inp.decode_batch_max,
            decode_step_s=inp.decode_step_s, n_layers=inp.scenario.model.layers.count,
            rtt_s=inp.scenario.spec.link.rtt_s, link_bits_per_s=inp.link_bits_per_s,
            link_efficiency=inp.scenario.spec.link.efficiency,
            t_remote=inp.t_remote, t_local=inp.t_local, kv_bytes=inp.kv_bytes, routing=routing,
            lengths=inp.lengths, output_tokens=inp.output_tokens,
            cache_blocks=sc.spec.workload.prefix_cache_blocks, ttft_slo_s=slo.ttft_s, tpot_slo_s=slo.tpot_s,
        )


@dataclass
class _Arrivals:
    """Requests in arrival order (numpy arrays; hash_ids a list of lists or None); route_u: the
    uniform draw that routes each request's partial bucket (drawn from the run's generator when None)."""

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    hash_ids: list | None = None
    route_u: np.ndarray | None = None


@dataclass(frozen=True)
class _Source:
    """The arrivals of a run as the engine reads them: ``n`` requests over ``horizon_s``, as
    :class:`_Arrivals` chunks (with route_u) of ``chunk`` requests each (the last may be shorter),
    in order. hash_ids (traces) cover all requests; max_input_tokens is known for in-memory arrivals."""

    n: int
    horizon_s: float
    chunks: Iterator[_Arrivals]
    chunk: int
    hash_ids: list | None = None
    max_input_tokens: int | None = None


def _poisson_chunks(rate_rps: float, start_s: float, end_s: float, rng: np.random.Generator,
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


def _poisson_times(rate_rps: float, start_s: float, end_s: float, rng: np.random.Generator) -> np.ndarray:
    return np.concatenate([np.empty(0), *_poisson_chunks(rate_rps, start_s, end_s, rng)])


def _bursty_chunks(b: Bursty, duration_s: float, rng: np.random.Generator, chunk: int | None = None) -> Iterator[np.ndarray]:
    """Arrival times of the Markov-modulated process on [0, duration_s), in order (see _poisson_chunks)."""
    on = rng.random() < b.mean_on_s / (b.mean_on_s + b.mean_off_s)
    t = 0.0
    while t < duration_s:
        end = min(t + rng.exponential(b.mean_on_s if on else b.mean_off_s), duration_s)
        yield from _poisson_chunks(b.on_rps if on else b.off_rps, t, end, rng, chunk)
        t, on = end, not on


def _rechunk(parts: Iterable[np.ndarray], size: int) -> Iterator[np.ndarray]:
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


def _chunked(arr: _Arrivals, horizon_s: float, rng: np.random.Generator, chunk: int) -> _Source:
    """In-memory arrivals as a source; route_u, where ``arr`` has none, drawn from ``rng`` in order."""
    n = len(arr.arrival_s)

    def chunks() -> Iterator[_Arrivals]:
        for lo in range(0, n, chunk):
            hi = min(lo + chunk, n)
            u = rng.random(hi - lo) if arr.route_u is None else arr.route_u[lo:hi]
            yield _Arrivals(arr.arrival_s[lo:hi], arr.input_tokens[lo:hi], arr.output_tokens[lo:hi], None, u)

    top = int(max(arr.input_tokens.max(), 1)) if n else 1
    return _Source(n, horizon_s, chunks(), chunk, arr.hash_ids, top)


def _synthetic(setup: _Setup, times: Callable[[np.random.Generator, int], Iterator[np.ndarray]], horizon_s: float,
               rng: np.random.Generator, chunk: int) -> _Source:
    """Generated arrivals as a source, a chunk at a time, with the very draws of an in-memory run:
    one generator gives all the arrival times, then all the lengths, then all the routing draws.
    A first pass over the times and the lengths (kept nowhere) finds where each of the three
    streams starts; then they are replayed side by side from copies of the generator."""
    at_times = copy.deepcopy(rng)
    n = sum(part.size for part in times(rng, chunk))
    if n == 0:
        raise InvalidInput("no request arrives in the simulated time; raise the rate or the duration")
    at_lengths = copy.deepcopy(rng)
    for lo in range(0, n, chunk):
        setup.lengths.sample(min(chunk, n - lo), rng)
    at_route = rng
    output_tokens = max(int(round(setup.output_tokens)), 1)

    def chunks() -> Iterator[_Arrivals]:
        for t in _rechunk(times(at_times, chunk), chunk):
            lengths = np.maximum(np.asarray(setup.lengths.sample(t.size, at_lengths), dtype=np.int64), 1)
            yield _Arrivals(t, lengths, np.full(t.size, output_tokens, dtype=np.int64), None, at_route.random(t.size))

    return _Source(n, horizon_s, chunks(), chunk)


# ----------------------------------------------------------------------------------------------
# The engine
# ----------------------------------------------------------------------------------------------


class _Engine:
    """One simulation run. Call :meth:`run` once; the records go to the sink as the run goes."""

    def __init__(self, setup: _Setup, source: _Source, policy: Policy, link_events: Sequence[LinkEvent],
                 sink: _Sink, progress: Callable[[float], None] | None = None) -> None:
        self.s = setup
        self.src = source
        self.policy = policy
        self.horizon_s = source.horizon_s
        self.sink = sink
        self.progress = progress
        self.schedule = _capacity_schedule(link_events, setup.link_bits_per_s, setup.link_efficiency)
        self.n = source.n
        self.events_handled = 0
        self.roles_log: list[tuple[float, int, int]] = []

    # -- the prefill / transfer tables ---------------------------------------------------------
    def _token_tables(self, top_tokens: int) -> tuple[list, list, list]:
        """Service times and shipped bits indexed by uncached tokens 0..top (with prefix caching the
        length a cluster prefills is known only at arrival)."""
        s = self.s
        grid = np.arange(1, top_tokens + 1, dtype=float)
        pad = lambda v: [0.0] + np.asarray(v, dtype=float).tolist()  # noqa: E731
        return pad(s.t_remote(grid)), pad(s.t_local(grid)), pad(BITS_PER_BYTE * s.kv_bytes(grid))

    def _chunk_tables(self, a: _Arrivals) -> tuple[list, list, list]:
        """Service times and shipped bits of each request of a chunk (no caching: lengths known)."""
        s, l = self.s, a.input_tokens.astype(float)
        return (np.asarray(s.t_remote(l), float).tolist(), np.asarray(s.t_local(l), float).tolist(),
                (BITS_PER_BYTE * np.asarray(s.kv_bytes(l), float)).tolist())

    def run(self) -> None:  # noqa: C901 - one loop, kept in one place for speed and readability
        s, src, pol, sink = self.s, self.src, self.policy, self.sink
        n = self.n
        self.local_cache = LRUPrefixCache(s.cache_blocks)
        remote_blocks = s.cache_blocks if s.remote_cache_blocks is None else s.remote_cache_blocks
        self.remote_cache = LRUPrefixCache(remote_blocks)
        hash_ids = src.hash_ids
        self.caching = hash_ids is not None and (self.local_cache.enabled or self.remote_cache.enabled)
        if self.caching:
            t_rem, t_loc, bits = self._token_tables(src.max_input_tokens)
        # per-request results live in the ring (index rid & mask) until their chunk goes to the sink;
        # the loaded chunk's inputs are lists indexed by k = rid - base
        ring = self.ring = _Ring(src.chunk, n, s.decode_step_s)
        left, shift = ring.left, ring.shift
        chunks = iter(src.chunks)
        pending = next(chunks, None)  # the next chunk, loaded when its first request arrives
        base = clen = 0
        step = s.decode_step_s
        n_layers = s.n_layers
        half_rtt = s.rtt_s / 2
        # pools (Kiefer-Wolfowitz: heap of server free times)
        self.remote_srv = [0.0] * s.n_prfaas
        self.local_srv = [0.0] * s.n_pd_p
        self.remote_waiting: list[float] = []  # start times of queued requests (for queue lengths)
        self.local_waiting: list[float] = []
        self.decode_waiting: list[float] = []
        self.decode_ends: list[float] = []  # end times of admitted requests (for occupancy)
        decode_ends = self.decode_ends
        remote_srv, local_srv = self.remote_srv, self.local_srv
        remote_waiting, local_waiting, decode_waiting = self.remote_waiting, self.local_waiting, self.decode_waiting
        self.link = link = _Link(self.schedule[0][1])
        heap: list[tuple[float, int, int]] = []
        push, pop = heapq.heappush, heapq.heappop
        for i, (t, _cap) in enumerate(self.schedule[1:], start=1):
            push(heap, (t, _EV_LINK_CAP, i))
        # per-request scratch for remote requests
        remote_end = {}  # rid -> prefill end time, once ended (transfer not done yet)
        xfer_done = set()
        job_bits = {}
        # policy state
        self.factor = 1.0
        self.scarce = False
        self.util_smooth = 0.0
        self.routing = s.routing
        self.recent_route_tokens: deque[int] = deque(maxlen=REPLAN_WINDOW_REQUESTS)
        self.work_local_s = self.work_remote_s = self.work_decode_s = 0.0
        has_remote, has_local = s.n_prfaas > 0, s.n_pd_p > 0
        local_first, scarce_aware = pol.cache_aware == "always", pol.cache_aware == "scarce"
        period = pol.period_s
        next_tick = period
        next_rebalance = pol.rebalance_period_s if pol.rebalances else math.inf
        self._last_bits = self._last_cap_time = self._last_routed = self.bits_routed = 0.0
        horizon = self.horizon_s
        progress, prog_every = self.progress, max(n // 100, 1)
        caching, local_cache, remote_cache = self.caching, self.local_cache, self.remote_cache
        inf = math.inf
        i = 0
        next_arrival = float(pending.arrival_s[0]) if pending is not None else inf
        handled = 0

        def admit_decode(rid: int, now: float) -> None:
            """Give the request the earliest free decode slot (FCFS over slots)."""
            best = None
            best_top = inf
            for h in decode_active:
                if h[0] < best_top:
                    best, best_top = h, h[0]
            free = heapq.heappop(best)
            start = free if free > now else now
            j = rid & mask
            hold = (out_r[j] or 1) * step
            heapq.heappush(best, start + hold)
            heapq.heappush(decode_ends, start + hold)
            if start > now:
                heapq.heappush(decode_waiting, start)
            dwait[j] = start - now
            ttft[j] = start + step - arr_r[j]
            end[j] = start + hold
            left[rid >> shift] -= 1

        # PD-D instances taking requests: a heap of slot free times each (BS_max entries)
        self.decode_active = decode_active = [[0.0] * s.decode_batch_max for _ in range(s.n_pd_d)]

        def reschedule_link(now: float) -> None:
            link.gen += 1
            t_done = link.next_done_s(now)
            if t_done < inf:
                push(heap, (t_done, _EV_LINK_DONE, link.gen))

        while True:
            t_heap = heap[0][0] if heap else inf
            if next_tick <= horizon and next_tick <= next_arrival and next_tick <= t_heap:
                now = next_tick
                if now >= next_rebalance:
                    self._rebalance(now)
                    next_rebalance += pol.rebalance_period_s
                self._tick(now)
                next_tick += period
                continue
            if next_arrival <= t_heap:
                if next_arrival == inf:
                    break  # no arrivals left and no events pending
                # ---------------------------------------------------------------- arrival
                now = next_arrival
                rid = i
                i += 1
                k = rid - base
                if k == clen:  # the first request of the next chunk: load it
                    arrival, out_tok = pending.arrival_s.tolist(), pending.output_tokens.tolist()
                    inp_tok, u = pending.input_tokens.tolist(), pending.route_u.tolist()
                    if not caching:
                        t_rem, t_loc, bits = self._chunk_tables(pending)
                    ring.add(pending, arrival, out_tok, sink)
                    r = ring.arrays
                    path, hit_arr, uncached_arr, route_tokens = r["path"], r["hit_tokens"], r["uncached"], r["route_tokens"]
                    wait, prefill, transfer, dwait, ttft, end = (r["wait"], r["prefill"], r["transfer"], r["decode_wait"],
                                                                 r["ttft"], r["end"])
                    arr_r, out_r, mask = ring.arrival, ring.output, ring.cap - 1
                    base, k, clen = rid, 0, len(arrival)
                    pending = next(chunks, None)
                next_arrival = (arrival[k + 1] if k + 1 < clen else
                                float(pending.arrival_s[0]) if pending is not None else inf)
                j = rid & mask
                if progress is not None and i % prog_every == 0:
                    progress(i / n)
                l_in = inp_tok[k]
                if caching:
                    ids = hash_ids[rid]
                    hl = min(local_cache.hit_blocks(ids) * BLOCK_TOKENS, l_in - 1)
                    hr = min(remote_cache.hit_blocks(ids) * BLOCK_TOKENS, l_in - 1)
                    l_route = l_in - (hl if hl > hr else hr)
                    l_local_route = l_in - hl
                else:
                    hl = hr = 0
                    l_route = l_local_route = l_in
                if not has_remote:
                    go_remote = False
                elif not has_local:
                    go_remote = True
                else:
                    factor = self.factor
                    if local_first or (self.scarce and scarce_aware):
                        go_remote = u[k] < self.routing.offload_probability(l_local_route, factor)
                    else:
                        go_remote = u[k] < self.routing.offload_probability(l_route, factor)
                route_tokens[j] = l_route
                self.recent_route_tokens.append(l_route)
                # offered work is counted at arrival, so a bottleneck upstream cannot hide demand
                self.work_decode_s += (out_tok[k] or 1) * step
                if go_remote:
                    hit = hr
                    l = l_in - hit
                    svc = t_rem[l] if caching else t_rem[k]
                    start, done = _admit(remote_srv, remote_waiting, now, svc)
                    path[j] = 1
                    job_bits[rid] = bits[l] if caching else bits[k]
                    push(heap, (start + svc / n_layers, _EV_JOIN, rid))
                    push(heap, (done, _EV_REMOTE_END, rid))
                    self.work_remote_s += svc
                    self.bits_routed += job_bits[rid]
                else:
                    hit = hl
                    l = l_in - hit
                    svc = t_loc[l] if caching else t_loc[k]
                    start, done = _admit(local_srv, local_waiting, now, svc)
                    push(heap, (done, _EV_LOCAL_END, rid))
                    self.work_local_s += svc
                hit_arr[j] = hit
                uncached_arr[j] = l
                wait[j] = start - now
                prefill[j] = svc
                continue
            now, kind, x = pop(heap)
            handled += 1
            if kind == _EV_LOCAL_END:
                if caching:
                    local_cache.insert(hash_ids[x])
                admit_decode(x, now)
            elif kind == _EV_JOIN:
                link.advance(now)
                link.n += 1
                heapq.heappush(link.finish, (link.v + job_bits[x], x))
                reschedule_link(now)
            elif kind == _EV_REMOTE_END:
                if caching:
                    remote_cache.insert(hash_ids[x])
                # the last layer's cache leaves now, at the per-transfer share of the link (with
                # this transfer counted once, whether or not it is still running)
                done_already = x in xfer_done
                last_s = job_bits[x] / n_layers * (link.n + done_already) / link.capacity_bps
                if done_already:
                    xfer_done.discard(x)
                    del job_bits[x]
                    ready = now + last_s + half_rtt
                    transfer[x & mask] = ready - now
                    push(heap, (ready, _EV_READY, x))
                else:
                    remote_end[x] = (now, now + last_s)
            elif kind == _EV_LINK_DONE:
                if x != link.gen:
                    continue  # stale
                link.advance(now)
                fin = link.finish
                # the earliest transfer is due now: finish it even if float rounding of ``now``
                # left ``v`` a hair short (otherwise the event could repeat without progress)
                if fin and fin[0][0] > link.v:
                    link.v = fin[0][0]
                tol = 1e-9 * (abs(link.v) + 1.0)
                while fin and fin[0][0] <= link.v + tol:
                    _, rid = heapq.heappop(fin)
                    link.n -= 1
                    ended = remote_end.pop(rid, None)
                    if ended is None:
                        xfer_done.add(rid)  # prefill still running
                    else:
                        pe, min_ready = ended
                        del job_bits[rid]
                        ready = (min_ready if min_ready > now else now) + half_rtt
                        transfer[rid & mask] = ready - pe
                        push(heap, (ready, _EV_READY, rid))
                if link.n == 0:
                    link.v = 0.0  # keep virtual time small
                reschedule_link(now)
            elif kind == _EV_READY:
                admit_decode(x, now)
            elif kind == _EV_LINK_CAP:
                link.advance(now)
                link.capacity_bps = self.schedule[x][1]
                reschedule_link(now)
        ring.flush(sink, everything=True)
        self.events_handled = handled + n
        if progress is not None:
            progress(1.0)

    # -- periodic work ------------------------------------------------------------------------
    def _tick(self, now: float) -> None:
        """Sample the time series and apply the short-term rule."""
        s, pol, link = self.s, self.policy, self.link
        period = pol.period_s
        link.advance(now)
        sent = link.bits_sent - self._last_bits
        offered = link.capacity_time - self._last_cap_time
        self._last_bits, self._last_cap_time = link.bits_sent, link.capacity_time
        util = sent / offered if offered > 0 else 0.0
        demand = (self.bits_routed - self._last_routed) / offered if offered > 0 else 0.0
        self._last_routed = self.bits_routed
        rq = _drain_count(self.remote_waiting, now)
        lq = _drain_count(self.local_waiting, now)
        dq = _drain_count(self.decode_waiting, now)
        n_p = len(self.local_srv)
        n_d = len(self.decode_active)
        busy = _drain_count(self.decode_ends, now) - dq  # admitted, not ended, not waiting
        self.util_smooth += min(period / pol.smooth_s, 1.0) * (demand - self.util_smooth)
        if pol.adapts_threshold and s.n_prfaas > 0 and n_p > 0:
            u = self.util_smooth
            rq_per = rq / s.n_prfaas
            lq_per = lq / n_p
            remote_hot = u > pol.high or rq_per > pol.queue_high
            local_hot = lq_per > pol.local_queue_high
            if remote_hot and not local_hot:
                self.factor = min(self.factor * pol.raise_factor, pol.max_factor)
            elif (u < pol.low and rq_per < pol.queue_low) or (local_hot and not remote_hot):
                self.factor = max(1.0, self.factor / pol.raise_factor)
            self.scarce = u > pol.high or self.factor > 1.0
        t = self.routing.threshold_tokens
        self.sink.tick((
            now, sent / period / GBPS_BITS_PER_S, util, demand, offered / period / GBPS_BITS_PER_S, link.n,
            rq, lq, dq, max(busy, 0), n_d * s.decode_batch_max, t * self.factor if t is not None else math.nan,
            n_p, n_d,
        ))

    def _rebalance(self, now: float) -> None:
        """Long-term rule (see :class:`Policy`): move one local instance towards the overloaded
        side, re-plan t. Utilisations are offered work (counted at arrival) over capacity, so an
        upstream bottleneck cannot hide demand downstream."""
        s, pol = self.s, self.policy
        span = pol.rebalance_period_s
        n_p, n_d = len(self.local_srv), len(self.decode_active)
        slots = s.decode_batch_max
        u_p = self.work_local_s / (max(n_p, 1) * span)
        u_r = self.work_remote_s / (max(s.n_prfaas, 1) * span)
        u_d = self.work_decode_s / (max(n_d, 1) * slots * span)
        self.work_local_s = self.work_remote_s = self.work_decode_s = 0.0
        high = pol.rebalance_high
        moved = False
        # prefill pressure: the busier of the two prefill pools (t re-planning balances them)
        prefill_total = u_p * n_p + u_r * s.n_prfaas
        if u_d > high and n_p > 1 and prefill_total / (n_p - 1 + s.n_prfaas) < high:
            # PD-P -> PD-D: the server that frees first finishes its work, then decodes
            free = heapq.heappop(self.local_srv)
            self.decode_active.append([max(free, now)] * slots)
            moved = True
        elif max(u_p, u_r) > high and n_d > 1 and u_d * n_d / (n_d - 1) < high:
            # PD-D -> PD-P: the instance that drains first stops taking requests, then prefills
            k = min(range(n_d), key=lambda j: max(self.decode_active[j]))
            h = self.decode_active.pop(k)
            heapq.heappush(self.local_srv, max(max(h), now))
            moved = True
        if moved:
            self.roles_log.append((now, len(self.local_srv), len(self.decode_active)))
        lo, hi = sorted((u_p, u_r))
        if (moved or hi > pol.rebalance_imbalance * max(lo, 1e-9)) and len(self.recent_route_tokens) >= REPLAN_MIN_REQUESTS:
            # plan for the provisioned link: deviations from it are the short-term rule's job, so
            # its factor is kept and applies to the new base threshold
            t = _replan_threshold(s, np.fromiter(self.recent_route_tokens, dtype=float), len(self.local_srv),
                                  s.link_bits_per_s)
            if t is not None:
                self.routing = _Routing.threshold(t)


def _admit(servers: list[float], waiting: list[float], now: float, service_s: float) -> tuple[float, float]:
    """FCFS on a pool of servers (a heap of the times each becomes free): the request starts
    when the earliest-free server is free, or now; a start in the future is recorded as waiting.
    Returns (start_s, done_s)."""
    free = heapq.heappop(servers)
    start = free if free > now else now
    done = start + service_s
    heapq.heappush(servers, done)
    if start > now:
        heapq.heappush(waiting, start)
    return start, done


def _drain_count(heap: list[float], now: float) -> int:
    """Pop the times that have passed from a heap; return how many are still ahead (e.g. the
    start times of requests still waiting)."""
    while heap and heap[0] <= now:
        heapq.heappop(heap)
    return len(heap)


def _replan_threshold(s: _Setup, tokens: np.ndarray, n_p: int, link_bits_per_s: float) -> float | None:
    """The threshold t that maximises the prefill-limited rate on observed routing lengths.

    The exact-mode capacity rows (docs/design.md section 5) restricted to threshold policies, with
    expectations over the sample: with the ``k`` shortest requests local, the rate is
    ``n * min(n_p / W_local(k), n_prfaas / W_remote(k), link / bits(k))``.
    """
    if s.n_prfaas == 0 or n_p == 0 or tokens.size == 0:
        return None
    l = np.sort(tokens)
    tl = np.concatenate([[0.0], np.cumsum(s.t_local(l))])  # local work of the k shortest
    tr_all = np.asarray(s.t_remote(l), float)
    br_all = BITS_PER_BYTE * np.asarray(s.kv_bytes(l), float)
    tr = np.concatenate([np.cumsum(tr_all[::-1])[::-1], [0.0]])  # remote work of the rest
    br = np.concatenate([np.cumsum(br_all[::-1])[::-1], [0.0]])
    with np.errstate(divide="ignore"):
        load = np.maximum.reduce([tl / n_p, tr / s.n_prfaas, br / max(link_bits_per_s, 1e-300)])
    k = int(np.argmin(load))
    if k >= l.size:
        return float(l[-1])
    # cut between distinct lengths: everything up to l[k-1] local
    return float(l[k - 1]) if k > 0 else float(max(l[0] - 1, 0))


# ----------------------------------------------------------------------------------------------
# Records: the ring of requests in flight, the sink, running totals
# ----------------------------------------------------------------------------------------------

# per-request results the engine fills in: name, dtype, value before the request has it
_RING_FIELDS = (
    ("path", np.int8, 0), ("hit_tokens", np.int64, 0), ("uncached", np.int64, 0), ("route_tokens", np.int64, 0),
    ("wait", np.float64, np.nan), ("prefill", np.float64, np.nan), ("transfer", np.float64, 0.0),
    ("decode_wait", np.float64, np.nan), ("ttft", np.float64, np.nan), ("end", np.float64, np.nan),
)


def _records(a: _Arrivals, r: dict[str, np.ndarray], decode_step_s: float) -> pd.DataFrame:
    """One chunk of per-request records (the columns of :attr:`SimResult.requests`)."""
    path = r["path"]
    return pd.DataFrame({
        "arrival_s": a.arrival_s, "path": pd.Categorical.from_codes(path.astype(np.int64), PATH_NAMES),
        "input_tokens": a.input_tokens, "hit_tokens": r["hit_tokens"], "uncached_tokens": r["uncached"],
        "route_tokens": r["route_tokens"], "output_tokens": a.output_tokens, "wait_s": r["wait"],
        "prefill_s": r["prefill"], "transfer_s": np.where(path == 1, r["transfer"], 0.0),
        "decode_wait_s": r["decode_wait"], "ttft_s": r["ttft"],
        "tpot_s": np.where(np.isfinite(r["end"]), decode_step_s, np.nan), "end_s": r["end"],
    }, copy=True)


class _Ring:
    """Per-request results of the requests whose records are not yet with the sink.

    Request ``rid`` lives at ``rid & (cap - 1)`` of arrays whose length ``cap`` is a power of two
    holding whole chunks of ``chunk`` requests (a power of two). A chunk goes to the sink, in
    arrival order, once each of its requests holds a decode slot; the arrays double when the
    requests in flight outgrow them (an overloaded system), so memory follows what is in flight."""

    def __init__(self, chunk: int, n: int, decode_step_s: float) -> None:
        if chunk < 1 or chunk & (chunk - 1):
            raise ValueError(f"chunk {chunk} must be a power of two")
        self.chunk, self.shift, self.step = chunk, chunk.bit_length() - 1, decode_step_s
        self.cap = 1 << max(min(n, 2 * chunk) - 1, 0).bit_length()
        self.arrays = {name: np.full(self.cap, fill, dtype) for name, dtype, fill in _RING_FIELDS}
        self.arrival: list[float] = [0.0] * self.cap  # what the engine reads back: arrival time, output tokens
        self.output: list[int] = [0] * self.cap
        self.inputs: dict[int, _Arrivals] = {}  # chunk number -> its arrivals, until it goes to the sink
        self.left: list[int] = []  # per chunk: requests still waiting for a decode slot
        self.done = 0  # chunks handed to the sink

    def add(self, a: _Arrivals, arrival: list[float], output: list[int], sink: _Sink) -> None:
        """Take the next chunk of arrivals, after handing finished chunks to the sink (freeing slots)."""
        self.flush(sink)
        lo, m = len(self.left) * self.chunk, len(arrival)
        while lo + m - self.done * self.chunk > self.cap:
            self._grow(lo)
        j = lo & (self.cap - 1)
        for name, _, fill in _RING_FIELDS:
            self.arrays[name][j:j + m] = fill
        self.arrival[j:j + m] = arrival
        self.output[j:j + m] = output
        self.inputs[len(self.left)] = a
        self.left.append(m)

    def _grow(self, lo: int) -> None:
        """Double the arrays, keeping the requests in flight (ids from the first chunk not yet handed
        over up to ``lo``) in their new places."""
        old, cap = self.cap - 1, 2 * self.cap
        ids = np.arange(self.done * self.chunk, lo)
        for name, dtype, fill in _RING_FIELDS:
            grown = np.full(cap, fill, dtype)
            grown[ids & (cap - 1)] = self.arrays[name][ids & old]
            self.arrays[name] = grown
        for attr, fill in (("arrival", 0.0), ("output", 0)):
            was, grown = getattr(self, attr), [fill] * cap
            for rid in ids.tolist():
                grown[rid & (cap - 1)] = was[rid & old]
            setattr(self, attr, grown)
        self.cap = cap

    def flush(self, sink: _Sink, everything: bool = False) -> None:
        """Hand the leading finished chunks (all chunks: ``everything``) to the sink, in order."""
        while self.done < len(self.left) and (everything or self.left[self.done] == 0):
            a = self.inputs.pop(self.done)
            j, m = (self.done * self.chunk) & (self.cap - 1), len(a.arrival_s)
            sink.add("requests", _records(a, {name: v[j:j + m] for name, v in self.arrays.items()}, self.step))
            self.done += 1


class _Quantiles:
    """Count, sum and quantiles of a stream of values (NaN skipped): exact (every value kept), or
    a t-digest (``fastdigest``, 1000 centroids, clamped to the observed range) in constant memory."""

    def __init__(self, exact: bool) -> None:
        self.count, self.total = 0, 0.0
        self.kept: list[np.ndarray] | None = [] if exact else None
        if not exact:
            from fastdigest import TDigest

            self.digest = TDigest()

    def add(self, values: np.ndarray) -> None:
        v = values[np.isfinite(values)]
        self.count += v.size
        self.total += float(np.sum(v))
        if self.kept is not None:
            self.kept.append(v)
        elif v.size:
            self.digest.batch_update(v)

    def quantile(self, q: float) -> float:
        if not self.count:
            return np.nan
        if self.kept is not None:
            self.kept = [np.concatenate(self.kept)]
            return float(np.quantile(self.kept[0], q))
        d = self.digest
        return float(min(max(d.quantile(q), d.min()), d.max()))


class _Totals:
    """Summary figures (:meth:`SimResult.summary`) accumulated chunk by chunk.

    TTFT, TPOT, wait, path and hit figures are over requests arriving in [start_s, end_s) (None:
    unbounded); completions (last token) and offered arrivals over [lo_s, hi_s), time-series rows
    with time in (lo_s, hi_s]. Means are sums over counts; percentiles exact or from a t-digest."""

    def __init__(self, lo_s: float, hi_s: float, start_s: float | None = None, end_s: float | None = None,
                 ttft_slo_s: float | None = None, tpot_slo_s: float | None = None, exact: bool = True) -> None:
        self.lo_s, self.hi_s, self.start_s, self.end_s = lo_s, hi_s, start_s, end_s
        self.ttft_slo_s, self.tpot_slo_s = ttft_slo_s, tpot_slo_s
        self.ttft, self.tpot = _Quantiles(exact), _Quantiles(exact)
        self.n = self.completed = self.offered = self.remote = self.slo_ok = self.hit_requests = 0
        self.hit_tokens = self.input_tokens = 0
        self.wait_s = self.transfer_s = 0.0
        self.wait_count = 0
        self.ts_rows, self.egress_gbps, self.utilisation = 0, 0.0, 0.0
        self.remote_queue_max = self.local_queue_max = 0

    def add(self, kind: str, frame: pd.DataFrame) -> None:
        (self._requests if kind == "requests" else self._timeseries)(frame)

    def _requests(self, r: pd.DataFrame) -> None:
        arrival, end = r.arrival_s.to_numpy(), r.end_s.to_numpy()
        self.completed += int(((end >= self.lo_s) & (end < self.hi_s)).sum())
        self.offered += int(((arrival >= self.lo_s) & (arrival < self.hi_s)).sum())
        keep = np.ones(len(r), dtype=bool)
        if self.start_s is not None:
            keep &= arrival >= self.start_s
        if self.end_s is not None:
            keep &= arrival < self.end_s
        w = r if keep.all() else r[keep]
        ttft, tpot = w.ttft_s.to_numpy(), w.tpot_s.to_numpy()
        remote = (w.path == "prfaas").to_numpy()
        wait = w.wait_s.to_numpy()
        self.n += len(w)
        self.remote += int(remote.sum())
        self.ttft.add(ttft)
        self.tpot.add(tpot)
        self.wait_s += float(np.sum(wait[np.isfinite(wait)]))
        self.wait_count += int(np.isfinite(wait).sum())
        self.transfer_s += float(np.sum(w.transfer_s.to_numpy()[remote]))
        if self.ttft_slo_s is not None:
            ok = ttft <= self.ttft_slo_s
            if self.tpot_slo_s is not None:
                ok &= tpot <= self.tpot_slo_s + 1e-12
            self.slo_ok += int(ok.sum())
        hit = w.hit_tokens.to_numpy()
        self.hit_tokens += int(hit.sum())
        self.input_tokens += int(w.input_tokens.to_numpy().sum())
        self.hit_requests += int((hit > 0).sum())

    def _timeseries(self, ts: pd.DataFrame) -> None:
        if not len(ts):
            return
        tw = ts[(ts.time_s > self.lo_s) & (ts.time_s <= self.hi_s)]
        if len(tw):
            self.ts_rows += len(tw)
            self.egress_gbps += float(np.sum(tw.egress_gbps.to_numpy()))
            self.utilisation += float(np.sum(tw.link_utilisation.to_numpy()))
            self.remote_queue_max = max(self.remote_queue_max, int(tw.remote_queue.max()))
            self.local_queue_max = max(self.local_queue_max, int(tw.local_queue.max()))

    def figures(self) -> dict:
        n, span = self.n, self.hi_s - self.lo_s
        ttft = self.ttft
        out = {
            "requests": n, "completed": self.completed,
            "throughput_rps": self.completed / span if span > 0 else np.nan,
            "offered_rps": self.offered / span if span > 0 else np.nan,
            "unfinished": n - ttft.count,
            "offload_fraction": self.remote / n if n else np.nan,
            "ttft_mean_s": ttft.total / ttft.count if ttft.count else np.nan,
            "ttft_p50_s": ttft.quantile(0.5), "ttft_p90_s": ttft.quantile(0.9), "ttft_p99_s": ttft.quantile(0.99),
            "tpot_mean_s": self.tpot.total / self.tpot.count if self.tpot.count else np.nan,
            "tpot_p90_s": self.tpot.quantile(0.9),
            "wait_mean_s": self.wait_s / self.wait_count if self.wait_count else np.nan,
            "transfer_mean_s": self.transfer_s / self.remote if self.remote else 0.0,
        }
        if self.ttft_slo_s is not None:
            out["slo_attainment"] = self.slo_ok / n if n else np.nan
        if self.ts_rows:
            out["egress_gbps_mean"] = self.egress_gbps / self.ts_rows
            out["link_utilisation_mean"] = self.utilisation / self.ts_rows
            out["remote_queue_max"] = self.remote_queue_max
            out["local_queue_max"] = self.local_queue_max
        if n and self.input_tokens > 0:
            out["token_hit_rate"] = self.hit_tokens / self.input_tokens
            out["request_hit_rate"] = self.hit_requests / n
        return out


class _Sink:
    """Where a run's records go, in order, a chunk at a time: requests (in arrival order) and
    time-series rows. Kept in memory, or (``totals`` given) only folded into those running totals;
    appended to a parquet file per kind where ``paths`` name one."""

    def __init__(self, totals: _Totals | None = None, paths: dict[str, Path] | None = None) -> None:
        self.totals, self.paths = totals, paths or {}
        self.kept: dict[str, list[pd.DataFrame]] | None = {"requests": [], "timeseries": []} if totals is None else None
        self.writers: dict = {}
        self.ticks: list[tuple] = []
        self.tokens = np.zeros((len(PATH_NAMES), 2), dtype=np.int64)  # per path: hit, input tokens

    def add(self, kind: str, frame: pd.DataFrame) -> None:
        if kind in self.paths:
            self._write(kind, frame)
        if kind == "requests":
            codes = frame.path.cat.codes.to_numpy()
            for code in range(len(PATH_NAMES)):
                on = codes == code
                self.tokens[code] += (frame.hit_tokens.to_numpy()[on].sum(), frame.input_tokens.to_numpy()[on].sum())
        if self.kept is not None:
            self.kept[kind].append(frame)
        else:
            self.totals.add(kind, frame)

    def tick(self, row: tuple) -> None:
        """One time-series row (columns TIMESERIES_COLUMNS)."""
        self.ticks.append(row)
        if len(self.ticks) >= TIMESERIES_CHUNK_ROWS:
            self._flush_ticks()

    def _flush_ticks(self) -> None:
        if self.ticks:
            self.add("timeseries", pd.DataFrame.from_records(self.ticks, columns=TIMESERIES_COLUMNS))
            self.ticks = []

    def _write(self, kind: str, frame: pd.DataFrame) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        writer = self.writers.get(kind)
        table = pa.Table.from_pandas(frame, preserve_index=False, schema=writer.schema if writer else None)
        if writer is None:  # dictionary-encode the path only: trying it on floats costs 2/3 of the time
            writer = self.writers[kind] = pq.ParquetWriter(self.paths[kind], table.schema,
                                                           use_dictionary=[c for c in table.schema.names if c == "path"])
        writer.write_table(table)

    def close(self) -> tuple[pd.DataFrame, pd.DataFrame] | None:
        """Finish the files; the (requests, timeseries) frames when kept in memory, else None."""
        self._flush_ticks()
        frames = None
        if self.kept is not None:
            ts = self.kept["timeseries"]
            frames = (pd.concat(self.kept["requests"], ignore_index=True),
                      pd.concat(ts, ignore_index=True) if ts else pd.DataFrame.from_records([], columns=TIMESERIES_COLUMNS))
        if "timeseries" in self.paths and "timeseries" not in self.writers:  # a run shorter than one period
            pd.DataFrame.from_records([], columns=TIMESERIES_COLUMNS).to_parquet(self.paths["timeseries"], index=False)
        self.abort()
        return frames

    def abort(self) -> None:
        """Close the files (a failed run's staged files are removed by their folder)."""
        for writer in self.writers.values():
            writer.close()
        self.writers = {}


# ----------------------------------------------------------------------------------------------
# Results
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SimResult:
    """The outcome of one run.

    requests: one row per request (arrival order): arrival_s, path (``prfaas`` or ``pd_p``),
        input_tokens, hit_tokens, uncached_tokens, route_tokens, output_tokens, wait_s (prefill
        queue), prefill_s, transfer_s (KV transfer not hidden by pipelining, plus rtt/2),
        decode_wait_s, ttft_s, tpot_s, end_s (last token). NaN where a request never finished.
    timeseries: one row per ``policy.period_s``: time_s, egress_gbps, link_utilisation,
        link_capacity_gbps, active_transfers, remote_queue, local_queue, decode_queue, decode_busy
        (slots in use), decode_slots, threshold_tokens (effective t), n_pd_p, n_pd_d.

    A run small enough (see :func:`simulate`'s ``max_rows_in_memory``) holds both in ``frames``.
    A larger one holds ``totals``, its whole-run :meth:`summary` (percentiles from a t-digest);
    its ``requests`` and ``timeseries`` are read back from ``out_dir`` when the run wrote them there.
    """

    policy: Policy
    duration_s: float
    ttft_slo_s: float | None = None
    ttft_quantile: float = 0.9
    tpot_slo_s: float | None = None
    cache: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    frames: tuple[pd.DataFrame, pd.DataFrame] | None = None  # (requests, timeseries), kept in memory
    totals: dict | None = None  # whole-run summary figures of a run that did not keep its records
    out_dir: Path | None = None  # where the run wrote requests.parquet and timeseries.parquet

    @property
    def requests(self) -> pd.DataFrame:
        return self._frame(0, "requests")

    @property
    def timeseries(self) -> pd.DataFrame:
        return self._frame(1, "timeseries")

    def _frame(self, index: int, kind: str) -> pd.DataFrame:
        if self.frames is not None:
            return self.frames[index]
        return pd.read_parquet(self._file(kind))

    def _file(self, kind: str) -> Path:
        if self.out_dir is None:
            raise InvalidInput(f"simulate: this run ({(self.totals or {}).get('requests', 0):,} requests) kept only its "
                            f"totals; pass out_dir= (CLI: --out) to keep its {kind} on disk, or raise max_rows_in_memory")
        return self.out_dir / f"{kind}.parquet"

    def _chunks(self, kind: str) -> Iterator[pd.DataFrame]:
        """The records of ``kind`` (requests, timeseries): the frame in memory, or the file read
        back a chunk at a time."""
        if self.frames is not None:
            yield self.frames[0 if kind == "requests" else 1]
            return
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(self._file(kind)).iter_batches(batch_size=CHUNK_REQUESTS):
            yield batch.to_pandas()

    def window(self, start_s: float | None = None, end_s: float | None = None) -> pd.DataFrame:
        """Requests that arrived in [start_s, end_s) (no bound where None)."""
        r = self.requests
        keep = np.ones(len(r), dtype=bool)
        if start_s is not None:
            keep &= r.arrival_s.to_numpy() >= start_s
        if end_s is not None:
            keep &= r.arrival_s.to_numpy() < end_s
        return r[keep]

    def summary(self, start_s: float | None = None, end_s: float | None = None) -> dict:
        """Figures over requests that arrived in [start_s, end_s) (default: all requests).

        throughput_rps: requests completing (last token) in [start_s, end_s) per second (default
        window: from 0 to ``duration_s``); completed: their count. TTFT and TPOT statistics are
        over requests arriving in the window;
        slo_attainment (when a TTFT SLO is set) is the fraction with TTFT within it (and TPOT
        within the TPOT SLO). A run that kept only totals gives its whole-run figures (percentiles
        from a t-digest), and for a window reads its records back from ``out_dir`` a chunk at a time.
        """
        if self.totals is not None and start_s is None and end_s is None:
            out = dict(self.totals)
        else:
            lo = 0.0 if start_s is None else float(start_s)
            hi = self.duration_s if end_s is None else float(end_s)
            totals = _Totals(lo, hi, start_s, end_s, self.ttft_slo_s, self.tpot_slo_s, exact=True)
            for kind in ("requests", "timeseries"):
                for frame in self._chunks(kind):
                    totals.add(kind, frame)
            out = totals.figures()
        out.update(self.cache)
        return out

    def summary_frame(self, **kw) -> pd.DataFrame:
        """:meth:`summary` as a two-column DataFrame (metric, value); counts stay integers (the
        value column holds Python ints and floats, dtype object)."""
        summary = self.summary(**kw)
        return pd.DataFrame({"metric": list(summary), "value": pd.Series(list(summary.values()), dtype=object)})

    def __repr__(self) -> str:
        s = self.summary()
        return (f"SimResult({self.policy.name} policy, {self.duration_s:,.0f} s of arrivals: {s['requests']:,} requests, "
                f"{s['throughput_rps']:.3f} req/s, P90 TTFT {s['ttft_p90_s']:.3f} s, egress {s['egress_gbps_mean']:.2f} Gbps)")

    def _repr_html_(self) -> str:
        from prfaas_plan.display import html_table

        units = {"_gbps": "Gbps", "_rps": "req/s", "utilisation": "fraction", "fraction": "fraction",
                 "_rate": "fraction", "_blocks": "blocks", "_s": "s"}  # the unit each metric name carries
        rows = [(k, v, next((u for part, u in units.items() if part in k), "requests"))
                for k, v in self.summary().items()]
        return html_table(f"Simulation: {self.policy.name} policy, {self.duration_s:,.0f} s of arrivals", rows)


OUTPUT_FILES = ("requests.parquet", "timeseries.parquet", "summary.json", "manifest.json")  # in writing order
_WRITER = "prfaas-plan simulate"


def _previous_outputs(folder: Path) -> set[str]:
    """The output files a previous run wrote into ``folder``: those its manifest.json lists."""
    try:
        doc = json.loads((folder / "manifest.json").read_text())
    except (OSError, ValueError):
        return set()
    if not isinstance(doc, dict) or doc.get("written_by") != _WRITER:
        return set()
    return set(OUTPUT_FILES) & {str(name) for name in doc.get("files", ())}


def check_out_dir(out_dir: str | Path) -> Path:
    """Fail early (before a run) when ``out_dir`` cannot take a run's outputs: it must be a folder,
    or not exist yet inside an existing folder, and any file there named like an output
    (:data:`OUTPUT_FILES`) must be a previous run's, listed in its manifest.json."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InvalidInput(f"--out: {shown(out)} is a file; give a folder (it is created if missing)")
    if not out.exists():
        if out.parent.is_file():
            raise InvalidInput(f"--out: {shown(out.parent)} is a file, so no folder can be made in it; choose another folder")
        if not out.parent.is_dir():
            raise InvalidInput(f"--out: folder {shown(out.parent)} does not exist; create it or choose another folder")
        folder = out.parent
    else:
        folder, ours = out, _previous_outputs(out)
        for name in OUTPUT_FILES:
            if (out / name).exists() and name not in ours:
                raise InvalidInput(f"--out: {shown(out / name)} was not written by {_WRITER} (no manifest.json of ours lists it); "
                                "move it away or choose another folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InvalidInput(f"--out: cannot write to folder {shown(folder)} (permission denied)")
    return out


@contextmanager
def _output_folder(out_dir: str | Path) -> Iterator[Callable[[str], Path]]:
    """Stage a run's outputs in ``out_dir`` (see :func:`write_outputs`); yields ``stage(name)``.
    The manifest is staged last; a folder created here is removed again when the block fails."""
    out = check_out_dir(out_dir)
    created = not out.exists()
    try:
        out.mkdir(exist_ok=True)
    except OSError as exc:
        raise InvalidInput(f"--out: cannot create folder {shown(out)} ({exc.strerror or exc})") from None
    try:
        with staged_files(out, what=f"--out: {shown(out)}") as stage:
            yield stage
            manifest = {"written_by": _WRITER, "files": list(OUTPUT_FILES)}
            stage("manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
            check_out_dir(out)  # still nothing of anyone else's under our names
    except BaseException:
        if created:
            with suppress(OSError):
                out.rmdir()  # empty: the staged files are gone
        raise


def _stage_summary(result: SimResult, stage: Callable[[str], Path]) -> None:
    summary = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in result.summary().items()}
    summary["policy"] = result.policy.name
    summary["duration_s"] = result.duration_s
    summary.update({f"info_{k}": v for k, v in result.info.items() if isinstance(v, (int, float, str))})
    stage("summary.json").write_text(json.dumps(summary, indent=2) + "\n")


def write_outputs(result: SimResult, out_dir: str | Path) -> Path:
    """Write a run's requests.parquet, timeseries.parquet, summary.json and manifest.json (the
    list of the files written) into ``out_dir``, created if missing, all or none: each is staged
    beside its final name and renamed over it once all are written, so a failure leaves the
    folder as it was. Other files in the folder are never touched; a file of one of those names
    that no manifest.json of ours lists is never overwritten (PlanError instead). A run that
    streamed into ``out_dir`` (``simulate(..., out_dir=)``) is already there."""
    out = Path(out_dir)
    if result.out_dir is not None and out.resolve() == result.out_dir.resolve():
        return out
    with _output_folder(out) as stage:
        result.requests.to_parquet(stage("requests.parquet"), index=False)
        result.timeseries.to_parquet(stage("timeseries.parquet"), index=False)
        _stage_summary(result, stage)
    return out


# ----------------------------------------------------------------------------------------------
# The entry point
# ----------------------------------------------------------------------------------------------


def _as_trace(trace) -> pd.DataFrame:
    from prfaas_plan.workload import load_trace

    if isinstance(trace, pd.DataFrame):
        for col in ("arrival_s", "input_tokens", "output_tokens"):
            if col not in trace.columns:
                raise InvalidInput(f"trace: no {col!r} column; load traces with load_trace()")
        return trace.sort_values("arrival_s", kind="stable").reset_index(drop=True)
    return load_trace(trace)


def _arrivals(setup: _Setup, sc, res, rate_rps, load, duration_s, trace, rate_scale, arrivals, rng) -> _Source:
    chunk = CHUNK_REQUESTS
    if trace is None and rate_rps is None and load is None and arrivals is None and sc.spec.workload.kind == "trace":
        from prfaas_plan.scenario import resolve_trace

        trace = resolve_trace(sc, sc.spec.workload.trace)
    if trace is not None:
        if rate_rps is not None or load is not None or arrivals is not None:
            raise InvalidInput("trace: a trace brings its own arrivals; scale them with rate_scale instead of rate_rps/load")
        tr = _as_trace(trace)
        t = tr["arrival_s"].to_numpy(dtype=float)
        t = (t - (t.min() if len(t) else 0.0)) / rate_scale
        keep = np.ones(len(t), bool) if duration_s is None else t < duration_s
        if not keep.any():
            raise InvalidInput("--duration: no trace request arrives within it; lengthen it")
        hashes = None
        if "hash_ids" in tr.columns:
            hashes = [list(h) for h in tr["hash_ids"][keep]]
        horizon = float(duration_s) if duration_s is not None else float(t[keep].max())
        arr = _Arrivals(t[keep], tr["input_tokens"].to_numpy(dtype=np.int64)[keep],
                        tr["output_tokens"].to_numpy(dtype=np.int64)[keep], hashes)
        return _chunked(arr, horizon, rng, chunk)
    duration = DEFAULT_SIM_DURATION_S if duration_s is None else float(duration_s)
    if not (math.isfinite(duration) and duration > 0):
        raise InvalidInput(f"--duration: {duration_s!r} must be a positive number of seconds")
    if isinstance(arrivals, Bursty):
        if rate_rps is not None or load is not None:
            raise InvalidInput("arrivals: a Bursty process sets its own rates; drop rate_rps/load")
        bursty = arrivals
        return _synthetic(setup, lambda g, c: _bursty_chunks(bursty, duration, g, c), duration, rng, chunk)
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
    _check_expected_requests(rate, duration)
    return _synthetic(setup, lambda g, c: _poisson_chunks(rate, 0.0, duration, g, c), duration, rng, chunk)


def _check_expected_requests(rate_rps: float, duration_s: float) -> None:
    """Refuse a run of more than MAX_SIM_REQUESTS expected arrivals (hours of work: a typo)."""
    if rate_rps * duration_s > MAX_SIM_REQUESTS:
        raise InvalidInput(f"--duration/--rate-scale: {duration_s:,.3g} s at {rate_rps:,.3g} req/s is "
                        f"{rate_rps * duration_s:,.3g} requests, more than the {MAX_SIM_REQUESTS:,} one run "
                        "simulates; shorten --duration")


def _run(setup: _Setup, arr: _Arrivals | _Source, policy: Policy, link_events, horizon_s: float,
         rng: np.random.Generator, progress=None, sink: _Sink | None = None) -> _Engine:
    """Run the engine on in-memory arrivals (route_u drawn from ``rng``) or a source; with no sink,
    every record is kept in memory (``eng.frames``)."""
    source = arr if isinstance(arr, _Source) else _chunked(arr, horizon_s, rng, CHUNK_REQUESTS)
    sink = _Sink() if sink is None else sink
    eng = _Engine(setup, source, policy, link_events, sink, progress)
    try:
        eng.run()
        eng.frames = sink.close()
    finally:
        sink.abort()
    return eng


def _result(eng: _Engine, setup: _Setup, policy: Policy, ttft_quantile: float = 0.9, info: dict | None = None,
            out_dir: Path | None = None) -> SimResult:
    sink = eng.sink
    cache = {}
    if eng.caching:
        for name, code in (("local", 0), ("remote", 1)):
            hit, tot = sink.tokens[code]
            cache[f"{name}_token_hit_rate"] = float(hit / tot) if tot else 0.0
        cache["local_evicted_blocks"] = eng.local_cache.evicted_blocks
        cache["remote_evicted_blocks"] = eng.remote_cache.evicted_blocks
    base_info = {"events": eng.events_handled, "role_changes": len(eng.roles_log)}
    base_info.update(info or {})
    totals = None if sink.totals is None else sink.totals.figures()
    return SimResult(policy, eng.horizon_s, setup.ttft_slo_s, ttft_quantile, setup.tpot_slo_s, cache, base_info,
                     eng.frames, totals, out_dir)


def simulate(sc, res=None, *, rate_rps: float | None = None, load: float | None = None,
             duration_s: float | None = DEFAULT_SIM_DURATION_S, trace=None, rate_scale: float = 1.0,
             policy: str | Policy = "fixed", link_events: Sequence[LinkEvent] = (), seed: int = 0,
             progress: Callable[[float], None] | None = None, arrivals: str | Bursty | None = None,
             out_dir: str | Path | None = None, max_rows_in_memory: int = MAX_ROWS_IN_MEMORY) -> SimResult:
    """Simulate a scenario's PrfaaS-PD plan.

    sc: a :class:`scenario.Scenario`; res: its :class:`planner.PlanResult` (default ``plan(sc)``).
    rate_rps / load: Poisson arrivals at this rate, or at ``load`` x ``res.lambda_max_rps``
        (default: the scenario's ``load``); lengths from the scenario's length distribution.
    arrivals: ``"poisson"`` (default) or a :class:`Bursty` Markov-modulated process.
    trace: a trace file (see :func:`workload.load_trace`) or DataFrame to replay; timestamps are
        divided by ``rate_scale``. A trace-workload scenario replays its own trace when no rate,
        load or trace is given. Mooncake ``hash_ids`` drive the per-cluster prefix caches
        (``workload.prefix_cache_blocks`` blocks each; 0 = off, None = unlimited).
    rate_scale: multiplies the arrival rate: trace timestamps are divided by it, a Poisson rate
        multiplied (a Bursty process sets its own rates).
    duration_s: arrivals during [0, duration_s) (synthetic: default 600 s; a trace: the requests
        arriving before it, or the whole trace when None). Requests still in the system at the end
        run to completion.
    policy: ``fixed``, ``short``, ``dual`` or a :class:`Policy`.
    link_events: (start_s, end_s, gbps) windows of a different nominal link rate (see
        :func:`parse_link_drop`, :func:`read_link_trace`); usable = gbps x link efficiency.
    seed: all random draws (arrivals, lengths, partial-bucket routing) come from it.
    progress: called with the fraction of arrivals processed (0..1).
    out_dir: a folder (created if missing) to stream the per-request records (requests.parquet)
        and the time series (timeseries.parquet) into as the run goes, then summary.json and
        manifest.json; all appear together when the run ends, and a failed run leaves the folder
        as it was (see :func:`write_outputs`: other files there are never touched).
    max_rows_in_memory: a run with at most this many requests and time-series rows keeps them in
        memory (``requests``, ``timeseries``; exact percentiles). A larger one keeps only running
        totals, with percentiles from a t-digest (relative error ~1e-4 at P90 over a million
        requests), so its memory does not grow with its length; its records are on disk when
        ``out_dir`` is given. The arrival draws, and so every request's record, are the same
        either way.
    """
    from prfaas_plan.planner import plan as make_plan

    pol = Policy(name=policy) if isinstance(policy, str) else policy
    if not isinstance(pol, Policy):
        raise InvalidInput(f"policy: {policy!r} must be one of {', '.join(POLICIES)} or a Policy")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InvalidInput(f"--seed: {seed!r} must be a whole number >= 0")
    if not (isinstance(rate_scale, (int, float)) and math.isfinite(rate_scale) and rate_scale > 0):
        raise InvalidInput(f"--rate-scale: {rate_scale!r} must be a positive factor")
    if isinstance(max_rows_in_memory, bool) or not isinstance(max_rows_in_memory, (int, np.integer)) or max_rows_in_memory < 0:
        raise InvalidInput(f"max_rows_in_memory: {max_rows_in_memory!r} must be a whole number >= 0")
    events = _check_link_events(link_events)
    res = make_plan(sc) if res is None else res
    setup = _Setup.from_plan(res, sc)
    info = {"lambda_max_rps": res.lambda_max_rps, "threshold_tokens": res.threshold_tokens or np.nan,
            "n_prfaas": setup.n_prfaas, "n_pd_p": setup.n_pd_p, "n_pd_d": setup.n_pd_d, "seed": int(seed)}

    def run(paths: dict[str, Path] | None, out: Path | None) -> SimResult:
        rng = np.random.default_rng(int(seed))
        source = _arrivals(setup, sc, res, rate_rps, load, duration_s, trace, rate_scale, arrivals, rng)
        small = max(source.n, source.horizon_s / pol.period_s) <= max_rows_in_memory
        totals = None if small else _Totals(0.0, source.horizon_s, ttft_slo_s=setup.ttft_slo_s,
                                            tpot_slo_s=setup.tpot_slo_s, exact=False)
        eng = _run(setup, source, pol, events, source.horizon_s, rng, progress, _Sink(totals, paths))
        return _result(eng, setup, pol, sc.spec.slo.ttft_quantile, info, out)

    if out_dir is None:
        return run(None, None)
    with _output_folder(out_dir) as stage:
        result = run({kind: stage(f"{kind}.parquet") for kind in ("requests", "timeseries")}, Path(out_dir).resolve())
        _stage_summary(result, stage)
    return result
