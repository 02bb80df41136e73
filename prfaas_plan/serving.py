"""The colocated (aggregated) instance: continuous batching with chunked prefill, in closed form.

One engine serves prefill and decode together, as vLLM V1 and SGLang run it: every step has a
token budget (``engine.chunked_prefill_tokens``); each running decode takes one token of it
(``k + 1`` under speculative decoding), prefill chunks fill the rest first come, first served, so
a prompt of ``isl`` tokens beside a decode batch ``b`` runs in ``ceil(isl / (budget - b(k+1)))``
steps. A step's time is the kernel model's mixed step (:func:`prfaas_plan.perf.ops.mixed_step_ops`,
its step overhead included); a request pays the engine's request overhead once, on its TTFT.

Steady state, seen by one tagged request among the others (closed loop: ``c - 1`` other clients;
open loop: Poisson arrivals at ``rate``, which by PASTA see time averages):

* Little's law on the engine: ``c = X (TTFT + (osl - 1) TPOT)`` exactly, ``X`` requests per
  second, zero think time (a client sends its next request when the previous one ends). The
  others are in decode for the fraction ``D / R`` of their residence ``R`` (``D = (osl-1) TPOT``):
  a decoding request sees ``1 + (c-1) D / R`` decodes, a prefilling one ``(c-1) D / R``
  (open loop: ``1 + rate D`` and ``rate D``). Fractional batches interpolate linearly between
  step times measured at integer batches.
* TPOT: the mean step time a decoding request sees. The others' prompts arrive at
  ``X_o = X (c-1)/c`` (open loop: ``rate``); each takes ``n`` chunk steps of total time ``S_p``;
  the rest of the time runs pure decode steps ``s_0``: ``TPOT = 1 / (X_o n + (1 - X_o S_p) / s_0)``
  per accepted token; when the chunk steps fill the time (``X_o S_p >= 1``) every step carries a
  chunk and TPOT is the mean chunk step.
* TTFT: request overhead + the wait for the next step boundary (a step is in progress with
  probability 1 when others are running in the closed loop, ``1 - exp(-rate R)`` in the open loop,
  M/G/inf; its mean residual is taken as half a step) + the wait for the prefill budget (an M/D/1
  queue whose server is the step's prefill token budget: each prompt occupies ``isl / budget`` of
  it per chunk step; the closed loop caps the wait at everyone else's prefill) + the request's own
  chunk steps.
* Memory: vLLM and SGLang allocate KV pages on demand (:data:`~prfaas_plan.perf.latency.ON_DEMAND_KV_ENGINES`,
  sources there): a running request holds its prompt and the tokens generated so far, so the pool
  (:func:`~prfaas_plan.perf.latency.free_cache_bytes_per_gpu`) holds the running requests'
  current contexts, in steady state with fixed lengths ``isl + osl / 2`` each on average
  (:func:`~prfaas_plan.perf.latency.held_context_tokens`; ``isl + osl`` for an engine that
  reserves up front, ``trtllm``): ``c_fit`` = :func:`~prfaas_plan.perf.latency.requests_fit` at
  that mean (a request in prefill is charged the same, an over-estimate for the share of time it
  spends in prefill). When more clients than that are running the pool overflows and the engine
  preempts (vLLM: recompute) or retracts (SGLang) the newest requests, which re-enter its queue;
  the closed form takes the simplest steady state of that: ``c_fit`` requests run, the others
  wait in the queue, and that wait, ``(c - c_fit) / X`` by Little, is added to TTFT (the re-prefill
  of preempted requests is left out; the simulator's colocated mode runs the preemption). One
  request's final context ``isl + osl`` must fit the pool.

The fixed point (TTFT, TPOT) is found by damped iteration (half steps) stopped when both change by
less than 1e-12 relative, at most 2,000 rounds (a note says if it stopped short). Step times are
computed per (model, instance, settings, isl, osl) at the points of a batch grid
(every integer to 8, then powers of two, then what memory holds) the solve touches, cached,
and interpolated linearly between them; the cache
key is the full content of model, GPU, layout and engine profile, so no call depends on an earlier one's inputs.

Speculative decoding / MTP (:class:`SpecDecode`, or the engine profile's ``speculative`` block):
the verify step processes ``k + 1`` tokens per request, timed as a decode step at batch
``b (k + 1)``, plus the drafting, per draft token one transformer layer of the model's shape at
batch ``b`` and the LM head (:func:`~prfaas_plan.perf.latency.speculative_step_s`); each decode
takes ``k + 1`` tokens of the step budget; TPOT = step / accepted tokens per step. Memory holds the
model's MTP layers (weights and KV) and ``k`` more KV slots per request
(:func:`~prfaas_plan.perf.latency.requests_fit`). :func:`speedup_curve` gives the speed-up against
batch and acceptance and the batch where it stops paying.

Times are seconds, token counts tokens, rates requests per second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from prfaas_plan.engine import mean_accepted_tokens
from prfaas_plan.errors import InvalidInput
from prfaas_plan.hardware import Instance
from prfaas_plan.kvcache import CacheSettings, requests_per_instance_memory
from prfaas_plan.model.arch import ModelSpec
from prfaas_plan.perf.latency import (
    decode_step_s,
    draft_step_s,
    free_cache_bytes_per_gpu,
    held_context_tokens,
    requests_fit,
    speculative,
    speculative_step_s,
)
from prfaas_plan.perf.ops import decode_ops, mixed_step_ops

if TYPE_CHECKING:
    from prfaas_plan.engine import EngineProfile, Speculative

TOLERANCE = 1e-12
"""Relative change of TTFT and TPOT below which the fixed-point iteration stops."""
MAX_ROUNDS = 2000


@dataclass(frozen=True)
class SpecDecode:
    """Speculative decoding: ``draft_tokens`` (k) drafted per step, and either the mean tokens
    a request gains per verify step (``accepted_per_step``, in ``[1, k + 1]``: the bonus token
    included) or the acceptance rate of each draft position given the earlier ones were accepted
    (``acceptance_rates``, k values in ``[0, 1]``). The run-time twin of an engine profile's
    ``speculative`` block (:class:`~prfaas_plan.engine.Speculative`, method ``mtp``):
    :meth:`from_profile`, :meth:`to_profile`.

    DeepSeek-V3 (arXiv 2412.19437, section 5.4.3): with one MTP draft token the second token is
    accepted 85-90% of the time, for 1.8x the tokens per second: ``SpecDecode(1, acceptance_rates=(0.85,))``.
    """

    draft_tokens: int
    accepted_per_step: float | None = None
    acceptance_rates: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        self.to_profile()  # the engine profile's checks

    @property
    def accepted(self) -> float:
        """Mean tokens a request gains per verify step: ``1 + sum_i prod_{j<=i} r_j``."""
        if self.accepted_per_step is not None:
            return float(self.accepted_per_step)
        return mean_accepted_tokens(self.acceptance_rates)

    @property
    def position_rates(self) -> tuple[float, ...]:
        """Per-position acceptance rates: as given, or for ``accepted_per_step`` the one rate ``r``
        of every position with ``1 + r + ... + r^k`` = that mean (bisection to 1e-12)."""
        if self.acceptance_rates is not None:
            return tuple(float(r) for r in self.acceptance_rates)
        lo, hi = 0.0, 1.0
        while hi - lo > 1e-12:
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if mean_accepted_tokens([mid] * self.draft_tokens) < self.accepted else (lo, mid)
        return (0.5 * (lo + hi),) * self.draft_tokens

    @classmethod
    def from_profile(cls, profile: EngineProfile) -> SpecDecode | None:
        """The profile's ``speculative`` block as a SpecDecode, or None when it is off."""
        s = profile.speculative
        if s is None:
            return None
        return cls(s.draft_tokens, s.accepted_per_step, s.acceptance_rates)

    def to_profile(self) -> Speculative:
        """This setting as an engine profile's ``speculative`` block (method ``mtp``)."""
        from pydantic import ValidationError

        from prfaas_plan.engine import Speculative

        try:
            return Speculative(method="mtp", draft_tokens=self.draft_tokens, accepted_per_step=self.accepted_per_step,
                               acceptance_rates=self.acceptance_rates)
        except ValidationError as exc:  # one line, named spec.<field>, as the profile's checks name it
            err = exc.errors()[0]
            msg = err["msg"].removeprefix("Value error, ")
            if err["loc"]:
                msg = f"{err['loc'][0]}: {msg}, got {err['input']!r}"
            raise InvalidInput(f"spec.{msg}") from None


