"""The colocated instance model (continuous batching, chunked prefill) and speculative decoding.

Independent numbers: the kernel model's own prefill and decode-step functions (at concurrency 1
the loop is one request alone), Little's law, the acceptance arithmetic of a speculative step,
and DeepSeek-V3's published MTP acceptance (arXiv 2412.19437, section 5.4.3).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from prfaas_plan.errors import InvalidInput, Unsustainable
from prfaas_plan.hardware import instance
from prfaas_plan.layout import instance_layout
from prfaas_plan.model import load_model
from prfaas_plan.perf.latency import decode_step_s, prefill_latency
from prfaas_plan.perf.ops import decode_ops, forward_ops, mixed_step_ops, prefill_ops
from prfaas_plan.serving import (
    BenchmarkRun,
    SpecDecode,
    colocated_benchmark,
    colocated_closed_loop,
    colocated_open_loop,
    speedup_curve,
    step_table,
)

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


def test_mixed_step_is_its_token_linear_ops_over_every_token_plus_each_attention(deepseek):
    """Op by op: the GEMMs, experts and collectives of a step run once over its decode and prompt
    tokens together (a prefill of b + p tokens); the chunk's attention is that of prefix + chunk
    less that of the prefix (its queries over every earlier key); the decodes' attention is a
    decode step's. DeepSeek-V3 at TP8 (no attention DP, so one rank holds every token)."""
    model, inst = deepseek
    eng = inst.engine_profile
    b, ctx, p, prefix = 32, 1500.0, 2048, 512
    mixed = mixed_step_ops(model, inst, b, ctx, p, prefix, eng).ops
    linear = prefill_ops(model, inst, b + p, eng).ops
    whole, before = prefill_ops(model, inst, prefix + p, eng).ops, prefill_ops(model, inst, prefix, eng).ops
    decode = decode_ops(model, inst, b, ctx, eng).ops
    family = {s.op.name: s.op.family for s in forward_ops(model, instance_layout(model, inst))}
    assert {"gemm", "moe", "comm", "mla"} <= set(family.values())
    for name, fam in family.items():
        if fam in ("gemm", "moe", "comm"):
            assert mixed[name] == pytest.approx(linear[name], rel=1e-12), name
        else:
            assert mixed[name] == pytest.approx(whole[name] - before[name] + decode[name], rel=1e-12), name


def test_open_loop_matches_closed_loop_at_same_throughput(minimax):
    """A light Poisson load sees a batch of about ``1 + rate x decode time`` and a TPOT between
    the batch-1 step and the closed loop's at a concurrency that drives the same throughput."""
    model, inst = minimax
    closed = colocated_closed_loop(model, inst, ISL, OSL, 16)
    opened = colocated_open_loop(model, inst, ISL, OSL, closed.throughput_rps)
    assert opened.batch == pytest.approx(closed.throughput_rps * (OSL - 1) * opened.tpot_s, rel=1e-9)
    assert decode_step_s(model, inst, 1, ISL + OSL / 2) < opened.tpot_s
    assert opened.tpot_s == pytest.approx(closed.tpot_s, rel=0.1)
    with pytest.raises(Unsustainable, match="^rate_rps:"):
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


def test_position_rates_are_the_given_ones_or_the_one_rate_of_the_mean():
    """Per-position rates as given (not flattened to their mean); a mean alone gives the one rate
    ``r`` with 1 + r + r^2 + r^3 = 2.4 for three drafts, the real root of that cubic."""
    assert SpecDecode(3, acceptance_rates=(0.8, 0.5, 0.5)).position_rates == (0.8, 0.5, 0.5)
    roots = np.roots([1.0, 1.0, 1.0, 1.0 - 2.4])
    r = float(next(x.real for x in roots if abs(x.imag) < 1e-12 and 0 < x.real < 1))
    assert SpecDecode(3, accepted_per_step=2.4).position_rates == pytest.approx((r, r, r), abs=1e-10)


