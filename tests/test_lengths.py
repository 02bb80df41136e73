"""Tests for prfaas_plan.workload.lengths: the truncated log-normal and the empirical lengths.

Every expected number is computed independently of the code under test: by scipy.stats.truncnorm
in log space (its own CDF, quantile function and quadrature of its pdf), by 50-digit mpmath, by
adaptive quadrature of scipy's log-normal pdf in token space, or by hand and brute force on samples.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from prfaas_plan.errors import PlanError
from prfaas_plan.workload import EmpiricalLengths, LengthDist, TruncatedLogNormal, paper_lengths

OTHER_DIST = TruncatedLogNormal(mu=7.0, sigma=1.5, min_tokens=16, max_tokens=8192)
THRESHOLDS_TOKENS = [20.0, 500.0, 4096.0, 8000.0, 32768.0, 100000.0]
QUANTILES = [0.0, 1e-9, 0.01, 0.3, 0.5, 0.9, 0.999, 1.0]
TIGHT = {"epsabs": 0, "epsrel": 1e-13, "limit": 200}  # quad settings for the truncnorm references


def log_space(dist: TruncatedLogNormal):
    """ln L as a frozen scipy.stats.truncnorm: the reference every closed form is checked against."""
    a = (math.log(dist.min_tokens) - dist.mu) / dist.sigma
    b = (math.log(dist.max_tokens) - dist.mu) / dist.sigma
    return stats.truncnorm(a, b, loc=dist.mu, scale=dist.sigma)


# --------------------------------------------------------------------------------------------
# TruncatedLogNormal against scipy.stats.truncnorm in log space
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dist", [paper_lengths(), OTHER_DIST], ids=["paper", "other"])
def test_truncated_lognormal_matches_truncnorm_in_log_space(dist):
    x = log_space(dist)
    assert dist.mean_tokens() == pytest.approx(x.expect(np.exp, **TIGHT), rel=1e-12)
    assert dist.moment(2) == pytest.approx(x.expect(lambda v: np.exp(2 * v), **TIGHT), rel=1e-12)
    for t in THRESHOLDS_TOKENS:
        if t >= dist.max_tokens:
            assert dist.tail_prob(t) == 0.0 and math.isnan(dist.mean_above(t))
            continue
        log_t = max(math.log(t), math.log(dist.min_tokens))
        assert dist.tail_prob(t) == pytest.approx(x.sf(math.log(t)), rel=1e-12)
        assert dist.mean_above(t) == pytest.approx(x.expect(np.exp, lb=log_t, conditional=True, **TIGHT), rel=1e-12)
        if t > dist.min_tokens:
            below = x.expect(np.exp, ub=math.log(t), conditional=True, **TIGHT)
            assert dist.mean_below(t) == pytest.approx(below, rel=1e-12)
    for q in QUANTILES:
        assert dist.quantile(q) == pytest.approx(math.exp(x.ppf(q)), rel=1e-12)


def test_truncated_lognormal_deep_in_the_upper_tail():
    """Support 4.3 to 8.6 standard deviations above the log-mean: sf differences, not 1 - cdf.

    truncnorm's quadrature loses digits where the pdf is ~1e-17, so the partial mean is checked
    against the same closed form evaluated with 50-digit mpmath instead.
    """
    dist = TruncatedLogNormal(mu=2.0, sigma=0.5, min_tokens=64, max_tokens=4096)
    x = log_space(dist)
    for t in (100.0, 500.0, 2000.0):
        assert dist.tail_prob(t) == pytest.approx(x.sf(math.log(t)), rel=1e-12)
    for q in QUANTILES:
        assert dist.quantile(q) == pytest.approx(math.exp(x.ppf(q)), rel=1e-12)
    with mpmath.workdps(50):
        mu, sigma = mpmath.mpf(dist.mu), mpmath.mpf(dist.sigma)

        def upper(tokens: float, shift: mpmath.mpf) -> mpmath.mpf:  # P(Z > z(tokens) - shift)
            return mpmath.erfc(((mpmath.log(tokens) - mu) / sigma - shift) / mpmath.sqrt(2)) / 2

        above = mpmath.exp(mu + sigma**2 / 2) * (upper(500, sigma) - upper(4096, sigma)) / (upper(500, 0) - upper(4096, 0))
    assert dist.mean_above(500.0) == pytest.approx(float(above), rel=1e-12)


def quad_reference(dist: TruncatedLogNormal, g, lo_tokens: float, hi_tokens: float) -> float:
    """E[g(L); lo < L <= hi] by adaptive quadrature of scipy's log-normal pdf in token space."""
    base = stats.lognorm(s=dist.sigma, scale=math.exp(dist.mu))
    mass = base.cdf(dist.max_tokens) - base.cdf(dist.min_tokens)
    lo, hi = max(lo_tokens, dist.min_tokens), min(hi_tokens, dist.max_tokens)
    points = list(np.geomspace(lo, hi, 12)[1:-1])  # so quad sees the peak and the long tail apart
    value, _ = integrate.quad(lambda v: g(v) * base.pdf(v), lo, hi, points=points, limit=400, epsabs=0, epsrel=1e-11)
    return value / mass


