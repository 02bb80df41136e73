"""Cache bytes pinned per model_db entry, each value derived by hand from the public config.

Conventions: bf16 = 2 B, fp32 = 4 B, fp8 = 1 B; MiB = 2**20 B; Gbps = 1e9 bit/s. Default settings
are vLLM's (bf16 KV; conv state bf16; GDN recurrent state = checkpoint mamba_ssm_dtype else bf16;
KDA recurrent state fp32; Lightning state bf16). SGLang keeps every recurrent state in fp32
unless the checkpoint says otherwise.
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from prfaas_plan.bandwidth import kv_throughput_gbps
from prfaas_plan.errors import InvalidInput
from prfaas_plan.hardware import instance
from prfaas_plan.kvcache import (
    CacheSettings,
    kv_bytes,
    kv_bytes_expr,
    kv_bytes_per_token,
    linear_state_bytes,
    per_gpu_kv_bytes,
)
from prfaas_plan.model import list_model_specs, load_model
from prfaas_plan.perf.roofline import MeasuredProfile
from prfaas_plan.units import MIB_BYTES

SGLANG = CacheSettings(engine="sglang")
L32K_TOKENS = 32768

# model id -> (bytes/token, fixed bytes vLLM, fixed bytes SGLang, kv_bytes(32768) vLLM)
PINNED = {
    # MiniMax-M2.5: 62 layers x 8 KV heads x (128 + 128) x 2 B = 253,952 B/token; no state.
    # 32K: 253,952 x 32,768 = 8,321,499,136 B.
    "minimax-m2.5": (253_952, 0, 0, 8_321_499_136),
    "minimax-m2.5-nvfp4": (253_952, 0, 0, 8_321_499_136),  # NVIDIA's NVFP4 release: the same attention
    # Qwen3-235B-A22B: 94 x 4 KV heads x (128 + 128) x 2 B = 192,512 B/token.
    # 32K: 192,512 x 32,768 = 6,308,233,216 B.
    "qwen3-235b-a22b": (192_512, 0, 0, 6_308_233_216),
    "qwen3-235b-a22b-fp8": (192_512, 0, 0, 6_308_233_216),  # the same architecture, FP8 block weights
    # Llama-3.1-70B: 80 x 8 x (128 + 128) x 2 B = 327,680 B/token; 32K: 10,737,418,240 B (10 GiB).
    "llama-3.1-70b": (327_680, 0, 0, 10_737_418_240),
    "llama-3.3-70b-nvfp4": (327_680, 0, 0, 10_737_418_240),  # the same layers, NVFP4 weights
    # Llama-3.1-8B: 32 x 8 x (128 + 128) x 2 B = 131,072 B/token; 32K: 4,294,967,296 B (4 GiB).
    "llama-3.1-8b": (131_072, 0, 0, 4_294_967_296),
    # Qwen3-32B: 64 x 8 x (128 + 128) x 2 B = 262,144 B/token; 32K: 8,589,934,592 B (8 GiB).
    "qwen3-32b": (262_144, 0, 0, 8_589_934_592),
    # DeepSeek-V3: 61 MLA layers x (kv_lora 512 + rope 64) x 2 B = 70,272 B/token (head count
    # does not matter). 32K: 70,272 x 32,768 = 2,302,672,896 B.
    "deepseek-v3": (70_272, 0, 0, 2_302_672_896),
    # Kimi K2: same MLA cache as DeepSeek-V3: 61 x 576 x 2 = 70,272 B/token.
    "kimi-k2": (70_272, 0, 0, 2_302_672_896),
    "kimi-k2-thinking": (70_272, 0, 0, 2_302_672_896),  # K2's architecture, INT4 weights
    "kimi-k2.5-nvfp4": (70_272, 0, 0, 2_302_672_896),  # K2's architecture, NVFP4 weights
    # DeepSeek-V3.2 (DSA): V3's latent plus the indexer's fp8 key of 128 channels and one fp32 scale,
    # 128 + 4 = 132 B in any KV dtype: 61 x (1,152 + 132) = 78,324 B/token (models_hw.md: "DeepSeek-V3.2
    # (vLLM default: bf16 MLA + fp8 indexer) 78,324"). 32K: 78,324 x 32,768 = 2,566,520,832 B (2.390 GiB).
    "deepseek-v3.2": (78_324, 0, 0, 2_566_520_832),
    # GLM-5 (DSA, 78 layers): 78 x (576 x 2 + 132) = 78 x 1,284 = 100,152 B/token.
    # 32K: 100,152 x 32,768 = 3,281,780,736 B.
    "glm-5": (100_152, 0, 0, 3_281_780_736),
    # Qwen3-Next-80B-A3B: 12 full layers x 2 KV x (256 + 256) x 2 B = 24,576 B/token.
    # GDN layer: conv (4-1) x (2*16*128 + 32*128) = 24,576 elements, recurrent 32*128*128 = 524,288.
    # vLLM (no mamba_ssm_dtype -> bf16): 36 x (24,576 + 524,288) x 2 = 39,518,208 B.
    # SGLang (fp32 recurrent): 36 x (24,576*2 + 524,288*4) = 36 x 2,146,304 = 77,266,944 B.
    # 32K vLLM: 24,576 x 32,768 + 39,518,208 = 805,306,368 + 39,518,208 = 844,824,576 B.
    "qwen3-next-80b-a3b": (24_576, 39_518_208, 77_266_944, 844_824_576),
    # Qwen3.5-397B-A17B: 15 full x 2 KV x (256 + 256) x 2 B = 30,720 B/token.
    # GDN layer: conv 3 x (2*16*128 + 64*128) = 36,864 elements (bf16), recurrent 64*128*128 =
    # 1,048,576 (fp32, mamba_ssm_dtype float32, both engines): 45 x (73,728 + 4,194,304)
    # = 45 x 4,268,032 = 192,061,440 B. 32K: 1,006,632,960 + 192,061,440 = 1,198,694,400 B.
    "qwen3.5-397b-a17b": (30_720, 192_061_440, 192_061_440, 1_198_694_400),
    "qwen3.5-397b-a17b-nvfp4": (30_720, 192_061_440, 192_061_440, 1_198_694_400),  # its NVFP4 release: same layers
    # Kimi-Linear-48B-A3B: 7 MLA x 1,152 = 8,064 B/token. KDA layer: conv 3 x (32*128 + 2*32*128)
    # = 36,864 elements x 2 B = 73,728 B; recurrent 32*128*128 x 4 B (fp32 in both engines)
    # = 2,097,152 B; 20 x 2,170,880 = 43,417,600 B. 32K: 264,241,152 + 43,417,600 = 307,658,752 B.
    "kimi-linear-48b-a3b": (8_064, 43_417_600, 43_417_600, 307_658_752),
    # Ring-2.5-1T: 10 MLA x 1,152 = 11,520 B/token. Lightning layer: 64*128*128 = 1,048,576
    # elements, no conv; vLLM bf16: 70 x 2,097,152 = 146,800,640 B; SGLang fp32: 293,601,280 B.
    # 32K vLLM: 11,520 x 32,768 + 146,800,640 = 377,487,360 + 146,800,640 = 524,288,000 B.
    "ring-2.5-1t": (11_520, 146_800_640, 293_601_280, 524_288_000),
    # MiMo-V2-Flash: 9 full x 4 KV x (192 + 128) x 2 B = 23,040 B/token. SWA: 39 x 8 x (192+128)
    # x 2 = 199,680 B/token for the last 128 tokens only: 199,680 x 128 = 25,559,040 B fixed.
    # 32K: 23,040 x 32,768 + 25,559,040 = 754,974,720 + 25,559,040 = 780,533,760 B.
    "mimo-v2-flash": (23_040, 25_559_040, 25_559_040, 780_533_760),
    # gpt-oss-120b: 18 full x 8 KV x (64 + 64) x 2 B = 36,864 B/token; 18 SWA layers keep 128 tokens
    # of the same 36,864 B: 4,718,592 B fixed. 32K: 36,864 x 32,768 + 4,718,592 = 1,212,678,144 B.
    "gpt-oss-120b": (36_864, 4_718_592, 4_718_592, 1_212_678_144),
    # Kimi-Linear-1T (reconstructed): 15 MLA x 1,152 = 17,280 B/token. KDA layer: 60 heads x
    # (128*128*4 + 3*(128 + 2*128)*2) = 60 x 67,840 = 4,070,400 B; 45 x 4,070,400 = 183,168,000 B
    # (KDA recurrent state fp32 in both engines). 32K: 566,231,040 + 183,168,000 = 749,399,040 B.
    "kimi-linear-1t": (17_280, 183_168_000, 183_168_000, 749_399_040),
}

ALL_MODELS = list_model_specs()
LENGTHS_TOKENS = [1, 100, 128, 129, 4096, 32768, 131072]


def test_every_model_db_entry_is_pinned():
    assert sorted(m.id for m in ALL_MODELS) == sorted(PINNED)


@pytest.mark.parametrize("model_id", sorted(PINNED))
def test_pinned_bytes(model_id):
    per_token_bytes, fixed_vllm_bytes, fixed_sglang_bytes, kv_32k_bytes = PINNED[model_id]
    m = load_model(model_id)
    assert m.kv_bytes_per_token() == per_token_bytes
    assert m.fixed_state_bytes() == fixed_vllm_bytes
    assert m.fixed_state_bytes(SGLANG) == fixed_sglang_bytes
    assert m.kv_bytes(L32K_TOKENS) == kv_32k_bytes


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m.id)
def test_fp8_kv_halves_per_token_bytes_and_leaves_states_alone(model):
    """fp8 halves the KV elements; what a kind stores in its own format (a DSA indexer's 132-byte
    keys: DeepSeek-V3.2 61 x (576 + 132) = 43,188 B/token) stays."""
    fp8 = CacheSettings(kv_dtype="fp8")
    own = sum(n * model.attention[name].index_bytes_per_token for name, n in model.layer_counts().items())
    assert 2 * (model.kv_bytes_per_token(fp8) - own) == PINNED[model.id][0] - own
    assert linear_state_bytes(model, fp8) == linear_state_bytes(model)
    if model.id == "deepseek-v3.2":
        assert own == 61 * 132 and model.kv_bytes_per_token(fp8) == 43_188


def test_mimo_swa_block_rounding_keeps_144_tokens():
    # vLLM-style paging with 16-token blocks keeps ceil((128 - 1) / 16) + 1 = 9 blocks = 144
    # tokens per SWA layer once the request is long enough.
    m = load_model("mimo-v2-flash")
    paged = CacheSettings(block_tokens=16)
    swa_bytes_per_token = 39 * 8 * (192 + 128) * 2  # 199,680 B/token
    # 32K (a whole number of blocks): 23,040 x 32,768 + 199,680 x 144 = 754,974,720 + 28,753,920
    assert m.kv_bytes(32768, paged) == 754_974_720 + 28_753_920 == 23_040 * 32768 + swa_bytes_per_token * 144
    # 100 tokens round up to 112 (7 blocks), below the SWA cap: (23,040 + 199,680) x 112
    assert m.kv_bytes(100, paged) == 222_720 * 112 == 24_944_640
    # Without paging the window holds exactly 128 tokens.
    assert m.kv_bytes(32768) - m.kv_bytes(32767) == 23_040


def test_per_gpu_bytes_under_tp8():
    # MLA latent has no head axis: every rank holds the whole cache.
    ds = load_model("deepseek-v3")
    assert per_gpu_kv_bytes(ds, 32768, 8) == 2_302_672_896
    # Qwen3.5: 2 KV heads cannot split 8 ways -> 1 head per rank: 15 x 1 x 512 x 2 = 15,360 B/token
    # -> 503,316,480 B at 32K; GDN state shards by V heads (64 / 8): 192,061,440 / 8 = 24,007,680 B.
    q35 = load_model("qwen3.5-397b-a17b")
    assert per_gpu_kv_bytes(q35, 32768, 8) == 503_316_480 + 24_007_680
    # MiniMax: 8 KV heads -> exactly 1 per rank: 62 x 1 x 256 x 2 = 31,744 B/token -> 1,040,187,392 B.
    mm = load_model("minimax-m2.5")
    assert per_gpu_kv_bytes(mm, 32768, 8) == 1_040_187_392 == 8_321_499_136 // 8


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m.id)
def test_sympy_expression_matches_kv_bytes(model):
    expr = kv_bytes_expr(model)
    (tokens_symbol,) = expr.free_symbols  # the single symbol l (tokens)
    f = sympy.lambdify(tokens_symbol, expr, modules="math")
    for tokens in LENGTHS_TOKENS:
        assert int(f(tokens)) == kv_bytes(model, tokens)


def test_sympy_expression_refuses_paging():
    """The closed form has no page rounding: a paged cache setting is one line, not a wrong formula."""
    with pytest.raises(InvalidInput, match="^kv_bytes_expr: block_tokens is not supported; the expression has no paging$"):
        kv_bytes_expr(ALL_MODELS[0], CacheSettings(block_tokens=16))
    assert kv_bytes_expr(ALL_MODELS[0], CacheSettings()) == kv_bytes_expr(ALL_MODELS[0])


def _window_part_bytes(model, tokens: int) -> int:
    """Bytes of the sliding-window layers, computed here from the attention specs."""
    counts = model.layer_counts()
    return sum(counts[name] * a.num_kv_heads * (a.head_dim_k + a.head_dim_v) * 2 * min(tokens, a.window_tokens)
               for name, a in model.attention.items() if a.kind == "swa")


@settings(max_examples=200, deadline=None)
@given(model=st.sampled_from(ALL_MODELS), a=st.integers(1, 2_000_000), b=st.integers(1, 2_000_000))
def test_kv_bytes_properties(model, a, b):
    lo, hi = sorted((a, b))
    assert kv_bytes(model, lo) <= kv_bytes(model, hi)
    expected = kv_bytes_per_token(model) * hi + _window_part_bytes(model, hi) + linear_state_bytes(model)
    assert kv_bytes(model, hi) == expected


@settings(max_examples=200, deadline=None)
@given(model=st.sampled_from(ALL_MODELS), tokens=st.lists(st.integers(1, 4_000_000), min_size=1, max_size=4),
       half=st.booleans(), block=st.sampled_from([None, 1, 16, 64, 256]), kv_dtype=st.sampled_from(["bf16", "fp8"]))
def test_a_python_number_and_an_array_give_the_same_bytes(model, tokens, half, block, kv_dtype):
    """A Python number is computed in plain floats (the kv command loads no numpy), an array in
    numpy, for every length, paging and window: the same bytes."""
    s = CacheSettings(kv_dtype=kv_dtype, block_tokens=block)
    lengths = [t + 0.5 * half for t in tokens]  # the planner's mean lengths are fractional
    from_array = kv_bytes(model, np.asarray(lengths), s)
    assert [kv_bytes(model, t, s) for t in lengths] == [int(v) for v in from_array]
    assert [kv_bytes(model, np.float64(t), s) for t in lengths] == [kv_bytes(model, np.asarray(t), s) for t in lengths]
    assert all(isinstance(kv_bytes(model, t, s), int) for t in (tokens[0], lengths[0]))


# PrfaaS paper (arXiv 2604.15039) Table 5: l (tokens), S_kv (MiB), T_prefill (s), Phi_kv (Gbps)
TABLE5 = [(1024, 190.8, 0.44, 3.61), (8192, 308.9, 0.72, 3.59),
          (32768, 701.3, 1.84, 3.19), (131072, 2316.3, 7.40, 2.62)]


@pytest.mark.parametrize("tokens, s_kv_mib, _t_s, _phi_gbps", TABLE5)
def test_kimi_linear_1t_matches_table5_within_2_percent(tokens, s_kv_mib, _t_s, _phi_gbps):
    m = load_model("kimi-linear-1t")
    assert m.kv_bytes(tokens) / MIB_BYTES == pytest.approx(s_kv_mib, rel=0.02)


def test_eq1_on_table5_profile_reproduces_its_throughput_column():
    # bandwidth.kv_throughput_gbps (Eq. 1) fed Table 5's own T_prefill and S_kv as a measured
    # profile must print Table 5's Phi_kv column. T is printed with 2 decimals (+-0.005 s) and Phi
    # with 2 (+-0.005 Gbps): the paper's Phi must lie in the interval that rounding allows (at 1K
    # this is what makes 190.8 MiB / 0.44 s = 3.64 Gbps consistent with the printed 3.61).
    model, inst = load_model("kimi-linear-1t"), instance("h200", 8)
    tokens = [row[0] for row in TABLE5]
    for dt_s in (-0.005, 0.005):
        profile = MeasuredProfile(tuple(tokens), tuple(row[2] + dt_s for row in TABLE5),
                                  tuple(row[1] * MIB_BYTES for row in TABLE5))
        phi = np.asarray(kv_throughput_gbps(model, inst, tokens, profile=profile))
        printed = np.array([row[3] for row in TABLE5])
        assert np.all(phi + 0.005 >= printed) if dt_s < 0 else np.all(phi - 0.005 <= printed)
    profile = MeasuredProfile(tuple(tokens), tuple(row[2] for row in TABLE5), tuple(row[1] * MIB_BYTES for row in TABLE5))
    phi = kv_throughput_gbps(model, inst, tokens, profile=profile)
    assert phi[1:] == pytest.approx([3.59, 3.19, 2.62], abs=0.01)  # T has three significant digits
    assert phi[0] == pytest.approx(190.8 * 2**20 * 8 / 0.44 / 1e9, rel=1e-12)  # 3.6376 Gbps


def test_a_scenario_cache_block_sets_block_tokens(tmp_path):
    # The scenario's cache: block is CacheSettings itself, so a YAML can page the cache: 1,000
    # tokens in 4,096-token pages hold 4,096 tokens of kimi-linear-1t's MLA latent
    from prfaas_plan.data import builtin_dir
    from prfaas_plan.scenario import load_scenario

    text = (builtin_dir("prfaas_plan.data.scenarios") / "paper-case-study.yaml").read_text()
    path = tmp_path / "paged.yaml"
    assert "cache: {kv_dtype: bf16, engine: vllm}" in text
    path.write_text(text.replace("cache: {kv_dtype: bf16, engine: vllm}", "cache: {kv_dtype: bf16, engine: vllm, block_tokens: 4096}"))
    cache = load_scenario(path).spec.cache
    assert isinstance(cache, CacheSettings) and cache.block_tokens == 4096
    m = load_model("kimi-linear-1t")
    assert kv_bytes(m, 1000, cache) - kv_bytes(m, 1000) == 15 * 1152 * (4096 - 1000)
