"""The colocated (aggregated) instance: continuous batching with chunked prefill, in closed form.

One engine serves prefill and decode together, as vLLM V1 and SGLang run it: every step has a
token budget (``engine.chunked_prefill_tokens_on(gpu)``); each running decode takes one token of it
(``k + 1`` under speculative decoding), prefill chunks fill the rest first come, first served, so
a prompt of ``isl`` tokens beside a decode batch ``b`` runs in ``ceil(isl / (budget - b(k+1)))``
steps; under SGLang's ``--max-prefill-tokens`` (the profile's ``max_prefill_tokens``) a step takes
only the whole prompts that fit it less its decode tokens, at least one (:meth:`StepTable.prompt_room_tokens`,
:meth:`~prfaas_plan.engine.EngineProfile.prompt_room_tokens`). A step's time is the kernel model's
mixed step (:func:`prfaas_plan.perf.ops.mixed_step_ops`, its step overhead included); a request
pays the engine's request overhead once, on its TTFT.

Steady state, seen by one tagged request among the others (closed loop: ``c - 1`` other clients;
open loop: Poisson arrivals at ``rate``, which by PASTA see time averages):

* Little's law on the engine: ``c = X (TTFT + (osl - 1) TPOT)`` exactly, ``X`` requests per
  second, zero think time (a client sends its next request when the previous one ends). The
  others are in decode for the fraction ``D / R`` of their residence ``R`` (``D = (osl-1) TPOT``):
  a decoding request sees ``1 + (c-1) D / R`` decodes, a prefilling one ``(c-1) D / R``
  (open loop: ``1 + rate D`` and ``rate D``). Fractional batches interpolate linearly between
  step times measured at integer batches.
* TPOT (closed loop): the mean step time a decoding request sees. The others' prompts arrive at
  ``X_o = X (c-1)/c``; each takes ``n`` chunk steps of total time ``S_p``;
  the rest of the time runs pure decode steps ``s_0``: ``TPOT = 1 / (X_o n + (1 - X_o S_p) / s_0)``
  per accepted token; when the chunk steps fill the time (``X_o S_p >= 1``) every step carries a
  chunk and TPOT is the mean chunk step.
* TTFT (closed loop): request overhead + the wait for the next step boundary (a step is in
  progress with probability 1 when others are running; its mean residual is taken as half a
  step) + the wait for the prefill budget (an M/D/1 queue whose server is the step's prefill token
  budget: each prompt occupies ``isl / budget`` of it per chunk step, capped at everyone else's
  prefill) + the request's own chunk steps.
* Open loop: the steps form a Markov chain (:func:`_step_chain`): the prompts that arrived during
  a step (Poisson) join the next one, with what a full step left; its stationary distribution
  gives the mean step over steps (TPOT, per accepted token) and, by Little's law on the prompts
  present, a prompt's time from arrival to the end of its last chunk's step (TTFT, with the
  overhead; the step in progress is waited for with probability ``1 - exp(-rate R)``, M/G/inf).
* Prefill-first engines (``mixed_prefill`` false in the profile: SGLang without
  ``--enable-mixed-chunk``): a step with prompts waiting prefills them alone, with the whole
  budget and no decode beside them, and the decodes advance only in the other steps. The same
  forms with the prompt steps timed at decode batch 0: closed loop ``TPOT = s_0 / (1 - X_o S_p)``
  (the decode step over the share of time the prompt steps leave), the step in progress a decode
  step or a prompt step by their shares of time; open loop, the chain's mean step over the steps
  without backlog (``step / P(backlog 0)``).
* A scheduler that takes in new requests every ``N`` decode steps (``recv_interval_steps``:
  SGLang ``--scheduler-recv-interval``; at once after a prompt step): closed loop, a prompt
  arriving while the engine decodes waits ``(N - 1) / 2`` decode steps more
  (:meth:`StepTable.poll_s`); open loop, the chain's step without backlog is the ``N`` decode
  steps to the next poll, so the prompts of one window are prefilled together. An engine that
  runs at most ``max_running_requests`` holds no more, whatever its cache would (``fit``).
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

The closed loop's fixed point (TTFT, TPOT) is found as two nested roots (Brent, to 1e-12 relative:
the TTFT a TPOT implies, then the TPOT that reproduces itself; :func:`_solve_closed`), the open
loop's TPOT as one root (:func:`_solve_open`; a rate without one is bad input). Step times are
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

A finite benchmark run (:class:`BenchmarkRun`, :func:`colocated_benchmark`): ``vllm bench serve``
and InferenceX's ``benchmark_serving.py`` with ``--request-rate inf --max-concurrency c`` send
every client's first request at t = 0 (a burst) and ``prompts_per_client`` requests per client in
all, every one measured. The run's mean is the first wave's mean (``c`` prompts queued together
behind each other's prefill, :func:`_first_wave`) weighted ``1`` against the steady state's
``prompts_per_client - 1``: the later requests are sent as earlier ones end, spread out by the
wave's own prefill, and taken at :func:`colocated_closed_loop`'s steady state.

Times are seconds, token counts tokens, rates requests per second.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass, field, replace
from functools import lru_cache, partial
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from prfaas_plan.engine import mean_accepted_tokens
from prfaas_plan.errors import InvalidInput, Unsustainable
from prfaas_plan.hardware import Instance
from prfaas_plan.kvcache import CacheSettings, requests_per_instance_memory
from prfaas_plan.layout import instance_layout
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
    from collections.abc import Callable

    from prfaas_plan.engine import EngineProfile, Speculative

TOLERANCE = 1e-12
"""Relative tolerance of the fixed points' roots (and of the iterations that remain)."""
MAX_ROUNDS = 2000
MAX_DOUBLINGS = 200
"""Most doublings (or halvings) of a root's bracket from its start (2^200: beyond any time in s)."""
PREFILL_FIRST_FLOOR = 1e-6
"""Least share of time a prefill-first engine's decodes are taken to get in a closed-loop round
(a round whose prompt steps would fill the time: the fixed point's next round, at the lower
rate its long TPOT gives, pulls back)."""
CHAIN_QUANTUM_TOKENS = 256
"""Largest backlog unit of the open loop's step chain (tokens): a prompt is ``ceil(isl / 256)`` units."""
CHAIN_TAIL = 1e-12
"""Backlog tail probability where the step chain's states stop (the geometric tail of full steps)."""
CHAIN_MAX_STATES = 512
"""Most backlog states of the step chain (near saturation; the top state lumps the tail)."""


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
    step's token budget, ``fit`` the requests the engine runs at once: those memory holds in steady
    state (``memory_fit``: :func:`~prfaas_plan.perf.latency.requests_fit` at ``held_tokens``, the
    mean context a running request holds: :func:`~prfaas_plan.perf.latency.held_context_tokens`),
    at most the profile's ``max_running_requests``; ``request_s`` the request overhead."""

    case: _Case
    isl: int
    osl: int
    k: int
    accepted: float
    batch: np.ndarray
    budget: int
    memory_fit: int
    request_s: float
    held_tokens: float

    @property
    def fit(self) -> int:
        """Requests the engine runs at once: what memory holds, at most ``max_running_requests``."""
        cap = self.case.inst.engine_profile.max_running_requests
        return self.memory_fit if cap is None else min(self.memory_fit, cap)

    @property
    def recv_steps(self) -> int:
        """Decode steps between the scheduler's polls for new requests (the profile's ``recv_interval_steps``)."""
        return self.case.inst.engine_profile.recv_interval_steps

    def poll_s(self, decode_s: float, decoding_share: float) -> float:
        """A new request's mean wait, beyond the step in progress, for the scheduler to take it in:
        ``(N - 1) / 2`` decode steps when it arrives while the engine decodes (``decoding_share`` of
        the time; a prompt step is followed by a poll at once)."""
        return (self.recv_steps - 1) / 2.0 * decode_s * max(decoding_share, 0.0)

    @property
    def mixed(self) -> bool:
        """Whether prompt chunks ride in the decodes' steps (the profile's ``mixed_prefill``); else a
        step with prompts waiting prefills them alone (prefill first)."""
        return self.case.inst.engine_profile.mixed_prefill

    def prompt_room_tokens(self, b: float) -> float:
        """Prompt tokens a step beside ``b`` decodes takes while prompts wait: the budget they
        leave, whole prompts only under the profile's ``max_prefill_tokens``
        (:meth:`~prfaas_plan.engine.EngineProfile.prompt_room_tokens`)."""
        return self.case.inst.engine_profile.prompt_room_tokens(self.budget, self.isl, b * (self.k + 1))

    def times(self, b: int) -> StepTimes:
        """The steps beside an integer decode batch ``b`` (cached per content of the case)."""
        return _point_times(self.case, self.isl, self.osl, int(b))

    def chunk_s(self, b: int, tokens: int) -> float:
        """A step of an integer decode batch ``b`` and one prompt chunk of ``tokens`` tokens at prefix 0
        (``full_s``'s convention, at fewer tokens), cached per content of the case."""
        return _chunk_s(self.case, self.isl, self.osl, int(b), int(tokens))

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
    eng = inst.engine_profile
    memory_fit = requests_fit(model, inst, held, free, case.settings)
    cap = eng.max_running_requests  # the engine runs no more, whatever its cache holds
    k, accepted = (0, 1.0) if spec is None else (spec.draft_tokens, spec.accepted_tokens)
    return StepTable(case, isl, osl, k, accepted, _batch_grid(memory_fit if cap is None else min(memory_fit, cap)),
                     inst.chunked_prefill_tokens, memory_fit, eng.request_overhead_s, held)


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
    avail = int(eng.prompt_room_tokens(inst.chunked_prefill_tokens, isl, b * (k + 1)))
    n = math.ceil(isl / avail)
    sizes = np.minimum(avail, isl - avail * np.arange(n)).astype(float)
    prefix = avail * np.arange(n, dtype=float)
    s = mixed_step_ops(model, inst, b * (k + 1), ctx, sizes, prefix, eng, kv).total_s
    full = float(mixed_step_ops(model, inst, b * (k + 1), ctx, np.array([float(avail)]), np.zeros(1), eng,
                                kv).total_s[0]) + draft
    return StepTimes(dec, float(np.sum(s)) + n * draft, float(n), full)


