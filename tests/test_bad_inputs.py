"""A new user's bad input: one line on stderr and exit code 2, never a traceback, a hang or a
partly written file; and tables that fit an 80- or 100-column terminal with readable headers.

Every CLI case runs the real command in a subprocess (``benchmarks/bad_inputs.py`` is the full
table of ~240 cases; these are the fast, important ones)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import mpmath
import pytest
from scipy.stats import norm

import prfaas_plan as pp

ROOT = Path(__file__).resolve().parents[1]
HF = ROOT / "tests" / "fixtures" / "hf"
BINARY = bytes(range(256)) * 4  # not UTF-8
HANG_TIMEOUT_S = 60  # a case that hangs fails here instead of hanging CI
MIB = 2**20


def run(*args: str, cwd: Path | None = None, columns: int | None = None,
        timeout: float = HANG_TIMEOUT_S) -> subprocess.CompletedProcess:
    env = {**os.environ, **({"COLUMNS": str(columns)} if columns else {})}
    return subprocess.run([sys.executable, "-m", "prfaas_plan.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout)


def assert_one_line_error(r: subprocess.CompletedProcess, *needles: str) -> str:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


# ------------------------------------------------------------------ item 8: one line, exit 2

@pytest.fixture
def binary(tmp_path: Path) -> Path:
    path = tmp_path / "blob.yaml"
    path.write_bytes(BINARY)
    return path


@pytest.mark.parametrize("command", [
    ("plan", "{f}"),
    ("kv", "{f}"),
    ("sweep", "{f}", "-o", "out.parquet"),
    ("bench", "validate", "{f}"),
])
def test_binary_file_is_one_line_naming_the_file(command, binary, tmp_path):
    r = run(*(a.format(f=binary) for a in command), cwd=tmp_path)
    assert_one_line_error(r, str(binary), "not a text file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blob.yaml"]  # nothing written


def test_hf_config_with_zero_heads_names_the_field(tmp_path):
    cfg = json.loads((HF / "llama-3.3-70b.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, "num_attention_heads": 0}))
    assert_one_line_error(run("kv", str(path)), "num_attention_heads", "0 must be a whole number >= 1")


@pytest.mark.parametrize("args", [("kv", "{long}"), ("plan", "paper-case-study", "--mode", "paper", "--out", "{long}")])
def test_100k_character_argument(args, tmp_path):
    long = "a" * 100_000
    line = assert_one_line_error(run(*(a.format(long=long) for a in args), cwd=tmp_path), "100,000 characters")
    assert "a" * 100 not in line and len(line) < 600  # the argument is shortened, not echoed (the rest: the known ids)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, flag", [
    (("sweep", "{grid}", "-o", "{blocked}/out.parquet", "--executor", "serial", "--no-progress"), "-o"),
    (("sweep", "{grid}", "-o", "/proc/out.parquet", "--executor", "serial", "--no-progress"), "-o"),
    (("bench", "calibrate", "{obs}", "--gpu", "h200", "-o", "{blocked}/h200.yaml"), "-o"),
    (("bench", "calibrate", "{obs}", "--gpu", "h200", "-o", "/proc/h200.yaml"), "-o"),
])
def test_output_into_an_unwritable_folder(args, flag, tmp_path):
    grid = tmp_path / "grid.yaml"
    grid.write_text("scenario: paper-case-study\nmode: paper\naxes:\n  link.gbps: [100]\n")
    blocked = tmp_path / "notes.txt"  # a regular file: nothing can be written under it, even by root
    blocked.write_text("x")
    obs = ROOT / "bench_results" / "prfaas-paper-h200.yaml"
    before = sorted(tmp_path.rglob("*"))
    r = run(*(a.format(grid=grid, blocked=blocked, obs=obs) for a in args), cwd=tmp_path)
    assert_one_line_error(r, f"{flag}: ")
    assert sorted(tmp_path.rglob("*")) == before


def test_absurd_pool_is_rejected_quickly():
    """It used to run erlang_c's O(c) loop over 12.5e9 instances for more than 300 s."""
    r = run("plan", "--model", "mimo-v2-flash", "--prfaas", "h200:99999999992", timeout=HANG_TIMEOUT_S)
    assert_one_line_error(r, "prfaas.gpus", "100000")


