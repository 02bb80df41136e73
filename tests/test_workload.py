"""Tests for prfaas_plan.workload: length distributions, trace loaders, prefix-cache replay.

Every expected number is computed independently of the code under test: by numerical
integration (scipy.integrate.quad), by Monte Carlo with scipy.stats' own log-normal sampler, by
hand on tiny inputs, or by a set-based pass over the real Mooncake trace.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from prfaas_plan.errors import PlanError
from prfaas_plan.workload import (
    EmpiricalLengths,
    LengthDist,
    PrefixReplay,
    TruncatedLogNormal,
    Workload,
    load_trace,
    paper_lengths,
    paper_workload,
    prefix_cache_replay,
    split_cache_replay,
    uncached_lengths,
    workload_from_trace,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "traces"
MOONCAKE_FIXTURE = FIXTURES / "mooncake_conversation_rows4183-4212.jsonl"
AZURE_FIXTURE = FIXTURES / "azure_llm_2023_conv_rows1-31.csv"
GENERIC_FIXTURE = FIXTURES / "generic_from_azure_rows1-31.csv"
GENERIC_COLUMNS = {"arrival_s": "t", "input_tokens": "prompt", "output_tokens": "completion"}

REAL_TRACES = REPO_ROOT.parent / "shared" / "traces"
MOONCAKE_CONVERSATION = REAL_TRACES / "mooncake_conversation.jsonl"
needs_mooncake = pytest.mark.skipif(
    not MOONCAKE_CONVERSATION.is_file(),
    reason=f"real Mooncake trace not present at {MOONCAKE_CONVERSATION}",
)

BLOCK_TOKENS = 512


# --------------------------------------------------------------------------------------------
# Independent references for the truncated log-normal
# --------------------------------------------------------------------------------------------


def quad_reference(dist: TruncatedLogNormal, g, lo_tokens: float, hi_tokens: float) -> float:
    """E[g(L); lo < L <= hi] by adaptive quadrature of scipy's log-normal pdf in token space."""
    base = stats.lognorm(s=dist.sigma, scale=math.exp(dist.mu))
    mass = base.cdf(dist.max_tokens) - base.cdf(dist.min_tokens)
    lo, hi = max(lo_tokens, dist.min_tokens), min(hi_tokens, dist.max_tokens)
    if hi <= lo:
        return 0.0
    # Split at decades so quad sees the peak and the long tail separately.
    points = [p for p in np.geomspace(lo, hi, 12)[1:-1]]
    value, _ = integrate.quad(lambda x: g(x) * base.pdf(x), lo, hi, points=points, limit=400, epsabs=0, epsrel=1e-11)
    return value / mass


def monte_carlo_truncated(dist: TruncatedLogNormal, n: int, seed: int) -> np.ndarray:
    """n draws by rejection from scipy.stats.lognorm (independent of the inverse-CDF sampler)."""
    rng = np.random.default_rng(seed)
    base = stats.lognorm(s=dist.sigma, scale=math.exp(dist.mu))
    kept: list[np.ndarray] = []
    count = 0
    while count < n:
        draws = base.rvs(size=n, random_state=rng)
        draws = draws[(draws >= dist.min_tokens) & (draws <= dist.max_tokens)]
        kept.append(draws)
        count += draws.size
    return np.concatenate(kept)[:n]


OTHER_DIST = TruncatedLogNormal(mu=7.0, sigma=1.5, min_tokens=16, max_tokens=8192)
THRESHOLDS_TOKENS = [500.0, 4096.0, 8192.0, 32768.0, 100000.0]


# --------------------------------------------------------------------------------------------
# TruncatedLogNormal
# --------------------------------------------------------------------------------------------