@lru_cache(maxsize=16384)
def _chunk_s(case: _Case, isl: int, osl: int, b: int, tokens: int) -> float:
    """See :meth:`StepTable.chunk_s`: decodes as in :func:`_point_times`, drafting included."""
    model, inst, settings = case.model, case.inst, case.settings
    spec = speculative(model, inst)
    k = 0 if spec is None else spec.draft_tokens
    kv = settings.kv_dtype if settings is not None else "bf16"
    ctx = isl + osl / 2.0
    step = mixed_step_ops(model, inst, b * (k + 1), ctx, np.array([float(tokens)]), np.zeros(1), inst.engine_profile, kv)
    return float(step.total_s[0]) + draft_step_s(model, inst, b, ctx, settings)


def _check(isl: int, osl: int) -> None:
    if isinstance(isl, bool) or not isinstance(isl, int | np.integer) or isl < 1:
        raise InvalidInput(f"isl_tokens: must be a whole number of tokens >= 1, got {isl!r}")
    if isinstance(osl, bool) or not isinstance(osl, int | np.integer) or osl < 1:
        raise InvalidInput(f"osl_tokens: must be a whole number of tokens >= 1, got {osl!r}")


def _solve(t: StepTable, isl: int, osl: int, clients: float | None, rate: float | None) -> dict:
    """The fixed point (TTFT, TPOT) for ``clients`` in a closed loop (:func:`_solve_closed`), or
    Poisson ``rate`` (:func:`_solve_open`)."""
    return _solve_open(t, isl, osl, rate) if clients is None else _solve_closed(t, isl, osl, clients)


