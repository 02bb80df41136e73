"""GEMM dtypes per class (model.quant): weight bytes against the checkpoints' published sizes,
per-scenario overrides by their closed form, and one-line errors for bad input."""

from __future__ import annotations

import pytest

from prfaas_plan.errors import InvalidInput, PlanError
from prfaas_plan.model import list_model_specs, load_model
from prfaas_plan.model.quant import GemmDtypes
from prfaas_plan.vocab import GEMM_CLASSES

FP8_BLOCK_B = 1 + 4 / (128 * 128)  # e4m3 weight + one fp32 scale per 128 x 128 block
INT4_G32_B = 0.5 + 2 / 32  # int4 weight + one bf16 scale per 32 weights
MXFP4_B = 0.5 + 1 / 32  # e2m1 weight + one 8-bit e8m0 scale per block of 32 (OCP MX v1.0)
NVFP4_B = 0.5 + 1 / 16  # e2m1 weight + one FP8 (e4m3) scale per block of 16 (NVIDIA's NVFP4)


def _fp8_and_bf16_params(model) -> tuple[int, int]:
    """(parameters in the quantised classes, parameters kept bf16) of a model whose
    attention, dense FFN and experts share one dtype and whose LM head is bf16."""
    p = model.param_counts()
    bf16 = p.embedding + p.router + p.attention_vector
    return p.total - bf16, bf16


def test_bytes_per_param_closed_forms():
    assert GemmDtypes.uniform("bf16").bytes_per_param("experts") == 2.0
    assert GemmDtypes.uniform("fp8").bytes_per_param("attention") == 1.0
    assert GemmDtypes.uniform("fp8_block").bytes_per_param("dense_ffn") == FP8_BLOCK_B
    assert GemmDtypes.uniform("int4_w4a16", group_size=32).bytes_per_param("lm_head") == INT4_G32_B == 0.5625
    assert GemmDtypes.uniform("int4_w4a16", group_size=128).bytes_per_param("experts") == 0.5 + 2 / 128
    assert GemmDtypes.uniform("mxfp4_w4a16").bytes_per_param("experts") == MXFP4_B == 0.53125
    assert GemmDtypes.uniform("mxfp4_w4a8").bytes_per_param("experts") == MXFP4_B  # same weights, MXFP8 activations
    assert GemmDtypes.uniform("nvfp4").bytes_per_param("experts") == NVFP4_B == 0.5625


def test_deepseek_v3_reproduces_the_published_safetensors_by_dtype():
    # Hugging Face API, deepseek-ai/DeepSeek-V3 (DeepSeek-R1 identical), safetensors parameters:
    # F8_E4M3 680,571,043,840; BF16 3,918,786,560; F32 41,555,600 (the block scales). They include
    # the MTP module, which README_WEIGHTS.md describes as one more hidden layer of the main
    # layers' structure (layer 61, MoE) plus eh_proj (2h -> h, bf16) and its own copies of the
    # embedding and the head (https://github.com/deepseek-ai/DeepSeek-V3/blob/main/README_WEIGHTS.md).
    m = load_model("deepseek-v3")
    h, f = m.hidden_size, m.ffn
    mtp_fp8 = m.attention["mla"].gemm_params(h) + 3 * h * f.shared_intermediate + f.num_experts * f.expert_params(h)
    mtp_bf16 = m.param_counts().embedding + 2 * h * h + f.num_experts * h
    fp8, bf16 = _fp8_and_bf16_params(m)
    assert fp8 + mtp_fp8 == 680_571_043_840  # exactly: every Linear of the layers is FP8
    assert bf16 + mtp_bf16 == pytest.approx(3_918_786_560, rel=3e-4)  # norms (1.0M) left out
    # closed-form scales (no rounding up of partial blocks) vs the stored fp32 scales
    assert (fp8 + mtp_fp8) / 128**2 == pytest.approx(41_555_600, rel=1e-3)
    published_bytes = 680_571_043_840 + 2 * 3_918_786_560 + 4 * 41_555_600  # 688.58 GB
    ours = m.weight_bytes().total_bytes + mtp_fp8 * FP8_BLOCK_B + mtp_bf16 * 2
    assert ours == pytest.approx(published_bytes, rel=2e-4)
    assert m.weight_bytes().total_bytes / 1e9 == pytest.approx(673.15, abs=0.01)  # without the MTP module


