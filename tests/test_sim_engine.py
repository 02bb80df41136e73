"""The engine's two routing paths agree: the fixed policy routes a chunk up front (numpy), the
adaptive ones request by request (bisect); with nothing to adapt they must make the same run."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

import prfaas_plan as pp
from prfaas_plan.sim import Policy, Routing, Setup, simulate
from prfaas_plan.sim.policies import scheduler_for


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
    assert planned is None or planned == [True] * 50