def _closed_round(t: StepTable, isl: int, osl: int, clients: float, ttft: float, tpot: float) -> tuple[float, float, dict]:
    """One round of the closed loop: the (TTFT, TPOT) in s that ``clients`` clients imply when each
    request takes ``ttft`` and then ``tpot`` per output token, and the round's step, prefill share,
    prefill utilisation and saturation. The others' prompts arrive to an idle prefill server
    (probability ``1 - rho``) and take their own chunk steps, or to a busy one and share
    full-budget steps."""
    d = (osl - 1) * tpot
    r = ttft + d
    x = clients / r
    others = (clients - 1) * d / r
    x_o = x * (clients - 1) / clients
    busy = 1.0 if clients > 1 else 0.0  # another client's step is in progress
    beside = others if t.mixed else 0.0  # decodes a prompt's steps carry
    _, sp_pre, n_pre, full_pre = t.at(beside)
    avail = t.prompt_room_tokens(beside)
    own = isl / avail * full_pre  # a prompt's share of full-budget steps: the prefill server's time
    rho = x_o * own
    s0, sp, n, full = t.at(1.0 + others)
    if not t.mixed:
        sp, n, full = sp_pre, n_pre, full_pre
    share = min(rho, 1.0)
    chunk_time = x_o * ((1.0 - share) * sp + share * own)  # fraction of engine time in chunk steps
    n_eff = (1.0 - share) * n + share * isl / avail
    if t.mixed:  # saturated: prompts queue, every step carries the whole prefill budget
        step = full if chunk_time >= 1.0 else 1.0 / (x_o * n_eff + (1.0 - chunk_time) / s0)
        residual = step / 2.0
    else:  # decodes advance only in the time prompt steps leave (a saturated round: the next pulls back)
        idle = max(1.0 - chunk_time, PREFILL_FIRST_FLOOR)
        step = s0 / idle
        residual = (idle * s0 + (1.0 - idle) * sp / n_eff) / 2.0  # n_eff >= 1 chunk step per prompt
    queue = min(rho / (1.0 - rho) * own / 2.0 if rho < 1.0 else math.inf, (clients - 1) * sp_pre)
    new_ttft = t.request_s + busy * (residual + t.poll_s(s0, 1.0 - chunk_time)) + queue + sp_pre
    return new_ttft, step / t.accepted, dict(step=step, share=min(1.0, x * sp_pre), rho=rho,
                                              saturated=chunk_time >= 1.0)


def _root_near(f: Callable[[float], float], start: float) -> float:
    """The root of ``f`` (positive below it, negative above it) nearest ``start`` > 0 on a log
    scale: the bracket doubles (or halves) from ``start`` until ``f`` changes sign, then Brent to
    :data:`TOLERANCE` relative; inf when ``f`` stays positive up to ``2^MAX_DOUBLINGS start``, the
    last halving when it stays negative down to ``2^-MAX_DOUBLINGS start``."""
    from scipy.optimize import brentq

    f = lru_cache(maxsize=None)(f)  # Brent asks again for the bracket's ends
    lo = hi = start
    if f(start) > 0.0:
        for _ in range(MAX_DOUBLINGS):
            lo, hi = hi, 2.0 * hi
            if f(hi) <= 0.0:
                break
        else:
            return math.inf
    else:
        for _ in range(MAX_DOUBLINGS):
            lo, hi = lo / 2.0, lo
            if f(lo) >= 0.0:
                break
        else:
            return lo
    return hi if f(hi) == 0.0 else brentq(f, lo, hi, xtol=1e-300, rtol=TOLERANCE, maxiter=MAX_ROUNDS)


def _solve_closed(t: StepTable, isl: int, osl: int, clients: float) -> dict:
    """The closed loop's fixed point of :func:`_closed_round` as two nested roots: at a TPOT the
    TTFT the round returns falls as the TTFT assumed grows (a longer residence, a lower rate, a
    shorter queue), so the TTFT the loop implies is the root of ``ttft_round - ttft``; TPOT is then
    the root of ``tpot_round - tpot``. Each is searched from the unloaded value (the prompt alone;
    the batch-1 step), the inner one from the TTFT last found, on a log scale either way: measured
    step tables are not monotone in the batch (a batch-4 step can be faster than a batch-1 one).
    Plain iteration of the round, even damped, can cycle near saturation, where the step and the
    queue are steep in the rate. Both roots are finite: the round's TTFT is bounded (its queue by
    the other clients' prompts) and so is its step (by the batch of every client)."""
    last_ttft = t.request_s + t.at(0.0)[1]  # the inner root's start: the prompt alone, then the TTFT last found

    def ttft_at(tpot: float) -> float:
        nonlocal last_ttft
        last_ttft = _root_near(lambda y: _closed_round(t, isl, osl, clients, y, tpot)[0] - y, last_ttft)
        return last_ttft

    def excess(tpot: float) -> float:
        return _closed_round(t, isl, osl, clients, ttft_at(tpot), tpot)[1] - tpot

    tpot = _root_near(excess, t.at(1.0)[0] / t.accepted)
    ttft = ttft_at(tpot)
    _, _, out = _closed_round(t, isl, osl, clients, ttft, tpot)
    return dict(out, ttft=ttft, tpot=tpot)


