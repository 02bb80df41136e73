"""The kernel-transfer method (perf.transfer): its closed forms, its bad input, and its proof on the
committed kernel tables (leave one GPU out from H200; H20 against the public H20 kernel points).

The proof runs ``benchmarks/bench_kernel_transfer.py``'s functions on the committed tables
(prfaas_plan/data/hardware_db/kernels), so the figures asserted here are the ones it prints.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from prfaas_plan.errors import InvalidInput
from prfaas_plan.hardware import load_gpu
from prfaas_plan.perf import transfer as tr

ROOT = Path(__file__).resolve().parents[1]
H200, H100, H20, A100, L40S = (load_gpu(g) for g in ("h200", "h100", "h20", "a100-80g", "l40s"))
FLOOR_S = 2.4e-6


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_kernel_transfer", ROOT / "benchmarks" / "bench_kernel_transfer.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_sm_counts_and_clocks_are_the_datasheet_values():
    assert [g.sm_count for g in (H200, H100, H20, A100, L40S, load_gpu("b200"))] == [132, 132, 78, 108, 142, 148]
    assert [g.arch for g in (H200, H20, A100, L40S)] == ["hopper", "hopper", "ampere", "ada"]
    assert (H200.boost_clock_ghz, A100.boost_clock_ghz, L40S.boost_clock_ghz) == (1.98, 1.41, 2.52)


def test_same_gpu_returns_the_measurement():
    t = np.array([3e-6, 40e-6, 2e-3])
    out = tr.transfer_latency_s("gemm", t, [1e9, 1e12, 1e15], [1e6, 1e9, 1e10], H200, H200, "bf16", [1, 200, 5000],
                                floor_s=FLOOR_S)
    np.testing.assert_allclose(out, t)


def test_a_kernel_at_the_memory_roofline_scales_with_hbm_bandwidth():
    moved = 1e9  # bytes; no FLOPs: the kernel streams at the H200's full 4.8 TB/s above the floor
    t_src = FLOOR_S + moved / H200.memory_bytes_per_s
    out = tr.transfer_latency_s("gemm", t_src, 0.0, moved, H200, H20, "bf16", floor_s=FLOOR_S)
    assert out == pytest.approx(FLOOR_S + moved / 4.0e12)


def test_a_kernel_at_the_compute_roofline_pays_the_dtype_peak_and_the_wave_tail():
    tiles = 132.0  # one full wave on H200's 132 SMs; two waves on H20's 78 (utilisation 132/156)
    flops = 1e12
    t_src = FLOOR_S + flops / 1978.9e12
    out = tr.transfer_latency_s("gemm", t_src, flops, 1.0, H200, H20, "fp8", tiles, floor_s=FLOOR_S)
    assert out == pytest.approx(FLOOR_S + flops / (296e12 * 132 / 156))
    assert tr.wave_utilisation(132, H20) == pytest.approx(132 / 156)


def test_latency_bound_work_scales_with_waves_and_the_clock():
    # far below both roofs: busy ~ 0, so only the waves (2 -> 2 on A100's 108 SMs) and 1.98/1.41 GHz
    out = tr.transfer_latency_s("gemm", FLOOR_S + 1e-3, 1.0, 1.0, H200, A100, "bf16", 200.0, floor_s=FLOOR_S)
    assert out == pytest.approx(FLOOR_S + 1e-3 * 1.98 / 1.41, rel=1e-6)
    out = tr.transfer_latency_s("gemm", FLOOR_S + 1e-3, 1.0, 1.0, H200, H20, "bf16", 200.0, floor_s=FLOOR_S)
    assert out == pytest.approx(FLOOR_S + 1e-3 * 3 / 2, rel=1e-6)  # 2 waves on 132 SMs, 3 on 78; H20 clock unpublished


def test_communication_scales_with_the_scale_up_link_above_its_floor():
    out = tr.transfer_latency_s("comm", [10e-6, 1e-3], 0.0, 0.0, H200, L40S, "bf16", floor_s=10e-6)
    np.testing.assert_allclose(out, [10e-6, 10e-6 + (1e-3 - 10e-6) * 450 / 32])


def test_int4_w4a16_computes_at_the_bf16_peak():
    assert tr.peak_flops_per_s(H20, "int4_w4a16") == tr.peak_flops_per_s(H20, "bf16") == 148e12
    assert tr.peak_flops_per_s(H20, "fp8_block") == 296e12


@pytest.mark.parametrize(("call", "names"), [
    (lambda: tr.transfer_latency_s("gemm", 1e-5, 1e9, 1e6, H200, A100, "fp8"), ("dtype", "fp8", "a100-80g")),
    (lambda: tr.transfer_latency_s("gemm", 1e-5, 1e9, 1e6, H200, H20, "int8"), ("dtype", "int8")),
    (lambda: tr.transfer_latency_s("gemms", 1e-5, 1e9, 1e6, H200, H20, "bf16"), ("family", "gemm")),
    (lambda: tr.transfer_latency_s("gemm", [1e-5, 0.0], 1e9, 1e6, H200, H20, "bf16"), ("src_latency_s",)),
    (lambda: tr.transfer_latency_s("gemm", 1e-5, 1e9, 1e6, H200, load_gpu("mi300x"), "bf16", 10), ("sm_count",)),
    (lambda: tr.nearest_measured(H20, []), ("measured_ids",)),
])
def test_bad_input_is_one_line_naming_the_field(call, names):
    with pytest.raises(InvalidInput) as err:
        call()
    assert "\n" not in str(err.value) and all(n in str(err.value) for n in names)


def test_nearest_measured_takes_the_architecture_then_the_closest_specs():
    measured = ["a100-80g", "b200", "h100", "h200", "l40s"]
    assert tr.nearest_measured(H200, measured) == "h200"
    # both Hopper with H20's 989 -> 148 peak and 132 -> 78 SMs; HBM 3.35 TB/s is a hair closer to 4.0 than 4.8
    assert abs(np.log(4.0 / 3.35)) < abs(np.log(4.8 / 4.0))
    assert tr.nearest_measured(H20, measured) == "h100"
    assert tr.nearest_measured(H20, ["a100-80g", "h200"]) == "h200"
    assert tr.nearest_measured(load_gpu("mi300x"), measured) == "h200"  # no CDNA 3 tables: closest specs


def _medians(bench, dst: str, tables: tuple[str, ...]) -> dict[str, tuple[float, float]]:
    loo = bench.leave_one_out("h200", [dst], tables)
    rows = loo[loo["codes"] == "all"].set_index("table")
    return {t: (rows.loc[t, "median_err"], rows.loc[t, "copy_median_err"]) for t in rows.index}


def test_h100_is_predicted_from_h200_within_ten_percent_per_family(bench):
    """Same Hopper die, same kernels, 3.35 vs 4.8 TB/s: every family's median error <= 10%."""
    med = _medians(bench, "h100", bench.LEAVE_OUT_TABLES)
    assert set(med) == set(bench.LEAVE_OUT_TABLES)
    assert all(m <= 0.10 for m, _ in med.values()), med
    assert med["gemm"][0] < med["gemm"][1] and med["moe"][0] < med["moe"][1]  # beats copying H200's latency


