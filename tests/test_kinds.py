"""The layer kinds own the arithmetic: one parameter count, checked against published totals and
checkpoint tensor shapes, and used alike by the performance model, the HF import and the bench."""

from __future__ import annotations

from pathlib import Path

import pytest

from prfaas_plan.model import list_model_specs, load_model
from prfaas_plan.model.hf_config import count_params, load_hf_config
from prfaas_plan.perf.roofline import layer_costs

HF_DIR = Path(__file__).parent / "fixtures" / "hf"

# Published total parameters (count) of each checkpoint, and where they are published. Our count
# leaves out norms and multi-token-prediction layers, so it lands a little below.
PUBLISHED_TOTALS = {
    # "671B of the Main Model weights and 14B of the Multi-Token Prediction (MTP) Module weights"
    "deepseek-v3": (671e9, "https://huggingface.co/deepseek-ai/DeepSeek-V3"),
    # V3's shapes plus the indexer's replicated projections (0.85B, 0.13% of it)
    "deepseek-v3.2": (671e9, "https://huggingface.co/deepseek-ai/DeepSeek-V3"),
    # GLM-5 technical report, architecture table: 744B total
    "glm-5": (744e9, "https://arxiv.org/abs/2602.15763"),
    # safetensors metadata of the checkpoint (tests/fixtures/hf/SOURCES.md)
    "kimi-k2": (1_026_470_731_056, "https://huggingface.co/moonshotai/Kimi-K2-Instruct"),
    # K2-Thinking is K2's architecture (its config.json differs in quantization_config and context
    # only); its INT4 safetensors count packed words, so K2-Instruct's total is the published one
    "kimi-k2-thinking": (1_026_470_731_056, "https://huggingface.co/moonshotai/Kimi-K2-Instruct"),
    # Kimi-K2.5's text model has K2's shapes (its vision tower is left out); the NVFP4 release quantises it
    "kimi-k2.5-nvfp4": (1_026_470_731_056, "https://huggingface.co/moonshotai/Kimi-K2-Instruct"),
    # safetensors metadata.total_parameters
    "kimi-linear-48b-a3b": (49_122_681_728, "https://huggingface.co/moonshotai/Kimi-Linear-48B-A3B-Instruct"),
    "llama-3.1-70b": (70.6e9, "https://huggingface.co/meta-llama/Llama-3.1-70B"),
    "llama-3.3-70b-nvfp4": (70.6e9, "https://huggingface.co/meta-llama/Llama-3.1-70B"),  # 3.1's shapes, quantised
    "llama-3.1-8b": (8.03e9, "https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct"),
    "qwen3-32b": (32.8e9, "https://huggingface.co/Qwen/Qwen3-32B"),
    "mimo-v2-flash": (309e9, "https://huggingface.co/XiaomiMiMo/MiMo-V2-Flash"),
    # model card Table 1 (its count holds the ~40 M attention and expert biases we leave out)
    "gpt-oss-120b": (116.83e9, "https://arxiv.org/abs/2508.10925"),
    # the NVFP4 release quantises MiniMax-M2.5's weights: the same parameters as its safetensors count
    "minimax-m2.5-nvfp4": (229e9, "https://huggingface.co/MiniMaxAI/MiniMax-M2.5"),
    "minimax-m2.5": (229e9, "https://huggingface.co/MiniMaxAI/MiniMax-M2.5"),
    "qwen3-235b-a22b": (235e9, "https://huggingface.co/Qwen/Qwen3-235B-A22B"),
    "qwen3-235b-a22b-fp8": (235e9, "https://huggingface.co/Qwen/Qwen3-235B-A22B-FP8"),
    "qwen3-next-80b-a3b": (80e9, "https://huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct"),
    "qwen3.5-397b-a17b": (397e9, "https://huggingface.co/Qwen/Qwen3.5-397B-A17B"),
    # the NVFP4 release quantises Qwen3.5-397B-A17B's weights: the base model's parameters
    "qwen3.5-397b-a17b-nvfp4": (397e9, "https://huggingface.co/Qwen/Qwen3.5-397B-A17B"),
    "ring-2.5-1t": (1012.5e9, "https://huggingface.co/inclusionAI/Ring-2.5-1T"),
}
# kimi-linear-1t is the PrfaaS paper's unreleased internal model: no checkpoint, no published total.
UNPUBLISHED = {"kimi-linear-1t"}


def test_every_model_is_checked_or_has_no_published_total():
    assert {m.id for m in list_model_specs()} == set(PUBLISHED_TOTALS) | UNPUBLISHED


@pytest.mark.parametrize("model_id", sorted(PUBLISHED_TOTALS))
def test_parameter_count_within_half_a_percent_of_the_published_total(model_id):
    published, _url = PUBLISHED_TOTALS[model_id]
    total = load_model(model_id).param_counts().total
    assert total == pytest.approx(published, rel=0.005)