def _solve_open(t: StepTable, isl: int, osl: int, rate: float) -> dict:
    """The open loop's fixed point (TTFT, TPOT) at Poisson ``rate``: the decode batch ``rate D``
    (mean field, ``D = (osl - 1) TPOT``) sets the steps of the step chain (:func:`_step_chain`),
    whose mean step is TPOT and whose prompts' residence is TTFT, less the step in progress when
    the engine is empty (``exp(-rate R)`` of the time, M/G/inf). TPOT is the root of
    ``g(TPOT) = TPOT`` in :func:`_open_bracket`'s bracket (Brent, to :data:`TOLERANCE` relative)."""
    from scipy.optimize import brentq

    chains = lru_cache(maxsize=None)(partial(_step_chain, t, rate))  # the bracket, Brent and the root ask again
    bracket, rho = _open_bracket(chains, t, osl, rate)
    if bracket is None:
        return dict(rho=rho, ttft=math.inf, tpot=math.inf, converged=False)
    lo, hi = bracket
    tpot = lo if _excess(chains, t, osl, rate, lo) <= 0.0 else brentq(
        lambda x: _excess(chains, t, osl, rate, x), lo, hi, xtol=1e-300, rtol=TOLERANCE, maxiter=MAX_ROUNDS)
    chain, d = chains(1.0 + rate * (osl - 1) * tpot), (osl - 1) * tpot
    ttft = t.request_s + chain["prefill_s"] + chain["residual_s"]
    for _ in range(MAX_ROUNDS):  # TTFT = overhead + P(engine busy | its own R) x residual + prefill
        new = t.request_s + (1.0 - math.exp(-rate * (ttft + d))) * chain["residual_s"] + chain["prefill_s"]
        ttft, change = new, abs(new - ttft) / ttft
        if change < TOLERANCE:
            break
    return dict(step=chain["token_s"], share=chain["share"], rho=_stable(t, rate, osl, tpot)[1],
                saturated=chain["share"] >= 1.0, ttft=ttft, tpot=tpot, converged=True)


def _excess(chains: Callable[[float], dict], t: StepTable, osl: int, rate: float, tpot: float) -> float:
    """``g(TPOT) - TPOT`` (s): the step chain's mean step per accepted token beside the decode
    batch ``1 + rate (osl - 1) TPOT`` that a decoding request sees, less the TPOT assumed;
    ``chains(b)`` is :func:`_step_chain` at ``rate`` beside the decode batch ``b``."""
    return chains(1.0 + rate * (osl - 1) * tpot)["token_s"] / t.accepted - tpot


def _open_bracket(chains: Callable[[float], dict], t: StepTable, osl: int,
                  rate: float) -> tuple[tuple[float, float] | None, float]:
    """A bracket ``(lo, hi)`` of the open loop's TPOT (s) at ``rate`` (``_excess`` >= 0 at ``lo``,
    <= 0 at ``hi``), or None where it has none, and ``rho`` there. From the batch-1 decode step
    (``g >= TPOT``) TPOT doubles until the excess turns negative; the chain has a steady state only
    below a largest TPOT (:func:`_stable`; bisection to :data:`TOLERANCE`), and where the excess
    is still positive there the rate is not sustained."""
    lo = t.at(1.0).decode_s / t.accepted
    ok, rho = _stable(t, rate, osl, lo)
    if not ok:
        return None, rho
    hi = 2.0 * lo
    while math.isfinite(hi) and _stable(t, rate, osl, hi)[0] and _excess(chains, t, osl, rate, hi) > 0.0:
        lo, hi = hi, 2.0 * hi
    if _stable(t, rate, osl, hi)[0]:
        return (lo, hi), rho
    edge, past = lo, hi  # the stable edge: the root lies below it, if anywhere
    while past - edge > TOLERANCE * edge:
        mid = 0.5 * (edge + past)
        edge, past = (mid, past) if _stable(t, rate, osl, mid)[0] else (edge, mid)
    if _excess(chains, t, osl, rate, edge) > 0.0:
        return None, max(_stable(t, rate, osl, past)[1], 1.0)
    return (lo, edge), rho


def _stable(t: StepTable, rate: float, osl: int, tpot: float) -> tuple[bool, float]:
    """Whether the step chain at ``rate`` beside the decode batch of ``tpot`` has a steady state
    (full steps take more than arrive, and ``rho``, the prefill budget's utilisation with prompts
    packed into full-budget steps beside ``rate D`` decodes, is below 1), and ``rho``."""
    others = rate * (osl - 1) * tpot
    beside = others if t.mixed else 0.0  # decodes a prompt's steps carry
    rho = rate * t.isl / t.prompt_room_tokens(beside) * t.at(beside).full_s
    m, a, s_c = _chain_steps(t, 1.0 + others)
    return bool(rho < 1.0 and m * rate * s_c[a] < a), float(rho)


def _chain_steps(t: StepTable, b: float) -> tuple[int, int, np.ndarray]:
    """The step chain's units per prompt ``m`` (:data:`CHAIN_QUANTUM_TOKENS`), units a step takes
    ``a`` beside a decode batch ``b`` (the budget it leaves, rounded to a unit), and the step
    times ``s(c)`` for ``c = 0 .. a`` units (s): at 0 the decode steps until the scheduler's next
    poll for arrivals (one, or ``recv_steps``: :attr:`StepTable.recv_steps`), else a step of one chunk of
    ``c isl / m`` tokens at prefix 0 (:func:`_chunk_steps`) beside the ``b`` decodes, or beside none
    on a prefill-first engine (its prompt steps carry no decode and have the whole budget)."""
    m = max(1, math.ceil(t.isl / CHAIN_QUANTUM_TOKENS))
    beside = b if t.mixed else 0.0
    a = max(1, round(t.prompt_room_tokens(beside) * m / t.isl))
    # no backlog at a poll: the decodes run until the next one (recv_steps decode steps)
    return m, a, np.concatenate([[t.recv_steps * t.at(b).decode_s], _chunk_steps(t, beside, m, a)])