def test_erlang_c_of_a_huge_pool_matches_halfin_whitt():
    """Bounded work for any c (a subprocess, so that a regression fails instead of hanging): at
    c = 12.5e9 servers and load a = c - sqrt(c) (beta = 1), the Halfin-Whitt limit
    P(wait) = 1 / (1 + beta Phi(beta) / phi(beta)) holds to O(1/sqrt(c))."""
    code = "from prfaas_plan.queueing import erlang_c; c = 12_499_999_999; print(erlang_c(c, c - c ** 0.5))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_TIMEOUT_S)
    halfin_whitt = 1 / (1 + norm.cdf(1.0) / norm.pdf(1.0))
    assert float(out.stdout) == pytest.approx(halfin_whitt, rel=1e-4)


@pytest.mark.parametrize("c, rho", [(1001, 0.9), (5000, 0.99), (100_000, 0.999), (1_000_000, 0.99)])
def test_erlang_c_beyond_the_recursion_matches_high_precision(c, rho):
    """The Poisson form used above 1000 servers against the same quantity in 40-digit arithmetic."""
    from prfaas_plan.queueing import erlang_c

    mpmath.mp.dps = 40
    a = mpmath.mpf(rho * c)
    pmf = mpmath.exp(c * mpmath.log(a) - a - mpmath.loggamma(c + 1))
    cdf = mpmath.gammainc(c + 1, a, mpmath.inf, regularized=True)  # P(Poisson(a) <= c)
    b = pmf / cdf
    exact = float(b / (1 - (a / c) * (1 - b)))
    assert erlang_c(c, rho * c) == pytest.approx(exact, rel=1e-9)


@pytest.mark.parametrize("value", ["nan", "inf", "0"])
def test_profile_rejects_a_tpot_that_is_not_a_positive_number(value):
    assert_one_line_error(run("profile", "kimi-linear-1t", "--tpot-ms", value), "--tpot-ms")


def test_report_rejects_a_negative_seed_like_simulate(tmp_path):
    assert_one_line_error(run("report", "paper-case-study", "-o", "r.html", "--no-simulate", "--seed=-3",
                              cwd=tmp_path), "--seed")
    assert list(tmp_path.iterdir()) == []


def test_kv_rejects_a_tp_that_cannot_shard_the_kv_heads():
    # mimo-v2-flash's full attention has 4 KV heads: TP 3 neither divides nor is a multiple of them
    line = assert_one_line_error(run("kv", "mimo-v2-flash", "--tp", "3"), "--tp", "4 KV heads")
    assert "valid degrees: 1, 2, 4, 8, 16, 32, 64" in line