def test_paper_distribution_mean_is_about_27k_tokens():
    dist = paper_lengths()
    mean_tokens = dist.mean_tokens()
    assert mean_tokens == pytest.approx(quad_reference(dist, lambda v: v, 0, math.inf), rel=1e-9)
    assert mean_tokens == pytest.approx(27485.68, abs=0.01)  # docs and reports quote 27,486 tokens
    # DESIGN says "about 27K": 26.84K with K = 1024, 27.49K with K = 1000.
    assert 26_500 < mean_tokens < 27_600


def test_truncation_matters_and_wide_bounds_give_the_plain_lognormal():
    """Bounds far outside the bulk give scipy's untruncated log-normal (mean 32,860 tokens for the
    paper's mu and sigma); the paper's bounds cut 2.98% of the mass and 16% of the mean."""
    paper = paper_lengths()
    plain = stats.lognorm(s=paper.sigma, scale=math.exp(paper.mu))
    wide = TruncatedLogNormal(paper.mu, paper.sigma, 1, 1e12)
    assert wide.mean_tokens() == pytest.approx(plain.mean(), rel=1e-12)
    assert wide.moment(2) == pytest.approx(plain.moment(2), rel=1e-12)
    assert wide.tail_prob(131072) == pytest.approx(plain.sf(131072), rel=1e-12)
    assert 1 - (plain.cdf(131072) - plain.cdf(128)) == pytest.approx(0.0298, abs=5e-5)  # the docstring's 2.98%
    assert paper.mean_tokens() < 0.85 * wide.mean_tokens()


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


def test_buckets_match_truncnorm_bucket_by_bucket():
    """Each bucket's probability and conditional mean, from truncnorm's cdf and quadrature."""
    dist = paper_lengths()
    x = log_space(dist)
    lengths_tokens, probs = dist.buckets(16)
    edges = np.log(dist.bucket_edges(16))
    np.testing.assert_allclose(probs, np.diff(x.cdf(edges)), rtol=1e-11)
    means = [x.expect(np.exp, lb=lo, ub=hi, conditional=True, **TIGHT) for lo, hi in zip(edges[:-1], edges[1:])]
    np.testing.assert_allclose(lengths_tokens, means, rtol=1e-12)


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
    "kwargs, message",
    [
        (dict(mu=9.9, sigma=0.0, min_tokens=128, max_tokens=1024), r"sigma: 0.0 must be > 0"),
        (dict(mu=9.9, sigma=1.0, min_tokens=0, max_tokens=1024), r"min_tokens: 0 must be at least 1 token"),
        (dict(mu=9.9, sigma=1.0, min_tokens=2048, max_tokens=1024),
         r"max_tokens: 1024 must be at least min_tokens \+ 1 = 2049"),
        (dict(mu=9.9, sigma=1.0, min_tokens=1024, max_tokens=1024),
         r"max_tokens: 1024 must be at least min_tokens \+ 1 = 1025"),
        (dict(mu=float("nan"), sigma=1.0, min_tokens=128, max_tokens=1024), r"mu: nan must be a finite number"),
        (dict(mu=9.9, sigma=True, min_tokens=128, max_tokens=1024), r"sigma: True must be a finite number"),
        (dict(mu=500.0, sigma=1.0, min_tokens=128, max_tokens=1024),
         r"mu=500.0, sigma=1.0: the log-normal puts no probability in \[128, 1024\] tokens; move mu inside"),
    ],
)
def test_truncated_lognormal_rejects_bad_parameters(kwargs, message):
    """Each bad parameter is named by the first check it fails, in one line."""
    with pytest.raises(PlanError, match=f"^{message}") as excinfo:
        TruncatedLogNormal(**kwargs)
    assert "\n" not in str(excinfo.value)


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


