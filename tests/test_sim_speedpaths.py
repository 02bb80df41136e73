"""The simulator's counting shortcuts against counting one by one: a plain run's prefill queues
and bits routed at the ticks (sim.tallies.Spans, Running), its stream of prefill events beside
the heap where many events fall at the same time, and a t-digest built only once a stream holds
two values."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from fastdigest import TDigest

import prfaas_plan as pp
from prfaas_plan.sim import Engine, Policy, Setup, arrivals
from prfaas_plan.sim.outputs import Sink
from prfaas_plan.sim.result import Quantiles
from prfaas_plan.sim.tallies import Running, Spans


def _settle_points(rng: np.random.Generator, ticks: np.ndarray) -> list[tuple[np.ndarray, float]]:
    """The ticks cut into consecutive batches, each settled at a time between its last tick and the next."""
    cuts = np.sort(rng.choice(np.arange(1, len(ticks)), size=5, replace=False))
    batches = np.split(ticks, cuts)
    out = []
    for k, batch in enumerate(batches):
        nxt = batches[k + 1][0] if k + 1 < len(batches) else np.inf
        out.append((batch, float(batch[-1]) if not np.isfinite(nxt) else float(rng.uniform(batch[-1], nxt))))
    return out


@pytest.mark.parametrize("seed", range(3))
def test_spans_count_the_entries_in_before_a_tick_and_out_after_it(seed):
    """Entries added a chunk at a time, counted at ticks settled in batches (times on a grid, so
    that entries join and leave at tick times too) against counting each tick's entries."""
    rng = np.random.default_rng(seed)
    ins = np.sort(rng.integers(0, 400, 600)).astype(float)
    outs = ins + rng.integers(1, 30, 600)
    ticks = np.sort(rng.choice(np.arange(0.0, 450.0), size=200, replace=False))
    spans, got, added = Spans(), [], 0
    for batch, now in _settle_points(rng, ticks):
        while added < len(ins) and ins[added] <= now + 40:  # entries known a while ahead of the counts
            spans.add(ins[added:added + 50], outs[added:added + 50])
            added += 50
        got += spans.counts(batch, now).tolist()
    expected = [int(((ins < t) & (outs > t)).sum()) for t in ticks]
    assert got == expected and max(expected) > 5 and min(expected) == 0


def test_running_totals_are_the_sum_in_order_before_each_tick():
    """A running total of awkward floats (steps a chunk at a time, several at one time) at ticks
    against Python's sum in order, bit for bit."""
    rng = np.random.default_rng(7)
    times = np.sort(rng.integers(0, 300, 500)).astype(float)
    steps = rng.lognormal(20, 2, 500)
    totals = np.cumsum(steps)
    ticks = np.concatenate(([0.0], np.sort(rng.choice(np.arange(1.0, 320.0), size=150, replace=False))))
    running, got, added = Running(), [], 0
    for batch, now in _settle_points(rng, ticks):
        while added < len(times) and times[added] <= now + 20:
            running.add(times[added:added + 64], totals[added:added + 64])
            added += 64
        got += running.at(batch, now).tolist()
    expected = []
    for t in ticks:
        total = 0.0
        for step in steps[times < t].tolist():
            total += step
        expected.append(total)
    assert got == expected and expected[0] == 0.0


def _digest_quantiles(batches: list[np.ndarray]) -> list[float]:
    d = TDigest()
    for batch in batches:
        d.batch_update(batch)
    return [float(min(max(d.quantile(q), d.min()), d.max())) for q in (0.1, 0.5, 0.9, 0.99)]


@pytest.mark.parametrize("shape", ["one value", "one value, then others", "others from the start"])
def test_a_digest_built_late_is_the_digest_of_every_batch(shape):
    """Quantiles without a digest while every value is the first: a stream of one value gives
    it, and once another comes, the digest the batches would have built (NaNs skipped)."""
    rng = np.random.default_rng(1)
    same = np.full(3_000, 0.0123)
    same[::7] = np.nan
    other = rng.lognormal(-4, 0.5, 2_000)
    batches = {"one value": [same, same[:100]], "one value, then others": [same, same[:5], other, same],
               "others from the start": [other, same]}[shape]
    q = Quantiles(exact=False)
    for batch in batches:
        q.add(batch)
    finite = [b[np.isfinite(b)] for b in batches]
    assert q.count == sum(map(len, finite))
    got = [q.quantile(p) for p in (0.1, 0.5, 0.9, 0.99)]
    assert got == _digest_quantiles(finite)
    assert (got == [0.0123] * 4) == (shape == "one value")


@pytest.mark.parametrize("one_layer", [False, True])
def test_the_plain_loop_orders_simultaneous_events_as_the_heap_does(one_layer):
    """Arrivals at whole seconds (many at once, at the ticks too) with a few prompt lengths, so
    that prefills start and end at the same times, long outputs (decode slots contended: the order
    of equal times matters), chunks of 32 (the stream merged often), a link drop (transfers outlast
    prefills); one layer: a transfer joins as its prefill ends. The plain loop makes the general loop's run
    (and a request of no output token holds its decode slot one step, as one of one token does)."""
    sc = pp.load_scenario("paper-case-study")
    res = pp.plan(sc)
    setup = Setup.from_plan(res, sc)
    if one_layer:
        setup = replace(setup, n_layers=1)
    rng = np.random.default_rng(3)
    n = 1_500
    arrival_s = np.sort(rng.integers(0, 300, n)).astype(float)
    inputs = rng.choice([2_000, 8_000, 30_000, 60_000], n).astype(np.int64)
    outputs = rng.choice([0, 1, 3_000, 6_000], n).astype(np.int64)
    runs = []
    for plain in (True, False):
        source = arrivals.chunked(arrivals.Arrivals(arrival_s, inputs, outputs), 300.0, np.random.default_rng(4), 32)
        reports: list[float] = []
        eng = Engine(setup, source, Policy(), [(100.0, 160.0, 5.0)], Sink(), progress=reports.append)
        assert eng.plain
        eng.plain = plain
        eng.run()
        runs.append((eng.sink.close(), eng.events, reports))
    (requests, timeseries), events, reports = runs[0]
    (other_requests, other_timeseries), other_events, other_reports = runs[1]
    assert requests.path.nunique() == 2 and (requests.wait_s > 0).mean() > 0.1  # both paths; prefill queues
    assert (requests.transfer_s > 1.0).any() and (timeseries.remote_queue > 0).any()
    assert (requests.decode_wait_s > 0).mean() > 0.3
    short = requests[requests.output_tokens <= 1]  # no output token still takes one decode step
    np.testing.assert_allclose(short.end_s, short.arrival_s + short.ttft_s, rtol=1e-12)
    assert requests.duplicated(["arrival_s", "input_tokens", "path"]).sum() > 100  # same-time twins
    pd.testing.assert_frame_equal(other_requests, requests, check_exact=True)
    pd.testing.assert_frame_equal(other_timeseries, timeseries, check_exact=True)
    assert (other_events, other_reports) == (events, reports) and len(reports) == 101