def test_a_request_larger_than_the_cache_beside_the_weights_is_one_line_of_bad_input():
    """Qwen3-32B on 2xL40S: each GPU keeps what the engine leaves beside its half of the weights,
    and a token's cache is 64 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 262,144 B, 131,072 B a
    GPU at TP2. A request a few hundred tokens inside that runs; one a few hundred beyond is refused."""
    from prfaas_plan.perf.latency import free_cache_bytes_per_gpu

    model, inst = load_model("qwen3-32b"), instance("l40s", 2, engine="vllm")
    most_tokens = free_cache_bytes_per_gpu(model, inst) / 131_072
    assert 20_000 < most_tokens < 40_960  # inside the model's context, so the cache is what binds
    osl = 256
    assert colocated_closed_loop(model, inst, int(most_tokens) - 300 - osl, osl, 1).ttft_s > 0
    isl = int(most_tokens) + 300 - osl
    with pytest.raises(InvalidInput, match=rf"^isl_tokens: one {isl + osl}-token request does not fit beside the "
                                           r"weights on 2xl40s$"):
        colocated_closed_loop(model, inst, isl, osl, 1)


def test_a_decode_worker_that_cannot_hold_one_request_is_one_line_of_bad_input():
    """Disaggregated: the prefill worker (8xH200) holds the prompt, but the decode worker (2xL40S)
    is the one that must keep the whole request's cache, and it cannot (as above)."""
    from prfaas_plan.serving import disaggregated_closed_loop

    model = load_model("qwen3-32b")
    with pytest.raises(InvalidInput, match=r"^isl_tokens: one 31024-token request does not fit beside the weights "
                                           r"on 2xl40s$"):
        disaggregated_closed_loop(model, instance("h200", 8, engine="vllm"), 1, instance("l40s", 2, engine="vllm"), 1,
                                  30_000, 1024, 4)


def test_a_disaggregated_loop_says_when_its_decode_worker_is_full():
    """The same decode worker holds 3 requests of 9,024 tokens (about 27,000 tokens of cache beside its
    weights, as above): 8 clients leave 5 waiting, and the loop says so; 2 fit, and it says nothing."""
    from prfaas_plan.perf.latency import free_cache_bytes_per_gpu
    from prfaas_plan.serving import disaggregated_closed_loop

    model, prefill, decode = load_model("qwen3-32b"), instance("h200", 8, engine="vllm"), instance("l40s", 2,
                                                                                                   engine="vllm")
    assert free_cache_bytes_per_gpu(model, decode) // (131_072 * 9024) == 3  # 131,072 B a token a GPU at TP2
    full = disaggregated_closed_loop(model, prefill, 1, decode, 1, 8000, 1024, 8)
    assert full.notes == ("memory-bound: 1 x 3 requests of 9024 tokens fit; 5 clients wait in the queue "
                          "(their wait is in TTFT)",)
    assert disaggregated_closed_loop(model, prefill, 1, decode, 1, 8000, 1024, 2).notes == ()


def test_an_instance_takes_a_spec_decode_or_none():
    from prfaas_plan.serving import with_spec

    inst = instance("h200", 8, engine="sglang")
    assert with_spec(inst, None) is inst
    assert with_spec(inst, SpecDecode(1, acceptance_rates=(0.85,))).engine_profile.speculative.draft_tokens == 1
    with pytest.raises(InvalidInput, match="^spec: give a SpecDecode or None$"):
        with_spec(inst, {"draft_tokens": 1})


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
    (dict(isl_tokens=True), "isl_tokens"),
    (dict(osl_tokens=False), "osl_tokens"),
    (dict(concurrency=True), "concurrency"),
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
        with pytest.raises(InvalidInput, match="^rate_rps:") as exc:
            colocated_open_loop(model, inst, ISL, OSL, rate)
        assert not isinstance(exc.value, Unsustainable)  # bad input, not a rate to search below


