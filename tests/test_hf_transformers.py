"""Our cache arithmetic against the tensors in transformers' own cache (tiny random models, CPU).

For every supported family a tiny config (hidden 64, 2-6 layers, a few heads and experts) is
written in both schemas where they differ: as published on the hub (the real config from
tests/fixtures/hf with its sizes shrunk) and as transformers 5 writes it
(``AutoConfig.for_model(...).to_dict()``). Each file is read twice: by ``load_hf_config`` and by
transformers itself (``AutoConfig.from_pretrained``), which builds a random bf16 model (no
weights, no network) and prefills prompts of 5, 12 and 33 tokens. The bytes of the cache
are ``sum(numel * element_size)`` over every tensor each cache layer holds: keys and values
(the MLA latent and RoPE key for MLA layers), conv and recurrent states. Left out: integer
scalars (0-d tensors), a layer's bookkeeping rather than cache: the window size a sliding-window
layer keeps for its mask (``_sliding_window_tensor``) and, from transformers 5.25, the token
count of a linear-attention layer (``cumulative_length_linear``). Slope = bytes per token between 12 and 33 tokens,
fixed = bytes at 33 tokens minus slope * 33; both must equal ours under the ``hf`` convention
exactly, and so must the bytes at every length (MiMo's window holds 8 tokens here, so 5 tokens
are below it and 12 and 33 above: the slope counts only its full-attention layer). The class of
each cache layer must be the one our layer kind implies (a sliding window where we have SWA).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", minversion="5")

from prfaas_plan.kvcache import CacheSettings, kv_bytes, per_layer_table  # noqa: E402
from prfaas_plan.model.hf_config import load_hf_config  # noqa: E402

HF_DIR = Path(__file__).parent / "fixtures" / "hf"
HF = CacheSettings(engine="hf")
PROMPT_TOKENS = (5, 12, 33)
VOCAB = 128
MOE = {"moe_intermediate_size": 32, "num_experts_per_tok": 2}
GQA = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
       "head_dim": 16, "vocab_size": VOCAB}
GDN = {**GQA, **MOE, "num_hidden_layers": 4, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
       "linear_key_head_dim": 8, "linear_value_head_dim": 12, "linear_conv_kernel_dim": 4, "num_experts": 4,
       "shared_expert_intermediate_size": 32}
MLA = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
       "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 12,
       "moe_intermediate_size": 32, "vocab_size": VOCAB}
NO_TOKEN_IDS = {"bos_token_id": None, "eos_token_id": None, "pad_token_id": None}  # the real ids lie outside VOCAB
YARN_X4 = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}

# family -> (model_type, tiny dims in transformers' own field names)
NATIVE = {
    "llama": ("llama", {**GQA, "num_hidden_layers": 2}),
    "qwen3": ("qwen3", {**GQA, "num_hidden_layers": 2, "head_dim": 24}),
    "qwen3_moe": ("qwen3_moe", {**GQA, **MOE, "num_hidden_layers": 2, "num_experts": 4,
                                "max_position_embeddings": 40960,
                                "rope_parameters": {**YARN_X4, "rope_theta": 1e6}}),
    "minimax_m2": ("minimax_m2", {**GQA, "intermediate_size": 32, "num_hidden_layers": 2, "num_local_experts": 4,
                                  "num_experts_per_tok": 2, **NO_TOKEN_IDS}),
    "deepseek_v3": ("deepseek_v3", {**MLA, "num_hidden_layers": 3, "q_lora_rank": 24, "first_k_dense_replace": 1,
                                    "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1,
                                    **NO_TOKEN_IDS}),
    "qwen3_next": ("qwen3_next", GDN),
    "qwen3_5_moe_text": ("qwen3_5_moe_text", GDN),
    "kimi_linear": ("kimi_linear", {**MLA, "num_hidden_layers": 4, "q_lora_rank": None, "num_experts": 4,
                                    "num_experts_per_token": 2, "linear_num_heads": 4, "linear_head_dim": 8,
                                    "linear_conv_kernel_dim": 4, "mlp_layer_types": ["dense"] + ["sparse"] * 3,
                                    "layer_types": ["linear_attention"] * 2 + ["full_attention", "linear_attention"],
                                    **NO_TOKEN_IDS}),
    "mimo_v2_flash": ("mimo_v2_flash", {**GQA, **MOE, "num_hidden_layers": 6, "num_key_value_heads": 1,
                                        "head_dim": 24, "v_head_dim": 16, "sliding_window": 9,
                                        "n_routed_experts": 4}),
}

# family -> (hub fixture, the same tiny dims in the fixture's field names, fields to drop)
HUB = {
    "llama": ("llama-3.3-70b.json", {**GQA, "num_hidden_layers": 2, **NO_TOKEN_IDS}, ()),
    "qwen3_moe": ("qwen3-235b-a22b.json", {**GQA, **MOE, "num_hidden_layers": 2, "num_experts": 4,
                                           "max_window_layers": 2, "rope_scaling": YARN_X4, **NO_TOKEN_IDS}, ()),
    "minimax_m2": ("minimax-m2.7.json", {**GQA, "intermediate_size": 32, "num_hidden_layers": 2,
                                         "attn_type_list": [1, 1], "num_local_experts": 4, "num_experts_per_tok": 2,
                                         "rotary_dim": 8, **NO_TOKEN_IDS}, ("auto_map", "quantization_config")),
    "deepseek_v3": ("deepseek-v3.json", {**MLA, "num_hidden_layers": 3, "q_lora_rank": 24, "first_k_dense_replace": 1,
                                         "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 1,
                                         "topk_group": 1, **NO_TOKEN_IDS}, ("auto_map", "quantization_config")),
    "qwen3_next": ("qwen3-next-80b-a3b.json", {**GDN, **NO_TOKEN_IDS}, ()),
    "qwen3_5_moe_text": ("qwen3.5-397b-a17b.json", {**GDN, "eos_token_id": None, "layer_types": [
        "linear_attention"] * 3 + ["full_attention"]}, ()),  # these go into text_config
    "kimi_linear": ("kimi-linear-48b-a3b.json", {
        **MLA, "num_hidden_layers": 4, "head_dim": 16, "first_k_dense_replace": 1, "num_experts": 4,
        "num_experts_per_token": 2, **NO_TOKEN_IDS, "linear_attn_config": {
            "full_attn_layers": [3], "kda_layers": [1, 2, 4], "head_dim": 8, "num_heads": 4,
            "short_conv_kernel_size": 4}}, ("auto_map",)),
    # transformers builds MiMo's layers from its own rule (full at 0 and every 6th), not from
    # hybrid_layer_pattern, so the tiny pattern follows that rule (the real 48-layer one does too);
    # and transformers 5.24 turns this copy's "rope_scaling": null into rope_parameters None for
    # MiMo, then fails to build the model, so that field is dropped
    "mimo_v2_flash": ("mimo-v2-flash-6layers.json", {
        **GQA, **MOE, "num_hidden_layers": 6, "num_key_value_heads": 1, "head_dim": 24, "v_head_dim": 16,
        "swa_num_attention_heads": 4, "swa_num_key_value_heads": 2, "swa_head_dim": 24, "swa_v_head_dim": 16,
        "sliding_window_size": 8, "sliding_window": 8, "hybrid_layer_pattern": [0, 1, 1, 1, 1, 0],
        "n_routed_experts": 4}, ("rope_scaling",)),
}


def native_config(family: str) -> dict:
    """The tiny config as transformers 5 writes it."""
    model_type, dims = NATIVE[family]
    return transformers.AutoConfig.for_model(model_type, **dims).to_dict()


def hub_config(family: str) -> dict:
    """The family's published config (tests/fixtures/hf) with its sizes replaced by the tiny ones."""
    fixture, dims, drop = HUB[family]
    raw = {k: v for k, v in json.loads((HF_DIR / fixture).read_text()).items() if k not in drop}
    if "text_config" in raw:
        raw["text_config"] = {**raw["text_config"], **dims}
        return raw
    return {**raw, **dims}


