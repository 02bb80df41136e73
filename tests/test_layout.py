"""Parallel layouts: what a model can take, where its cache and weights live, what it communicates.

Every expected number is written out from the model configs (hidden sizes, heads, experts) or from
the engines' published logs; bf16 = 2 B, int4 g32 = 0.5625 B, GiB = 2**30 B, GB = 1e9 B.
The vLLM log (vllm-project/recipes, moonshotai/Kimi-K2-Think.md; hardware_db/MEASUREMENTS.md #20):
Kimi-K2-Thinking INT4, TP8 on 8xH200: "Available KV cache memory: 46.80 GiB", "GPU KV cache size:
715,072 tokens"; with TP8+DCP8: "GPU KV cache size: 5,721,088 tokens".
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from prfaas_plan.errors import InvalidInput
from prfaas_plan.hardware import Instance, load_gpu
from prfaas_plan.kvcache import kv_bytes, per_gpu_kv_bytes, requests_per_instance_memory
from prfaas_plan.layout import (
    Collective,
    Layout,
    check_layout,
    collectives,
    expert_tp_problem,
    projection_shard,
    projection_split,
    weight_bytes_per_gpu,
)
from prfaas_plan.model import list_model_specs, load_model

GIB = 2**30
LOG_KV_GIB = 46.80
LOG_TP8_TOKENS = 715_072
LOG_DCP8_TOKENS = 5_721_088
K2T = "kimi-k2-thinking"
K1T = "kimi-linear-1t"
CONTEXT_TOKENS = 28_112  # the case study's mean decode context


def test_layout_degrees_follow_the_engines_product_rules():
    tp, dp_ep = Layout(8), Layout(8, "dp", "ep")
    assert (tp.attn_tp, tp.attn_dp, tp.moe_tp, tp.moe_ep, tp.ranks_per_request) == (8, 1, 8, 1, 8)
    assert (dp_ep.attn_tp, dp_ep.attn_dp, dp_ep.moe_tp, dp_ep.moe_ep, dp_ep.ranks_per_request) == (1, 8, 1, 8, 1)
    assert Layout(8, "dp", "tp").moe_tp == 8
    assert [Layout(8).label, Layout(8, dcp=8).label, dp_ep.label] == ["tp8", "tp8 dcp8", "dp8 attention, ep8 experts"]


@pytest.mark.parametrize("model_id, layout, needles", [
    (K2T, Layout(1, "dp"), ["layout.attention", "at least 2 GPUs", "attention: tp"]),
    ("qwen3-235b-a22b", Layout(256, "dp", "ep"), ["layout.experts", "256 GPUs", "has 128", "experts: tp"]),
    ("llama-3.1-70b", Layout(8, "tp", "ep"), ["layout.experts", "dense", "experts: tp"]),
    (K2T, Layout(8, dcp=3), ["layout.dcp", "must divide", "8", "1, 2, 4, 8"]),
    (K2T, Layout(8, "dp", dcp=2), ["layout.dcp", "degree 1", "use one of 1"]),
    ("llama-3.1-70b", Layout(3), ["layout.attention", "cannot be split over 3 GPUs", "valid degrees: 1, 2, 4, 8"]),
    # FP8 block-128 experts of 1,536 channels over 8 GPUs: 192 a GPU, not whole blocks
    ("minimax-m2.5", Layout(8, "tp", "tp"), ["layout.experts", "(SGLang and vLLM refuse to load it)", "use experts: ep"]),
])
def test_a_layout_the_model_cannot_take_is_one_line_naming_the_field(model_id, layout, needles):
    with pytest.raises(InvalidInput) as exc:
        check_layout(load_model(model_id), layout)
    msg = str(exc.value)
    assert "\n" not in msg and all(n in msg for n in needles), msg


@pytest.mark.parametrize("tp", [2.5, True, 0, -2])
def test_a_tensor_parallel_degree_is_a_whole_number_of_at_least_1(tp):
    from prfaas_plan.layout import check_tp

    with pytest.raises(InvalidInput, match=rf"^tp: tensor-parallel degree must be a whole number >= 1, got {tp!r}$"):
        check_tp(load_model("llama-3.1-70b"), tp)
    assert check_tp(load_model("llama-3.1-70b"), 4.0) == 4


@pytest.mark.parametrize("kwargs, field", [({"attention": "sp"}, "layout.attention"), ({"experts": "xp"}, "layout.experts"),
                                           ({"dcp": 0}, "layout.dcp"), ({"gpus": 0}, "layout.gpus")])
def test_unknown_layout_values_are_rejected(kwargs, field):
    with pytest.raises(InvalidInput, match=field):
        Layout(**{"gpus": 8, **kwargs})


def test_instance_layout_must_span_its_gpus():
    h200 = load_gpu("h200")
    assert Instance(h200, 8).parallel == Layout(8)
    assert Instance(h200, 8, Layout(8, "dp", "ep")).parallel.attn_dp == 8
    with pytest.raises(InvalidInput, match="layout.gpus"):
        Instance(h200, 8, Layout(4))


@pytest.mark.parametrize("model", list_model_specs(), ids=lambda m: m.id)
def test_a_tp_layout_places_the_cache_as_the_tp_degree_and_dp_holds_whole_requests(model):
    for tp in (1, 2, 4, 8):
        if check_layout_ok(model, Layout(tp)):
            assert per_gpu_kv_bytes(model, 32768, Layout(tp)) == per_gpu_kv_bytes(model, 32768, tp)
    # DP attention: the rank that holds a request holds all of it, states unsplit (experts EP where
    # the engines refuse their TP split: the cache does not depend on where the experts are)
    experts = "ep" if expert_tp_problem(model, 8) else "tp"
    assert per_gpu_kv_bytes(model, 32768, Layout(8, "dp", experts)) == kv_bytes(model, 32768)


def check_layout_ok(model, layout) -> bool:
    try:
        check_layout(model, layout)
    except InvalidInput:
        return False
    return True


def test_dcp_token_shards_the_growing_cache():
    # DeepSeek-V3 MLA: 61 x 576 x 2 = 70,272 B/token; DCP8 holds 32,768 / 8 = 4,096 tokens per rank
    assert per_gpu_kv_bytes(load_model("deepseek-v3"), 32768, Layout(8, dcp=8)) == 70_272 * 4096 == 287_834_112
    # Qwen3-235B: 4 KV heads over TP8 are duplicated (1 head per rank: 94 x 256 x 2 = 48,128 B/token);
    # DCP2 gives each pair of ranks 1 head of 4 ranks' worth and half the tokens: half the bytes
    qwen = load_model("qwen3-235b-a22b")
    assert per_gpu_kv_bytes(qwen, 32768, 8) == 48_128 * 32768 == 1_577_058_304
    assert per_gpu_kv_bytes(qwen, 32768, Layout(8, dcp=2)) == 48_128 * 16384
    # MiniMax: 8 KV heads, 1 per TP8 rank, nothing duplicated: DCP2 saves nothing (2 heads x half the tokens)
    mm = load_model("minimax-m2.5")
    assert per_gpu_kv_bytes(mm, 32768, Layout(8, "tp", "ep", dcp=2)) == per_gpu_kv_bytes(mm, 32768, 8) == 1_040_187_392


def test_kimi_linear_1t_request_bytes_per_layout():
    # MLA 15 x 1,152 = 17,280 B/token; KDA state 183,168,000 B per request (60 heads per layer)
    m = load_model(K1T)
    latent = 17_280 * CONTEXT_TOKENS  # 485,775,360 B
    tp8_state = 183_168_000 * 8 // 60  # busiest rank: ceil(60 / 8) = 8 heads of 60 -> 24,422,400 B
    assert per_gpu_kv_bytes(m, CONTEXT_TOKENS, Layout(8)) == latent + tp8_state == 510_197_760
    assert per_gpu_kv_bytes(m, CONTEXT_TOKENS, Layout(8, "dp")) == latent + 183_168_000 == 668_943_360
    # DCP8: 3,514 tokens of latent per rank; the KDA state is request-indexed, not sharded by DCP
    assert per_gpu_kv_bytes(m, CONTEXT_TOKENS, Layout(8, dcp=8)) == 17_280 * 3514 + tp8_state == 85_144_320


def test_bs_max_of_the_1t_model_on_8xh20_per_layout():
    # With 5 GiB free per GPU (the case study's H20 has ~5.2 GiB beside weights and reserve):
    # TP8 floor(5,368,709,120 / 510,197,760) = 10; DCP8 floor(/ 85,144,320) = 63 (6.3x: the KDA
    # state stays); DP8 8 ranks x floor(/ 668,943,360) = 8 x 8 = 64
    m, free = load_model(K1T), 5 * GIB
    assert requests_per_instance_memory(m, 8, CONTEXT_TOKENS, free) == 10
    assert requests_per_instance_memory(m, Layout(8), CONTEXT_TOKENS, free) == 10
    assert requests_per_instance_memory(m, Layout(8, dcp=8), CONTEXT_TOKENS, free) == 63
    assert requests_per_instance_memory(m, Layout(8, "dp", "ep"), CONTEXT_TOKENS, free) == 64
    # but DP attention replicates 11.6e9 attention weights: it does not fit an H20 (96 GiB x 0.9)
    assert weight_bytes_per_gpu(m, Layout(8, "dp", "ep")) > 0.9 * load_gpu("h20").memory_bytes


def test_a_pure_mla_model_gets_8x_from_dcp8_or_dp8():
    m, free = load_model(K2T), 40 * GIB
    tp = requests_per_instance_memory(m, Layout(8), 8192, free)
    assert tp == 40 * GIB // (70_272 * 8192) == 74
    # DCP8: 1,024 tokens of latent per rank per request; DP8: 8 ranks of 74 whole requests each
    assert requests_per_instance_memory(m, Layout(8, dcp=8), 8192, free) == 40 * GIB // (70_272 * 1024) == 596
    assert requests_per_instance_memory(m, Layout(8, "dp", "ep"), 8192, free) == 8 * tp == 592


def test_a_request_holding_no_cache_is_one_line_not_a_division_by_zero():
    """A zero-token request of a pure-MLA model holds no bytes: how many fit is undefined, and the
    error names the length (a hybrid model's fixed states make even 0 tokens hold bytes)."""
    with pytest.raises(InvalidInput, match=r"^tokens: a request of 0 tokens holds no cache; give a positive length$"):
        requests_per_instance_memory(load_model(K2T), Layout(8), 0, 40 * GIB)
    assert requests_per_instance_memory(load_model(K1T), Layout(8), 0, 5 * GIB) > 0


def test_vllm_log_kv_bytes_per_token_and_dcp8_tokens():
    m = load_model(K2T)
    per_token = per_gpu_kv_bytes(m, 1, Layout(8))  # the whole latent on every TP rank
    assert per_token == 70_272
    assert LOG_KV_GIB * GIB / LOG_TP8_TOKENS == pytest.approx(per_token, rel=0.01)  # 70,274 B
    assert LOG_KV_GIB * GIB / per_token == pytest.approx(LOG_TP8_TOKENS, rel=0.01)
    # DCP8: 8 tokens cost one token's latent per rank, so the same memory holds 8x the tokens
    assert per_gpu_kv_bytes(m, 8, Layout(8, dcp=8)) == per_token
    assert LOG_KV_GIB * GIB * 8 / per_token == pytest.approx(LOG_DCP8_TOKENS, rel=0.01)


# Kimi-K2-Thinking replicated parameters under TP (vLLM): per MLA layer the fused q/kv
# down-projection 7168 x (1536 + 576) = 15,138,816 (disable_tp=True); per MoE layer the router
# 7168 x 384 = 2,752,512 (ReplicatedLinear); 61 and 60 layers, bf16.
K2T_REPLICATED_BYTES = (61 * 15_138_816 + 60 * 2_752_512) * 2  # 2,177,236,992 B
K2T_CHECKPOINT_BYTES = 594e9  # MEASUREMENTS.md #21


def test_kimi_k2_thinking_weights_per_gpu_under_tp8():
    m = load_model(K2T)
    total = m.weight_bytes().total_bytes
    assert total == pytest.approx(K2T_CHECKPOINT_BYTES, rel=0.001)  # 594.2 GB
    w = weight_bytes_per_gpu(m, Layout(8))
    assert w == pytest.approx((total - K2T_REPLICATED_BYTES) / 8 + K2T_REPLICATED_BYTES, rel=1e-9)  # 76.18 GB
    # what is split is the checkpoint's 1/8 within 1%; the replicated down-projections add 1.9 GB
    assert w - 7 / 8 * K2T_REPLICATED_BYTES == pytest.approx(594.2e9 / 8, rel=0.01)


def test_kimi_k2_thinking_weights_per_gpu_under_dp_attention():
    # DP8 attention: every GPU holds attention (61 x 101,122,048), the dense layer (3 x 7168 x 18432),
    # 60 shared experts (3 x 7168 x 2048), routers, both 163,840 x 7168 tables in bf16, and
    # 384 / 8 = 48 routed experts per MoE layer at 0.5625 B
    m = load_model(K2T)
    bf16_params = 61 * 101_122_048 + 3 * 7168 * 18432 + 60 * 3 * 7168 * 2048 + 60 * 2_752_512 + 2 * 163_840 * 7168
    expert_bytes = 3 * 7168 * 2048 * 0.5625
    expected = bf16_params * 2 + 60 * 48 * expert_bytes  # 94.79 GB
    assert weight_bytes_per_gpu(m, Layout(8, "dp", "ep")) == pytest.approx(expected, rel=1e-9)
    assert weight_bytes_per_gpu(m, Layout(8, "dp", "tp")) == pytest.approx(expected, rel=1e-9)
    # EP over 7 GPUs: vLLM gives the remainder to the first ranks, ceil(384 / 7) = 55 on the busiest
    extra = weight_bytes_per_gpu(m, Layout(7, "dp", "ep")) - weight_bytes_per_gpu(m, Layout(8, "dp", "ep"))
    assert extra == pytest.approx(60 * (55 - 48) * expert_bytes, rel=1e-9)


def test_gqa_kv_projections_replicate_below_one_head_per_rank():
    # Qwen3-235B (bf16): 4 KV heads over TP8 -> each rank holds 1 KV head of wk and wv (4096 x 128
    # each) instead of half a head; the router (4096 x 128, 94 layers) is whole on every rank
    m = load_model("qwen3-235b-a22b")
    extra = 94 * 2 * 4096 * 128 * (1 - 4 / 8) * 2 + 94 * 4096 * 128 * 2 * 7 / 8
    assert weight_bytes_per_gpu(m, Layout(8)) == pytest.approx(m.weight_bytes().total_bytes / 8 + extra, rel=1e-9)


def test_tp_collectives_byte_counts():
    # Kimi-K2-Thinking TP8, a decode step of 64 tokens: 64 x 7168 x 2 = 917,504 B per all-reduce
    got = collectives(load_model(K2T), Layout(8), 64, "generation")
    assert got == [Collective("all_reduce", 917_504, 8, 61, "attention"), Collective("all_reduce", 917_504, 8, 1, "dense_ffn"),
                   Collective("all_reduce", 917_504, 8, 60, "moe"),
                   Collective("all_gather", 64 * 163_840 * 2, 8, 1, "lm_head")]  # vocab-split logits
    # prefill samples one token per request: no logits gather
    assert [c.after for c in collectives(load_model(K2T), Layout(8), 4096, "context")] == ["attention", "dense_ffn", "moe"]


def test_dp_attention_collectives_byte_counts():
    k2t, ds = load_model(K2T), load_model("deepseek-v3")
    # DP8 + EP8, 8,192 prefill tokens: 1,024 per rank; top-8 x 7168; int4_w4a16 experts take bf16
    # activations: 1,024 x 8 x 7168 x 2 = 117,440,512 B each way, 60 MoE layers, no attention collectives
    assert collectives(k2t, Layout(8, "dp", "ep"), 8192, "context") == [
        Collective("all_to_all", 117_440_512, 8, 60, "moe_dispatch", 1024),
        Collective("all_to_all", 117_440_512, 8, 60, "moe_combine", 1024)]
    # DeepSeek-V3 (fp8_block experts): FP8 dispatch, 1 B + 4 B per 128 channels = 1.03125 B per element
    dispatch, combine = collectives(ds, Layout(8, "dp", "ep"), 8192, "context")
    assert (dispatch.message_bytes, combine.message_bytes, dispatch.count_per_forward) == (60_555_264, 117_440_512, 58)
    # DP8 + TP experts: gather every rank's tokens (8,192 x 7168 x 2 B) before, reduce-scatter after
    assert collectives(k2t, Layout(8, "dp", "tp"), 8192, "context") == [
        Collective("all_gather", 117_440_512, 8, 60, "moe_dispatch"),
        Collective("reduce_scatter", 117_440_512, 8, 60, "moe_combine")]
    # a dense model in DP: independent replicas, nothing to communicate
    assert collectives(load_model("llama-3.1-70b"), Layout(8, "dp"), 8192, "generation") == []


def test_dcp_collectives_byte_counts():
    # TP8 + DCP8 decode of 64 tokens: each rank gathers the queries of all 64 heads (8 per rank x 8),
    # latent + RoPE = 576 wide: 64 x 64 x 576 x 2 = 4,718,592 B; LSE 64 x 64 x 4 = 16,384 B; outputs
    # in the latent, 64 x 64 x 512 x 2 = 4,194,304 B, reduce-scattered; per MLA layer (61)
    got = collectives(load_model(K2T), Layout(8, dcp=8), 64, "generation")
    assert got[-3:] == [Collective("all_gather", 4_718_592, 8, 61, "dcp_query"), Collective("all_gather", 16_384, 8, 61, "dcp_lse"),
                        Collective("reduce_scatter", 4_194_304, 8, 61, "dcp_output")]
    assert len(collectives(load_model(K2T), Layout(8, dcp=8), 64, "context")) == 3  # DCP is a decode layout


def test_dcp_collectives_of_hybrid_models_run_on_their_full_attention_layers_only():
    """DCP splits the cache of full attention only (a window's or a linear state's does not grow).
    MiMo-V2-Flash (config: 9 full + 39 SWA layers, 64 heads, q/k 192, v 128) at TP8 x DCP2: the
    DCP group holds 64 / 8 x 2 = 16 heads, so 64 decode tokens gather 64 x 16 x 192 x 2 B of queries
    and 64 x 16 x 4 B of log-sum-exps, and scatter 64 x 16 x 128 x 2 B of outputs, in 9 layers.
    Qwen3.5-397B (15 full layers of 32 heads of 256 + 45 GDN): 64 x 8 x 256 x 2 both ways, 15 layers."""
    dcp = [c for c in collectives(load_model("mimo-v2-flash"), Layout(8, dcp=2), 64, "generation")
           if c.after.startswith("dcp")]
    assert dcp == [Collective("all_gather", 64 * 16 * 192 * 2, 2, 9, "dcp_query"),
                   Collective("all_gather", 64 * 16 * 4, 2, 9, "dcp_lse"),
                   Collective("reduce_scatter", 64 * 16 * 128 * 2, 2, 9, "dcp_output")]
    dcp = [c for c in collectives(load_model("qwen3.5-397b-a17b"), Layout(8, dcp=2), 64, "generation")
           if c.after.startswith("dcp")]
    assert dcp == [Collective("all_gather", 64 * 8 * 256 * 2, 2, 15, "dcp_query"),
                   Collective("all_gather", 64 * 8 * 4, 2, 15, "dcp_lse"),
                   Collective("reduce_scatter", 64 * 8 * 256 * 2, 2, 15, "dcp_output")]


def test_unknown_phase_is_rejected():
    with pytest.raises(InvalidInput, match="phase"):
        collectives(load_model(K2T), Layout(8), 64, "decode")


def _scenario_with(tmp_path, local_layout: str):
    from prfaas_plan.data import builtin_dir

    text = (builtin_dir("prfaas_plan.data.scenarios") / "paper-case-study.yaml").read_text()
    assert "\nlocal:\n" in text
    path = tmp_path / "layout.yaml"
    path.write_text(text.replace("\nlocal:\n", f"\nlocal:\n  layout: {local_layout}\n", 1))
    return path


def test_a_scenario_pool_names_its_layout(tmp_path):
    from prfaas_plan.scenario import load_scenario

    default = load_scenario("paper-case-study")
    assert default.local_instance.layout is None and default.prfaas_instance.layout is None  # today's behaviour
    sc = load_scenario(_scenario_with(tmp_path, "{attention: tp, dcp: 8}"))
    assert sc.local_instance.parallel == Layout(8, dcp=8) and sc.prfaas_instance.layout is None


@pytest.mark.parametrize("layout, needle", [("{attention: sp}", "local.layout.attention"),
                                            ("{attention: dp, dcp: 2}", "local.layout.dcp"),
                                            ("{attention: dp, attention_tp: 3}", "layout.attention_tp")])
def test_a_bad_scenario_layout_is_one_line_and_exit_2(tmp_path, layout, needle):
    path = _scenario_with(tmp_path, layout)
    r = subprocess.run([sys.executable, "-m", "prfaas_plan.cli", "plan", str(path)], capture_output=True, text=True,
                       timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert needle in lines[0], lines[0]


# ----------------------------------------------------------------------------- TP groups inside DP replicas
def test_mixed_layout_degrees_labels_and_canonical_defaults():
    mixed = Layout(8, "dp", "ep", attention_tp=4)
    assert (mixed.attn_tp, mixed.attn_dp, mixed.moe_tp, mixed.moe_ep) == (4, 2, 1, 8)
    assert mixed.label == "tp4 x dp2 attention, ep8 experts"
    # the defaults spelt out are the same layout (one canonical value: equal, same cache keys)
    assert Layout(8, "dp", attention_tp=1) == Layout(8, "dp") and Layout(8, "tp", attention_tp=8) == Layout(8)


@pytest.mark.parametrize("kwargs, needles", [
    (dict(gpus=8, attention="dp", attention_tp=3), ["layout.attention_tp", "must divide", "use one of 1, 2, 4"]),
    (dict(gpus=8, attention="dp", attention_tp=8), ["layout.attention_tp", "at least 2", "use one of 1, 2, 4"]),
    (dict(gpus=8, attention="tp", attention_tp=4), ["layout.attention_tp", "attention: dp"]),
    (dict(gpus=8, attention="dp", attention_tp=0), ["layout.attention_tp", ">= 1"]),
])
def test_an_impossible_attention_tp_is_one_line(kwargs, needles):
    with pytest.raises(InvalidInput) as exc:
        Layout(**kwargs)
    msg = str(exc.value)
    assert "\n" not in msg and all(n in msg for n in needles), msg


def test_mixed_layout_checks_the_tp_group_against_the_heads():
    # Llama-3.1-70B has 8 KV heads and 64 query heads: TP groups of 2 in 4 replicas are fine, and
    # MiniMax-M2.5's 48 query heads do not split over 32 (a 64-GPU instance with tp32 x dp2)
    assert check_layout(load_model("llama-3.1-70b"), Layout(8, "dp", attention_tp=2)).attn_dp == 4
    with pytest.raises(InvalidInput, match="layout.attention: minimax-m2.5 cannot be split over 32 GPUs"):
        check_layout(load_model("minimax-m2.5"), Layout(64, "dp", "ep", attention_tp=32))


def test_mixed_layout_cache_per_gpu_and_requests():
    # Qwen3-235B-A22B: 94 layers of 4 KV heads x (128 + 128), bf16. TP groups of 2: 2 KV heads per
    # GPU = 2 x 256 x 2 B x 94 = 96,256 B per token; the 4 replicas each fit their own requests
    m = load_model("qwen3-235b-a22b")
    mixed = Layout(8, "dp", attention_tp=2)
    assert per_gpu_kv_bytes(m, 32768, mixed) == 96_256 * 32768 == per_gpu_kv_bytes(m, 32768, 2)
    free = 40 * GIB
    assert requests_per_instance_memory(m, mixed, 32768, free) == 4 * (free // (96_256 * 32768)) == 52
    # TP8 shards to one KV head per rank but every rank holds every request: 27
    assert requests_per_instance_memory(m, Layout(8), 32768, free) == free // (48_128 * 32768) == 27


def test_mixed_layout_weights_per_gpu():
    # Kimi-K2-Thinking, attention TP4 inside 2 DP replicas, experts EP8: everything but the routed
    # experts as TP4; routed experts 384 / 8 = 48 per GPU instead of TP4+EP4's 96, each
    # 3 x 7168 x 2048 int4 g32 weights, 60 MoE layers
    m = load_model(K2T)
    expert_bytes = 3 * 7168 * 2048 * m.weight_bytes_per_param("experts")
    less = 60 * (96 - 48) * expert_bytes
    assert weight_bytes_per_gpu(m, Layout(8, "dp", "ep", attention_tp=4)) == pytest.approx(
        weight_bytes_per_gpu(m, Layout(4, "tp", "ep")) - less, rel=1e-12)


def test_mixed_layout_collectives_byte_counts():
    k2t = load_model(K2T)
    replica = 4096 * 7168 * 2  # 8,192 prefill tokens over 2 replicas, bf16 hidden states: 58,720,256 B
    # experts TP over all 8: all-reduce within each TP group of 4 after attention and the dense FFN,
    # all-gather / reduce-scatter the replicas' tokens over the 2 ranks of each TP index, then the
    # TP group's all-reduce of the partial sums
    assert collectives(k2t, Layout(8, "dp", "tp", attention_tp=4), 8192, "context") == [
        Collective("all_reduce", replica, 4, 61, "attention"), Collective("all_reduce", replica, 4, 1, "dense_ffn"),
        Collective("all_gather", 2 * replica, 2, 60, "moe_dispatch"),
        Collective("reduce_scatter", 2 * replica, 2, 60, "moe_combine"), Collective("all_reduce", replica, 4, 60, "moe")]
    # experts EP8: each of the 4 TP ranks dispatches a quarter of its replica's 4,096 tokens
    # (1,024 x top-8 x 7168 x 2 B, bf16 activations of int4_w4a16 experts), then gathers them back
    got = collectives(k2t, Layout(8, "dp", "ep", attention_tp=4), 8192, "generation")
    assert got[2:] == [Collective("all_to_all", 117_440_512, 8, 60, "moe_dispatch", 1024),
                       Collective("all_to_all", 117_440_512, 8, 60, "moe_combine", 1024),
                       Collective("all_gather", replica, 4, 60, "moe_gather"),
                       Collective("all_gather", 4096 * 163_840 * 2, 4, 1, "lm_head")]


def test_ops_shard_projections_by_the_layouts_rule():
    from prfaas_plan.perf.ops import attention_core, attention_gemms, forward_ops

    # kimi-linear-1t's KDA: 60 heads of 128 over 8 ranks, the busiest holds 8 (not 7.5): q, k, v
    # 3 x 8 x 128 = 3,072 wide plus beta's 8, the gates' up-projections 2 x 1,024, o_proj 1,024 rows
    k1t = load_model(K1T)
    got = sorted((g.n, g.k) for g in attention_gemms(k1t, "kda", 8))
    assert got == sorted([(3072 + 8, 7168), (2 * 128, 7168), (2 * 1024, 128), (7168, 1024)])
    assert projection_shard(k1t.attention["kda"], "w_qkv", (7168, 23040), 8) == ("column", 3072, 7168)
    # Qwen3-235B at TP8: 8 query heads and one whole KV head (of 4, replicated) per rank
    q3 = load_model("qwen3-235b-a22b")
    assert sorted((g.n, g.k) for g in attention_gemms(q3, "full", 8)) == [(1280, 4096), (4096, 1024)]
    # the weights per GPU count the same shards (every model, every TP degree it takes)
    for m in list_model_specs():
        for tp in (2, 8):
            if not check_layout_ok(m, Layout(tp)):
                continue
            for name, attn in m.attention.items():
                shapes = attn.gemm_shapes(m.hidden_size)
                held = sum(a * b * projection_split(attn, w, tp)[1] for w, (a, b) in shapes.items())
                run = sum(g.n * g.k for g in attention_gemms(m, name, tp))
                assert run == pytest.approx(held, rel=1e-3), (m.id, name, tp)
    # a mixed layout's decode runs each replica's share of the batch on its TP group's heads
    core = attention_core(q3, "full", Layout(8, "dp", attention_tp=2).attn_tp, "bf16")
    assert (core.heads, core.kv_heads) == (32, 2)
    comm = [s.op for s in forward_ops(q3, Layout(8, "dp", "ep", attention_tp=2), phase="decode") if s.op.family == "comm"]
    assert [(c.name, c.ranks, c.token_fraction) for c in comm] == [
        ("comm.all_reduce.attention", 2, 1.0), ("comm.all_to_all.moe_dispatch", 8, 0.5),
        ("comm.all_gather.moe_gather", 2, 1.0), ("comm.all_gather.lm_head", 2, 1.0)]
