"""The KV handoff term (prfaas_plan.handoff) against closed forms: the planner's unhidden transfer
and the simulator's per-request handoff on a deterministic case, and the staging hold times."""

from __future__ import annotations

import numpy as np
import pytest

import prfaas_plan as pp
from prfaas_plan.handoff import Staging, hold_s, kv_ready_s, link_share, unhidden_transfer_s
from prfaas_plan.planner import Buckets, plan_inputs
from prfaas_plan.planner import unhidden_transfer_s as planner_unhidden_s
from prfaas_plan.sim import Arrivals, Policy, Routing, Setup, run_engine


def _closed_form_s(bits: float, prefill_s: float, rate_bps: float, layers: int, rtt_s: float) -> float:
    """By hand: the last layer (x/L) when the link keeps up with the prefill, else the transfer
    (x) less what ran beside the prefill after its first layer (T (1 - 1/L)); plus rtt/2."""
    x = bits / rate_bps
    return max(x / layers, x - prefill_s * (1 - 1 / layers)) + rtt_s / 2


@pytest.mark.parametrize(("prefill_s", "bits"), [(2.0, 8e9), (0.5, 80e9)])  # link faster / slower than the prefill
def test_planner_and_simulator_handoff_agree_with_the_closed_form(prefill_s, bits):
    """One remote request alone (deterministic): the simulator's transfer_s, the planner's
    unhidden transfer at zero egress (on a bucket of that request) and the closed form agree."""
    sc = pp.load_scenario("paper-case-study")
    inp = plan_inputs(sc)
    layers, rtt_s, link = sc.model.layers.count, sc.spec.link.rtt_s, inp.link_bits_per_s
    expect = _closed_form_s(bits, prefill_s, link, layers, rtt_s)
    # the two regimes are the two branches of the max
    assert (expect - rtt_s / 2 > bits / link / layers * 1.01) == (bits / link > prefill_s)

    b = Buckets(np.array([1000.0]), np.array([1.0]), np.array([prefill_s]), np.array([1.0]),
                np.array([bits / 8]))
    assert planner_unhidden_s(inp, b, 0.0)[0] == pytest.approx(expect, rel=1e-12)

    setup = Setup(
        n_prfaas=1, n_pd_p=0, n_pd_d=1, decode_batch_max=1, decode_step_s=0.01, n_layers=layers, rtt_s=rtt_s,
        link_bits_per_s=link, link_efficiency=1.0, t_remote=lambda l: np.full(np.shape(l), prefill_s),
        t_local=lambda l: np.full(np.shape(l), prefill_s), kv_bytes=lambda l: np.full(np.shape(l), bits / 8),
        routing=Routing.threshold(0.0), lengths=None, output_tokens=1,
    )
    rng = np.random.default_rng(0)
    arr = Arrivals(np.array([1.0]), np.array([1000]), np.array([1]))
    req = run_engine(setup, arr, Policy(period_s=1e6), (), 10.0, rng).frames[0]
    assert req.path.iloc[0] == "prfaas"
    assert req.transfer_s.iloc[0] == pytest.approx(expect, rel=1e-9)
    assert req.ttft_s.iloc[0] == pytest.approx(prefill_s + expect + 0.01, rel=1e-9)


def test_kv_ready_and_link_share():
    """Ready at the later of the last layer and the transfer's end, never before the prefill ends,
    plus half a round trip; a saturated link leaves the 5% floor."""
    assert kv_ready_s(10.0, 10.5, 12.0, 0.01) == pytest.approx(12.005)
    assert kv_ready_s(10.0, 10.5, 9.0, 0.01) == pytest.approx(10.505)
    assert link_share(30e9, 100e9) == pytest.approx(0.7)
    assert link_share(120e9, 100e9) == pytest.approx(0.05)
    assert np.isinf(unhidden_transfer_s(1e9, 1.0, 0.0, 61, 0.0))


def test_hold_times_by_reservation_point():
    """Held from prefill start: prefill + handoff; from transfer start: less the first layer
    (remote) or the whole prefill (local); nothing held when reserved on arrival of the bytes."""
    t, h, layers = np.array([2.0, 4.0]), np.array([0.3, 0.1]), 10
    np.testing.assert_allclose(hold_s("prefill_start", True, t, h, layers), [2.3, 4.1])
    np.testing.assert_allclose(hold_s("transfer_start", True, t, h, layers), [2.3 - 0.2, 4.1 - 0.4])
    np.testing.assert_allclose(hold_s("transfer_start", False, t, 0.0, layers), [0.0, 0.0])
    np.testing.assert_allclose(hold_s("prefill_start", False, t, 0.0, layers), [2.0, 4.0])
    np.testing.assert_allclose(hold_s("arrival", True, t, h, layers), [0.0, 0.0])


def test_batch_max_with_held_memory():
    """BS_max is the TPOT bound until the held bytes eat into the memory bound: floor((M - H) / m)."""
    st = Staging("prefill_start", memory_bytes=100.0, running_bytes=7.0, batch_max=12, staged_bytes=np.asarray)
    assert st.batch_max_with(0.0) == 12  # 14 fit; the TPOT bound 12 binds
    assert st.batch_max_with(20.0) == 11  # floor(80 / 7)
    assert st.batch_max_with(99.0) == 0


def test_no_link_means_the_kv_never_arrives_even_for_an_empty_cache():
    """At rate 0 the unhidden transfer is infinite for every request, one holding no bytes too
    (0 / 0 would be NaN), in the broadcast shape of bits and prefill times, without a warning."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = unhidden_transfer_s(np.array([0.0, 8e9]), np.array([[1.0], [2.0]]), 0.0, 61, 0.005)
    assert out.shape == (2, 2) and np.isposinf(out).all()
