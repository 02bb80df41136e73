"""The model_db entries: every one loads and is plausible; bad YAML gives one-line errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from prfaas_plan.errors import PlanError
from prfaas_plan.model import list_model_specs, load_model
from prfaas_plan.model.hf_config import count_params

MODEL_DB = Path(__file__).parent.parent / "prfaas_plan" / "data" / "model_db"
EXPECTED_IDS = {
    "minimax-m2.5", "mimo-v2-flash", "qwen3.5-397b-a17b", "qwen3-235b-a22b", "qwen3-next-80b-a3b",
    "ring-2.5-1t", "kimi-linear-48b-a3b", "kimi-linear-1t", "deepseek-v3", "kimi-k2", "kimi-k2-thinking",
    "llama-3.1-70b", "qwen3-235b-a22b-fp8", "llama-3.1-8b", "qwen3-32b", "gpt-oss-120b", "minimax-m2.5-nvfp4",
    "qwen3.5-397b-a17b-nvfp4", "kimi-k2.5-nvfp4", "llama-3.3-70b-nvfp4", "deepseek-v3.2", "glm-5",
}


def test_every_entry_loads_by_id_and_path():
    assert {m.id for m in list_model_specs()} == EXPECTED_IDS
    for path in sorted(MODEL_DB.glob("*.yaml")):
        by_path = load_model(path)
        assert by_path.id == path.stem
        assert load_model(path.stem) == by_path


@pytest.mark.parametrize("model", list_model_specs(), ids=lambda m: m.id)
def test_architecture_active_params_within_15_percent(model):
    total, active = count_params(model)
    assert active == pytest.approx(model.active_params, rel=0.15)
    assert total == pytest.approx(model.total_params, rel=0.15)
    assert active < total


def test_count_params_by_hand():
    # MiniMax-M2.5, per layer: attention 3072 x (48 + 8 + 8) x 128 + 48 x 128 x 3072 = 44,040,192;
    # router 3072 x 256 = 786,432; expert 3 x 3072 x 1536 = 14,155,776.
    # Active: 62 x (44,040,192 + 786,432 + 8 x 14,155,776) = 9,800,515,584.
    # Total adds 248 more experts per layer and embedding + LM head 2 x 200,064 x 3072.
    total, active = count_params(load_model("minimax-m2.5"))
    assert active == 62 * (44_040_192 + 786_432 + 8 * 14_155_776) == 9_800_515_584
    assert total == active + 62 * 248 * 14_155_776 + 2 * 200_064 * 3072
    # Llama-3.1-70B (dense): 80 x (8192 x (64 + 16) x 128 + 64 x 128 x 8192 + 3 x 8192 x 28672)
    # = 80 x 855,638,016 = 68,451,041,280 active; + 2 x 128,256 x 8192 (2,101,346,304)
    # = 70,552,387,584 total.
    total, active = count_params(load_model("llama-3.1-70b"))
    assert (total, active) == (70_552_387_584, 68_451_041_280)
    # Llama-3.1-8B: 32 x (4096 x (32 + 16) x 128 + 32 x 128 x 4096 + 3 x 4096 x 14336) = 32 x 218,103,808
    # = 6,979,321,856 active; + 2 x 128,256 x 4096 (1,050,673,152) = 8,029,995,008 total (the
    # checkpoint's 8,030,261,248 less its 266,240 norm weights: 65 x 4096)
    assert count_params(load_model("llama-3.1-8b")) == (8_029_995_008, 6_979_321_856)
    # Qwen3-32B: 64 x (5120 x (64 + 16) x 128 + 64 x 128 x 5120 + 3 x 5120 x 25600) = 64 x 487,587,840
    # = 31,205,621,760 active (the card's "31.2B non-embedding"); + 2 x 151,936 x 5120 = 32,761,446,400
    assert count_params(load_model("qwen3-32b")) == (32_761_446_400, 31_205_621_760)
    # gpt-oss-120b: 36 x (2880 x (64 + 8 + 8) x 64 + 64 x 64 x 2880 + 2880 x 128 + 4 x 3 x 2880 x 2880)
    # = 36 x (14,745,600 + 11,796,480 + 368,640 + 99,532,800) = 36 x 126,443,520 = 4,551,966,720 active
    # in the layers (+ the 579,133,440 of the unembedding: 5,131,100,160, the card's 5.13B); total
    # adds 124 experts per layer and embedding + LM head 2 x 201,088 x 2880
    total, active = count_params(load_model("gpt-oss-120b"))
    assert active == 4_551_966_720 and active + 201_088 * 2880 == 5_131_100_160
    assert total == active + 36 * 124 * 3 * 2880 * 2880 + 2 * 201_088 * 2880 == 116_788_838_400


@pytest.fixture
def base_yaml() -> str:
    return (MODEL_DB / "minimax-m2.5.yaml").read_text()


def _load_error(tmp_path, text: str) -> tuple[Path, str]:
    path = tmp_path / "bad-model.yaml"
    path.write_text(text)
    with pytest.raises(PlanError) as err:
        load_model(path)
    message = str(err.value)
    assert "\n" not in message
    assert str(path) in message
    return path, message


def test_unknown_field(tmp_path, base_yaml):
    _, message = _load_error(tmp_path, base_yaml + "\ncolour: blue\n")
    assert "field colour" in message and "unknown field" in message


def test_unknown_nested_field(tmp_path, base_yaml):
    text = base_yaml.replace("head_dim_v: 128}", "head_dim_v: 128, head_dim_q: 128}")
    _, message = _load_error(tmp_path, text)
    assert "head_dim_q" in message and "unknown field" in message


def test_negative_size(tmp_path, base_yaml):
    _, message = _load_error(tmp_path, base_yaml.replace("hidden_size: 3072", "hidden_size: -3072"))
    assert "field hidden_size" in message and "greater than 0" in message


def test_negative_expert_count(tmp_path, base_yaml):
    _, message = _load_error(tmp_path, base_yaml.replace("num_experts: 256", "num_experts: -256"))
    assert "field ffn.num_experts" in message


def test_missing_field(tmp_path, base_yaml):
    _, message = _load_error(tmp_path, base_yaml.replace("vocab_size: 200064\n", ""))
    assert "field vocab_size" in message and "missing required field" in message


def test_malformed_yaml(tmp_path, base_yaml):
    # A syntax error has no field to name: the message gives the file and the line instead.
    text = base_yaml.replace("hidden_size: 3072", "hidden_size: [3072")
    _, message = _load_error(tmp_path, text)
    assert "malformed YAML" in message and "line" in message


def test_layer_index_out_of_range(tmp_path):
    text = (MODEL_DB / "mimo-v2-flash.yaml").read_text().replace("41, 47]", "41, 48]")
    _, message = _load_error(tmp_path, text)
    assert "layers.at.full" in message and "48" in message


def test_uncovered_field_needs_a_source(tmp_path, base_yaml):
    text = base_yaml.replace("covers: [total_params, active_params]", "covers: [total_params]")
    _, message = _load_error(tmp_path, text)
    assert "active_params" in message and "source" in message


def test_gemm_dtypes_need_a_source(tmp_path, base_yaml):
    text = base_yaml.replace("covers: [gemm_dtypes]", "covers: [hidden_size]")
    _, message = _load_error(tmp_path, text)
    assert "gemm_dtypes" in message and "source" in message


def test_missing_gemm_dtypes(tmp_path, base_yaml):
    text = "\n".join(line for line in base_yaml.splitlines() if not line.startswith("gemm_dtypes:"))
    _, message = _load_error(tmp_path, text)
    assert "field gemm_dtypes" in message and "missing required field" in message


def test_mtp_attention_must_name_a_config(tmp_path, base_yaml):
    # base_yaml (minimax-m2.5) carries mtp {layers: 3, attention: full}
    _, message = _load_error(tmp_path, base_yaml.replace("mtp: {layers: 3, attention: full}",
                                                         "mtp: {layers: 3, attention: mla}"))
    assert "mtp.attention" in message and "'mla'" in message


def test_mtp_needs_a_source(tmp_path, base_yaml):
    _, message = _load_error(tmp_path, base_yaml.replace("covers: [mtp]", "covers: [hidden_size]"))
    assert "mtp" in message and "source" in message


MINIMAX_YAML = Path(__file__).resolve().parents[1] / "prfaas_plan" / "data" / "model_db" / "minimax-m2.5.yaml"


@pytest.mark.parametrize("edit, message", [
    ({"ffn": {"num_experts": 0, "experts_per_token": 0, "expert_intermediate": 0}},
     "ffn: .*a dense model needs dense_intermediate"),
    ({"ffn": {"experts_per_token": 300}}, "ffn: .*experts_per_token must be between 1 and num_experts"),
    ({"ffn": {"experts_per_token": 0}}, "ffn: .*experts_per_token must be between 1 and num_experts"),
    ({"ffn": {"expert_intermediate": 0}}, "ffn: .*expert_intermediate must be positive for an MoE model"),
    ({"ffn": {"first_dense_layers": 3}}, "ffn: .*first_dense_layers needs dense_intermediate"),
    ({"layers": {"default": "swa"}}, r"layers.default 'swa' is not one of attention: \['full'\]"),
    ({"layers": {"at": {"swa": [1]}}}, r"layers.at names 'swa', which is not one of attention: \['full'\]"),
    ({"active_params": 1e13}, "active_params exceeds total_params"),
])
def test_an_inconsistent_model_file_is_one_line_naming_what_to_fix(edit, message, tmp_path):
    """MiniMax-M2.5's entry with one inconsistency each: the loader's error names the field, once."""
    import yaml

    data = yaml.safe_load(MINIMAX_YAML.read_text())
    for key, value in edit.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) else value
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(PlanError, match=f"^{re.escape(str(path))}: field .*{message}") as info:
        load_model(path)
    assert "\n" not in str(info.value)


def test_a_dump_carries_router_dtype_and_moe_routing_only_when_not_default():
    """Cache keys, JSON and reports of a model that keeps the defaults (bf16 router, balanced
    routing) read as before those fields existed; MiniMax-M2.5's fp32 router is dumped, and so is a
    routing other than balanced."""
    qwen, minimax = load_model("qwen3-32b"), load_model("minimax-m2.5")
    assert {"router_dtype", "moe_routing"}.isdisjoint(qwen.model_dump())
    assert minimax.model_dump()["router_dtype"] == "fp32" and "moe_routing" not in minimax.model_dump()
    skewed = minimax.model_copy(update={"moe_routing": "power_law_1.01"})
    assert skewed.model_dump()["moe_routing"] == "power_law_1.01"


def test_the_yaml_loader_points_a_hugging_face_config_to_the_loader_that_reads_it():
    from prfaas_plan.model.arch import load_model_yaml

    hf = Path(__file__).resolve().parent / "fixtures" / "hf" / "qwen3-32b.json"
    with pytest.raises(PlanError, match="a Hugging Face config.json; load it with prfaas_plan.model.load_model$"):
        load_model_yaml(hf)
    assert load_model(hf).hidden_size == 5120