def with_spec(inst: Instance, spec: SpecDecode | None) -> Instance:
    """``inst`` running ``spec`` (its engine profile's ``speculative`` block replaced); None
    leaves the instance as its profile says (bundled profiles: off)."""
    if spec is None:
        return inst
    if not isinstance(spec, SpecDecode):
        raise InvalidInput("spec: give a SpecDecode or None")
    return replace(inst, engine=inst.engine_profile.with_speculative(spec.to_profile()))


@dataclass(frozen=True)
class ServingPoint:
    """A colocated instance's steady state: TTFT and TPOT (s), the mean engine step a decoding
    request sees (s), the fraction of engine time in steps that carry a prefill chunk, the mean
    decode batch (requests), requests and output tokens per second, and notes on the regime."""

    ttft_s: float
    tpot_s: float
    step_s: float
    prefill_share: float
    batch: float
    throughput_rps: float
    output_tokens_per_s: float
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Case:
    """A step-table request: hashed and compared by content (``key``), carrying the objects."""

    key: tuple
    model: ModelSpec = field(compare=False, hash=False)
    inst: Instance = field(compare=False, hash=False)
    settings: CacheSettings | None = field(compare=False, hash=False)


class StepTimes(NamedTuple):
    """Engine steps beside a decode batch ``b`` (seconds): ``decode_s`` a decode step (verify and
    draft under speculative decoding; nan at ``b = 0``), ``prompt_s`` the sum of one prompt's
    chunk steps (its chunks fill the budget the decodes leave), ``chunks`` their count, ``full_s``
    a step carrying the batch and the whole budget it leaves of prefill tokens (what a step costs
    when prompts queue and share steps)."""

    decode_s: float
    prompt_s: float
    chunks: float
    full_s: float