def test_max_sustainable_rate_is_the_edge_the_open_loop_accepts(minimax):
    from prfaas_plan.serving import max_sustainable_rate

    model, inst = minimax
    top = max_sustainable_rate(model, inst, 2048, 256)
    colocated_open_loop(model, inst, 2048, 256, top)  # accepted
    with pytest.raises(Unsustainable, match="^rate_rps:"):
        colocated_open_loop(model, inst, 2048, 256, top * (1 + 1e-6))
    # the prefill server saturates first: a prompt's share of full-budget steps times the rate
    assert 10 < top < 40


def test_max_sustainable_rate_passes_on_what_no_rate_can_fix():
    """A request that does not fit the cache is refused as such, not read as a rate too high."""
    from prfaas_plan.serving import max_sustainable_rate

    with pytest.raises(InvalidInput, match="^isl_tokens: one 31024-token request does not fit"):
        max_sustainable_rate(load_model("qwen3-32b"), instance("l40s", 2, engine="vllm"), 30_000, 1024)


def test_a_closed_loop_whose_steps_all_carry_prompts_says_it_is_prefill_bound():
    """Llama-3.1-8B (FP8 projections) on one H200: 2,000 clients of 2,000-token prompts and 2
    output tokens keep a prompt chunk in every step (and more of them than the cache holds wait);
    100 clients of 1,000 / 8 leave steps without one."""
    model = load_model("llama-3.1-8b").with_gemm_dtypes(attention="fp8", dense_ffn="fp8")
    inst = instance("h200", 1, engine="vllm")
    bound = colocated_closed_loop(model, inst, 2000, 2, 2000)
    assert bound.notes[-1] == "prefill-bound: every step carries a prefill chunk"
    assert bound.notes[0].startswith("memory-bound: ")
    assert colocated_closed_loop(model, inst, 1000, 8, 100).notes == ()


def test_a_benchmark_of_one_output_token_has_no_tpot(minimax):
    """OSL 1: the first token is the last, so there is no inter-token time to average."""
    model, inst = minimax
    p = colocated_benchmark(model, inst, 1000, 1, 4, BenchmarkRun(2))
    assert math.isnan(p.tpot_s) and p.ttft_s > 0 and p.throughput_rps > 0


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


# ----------------------------------------------------------------------------- finite benchmark runs
def _chunk_s(model, inst, tokens: int) -> float:
    """One step of ``tokens`` prompt tokens and no decode: the prefill latency less the request overhead."""
    return float(prefill_latency(model, inst, tokens).total_s) - inst.engine_profile.request_overhead_s


def test_decode_free_burst_is_a_sum_of_full_budget_steps(minimax):
    """osl = 1, no decodes: 16 prompts of 2048 tokens at once fill 4 steps of the 8,192-token budget,
    4 prompts each; prompt i's TTFT is the overhead + ceil(i / 4) full steps. 5 prompts of 3,000:
    two finish in the first full step, three in a second one of the 6,808 tokens left."""
    model, inst = minimax
    r, full = inst.engine_profile.request_overhead_s, _chunk_s(model, inst, 8192)
    assert inst.engine_profile.chunked_prefill_tokens == 8192
    wave = colocated_benchmark(model, inst, 2048, 1, 16, BenchmarkRun(1))
    assert wave.ttft_s == pytest.approx(r + full * sum(math.ceil(i / 4) for i in range(1, 17)) / 16, rel=1e-9)
    odd = colocated_benchmark(model, inst, 3000, 1, 5, BenchmarkRun(1))
    assert odd.ttft_s == pytest.approx(r + full + 3 / 5 * _chunk_s(model, inst, 6808), rel=1e-9)
    # the later requests at the steady state, each request weighted alike
    steady = colocated_closed_loop(model, inst, 2048, 1, 16)
    three = colocated_benchmark(model, inst, 2048, 1, 16, BenchmarkRun(3))
    assert three.ttft_s == pytest.approx((wave.ttft_s + 2 * steady.ttft_s) / 3, rel=1e-12)


