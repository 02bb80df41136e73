"""Engine defaults that depend on the GPU (prfaas_plan.engine.GpuTier): the token budget per step
SGLang and vLLM pick when the launch does not set it, against the engines' own rules, and the code
that runs on it (chunked prefill, the colocated step table).

SGLang (python/sglang/srt/server_args.py): chunked_prefill_size 8192 below 160 GiB of GPU memory
(H100, H200, H20, A100), 16384 at or above (B200, MI300). vLLM 0.24 (vllm/engine/arg_utils.py): the
OpenAI API server's max_num_batched_tokens is 8192 on a device of >= 70 GiB that is not an A100,
else 2048."""

from __future__ import annotations

import pytest

from prfaas_plan.engine import GpuTier, load_engine
from prfaas_plan.errors import InvalidInput
from prfaas_plan.hardware import instance, load_gpu
from prfaas_plan.model import load_model
from prfaas_plan.perf.latency import prefill_latency
from prfaas_plan.serving import step_table

GPUS = ("h200", "h100", "h20", "a100-80g", "l40s", "b200", "mi300x")


@pytest.mark.parametrize("engine, expected", [
    ("sglang", {"h200": 8192, "h100": 8192, "h20": 8192, "a100-80g": 8192, "l40s": 8192, "b200": 16384,
                "mi300x": 16384}),
    ("paper-sglang-0.5.9", {"h200": 8192, "h100": 8192, "h20": 8192, "a100-80g": 8192, "l40s": 8192,
                            "b200": 16384, "mi300x": 16384}),
    ("vllm", {"h200": 8192, "h100": 8192, "h20": 8192, "a100-80g": 2048, "l40s": 2048, "b200": 8192,
              "mi300x": 8192}),
])
def test_the_default_budget_per_gpu_is_the_engines_rule(engine, expected):
    eng = load_engine(engine)
    assert {g: eng.chunked_prefill_tokens_on(load_gpu(g)) for g in GPUS} == expected


def test_a_launch_flag_sets_one_budget_on_every_gpu():
    eng = load_engine("sglang").with_chunked_prefill(32768)
    assert {eng.chunked_prefill_tokens_on(load_gpu(g)) for g in GPUS} == {32768}
    assert eng.chunked_prefill_by_gpu == ()


def test_prefill_chunks_at_the_gpus_budget():
    # a 16,384-token prompt: one chunk on B200 (16,384 a step), two on H200 (8,192); the overhead
    # family is the request overhead plus one step overhead per chunk
    model = load_model("qwen3-235b-a22b")
    for gpu, chunks in (("b200", 1), ("h200", 2)):
        inst = instance(gpu, 8, engine="sglang")
        eng = inst.engine_profile
        got = prefill_latency(model, inst, 16384).families["overhead"]
        assert float(got) == pytest.approx(eng.request_overhead_s + chunks * eng.step_overhead_s, rel=1e-12), gpu


def test_the_colocated_step_loop_takes_the_gpus_budget():
    # a 4,000-token prompt beside no decode: two chunks of vLLM's 2,048 on L40S and A100, one on H200
    model = load_model("llama-3.1-70b")
    for gpu, budget, chunks in (("l40s", 2048, 2), ("a100-80g", 2048, 2), ("h200", 8192, 1)):
        inst = instance(gpu, 8, engine="vllm")
        assert inst.chunked_prefill_tokens == budget, gpu
        table = step_table(model, inst, 4000, 256)
        assert (table.budget, table.times(0).chunks) == (budget, chunks), gpu


def test_a_tier_with_a_negative_memory_is_bad_input():
    with pytest.raises(ValueError, match="min_memory_gib"):
        GpuTier(min_memory_gib=-1, chunked_prefill_tokens=8192)
    with pytest.raises(InvalidInput, match="chunked_prefill_by_gpu"):
        from prfaas_plan.data import validate
        from prfaas_plan.engine import EngineProfile

        base = load_engine("vllm").model_dump()
        validate(EngineProfile, {**base, "chunked_prefill_by_gpu": [{"min_memory_gib": 70}]}, "profile.yaml")


def test_only_a_whole_prompt_cap_rounds_a_steps_prompt_tokens_down_to_whole_prompts():
    """A 16,384-token step and 3,000-token prompts: SGLang (--max-prefill-tokens 16,384) takes the five
    whole prompts that fit, 15,000 tokens; vLLM (no such cap) fills the budget, splitting the sixth."""
    assert load_engine("sglang").prompt_room_tokens(16384, 3000, 0) == 15000
    assert load_engine("vllm").prompt_room_tokens(16384, 3000, 0) == 16384
    assert load_engine("vllm").prompt_room_tokens(16384, 3000, 384) == 16000  # the decodes take theirs first