@dataclass(frozen=True)
class StepTable:
    """Step times of one (model, instance, settings, ``isl``, ``osl``) on a grid of decode batches
    (:func:`_batch_grid`), each grid point computed when first needed and cached, so a call at
    concurrency ``c`` never times batches above ``c``. ``k`` is the draft length (0: no
    speculative decoding), ``accepted`` the mean tokens a request gains per step, ``budget`` the
    step's token budget, ``fit`` the requests memory holds in steady state
    (:func:`~prfaas_plan.perf.latency.requests_fit` at ``held_tokens``, the mean context a running
    request holds: :func:`~prfaas_plan.perf.latency.held_context_tokens`), ``request_s`` the
    request overhead."""

    case: _Case
    isl: int
    osl: int
    k: int
    accepted: float
    batch: np.ndarray
    budget: int
    fit: int
    request_s: float
    held_tokens: float

    def times(self, b: int) -> StepTimes:
        """The steps beside an integer decode batch ``b`` (cached per content of the case)."""
        return _point_times(self.case, self.isl, self.osl, int(b))

    def at(self, b: float) -> StepTimes:
        """The steps beside a (fractional) batch ``b``: linear between the two grid points around it."""
        hi = int(min(np.searchsorted(self.batch, b), len(self.batch) - 1))
        lo = max(hi - 1, 0)
        b_lo, b_hi = self.batch[lo], self.batch[hi]
        w = 0.0 if b_hi == b_lo else min(max((b - b_lo) / (b_hi - b_lo), 0.0), 1.0)
        p_lo, p_hi = self.times(int(b_lo)), self.times(int(b_hi))
        d_lo = p_lo[0] if b_lo > 0 else p_hi[0]  # a decode step has at least one request
        return StepTimes(*((1.0 - w) * a + w * c for a, c in zip((d_lo, *p_lo[1:]), p_hi, strict=True)))


def step_table(model: ModelSpec, inst: Instance, isl_tokens: int, osl_tokens: int,
               settings: CacheSettings | None = None) -> StepTable:
    """The step times the colocated closed form and the simulator's colocated mode both use: one
    table per content of (model, GPU, layout, engine profile, settings, ``isl``, ``osl``), cached;
    speculative decoding as the instance's engine profile sets it (:func:`with_spec`). A request
    that does not fit beside the weights is a one-line InvalidInput."""
    return _table(_case(model, inst, settings), int(isl_tokens), int(osl_tokens))


def _case(model: ModelSpec, inst: Instance, settings: CacheSettings | None) -> _Case:
    key = (model.model_dump_json(), inst.gpu.model_dump_json(), inst.gpus, inst.parallel,
           inst.engine_profile.model_dump_json(), settings.model_dump_json() if settings is not None else None)
    return _Case(key, model, inst, settings)