@pytest.mark.parametrize("model_id, published", [
    # safetensors totals next to the copied configs (tests/fixtures/hf/SOURCES.md); they count
    # each fp32 block scale as a parameter, so they check the 128 x 128 block size too
    ("minimax-m2.5", 228_703_644_928), ("kimi-k2", 1_026_470_731_056)])
def test_fp8_block_checkpoints_parameter_totals_include_one_scale_per_block(model_id, published):
    m = load_model(model_id)
    fp8, bf16 = _fp8_and_bf16_params(m)
    assert fp8 + bf16 + fp8 / 128**2 == pytest.approx(published, rel=1e-5)  # norms left out
    assert m.weight_bytes().total_bytes == fp8 * FP8_BLOCK_B + bf16 * 2


def test_weight_bytes_by_class_kimi_k2_thinking():
    # int4 g32 routed experts, everything else bf16 (its quantization_config): 594 GB checkpoint
    # (hardware_db/MEASUREMENTS.md #21)
    m = load_model("kimi-k2-thinking")
    p, w = m.param_counts(), m.weight_bytes()
    assert (m.gemm_dtype("experts"), m.gemm_dtype("attention"), m.gemm_dtype("lm_head")) == ("int4_w4a16", "bf16", "bf16")
    assert w.experts_bytes == p.routed * INT4_G32_B == 60 * 384 * 3 * 7168 * 2048 * INT4_G32_B
    assert w.attention_bytes == 2 * p.attention_gemm
    assert w.dense_ffn_bytes == 2 * (3 * 7168 * 18432 + 60 * 3 * 7168 * 2048)  # dense layer + shared experts
    assert w.lm_head_bytes == 2 * 163840 * 7168
    assert w.expert_bytes == 3 * 7168 * 2048 * INT4_G32_B
    assert w.total_bytes / 1e9 == pytest.approx(594, rel=0.005)
    assert w.total_bytes == w.outside_experts_bytes + w.experts_bytes


def test_gpt_oss_120b_weights_match_its_published_checkpoint_size():
    # MXFP4 routed experts, everything else bf16 (its quantization_config); the model card
    # (arXiv 2508.10925, Table 1) gives a 60.8 GiB checkpoint. Ours leaves out the ~40 M bf16
    # biases and the norms (~0.08 GiB).
    m = load_model("gpt-oss-120b")
    p, w = m.param_counts(), m.weight_bytes()
    assert w.experts_bytes == p.routed * MXFP4_B == 36 * 128 * 3 * 2880 * 2880 * MXFP4_B
    assert w.total_bytes == w.experts_bytes + 2 * (p.total - p.routed)
    assert w.total_bytes / 2**30 == pytest.approx(60.8, rel=0.003)


def _release_of(base_id: str, release_id: str):
    """(base checkpoint, its NVFP4 release) after checking the release keeps the base's parameters and layers:
    a release quantises, it does not prune."""
    base, release = load_model(base_id), load_model(release_id)
    assert release.param_counts() == base.param_counts() and release.layer_kinds == base.layer_kinds
    return base, release