def write(tmp_path: Path, name: str, config: dict) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder / "config.json"


def cache_tensors(cache):
    """Every tensor a transformers cache holds for the request (see the module docstring)."""
    for layer in cache.layers:
        for value in vars(layer).values():
            for item in value.values() if isinstance(value, dict) else [value]:
                if torch.is_tensor(item) and not (item.dim() == 0 and not item.is_floating_point()):
                    yield item


def measured_cache(path: Path) -> tuple[dict[int, int], tuple[str, ...]]:
    """(prompt tokens -> bytes of the cache transformers returns after prefilling a random bf16
    model built from ``path`` (CPU, seeded), the class of each cache layer)."""
    config = transformers.AutoConfig.from_pretrained(path.parent).get_text_config()
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
    out = {}
    for tokens in PROMPT_TOKENS:
        with torch.no_grad():
            result = model(torch.randint(0, VOCAB, (1, tokens)), use_cache=True)
        cache = getattr(result, "cache", None) or result.past_key_values
        out[tokens] = sum(t.numel() * t.element_size() for t in cache_tensors(cache))
    return out, tuple(type(layer).__name__ for layer in cache.layers)


# our attention kind -> the transformers cache layer that holds it
CACHE_LAYER = {"gqa": "DynamicLayer", "mla": "DynamicLayer", "swa": "DynamicSlidingWindowLayer",
               "gdn": "LinearAttentionLayer", "kda": "LinearAttentionLayer"}


