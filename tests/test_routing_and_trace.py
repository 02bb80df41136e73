"""One trace, one plan, in every command; and the plan says how it routes when no threshold does."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import prfaas_plan as pp
from prfaas_plan.scenario import Scenario

TRACE = Path(__file__).parent / "fixtures" / "traces" / "mooncake_conversation_rows4183-4212.jsonl"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "prfaas_plan.cli", *args], capture_output=True, text=True, timeout=300)


def _deployment(stdout: str) -> tuple[str, ...]:
    """The routing and instance counts a command printed (``t = ... PrfaaS a + PD-P b + PD-D c``)."""
    m = re.search(r"(t = [\d,]+ tokens \(offload \d+%\)|no offload|not a threshold).*?"
                  r"PrfaaS (\d+) \+ PD-P (\d+) \+ PD-D (\d+)", stdout)
    assert m, stdout
    return m.groups()


def test_plan_and_simulate_plan_one_deployment_for_one_trace(tmp_path):
    out = tmp_path / "plan.json"
    planned = run("plan", "paper-case-study", "--trace", str(TRACE), "-o", str(out))
    simulated = run("simulate", "paper-case-study", "--trace", str(TRACE))
    assert planned.returncode == 0 and simulated.returncode == 0, planned.stderr + simulated.stderr
    assert _deployment(planned.stdout) == _deployment(simulated.stdout)
    # the output length is the trace's own mean, and the plan says so
    mean_out = float(pd.read_json(TRACE, lines=True)["output_length"].mean())
    assert "the trace's mean output length" in planned.stdout
    assert f"L_out {mean_out:,.0f} tokens" in planned.stdout
    doc = json.loads(out.read_text())
    assert doc["scenario"]["workload"]["output_tokens"] is None


def test_report_plans_the_trace_like_plan_does():
    sc = pp.load_scenario("paper-case-study").with_trace(TRACE)
    res = pp.plan(sc)
    mean_out = float(pd.read_json(TRACE, lines=True)["output_length"].mean())
    assert res.inputs.output_tokens == mean_out
    assert sc.output_tokens_source == "the trace's mean output length"


def _quick_plan(link_gbps: float):
    return pp.plan(Scenario.quick("mimo-v2-flash", ("h200", 32), ("h20", 64), link_gbps))


def test_per_bucket_routing_is_described_not_called_a_threshold():
    res = _quick_plan(30.0)  # a link where the plan splits buckets (at 25 Gbps it is a threshold)
    p = res.plan
    assert not p.is_threshold and p.routing_kind == "per-bucket"
    bands = p.offload_bands()
    # the bands cover every bucket, and their probability-weighted shares add up to the offload fraction
    r = p.routing
    weighted = sum(r.prob[(r.tokens >= lo) & (r.tokens <= hi)].sum() * share for lo, hi, share in bands)
    assert abs(weighted - p.offload_fraction) < 1e-3
    assert any(0 < share < 1 for _, _, share in bands)
    # offload shares that fall and rise again: more than one offloaded band, no single t
    offloaded = [b for b in bands if b[2] > 0]
    assert len(offloaded) >= 2
    cli = run("plan", "--model", "mimo-v2-flash", "--prfaas", "h200:32", "--local", "h20:64", "--link-gbps", "30")
    assert cli.returncode == 0, cli.stderr
    assert "not a threshold" in cli.stdout
    assert f"{p.threshold_tokens:,.0f} tokens (offload" not in cli.stdout


def test_a_dead_link_offloads_nothing_in_both_modes():
    for mode in ("exact", "paper"):
        cli = run("plan", "--model", "mimo-v2-flash", "--prfaas", "h200:32", "--local", "h20:64",
                  "--link-gbps", "0", "--mode", mode)
        assert cli.returncode == 0, cli.stderr
        assert "no offload" in cli.stdout and "t = 0" not in cli.stdout
    # paper mode's all-local plan is Eq. 6 with p = 0: min(N_p / T_local(E[L]), N_d * decode rate)
    res = pp.plan(Scenario.quick("mimo-v2-flash", ("h200", 32), ("h20", 64), 0.0), mode="paper")
    inp = res.inputs
    n = inp.n_local
    best = max(min(n_p / float(inp.t_local(inp.mean_tokens)), (n - n_p) * inp.decode_rps_per_instance)
               for n_p in range(n))
    assert res.plan.threshold_tokens is None and res.plan.egress_gbps == 0
    assert np.isclose(res.lambda_max_rps, best, rtol=1e-9)


def test_split_buckets_time_each_distinct_length_once_with_the_same_floats():
    """split_cache_buckets evaluates the length functions once per distinct length: bit for bit
    what evaluating them on every request gives (the kernel model of the local H20s, transferred
    from H200 tables, and the PrfaaS side's measured profile), here on lengths with repeats, a
    chunked-prefill multiple, a single token and lengths past every grid."""
    from prfaas_plan.planner.inputs import _per_length, plan_inputs, split_cache_buckets

    sc = pp.load_scenario("paper-case-study").with_trace(TRACE, None)
    inp = plan_inputs(sc)
    tokens = np.array([1, 8192, 8192, 300, 16384, 8193, 300, 250_000, 1, 4097.0])
    fns = (inp.t_local, inp.t_remote, inp.kv_bytes)
    for fn, spread in zip(fns, _per_length(fns, tokens)):
        assert spread.tobytes() == fn(tokens).tobytes()
    # and the buckets equal those built from per-request evaluations
    replay = pp.workload.split_cache_replay(inp.trace, None, 2000.0)
    local, remote = replay.local_uncached_tokens.astype(float), replay.remote_uncached_tokens.astype(float)
    b = split_cache_buckets(inp, 2000.0, 4)
    groups = [g for g in np.array_split(np.argsort(local, kind="stable"), 4) if g.size]
    for got, values in ((b.t_local_s, inp.t_local(local)), (b.t_remote_s, inp.t_remote(remote)),
                        (b.kv_bytes, inp.kv_bytes(remote)), (b.tokens, local)):
        assert got.tobytes() == np.array([values[g].mean() for g in groups]).tobytes()


def test_the_planner_replays_the_trace_prepared_for_its_workload():
    """plan_inputs hands the split replays the TraceBlocks the shared replay was made on (one
    preparation per plan), of the very frame the plan and the simulator replay."""
    from prfaas_plan.planner.inputs import plan_inputs

    inp = plan_inputs(pp.load_scenario("paper-case-study").with_trace(TRACE, None))
    assert inp.blocks is not None and inp.trace_blocks is inp.blocks and inp.blocks.trace is inp.trace


def test_simulate_spares_the_collector_its_set_up_and_then_restores_it():
    """The simulate command pauses the cyclic collector over its set-up and freezes what it made
    for the simulation; afterwards, also after an error, the collector is as it was, nothing frozen."""
    import gc

    from prfaas_plan.cli import main
    from prfaas_plan.cli.simulating import _collector_spared

    frozen_before = gc.get_freeze_count()
    with _collector_spared() as set_up_done:
        assert not gc.isenabled()
        kept = [[i] for i in range(1000)]
        set_up_done()
        assert gc.isenabled() and gc.get_freeze_count() >= frozen_before + len(kept)
    assert gc.isenabled() and gc.get_freeze_count() == 0
    for args, code in ((("--duration", "-1"), 2), (("--trace", str(TRACE)), 0)):
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            try:
                with pytest.raises(SystemExit) as exit_:
                    main(["simulate", "paper-case-study", *args])
                assert exit_.value.code == code
                assert gc.isenabled() == enabled and gc.get_freeze_count() == 0
            finally:
                gc.enable()


def test_a_trace_scenario_simulates_its_own_trace():
    """A scenario whose workload is a trace replays that trace when no arrivals are given: the
    trace's 30 requests, at its timestamps (ms -> s, from 0) with its prompt lengths, not Poisson
    arrivals at the plan's load."""
    sc = pp.load_scenario("paper-case-study").with_trace(TRACE)
    sim = pp.simulate(sc, pp.plan(sc), seed=0)
    trace = pd.read_json(TRACE, lines=True)
    got = sim.requests.sort_values("arrival_s", kind="stable")
    assert len(got) == len(trace) == 30
    np.testing.assert_allclose(got.arrival_s.to_numpy(), (trace.timestamp - trace.timestamp.min()).to_numpy() / 1e3)
    assert sorted(got.input_tokens.tolist()) == sorted(trace.input_length.tolist())