def test_minimax_nvfp4_release_is_the_fp8_checkpoint_with_nvfp4_experts_and_bf16_attention():
    # NVIDIA's NVFP4 release (its quantization_config: every Linear but lm_head, the routers and
    # self_attn in NVFP4): 62 x 256 routed experts of 3 x 3072 x 1536 at 0.5625 B, attention bf16
    fp8, fp4 = _release_of("minimax-m2.5", "minimax-m2.5-nvfp4")
    w = fp4.weight_bytes()
    assert w.experts_bytes == 62 * 256 * 3 * 3072 * 1536 * NVFP4_B
    assert w.attention_bytes == 2 * fp8.param_counts().attention_gemm
    assert w.total_bytes / 1e9 == pytest.approx(134.40, abs=0.01)


def test_qwen35_nvfp4_release_is_the_bf16_checkpoint_with_nvfp4_routed_experts():
    # NVIDIA's NVFP4 release (hf_quant_config exclude_modules: lm_head, linear_attn*, self_attn*, the shared
    # experts): 60 x 512 routed experts of 3 x 4096 x 1024 at 0.5625 B; every other class bf16
    bf16, fp4 = _release_of("qwen3.5-397b-a17b", "qwen3.5-397b-a17b-nvfp4")
    w, b = fp4.weight_bytes(), bf16.weight_bytes()
    assert w.experts_bytes == 60 * 512 * 3 * 4096 * 1024 * NVFP4_B
    assert (w.attention_bytes, w.dense_ffn_bytes, w.lm_head_bytes) == (b.attention_bytes, b.dense_ffn_bytes,
                                                                      b.lm_head_bytes)
    assert w.total_bytes == b.total_bytes - 60 * 512 * 3 * 4096 * 1024 * (2 - NVFP4_B)
    assert w.total_bytes / 1e9 == pytest.approx(237.03, abs=0.01)


def test_kimi_k25_nvfp4_release_quantises_every_linear_but_attention_and_the_lm_head():
    # its quantization_config ignores only self_attn* and lm_head: the routed experts (60 MoE layers x 384 x
    # 3 x 7168 x 2048), the shared experts (60 x 3 x 7168 x 2048) and layer 0's dense MLP (3 x 7168 x 18432)
    # at 0.5625 B a weight; attention and LM head bf16, as in Kimi-K2-Thinking's INT4 release
    int4, fp4 = _release_of("kimi-k2-thinking", "kimi-k2.5-nvfp4")
    w, k = fp4.weight_bytes(), int4.weight_bytes()
    assert w.experts_bytes == 60 * 384 * 3 * 7168 * 2048 * NVFP4_B
    assert w.dense_ffn_bytes == (60 * 3 * 7168 * 2048 + 3 * 7168 * 18432) * NVFP4_B
    assert (w.attention_bytes, w.lm_head_bytes) == (k.attention_bytes, k.lm_head_bytes)
    assert w.total_bytes / 1e9 == pytest.approx(589.84, abs=0.01)


def test_llama_nvfp4_release_quantises_attention_and_mlp_and_matches_the_hubs_stored_count():
    # ModelOpt's NVFP4 default: every decoder Linear W4A4 (0.5625 B a weight with its FP8 scales), LM head bf16
    bf16, fp4 = _release_of("llama-3.1-70b", "llama-3.3-70b-nvfp4")
    linear = 80 * (2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672)
    w = fp4.weight_bytes()
    assert w.attention_bytes + w.dense_ffn_bytes == linear * NVFP4_B
    assert w.lm_head_bytes == 2 * 128256 * 8192
    # the Hub's 41B "parameters" of the release count stored elements: two e2m1 per byte, one FP8 scale per 16,
    # bf16 embeddings and LM head
    assert (linear / 2 + linear / 16 + 2 * 128256 * 8192) / 1e9 == pytest.approx(41, abs=0.5)


def test_bf16_models_keep_two_bytes_per_parameter():
    for m in list_model_specs():
        if all(m.gemm_dtype(c) == "bf16" for c in GEMM_CLASSES):
            assert m.weight_bytes().total_bytes == 2 * m.param_counts().total, m.id


