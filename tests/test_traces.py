"""Tests for prfaas_plan.workload.traces: the Mooncake, Azure and generic CSV trace loaders.

Expected values are read off the fixture files by hand (tests/fixtures/traces/README.md says
where each comes from) or parsed independently with json.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from prfaas_plan.errors import PlanError
from prfaas_plan.workload import load_trace

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "traces"
MOONCAKE_FIXTURE = FIXTURES / "mooncake_conversation_rows4183-4212.jsonl"
AZURE_FIXTURE = FIXTURES / "azure_llm_2023_conv_rows1-31.csv"
GENERIC_FIXTURE = FIXTURES / "generic_from_azure_rows1-31.csv"
GENERIC_COLUMNS = {"arrival_s": "t", "input_tokens": "prompt", "output_tokens": "completion"}


def test_load_mooncake_fixture_converts_ms_to_seconds():
    trace = load_trace(MOONCAKE_FIXTURE)
    assert trace.attrs["format"] == "mooncake"
    assert len(trace) == 30
    assert list(trace.columns) == ["arrival_s", "input_tokens", "output_tokens", "hash_ids"]
    # Timestamps 1,352,999 ms .. 1,362,000 ms -> 0 .. 9.001 s.
    assert trace["arrival_s"].iloc[0] == 0.0
    assert trace["arrival_s"].iloc[-1] == pytest.approx(9.001, abs=1e-12)
    assert trace["arrival_s"].iloc[3] == pytest.approx(3.001, abs=1e-12)  # 1,356,000 ms
    assert trace["input_tokens"].iloc[0] == 938 and trace["output_tokens"].iloc[0] == 604
    assert trace["hash_ids"].iloc[0] == [0, 74485]
    assert trace["input_tokens"].dtype == np.int64 and trace["arrival_s"].dtype == np.float64
    raw = [json.loads(line) for line in MOONCAKE_FIXTURE.read_text().splitlines()]
    assert trace["input_tokens"].sum() == sum(r["input_length"] for r in raw)
    assert load_trace(MOONCAKE_FIXTURE, fmt="mooncake").equals(trace)


def test_load_azure_fixture():
    trace = load_trace(AZURE_FIXTURE)
    assert trace.attrs["format"] == "azure"
    assert len(trace) == 30
    assert "hash_ids" not in trace.columns
    # 2023-11-16 18:15:46.6805900 -> 18:16:06.5945170
    assert trace["arrival_s"].iloc[0] == 0.0
    assert trace["arrival_s"].iloc[-1] == pytest.approx(19.913927, abs=1e-6)
    assert trace["arrival_s"].iloc[1] == pytest.approx(4.314579, abs=1e-6)
    assert (trace["input_tokens"].iloc[0], trace["output_tokens"].iloc[0]) == (374, 44)
    assert (trace["input_tokens"].iloc[-1], trace["output_tokens"].iloc[-1]) == (91, 16)


def test_load_generic_csv_fixture_matches_azure():
    trace = load_trace(GENERIC_FIXTURE, columns=GENERIC_COLUMNS)
    assert trace.attrs["format"] == "csv"
    assert len(trace) == 30
    azure = load_trace(AZURE_FIXTURE)
    np.testing.assert_allclose(trace["arrival_s"], azure["arrival_s"], atol=1e-6)  # 100 s offset removed
    np.testing.assert_array_equal(trace["input_tokens"], azure["input_tokens"])
    np.testing.assert_array_equal(trace["output_tokens"], azure["output_tokens"])
    assert load_trace(GENERIC_FIXTURE, fmt="csv", columns=GENERIC_COLUMNS).equals(trace)


def test_generic_csv_with_canonical_names_and_unsorted_arrivals(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,input_tokens,output_tokens\n5.0,100,7\n2.5,300,9\n2.5,200,8\n")
    trace = load_trace(path)
    assert trace["arrival_s"].tolist() == [0.0, 0.0, 2.5]
    assert trace["input_tokens"].tolist() == [300, 200, 100]  # sorted by arrival, ties in file order


def _one_line_error(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("name", "content", "kwargs", "expected"),
    [
        ("bad.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,10\n", {"fmt": "azure"}, ["{path}", "GeneratedTokens", "fmt='csv'"]),
        ("bad.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,abc,3\n", {}, ["{path}", "'ContextTokens'", "line 2", "'abc'", "not a number"]),
        ("bad.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,-3\n", {}, ["{path}", "'GeneratedTokens'", "line 2", "negative"]),
        ("bad.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,10,3\n", {}, ["{path}", "'TIMESTAMP'", "line 2"]),
        ("bad.csv", "t,prompt,completion\n0.0,10.5,3\n", {"columns": GENERIC_COLUMNS}, ["{path}", "'prompt'", "whole number"]),
        ("bad.csv", "t,prompt,completion\n0.0,0,3\n", {"columns": GENERIC_COLUMNS}, ["{path}", "'prompt'", "below 1"]),
        ("bad.csv", "t,prompt\n0.0,10\n", {"columns": GENERIC_COLUMNS}, ["{path}", "'completion'", "output_tokens", "columns="]),
        ("bad.csv", "t,prompt,completion\n0.0,10,3\n", {"columns": {"arrival": "t"}}, ["'arrival'", "arrival_s"]),
        ("bad.csv", "a,b\n1,2\n", {}, ["{path}", "cannot tell the trace format", "fmt="]),
        ("bad.csv", "", {"fmt": "csv"}, ["{path}", "empty"]),
        ("bad.csv", "t,prompt,completion\n", {"columns": GENERIC_COLUMNS}, ["{path}", "no requests in the file"]),
        ("bad.jsonl", "\n\n", {"fmt": "mooncake"}, ["{path}", "no requests in the file"]),
        ("bad.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 1}\n', {}, ["{path}", "line 1", "'hash_ids'"]),
        ("bad.jsonl", '{"timestamp": 0, "input_length": -10, "output_length": 1, "hash_ids": [1]}\n', {}, ["{path}", "'input_length'", "line 1", "negative"]),
        ("bad.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n{oops\n', {}, ["{path}", "line 2", "not valid JSON"]),
        ("bad.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": "x"}\n', {}, ["{path}", "'hash_ids'", "list of integers"]),
        ("bad.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1, true]}\n', {}, ["{path}", "'hash_ids'", "line 1", "list of integers"]),
        ("bad.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n[1]\n', {"fmt": "mooncake"}, ["{path}", "line 2", "not a JSON object"]),
        ("bad.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n\n{"timestamp": 1}\n', {}, ["{path}", "line 3", "'input_length'"]),
        ("bad.jsonl", '{"timestamp": "soon", "input_length": 10, "output_length": 1, "hash_ids": [1]}\n', {}, ["{path}", "'timestamp'", "line 1", "not a number"]),
        ("bad.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n', {"columns": GENERIC_COLUMNS}, ["{path}", "columns", "fmt='csv'"]),
    ],
)
def test_load_trace_errors_are_one_line_plan_errors(tmp_path, name, content, kwargs, expected):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(PlanError) as excinfo:
        load_trace(path, **kwargs)
    message = _one_line_error(excinfo)
    for fragment in expected:
        assert fragment.format(path=path) in message, (fragment, message)


def test_load_trace_missing_file_and_unknown_format(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(PlanError) as excinfo:
        load_trace(missing)
    assert str(missing) in _one_line_error(excinfo)
    with pytest.raises(PlanError) as excinfo:
        load_trace(MOONCAKE_FIXTURE, fmt="mooncak")
    assert "did you mean 'mooncake'" in _one_line_error(excinfo)


_ROW = '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}'


@pytest.mark.parametrize(
    "line",
    [
        _ROW + " " + _ROW,  # two objects: json's "Extra data"
        _ROW[:-1],  # cut short
        _ROW + ",",
        "\ufeff" + _ROW,  # a BOM json.loads refuses
        "\xa0" + _ROW,  # non-breaking space: whitespace to str.strip(), not to JSON
        "nul",
    ],
)
def test_mooncake_lines_fail_as_json_loads_fails(tmp_path, line):
    """Each line is read as ``json.loads`` reads it: the error quotes its message and line number."""
    path = tmp_path / "t.jsonl"
    path.write_text(f"{_ROW}\n{line}\n", encoding="utf-8")
    with pytest.raises(json.JSONDecodeError) as json_error:
        json.loads(line)
    with pytest.raises(PlanError) as excinfo:
        load_trace(path, fmt="mooncake")
    assert _one_line_error(excinfo) == (f"{path}: line 2 is not valid JSON ({json_error.value.msg}); "
                                        "Mooncake traces have one JSON object per line")


def test_mooncake_lines_json_accepts(tmp_path):
    """CRLF and lone CR line ends, JSON whitespace around an object, blank lines (also a form feed,
    which str.strip() calls blank) all read as json.loads reads each line."""
    rows = [{"timestamp": t, "input_length": 10 + t, "output_length": t, "hash_ids": [t, 7]} for t in range(4)]
    text = (f" \t{json.dumps(rows[0])}\r\n\r\n{json.dumps(rows[1])}\r{json.dumps(rows[2], indent=None)} \n\x0c\n"
            f"{json.dumps(rows[3])}")
    path = tmp_path / "t.jsonl"
    path.write_bytes(text.encode("utf-8"))
    trace = load_trace(path)
    assert trace["input_tokens"].tolist() == [r["input_length"] for r in rows]
    assert trace["hash_ids"].tolist() == [r["hash_ids"] for r in rows]
    bad = path.read_text().replace("[3, 7]", "[3, 7.0]")
    path.write_text(bad)
    with pytest.raises(PlanError) as excinfo:
        load_trace(path)
    assert "line 6" in _one_line_error(excinfo) and "[3, 7.0]" in _one_line_error(excinfo)


@pytest.mark.parametrize("stamps", [[0, 1500.5, 3000], [2**60 + 1, 2**60 + 4097, 2**60], [0.25, 1, 2]])
def test_mooncake_numbers_read_as_pandas_reads_them(tmp_path, stamps):
    """Timestamps as JSON ints and floats, also past 2^53 (where a double no longer holds every
    integer), come out as pandas.to_numeric makes them; a fractional token count is refused by value."""
    import pandas as pd

    rows = [{"timestamp": t, "input_length": 10, "output_length": 1, "hash_ids": [1]} for t in stamps]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    trace = load_trace(path)
    ms = pd.to_numeric(pd.Series(stamps, dtype=object)).to_numpy(dtype=float)
    expected = np.sort((ms - ms.min()) / 1000.0)
    assert trace["arrival_s"].to_numpy().tobytes() == expected.tobytes()
    rows[1]["input_length"] = 10.5
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(PlanError) as excinfo:
        load_trace(path)
    assert "'input_length', line 2: 10.5 is not a whole number" in _one_line_error(excinfo)


@pytest.mark.parametrize(("path", "kw"), [(MOONCAKE_FIXTURE, {}), (AZURE_FIXTURE, {}), (GENERIC_FIXTURE, {"columns": GENERIC_COLUMNS})])
def test_read_trace_holds_load_traces_columns(path, kw):
    """read_trace's numpy columns are load_trace's frame, column for column (names, dtypes, values,
    attrs), and its frame is that frame; the Trace reads like it (trace[name], columns, len)."""
    from prfaas_plan.workload.traces import read_trace

    frame, trace = load_trace(path, **kw), read_trace(path, **kw)
    assert trace.columns == tuple(frame.columns) and len(trace) == len(frame) and trace.attrs == frame.attrs
    for name in ("arrival_s", "input_tokens", "output_tokens"):
        assert trace[name].dtype == frame[name].dtype
        np.testing.assert_array_equal(trace[name], frame[name].to_numpy())
    if "hash_ids" in frame.columns:
        assert trace["hash_ids"] == frame["hash_ids"].tolist()
    assert trace.frame().equals(frame) and trace.frame().attrs == frame.attrs


def test_read_trace_sorts_by_arrival_and_reads_mooncake_without_pandas(tmp_path):
    """Rows out of order come sorted by arrival, ties in file order (as a stable sort of the frame);
    a Mooncake file is read in a process that never imports pandas."""
    import subprocess
    import sys

    from prfaas_plan.workload.traces import read_trace

    rows = [{"timestamp": t, "input_length": 10 + i, "output_length": i, "hash_ids": [i]}
            for i, t in enumerate([5, 1, 5, 0, 1])]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    trace = read_trace(path)
    assert trace.arrival_s.tolist() == [0.0, 0.001, 0.001, 0.005, 0.005]
    assert trace.input_tokens.tolist() == [13, 11, 14, 10, 12] and trace.hash_ids == [[3], [1], [4], [0], [2]]
    assert trace.frame().equals(load_trace(path))
    code = (f"import sys; from prfaas_plan.workload.traces import read_trace; t = read_trace({str(MOONCAKE_FIXTURE)!r}); "
            "print(len(t), 'pandas' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split() == ["30", "False"]


def test_a_trace_reads_only_its_own_columns_and_is_itself_when_sorted():
    """``trace[name]`` is a column or a KeyError (also ``hash_ids`` of a trace without them, not
    None); a trace already in arrival order is returned as is by ``sorted``."""
    from prfaas_plan.workload.traces import read_trace

    mooncake, azure = read_trace(MOONCAKE_FIXTURE), read_trace(AZURE_FIXTURE)
    assert mooncake.sorted() is mooncake and len(mooncake["hash_ids"]) == len(mooncake)
    for trace, name in ((azure, "hash_ids"), (mooncake, "attrs"), (mooncake, "sorted")):
        with pytest.raises(KeyError):
            trace[name]