def _step_chain(t: StepTable, rate: float, b: float) -> dict:
    """The engine's steps beside a decode batch ``b`` under Poisson prompts at ``rate``, as a Markov
    chain (:func:`_stable` says where it has a steady state): the state is the prompt backlog at a
    step's start in units of ``isl / m`` tokens; a step takes up to ``a`` units, lasts ``s(c)``
    for ``c`` units (:func:`_chain_steps`), and the next step starts with what it left plus ``m``
    units per prompt that arrived during it (Poisson ``rate s(c)``: an arrival waits for the step's
    end). States run to where the backlog's
    geometric tail (full steps: ``z^a exp(rate s(a) (z^-m - 1)) = 1``) falls below
    :data:`CHAIN_TAIL`, at most :data:`CHAIN_MAX_STATES` (the top state lumps the tail; the backlog's
    mean excess over ``a``, ``E[(X - a)+] = (m^2 E[N^2] - E[C^2]) / 2 (a - m E[N | full])`` with
    ``C`` the units a step takes and ``N`` its arrivals, from ``E[X'^2] = E[X^2]``, exact for the
    untruncated chain, replaces the truncated one's). Returns the mean step over steps
    ``step_s``, the time per decode step ``token_s`` (``step_s`` over the decode steps a chain
    step runs: ``recv_steps`` without backlog, one with it, none on a prefill-first engine, whose
    prompt steps carry no decode), the mean residual of the step in progress at a random time ``residual_s = E[s^2] /
    2 E[s]``, a prompt's mean time from the next step's start to the end of its last chunk's step
    ``prefill_s`` (Little: the prompts present in steps, ``ceil(units / m)`` at a step's start, per
    arrival rate), and ``share``, the fraction of time in steps carrying a chunk. Seconds."""
    from scipy.sparse import coo_matrix, csc_matrix, identity
    from scipy.sparse.linalg import spsolve

    m, a, s_c = _chain_steps(t, b)
    full = rate * s_c[a]  # prompts arriving during a full step
    z = _tail_decay(a, m, full)
    states = int(min(a + m + math.ceil(math.log(CHAIN_TAIL) / math.log(z)), CHAIN_MAX_STATES))
    j = np.arange(states + 1)
    c = np.minimum(j, a)
    lam_c = rate * s_c
    s, lam = s_c[c], lam_c[c]
    n = np.arange(math.ceil(full + 8.0 * math.sqrt(full) + 8.0) + 1)  # Poisson tail < 1e-13
    log_fact = np.concatenate([[0.0], np.cumsum(np.log(n[1:]))])
    pmf = np.exp(n * np.log(lam)[:, None] - lam[:, None] - log_fact)
    pmf[:, -1] += np.maximum(1.0 - pmf.sum(axis=1), 0.0)
    to = np.minimum((j - c)[:, None] + m * n, states)
    p = coo_matrix((pmf.ravel(), (np.repeat(j, len(n)), to.ravel())), shape=(states + 1,) * 2)
    balance = csc_matrix(p.T - identity(states + 1))  # pi (P - I) = 0: banded, kept in order below
    pi = np.concatenate([[1.0], spsolve(balance[1:, 1:], -balance[1:, 0].toarray().ravel(), permc_spec="NATURAL")])
    pi = np.maximum(pi, 0.0) / np.maximum(pi, 0.0).sum()
    step = float(pi @ s)
    p_c = np.bincount(c, weights=pi, minlength=a + 1)  # the units a step takes
    excess = (m * m * float(p_c @ (lam_c + lam_c ** 2)) - float(p_c @ np.arange(a + 1) ** 2)) / (2.0 * (a - m * full))
    waiting = float(pi @ (s * np.ceil(j / m))) + s_c[a] * (excess - float(pi @ np.maximum(j - a, 0))) / m
    decodes = t.recv_steps * float(pi[0]) + (1.0 - float(pi[0]) if t.mixed else 0.0)  # decode steps a chain step runs
    return dict(step_s=step, token_s=step / decodes,
                residual_s=float(pi @ s ** 2) / (2.0 * step), prefill_s=waiting / (rate * step),
                share=float(pi[1:] @ s[1:]) / step)


def _tail_decay(a: int, m: int, full: float) -> float:
    """The root ``z`` in (0, 1) of ``a ln z + full (z^-m - 1) = 0`` (bisection in ``ln z``): the
    geometric decay per unit of a backlog that full steps (``a`` units each, ``full`` prompts of
    ``m`` units arriving per step on average, ``m full < a``) serve."""
    lo, hi = -1.0, 0.0  # ln z; f(hi) = 0 is the trivial root, f < 0 just below it
    while a * lo + full * math.expm1(-m * lo) < 0.0:
        lo *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if a * mid + full * math.expm1(-m * mid) < 0.0:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-12 * abs(lo):
            break
    return math.exp(0.5 * (lo + hi))


def _chunk_steps(t: StepTable, b: float, m: int, a: int) -> np.ndarray:
    """Steps of decode batch ``b`` and one chunk of ``c isl / m`` tokens, ``c = 1 .. a`` (s), linear
    in ``b`` between the table's grid batches as :meth:`StepTable.at` is."""
    hi = int(min(np.searchsorted(t.batch, b), len(t.batch) - 1))
    lo = max(hi - 1, 0)
    b_lo, b_hi = t.batch[lo], t.batch[hi]
    w = 0.0 if b_hi == b_lo else min(max((b - b_lo) / (b_hi - b_lo), 0.0), 1.0)
    units = max(a, math.ceil(t.budget * m / t.isl))
    lo_s, hi_s = (_chunk_row(t.case, t.isl, t.osl, int(g), m, units)[:a] for g in (b_lo, b_hi))
    return (1.0 - w) * lo_s + w * hi_s


@lru_cache(maxsize=4096)
def _chunk_row(case: _Case, isl: int, osl: int, b: int, m: int, units: int) -> np.ndarray:
    """:meth:`StepTable.chunk_s` at decode batch ``b`` for chunks of ``round(c isl / m)`` tokens,
    ``c = 1 .. units``, in one kernel-model call (s, drafting included)."""
    model, inst, settings = case.model, case.inst, case.settings
    spec = speculative(model, inst)
    k = 0 if spec is None else spec.draft_tokens
    kv = settings.kv_dtype if settings is not None else "bf16"
    ctx = isl + osl / 2.0
    tokens = np.maximum(np.round(np.arange(1, units + 1) * isl / m), 1.0)
    step = mixed_step_ops(model, inst, b * (k + 1), ctx, tokens, np.zeros(units), inst.engine_profile, kv)
    out = np.asarray(step.total_s, dtype=float) + draft_step_s(model, inst, b, ctx, settings)
    out.flags.writeable = False
    return out


