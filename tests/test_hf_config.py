"""Importing Hugging Face config.json files (tests/fixtures/hf, see SOURCES.md there).

Each real config must give the same cache bytes, layer layout and (within 3%) the same
architecture-derived active parameter count as its model_db entry.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from prfaas_plan.errors import PlanError
from prfaas_plan.kvcache import CacheSettings
from prfaas_plan.model import load_model
from prfaas_plan.model.hf_config import SUPPORTED_MODEL_TYPES, count_params, load_hf_config
from prfaas_plan.model.quant import GemmDtypes

HF_DIR = Path(__file__).parent / "fixtures" / "hf"

# fixture file -> model_db id it must agree with
FIXTURES = {
    "deepseek-v3.json": "deepseek-v3",
    "kimi-k2.json": "kimi-k2",
    "kimi-linear-48b-a3b.json": "kimi-linear-48b-a3b",
    "llama-3.3-70b.json": "llama-3.1-70b",        # Llama-3.3-70B = Llama-3.1-70B architecture
    "llama-3.1-8b.json": "llama-3.1-8b",          # the base model's config: the Instruct model's architecture
    "qwen3-32b.json": "qwen3-32b",
    "minimax-m2.7.json": "minimax-m2.5",          # M2.7 = M2.5 architecture (context differs)
    "qwen3-235b-a22b.json": "qwen3-235b-a22b",
    "qwen3-next-80b-a3b.json": "qwen3-next-80b-a3b",
    "qwen3.5-397b-a17b.json": "qwen3.5-397b-a17b",
    "gpt-oss-120b.json": "gpt-oss-120b",
    "minimax-m2.5-nvfp4.json": "minimax-m2.5-nvfp4",
    "qwen3.5-397b-a17b-nvfp4.json": "qwen3.5-397b-a17b-nvfp4",
    "kimi-k2.5-nvfp4.json": "kimi-k2.5-nvfp4",     # model_type kimi_k25: a deepseek_v3 text_config
    "deepseek-v3.2.json": "deepseek-v3.2",          # model_type deepseek_v32: DSA
    "glm-5.json": "glm-5",                          # model_type glm_moe_dsa: DSA, zai-org/GLM-5-FP8
}

SETTINGS = {
    "vllm": CacheSettings(),
    "sglang": CacheSettings(engine="sglang"),
    "fp8-kv": CacheSettings(kv_dtype="fp8"),
    "fp32-state": CacheSettings(state_dtype="fp32"),
    "bf16-state": CacheSettings(state_dtype="bf16"),
    "hf": CacheSettings(engine="hf"),
}


def test_every_fixture_is_mapped():
    assert sorted(p.name for p in HF_DIR.glob("*.json")) == sorted([*FIXTURES, "mimo-v2-flash-6layers.json"])


@pytest.mark.parametrize("fixture, db_id", sorted(FIXTURES.items()))
def test_fixture_matches_model_db(fixture, db_id):
    hf = load_model(HF_DIR / fixture)  # prfaas_plan.model.load_model dispatches .json to load_hf_config
    db = load_model(db_id)
    assert hf.id == Path(fixture).stem
    assert hf.layer_kinds == db.layer_kinds
    assert hf.layer_counts() == db.layer_counts()
    assert (hf.hidden_size, hf.vocab_size) == (db.hidden_size, db.vocab_size)
    assert hf.gemm_dtypes == db.gemm_dtypes  # from the config's quantization_config (or its absence)
    assert hf.mtp == db.mtp  # num_nextn_predict_layers / mtp_num_hidden_layers / num_mtp_modules
    for name, settings in SETTINGS.items():
        assert hf.kv_bytes_per_token(settings) == db.kv_bytes_per_token(settings), name
        if fixture == "qwen3.5-397b-a17b.json" and settings.engine == "vllm" and settings.state_dtype is None:
            continue  # the published copy lacks mamba_ssm_dtype: see test_qwen35_copy_without_ssm_dtype
        assert hf.fixed_state_bytes(settings) == db.fixed_state_bytes(settings), name
    # Same architecture -> same count (checks the FFN/MoE mapping: dense layers, shared experts).
    assert hf.active_params == pytest.approx(count_params(db)[1], rel=0.03)
    assert hf.total_params == pytest.approx(count_params(db)[0], rel=0.03)
    # And within 15% of the published figure (cards count embeddings; see count_params).
    assert hf.active_params == pytest.approx(db.active_params, rel=0.15)


def test_qwen35_copy_without_ssm_dtype():
    # The aiconfigurator copy has no mamba_ssm_dtype, so vLLM's rule gives a bf16 GDN state:
    # 45 layers x (36,864 conv + 1,048,576 recurrent elements) x 2 B = 97,689,600 B,
    # against 192,061,440 B with the float32 state the model_db entry assumes.
    hf = load_hf_config(HF_DIR / "qwen3.5-397b-a17b.json")
    assert hf.attention["gdn"].ssm_dtype is None
    assert hf.fixed_state_bytes() == 45 * (36_864 + 1_048_576) * 2 == 97_689_600


def test_published_parameter_totals():
    # Safetensors totals printed next to the copied configs (see SOURCES.md): the architecture
    # count leaves out norms and biases, so it must land just below, within 0.1%.
    expected = {"kimi-linear-48b-a3b.json": 49_122_681_728, "minimax-m2.7.json": 228_703_644_928,
                "kimi-k2.json": 1_026_470_731_056}
    for fixture, total in expected.items():
        counted = load_hf_config(HF_DIR / fixture).total_params
        assert 0.999 * total <= counted <= total, fixture


def test_gemm_dtypes_from_quantization_config():
    # DeepSeek-V3 / MiniMax-M2.7: quant_method fp8, weight_block_size [128, 128] (MiniMax also
    # modules_to_not_convert [gate, e_score_correction_bias, lm_head]): fp8_block, LM head bf16
    fp8_block = {"attention": "fp8_block", "dense_ffn": "fp8_block", "experts": "fp8_block", "lm_head": "bf16"}
    for fixture in ("deepseek-v3.json", "minimax-m2.7.json"):
        g = load_hf_config(HF_DIR / fixture).gemm_dtypes
        assert ({c: g.of(c) for c in fp8_block}, g.block, g.group_size) == (fp8_block, 128, None), fixture
    assert load_hf_config(HF_DIR / "kimi-linear-48b-a3b.json").gemm_dtypes == GemmDtypes.uniform("bf16")


def _with_quant(tmp_path, fixture: str, quant: dict) -> Path:
    raw = json.loads((HF_DIR / fixture).read_text())
    raw["quantization_config"] = quant
    (tmp_path / "config.json").write_text(json.dumps(raw))
    return tmp_path / "config.json"


# Kimi-K2-Thinking's quantization_config (hardware_db/MEASUREMENTS.md #21; the same block ships in
# Kimi-K2.5's config, aiconfigurator-core 0.12.0 model_configs/moonshotai--Kimi-K2.5_config.json)
KIMI_K2_THINKING_QUANT = {
    "quant_method": "compressed-tensors", "format": "pack-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
        "num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 32}}},
    "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"],
}


def test_int4_qat_layout_from_quantization_config(tmp_path):
    # Kimi-K2's config with Kimi-K2-Thinking's quantization_config: int4 g32 routed experts,
    # attention / shared experts / dense MLP / lm_head bf16: 594 GB, as published, = the model_db entry
    m = load_hf_config(_with_quant(tmp_path, "kimi-k2.json", KIMI_K2_THINKING_QUANT))
    assert m.gemm_dtypes == load_model("kimi-k2-thinking").gemm_dtypes
    assert m.gemm_dtypes.describe() == "bf16 (experts int4_w4a16 g32)"
    assert m.weight_bytes().total_bytes / 1e9 == pytest.approx(594, rel=0.005)


def test_qwen3_fp8_modules_to_not_convert(tmp_path):
    # Qwen3-235B-A22B-FP8 (aiconfigurator-core 0.12.0 model_configs/Qwen--Qwen3-235B-A22B-FP8_config.json):
    # routers (mlp.gate) and norms are listed per layer; neither is a GEMM class
    quant = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128],
             "modules_to_not_convert": ["lm_head", "model.layers.0.input_layernorm", "model.layers.0.mlp.gate",
                                        "model.layers.0.post_attention_layernorm"]}
    m = load_hf_config(_with_quant(tmp_path, "qwen3-235b-a22b.json", quant))
    assert m.gemm_dtypes == load_model("qwen3-235b-a22b-fp8").gemm_dtypes


@pytest.mark.parametrize("weights, expected", [
    ({"num_bits": 8, "type": "float", "strategy": "channel"}, "fp8"),
    ({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]}, "fp8_block"),
])
def test_compressed_tensors_fp8(tmp_path, weights, expected):
    quant = {"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": ["Linear"], "weights": weights}},
             "ignore": ["lm_head"]}
    g = load_hf_config(_with_quant(tmp_path, "qwen3-235b-a22b.json", quant)).gemm_dtypes
    assert (g.experts, g.attention, g.lm_head) == (expected, expected, "bf16")


@pytest.mark.parametrize("quant, words", [
    ({"quant_method": "awq", "bits": 4}, ["quantization_config.quant_method", "'awq'", "fp8, compressed-tensors"]),
    ({"quant_method": "fp8", "weight_block_size": [128, 64]}, ["quantization_config.weight_block_size", "square"]),
    ({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 2, "type": "int"}}}},
     ["quantization_config.config_groups", "int4 groups"]),
])
def test_unsupported_quantization_is_one_line(tmp_path, quant, words):
    with pytest.raises(PlanError) as err:
        load_hf_config(_with_quant(tmp_path, "qwen3-235b-a22b.json", quant))
    assert "\n" not in str(err.value) and str(tmp_path) in str(err.value)
    assert all(w in str(err.value) for w in words), str(err.value)


def test_kimi_linear_one_based_full_attn_layers():
    # full_attn_layers [4, 8, 12, 16, 20, 24, 27] are 1-based -> MLA at 0-based 3, 7, ..., 26.
    m = load_hf_config(HF_DIR / "kimi-linear-48b-a3b.json")
    assert [i for i, k in enumerate(m.layer_kinds) if k == "mla"] == [3, 7, 11, 15, 19, 23, 26]


def test_mimo_truncated_config():
    # Megatron-Bridge's 6-layer copy of the MiMo-V2-Flash config: hybrid_layer_pattern
    # [0, 1, 1, 1, 0, 1] -> full at 0 and 4: 2 x 4 KV x (192 + 128) x 2 B = 5,120 B/token;
    # 4 SWA layers x 8 KV x 320 x 2 B x 128 tokens = 2,621,440 B; layer 0 dense (moe_layer_freq[0] = 0).
    m = load_hf_config(HF_DIR / "mimo-v2-flash-6layers.json")
    assert m.layer_kinds == ("full", "swa", "swa", "swa", "full", "swa")
    assert m.kv_bytes_per_token() == 5_120
    assert m.fixed_state_bytes() == 2_621_440
    assert m.ffn.first_dense_layers == 1 and m.ffn.dense_intermediate == 16384


def test_bailing_hybrid_defaults_match_ring(tmp_path):
    # transformers' BailingHybridConfig defaults (the values the ring-2.5-1t entry uses), spelled
    # as a config.json would: MLA iff (i + 1) % layer_group_size == 0.
    cfg = {"model_type": "bailing_hybrid", "vocab_size": 157184, "hidden_size": 8192,
           "intermediate_size": 18432, "moe_intermediate_size": 2048,
           "moe_shared_expert_intermediate_size": 2048, "num_hidden_layers": 80,
           "num_attention_heads": 64, "num_experts": 256, "num_shared_experts": 1,
           "num_experts_per_tok": 8, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
           "v_head_dim": 128, "qk_nope_head_dim": 128, "first_k_dense_replace": 4,
           "layer_group_size": 8, "num_kv_heads_for_linear_attn": 64,
           "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}
    folder = tmp_path / "Ring-2.5-1T"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    m = load_hf_config(folder / "config.json")
    ring = load_model("ring-2.5-1t")
    assert m.id == "ring-2.5-1t"  # from the parent folder of a config.json
    assert m.layer_kinds == ring.layer_kinds
    assert m.kv_bytes_per_token() == 10 * 576 * 2 == ring.kv_bytes_per_token()
    assert m.fixed_state_bytes() == 70 * 64 * 128 * 128 * 2 == ring.fixed_state_bytes()


def test_unsupported_model_type(tmp_path):
    path = tmp_path / "gpt2.json"
    path.write_text(json.dumps({"model_type": "gpt2", "n_layer": 12}))
    with pytest.raises(PlanError) as err:
        load_hf_config(path)
    message = str(err.value)
    assert "\n" not in message
    assert str(path) in message and "'gpt2' is not supported" in message
    assert all(t in message for t in SUPPORTED_MODEL_TYPES)


def test_malformed_json(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"model_type": "llama", "hidden_size": 8192,')
    with pytest.raises(PlanError) as err:
        load_model(path)
    message = str(err.value)
    assert "\n" not in message
    assert str(path) in message and "malformed JSON" in message and "line 1" in message


def _error_without(tmp_path, fixture: str, field: str) -> tuple[str, Path]:
    """The one-line error of importing ``fixture`` with ``field`` deleted."""
    cfg = json.loads((HF_DIR / fixture).read_text())
    del cfg[field]
    path = tmp_path / fixture
    path.write_text(json.dumps(cfg))
    with pytest.raises(PlanError) as err:
        load_hf_config(path)
    assert "\n" not in str(err.value)
    return str(err.value), path


def test_missing_required_field_names_field_and_file(tmp_path):
    message, path = _error_without(tmp_path, "llama-3.3-70b.json", "num_hidden_layers")
    assert str(path) in message and "field num_hidden_layers" in message


def test_missing_nested_field(tmp_path):
    cfg = json.loads((HF_DIR / "kimi-linear-48b-a3b.json").read_text())
    del cfg["linear_attn_config"]["full_attn_layers"]
    path = tmp_path / "kimi.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(PlanError, match=r"field linear_attn_config\.full_attn_layers"):
        load_hf_config(path)


def test_id_from_name_or_path_repo(tmp_path):
    cfg = json.loads((HF_DIR / "qwen3-235b-a22b.json").read_text())
    cfg["_name_or_path"] = "Qwen/Qwen3-235B-A22B"
    path = tmp_path / "anything.json"
    path.write_text(json.dumps(cfg))
    m = load_hf_config(path)
    assert m.name == "Qwen/Qwen3-235B-A22B"
    assert m.sources[0].url == "https://huggingface.co/Qwen/Qwen3-235B-A22B/blob/main/config.json"


def test_config_json_in_folder_uses_folder_name(tmp_path):
    folder = tmp_path / "DeepSeek-V3"
    folder.mkdir()
    shutil.copy(HF_DIR / "deepseek-v3.json", folder / "config.json")
    assert load_model(folder / "config.json").id == "deepseek-v3"


# ------------------------------------------- configs as transformers 5 writes them (save_pretrained)

def _qwen3_moe_native(raw: dict) -> dict:
    # transformers' Qwen3MoeConfig maps num_experts to num_local_experts and writes that name
    return {**{k: v for k, v in raw.items() if k != "num_experts"}, "num_local_experts": raw["num_experts"]}


def _qwen3_5_text_native(raw: dict) -> dict:
    # the text model alone: its text_config, model_type qwen3_5_moe_text
    return {**raw["text_config"], "model_type": "qwen3_5_moe_text"}


def _kimi_linear_native(raw: dict) -> dict:
    # KimiLinearConfig turns linear_attn_config into layer_types and linear_* fields, and
    # first_k_dense_replace into mlp_layer_types
    linear, count = raw["linear_attn_config"], raw["num_hidden_layers"]
    full = {i - 1 for i in linear["full_attn_layers"]}
    out = {k: v for k, v in raw.items() if k not in ("linear_attn_config", "first_k_dense_replace")}
    return {**out, "layer_types": ["full_attention" if i in full else "linear_attention" for i in range(count)],
            "linear_num_heads": linear["num_heads"], "linear_head_dim": linear["head_dim"],
            "linear_conv_kernel_dim": linear["short_conv_kernel_size"],
            "mlp_layer_types": ["dense" if i < raw["first_k_dense_replace"] else "sparse" for i in range(count)]}


def _mimo_native(raw: dict) -> dict:
    # MiMoV2FlashConfig: layer_types, mlp_layer_types, sliding_window = sliding_window_size + 1 and
    # SWA layers with 2 x num_key_value_heads; no swa_* fields
    hub_only = ("hybrid_layer_pattern", "moe_layer_freq", "sliding_window_size", "swa_num_key_value_heads",
                "swa_num_attention_heads", "swa_head_dim", "swa_v_head_dim")
    out = {k: v for k, v in raw.items() if k not in hub_only}
    assert raw["swa_num_key_value_heads"] == 2 * raw["num_key_value_heads"]  # transformers' rule holds
    return {**out, "sliding_window": raw["sliding_window_size"] + 1,
            "layer_types": ["full_attention" if p == 0 else "sliding_attention" for p in raw["hybrid_layer_pattern"]],
            "mlp_layer_types": ["dense" if f == 0 else "sparse" for f in raw["moe_layer_freq"]]}


NATIVE_SPELLINGS = {"qwen3-235b-a22b.json": _qwen3_moe_native, "qwen3.5-397b-a17b.json": _qwen3_5_text_native,
                    "kimi-linear-48b-a3b.json": _kimi_linear_native, "mimo-v2-flash-6layers.json": _mimo_native}


@pytest.mark.parametrize("fixture", sorted(NATIVE_SPELLINGS))
def test_transformers_spelling_gives_the_same_model(tmp_path, fixture):
    # The published config rewritten with the field names transformers 5 saves (see
    # tests/test_hf_transformers.py for the same check against transformers itself).
    raw = json.loads((HF_DIR / fixture).read_text())
    path = tmp_path / fixture
    path.write_text(json.dumps(NATIVE_SPELLINGS[fixture](raw)))
    native, hub = load_hf_config(path), load_hf_config(HF_DIR / fixture)
    assert native.layer_kinds == hub.layer_kinds and native.ffn == hub.ffn
    for name, settings in SETTINGS.items():
        assert native.kv_bytes_per_token(settings) == hub.kv_bytes_per_token(settings), name
        assert native.fixed_state_bytes(settings) == hub.fixed_state_bytes(settings), name
    if fixture.startswith("mimo"):  # the window: 4 SWA layers x 8 KV heads x 320 x 2 B x 128 tokens
        assert native.attention["swa"].window_tokens == 128
        assert native.fixed_state_bytes() == 4 * 8 * 320 * 2 * 128 == 2_621_440


def test_transformers_names_missing_field_lists_both_spellings(tmp_path):
    message, _ = _error_without(tmp_path, "qwen3-235b-a22b.json", "num_experts")
    assert "field num_experts" in message and "num_local_experts" in message


def test_hf_convention_for_the_linear_attention_entries():
    # transformers' cache: conv states with K = 4 columns (bf16), every recurrent state fp32.
    # Qwen3-Next: 36 GDN layers x (4 x 8,192 x 2 + 32 x 128 x 128 x 4) = 36 x 2,162,688 B
    # Qwen3.5: 45 x (4 x 12,288 x 2 + 64 x 128 x 128 x 4) = 45 x 4,292,608 B (mamba_ssm_dtype ignored)
    # Kimi-Linear-48B: 20 KDA layers x (4 x 12,288 x 2 + 32 x 128 x 128 x 4) = 20 x 2,195,456 B
    # Ring-2.5: 70 Lightning layers x 64 x 128 x 128 x 4 (no conv); MiMo's window is unchanged
    hf = SETTINGS["hf"]
    expected = {"qwen3-next-80b-a3b": 77_856_768, "qwen3.5-397b-a17b": 193_167_360,
                "kimi-linear-48b-a3b": 43_909_120, "ring-2.5-1t": 293_601_280, "mimo-v2-flash": 25_559_040}
    assert {m: load_model(m).fixed_state_bytes(hf) for m in expected} == expected
    assert load_model("qwen3-next-80b-a3b").kv_bytes_per_token(hf) == 12 * 2 * 256 * 2 * 2 == 24_576


# ------------------------------------------------------------------------- YaRN context extension

def test_yarn_in_published_configs():
    # DeepSeek-V3 and Kimi-K2 state the YaRN-extended context as max_position_embeddings already:
    # 40 x 4,096 = 163,840 and 32 x 4,096 = 131,072; Llama's rope_type llama3 is not YaRN.
    ds, k2 = load_hf_config(HF_DIR / "deepseek-v3.json"), load_hf_config(HF_DIR / "kimi-k2.json")
    assert (ds.max_context_tokens, ds.context_note(163_840)) == (163_840, "YaRN x40 over 4,096 tokens")
    assert (k2.max_context_tokens, k2.context_note(4096)) == (131_072, None)
    llama = load_hf_config(HF_DIR / "llama-3.3-70b.json")
    assert (llama.max_context_tokens, llama.context_extension) == (131_072, None)


def test_yarn_raises_qwen3_context(tmp_path):
    # The model card's recipe for Qwen3-235B-A22B: rope_scaling yarn, factor 4 over 32,768 tokens
    raw = json.loads((HF_DIR / "qwen3-235b-a22b.json").read_text())
    assert load_hf_config(HF_DIR / "qwen3-235b-a22b.json").max_context_tokens == 40_960  # as published
    raw["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    path = tmp_path / "qwen3-yarn.json"
    path.write_text(json.dumps(raw))
    m = load_hf_config(path)
    assert m.max_context_tokens == 131_072 == load_model("qwen3-235b-a22b").max_context_tokens
    assert m.context_extension == load_model("qwen3-235b-a22b").context_extension
    assert m.context_note(131_072) == "YaRN x4 over 32,768 tokens" and m.context_note(32_768) is None


@pytest.mark.parametrize("rope, field", [
    ({"type": "yarn", "factor": "4"}, "rope_scaling.factor"),
    ({"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 0},
     "rope_scaling.original_max_position_embeddings"),
])
def test_bad_yarn_fields_are_one_line_errors(tmp_path, rope, field):
    raw = {**json.loads((HF_DIR / "qwen3-235b-a22b.json").read_text()), "rope_scaling": rope}
    path = tmp_path / "qwen3.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(PlanError) as err:
        load_hf_config(path)
    assert "\n" not in str(err.value) and f"field {field}:" in str(err.value)


def test_model_spec_rejects_a_context_beyond_its_extension():
    m = load_model("qwen3-235b-a22b")
    data = m.model_dump()
    data["max_context_tokens"] = 131_073
    with pytest.raises(ValueError, match="within its 131,072 tokens"):
        type(m).model_validate(data)


def test_kv_cli_notes_the_yarn_context():
    env = {**os.environ, "COLUMNS": "80"}
    cmd = [sys.executable, "-m", "prfaas_plan.cli", "kv", "qwen3-235b-a22b"]
    r = subprocess.run([*cmd, "--context", "32K,128K"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert "24,064.0" in r.stdout  # 94 layers x 2,048 B x 131,072 tokens, in MiB
    assert "note: qwen3-235b-a22b at 128K relies on YaRN x4 over 32,768 tokens" in r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
    r = subprocess.run([*cmd, "--context", "32K"], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and "YaRN" not in r.stdout
    r = subprocess.run([*cmd, "--context", "128K", "--format", "json"], capture_output=True, text=True)
    assert json.loads(r.stdout)[0]["context_extension"] == "YaRN x4 over 32,768 tokens"


@pytest.mark.parametrize("fixture, edit, expected", [
    ("minimax-m2.7.json", {"use_mtp": False}, None),
    ("minimax-m2.7.json", {"mtp_transformer_layers": 2}, (6, "full")),
    ("deepseek-v3.json", {"num_nextn_predict_layers": 0}, None),
    ("deepseek-v3.json", {"num_nextn_predict_layers": 2}, (2, "mla")),
])
def test_mtp_fields(tmp_path, fixture, edit, expected):
    raw = json.loads((HF_DIR / fixture).read_text()) | edit
    path = tmp_path / fixture
    path.write_text(json.dumps(raw))
    m = load_hf_config(path)
    assert (None if m.mtp is None else (m.mtp.layers, m.mtp.attention)) == expected
    assert m.weight_bytes() == load_hf_config(HF_DIR / fixture).weight_bytes()  # main stack unchanged


def test_bad_mtp_count_is_one_line(tmp_path):
    raw = json.loads((HF_DIR / "deepseek-v3.json").read_text()) | {"num_nextn_predict_layers": -1}
    path = tmp_path / "deepseek-v3.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(PlanError, match="field num_nextn_predict_layers") as e:
        load_hf_config(path)
    assert "\n" not in str(e.value)
