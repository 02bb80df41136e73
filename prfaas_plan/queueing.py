"""Queueing: prefill wait and time to first token (TTFT) of one serving path (docs/design.md section 5).

A path (the remote PrfaaS cluster, or the local PD-P instances) is modelled as an **M/G/c FCFS
queue**: Poisson arrivals at ``arrival_rps`` requests/s, ``c`` identical prefill instances that each
serve one request at a time, and service times drawn from a discrete mixture
(:class:`ServiceMix`: one prefill time ``T(l_b)`` per length bucket ``b``, with probability ``p_b``).
A request's TTFT is

    TTFT = W + S_b + e_b

where ``W`` is the wait for an instance (independent of the request's bucket), ``S_b`` its prefill time
and ``e_b`` the part of the KV transfer that layer-wise pipelining does not hide plus the first decode
step (``extra_s``/``step_s``; the transfer is the handoff term of :mod:`prfaas_plan.handoff`, which the
planner and the simulator share). All times are in seconds, all rates in requests per second.

The wait ``W`` (:class:`WaitDist`) -- the approximation and its known error
---------------------------------------------------------------------------
* ``P(W > 0)`` is the Erlang C delay probability of M/M/c with the same load ``a = lambda E[S]``.
* ``E[W]`` is the M/M/c mean ``C(c, a) / (c mu - lambda)`` times a two-moment factor in the squared
  coefficient of variation ``scv`` of the service time:

  - ``scv <= 1``: Tijms' interpolation between M/D/c and M/M/c, ``(1 - scv) g_D + scv``, where
    ``g_D = E[W_M/D/c] / E[W_M/M/c]`` is Cosmetatos' (1976) approximation
    ``(1 + (1 - rho)(c - 1)(sqrt(4 + 5c) - 2) / (16 rho c)) / 2``, capped at 1 (it overshoots in light
    traffic with many servers, where waits are negligible anyway);
  - ``scv > 1``: Allen-Cunneen / Kingman-Whitt, ``(1 + scv) / 2``.

  For c = 1 both branches reduce to ``(1 + scv) / 2``, the Pollaczek-Khinchine mean, exactly.
* Conditionally on waiting, ``W`` is exponential with mean ``E[W] / P(W > 0)``:
  ``P(W > x) = P(W > 0) exp(-x P(W > 0) / E[W])``.

This is **exact for M/M/c** (so for M/M/1, ``P(W > x) = rho exp(-(mu - lambda) x)``) and gives the exact
**Pollaczek-Khinchine mean for M/G/1** (M/D/1: ``E[W] = rho / (2 mu (1 - rho))``). Measured against an
FCFS simulation (2e5 customers x 3 seeds; c = 1, 4, 8; loads 0.5, 0.7, 0.85; service mixes with scv from
0 to 6.2), the errors were: TTFT mean within 3%; TTFT P90 within 5%; TTFT P99 within 7% for c >= 4 but
up to +13% (pessimistic) for c = 1 at light load, where the true M/G/1 tail is not exponential;
``E[W]`` itself within 5% for scv <= 0.3 or >= 1 and up to -10% for a two-point mix with scv ~ 0.9 at
c = 8, rho = 0.5 (two moments cannot see the third). A quantile that falls exactly on the edge between
two buckets (a jump of the TTFT distribution) is ill-conditioned in model and simulation alike.

TTFT (:class:`TTFTDist`) is computed without Monte Carlo: its CDF is the mixture
``P(TTFT <= x) = sum_b p_b F_W(x - S_b - e_b)``; quantiles are solved together
(:meth:`TTFTDist.quantiles`: between bucket shifts the CDF is a sum of exponentials, so Newton's
method on its logarithm converges in a few steps; Brent's method (:func:`brentq`) for exponential
service parts), and :func:`max_rate_for_slo` finds the goodput under a TTFT percentile SLO. Unstable load (``rho >= 1``) is not an error: the wait is infinite,
``stable`` is False, and means and quantiles are ``inf``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from prfaas_plan.errors import InvalidInput

PROB_SUM_TOL = 1e-9
STABILITY_RTOL = 1e-13  # rho within this of 1 counts as overloaded (rounding of lambda = c / E[S])
ERLANG_RECURSION_MAX = 1000  # servers up to which Erlang B is the exact recursion (at most ~0.1 ms)

__all__ = [
    "ServiceMix",
    "WaitDist",
    "TTFTDist",
    "erlang_c",
    "wait_distribution",
    "ttft_distribution",
    "max_rate_for_slo",
    "mixed_ttft",
]


def brentq(f: Callable[[float], float], a: float, b: float, xtol: float, rtol: float, maxiter: int) -> float:
    """A root of ``f`` in ``[a, b]`` (``f(a)``, ``f(b)`` of opposite signs) by Brent's method: the
    iteration of :func:`scipy.optimize.brentq` (scipy's ``Zeros/brentq.c``), step for step in the
    same double arithmetic, so it returns the same float. Written out because importing
    ``scipy.optimize`` costs 0.66 s of every ``plan``'s start-up; tests check it against scipy's.
    Raises RuntimeError when ``maxiter`` steps do not converge (scipy's ``disp=True``)."""
    xpre, xcur = float(a), float(b)
    xblk = fblk = spre = scur = 0.0
    fpre, fcur = float(f(xpre)), float(f(xcur))
    if fpre == 0:
        return xpre
    if fcur == 0:
        return xcur
    if math.copysign(1.0, fpre) == math.copysign(1.0, fcur):
        raise ValueError("f(a) and f(b) must have different signs")
    for _ in range(maxiter):
        if fpre != 0 and fcur != 0 and math.copysign(1.0, fpre) != math.copysign(1.0, fcur):
            xblk, fblk = xpre, fpre
            spre = scur = xcur - xpre
        if abs(fblk) < abs(fcur):  # keep the best point in xcur
            xpre, xcur, xblk = xcur, xblk, xcur
            fpre, fcur, fblk = fcur, fblk, fcur
        delta = (xtol + rtol * abs(xcur)) / 2
        sbis = (xblk - xcur) / 2
        if fcur == 0 or abs(sbis) < delta:
            return xcur
        if abs(spre) > delta and abs(fcur) < abs(fpre):
            if xpre == xblk:  # secant
                stry = -fcur * (xcur - xpre) / (fcur - fpre)
            else:  # inverse quadratic
                dpre = (fpre - fcur) / (xpre - xcur)
                dblk = (fblk - fcur) / (xblk - xcur)
                stry = -fcur * (fblk * dblk - fpre * dpre) / (dblk * dpre * (fblk - fpre))
            if 2 * abs(stry) < min(abs(spre), 3 * abs(sbis) - delta):
                spre, scur = scur, stry
            else:
                spre = scur = sbis
        else:
            spre = scur = sbis
        xpre, fpre = xcur, fcur
        xcur += scur if abs(scur) > delta else (delta if sbis > 0 else -delta)
        fcur = float(f(xcur))
    raise RuntimeError(f"brentq: no convergence in {maxiter} iterations")


def _readonly(values: np.ndarray) -> np.ndarray:
    values = np.array(values, dtype=float)  # a copy
    values.setflags(write=False)
    return values


def _check_servers(servers: int) -> int:
    try:
        ok = not isinstance(servers, bool) and int(servers) == servers and int(servers) >= 1
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise InvalidInput(f"servers: {servers!r} must be a whole number of instances >= 1")
    return int(servers)


def _check_q(q: float) -> float:
    q = float(q)
    if not 0.0 < q < 1.0:
        raise InvalidInput(f"quantile: {q!r} must be a probability strictly between 0 and 1 (e.g. 0.9 for P90)")
    return q


# ----------------------------------------------------------------------------------------------
# Service-time distribution
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class ServiceMix:
    """A discrete mixture of prefill (service) times, in seconds.

    times_s: the deterministic service time of each bucket (seconds, >= 0).
    probs: the probability of each bucket (>= 0, summing to 1 within 1e-9).
    exp_means_s: optional exponentially distributed extra part of each bucket's service time (mean
        in seconds; 0 = deterministic bucket). ``None`` (the default) means all buckets are
        deterministic. :meth:`exponential` uses it to express exponential service (M/M/c).

    The arrays are copied and made read-only.
    """

    times_s: np.ndarray
    probs: np.ndarray
    exp_means_s: np.ndarray | None = None

    def __post_init__(self) -> None:
        times = np.atleast_1d(np.asarray(self.times_s, dtype=float))
        probs = np.atleast_1d(np.asarray(self.probs, dtype=float))
        if times.ndim != 1 or times.size == 0:
            raise InvalidInput("service times_s: give a non-empty 1-D array of seconds, one per bucket")
        if probs.shape != times.shape:
            raise InvalidInput(
                f"service probs: {probs.size} probabilities for {times.size} times_s; give one per bucket"
            )
        if not np.all(np.isfinite(times)) or np.any(times < 0):
            raise InvalidInput("service times_s: every time must be a finite number of seconds >= 0")
        if not np.all(np.isfinite(probs)) or np.any(probs < 0):
            raise InvalidInput("service probs: every probability must be finite and >= 0")
        total = float(probs.sum())
        if abs(total - 1.0) > PROB_SUM_TOL:
            raise InvalidInput(f"service probs: they sum to {total!r}; they must sum to 1 (within 1e-9)")
        if self.exp_means_s is None:
            exp_means = np.zeros_like(times)
        else:
            exp_means = np.broadcast_to(np.asarray(self.exp_means_s, dtype=float), times.shape)
            if not np.all(np.isfinite(exp_means)) or np.any(exp_means < 0):
                raise InvalidInput("service exp_means_s: every mean must be a finite number of seconds >= 0")
        object.__setattr__(self, "times_s", _readonly(times))
        object.__setattr__(self, "probs", _readonly(probs))
        object.__setattr__(self, "exp_means_s", _readonly(exp_means))
        if not self.mean_s > 0:
            raise InvalidInput("service times_s: the mean service time must be positive")

    @classmethod
    def deterministic(cls, time_s: float) -> ServiceMix:
        """Every request takes exactly ``time_s`` seconds (M/D/c)."""
        return cls(np.array([time_s]), np.array([1.0]))

    @classmethod
    def exponential(cls, mean_s: float) -> ServiceMix:
        """Exponential service with mean ``mean_s`` seconds (M/M/c)."""
        return cls(np.array([0.0]), np.array([1.0]), np.array([mean_s]))

    @property
    def mean_s(self) -> float:
        """E[S], seconds."""
        return float(np.dot(self.probs, self.times_s + self.exp_means_s))

    @property
    def second_moment_s2(self) -> float:
        """E[S^2], seconds squared."""
        t, m = self.times_s, self.exp_means_s
        return float(np.dot(self.probs, (t + m) ** 2 + m**2))

    @property
    def variance_s2(self) -> float:
        """Var[S], seconds squared."""
        return max(self.second_moment_s2 - self.mean_s**2, 0.0)

    @property
    def scv(self) -> float:
        """Squared coefficient of variation Var[S] / E[S]^2 (0 deterministic, 1 exponential)."""
        return self.variance_s2 / self.mean_s**2


# ----------------------------------------------------------------------------------------------
# Wait for a server
# ----------------------------------------------------------------------------------------------


def erlang_c(servers: int, offered_load: float) -> float:
    """Erlang C: probability that an arrival waits in M/M/c, offered load ``a = lambda E[S]``.

    Erlang B comes from its numerically stable recursion (c steps) up to ``ERLANG_RECURSION_MAX``
    servers, beyond from the Poisson form ``B = P(N = c) / P(N <= c)``, ``N ~ Poisson(a)``, in
    logarithms (constant time; relative error below 1e-9 up to 10^6 servers). Returns 1.0 when
    ``a >= c`` (unstable).
    """
    c = int(servers)
    a = float(offered_load)
    if a <= 0.0:
        return 0.0
    if a >= c:
        return 1.0
    if c <= ERLANG_RECURSION_MAX:
        b = 1.0
        for k in range(1, c + 1):
            b = a * b / (k + a * b)
    else:
        from scipy.special import gammaln, pdtr  # only past ERLANG_RECURSION_MAX servers: off plan's start-up

        b = math.exp(c * math.log(a) - a - gammaln(c + 1) - math.log(pdtr(c, a)))
    rho = a / c
    return b / (1.0 - rho * (1.0 - b))


def _cosmetatos_md_factor(servers: int, rho: float) -> float:
    """E[W_M/D/c] / E[W_M/M/c] by Cosmetatos (1976), capped at 1; exactly 1/2 for c = 1."""
    c = servers
    if c == 1 or rho <= 0.0:
        return 0.5 if c == 1 else 1.0
    corr = (1.0 - rho) * (c - 1) * (math.sqrt(4.0 + 5.0 * c) - 2.0) / (16.0 * rho * c)
    return min(1.0, 0.5 * (1.0 + corr))


def _mgc_mean_factor(servers: int, rho: float, scv: float) -> float:
    """E[W_M/G/c] / E[W_M/M/c]: Tijms/Cosmetatos for scv <= 1, Allen-Cunneen above."""
    if scv <= 1.0:
        return (1.0 - scv) * _cosmetatos_md_factor(servers, rho) + scv
    return 0.5 * (1.0 + scv)


@dataclass(frozen=True)
class WaitDist:
    """Distribution of the wait W for a server in an M/G/c FCFS queue (seconds).

    arrival_rps: Poisson arrival rate (requests/s, >= 0).
    servers: number of identical servers c (>= 1), each serving one request at a time.
    mean_service_s: E[S] (seconds, > 0).
    scv: squared coefficient of variation of S (1 = exponential: the exact M/M/c result).

    Derived: ``rho`` (per-server utilisation lambda E[S] / c), ``stable`` (rho < 1), ``prob_wait``
    (P(W > 0), Erlang C), ``mean_s`` (E[W], see the module docstring for the approximation) and
    ``decay_per_s`` (rate of the exponential conditional tail, P(W > 0) / E[W]). Unstable load
    (``rho >= 1``, or within 1e-13 of it, which is rounding of ``lambda = c / E[S]``) gives
    ``stable=False``, ``prob_wait=1`` and infinite mean and quantiles.
    """

    arrival_rps: float
    servers: int
    mean_service_s: float
    scv: float = 1.0
    rho: float = field(init=False)
    stable: bool = field(init=False)
    prob_wait: float = field(init=False)
    mean_s: float = field(init=False)
    decay_per_s: float = field(init=False)

    def __post_init__(self) -> None:
        lam, es, scv = float(self.arrival_rps), float(self.mean_service_s), float(self.scv)
        c = _check_servers(self.servers)
        if not math.isfinite(lam) or lam < 0:
            raise InvalidInput(f"arrival_rps: {self.arrival_rps!r} must be a finite rate >= 0 requests/s")
        if not math.isfinite(es) or es <= 0:
            raise InvalidInput(f"mean_service_s: {self.mean_service_s!r} must be a positive number of seconds")
        if not math.isfinite(scv) or scv < 0:
            raise InvalidInput(f"scv: {self.scv!r} must be a finite squared coefficient of variation >= 0")
        a = lam * es
        rho = a / c
        put = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        put("servers", c)
        put("rho", rho)
        if rho >= 1.0 - STABILITY_RTOL:
            put("stable", False)
            put("prob_wait", 1.0)
            put("mean_s", math.inf)
            put("decay_per_s", 0.0)
            return
        put("stable", True)
        mu = 1.0 / es
        if lam == 0.0:
            put("prob_wait", 0.0)
            put("mean_s", 0.0)
            put("decay_per_s", c * mu)
            return
        pw = erlang_c(c, a)
        mean = pw / (c * mu - lam) * _mgc_mean_factor(c, rho, scv)
        put("prob_wait", pw)
        put("mean_s", mean)
        put("decay_per_s", pw / mean if mean > 0 else c * mu - lam)

    def sf(self, x: float | np.ndarray) -> float | np.ndarray:
        """P(W > x) for x in seconds (1 for x < 0)."""
        x = np.asarray(x, dtype=float)
        if not self.stable:
            out = np.ones_like(x)
        else:
            tail = self.prob_wait * np.exp(-self.decay_per_s * np.maximum(x, 0.0))
            out = np.where(x < 0, 1.0, tail)
        return float(out) if out.ndim == 0 else out

    def cdf(self, x: float | np.ndarray) -> float | np.ndarray:
        """P(W <= x) for x in seconds."""
        return 1.0 - self.sf(x)

    def quantile(self, q: float) -> float:
        """The smallest x (seconds) with P(W <= x) >= q; 0 when q <= 1 - P(W > 0); inf if unstable."""
        q = _check_q(q)
        if not self.stable:
            return math.inf
        if 1.0 - q >= self.prob_wait:
            return 0.0
        return math.log(self.prob_wait / (1.0 - q)) / self.decay_per_s


def wait_distribution(arrival_rps: float, servers: int, service: ServiceMix) -> WaitDist:
    """The M/G/c wait of a path with this arrival rate (requests/s), servers and service mix."""
    if not isinstance(service, ServiceMix):
        raise InvalidInput("service: give a ServiceMix (bucket prefill times and probabilities)")
    return WaitDist(float(arrival_rps), servers, service.mean_s, service.scv)


# ----------------------------------------------------------------------------------------------
# Time to first token
# ----------------------------------------------------------------------------------------------


def _hypoexp_sf(rate_a: float, rate_b: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X_a + X_b > y), independent exponentials with these rates, y >= 0; stable when rates meet."""
    lo = np.minimum(rate_a, rate_b)
    delta = np.abs(rate_b - rate_a)
    with np.errstate(divide="ignore", invalid="ignore"):
        g = np.where(delta > 0, -np.expm1(-delta * y) / np.where(delta > 0, delta, 1.0), y)
    return np.exp(-lo * y) * (1.0 + lo * g)


@dataclass(frozen=True, eq=False)
class _Component:
    """weight x (W + shift_b + Exp(exp_mean_b) with probability p_b)."""

    weight: float
    wait: WaitDist
    shifts_s: np.ndarray
    exp_means_s: np.ndarray
    probs: np.ndarray

    def cdf(self, x: np.ndarray) -> np.ndarray:
        """Unweighted P(TTFT <= x), x a 1-D array of seconds."""
        if not self.wait.stable:
            return np.zeros_like(x)
        y = x[:, None] - self.shifts_s[None, :]
        yp = np.maximum(y, 0.0)
        pw, theta = self.wait.prob_wait, self.wait.decay_per_s
        m = self.exp_means_s[None, :]
        has_exp = m > 0
        # Deterministic bucket: P(W > y).
        sf_det = pw * np.exp(-theta * yp)
        # Bucket with an exponential part of rate nu: (1 - pw) P(E > y) + pw P(W' + E > y).
        nu = np.where(has_exp, 1.0 / np.where(has_exp, m, 1.0), 1.0)
        sf_exp = (1.0 - pw) * np.exp(-nu * yp) + (pw * _hypoexp_sf(theta, nu, yp) if pw > 0 else 0.0)
        sf = np.where(has_exp, sf_exp, sf_det)
        inside = np.where(y >= 0, 1.0 - sf, 0.0)
        return inside @ self.probs

    @property
    def mean_s(self) -> float:
        return self.wait.mean_s + float(np.dot(self.probs, self.shifts_s + self.exp_means_s))

    def atoms(self) -> np.ndarray:
        """Locations of the jumps of this component's CDF (deterministic buckets, when W has an atom)."""
        if not self.wait.stable or self.wait.prob_wait >= 1.0:
            return np.empty(0)
        return self.shifts_s[(self.exp_means_s == 0) & (self.probs > 0)]


@dataclass(frozen=True, eq=False)
class TTFTDist:
    """Distribution of the time to first token (seconds) over a path's requests, or over several paths.

    A mixture of components ``weight x (W + S_b + e_b)``; build it with :func:`ttft_distribution`
    (one path) or :func:`mixed_ttft` (several paths). ``quantile`` is solved numerically (brentq on the
    mixture CDF, deterministic); atoms (a request that does not wait, of a deterministic bucket) are
    returned exactly.
    """

    components: tuple[_Component, ...]

    @property
    def stable(self) -> bool:
        """False when some path with a positive share of the requests is overloaded (rho >= 1)."""
        return all(c.wait.stable for c in self.components)

    @property
    def mean_s(self) -> float:
        """E[TTFT], seconds (inf when not stable)."""
        if not self.stable:
            return math.inf
        return float(sum(c.weight * c.mean_s for c in self.components))

    def cdf(self, x: float | np.ndarray) -> float | np.ndarray:
        """P(TTFT <= x) for x in seconds."""
        xa = np.atleast_1d(np.asarray(x, dtype=float)).ravel()
        out = np.zeros_like(xa)
        for comp in self.components:
            out += comp.weight * comp.cdf(xa)
        out = np.clip(out, 0.0, 1.0)
        if np.ndim(x) == 0:
            return float(out[0])
        return out.reshape(np.shape(x))

    def sf(self, x: float | np.ndarray) -> float | np.ndarray:
        """P(TTFT > x) for x in seconds."""
        return 1.0 - self.cdf(x)

    def quantile(self, q: float) -> float:
        """The smallest x (seconds) with P(TTFT <= x) >= q; inf when that mass is never reached."""
        return float(self.quantiles(np.array([q]))[0])

    def quantiles(self, qs: np.ndarray) -> np.ndarray:
        """:meth:`quantile` of each of ``qs`` (an array of probabilities), solved together, seconds.

        Where every path's service buckets are deterministic (the planner's), the CDF between two
        consecutive bucket shifts is ``A - sum_c C_c exp(-theta_c x)``: each quantile is located
        between shifts (or on one, an atom) from the CDF at all shifts, then solved by Newton on
        ``log(A - F(x))``, which is exact in one step for one path and converges monotonically for
        several; to a relative 1e-15. Otherwise (exponential service parts) by brentq, one by one.
        """
        qs = np.array([_check_q(q) for q in np.atleast_1d(np.asarray(qs, dtype=float))])
        out = np.full(qs.shape, math.inf)
        stable = [c for c in self.components if c.wait.stable]
        reachable = sum(c.weight for c in stable)
        finite = ~((reachable < qs) | ((reachable <= qs) & (not self.stable)))
        if not finite.any():
            return out
        if all(not c.exp_means_s.any() for c in stable):
            out[finite] = _piecewise_quantiles([_SortedComponent.of(c) for c in stable], qs[finite])
            finite &= np.isnan(out)  # degenerate corners (no waiting mass at q): brentq
        if finite.any():
            out[finite] = [self._brent_quantile(float(q)) for q in qs[finite]]
        return out

    def _brent_quantile(self, q: float) -> float:
        """One reachable quantile by brentq on the mixture CDF, snapped to an atom it falls on."""
        cdf = lambda x: self.cdf(x) - q  # noqa: E731
        lo = min(float(c.shifts_s.min()) for c in self.components if c.wait.stable)
        if cdf(lo) >= 0:
            return lo
        span = max(
            max(float(c.shifts_s.max() + c.exp_means_s.max()) for c in self.components) - lo,
            max(c.wait.mean_s for c in self.components if c.wait.stable),
            1e-9,
        )
        hi = lo + span
        for _ in range(2000):
            if cdf(hi) >= 0:
                break
            hi = lo + 2.0 * (hi - lo)
        else:  # pragma: no cover - the CDF always reaches q when reachable > q
            return math.inf
        tol = 1e-13 * max(abs(hi), 1e-12)
        x = brentq(cdf, lo, hi, tol, 4 * np.finfo(float).eps, 500)
        # Snap to a jump of the CDF (the quantile then sits exactly on the atom).
        atoms = np.concatenate([c.atoms() for c in self.components])
        near = atoms[np.abs(atoms - x) <= 16 * tol]
        for a in np.sort(near):
            if cdf(float(a)) >= 0:
                return float(a)
        return x

    def percentiles(self) -> dict[str, float]:
        """{"mean", "p50", "p90", "p99"} in seconds."""
        p50, p90, p99 = self.quantiles(np.array([0.50, 0.90, 0.99]))
        return {"mean": self.mean_s, "p50": float(p50), "p90": float(p90), "p99": float(p99)}


NEWTON_MAX_STEPS = 60
"""Newton steps per quantile at most (each gains at least the wait's decay; a handful are used)."""


@dataclass(frozen=True, eq=False)
class _SortedComponent:
    """A stable component with deterministic buckets, its shifts sorted, in the sums the CDF needs:
    ``F(x) = w sum_{s_b <= x} p_b (1 - P(W > 0) exp(-theta (x - s_b)))``, with the running
    ``log sum_{j <= b} p_j exp(theta s_j)`` kept in logarithms (no overflow)."""

    shifts_s: np.ndarray
    mass: np.ndarray  # weight x cumulative probability, one longer than shifts_s (mass[0] = 0)
    log_tail: np.ndarray  # log(weight P(W > 0) sum_{j <= b} p_j exp(theta s_j)), per sorted bucket
    decay_per_s: float

    @classmethod
    def of(cls, comp: _Component) -> _SortedComponent:
        order = np.argsort(comp.shifts_s, kind="stable")
        shifts, probs = comp.shifts_s[order], comp.probs[order]
        theta = comp.wait.decay_per_s
        with np.errstate(divide="ignore"):
            log_terms = np.log(probs) + theta * shifts
            log_scale = np.log(comp.weight * comp.wait.prob_wait)
        return cls(shifts, comp.weight * np.r_[0.0, np.cumsum(probs)],
                   log_scale + np.logaddexp.accumulate(log_terms), theta)

    def split(self, x: np.ndarray, side: str) -> tuple[np.ndarray, np.ndarray]:
        """``(mass, log of the waiting term's coefficient)`` of the buckets with shift <= x
        (``side="right"``) or < x (``"left"``): ``F = mass - exp(coef - theta x)``."""
        k = np.searchsorted(self.shifts_s, x, side=side)
        coef = np.where(k > 0, self.log_tail[np.maximum(k - 1, 0)], -np.inf)
        return self.mass[k], coef


def _cdf_parts(comps: list[_SortedComponent], x: np.ndarray, side: str) -> np.ndarray:
    """The mixture CDF at ``x``: right-continuous values (``side="right"``) or left limits."""
    total = np.zeros_like(x)
    for c in comps:
        mass, coef = c.split(x, side)
        total += mass - np.exp(coef - c.decay_per_s * x)
    return total


def _piecewise_quantiles(comps: list[_SortedComponent], qs: np.ndarray) -> np.ndarray:
    """Quantiles of a mixture of stable, deterministic-bucket components (see :meth:`TTFTDist.quantiles`)."""
    shifts = np.unique(np.concatenate([c.shifts_s for c in comps]))
    at = _cdf_parts(comps, shifts, "right")
    below = _cdf_parts(comps, shifts, "left")
    i = np.searchsorted(np.maximum.accumulate(at), qs, side="left")  # first shift where F >= q
    on_atom = (i < shifts.size) & (below[np.minimum(i, shifts.size - 1)] < qs)
    out = np.where(on_atom, shifts[np.minimum(i, shifts.size - 1)], np.nan)
    inside = ~on_atom  # F(shift_i-1) < q <= F(shift_i-): the root lies between the two shifts
    if inside.any():
        q, start = qs[inside], shifts[i[inside] - 1]
        parts = [c.split(start, "right") for c in comps]
        gap = sum(m for m, _ in parts) - q  # A - q > 0
        coefs = np.array([coef for _, coef in parts])
        theta = np.array([c.decay_per_s for c in comps])[:, None]
        x = start.copy()
        for _ in range(NEWTON_MAX_STEPS):  # h(x) = log sum_c C_c exp(-theta_c x) - log(A - q): convex, falling
            logs = coefs - theta * x
            top = np.max(logs, axis=0)
            terms = np.exp(logs - top)
            h = top + np.log(terms.sum(axis=0)) - np.log(gap)
            slope = -(theta * terms).sum(axis=0) / terms.sum(axis=0)
            step = -h / slope
            x = x + step
            if np.all(np.abs(step) <= 1e-15 * np.abs(x)):
                break
        end = np.where(i[inside] < shifts.size, shifts[np.minimum(i[inside], shifts.size - 1)], np.inf)
        out[inside] = np.clip(x, start, end)
    return out


def _shifts(service: ServiceMix, extra_s: np.ndarray | float, step_s: float | None) -> np.ndarray:
    extra = np.asarray(extra_s, dtype=float)
    if extra.ndim > 1 or (extra.ndim == 1 and extra.shape != service.times_s.shape):
        raise InvalidInput(
            f"extra_s: give one number, or one per service bucket ({service.times_s.size}); "
            f"got shape {extra.shape}"
        )
    if not np.all(np.isfinite(extra)) or np.any(extra < 0):
        raise InvalidInput("extra_s: un-hidden transfer and decode times must be finite seconds >= 0")
    step = 0.0 if step_s is None else float(step_s)
    if not math.isfinite(step) or step < 0:
        raise InvalidInput(f"step_s: {step_s!r} must be a finite decode step time in seconds >= 0")
    return service.times_s + extra + step


def ttft_distribution(
    arrival_rps: float,
    servers: int,
    service: ServiceMix,
    extra_s: np.ndarray | float = 0.0,
    step_s: float | None = None,
) -> TTFTDist:
    """TTFT of one path: W + S_b + extra_b (+ step), seconds.

    arrival_rps: the path's Poisson arrival rate (requests/s).
    servers: its number of prefill instances c.
    service: its prefill-time mix (one time per length bucket, with probabilities).
    extra_s: per-bucket time added after prefill (aligned with ``service.times_s``), or one number:
        the KV transfer not hidden by layer-wise pipelining, and the first decode step if not
        given separately.
    step_s: one decode step added to every request (None = 0), for callers that keep it apart.

    W is the M/G/c wait of :class:`WaitDist` (module docstring: approximation and error), independent
    of the request's bucket.
    """
    wait = wait_distribution(arrival_rps, servers, service)
    shifts = _shifts(service, extra_s, step_s)
    comp = _Component(1.0, wait, _readonly(shifts), service.exp_means_s, service.probs)
    return TTFTDist((comp,))


def mixed_ttft(parts: list[tuple[float, TTFTDist]]) -> TTFTDist:
    """TTFT over all requests when a fraction ``w_i`` of them takes path ``i`` (a mixture).

    The fractions must be >= 0 and sum to 1 (within 1e-9); paths with fraction 0 are left out (so an
    unused, overloaded path does not make the mixture infinite).
    """
    parts = list(parts)
    if not parts:
        raise InvalidInput("mixed_ttft: give at least one (fraction, TTFTDist) pair")
    weights = np.array([float(w) for w, _ in parts])
    if not np.all(np.isfinite(weights)) or np.any(weights < 0):
        raise InvalidInput("mixed_ttft: every fraction of requests must be finite and >= 0")
    if abs(weights.sum() - 1.0) > PROB_SUM_TOL:
        raise InvalidInput(f"mixed_ttft: the fractions sum to {weights.sum()!r}; they must sum to 1")
    comps: list[_Component] = []
    for w, dist in parts:
        if not isinstance(dist, TTFTDist):
            raise InvalidInput("mixed_ttft: each part must be (fraction, TTFTDist)")
        if w == 0:
            continue
        for c in dist.components:
            comps.append(_Component(float(w) * c.weight, c.wait, c.shifts_s, c.exp_means_s, c.probs))
    return TTFTDist(tuple(comps))


def max_rate_for_slo(
    ttft_at_rate: Callable[[float], TTFTDist],
    max_rate_rps: float,
    quantile: float,
    slo_s: float,
) -> float:
    """The largest Poisson arrival rate in ``[0, max_rate_rps]`` (requests/s) whose TTFT ``quantile``
    (e.g. 0.9) is at most ``slo_s`` seconds: the goodput under that SLO.

    ``ttft_at_rate(rate)`` is the TTFT distribution at a rate: one path's
    (``lambda r: ttft_distribution(r, c, service)``, with ``max_rate_rps`` below ``c / E[S]``) or a
    whole plan's (:func:`prfaas_plan.planner.ttft.slo_rate`). ``P(TTFT <= slo_s)`` falls with the rate,
    so the answer is the root of ``P(TTFT <= slo_s) = quantile``, solved by brentq to a relative 1e-12
    and then stepped onto the side that meets the SLO. Returns 0.0 when even an empty system misses
    the SLO, and ``max_rate_rps`` when the SLO holds all the way up to it.
    """
    q = _check_q(quantile)
    slo = float(slo_s)
    if not math.isfinite(slo) or slo <= 0:
        raise InvalidInput(f"slo_s: {slo_s!r} must be a positive number of seconds")
    hi = float(max_rate_rps)
    if not math.isfinite(hi) or hi < 0:
        raise InvalidInput(f"max_rate_rps: {max_rate_rps!r} must be a finite rate >= 0 requests/s")

    def slack(rate: float) -> float:
        return float(ttft_at_rate(rate).cdf(slo)) - q

    if hi == 0.0 or slack(0.0) <= 0.0:
        return 0.0
    if slack(hi) >= 0.0:
        return hi
    xtol = 1e-12 * hi
    rate = brentq(slack, 0.0, hi, xtol, 4 * np.finfo(float).eps, 500)
    for _ in range(64):  # land on the feasible side of the root
        if slack(rate) >= 0.0:
            break
        rate = max(0.0, rate - xtol)
    return rate