def _kda_layer_params_from_checkpoint_shapes(hidden: int, heads: int, head_dim: int, kernel: int) -> int:
    """One KDA layer as Kimi-Linear's checkpoint stores it (modeling_kimi.py KimiDeltaAttention):
    q/k/v_proj [hidden -> H*d]; f_a_proj, g_a_proj [hidden -> d]; f_b_proj, g_b_proj [d -> H*d]
    (the output gate is low-rank, like the decay gate); b_proj [hidden -> H]; o_proj [H*d -> hidden];
    q/k/v short convs [H*d x kernel]; A_log [H]; dt_bias [H*d]."""
    inner = heads * head_dim
    return (3 * hidden * inner + 2 * (hidden * head_dim + head_dim * inner) + hidden * heads + inner * hidden
            + 3 * inner * kernel + heads + inner)


@pytest.mark.parametrize("model_id, hidden, heads", [("kimi-linear-48b-a3b", 2304, 32), ("kimi-linear-1t", 7168, 60)])
def test_kda_layer_has_the_checkpoints_low_rank_output_gate(model_id, hidden, heads):
    kda = load_model(model_id).attention["kda"]
    assert kda.gemm_params(hidden) + kda.vector_params(hidden) == _kda_layer_params_from_checkpoint_shapes(
        hidden, heads, 128, 4)
    if model_id == "kimi-linear-1t":  # the figure: 224,524,288 projections and convs
        assert kda.gemm_params(hidden) + 3 * 7680 * 4 == 224_524_288


def _perf_params(model) -> float:
    """Parameters the roofline streams: its weight bytes over the bytes of each weight."""
    c = layer_costs(model)
    dense_b = model.weight_bytes_per_param("attention")
    assert dense_b == 2.0  # both models keep every weight but the routed experts in bf16
    routed_b = model.weight_bytes_per_param("experts")
    routed = model.param_counts().routed
    return (c.weight_bytes - routed * routed_b) / dense_b + routed


@pytest.mark.parametrize("model_id", ["kimi-linear-48b-a3b", "kimi-linear-1t"])
def test_one_parameter_count_in_perf_import_and_bench(model_id):
    m = load_model(model_id)
    total = m.param_counts().total
    assert _perf_params(m) == total
    assert count_params(m)[0] == total
    if model_id == "kimi-linear-48b-a3b":  # the HF import of the real config counts the same
        assert load_hf_config(HF_DIR / "kimi-linear-48b-a3b.json").total_params == total
    # perf's GEMM FLOPs are twice the matmul weights a token passes through
    assert layer_costs(m).gemm_flops_per_token == 2 * m.param_counts().gemm_per_token


def test_scaled_torch_model_is_built_from_the_kinds_shapes():
    torch = pytest.importorskip("torch")
    from prfaas_plan import bench
    from prfaas_plan.bench.scale import ScaleSpec

    tiny = ScaleSpec(hidden_size=64, dim_scale=0.125, layers=4, max_experts=4, max_experts_per_token=2, vocab_size=256)
    small = bench.scale_model(load_model("kimi-linear-48b-a3b"), tiny, "fp32")
    model = bench.ScaledModel(small, dtype="fp32")
    assert model.total_params() == small.param_counts().total == small.total_params
    kda = next(layer for layer, _ in model.layers if isinstance(layer, bench.KDALayer))
    assert {n: tuple(w.shape) for n, w in kda.gemm.items()} == small.attention["kda"].gemm_shapes(64)
    assert torch.is_tensor(kda.gemm["w_g_a"])


def test_gqa_tensor_parallel_needs_whole_query_heads_and_kv_heads_that_divide_or_replicate():
    """12 query heads, 4 KV heads: TP 2 and 4 split both; TP 8 replicates KV heads (8 is a multiple
    of 4) but would split query heads 1.5 a rank; TP 3 neither divides 4 KV heads nor is a multiple."""
    from prfaas_plan.model.kinds import GQA

    gqa = GQA(kind="gqa", num_heads=12, num_kv_heads=4, head_dim_k=128, head_dim_v=128)
    assert gqa.tp_problem(2) is None and gqa.tp_problem(4) is None
    assert gqa.tp_problem(8) == "has 12 query heads, not divisible by 8"
    assert gqa.tp_problem(3) == "has 4 KV heads: 3 neither divides them nor is a multiple of them"


def test_kda_with_separate_key_heads_is_not_scaled_silently():
    """The bench layers build KDA with key heads and dims equal to the value ones; a KDA whose keys
    differ is refused by the scaler instead of being scaled as if they were equal."""
    from prfaas_plan.errors import InvalidInput
    from prfaas_plan.model.kinds import KDA

    same = KDA(kind="kda", num_heads=32, head_dim=128, conv_kernel=4)
    assert same.scaled(lambda n: n // 4, lambda d: d // 2).model_dump() == {**same.model_dump(), "num_heads": 8, "head_dim": 64}
    for keys in ({"num_k_heads": 16}, {"head_dim_k": 64}):
        with pytest.raises(InvalidInput, match="^scale: KDA with separate key heads or dims is not supported"):
            KDA(kind="kda", num_heads=32, head_dim=128, conv_kernel=4, **keys).scaled(lambda n: n, lambda d: d)