def _batch_grid(fit: int) -> np.ndarray:
    """0 to 8, then the powers of two (the batches benchmarks run and kernel tables measure), then ``fit``."""
    powers = 2.0 ** np.arange(4, max(4, math.ceil(math.log2(max(fit, 16)))))
    return np.unique(np.concatenate([np.arange(0, min(fit, 8) + 1), powers[powers < fit], [fit]]))


@lru_cache(maxsize=256)
def _table(case: _Case, isl: int, osl: int) -> StepTable:
    """The grid and memory limit of one case (see :func:`step_table`)."""
    model, inst = case.model, case.inst
    spec = speculative(model, inst)
    free = free_cache_bytes_per_gpu(model, inst)
    if requests_fit(model, inst, isl + osl, free, case.settings) < 1:
        raise InvalidInput(f"isl_tokens: one {isl + osl}-token request does not fit beside the weights on "
                           f"{inst.name}")
    held = held_context_tokens(inst, isl, osl)
    fit = requests_fit(model, inst, held, free, case.settings)
    eng = inst.engine_profile
    k, accepted = (0, 1.0) if spec is None else (spec.draft_tokens, spec.accepted_tokens)
    return StepTable(case, isl, osl, k, accepted, _batch_grid(fit), int(eng.chunked_prefill_tokens), fit,
                     eng.request_overhead_s, held)


@lru_cache(maxsize=16384)
def _point_times(case: _Case, isl: int, osl: int, b: int) -> StepTimes:
    """:class:`StepTimes` at decode batch ``b``: verify steps at ``b (k + 1)`` decode tokens and
    the drafting (:func:`~prfaas_plan.perf.latency.draft_step_s`) on every step that carries decodes."""
    model, inst, settings = case.model, case.inst, case.settings
    spec = speculative(model, inst)
    k = 0 if spec is None else spec.draft_tokens
    eng, kv = inst.engine_profile, settings.kv_dtype if settings is not None else "bf16"
    ctx = isl + osl / 2.0  # a decode's mean context over its output
    draft = draft_step_s(model, inst, b, ctx, settings)
    dec = float(decode_ops(model, inst, b * (k + 1), ctx, eng, kv).total_s) + draft if b else math.nan
    avail = max(int(eng.chunked_prefill_tokens) - b * (k + 1), 1)
    n = math.ceil(isl / avail)
    sizes = np.minimum(avail, isl - avail * np.arange(n)).astype(float)
    prefix = avail * np.arange(n, dtype=float)
    s = mixed_step_ops(model, inst, b * (k + 1), ctx, sizes, prefix, eng, kv).total_s
    full = float(mixed_step_ops(model, inst, b * (k + 1), ctx, np.array([float(avail)]), np.zeros(1), eng,
                                kv).total_s[0]) + draft
    return StepTimes(dec, float(np.sum(s)) + n * draft, float(n), full)


def _check(isl: int, osl: int) -> None:
    if not isinstance(isl, int | np.integer) or isl < 1:
        raise InvalidInput(f"isl_tokens: must be a whole number of tokens >= 1, got {isl!r}")
    if not isinstance(osl, int | np.integer) or osl < 1:
        raise InvalidInput(f"osl_tokens: must be a whole number of tokens >= 1, got {osl!r}")


