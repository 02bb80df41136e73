"""Scenario files (prfaas_plan.scenario): validation, dotted updates, where a trace is found, how a
scenario names its origin and its output length."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

import prfaas_plan as pp
from prfaas_plan.errors import PlanError
from prfaas_plan.scenario import resolve_trace

CASE = Path(pp.__file__).resolve().parent / "data" / "scenarios" / "paper-case-study.yaml"
TRACES = Path(__file__).resolve().parent / "fixtures" / "traces"


@pytest.fixture(scope="module")
def sc():
    return pp.load_scenario("paper-case-study")


@pytest.mark.parametrize("changes, message", [
    ({"prfaas.gpus": 30}, r"gpus \(30\) must be a multiple of gpus_per_instance \(8\)"),
    ({"workload.kind": "trace"}, "a trace workload needs trace: PATH"),
    ({"workload.min_tokens": 4096, "workload.max_tokens": 4096}, "min_tokens must be below max_tokens"),
    ({"local.transfer_buffer_gib": 64.0}, "local.transfer_buffer_gib: only the PrfaaS pool ships KV over the link"),
    ({"link.mbps": 1.0}, r"^link.mbps: no such scenario field$"),
    ({"linkage.gbps": 1.0}, r"^linkage.gbps: no such scenario field$"),
    ({"link.gbps.max": 1.0}, r"^link.gbps.max: no such scenario field$"),
])
def test_an_inconsistent_scenario_is_one_line_naming_the_field(sc, changes, message):
    with pytest.raises(PlanError, match=message) as info:
        sc.with_updates(**changes)
    assert "\n" not in str(info.value)


def test_a_layout_the_instance_cannot_take_names_the_pool(sc):
    """Decode context parallelism 3 on the 8-GPU PrfaaS instances of the 1T model: it must divide
    the attention TP degree, and the error names ``prfaas.layout.dcp``; the default layout is the
    instance's own."""
    assert sc.spec.prfaas.layout.to_layout(8, sc.model) is None
    bad = sc.with_updates(**{"prfaas.layout": {"dcp": 3}})
    with pytest.raises(PlanError, match=r"^prfaas.layout.dcp: decode context parallelism 3 must divide the attention "
                                        r"tensor-parallel degree 8 .*; use one of 1, 2, 4, 8$"):
        _ = bad.prfaas_instance
    assert sc.with_updates(**{"prfaas.layout": {"dcp": 2}}).prfaas_instance.layout.dcp == 2


def test_moe_routing_is_dumped_only_when_set(sc):
    assert "moe_routing" not in sc.spec.model_dump()
    skewed = sc.with_updates(moe_routing="power_law_1.01")
    assert skewed.spec.model_dump()["moe_routing"] == "power_law_1.01" and skewed.model.moe_routing == "power_law_1.01"


def test_origin_and_output_length_are_named_for_reports(sc, tmp_path):
    """A built-in scenario reads ``built-in`` wherever the package lives; a file its path; a quick
    plan ``quick``-origin as given. L_out is the workload's unless a trace without it gives it."""
    assert sc.origin_label == "built-in"
    copy = tmp_path / "mine.yaml"
    copy.write_text(CASE.read_text())
    mine = pp.load_scenario(copy)
    assert mine.origin_label == str(copy) and mine.output_tokens_source == "workload.output_tokens"
    traced = mine.with_trace(TRACES / "azure_llm_2023_conv_rows1-31.csv", 0)
    assert traced.output_tokens_source == "the trace's mean output length"
    quick = pp.Scenario.quick("minimax-m2.5", ("h200", 8), ("h20", 16), 100.0)
    assert quick.origin_label == quick.origin != "built-in"


def test_a_trace_is_found_as_given_or_beside_the_scenario_file(tmp_path, monkeypatch):
    """A relative trace path is read from the working directory, else next to the scenario file; an
    absolute one only as given; a folder or a missing file is one line."""
    folder = tmp_path / "plans"
    folder.mkdir()
    trace = folder / "t.csv"
    trace.write_text((TRACES / "azure_llm_2023_conv_rows1-31.csv").read_text())
    scenario = folder / "s.yaml"
    data = yaml.safe_load(CASE.read_text())
    data["workload"] = {"kind": "trace", "trace": "t.csv", "prefix_cache_blocks": 0}
    scenario.write_text(yaml.safe_dump(data))
    monkeypatch.chdir(tmp_path)
    sc = pp.load_scenario(scenario)
    assert resolve_trace(sc, "t.csv") == folder / "t.csv"
    assert resolve_trace(sc, "plans/t.csv") == Path("plans/t.csv")
    assert resolve_trace(sc, str(trace)) == trace
    for ref, problem in (("plans", "is a folder"), ("nope.csv", "not found"), (str(tmp_path / "t.csv"), "not found")):
        with pytest.raises(PlanError, match=rf"^workload.trace: .*{re.escape(problem)}; give a path to a Mooncake"):
            resolve_trace(sc, ref)


def test_a_trace_workload_keeps_a_given_output_length_and_needs_hash_ids_to_cache(sc):
    """The Azure trace has no block hashes: with a prefix cache on, one line says to turn it off;
    off, its own mean output length is L_out unless the scenario gives one."""
    from prfaas_plan.scenario import build_workload
    from prfaas_plan.workload import load_trace

    azure = TRACES / "azure_llm_2023_conv_rows1-31.csv"
    with pytest.raises(PlanError, match="^workload.prefix_cache_blocks: this trace has no hash_ids; set prefix_cache_blocks: 0$"):
        build_workload(sc.with_trace(azure, None))
    own = build_workload(sc.with_trace(azure, 0)).workload.output_tokens
    assert own == pytest.approx(load_trace(azure)["output_tokens"].mean(), rel=1e-12)
    given = sc.with_trace(azure, 0).with_updates(**{"workload.output_tokens": 512})
    assert build_workload(given).workload.output_tokens == 512 != own