def test_the_normal_cdf_is_scipys_own_ufunc_bit_for_bit():
    # ndtr comes from scipy.special's extension loaded alone (no package import): the same values,
    # to the bit, as scipy.special.ndtr, over the body, both tails, the extremes and non-numbers
    import scipy.special

    from prfaas_plan.workload.lengths import ndtr

    z = np.r_[np.random.default_rng(7).normal(0.0, 6.0, 200_000), np.linspace(-40, 40, 8001),
              -np.inf, np.inf, np.nan, 0.0, -0.0, 5e-324, -38.5, 8.3]
    assert np.array_equal(ndtr(z), scipy.special.ndtr(z), equal_nan=True)
    assert ndtr(0.25) == scipy.special.ndtr(0.25) and isinstance(ndtr(0.25), np.floating)


# --------------------------------------------------------------------------------------------
# The sampler's inverse CDF without scipy.special's package
# --------------------------------------------------------------------------------------------


def test_newton_inverse_agrees_with_scipy_ndtri_to_its_bound():
    """ndtri_newton against scipy.special.ndtri over (0, 1): uniform, deep lower and upper tails."""
    from scipy import special

    from prfaas_plan.workload.lengths import NDTRI_AGREE, ndtri_newton

    rng = np.random.default_rng(11)
    p = np.concatenate([rng.random(200_000), 10.0 ** rng.uniform(-300, 0, 100_000),
                        1.0 - 10.0 ** rng.uniform(-16, -0.3, 100_000), [0.5, 0.25, 0.75, 1e-300]])
    got, want = ndtri_newton(p), special.ndtri(p)
    assert np.all(np.isfinite(got))
    assert np.max(np.abs(got - want)) < NDTRI_AGREE / 5
    assert np.all(np.isnan(ndtri_newton([0.0, 1.0, -0.1, 1.5, np.nan])))


@pytest.mark.parametrize("dist", [paper_lengths(), OTHER_DIST, TruncatedLogNormal(12.0, 0.3, 1000, 10**6),
                                  TruncatedLogNormal(14.0, 0.5, 128, 200_000)],
                         ids=["paper", "other", "narrow", "upper-tail"])
def test_sample_is_the_rounded_quantile_of_the_same_draws(dist):
    """sample() gives the integers of rint(quantile(u)) (scipy's ndtri) for the generator's u, exactly."""
    for seed, n in ((0, 1), (1, 5), (2, 3000), (3, 100_000)):
        u = np.random.default_rng(seed).random(n)
        want = np.clip(np.rint(np.asarray(dist.quantile(u))), math.ceil(dist.min_tokens),
                       math.floor(dist.max_tokens)).astype(np.int64)
        np.testing.assert_array_equal(dist.sample(n, np.random.default_rng(seed)), want)


class OnABoundary(TruncatedLogNormal):
    """The paper's lengths, but the Newton inverse puts draw 2 on a rounding boundary (k + 1/2 tokens);
    ``calls`` counts the exact quantiles computed (scipy's ndtri)."""

    calls: list[int] = []

    def _tokens(self, inverse, q):
        from prfaas_plan.workload import lengths

        tokens = super()._tokens(inverse, q)
        if inverse is lengths.ndtri_newton:
            tokens[2] = np.floor(tokens[2]) + 0.5
        else:
            self.calls.append(q.size)
        return tokens


