"""The engine's fast paths agree with the general ones: the fixed policy routes a chunk up front
(numpy), the adaptive ones request by request (bisect), and with nothing to adapt they must make
the same run; the token tables give the time functions' values; a plain run's own loop and its
one heap of decode slots are the general loop on a heap per instance."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

import prfaas_plan as pp
from prfaas_plan.planner import Buckets
from prfaas_plan.sim import Engine, Policy, Routing, Setup, arrivals, engine, simulate, tables
from prfaas_plan.sim.arrivals import source_for
from prfaas_plan.sim.outputs import Sink
from prfaas_plan.sim.params import bucket_upper_edges
from prfaas_plan.sim.policies import scheduler_for
from prfaas_plan.sim.tables import TokenTable, cached_lengths
from prfaas_plan.workload import EmpiricalLengths, TruncatedLogNormal


def test_chunk_routing_equals_request_routing():
    """Routing.offload_probabilities (one searchsorted) against offload_probability (bisect) at
    every bucket edge, one token either side of it, and random lengths."""
    sc = pp.load_scenario("paper-case-study")
    routing = Setup.from_plan(pp.plan(sc), sc).routing
    edges = np.asarray(routing.edges_tokens)
    tokens = np.concatenate([np.floor(edges[np.isfinite(edges)]) + d for d in (-1, 0, 1)])
    tokens = np.concatenate([tokens, np.random.default_rng(0).integers(1, 200_000, 5_000)]).astype(np.int64)
    tokens = tokens[tokens > 0]
    one_by_one = [routing.offload_probability(t) for t in tokens.tolist()]
    np.testing.assert_array_equal(routing.offload_probabilities(tokens), one_by_one)
    assert len(set(one_by_one)) > 2  # the plan has local, remote and partial buckets
    assert Routing.threshold(100.0).offload_probabilities(np.array([99, 100, 101])).tolist() == [0.0, 0.0, 1.0]


def _buckets_of(lengths, n: int) -> Buckets:
    tokens, probs = lengths.buckets(n)
    zeros = np.zeros(len(tokens))
    return Buckets(np.asarray(tokens, float), np.asarray(probs, float), zeros, zeros, zeros)


def _own_bucket(edges_tokens: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """The bucket a routing length falls in, as the simulator's router finds it."""
    routing = Routing(tuple(edges_tokens.tolist()), tuple(float(k) for k in range(len(edges_tokens))), None)
    return routing.offload_probabilities(tokens).astype(int)


def test_a_lognormals_bucket_edges_hold_its_cumulative_bucket_mass():
    lengths = TruncatedLogNormal(mu=math.log(8000), sigma=1.2, min_tokens=100, max_tokens=128_000)
    buckets = _buckets_of(lengths, 12)
    edges = bucket_upper_edges(lengths, buckets)
    # P(L <= edge_k) is the mass of buckets 0..k: the edges are the planner's own bucket bounds
    np.testing.assert_allclose(1.0 - lengths.tail_prob(edges), np.cumsum(buckets.probs), atol=1e-12)
    assert edges[-1] == 128_000
    assert _own_bucket(edges, buckets.tokens).tolist() == list(range(12))


def test_an_empirical_samples_bucket_edges_are_each_buckets_longest_length():
    sample = np.array([5, 5, 5, 7, 9, 9, 12, 40, 40, 40, 41, 300, 300, 2000, 2000, 2000, 2001, 9000])
    lengths = EmpiricalLengths(sample)
    buckets = _buckets_of(lengths, 5)
    edges = bucket_upper_edges(lengths, buckets)
    below = np.array([np.mean(sample <= e) for e in edges])
    np.testing.assert_allclose(below, np.cumsum(buckets.probs))
    assert set(edges.tolist()) <= set(sample.tolist())  # a bucket ends at a sampled length
    assert _own_bucket(edges, buckets.tokens).tolist() == list(range(len(buckets.tokens)))
    assert _own_bucket(edges, sample).tolist() == sorted(_own_bucket(edges, sample).tolist())