def test_paper_distribution_mean_is_about_27k_tokens():
    dist = paper_lengths()
    mean_tokens = dist.mean_tokens()
    quad_mean_tokens = quad_reference(dist, lambda x: x, 0, math.inf)
    print(f"paper distribution mean: {mean_tokens:.2f} tokens (quad {quad_mean_tokens:.2f})")
    # Closed form pinned to 0.01 token; quad agrees to 1e-8 relative.
    assert mean_tokens == pytest.approx(27485.68, abs=0.01)
    assert mean_tokens == pytest.approx(quad_mean_tokens, rel=1e-8)
    # DESIGN says "about 27K": 26.84K with K = 1024, 27.49K with K = 1000. Within 2% of 27K either way.
    assert 26_500 < mean_tokens < 27_600
    # Truncation matters: the untruncated log-normal's mean exp(mu + sigma^2/2) is 32,860 tokens.
    assert math.exp(9.90 + 0.5) == pytest.approx(32859.63, abs=0.01)


@pytest.mark.parametrize("dist", [paper_lengths(), OTHER_DIST], ids=["paper", "other"])
def test_truncated_lognormal_moments_match_quadrature(dist):
    assert dist.mean_tokens() == pytest.approx(quad_reference(dist, lambda x: x, 0, math.inf), rel=1e-8)
    assert quad_reference(dist, lambda x: 1.0, 0, math.inf) == pytest.approx(1.0, rel=1e-9)
    for t in THRESHOLDS_TOKENS:
        p_above = quad_reference(dist, lambda x: 1.0, t, math.inf)
        p_below = quad_reference(dist, lambda x: 1.0, 0, t)
        assert dist.tail_prob(t) == pytest.approx(p_above, rel=1e-8, abs=1e-13)
        if p_above > 0:
            assert dist.mean_above(t) == pytest.approx(quad_reference(dist, lambda x: x, t, math.inf) / p_above, rel=1e-7)
        else:
            assert math.isnan(dist.mean_above(t))
        if p_below > 0:
            assert dist.mean_below(t) == pytest.approx(quad_reference(dist, lambda x: x, 0, t) / p_below, rel=1e-7)
    second_moment = quad_reference(dist, lambda x: x * x, 0, math.inf)
    assert dist.expect(lambda x: x * x) == pytest.approx(second_moment, rel=1e-9)


def test_truncated_lognormal_moments_match_monte_carlo():
    """1e6 rejection draws from scipy.stats.lognorm; tolerance 5 standard errors."""
    dist = paper_lengths()
    draws_tokens = monte_carlo_truncated(dist, 1_000_000, seed=12345)
    n = draws_tokens.size
    se_mean_tokens = draws_tokens.std() / math.sqrt(n)
    assert abs(dist.mean_tokens() - draws_tokens.mean()) < 5 * se_mean_tokens
    for t in [1024.0, 8192.0, 32768.0, 100000.0]:
        above = draws_tokens[draws_tokens > t]
        below = draws_tokens[draws_tokens <= t]
        p_mc = above.size / n
        assert abs(dist.tail_prob(t) - p_mc) < 5 * math.sqrt(p_mc * (1 - p_mc) / n)
        assert abs(dist.mean_above(t) - above.mean()) < 5 * above.std() / math.sqrt(above.size)
        assert abs(dist.mean_below(t) - below.mean()) < 5 * below.std() / math.sqrt(below.size)


def test_own_sampler_and_empirical_stats_of_a_large_sample_agree():
    """sample() -> EmpiricalLengths of 1e6 draws: tail_prob/mean_above/mean_below within 5 SE."""
    dist = paper_lengths()
    draws_tokens = dist.sample(1_000_000, np.random.default_rng(7))
    assert draws_tokens.dtype == np.int64
    assert draws_tokens.min() >= 128 and draws_tokens.max() <= 131072
    sample = EmpiricalLengths(draws_tokens)
    n = draws_tokens.size
    assert abs(sample.mean_tokens() - dist.mean_tokens()) < 5 * draws_tokens.std() / math.sqrt(n)
    for t in [2048.0, 16384.0, 65536.0]:
        p = dist.tail_prob(t)
        assert abs(sample.tail_prob(t) - p) < 5 * math.sqrt(p * (1 - p) / n)
        above = draws_tokens[draws_tokens > t]
        below = draws_tokens[draws_tokens <= t]
        assert abs(sample.mean_above(t) - dist.mean_above(t)) < 5 * above.std() / math.sqrt(above.size)
        assert abs(sample.mean_below(t) - dist.mean_below(t)) < 5 * below.std() / math.sqrt(below.size)
    # Quantiles: the sample's median within 0.5% of the closed form.
    assert sample.quantile(0.5) == pytest.approx(dist.quantile(0.5), rel=5e-3)