def test_burst_decodes_see_the_burst_steps_then_decode_together(minimax):
    """3 prompts of 4096: prompts 1 and 2 fill step 0; step 1 carries their 2 decodes and prompt 3;
    then the 3 decode together, no prompt arriving, until the first request ends; prompt 3's last
    token is after that, at the steady state's TPOT."""
    model, inst = minimax
    isl, osl = 4096, 64
    r, ctx = inst.engine_profile.request_overhead_s, isl + osl / 2
    eng = inst.engine_profile
    mixed = float(mixed_step_ops(model, inst, 2, ctx, 4096, 0, eng).total_s)
    decode3 = decode_step_s(model, inst, 3, ctx)
    tail = colocated_closed_loop(model, inst, isl, osl, 3).tpot_s
    got = colocated_benchmark(model, inst, isl, osl, 3, BenchmarkRun(1))
    full = _chunk_s(model, inst, 8192)
    assert got.ttft_s == pytest.approx(r + full + mixed / 3, rel=1e-9)
    first_two = (mixed + (osl - 2) * decode3) / (osl - 1)
    third = ((osl - 2) * decode3 + tail) / (osl - 1)
    assert got.tpot_s == pytest.approx((2 * first_two + third) / 3, rel=1e-9)


@pytest.mark.parametrize("k", [1, 10])
def test_one_client_runs_alone(minimax, k):
    """c = 1: each request is alone on the engine, the burst or not: the steady state's TTFT and TPOT."""
    model, inst = minimax
    got, alone = colocated_benchmark(model, inst, ISL, OSL, 1, BenchmarkRun(k)), colocated_closed_loop(model, inst, ISL, OSL, 1)
    assert (got.ttft_s, got.tpot_s) == pytest.approx((alone.ttft_s, alone.tpot_s), rel=1e-9)


def test_many_prompts_per_client_tend_to_the_steady_state(minimax):
    model, inst = minimax
    steady = colocated_closed_loop(model, inst, 8192, OSL, 64)
    ten = colocated_benchmark(model, inst, 8192, OSL, 64, BenchmarkRun(10))
    long = colocated_benchmark(model, inst, 8192, OSL, 64, BenchmarkRun(10**6))
    assert ten.ttft_s > 1.5 * steady.ttft_s  # the burst's queue: 64 prompts of one full step each
    assert (long.ttft_s, long.tpot_s) == pytest.approx((steady.ttft_s, steady.tpot_s), rel=1e-4)
    assert (long.throughput_rps, long.batch) == (steady.throughput_rps, steady.batch)


def test_range_ratio_runs_the_mean_lengths(minimax):
    """--random-range-ratio 0.8 (InferenceX): uniform whole lengths in [int(0.8 L), L], mean (6553 + 8192) / 2."""
    model, inst = minimax
    run = BenchmarkRun(10, 0.8)
    assert (run.mean_tokens(8192), run.mean_tokens(1024), BenchmarkRun().mean_tokens(8192)) == (7373, 922, 8192)
    got = colocated_benchmark(model, inst, 8192, 1024, 16, run)
    same = colocated_benchmark(model, inst, 7373, 922, 16, BenchmarkRun(10))
    assert (got.ttft_s, got.tpot_s) == (same.ttft_s, same.tpot_s)


@pytest.mark.parametrize(("kwargs", "field"), [
    (dict(prompts_per_client=0), "run.prompts_per_client"),
    (dict(prompts_per_client=2.5), "run.prompts_per_client"),
    (dict(range_ratio=1.5), "run.range_ratio"),
    (dict(range_ratio=-0.1), "run.range_ratio"),
    (dict(warmup_per_client=-1), "run.warmup_per_client"),
    (dict(warmup_per_client=1.5), "run.warmup_per_client"),
])
def test_bad_benchmark_run_names_the_field(kwargs, field):
    with pytest.raises(InvalidInput, match=rf"^{field}:"):
        BenchmarkRun(**kwargs)