def _solve(t: StepTable, isl: int, osl: int, clients: float | None, rate: float | None) -> dict:
    """The fixed point (TTFT, TPOT) for ``clients`` in a closed loop, or Poisson ``rate``."""
    accepted = t.accepted
    ttft, tpot = t.request_s + t.at(0.0)[1], t.at(1.0)[0] / accepted
    converged, out = False, {}
    for _ in range(MAX_ROUNDS):
        d = (osl - 1) * tpot
        r = ttft + d
        x = clients / r if clients is not None else rate
        others = (clients - 1) * d / r if clients is not None else rate * d
        x_o = x * (clients - 1) / clients if clients is not None else rate
        busy = (1.0 if clients > 1 else 0.0) if clients is not None else 1.0 - math.exp(-rate * r)
        _, sp_pre, _, full_pre = t.at(others)
        avail = max(t.budget - others * (t.k + 1), 1.0)
        own = isl / avail * full_pre  # a prompt's share of full-budget steps: the prefill server's time
        rho = x_o * own
        # others' prompts: one arriving to an idle prefill server (probability 1 - rho) takes its
        # own chunk steps; one arriving to a busy server shares full-budget steps
        s0, sp, n, full = t.at(1.0 + others)
        share = min(rho, 1.0)
        chunk_time = x_o * ((1.0 - share) * sp + share * own)  # fraction of engine time in chunk steps
        n_eff = (1.0 - share) * n + share * isl / avail
        # saturated: prompts queue, every step carries the whole prefill budget
        step = full if chunk_time >= 1.0 else 1.0 / (x_o * n_eff + (1.0 - chunk_time) / s0)
        queue = rho / (1.0 - rho) * own / 2.0 if rho < 1.0 else math.inf
        if clients is not None:
            queue = min(queue, (clients - 1) * sp_pre)
        new_ttft = t.request_s + busy * step / 2.0 + queue + sp_pre
        new_tpot = step / accepted
        if not math.isfinite(new_ttft):
            break
        change = max(abs(new_ttft - ttft) / ttft, abs(new_tpot - tpot) / tpot)
        ttft, tpot = 0.5 * (ttft + new_ttft), 0.5 * (tpot + new_tpot)
        out = dict(step=step, share=min(1.0, x * sp_pre), rho=rho, saturated=chunk_time >= 1.0)
        if change < TOLERANCE:
            converged = True
            break
    return dict(out, ttft=ttft, tpot=tpot, converged=converged)


def _point(s: dict, osl: int, x: float, wait_s: float, notes: list[str]) -> ServingPoint:
    if not s["converged"]:
        notes.append(f"fixed point not reached to {TOLERANCE:g} in {MAX_ROUNDS} rounds")
    if s.get("saturated"):
        notes.append("prefill-bound: every step carries a prefill chunk")
    tpot, x = float(s["tpot"]), float(x)
    return ServingPoint(float(s["ttft"]) + wait_s, tpot, float(s["step"]), float(s["share"]), x * (osl - 1) * tpot,
                        x, x * osl, tuple(notes))


def colocated_closed_loop(model: ModelSpec, inst: Instance, isl_tokens: int, osl_tokens: int, concurrency: int,
                          settings: CacheSettings | None = None, spec: SpecDecode | None = None) -> ServingPoint:
    """Steady state of an aggregated engine with ``concurrency`` clients, each sending its next
    request (``isl_tokens`` in, ``osl_tokens`` out) when the previous one ends (the closed loop of
    ``vllm bench serve --max-concurrency``); see the module docstring for the model. ``spec``
    turns speculative decoding on (None: as the instance's engine profile says)."""
    _check(isl_tokens, osl_tokens)
    if not isinstance(concurrency, int | np.integer) or concurrency < 1:
        raise InvalidInput(f"concurrency: must be a whole number of clients >= 1, got {concurrency!r}")
    t = step_table(model, with_spec(inst, spec), isl_tokens, osl_tokens, settings)
    notes = []
    running = min(int(concurrency), t.fit)
    if running < concurrency:
        notes.append(f"memory-bound: {t.fit} running requests of {t.held_tokens:g} tokens on average fit; "
                     f"{concurrency - running} clients wait in the queue (their wait is in TTFT)")
    s = _solve(t, int(isl_tokens), int(osl_tokens), float(running), None)
    x = running / (s["ttft"] + (osl_tokens - 1) * s["tpot"])
    return _point(s, int(osl_tokens), x, (concurrency - running) / x, notes)


def colocated_open_loop(model: ModelSpec, inst: Instance, isl_tokens: int, osl_tokens: int, rate_rps: float,
                        settings: CacheSettings | None = None, spec: SpecDecode | None = None) -> ServingPoint:
    """Steady state of an aggregated engine fed Poisson arrivals at ``rate_rps``; a rate the
    engine cannot sustain (prefill budget or memory) is a one-line InvalidInput. ``spec`` as in
    :func:`colocated_closed_loop`."""
    _check(isl_tokens, osl_tokens)
    if not isinstance(rate_rps, int | float) or not math.isfinite(rate_rps) or rate_rps <= 0:
        raise InvalidInput(f"rate_rps: must be a positive number of requests per second, got {rate_rps!r}")
    t = step_table(model, with_spec(inst, spec), isl_tokens, osl_tokens, settings)
    s = _solve(t, int(isl_tokens), int(osl_tokens), None, float(rate_rps))
    in_system = rate_rps * (s["ttft"] + (osl_tokens - 1) * s["tpot"])
    if not s["converged"] or s.get("rho", 1.0) >= 1.0 or in_system > t.fit:
        raise InvalidInput(f"rate_rps: {rate_rps:g} requests/s is more than {inst.name} sustains for "
                           f"{isl_tokens}/{osl_tokens}-token requests (prefill budget or memory); lower the rate")
    return _point(s, int(osl_tokens), float(rate_rps), 0.0, [])


