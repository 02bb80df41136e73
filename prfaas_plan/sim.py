"""Discrete-event simulation of a PrfaaS-PD deployment (DESIGN section 6).

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
  not kept (DESIGN section 1), so each cluster caches only what it prefilled.
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

Everything is deterministic for a seed: all random draws are made up front with numpy, and the
event loop (``heapq``, plain Python) breaks ties by event kind and request id.

Units: seconds (``_s``), requests per second (``_rps``), tokens (``_tokens``), Gbps = 1e9 bit/s.
"""

from __future__ import annotations

import heapq
import json
import math
import os
import shutil
import uuid
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import PlanError
from .units import BITS_PER_BYTE, GBPS_BITS_PER_S
from .workload import MOONCAKE_BLOCK_TOKENS, LRUPrefixCache

__all__ = [
    "Policy",
    "Bursty",
    "SimResult",
    "simulate",
    "parse_link_drop",
    "read_link_trace",
    "write_outputs",
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
            raise PlanError(f"--policy: {self.name!r} is not a policy; use one of {', '.join(POLICIES)}")
        for key in ("period_s", "smooth_s", "rebalance_period_s", "max_factor", "raise_factor", "high", "rebalance_high",
                    "rebalance_imbalance"):
            value = getattr(self, key)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise PlanError(f"policy.{key}: {value!r} must be a positive number")
        if not 0 <= self.low <= self.high:
            raise PlanError(f"policy.low: {self.low!r} must lie between 0 and policy.high ({self.high})")
        if not self.local_queue_high >= 0:
            raise PlanError(f"policy.local_queue_high: {self.local_queue_high!r} must be >= 0")
        if not 0 <= self.queue_low <= self.queue_high:
            raise PlanError(f"policy.queue_low: {self.queue_low!r} must lie between 0 and queue_high ({self.queue_high})")
        if self.cache_aware not in CACHE_AWARE:
            raise PlanError(f"policy.cache_aware: {self.cache_aware!r} must be one of {', '.join(CACHE_AWARE)}")
        if self.raise_factor <= 1 or self.max_factor < 1:
            raise PlanError("policy.raise_factor must exceed 1 and policy.max_factor must be at least 1")

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
                raise PlanError(f"bursty.{key}: {value!r} must be a finite rate >= 0 requests/s")
        for key in ("mean_on_s", "mean_off_s"):
            value = getattr(self, key)
            if not (math.isfinite(value) and value > 0):
                raise PlanError(f"bursty.{key}: {value!r} must be a positive number of seconds")
        if self.mean_rps <= 0:
            raise PlanError("bursty: both rates are 0; give a positive on_rps")

    @property
    def mean_rps(self) -> float:
        return (self.on_rps * self.mean_on_s + self.off_rps * self.mean_off_s) / (self.mean_on_s + self.mean_off_s)


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
            raise PlanError(f"--link-drop: {part!r} is not FROM:TO@START-END (e.g. 100:20@600-1200, Gbps and seconds)") from None
        events.append((start, end, after))
    if not events:
        raise PlanError("--link-drop: give FROM:TO@START-END, e.g. 100:20@600-1200")
    return _check_link_events(events, "--link-drop")


def read_link_trace(path: str | Path) -> list[LinkEvent]:
    """Read a link-capacity trace: CSV with columns ``time_s,gbps`` (nominal Gbps from that time on,
    until the next row; the last row holds forever). Returns link events."""
    file_path = Path(path)
    if not file_path.is_file():
        raise PlanError(f"--link-trace: {file_path} not found; give a CSV with columns time_s,gbps")
    try:
        frame = pd.read_csv(file_path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
        raise PlanError(f"--link-trace: {file_path} is not a readable CSV with columns time_s,gbps") from None
    for col in ("time_s", "gbps"):
        if col not in frame.columns:
            raise PlanError(f"--link-trace: {file_path} has no column {col!r} (it has {', '.join(map(str, frame.columns))}); "
                            "give columns time_s,gbps")
    times = pd.to_numeric(frame["time_s"], errors="coerce").to_numpy(dtype=float)
    rates = pd.to_numeric(frame["gbps"], errors="coerce").to_numpy(dtype=float)
    if len(times) == 0 or not (np.all(np.isfinite(times)) and np.all(np.isfinite(rates))):
        raise PlanError(f"--link-trace: {file_path}: every row needs numeric time_s and gbps")
    if np.any(np.diff(times) <= 0):
        raise PlanError(f"--link-trace: {file_path}: time_s must be strictly increasing")
    ends = np.append(times[1:], math.inf)
    return _check_link_events(list(zip(times.tolist(), ends.tolist(), rates.tolist())), "--link-trace")


def _check_link_events(events: Sequence[LinkEvent], field_name: str = "link_events") -> list[LinkEvent]:
    out = []
    for ev in events:
        try:
            start, end, gbps = (float(x) for x in ev)
        except (TypeError, ValueError):
            raise PlanError(f"{field_name}: {ev!r} is not (start_s, end_s, gbps)") from None
        if not (math.isfinite(start) and start >= 0 and end > start):
            raise PlanError(f"{field_name}: window {start:g}-{end:g} s must start at >= 0 s and end after it starts")
        if not (math.isfinite(gbps) and gbps > 0):
            raise PlanError(f"{field_name}: {gbps!r} Gbps must be a positive rate (model an outage with a small one, "
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
    def threshold(cls, t_tokens: float) -> "_Routing":
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
            raise PlanError("simulate: the plan has no decode instance (or BS_max is 0); nothing can decode")
        if self.n_prfaas + self.n_pd_p < 1:
            raise PlanError("simulate: the plan has no prefill instance")

    @classmethod
    def from_plan(cls, res, sc=None, plan=None) -> "_Setup":
        """The plan's pools, routing and time functions; the prefix-cache size and SLOs come from
        ``sc`` (default: the plan's own scenario), so one plan can be simulated with caching on
        and off."""
        from .planner import offload_fractions

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
    """Requests in arrival order (numpy arrays; hash_ids a list of lists or None)."""

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    hash_ids: list | None = None


def _poisson_times(rate_rps: float, start_s: float, end_s: float, rng: np.random.Generator) -> np.ndarray:
    if rate_rps <= 0 or end_s <= start_s:
        return np.empty(0)
    mean_n = rate_rps * (end_s - start_s)
    chunks, t = [], start_s
    while t < end_s:
        gaps = rng.exponential(1.0 / rate_rps, size=int(mean_n + 6 * math.sqrt(mean_n) + 16))
        times = t + np.cumsum(gaps)
        chunks.append(times)
        t = float(times[-1])
    times = np.concatenate(chunks)
    return times[times < end_s]


def _bursty_times(b: Bursty, duration_s: float, rng: np.random.Generator) -> np.ndarray:
    on = rng.random() < b.mean_on_s / (b.mean_on_s + b.mean_off_s)
    t, chunks = 0.0, []
    while t < duration_s:
        stay = rng.exponential(b.mean_on_s if on else b.mean_off_s)
        end = min(t + stay, duration_s)
        chunks.append(_poisson_times(b.on_rps if on else b.off_rps, t, end, rng))
        t, on = end, not on
    return np.concatenate(chunks) if chunks else np.empty(0)


# ----------------------------------------------------------------------------------------------
# The engine
# ----------------------------------------------------------------------------------------------


class _Engine:
    """One simulation run. Call :meth:`run` once; read the result arrays afterwards."""

    def __init__(self, setup: _Setup, arrivals: _Arrivals, policy: Policy, link_events: Sequence[LinkEvent],
                 horizon_s: float, route_u: np.ndarray, progress: Callable[[float], None] | None = None) -> None:
        self.s = setup
        self.a = arrivals
        self.policy = policy
        self.horizon_s = horizon_s
        self.route_u = route_u
        self.progress = progress
        self.schedule = _capacity_schedule(link_events, setup.link_bits_per_s, setup.link_efficiency)
        n = len(arrivals.arrival_s)
        self.n = n
        # per-request results
        self.path = np.zeros(n, dtype=np.int8)
        self.hit_tokens = np.zeros(n, dtype=np.int64)
        self.uncached = np.zeros(n, dtype=np.int64)
        self.route_tokens = np.zeros(n, dtype=np.int64)
        self.wait = np.full(n, np.nan)
        self.prefill = np.full(n, np.nan)
        self.transfer = np.zeros(n)
        self.decode_wait = np.full(n, np.nan)
        self.ttft = np.full(n, np.nan)
        self.end = np.full(n, np.nan)
        self.ts_rows: list[tuple] = []  # one per tick, columns TIMESERIES_COLUMNS
        self.events_handled = 0
        self.roles_log: list[tuple[float, int, int]] = []

    # -- the prefill / transfer tables ---------------------------------------------------------
    def _tables(self):
        """Per-request service times and shipped bits when lengths are known up front (no
        caching), else lookup tables indexed by uncached tokens."""
        s, a = self.s, self.a
        if self.caching:
            top = int(max(a.input_tokens.max(), 1))
            grid = np.arange(1, top + 1, dtype=float)
            pad = lambda v: [0.0] + np.asarray(v, dtype=float).tolist()  # noqa: E731
            return True, pad(s.t_remote(grid)), pad(s.t_local(grid)), pad(BITS_PER_BYTE * s.kv_bytes(grid))
        l = a.input_tokens.astype(float)
        return (False, np.asarray(s.t_remote(l), float).tolist(), np.asarray(s.t_local(l), float).tolist(),
                (BITS_PER_BYTE * np.asarray(s.kv_bytes(l), float)).tolist())

    def run(self) -> None:  # noqa: C901 - one loop, kept in one place for speed and readability
        s, a, pol = self.s, self.a, self.policy
        n = self.n
        self.local_cache = LRUPrefixCache(s.cache_blocks)
        remote_blocks = s.cache_blocks if s.remote_cache_blocks is None else s.remote_cache_blocks
        self.remote_cache = LRUPrefixCache(remote_blocks)
        self.caching = a.hash_ids is not None and (self.local_cache.enabled or self.remote_cache.enabled)
        by_tokens, t_rem, t_loc, bits = self._tables()

        arrival = a.arrival_s.tolist()
        inp_tok = a.input_tokens.tolist()
        out_tok = a.output_tokens.tolist()
        hash_ids = a.hash_ids
        u = self.route_u.tolist()
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
        route_tokens, path, hit_arr, uncached_arr = self.route_tokens, self.path, self.hit_tokens, self.uncached
        wait, prefill, transfer, dwait, ttft, end = (self.wait, self.prefill, self.transfer, self.decode_wait,
                                                     self.ttft, self.end)
        inf = math.inf
        i = 0
        next_arrival = arrival[0] if n else inf
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
            hold = (out_tok[rid] or 1) * step
            heapq.heappush(best, start + hold)
            heapq.heappush(decode_ends, start + hold)
            if start > now:
                heapq.heappush(decode_waiting, start)
            dwait[rid] = start - now
            ttft[rid] = start + step - arrival[rid]
            end[rid] = start + hold

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
                next_arrival = arrival[i] if i < n else inf
                if progress is not None and i % prog_every == 0:
                    progress(i / n)
                l_in = inp_tok[rid]
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
                        go_remote = u[rid] < self.routing.offload_probability(l_local_route, factor)
                    else:
                        go_remote = u[rid] < self.routing.offload_probability(l_route, factor)
                route_tokens[rid] = l_route
                self.recent_route_tokens.append(l_route)
                # offered work is counted at arrival, so a bottleneck upstream cannot hide demand
                self.work_decode_s += (out_tok[rid] or 1) * step
                if go_remote:
                    hit = hr
                    l = l_in - hit
                    svc = t_rem[l] if by_tokens else t_rem[rid]
                    start, done = _admit(remote_srv, remote_waiting, now, svc)
                    path[rid] = 1
                    job_bits[rid] = bits[l] if by_tokens else bits[rid]
                    push(heap, (start + svc / n_layers, _EV_JOIN, rid))
                    push(heap, (done, _EV_REMOTE_END, rid))
                    self.work_remote_s += svc
                    self.bits_routed += job_bits[rid]
                else:
                    hit = hl
                    l = l_in - hit
                    svc = t_loc[l] if by_tokens else t_loc[rid]
                    start, done = _admit(local_srv, local_waiting, now, svc)
                    push(heap, (done, _EV_LOCAL_END, rid))
                    self.work_local_s += svc
                hit_arr[rid] = hit
                uncached_arr[rid] = l
                wait[rid] = start - now
                prefill[rid] = svc
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
                    transfer[x] = ready - now
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
                        transfer[rid] = ready - pe
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
        self.ts_rows.append((
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

    The exact-mode capacity rows (DESIGN section 5) restricted to threshold policies, with
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
    """

    requests: pd.DataFrame
    timeseries: pd.DataFrame
    policy: Policy
    duration_s: float
    ttft_slo_s: float | None = None
    ttft_quantile: float = 0.9
    tpot_slo_s: float | None = None
    cache: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)

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
        within the TPOT SLO).
        """
        lo = 0.0 if start_s is None else float(start_s)
        hi = self.duration_s if end_s is None else float(end_s)
        r = self.requests
        w = self.window(start_s, end_s)
        done = int(((r.end_s >= lo) & (r.end_s < hi)).sum())
        span = hi - lo
        ttft = w.ttft_s.to_numpy()
        fin = ttft[np.isfinite(ttft)]
        pct = (lambda q: float(np.quantile(fin, q)) if fin.size else np.nan)  # noqa: E731
        out = {
            "requests": int(len(w)), "completed": done,
            "throughput_rps": done / span if span > 0 else np.nan,
            "offered_rps": int(((r.arrival_s >= lo) & (r.arrival_s < hi)).sum()) / span if span > 0 else np.nan,
            "unfinished": int(len(w) - fin.size),
            "offload_fraction": float((w.path == "prfaas").mean()) if len(w) else np.nan,
            "ttft_mean_s": float(fin.mean()) if fin.size else np.nan,
            "ttft_p50_s": pct(0.5), "ttft_p90_s": pct(0.9), "ttft_p99_s": pct(0.99),
            "tpot_mean_s": float(w.tpot_s.mean()) if len(w) else np.nan,
            "tpot_p90_s": float(w.tpot_s.quantile(0.9)) if len(w) else np.nan,
            "wait_mean_s": float(w.wait_s.mean()) if len(w) else np.nan,
            "transfer_mean_s": float(w.transfer_s[w.path == "prfaas"].mean()) if (w.path == "prfaas").any() else 0.0,
        }
        if self.ttft_slo_s is not None:
            ok = w.ttft_s <= self.ttft_slo_s
            if self.tpot_slo_s is not None:
                ok &= w.tpot_s <= self.tpot_slo_s + 1e-12
            out["slo_attainment"] = float(ok.mean()) if len(w) else np.nan
        ts = self.timeseries
        if len(ts):
            tw = ts[(ts.time_s > lo) & (ts.time_s <= hi)]
            if len(tw):
                out["egress_gbps_mean"] = float(tw.egress_gbps.mean())
                out["link_utilisation_mean"] = float(tw.link_utilisation.mean())
                out["remote_queue_max"] = int(tw.remote_queue.max())
                out["local_queue_max"] = int(tw.local_queue.max())
        if len(w) and w.input_tokens.sum() > 0:
            out["token_hit_rate"] = float(w.hit_tokens.sum() / w.input_tokens.sum())
            out["request_hit_rate"] = float((w.hit_tokens > 0).mean())
        for key, value in self.cache.items():
            out[key] = value
        return out

    def summary_frame(self, **kw) -> pd.DataFrame:
        """:meth:`summary` as a two-column DataFrame (metric, value)."""
        return pd.DataFrame([{"metric": k, "value": float(v)} for k, v in self.summary(**kw).items()])


def write_outputs(result: SimResult, out_dir: str | Path) -> Path:
    """Write requests.csv, timeseries.csv and summary.json into ``out_dir`` atomically: into a
    temporary folder beside it first, then moved into place (an existing folder is replaced), so a
    failure never leaves half-written output."""
    out = Path(out_dir).resolve()
    parent = out.parent
    if not parent.is_dir():
        raise PlanError(f"--out: folder {parent} does not exist")
    tmp = parent / f".{out.name}.tmp-{uuid.uuid4().hex[:12]}"
    try:
        tmp.mkdir()
    except OSError as exc:
        raise PlanError(f"--out: cannot write to folder {parent} ({exc.strerror or exc})") from None
    try:
        result.requests.to_csv(tmp / "requests.csv", index=False)
        result.timeseries.to_csv(tmp / "timeseries.csv", index=False)
        summary = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in result.summary().items()}
        summary["policy"] = result.policy.name
        summary["duration_s"] = result.duration_s
        summary.update({f"info_{k}": v for k, v in result.info.items() if isinstance(v, (int, float, str))})
        (tmp / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        if out.exists():
            if not out.is_dir():
                raise PlanError(f"--out: {out} exists and is not a folder")
            old = parent / f".{out.name}.old-{uuid.uuid4().hex[:12]}"
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError):
            raise PlanError(f"--out: cannot write {out} ({exc.strerror or exc})") from None
        raise
    return out


# ----------------------------------------------------------------------------------------------
# The entry point
# ----------------------------------------------------------------------------------------------


def _as_trace(trace) -> pd.DataFrame:
    from .workload import load_trace

    if isinstance(trace, pd.DataFrame):
        for col in ("arrival_s", "input_tokens", "output_tokens"):
            if col not in trace.columns:
                raise PlanError(f"trace: no {col!r} column; load traces with load_trace()")
        return trace.sort_values("arrival_s", kind="stable").reset_index(drop=True)
    return load_trace(trace)


def _arrivals(setup: _Setup, sc, res, rate_rps, load, duration_s, trace, rate_scale, arrivals, rng) -> tuple[_Arrivals, float]:
    if trace is None and rate_rps is None and load is None and arrivals is None and sc.spec.workload.kind == "trace":
        from .scenario import resolve_trace

        trace = resolve_trace(sc, sc.spec.workload.trace)
    if trace is not None:
        if rate_rps is not None or load is not None or arrivals is not None:
            raise PlanError("trace: a trace brings its own arrivals; scale them with rate_scale instead of rate_rps/load")
        tr = _as_trace(trace)
        t = tr["arrival_s"].to_numpy(dtype=float)
        t = (t - (t.min() if len(t) else 0.0)) / rate_scale
        keep = np.ones(len(t), bool) if duration_s is None else t < duration_s
        if not keep.any():
            raise PlanError("--duration: no trace request arrives within it; lengthen it")
        hashes = None
        if "hash_ids" in tr.columns:
            hashes = [list(h) for h in tr["hash_ids"][keep]]
        horizon = float(duration_s) if duration_s is not None else float(t[keep].max())
        arr = _Arrivals(t[keep], tr["input_tokens"].to_numpy(dtype=np.int64)[keep],
                        tr["output_tokens"].to_numpy(dtype=np.int64)[keep], hashes)
        return arr, horizon
    duration = 600.0 if duration_s is None else float(duration_s)
    if not (math.isfinite(duration) and duration > 0):
        raise PlanError(f"--duration: {duration_s!r} must be a positive number of seconds")
    if isinstance(arrivals, Bursty):
        if rate_rps is not None or load is not None:
            raise PlanError("arrivals: a Bursty process sets its own rates; drop rate_rps/load")
        times = _bursty_times(arrivals, duration, rng)
    else:
        if arrivals not in (None, "poisson"):
            raise PlanError(f"arrivals: {arrivals!r} must be 'poisson' or a Bursty(...)")
        if rate_rps is not None and load is not None:
            raise PlanError("give either rate_rps or load, not both")
        if rate_rps is None:
            load = sc.spec.load if load is None else load
            if not (math.isfinite(load) and load > 0):
                raise PlanError(f"--load: {load!r} must be a positive fraction of the plan's maximum rate")
            rate_rps = load * res.lambda_max_rps
        if not (math.isfinite(rate_rps) and rate_rps > 0):
            raise PlanError(f"rate_rps: {rate_rps!r} must be a positive request rate")
        times = _poisson_times(float(rate_rps) * rate_scale, 0.0, duration, rng)
    m = times.size
    if m == 0:
        raise PlanError("no request arrives in the simulated time; raise the rate or the duration")
    lengths = np.asarray(setup.lengths.sample(m, rng), dtype=np.int64)
    lengths = np.maximum(lengths, 1)
    out = np.full(m, max(int(round(setup.output_tokens)), 1), dtype=np.int64)
    return _Arrivals(times, lengths, out, None), duration


def _run(setup: _Setup, arr: _Arrivals, policy: Policy, link_events, horizon_s: float, rng: np.random.Generator,
         progress=None) -> _Engine:
    route_u = rng.random(len(arr.arrival_s))
    eng = _Engine(setup, arr, policy, link_events, horizon_s, route_u, progress)
    eng.run()
    return eng


def _result(eng: _Engine, setup: _Setup, policy: Policy, horizon_s: float, ttft_quantile: float = 0.9,
            info: dict | None = None) -> SimResult:
    a = eng.a
    tpot = np.where(np.isfinite(eng.end), setup.decode_step_s, np.nan)
    requests = pd.DataFrame({
        "arrival_s": a.arrival_s, "path": pd.Categorical.from_codes(eng.path.astype(np.int64), PATH_NAMES),
        "input_tokens": a.input_tokens, "hit_tokens": eng.hit_tokens, "uncached_tokens": eng.uncached,
        "route_tokens": eng.route_tokens, "output_tokens": a.output_tokens, "wait_s": eng.wait,
        "prefill_s": eng.prefill, "transfer_s": np.where(eng.path == 1, eng.transfer, 0.0),
        "decode_wait_s": eng.decode_wait, "ttft_s": eng.ttft, "tpot_s": tpot, "end_s": eng.end,
    })
    cache = {}
    if eng.caching:
        remote = eng.path == 1
        inp_tok = a.input_tokens
        for name, mask in (("local", ~remote), ("remote", remote)):
            tot = inp_tok[mask].sum()
            cache[f"{name}_token_hit_rate"] = float(eng.hit_tokens[mask].sum() / tot) if tot else 0.0
        cache["local_evicted_blocks"] = eng.local_cache.evicted_blocks
        cache["remote_evicted_blocks"] = eng.remote_cache.evicted_blocks
    base_info = {"events": eng.events_handled, "role_changes": len(eng.roles_log)}
    base_info.update(info or {})
    timeseries = pd.DataFrame.from_records(eng.ts_rows, columns=TIMESERIES_COLUMNS)
    return SimResult(requests, timeseries, policy, horizon_s, setup.ttft_slo_s, ttft_quantile,
                     setup.tpot_slo_s, cache, base_info)


def simulate(sc, res=None, *, rate_rps: float | None = None, load: float | None = None,
             duration_s: float | None = 600, trace=None, rate_scale: float = 1.0,
             policy: str | Policy = "fixed", link_events: Sequence[LinkEvent] = (), seed: int = 0,
             progress: Callable[[float], None] | None = None, arrivals: str | Bursty | None = None) -> SimResult:
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
    """
    from .planner import plan as make_plan

    pol = Policy(name=policy) if isinstance(policy, str) else policy
    if not isinstance(pol, Policy):
        raise PlanError(f"policy: {policy!r} must be one of {', '.join(POLICIES)} or a Policy")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise PlanError(f"--seed: {seed!r} must be a whole number >= 0")
    if not (isinstance(rate_scale, (int, float)) and math.isfinite(rate_scale) and rate_scale > 0):
        raise PlanError(f"--rate-scale: {rate_scale!r} must be a positive factor")
    events = _check_link_events(link_events)
    res = make_plan(sc) if res is None else res
    setup = _Setup.from_plan(res, sc)
    rng = np.random.default_rng(int(seed))
    arr, horizon = _arrivals(setup, sc, res, rate_rps, load, duration_s, trace, rate_scale, arrivals, rng)
    eng = _run(setup, arr, pol, events, horizon, rng, progress)
    info = {"lambda_max_rps": res.lambda_max_rps, "threshold_tokens": res.threshold_tokens or np.nan,
            "n_prfaas": setup.n_prfaas, "n_pd_p": setup.n_pd_p, "n_pd_d": setup.n_pd_d, "seed": int(seed)}
    return _result(eng, setup, pol, horizon, sc.spec.slo.ttft_quantile, info)