def test_a_drained_warm_up_leaves_the_measured_burst_in_the_mean(minimax):
    """perf_analyzer (genai-perf) and vllm bench serve drain their warm-up before the measured
    clients start together: 20 per client after 2 of warm-up are 20 per client from a burst, the
    first wave's 16 requests (serving's own step loop) and 304 at the steady state, in one mean."""
    from prfaas_plan.serving import _first_wave
    model, inst = minimax
    isl, c, n = 8192, 16, 20
    steady = colocated_closed_loop(model, inst, isl, OSL, c)
    cold = colocated_benchmark(model, inst, isl, OSL, c, BenchmarkRun(n))
    warm = colocated_benchmark(model, inst, isl, OSL, c, BenchmarkRun(n, warmup_per_client=2))
    assert (warm.ttft_s, warm.tpot_s) == (cold.ttft_s, cold.tpot_s)
    assert warm.notes[-1].endswith("(after a drained warm-up of 2 per client)")
    t = step_table(model, inst, isl, OSL)
    assert t.fit >= c  # every client's first request in the first wave
    ttft, tpot = _first_wave(t, c, steady.tpot_s)
    assert warm.ttft_s == pytest.approx((ttft.sum() + (n - 1) * c * steady.ttft_s) / (n * c), rel=1e-12)
    assert warm.tpot_s == pytest.approx((tpot.sum() + (n - 1) * c * steady.tpot_s) / (n * c), rel=1e-12)
    assert warm.ttft_s > steady.ttft_s  # 16 prompts of 8,192 tokens queue behind each other


def test_fixed_lengths_on_a_prefill_first_engine_repeat_the_burst(deepseek):
    """SGLang (prefill first, no mixed steps), 6 prompts of 3000 tokens at once, budget 8192: prompt
    steps of 8192, 8192 and 1616 tokens, no decode beside them (prompts 1-2 end in the first,
    3-5 in the second, 6 in the third); then the 6 decode together and end in one step, so every
    wave, warm-up or not, repeats it: TTFT and TPOT are the wave's, whatever the run's length."""
    model, inst = deepseek
    isl, osl, c = 3000, 64, 6
    assert not inst.engine_profile.mixed_prefill and inst.engine_profile.chunked_prefill_tokens_on(inst.gpu) == 8192
    r = inst.engine_profile.request_overhead_s
    step = [_chunk_s(model, inst, n) for n in (8192, 8192, 1616)]
    ends = r + np.cumsum(step)
    first = ends[[0, 0, 1, 1, 1, 2]]
    decode = decode_step_s(model, inst, c, isl + osl / 2)
    tpot = (ends[2] - first + (osl - 1) * decode) / (osl - 1)
    runs = [colocated_benchmark(model, inst, isl, osl, c, run)
            for run in (BenchmarkRun(1), BenchmarkRun(20), BenchmarkRun(20, warmup_per_client=2))]
    for got in runs:
        assert (got.ttft_s, got.tpot_s) == pytest.approx((first.mean(), tpot.mean()), rel=1e-9)
        period = ends[2] + (osl - 1) * decode
        assert got.throughput_rps == pytest.approx(c / period, rel=1e-9)
        # the 6 decode through (osl - 1) steps of the period; the prompt steps fill ends[2] - r of it
        assert got.batch == pytest.approx(c * (osl - 1) * decode / period, rel=1e-9)
        assert got.prefill_share == pytest.approx((ends[2] - r) / period, rel=1e-9)
        assert got.notes[0].startswith("lockstep: fixed lengths on a prefill-first engine")
    # lengths spread (InferenceX's range ratio) break the lockstep: the later waves at the steady state
    spread = colocated_benchmark(model, inst, isl, osl, c, BenchmarkRun(10, 0.8))
    assert spread.notes[-1].startswith("benchmark run:")
    # so do clients beyond what memory holds (18 of 30,000 + 2,000 tokens here): they wait, out of phase
    fit = step_table(model, inst, 30000, 2000).fit
    over = colocated_benchmark(model, inst, 30000, 2000, fit + 4, BenchmarkRun(2))
    assert fit == 18 and over.notes[-1].startswith(f"benchmark run: 2 requests per client from a burst start; "
                                                   f"first wave of {fit}:")


