"""The shipped hardware_db: every entry loads, key datasheet values are pinned, bad input fails loudly."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from prfaas_plan.data import builtin_dir
from prfaas_plan.errors import PlanError
from prfaas_plan.hardware import GPU, Instance, instance, list_gpus, load_gpu

HW_DIR = builtin_dir("prfaas_plan.data.hardware_db")
GPU_IDS = sorted(p.stem for p in HW_DIR.glob("*.yaml"))

# Fields that are identity/bookkeeping rather than sourced values.
_UNSOURCED_FIELDS = {"id", "name", "efficiency", "sources", "notes"}


def _raw(gpu_id: str) -> dict:
    return yaml.safe_load((HW_DIR / f"{gpu_id}.yaml").read_text())


def _write(tmp_path: Path, data: dict, name: str = "custom.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_expected_entries_are_shipped():
    assert {"h200", "h20", "h100", "b200", "a100-80g", "l40s", "mi300x"} <= set(GPU_IDS)


@pytest.mark.parametrize("gpu_id", GPU_IDS)
def test_every_entry_loads_by_id(gpu_id):
    gpu = load_gpu(gpu_id)
    assert isinstance(gpu, GPU)
    assert gpu.id == gpu_id, "the id field must match the file name"
    assert gpu.sources, "every entry needs at least one source"


@pytest.mark.parametrize("gpu_id", GPU_IDS)
def test_every_value_is_covered_by_a_source(gpu_id):
    raw = _raw(gpu_id)
    gpu = load_gpu(gpu_id)
    covered = {field for src in gpu.sources for field in src.covers}
    valued = {k for k, v in raw.items() if k not in _UNSOURCED_FIELDS and v is not None}
    assert not (valued - covered), f"{gpu_id}: fields without a source URL: {sorted(valued - covered)}"
    unknown = covered - set(GPU.model_fields)
    assert not unknown, f"{gpu_id}: sources cover fields that do not exist: {sorted(unknown)}"


def test_list_gpus_matches_files():
    assert [g.id for g in list_gpus()] == GPU_IDS


def test_only_blackwell_states_an_fp4_peak():
    # HGX B200 at 1,000 W: dense FP4 9,000 TFLOP/s, twice its FP8 (glennklockwood.com/garden/processors/B200)
    b200 = load_gpu("b200")
    assert b200.fp4_dense_tflops == 9000 == 2 * b200.fp8_dense_tflops
    assert [g.id for g in list_gpus() if g.fp4_dense_tflops is not None] == ["b200"]


def test_h20_datasheet_values_are_pinned():
    h20 = load_gpu("h20")
    assert h20.bf16_dense_tflops == 148
    assert h20.fp8_dense_tflops == 296
    assert h20.memory_gib == 96
    assert h20.memory_tb_per_s == 4.0
    assert h20.scaleup_gb_per_s == 450  # 900 GB/s NVLink bidirectional
    assert h20.tdp_w == 400
    assert h20.peak_flops == pytest.approx(148e12)
    assert h20.memory_bytes == 96 * 2**30  # marketed "96 GB" is GiB (nvidia-smi: 97,871 MiB)
    assert h20.memory_bytes_per_s == pytest.approx(4.0e12)


def test_h200_datasheet_values_are_pinned():
    h200 = load_gpu("h200")
    assert h200.bf16_dense_tflops == 989.4
    assert h200.memory_gib == 141
    assert h200.memory_tb_per_s == 4.8
    assert h200.peak_flops == pytest.approx(989.4e12)


def test_h20_is_compute_poor_but_bandwidth_rich_relative_to_h200():
    h20, h200 = load_gpu("h20"), load_gpu("h200")
    assert h20.peak_flops < h200.peak_flops / 6
    assert h20.memory_bytes_per_s / h200.memory_bytes_per_s == pytest.approx(4.0 / 4.8)


def test_instance_of_eight_h20_has_eight_times_the_peak():
    inst = instance("h20", gpus=8)
    one = load_gpu("h20")
    assert isinstance(inst, Instance)
    assert inst.gpus == 8
    assert inst.name == "8xh20"
    assert inst.peak_flops == pytest.approx(8 * one.peak_flops)
    assert inst.peak_flops == pytest.approx(8 * 148e12)
    assert inst.memory_bytes == 8 * 96 * 2**30
    assert inst.memory_bytes_per_s == pytest.approx(8 * 4.0e12)
    assert inst.price_usd_per_hour == pytest.approx(8 * one.price_usd_per_gpu_hour)


@pytest.mark.parametrize("typo", ["h2OO", "H200x", "h20O"])
def test_unknown_id_suggests_a_close_match(typo):
    with pytest.raises(PlanError) as exc:
        load_gpu(typo)
    msg = str(exc.value)
    assert "did you mean" in msg
    assert typo in msg


def test_unknown_id_lists_known_entries():
    with pytest.raises(PlanError, match="known: .*h20"):
        load_gpu("tpu-v9")


def test_negative_memory_is_rejected_naming_the_field(tmp_path):
    data = _raw("h20")
    data["memory_gib"] = -96
    with pytest.raises(PlanError) as exc:
        load_gpu(_write(tmp_path, data))
    assert "memory_gib" in str(exc.value)


def test_unknown_field_is_rejected_naming_the_field(tmp_path):
    data = _raw("h20")
    data["memory_gb"] = 96  # a plausible slip for memory_gib
    with pytest.raises(PlanError) as exc:
        load_gpu(_write(tmp_path, data))
    msg = str(exc.value)
    assert "memory_gb" in msg
    assert "unknown field" in msg


def test_unknown_efficiency_field_is_rejected_naming_the_path(tmp_path):
    data = _raw("h20")
    data["efficiency"]["gemm_eff"] = 0.5
    with pytest.raises(PlanError, match=r"efficiency\.gemm_eff"):
        load_gpu(_write(tmp_path, data))


def test_efficiency_above_one_is_rejected(tmp_path):
    data = _raw("h20")
    data["efficiency"]["gemm"] = 1.14  # e.g. an FP8-run efficiency expressed against the BF16 peak
    with pytest.raises(PlanError, match=r"efficiency\.gemm"):
        load_gpu(_write(tmp_path, data))


def test_yaml_path_loads_and_instance_accepts_a_path(tmp_path):
    path = _write(tmp_path, _raw("h20"), "my-h20.yaml")
    assert load_gpu(path).id == "h20"
    assert instance(path, gpus=2).peak_flops == pytest.approx(2 * 148e12)


@pytest.mark.parametrize("gpus", [0, -1])
def test_instance_needs_at_least_one_gpu(gpus):
    with pytest.raises(PlanError, match="gpus"):
        instance("h20", gpus=gpus)


def test_a_gemms_peak_is_its_dtypes_and_fp32_needs_a_stated_peak():
    """B200's datasheet: FP4 9,000, FP8 4,500 dense TFLOP/s; a GPU entry without an FP32 peak refuses an
    fp32 GEMM (a model's router_dtype) naming the field, rather than pricing it at another peak."""
    b200 = load_gpu("b200")
    assert b200.gemm_peak_flops("nvfp4") == 9000e12 and b200.gemm_peak_flops("fp8_block") == b200.fp8_dense_tflops * 1e12
    no_fp32 = b200.model_copy(update={"fp32_tflops": None})
    with pytest.raises(PlanError, match=r"^hardware\.fp32_tflops: b200 states no FP32 peak"):
        no_fp32.gemm_peak_flops("fp32")


def test_an_instance_of_too_many_gpus_or_of_another_layouts_count_is_one_line():
    from prfaas_plan.layout import Layout

    with pytest.raises(PlanError, match=r"^gpus: 2,048 GPUs per instance is more than 1,024"):
        Instance(load_gpu("h200"), 2048)
    with pytest.raises(PlanError, match=r"^layout\.gpus: the layout spans 4 GPUs but the instance has 8"):
        Instance(load_gpu("h200"), 8, Layout(4))