def test_truncated_lognormal_edges_and_vectorised_thresholds():
    dist = paper_lengths()
    assert dist.tail_prob(0) == 1.0
    assert dist.tail_prob(128) == pytest.approx(1.0)
    assert dist.tail_prob(131072) == 0.0
    assert dist.tail_prob(1e9) == 0.0
    assert math.isnan(dist.mean_above(131072))
    assert math.isnan(dist.mean_below(100))
    assert dist.mean_above(0) == pytest.approx(dist.mean_tokens())
    assert dist.mean_below(131072) == pytest.approx(dist.mean_tokens())
    thresholds = np.array([0.0, 4096.0, 200000.0])
    tails = dist.tail_prob(thresholds)
    assert isinstance(tails, np.ndarray) and tails.shape == (3,)
    assert tails[1] == pytest.approx(dist.tail_prob(4096.0))
    assert isinstance(dist.tail_prob(4096), float)
    assert dist.quantile(0.0) == pytest.approx(128)
    assert dist.quantile(1.0) == pytest.approx(131072)
    assert isinstance(dist, LengthDist)


def test_expect_handles_jumps_with_breakpoints():
    dist = paper_lengths()
    t = 32768.0
    indicator = lambda x: (x > t).astype(float)  # noqa: E731
    assert dist.expect(indicator, breakpoints_tokens=[t]) == pytest.approx(dist.tail_prob(t), abs=1e-12)
    assert dist.expect(indicator) == pytest.approx(dist.tail_prob(t), abs=1e-2)  # undeclared jump: documented bound
    assert dist.expect(lambda x: 1.0) == pytest.approx(1.0, abs=1e-12)
    assert dist.expect(lambda x: x) == pytest.approx(dist.mean_tokens(), rel=1e-12)


lognormal_params = st.builds(
    lambda mu, sigma, lo_log, width_log: (mu, sigma, math.exp(lo_log), math.exp(lo_log + width_log)),
    st.floats(4.0, 12.0),
    st.floats(0.2, 2.5),
    st.floats(0.0, 8.0),
    st.floats(1.0, 6.0),
)


@settings(max_examples=60, deadline=None)
@given(params=lognormal_params, n=st.integers(1, 64), t_frac=st.floats(0.0, 1.0))
def test_truncated_lognormal_buckets_and_split_identity(params, n, t_frac):
    mu, sigma, lo, hi = params
    # Keep the log-normal's bulk near the support so the truncated mass is not vanishingly small.
    mu = min(max(mu, math.log(lo) - 2 * sigma), math.log(hi) + 2 * sigma)
    dist = TruncatedLogNormal(mu, sigma, lo, hi)
    lengths_tokens, probs = dist.buckets(n)
    assert lengths_tokens.shape == probs.shape == (n,)
    assert probs.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.sum(probs * lengths_tokens) == pytest.approx(dist.mean_tokens(), rel=1e-10)
    edges = dist.bucket_edges(n)
    assert np.all(lengths_tokens >= edges[:-1] * (1 - 1e-12)) and np.all(lengths_tokens <= edges[1:] * (1 + 1e-12))
    t = lo + t_frac * (hi - lo)
    p = dist.tail_prob(t)
    if 0 < p < 1:
        recombined = p * dist.mean_above(t) + (1 - p) * dist.mean_below(t)
        assert recombined == pytest.approx(dist.mean_tokens(), rel=1e-9)
    q = dist.quantile(0.3)
    assert 1 - dist.tail_prob(q) == pytest.approx(0.3, abs=1e-9)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(mu=9.9, sigma=0.0, min_tokens=128, max_tokens=1024),
        dict(mu=9.9, sigma=1.0, min_tokens=0, max_tokens=1024),
        dict(mu=9.9, sigma=1.0, min_tokens=2048, max_tokens=1024),
        dict(mu=float("nan"), sigma=1.0, min_tokens=128, max_tokens=1024),
        dict(mu=500.0, sigma=1.0, min_tokens=128, max_tokens=1024),
    ],
)
def test_truncated_lognormal_rejects_bad_parameters(kwargs):
    with pytest.raises(PlanError):
        TruncatedLogNormal(**kwargs)


