"""Kernel tables (perf.kernels) and their importer (bench.kernels_import).

Independent numbers: the committed rows themselves (read here with numpy), the raw parquet of the
aiconfigurator-core wheel where this machine has it unpacked (/tmp/acc/w; skipped elsewhere, CI
has no wheel), closed-form FLOP ratios for the attention extrapolation, and hand-computed
rooflines for a synthetic wheel folder.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from prfaas_plan.bench import kernels_import
from prfaas_plan.cli import main
from prfaas_plan.errors import InvalidInput
from prfaas_plan.hardware import load_gpu
from prfaas_plan.perf import kernels as K
from prfaas_plan.perf.kernels import CODES, kernel_tables, kernels_dir

WHEEL_DIR = Path("/tmp/acc/w")
H200 = load_gpu("h200")


@pytest.fixture(scope="module")
def h200():
    return kernel_tables(H200, "sglang")


def _rows(family: str, table: str) -> dict[str, np.ndarray]:
    with np.load(kernels_dir() / "h200" / "sglang-0.5.14" / f"{family}.npz") as npz:
        return {name.split(".", 1)[1]: npz[name] for name in npz.files if name.startswith(f"{table}.")}


def _sample(rows: dict[str, np.ndarray], n: int = 25) -> np.ndarray:
    return np.random.default_rng(0).choice(len(rows["latency_s"]), size=n, replace=False)


def test_every_measured_gpu_has_the_core_families():
    for gpu in ("h200", "h100", "a100-80g", "l40s", "b200"):
        names = {p.name for p in (kernels_dir() / gpu).glob("sglang-*/*")}
        assert {"gemm.npz", "moe.npz", "attention.npz", "comm.npz", "provenance.yaml"} <= names
    assert sum(p.stat().st_size for p in kernels_dir().rglob("*") if p.is_file()) <= 7e6


def test_gemm_and_moe_grid_points_reproduce_the_committed_rows(h200):
    g = _rows("gemm", "gemm")
    for i in _sample(g):
        t = h200.gemm(g["m"][i], g["n"][i], g["k"][i], CODES["dtype"][g["dtype"][i]])
        assert t.latency_s == pytest.approx(float(g["latency_s"][i]), rel=1e-6), t.source
    m = _rows("moe", "moe")
    for i in _sample(m):
        t = h200.moe(m["tokens"][i], m["hidden"][i], m["inter"][i], m["topk"][i], m["experts"][i], m["moe_tp"][i],
                     m["moe_ep"][i], CODES["dtype"][m["dtype"][i]], CODES["routing"][m["routing"][i]])
        assert t.latency_s == pytest.approx(float(m["latency_s"][i]), rel=1e-6)


def test_attention_and_comm_grid_points_reproduce_the_committed_rows(h200):
    c = _rows("attention", "context_attention")
    for i in _sample(c):
        t = h200.context_attention(c["batch"][i], c["isl"][i], c["heads"][i], c["kv_heads"][i], c["head_dim"][i],
                                   int(c["window"][i]) or None, CODES["kv_dtype"][c["kv_dtype"][i]])
        assert t.latency_s == pytest.approx(float(c["latency_s"][i]), rel=1e-6)
    g = _rows("attention", "generation_attention")
    for i in _sample(g):
        t = h200.generation_attention(g["batch"][i], g["context"][i], g["heads"][i], g["kv_heads"][i],
                                      g["head_dim"][i], int(g["window"][i]) or None, CODES["kv_dtype"][g["kv_dtype"][i]])
        assert t.latency_s == pytest.approx(float(g["latency_s"][i]), rel=1e-6)
    a = _rows("comm", "all_reduce")
    t = h200.all_reduce(a["message_bytes"], 8)
    eight = a["gpus"] == 8
    np.testing.assert_allclose(h200.all_reduce(a["message_bytes"][eight], 8).latency_s, a["latency_s"][eight], rtol=1e-6)
    assert isinstance(t.latency_s, np.ndarray)


def test_an_all_reduce_over_two_nodes_adds_the_network_to_one_nodes(h200):
    """TP16 on 8-GPU H200 boards: the 8-GPU table's all-reduce, then each GPU's eighth of the
    message all-reduced with its peer on the other node over its 400 Gb/s NIC, along NCCL's tree:
    2 network hops of 5.0 us (NCCL's tuning model) and a 2-node ring's half of the eighth."""
    assert h200.gpu.gpus_per_node == 8 and h200.gpu.nic_gbps == 400
    for message in (16 * 7168 * 2, 8192 * 7168 * 2):  # a decode step's and a prefill chunk's hidden states
        node = float(h200.all_reduce(message, 8).latency_s)
        two = h200.all_reduce(message, 16)
        network = 2 * 5.0e-6 + 2 * (2 - 1) / 2 * (message / 8) / (400e9 / 8)
        assert float(two.latency_s) == pytest.approx(node + network, rel=1e-12)
        assert "2 nodes over the NIC" in two.source
    four = float(h200.all_reduce(16 * 7168 * 2, 32).latency_s)  # 4 nodes: 4 hops, 3/4 of the eighth
    assert four == pytest.approx(float(h200.all_reduce(16 * 7168 * 2, 8).latency_s) + 4 * 5.0e-6
                                 + 2 * 3 / 4 * (16 * 7168 * 2 / 8) / 50e9, rel=1e-12)
    # a GPU entry that states no node size keeps every count in one scale-up domain (the table's nearest)
    flat = kernel_tables(h200.gpu.model_copy(update={"gpus_per_node": None}), "sglang").all_reduce(16 * 7168 * 2, 16)
    assert "NIC" not in flat.source and flat.latency_s < h200.all_reduce(16 * 7168 * 2, 16).latency_s


def test_every_bundled_gpu_states_its_node_size():
    from prfaas_plan.hardware import list_gpus

    assert {g.id: g.gpus_per_node for g in list_gpus()} == dict.fromkeys(
        ("a100-80g", "b200", "h100", "h20", "h200", "l40s", "mi300x"), 8)


@pytest.mark.skipif(not WHEEL_DIR.is_dir(), reason="needs the unpacked aiconfigurator-core wheel")
def test_lookup_returns_the_raw_wheel_measurement(h200):
    import pandas as pd

    data = WHEEL_DIR / "aiconfigurator_core" / "systems" / "data" / "h200_sxm"
    gemm = pd.read_parquet(data / "gemm" / "sglang" / "0.5.14" / "gemm_perf.parquet")
    row = gemm[(gemm.kernel_source == "sglang_deepgemm_gemm_nt_f8f8bf16") & (gemm.m == 4096) & (gemm.n == 8192)
               & (gemm.k == 8192)]
    assert h200.gemm(4096, 8192, 8192, "fp8_block").latency_s == pytest.approx(row.latency.median() * 1e-3, rel=1e-6)
    ar = pd.read_parquet(data / "comm" / "sglang" / "0.5.14" / "custom_allreduce_perf.parquet")
    row = ar[(ar.backend == "sglang_graph") & (ar.num_gpus == 8) & (ar.message_size == 8192)]  # elements of bf16
    assert h200.all_reduce(8192 * 2, 8).latency_s == pytest.approx(row.latency.iloc[0] * 1e-3, rel=1e-6)


def test_interpolation_lies_between_the_neighbouring_grid_points(h200):
    lo, hi = (h200.gemm(m, 8192, 8192, "bf16").latency_s for m in (2048, 4096))
    mid = h200.gemm(3000, 8192, 8192, "bf16").latency_s
    assert lo < mid < hi
    lo, hi = (h200.moe(t, 3072, 1536, 8, 256, 1, 1, "fp8_block").latency_s for t in (1024, 1536))
    assert lo < h200.moe(1200, 3072, 1536, 8, 256, 1, 1, "fp8_block").latency_s < hi


def test_fp8_gemm_beats_bf16_by_the_tables_ratio_at_large_m(h200):
    # H200 tables at n = k = 8192: bf16 / fp8_block latency 1.46 (m=1K), 1.48 (4K), 2.03 (16K)
    g = _rows("gemm", "gemm")
    for m in (1024, 4096, 16384):
        at = (g["m"] == m) & (g["n"] == 8192) & (g["k"] == 8192)
        bf16 = float(g["latency_s"][at & (g["dtype"] == 0)][0])
        fp8 = float(g["latency_s"][at & (g["dtype"] == 2)][0])
        ratio = h200.gemm(m, 8192, 8192, "bf16").latency_s / h200.gemm(m, 8192, 8192, "fp8_block").latency_s
        assert ratio == pytest.approx(bf16 / fp8, rel=1e-6) and ratio > 1.4


def test_attention_beyond_16k_follows_its_flop_law(h200):
    t16, t32 = (h200.context_attention(1, s, 8, 1, 128, None, "bf16") for s in (16384, 32768))
    assert "FLOP law" in t32.source and "FLOP law" not in t16.source
    assert t32.latency_s / t16.latency_s == pytest.approx(32768 * 32769 / (16384 * 16385), rel=1e-9)  # ~4x
    w16, w32 = (h200.context_attention(1, s, 8, 1, 128, 1024, "bf16").latency_s for s in (16384, 32768))
    pairs = [1024 * 1025 / 2 + (s - 1024) * 1024 for s in (16384, 32768)]  # W = 1024
    assert w32 / w16 == pytest.approx(pairs[1] / pairs[0], rel=1e-9)  # ~2x


def test_token_arrays_broadcast_and_sources_name_the_table(h200):
    t = h200.gemm(np.array([1, 64, 4096]), 8192, 8192, "fp8")
    assert t.latency_s.shape == (3,) and np.all(np.diff(t.latency_s) > 0)
    assert h200.gemm(np.array([0, 1]), 8192, 8192, "fp8").latency_s[0] == 0.0  # no tokens, no kernel
    assert t.source.startswith("table h200 sglang-0.5.14 sglang_sgl_kernel_fp8_scaled_mm")
    assert "roofline" in h200.gemm(4096, 8192, 8192, "int4_w4a16").source  # no W4A16 dense GEMM table
    assert "outside the measured range" not in t.source
    beyond = h200.gemm(4 * 1024 * 1024, 8192, 8192, "fp8")  # more rows than any measured GEMM
    assert beyond.source.endswith("; outside the measured range: efficiency held at the grid edge")


def test_a_table_with_a_missing_column_is_one_line_of_bad_input(tmp_path):
    folder = tmp_path / "h200" / "sglang-0.5.14"
    folder.mkdir(parents=True)
    (folder / "provenance.yaml").write_text("gpu: h200\n")
    with np.load(kernels_dir() / "h200" / "sglang-0.5.14" / "gemm.npz") as npz:
        arrays = {name: npz[name] for name in npz.files if name != "gemm.k"}
    np.savez_compressed(folder / "gemm.npz", **arrays)
    with pytest.raises(InvalidInput, match=r"gemm\.npz: kernel table 'gemm' has no column 'k'") as exc:
        kernel_tables(H200, "sglang", root=tmp_path).gemm(1024, 4096, 4096, "bf16")
    assert "\n" not in str(exc.value)


def _fake_wheel(root: Path) -> Path:
    import pandas as pd

    base = root / "aiconfigurator_core" / "systems" / "data" / "h200_sxm"
    gemm = base / "gemm" / "sglang" / "0.5.14"
    gemm.mkdir(parents=True)
    rows = [("sglang_torch_linear", "bfloat16", m, 4096, 4096, lat) for m, lat in ((1, 0.02), (3, 0.03), (1024, 0.05))]
    rows.append(("sglang_deepgemm_gemm_nt_f8f8bf16", "fp8_block", 1024, 4096, 4096, 0.025))
    pd.DataFrame(rows, columns=["kernel_source", "gemm_dtype", "m", "n", "k", "latency"]).assign(
        framework="SGLang", version="0.5.14").to_parquet(gemm / "gemm_perf.parquet")
    (gemm / "collection_meta.yaml").write_text("runtime: {framework: sglang, version: 0.5.14}\n")
    comm = base / "comm" / "sglang" / "0.5.14"
    comm.mkdir(parents=True)
    pd.DataFrame({"kernel_source": ["SGLang_CustomAllReduce_graph"] * 2, "num_gpus": [8, 8],
                  "message_size": [1024, 2048], "latency": [0.004, 0.005], "backend": ["sglang_graph"] * 2,
                  "op_name": ["all_reduce"] * 2}).to_parquet(comm / "custom_allreduce_perf.parquet")
    return root


def test_the_importer_reduces_a_synthetic_wheel(tmp_path):
    lines = []
    out = tmp_path / "out"
    kernels_import.import_kernels(["h200"], out, folder=_fake_wheel(tmp_path / "wheel"), echo=lines.append)
    assert any(line.startswith("h200/sglang-0.5.14/gemm: gemm 3 rows") for line in lines)  # the m=3 probe row dropped
    prov = yaml.safe_load((out / "h200" / "sglang-0.5.14" / "provenance.yaml").read_text())
    gemm = prov["families"]["gemm"]["tables"]["gemm"]
    assert gemm["rows"] == 3 and gemm["engine_version"] == "0.5.14"
    assert gemm["kernel_source"] == {"bf16": ["sglang_torch_linear"], "fp8_block": ["sglang_deepgemm_gemm_nt_f8f8bf16"]}
    with np.load(out / "h200" / "sglang-0.5.14" / "gemm.npz") as npz:
        at = (npz["gemm.m"] == 1024) & (npz["gemm.dtype"] == 2)
        assert float(npz["gemm.latency_s"][at][0]) == pytest.approx(25e-6)  # 0.025 ms
        flops = 2 * 1024 * 4096 * 4096
        moved = 1024 * 4096 + 4096 * 4096 + 1024 * 4096 * 2
        roof = max(flops / 1978.9e12, moved / 4.8e12)
        assert float(npz["gemm.efficiency"][at][0]) == pytest.approx(roof / 25e-6, rel=1e-6)
    kt = kernel_tables(H200, "sglang", root=out)
    assert kt.all_reduce(2048 * 2, 8).latency_s == pytest.approx(5e-6, rel=1e-6)  # 2048 bf16 elements
    assert "roofline" in kt.moe(1024, 4096, 1024, 8, 64, 1, 1, "bf16").source  # no moe table imported


def test_an_import_stopped_half_way_leaves_the_tables_as_they_were(tmp_path, monkeypatch):
    """Every version folder is built in a scratch tree first and published only when all are: an
    import of a changed wheel that fails (or is interrupted) in its second folder leaves ``out``
    byte for byte as it was, its first folder included."""
    import pandas as pd

    out, wheel = tmp_path / "out", _fake_wheel(tmp_path / "wheel")
    kernels_import.import_kernels(["h200"], out, folder=wheel, echo=lambda _: None)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    gemm = wheel / "aiconfigurator_core" / "systems" / "data" / "h200_sxm" / "gemm" / "sglang"
    df = pd.read_parquet(gemm / "0.5.14" / "gemm_perf.parquet")
    df.assign(latency=2 * df["latency"]).to_parquet(gemm / "0.5.14" / "gemm_perf.parquet")  # the newer wheel
    shutil.copytree(gemm / "0.5.14", gemm / "0.5.10")  # and an older version folder, imported second
    real, calls = kernels_import.import_family, []

    def third_fails(*args, **kwargs):
        calls.append((args[4], args[2]))  # (version, family)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(kernels_import, "import_family", third_fails)
    with pytest.raises(KeyboardInterrupt):
        kernels_import.import_kernels(["h200"], out, folder=wheel, echo=lambda _: None)
    assert calls == [("0.5.14", "gemm"), ("0.5.14", "comm"), ("0.5.10", "gemm")]
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_import_kernels_without_the_wheel_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(kernels_import, "installed_package", lambda: None)
    with pytest.raises(SystemExit) as exc:
        main(["bench", "import-kernels", "--gpus", "h200", "--out", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "pip install 'prfaas-plan[kernels]'" in err and "\n" not in err


def test_a_gpu_without_tables_borrows_the_nearest_measured_one():
    h20 = load_gpu("h20")
    kt = kernel_tables(h20, "sglang")
    assert kt.basis != "h20" and kt.basis in {"h200", "h100", "a100-80g", "l40s", "b200"}
    t = kt.gemm(4096, 8192, 8192, "bf16")
    assert t.source.startswith(f"transfer {kt.basis}->h20")
    # H20's bf16 peak (148 TFLOP/s) bounds the 550 GFLOP GEMM from below
    assert t.latency_s >= 2 * 4096 * 8192 * 8192 / (h20.bf16_dense_tflops * 1e12)


def test_vllm_tables_where_imported_else_sglang_stands_in():
    kt = kernel_tables(H200, "vllm")
    assert kt.gemm(4096, 8192, 8192, "fp8").source == "table h200 vllm-0.24.0 CutlassFP8ScaledMMLinearKernel"
    # vLLM's FP8-block GEMMs were timed outside CUDA graphs (kernels_import.EAGER_TIMED): SGLang's
    # graph-timed DeepGEMM rows of the same GPU stand in
    assert kt.gemm(4096, 8192, 8192, "fp8_block").source == ("table h200 sglang-0.5.14 sglang_deepgemm_gemm_nt_f8f8bf16; "
                                                              "sglang tables stand in for vllm")
    assert kt.mla_generation(64, 4096, 16, 512, 64).source.endswith("sglang tables stand in for vllm")  # no vLLM MLA
    h100 = kernel_tables(load_gpu("h100"), "vllm")
    assert "stand in" in h100.gemm(4096, 8192, 8192, "bf16").source
    # H100 keeps vLLM's fused-MoE table only (kernels_import.VLLM_GPUS): gpt-oss's MXFP4 experts at 8
    # tokens on one GPU are the wheel's h100_sxm/moe/vllm/0.24.0 row (0.200635 ms), not SGLang's
    # Triton kernel (0.576 ms), which vLLM does not run for them
    mx = h100.moe(8, 2880, 2880, 4, 128, 1, 1, "mxfp4_w4a16")
    assert mx.source == "table h100 vllm-0.24.0 vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic"
    assert mx.latency_s == pytest.approx(0.200635e-3, rel=1e-5)
    assert kernel_tables(load_gpu("h100"), "sglang").moe(8, 2880, 2880, 4, 128, 1, 1, "mxfp4_w4a16").latency_s > 2 * mx.latency_s
    assert sorted(p.name for p in (kernels_dir() / "h100" / "vllm-0.24.0").iterdir()) == ["moe.npz", "provenance.yaml"]
    with pytest.raises(InvalidInput, match="engine: unknown 'tgi'"):
        kernel_tables(H200, "tgi")


def test_vllm_int4_experts_are_the_marlin_kernel_vllm_serves_them_with():
    # Kimi-K2's compressed-tensors int4 experts, vLLM 0.16.0 (its nearest collection is 0.19.0): the
    # 0.19.0 "vllm_marlin_int4_moe" rows time the Triton WNA16 helper, not what vLLM serves, and were left
    # out, so the lookup reads the 0.24.0 compressed-tensors Marlin experts, the committed row itself
    older, newer = kernel_tables(H200, "vllm", "0.16.0"), kernel_tables(H200, "vllm", "0.24.0")
    t = older.moe(8, 7168, 2048, 8, 384, 8, 1, "int4_w4a16")
    assert t.source == "table h200 vllm-0.24.0 vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts"
    assert t.latency_s == newer.moe(8, 7168, 2048, 8, 384, 8, 1, "int4_w4a16").latency_s
    with np.load(kernels_dir() / "h200" / "vllm-0.19.0" / "moe.npz") as npz:
        names = list(npz["moe.kernel_names"])
        assert "vllm_fused_moe" in names and "vllm_marlin_int4_moe" not in names
        assert CODES["dtype"].index("int4_w4a16") not in set(npz["moe.dtype"].tolist())


def test_the_importer_leaves_out_kernels_the_engine_does_not_serve(tmp_path):
    import pandas as pd

    base = tmp_path / "aiconfigurator_core" / "systems" / "data" / "h200_sxm" / "moe" / "vllm" / "0.19.0"
    base.mkdir(parents=True)
    shape = dict(hidden_size=7168, inter_size=2048, topk=8, num_experts=384, moe_tp_size=8, moe_ep_size=1,
                 distribution="balanced", framework="VLLM", version="0.19.0", device="h200", op_name="moe")
    rows = [dict(shape, kernel_source=k, moe_dtype=d, num_tokens=n, latency=lat)
            for k, d, lat in (("vllm_fused_moe", "bfloat16", 0.1), ("vllm_marlin_int4_moe", "int4_wo", 0.2))
            for n in (1, 8)]
    pd.DataFrame(rows).to_parquet(base / "moe_perf.parquet")
    out = tmp_path / "out"
    kernels_import.import_kernels(["h200"], out, folder=tmp_path, echo=lambda line: None)
    prov = yaml.safe_load((out / "h200" / "vllm-0.19.0" / "provenance.yaml").read_text())
    moe = prov["families"]["moe"]["tables"]["moe"]
    assert moe["kernel_source"] == {"bf16": ["vllm_fused_moe"]} and moe["rows"] == 2


def test_the_importer_leaves_out_vllm_fp8_block_gemms_timed_outside_cuda_graphs(tmp_path):
    # aiconfigurator's vLLM GEMM collector times FP8 block eagerly (kernels_import.EAGER_TIMED): those
    # rows go, every other dtype stays; SGLang's FP8-block rows (graph-timed) are kept
    import pandas as pd

    for engine, version in (("vllm", "0.24.0"), ("sglang", "0.5.14")):
        base = tmp_path / "aiconfigurator_core" / "systems" / "data" / "h200_sxm" / "gemm" / engine / version
        base.mkdir(parents=True)
        rows = [dict(framework=engine.upper(), version=version, device="h200", op_name="gemm", kernel_source=k,
                     gemm_dtype=d, m=m, n=1024, k=3072, latency=lat)
                for k, d, lat in (("torch.nn.functional.linear", "bfloat16", 0.0065),
                                  ("DeepGemmFp8BlockScaledMMKernel", "fp8_block", 0.085),
                                  ("sglang_deepgemm_gemm_nt_f8f8bf16", "fp8_block", 0.012))
                for m in (1, 8)]
        pd.DataFrame(rows).to_parquet(base / "gemm_perf.parquet")
    out = tmp_path / "out"
    kernels_import.import_kernels(["h200"], out, folder=tmp_path, echo=lambda line: None)
    for engine, version, kept in (("vllm", "0.24.0", {"bf16"}), ("sglang", "0.5.14", {"bf16", "fp8_block"})):
        prov = yaml.safe_load((out / "h200" / f"{engine}-{version}" / "provenance.yaml").read_text())
        assert set(prov["families"]["gemm"]["tables"]["gemm"]["kernel_source"]) == kept


def test_mxfp4_with_mxfp8_activations_runs_on_blackwell_only():
    # B200's SGLang 0.5.14 collection times gpt-oss's experts in FlashInfer's TRT-LLM kernel with
    # MXFP8 activations: at 16,384 tokens on one GPU the wheel's row is 1.581 ms, the bf16-activation
    # kernel's 5.99 ms; FP8 operands run at the FP8 peak. Hopper has no MX tensor cores.
    b200 = kernel_tables(load_gpu("b200"), "sglang")
    w4a8 = b200.moe(16384, 2880, 2880, 4, 128, 1, 1, "mxfp4_w4a8")
    w4a16 = b200.moe(16384, 2880, 2880, 4, 128, 1, 1, "mxfp4_w4a16")
    assert w4a8.source == "table b200 sglang-0.5.14 sglang_flashinfer_trtllm_moe"
    assert w4a8.latency_s == pytest.approx(1.581e-3, rel=1e-3) and w4a16.latency_s > 3 * w4a8.latency_s
    assert load_gpu("b200").gemm_peak_flops("mxfp4_w4a8") == load_gpu("b200").fp8_dense_tflops * 1e12
    for gpu in ("h200", "h20"):
        with pytest.raises(InvalidInput, match=r"^gemm_dtypes: \S+ \(hopper\) has no MX tensor cores.*use mxfp4_w4a16"):
            kernel_tables(load_gpu(gpu), "sglang").moe(8, 2880, 2880, 4, 128, 1, 1, "mxfp4_w4a8")


def test_nvfp4_reads_blackwells_fp4_kernels_and_hopper_refuses_it():
    # B200's SGLang 0.5.14 collection: FlashInfer's CuTe-DSL NVFP4 GEMM at 4096^3 (0.063941 ms) and the
    # TRT-LLM NVFP4 MoE at MiniMax-M2.5's shape, 4,096 tokens on one GPU (0.449672 ms): the wheel's rows
    b200 = load_gpu("b200")
    kt = kernel_tables(b200, "sglang")
    g = kt.gemm(4096, 4096, 4096, "nvfp4")
    assert g.source == "table b200 sglang-0.5.14 sglang_flashinfer_cutedsl_nvfp4"
    assert g.latency_s == pytest.approx(0.063941e-3, rel=1e-5)
    m = kt.moe(4096, 3072, 1536, 8, 256, 1, 1, "nvfp4")
    assert m.source == "table b200 sglang-0.5.14 sglang_flashinfer_trtllm_moe"
    assert m.latency_s == pytest.approx(0.449672e-3, rel=1e-5)
    assert b200.gemm_peak_flops("nvfp4") == 9000e12 == 2 * b200.gemm_peak_flops("fp8")  # HGX B200, dense
    for gpu in ("h200", "h20"):
        with pytest.raises(InvalidInput, match=r"^gemm_dtypes: \S+ has no FP4 tensor cores \(no fp4_dense_tflops\)"):
            kernel_tables(load_gpu(gpu), "sglang").gemm(4096, 4096, 4096, "nvfp4")


def test_the_importer_keeps_only_h100s_vllm_moe_family(tmp_path):
    # kernels_import.VLLM_GPUS: H200 takes every vLLM family, H100 its fused-MoE table alone (the
    # 7 MB budget), SGLang every family on both
    import pandas as pd

    for gpu in ("h200_sxm", "h100_sxm"):
        for engine, version in (("vllm", "0.24.0"), ("sglang", "0.5.14")):
            base = tmp_path / "aiconfigurator_core" / "systems" / "data" / gpu
            (base / "gemm" / engine / version).mkdir(parents=True)
            (base / "moe" / engine / version).mkdir(parents=True)
            kernel = "torch.nn.functional.linear" if engine == "vllm" else "sglang_torch_linear"
            pd.DataFrame([dict(framework=engine.upper(), version=version, device=gpu, op_name="gemm", kernel_source=kernel,
                               gemm_dtype="bfloat16", m=m, n=1024, k=3072, latency=0.0065) for m in (1, 8)]
                         ).to_parquet(base / "gemm" / engine / version / "gemm_perf.parquet")
            moe = "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic" if engine == "vllm" else \
                "sglang_fused_moe_triton"
            pd.DataFrame([dict(framework=engine.upper(), version=version, device=gpu, op_name="moe", kernel_source=moe,
                               moe_dtype="w4a16_mxfp4", num_tokens=n, hidden_size=2880, inter_size=2880, topk=4,
                               num_experts=128, moe_tp_size=1, moe_ep_size=1, distribution="balanced", latency=0.2)
                          for n in (1, 8)]).to_parquet(base / "moe" / engine / version / "moe_perf.parquet")
    out = tmp_path / "out"
    kernels_import.import_kernels(["h200", "h100"], out, folder=tmp_path, echo=lambda line: None)
    families = {p.parent.relative_to(out).as_posix(): sorted(q.stem for q in p.parent.glob("*.npz"))
                for p in out.glob("*/*/provenance.yaml")}
    assert families == {"h200/vllm-0.24.0": ["gemm", "moe"], "h200/sglang-0.5.14": ["gemm", "moe"],
                        "h100/vllm-0.24.0": ["moe"], "h100/sglang-0.5.14": ["gemm", "moe"]}
    prov = yaml.safe_load((out / "h100" / "vllm-0.24.0" / "provenance.yaml").read_text())
    assert prov["families"]["moe"]["tables"]["moe"]["kernel_source"] == {
        "mxfp4_w4a16": ["vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic"]}


def test_the_importer_leaves_out_moe_tables_that_timed_ep_ranks_with_ep_times_their_work(tmp_path):
    # aiconfigurator's SGLang MoE collector before its rank-0 projection fix (kernels_import.EP_UNPROJECTED)
    # timed moe_ep 8 as slow as one GPU running every expert: where a later collection exists (H200's 0.5.14)
    # that version's whole MoE table goes, and a stale moe.npz of an earlier import into the same folder
    # goes with it; 0.5.14's table is kept
    import pandas as pd

    out = tmp_path / "out"
    (out / "h200" / "sglang-0.5.10").mkdir(parents=True)
    (out / "h200" / "sglang-0.5.10" / "moe.npz").write_bytes(b"stale")
    for version, ep8_ms in (("0.5.10", 6.49), ("0.5.14", 1.65)):
        base = tmp_path / "aiconfigurator_core" / "systems" / "data" / "h200_sxm" / "moe" / "sglang" / version
        base.mkdir(parents=True)
        rows = [dict(framework="SGLang", version=version, device="h200", op_name="moe",
                     kernel_source="sglang_fused_moe_triton", moe_dtype="fp8_block", num_tokens=16384,
                     hidden_size=3072, inter_size=1536, topk=8, num_experts=256, moe_tp_size=tp, moe_ep_size=ep,
                     distribution="balanced", latency=ms)
                for tp, ep, ms in ((1, 1, 6.77), (8, 1, 1.62), (1, 8, ep8_ms))]
        pd.DataFrame(rows).to_parquet(base / "moe_perf.parquet")
        base = base.parents[2] / "comm" / "sglang" / version  # a family the version keeps
        base.mkdir(parents=True)
        pd.DataFrame([dict(framework="SGLang", version=version, device="h200", op_name="all_reduce",
                           kernel_source="SGLang_CustomAllReduce_graph", allreduce_dtype="bfloat16", num_gpus=8,
                           message_size=1 << 20, latency=0.02)]).to_parquet(base / "custom_allreduce_perf.parquet")
    # a GPU whose only MoE collection is that version (A100) keeps its TP rows, not its EP rows
    a100 = tmp_path / "aiconfigurator_core" / "systems" / "data" / "a100_sxm" / "moe" / "sglang" / "0.5.10"
    a100.mkdir(parents=True)
    moe_rows = tmp_path / "aiconfigurator_core" / "systems" / "data" / "h200_sxm" / "moe" / "sglang" / "0.5.10"
    (a100 / "moe_perf.parquet").write_bytes((moe_rows / "moe_perf.parquet").read_bytes())
    kernels_import.import_kernels(["h200", "a100-80g"], out, folder=tmp_path, echo=lambda line: None)
    with np.load(out / "a100-80g" / "sglang-0.5.10" / "moe.npz") as npz:
        assert sorted(zip(npz["moe.moe_tp"].tolist(), npz["moe.moe_ep"].tolist())) == [(1, 1), (8, 1)]
    assert kernels_import.EP_UNPROJECTED[("sglang", "moe")] == ("0.5.10",)
    assert sorted(p.name for p in (out / "h200" / "sglang-0.5.10").iterdir()) == ["comm.npz", "provenance.yaml"]
    assert (out / "h200" / "sglang-0.5.14" / "moe.npz").is_file()
    got = kernel_tables(H200, "sglang", "0.5.10", root=out).moe(16384, 3072, 1536, 8, 256, 1, 8, "fp8_block")
    assert got.source.startswith("table h200 sglang-0.5.14 ") and got.latency_s == pytest.approx(1.65e-3, rel=1e-6)


@pytest.mark.parametrize("args, field", [
    (("--dir", "{tmp}/missing"), "--dir"),
    (("--wheel", "{tmp}/missing.whl"), "--wheel"),
    (("--dir", "{tmp}", "--out", "{tmp}/file.txt/tables"), "--out"),
    (("--dir", "{tmp}", "--gpus", "h20"), "--gpus"),
])
def test_import_kernels_bad_arguments_are_one_line_exit_2(args, field, tmp_path, capsys):
    (tmp_path / "file.txt").write_text("x")  # a file: no folder can be made under it
    argv = [a.format(tmp=tmp_path) for a in args]
    with pytest.raises(SystemExit) as exc:
        main(["bench", "import-kernels", *argv, *([] if "--out" in args else ["--out", str(tmp_path / "out")])])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and field in err and "\n" not in err


@pytest.mark.parametrize("wanted, chosen", [
    ("0.5.9", "0.5.10"),        # 1 patch from 0.5.10, 3 from 0.5.6.post2
    ("0.5.8", "0.5.6.post2"),   # (0, 5, 6, 2) lies 1.998 patches below, (0, 5, 10, 0) 2 above
    ("0.5.12", "0.5.14"),       # tie between 0.5.10 and 0.5.14: the newer
    ("0.5.6", "0.5.6.post2"),
    ("0.4.0", "0.5.6.post2"),
    ("0.6.0", "0.5.14"),
    (None, "0.5.14"),
])
def test_nearest_version_rule(wanted, chosen):
    from prfaas_plan.perf.kernels import nearest_version

    assert nearest_version(["0.5.6.post2", "0.5.10", "0.5.14"], wanted) == chosen


def _synthetic_tree(root: Path, versions: dict[str, float]) -> None:
    """One GEMM table per SGLang version, all rows at one latency (seconds) per version."""
    with np.load(kernels_dir() / "h200" / "sglang-0.5.14" / "gemm.npz") as npz:
        base = {name: npz[name] for name in npz.files}
    for version, latency_s in versions.items():
        folder = root / "h200" / f"sglang-{version}"
        folder.mkdir(parents=True)
        (folder / "provenance.yaml").write_text(f"gpu: h200\nengine_version: {version}\n")
        arrays = dict(base, **{"gemm.engine": np.array(f"sglang-{version}")})
        arrays["gemm.latency_s"] = np.full_like(base["gemm.latency_s"], latency_s)
        arrays["gemm.efficiency"] = base["gemm.efficiency"] * base["gemm.latency_s"] / latency_s
        np.savez_compressed(folder / "gemm.npz", **arrays)


def test_lookups_read_the_nearest_collected_version_tie_to_the_newer(tmp_path):
    _synthetic_tree(tmp_path, {"0.5.6.post2": 1e-3, "0.5.10": 2e-3, "0.5.14": 3e-3})
    for version, latency_s in (("0.5.9", 2e-3), ("0.5.12", 3e-3), ("0.5.7", 1e-3), (None, 3e-3)):
        t = kernel_tables(H200, "sglang", version, root=tmp_path).gemm(4096, 8192, 8192, "bf16")
        assert t.latency_s == pytest.approx(latency_s, rel=1e-6)
        assert t.source.startswith(f"table h200 sglang-{ {2e-3: '0.5.10', 3e-3: '0.5.14', 1e-3: '0.5.6.post2'}[latency_s]} ")
    with pytest.raises(InvalidInput, match="kernel_version: cannot read 'latest'"):
        kernel_tables(H200, "sglang", "latest")


def test_sglang_0_5_9_reads_0_5_10_mla_0_5_9_all_reduce_and_0_5_14_gemm_and_moe():
    kt = kernel_tables(H200, "sglang", "0.5.9")
    assert kt.mla_context(1, 4096, 16, 512, 64, 128, 128).source.startswith("table h200 sglang-0.5.10 flashinfer (module")
    assert kt.all_reduce(1 << 20, 8).source.startswith("table h200 sglang-0.5.9 ")
    assert kt.gemm(4096, 8192, 8192, "bf16").source.startswith("table h200 sglang-0.5.14 ")
    # 0.5.10's MoE table is left out (kernels_import.EP_UNPROJECTED): the nearest sound one stands in
    assert kt.moe(4096, 7168, 2048, 8, 256, 1, 8, "fp8_block").source.startswith("table h200 sglang-0.5.14 ")
    assert not (kernels_dir() / "h200" / "sglang-0.5.10" / "moe.npz").exists()
    # the newest (the sglang profile's 0.5.14) keeps the plain MLA kernel table
    assert kernel_tables(H200, "sglang").mla_context(1, 4096, 16, 512, 64, 128, 128).source.startswith(
        "table h200 sglang-0.5.14 ")


@pytest.mark.skipif(not WHEEL_DIR.is_dir(), reason="needs the unpacked aiconfigurator-core wheel")
def test_the_0_5_10_mla_module_row_is_attention_plus_its_projection_gemms():
    import pandas as pd

    data = WHEEL_DIR / "aiconfigurator_core" / "systems" / "data" / "h200_sxm" / "mla" / "sglang" / "0.5.10"
    rows = pd.read_parquet(data / "wideep_context_mla_perf.parquet")
    row = rows[(rows.kernel_source == "flashinfer") & (rows.num_heads == 32) & (rows.batch_size == 2)
               & (rows.isl == 4096)]
    kt = kernel_tables(H200, "sglang", "0.5.9")
    tokens = 2 * 4096
    # per rank at 32 heads: q_b 1536 -> 32 x 192, kv_b 512 -> 32 x 256, o 32 x 128 -> 7168 (DeepSeek-V3)
    gemms = sum(kt.gemm(tokens, n, k, "fp8_block").latency_s for n, k in ((32 * 192, 1536), (32 * 256, 512),
                                                                          (7168, 32 * 128)))
    attention = kt.mla_context(2, 4096, 32, 512, 64, 128, 128, "fp8").latency_s
    assert attention + gemms == pytest.approx(row.latency.iloc[0] * 1e-3, rel=1e-6)
    assert 0 < attention < row.latency.iloc[0] * 1e-3
    # 8 heads per rank, below the 16..128 grid: the 16-head efficiency, linear in heads
    assert kt.mla_context(2, 4096, 8, 512, 64, 128, 128, "fp8").latency_s == pytest.approx(
        kt.mla_context(2, 4096, 16, 512, 64, 128, 128, "fp8").latency_s / 2, rel=1e-9)


def _raw(family: str, engine: str, version: str, name: str, **shape):
    """The latency (s) of the one raw wheel row at ``shape`` (CUDA-graph / balanced rows as we import)."""
    import pandas as pd

    rows = pd.read_parquet(WHEEL_DIR / "aiconfigurator_core" / "systems" / "data" / "h200_sxm" / family / engine
                           / version / name)
    for column, value in shape.items():
        rows = rows[rows[column] == value]
    assert len(rows) == 1, rows
    return float(rows.latency.iloc[0]) * 1e-3


@pytest.mark.skipif(not WHEEL_DIR.is_dir(), reason="needs the unpacked aiconfigurator-core wheel")
def test_decode_path_lookups_of_the_mla_moe_models_equal_the_raw_wheel_rows():
    # Kimi-K2 (int4 W4A16 experts, 384 x top-8, TP8) on vLLM and DeepSeek-V3 (fp8 block, 256 x top-8)
    # on SGLang, 8xH200 decode at 16 tokens: the per-rank fused-MoE row of the TP8 (moe_tp 8, ep 1)
    # layout, the MLA decode row at 16 heads per rank (bf16 KV, step 1023: 1,023 cached tokens + the new one),
    # the CUDA-graph custom all-reduce of 16 x 7168 bf16 (between 65,536 and 131,072 elements)
    moe = {"hidden_size": 7168, "inter_size": 2048, "topk": 8, "moe_tp_size": 8, "moe_ep_size": 1,
           "distribution": "balanced", "num_tokens": 16}
    vllm, sglang = kernel_tables(H200, "vllm", "0.24.0"), kernel_tables(H200, "sglang", "0.5.14")
    assert vllm.moe(16, 7168, 2048, 8, 384, 8, 1, "int4_w4a16").latency_s == pytest.approx(
        _raw("moe", "vllm", "0.24.0", "moe_perf.parquet", moe_dtype="int4_wo", num_experts=384, **moe), rel=1e-6)
    assert sglang.moe(16, 7168, 2048, 8, 256, 8, 1, "fp8_block").latency_s == pytest.approx(
        _raw("moe", "sglang", "0.5.14", "moe_perf.parquet", moe_dtype="fp8_block", num_experts=256, **moe), rel=1e-6)
    mla = _raw("mla", "sglang", "0.5.14", "generation_mla_perf.parquet", kv_cache_dtype="bfloat16", num_heads=16,
               batch_size=16, step=1023)
    assert sglang.mla_generation(16, 1024, 16, 512, 64).latency_s == pytest.approx(mla, rel=1e-6)
    lo, hi = (_raw("comm", "sglang", "0.5.14", "custom_allreduce_perf.parquet", num_gpus=8, message_size=n,
                   kernel_source="SGLang_CustomAllReduce_graph") for n in (65536, 131072))
    assert lo < sglang.all_reduce(16 * 7168 * 2, 8).latency_s < hi


def test_a_kv_dtype_measured_only_at_other_head_dims_does_not_time_the_query():
    # SGLang 0.5.14's FP8-KV prefill attention on H100 was measured at head dim 512 only (256 windowed;
    # a kernel is compiled per head dim): a head_dim-128 query (Llama-3.1-70B over TP8: 8 heads, 1 KV
    # head) is timed by the bf16 rows of its own head dim, not by the nearest 512 shape of the fp8 rows
    with np.load(kernels_dir() / "h100" / "sglang-0.5.14" / "attention.npz") as npz:
        kv, hd, w = (npz[f"context_attention.{c}"] for c in ("kv_dtype", "head_dim", "windowed"))
        full = w == CODES["windowed"].index("no")
        assert set(hd[(kv == CODES["kv_dtype"].index("fp8")) & full].tolist()) == {512}
        assert {128, 512} <= set(hd[(kv == CODES["kv_dtype"].index("bf16")) & full].tolist())
    kt = kernel_tables(load_gpu("h100"), "sglang")
    fp8, bf16 = (kt.context_attention(1, 8192, 8, 1, 128, None, kv) for kv in ("fp8", "bf16"))
    assert fp8.latency_s == pytest.approx(bf16.latency_s, rel=1e-12)
    assert "kv bf16 rows stand in for fp8 (no head_dim=128 measured in it)" in fp8.source
    assert "nearest" not in fp8.source  # the measured shape itself
    at512 = {kv: kt.context_attention(1, 8192, 8, 1, 512, None, kv) for kv in ("fp8", "bf16")}
    assert "stand in for fp8" not in at512["fp8"].source  # measured at 512: the fp8 rows time it
    assert at512["fp8"].latency_s != pytest.approx(at512["bf16"].latency_s, rel=1e-3)


@pytest.mark.skipif(not WHEEL_DIR.is_dir(), reason="needs the unpacked aiconfigurator-core wheel")
def test_fp8_kv_rows_standing_in_for_bf16_keep_their_measured_time():
    # SGLang 0.5.9 reads 0.5.10's WideEP MLA module table, measured with fp8 KV only. A bf16-KV decode
    # query takes that row's measured attention time (module minus its q_b and o GEMMs), not the time
    # re-costed with twice the cache bytes: that made the attention alone 1.96x the whole module row
    kt = kernel_tables(H200, "sglang", "0.5.9")
    module_s = _raw("mla", "sglang", "0.5.10", "wideep_generation_mla_perf.parquet", kernel_source="flashinfer",
                    num_heads=16, batch_size=16, isl=1024)
    gemms_s = sum(kt.gemm(16, n, k, "fp8_block").latency_s for n, k in ((16 * 192, 1536), (7168, 16 * 128)))
    t = kt.mla_generation(16, 1024, 16, 512, 64)  # bf16 KV (the default)
    assert "kv fp8 rows stand in for bf16" in t.source
    assert t.latency_s + gemms_s == pytest.approx(module_s, rel=1e-6)


def test_import_of_a_table_with_a_missing_shape_column_is_one_line_and_writes_nothing(tmp_path):
    # a wheel folder whose GEMM table lacks its k column: exit 2, one line naming the file and
    # the column, no tables folder left behind
    import subprocess
    import sys

    import pandas as pd

    folder = tmp_path / "aiconfigurator_core" / "systems" / "data" / "h200_sxm" / "gemm" / "sglang" / "0.5.14"
    folder.mkdir(parents=True)
    (folder / "collection_meta.yaml").write_text("schema_version: 1\nruntime: {framework: sglang, version: 0.5.14}\n")
    pd.DataFrame({"framework": ["SGLang"], "version": ["0.5.14"], "device": ["NVIDIA H200"], "op_name": ["gemm"],
                  "kernel_source": ["sglang_torch_linear"], "gemm_dtype": ["bfloat16"], "m": [4096], "n": [4096],
                  "latency": [0.2]}).to_parquet(folder / "gemm_perf.parquet")
    out = tmp_path / "tables"
    r = subprocess.run([sys.executable, "-m", "prfaas_plan.cli", "bench", "import-kernels", "--dir",
                        str(tmp_path / "aiconfigurator_core"), "--gpus", "h200", "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "gemm_perf.parquet" in lines[0] and "missing column ['k']" in lines[0]
    assert not out.exists() or not any(out.rglob("*.npz"))


def test_the_importer_takes_the_preferred_moe_kernel_measured_at_each_shape(tmp_path):
    # B200's SGLang collection timed DeepSeek's experts (7168 x 2048, 256 of them) with the FlashInfer
    # TRT-LLM kernel only: that shape keeps it; a shape timed with both keeps the Triton one SGLang
    # prefers; before, the Triton rows of other models' shapes stood in for DeepSeek (nearest shape)
    import pandas as pd

    base = tmp_path / "aiconfigurator_core" / "systems" / "data" / "b200_sxm" / "moe" / "sglang" / "0.5.14"
    base.mkdir(parents=True)
    rows = [dict(framework="SGLang", version="0.5.14", device="b200", op_name="moe", kernel_source=kernel,
                 moe_dtype="fp8_block", num_tokens=64, hidden_size=hidden, inter_size=2048, topk=8, num_experts=256,
                 moe_tp_size=8, moe_ep_size=1, distribution="balanced", latency=ms)
            for kernel, hidden, ms in (("sglang_fused_moe_triton", 4096, 0.30), ("sglang_flashinfer_trtllm_moe", 4096, 0.20),
                                       ("sglang_flashinfer_trtllm_moe", 7168, 0.16))]
    pd.DataFrame(rows).to_parquet(base / "moe_perf.parquet")
    out = tmp_path / "out"
    kernels_import.import_kernels(["b200"], out, folder=tmp_path, echo=lambda line: None)
    kt = kernel_tables(load_gpu("b200"), "sglang", root=out)
    deepseek = kt.moe(64, 7168, 2048, 8, 256, 8, 1, "fp8_block")
    assert "sglang_flashinfer_trtllm_moe" in deepseek.source and "nearest" not in deepseek.source
    assert deepseek.latency_s == pytest.approx(0.16e-3, rel=1e-6)
    other = kt.moe(64, 4096, 2048, 8, 256, 8, 1, "fp8_block")
    assert "sglang_fused_moe_triton" in other.source and other.latency_s == pytest.approx(0.30e-3, rel=1e-6)
    assert kernels_import.MOE_SHAPE == ("hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
                                        "moe_ep_size")


@pytest.mark.parametrize("gpu, head_dim, kernel", [("h200", 256, "fa3"), ("b200", 256, "trtllm_mha"),
                                                   ("b200", 128, "trtllm_mha"), ("l40s", 128, "flashinfer")])
def test_attention_is_timed_by_the_kernel_sglang_runs_by_default_on_each_gpu(gpu, head_dim, kernel):
    """SGLang's _get_default_attn_backend for MHA models: FA3 on Hopper, TRT-LLM's kernels on SM100
    (B200's collection also times FlashInfer at head dim 128 and Triton at 256), FlashInfer elsewhere:
    the imported tables keep that kernel's rows (kernels_import.KERNEL_PREFERENCE)."""
    tables = kernel_tables(load_gpu(gpu), "sglang")
    got = tables.generation_attention(8, 32768, 8, 1, head_dim, None, "bf16")
    assert kernel in got.source.split(";")[0].split(), got.source


def test_vllms_marlin_switch_imports_marlins_mxfp4_rows_beside_the_default(tmp_path):
    # VLLM_MXFP4_USE_MARLIN=1 (InferenceX's H100/H200 gpt-oss scripts): MXFP4 experts run Marlin's kernel, which the
    # wheel times at another model's shape only; the default lookup keeps the triton_kernels rows of gpt-oss's shape
    import pandas as pd

    base = tmp_path / "aiconfigurator_core" / "systems" / "data" / "h200_sxm" / "moe" / "vllm" / "0.24.0"
    base.mkdir(parents=True)
    oss, other = (2880, 2880, 4, 128), (3584, 3072, 16, 896)
    triton, marlin = "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic", "vllm_x_marlin_marlinexperts"
    rows = [dict(framework="VLLM", version="0.24.0", device="h200", op_name="moe", kernel_source=kernel,
                 moe_dtype=dtype, num_tokens=n, hidden_size=shape[0], inter_size=shape[1], topk=shape[2],
                 num_experts=shape[3], moe_tp_size=1, moe_ep_size=1, distribution="balanced", latency=ms * n / 8)
            for kernel, dtype, shape, ms in ((triton, "w4a16_mxfp4", oss, 0.2), (marlin, "w4a16_mxfp4", other, 0.3),
                                             ("vllm_unquantizedfusedmoe_triton_tritonexperts", "bfloat16", oss, 0.5))
            for n in (8, 64)]
    pd.DataFrame(rows).to_parquet(base / "moe_perf.parquet")
    out = tmp_path / "out"
    kernels_import.import_kernels(["h200"], out, folder=tmp_path, echo=lambda line: None)
    default, switched = (kernel_tables(H200, "vllm", root=out, mxfp4_moe_kernel=k) for k in ("default", "marlin"))
    t = default.moe(64, *oss, 1, 1, "mxfp4_w4a16")
    assert t.latency_s == pytest.approx(1.6e-3, rel=1e-6) and triton in t.source
    # Marlin at gpt-oss's shape: the other shape's measured efficiency (its nearest) on gpt-oss's own roofline
    eff = K.roofline_s(H200, *K.moe_cost(64, *other, 1, 1, "mxfp4_w4a16")) / 2.4e-3
    t = switched.moe(64, *oss, 1, 1, "mxfp4_w4a16")
    assert t.latency_s == pytest.approx(K.roofline_s(H200, *K.moe_cost(64, *oss, 1, 1, "mxfp4_w4a16")) / eff, rel=1e-6)
    assert marlin in t.source and "nearest hidden=3584" in t.source
    assert switched.moe(64, *other, 1, 1, "mxfp4_w4a16").latency_s == pytest.approx(2.4e-3, rel=1e-6)
    # the switch is MXFP4's: bf16 experts read the default's rows; SGLang's tables get no switched rows
    assert switched.moe(64, *oss, 1, 1, "bf16").latency_s == default.moe(64, *oss, 1, 1, "bf16").latency_s
    assert kernels_import.SWITCHED_MOE_KERNELS == {("vllm", "mxfp4_w4a16"): "marlin"}
    assert set(kernels_import.reduce_moe("sglang", pd.DataFrame(rows))["moe"]["moe_kernel"]) == {"default"}
    with np.load(out / "h200" / "vllm-0.24.0" / "moe.npz") as npz:
        assert sorted(zip(npz["moe.moe_kernel"].tolist(), npz["moe.experts"].tolist())) == \
            [(0, 128)] * 4 + [(0, 896)] * 2 + [(1, 896)] * 2


def test_marlin_mxfp4_experts_on_h200_trade_prefill_speed_for_decode_speed():
    # the committed vLLM tables: Marlin's weight-only kernel (0.24.0, 896 experts of 3,584 x 3,072) against the
    # triton_kernels experts vLLM 0.18 reads by default (0.19.0) at gpt-oss-120b's shape, one GPU
    marlin, default = (kernel_tables(H200, "vllm", "0.18.0", mxfp4_moe_kernel=k) for k in ("marlin", "default"))
    shape = (2880, 2880, 4, 128, 1, 1, "mxfp4_w4a16")
    m = marlin.moe(16384, *shape)
    assert m.source.startswith("table h200 vllm-0.24.0 vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts")
    with np.load(kernels_dir() / "h200" / "vllm-0.24.0" / "moe.npz") as npz:
        rows = {c: npz[f"moe.{c}"] for c in ("moe_kernel", "dtype", "routing", "experts", "moe_tp", "tokens",
                                             "efficiency")}
    at = ((rows["moe_kernel"] == CODES["moe_kernel"].index("marlin")) & (rows["experts"] == 896)
          & (rows["moe_tp"] == 1) & (rows["tokens"] == 16384) & (rows["routing"] == 0))
    roofline = K.roofline_s(H200, *K.moe_cost(16384, *shape))
    assert m.latency_s == pytest.approx(roofline / float(rows["efficiency"][at][0]), rel=1e-6)
    d = default.moe(16384, *shape)
    assert d.source == "table h200 vllm-0.19.0 vllm_mxfp4_moe"
    assert m.latency_s > 2 * d.latency_s  # prefill: Marlin 2.2x slower at 16K tokens
    assert marlin.moe(8, *shape).latency_s < 0.8 * default.moe(8, *shape).latency_s  # decode: 0.74x at 8 tokens


def test_an_instance_on_marlin_says_so_and_decodes_gpt_oss_on_it():
    from prfaas_plan.engine import load_engine
    from prfaas_plan.hardware import instance
    from prfaas_plan.model import load_model
    from prfaas_plan.perf.latency import decode_step_s, latency_source

    vllm = load_engine("vllm")
    marlin = vllm.model_copy(update={"mxfp4_moe_kernel": "marlin"})
    on = {e.mxfp4_moe_kernel: instance("h200", 1, engine=e) for e in (vllm, marlin)}
    assert latency_source(on["marlin"]).endswith("kernels, MXFP4 experts on Marlin, engine profile vllm")
    assert "Marlin" not in latency_source(on["default"])
    model = load_model("gpt-oss-120b")
    assert decode_step_s(model, on["marlin"], 8, 2048) < decode_step_s(model, on["default"], 8, 2048)


def test_a_kv_dtype_a_table_lacks_is_timed_as_the_measured_one_and_says_so():
    """A100's decode-attention table holds bf16-KV rows only: an fp8-KV query reads them, costed as
    they were measured (the same latency as the bf16 query), and its source says which rows stood in."""
    a100 = kernel_tables(load_gpu("a100-80g"), "sglang")
    fp8 = a100.generation_attention(8, 4096, 32, 8, 128, None, "fp8")
    bf16 = a100.generation_attention(8, 4096, 32, 8, 128, None, "bf16")
    assert fp8.latency_s == bf16.latency_s
    assert fp8.source.endswith("; kv bf16 rows stand in for fp8")
    assert "stand in" not in bf16.source


def test_only_engine_version_folders_with_provenance_hold_tables(tmp_path):
    """``<gpu>/<engine>-<version>/provenance.yaml`` marks a table folder; a folder of an unknown
    engine, one without a version and one without provenance are not read."""
    src = kernels_dir() / "h200" / "sglang-0.5.14" / "gemm.npz"
    for folder, provenance in (("h200/sglang-0.5.14", True), ("h200/notes", True), ("b200/tensorrt-1.0", True),
                               ("l40s/sglang-0.5.14", False)):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "gemm.npz").write_bytes(src.read_bytes())
        if provenance:
            (tmp_path / folder / "provenance.yaml").write_text("gpu: h200\n")
    assert K.measured_gpus(tmp_path) == ("h200",)
    assert K.engine_versions("h200", "sglang", tmp_path) == {"0.5.14": str(tmp_path / "h200" / "sglang-0.5.14")}


@pytest.mark.parametrize("family", ["gemm", "moe"])
def test_a_table_file_holding_a_table_of_another_family_is_one_line_of_bad_input(tmp_path, family):
    """``gemm.npz`` must hold the gemm table only: an unknown table, or the gemm table filed as
    ``moe.npz``, is refused naming the file, not read as something else."""
    folder = tmp_path / "h200" / "sglang-0.5.14"
    folder.mkdir(parents=True)
    with np.load(kernels_dir() / "h200" / "sglang-0.5.14" / "gemm.npz") as npz:
        arrays = {(name.replace("gemm.", "gemv.") if family == "gemm" else name): npz[name] for name in npz.files}
    np.savez_compressed(folder / f"{family}.npz", **arrays)
    table = "gemv" if family == "gemm" else "gemm"
    with pytest.raises(InvalidInput, match=rf"{family}\.npz: unknown kernel table '{table}'") as exc:
        K.load_family(str(folder), family)
    assert "\n" not in str(exc.value)


def test_linear_attention_costs_are_the_chunked_and_recurrent_closed_forms():
    """GDN at 4 sequences, 32 heads of dk = dv = 128: a decode step reads and writes the fp32
    state (4 x 32 x 128 x 128 x 4 B, twice) and does 4 dk dv FLOPs a head; a 1,000-token context
    adds 2 x 64 x (dk + dv) a token a head for the chunks (C = 64) and bf16 q, k, v, o a token."""
    state = 4 * 32 * 128 * 128 * 4 * 2
    flops, moved, dtype = K.linear_attention_cost("generation", 4, 1, 32, 128, 128)
    assert (float(flops), float(moved), dtype) == (4 * 32 * 4 * 128 * 128, state + 4 * 32 * 512 * 2, "bf16")
    flops, moved, _ = K.linear_attention_cost("context", 4, 1000, 32, 128, 128)
    assert float(flops) == 4 * 1000 * 32 * (4 * 128 * 128 + 2 * 64 * 256)
    assert float(moved) == state + 4 * 1000 * 32 * 512 * 2


def test_an_all_reduce_without_a_table_is_the_ring_over_the_scale_up_link(tmp_path):
    """Tables without the comm family (a GEMM table only, no other GPU to borrow from): an
    all-reduce of 1 MiB over 8 GPUs sends 2 x 7/8 of it over each GPU's NVLink (H200: 450 GB/s a
    direction) at the fallback's memory efficiency, and says it is the roofline."""
    folder = tmp_path / "h200" / "sglang-0.5.14"
    folder.mkdir(parents=True)
    (folder / "provenance.yaml").write_text("gpu: h200\n")
    (folder / "gemm.npz").write_bytes((kernels_dir() / "h200" / "sglang-0.5.14" / "gemm.npz").read_bytes())
    t = kernel_tables(H200, "sglang", root=tmp_path).all_reduce(2**20, 8)
    assert H200.scaleup_bytes_per_s == 450e9
    assert t.latency_s == pytest.approx(2 * 7 / 8 * 2**20 / (450e9 * K.FALLBACK_MEMORY_EFFICIENCY), rel=1e-12)
    assert t.source.startswith("roofline of h200 (no table for all_reduce;")


def test_one_expert_rank_exchanges_nothing(h200):
    """EP 1: every expert is local, so dispatch + combine move no bytes and take no time (an array
    of tokens keeps its shape); at EP 8 the table's DeepEP time is positive."""
    one = h200.all_to_all(np.array([128.0, 4096.0]), 7168, 8, 256, 1, "context")
    assert one.latency_s.tolist() == [0.0, 0.0] and one.source == "ep 1: no all-to-all"
    assert h200.all_to_all(4096, 7168, 8, 256, 8, "context").latency_s > 0
    alone = h200.all_reduce(np.array([1024.0, 2**20]), 1)  # and one GPU reduces with nobody
    assert alone.latency_s.tolist() == [0.0, 0.0] and alone.source == "one GPU: no all-reduce"


def test_a_tables_folder_with_no_gpu_in_it_is_one_line_of_bad_input(tmp_path):
    with pytest.raises(InvalidInput, match=r"^kernel tables: none in .*; run prfaas-plan bench import-kernels$"):
        kernel_tables(H200, "sglang", root=tmp_path)


def test_two_token_axes_at_once_interpolate_as_each_point_alone(h200):
    """Decode attention over arrays of batch sizes and contexts together (multilinear in log space
    over both axes) gives, point by point, what each (batch, context) asked alone gives (the
    scalar path collapses one axis after the other), grid points and points between them alike."""
    batch = np.array([1.0, 3.0, 16.0, 48.0, 200.0])
    context = np.array([100.0, 2048.0, 5000.0, 16384.0, 70000.0])
    both = h200.generation_attention(batch, context, 32, 8, 128, None, "bf16").latency_s
    alone = [h200.generation_attention(float(b), float(c), 32, 8, 128, None, "bf16").latency_s
             for b, c in zip(batch, context)]
    assert both == pytest.approx(alone, rel=1e-12)


def test_an_axis_measured_at_one_value_is_constant_along_it_beside_an_interpolated_axis():
    """A shape measured at one context only (axis of one grid value) but queried at many contexts,
    together with a batch axis of three values: the multilinear path holds the one-value axis
    constant (clamped) and interpolates the other in log space, which is what each point alone gives
    through the scalar path, and by hand: log eff at batch 2 is halfway between batch 1's and 4's."""
    grid = K._Grid(axes=(np.log([1.0, 4.0, 16.0]), np.log([2048.0])),
                   log_eff=np.log([[0.1], [0.2], [0.4]]), kernel="k", engine="e")
    batch, context = np.array([2.0, 4.0, 8.0, 16.0]), np.array([100.0, 2048.0, 5000.0, 70000.0])
    both, over, below = K._interpolate(grid, [batch, context])
    alone = [float(K._interpolate(grid, [np.array(b), np.array(c)])[0]) for b, c in zip(batch, context)]
    assert np.exp(both) == pytest.approx([np.sqrt(0.1 * 0.2), 0.2, np.sqrt(0.2 * 0.4), 0.4], rel=1e-12)
    assert both == pytest.approx(alone, rel=1e-12)
    assert over == [False, True] and below  # 70,000 lies beyond the one context, 100 below it
