"""MoE routing as a calibration input: the importer keeps each routing, lookups read their own rows.

Independent numbers: a synthetic wheel folder's own latencies (the importer), the raw parquet of
the aiconfigurator-core wheel where this machine has it unpacked (/tmp/acc/w; elsewhere the
committed npz rows, read here with numpy, are the record), and the kernel model's own op
breakdown (a routing changes the fused-MoE op and nothing else).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from prfaas_plan.bench import kernels_import
from prfaas_plan.cli import main
from prfaas_plan.data import builtin_dir
from prfaas_plan.errors import InvalidInput
from prfaas_plan.hardware import instance, load_gpu
from prfaas_plan.model import load_model
from prfaas_plan.model.arch import load_model_yaml
from prfaas_plan.perf.kernels import CODES, kernel_tables, kernels_dir
from prfaas_plan.perf.latency import decode_step
from prfaas_plan.perf.ops import MoE, forward_ops
from prfaas_plan.scenario import load_scenario

WHEEL_DATA = Path("/tmp/acc/w/aiconfigurator_core/systems/data/h200_sxm/moe")
H200 = load_gpu("h200")
DSV3 = {"hidden": 7168, "inter": 2048, "topk": 8, "experts": 256, "moe_tp": 8, "moe_ep": 1}  # 8-GPU TP
ROUTINGS = ("balanced", "power_law_1.01")


def _shape_args(tokens: int) -> tuple:
    return (tokens, *DSV3.values(), "fp8_block")


def _record_s(engine: str, version: str, routing: str, tokens: int) -> float:
    """The measured latency (s) of DeepSeek-V3's fp8-block MoE at ``tokens``: the wheel's parquet
    row when the wheel is here, else the committed npz row."""
    if WHEEL_DATA.is_dir():
        import pandas as pd

        df = pd.read_parquet(WHEEL_DATA / engine / version / "moe_perf.parquet")
        names = {"hidden": "hidden_size", "inter": "inter_size", "topk": "topk", "experts": "num_experts",
                 "moe_tp": "moe_tp_size", "moe_ep": "moe_ep_size"}
        rows = df[(df["distribution"] == routing) & (df["moe_dtype"] == "fp8_block") & (df["num_tokens"] == tokens)]
        for ours, theirs in names.items():
            rows = rows[rows[theirs] == DSV3[ours]]
        assert len(rows) == 1, rows
        return float(rows["latency"].iloc[0]) * 1e-3
    with np.load(kernels_dir() / "h200" / f"{engine}-{version}" / "moe.npz") as npz:
        mask = (npz["moe.routing"] == CODES["routing"].index(routing)) & (npz["moe.tokens"] == tokens) \
            & (npz["moe.dtype"] == CODES["dtype"].index("fp8_block"))
        for column, value in DSV3.items():
            mask &= npz[f"moe.{column}"] == value
        assert mask.sum() == 1
        return float(npz["moe.latency_s"][mask][0])


def test_the_importer_keeps_balanced_and_power_law_1_01_rows_under_their_codes(tmp_path):
    import pandas as pd

    base = tmp_path / "aiconfigurator_core" / "systems" / "data" / "h200_sxm" / "moe" / "sglang" / "0.5.14"
    base.mkdir(parents=True)
    shape = dict(hidden_size=7168, inter_size=2048, topk=8, num_experts=256, moe_tp_size=8, moe_ep_size=1,
                 kernel_source="sglang_fused_moe_triton", moe_dtype="fp8_block", framework="SGLang",
                 version="0.5.14", device="h200", op_name="moe")
    latency_ms = {("balanced", 1): 0.10, ("balanced", 64): 0.20, ("power_law_1.01", 1): 0.11,
                  ("power_law_1.01", 64): 0.27, ("power_law_1.2", 1): 0.13, ("power_law_1.2", 64): 0.31}
    rows = [dict(shape, distribution=d, num_tokens=n, latency=ms) for (d, n), ms in latency_ms.items()]
    pd.DataFrame(rows).to_parquet(base / "moe_perf.parquet")
    out = tmp_path / "out"
    kernels_import.import_kernels(["h200"], out, folder=tmp_path, echo=lambda line: None)
    folder = out / "h200" / "sglang-0.5.14"
    with np.load(folder / "moe.npz") as npz:
        got = {(CODES["routing"][r], int(n)): float(s)
               for r, n, s in zip(npz["moe.routing"], npz["moe.tokens"], npz["moe.latency_s"])}
    kept = {k: ms * 1e-3 for k, ms in latency_ms.items() if k[0] != "power_law_1.2"}
    assert got.keys() == kept.keys()
    assert all(got[k] == pytest.approx(kept[k], rel=1e-6) for k in kept)
    moe = yaml.safe_load((folder / "provenance.yaml").read_text())["families"]["moe"]["tables"]["moe"]
    assert moe["distributions"] == ["balanced", "power_law_1.01"] and moe["rows"] == 4
    kt = kernel_tables(H200, "sglang", root=out)
    for (routing, tokens), seconds in kept.items():
        assert kt.moe(*_shape_args(tokens), routing=routing).latency_s == pytest.approx(seconds, rel=1e-6)


@pytest.mark.parametrize("engine, version", [("sglang", "0.5.14"), ("vllm", "0.24.0")])
def test_committed_h200_lookups_equal_the_measured_rows_of_each_routing(engine, version):
    kt = kernel_tables(H200, engine, version)
    for tokens in (16, 4096):
        got = {r: kt.moe(*_shape_args(tokens), routing=r).latency_s for r in ROUTINGS}
        for routing in ROUTINGS:
            assert got[routing] == pytest.approx(_record_s(engine, version, routing, tokens), rel=1e-6)
        assert got["balanced"] != got["power_law_1.01"]


def test_power_law_routing_at_deepseek_v3s_tp8_shape_goes_as_the_measurements_say():
    # SGLang 0.5.14 (the paper's 0.5.9 profile reads it: 0.5.10's MoE table is left out,
    # kernels_import.EP_UNPROJECTED): the hottest expert makes power-law routing 14% slower at 16
    # tokens and 18% at 4,096
    kt = kernel_tables(H200, "sglang", "0.5.9")
    for tokens in (16, 4096):
        got = kt.moe(*_shape_args(tokens), routing="power_law_1.01")
        assert got.source.startswith("table h200 sglang-0.5.14 ")
        ratio = got.latency_s / kt.moe(*_shape_args(tokens)).latency_s
        measured = _record_s("sglang", "0.5.14", "power_law_1.01", tokens) / \
            _record_s("sglang", "0.5.14", "balanced", tokens)
        assert ratio == pytest.approx(measured, rel=1e-5)
        assert ratio > 1.1


def test_h20_without_tables_transfers_the_measured_routing_of_its_nearest_gpu():
    h20 = kernel_tables(load_gpu("h20"), "sglang", "0.5.10")
    moved = {r: h20.moe(*_shape_args(16), routing=r) for r in ROUTINGS}
    assert all(t.source.startswith(f"transfer {h20.basis}->h20 ") for t in moved.values())
    measured = kernel_tables(load_gpu(h20.basis), "sglang", "0.5.10")
    faster = measured.moe(*_shape_args(16), routing="power_law_1.01").latency_s < measured.moe(*_shape_args(16)).latency_s
    assert moved["balanced"].latency_s != moved["power_law_1.01"].latency_s
    assert (moved["power_law_1.01"].latency_s < moved["balanced"].latency_s) == faster


def test_the_fallback_roofline_says_it_has_no_routing(tmp_path):
    # a tables folder without an MoE table: both routings take the same roofline, the power-law note says so
    (tmp_path / "h200" / "sglang-0.5.14").mkdir(parents=True)
    (tmp_path / "h200" / "sglang-0.5.14" / "provenance.yaml").write_text("gpu: h200\n")
    kt = kernel_tables(H200, "sglang", root=tmp_path)
    bal, pl = (kt.moe(*_shape_args(64), routing=r) for r in ROUTINGS)
    assert bal.latency_s == pl.latency_s and "roofline" in bal.source
    assert "routing" not in bal.source and "power_law_1.01 routing priced as balanced" in pl.source


@pytest.mark.parametrize("engine", ["paper-sglang-0.5.9", "vllm"])
def test_a_power_law_model_changes_only_the_fused_moe_op_by_the_tables_ratio(engine):
    model = load_model("deepseek-v3")
    power = model.with_moe_routing("power_law_1.01")
    inst = instance("h200", 8, engine=engine)
    assert {op.routing for op in (s.op for s in forward_ops(power, inst.parallel)) if isinstance(op, MoE)} == \
        {"power_law_1.01"}
    kt = kernel_tables(H200, inst.engine_profile.kernel_engine, inst.engine_profile.kernel_version)
    base, other = decode_step(model, inst, 16, 4096), decode_step(power, inst, 16, 4096)
    changed = {k for k in base.ops if base.ops[k] != other.ops[k]}
    assert changed == {"moe.experts"}
    table_ratio = kt.moe(*_shape_args(16), routing="power_law_1.01").latency_s / kt.moe(*_shape_args(16)).latency_s
    assert other.ops["moe.experts"] / base.ops["moe.experts"] == pytest.approx(table_ratio, rel=1e-9)
    assert float(other.total_s - base.total_s) == pytest.approx(float(other.ops["moe.experts"] - base.ops["moe.experts"]))
    # the default model is balanced and dumps as before the field existed
    same = model.with_moe_routing("balanced")
    assert model.moe_routing == "balanced" and "moe_routing" not in model.model_dump()
    assert decode_step(same, inst, 16, 4096).total_s == base.total_s
    assert power.model_dump()["moe_routing"] == "power_law_1.01"


def test_an_unknown_routing_is_one_line_naming_the_field_and_the_values(tmp_path):
    with pytest.raises(InvalidInput, match=r"^moe_routing: unknown 'zipf'; use one of balanced, power_law_1.01$"):
        load_model("deepseek-v3").with_moe_routing("zipf")
    with pytest.raises(InvalidInput, match="moe_routing"):
        kernel_tables(H200, "sglang").moe(*_shape_args(16), routing="power_law_1.2")
    text = (builtin_dir("prfaas_plan.data.model_db") / "deepseek-v3.yaml").read_text()
    (tmp_path / "m.yaml").write_text(text + "\nmoe_routing: zipf\n")
    with pytest.raises(InvalidInput, match=r"moe_routing.*'balanced' or 'power_law_1.01'"):
        load_model_yaml(tmp_path / "m.yaml")


def _case_study(tmp_path: Path, routing: str) -> Path:
    text = (builtin_dir("prfaas_plan.data.scenarios") / "paper-case-study.yaml").read_text()
    assert "\nmodel: kimi-linear-1t\n" in text
    path = tmp_path / f"{routing}.yaml"
    path.write_text(text.replace("\nmodel: kimi-linear-1t\n", f"\nmodel: kimi-linear-1t\nmoe_routing: {routing}\n"))
    return path


def test_a_scenario_sets_the_routing_of_its_model_and_a_bad_one_exits_2(tmp_path, capsys):
    default = load_scenario("paper-case-study")
    assert default.model.moe_routing == "balanced" and "moe_routing" not in default.spec.model_dump()
    power = load_scenario(_case_study(tmp_path, "power_law_1.01"))
    assert power.model.moe_routing == "power_law_1.01" and power.spec.model_dump()["moe_routing"] == "power_law_1.01"
    assert default.with_updates(moe_routing="power_law_1.01").model.moe_routing == "power_law_1.01"
    assert power.with_updates(**{"link.gbps": 50}).model.moe_routing == "power_law_1.01"
    with pytest.raises(SystemExit) as exc:
        main(["plan", str(_case_study(tmp_path, "zipf"))])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and "moe_routing" in err and "power_law_1.01" in err and "\n" not in err
