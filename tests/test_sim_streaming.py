"""Long simulations in bounded memory, and output folders written safely.

* Streaming: a run that outgrows ``max_rows_in_memory`` hands its records on a chunk at a time
  (here chunks of 64 requests and 50 time-series rows, so a few thousand requests cross many chunk
  boundaries, and an overloaded run makes the ring of requests in flight grow). Its parquet
  records must equal the in-memory run's frame row for row, its counts and means the exact ones
  (to summation rounding), and its t-digest percentiles the exact ones to within the digest's
  accuracy. (Memory and speed figures: benchmarks/bench_sim_memory.py.)
* Output folders (``--out``): a second run into the same folder replaces the first run's files;
  files we did not write are never deleted or overwritten; a failed run leaves the folder as it was.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import prfaas_plan as pp
import prfaas_plan.sim.arrivals
import prfaas_plan.sim.outputs
from prfaas_plan.errors import PlanError
from prfaas_plan.sim import Bursty, Policy, Setup, run_engine, simulate, write_outputs
from prfaas_plan.sim.arrivals import source_for
from prfaas_plan.sim.outputs import Sink
from prfaas_plan.sim.result import Totals
from prfaas_plan.sim.ring import Ring
from prfaas_plan.workload import EmpiricalLengths, TruncatedLogNormal

OUTPUTS = ["manifest.json", "requests.parquet", "summary.json", "timeseries.parquet"]
EXACT_KEYS = ("requests", "completed", "throughput_rps", "offered_rps", "unfinished", "offload_fraction",
              "ttft_mean_s", "tpot_mean_s", "wait_mean_s", "transfer_mean_s", "slo_attainment",
              "egress_gbps_mean", "link_utilisation_mean", "remote_queue_max", "local_queue_max", "token_hit_rate")
PERCENTILE_KEYS = ("ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p90_s")


@pytest.fixture(scope="module")
def case():
    sc = pp.load_scenario("paper-case-study").with_updates(**{"slo.ttft_s": 5.0})
    return sc, pp.plan(sc)


@pytest.fixture
def tiny_chunks(monkeypatch):
    monkeypatch.setattr(prfaas_plan.sim.arrivals, "CHUNK_REQUESTS", 64)
    monkeypatch.setattr(prfaas_plan.sim.outputs, "TIMESERIES_CHUNK_ROWS", 50)


RUNS = {
    "steady": dict(load=0.85, duration_s=1500, seed=3),
    "overloaded, short policy, link drop": dict(load=1.3, duration_s=1000, seed=4, policy="short",
                                                link_events=[(200.0, 500.0, 5.0)]),
    "bursty": dict(arrivals=Bursty(on_rps=8.0, off_rps=1.0, mean_on_s=30.0, mean_off_s=60.0), duration_s=1500, seed=5),
}


@pytest.mark.parametrize("kw", RUNS.values(), ids=RUNS.keys())
def test_streamed_run_equals_the_in_memory_run(case, tiny_chunks, tmp_path, kw):
    sc, res = case
    exact = simulate(sc, res, **kw)
    streamed = simulate(sc, res, **kw, out_dir=tmp_path / "run", max_rows_in_memory=0)
    assert streamed.frames is None and sorted(p.name for p in (tmp_path / "run").iterdir()) == OUTPUTS
    assert len(exact.requests) > 20 * 64 and len(exact.timeseries) > 10 * 50  # many chunks of each
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "run" / "requests.parquet"), exact.requests, check_exact=True)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "run" / "timeseries.parquet"), exact.timeseries,
                                  check_exact=True)
    _agree(streamed.summary(), exact.summary(), EXACT_KEYS)
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["ttft_p90_s"] == streamed.summary()["ttft_p90_s"]
    # a window: the records read back chunk by chunk, percentiles exact
    _agree(streamed.summary(100.0, 400.0), exact.summary(100.0, 400.0), (*EXACT_KEYS, *PERCENTILE_KEYS))


def _agree(got: dict, want: dict, keys) -> None:
    """Same figures; sums over chunks differ from one sum by rounding only."""
    assert got.keys() == want.keys()
    for key in keys:
        assert got[key] == pytest.approx(want[key], rel=1e-12, abs=1e-15), key


def test_digest_percentiles_are_within_its_accuracy(case, tiny_chunks):
    """t-digest (1000 centroids) fed 64 values at a time: each percentile's rank among the exact
    TTFTs is within 0.2 points of q, and P90 within 0.5% of the exact value."""
    sc, res = case
    exact = simulate(sc, res, load=0.85, duration_s=2000, seed=6)
    got = simulate(sc, res, load=0.85, duration_s=2000, seed=6, max_rows_in_memory=0).summary()
    ttft = np.sort(exact.requests.ttft_s.to_numpy())
    for q in (0.5, 0.9, 0.99):
        lo, hi = np.searchsorted(ttft, got[f"ttft_p{round(q * 100)}_s"], side="left"), \
            np.searchsorted(ttft, got[f"ttft_p{round(q * 100)}_s"], side="right")
        assert lo / ttft.size - 0.002 <= q <= hi / ttft.size + 0.002, q
    assert got["ttft_p90_s"] == pytest.approx(exact.summary()["ttft_p90_s"], rel=0.005)
    assert got["ttft_p90_s"] != exact.summary()["ttft_p90_s"]  # a digest, not the kept values
    assert got["tpot_p90_s"] == res.inputs.decode_step_s  # one value: the digest is clamped to it


def test_memory_follows_the_requests_in_flight_not_the_run(case, tiny_chunks):
    """The engine's per-request state is a ring of whole chunks: at load 0.5 a 3,000-request run
    never needs more than 4 chunks of 64; a run that kept nothing gives a one-line error for
    its records, and reads them back when it wrote them."""
    sc, res = case
    setup = Setup.from_plan(res, sc)
    source = source_for(setup, sc, res, None, 0.5, 1800.0, None, 1.0, None, np.random.default_rng(0))
    sink = Sink(Totals(0.0, source.horizon_s, exact=False))
    eng = run_engine(setup, source, Policy(), (), source.horizon_s, None, sink=sink)
    assert source.n > 40 * 64 and eng.ring.cap <= 4 * 64 and eng.frames is None and sink.totals.n == source.n
    lean = simulate(sc, res, load=0.5, duration_s=300, max_rows_in_memory=10)
    with pytest.raises(PlanError, match="kept only its totals; pass out_dir="):
        _ = lean.requests


@pytest.mark.parametrize("chunk", [0, 48])
def test_the_ring_takes_only_chunks_of_a_power_of_two(chunk):
    """A request's place is its number masked by the ring's size: only whole power-of-two chunks fit it."""
    with pytest.raises(ValueError, match=f"chunk {chunk} must be a power of two"):
        Ring(chunk, 1000, 0.01)
    assert Ring(64, 1000, 0.01).cap == 128


@pytest.mark.parametrize("dist", [TruncatedLogNormal(mu=9.5, sigma=1.2, min_tokens=100, max_tokens=128_000),
                                  EmpiricalLengths(np.array([5, 17, 300, 301, 4096, 70_000]))], ids=["lognormal", "empirical"])
def test_length_draws_do_not_depend_on_the_chunk(dist):
    """Streamed arrivals replay the lengths in chunks: the values and the generator's state after
    them must be those of one draw of all of them."""
    one, parts = np.random.default_rng(9), np.random.default_rng(9)
    whole = dist.sample(1001, one)
    pieces = np.concatenate([dist.sample(k, parts) for k in (7, 64, 1, 929)])
    np.testing.assert_array_equal(pieces, whole)
    assert one.random() == parts.random()


# ----------------------------------------------------------------------------- output folders
def _cli(*args: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("prfaas-plan")
    cmd = [str(exe)] if exe.is_file() else [sys.executable, "-m", "prfaas_plan.cli"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True)


def test_cli_simulate_twice_into_the_same_folder(tmp_path):
    """The real command twice into one folder that also holds someone else's files: the second
    run replaces the first run's outputs, the other files stay byte for byte, nothing else appears."""
    out = tmp_path / "sim"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    (out / "figures").mkdir()
    (out / "figures" / "a.png").write_bytes(b"\x89PNG")
    for seed in ("1", "2"):
        r = _cli("simulate", "paper-case-study", "--duration", "120", "--seed", seed, "--out", str(out), "--format", "json")
        assert r.returncode == 0, r.stderr
        assert r.stderr.strip().splitlines() == [f"wrote {out}"]
        assert json.loads((out / "summary.json").read_text())["info_seed"] == int(seed)
        assert json.loads((out / "summary.json").read_text())["requests"] == json.loads(r.stdout)[0]["requests"]
    assert sorted(p.name for p in out.iterdir()) == sorted([*OUTPUTS, "notes.txt", "figures"])
    assert (out / "notes.txt").read_text() == "mine\n" and (out / "figures" / "a.png").read_bytes() == b"\x89PNG"
    r = _cli("simulate", "paper-case-study", "--duration", "60", "--out", str(out / "notes.txt"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--out" in r.stderr and "folder" in r.stderr
    r = _cli("simulate", "paper-case-study", "--duration", "60", "--out", str(out / "notes.txt" / "sim"))
    assert r.returncode == 2 and "notes.txt is a file" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_write_outputs_never_deletes_or_overwrites_what_it_did_not_write(case, tmp_path):
    sc, res = case
    result = simulate(sc, res, load=0.5, duration_s=60, seed=0)
    out = tmp_path / "run"
    out.mkdir()
    (out / "keep.csv").write_text("a,b\n1,2\n")
    write_outputs(result, out)
    write_outputs(result, out)  # again: replaces its own files
    assert sorted(p.name for p in out.iterdir()) == sorted([*OUTPUTS, "keep.csv"])
    assert (out / "keep.csv").read_text() == "a,b\n1,2\n"
    pd.testing.assert_frame_equal(pd.read_parquet(out / "requests.parquet"), result.requests)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "summary.json").write_text('{"mine": true}\n')
    with pytest.raises(PlanError, match="summary.json was not written by prfaas-plan simulate"):
        write_outputs(result, theirs)
    assert [p.name for p in theirs.iterdir()] == ["summary.json"]
    assert (theirs / "summary.json").read_text() == '{"mine": true}\n'


def test_a_failed_streamed_run_leaves_the_previous_output(case, tiny_chunks, tmp_path, monkeypatch):
    sc, res = case
    out = tmp_path / "run"
    simulate(sc, res, load=0.5, duration_s=300, seed=0, out_dir=out, max_rows_in_memory=0)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    write = Sink.write_file
    calls = []

    def full_disk(self, kind, frame):
        calls.append(kind)
        if len(calls) > 5:
            raise OSError(28, "No space left on device")
        write(self, kind, frame)

    monkeypatch.setattr(Sink, "write_file", full_disk)
    with pytest.raises(PlanError, match="--out: .*No space left on device"):
        simulate(sc, res, load=0.5, duration_s=300, seed=1, out_dir=out, max_rows_in_memory=0)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no staged file left either
    with pytest.raises(PlanError, match="No space left"):
        simulate(sc, res, load=0.5, duration_s=300, seed=1, out_dir=tmp_path / "new", max_rows_in_memory=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # the folder it created is gone again


def test_columns_are_the_frames_values_without_pandas(case, tmp_path):
    """SimResult.columns gives what the frames' columns give (names, dtypes, values; the path as
    names), a streamed run's the same read back from its files, and a run that only summarises
    builds no frame: pandas stays unimported."""
    sc, res = case
    sim = simulate(sc, res, load=0.9, duration_s=200, seed=1)
    streamed = simulate(sc, res, load=0.9, duration_s=200, seed=1, out_dir=tmp_path / "out", max_rows_in_memory=0)
    assert streamed.frames is None
    for kind, frame in (("requests", sim.requests), ("timeseries", sim.timeseries)):
        columns = sim.columns(kind)
        assert list(columns) == list(frame.columns) == list(streamed.columns(kind))
        for name, values in columns.items():
            expected = frame[name].to_numpy()
            assert values.dtype == expected.dtype
            np.testing.assert_array_equal(values, expected)
            np.testing.assert_array_equal(streamed.columns(kind)[name], expected)
    assert set(sim.columns("requests")["path"]) == {"pd_p", "prfaas"}
    code = ("import sys, prfaas_plan as pp; from prfaas_plan.sim import simulate; sc = pp.load_scenario('paper-case-study'); "
            "s = simulate(sc, load=0.9, duration_s=100, seed=1); s.summary(); s.summary(start_s=10.0); s.columns('requests'); "
            "print('pandas' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


def test_a_streamed_run_shorter_than_one_period_still_writes_every_file(case, tmp_path):
    """0.9 s at the plan's load (3 requests with seed 3) streams no time-series row: its file is
    still written, with every column and no row, beside the others the manifest lists."""
    sc, res = case
    out = tmp_path / "out"
    simulate(sc, res, duration_s=0.9, seed=3, out_dir=out)
    assert sorted(p.name for p in out.iterdir()) == sorted(prfaas_plan.sim.outputs.OUTPUT_FILES)
    ts = pd.read_parquet(out / "timeseries.parquet")
    assert len(ts) == 0 and list(ts.columns) == list(prfaas_plan.sim.outputs.TIMESERIES_COLUMNS)
    in_memory = simulate(sc, res, duration_s=0.9, seed=3).columns("timeseries")  # the same, kept in memory
    assert list(in_memory) == list(ts.columns) and all(len(values) == 0 for values in in_memory.values())
    assert len(pd.read_parquet(out / "requests.parquet")) == 3