CASES = [(f, "native") for f in NATIVE] + [(f, "hub") for f in HUB]


@pytest.mark.parametrize("family, schema", CASES, ids=[f"{f}-{s}" for f, s in CASES])
def test_cache_bytes_match_transformers(tmp_path, family, schema):
    path = write(tmp_path, family, native_config(family) if schema == "native" else hub_config(family))
    spec = load_hf_config(path)
    measured, layer_classes = measured_cache(path)
    assert layer_classes == tuple(CACHE_LAYER[spec.attention[name].kind] for name in spec.layer_kinds)
    slope_bytes = (measured[33] - measured[12]) // (33 - 12)
    fixed_bytes = measured[33] - slope_bytes * 33
    assert measured[33] - measured[12] == slope_bytes * (33 - 12)  # linear beyond the window
    assert (spec.kv_bytes_per_token(HF), spec.fixed_state_bytes(HF)) == (slope_bytes, fixed_bytes)
    assert {l: kv_bytes(spec, l, HF) for l in PROMPT_TOKENS} == measured


@pytest.mark.parametrize("family", sorted(HUB))
def test_both_schemas_give_the_same_cache_arithmetic(tmp_path, family):
    hub = load_hf_config(write(tmp_path, "hub", hub_config(family)))
    native = load_hf_config(write(tmp_path, "native", native_config(family)))
    assert hub.layer_kinds == native.layer_kinds
    assert hub.ffn == native.ffn
    for engine in ("vllm", "sglang", "hf"):
        settings = CacheSettings(engine=engine)
        assert per_layer_table(hub, settings) == per_layer_table(native, settings), engine


def test_hf_convention_by_hand(tmp_path):
    # The tiny Qwen3-Next: 3 GDN layers of 2 x 2 x 8 + 4 x 12 = 80 conv channels and a 4 x 8 x 12
    # recurrent state. transformers: 4 conv columns in bf16 + an fp32 state = 3 x (640 + 1,536)
    # = 6,528 B; vLLM: 3 columns + a bf16 state = 3 x (480 + 768) = 3,744 B. One full layer:
    # 2 KV heads x (16 + 16) x 2 B = 128 B/token under both.
    spec = load_hf_config(write(tmp_path, "qwen3-next-tiny", native_config("qwen3_next")))
    assert spec.fixed_state_bytes(HF) == 3 * (4 * 80 * 2 + 4 * 8 * 12 * 4) == 6_528
    assert spec.fixed_state_bytes() == 3 * (3 * 80 * 2 + 4 * 8 * 12 * 2) == 3_744
    assert spec.kv_bytes_per_token(HF) == spec.kv_bytes_per_token() == 128


def test_yarn_raises_the_context_in_both_schemas(tmp_path):
    # rope_scaling (hub) and rope_parameters (transformers) both say YaRN x4 over 32,768 tokens
    for schema, config in (("hub", hub_config("qwen3_moe")), ("native", native_config("qwen3_moe"))):
        spec = load_hf_config(write(tmp_path, schema, config))
        assert spec.max_context_tokens == 4 * 32_768 == 131_072, schema
        assert spec.context_note(32_768) is None
        assert spec.context_note(32_769) == "YaRN x4 over 32,768 tokens"