def test_kv_accepts_sharding_and_replication_with_exact_bytes():
    """TP 4 on 4 KV heads: one head per rank; TP 16 on 8 KV heads: each head on two ranks."""
    r = run("kv", "mimo-v2-flash", "--tp", "4", "--context", "32K", "--format", "json")
    assert r.returncode == 0, r.stderr
    # 9 full layers x 1 KV head x (192 + 128) x 2 B x 32K tokens + 39 SWA layers x 2 heads x 320 x 2 B x 128 tokens
    assert json.loads(r.stdout)[0]["per_gpu_mib_tp4"] * MIB == 9 * 640 * 32768 + 39 * 1280 * 128
    r = run("kv", "minimax-m2.5", "--tp", "16", "--context", "32K", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["per_gpu_mib_tp16"] * MIB == 62 * 1 * 256 * 2 * 32768


def test_simulate_refuses_an_absurd_run_instead_of_hanging():
    """1e12 s of Poisson arrivals (2.7e12 requests) used to exhaust memory with a traceback."""
    r = run("simulate", "paper-case-study", "--duration", "1e12", timeout=HANG_TIMEOUT_S)
    assert_one_line_error(r, "--duration", "requests, more than the 100,000,000")

# ------------------------------------------------------------------ item 10: tables fit the terminal

def table_headers(text: str) -> list[list[str]]:
    """The column headers of every rich table in ``text``, each header's wrapped lines joined."""
    tables, rows = [], None
    for line in text.splitlines():
        if line.startswith("┏"):
            rows = []
        elif line.startswith("┡") and rows is not None:
            cols = [" ".join(part for part in col if part) for col in zip(*rows)]
            tables.append(cols)
            rows = None
        elif rows is not None:
            rows.append([cell.strip() for cell in line.strip("┃").split("┃")])
    return tables


def assert_fits(text: str, width: int) -> None:
    assert text.strip()
    assert max(len(line) for line in text.splitlines()) <= width
    assert "…" not in text  # nothing truncated


@pytest.mark.parametrize("width", [80, 100])
def test_plan_table_fits_with_readable_headers(width):
    r = run("plan", "paper-case-study", "--mode", "paper", columns=width)
    assert r.returncode == 0, r.stderr
    table = r.stdout.split("Plans (")[1]
    assert_fits(table, width)
    headers = [h for block in table_headers(table) for h in block if h != "plan"]
    assert headers == ["t (tokens)", "PrfaaS", "PD-P", "PD-D", "Lambda_max (req/s)", "PrfaaS-PD / this (x)",
                       "egress (Gbps)", "cost ($/M tokens)", "P90 TTFT (s)", "binding"]
    res = pp.plan(pp.load_scenario("paper-case-study"), mode="paper")
    for value in (f"{res.threshold_tokens:,.0f}", f"{res.lambda_max_rps:.3f}", f"{res.ratio('homogeneous-pd'):.3f}",
                  f"{res.egress_gbps:.3f}"):  # values are whole: t, Lambda_max, ratio, egress
        assert value in table


@pytest.mark.parametrize("width", [80, 100])
def test_kv_and_hardware_tables_fit(width):
    r = run("kv", "mimo-v2-flash", "qwen3.5-397b-a17b", "--tp", "8", columns=width)
    assert r.returncode == 0, r.stderr
    assert_fits(r.stdout, width)
    headers = [h for block in table_headers(r.stdout) for h in block]
    assert "per GPU (MiB, TP8)" in headers and "KV (B/token)" in headers
    assert not any("_" in h and h != "model" for h in headers), headers  # no raw column names
    r = run("hardware", columns=width)
    assert r.returncode == 0, r.stderr
    assert_fits(r.stdout, width)
    headers = {h for block in table_headers(r.stdout) for h in block}
    assert {"BF16 (TFLOP/s)", "HBM (GiB)", "NVLink (GB/s/dir)", "price ($/GPU-hour)", "price date"} <= headers
    for value in ("2,250.00", "1,307.40", "2026-05"):
        assert value in r.stdout


def test_machine_formats_keep_their_column_names():
    r = run("plan", "paper-case-study", "--mode", "paper", "--format", "csv", columns=80)
    header = r.stdout.splitlines()[0].split(",")
    assert {"plan", "threshold_tokens", "lambda_max_rps", "throughput_vs_this", "egress_gbps"} <= set(header)
    assert not math.isnan(float(r.stdout.splitlines()[1].split(",")[header.index("lambda_max_rps")]))



# ------------------------------------------------- the kernel model's inputs in a scenario file

CASE_STUDY = ROOT / "prfaas_plan" / "data" / "scenarios" / "paper-case-study.yaml"


@pytest.mark.parametrize("edit, needles", [
    ({"gemm_dtypes": {"experts": "int3"}}, ("gemm_dtypes", "int3")),
    ({"gemm_dtypes": {"router": "bf16"}}, ("gemm_dtypes", "router")),
    ({"engine_profile": "tgi"}, ("unknown engine profile", "tgi")),
    ({"local": {"layout": {"attention": "sp"}}}, ("local.layout.attention",)),
    ({"local": {"gpus": 4, "gpus_per_instance": 1, "layout": {"attention": "dp"}}},
     ("local.layout.attention", "at least 2 GPUs")),
    ({"prfaas": {"gpus": 1024, "gpus_per_instance": 512, "layout": {"experts": "ep"}}},
     ("prfaas.layout.experts", "has 384")),
    ({"local": {"layout": {"dcp": 3}}}, ("local.layout.dcp", "must divide")),
    # MiniMax-M2.5's FP8 block-128 experts over 8 GPUs: 192 channels each, the engines refuse it
    ({"model": "minimax-m2.5", "local": {"layout": {"experts": "tp"}}},
     ("local.layout.experts", "192 intermediate channels", "use experts: ep")),
])
def test_kernel_model_inputs_in_a_scenario_are_one_line_errors(edit, needles, tmp_path):
    import yaml

    data = yaml.safe_load(CASE_STUDY.read_text())
    for key, value in edit.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict) and key != "gemm_dtypes":
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    assert_one_line_error(run("plan", str(path), "--mode", "paper", cwd=tmp_path), *needles)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]