def test_quantile_and_counts_reject_bad_arguments():
    dist = paper_lengths()
    with pytest.raises(PlanError):
        dist.quantile(1.5)
    with pytest.raises(PlanError):
        dist.buckets(0)
    with pytest.raises(PlanError):
        EmpiricalLengths(np.array([1, 2])).sample(-1, np.random.default_rng(0))


# --------------------------------------------------------------------------------------------
# EmpiricalLengths
# --------------------------------------------------------------------------------------------


def test_empirical_lengths_by_hand():
    dist = EmpiricalLengths(np.array([10, 2, 1, 5, 2]))
    assert dist.mean_tokens() == 4.0  # (1 + 2 + 2 + 5 + 10) / 5
    assert dist.tail_prob(2) == pytest.approx(2 / 5)  # 5 and 10
    assert dist.mean_above(2) == pytest.approx(7.5)  # (5 + 10) / 2
    assert dist.mean_below(2) == pytest.approx(5 / 3)  # (1 + 2 + 2) / 3
    assert dist.tail_prob(10) == 0.0 and math.isnan(dist.mean_above(10))
    assert math.isnan(dist.mean_below(0.5))
    assert dist.mean_above(0) == 4.0
    np.testing.assert_allclose(dist.tail_prob([0, 2, 10]), [1.0, 0.4, 0.0])
    # Inverse empirical CDF: F(1) = 0.2, F(2) = 0.6, F(5) = 0.8, F(10) = 1.
    assert dist.quantile(0.2) == 1.0
    assert dist.quantile(0.5) == 2.0
    assert dist.quantile(0.61) == 5.0
    assert dist.quantile(1.0) == 10.0
    assert dist.expect(lambda x: x**2) == pytest.approx((1 + 4 + 4 + 25 + 100) / 5)
    # Four distinct values <= 10 buckets: one bucket per value.
    lengths_tokens, probs = dist.buckets(10)
    np.testing.assert_allclose(lengths_tokens, [1, 2, 5, 10])
    np.testing.assert_allclose(probs, [0.2, 0.4, 0.2, 0.2])
    # Two buckets: the median cut falls inside the run of 2s, so it moves before them.
    lengths_tokens, probs = dist.buckets(2)
    np.testing.assert_allclose(lengths_tokens, [1.0, (2 + 2 + 5 + 10) / 4])
    np.testing.assert_allclose(probs, [0.2, 0.8])
    draws = dist.sample(1000, np.random.default_rng(0))
    assert set(np.unique(draws)) <= {1, 2, 5, 10}
    assert isinstance(dist, LengthDist)
    assert "n=5" in repr(dist)


def test_empirical_lengths_is_immutable_and_validated():
    raw = np.array([3.0, 1.0, 2.0])
    dist = EmpiricalLengths(raw)
    raw[0] = 1000.0
    assert dist.mean_tokens() == 2.0
    with pytest.raises(ValueError):
        dist.tokens[0] = 5.0
    for bad in ([], [[1, 2]], [1, -2], [1, float("nan")], ["a"]):
        with pytest.raises(PlanError):
            EmpiricalLengths(bad)  # type: ignore[arg-type]


