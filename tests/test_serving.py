"""The colocated instance model (continuous batching, chunked prefill) and speculative decoding.

Independent numbers: the kernel model's own prefill and decode-step functions (at concurrency 1
the loop is one request alone), Little's law, the acceptance arithmetic of a speculative step,
and DeepSeek-V3's published MTP acceptance (arXiv 2412.19437, section 5.4.3).
"""

from __future__ import annotations

import math

import pytest

from prfaas_plan.errors import InvalidInput
from prfaas_plan.hardware import instance
from prfaas_plan.model import load_model
from prfaas_plan.perf.latency import decode_step_s, prefill_latency
from prfaas_plan.perf.ops import decode_ops, mixed_step_ops
from prfaas_plan.serving import SpecDecode, colocated_closed_loop, colocated_open_loop, speedup_curve

ISL, OSL = 1024, 1024


@pytest.fixture(scope="module")
def minimax():
    return load_model("minimax-m2.5"), instance("h200", 8, engine="vllm")


@pytest.fixture(scope="module")
def deepseek():
    return load_model("deepseek-v3"), instance("h200", 8, engine="sglang")


def test_concurrency_one_is_one_request_alone(minimax):
    """At c = 1 nothing shares a step: TTFT is the prefill latency (request overhead and one
    step overhead included, the prompt being one chunk), TPOT the batch-1 decode step."""
    model, inst = minimax
    p = colocated_closed_loop(model, inst, ISL, OSL, 1)
    assert p.ttft_s == pytest.approx(float(prefill_latency(model, inst, ISL).total_s), abs=1e-9)
    assert p.tpot_s == pytest.approx(decode_step_s(model, inst, 1, ISL + OSL / 2), abs=1e-9)
    # the mean decode batch over time: the one request decodes except during its TTFT
    decoding_s = (OSL - 1) * p.tpot_s
    assert p.batch == pytest.approx(decoding_s / (p.ttft_s + decoding_s), abs=1e-12)


@pytest.mark.parametrize("c", [1, 16, 64, 256])
def test_littles_law(minimax, c):
    model, inst = minimax
    p = colocated_closed_loop(model, inst, ISL, OSL, c)
    assert p.throughput_rps * (p.ttft_s + (OSL - 1) * p.tpot_s) == pytest.approx(c, rel=1e-6)
    assert p.output_tokens_per_s == pytest.approx(p.throughput_rps * OSL, rel=1e-12)
    assert p.notes == ()


def test_tpot_and_ttft_grow_with_concurrency(deepseek):
    model, inst = deepseek
    points = [colocated_closed_loop(model, inst, ISL, OSL, c) for c in (1, 2, 8, 32, 128)]
    tpots = [p.tpot_s for p in points]
    assert tpots == sorted(tpots)
    assert points[-1].ttft_s > points[0].ttft_s
    # more clients, more throughput (the engine is not saturated at these loads)
    assert [p.throughput_rps for p in points] == sorted(p.throughput_rps for p in points)


def test_mixed_step_without_prefill_is_a_decode_step(deepseek):
    model, inst = deepseek
    eng = inst.engine_profile
    assert float(mixed_step_ops(model, inst, 16, 1500.0, 0, 0, eng).total_s) == pytest.approx(
        float(decode_ops(model, inst, 16, 1500.0, eng).total_s), abs=1e-12)


def test_mixed_step_without_decodes_is_a_prefill_chunk(deepseek):
    model, inst = deepseek
    eng = inst.engine_profile
    chunk = float(mixed_step_ops(model, inst, 0, 0.0, 2048, 0, eng).total_s)
    assert chunk + eng.request_overhead_s == pytest.approx(float(prefill_latency(model, inst, 2048).total_s), abs=1e-12)
    # decodes riding along cost time, but less than a separate decode step
    both = float(mixed_step_ops(model, inst, 32, 1500.0, 2048, 0, eng).total_s)
    alone = float(decode_ops(model, inst, 32, 1500.0, eng).total_s)
    assert chunk < both < chunk + alone