def test_fp8_entry_is_the_bf16_entry_with_fp8_block_classes():
    bf16, fp8 = load_model("qwen3-235b-a22b"), load_model("qwen3-235b-a22b-fp8")
    assert fp8.param_counts() == bf16.param_counts()
    forced = bf16.with_gemm_dtypes(attention="fp8_block", dense_ffn="fp8_block", experts="fp8_block")
    assert forced.weight_bytes() == fp8.weight_bytes()
    fp8_params, _ = _fp8_and_bf16_params(bf16)
    assert bf16.weight_bytes().total_bytes - fp8.weight_bytes().total_bytes == pytest.approx(
        fp8_params * (2 - FP8_BLOCK_B))


def test_override_changes_bytes_by_the_closed_form():
    m = load_model("deepseek-v3")
    routed = m.param_counts().routed
    as_bf16 = m.with_gemm_dtypes(experts="bf16")
    assert as_bf16.gemm_dtype("experts") == "bf16" and as_bf16.gemm_dtype("attention") == "fp8_block"
    assert as_bf16.weight_bytes().total_bytes - m.weight_bytes().total_bytes == pytest.approx(routed * (2 - FP8_BLOCK_B))
    int4 = m.with_gemm_dtypes(experts="int4_w4a16", group_size=32)
    assert int4.weight_bytes().experts_bytes == routed * INT4_G32_B
    # back from int4 drops the group size; the original is unchanged
    k2t = load_model("kimi-k2-thinking")
    assert k2t.with_gemm_dtypes(experts="bf16").gemm_dtypes.group_size is None
    assert k2t.gemm_dtypes.group_size == 32


@pytest.mark.parametrize("overrides, words", [
    ({"expert": "bf16"}, ["'expert'", "attention, dense_ffn, experts, lm_head"]),
    ({"experts": "int3"}, ["gemm_dtypes.experts", "'int3'", "bf16, fp8, fp8_block, int4_w4a16, fp32, mxfp4_w4a16, mxfp4_w4a8, nvfp4"]),
    ({"experts": "int4_w4a16"}, ["group_size"]),
    ({"group_size": 32}, ["group_size", "no class is int4_w4a16"]),
])
def test_bad_override_is_one_line(overrides, words):
    with pytest.raises(InvalidInput) as err:
        load_model("qwen3-235b-a22b").with_gemm_dtypes(**overrides)
    assert "\n" not in str(err.value)
    assert all(w in str(err.value) for w in words), str(err.value)


def test_unknown_class_lookup_is_one_line():
    with pytest.raises(InvalidInput, match="gemm class 'router' is unknown; use one of attention"):
        load_model("qwen3-235b-a22b").weight_bytes_per_param("router")


@pytest.mark.parametrize("old_field", ["weight_dtype: fp8", "dense_weight_dtype: bf16", "weight_group_size: 32",
                                       "activation_dtype: bf16"])
def test_old_dtype_fields_are_refused(tmp_path, old_field):
    path = tmp_path / "m.yaml"
    path.write_text(load_model_text("minimax-m2.5") + f"\n{old_field}\n")
    with pytest.raises(PlanError, match=f"field {old_field.split(':')[0]}: unknown field"):
        load_model(path)


def test_yaml_dtype_errors_name_the_field(tmp_path):
    text = load_model_text("minimax-m2.5")
    path = tmp_path / "m.yaml"
    path.write_text(text.replace("experts: fp8_block", "experts: fp4"))
    with pytest.raises(PlanError, match="field gemm_dtypes.experts: Input should be 'bf16', 'fp8'"):
        load_model(path)
    path.write_text(text.replace("experts: fp8_block", "experts: int4_w4a16"))
    with pytest.raises(PlanError, match="experts is int4_w4a16: set group_size"):
        load_model(path)


def load_model_text(model_id: str) -> str:
    from prfaas_plan.data import builtin_dir

    return (builtin_dir("prfaas_plan.data.model_db") / f"{model_id}.yaml").read_text()