def test_a_distribution_of_unknown_kind_splits_its_buckets_halfway():
    buckets = Buckets(np.array([100.0, 1000.0, 5000.0]), np.array([0.5, 0.3, 0.2]), *[np.zeros(3)] * 3)
    edges = bucket_upper_edges(object(), buckets)  # neither log-spaced edges nor a sample
    assert edges.tolist() == [550.0, 3000.0, math.inf]
    assert _own_bucket(edges, np.array([100, 550, 551, 3000, 3001, 1e9])).tolist() == [0, 0, 1, 1, 2, 2]


def test_a_short_policy_that_never_adapts_is_the_fixed_policy():
    """Levels no run reaches: the short-term rule never moves t, so its request-by-request routing
    must give the fixed policy's run, record for record."""
    sc = pp.load_scenario("paper-case-study")
    res = pp.plan(sc)
    calm = Policy("short", high=1e9, low=0.0, queue_high=1e9, queue_low=0.0, local_queue_high=1e9)
    fixed = simulate(sc, res, load=0.8, duration_s=600, seed=2)
    short = simulate(sc, res, load=0.8, duration_s=600, seed=2, policy=calm)
    assert 0.2 < (fixed.requests.path == "prfaas").mean() < 0.8
    pd.testing.assert_frame_equal(short.requests, fixed.requests, check_exact=True)
    pd.testing.assert_frame_equal(short.timeseries, fixed.timeseries, check_exact=True)
    assert short.info["events"] == fixed.info["events"]
    # the fixed policy's ticks skip the short-term rule and record the plan's t (the planner's number)
    assert len(fixed.timeseries) == 600 and (fixed.timeseries.threshold_tokens == res.threshold_tokens).all()


@pytest.mark.parametrize("policy", ["fixed", "short"])
def test_a_plan_without_pd_p_sends_everything_to_prfaas(policy):
    """One prefill pool: both routing paths send every request to it."""
    sc = pp.load_scenario("paper-case-study")
    res = pp.plan(sc)
    lone = replace(Setup.from_plan(res, sc), n_pd_p=0)
    scheduler = scheduler_for(Policy(policy), lone)
    u = np.random.default_rng(1).random(50)
    tokens = np.full(50, 100, dtype=np.int64)
    planned = scheduler.planned_offloads(tokens, u)
    assert all(scheduler.offloads(100, 100, x) for x in u.tolist())
    assert planned is None or planned.tolist() == [True] * 50


def test_token_tables_give_the_time_functions_own_values():
    """The tables evaluate each distinct length once, and give, bit for bit, what the plan's time
    functions (the kernel model: elementwise numpy) give on each chunk's lengths directly."""
    sc = pp.load_scenario("paper-case-study")
    setup = Setup.from_plan(pp.plan(sc), sc)
    asked = []

    def t_local(tokens):
        asked.append(np.asarray(tokens).copy())
        return setup.t_local(tokens)

    table = TokenTable(setup.t_remote, t_local, setup.kv_bytes)
    rng = np.random.default_rng(3)
    chunks = [np.maximum(np.asarray(setup.lengths.sample(n, rng), dtype=np.int64), 1) for n in (3000, 2000, 500)]
    for tokens in chunks:
        for got, fn in zip(table.at(tokens), (setup.t_remote, setup.t_local, setup.kv_bytes)):
            np.testing.assert_array_equal(got.view(np.int64), np.asarray(fn(tokens.astype(float)), float).view(np.int64))
    every = np.concatenate(asked)
    assert every.size == np.unique(every).size == np.unique(np.concatenate(chunks)).size < sum(map(len, chunks))