def test_a100_is_predicted_from_h200_as_reported(bench):
    """Across architectures (Ampere, FA2, 1.41 GHz, 2.0 TB/s): GEMM, MoE and prefill attention
    within the 20% target; decode attention and all-reduce miss it (33%, 29%): A100's FA2 decode
    and custom all-reduce reach a smaller fraction of its peaks than Hopper's kernels do of theirs."""
    med = _medians(bench, "a100-80g", ("gemm", "moe", "context_attention", "generation_attention", "all_reduce"))
    assert max(med["gemm"][0], med["moe"][0], med["context_attention"][0]) <= 0.20, med
    assert med["generation_attention"][0] <= 0.35 and med["all_reduce"][0] <= 0.30, med
    assert all(m < copy for m, copy in med.values()), med  # always better than copying H200's latency


def test_l40s_is_predicted_from_h200_as_reported(bench):
    """Ada, GDDR6, FlashInfer, 350 W: the target is missed (medians 33-52%); still better than
    copying H200's latency for GEMM, MoE and attention."""
    med = _medians(bench, "l40s", ("gemm", "moe", "context_attention", "generation_attention"))
    assert all(0.25 <= m <= 0.55 for m, _ in med.values()), med
    assert all(m < copy for m, copy in med.values()), med


H20_TOLERANCE = {"#3": 0.15, "#4": 0.15, "#5": 0.10, "#6": 0.40, "#7": 0.05, "#19": 0.10, "#9": 0.25}
"""|predicted/measured - 1| allowed per MEASUREMENTS.md point, as the method gets it (not tuned):
#6 is a masked grouped GEMM costed as the dense DeepGEMM GEMM of the same FLOPs and bytes (its
masking and random m per group are not in the table); #9 counts bytes as perf.kernels does,
DeepEP's test counts each token once per destination rank."""


def test_h20_matches_every_public_h20_kernel_point(bench):
    points = bench.h20_points("h200")
    assert {p.ref for p in points} == set(H20_TOLERANCE)
    for p in points:
        assert abs(p.predicted / p.measured - 1) <= H20_TOLERANCE[p.ref], p


def test_h20_points_from_a_gpu_without_some_tables_are_nan(bench):
    # A100 has no FP8 tensor cores (no fp8 GEMM table), no MLA nor all-to-all table: those points are
    # NaN, not an error, and the bf16 GEMM points are still predicted from its own rows
    points = {p.what: p.predicted for p in bench.h20_points("a100-80g")}
    missing = {w for w, v in points.items() if math.isnan(v)}
    assert missing == {"MLA decode b=128 ctx=8192 128 q-heads", "DeepGEMM fp8 2 groups x m=32 n=4096 k=7168",
                       "DeepEP normal dispatch+combine EP8 4096 tok"}
    assert 0 < points["bf16 GEMM 8192^3"] < H20.bf16_dense_tflops  # TFLOP/s, under the H20's dense bf16 peak