def test_open_loop_matches_closed_loop_at_same_throughput(minimax):
    """A light Poisson load sees a batch of about ``1 + rate x decode time`` and a TPOT between
    the batch-1 step and the closed loop's at a concurrency that drives the same throughput."""
    model, inst = minimax
    closed = colocated_closed_loop(model, inst, ISL, OSL, 16)
    opened = colocated_open_loop(model, inst, ISL, OSL, closed.throughput_rps)
    assert opened.batch == pytest.approx(closed.throughput_rps * (OSL - 1) * opened.tpot_s, rel=1e-9)
    assert decode_step_s(model, inst, 1, ISL + OSL / 2) < opened.tpot_s
    assert opened.tpot_s == pytest.approx(closed.tpot_s, rel=0.1)
    with pytest.raises(InvalidInput, match="^rate_rps:"):
        colocated_open_loop(model, inst, ISL, OSL, 1000.0)


def test_memory_bound_concurrency_waits(minimax):
    model, inst = minimax
    p = colocated_closed_loop(model, inst, 100_000, 100, 64)
    assert any(n.startswith("memory-bound") for n in p.notes)
    assert p.throughput_rps * (p.ttft_s + 99 * p.tpot_s) == pytest.approx(64, rel=1e-6)


def test_spec_decode_one_token_per_step_is_the_verify_step(deepseek):
    """Accepting nothing (1 token per step) leaves TPOT = the whole verify step: a decode step
    at batch (k+1) plus k draft layers with the LM head."""
    model, inst = deepseek
    spec = SpecDecode(2, accepted_per_step=1.0)
    p = colocated_closed_loop(model, inst, ISL, OSL, 1, spec=spec)
    ctx = ISL + OSL / 2
    d = decode_ops(model, inst, 1, ctx, inst.engine_profile)
    layer = (float(d.total_s) - float(d.families["overhead"]) - float(d.ops["lm_head"])) / model.layers.count
    verify = decode_step_s(model, inst, 3, ctx) + 2 * (layer + float(d.ops["lm_head"]))
    assert p.tpot_s == pytest.approx(verify, abs=1e-9)


def test_acceptance_rates_give_expected_tokens():
    assert SpecDecode(1, acceptance_rates=(0.85,)).accepted == pytest.approx(1.85)
    assert SpecDecode(3, acceptance_rates=(0.8, 0.5, 0.5)).accepted == pytest.approx(1 + 0.8 + 0.4 + 0.2)
    assert SpecDecode(0, accepted_per_step=1.0).accepted == 1.0


def test_deepseek_v3_mtp_speedup_on_8xh200(deepseek):
    """DeepSeek-V3's MTP: one draft token, second-token acceptance 85-90% (arXiv 2412.19437,
    section 5.4.3, reporting 1.8x tokens per second). Predicted TPOT speed-up on 8xH200 (SGLang
    profile, TP8) at 2K context: it pays at batch 1 and pays less at batch 64. Public
    measurements to set beside it: SGLang's MTP for DeepSeek-V3 at batch 1, 1.76x
    (https://github.com/sgl-project/sglang/pull/3582, ~1.9 accepted tokens per step); vLLM's for
    R1, k = 1, acceptance 81-82%, TPOT 1.63x at 1 request/s and 1.18x at 2 requests/s
    (https://github.com/vllm-project/vllm/pull/12755)."""
    model, inst = deepseek
    df = speedup_curve(model, inst, 2048.0, [1, 64], [0.85, 0.90], k=1)
    print("\nDeepSeek-V3 MTP on 8xH200 (predicted)\n" + df.to_string())
    s = df.set_index(["batch", "acceptance"])["speedup"]
    assert s[(1, 0.85)] > 1.0 and s[(1, 0.90)] > s[(1, 0.85)]
    assert s[(64, 0.85)] < s[(1, 0.85)]
    assert s.max() < 1.9  # never above the accepted tokens per step