def speedup_curve(model: ModelSpec, inst: Instance, context_tokens: float, batches, acceptances, k: int,
                  settings: CacheSettings | None = None, max_batch: int = 8192):
    """TPOT speed-up of MTP speculative decoding with ``k`` draft tokens, per decode batch and
    per-position acceptance rate ``r`` (accepted tokens per step ``a = sum_{i<=k} r^i``), at
    ``context_tokens`` of context, memory left aside: ``speedup = a T(b) / (T(b (k+1)) + D(b))``
    with ``T`` the decode step and ``D`` the drafting
    (:func:`~prfaas_plan.perf.latency.speculative_step_s`). A pandas DataFrame with columns batch,
    acceptance, accepted_per_step, tpot_s (no drafting), spec_tpot_s, speedup, pays (speed-up > 1)
    and break_even_batch: the smallest batch at that acceptance (bisection on whole batches in
    ``[1, max_batch]``, the speed-up falling with the batch) where it stops paying, 0 if it never
    pays, -1 if it still pays at ``max_batch``. It stops paying where the verify step's extra
    tokens cost more than they gain: at a compute-bound batch ``T(b (k+1)) ~ (k+1) T(b)``, so
    the speed-up tends to ``a / (k + 1) < 1``."""
    import pandas as pd

    rows = []
    for r in acceptances:
        spec = SpecDecode(k, acceptance_rates=(float(r),) * k)
        on = with_spec(inst, spec)

        def speedup(b: int, on: Instance = on, a: float = spec.accepted) -> tuple[float, float, float]:
            base = decode_step_s(model, inst, b, context_tokens, settings)
            step = speculative_step_s(model, on, b, context_tokens, settings)
            return base, step / a, base * a / step

        lo, hi = 1, int(max_batch)
        if speedup(lo)[2] <= 1.0:
            even = 0
        elif speedup(hi)[2] > 1.0:
            even = -1
        else:
            while hi - lo > 1:  # speedup(lo) > 1 >= speedup(hi)
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if speedup(mid)[2] > 1.0 else (lo, mid)
            even = hi
        for b in batches:
            base, spec_tpot, gain = speedup(int(b))
            rows.append(dict(batch=int(b), acceptance=float(r), accepted_per_step=spec.accepted, tpot_s=base,
                             spec_tpot_s=spec_tpot, speedup=gain, break_even_batch=even))
    df = pd.DataFrame(rows)
    df["pays"] = df["speedup"] > 1.0
    return df


def max_sustainable_rate(model: ModelSpec, inst: Instance, isl_tokens: int, osl_tokens: int,
                         settings: CacheSettings | None = None, spec: SpecDecode | None = None,
                         rel_tol: float = 1e-9) -> float:
    """The largest Poisson rate (requests/s) :func:`colocated_open_loop` sustains for these
    lengths: bisection in log space between 1e-3 and 1e4 req/s on whether it accepts the rate
    (prefill budget and memory), to ``rel_tol``."""
    lo, hi = 1e-3, 1e4

    def sustains(rate: float) -> bool:
        try:
            colocated_open_loop(model, inst, isl_tokens, osl_tokens, rate, settings, spec)
        except InvalidInput as exc:
            if not str(exc).startswith("rate_rps:"):
                raise
            return False
        return True

    if not sustains(lo):
        raise InvalidInput(f"rate_rps: {inst.name} cannot sustain even {lo:g} requests/s of "
                           f"{isl_tokens}/{osl_tokens}-token requests")
    while hi / lo > 1.0 + rel_tol:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if sustains(mid) else (lo, mid)
    return lo


