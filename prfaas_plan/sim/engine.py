"""The event loop: one run of the discrete-event simulation, one named handler per event.

Events, in the order they are handled at equal times: the 1-s sampling tick (which is also the
policy's turn), an arrival, then the heap's events by kind: the link's capacity changes, the
earliest link transfer finishes, a remote request's transfer joins the link, a PrfaaS prefill
ends, a PD-P prefill ends, a remote request's KV is ready at the decode cluster; equal kinds in
request order. The link's next completion is kept beside the heap (one time, replaced whenever
the set of transfers or the capacity changes) instead of as heap entries that go stale.

FCFS prefill pools and decode slots are heaps of the times each server or slot becomes free
(Kiefer-Wolfowitz: a request starts on the one that frees first), so service starts need no
events. Two opt-in memories make starts wait for memory; then both prefill pools are FIFO queues
started by events (a server frees, memory frees), which gives the same starts when memory never runs out:

* **decode staging memory** (``Setup.staging``): a request reserves its prompt's KV on the decode
  instance with the most free memory at the point its engine profile names
  (:mod:`prfaas_plan.handoff`): at prefill start (the prefill waits until it fits), at transfer
  start (the transfer waits to join the link; a local request waits to hand over), or not before
  the bytes arrive; it holds it until admitted. A decode instance admits the requests whose KV is
  there, FCFS, while it has a slot (the plan's ``BS_max``, which the planner's staging fixed point
  has lowered) and memory (running requests hold ``running_bytes`` each; an idle instance takes
  one whatever); a finished decode (``DECODE_END``) makes room. Held memory is
  integrated over time (mean) and sampled at each tick (P50 / P99): :meth:`Engine.staging_figures`.
* **the PrfaaS transfer buffer** (``Setup.transfer_buffer_bytes``, pooled over the PrfaaS
  instances): a remote request's KV occupies it from prefill start until its KV is ready; a
  prefill starts only when the buffer has room for it (an empty buffer takes any one), so a
  lagging link holds back prefill.

Speed (issue #18): the handlers are chosen once per run for the features it uses. A plain run (no
prefix caches, no memory limits, the fixed policy) decides each request's path and prefill time,
and writes its static records, a chunk at a time (numpy). Nothing but arrivals takes its prefill
servers, so it also starts each chunk's prefills at once, in arrival order (:meth:`Engine._start_prefills`),
and runs in its own loop (:meth:`Engine._loop_plain`) in which an arrival is no event: the prefill
ends and transfer joins are a sorted stream beside the heap, the decode admission and the usual
end of a PrfaaS prefill are written out. Prefill times and KV bits come from per-length tables
(:mod:`sim.tables`), decode slots are one heap unless the rebalancer moves instances, a tick
records the link's running counters (the rates per period are differences taken a chunk of rows
at a time) and, in the plain loop, the lengths of logs of the decoding requests' times in place of
heaps popped at every tick; the queue lengths and the bits routed at the ticks are counted from
those logs and from the chunks' prefill starts a chunk of rows at a time (:mod:`sim.tallies`). None
of this changes an operation that produces an output: the same floating-point operations run in
the same order, so every record is bit for bit the same.

Times are seconds, transfer sizes bits, memory bytes (per GPU of a decode instance).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Sequence
from heapq import heappop, heappush, heapreplace
from operator import itemgetter
from typing import TYPE_CHECKING

import numpy as np

from prfaas_plan.defaults import PREFIX_BLOCK_TOKENS
from prfaas_plan.handoff import kv_ready_s, last_layer_s, transfer_join_s
from prfaas_plan.sim import arrivals as arrivals_module
from prfaas_plan.sim.link import Link, LinkEvent, capacity_schedule
from prfaas_plan.sim.outputs import TIMESERIES_CHUNK_ROWS, TIMESERIES_COLUMNS, Sink
from prfaas_plan.sim.policies import scheduler_for
from prfaas_plan.sim.ring import Ring
from prfaas_plan.sim.tables import TokenTable, cached_lengths
from prfaas_plan.sim.tallies import Running, Spans, Tallies
from prfaas_plan.units import BITS_PER_BYTE, GBPS_BITS_PER_S, GIB_BYTES
from prfaas_plan.workload import LRUPrefixCache

if TYPE_CHECKING:
    from prfaas_plan.sim.arrivals import Arrivals, Source
    from prfaas_plan.sim.outputs import Records
    from prfaas_plan.sim.params import Setup
    from prfaas_plan.sim.policies import Policy

# Heap event kinds, in the order they are handled at equal times (payload: request id, or the
# index into the capacity schedule). The link's completion (kind 1) is kept beside the heap;
# DECODE_END occurs only with staging memory on.
LINK_CAPACITY, LINK_DONE, TRANSFER_JOIN, REMOTE_PREFILL_END, LOCAL_PREFILL_END, KV_READY, DECODE_END = range(7)
_INF = math.inf
_TICK_FIELDS = 12  # numbers per time-series row as the ticks record them (_on_sampling_tick)
_PLAIN_TICK_FIELDS = 6  # ... and as a plain run's ticks do (_on_plain_tick; _settle_ticks fills in the rest)
_earliest_slot = itemgetter(0)


def _fcfs_starts(servers: list[float], arrival_s: list[float], prefill_s: list[float]) -> list[float]:
    """When each of a pool's arrivals (in order) starts on the server that frees first
    (``servers``: the heap of their free times, updated); each holds it for its prefill time."""
    starts = []
    for now, busy_s in zip(arrival_s, prefill_s):
        free = servers[0]
        start = free if free > now else now
        heapreplace(servers, start + busy_s)
        starts.append(start)
    return starts


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
        # at each tick: only the rebalancer moves instances, only adaptive policies move t
        self.rebalances, self.adapts = policy.rebalances, policy.adapts_threshold
        self.fixed_threshold = self.scheduler.threshold_tokens()
        self.observes = self.scheduler.observes_arrivals
        self.local_cache = LRUPrefixCache(setup.cache_blocks)
        remote_blocks = setup.cache_blocks if setup.remote_cache_blocks is None else setup.remote_cache_blocks
        self.remote_cache = LRUPrefixCache(remote_blocks)
        self.hash_ids = source.hash_ids
        self.caching = self.hash_ids is not None and (self.local_cache.enabled or self.remote_cache.enabled)
        self.events = 0
        self.scheduled = 0  # heap events a plain run schedules (_loop_plain)
        self.frames: Records | None = None  # (requests, timeseries) when kept in memory
        self._init_pools()
        self._init_link()
        self._init_memory()
        self._init_arrivals()
        # plain runs (no prefix caches, no memory limits, the fixed policy) decide each request's
        # path and prefill time with its chunk, vectorised, and run in a loop of their own (_loop_plain)
        self.plain = not self.caching and not self.gated and not self.adapts and not self.observes

    # -- state --------------------------------------------------------------------------------
    def _init_pools(self) -> None:
        """Prefill servers and decode slots as heaps of free times; queues as heaps of start times."""
        s = self.setup
        self.remote_servers = [0.0] * s.n_prfaas
        self.local_servers = [0.0] * s.n_pd_p
        # decode slots: one heap of all slots' free times, or (the rebalancer moves whole instances)
        # one heap per PD-D instance; the earliest free slot is the same either way
        self.slots = [0.0] * (s.n_pd_d * s.decode_batch_max)
        self.decode_slots = [[0.0] * s.decode_batch_max for _ in range(s.n_pd_d)] if self.rebalances else None
        self.remote_waiting: list[float] = []
        self.local_waiting: list[float] = []
        self.decode_waiting: list[float] = []
        self.decode_ends: list[float] = []  # end times of admitted requests (for occupancy)
        self.queues = (self.remote_waiting, self.local_waiting, self.decode_waiting, self.decode_ends)
        self.step_s, self.n_layers, self.rtt_s = s.decode_step_s, s.n_layers, s.rtt_s
        self.heap: list[tuple[float, int, int]] = [(t, LINK_CAPACITY, i) for i, (t, _) in enumerate(self.schedule[1:], 1)]
        heapq.heapify(self.heap)

    def _init_link(self) -> None:
        """The link, its next completion, and the remote requests between prefill and KV ready."""
        self.link = Link(self.schedule[0][1])
        self.link_done_s = _INF
        self.job_bits: dict[int, float] = {}  # rid -> bits the request ships, until its KV is ready
        self.prefill_ended: dict[int, tuple[float, float]] = {}  # rid -> (prefill end, earliest ready), transfer running
        self.transfer_done: set[int] = set()  # rids whose transfer finished while their prefill runs
        self.period_s = self.policy.period_s
        self.next_tick_s = self.period_s if self.period_s <= self.horizon_s else _INF
        self.bits_routed = 0.0  # KV bits routed to PrfaaS so far (egress demand; plain runs: by the loaded chunks)
        # time-series rows not yet handed on, _TICK_FIELDS numbers each (_on_sampling_tick; plain runs:
        # _PLAIN_TICK_FIELDS, _on_plain_tick); a list, since
        # list.extend of a row costs ~0.1 us against array.extend's ~1 us, and one np.array a chunk ~0.4 us a row
        self.ticks: list[float] = []
        self.tick_blocks: list[np.ndarray] = []  # plain runs: rows whose queue lengths are counted (_settle_ticks)
        self.tick_limit = _PLAIN_TICK_FIELDS * TIMESERIES_CHUNK_ROWS  # plain runs: numbers in self.ticks at which the rows go on
        # plain runs: the decode queues' logs (waiting, ends), the prefill queues (remote, local) and the bits
        # routed, known a chunk ahead (sim.tallies)
        self.tallies = Tallies(2)
        self.prefill_spans = (Spans(), Spans())
        self.routed_bits = Running()
        self.last_counters = np.zeros(3)  # bits sent, bit-capacity offered, bits routed at the last row handed on
        self.last_capacity_time = self.last_bits_routed = 0.0  # ... at the last tick (adaptive policies)

    def _init_memory(self) -> None:
        """Decode staging memory per PD-D instance and the PrfaaS transfer buffer (when set)."""
        s = self.setup
        self.staging, self.buffer_bytes = s.staging, s.transfer_buffer_bytes
        n_d = s.n_pd_d
        self.dec_running, self.dec_used = [0] * n_d, [0.0] * n_d  # running requests; bytes (running + staged)
        self.dec_queue: list[deque[int]] = [deque() for _ in range(n_d)]  # KV there, waiting for admission
        self.dec_of: dict[int, int] = {}  # rid -> decode instance, from reservation (or admission) to its end
        self.staged_of: dict[int, float] = {}  # rid -> staged bytes held
        self.ready_at: dict[int, float] = {}  # rid -> when its KV was there
        self.need: dict[int, float] = {}  # rid -> bytes it will stage (reserved later)
        self.held = self.held_area = self.held_last_s = 0.0
        self.held_samples: list[float] = []
        self.buffer_used = 0.0
        self.buffer_of: dict[int, float] = {}
        self.gated = self.staging is not None or self.buffer_bytes is not None  # prefill starts wait for memory
        # (rid, arrival_s, prefill_s, bits, hit, uncached) waiting for a server and memory, per pool
        self.remote_fifo: deque[tuple[int, float, float, float, int, int]] = deque()
        self.local_fifo: deque[tuple[int, float, float, float, int, int]] = deque()
        self.reserve_fifo: deque[tuple[int, bool]] = deque()  # (rid, remote) waiting to reserve at transfer start
        self.waiting_join: set[int] = set()  # remote rids whose transfer waits for decode memory

    def _init_arrivals(self) -> None:
        """The ring of per-request results and the first chunk of arrivals (loaded at its first arrival)."""
        self.ring = Ring(self.source.chunk, self.n, self.step_s)
        self.chunks = iter(self.source.chunks)
        self.pending = next(self.chunks, None)
        self.next_arrival_s = float(self.pending.arrival_s[0]) if self.pending is not None else _INF
        self.next_rid = self.base_rid = self.chunk_len = 0
        self.progress_every = max(self.n // 100, 1)
        self.progress_rid = -1  # plain runs: the request after whose arrival progress is reported next (_mark)
        self.next_load_s = self.next_arrival_s  # when the pending chunk's first request arrives
        # plain runs: the prefill ends and transfer joins ahead (times, kinds, rids; a sentinel at inf last), in
        # the heap's order, and the place of the next one (_start_prefills)
        self.stream: tuple[list[float], list[int], list[int]] = ([_INF], [LINK_CAPACITY], [-1])
        self.stream_i = 0
        s = self.setup
        self.table = TokenTable(s.t_remote, s.t_local, lambda tokens: BITS_PER_BYTE * np.asarray(s.kv_bytes(tokens), float))
        if self.caching:  # the length a cluster prefills is known only at arrival: tables by uncached tokens
            lengths = cached_lengths(self.source.input_tokens, self.hash_ids)
            self.t_remote, self.t_local, self.bits = self.table.as_lists(lengths)

    def _load_chunk(self, rid: int) -> None:
        """Make the pending chunk, whose first request ``rid`` arrives now, the loaded one (its
        columns as lists: the handlers index them by the request's place ``k`` in the chunk; a
        plain run's prefills start here, :meth:`_start_prefills`)."""
        a = self.pending
        self.pending = next(self.chunks, None)
        self.next_load_s = float(self.pending.arrival_s[0]) if self.pending is not None else _INF
        self.arrival_s = a.arrival_s.tolist()
        self.base_rid, self.chunk_len = rid, len(self.arrival_s)
        self.ring.add(a, self.arrival_s, self.sink)
        self._bind_ring()
        if self.plain:  # (lengths known, the fixed policy) what the arrival handler would write, written at once
            t_remote, t_local, bits = self.table.at(a.input_tokens)
            planned = self.scheduler.planned_offloads(a.input_tokens, a.route_u)
            prefill = np.where(planned, t_remote, t_local)
            self.ring.put(rid, path=planned, uncached=a.input_tokens, route_tokens=a.input_tokens, prefill=prefill)
            self._start_prefills(rid, a.arrival_s, planned, prefill, transfer_join_s(t_remote, self.n_layers), bits)
            return
        self.output_tokens = a.output_tokens.tolist()
        self.next_arrivals = [*self.arrival_s[1:], self.next_load_s]  # when the next request arrives, after each
        if self.staging is not None:
            self.staged_bytes = np.asarray(self.staging.staged_bytes(a.input_tokens), float).tolist()
        self.planned = None
        if self.caching:
            self.input_tokens, self.route_u = a.input_tokens.tolist(), a.route_u.tolist()
            return
        # lengths known: service times, bits and (fixed policy) routing per request
        t_remote, t_local, bits = self.table.at(a.input_tokens)
        planned = self.scheduler.planned_offloads(a.input_tokens, a.route_u)
        self.bits, self.planned = bits.tolist(), None if planned is None else planned.tolist()
        self.input_tokens, self.route_u = a.input_tokens.tolist(), a.route_u.tolist()
        self.t_remote, self.t_local = t_remote.tolist(), t_local.tolist()

    def _start_prefills(self, rid: int, arrival_s: np.ndarray, remote: np.ndarray, prefill_s: np.ndarray,
                        join_after_s: np.ndarray, bits: np.ndarray) -> None:
        """A plain run's chunk of arrivals from request ``rid`` on: nothing but arrivals takes a prefill
        server, so each pool's starts follow from the arrivals alone (FCFS, in arrival order: the
        arrival handler's operations, one request after the other); the prefill ends and transfer
        joins they set become the chunk's events (:attr:`stream`, merged with those still ahead), its
        waiting requests entries of the prefill queues and its KV bits steps of the bits routed.
        Counts the heap events these requests schedule (one prefill end each, a transfer join and a
        KV ready more for a remote one), which all get handled: a count per event saved."""
        starts = np.empty(len(arrival_s))
        for on, servers, spans in ((remote, self.remote_servers, self.prefill_spans[0]),
                                   (~remote, self.local_servers, self.prefill_spans[1])):
            arrived = arrival_s[on]
            starts[on] = start = np.array(_fcfs_starts(servers, arrived.tolist(), prefill_s[on].tolist()))
            waits = start > arrived
            spans.add(arrived[waits], start[waits])
        self.ring.put(rid, wait=starts - arrival_s)
        ends, ids = starts + prefill_s, np.arange(rid, rid + len(arrival_s))
        remote_ids, local_ids = ids[remote], ids[~remote]
        remote_bits = bits[remote]
        self.job_bits.update(zip(remote_ids.tolist(), remote_bits.tolist()))
        routed = np.cumsum(np.concatenate(([self.bits_routed], remote_bits)))  # the arrival handler's sum, in order
        self.routed_bits.add(arrival_s[remote], routed[1:])
        self.bits_routed = float(routed[-1])
        times = (starts[remote] + join_after_s[remote], ends[remote], ends[~remote])
        self.scheduled += len(ids) + 2 * len(remote_ids)
        self._merge_events(times, (TRANSFER_JOIN, REMOTE_PREFILL_END, LOCAL_PREFILL_END), (remote_ids, remote_ids, local_ids))

    def _merge_events(self, times: tuple[np.ndarray, ...], kinds: tuple[int, ...], rids: tuple[np.ndarray, ...]) -> None:
        """Add events of each of ``kinds`` (ascending) at ``times`` for requests ``rids`` (ascending, after
        any the events still ahead name) to those still ahead: :attr:`stream` (times, kinds, rids;
        a sentinel at inf last) in the heap's order, by time, then kind, then request."""
        t_left, kind_left, rid_left = (np.array(column[self.stream_i:-1], dtype) for column, dtype
                                       in zip(self.stream, (np.float64, np.int64, np.int64)))
        order = np.lexsort((rid_left, kind_left))  # the events of the requests in (or queued for) prefill
        t_left, kind_left, rid_left = t_left[order], kind_left[order], rid_left[order]
        t_parts, kind_parts, rid_parts = [], [], []
        for t, kind, ids in zip(times, kinds, rids):  # by kind, then request: a stable sort by time gives the order
            old = kind_left == kind
            t_parts += [t_left[old], t]
            rid_parts += [rid_left[old], ids]
            kind_parts.append(np.full(old.sum() + len(ids), kind))
        t_all = np.concatenate(t_parts)
        order = np.argsort(t_all, kind="stable")
        self.stream = tuple(np.append(column[order], end).tolist() for column, end in
                            ((t_all, _INF), (np.concatenate(kind_parts), LINK_CAPACITY), (np.concatenate(rid_parts), -1)))
        self.stream_i = 0

    def _bind_ring(self) -> None:
        """The ring's arrays as attributes (they are replaced when the ring grows)."""
        r, ring = self.ring.arrays, self.ring
        self.path, self.hit_tokens, self.uncached, self.routed = r["path"], r["hit_tokens"], r["uncached"], r["route_tokens"]
        self.wait, self.prefill, self.transfer = r["wait"], r["prefill"], r["transfer"]
        self.decode_wait, self.ttft, self.end = r["decode_wait"], r["ttft"], r["end"]
        self.ring_arrival, self.ring_decode_s, self.mask = ring.arrival, ring.decode_s, ring.cap - 1

    # -- the loop -----------------------------------------------------------------------------
    def run(self) -> None:
        """Handle every event in time order until no arrival and no event is left, then hand the
        last records to the sink. Each kind of event gets the handler of this run's features
        (chosen here, once)."""
        kv_ready = self._admit_decode if self.staging is None and self.buffer_bytes is None else self._on_kv_ready
        local_end = self._admit_decode if not self.caching and not self.gated else self._on_local_prefill_end
        join = self._on_transfer_join if self.staging is not None else self._join_link
        handlers = (self._on_link_capacity, None, join, self._on_remote_prefill_end,
                    local_end, kv_ready, self._on_decode_end)
        handled = self._loop_plain() if self.plain else self._loop(handlers, self._on_arrival)
        self.ring.flush(self.sink, everything=True)
        self._flush_ticks()
        self.events += handled + self.n
        if self.progress is not None:
            self.progress(1.0)

    def _loop(self, handlers: tuple, on_arrival: Callable[[float], None]) -> int:
        """The event loop; returns how many heap events it handled."""
        heap, link_finish, on_tick = self.heap, self._on_link_done, self._on_sampling_tick
        handled = 0
        top = None
        while True:
            t_arrival, t_tick = self.next_arrival_s, self.next_tick_s
            t_bound = t_tick if t_tick <= t_arrival else t_arrival
            while True:  # the heap's and the link's events before the next tick or arrival
                if heap:
                    top = heap[0]
                    t_heap = top[0]
                else:
                    t_heap = _INF
                t_link = self.link_done_s
                if t_link < t_heap or (t_link == t_heap < _INF and top[1] != LINK_CAPACITY):
                    if t_link >= t_bound:
                        break
                    link_finish(t_link)
                else:
                    if t_heap >= t_bound:
                        break
                    heappop(heap)
                    handled += 1
                    handlers[top[1]](t_heap, top[2])
            if t_bound == _INF:
                break  # no tick, arrival or event left
            if t_tick <= t_arrival:
                on_tick(t_tick)
            else:
                on_arrival(t_arrival)
        return handled

    def _loop_plain(self) -> int:
        """:meth:`_loop` of a plain run: the arrivals' prefills planned a chunk at a time
        (:meth:`_start_prefills`), so that an arrival is no event, and the prefill ends and transfer joins
        they set a sorted stream beside the heap (which keeps the link's capacity steps and the KV
        ready events); :meth:`_admit_decode`, :meth:`_join_link` and the usual :meth:`_on_remote_prefill_end`
        (transfer done first) written out, the decode queues as logs (:mod:`sim.tallies`): the same
        operations in the same order. Returns the heap events handled."""
        heap, link, slots, job_bits, transfer_done = self.heap, self.link, self.slots, self.job_bits, self.transfer_done
        decode_waiting, decode_ends = self.tallies.logs
        link_finish, on_tick, step_s, n_layers, rtt_s = self._on_link_done, self._on_plain_tick, self.step_s, self.n_layers, self.rtt_s
        handlers = (self._on_link_capacity, None, None, self._on_remote_prefill_end)  # by kind
        link_done_s, t_tick, t_mark = self.link_done_s, self.next_tick_s, self.next_load_s
        linked = 0
        self.progress_rid, self.scheduled = self._progress_rid(0), len(heap)  # heap events: capacity steps, then each chunk's
        event_t, event_kind, event_rid = self.stream
        i = self.stream_i
        self._bind_ring()  # the ring's arrays in locals (again at each chunk load: the ring may grow)
        transfer, decode_wait, ttft, end_s, ring_arrival, ring_decode_s, mask = self._ring_locals()
        heappush(heap, (_INF, LINK_CAPACITY, -1))  # never due: the heap is never empty (one test less per event)
        while True:
            t_bound = t_tick if t_tick <= t_mark else t_mark
            while True:  # the events before the next tick, chunk load or progress step
                # equal times: a capacity change (heap), the link's completion, the stream's kinds, KV ready (heap)
                now = (top := heap[0])[0]
                if not (heap_next := now < (t_event := event_t[i]) or (now == t_event and top[1] == LINK_CAPACITY)):
                    now = t_event
                if link_done_s < now or (link_done_s == now and not (heap_next and top[1] == LINK_CAPACITY)):
                    if link_done_s >= t_bound:
                        break
                    link_done_s = link_finish(link_done_s)
                    continue
                if now >= t_bound:
                    break
                if heap_next:
                    _, kind, req = heappop(heap)  # (it is top)
                else:
                    kind, req = event_kind[i], event_rid[i]
                    i += 1
                if kind >= LOCAL_PREFILL_END:  # (_admit_decode, written out)
                    start = slots[0] if slots[0] > now else now
                    j = req & mask
                    end = start + ring_decode_s[j]
                    heapreplace(slots, end)
                    decode_ends.append(end)  # (the queues are logs)
                    if start > now:
                        decode_waiting.append(start)
                    decode_wait[j] = start - now
                    ttft[j] = start + step_s - ring_arrival[j]
                    end_s[j] = end
                elif kind == TRANSFER_JOIN:  # (_join_link, written out)
                    self.link_done_s = link_done_s = link.join(now, job_bits[req], req)
                    linked += link_done_s < _INF
                elif kind == REMOTE_PREFILL_END and req in transfer_done:  # (_on_remote_prefill_end, usual case)
                    transfer_done.discard(req)
                    last_s = last_layer_s(job_bits.pop(req), n_layers, link.capacity_bps / (link.n + 1))
                    ready = kv_ready_s(now, now + last_s, now, rtt_s)
                    transfer[req & mask] = ready - now
                    heappush(heap, (ready, KV_READY, req))
                else:  # the link's capacity changes, or a prefill ends before its transfer
                    handlers[kind](now, req)
                    link_done_s = self.link_done_s
            if t_bound == _INF:
                break  # no tick, chunk or event left
            if t_tick <= t_mark:
                t_tick = on_tick(t_tick)
                continue
            self.stream_i = i
            t_mark = self._mark(t_mark)
            (event_t, event_kind, event_rid), i = self.stream, self.stream_i
            transfer, decode_wait, ttft, end_s, ring_arrival, ring_decode_s, mask = self._ring_locals()
        heap.remove((_INF, LINK_CAPACITY, -1))
        self.link_done_s, self.stream_i = link_done_s, i
        self.events += linked
        return self.scheduled

    def _mark(self, now: float) -> float:
        """A plain run's arrivals at ``now``: the pending chunk's first request arrives (it is loaded,
        :meth:`_load_chunk`; the queues' logs are settled when long), or one after a 1% step of progress
        (reported). Returns when the next such arrival is."""
        while True:
            loaded = self.base_rid + self.chunk_len
            while 0 <= self.progress_rid < loaded and self.arrival_s[self.progress_rid - self.base_rid] <= now:
                self.progress_rid = self._progress_rid(self.progress_rid + 1)
            if now != self.next_load_s:
                break
            logged = self.tallies.size() + self.routed_bits.size() + sum(spans.size() for spans in self.prefill_spans)
            if logged > 4 * self.source.chunk:
                self._settle_ticks(now)  # the logs kept short (a busy run)
            self._load_chunk(loaded)
        progress_s = self.arrival_s[self.progress_rid - self.base_rid] if 0 <= self.progress_rid < loaded else _INF
        return progress_s if progress_s < self.next_load_s else self.next_load_s

    def _ring_locals(self) -> tuple:
        """The ring's arrays that :meth:`_loop_plain` keeps in locals (replaced when the ring grows, at a chunk load)."""
        return self.transfer, self.decode_wait, self.ttft, self.end, self.ring_arrival, self.ring_decode_s, self.mask

    def _progress_rid(self, rid: int) -> int:
        """Report progress when request ``rid`` - 1 has arrived at a 1% step; the next request id
        after which to report (-1: never)."""
        if self.progress is None:
            return -1
        if rid and rid % self.progress_every == 0:
            self.progress(rid / self.n)
        return (rid // self.progress_every + 1) * self.progress_every - 1

    # -- arrivals and prefill -----------------------------------------------------------------
    def _on_arrival(self, now: float) -> None:
        """A request arrives: look up its cached prefixes, route it, queue it for prefill."""
        rid = self.next_rid
        self.next_rid = rid + 1
        k = rid - self.base_rid
        if k == self.chunk_len:
            self._load_chunk(rid)
            k = 0
        self.next_arrival_s = self.next_arrivals[k]
        if self.progress is not None and (rid + 1) % self.progress_every == 0:
            self.progress((rid + 1) / self.n)
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
        if self.observes:  # offered work counted at arrival, so a bottleneck cannot hide demand
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
        self.bits_routed += bits
        if self.gated:
            self._queue_gated(rid, k, (rid, now, prefill_s, bits, hit, uncached), self.remote_fifo, now)
            return prefill_s
        servers = self.remote_servers
        free = servers[0]
        start = free if free > now else now
        heapreplace(servers, start + prefill_s)
        if start > now:
            heappush(self.remote_waiting, start)
        self._begin_remote(rid, now, start, prefill_s, bits, hit, uncached)
        return prefill_s

    def _begin_remote(self, rid: int, arrival_s: float, start: float, prefill_s: float, bits: float, hit: int,
                      uncached: int) -> None:
        """A remote prefill starts at ``start`` (its server taken): its transfer joins the link
        after its first layer."""
        self.job_bits[rid] = bits
        heap = self.heap
        heappush(heap, (start + transfer_join_s(prefill_s, self.n_layers), TRANSFER_JOIN, rid))
        heappush(heap, (start + prefill_s, REMOTE_PREFILL_END, rid))
        j = rid & self.mask
        self.path[j], self.hit_tokens[j], self.uncached[j] = 1, hit, uncached
        self.wait[j], self.prefill[j] = start - arrival_s, prefill_s

    def _start_local_prefill(self, rid: int, k: int, now: float) -> float:
        """Queue an arrival on the PD-P pool. Returns its prefill time (s)."""
        hit = self.last_hit_tokens
        uncached = self.input_tokens[k] - hit
        prefill_s = self.t_local[uncached if self.caching else k]
        if self.gated:
            self._queue_gated(rid, k, (rid, now, prefill_s, 0.0, hit, uncached), self.local_fifo, now)
            return prefill_s
        servers = self.local_servers
        free = servers[0]
        start = free if free > now else now
        heapreplace(servers, start + prefill_s)
        if start > now:
            heappush(self.local_waiting, start)
        self._begin_local(rid, now, start, prefill_s, hit, uncached)
        return prefill_s

    def _begin_local(self, rid: int, arrival_s: float, start: float, prefill_s: float, hit: int, uncached: int) -> None:
        """A PD-P prefill starts at ``start`` (its server taken)."""
        heappush(self.heap, (start + prefill_s, LOCAL_PREFILL_END, rid))
        j = rid & self.mask
        self.hit_tokens[j], self.uncached[j] = hit, uncached
        self.wait[j], self.prefill[j] = start - arrival_s, prefill_s

    # -- prefill gated by memory (staging memory or a transfer buffer) ---------------------------
    def _queue_gated(self, rid: int, k: int, job: tuple, fifo: deque, now: float) -> None:
        """Gated mode: the arrival waits in its pool's FIFO for a server and its memory."""
        if self.staging is not None:
            self.need[rid] = self.staged_bytes[k]
        fifo.append(job)
        self._start_waiting(now)

    def _start_waiting(self, now: float) -> None:
        """Start the waiting prefills of each pool, FCFS, while a server is free and the memory
        they take at prefill start is there: PrfaaS transfer-buffer room for a remote one (an empty
        buffer takes any one), decode memory when the profile reserves it at prefill start."""
        cap, at_start = self.buffer_bytes, self.staging is not None and self.staging.reserve_at == "prefill_start"
        for fifo, servers, remote in ((self.remote_fifo, self.remote_servers, True),
                                      (self.local_fifo, self.local_servers, False)):
            while fifo and servers[0] <= now:
                rid, arrival_s, prefill_s, bits, hit, uncached = fifo[0]
                need = bits / BITS_PER_BYTE
                if remote and cap is not None and self.buffer_used > 0 and self.buffer_used + need > cap:
                    break
                if at_start and not self._try_reserve(now, rid):
                    break
                fifo.popleft()
                heapreplace(servers, now + prefill_s)
                if remote:
                    if cap is not None:
                        self.buffer_used += need
                        self.buffer_of[rid] = need
                    self._begin_remote(rid, arrival_s, now, prefill_s, bits, hit, uncached)
                else:
                    self._begin_local(rid, arrival_s, now, prefill_s, hit, uncached)

    def _on_local_prefill_end(self, now: float, rid: int) -> None:
        """A PD-P prefill ends: its blocks enter the local cache; it asks for a decode slot
        (reserving its memory first if the profile reserves at transfer start)."""
        if self.caching:
            self.local_cache.insert(self.hash_ids[rid])
        if not self.gated:
            self._admit_decode(now, rid)
            return
        self._start_waiting(now)  # its server is free
        if self.staging is None:
            self._admit_decode(now, rid)
        elif self.staging.reserve_at != "transfer_start" or self._try_reserve(now, rid):
            self._decode_ready(now, rid)
            self._memory_freed(now)
        else:
            self.reserve_fifo.append((rid, False))

    def _on_remote_prefill_end(self, now: float, rid: int) -> None:
        """A PrfaaS prefill ends: its blocks enter the PrfaaS cache, and the last layer's cache
        leaves at the per-transfer share of the link (this transfer counted once, whether it is
        running, done, or waiting for decode memory to join). KV is ready now if the transfer is
        done, else when it is."""
        if self.caching:
            self.remote_cache.insert(self.hash_ids[rid])
        link = self.link
        done_already = rid in self.transfer_done
        off_link = done_already or rid in self.waiting_join
        last_s = last_layer_s(self.job_bits[rid], self.n_layers, link.capacity_bps / (link.n + off_link))
        if done_already:
            self.transfer_done.discard(rid)
            del self.job_bits[rid]
            ready = kv_ready_s(now, now + last_s, now, self.rtt_s)
            self.transfer[rid & self.mask] = ready - now
            heappush(self.heap, (ready, KV_READY, rid))
        else:
            self.prefill_ended[rid] = (now, now + last_s)
        if self.gated:
            self._start_waiting(now)  # its server is free

    # -- the link -----------------------------------------------------------------------------
    def _on_transfer_join(self, now: float, rid: int) -> None:
        """A remote request's first layer is done: its transfer joins the link (once its decode
        memory is reserved, if the profile reserves at transfer start)."""
        if self.staging is not None and self.staging.reserve_at == "transfer_start" and not self._try_reserve(now, rid):
            self.waiting_join.add(rid)
            self.reserve_fifo.append((rid, True))
            return
        self._join_link(now, rid)

    def _join_link(self, now: float, rid: int) -> None:
        """A remote request's transfer joins the link (the link's next completion changes)."""
        self.link_done_s = done = self.link.join(now, self.job_bits[rid], rid)
        if done < _INF:
            self.events += 1

    def _on_link_done(self, now: float) -> float:
        """The earliest transfer finishes (with any due at the same virtual time): the KV of a
        request whose prefill has ended is ready. Returns the link's next completion."""
        prefill_ended = self.prefill_ended
        due, self.link_done_s = self.link.pop_due(now)
        for rid in due:
            ended = prefill_ended.pop(rid, None)
            if ended is None:
                self.transfer_done.add(rid)  # prefill still running
            else:
                prefill_end_s, min_ready_s = ended
                del self.job_bits[rid]
                ready = kv_ready_s(prefill_end_s, min_ready_s, now, self.rtt_s)
                self.transfer[rid & self.mask] = ready - prefill_end_s
                heappush(self.heap, (ready, KV_READY, rid))
        if self.link_done_s < _INF:  # (_reschedule_link, done by pop_due)
            self.events += 1
        return self.link_done_s

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
        prefill ended): give it the earliest free decode slot (FCFS over slots); it holds it for
        its output tokens x the decode step, and its first token comes one step after it starts."""
        slots = self.slots if self.decode_slots is None else min(self.decode_slots, key=_earliest_slot)
        free = slots[0]
        start = free if free > now else now
        j = rid & self.mask
        step_s = self.step_s
        end = start + self.ring_decode_s[j]
        heapreplace(slots, end)
        heappush(self.decode_ends, end)
        if start > now:
            heappush(self.decode_waiting, start)
        self.decode_wait[j] = start - now
        self.ttft[j] = start + step_s - self.ring_arrival[j]
        self.end[j] = end

    # -- staging memory and the transfer buffer ------------------------------------------------
    def _try_reserve(self, now: float, rid: int) -> bool:
        """Reserve ``rid``'s prompt KV on the decode instance with the most free memory, if it fits
        there (an instance holding nothing takes any one); False: it waits for memory."""
        used = self.dec_used
        i = min(range(len(used)), key=used.__getitem__)
        need = self.need[rid]
        if used[i] > 0 and used[i] + need > self.staging.memory_bytes:
            return False
        del self.need[rid]
        used[i] += need
        self.dec_of[rid], self.staged_of[rid] = i, need
        self._held_change(now, need)
        return True

    def _memory_freed(self, now: float) -> None:
        """Decode memory was freed: serve the waiting reservations, FCFS (transfers that wait to
        join the link, local requests that wait to hand over), then the gated prefill pools."""
        fifo = self.reserve_fifo
        while fifo and self._try_reserve(now, fifo[0][0]):
            rid, remote = fifo.popleft()
            if remote:
                self.waiting_join.discard(rid)
                self._join_link(now, rid)
            else:
                self._decode_ready(now, rid)
        self._start_waiting(now)

    def _held_change(self, now: float, delta: float) -> None:
        """Staged bytes change by ``delta``: integrate what was held up to ``now`` (within the horizon)."""
        t = now if now < self.horizon_s else self.horizon_s
        if t > self.held_last_s:
            self.held_area += self.held * (t - self.held_last_s)
            self.held_last_s = t
        self.held += delta

    def _on_kv_ready(self, now: float, rid: int) -> None:
        """A remote request's KV is ready (staging or buffer mode): its buffer space is free (the
        next remote prefills may start) and it asks for decode admission."""
        if self.buffer_bytes is not None:
            self.buffer_used -= self.buffer_of.pop(rid)
        if self.staging is None:
            self._admit_decode(now, rid)
            self._start_waiting(now)
        else:
            self._decode_ready(now, rid)
            self._memory_freed(now)

    def _decode_ready(self, now: float, rid: int) -> None:
        """Staging mode: ``rid``'s KV is on its decode instance (one is chosen now if it reserved
        nothing): it queues there for admission."""
        i = self.dec_of.get(rid)
        if i is None:
            used = self.dec_used
            self.dec_of[rid] = i = min(range(len(used)), key=used.__getitem__)
        self.need.pop(rid, None)
        self.ready_at[rid] = now
        self.dec_queue[i].append(rid)
        self._admit_staged(now, i)

    def _admit_staged(self, now: float, i: int) -> None:
        """Admit instance ``i``'s queued requests, FCFS, while it has a slot and memory: a request
        trades its staged bytes for a running request's (an idle instance takes one whatever)."""
        st, queue, used, slots = self.staging, self.dec_queue[i], self.dec_used, self.setup.decode_batch_max
        while queue and self.dec_running[i] < slots:
            rid = queue[0]
            staged = self.staged_of.get(rid, 0.0)
            if self.dec_running[i] and used[i] - staged + st.running_bytes > st.memory_bytes:
                return
            queue.popleft()
            self.staged_of.pop(rid, None)
            used[i] += st.running_bytes - staged
            self.dec_running[i] += 1
            if staged:
                self._held_change(now, -staged)
            j = rid & self.mask
            end = now + self.ring_decode_s[j]
            heappush(self.heap, (end, DECODE_END, rid))
            heappush(self.decode_ends, end)
            self.decode_wait[j] = now - self.ready_at.pop(rid)
            self.ttft[j] = now + self.step_s - self.ring_arrival[j]
            self.end[j] = end

    def _on_decode_end(self, now: float, rid: int) -> None:
        """Staging mode: ``rid``'s last token: its slot and memory are free."""
        i = self.dec_of.pop(rid)
        self.dec_running[i] -= 1
        self.dec_used[i] -= self.staging.running_bytes
        self._admit_staged(now, i)
        self._memory_freed(now)

    def staging_figures(self) -> dict[str, float]:
        """Held decode memory (staged bytes per decode GPU, averaged over the PD-D instances) over
        the arrival window: its time mean, P50 and P99 of the per-tick samples, in GiB and as a
        fraction of the cache memory; empty without staging."""
        st = self.staging
        if st is None:
            return {}
        self._held_change(self.horizon_s, 0.0)
        n_d = len(self.dec_used)
        mean = self.held_area / self.horizon_s / n_d if self.horizon_s > 0 else math.nan
        samples = np.asarray(self.held_samples, dtype=float)
        p50, p99 = (np.quantile(samples, [0.5, 0.99]) if samples.size else (math.nan, math.nan))
        return {"held_decode_gib_mean": mean / GIB_BYTES, "held_decode_gib_p50": float(p50) / GIB_BYTES,
                "held_decode_gib_p99": float(p99) / GIB_BYTES, "held_decode_fraction_mean": mean / st.memory_bytes}

    # -- sampling -----------------------------------------------------------------------------
    def _on_sampling_tick(self, now: float) -> float:
        """Every ``policy.period_s``: the long-term rule's turn, one time-series row, then the
        short-term rule's turn. The row keeps the link's running counters, which
        :meth:`_flush_ticks` turns into the columns, vectorised, a chunk of rows at a time.
        Returns when the next tick is (inf: none)."""
        if self.rebalances:
            self.scheduler.on_period(now, self)
        link = self.link
        link.advance(now)
        # drop the start (end) times that have passed: what is left is still ahead
        remote_waiting, local_waiting, decode_waiting, decode_ends = self.queues
        while remote_waiting and remote_waiting[0] <= now:
            heappop(remote_waiting)
        while local_waiting and local_waiting[0] <= now:
            heappop(local_waiting)
        while decode_waiting and decode_waiting[0] <= now:
            heappop(decode_waiting)
        while decode_ends and decode_ends[0] <= now:
            heappop(decode_ends)
        if self.staging is None:
            decode_queue, admitted = len(decode_waiting), len(decode_ends)
        else:
            decode_queue = sum(map(len, self.dec_queue))
            admitted = len(decode_ends) + decode_queue
            self.held_samples.append(self.held / len(self.dec_used))
        remote_queue, local_queue = len(remote_waiting), len(local_waiting)
        if self.gated:  # and the prefills waiting for memory
            remote_queue += len(self.remote_fifo)
            local_queue += len(self.local_fifo)
        n_pd_p = len(self.local_servers)
        threshold = self._adapt(remote_queue, local_queue, n_pd_p) if self.adapts else self.fixed_threshold
        ticks = self.ticks
        ticks.extend((now, link.bits_sent, link.capacity_time, self.bits_routed, link.n, remote_queue, local_queue,
                      decode_queue, admitted, threshold, n_pd_p,
                      len(self.decode_slots) if self.rebalances else self.setup.n_pd_d))
        if len(ticks) >= _TICK_FIELDS * TIMESERIES_CHUNK_ROWS:
            self._flush_ticks()
        next_tick_s = now + self.period_s
        self.next_tick_s = next_tick_s = next_tick_s if next_tick_s <= self.horizon_s else _INF
        return next_tick_s

    def _adapt(self, remote_queue: int, local_queue: int, n_pd_p: int) -> float:
        """The short-term rule's turn at a tick, on this period's egress demand (KV bits routed over
        the bit-capacity offered); returns the threshold t it leaves (tokens)."""
        link, scheduler = self.link, self.scheduler
        offered = link.capacity_time - self.last_capacity_time
        demand = (self.bits_routed - self.last_bits_routed) / offered if offered > 0 else 0.0
        self.last_capacity_time, self.last_bits_routed = link.capacity_time, self.bits_routed
        scheduler.adapt(demand, remote_queue, local_queue, n_pd_p)
        return scheduler.threshold_tokens()

    def _on_plain_tick(self, now: float) -> float:
        """:meth:`_on_sampling_tick` of a plain run (no rule's turn, no memory): the row records the
        link's counters and the lengths of the decode queues' logs; :meth:`_settle_ticks` adds the rest."""
        link = self.link
        link.advance(now)
        ticks = self.ticks
        decode, ends = self.tallies.logs
        ticks.extend((now, link.bits_sent, link.capacity_time, link.n, len(decode), len(ends)))
        if len(ticks) >= self.tick_limit:
            self._flush_ticks(now)
        next_tick_s = now + self.period_s
        self.next_tick_s = next_tick_s = next_tick_s if next_tick_s <= self.horizon_s else _INF
        return next_tick_s

    def _settle_ticks(self, now: float) -> None:
        """Plain runs: the rows ticked so far (none after ``now``) as :meth:`_on_sampling_tick` records
        them, the bits routed and queue lengths counted from the logs (:mod:`sim.tallies`), which
        keep only the times after ``now``."""
        ticked = np.array(self.ticks, dtype=np.float64).reshape(-1, _PLAIN_TICK_FIELDS)
        self.ticks = []
        times_s = ticked[:, 0]
        rows = np.empty((len(ticked), _TICK_FIELDS))
        rows[:, 0:3], rows[:, 4] = ticked[:, 0:3], ticked[:, 3]
        rows[:, 3] = self.routed_bits.at(times_s, now)
        for q, spans in enumerate(self.prefill_spans):
            rows[:, 5 + q] = spans.counts(times_s, now)
        rows[:, 7:9] = self.tallies.settle(ticked[:, 4:6], times_s, now)
        rows[:, 9:12] = self.fixed_threshold, len(self.local_servers), self.setup.n_pd_d
        if len(rows):
            self.tick_blocks.append(rows)
            self.tick_limit -= ticked.size

    def _flush_ticks(self, now: float = _INF) -> None:
        """Hand the rows gathered so far (up to ``now``) to the sink as :data:`outputs.TIMESERIES_COLUMNS`: each
        period's bits sent, bit-capacity offered and bits routed are differences of the running
        counters (the same subtractions and divisions, elementwise, as one row at a time)."""
        if self.plain:
            self._settle_ticks(now)
            blocks, self.tick_blocks = self.tick_blocks, []
            self.tick_limit = _PLAIN_TICK_FIELDS * TIMESERIES_CHUNK_ROWS
            if not blocks:
                return
            raw = blocks[0] if len(blocks) == 1 else np.vstack(blocks)
        else:
            if not self.ticks:
                return
            raw = np.array(self.ticks, dtype=np.float64).reshape(-1, _TICK_FIELDS)
            self.ticks = []
        counters = np.vstack([self.last_counters, raw[:, 1:4]])
        self.last_counters = counters[-1]
        sent, offered, routed = np.diff(counters, axis=0).T
        some = offered > 0  # (none offered: utilisation and demand 0)
        util = np.divide(sent, offered, out=np.zeros_like(sent), where=some)
        demand = np.divide(routed, offered, out=np.zeros_like(sent), where=some)
        period_s, decode_queue, admitted, n_pd_d = self.period_s, raw[:, 7], raw[:, 8], raw[:, 11]
        self.sink.add_timeseries(dict(zip(TIMESERIES_COLUMNS, (
            raw[:, 0], sent / period_s / GBPS_BITS_PER_S, util, demand, offered / period_s / GBPS_BITS_PER_S, raw[:, 4],
            raw[:, 5], raw[:, 6], decode_queue, np.maximum(admitted - decode_queue, 0),  # busy: admitted, not waiting
            n_pd_d * self.setup.decode_batch_max, raw[:, 9], raw[:, 10], n_pd_d))))

    @property
    def role_changes(self) -> list[tuple[float, int, int]]:
        """(time_s, n_pd_p, n_pd_d) after each move of the rebalancer."""
        return self.scheduler.role_changes


def run_engine(setup: Setup, arr: Arrivals | Source, policy: Policy, link_events: Sequence[LinkEvent],
               horizon_s: float, rng: np.random.Generator | None, progress: Callable[[float], None] | None = None,
               sink: Sink | None = None) -> Engine:
    """Run the engine on in-memory arrivals (route_u drawn from ``rng``) or a source; with no sink,
    every record is kept in memory (``engine.frames``: requests, timeseries, frames built on first access)."""
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