def test_cached_lengths_lists_every_uncached_length_a_hit_can_leave():
    """Input minus m whole 512-token blocks, at least one token, m up to the request's leading
    blocks that an earlier request holds (all its blocks for ids that are not integers): against
    enumerating them."""
    inputs = np.array([2000, 2000, 600, 1200, 900, 5, 3000])
    ids = [[1, 2, 3], [1, 2, 9], [7], [1, 5], [2, 3], [], [1, 2, 9, 4, 8]]

    def expected(blocks):
        return sorted({max(i - 512 * m, 1) if m else i for i, b in zip(inputs, blocks) for m in range(b + 1)})

    held = [0, 2, 0, 1, 2, 0, 3]  # leading blocks some earlier request holds
    assert cached_lengths(inputs, ids).tolist() == expected(held)
    names = [[f"b{h}" for h in row] for row in ids]
    assert cached_lengths(inputs, names).tolist() == expected([len(row) for row in ids])


@pytest.mark.parametrize(("link_events", "tiny"), [([], False), ([(300.0, 600.0, 5.0)], False), ([(300.0, 600.0, 5.0)], True)])
def test_the_plain_loop_and_one_slot_heap_are_the_general_loop(link_events, tiny, monkeypatch):
    """A plain run's loop (handlers written out, one heap of decode slots, queue lengths counted
    from logs) equals, record for record and event for event, the general loop on one heap and on
    a heap per PD-D instance (as the rebalancer keeps them: the earliest free slot of all is the
    earliest of each instance's earliest), progress reports included; a link drop makes transfers
    outlast their prefills. Tiny chunks: rows handed on 50 at a time, the logs settled at chunk loads too."""
    if tiny:
        monkeypatch.setattr(arrivals, "CHUNK_REQUESTS", 64)
        monkeypatch.setattr(engine, "TIMESERIES_CHUNK_ROWS", 50)
    sc = pp.load_scenario("paper-case-study")
    res = pp.plan(sc)
    setup = Setup.from_plan(res, sc)
    runs = []
    for plain, per_instance in ((True, False), (False, False), (False, True)):
        rng = np.random.default_rng(5)
        source = source_for(setup, sc, res, None, 1.1, 1500.0, None, 1.0, None, rng)
        reports: list[float] = []
        eng = Engine(setup, source, Policy(), link_events, Sink(), progress=reports.append)
        assert eng.plain
        eng.plain = plain
        if per_instance:
            eng.decode_slots = [[0.0] * setup.decode_batch_max for _ in range(setup.n_pd_d)]
        eng.run()
        runs.append((eng.sink.close(), eng.events, reports))
    (requests, timeseries), events, reports = runs[0]
    assert (requests.decode_wait_s > 0).mean() > 0.01  # slots are contended
    assert len(reports) > 100 and reports == sorted(reports) and reports[-1] == 1.0  # each 1% step, then the end
    queues = timeseries[["remote_queue", "local_queue", "decode_queue", "decode_busy"]]
    assert (queues > 0).any().all() and (queues.remote_queue == 0).any()  # every queue both ways
    if link_events:
        assert (timeseries.active_transfers > 20).any() and (requests.transfer_s > 1.0).any()
    for (other_requests, other_timeseries), other_events, other_reports in runs[1:]:
        pd.testing.assert_frame_equal(other_requests, requests, check_exact=True)
        pd.testing.assert_frame_equal(other_timeseries, timeseries, check_exact=True)
        assert (other_events, other_reports) == (events, reports)


def test_distinct_is_numpys_unique():
    """The sort-based distinct counts (numpy's own np.unique hashes, slower) against np.unique."""
    rng = np.random.default_rng(4)
    for values in (rng.integers(0, 300, 2_000), rng.integers(-5, 10**9, 500), np.array([7]), np.array([], np.int64)):
        np.testing.assert_array_equal(tables.distinct(values), np.unique(values))


