"""The scheduling policies: fixed, short-term (link-aware) and dual-timescale, as schedulers.

:class:`Policy` holds a policy's name (:data:`vocab.Policy`) and its levels; :func:`scheduler_for`
builds the scheduler of that name. Every scheduler has one interface, which the engine calls:
:meth:`FixedScheduler.offloads` routes one arrival, :meth:`~FixedScheduler.planned_offloads` routes
a chunk up front where nothing can change the routing, :meth:`~FixedScheduler.observe` counts an
arrival's offered work, :meth:`~FixedScheduler.on_period` (before each time-series sample) may move
instances, :meth:`~FixedScheduler.adapt` (after it) applies the short-term rule.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

import numpy as np

from prfaas_plan.errors import InvalidInput
from prfaas_plan.sim.params import Routing, Setup
from prfaas_plan.units import BITS_PER_BYTE
from prfaas_plan.vocab import POLICIES
from prfaas_plan.vocab import Policy as PolicyName

if TYPE_CHECKING:
    from prfaas_plan.sim.engine import Engine

CacheAware = Literal["scarce", "always", "never"]
CACHE_AWARE: tuple[str, ...] = get_args(CacheAware)
REPLAN_MIN_REQUESTS = 200  # the rebalancer re-plans t only on at least this many observed lengths
REPLAN_WINDOW_REQUESTS = 2000  # ... and on at most this many of the most recent ones


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

    name: PolicyName = "fixed"
    period_s: float = 1.0
    high: float = 0.8
    low: float = 0.5
    queue_high: float = 4.0
    queue_low: float = 1.0
    local_queue_high: float = 1.0
    smooth_s: float = 10.0
    raise_factor: float = 1.25
    max_factor: float = 64.0
    cache_aware: CacheAware = "scarce"
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


class FixedScheduler:
    """``fixed``: the plan's routing (threshold factor 1); nothing adapts.

    Routes by the incremental length, or by the local cluster's own uncached length when
    ``policy.cache_aware`` is ``"always"`` (or ``"scarce"`` while bandwidth is scarce, which only
    the adaptive schedulers see). A setup with one prefill pool sends everything to it.
    """

    observes_arrivals = False  # whether the engine calls observe() at each arrival

    def __init__(self, policy: Policy, setup: Setup) -> None:
        self.policy, self.setup = policy, setup
        self.routing = setup.routing
        self.factor = 1.0  # multiplies the routing threshold
        self.scarce = False  # bandwidth scarce: route by the local cluster's uncached length (cache_aware "scarce")
        self.has_remote, self.has_local = setup.n_prfaas > 0, setup.n_pd_p > 0
        self.local_first, self.scarce_aware = policy.cache_aware == "always", policy.cache_aware == "scarce"
        self.role_changes: list[tuple[float, int, int]] = []  # (time_s, n_pd_p, n_pd_d) after each move

    def offloads(self, route_tokens: int, local_route_tokens: int, u: float) -> bool:
        """Whether an arrival goes to PrfaaS, given its incremental and local uncached lengths
        (tokens) and its uniform routing draw ``u``."""
        if not self.has_remote:
            return False
        if not self.has_local:
            return True
        tokens = local_route_tokens if self.local_first or (self.scarce and self.scarce_aware) else route_tokens
        return u < self.routing.offload_probability(tokens, self.factor)

    def planned_offloads(self, route_tokens: np.ndarray, u: np.ndarray) -> np.ndarray | None:
        """The routing of a chunk of arrivals without prefix caches (both lengths are the input
        length), decided up front: the same decisions as :meth:`offloads` one by one (a bool
        array). None where the routing can change during the chunk (adaptive schedulers)."""
        if not (self.has_remote and self.has_local):
            return np.full(len(u), self.has_remote)
        return np.asarray(u) < self.routing.offload_probabilities(route_tokens)

    def observe(self, route_tokens: int, decode_s: float, prefill_s: float, remote: bool) -> None:
        """Count an arrival's routing length and offered work (seconds); only the rebalancer uses them."""

    def on_period(self, now: float, engine: Engine) -> None:
        """Called at each sampling tick (seconds), before the sample: the long-term rule's turn."""

    def adapt(self, demand: float, remote_queue: int, local_queue: int, n_pd_p: int) -> None:
        """Called after each sample: the short-term rule's turn (egress demand as a fraction of the
        usable capacity, queue lengths in requests)."""

    def threshold_tokens(self) -> float:
        """The effective threshold t (tokens; NaN where the routing has no single t)."""
        t = self.routing.threshold_tokens
        return t * self.factor if t is not None else math.nan