def disaggregated_closed_loop(model: ModelSpec, prefill_inst: Instance, n_prefill_workers: int, decode_inst: Instance,
                              n_decode_workers: int, isl_tokens: int, osl_tokens: int, concurrency: int,
                              settings: CacheSettings | None = None) -> ServingPoint:
    """Steady state of ``n_prefill_workers`` prefill and ``n_decode_workers`` decode workers fed by
    ``concurrency`` closed-loop clients (zero think time).

    * Little's law: ``X = c / (TTFT + (osl - 1) TPOT)`` requests per second.
    * Prefill: ``P`` workers. A prompt alone on a worker takes ``T_p = prefill_time_s(isl)``. A
      worker batches waiting prompts up to ``B = engine.chunked_prefill_tokens`` tokens a forward:
      for ``isl < B`` a forward carries ``k = floor(B / isl)`` prompts and is timed as the prefill
      of ``B`` tokens (``prefill_latency(B)``, one sequence: its attention is an upper bound), so a
      worker's capacity is one prompt per ``T_b = prefill_time_s(B) / k`` (``T_b = T_p``, ``k = 1``,
      for ``isl >= B``). The wait for a worker is the M/D/c mean (:class:`~prfaas_plan.queueing.WaitDist`,
      ``scv = 0``, ``P`` servers of service ``T_b``, the others' arrivals ``X (c - 1) / c``), capped by
      the closed loop's population: at most the others not in decode are ahead,
      ``(c - 1) (1 - (osl - 1) TPOT / R) T_b / P`` (the saturated closed loop's wait); the
      request's own service is ``T_p`` when it finds its worker idle (probability ``1 - rho``) and a
      whole batched forward ``prefill_time_s(B)`` when busy (``rho``, the per-worker utilisation, capped at 1).
    * KV transfer: the prefill worker's per-GPU cache of the prompt
      (:func:`~prfaas_plan.kvcache.per_gpu_kv_bytes`) over the slower of the two workers' per-GPU
      scale-out NICs (``nic_gbps``: prefill and decode workers are separate instances, across IB /
      RoCE), all GPUs in parallel.
    * Decode: a decoding request sees ``b = 1 + (c - 1) (osl - 1) TPOT / (R D)`` requests on its
      worker (the others' decode share of their residence ``R``, spread over ``D`` workers: the
      tagged request's view of ``X (osl - 1) TPOT / D``); ``TPOT = decode_step_s(b, isl + osl / 2)``,
      linear between the integer batches around ``b``. Memory caps a worker at ``fit`` requests
      (:func:`~prfaas_plan.kvcache.requests_per_instance_memory` at ``isl + osl`` tokens); the loop
      is solved for ``min(c, D fit)`` clients and the others' wait, ``(c - D fit) / X`` by Little, is
      added to TTFT.
    * TTFT = wait + own prefill + transfer (the prefill worker emits the first token); no request
      overhead beyond what the kernel model's prefill holds.

    Fixed point: TPOT by damped iteration (half steps) from the batch-1 step, stopped when it
    changes by less than ``TOLERANCE`` (1e-12) relative, at most ``MAX_ROUNDS`` rounds (a note says
    if it stopped short); at each TPOT the TTFT the loop implies is found by bisection to
    ``TOLERANCE`` relative between the unloaded prefill and the wait behind all ``c - 1`` others
    (the M/D/c wait is steep near saturation, where plain iteration oscillates). ``step_s`` is the decode step, ``prefill_share`` the prefill
    workers' utilisation, ``batch`` the mean decode batch per worker.
    """
    _check(isl_tokens, osl_tokens)
    for name, n in (("n_prefill_workers", n_prefill_workers), ("n_decode_workers", n_decode_workers),
                    ("concurrency", concurrency)):
        if not isinstance(n, int | np.integer) or isinstance(n, bool) or n < 1:
            raise InvalidInput(f"{name}: must be a whole number >= 1, got {n!r}")
    loop = _DisaggLoop.of(model, prefill_inst, int(n_prefill_workers), decode_inst, int(n_decode_workers),
                          int(isl_tokens), int(osl_tokens), int(concurrency), settings)
    c, osl, d, running = int(concurrency), int(osl_tokens), loop.d, loop.running
    notes: list[str] = []
    if running < c:
        notes.append(f"memory-bound: {d} x {loop.fit} requests of {loop.isl + osl} tokens fit; "
                     f"{c - running} clients wait in the queue (their wait is in TTFT)")
    tpot, converged = loop.step(1.0), False
    for _ in range(MAX_ROUNDS):
        ttft = loop.solve_ttft(tpot)
        decoding = loop.prefill_side(ttft, tpot)[2]
        new_tpot = loop.step(1.0 + decoding / d)
        change = abs(new_tpot - tpot) / tpot
        tpot = 0.5 * (tpot + new_tpot)
        if change < TOLERANCE:
            converged = True
            break
    ttft = loop.solve_ttft(tpot)
    rho = loop.prefill_side(ttft, tpot)[1]
    if not converged:
        notes.append(f"fixed point not reached to {TOLERANCE:g} in {MAX_ROUNDS} rounds")
    x = running / (ttft + (osl - 1) * tpot)
    ttft += (c - running) / x
    return ServingPoint(ttft, tpot, tpot, rho, x * (osl - 1) * tpot / d, x, x * osl, tuple(notes))


