"""Tests for prfaas_plan.workload: the Workload type, its constructors, and the package's face.

Expected numbers come from the fixture traces by hand (tests/fixtures/traces/README.md), from the
real Mooncake trace's own timestamps, or from the replay functions tested in test_prefix_cache.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import prfaas_plan.workload as workload_package
from prfaas_plan.errors import PlanError
from prfaas_plan.workload import (
    TruncatedLogNormal,
    Workload,
    load_trace,
    paper_lengths,
    paper_workload,
    prefix_cache_replay,
    workload_from_trace,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "traces"
MOONCAKE_FIXTURE = FIXTURES / "mooncake_conversation_rows4183-4212.jsonl"
AZURE_FIXTURE = FIXTURES / "azure_llm_2023_conv_rows1-31.csv"
MOONCAKE_CONVERSATION = REPO_ROOT.parent / "shared" / "traces" / "mooncake_conversation.jsonl"
needs_mooncake = pytest.mark.skipif(
    not MOONCAKE_CONVERSATION.is_file(),
    reason=f"real Mooncake trace not present at {MOONCAKE_CONVERSATION}",
)


def test_paper_workload():
    workload = paper_workload()
    assert workload.output_tokens == 1024
    assert workload.rate_rps is None
    assert workload.name == "paper"
    assert workload.lengths == TruncatedLogNormal(9.90, 1.00, 128, 131072)  # docs/design.md section 2
    assert workload.lengths == paper_lengths()


def test_workload_from_fixture_traces():
    fixture_trace = load_trace(MOONCAKE_FIXTURE)
    mooncake = workload_from_trace(fixture_trace)
    assert mooncake.rate_rps == pytest.approx(30 / 9.001)  # 30 requests over 1,352,999..1,362,000 ms
    assert mooncake.name == "mooncake_conversation_rows4183-4212"
    # By hand: every request after the first shares block 0 (512 tokens); line 4211 also repeats
    # the first 54 blocks of line 4191 (27,648 tokens). Nothing else recurs inside the window.
    expected_hit_tokens = [0] + [512] * 29
    expected_hit_tokens[28] = 54 * 512
    np.testing.assert_array_equal(prefix_cache_replay(fixture_trace, None).hit_tokens, expected_hit_tokens)
    expected_mean_tokens = (fixture_trace["input_tokens"].sum() - sum(expected_hit_tokens)) / 30
    assert mooncake.lengths.mean_tokens() == pytest.approx(expected_mean_tokens, rel=1e-12)
    assert mooncake.output_tokens == pytest.approx(fixture_trace["output_tokens"].sum() / 30, rel=1e-12)
    azure_trace = load_trace(AZURE_FIXTURE)
    with pytest.raises(PlanError) as excinfo:
        workload_from_trace(azure_trace)
    assert "capacity_blocks=0" in str(excinfo.value)
    azure = workload_from_trace(azure_trace, capacity_blocks=0, name="azure")
    assert azure.name == "azure"
    assert azure.rate_rps == pytest.approx(30 / 19.913927, rel=1e-6)
    assert azure.lengths.mean_tokens() == pytest.approx(azure_trace["input_tokens"].mean())


@needs_mooncake
def test_workload_from_mooncake_conversation():
    trace = load_trace(MOONCAKE_CONVERSATION)
    workload = workload_from_trace(trace)
    arrival_span_s = (3_536_999 - 0) / 1000  # last and first timestamps in the file, ms
    assert trace["arrival_s"].max() == pytest.approx(arrival_span_s)
    assert workload.rate_rps == pytest.approx(12_031 / arrival_span_s)
    assert workload.output_tokens == pytest.approx(trace["output_tokens"].mean())
    assert workload.name == "mooncake_conversation"
    replay = prefix_cache_replay(trace, None)
    assert workload.lengths.mean_tokens() == pytest.approx(replay.uncached_tokens.mean(), rel=1e-12)
    no_cache = workload_from_trace(trace, capacity_blocks=0)
    assert no_cache.lengths.mean_tokens() == pytest.approx(trace["input_tokens"].mean(), rel=1e-12)


def test_workload_validation():
    with pytest.raises(PlanError):
        Workload(paper_lengths(), output_tokens=-1.0)
    with pytest.raises(PlanError):
        Workload(paper_lengths(), output_tokens=10.0, rate_rps=0.0)
    with pytest.raises(PlanError):
        Workload(object(), output_tokens=10.0)  # type: ignore[arg-type]
    simultaneous = pd.DataFrame({"arrival_s": [0.0, 0.0], "input_tokens": [100, 100], "output_tokens": [1, 1],
                                 "hash_ids": pd.Series([[1], [1]], dtype=object)})
    assert workload_from_trace(simultaneous).rate_rps is None
    assert workload_from_trace(simultaneous).name == "trace"
    with pytest.raises(PlanError):
        workload_from_trace(simultaneous.iloc[:0])
    with pytest.raises(PlanError):
        workload_from_trace(simultaneous.drop(columns="output_tokens"))


def test_package_exports_what_the_rest_of_the_code_imports():
    """Every name the package, tests, benchmarks and docs import from prfaas_plan.workload."""
    imported = {"EmpiricalLengths", "LengthDist", "LRUPrefixCache", "PrefixReplay",
                "SplitReplay", "TruncatedLogNormal", "Workload", "load_trace", "paper_lengths", "paper_workload",
                "prefix_cache_replay", "split_cache_replay", "uncached_lengths", "workload_from_trace"}
    assert imported <= set(workload_package.__all__)
    for name in workload_package.__all__:
        assert getattr(workload_package, name) is not None


def test_import_does_not_load_scipy_stats():
    """scipy.stats costs most of a second to import (issue #18); the plan path needs only scipy.special."""
    code = "import sys, prfaas_plan.workload; print(sorted(m for m in sys.modules if m.startswith('scipy.stats')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO_ROOT)
    assert done.stdout.strip() == "[]"