class ShortTermScheduler(FixedScheduler):
    """``short``: every period raise t when the link or the PrfaaS queue is hot, relax it when cool.

    t is multiplied by ``raise_factor`` while egress demand (exponentially smoothed over
    ``smooth_s``) exceeds ``high`` or the PrfaaS queue ``queue_high`` per instance, unless the local
    prefill queue exceeds ``local_queue_high``; it relaxes towards the plan's t when both are below
    their low levels or local prefill is the congested side.
    """

    def __init__(self, policy: Policy, setup: Setup) -> None:
        super().__init__(policy, setup)
        self.demand_smooth = 0.0  # smoothed egress demand, fraction of the usable capacity

    def planned_offloads(self, route_tokens: np.ndarray, u: np.ndarray) -> np.ndarray | None:
        return None

    def adapt(self, demand: float, remote_queue: int, local_queue: int, n_pd_p: int) -> None:
        pol = self.policy
        self.demand_smooth += min(pol.period_s / pol.smooth_s, 1.0) * (demand - self.demand_smooth)
        if not (self.setup.n_prfaas > 0 and n_pd_p > 0):
            return
        smooth = self.demand_smooth
        remote_per = remote_queue / self.setup.n_prfaas
        remote_hot = smooth > pol.high or remote_per > pol.queue_high
        local_hot = local_queue / n_pd_p > pol.local_queue_high
        if remote_hot and not local_hot:
            self.factor = min(self.factor * pol.raise_factor, pol.max_factor)
        elif (smooth < pol.low and remote_per < pol.queue_low) or (local_hot and not remote_hot):
            self.factor = max(1.0, self.factor / pol.raise_factor)
        self.scarce = smooth > pol.high or self.factor > 1.0


class DualTimescaleScheduler(ShortTermScheduler):
    """``dual``: the short-term rule plus the long-term rebalancer.

    Every ``rebalance_period_s`` it moves one local instance between the PD-P and PD-D roles when
    one side's offered utilisation (work arrived / capacity, counted at arrival so that an
    upstream bottleneck cannot hide demand) exceeds ``rebalance_high`` and the other side would
    stay below it, and re-plans t on the recently observed routing lengths after a move or when
    one prefill pool is ``rebalance_imbalance`` times busier than the other.
    """

    observes_arrivals = True

    def __init__(self, policy: Policy, setup: Setup) -> None:
        super().__init__(policy, setup)
        self.recent_route_tokens: deque[int] = deque(maxlen=REPLAN_WINDOW_REQUESTS)
        self.work_local_s = self.work_remote_s = self.work_decode_s = 0.0
        self.next_rebalance_s = policy.rebalance_period_s

    def observe(self, route_tokens: int, decode_s: float, prefill_s: float, remote: bool) -> None:
        self.recent_route_tokens.append(route_tokens)
        self.work_decode_s += decode_s
        if remote:
            self.work_remote_s += prefill_s
        else:
            self.work_local_s += prefill_s

    def on_period(self, now: float, engine: Engine) -> None:
        if now >= self.next_rebalance_s:
            self._rebalance(now, engine)
            self.next_rebalance_s += self.policy.rebalance_period_s

    def _rebalance(self, now: float, engine: Engine) -> None:
        """Move one instance towards the overloaded side (the engine's pools), then maybe re-plan t."""
        s, pol, span = self.setup, self.policy, self.policy.rebalance_period_s
        local, decode = engine.local_servers, engine.decode_slots
        n_p, n_d, slots = len(local), len(decode), s.decode_batch_max
        u_p = self.work_local_s / (max(n_p, 1) * span)
        u_r = self.work_remote_s / (max(s.n_prfaas, 1) * span)
        u_d = self.work_decode_s / (max(n_d, 1) * slots * span)
        self.work_local_s = self.work_remote_s = self.work_decode_s = 0.0
        high = pol.rebalance_high
        moved = False
        # prefill pressure: the busier of the two prefill pools (t re-planning balances them)
        if u_d > high and n_p > 1 and (u_p * n_p + u_r * s.n_prfaas) / (n_p - 1 + s.n_prfaas) < high:
            # PD-P -> PD-D: the server that frees first finishes its work, then decodes
            decode.append([max(heapq.heappop(local), now)] * slots)
            moved = True
        elif max(u_p, u_r) > high and n_d > 1 and u_d * n_d / (n_d - 1) < high:
            # PD-D -> PD-P: the instance that drains first stops taking requests, then prefills
            drained = decode.pop(min(range(n_d), key=lambda index: max(decode[index])))
            heapq.heappush(local, max(max(drained), now))
            moved = True
        if moved:
            self.role_changes.append((now, len(local), len(decode)))
        lo, hi = sorted((u_p, u_r))
        if (moved or hi > pol.rebalance_imbalance * max(lo, 1e-9)) and len(self.recent_route_tokens) >= REPLAN_MIN_REQUESTS:
            # plan for the provisioned link: deviations from it are the short-term rule's job, so
            # its factor is kept and applies to the new base threshold
            t = replan_threshold(s, np.fromiter(self.recent_route_tokens, dtype=float), len(local), s.link_bits_per_s)
            if t is not None:
                self.routing = Routing.threshold(t)


SCHEDULERS: dict[str, type[FixedScheduler]] = {
    "fixed": FixedScheduler, "short": ShortTermScheduler, "dual": DualTimescaleScheduler,
}


def scheduler_for(policy: Policy, setup: Setup) -> FixedScheduler:
    """The scheduler of ``policy.name`` for a run of ``setup``."""
    return SCHEDULERS[policy.name](policy, setup)


def replan_threshold(s: Setup, tokens: np.ndarray, n_p: int, link_bits_per_s: float) -> float | None:
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
    # cut between distinct lengths: everything up to l[k-1] local (k = n: all local, t the longest)
    return float(l[k - 1]) if k > 0 else float(max(l[0] - 1, 0))
