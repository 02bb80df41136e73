"""The event loop: one run of the discrete-event simulation, one named handler per event.

Events, in the order they are handled at equal times: the 1-s sampling tick (which is also the
policy's turn), an arrival, then the heap's events by kind: the link's capacity changes, the
earliest link transfer finishes, a remote request's transfer joins the link, a PrfaaS prefill
ends, a PD-P prefill ends, a remote request's KV is ready at the decode cluster; equal kinds in
request order. The link's next completion is kept beside the heap (one time, replaced whenever
the set of transfers or the capacity changes) instead of as heap entries that go stale.

FCFS prefill pools and decode slots are heaps of the times each server or slot becomes free
(Kiefer-Wolfowitz: a request starts on the one that frees first), so service starts need no
events. Times are seconds, transfer sizes bits.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from heapq import heappop, heappush, heapreplace
from operator import itemgetter
from typing import TYPE_CHECKING

import numpy as np

from prfaas_plan.defaults import PREFIX_BLOCK_TOKENS
from prfaas_plan.sim import arrivals as arrivals_module
from prfaas_plan.sim.link import Link, LinkEvent, capacity_schedule
from prfaas_plan.sim.outputs import Sink
from prfaas_plan.sim.policies import scheduler_for
from prfaas_plan.sim.ring import Ring
from prfaas_plan.units import BITS_PER_BYTE, GBPS_BITS_PER_S
from prfaas_plan.workload import LRUPrefixCache

if TYPE_CHECKING:
    import pandas as pd

    from prfaas_plan.sim.arrivals import Arrivals, Source
    from prfaas_plan.sim.params import Setup
    from prfaas_plan.sim.policies import Policy

# Heap event kinds, in the order they are handled at equal times (payload: request id, or the
# index into the capacity schedule). The link's completion (kind 1) is kept beside the heap.
LINK_CAPACITY, LINK_DONE, TRANSFER_JOIN, REMOTE_PREFILL_END, LOCAL_PREFILL_END, KV_READY = range(6)
_INF = math.inf
_earliest_slot = itemgetter(0)


class Engine:
    """One simulation run of ``setup`` on ``source``'s arrivals under ``policy``. Call :meth:`run`
    once; the records go to ``sink`` as the run goes. ``events`` counts the arrivals and every
    event scheduled (a link completion superseded before it was due included)."""

    def __init__(self, setup: Setup, source: Source, policy: Policy, link_events: Sequence[LinkEvent],
                 sink: Sink, progress: Callable[[float], None] | None = None) -> None:
        self.setup, self.source, self.policy, self.sink, self.progress = setup, source, policy, sink, progress
        self.horizon_s, self.n = source.horizon_s, source.n
        self.schedule = capacity_schedule(link_events, setup.link_bits_per_s, setup.link_efficiency)
        self.scheduler = scheduler_for(policy, setup)
        self.local_cache = LRUPrefixCache(setup.cache_blocks)
        remote_blocks = setup.cache_blocks if setup.remote_cache_blocks is None else setup.remote_cache_blocks
        self.remote_cache = LRUPrefixCache(remote_blocks)
        self.hash_ids = source.hash_ids
        self.caching = self.hash_ids is not None and (self.local_cache.enabled or self.remote_cache.enabled)
        self.events = 0
        self.frames: tuple[pd.DataFrame, pd.DataFrame] | None = None  # (requests, timeseries) when kept in memory
        self._init_pools()
        self._init_link()
        self._init_arrivals()

    # -- state --------------------------------------------------------------------------------
    def _init_pools(self) -> None:
        """Prefill servers and decode slots as heaps of free times; queues as heaps of start times."""
        s = self.setup
        self.remote_servers = [0.0] * s.n_prfaas
        self.local_servers = [0.0] * s.n_pd_p
        self.decode_slots = [[0.0] * s.decode_batch_max for _ in range(s.n_pd_d)]  # per PD-D instance
        self.remote_waiting: list[float] = []
        self.local_waiting: list[float] = []
        self.decode_waiting: list[float] = []
        self.decode_ends: list[float] = []  # end times of admitted requests (for occupancy)
        self.step_s, self.n_layers, self.half_rtt_s = s.decode_step_s, s.n_layers, s.rtt_s / 2
        self.heap: list[tuple[float, int, int]] = [(t, LINK_CAPACITY, i) for i, (t, _) in enumerate(self.schedule[1:], 1)]
        heapq.heapify(self.heap)

    def _init_link(self) -> None:
        """The link, its next completion, and the remote requests between prefill and KV ready."""
        self.link = Link(self.schedule[0][1])
        self.link_done_s = _INF
        self.job_bits: dict[int, float] = {}  # rid -> bits the request ships, until its KV is ready
        self.prefill_ended: dict[int, tuple[float, float]] = {}  # rid -> (prefill end, earliest ready), transfer running
        self.transfer_done: set[int] = set()  # rids whose transfer finished while their prefill runs
        self.next_tick_s = self.policy.period_s if self.policy.period_s <= self.horizon_s else _INF
        self.last_bits_sent = self.last_capacity_time = self.last_bits_routed = self.bits_routed = 0.0

    def _init_arrivals(self) -> None:
        """The ring of per-request results and the first chunk of arrivals (loaded at its first arrival)."""
        self.ring = Ring(self.source.chunk, self.n, self.step_s)
        self.chunks = iter(self.source.chunks)
        self.pending = next(self.chunks, None)
        self.next_arrival_s = float(self.pending.arrival_s[0]) if self.pending is not None else _INF
        self.next_rid = self.base_rid = self.chunk_len = 0
        self.progress_every = max(self.n // 100, 1)
        if self.caching:
            self.t_remote, self.t_local, self.bits = self._token_tables(self.source.max_input_tokens)

    def _token_tables(self, top_tokens: int) -> tuple[list, list, list]:
        """Service times and shipped bits indexed by uncached tokens 0..top (with prefix caching the
        length a cluster prefills is known only at arrival)."""
        s = self.setup
        grid = np.arange(1, top_tokens + 1, dtype=float)
        return ([0.0, *np.asarray(s.t_remote(grid), dtype=float).tolist()],
                [0.0, *np.asarray(s.t_local(grid), dtype=float).tolist()],
                [0.0, *np.asarray(BITS_PER_BYTE * s.kv_bytes(grid), dtype=float).tolist()])

    def _load_chunk(self, rid: int) -> None:
        """Make the pending chunk, whose first request ``rid`` arrives now, the loaded one."""
        a, s = self.pending, self.setup
        self.arrival_s, self.output_tokens = a.arrival_s.tolist(), a.output_tokens.tolist()
        self.input_tokens, self.route_u = a.input_tokens.tolist(), a.route_u.tolist()
        self.planned = None
        if not self.caching:  # lengths known: service times, bits and (fixed policy) routing per request
            tokens = a.input_tokens.astype(float)
            self.t_remote = np.asarray(s.t_remote(tokens), float).tolist()
            self.t_local = np.asarray(s.t_local(tokens), float).tolist()
            self.bits = (BITS_PER_BYTE * np.asarray(s.kv_bytes(tokens), float)).tolist()
            self.planned = self.scheduler.planned_offloads(a.input_tokens, a.route_u)
        self.ring.add(a, self.arrival_s, self.output_tokens, self.sink)
        self._bind_ring()
        self.base_rid, self.chunk_len = rid, len(self.arrival_s)
        self.pending = next(self.chunks, None)

    def _bind_ring(self) -> None:
        """The ring's arrays as attributes (they are replaced when the ring grows)."""
        r, ring = self.ring.arrays, self.ring
        self.path, self.hit_tokens, self.uncached, self.routed = r["path"], r["hit_tokens"], r["uncached"], r["route_tokens"]
        self.wait, self.prefill, self.transfer = r["wait"], r["prefill"], r["transfer"]
        self.decode_wait, self.ttft, self.end = r["decode_wait"], r["ttft"], r["end"]
        self.ring_arrival, self.ring_output, self.mask = ring.arrival, ring.output, ring.cap - 1

    # -- the loop -----------------------------------------------------------------------------
    def run(self) -> None:
        """Handle every event in time order until no arrival and no event is left, then hand the
        last records to the sink."""
        heap, link_finish = self.heap, self._on_link_done
        handlers = (self._on_link_capacity, None, self._on_transfer_join, self._on_remote_prefill_end,
                    self._on_local_prefill_end, self._admit_decode)
        handled = 0
        while True:
            t_arrival, t_tick = self.next_arrival_s, self.next_tick_s
            t_bound = t_tick if t_tick <= t_arrival else t_arrival
            while True:  # the heap's and the link's events before the next tick or arrival
                t_heap = heap[0][0] if heap else _INF
                t_link = self.link_done_s
                if t_link < t_heap or (t_link == t_heap < _INF and heap[0][1] != LINK_CAPACITY):
                    if t_link >= t_bound:
                        break
                    link_finish(t_link)
                else:
                    if t_heap >= t_bound:
                        break
                    now, kind, payload = heappop(heap)
                    handled += 1
                    handlers[kind](now, payload)
            if t_bound == _INF:
                break  # no tick, arrival or event left
            if t_tick <= t_arrival:
                self._on_sampling_tick(t_tick)
            else:
                self._on_arrival(t_arrival)
        self.ring.flush(self.sink, everything=True)
        self.events += handled + self.n
        if self.progress is not None:
            self.progress(1.0)

    # -- arrivals and prefill -----------------------------------------------------------------
    def _on_arrival(self, now: float) -> None:
        """A request arrives: look up its cached prefixes, route it, queue it for prefill."""
        rid = self.next_rid
        self.next_rid = rid + 1
        k = rid - self.base_rid
        if k == self.chunk_len:
            self._load_chunk(rid)
            k = 0
        self.next_arrival_s = (self.arrival_s[k + 1] if k + 1 < self.chunk_len else
                               float(self.pending.arrival_s[0]) if self.pending is not None else _INF)
        if self.progress is not None and self.next_rid % self.progress_every == 0:
            self.progress(self.next_rid / self.n)
        input_tokens = self.input_tokens[k]
        if self.caching:
            remote = self._route_cached(rid, k, input_tokens)
        else:
            self.routed[rid & self.mask] = input_tokens
            planned = self.planned
            remote = planned[k] if planned is not None else self.scheduler.offloads(input_tokens, input_tokens,
                                                                                    self.route_u[k])
            self.last_route_tokens, self.last_hit_tokens = input_tokens, 0
        prefill_s = self._start_remote_prefill(rid, k, now) if remote else self._start_local_prefill(rid, k, now)
        if self.scheduler.observes_arrivals:  # offered work counted at arrival, so a bottleneck cannot hide demand
            decode_s = (self.output_tokens[k] or 1) * self.step_s
            self.scheduler.observe(self.last_route_tokens, decode_s, prefill_s, remote)

    def _route_cached(self, rid: int, k: int, input_tokens: int) -> bool:
        """Route a request by its prefix-cache hits (at least one token is prefilled); remembers
        its routing length and the chosen cluster's hit (tokens)."""
        ids = self.hash_ids[rid]
        hit_local = min(self.local_cache.hit_blocks(ids) * PREFIX_BLOCK_TOKENS, input_tokens - 1)
        hit_remote = min(self.remote_cache.hit_blocks(ids) * PREFIX_BLOCK_TOKENS, input_tokens - 1)
        route_tokens = input_tokens - (hit_local if hit_local > hit_remote else hit_remote)
        remote = self.scheduler.offloads(route_tokens, input_tokens - hit_local, self.route_u[k])
        self.routed[rid & self.mask] = route_tokens
        self.last_route_tokens, self.last_hit_tokens = route_tokens, hit_remote if remote else hit_local
        return remote

    def _start_remote_prefill(self, rid: int, k: int, now: float) -> float:
        """Queue an arrival on the PrfaaS pool; its transfer joins the link after its first layer.
        Returns its prefill time (s)."""
        hit = self.last_hit_tokens
        uncached = self.input_tokens[k] - hit
        index = uncached if self.caching else k
        prefill_s, bits = self.t_remote[index], self.bits[index]
        servers = self.remote_servers
        free = servers[0]
        start = free if free > now else now
        done = start + prefill_s
        heapreplace(servers, done)
        if start > now:
            heappush(self.remote_waiting, start)
        self.job_bits[rid] = bits
        self.bits_routed += bits
        heappush(self.heap, (start + prefill_s / self.n_layers, TRANSFER_JOIN, rid))
        heappush(self.heap, (done, REMOTE_PREFILL_END, rid))
        j = rid & self.mask
        self.path[j], self.hit_tokens[j], self.uncached[j] = 1, hit, uncached
        self.wait[j], self.prefill[j] = start - now, prefill_s
        return prefill_s

    def _start_local_prefill(self, rid: int, k: int, now: float) -> float:
        """Queue an arrival on the PD-P pool. Returns its prefill time (s)."""
        hit = self.last_hit_tokens
        uncached = self.input_tokens[k] - hit
        prefill_s = self.t_local[uncached if self.caching else k]
        servers = self.local_servers
        free = servers[0]
        start = free if free > now else now
        done = start + prefill_s
        heapreplace(servers, done)
        if start > now:
            heappush(self.local_waiting, start)
        heappush(self.heap, (done, LOCAL_PREFILL_END, rid))
        j = rid & self.mask
        self.hit_tokens[j], self.uncached[j] = hit, uncached
        self.wait[j], self.prefill[j] = start - now, prefill_s
        return prefill_s

    def _on_local_prefill_end(self, now: float, rid: int) -> None:
        """A PD-P prefill ends: its blocks enter the local cache; it asks for a decode slot."""
        if self.caching:
            self.local_cache.insert(self.hash_ids[rid])
        self._admit_decode(now, rid)

    def _on_remote_prefill_end(self, now: float, rid: int) -> None:
        """A PrfaaS prefill ends: its blocks enter the PrfaaS cache, and the last layer's cache
        leaves at the per-transfer share of the link (this transfer counted once, whether or not
        it is still running). KV is ready now if the transfer is done, else when it is."""
        if self.caching:
            self.remote_cache.insert(self.hash_ids[rid])
        link = self.link
        done_already = rid in self.transfer_done
        last_layer_s = self.job_bits[rid] / self.n_layers * (link.n + done_already) / link.capacity_bps
        if done_already:
            self.transfer_done.discard(rid)
            del self.job_bits[rid]
            ready = now + last_layer_s + self.half_rtt_s
            self.transfer[rid & self.mask] = ready - now
            heappush(self.heap, (ready, KV_READY, rid))
        else:
            self.prefill_ended[rid] = (now, now + last_layer_s)

    # -- the link -----------------------------------------------------------------------------
    def _on_transfer_join(self, now: float, rid: int) -> None:
        """A remote request's first layer is done: its transfer joins the link."""
        link = self.link
        link.advance(now)
        link.n += 1
        heappush(link.finish, (link.v + self.job_bits[rid], rid))
        self._reschedule_link(now)

    def _on_link_done(self, now: float) -> None:
        """The earliest transfer finishes (with any due at the same virtual time)."""
        link = self.link
        link.advance(now)
        finish = link.finish
        # the earliest transfer is due now: finish it even if float rounding of ``now`` left ``v``
        # a hair short (otherwise the event could repeat without progress)
        if finish and finish[0][0] > link.v:
            link.v = finish[0][0]
        tol = 1e-9 * (abs(link.v) + 1.0)
        while finish and finish[0][0] <= link.v + tol:
            rid = heappop(finish)[1]
            link.n -= 1
            ended = self.prefill_ended.pop(rid, None)
            if ended is None:
                self.transfer_done.add(rid)  # prefill still running
            else:
                prefill_end_s, min_ready_s = ended
                del self.job_bits[rid]
                ready = (min_ready_s if min_ready_s > now else now) + self.half_rtt_s
                self.transfer[rid & self.mask] = ready - prefill_end_s
                heappush(self.heap, (ready, KV_READY, rid))
        if link.n == 0:
            link.v = 0.0  # keep virtual time small
        self._reschedule_link(now)

    def _on_link_capacity(self, now: float, index: int) -> None:
        """The link's usable capacity steps to the schedule's ``index``-th value."""
        self.link.advance(now)
        self.link.capacity_bps = self.schedule[index][1]
        self._reschedule_link(now)

    def _reschedule_link(self, now: float) -> None:
        """The transfers or the capacity changed: when the earliest transfer now finishes."""
        self.link_done_s = done = self.link.next_done_s(now)
        if done < _INF:
            self.events += 1

    # -- decode -------------------------------------------------------------------------------
    def _admit_decode(self, now: float, rid: int) -> None:
        """A request's KV is at the decode cluster (a remote request's KV is ready, or a local
        prefill ended): give it the earliest free decode slot (FCFS over slots; the first instance
        on ties); it holds it for its output tokens x the decode step, and its first token comes
        one step after it starts."""
        slots = min(self.decode_slots, key=_earliest_slot)
        free = slots[0]
        start = free if free > now else now
        j = rid & self.mask
        end = start + (self.ring_output[j] or 1) * self.step_s
        heapreplace(slots, end)
        heappush(self.decode_ends, end)
        if start > now:
            heappush(self.decode_waiting, start)
        self.decode_wait[j] = start - now
        self.ttft[j] = start + self.step_s - self.ring_arrival[j]
        self.end[j] = end
        self.ring.left[rid >> self.ring.shift] -= 1

    # -- sampling -----------------------------------------------------------------------------
    def _on_sampling_tick(self, now: float) -> None:
        """Every ``policy.period_s``: the long-term rule's turn, one time-series row (columns
        :data:`outputs.TIMESERIES_COLUMNS`), then the short-term rule's turn."""
        scheduler, link = self.scheduler, self.link
        scheduler.on_period(now, self)
        period_s = self.policy.period_s
        link.advance(now)
        sent = link.bits_sent - self.last_bits_sent
        offered = link.capacity_time - self.last_capacity_time
        self.last_bits_sent, self.last_capacity_time = link.bits_sent, link.capacity_time
        util = sent / offered if offered > 0 else 0.0
        demand = (self.bits_routed - self.last_bits_routed) / offered if offered > 0 else 0.0
        self.last_bits_routed = self.bits_routed
        queues = (self.remote_waiting, self.local_waiting, self.decode_waiting, self.decode_ends)
        for queue in queues:  # drop the start (end) times that have passed: what is left is still ahead
            while queue and queue[0] <= now:
                heappop(queue)
        remote_queue, local_queue, decode_queue, admitted = map(len, queues)
        n_pd_p, n_pd_d = len(self.local_servers), len(self.decode_slots)
        scheduler.adapt(demand, remote_queue, local_queue, n_pd_p)
        self.sink.tick((
            now, sent / period_s / GBPS_BITS_PER_S, util, demand, offered / period_s / GBPS_BITS_PER_S, link.n,
            remote_queue, local_queue, decode_queue, max(admitted - decode_queue, 0),  # busy: admitted, not waiting
            n_pd_d * self.setup.decode_batch_max, scheduler.threshold_tokens(), n_pd_p, n_pd_d,
        ))
        next_tick_s = now + period_s
        self.next_tick_s = next_tick_s if next_tick_s <= self.horizon_s else _INF

    @property
    def role_changes(self) -> list[tuple[float, int, int]]:
        """(time_s, n_pd_p, n_pd_d) after each move of the rebalancer."""
        return self.scheduler.role_changes


def run_engine(setup: Setup, arr: Arrivals | Source, policy: Policy, link_events: Sequence[LinkEvent],
               horizon_s: float, rng: np.random.Generator | None, progress: Callable[[float], None] | None = None,
               sink: Sink | None = None) -> Engine:
    """Run the engine on in-memory arrivals (route_u drawn from ``rng``) or a source; with no sink,
    every record is kept in memory (``engine.frames``: requests, timeseries)."""
    if isinstance(arr, arrivals_module.Source):
        source = arr
    else:
        source = arrivals_module.chunked(arr, horizon_s, rng, arrivals_module.CHUNK_REQUESTS)
    sink = Sink() if sink is None else sink
    engine = Engine(setup, source, policy, link_events, sink, progress)
    try:
        engine.run()
        engine.frames = sink.close()
    finally:
        sink.abort()
    return engine
