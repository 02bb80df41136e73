"""Workloads: request-length distributions, trace loading and prefix-cache replay.

The planner (docs/design.md section 5) needs the distribution of a request's *uncached* prompt length
``L`` (tokens): ``p = P(L > t)``, ``l_long = E[L | L > t]``, ``l_short = E[L | L <= t]`` for the
paper's Eqs. 3-8, and a bucketed version of the distribution for the exact (MILP) mode. The
simulator (section 6) replays real traces. This module provides:

* :class:`LengthDist`, the common interface, with two implementations:
  :class:`TruncatedLogNormal` (closed-form partial moments; the paper's workload is
  :func:`paper_lengths`) and :class:`EmpiricalLengths` (exact moments of a sample);
* :func:`load_trace` for Mooncake JSONL, Azure LLM 2023 CSV and generic CSV traces;
* :func:`prefix_cache_replay` / :func:`uncached_lengths`, an LRU prefix cache over Mooncake
  ``hash_ids`` that turns prompt lengths into uncached lengths;
* :class:`Workload` and its constructors :func:`paper_workload` and :func:`workload_from_trace`.

Units: token counts are in tokens, times in seconds, rates in requests per second. Every
function is pure; nothing here keeps global state.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
import pandas as pd
from scipy import stats

from prfaas_plan.defaults import (
    PAPER_MAX_TOKENS,
    PAPER_MIN_TOKENS,
    PAPER_MU_LOG_TOKENS,
    PAPER_OUTPUT_TOKENS,
    PAPER_SIGMA_LOG_TOKENS,
)
from prfaas_plan.errors import InvalidInput, did_you_mean

MOONCAKE_BLOCK_TOKENS = 512  # tokens covered by one Mooncake hash id
MS_PER_S = 1000.0

TRACE_FORMATS: tuple[str, ...] = ("auto", "mooncake", "azure", "csv")
TRACE_COLUMNS: tuple[str, ...] = ("arrival_s", "input_tokens", "output_tokens")
_MOONCAKE_FIELDS: tuple[str, ...] = ("timestamp", "input_length", "output_length", "hash_ids")
_AZURE_COLUMNS: tuple[str, ...] = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")

# Composite Gauss-Legendre rule used by TruncatedLogNormal.expect.
_GL_NODES_PER_PANEL = 16
_GL_PANELS_UNIFORM_Z = 64
_GL_PANELS_EQUAL_MASS = 64

ArrayLike = float | int | np.ndarray | Sequence[float]


# --------------------------------------------------------------------------------------------
# The common interface
# --------------------------------------------------------------------------------------------


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

    def expect(
        self, f: Callable[[np.ndarray], np.ndarray], breakpoints_tokens: Sequence[float] = ()
    ) -> float:
        """E[f(L)] for a vectorised ``f(tokens array) -> array``.

        ``breakpoints_tokens`` names lengths where ``f`` jumps or has a kink (a routing threshold,
        a profile's grid points); continuous distributions integrate piecewise between them.
        """
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


def _norm_interval(z_lo: np.ndarray, z_hi: np.ndarray) -> np.ndarray:
    """P(z_lo < Z <= z_hi) for a standard normal Z, accurate in both tails (0 where z_hi <= z_lo)."""
    z_lo, z_hi = np.broadcast_arrays(np.asarray(z_lo, float), np.asarray(z_hi, float))
    upper_tail = z_lo > 0.0
    prob = np.where(
        upper_tail,
        stats.norm.sf(z_lo) - stats.norm.sf(z_hi),
        stats.norm.cdf(z_hi) - stats.norm.cdf(z_lo),
    )
    return np.clip(prob, 0.0, None)


# --------------------------------------------------------------------------------------------
# Truncated log-normal
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TruncatedLogNormal:
    """Log-normal lengths truncated (renormalised, not clipped) to [min_tokens, max_tokens].

    ``ln L ~ Normal(mu, sigma^2)`` conditioned on ``min_tokens <= L <= max_tokens``. All moments
    are closed forms in the standard normal CDF Phi. With ``z(x) = (ln x - mu) / sigma`` and mass
    ``Z = Phi(z(max)) - Phi(z(min))``:

    * ``P(a < L <= b) = (Phi(z(b)) - Phi(z(a))) / Z``
    * ``E[L; a < L <= b] = exp(mu + sigma^2/2) * (Phi(z(b) - sigma) - Phi(z(a) - sigma)) / Z``

    The distribution is continuous; :meth:`sample` rounds draws to whole tokens.

    mu, sigma: mean and standard deviation of ln(tokens).
    min_tokens, max_tokens: truncation bounds, tokens (1 <= min_tokens, min_tokens + 1 <= max_tokens).
    """

    mu: float
    sigma: float
    min_tokens: float
    max_tokens: float

    def __post_init__(self) -> None:
        for name in ("mu", "sigma", "min_tokens", "max_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
                raise InvalidInput(f"{name}: {value!r} must be a number")
            if not math.isfinite(value):
                raise InvalidInput(f"{name}: {value!r} must be finite")
        if self.sigma <= 0:
            raise InvalidInput(f"sigma: {self.sigma!r} must be > 0 (the spread of ln tokens)")
        if self.min_tokens < 1:
            raise InvalidInput(f"min_tokens: {self.min_tokens!r} must be at least 1 token")
        if self.max_tokens < self.min_tokens + 1:
            raise InvalidInput(
                f"max_tokens: {self.max_tokens!r} must be at least min_tokens + 1 = {self.min_tokens + 1}"
            )
        if self._mass() <= 0.0:
            raise InvalidInput(
                f"mu={self.mu}, sigma={self.sigma}: the log-normal puts no probability in "
                f"[{self.min_tokens}, {self.max_tokens}] tokens; move mu inside ln of the bounds"
            )

    # -- helpers in z = (ln tokens - mu) / sigma ------------------------------------------------

    def _z(self, tokens: np.ndarray) -> np.ndarray:
        clipped = np.clip(np.asarray(tokens, dtype=float), self.min_tokens, self.max_tokens)
        return (np.log(clipped) - self.mu) / self.sigma

    def _z_bounds(self) -> tuple[float, float]:
        return (
            (math.log(self.min_tokens) - self.mu) / self.sigma,
            (math.log(self.max_tokens) - self.mu) / self.sigma,
        )

    def _mass(self) -> float:
        z_min, z_max = self._z_bounds()
        return float(_norm_interval(z_min, z_max))

    def _prob_between(self, lo_tokens: ArrayLike, hi_tokens: ArrayLike) -> np.ndarray:
        """P(lo < L <= hi), bounds clipped to the support."""
        return _norm_interval(self._z(lo_tokens), self._z(hi_tokens)) / self._mass()

    def _partial_mean_between(self, lo_tokens: ArrayLike, hi_tokens: ArrayLike) -> np.ndarray:
        """E[L; lo < L <= hi] (tokens, not conditioned), bounds clipped to the support."""
        shifted = _norm_interval(self._z(lo_tokens) - self.sigma, self._z(hi_tokens) - self.sigma)
        return math.exp(self.mu + 0.5 * self.sigma**2) * shifted / self._mass()

    # -- LengthDist -------------------------------------------------------------------------

    def mean_tokens(self) -> float:
        """E[L], tokens (closed form)."""
        return float(self._partial_mean_between(self.min_tokens, self.max_tokens))

    def tail_prob(self, t: ArrayLike) -> float | np.ndarray:
        """P(L > t): 1 below min_tokens, 0 at and above max_tokens."""
        return _like(self._prob_between(t, self.max_tokens), t)

    def mean_above(self, t: ArrayLike) -> float | np.ndarray:
        """E[L | L > t], tokens; nan for t >= max_tokens (no request is longer)."""
        prob = self._prob_between(t, self.max_tokens)
        partial = self._partial_mean_between(t, self.max_tokens)
        with np.errstate(invalid="ignore", divide="ignore"):
            result = np.where(prob > 0.0, partial / prob, np.nan)
        return _like(result, t)

    def mean_below(self, t: ArrayLike) -> float | np.ndarray:
        """E[L | L <= t], tokens; nan for t <= min_tokens (no request is that short)."""
        prob = self._prob_between(self.min_tokens, t)
        partial = self._partial_mean_between(self.min_tokens, t)
        with np.errstate(invalid="ignore", divide="ignore"):
            result = np.where(prob > 0.0, partial / prob, np.nan)
        return _like(result, t)

    def expect(
        self, f: Callable[[np.ndarray], np.ndarray], breakpoints_tokens: Sequence[float] = ()
    ) -> float:
        """E[f(L)] by composite Gauss-Legendre quadrature in z = (ln L - mu) / sigma.

        Panels: 64 of equal width in z, 64 of equal probability, and a split at every
        breakpoint; 16 nodes each (at most about 2,100 evaluations of ``f``). For smooth ``f``
        the result is exact to about 1e-12 relative. A jump of ``f`` that is not named in
        ``breakpoints_tokens`` costs at most about (jump) x (1/64) / 2.
        """
        z_min, z_max = self._z_bounds()
        mass = self._mass()
        equal_mass_z = stats.norm.ppf(
            stats.norm.cdf(z_min) + mass * np.linspace(0.0, 1.0, _GL_PANELS_EQUAL_MASS + 1)
        )
        breaks_z = self._z(np.asarray(breakpoints_tokens, dtype=float).ravel())
        edges_z = np.unique(
            np.concatenate(
                [
                    np.linspace(z_min, z_max, _GL_PANELS_UNIFORM_Z + 1),
                    equal_mass_z[np.isfinite(equal_mass_z)],
                    breaks_z,
                ]
            ).clip(z_min, z_max)
        )
        nodes, weights = np.polynomial.legendre.leggauss(_GL_NODES_PER_PANEL)
        half_width = 0.5 * np.diff(edges_z)[:, None]
        centre = 0.5 * (edges_z[1:] + edges_z[:-1])[:, None]
        z = (centre + half_width * nodes[None, :]).ravel()
        w = (half_width * weights[None, :]).ravel()
        tokens = np.exp(self.mu + self.sigma * z)
        values = np.broadcast_to(np.asarray(f(tokens), dtype=float), tokens.shape)
        return float(np.sum(w * stats.norm.pdf(z) * values) / mass)

    def bucket_edges(self, n: int) -> np.ndarray:
        """The ``n + 1`` log-spaced bucket edges (tokens) used by :meth:`buckets`."""
        n = _check_count(n, "buckets")
        return np.geomspace(self.min_tokens, self.max_tokens, n + 1)

    def buckets(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``n`` buckets with log-spaced edges from min_tokens to max_tokens.

        Bucket k covers (edge_k, edge_k+1]; its probability and conditional mean are closed
        forms, so E[L] = sum(probs * lengths) holds to rounding.
        """
        edges = self.bucket_edges(n)
        probs = self._prob_between(edges[:-1], edges[1:])
        partial = self._partial_mean_between(edges[:-1], edges[1:])
        midpoints = np.sqrt(edges[:-1] * edges[1:])
        with np.errstate(invalid="ignore", divide="ignore"):
            lengths = np.where(probs > 0.0, partial / probs, midpoints)
        return lengths, probs

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` draws by inverse CDF, rounded to whole tokens (int64) inside the bounds.

        Rounding to the nearest token moves the mean by well under 0.5 token.
        """
        n = _check_count(n, "sample")
        draws = np.asarray(self.quantile(rng.random(n)))
        lo, hi = math.ceil(self.min_tokens), math.floor(self.max_tokens)
        return np.clip(np.rint(draws), lo, hi).astype(np.int64)

    def quantile(self, q: ArrayLike) -> float | np.ndarray:
        """Inverse CDF, tokens; q = 0 gives min_tokens, q = 1 gives max_tokens."""
        q_arr = _check_probs(q)
        z_min, _ = self._z_bounds()
        mass = self._mass()
        if z_min > 0.0:  # whole support in the upper tail: work with survival functions
            z = stats.norm.isf(stats.norm.sf(z_min) - q_arr * mass)
        else:
            z = stats.norm.ppf(stats.norm.cdf(z_min) + q_arr * mass)
        tokens = np.clip(np.exp(self.mu + self.sigma * z), self.min_tokens, self.max_tokens)
        return _like(tokens, q)


def paper_lengths() -> TruncatedLogNormal:
    """The PrfaaS paper's input lengths: ln-mean 9.90, ln-sd 1.00, truncated to [128, 131072] tokens.

    Its mean is 27,486 tokens (26.8K with K = 1024); the untruncated log-normal's would be
    exp(10.4) = 32,860 tokens. 2.98% of the untruncated mass lies outside the bounds.
    """
    return TruncatedLogNormal(
        PAPER_MU_LOG_TOKENS, PAPER_SIGMA_LOG_TOKENS, PAPER_MIN_TOKENS, PAPER_MAX_TOKENS
    )


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

    def expect(
        self, f: Callable[[np.ndarray], np.ndarray], breakpoints_tokens: Sequence[float] = ()
    ) -> float:
        """E[f(L)]: the mean of f over the sample (exact; ``breakpoints_tokens`` is not needed)."""
        values = np.broadcast_to(np.asarray(f(self.tokens), dtype=float), self.tokens.shape)
        return float(values.mean())

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


# --------------------------------------------------------------------------------------------
# Traces
# --------------------------------------------------------------------------------------------


def _token_column(
    raw: Sequence[object] | pd.Series,
    path: Path,
    column: str,
    line_numbers: np.ndarray,
    minimum_tokens: int,
) -> np.ndarray:
    """Validate a column of token counts: whole numbers >= minimum_tokens; int64 array."""
    raw_series = pd.Series(list(raw) if not isinstance(raw, pd.Series) else raw.to_list(), dtype=object)
    numeric = pd.to_numeric(raw_series, errors="coerce").to_numpy(dtype=float)
    fixes = f"token counts must be whole numbers >= {minimum_tokens}"
    checks = (
        (~np.isfinite(numeric), "is not a number"),
        (numeric < 0, "is negative"),
        (numeric != np.round(numeric), "is not a whole number"),
        (numeric < minimum_tokens, f"is below {minimum_tokens}"),
    )
    for bad, what in checks:
        if bad.any():
            i = int(np.argmax(bad))
            raise InvalidInput(
                f"{path}: column {column!r}, line {line_numbers[i]}: {raw_series.iloc[i]!r} {what}; {fixes}"
            )
    return numeric.astype(np.int64)


def _seconds_column(raw: Sequence[object] | pd.Series, path: Path, column: str, line_numbers: np.ndarray, scale_s: float) -> np.ndarray:
    """Validate a numeric time column and convert it to float seconds (value * scale_s)."""
    raw_series = pd.Series(list(raw) if not isinstance(raw, pd.Series) else raw.to_list(), dtype=object)
    numeric = pd.to_numeric(raw_series, errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(numeric)
    if bad.any():
        i = int(np.argmax(bad))
        raise InvalidInput(
            f"{path}: column {column!r}, line {line_numbers[i]}: {raw_series.iloc[i]!r} is not a number; "
            "arrival times must be numbers"
        )
    return numeric * scale_s


def _read_mooncake(path: Path) -> pd.DataFrame:
    """Mooncake JSONL: one object per line with timestamp (ms), input_length, output_length, hash_ids."""
    records: list[dict] = []
    line_numbers: list[int] = []
    with path.open(encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise InvalidInput(
                    f"{path}: line {line_number} is not valid JSON ({err.msg}); "
                    "Mooncake traces have one JSON object per line"
                ) from None
            if not isinstance(record, dict):
                raise InvalidInput(f"{path}: line {line_number} is not a JSON object; Mooncake traces have one object per line")
            for name in _MOONCAKE_FIELDS:
                if name not in record:
                    raise InvalidInput(
                        f"{path}: line {line_number} has no {name!r} field; Mooncake traces need "
                        f"{', '.join(_MOONCAKE_FIELDS)} (or use fmt='csv' with columns=...)"
                    )
            records.append(record)
            line_numbers.append(line_number)
    if not records:
        raise InvalidInput(f"{path}: no requests in the file; give a trace with at least one request")
    lines = np.asarray(line_numbers)
    timestamps_ms = _seconds_column([r["timestamp"] for r in records], path, "timestamp", lines, 1.0)
    hash_ids: list[list[int]] = []
    for record, line_number in zip(records, line_numbers):
        ids = record["hash_ids"]
        if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in ids):
            raise InvalidInput(
                f"{path}: column 'hash_ids', line {line_number}: {ids!r} is not a list of integers; "
                "hash_ids must be a JSON list of block hash integers"
            )
        hash_ids.append(ids)
    return pd.DataFrame(
        {
            "arrival_s": (timestamps_ms - timestamps_ms.min()) / MS_PER_S,
            "input_tokens": _token_column([r["input_length"] for r in records], path, "input_length", lines, 1),
            "output_tokens": _token_column([r["output_length"] for r in records], path, "output_length", lines, 0),
            "hash_ids": pd.Series(hash_ids, dtype=object),
        }
    )


def _read_csv_text(path: Path) -> pd.DataFrame:
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:
        raise InvalidInput(f"{path}: the file is empty; give a CSV trace with a header row") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise InvalidInput(f"{path}: not a readable CSV ({first_line}); check the file") from None
    if frame.empty:
        raise InvalidInput(f"{path}: no requests in the file; give a trace with at least one request")
    return frame


def _require_columns(frame: pd.DataFrame, path: Path, wanted: Sequence[str], fix: str) -> None:
    present = [str(c) for c in frame.columns]
    for name in wanted:
        if name not in present:
            raise InvalidInput(
                f"{path}: no column {name!r}{did_you_mean(name, present)} "
                f"(the file has {', '.join(present)}); {fix}"
            )


def _read_azure(path: Path) -> pd.DataFrame:
    """Azure LLM inference trace 2023: TIMESTAMP (datetime string), ContextTokens, GeneratedTokens."""
    frame = _read_csv_text(path)
    _require_columns(
        frame,
        path,
        _AZURE_COLUMNS,
        "Azure LLM 2023 traces have TIMESTAMP, ContextTokens, GeneratedTokens; "
        "for other CSVs use fmt='csv' with columns={'arrival_s': ..., 'input_tokens': ..., 'output_tokens': ...}",
    )
    lines = np.arange(len(frame)) + 2  # line 1 is the header
    stamps = pd.to_datetime(frame["TIMESTAMP"], format="ISO8601", errors="coerce")
    if stamps.isna().any():
        i = int(np.argmax(stamps.isna().to_numpy()))
        raise InvalidInput(
            f"{path}: column 'TIMESTAMP', line {lines[i]}: {frame['TIMESTAMP'].iloc[i]!r} is not a date-time; "
            "use e.g. 2023-11-16 18:15:46.6805900"
        )
    arrival_s = (stamps - stamps.min()).dt.total_seconds().to_numpy(dtype=float)
    return pd.DataFrame(
        {
            "arrival_s": arrival_s,
            "input_tokens": _token_column(frame["ContextTokens"], path, "ContextTokens", lines, 1),
            "output_tokens": _token_column(frame["GeneratedTokens"], path, "GeneratedTokens", lines, 0),
        }
    )


def _read_generic_csv(path: Path, columns: Mapping[str, str] | None) -> pd.DataFrame:
    """A CSV with arrival times in seconds and token counts, under names given by ``columns``."""
    mapping = {name: name for name in TRACE_COLUMNS}
    for key, source in (columns or {}).items():
        if key not in TRACE_COLUMNS:
            raise InvalidInput(
                f"columns: {key!r} is not a trace column{did_you_mean(key, list(TRACE_COLUMNS))}; "
                f"map {', '.join(TRACE_COLUMNS)} to the file's column names"
            )
        mapping[key] = str(source)
    frame = _read_csv_text(path)
    present = [str(c) for c in frame.columns]
    for key, source in mapping.items():
        if source not in present:
            raise InvalidInput(
                f"{path}: no column {source!r} for {key}{did_you_mean(source, present)} "
                f"(the file has {', '.join(present)}); pass columns={{{key!r}: '<column name>'}}"
            )
    lines = np.arange(len(frame)) + 2
    arrival_s = _seconds_column(frame[mapping["arrival_s"]], path, mapping["arrival_s"], lines, 1.0)
    return pd.DataFrame(
        {
            "arrival_s": arrival_s - arrival_s.min(),
            "input_tokens": _token_column(frame[mapping["input_tokens"]], path, mapping["input_tokens"], lines, 1),
            "output_tokens": _token_column(frame[mapping["output_tokens"]], path, mapping["output_tokens"], lines, 0),
        }
    )


def _detect_format(path: Path, columns: Mapping[str, str] | None) -> str:
    """Guess the format from the content: a JSON object per line is Mooncake, else a CSV header."""
    with path.open(encoding="utf-8", errors="replace") as handle:
        first = next((line for line in handle if line.strip()), "")
    if first.lstrip().startswith("{"):
        return "mooncake"
    if columns is not None:
        return "csv"
    header = {name.strip().strip('"') for name in first.strip().split(",")}
    if set(_AZURE_COLUMNS) <= header:
        return "azure"
    if set(TRACE_COLUMNS) <= header:
        return "csv"
    raise InvalidInput(
        f"{path}: cannot tell the trace format from its first line; pass fmt='mooncake', 'azure' or "
        "'csv' (with columns={'arrival_s': ..., 'input_tokens': ..., 'output_tokens': ...})"
    )


def load_trace(
    path: str | Path, fmt: str = "auto", columns: Mapping[str, str] | None = None
) -> pd.DataFrame:
    """Read a request trace into a DataFrame sorted by arrival (ties keep file order).

    Columns: ``arrival_s`` (float, seconds since the first request), ``input_tokens`` and
    ``output_tokens`` (int64 tokens; input >= 1, output >= 0), and for Mooncake traces
    ``hash_ids`` (list of int per request: prefix block hashes, 512 tokens per block).
    ``frame.attrs`` records ``path`` and ``format``.

    fmt: ``"mooncake"`` (JSONL: ``timestamp`` in ms, ``input_length``, ``output_length``,
        ``hash_ids``), ``"azure"`` (Azure LLM 2023 CSV: ``TIMESTAMP`` date-times,
        ``ContextTokens``, ``GeneratedTokens``), ``"csv"`` (generic: arrival in seconds), or
        ``"auto"`` (JSON lines -> mooncake; a CSV header with the Azure names -> azure; else csv
        when ``columns`` is given or the header has the canonical names).
    columns: for ``fmt="csv"``, the file's column name for each of ``arrival_s``,
        ``input_tokens``, ``output_tokens`` (unmapped ones default to those names).

    Raises :class:`PlanError` (one line naming the file, column and line, and the fix) for a
    missing file, unknown format, missing column, or a non-numeric, fractional or negative value.
    """
    file_path = Path(path)
    if fmt not in TRACE_FORMATS:
        raise InvalidInput(
            f"fmt: {fmt!r} is not a trace format{did_you_mean(str(fmt), list(TRACE_FORMATS))}; "
            f"use one of {', '.join(TRACE_FORMATS)}"
        )
    if not file_path.is_file():
        raise InvalidInput(f"{file_path}: no such trace file; check the path")
    if fmt == "auto":
        fmt = _detect_format(file_path, columns)
    if columns is not None and fmt != "csv":
        raise InvalidInput(f"columns: only applies to fmt='csv'; {file_path} is read as {fmt!r}, drop columns=")
    if fmt == "mooncake":
        frame = _read_mooncake(file_path)
    elif fmt == "azure":
        frame = _read_azure(file_path)
    else:
        frame = _read_generic_csv(file_path, columns)
    if not frame["arrival_s"].is_monotonic_increasing:
        frame = frame.sort_values("arrival_s", kind="stable").reset_index(drop=True)
    frame.attrs = {"path": str(file_path), "format": fmt}
    return frame


# --------------------------------------------------------------------------------------------
# Prefix caching
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class PrefixReplay:
    """Result of replaying a trace through an LRU prefix cache (arrays in the trace's row order).

    uncached_tokens: tokens each request must prefill (input - hit, at least 1), int64.
    hit_tokens: leading tokens each request found in the cache, int64.
    token_hit_rate: sum(hit_tokens) / sum(input_tokens).
    request_hit_rate: fraction of requests with hit_tokens > 0.
    evicted_blocks: blocks the LRU dropped over the replay.
    """

    uncached_tokens: np.ndarray
    hit_tokens: np.ndarray
    token_hit_rate: float
    request_hit_rate: float
    evicted_blocks: int


class LRUPrefixCache:
    """An incremental LRU cache of prefix blocks, keyed by Mooncake ``hash_ids``.

    capacity_blocks: None = unlimited, 0 = caching off (no hits, nothing stored).
    A request's hit is its longest run of *leading* blocks present (a block after a miss does not
    count: its KV depends on everything before it); inserting refreshes a request's blocks tail
    first, so its head ends most recently used and its tail is evicted first (as vLLM frees blocks
    in reverse order); eviction happens after the whole request is inserted.
    """

    __slots__ = ("capacity_blocks", "_blocks", "evicted_blocks")

    def __init__(self, capacity_blocks: int | None) -> None:
        self.capacity_blocks = capacity_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self.evicted_blocks = 0

    @property
    def enabled(self) -> bool:
        return self.capacity_blocks != 0

    def __len__(self) -> int:
        return len(self._blocks)

    def hit_blocks(self, hash_ids: Sequence[int]) -> int:
        """Number of leading blocks present."""
        blocks = self._blocks
        hits = 0
        for h in hash_ids:
            if h not in blocks:
                break
            hits += 1
        return hits

    def insert(self, hash_ids: Sequence[int]) -> None:
        """Insert or refresh a request's blocks, tail first, then evict least recently used."""
        if self.capacity_blocks == 0:
            return
        blocks = self._blocks
        for h in reversed(hash_ids):
            if h in blocks:
                blocks.move_to_end(h)
            else:
                blocks[h] = None
        cap = self.capacity_blocks
        if cap is not None:
            while len(blocks) > cap:
                blocks.popitem(last=False)
                self.evicted_blocks += 1


def _hash_ids(trace: pd.DataFrame) -> list:
    if "hash_ids" not in trace.columns:
        source = trace.attrs.get("path", "trace")
        raise InvalidInput(
            f"{source}: no 'hash_ids' column, so prefix caching cannot be replayed; "
            "use a Mooncake trace or pass capacity_blocks=0 (no caching)"
        )
    return trace["hash_ids"].to_list()


def _arrival_order(trace: pd.DataFrame) -> np.ndarray:
    """Row indices in arrival order (ties keep row order)."""
    if "arrival_s" in trace.columns:
        return np.argsort(trace["arrival_s"].to_numpy(dtype=float), kind="stable")
    return np.arange(len(trace))


@dataclass(frozen=True, eq=False)
class SplitReplay:
    """Replay through one prefix cache per cluster, routed by a length threshold.

    local_uncached_tokens: each request's uncached length against the local cluster's cache
        (what the router sees).
    remote_uncached_tokens: its uncached length against the PrfaaS cluster's cache.
    remote: whether it was routed to the PrfaaS cluster (local uncached length > threshold).
    """

    local_uncached_tokens: np.ndarray
    remote_uncached_tokens: np.ndarray
    remote: np.ndarray


def split_cache_replay(trace: pd.DataFrame, capacity_blocks: int | None, threshold_tokens: float,
                       block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> SplitReplay:
    """Replay ``trace`` through two LRU caches of ``capacity_blocks`` each, one per cluster: a
    request whose local uncached length exceeds ``threshold_tokens`` is prefilled (and its blocks
    cached) on the PrfaaS cluster, else locally. Each cluster only caches what it prefilled, so
    hit rates are lower than with one shared cache (:func:`prefix_cache_replay`)."""
    input_tokens = trace["input_tokens"].to_numpy(dtype=np.int64)
    hash_ids = _hash_ids(trace)
    caches = (LRUPrefixCache(capacity_blocks), LRUPrefixCache(capacity_blocks))
    hits = np.zeros((2, input_tokens.size), dtype=np.int64)
    remote = np.zeros(input_tokens.size, dtype=bool)
    for row in _arrival_order(trace).tolist():
        ids = hash_ids[row]
        hits[0, row], hits[1, row] = caches[0].hit_blocks(ids), caches[1].hit_blocks(ids)
        local_uncached = input_tokens[row] - min(hits[0, row] * block_tokens, input_tokens[row] - 1)
        remote[row] = local_uncached > threshold_tokens
        caches[int(remote[row])].insert(ids)
    uncached = input_tokens - np.minimum(hits * block_tokens, input_tokens - 1)
    return SplitReplay(uncached[0], uncached[1], remote)


def prefix_cache_replay(
    trace: pd.DataFrame, capacity_blocks: int | None, block_tokens: int = MOONCAKE_BLOCK_TOKENS
) -> PrefixReplay:
    """Replay ``trace`` in arrival order through one LRU cache of ``capacity_blocks`` blocks.

    capacity_blocks: cache size in blocks; ``None`` = unlimited, ``0`` = no caching (then the
        trace needs no ``hash_ids``).
    block_tokens: tokens per block; block i of a request covers tokens
        [block_tokens * i, block_tokens * (i + 1)) of its prompt (Mooncake: 512).

    For each request (ties in ``arrival_s`` keep row order): its hit is the longest run of
    *leading* hash ids present in the cache (a later block found after a miss does not count,
    since KV of a block depends on everything before it). Then all its blocks are inserted or
    refreshed, tail first, so its leading blocks are the most recently used and, when the cache
    overflows, a request's tail blocks are evicted before its head (as vLLM frees blocks in
    reverse order). Eviction happens after the whole request is inserted.

    hit_tokens = min(hit_blocks * block_tokens, input_tokens - 1): a request always computes at
    least its last prompt token (it needs that token's logits to start decoding), so
    uncached_tokens = input_tokens - hit_tokens >= 1.
    """
    if capacity_blocks is not None and (
        isinstance(capacity_blocks, bool)
        or not isinstance(capacity_blocks, (int, np.integer))
        or capacity_blocks < 0
    ):
        raise InvalidInput(
            f"capacity_blocks: {capacity_blocks!r} must be a whole number of blocks >= 0, or None for unlimited"
        )
    if isinstance(block_tokens, bool) or not isinstance(block_tokens, (int, np.integer)) or block_tokens < 1:
        raise InvalidInput(f"block_tokens: {block_tokens!r} must be a positive whole number of tokens")
    if "input_tokens" not in trace.columns:
        raise InvalidInput("trace: no 'input_tokens' column; load traces with load_trace()")
    input_tokens = trace["input_tokens"].to_numpy(dtype=np.int64)
    if input_tokens.size and input_tokens.min() < 1:
        raise InvalidInput("trace: input_tokens must be at least 1 token per request")
    hit_blocks = np.zeros(input_tokens.size, dtype=np.int64)
    cache = LRUPrefixCache(capacity_blocks)
    if cache.enabled:
        hash_ids = _hash_ids(trace)
        for row in _arrival_order(trace).tolist():
            hit_blocks[row] = cache.hit_blocks(hash_ids[row])
            cache.insert(hash_ids[row])
    evicted_blocks = cache.evicted_blocks
    hit_tokens = np.minimum(hit_blocks * block_tokens, input_tokens - 1)
    total_input_tokens = int(input_tokens.sum())
    return PrefixReplay(
        uncached_tokens=input_tokens - hit_tokens,
        hit_tokens=hit_tokens,
        token_hit_rate=float(hit_tokens.sum() / total_input_tokens) if total_input_tokens else 0.0,
        request_hit_rate=float(np.mean(hit_tokens > 0)) if hit_tokens.size else 0.0,
        evicted_blocks=evicted_blocks,
    )


def uncached_lengths(
    trace: pd.DataFrame, capacity_blocks: int | None, block_tokens: int = MOONCAKE_BLOCK_TOKENS
) -> np.ndarray:
    """Uncached prompt tokens per request (int64, row order); see :func:`prefix_cache_replay`."""
    return prefix_cache_replay(trace, capacity_blocks, block_tokens).uncached_tokens


# --------------------------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """What the planner plans for.

    lengths: distribution of uncached input (prompt) lengths, tokens.
    output_tokens: mean output length, tokens per request.
    rate_rps: mean arrival rate, requests per second (None = not given; the planner maximises it).
    name: a label for reports.
    """

    lengths: LengthDist
    output_tokens: float
    rate_rps: float | None = None
    name: str = "workload"

    def __post_init__(self) -> None:
        if not isinstance(self.lengths, LengthDist):
            raise InvalidInput(f"lengths: {type(self.lengths).__name__} is not a length distribution")
        if not (math.isfinite(self.output_tokens) and self.output_tokens >= 0):
            raise InvalidInput(f"output_tokens: {self.output_tokens!r} must be a finite number of tokens >= 0")
        if self.rate_rps is not None and not (math.isfinite(self.rate_rps) and self.rate_rps > 0):
            raise InvalidInput(f"rate_rps: {self.rate_rps!r} must be a positive request rate (requests/s) or None")


def paper_workload() -> Workload:
    """The paper's case-study workload: :func:`paper_lengths` inputs, 1024 output tokens, no rate."""
    return Workload(paper_lengths(), float(PAPER_OUTPUT_TOKENS), None, "paper")


def workload_from_trace(
    trace: pd.DataFrame,
    capacity_blocks: int | None = None,
    name: str | None = None,
    block_tokens: int = MOONCAKE_BLOCK_TOKENS,
) -> Workload:
    """A workload from a loaded trace (see :func:`load_trace`).

    lengths: empirical uncached input lengths after :func:`prefix_cache_replay` with
        ``capacity_blocks`` (None = unlimited cache, 0 = no caching; traces without hash_ids need 0).
    output_tokens: the trace's mean output length.
    rate_rps: requests / (last arrival - first arrival), or None when all arrive at once.
    name: defaults to the trace file's stem (``trace.attrs['path']``), else ``"trace"``.
    """
    if len(trace) == 0:
        raise InvalidInput("trace: no requests; give a trace with at least one request")
    for column in TRACE_COLUMNS:
        if column not in trace.columns:
            raise InvalidInput(f"trace: no {column!r} column; load traces with load_trace()")
    replay = prefix_cache_replay(trace, capacity_blocks, block_tokens)
    arrival_s = trace["arrival_s"].to_numpy(dtype=float)
    span_s = float(arrival_s.max() - arrival_s.min())
    rate_rps = len(trace) / span_s if span_s > 0 else None
    if name is None:
        name = Path(trace.attrs["path"]).stem if "path" in trace.attrs else "trace"
    return Workload(
        lengths=EmpiricalLengths(replay.uncached_tokens),
        output_tokens=float(trace["output_tokens"].to_numpy(dtype=float).mean()),
        rate_rps=rate_rps,
        name=name,
    )