@settings(max_examples=100, deadline=None)
@given(
    tokens=st.lists(st.integers(1, 200_000), min_size=1, max_size=300),
    n=st.integers(1, 40),
    t=st.integers(0, 200_000),
)
def test_empirical_lengths_match_brute_force(tokens, n, t):
    values = np.asarray(tokens, dtype=float)
    dist = EmpiricalLengths(values)
    above, below = values[values > t], values[values <= t]
    assert dist.tail_prob(t) == pytest.approx(above.size / values.size)
    if above.size:
        assert dist.mean_above(t) == pytest.approx(above.mean(), rel=1e-12)
    if below.size:
        assert dist.mean_below(t) == pytest.approx(below.mean(), rel=1e-12)
    lengths_tokens, probs = dist.buckets(n)
    assert 1 <= lengths_tokens.size <= n
    assert probs.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.sum(probs * lengths_tokens) == pytest.approx(values.mean(), rel=1e-12)
    assert np.all(np.diff(lengths_tokens) > 0)  # buckets are disjoint length ranges
    assert np.all(np.isin(np.round(probs * values.size), np.arange(1, values.size + 1)))


# --------------------------------------------------------------------------------------------
# Trace loaders
# --------------------------------------------------------------------------------------------


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
        ("bad.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 1}\n', {}, ["{path}", "line 1", "'hash_ids'"]),
        ("bad.jsonl", '{"timestamp": 0, "input_length": -10, "output_length": 1, "hash_ids": [1]}\n', {}, ["{path}", "'input_length'", "line 1", "negative"]),
        ("bad.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n{oops\n', {}, ["{path}", "line 2", "not valid JSON"]),
        ("bad.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": "x"}\n', {}, ["{path}", "'hash_ids'", "list of integers"]),
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


# --------------------------------------------------------------------------------------------
# Prefix-cache replay (LRU)
# --------------------------------------------------------------------------------------------


def make_trace(requests: list[tuple[int, list[int]]], arrivals_s: list[float] | None = None) -> pd.DataFrame:
    """A hand-made trace from (input_tokens, hash_ids) pairs, arriving 1 s apart by default."""
    return pd.DataFrame(
        {
            "arrival_s": arrivals_s if arrivals_s is not None else [float(i) for i in range(len(requests))],
            "input_tokens": [tokens for tokens, _ in requests],
            "output_tokens": [1] * len(requests),
            "hash_ids": pd.Series([ids for _, ids in requests], dtype=object),
        }
    )


def test_lru_unlimited_hits_and_last_token_rule():
    trace = make_trace([(1500, [1, 2, 3]), (1400, [1, 2, 4]), (1500, [1, 2, 3]), (100, [7])])
    replay = prefix_cache_replay(trace, capacity_blocks=None)
    # B reuses blocks 1, 2 (1024 tokens); C finds all three blocks but must compute its last token.
    assert replay.hit_tokens.tolist() == [0, 1024, 1499, 0]
    assert replay.uncached_tokens.tolist() == [1500, 376, 1, 100]
    assert replay.token_hit_rate == pytest.approx((1024 + 1499) / (1500 + 1400 + 1500 + 100))
    assert replay.request_hit_rate == pytest.approx(2 / 4)
    assert replay.evicted_blocks == 0
    assert isinstance(replay, PrefixReplay)
    np.testing.assert_array_equal(uncached_lengths(trace, None), replay.uncached_tokens)


def test_lru_matches_prefixes_only():
    # B's blocks 2 and 3 are cached, but its first block misses, so nothing is reusable.
    trace = make_trace([(1536, [1, 2, 3]), (1536, [9, 2, 3]), (1536, [1, 5, 3])])
    replay = prefix_cache_replay(trace, capacity_blocks=None)
    assert replay.hit_tokens.tolist() == [0, 0, 512]


def test_lru_evictions_at_capacity_two_blocks():
    trace = make_trace(
        [
            (1024, [1, 2]),  # miss; cache (LRU -> MRU): 2, 1
            (512, [3]),  # miss; 2, 1, 3 -> evict 2 -> 1, 3
            (1024, [1, 2]),  # block 1 hits, block 2 was evicted; 3, 2, 1 -> evict 3 -> 2, 1
            (512, [3]),  # miss (evicted); 2, 1, 3 -> evict 2 -> 1, 3
            (1536, [5, 6, 7]),  # miss; 1, 3, 7, 6, 5 -> evict 1, 3, 7 -> 6, 5 (head kept)
            (1536, [5, 6, 7]),  # blocks 5, 6 hit, 7 misses; 7, 6, 5 -> evict 7
        ]
    )
    replay = prefix_cache_replay(trace, capacity_blocks=2)
    assert replay.hit_tokens.tolist() == [0, 0, 512, 0, 0, 1024]
    assert replay.evicted_blocks == 1 + 1 + 1 + 3 + 1
    unlimited = prefix_cache_replay(trace, capacity_blocks=None)
    assert unlimited.hit_tokens.tolist() == [0, 0, 1023, 511, 0, 1535]


def test_lru_replays_in_arrival_order_and_reports_in_row_order():
    # Row 0 arrives last, so it is the one that hits.
    trace = make_trace([(1024, [1, 2]), (1024, [1, 2])], arrivals_s=[5.0, 1.0])
    replay = prefix_cache_replay(trace, capacity_blocks=None)
    assert replay.hit_tokens.tolist() == [1023, 0]


def test_no_caching_needs_no_hash_ids():
    trace = pd.DataFrame({"arrival_s": [0.0, 1.0], "input_tokens": [10, 20], "output_tokens": [1, 1]})
    replay = prefix_cache_replay(trace, capacity_blocks=0)
    assert replay.uncached_tokens.tolist() == [10, 20]
    assert replay.token_hit_rate == 0.0 and replay.request_hit_rate == 0.0
    with pytest.raises(PlanError) as excinfo:
        prefix_cache_replay(trace, capacity_blocks=None)
    assert "capacity_blocks=0" in _one_line_error(excinfo)
    for bad in (-1, 2.5, True):
        with pytest.raises(PlanError):
            prefix_cache_replay(trace, capacity_blocks=bad)
    with pytest.raises(PlanError):
        prefix_cache_replay(trace, capacity_blocks=0, block_tokens=0)


def reference_lru_hit_blocks(hash_ids: list[list[int]], capacity_blocks: int | None) -> list[int]:
    """A plain-list LRU with the same documented rules (slow but obvious)."""
    recency: list[int] = []  # least recently used first
    hits: list[int] = []
    for ids in hash_ids:
        run = 0
        while run < len(ids) and ids[run] in recency:
            run += 1
        hits.append(run)
        for block in reversed(ids):
            if block in recency:
                recency.remove(block)
            recency.append(block)
        while capacity_blocks is not None and len(recency) > capacity_blocks:
            recency.pop(0)
    return hits


@settings(max_examples=200, deadline=None)
@given(
    hash_ids=st.lists(st.lists(st.integers(0, 12), min_size=1, max_size=6, unique=True), min_size=1, max_size=25),
    capacity_blocks=st.one_of(st.none(), st.integers(0, 8)),
)
def test_lru_matches_reference_implementation(hash_ids, capacity_blocks):
    inputs_tokens = [BLOCK_TOKENS * len(ids) for ids in hash_ids]
    trace = make_trace(list(zip(inputs_tokens, hash_ids)))
    replay = prefix_cache_replay(trace, capacity_blocks)
    expected_blocks = np.array(reference_lru_hit_blocks(hash_ids, capacity_blocks))
    expected_hit_tokens = np.minimum(expected_blocks * BLOCK_TOKENS, np.array(inputs_tokens) - 1)
    np.testing.assert_array_equal(replay.hit_tokens, expected_hit_tokens)
    assert np.all(replay.uncached_tokens >= 1)


# --------------------------------------------------------------------------------------------
# The real Mooncake conversation trace
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mooncake_trace() -> pd.DataFrame:
    return load_trace(MOONCAKE_CONVERSATION)


@needs_mooncake
def test_mooncake_conversation_no_caching(mooncake_trace):
    assert len(mooncake_trace) == 12_031
    np.testing.assert_array_equal(uncached_lengths(mooncake_trace, 0), mooncake_trace["input_tokens"].to_numpy())
    # hash_ids cover the prompt in 512-token blocks.
    blocks = mooncake_trace["hash_ids"].map(len).to_numpy()
    np.testing.assert_array_equal(blocks, np.ceil(mooncake_trace["input_tokens"].to_numpy() / BLOCK_TOKENS))


@needs_mooncake
def test_mooncake_conversation_unlimited_cache_hit_rate(mooncake_trace):
    """Bounds from a set-based pass (unlimited cache = every block seen earlier is cached).

    Upper: 512 x (blocks whose hash id appeared in an earlier request) / input tokens, because
    a request can reuse at most its previously seen blocks. Lower: the same for blocks in a
    leading run of previously seen ids, minus 512 per request whose every block was seen (only
    such a request can lose tokens, to the partial last block and the last-token rule).
    """
    seen: set[int] = set()
    seen_blocks = leading_seen_blocks = fully_seen_requests = 0
    for ids in mooncake_trace["hash_ids"]:
        flags = [block in seen for block in ids]
        run = next((i for i, flag in enumerate(flags) if not flag), len(flags))
        seen_blocks += sum(flags)
        leading_seen_blocks += run
        fully_seen_requests += run == len(ids)
        seen.update(ids)
    input_tokens_total = int(mooncake_trace["input_tokens"].sum())
    upper = BLOCK_TOKENS * seen_blocks / input_tokens_total
    lower = BLOCK_TOKENS * (leading_seen_blocks - fully_seen_requests) / input_tokens_total

    start_s = time.perf_counter()
    replay = prefix_cache_replay(mooncake_trace, capacity_blocks=None)
    elapsed_s = time.perf_counter() - start_s
    print(
        f"Mooncake conversation: token hit rate {replay.token_hit_rate:.4f} "
        f"(bounds {lower:.4f}..{upper:.4f}), request hit rate {replay.request_hit_rate:.4f}, "
        f"mean uncached {replay.uncached_tokens.mean():.1f} tokens, replay {elapsed_s:.3f} s"
    )
    assert lower <= replay.token_hit_rate <= upper
    assert 0.30 < replay.token_hit_rate < 0.45  # "substantial": hand pass gives 0.3736..0.3738
    assert elapsed_s < 1.0
    assert np.all(replay.uncached_tokens >= 1)
    assert np.all(replay.uncached_tokens + replay.hit_tokens == mooncake_trace["input_tokens"].to_numpy())


@needs_mooncake
def test_mooncake_conversation_finite_cache_is_monotone(mooncake_trace):
    """LRU keeps the c most recently used blocks, so a bigger cache never hits less."""
    rates = [prefix_cache_replay(mooncake_trace, c).token_hit_rate for c in (0, 1_000, 10_000, 100_000)]
    unlimited = prefix_cache_replay(mooncake_trace, None)
    assert rates == sorted(rates) and rates[0] == 0.0
    unique_blocks = len({b for ids in mooncake_trace["hash_ids"] for b in ids})
    big = prefix_cache_replay(mooncake_trace, unique_blocks)  # never evicts
    assert big.evicted_blocks == 0
    np.testing.assert_array_equal(big.hit_tokens, unlimited.hit_tokens)
    assert rates[-1] <= unlimited.token_hit_rate


@needs_mooncake
def test_workload_from_mooncake_conversation(mooncake_trace):
    workload = workload_from_trace(mooncake_trace)
    arrival_span_s = (3_536_999 - 0) / 1000  # last and first timestamps in the file, ms
    assert mooncake_trace["arrival_s"].max() == pytest.approx(arrival_span_s)
    assert workload.rate_rps == pytest.approx(12_031 / arrival_span_s)
    assert workload.output_tokens == pytest.approx(mooncake_trace["output_tokens"].mean())
    assert workload.name == "mooncake_conversation"
    replay = prefix_cache_replay(mooncake_trace, None)
    assert workload.lengths.mean_tokens() == pytest.approx(replay.uncached_tokens.mean(), rel=1e-12)
    no_cache = workload_from_trace(mooncake_trace, capacity_blocks=0)
    assert no_cache.lengths.mean_tokens() == pytest.approx(mooncake_trace["input_tokens"].mean(), rel=1e-12)


# --------------------------------------------------------------------------------------------
# Workload
# --------------------------------------------------------------------------------------------


def test_paper_workload():
    workload = paper_workload()
    assert workload.output_tokens == 1024
    assert workload.rate_rps is None
    assert workload.lengths == paper_lengths()
    assert workload.lengths.mean_tokens() == pytest.approx(27485.68, abs=0.01)


def test_workload_from_fixture_traces():
    mooncake = workload_from_trace(load_trace(MOONCAKE_FIXTURE))
    assert mooncake.rate_rps == pytest.approx(30 / 9.001)
    assert mooncake.name == "mooncake_conversation_rows4183-4212"
    # By hand: every request after the first shares block 0 (512 tokens); line 4211 also repeats
    # the first 54 blocks of line 4191 (27,648 tokens). Nothing else recurs inside the window.
    fixture_trace = load_trace(MOONCAKE_FIXTURE)
    expected_hit_tokens = [0] + [512] * 29
    expected_hit_tokens[28] = 54 * 512
    np.testing.assert_array_equal(prefix_cache_replay(fixture_trace, None).hit_tokens, expected_hit_tokens)
    expected_mean_tokens = (fixture_trace["input_tokens"].sum() - sum(expected_hit_tokens)) / 30
    assert mooncake.lengths.mean_tokens() == pytest.approx(expected_mean_tokens, rel=1e-12)
    azure_trace = load_trace(AZURE_FIXTURE)
    with pytest.raises(PlanError) as excinfo:
        workload_from_trace(azure_trace)
    assert "capacity_blocks=0" in _one_line_error(excinfo)
    azure = workload_from_trace(azure_trace, capacity_blocks=0, name="azure")
    assert azure.name == "azure"
    assert azure.rate_rps == pytest.approx(30 / 19.913927, rel=1e-6)
    assert azure.lengths.mean_tokens() == pytest.approx(azure_trace["input_tokens"].mean())


def test_workload_validation():
    with pytest.raises(PlanError):
        Workload(paper_lengths(), output_tokens=-1.0)
    with pytest.raises(PlanError):
        Workload(paper_lengths(), output_tokens=10.0, rate_rps=0.0)
    with pytest.raises(PlanError):
        Workload(object(), output_tokens=10.0)  # type: ignore[arg-type]
    simultaneous = make_trace([(100, [1]), (100, [1])], arrivals_s=[0.0, 0.0])
    assert workload_from_trace(simultaneous).rate_rps is None


# --------------------------------------------------------------------------------------------
# One prefix cache per cluster
# --------------------------------------------------------------------------------------------


def _split_trace():
    path = MOONCAKE_CONVERSATION if MOONCAKE_CONVERSATION.exists() else MOONCAKE_FIXTURE
    return load_trace(path)


def test_split_replay_degenerates_to_one_cache_at_the_extremes():
    trace = _split_trace()
    shared = prefix_cache_replay(trace, None).uncached_tokens
    all_local = split_cache_replay(trace, None, np.inf)
    assert not all_local.remote.any()
    assert np.array_equal(all_local.local_uncached_tokens, shared)
    all_remote = split_cache_replay(trace, None, 0)
    assert all_remote.remote.all()
    assert np.array_equal(all_remote.remote_uncached_tokens, shared)


def test_split_replay_hits_less_than_one_shared_cache():
    trace = _split_trace()
    shared = prefix_cache_replay(trace, None).uncached_tokens
    r = split_cache_replay(trace, None, float(np.median(shared)))
    served = np.where(r.remote, r.remote_uncached_tokens, r.local_uncached_tokens)
    assert 0 < r.remote.mean() < 1
    # each cluster only caches what it prefilled: never more hits than one shared cache
    assert np.all(r.local_uncached_tokens >= shared) and np.all(r.remote_uncached_tokens >= shared)
    assert served.sum() > shared.sum()