def test_token_tables_evaluate_very_long_prompts_as_they_come(monkeypatch):
    """A prompt beyond MAX_TABLE_TOKENS skips the table (it would hold every count up to it)."""
    monkeypatch.setattr(tables, "MAX_TABLE_TOKENS", 100)
    table = TokenTable(lambda tokens: 2.0 * tokens)
    assert table.at(np.array([3, 99]))[0].tolist() == [6.0, 198.0] and table.known.size == 100
    assert table.at(np.array([5, 100]))[0].tolist() == [10.0, 200.0] and table.known.size == 100


def test_time_series_rows_handed_on_in_chunks_are_the_rows_of_one(monkeypatch):
    """The rates per period are differences of running counters, carried from one chunk of rows to
    the next: rows handed on 7 at a time equal rows handed on at once."""
    sc = pp.load_scenario("paper-case-study")
    res = pp.plan(sc)
    drop = [(30.0, 60.0, 5.0)]  # a link drop: a backlog, busy and idle periods
    whole = simulate(sc, res, load=1.0, duration_s=120, seed=4, policy="short", link_events=drop).timeseries
    monkeypatch.setattr(engine, "TIMESERIES_CHUNK_ROWS", 7)
    chunked = simulate(sc, res, load=1.0, duration_s=120, seed=4, policy="short", link_events=drop).timeseries
    assert len(whole) == 120 and (whole.link_utilisation > 0.99).any() and (whole.link_utilisation < 0.5).any()
    pd.testing.assert_frame_equal(chunked, whole, check_exact=True)


@pytest.mark.parametrize("seed", range(3))
def test_tallies_count_what_a_heap_popped_at_each_tick_holds(seed):
    """Times logged at events (each later than its event, on a coarse grid so that many equal a
    tick's time), ticks between the events, settles at ticks and between them: the counts are the
    lengths of a heap from which each tick pops the times <= its own (the general loop's way)."""
    import heapq

    from prfaas_plan.sim.tallies import Tallies

    rng = np.random.default_rng(seed)
    tallies, heaps = Tallies(2), ([], [])
    rows, times, expected, got = [], [], [], []
    now = 0.0
    for _ in range(400):
        now += float(rng.integers(0, 3))  # events at equal times too
        if rng.random() < 0.3:  # a tick at ``now``, before the events at ``now``
            for h in heaps:
                while h and h[0] <= now:
                    heapq.heappop(h)
            expected.append([len(h) for h in heaps])
            rows.append([len(log) for log in tallies.logs])
            times.append(now)
        if rng.random() < 0.1:  # settle what was ticked so far (no tick comes before ``now`` again)
            got.extend(tallies.settle(np.array(rows, float).reshape(-1, 2), np.array(times), now).tolist())
            rows, times = [], []
        for q in (0, 1):
            for _ in range(int(rng.integers(0, 3))):
                t = now + float(rng.integers(1, 6))
                heapq.heappush(heaps[q], t)
                tallies.logs[q].append(t)
    got.extend(tallies.settle(np.array(rows, float).reshape(-1, 2), np.array(times), math.inf).tolist())
    assert len(got) == len(expected) > 50 and max(max(e) for e in expected) > 3
    assert got == expected and tallies.size() == 0


def test_skipping_lognormal_lengths_draws_only_their_uniforms():
    """The synthetic source's first pass skips a truncated lognormal's lengths by drawing their
    uniforms only: sample(m) leaves the generator where skip(m) does (the next draws agree)."""
    sc = pp.load_scenario("paper-case-study")
    lengths = Setup.from_plan(pp.plan(sc), sc).lengths  # what the synthetic source samples
    assert type(lengths) is TruncatedLogNormal
    sampled, skipped = np.random.default_rng(9), np.random.default_rng(9)
    for m in (1, 1000, 70_000):
        drawn = lengths.sample(m, sampled)
        lengths.skip(m, skipped)
        assert drawn.size == m and len(set(drawn[:50].tolist())) > min(m, 50) // 2
    np.testing.assert_array_equal(sampled.random(5), skipped.random(5))