def _point(s: dict, osl: int, x: float, wait_s: float, notes: list[str]) -> ServingPoint:
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
    if isinstance(concurrency, bool) or not isinstance(concurrency, int | np.integer) or concurrency < 1:
        raise InvalidInput(f"concurrency: must be a whole number of clients >= 1, got {concurrency!r}")
    t = step_table(model, with_spec(inst, spec), isl_tokens, osl_tokens, settings)
    notes = []
    running = min(int(concurrency), t.fit)
    if running < concurrency:
        bound = (f"memory-bound: {t.fit} running requests of {t.held_tokens:g} tokens on average fit"
                 if t.fit == t.memory_fit else f"running-request cap: the engine runs at most {t.fit} requests "
                 f"(max_running_requests; memory holds {t.memory_fit})")
        notes.append(f"{bound}; {concurrency - running} clients wait in the queue (their wait is in TTFT)")
    s = _solve(t, int(isl_tokens), int(osl_tokens), float(running), None)
    x = running / (s["ttft"] + (osl_tokens - 1) * s["tpot"])
    return _point(s, int(osl_tokens), x, (concurrency - running) / x, notes)


@dataclass(frozen=True)
class BenchmarkRun:
    """A finite closed-loop benchmark run with a burst start, as ``benchmark_serving.py --dataset-name
    random --request-rate inf --max-concurrency c --num-prompts N`` runs it: every client's first
    request is sent at t = 0 (an infinite rate creates all ``N`` requests at once; a semaphore of
    ``c`` gates them), ``prompts_per_client = N / c`` requests per client, all measured (the
    ``--num-warmups`` requests are awaited before the measured run starts). Lengths: uniform whole
    numbers in ``[int(range_ratio L), L]`` for a nominal length ``L``, ``--random-range-ratio`` as
    the ``sample_random_requests`` of InferenceX's copy (utils/bench_serving/benchmark_serving.py,
    ``lower = int(seq_len * range_ratio)``, ``upper = seq_len``) and of vLLM's legacy benchmark read
    it (1: fixed lengths; vLLM's newer ``[(1 - r) L, (1 + r) L]`` has mean ``L``: give 1), taken at
    their mean (:meth:`mean_tokens`).

    InferenceX (https://github.com/SemiAnalysisAI/InferenceX, benchmarks/benchmark_lib.sh
    ``run_benchmark_serving``; ``--num-prompts $((CONC * 10))`` in its per-model scripts;
    ``RANDOM_RANGE_RATIO: 0.8`` in .github/workflows/benchmark-tmpl.yml): ``BenchmarkRun(10, 0.8)``.

    ``warmup_per_client``: requests per client sent first and not measured (aiperf's and genai-perf's
    ``--warmup-request-count``, as a multiple of ``c``). It names the run and changes no prediction:
    the drivers drain their warm-up before the measured requests start, which then start together
    from an idle engine, a burst like any run's first. perf_analyzer, which runs genai-perf's load
    (https://github.com/triton-inference-server/perf_analyzer, src/concurrency_manager.cc
    ``PerformWarmup`` since #74 of 2024-09-06: its warm-up clients run their requests, then
    ``WaitForWarmupAndCleanup`` joins them, before ``ChangeConcurrencyLevel`` starts the ``c``
    measured clients; ``InferenceProfiler::ProfileHelper`` then records from an empty request
    list); ``vllm bench serve`` awaits its ``--num-warmups`` requests the same way, and aiperf its
    warm-up credits (aiperf/timing/credit_issuing_strategy.py ``_execute_phases``).
    """

    prompts_per_client: int = 10
    range_ratio: float = 1.0
    warmup_per_client: int = 0

    def __post_init__(self) -> None:
        n = self.prompts_per_client
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
            raise InvalidInput(f"run.prompts_per_client: must be a whole number >= 1, got {n!r}")
        r = self.range_ratio
        if isinstance(r, bool) or not isinstance(r, int | float) or not 0.0 <= r <= 1.0:
            raise InvalidInput(f"run.range_ratio: must be a number in [0, 1], got {r!r}")
        w = self.warmup_per_client
        if isinstance(w, bool) or not isinstance(w, int | np.integer) or w < 0:
            raise InvalidInput(f"run.warmup_per_client: must be a whole number >= 0, got {w!r}")

    def mean_tokens(self, nominal_tokens: int) -> int:
        """The mean of the uniform whole lengths in ``[int(range_ratio L), L]``, rounded half up, at least 1."""
        lo = int(nominal_tokens * self.range_ratio)
        return max((lo + int(nominal_tokens) + 1) // 2, 1)


def colocated_benchmark(model: ModelSpec, inst: Instance, isl_tokens: int, osl_tokens: int, concurrency: int,
                        run: BenchmarkRun = BenchmarkRun(), settings: CacheSettings | None = None,
                        spec: SpecDecode | None = None) -> ServingPoint:
    """The mean TTFT and TPOT over the measured requests of a finite benchmark ``run``
    (:class:`BenchmarkRun`) of ``concurrency`` clients; lengths at the run's means
    (:meth:`BenchmarkRun.mean_tokens`).

    * In general: the first wave, ``w = min(c, fit)`` requests sent together (:func:`_first_wave`),
      and the other ``prompts_per_client c - w`` at the steady state of :func:`colocated_closed_loop`,
      every request weighted alike (the benchmark's mean over its requests); a warm-up, drained
      before the measured requests start (:class:`BenchmarkRun`), leaves the first wave measured.
      The other fields (step, shares, batch, throughput) are the steady state's.
    * Lockstep: fixed lengths (``range_ratio`` 1) on a prefill-first engine (``mixed_prefill``
      false) with every client running (``w = c``): the wave's prompts are all prefilled before
      any decodes, so they decode together, end in the same step and send the next wave together;
      every wave, warm-up or measured, is the first. TTFT and TPOT are its means; throughput is
      ``c`` per wave period (the request overhead, the burst's steps and the decode steps), the
      batch and shares over that period."""
    _check(isl_tokens, osl_tokens)
    if not isinstance(run, BenchmarkRun):
        raise InvalidInput("run: give a BenchmarkRun")
    isl, osl = run.mean_tokens(isl_tokens), run.mean_tokens(osl_tokens)
    steady = colocated_closed_loop(model, inst, isl, osl, concurrency, settings, spec)
    t = step_table(model, with_spec(inst, spec), isl, osl, settings)
    wave = min(int(concurrency), t.fit)
    ttft_s, tpot_s = _first_wave(t, wave, steady.tpot_s)
    if run.range_ratio == 1.0 and not t.mixed and wave == concurrency and osl > 1:
        return _lockstep(t, wave, ttft_s, tpot_s)
    n = run.prompts_per_client * int(concurrency)
    note = (f"benchmark run: {run.prompts_per_client} requests per client from a burst start; first wave of "
            f"{wave}: mean TTFT {ttft_s.mean() * 1e3:.4g} ms, TPOT {tpot_s.mean() * 1e3:.4g} ms"
            + (f" (after a drained warm-up of {run.warmup_per_client} per client)" if run.warmup_per_client else ""))
    return replace(steady, ttft_s=float((ttft_s.sum() + (n - wave) * steady.ttft_s) / n),
                   tpot_s=float((tpot_s.sum() + (n - wave) * steady.tpot_s) / n), notes=(*steady.notes, note))


def _lockstep(t: StepTable, wave: int, ttft_s: np.ndarray, tpot_s: np.ndarray) -> ServingPoint:
    """The lockstep regime of :func:`colocated_benchmark`: every wave is the first, whose ``wave``
    requests have first tokens at ``ttft_s`` and decode together ``ceil((osl - 1) / accepted)``
    steps from the burst's last prefill step (the latest first token) on."""
    steps = math.ceil((t.osl - 1) / t.accepted)
    decode_s = t.at(float(wave)).decode_s
    burst_s = float(ttft_s.max())  # the request overhead and the burst's prefill steps
    period_s = burst_s + steps * decode_s
    x = wave / period_s
    note = (f"lockstep: fixed lengths on a prefill-first engine; every wave of {wave} is prefilled "
            f"({burst_s * 1e3:.4g} ms with the request overhead) before it decodes {steps} steps together")
    return ServingPoint(ttft_s=float(ttft_s.mean()), tpot_s=float(tpot_s.mean()), step_s=decode_s,
                        prefill_share=(burst_s - t.request_s) / period_s, batch=wave * steps * decode_s / period_s,
                        throughput_rps=x, output_tokens_per_s=x * t.osl, notes=(note,))


def _first_wave(t: StepTable, wave: int, tail_tpot_s: float) -> tuple[np.ndarray, np.ndarray]:
    """TTFT and TPOT (s) of ``wave`` requests sent together at t = 0, by the engine's step loop
    until the first of them ends (when its client sends the next request and the run heads for
    its steady state). They reach the engine after the request overhead; each step the running
    decodes take ``k + 1`` tokens of the budget each and the prompts the rest, first come first
    served, a prompt's first token out at the end of the step that finishes it, its decodes from
    the next step on, ``accepted`` tokens a step. A step carrying ``b`` decodes and a full share of
    prompt tokens is the table's ``full_s`` at ``b`` (linear between grid batches); the last,
    partial one is a step of its tokens (:meth:`StepTable.chunk_s`). A prefill-first engine
    (``mixed_prefill`` false) runs no decode while prompts wait: its steps are prompt tokens alone
    and every request of the wave decodes from the step after the burst. Once every prompt is in,
    pure decode steps at batch ``wave`` run until the first request ends (no prompt arrives before:
    the clients send their next requests as theirs end); the tokens left after that run at the
    steady state's ``tail_tpot_s`` per token. With ``osl = 1`` TPOT is nan (no decode)."""
    isl, osl, mixed = t.isl, t.osl, t.mixed
    steps = math.ceil((osl - 1) / t.accepted)  # decode steps a request runs
    ends = [t.request_s]  # ends[m + 1]: when step m ends
    done_at: list[int] = []  # the step that finishes each prompt, in order
    total = wave * isl
    left = total  # prompt tokens still to prefill
    while left > 0:
        m = len(ends) - 1
        # decodes running in step m; a prefill-first engine runs none while prompts wait
        b = len(done_at) - bisect_left(done_at, m - steps) if steps and mixed else 0
        now = t.at(b)
        avail = int(t.prompt_room_tokens(b))
        take = min(avail, left)
        s = now.full_s if take == avail else t.chunk_s(b, take)
        ends.append(ends[-1] + s)
        left -= take
        done_at += [m] * ((total - left) // isl - len(done_at))
    ends_s, first = np.asarray(ends), np.asarray(done_at)
    ttft = ends_s[first + 1]
    if osl == 1:
        return ttft, np.full(wave, math.nan)
    last = len(ends) - 2  # the burst's last step
    start = first if mixed else np.full(wave, last)  # each decodes from the step after ``start``
    stop = max(last, int(start[0]) + steps)  # the loop's last step: the first request's last, if after the burst
    pure_s = t.at(float(wave)).decode_s  # a decode step beside no prompt, every request of the wave running

    def end_s(m: np.ndarray) -> np.ndarray:  # when step m ends
        return np.where(m <= last, ends_s[np.minimum(m, last) + 1], ends_s[last + 1] + (m - last) * pure_s)

    run = np.minimum(start + steps, stop) - start  # decode steps each runs within the loop
    tail = np.maximum(osl - 1 - run * t.accepted, 0.0) * tail_tpot_s
    return ttft, (end_s(start + run) - ttft + tail) / (osl - 1)


def colocated_open_loop(model: ModelSpec, inst: Instance, isl_tokens: int, osl_tokens: int, rate_rps: float,
                        settings: CacheSettings | None = None, spec: SpecDecode | None = None) -> ServingPoint:
    """Steady state of an aggregated engine fed Poisson arrivals at ``rate_rps``; a rate the
    engine cannot sustain (prefill budget or memory) is a one-line
    :class:`~prfaas_plan.errors.Unsustainable` (an InvalidInput). ``spec`` as in :func:`colocated_closed_loop`."""
    _check(isl_tokens, osl_tokens)
    if not isinstance(rate_rps, int | float) or not math.isfinite(rate_rps) or rate_rps <= 0:
        raise InvalidInput(f"rate_rps: must be a positive number of requests per second, got {rate_rps!r}")
    t = step_table(model, with_spec(inst, spec), isl_tokens, osl_tokens, settings)
    s = _solve(t, int(isl_tokens), int(osl_tokens), None, float(rate_rps))
    in_system = rate_rps * (s["ttft"] + (osl_tokens - 1) * s["tpot"])
    if not s["converged"] or s.get("rho", 1.0) >= 1.0 or in_system > t.fit:
        raise Unsustainable(f"rate_rps: {rate_rps:g} requests/s is more than {inst.name} sustains for "
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
        except Unsustainable:
            return False
        return True

    if not sustains(lo):
        raise Unsustainable(f"rate_rps: {inst.name} cannot sustain even {lo:g} requests/s of "
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
    * Prefill: ``P`` workers, each of ``n`` attention-DP ranks (``n = 1`` under attention TP) that
      schedule their own prompts (SGLang and vLLM run a scheduler per DP rank): ``S = P n`` servers.
      A prompt alone on a rank takes ``T_p = prefill_time_s(isl)``. A rank batches waiting prompts
      up to ``B`` tokens a forward (the engine's budget, divided among the ranks where the engine
      does so: :meth:`~prfaas_plan.engine.EngineProfile.rank_prefill_tokens_on`; whole prompts
      within SGLang's ``--max-prefill-tokens`` where it is below:
      :meth:`~prfaas_plan.engine.EngineProfile.prompt_room_tokens`): for ``isl < B`` a
      forward carries ``k = floor(B / isl)`` prompts and is timed as the prefill of ``B`` tokens
      (one sequence: its attention is an upper bound) with every rank doing the same (the shared
      MoE over all ranks' tokens: ``every_rank``), so a server's capacity is one prompt per
      ``T_b = T_full / k`` (``T_full`` that forward; ``k = 1`` for ``isl >= B``). The wait for a
      server is the M/D/c mean (:class:`~prfaas_plan.queueing.WaitDist`, ``scv = 0``, ``S`` servers
      of service ``T_b``, the others' arrivals ``X (c - 1) / c``), capped by the closed loop's
      population: at most the others not in decode are ahead,
      ``(c - 1) (1 - (osl - 1) TPOT / R) T_b / S`` (the saturated closed loop's wait); the
      request's own service is ``T_p`` when it finds its server idle (probability ``1 - rho``) and a
      whole batched forward ``T_full`` when busy (``rho``, the per-server utilisation, capped at 1).
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

    Fixed point: TPOT as the root of ``step(1 + decoding / D) - TPOT`` (Brent to ``TOLERANCE``,
    1e-12 relative, bracketed from the batch-1 step, as the colocated loop's
    :func:`_solve_closed`); at each TPOT the TTFT the loop implies is found by bisection to
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

    def excess(tpot: float) -> float:  # the decode step the loop implies at this TPOT, less the TPOT
        return loop.step(1.0 + loop.prefill_side(loop.solve_ttft(tpot), tpot)[2] / d) - tpot

    tpot = _root_near(excess, loop.step(1.0))  # finite: the step is capped at ``fit``
    ttft = loop.solve_ttft(tpot)
    rho = loop.prefill_side(ttft, tpot)[1]
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
    servers: int  # prefill servers: workers x attention-DP ranks
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
        from prfaas_plan.perf.latency import prefill_latency, prefill_time_s

        n = instance_layout(model, prefill_inst).attn_dp
        engine = prefill_inst.engine_profile
        budget = engine.rank_prefill_tokens_on(prefill_inst.gpu, n)
        if budget != prefill_inst.chunked_prefill_tokens:  # each rank chunks at its share
            prefill_inst = replace(prefill_inst, engine=engine.with_chunked_prefill(budget))
        t_p = float(prefill_time_s(model, prefill_inst, isl, settings=settings))
        room = int(engine.prompt_room_tokens(budget, isl, 0))  # a forward's prompt tokens (whole prompts under a cap)
        k = max(room // isl, 1)
        t_full = t_p if n == 1 and k == 1 else \
            float(prefill_latency(model, prefill_inst, room if k > 1 else isl, settings, every_rank=True).total_s)
        nic = min(prefill_inst.gpu.nic_bytes_per_s, decode_inst.gpu.nic_bytes_per_s)
        transfer = per_gpu_kv_bytes(model, isl, instance_layout(model, prefill_inst), settings) / nic
        free = free_cache_bytes_per_gpu(model, decode_inst)
        fit = requests_per_instance_memory(model, instance_layout(model, decode_inst), isl + osl, free, settings)
        if fit < 1:
            raise InvalidInput(f"isl_tokens: one {isl + osl}-token request does not fit beside the weights on "
                               f"{decode_inst.name}")
        return cls(model, decode_inst, settings, isl, osl, min(c, d * fit), p * n, d, fit, t_p, t_full, t_full / k,
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
        w = WaitDist(running / r * (running - 1) / running, self.servers, self.t_b, 0.0)
        rho = min(w.rho, 1.0)
        decoding = (running - 1) * (osl - 1) * tpot / r  # the others in decode, not ahead in the prefill queue
        queue = min(w.mean_s, (running - 1 - decoding) * self.t_b / self.servers)
        return queue + (1.0 - rho) * self.t_p + rho * self.t_full + self.transfer, rho, decoding

    def solve_ttft(self, tpot: float) -> float:
        """The TTFT consistent with ``tpot``: bisection between the unloaded prefill and everyone ahead."""
        lo = self.t_p + self.transfer
        hi = (self.running - 1) * self.t_b / self.servers + self.t_full + self.transfer
        while hi - lo > TOLERANCE * hi:
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if self.prefill_side(mid, tpot)[0] > mid else (lo, mid)
        return 0.5 * (lo + hi)


__all__ = ["BenchmarkRun", "ServingPoint", "SpecDecode", "StepTable", "StepTimes", "colocated_benchmark",
           "colocated_closed_loop", "colocated_open_loop", "disaggregated_closed_loop", "max_sustainable_rate", "speedup_curve", "step_table", "with_spec"]