def test_a_value_on_a_rounding_boundary_is_rounded_from_the_exact_quantiles():
    """rint_quantiles (and so sample) recomputes with scipy's ndtri when a value lies on k + 1/2;
    with every value clear of the boundaries, it never does."""
    from prfaas_plan.workload.lengths import rint_quantiles

    dist, u = OnABoundary(9.9, 1.0, 128, 131072), np.random.default_rng(5).random(4)
    exact = np.rint(np.asarray(paper_lengths().quantile(u)))
    OnABoundary.calls = []
    np.testing.assert_array_equal(dist.sample(4, np.random.default_rng(5)), exact.astype(np.int64))
    assert OnABoundary.calls == [4]
    OnABoundary.calls = []
    np.testing.assert_array_equal(rint_quantiles(dist, u, lambda x: x[[0, 1, 3]]), exact[[0, 1, 3]])
    assert OnABoundary.calls == []  # the value on the boundary was not kept: no exact quantile needed


def test_rint_quantiles_of_an_empirical_sample_is_its_rounded_quantile():
    from prfaas_plan.workload.lengths import rint_quantiles

    dist = EmpiricalLengths(np.array([3.0, 7.5, 9.5, 20.0]))
    np.testing.assert_array_equal(rint_quantiles(dist, [0.3, 0.5, 0.75], lambda x: x + 0.25), [8.0, 8.0, 10.0])


def test_geomspace_adds_at_most_then_ulps_to_its_ends_relative_error():
    """The bound rint_quantiles assumes for the threshold grid: ends moved by a relative delta move
    every point of np.geomspace by at most delta + THEN_ULPS ulp (relative)."""
    from prfaas_plan.workload.lengths import THEN_ULPS

    rng, eps = np.random.default_rng(3), np.finfo(float).eps
    worst_ulps = 0.0
    for _ in range(300):
        lo = rng.uniform(1.0, 5000.0)
        hi = lo * rng.uniform(2.0, 1e4)
        d_lo, d_hi = rng.uniform(-1e-13, 1e-13, 2)
        points = int(rng.integers(2, 500))
        base = np.geomspace(lo, hi, points)
        moved = np.geomspace(lo * (1 + d_lo), hi * (1 + d_hi), points)
        excess = np.abs(moved / base - 1.0) - max(abs(d_lo), abs(d_hi))
        worst_ulps = max(worst_ulps, float(np.max(excess)) / eps)
    assert worst_ulps < THEN_ULPS / 2, worst_ulps


def test_threshold_grid_is_the_grid_of_the_exact_quantiles():
    """planner.threshold_grid (rint_quantiles over np.geomspace) against the grid written out with
    quantile (scipy's ndtri), over random truncated log-normals, a sample and three grid sizes."""
    from types import SimpleNamespace

    from prfaas_plan.planner import T_GRID_QUANTILES, threshold_grid

    def exact(d, points):
        lo, hi = (float(d.quantile(q)) for q in T_GRID_QUANTILES)
        return np.unique(np.geomspace(max(lo, 1.0), max(hi, lo + 1.0), points).round())

    rng = np.random.default_rng(0)
    dists = [paper_lengths(), EmpiricalLengths(rng.integers(1, 100_000, 1000))]
    for _ in range(300):
        lo = rng.uniform(1, 2000)
        hi = lo * rng.uniform(1.5, 5000)
        dists.append(TruncatedLogNormal(rng.uniform(math.log(lo), math.log(hi)), rng.uniform(0.05, 3.0), lo, hi))
    for d in dists:
        for points in (400, 120, 7):
            np.testing.assert_array_equal(threshold_grid(SimpleNamespace(lengths=d), points), exact(d, points))


def test_sampling_does_not_import_scipy_special():
    import subprocess
    import sys

    code = ("import sys, types, numpy as np\nfrom prfaas_plan.workload import paper_lengths\n"
            "from prfaas_plan.planner import threshold_grid\n"
            "paper_lengths().sample(100_000, np.random.default_rng(0))\n"
            "threshold_grid(types.SimpleNamespace(lengths=paper_lengths()))\nprint('scipy.special' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False"]
