"""DeepSeek sparse attention (DeepSeek-V3.2, GLM-5): the projections each TP rank holds, the kernel
model's sparse attention and indexer, the roofline's pair counts, and the torch layer of the bench
harness. Every expected value is worked out by hand from the public configs (tests/fixtures/hf)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from prfaas_plan.bench.model import DSALayer, MLALayer, RopeTable, _Init
from prfaas_plan.engine import load_engine
from prfaas_plan.hardware import instance
from prfaas_plan.kvcache import CacheSettings
from prfaas_plan.layout import Layout, weight_bytes_per_gpu
from prfaas_plan.model import load_model
from prfaas_plan.model.kinds import DSA, MLA
from prfaas_plan.perf.kernels import FALLBACK_COMPUTE_EFFICIENCY, FALLBACK_MEMORY_EFFICIENCY, causal_pairs
from prfaas_plan.perf.ops import attention_gemms, decode_ops, forward_ops, prefill_ops
from prfaas_plan.perf.roofline import layer_costs

GLM5 = load_model("glm-5")
V32 = load_model("deepseek-v3.2")


def _as_mla(model):
    """The same model with plain MLA layers (the indexer and its top-k removed)."""
    a = model.attention["dsa"]
    mla = MLA(**{k: v for k, v in a.model_dump().items() if not k.startswith("index_")} | {"kind": "mla"})
    return model.model_copy(update={"attention": {"dsa": mla}})


def test_glm5_projections_per_rank_at_tp8_by_hand():
    """TP 8, 8 of 64 heads per rank. Replicated, reading the hidden state (6,144): q_a 2,048 + kv_a
    512 + RoPE key 64 + indexer key 128 + indexer head weights 32 = 2,784 columns; the indexer's
    query projection from the query latent (2,048 -> 32 x 128 = 4,096) is whole too. Column
    parallel: q_b 2,048 -> 8 x (192 + 64) = 2,048; kv_b 512 -> 8 x (192 + 256) = 3,584. Row
    parallel: o 8 x 256 = 2,048 -> 6,144."""
    got = sorted((g.name, g.n, g.k) for g in attention_gemms(GLM5, "dsa", 8))
    assert got == sorted([("dsa.replicated", 2784, 6144), ("dsa.replicated", 4096, 2048),
                          ("dsa.column", 2048, 2048), ("dsa.column", 3584, 512), ("dsa.wo", 6144, 2048)])


def test_indexer_weights_are_on_every_rank():
    """Going from TP 1 to TP 8 divides the sharded attention weights by 8 but not the indexer's
    (64 x 128 x 1,536 + 7,168 x 128 + 7,168 x 64 = 13,959,168 parameters a layer on DeepSeek-V3.2)."""
    indexer = 64 * 128 * 1536 + 7168 * 128 + 7168 * 64
    a = V32.attention["dsa"]
    shapes = a.gemm_shapes(V32.hidden_size)
    assert sum(math.prod(shapes[n]) for n in ("idx_wq_b", "idx_wk", "idx_weights")) == indexer
    mla = _as_mla(V32)
    extra_tp1 = weight_bytes_per_gpu(V32, Layout(1, experts="ep")) - weight_bytes_per_gpu(mla, Layout(1, experts="ep"))
    extra_tp8 = weight_bytes_per_gpu(V32, Layout(8)) - weight_bytes_per_gpu(mla, Layout(8))
    assert extra_tp1 == pytest.approx(61 * indexer * 1.0, rel=0.02)  # FP8 block weights, scales 1/128^2
    assert extra_tp8 == pytest.approx(extra_tp1, rel=1e-12)


def test_a_measured_prefill_module_is_reproduced_by_its_ops():
    """NVIDIA timed GLM-5-FP8's whole attention module of one layer (SGLang 0.5.14's self_attn forward,
    eager) on H200 at TP 8 (8 heads per rank), one sequence of 8,192 tokens, bf16 KV, no prefix:
    5.1630 ms (aiconfigurator-core 0.12.0, systems/data/h200_sxm/sparse_attention/sglang/0.5.14/
    dsa_context_module_perf.parquet). Our layer at that shape is its projection GEMMs, the indexer
    and the attention core (the module's remainder, table dsa_context): they add up to it."""
    got = prefill_ops(GLM5, instance("h200", 8), 8192.0, load_engine("sglang"))
    layer_s = sum(v for k, v in got.ops.items() if k.startswith("dsa.")) / 78
    assert layer_s == pytest.approx(5.1630e-3, rel=1e-5)  # tables store float32
    assert got.sources["dsa.mla"].startswith("table h200 sglang-0.5.14 ")


def test_sparse_prefill_beyond_the_table_grows_with_the_selected_pairs():
    """Past the measured 8,192 tokens the core extrapolates by its FLOP law over the pairs the top-k
    keeps, 2048 x 2049 / 2 + (l - 2048) x 2048, not l (l + 1) / 2: 4.4x from 8K to 32K, where dense
    attention would grow 16x."""
    inst, eng = instance("h200", 8), load_engine("sglang")
    at_8k = prefill_ops(GLM5, inst, 8192.0, eng).ops["dsa.mla"]
    at_32k_one_chunk = prefill_ops(GLM5, instance("h200", 8, engine=eng.with_chunked_prefill(32768)), 32768.0,
                                   eng.with_chunked_prefill(32768)).ops["dsa.mla"]
    pairs = (2048 * 2049 / 2 + (32768 - 2048) * 2048) / (2048 * 2049 / 2 + (8192 - 2048) * 2048)
    assert float(causal_pairs(32768, 2048)) / float(causal_pairs(8192, 2048)) == pytest.approx(pairs)
    assert at_32k_one_chunk / at_8k == pytest.approx(pairs, rel=1e-6)
    assert pairs == pytest.approx(4.43, abs=0.01)


def test_prefill_indexer_reads_nvidias_measured_kernel():
    """At a measured shape (GLM-5's 32 heads of 128, one sequence of 8,192 tokens, no prefix) the
    indexer of each of the 78 layers takes the latency DeepGEMM's fp8_mqa_logits measured on H200
    (aiconfigurator-core 0.12.0, reduced to hardware_db/kernels/h200/sglang-0.5.14/dsa.npz); on
    every TP rank, whole."""
    from prfaas_plan.perf import kernels as K

    arrays = K.load_family(K.table_folder("h200", "dsa_indexer_context"), "dsa")
    at = (arrays["dsa_indexer_context.batch"] == 1) & (arrays["dsa_indexer_context.isl"] == 8192)
    measured_s = float(arrays["dsa_indexer_context.latency_s"][at][0])
    assert 1e-4 < measured_s < 1e-2  # the wheel's 0.1-1 ms row, read in seconds
    for tp in (1, 8):
        inst = instance("h200", 8, layout=Layout(8) if tp == 8 else Layout(8, "dp"))
        got = prefill_ops(GLM5, inst, 8192.0, load_engine("sglang"))
        assert got.ops["dsa.indexer"] == pytest.approx(78 * measured_s, rel=1e-6)  # tables store float32
        assert got.sources["dsa.indexer"] == "table h200 sglang-0.5.14 deep_gemm.fp8_mqa_logits"


def test_the_importer_keeps_the_indexer_rows_without_a_prefix():
    import pandas as pd

    from prfaas_plan.bench.kernels_import import reduce_dsa_indexer

    rows = pd.DataFrame([dict(kernel_source="deep_gemm.fp8_mqa_logits", batch_size=2, isl=1024, step=0, latency=0.5),
                         dict(kernel_source="deep_gemm.fp8_mqa_logits", batch_size=2, isl=1024, step=512, latency=0.9),
                         dict(kernel_source="other", batch_size=2, isl=1024, step=0, latency=0.1)])
    got = reduce_dsa_indexer("sglang", rows)["dsa_indexer_context"]
    assert got.to_dict("records") == [dict(index_heads=32, index_head_dim=128, batch=2, isl=1024,
                                           kernel_source="deep_gemm.fp8_mqa_logits", latency_s=0.5e-3)]


def test_a_measured_decode_module_is_reproduced_by_its_ops():
    """NVIDIA timed GLM-5-FP8's attention module of one layer in one decode step on H200 at TP 8,
    8 sequences holding 8,192 cached tokens (step 8192, so 8,193 with the new one), bf16 KV:
    0.0960 ms (aiconfigurator-core 0.12.0, systems/data/h200_sxm/sparse_attention/sglang/0.5.14/
    dsa_generation_module_perf.parquet). Our layer there: its projection GEMMs, the indexer (the
    roofline at the named fallback: 8 x 8,193 keys x 2 x 32 x 129 FP8 FLOPs against 8 x (32 x 128
    + 8,193 x (132 + 8)) bytes) and the core (the module's remainder, table dsa_generation)."""
    inst, eng = instance("h200", 8), load_engine("sglang")
    d = decode_ops(GLM5, inst, 8, 8193.0, eng)
    assert sum(v for k, v in d.ops.items() if k.startswith("dsa.")) / 78 == pytest.approx(0.0960e-3, rel=1e-5)
    flops, moved = 8 * 8193 * 2 * 32 * 129, 8 * (32 * 128 + 8193 * (132 + 8))
    gpu = inst.gpu
    by_hand = max(flops / (gpu.fp8_dense_tflops * 1e12 * FALLBACK_COMPUTE_EFFICIENCY),
                  moved / (gpu.memory_bytes_per_s * FALLBACK_MEMORY_EFFICIENCY))
    assert d.ops["dsa.indexer"] == pytest.approx(78 * by_hand, rel=1e-12)
    assert "roofline of h200 (no table for dsa_indexer" in d.sources["dsa.indexer"]


def test_h100_reads_the_dsa_tables_of_h200():
    """Only H200 and B200 keep DSA tables (kernels_import.DSA_GPUS): H100 takes H200's through
    the transfer method, at its own peaks and bandwidth."""
    d = decode_ops(GLM5, instance("h100", 8), 8, 8193.0, load_engine("sglang"))
    assert d.sources["dsa.mla"].startswith("transfer h200->h100 from table h200 sglang-0.5.14 ")


def test_sparse_decode_beats_dense_mla_at_long_context():
    """Past the top-k the sparse model decodes faster than dense MLA at the same context: DeepSeek-V3.2
    against V3 at 32 sequences of 65,536 tokens on 8xH200."""
    inst, eng = instance("h200", 8), load_engine("sglang")
    assert decode_ops(V32, inst, 32, 65536.0, eng).total_s < decode_ops(load_model("deepseek-v3"), inst, 32, 65536.0,
                                                                        eng).total_s


def test_dsa_costs_short_prefills_and_halves_long_ones():
    """Against DeepSeek-V3 (the same shapes, dense MLA) on 8xH200: at 2K tokens DeepSeek-V3.2 pays
    for its measured sparse-attention module (its indexer 2% of the prefill), at 128K the capped
    pairs more than pay for the indexer: under half of V3's time."""
    inst, eng = instance("h200", 8), load_engine("sglang")
    v3 = load_model("deepseek-v3")
    short = prefill_ops(V32, inst, 2048.0, eng)
    assert short.families["indexer"] < 0.05 * short.total_s
    assert short.total_s > prefill_ops(v3, inst, 2048.0, eng).total_s
    assert prefill_ops(V32, inst, 131072.0, eng).total_s < 0.5 * prefill_ops(v3, inst, 131072.0, eng).total_s
    names = [s.op.name for s in forward_ops(V32, Layout(8))]
    assert names.index("dsa.indexer") + 1 == names.index("dsa.mla")  # the indexer selects, then the core attends


def test_roofline_counts_the_indexer_on_every_pair_and_the_core_on_the_selected():
    c = layer_costs(GLM5)
    assert c.attn_flops_per_pair == 78 * 2 * 32 * (128 + 1)
    assert c.swa == ((78 * 2.0 * 64 * (192 + 64 + 256), 2048),)


def test_index_cache_bytes_stay_when_the_kv_is_fp8():
    a = GLM5.attention["dsa"]
    assert isinstance(a, DSA) and a.index_bytes_per_token == 128 + 4
    fp8 = CacheSettings(kv_dtype="fp8")
    assert GLM5.kv_bytes_per_token(fp8) == 78 * (576 + 132)
    assert GLM5.kv_bytes_per_token() == 78 * (1152 + 132)


def _layers(topk: int):
    attn = DSA(kind="dsa", num_heads=4, kv_lora_rank=32, q_lora_rank=48, qk_nope_head_dim=16, qk_rope_head_dim=8,
               v_head_dim=16, index_n_heads=3, index_head_dim=16, index_topk=topk)
    mla = MLA(**{k: v for k, v in attn.model_dump().items() if not k.startswith("index_")} | {"kind": "mla"})
    return DSALayer(attn, 64, _Init("cpu", torch.float32, 3)), MLALayer(mla, 64, _Init("cpu", torch.float32, 3))


def test_torch_layer_is_mla_while_every_key_is_selected():
    """The same seed draws MLA's weights first, so with top-k >= the tokens the sparse layer's output
    is the dense layer's."""
    sparse, dense = _layers(topk=64)
    x = torch.randn(40, 64, generator=torch.Generator().manual_seed(0))
    rope = RopeTable(40, "cpu", torch.float32)
    settings = CacheSettings(kv_dtype="fp32")
    y_sparse, cache = sparse.forward(x, rope, settings)
    y_dense, dense_cache = dense.forward(x, rope, settings)
    assert torch.allclose(y_sparse, y_dense, atol=1e-5)
    assert torch.equal(cache["latent"], dense_cache["latent"])
    assert cache["index_k"].dtype == torch.uint8 and tuple(cache["index_k"].shape) == (40, 16 + 4)


def test_torch_layer_attends_to_the_top_k_and_stores_fp8_keys():
    sparse, _ = _layers(topk=8)
    x = torch.randn(40, 64, generator=torch.Generator().manual_seed(1))
    rope = RopeTable(40, "cpu", torch.float32)
    y8, cache = sparse.forward(x, rope, CacheSettings(kv_dtype="fp32"))
    sparse.attn = sparse.attn.model_copy(update={"index_topk": 64})
    y_all, _ = sparse.forward(x, rope, CacheSettings(kv_dtype="fp32"))
    assert torch.allclose(y8[:8], y_all[:8], atol=1e-5)  # the first 8 queries see all their keys either way
    assert not torch.allclose(y8[8:], y_all[8:], atol=1e-3)
    # the stored keys: fp8 bytes then one fp32 scale (16 channels: one block), dequantised within fp8's 2^-3
    k = x @ sparse.gemm["idx_wk"]
    stored = cache["index_k"]
    scale = stored[:, 16:].contiguous().view(torch.float32)
    keys = stored[:, :16].contiguous().view(torch.float8_e4m3fn).float() * scale
    assert torch.allclose(keys, k, rtol=0.07, atol=float(scale.max()) * 0.07)
    assert np.isclose(float(scale.max()), float(k.abs().max()) / 448, rtol=1e-6)


def test_the_importer_subtracts_projections_and_scores_from_the_module():
    """A module row of 5 ms with five projection GEMMs of 0.1 ms each (GLM-5 at TP 8:
    perf.ops.attention_gemms) and 0.5 ms of indexer scores leaves 4 ms for the core; a 0.6 ms row
    leaves less than nothing and is floored at 5% of itself; rows with a cached prefix, of another
    model, or at a length the indexer rows lack are not read."""
    import pandas as pd

    from prfaas_plan.bench.kernels_import import MODULE_FLOOR_FRACTION, reduce_dsa
    from prfaas_plan.perf.kernels import OpTime

    class Gemms:
        def gemm(self, m, n, k, dtype):
            assert dtype == "fp8_block"
            return OpTime(np.full(np.shape(m), 0.1e-3), "table stub")

        def dsa_indexer(self, phase, batch, tokens, heads, head_dim, key_bytes):
            assert (phase, heads, head_dim, key_bytes) == ("generation", 32, 128, 132)
            return OpTime(np.full(np.shape(tokens), 0.2e-3), "roofline stub")

    mqa = pd.DataFrame([dict(kernel_source="deep_gemm.fp8_mqa_logits", batch_size=b, isl=l, step=0, latency=0.5)
                        for b, l in ((1, 8192), (4, 1024))])
    row = dict(model="zai-org/GLM-5-FP8", op_name="dsa_context_module", kernel_source="k", step=0, tp_size=8,
               num_heads=8, kv_cache_dtype="bfloat16")
    module = pd.DataFrame([row | dict(batch_size=1, isl=8192, latency=5.0), row | dict(batch_size=4, isl=1024, latency=0.6),
                           row | dict(batch_size=1, isl=8192, latency=9.0, step=512),
                           row | dict(batch_size=1, isl=8192, latency=9.0, model="deepseek-ai/DeepSeek-V3.2"),
                           row | dict(batch_size=2, isl=2048, latency=9.0)])
    step = dict(model="zai-org/GLM-5-FP8", op_name="dsa_generation_module", kernel_source="k", isl=1, tp_size=8,
                num_heads=8, kv_cache_dtype="fp8", batch_size=8)
    generation = pd.DataFrame([step | dict(step=8192, latency=1.0), step | dict(step=10000, latency=1.0)])
    tables = reduce_dsa("sglang", mqa, module, generation, Gemms())
    decode = tables["dsa_generation"]  # 1 ms - 5 x 0.1 ms - 0.2 ms; the probe at 10,000 cached tokens not kept
    assert decode[["kv_dtype", "batch", "context"]].values.tolist() == [["fp8", 8, 8193]]
    assert decode["latency_s"].tolist() == pytest.approx([0.3e-3])
    got = tables["dsa_context"]
    assert len(attention_gemms(GLM5, "dsa", 8)) == 5
    assert got[["batch", "isl"]].values.tolist() == [[1, 8192], [4, 1024]]
    assert got["latency_s"].tolist() == pytest.approx([4.0e-3, MODULE_FLOOR_FRACTION * 0.6e-3])
    assert got[["kv_dtype", "heads", "qk_nope_dim", "v_dim"]].values.tolist()[0] == ["bf16", 8, 192, 256]
    assert got.attrs["floored_rows"] == 1