@dataclass
class _DisaggLoop:
    """What :func:`disaggregated_closed_loop` solves over (seconds, tokens, requests): its
    prefill service times, the KV transfer, the decode workers' memory fit, and the decode step
    memoised per integer batch."""

    model: ModelSpec
    decode_inst: Instance
    settings: CacheSettings | None
    isl: int
    osl: int
    running: int
    p: int
    d: int
    fit: int
    t_p: float
    t_full: float
    t_b: float
    transfer: float
    memo: dict = field(default_factory=dict)

    @classmethod
    def of(cls, model: ModelSpec, prefill_inst: Instance, p: int, decode_inst: Instance, d: int, isl: int, osl: int,
           c: int, settings: CacheSettings | None) -> _DisaggLoop:
        from prfaas_plan.kvcache import per_gpu_kv_bytes
        from prfaas_plan.perf.latency import prefill_time_s

        budget = int(prefill_inst.engine_profile.chunked_prefill_tokens)
        t_p = float(prefill_time_s(model, prefill_inst, isl, settings=settings))
        k = max(budget // isl, 1)
        t_full = float(prefill_time_s(model, prefill_inst, budget, settings=settings)) if k > 1 else t_p
        nic = min(prefill_inst.gpu.nic_gbps, decode_inst.gpu.nic_gbps) * 1e9 / 8.0
        transfer = per_gpu_kv_bytes(model, isl, prefill_inst.parallel, settings) / nic
        free = free_cache_bytes_per_gpu(model, decode_inst)
        fit = requests_per_instance_memory(model, decode_inst.parallel, isl + osl, free, settings)
        if fit < 1:
            raise InvalidInput(f"isl_tokens: one {isl + osl}-token request does not fit beside the weights on "
                               f"{decode_inst.name}")
        return cls(model, decode_inst, settings, isl, osl, min(c, d * fit), p, d, fit, t_p, t_full, t_full / k,
                   transfer)

    def step(self, b: float) -> float:
        """The decode step at a (fractional) batch ``b``: linear between the integer batches around it."""
        b = min(max(b, 1.0), float(self.fit))
        lo, hi = math.floor(b), math.ceil(b)
        for n in (lo, hi):
            if n not in self.memo:
                self.memo[n] = decode_step_s(self.model, self.decode_inst, n, self.isl + self.osl / 2.0,
                                             self.settings)
        return self.memo[lo] + (b - lo) * (self.memo[hi] - self.memo[lo])

    def prefill_side(self, ttft: float, tpot: float) -> tuple[float, float, float]:
        """(the TTFT the loop implies, prefill utilisation, the others in decode) at (TTFT, TPOT)."""
        from prfaas_plan.queueing import WaitDist

        running, osl = self.running, self.osl
        r = ttft + (osl - 1) * tpot
        w = WaitDist(running / r * (running - 1) / running, self.p, self.t_b, 0.0)
        rho = min(w.rho, 1.0)
        decoding = (running - 1) * (osl - 1) * tpot / r  # the others in decode, not ahead in the prefill queue
        queue = min(w.mean_s, (running - 1 - decoding) * self.t_b / self.p)
        return queue + (1.0 - rho) * self.t_p + rho * self.t_full + self.transfer, rho, decoding

    def solve_ttft(self, tpot: float) -> float:
        """The TTFT consistent with ``tpot``: bisection between the unloaded prefill and everyone ahead."""
        lo = self.t_p + self.transfer
        hi = (self.running - 1) * self.t_b / self.p + self.t_full + self.transfer
        while hi - lo > TOLERANCE * hi:
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if self.prefill_side(mid, tpot)[0] > mid else (lo, mid)
        return 0.5 * (lo + hi)


__all__ = ["ServingPoint", "SpecDecode", "StepTable", "StepTimes", "colocated_closed_loop", "colocated_open_loop",
           "disaggregated_closed_loop", "max_sustainable_rate", "speedup_curve", "step_table", "with_spec"]
