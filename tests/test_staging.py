"""Staging memory: the decode memory requests hold before their KV arrives (planner fixed point,
simulator reservations and back-pressure) and the PrfaaS transfer buffer, against Little's law,
hand-built deterministic queues and the simulator's own records."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import prfaas_plan as pp
from prfaas_plan.errors import Infeasible, PlanError
from prfaas_plan.handoff import Staging
from prfaas_plan.planner import buckets, held_decode_bytes, plan, plan_exact
from prfaas_plan.planner.staging import buffer_bytes
from prfaas_plan.sim import Arrivals, Policy, Routing, Setup, poisson_times, run_engine, simulate
from prfaas_plan.units import GIB_BYTES
from prfaas_plan.workload import TruncatedLogNormal

STAGING_ON = {"decode.staging_memory": True}


@pytest.fixture(scope="module")
def case():
    sc = pp.load_scenario("paper-case-study")
    on = sc.with_updates(**STAGING_ON)
    return sc, plan(sc), on, plan(on)


def test_staging_off_changes_nothing(case):
    """Default off: no staging inputs or record, and the plan is the one without the switch."""
    sc, res, on, res_on = case
    assert res.inputs.staging is None and res.staging is None and "staging" not in res.json_dict()
    assert res_on.inputs.staging is not None and "staging" in res_on.json_dict()
    assert res_on.inputs.staging.batch_max == res.inputs.decode_batch_max


def test_case_study_fixed_point(case):
    """With staging on, BS_max is the largest batch whose plan's held memory at its own Lambda_max
    leaves room for it: BS* <= floor((M - H(BS*)) / m) and BS* + 1 fails it (re-planned here)."""
    sc, res, on, res_on = case
    rec = res_on.staging["prfaas-pd"]
    inp = res_on.inputs
    st = inp.staging
    bs = inp.decode_batch_max
    assert bs == rec["batch_max"] < rec["batch_max_unstaged"] == 14
    b = buckets(inp)
    held = held_decode_bytes(inp, res_on.plan, res_on.buckets, res_on.lambda_max_rps)
    assert held == pytest.approx(rec["held_bytes_per_gpu"])
    assert bs <= (st.memory_bytes - held) // st.running_bytes
    over = dataclasses.replace(inp, decode_batch_max=bs + 1)
    p_over = plan_exact(over, b)
    assert bs + 1 > (st.memory_bytes - held_decode_bytes(over, p_over, b, p_over.lambda_max_rps)) // st.running_bytes
    # each decode instance loses capacity in proportion to BS_max (the split may move); Lambda_max never rises
    per_instance_on = res_on.plan.stage_rps["pd_d"] / res_on.instances["pd_d"]
    assert per_instance_on == pytest.approx(res.plan.stage_rps["pd_d"] / res.instances["pd_d"] * bs / 14, rel=1e-9)
    assert res_on.lambda_max_rps <= res.lambda_max_rps * (1 + 1e-9)
    assert rec["plans_solved"] <= 1 + int(np.ceil(np.log2(14))) + 1


def test_each_baseline_has_its_own_staging_fixed_point(case):
    """Staging is charged to the baselines too, each at its own Lambda_max: homogeneous PD stages
    every request's KV while its local prefill runs (measured: BS_max 14 -> 11, 1.65 GiB held per decode
    GPU), naive heterogeneous while the remote prefill and transfer run (14 -> 13); each BS_max fits
    beside what its own plan holds at its Lambda_max, and its decode instances lose capacity in
    proportion, so its Lambda_max never rises."""
    _, res, _, res_on = case
    st = res_on.inputs.staging
    for name, p_on in res_on.baselines.items():
        rec, p_off = res_on.staging[name], res.baselines[name]
        bs = rec["batch_max"]
        assert rec["batch_max_unstaged"] == 14 and 1 <= bs < 14
        assert bs <= (st.memory_bytes - rec["held_bytes_per_gpu"]) // st.running_bytes
        per_instance_on = p_on.stage_rps["pd_d"] / p_on.instances["pd_d"]
        assert per_instance_on == pytest.approx(p_off.stage_rps["pd_d"] / p_off.instances["pd_d"] * bs / 14, rel=1e-9)
        assert p_on.lambda_max_rps <= p_off.lambda_max_rps * (1 + 1e-9)
    assert res_on.staging["homogeneous-pd"]["batch_max"] < res_on.staging["naive-heterogeneous"]["batch_max"]


@pytest.mark.parametrize("link_gbps", [100.0, 12.0])
def test_held_decode_bytes_is_littles_law_over_both_paths(case, link_gbps):
    """SGLang's profile reserves decode memory at prefill start, so a request holds its staged
    bytes for its prefill, plus, offloaded, the transfer that layer-wise pipelining does not hide
    (:func:`planner.ttft.unhidden_transfer_s` at the plan's egress): by hand, at Lambda_max per decode
    instance. At 100 Gbps the unhidden transfer is under 7 ms; at 12 Gbps (10.8 usable against 11.9
    Gbps of egress) up to 28 s, and the held bytes grow 4.9x (0.68 -> 3.34 GiB per GPU)."""
    from prfaas_plan.planner.ttft import offload_fractions, unhidden_transfer_s
    from prfaas_plan.units import BITS_PER_BYTE

    _, _, _, res_on = case
    p, b = res_on.plan, res_on.buckets
    inp = dataclasses.replace(res_on.inputs, link_bits_per_s=link_gbps * 1e9 * res_on.scenario.spec.link.efficiency)
    assert inp.staging.reserve_at == "prefill_start"
    rate = p.lambda_max_rps
    f = offload_fractions(p, b)
    handoff_s = unhidden_transfer_s(inp, b, rate * float(np.dot(b.probs * f, BITS_PER_BYTE * b.kv_bytes)))
    hold = f * (b.t_remote_s + handoff_s) + (1 - f) * b.t_local_s
    by_hand = rate * float(np.sum(b.probs * hold * inp.staging.staged_bytes(b.tokens))) / p.instances["pd_d"]
    held = held_decode_bytes(inp, p, b, rate)
    assert held == pytest.approx(by_hand, rel=1e-12)
    without_handoff = rate * float(np.sum(b.probs * (f * b.t_remote_s + (1 - f) * b.t_local_s)
                                          * inp.staging.staged_bytes(b.tokens))) / p.instances["pd_d"]
    if link_gbps == 100.0:
        assert handoff_s.max() < 0.01 and held == pytest.approx(without_handoff, rel=0.01)
    else:
        assert handoff_s.max() > 10 and held > 4 * without_handoff


def test_simulated_held_memory_is_the_planners_littles_law(case):
    """Load 0.8, 6,000 s of Poisson arrivals: the simulator's time-mean held decode memory is the
    planner's Little's-law estimate within 10% (measured -1.3%; seeds 0-2 within 1.5%)."""
    _, _, on, res_on = case
    est_gib = res_on.staging["prfaas-pd"]["held_bytes_per_gpu_at_load"] / GIB_BYTES
    s = simulate(on, res_on, load=0.8, duration_s=6_000, seed=0).summary()
    assert s["held_decode_gib_mean"] == pytest.approx(est_gib, rel=0.10)
    assert 0 < s["held_decode_gib_p50"] < s["held_decode_gib_p99"]
    mem_gib = res_on.inputs.staging.memory_bytes / GIB_BYTES
    assert s["held_decode_gib_p99"] < mem_gib
    assert s["held_decode_fraction_mean"] == pytest.approx(s["held_decode_gib_mean"] / mem_gib)


def test_degraded_link_holds_more_and_back_pressure_bounds_it(case):
    """The same plan on a 10 Gbps link (below its 9.5 Gbps egress at load 0.8 once efficiency is
    applied): transfers crawl, held memory grows severalfold (measured 3.5x), and the reservations
    that wait for memory keep it within what the decode instances have."""
    _, _, on, res_on = case
    base = simulate(on, res_on, load=0.8, duration_s=1_800, seed=0).summary()
    slow = simulate(on, res_on, load=0.8, duration_s=1_800, seed=0, link_events=[(0.0, 1e9, 10.0)]).summary()
    assert slow["held_decode_gib_mean"] > 2.5 * base["held_decode_gib_mean"]
    assert slow["held_decode_gib_p99"] <= res_on.inputs.staging.memory_bytes / GIB_BYTES
    assert slow["ttft_mean_s"] > 3 * base["ttft_mean_s"]


def _hand_setup(memory_bytes: float, reserve_at: str = "prefill_start", **kw) -> Setup:
    """One local pool of 10 servers (prefill 1 s), one decode instance with 3 slots, 5 s decodes
    (1 token x 5 s), every request staging and running one byte."""
    staging = Staging(reserve_at, memory_bytes=memory_bytes, running_bytes=1.0, batch_max=3,
                      staged_bytes=lambda t: np.ones(np.shape(t)))
    base = dict(n_prfaas=0, n_pd_p=10, n_pd_d=1, decode_batch_max=3, decode_step_s=5.0, n_layers=1, rtt_s=0.0,
                link_bits_per_s=1e9, link_efficiency=1.0, t_remote=lambda l: np.ones(np.shape(l)),
                t_local=lambda l: np.ones(np.shape(l)), kv_bytes=lambda l: np.zeros(np.shape(l)),
                routing=Routing.threshold(1e18), lengths=None, output_tokens=1, staging=staging)
    base.update(kw)
    return Setup(**base)


def _run(setup: Setup, rate_rps: float, horizon_s: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    t = poisson_times(rate_rps, 0.0, horizon_s, rng)
    arr = Arrivals(t, np.full(len(t), 100), np.ones(len(t), dtype=np.int64))
    return run_engine(setup, arr, Policy(period_s=1.0), (), horizon_s, rng)


def _max_overlap(start: np.ndarray, end: np.ndarray) -> int:
    """Most intervals open at once (one that ends when another starts does not overlap it; the
    starts are rebuilt as arrival + wait, so a nanosecond of rounding is allowed)."""
    ev = np.r_[start + 1e-9, end]
    d = np.r_[np.ones(start.size), -np.ones(end.size)]
    order = np.lexsort((d, ev))  # an end before a start at the same time
    return int(np.cumsum(d[order]).max())


def test_decode_memory_back_pressures_prefill():
    """Memory for 3 requests, each holding it from prefill start (1 s staged) to its decode end
    (5 s running): at most 3 in flight, so the server pool of 10 drains at 3 per 6 s = 0.5 req/s
    (deterministic cycle) while 2 req/s arrive; prefill waits grow. Unlimited memory: the 3 decode
    slots bind instead, 3 per 5 s."""
    horizon = 600.0
    r = _run(_hand_setup(3.0), 2.0, horizon).frames[0]
    start = (r.arrival_s + r.wait_s).to_numpy()
    end = r.end_s.to_numpy()
    assert _max_overlap(start, end) == 3
    done = np.isfinite(end) & (end <= horizon)
    assert done.sum() / horizon == pytest.approx(0.5, rel=0.02)
    assert r.wait_s.to_numpy()[-50:].min() > 100  # the queue grows
    free = _run(_hand_setup(1e9), 2.0, horizon).frames[0]
    fin = free.end_s.to_numpy()
    assert (np.isfinite(fin) & (fin <= horizon)).sum() / horizon == pytest.approx(0.6, rel=0.02)


def test_decode_memory_reserved_at_transfer_start_holds_back_the_transfer():
    """Everything remote (10 PrfaaS servers, 1 s prefills of 10 layers, KV of no size), memory for
    2 requests reserved when a transfer would join the link (its first layer done) and held to its
    decode's end (5 s): at most 2 requests lie between KV ready and decode end, so 2 per 5 s = 0.4
    req/s finish while 2 req/s arrive; the wait is the transfer's, which grows (its join waits for
    memory), not the prefill's (a prefill never waits: memory is not reserved at its start).
    Unlimited memory: the 3 decode slots bind, 0.6 req/s, and no transfer waits."""
    horizon = 600.0
    runs = {}
    for memory_bytes in (2.0, 1e9):
        setup = _hand_setup(memory_bytes, "transfer_start", n_prfaas=10, n_pd_p=0, n_layers=10,
                            routing=Routing.threshold(0))
        r = runs[memory_bytes] = _run(setup, 2.0, horizon).frames[0]
        end = r.end_s.to_numpy()
        assert (r.path == "prfaas").all() and (r.wait_s == 0).all()
        assert (np.isfinite(end) & (end <= horizon)).sum() / horizon == pytest.approx(
            0.4 if memory_bytes == 2.0 else 0.6, rel=0.02)
    tight = runs[2.0]
    ready = (tight.arrival_s + tight.prefill_s + tight.transfer_s).to_numpy()
    assert _max_overlap(ready, tight.end_s.to_numpy()) == 2
    assert tight.transfer_s.to_numpy()[-50:].min() > 100 and (runs[1e9].transfer_s == 0).all()


def test_a_running_request_bigger_than_its_staged_bytes_waits_for_memory_at_admission():
    """Each request stages 1 byte from prefill start and holds 3 bytes once it decodes; 6 bytes of
    memory: at most 2 decode at once, though there are 3 slots (an admission that would raise the
    held bytes past the memory waits, unless the instance is idle). Unlimited memory: 3 at once."""
    most = {}
    for memory_bytes in (6.0, 1e9):
        staging = Staging("prefill_start", memory_bytes=memory_bytes, running_bytes=3.0, batch_max=3,
                          staged_bytes=lambda t: np.ones(np.shape(t)))
        r = _run(_hand_setup(memory_bytes, staging=staging), 2.0, 600.0).frames[0]
        end = r.end_s.to_numpy()
        decoding = np.isfinite(end)
        most[memory_bytes] = _max_overlap(end[decoding] - 5.0, end[decoding])
    assert most == {6.0: 2, 1e9: 3}


@pytest.mark.parametrize("reserve_at, held_fraction, prefill_waits", [
    ("prefill_start", 0.5, True), ("transfer_start", 0.5, False), ("arrival", 0.0, False)])
def test_where_decode_memory_is_reserved_decides_what_waits(reserve_at, held_fraction, prefill_waits):
    """Local requests at 2 req/s, one decode slot (5 s decodes: 0.2 req/s whatever the memory), 2
    bytes of memory, 1 staged and 1 running per request. Reserved at prefill start, one request is
    always staged beside the running one and the prefills wait for memory (their queue grows); at
    transfer start (a local prefill's end) one is staged too, but the prefills run and the rest wait
    to hand over; reserved only once the bytes arrive, nothing is staged: half the memory held on
    average in the first two cases (one byte of two), none in the last."""
    staging = Staging(reserve_at, memory_bytes=2.0, running_bytes=1.0, batch_max=1,
                      staged_bytes=lambda t: np.ones(np.shape(t)))
    rng = np.random.default_rng(0)
    t = poisson_times(2.0, 0.0, 600.0, rng)
    arr = Arrivals(t, np.full(len(t), 100), np.ones(len(t), dtype=np.int64))
    engine = run_engine(_hand_setup(2.0, reserve_at, decode_batch_max=1, staging=staging), arr, Policy(period_s=1.0),
                        (), 600.0, rng)
    r = engine.frames[0]
    end = r.end_s.to_numpy()
    assert (np.isfinite(end) & (end <= 600.0)).sum() / 600.0 == pytest.approx(0.2, rel=0.02)
    assert engine.staging_figures()["held_decode_fraction_mean"] == pytest.approx(held_fraction, abs=0.01)
    assert (r.wait_s.to_numpy()[-50:].min() > 100) == prefill_waits
    # the time series counts the prefills that wait for memory in their pool's queue
    assert (engine.frames[1].local_queue.to_numpy()[-50:].min() > 100) == prefill_waits


def test_gated_pools_with_room_reproduce_the_ungated_run():
    """With memory and a buffer that never run out, the event-driven (gated) prefill pools start
    every request when the Kiefer-Wolfowitz heaps do: the same records, request by request."""
    kw = dict(n_prfaas=2, n_pd_p=3, n_pd_d=4, decode_batch_max=10_000, decode_step_s=0.01, n_layers=61, rtt_s=0.005,
              link_bits_per_s=50e9, t_remote=lambda l: np.asarray(l, float) / 2e4,
              t_local=lambda l: np.asarray(l, float) / 1e4, kv_bytes=lambda l: np.asarray(l, float) * 7e4,
              routing=Routing.threshold(8_000))
    rng = np.random.default_rng(3)
    lengths = TruncatedLogNormal(9.0, 1.0, 128, 65_536)
    t = poisson_times(0.8, 0.0, 2_000.0, rng)
    arr = Arrivals(t, lengths.sample(len(t), rng), np.full(len(t), 200), route_u=rng.random(len(t)))
    frames = []
    for extra in ({"staging": None}, {"transfer_buffer_bytes": 1e15, "staging": None},
                  {"staging": Staging("prefill_start", 1e15, 1.0, 10_000, lambda x: np.ones(np.shape(x)))}):
        setup = _hand_setup(1.0, **kw, **extra)
        frames.append(run_engine(setup, arr, Policy(period_s=1e6), (), 2_000.0, np.random.default_rng(0)).frames[0])
    cols = ["path", "wait_s", "prefill_s", "transfer_s", "decode_wait_s", "ttft_s", "end_s"]
    for other in frames[1:]:
        assert (other[cols].to_numpy() == frames[0][cols].to_numpy()).all()
    assert (frames[0].path == "prfaas").mean() > 0.2 and frames[0].wait_s.max() > 0


def test_transfer_buffer_caps_the_plan_and_holds_back_prefill(case):
    """A 1 GiB buffer per PrfaaS instance (the plan holds 1.06 GiB at its Lambda_max): the planner
    caps the rate where the mean occupancy S x (T + handoff) fills it, names the buffer as binding;
    the simulator never holds more than the pooled 4 GiB and remote prefills wait for it."""
    sc, res, _, _ = case
    sc_buf = sc.with_updates(**{"prfaas.transfer_buffer_gib": 1.0})
    res_buf = plan(sc_buf)
    p = res_buf.plan
    assert p.binding == "PrfaaS transfer buffer"
    assert p.lambda_max_rps < res.lambda_max_rps
    assert buffer_bytes(res_buf.inputs, p, res_buf.buckets, p.lambda_max_rps) == pytest.approx(GIB_BYTES, rel=1e-5)
    assert buffer_bytes(res.inputs, res.plan, res.buckets, res.lambda_max_rps) > GIB_BYTES
    rate = 0.8 * p.lambda_max_rps
    runs = {}
    for name, (s, r) in {"buffer": (sc_buf, res_buf), "none": (sc, res)}.items():
        req = simulate(s, r, rate_rps=rate, duration_s=2_000, seed=0).requests
        rem = req[req.path == "prfaas"]
        start = (rem.arrival_s + rem.wait_s).to_numpy()
        ready = start + rem.prefill_s.to_numpy() + rem.transfer_s.to_numpy()
        size = res.inputs.kv_bytes(rem.uncached_tokens.to_numpy().astype(float))
        ev, d = np.r_[start, ready], np.r_[size, -size]
        runs[name] = (np.cumsum(d[np.lexsort((d, ev))]).max(), rem.wait_s.mean())
    pooled = 4 * GIB_BYTES
    assert runs["buffer"][0] <= pooled * (1 + 1e-9) < runs["none"][0]
    assert runs["buffer"][1] > 5 * runs["none"][1]


def test_staging_bad_inputs(case):
    sc, _, on, res_on = case
    with pytest.raises(PlanError, match="local.transfer_buffer_gib"):
        sc.with_updates(**{"local.transfer_buffer_gib": 1.0})
    with pytest.raises(PlanError, match="dual policy"):
        simulate(on, res_on, load=0.5, duration_s=10, policy="dual")
    # 0.65 GiB per GPU for caches and a 1 Gbps link: even one running request per instance overflows
    starved = on.with_updates(**{"link.gbps": 1, "decode.reserve_gib_per_gpu": 15.5})
    with pytest.raises(Infeasible, match="decode.staging_memory"):
        plan(starved)