@pytest.mark.parametrize("kwargs, field", [
    (dict(concurrency=0), "concurrency"),
    (dict(concurrency=-3), "concurrency"),
    (dict(osl_tokens=0), "osl_tokens"),
    (dict(isl_tokens=0), "isl_tokens"),
])
def test_bad_input_names_the_field(minimax, kwargs, field):
    model, inst = minimax
    args = dict(isl_tokens=ISL, osl_tokens=OSL, concurrency=4) | kwargs
    with pytest.raises(InvalidInput, match=f"^{field}:") as e:
        colocated_closed_loop(model, inst, **args)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("kwargs, field", [
    (dict(draft_tokens=-1, accepted_per_step=1.0), "spec.draft_tokens"),
    (dict(draft_tokens=True, accepted_per_step=1.0), "spec.draft_tokens"),
    (dict(draft_tokens=1.5, accepted_per_step=1.0), "spec.draft_tokens"),
    (dict(draft_tokens=1, acceptance_rates=(1.2,)), "spec.acceptance_rates"),
    (dict(draft_tokens=1, acceptance_rates=(-0.1,)), "spec.acceptance_rates"),
    (dict(draft_tokens=2, acceptance_rates=(0.5,)), "spec.acceptance_rates"),
    (dict(draft_tokens=1, accepted_per_step=2.5), "spec.accepted_per_step"),
    (dict(draft_tokens=1), "spec.accepted_per_step"),
])
def test_bad_spec_names_the_field(kwargs, field):
    with pytest.raises(InvalidInput, match=f"^{field}:"):
        SpecDecode(**kwargs)


def test_bad_rate(minimax):
    model, inst = minimax
    for rate in (0.0, -1.0, math.inf):
        with pytest.raises(InvalidInput, match="^rate_rps:"):
            colocated_open_loop(model, inst, ISL, OSL, rate)


def test_max_sustainable_rate_is_the_edge_the_open_loop_accepts(minimax):
    from prfaas_plan.serving import max_sustainable_rate

    model, inst = minimax
    top = max_sustainable_rate(model, inst, 2048, 256)
    colocated_open_loop(model, inst, 2048, 256, top)  # accepted
    with pytest.raises(InvalidInput, match="rate_rps"):
        colocated_open_loop(model, inst, 2048, 256, top * (1 + 1e-6))
    # the prefill server saturates first: a prompt's share of full-budget steps times the rate
    assert 10 < top < 40


def test_on_demand_engines_hold_the_mean_context_and_trtllm_the_final_one(minimax):
    """vLLM and SGLang allocate KV pages as tokens are written: a decoding request at step j holds
    isl + j tokens, isl + osl / 2 on average over j = 1 .. osl - 1; TensorRT-LLM's default
    GUARANTEED_NO_EVICT reserves isl + osl."""
    from prfaas_plan.perf.latency import held_context_tokens

    _, inst = minimax
    assert held_context_tokens(inst, 1000, 300) == 1000 + sum(range(1, 300)) / 299
    sglang = instance("h200", 8, engine="sglang")
    assert held_context_tokens(sglang, 1000, 300) == 1150.0
    trt = instance("h200", 8, engine=inst.engine_profile.model_copy(update={"kernel_engine": "trtllm"}))
    assert held_context_tokens(trt, 1000, 300) == 1300.0


def test_memory_caps_the_running_batch_at_the_mean_context(minimax):
    """Clients beyond what the pool holds at the mean context wait in the queue, and only then."""
    from prfaas_plan.perf.latency import free_cache_bytes_per_gpu, requests_fit

    model, inst = minimax
    isl, osl = 8192, 32768
    fit = requests_fit(model, inst, isl + osl / 2, free_cache_bytes_per_gpu(model, inst))
    assert requests_fit(model, inst, isl + osl, free_cache_bytes_per_gpu(model, inst)) < fit
    inside = colocated_closed_loop(model, inst, isl, osl, fit)
    beyond = colocated_closed_loop(model, inst, isl, osl, fit + 10)
    assert inside.notes == ()
    assert beyond.notes and beyond.notes[0].startswith(f"memory-bound: {fit} running requests")
    assert beyond.ttft_s > inside.ttft_s + 10 / beyond.throughput_rps * 0.99