def test_bad_run_argument(minimax):
    model, inst = minimax
    with pytest.raises(InvalidInput, match="^run:"):
        colocated_benchmark(model, inst, ISL, OSL, 4, run=10)
    with pytest.raises(InvalidInput, match="^concurrency:"):
        colocated_benchmark(model, inst, ISL, OSL, 0)


def test_the_open_loop_at_a_tiny_rate_is_one_prompt_alone(minimax):
    """Poisson arrivals so rare that the engine is empty when one comes: TTFT tends to the
    request overhead plus the prompt's own step (one chunk beside the decode batch of one that the
    chain's steps assume) and TPOT to the batch-1 decode step, the kernel model's own numbers."""
    model, inst = minimax
    p = colocated_open_loop(model, inst, 2048, 256, 1e-4)
    alone = float(mixed_step_ops(model, inst, 1, 2048 + 128.0, 2048, 0, inst.engine_profile).total_s)
    assert p.ttft_s == pytest.approx(inst.engine_profile.request_overhead_s + alone, rel=1e-3)
    assert p.tpot_s == pytest.approx(decode_step_s(model, inst, 1, 2048 + 128.0), rel=1e-3)


def _chain_by_hand(t, rate: float, b: float, steps: int, seed: int = 0) -> tuple[float, float]:
    """The step chain run step by step (numpy's Poisson draws, FCFS by cumulative units): the
    mean step and a prompt's mean time from arrival to the end of its last chunk's step."""
    from prfaas_plan.serving import _chain_steps

    m, a, s_c = _chain_steps(t, b)
    rng = np.random.default_rng(seed)
    backlog, served, arrived, now = 0, 0, 0, 0.0
    durations, pending, sojourn = np.empty(steps), [], []
    for k in range(steps):
        take = min(backlog, a)
        s = s_c[take]
        served += take
        while pending and pending[0][0] <= served:  # prompts whose last unit this step carries
            sojourn.append(now + s - pending.pop(0)[1])
        n = rng.poisson(rate * s)
        for u in np.sort(rng.uniform(0.0, s, n)):
            arrived += m
            pending.append((arrived, now + u))
        backlog += n * m - take
        durations[k] = s
        now += s
    return float(durations.mean()), float(np.mean(sojourn[len(sojourn) // 10:]))


@pytest.mark.parametrize("rate, b", [(13.4, 180.0), (21.0, 700.0)])
def test_the_step_chain_agrees_with_the_chain_run_step_by_step(minimax, rate, b):
    """The stationary solve (truncated where the tail is negligible, or at the state cap with the
    tail's mean excess from the second-moment identity: at 21 req/s the backlog reaches past it)
    against the same chain drawn step by step for 100,000 steps: mean step within 0.5%, a prompt's
    mean time from arrival to its last chunk's end (residual + prefill) within 3%."""
    from prfaas_plan.serving import _step_chain, step_table

    model, inst = minimax
    t = step_table(model, inst, 2048, 256)
    chain = _step_chain(t, rate, b)
    step, sojourn = _chain_by_hand(t, rate, b, 100_000)
    assert chain["step_s"] == pytest.approx(step, rel=0.005)
    assert chain["residual_s"] + chain["prefill_s"] == pytest.approx(sojourn, rel=0.03)


@pytest.mark.parametrize("start", [1e-3, 0.7, 3.0, 5e4])
def test_root_near_brackets_from_either_side(start):
    """The closed loops' root search: from above or below the root (the halving branch serves the
    measured step tables that are faster at batch 4 than at batch 1), Brent to 1e-12 relative;
    a function positive everywhere has no finite root."""
    from prfaas_plan.serving import _root_near

    root = math.sqrt(2.0)
    assert _root_near(lambda x: root - x, start) == pytest.approx(root, rel=1e-12)
    assert _root_near(lambda x: 1.0 / x - x / 2.0, start) == pytest.approx(root, rel=1e-12)
    assert _root_near(lambda x: 1.0, start) == math.inf
