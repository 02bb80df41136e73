"""Request-length distributions: the truncated log-normal and the empirical lengths of a trace.

The planner (docs/design.md section 5) needs the distribution of a request's *uncached* prompt
length ``L`` (tokens): ``p = P(L > t)``, ``l_long = E[L | L > t]``, ``l_short = E[L | L <= t]`` for
the paper's Eqs. 3-8, and a bucketed version of it for the exact (MILP) mode, each bucket's
length being its partial mean. :class:`LengthDist` is that interface; :class:`TruncatedLogNormal`
(the paper's workload, :func:`paper_lengths`) gives every moment in closed form from the normal
CDF of ``scipy.special`` (``scipy.stats`` costs most of a second to import; ``scipy.special``'s
package 0.2-0.4 s CPU, so :func:`ndtr` is its ufunc loaded alone), and :class:`EmpiricalLengths`
gives the exact moments of a sample. Token counts are in tokens.

What only needs quantiles rounded to whole tokens (:meth:`~TruncatedLogNormal.sample`, the paper
mode's threshold grid) gets them from :func:`rint_quantiles`: the normal CDF inverted by Newton's
method, and scipy's :func:`ndtri` only where a value could round otherwise, so the integers are
those of the exact quantiles and the package is not imported.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Protocol, runtime_checkable

import numpy as np

from prfaas_plan.defaults import PAPER_MAX_TOKENS, PAPER_MIN_TOKENS, PAPER_MU_LOG_TOKENS, PAPER_SIGMA_LOG_TOKENS
from prfaas_plan.errors import InvalidInput

ArrayLike = float | int | np.ndarray | Sequence[float]
SQRT_2PI = math.sqrt(2.0 * math.pi)


@lru_cache(maxsize=1)
def _ndtr_ufunc() -> np.ufunc:
    """``scipy.special.ndtr``, the same ufunc object's code: loaded from the extension that holds it
    (``scipy.special._special_ufuncs``) on its own, without running ``scipy.special``'s package
    (its array-API layer clones all of numpy: 0.4 s CPU), which planning needs nothing else of.
    Through the package where this scipy lays it out otherwise."""
    from pathlib import Path

    import scipy

    from prfaas_plan.extensions import load_extension

    module = load_extension(Path(scipy.__file__).parent / "special", "_special_ufuncs",
                            "scipy.special._special_ufuncs")
    if isinstance(getattr(module, "ndtr", None), np.ufunc):
        return module.ndtr
    from scipy.special import ndtr as package_ndtr

    return package_ndtr


def ndtr(z: ArrayLike) -> np.ndarray:
    """The standard normal CDF Phi(z) (``scipy.special.ndtr``; an array, or a numpy float for a scalar)."""
    return _ndtr_ufunc()(z)


def ndtri(p: ArrayLike) -> np.ndarray:
    """The inverse of :func:`ndtr` (``scipy.special.ndtri``; imports the package, 0.2-0.4 s: only
    :meth:`TruncatedLogNormal.quantile` needs it, and :func:`rint_quantiles` rarely)."""
    from scipy.special import ndtri as package_ndtri

    return package_ndtri(p)


NEWTON_STEPS = 3
"""Newton steps of :func:`ndtri_newton`: from A&S's 4.5e-4 the error squares (times z / 2) each step,
to rounding after three, down to p = 1e-300 (z = -37); a fourth or fifth step changes nothing
(tests/test_lengths.py measures the agreement)."""
NDTRI_AGREE = 1e-13
"""Bound on ``|ndtri_newton(p) - ndtri(p)|`` (both within a few ulp of the true inverse of ``p``:
cephes' ndtri 7.2e-16 relative, Newton on ``ndtr`` to its rounding; the tests see under 1e-14)."""
THEN_ULPS = 64
"""Relative error, in ulp, that the ``then`` of :func:`rint_quantiles` may add to its inputs'
(``np.geomspace``'s log10, linspace and power: under 32 ulp, tests/test_lengths.py measures it)."""


def ndtri_newton(p: ArrayLike) -> np.ndarray:
    """The inverse of :func:`ndtr` to a few ulp, but not bit for bit :func:`ndtri`, without
    ``scipy.special``'s package: Newton's method on :func:`ndtr` (the exact ufunc) from Abramowitz
    & Stegun 26.2.23, on the lower half (``min(p, 1 - p)``, exact for ``p >= 0.5``) so that a tail
    keeps its relative precision. nan where ``p`` is not strictly inside (0, 1)."""
    p = np.asarray(p, dtype=float)
    lower = np.minimum(p, 1.0 - p)
    with np.errstate(all="ignore"):
        t = np.sqrt(-2.0 * np.log(lower))
        z = (2.515517 + t * (0.802853 + t * 0.010328)) / (1.0 + t * (1.432788 + t * (0.189269 + t * 0.001308))) - t
        for _ in range(NEWTON_STEPS):
            z = z - (ndtr(z) - lower) * SQRT_2PI * np.exp(0.5 * z * z)
    return np.where((p > 0.0) & (p < 1.0), np.where(p > 0.5, -z, z), np.nan)


@runtime_checkable
class LengthDist(Protocol):
    """A distribution of request lengths ``L`` in tokens.

    ``t`` arguments accept a scalar (the result is a float) or an array (the result is an array
    of the same shape). Conditional means of an empty side (``mean_above`` at or beyond the
    largest length, ``mean_below`` below the smallest) are ``nan``: there is no such request.
    """

    def mean_tokens(self) -> float:
        """E[L], tokens."""
        ...

    def tail_prob(self, t: ArrayLike) -> float | np.ndarray:
        """P(L > t), for t in tokens."""
        ...

    def mean_above(self, t: ArrayLike) -> float | np.ndarray:
        """E[L | L > t], tokens; nan where P(L > t) = 0."""
        ...

    def mean_below(self, t: ArrayLike) -> float | np.ndarray:
        """E[L | L <= t], tokens; nan where P(L <= t) = 0."""
        ...

    def buckets(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """At most ``n`` buckets: (representative lengths in tokens, probabilities).

        The representative length of a bucket is the conditional mean of L in it, so
        ``sum(probs * lengths) == E[L]`` and ``sum(probs) == 1`` (to rounding).
        """
        ...

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` lengths drawn from the distribution, as an int64 array of tokens."""
        ...

    def quantile(self, q: ArrayLike) -> float | np.ndarray:
        """The q-quantile of L in tokens, q in [0, 1]."""
        ...


def _like(result: np.ndarray, template: ArrayLike) -> float | np.ndarray:
    """Return a float when the caller passed a scalar, else the array."""
    return float(result) if np.ndim(template) == 0 else result


def _check_count(n: int, name: str) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise InvalidInput(f"{name}: {n!r} must be a positive integer")
    return int(n)


def _check_probs(q: ArrayLike) -> np.ndarray:
    q_arr = np.asarray(q, dtype=float)
    if not np.all((q_arr >= 0.0) & (q_arr <= 1.0)):
        raise InvalidInput(f"quantile: q={q!r} must lie in [0, 1]")
    return q_arr


def _normal_mass(z_lo: ArrayLike, z_hi: ArrayLike) -> np.ndarray:
    """P(z_lo < Z <= z_hi) for a standard normal Z (0 where z_hi <= z_lo).

    Above the median the difference is taken of survival functions, ``ndtr(-z)``, so that an
    interval deep in the upper tail does not cancel to 0 (as ``1 - 1`` would).
    """
    z_lo, z_hi = np.broadcast_arrays(np.asarray(z_lo, float), np.asarray(z_hi, float))
    prob = np.where(z_lo > 0.0, ndtr(-z_lo) - ndtr(-z_hi), ndtr(z_hi) - ndtr(z_lo))
    return np.clip(prob, 0.0, None)


# --------------------------------------------------------------------------------------------
# Truncated log-normal
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TruncatedLogNormal:
    """Log-normal lengths truncated (renormalised, not clipped) to [min_tokens, max_tokens].

    ``ln L ~ Normal(mu, sigma^2)`` conditioned on ``min_tokens <= L <= max_tokens``, i.e.
    ``scipy.stats.truncnorm`` in log space. With ``z(x) = (ln x - mu) / sigma``, the standard
    normal CDF Phi and the mass ``Z = Phi(z(max)) - Phi(z(min))``, every moment is a closed form:

    * ``P(a < L <= b) = (Phi(z(b)) - Phi(z(a))) / Z``
    * ``E[L^k; a < L <= b] = exp(k mu + k^2 sigma^2 / 2) (Phi(z(b) - k sigma) - Phi(z(a) - k sigma)) / Z``

    The distribution is continuous; :meth:`sample` rounds draws to whole tokens.

    mu, sigma: mean and standard deviation of ln(tokens).
    min_tokens, max_tokens: truncation bounds, tokens (1 <= min_tokens, min_tokens + 1 <= max_tokens).
    """

    mu: float
    sigma: float
    min_tokens: float
    max_tokens: float
    _mass: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("mu", "sigma", "min_tokens", "max_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not math.isfinite(value):
                raise InvalidInput(f"{name}: {value!r} must be a finite number")
        if self.sigma <= 0:
            raise InvalidInput(f"sigma: {self.sigma!r} must be > 0 (the spread of ln tokens)")
        if self.min_tokens < 1:
            raise InvalidInput(f"min_tokens: {self.min_tokens!r} must be at least 1 token")
        if self.max_tokens < self.min_tokens + 1:
            raise InvalidInput(
                f"max_tokens: {self.max_tokens!r} must be at least min_tokens + 1 = {self.min_tokens + 1}"
            )
        mass = float(_normal_mass(*self._z_bounds()))
        if mass <= 0.0:
            raise InvalidInput(
                f"mu={self.mu}, sigma={self.sigma}: the log-normal puts no probability in "
                f"[{self.min_tokens}, {self.max_tokens}] tokens; move mu inside ln of the bounds"
            )
        object.__setattr__(self, "_mass", mass)

    def _z_bounds(self) -> tuple[float, float]:
        """z of min_tokens and of max_tokens."""
        return ((math.log(self.min_tokens) - self.mu) / self.sigma, (math.log(self.max_tokens) - self.mu) / self.sigma)

    def _z(self, tokens: ArrayLike) -> np.ndarray:
        """z = (ln tokens - mu) / sigma, with tokens clipped to the support."""
        clipped = np.clip(np.asarray(tokens, dtype=float), self.min_tokens, self.max_tokens)
        return (np.log(clipped) - self.mu) / self.sigma

    def _prob_between(self, lo_tokens: ArrayLike, hi_tokens: ArrayLike) -> np.ndarray:
        """P(lo < L <= hi), bounds clipped to the support."""
        return _normal_mass(self._z(lo_tokens), self._z(hi_tokens)) / self._mass

    def _partial_moment(self, lo_tokens: ArrayLike, hi_tokens: ArrayLike, order: int = 1) -> np.ndarray:
        """E[L^order; lo < L <= hi] (tokens^order, not conditioned), bounds clipped to the support."""
        shift = order * self.sigma
        shifted = _normal_mass(self._z(lo_tokens) - shift, self._z(hi_tokens) - shift)
        return math.exp(order * self.mu + 0.5 * shift**2) * shifted / self._mass

    def _conditional_mean(self, lo_tokens: ArrayLike, hi_tokens: ArrayLike) -> np.ndarray:
        """E[L | lo < L <= hi], tokens; nan where the interval has no probability."""
        prob = self._prob_between(lo_tokens, hi_tokens)
        partial = self._partial_moment(lo_tokens, hi_tokens)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(prob > 0.0, partial / prob, np.nan)

    def mean_tokens(self) -> float:
        """E[L], tokens."""
        return self.moment(1)

    def moment(self, order: int) -> float:
        """E[L^order], tokens^order (order 2: the second moment, tokens^2)."""
        return float(self._partial_moment(self.min_tokens, self.max_tokens, order))

    def tail_prob(self, t: ArrayLike) -> float | np.ndarray:
        """P(L > t): 1 below min_tokens, 0 at and above max_tokens."""
        return _like(self._prob_between(t, self.max_tokens), t)

    def mean_above(self, t: ArrayLike) -> float | np.ndarray:
        """E[L | L > t], tokens; nan for t >= max_tokens (no request is longer)."""
        return _like(self._conditional_mean(t, self.max_tokens), t)

    def mean_below(self, t: ArrayLike) -> float | np.ndarray:
        """E[L | L <= t], tokens; nan for t <= min_tokens (no request is that short)."""
        return _like(self._conditional_mean(self.min_tokens, t), t)

    def bucket_edges(self, n: int) -> np.ndarray:
        """The ``n + 1`` log-spaced bucket edges (tokens) used by :meth:`buckets`."""
        n = _check_count(n, "buckets")
        return np.geomspace(self.min_tokens, self.max_tokens, n + 1)

    def buckets(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``n`` buckets with log-spaced edges from min_tokens to max_tokens.

        Bucket k covers (edge_k, edge_k+1]; its probability and conditional mean are closed
        forms, so E[L] = sum(probs * lengths) holds to rounding. A bucket of no probability
        (far in a tail) is represented by its geometric midpoint.
        """
        edges = self.bucket_edges(n)
        probs = self._prob_between(edges[:-1], edges[1:])
        lengths = self._conditional_mean(edges[:-1], edges[1:])
        return np.where(probs > 0.0, lengths, np.sqrt(edges[:-1] * edges[1:])), probs

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` draws by inverse CDF, rounded to whole tokens (int64) inside the bounds: the
        integers of ``rint(quantile(rng.random(n)))``, exactly (by :func:`rint_quantiles`).
        Rounding moves the mean by well under 0.5 token."""
        draws = rint_quantiles(self, rng.random(_check_count(n, "sample")))
        return np.clip(draws, math.ceil(self.min_tokens), math.floor(self.max_tokens)).astype(np.int64)

    def skip(self, n: int, rng: np.random.Generator) -> None:
        """Advance ``rng`` exactly as :meth:`sample` would (its ``n`` uniforms), computing no lengths."""
        rng.random(_check_count(n, "sample"))

    def _tokens(self, inverse, q_arr: np.ndarray) -> np.ndarray:
        """Inverse CDF with ``inverse`` as the inverse of :func:`ndtr`, tokens (an array)."""
        z_min, _ = self._z_bounds()
        if z_min > 0.0:  # whole support in the upper tail: invert the survival function
            z = -inverse(ndtr(-z_min) - q_arr * self._mass)
        else:
            z = inverse(ndtr(z_min) + q_arr * self._mass)
        return np.clip(np.exp(self.mu + self.sigma * z), self.min_tokens, self.max_tokens)

    def quantile(self, q: ArrayLike) -> float | np.ndarray:
        """Inverse CDF, tokens; q = 0 gives min_tokens, q = 1 gives max_tokens."""
        return _like(self._tokens(ndtri, _check_probs(q)), q)


def rint_quantiles(dist: LengthDist, q: ArrayLike,
                   then: Callable[[np.ndarray], np.ndarray] = np.asarray) -> np.ndarray:
    """``np.rint(then(dist.quantile(q)))``, exactly, without importing ``scipy.special`` unless a
    value lies on (within its error bound of) a rounding boundary.

    For a :class:`TruncatedLogNormal` the quantiles are first computed with :func:`ndtri_newton`,
    within :data:`NDTRI_AGREE` of :func:`ndtri` in z, so within ``x (sigma NDTRI_AGREE + 4 ulp)``
    of the exact ``x = exp(mu + sigma z)`` tokens; ``then`` (quantiles in tokens to the values to
    round, an array) may add :data:`THEN_ULPS` to their relative error. Where every value lies
    more than ten times its bound from k + 1/2, it rounds as the exact one does; otherwise all is
    computed again from ``dist.quantile``. Other distributions: ``dist.quantile`` directly.
    """
    q_arr = _check_probs(q)
    if isinstance(dist, TruncatedLogNormal):
        values = np.asarray(then(dist._tokens(ndtri_newton, q_arr)), dtype=float)
        rel = dist.sigma * NDTRI_AGREE + (4 + THEN_ULPS) * np.finfo(float).eps
        if np.all(np.abs(values - np.floor(values) - 0.5) > 10.0 * rel * np.abs(values)):  # nan: False
            return np.rint(values)
    return np.rint(np.asarray(then(np.asarray(dist.quantile(q_arr), dtype=float)), dtype=float))


def paper_lengths() -> TruncatedLogNormal:
    """The PrfaaS paper's input lengths: ln-mean 9.90, ln-sd 1.00, truncated to [128, 131072] tokens.

    Its mean is 27,486 tokens (26.8K with K = 1024); the untruncated log-normal's would be
    exp(10.4) = 32,860 tokens. 2.98% of the untruncated mass lies outside the bounds.
    """
    return TruncatedLogNormal(PAPER_MU_LOG_TOKENS, PAPER_SIGMA_LOG_TOKENS, PAPER_MIN_TOKENS, PAPER_MAX_TOKENS)


# --------------------------------------------------------------------------------------------
# Empirical lengths
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False, repr=False)
class EmpiricalLengths:
    """The empirical distribution of a sample of lengths (tokens): each value has mass 1/n.

    Moments are exact sums over the sample (prefix sums of the sorted sample, in float64, which
    is exact for integer token counts up to 2**53 in total). ``tokens`` is stored sorted and
    read-only.
    """

    tokens: np.ndarray
    _prefix_sum_tokens: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        try:
            values = np.asarray(self.tokens, dtype=float)
        except (TypeError, ValueError):
            raise InvalidInput("tokens: lengths must be numbers of tokens") from None
        if values.ndim != 1 or values.size == 0:
            raise InvalidInput(f"tokens: give a non-empty 1-D array of lengths (got shape {values.shape})")
        if not np.all(np.isfinite(values)) or np.any(values < 0):
            raise InvalidInput("tokens: lengths must be finite and non-negative numbers of tokens")
        ordered = np.sort(values)
        ordered.setflags(write=False)
        prefix = np.concatenate([[0.0], np.cumsum(ordered)])
        prefix.setflags(write=False)
        object.__setattr__(self, "tokens", ordered)
        object.__setattr__(self, "_prefix_sum_tokens", prefix)

    def __repr__(self) -> str:
        return f"EmpiricalLengths(n={self.tokens.size}, mean_tokens={self.mean_tokens():.1f})"

    def _count_at_most(self, t: ArrayLike) -> np.ndarray:
        return np.searchsorted(self.tokens, np.asarray(t, dtype=float), side="right")

    def mean_tokens(self) -> float:
        """E[L], tokens: the sample mean."""
        return float(self._prefix_sum_tokens[-1] / self.tokens.size)

    def tail_prob(self, t: ArrayLike) -> float | np.ndarray:
        """P(L > t): the fraction of the sample strictly longer than t."""
        n = self.tokens.size
        return _like((n - self._count_at_most(t)) / n, t)

    def mean_above(self, t: ArrayLike) -> float | np.ndarray:
        """E[L | L > t], tokens; nan where no sample is longer than t."""
        k = self._count_at_most(t)
        count = self.tokens.size - k
        total = self._prefix_sum_tokens[-1] - self._prefix_sum_tokens[k]
        with np.errstate(invalid="ignore", divide="ignore"):
            result = np.where(count > 0, total / count, np.nan)
        return _like(result, t)

    def mean_below(self, t: ArrayLike) -> float | np.ndarray:
        """E[L | L <= t], tokens; nan where no sample is that short."""
        k = self._count_at_most(t)
        with np.errstate(invalid="ignore", divide="ignore"):
            result = np.where(k > 0, self._prefix_sum_tokens[k] / k, np.nan)
        return _like(result, t)

    def buckets(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """At most ``n`` buckets, each a contiguous range of lengths.

        If the sample has at most ``n`` distinct values, one bucket per value (exact). Otherwise
        the sorted sample is cut at the k/n quantiles into buckets of about equal probability;
        a cut that would split equal values moves to the start of their run (so a bucket is all
        samples in a length interval, and there may be fewer than ``n`` buckets). The
        representative length is the bucket's sample mean, so sum(probs * lengths) is the sample
        mean exactly (to float rounding).
        """
        n = _check_count(n, "buckets")
        size = self.tokens.size
        values, counts = np.unique(self.tokens, return_counts=True)
        if values.size <= n:
            return values.astype(float), counts / size
        targets = np.round(np.arange(1, n) * size / n).astype(np.int64)
        cuts = np.searchsorted(self.tokens, self.tokens[targets], side="left")
        at_start = cuts == 0
        cuts[at_start] = np.searchsorted(self.tokens, self.tokens[targets[at_start]], side="right")
        bounds = np.unique(np.concatenate([[0], cuts[(cuts > 0) & (cuts < size)], [size]]))
        sizes = np.diff(bounds)
        sums = np.diff(self._prefix_sum_tokens[bounds])
        return sums / sizes, sizes / size

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` draws with replacement from the sample, rounded to whole tokens (int64)."""
        n = _check_count(n, "sample")
        return np.rint(rng.choice(self.tokens, size=n, replace=True)).astype(np.int64)

    def quantile(self, q: ArrayLike) -> float | np.ndarray:
        """The smallest sample value x with P(L <= x) >= q (inverse of the empirical CDF)."""
        q_arr = _check_probs(q)
        return _like(np.quantile(self.tokens, q_arr, method="inverted_cdf"), q)
