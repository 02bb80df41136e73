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
* Memory: the decode batch must fit (:func:`~prfaas_plan.perf.latency.free_cache_bytes_per_gpu`,
  :func:`~prfaas_plan.kvcache.requests_per_instance_memory` at ``isl + osl`` tokens); clients
  beyond it wait in the engine's queue and that wait, ``(c - c_fit) / X`` by Little, is added to TTFT.

The fixed point (TTFT, TPOT) is found by damped iteration (half steps) stopped when both change by
less than 1e-12 relative, at most 2,000 rounds (a note says if it stopped short). Step times are
computed per (model, instance, settings, isl, osl, draft length) at the points of a batch grid
(every integer to 8, then powers of two, then what memory holds) the solve touches, cached,
and interpolated linearly between them; the cache
key is the full content of model, GPU, layout and engine profile, so no call depends on an earlier one's inputs.

Speculative decoding / MTP (:class:`SpecDecode`): the verify step processes ``k + 1`` tokens per
request, timed as a decode step at batch ``b (k + 1)`` (GEMMs at ``m = b (k+1)``; the attention
of ``k + 1`` queries over a context approximated by the generation attention of ``b (k+1)``
requests at that context, the same KV read once per query instead of once per request: an upper
bound on the memory traffic); drafting costs, per draft token, one extra transformer layer of the
model's shape at batch ``b`` plus the LM head (DeepSeek-V3's MTP module is one transformer block
sharing embedding and output head: arXiv 2412.19437, section 2.2). TPOT = step / accepted tokens per
step. MTP layers' weights and caches are not in the model database; their memory is not counted.

Times are seconds, token counts tokens, rates requests per second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from prfaas_plan.errors import InvalidInput
from prfaas_plan.hardware import Instance
from prfaas_plan.kvcache import CacheSettings, requests_per_instance_memory
from prfaas_plan.model.arch import ModelSpec
from prfaas_plan.perf.latency import free_cache_bytes_per_gpu
from prfaas_plan.perf.ops import decode_ops, mixed_step_ops

TOLERANCE = 1e-12
"""Relative change of TTFT and TPOT below which the fixed-point iteration stops."""
MAX_ROUNDS = 2000


@dataclass(frozen=True)
class SpecDecode:
    """Speculative decoding: ``draft_tokens`` (k) drafted per step, and either the mean tokens
    a request gains per verify step (``accepted_per_step``, in ``[1, k + 1]``: the bonus token
    included) or the acceptance rate of each draft position given the earlier ones were accepted
    (``acceptance_rates``, k values in ``[0, 1]``).

    DeepSeek-V3 (arXiv 2412.19437, section 5.4.3): with one MTP draft token the second token is
    accepted 85-90% of the time, for 1.8x the tokens per second: ``SpecDecode(1, acceptance_rates=(0.85,))``.
    """

    draft_tokens: int
    accepted_per_step: float | None = None
    acceptance_rates: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        k = self.draft_tokens
        if not isinstance(k, int) or k < 0:
            raise InvalidInput(f"spec.draft_tokens: must be a whole number >= 0, got {k!r}")
        if (self.accepted_per_step is None) == (self.acceptance_rates is None):
            raise InvalidInput("spec.accepted_per_step: give exactly one of accepted_per_step or acceptance_rates")
        if self.accepted_per_step is not None and not 1.0 <= self.accepted_per_step <= k + 1:
            raise InvalidInput(f"spec.accepted_per_step: must lie in [1, k+1] = [1, {k + 1}] tokens per step, "
                               f"got {self.accepted_per_step}")
        if self.acceptance_rates is not None:
            rates = self.acceptance_rates
            if len(rates) != k:
                raise InvalidInput(f"spec.acceptance_rates: give one rate per draft token ({k}), got {len(rates)}")
            if any(not 0.0 <= r <= 1.0 for r in rates):
                raise InvalidInput(f"spec.acceptance_rates: each rate must lie in [0, 1], got {rates}")

    @property
    def accepted(self) -> float:
        """Mean tokens a request gains per verify step: ``1 + sum_i prod_{j<=i} r_j``."""
        if self.accepted_per_step is not None:
            return float(self.accepted_per_step)
        return float(1.0 + np.cumprod(np.asarray(self.acceptance_rates, dtype=float)).sum())


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


@dataclass(frozen=True)
class _Steps:
    """Step times of one case on a grid of decode batches (:func:`_batch_grid`): each grid point's times are computed when a solve first needs them
    (:func:`_point_times`, cached), so a call at concurrency ``c`` never times batches above
    ``c``. ``fit`` is the requests memory holds, ``request_s`` the request overhead."""

    case: _Case
    isl: int
    osl: int
    k: int
    batch: np.ndarray
    budget: int
    fit: int
    request_s: float
    memo: dict = field(default_factory=dict, compare=False, repr=False)  # grid batch -> _point_times

    def _times(self, b: int) -> tuple[float, float, float]:
        if b not in self.memo:
            self.memo[b] = _point_times(self.case, self.isl, self.osl, self.k, b)
        return self.memo[b]

    def at(self, b: float) -> tuple[float, float, float, float]:
        """(decode step, the prompt's chunk steps, chunk count, full step) beside a (fractional)
        batch ``b``: linear between the two grid points around it."""
        hi = int(min(np.searchsorted(self.batch, b), len(self.batch) - 1))
        lo = max(hi - 1, 0)
        b_lo, b_hi = self.batch[lo], self.batch[hi]
        w = 0.0 if b_hi == b_lo else min(max((b - b_lo) / (b_hi - b_lo), 0.0), 1.0)
        p_lo, p_hi = self._times(int(b_lo)), self._times(int(b_hi))
        d_lo = p_lo[0] if b_lo > 0 else p_hi[0]  # a decode step has at least one request
        return tuple((1.0 - w) * a + w * c for a, c in zip((d_lo, *p_lo[1:]), p_hi, strict=True))


def _case(model: ModelSpec, inst: Instance, settings: CacheSettings | None) -> _Case:
    key = (model.model_dump_json(), inst.gpu.model_dump_json(), inst.gpus, inst.parallel,
           inst.engine_profile.model_dump_json(), settings.model_dump_json() if settings is not None else None)
    return _Case(key, model, inst, settings)


def _batch_grid(fit: int) -> np.ndarray:
    """0 to 8, then the powers of two (the batches benchmarks run and kernel tables measure), then ``fit``."""
    powers = 2.0 ** np.arange(4, max(4, math.ceil(math.log2(max(fit, 16)))))
    return np.unique(np.concatenate([np.arange(0, min(fit, 8) + 1), powers[powers < fit], [fit]]))


def _draft_s(model: ModelSpec, inst: Instance, batch: int, ctx: float, k: int, kv: str) -> float:
    """Drafting ``k`` tokens for ``batch`` requests: per token one transformer layer (the mean
    layer of a decode step's kernels) plus the LM head (the MTP module's shape)."""
    if k == 0 or batch == 0:
        return 0.0
    d = decode_ops(model, inst, batch, ctx, inst.engine_profile, kv)
    head = float(d.ops.get("lm_head", 0.0))
    layer = (float(d.total_s) - float(d.families["overhead"]) - head) / model.layers.count
    return k * (layer + head)


@lru_cache(maxsize=256)
def _steps(case: _Case, isl: int, osl: int, k: int) -> _Steps:
    """The grid and memory limit of one case (see the module docstring)."""
    free = free_cache_bytes_per_gpu(case.model, case.inst)
    fit = requests_per_instance_memory(case.model, case.inst.parallel, isl + osl, free, case.settings)
    if fit < 1:
        raise InvalidInput(f"isl_tokens: one {isl + osl}-token request does not fit beside the weights on "
                           f"{case.inst.name}")
    eng = case.inst.engine_profile
    return _Steps(case, isl, osl, k, _batch_grid(fit), int(eng.chunked_prefill_tokens), fit, eng.request_overhead_s)


@lru_cache(maxsize=16384)
def _point_times(case: _Case, isl: int, osl: int, k: int, b: int) -> tuple[float, float, float, float]:
    """At decode batch ``b``: the decode step (verify + draft; nan at 0), the sum of one prompt's
    chunk steps beside the batch (its chunks fill the budget the decodes leave), their count, and
    a full step (the batch plus the whole budget they leave of prefill tokens: what a step costs
    when prompts queue and share steps)."""
    model, inst = case.model, case.inst
    eng, kv = inst.engine_profile, case.settings.kv_dtype if case.settings is not None else "bf16"
    ctx = isl + osl / 2.0  # a decode's mean context over its output
    draft = _draft_s(model, inst, b, ctx, k, kv)
    dec = float(decode_ops(model, inst, b * (k + 1), ctx, eng, kv).total_s) + draft if b else math.nan
    avail = max(int(eng.chunked_prefill_tokens) - b * (k + 1), 1)
    n = math.ceil(isl / avail)
    sizes = np.minimum(avail, isl - avail * np.arange(n)).astype(float)
    prefix = avail * np.arange(n, dtype=float)
    s = mixed_step_ops(model, inst, b * (k + 1), ctx, sizes, prefix, eng, kv).total_s
    full = float(mixed_step_ops(model, inst, b * (k + 1), ctx, np.array([float(avail)]), np.zeros(1), eng,
                                kv).total_s[0]) + draft
    return dec, float(np.sum(s)) + n * draft, float(n), full


def _check(isl: int, osl: int, spec: SpecDecode | None) -> int:
    if not isinstance(isl, int | np.integer) or isl < 1:
        raise InvalidInput(f"isl_tokens: must be a whole number of tokens >= 1, got {isl!r}")
    if not isinstance(osl, int | np.integer) or osl < 1:
        raise InvalidInput(f"osl_tokens: must be a whole number of tokens >= 1, got {osl!r}")
    if spec is not None and not isinstance(spec, SpecDecode):
        raise InvalidInput("spec: give a SpecDecode or None")
    return spec.draft_tokens if spec is not None else 0


def _solve(t: _Steps, isl: int, osl: int, accepted: float, clients: float | None, rate: float | None) -> dict:
    """The fixed point (TTFT, TPOT) for ``clients`` in a closed loop, or Poisson ``rate``."""
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
    ``vllm bench serve --max-concurrency``); see the module docstring for the model."""
    k = _check(isl_tokens, osl_tokens, spec)
    if not isinstance(concurrency, int | np.integer) or concurrency < 1:
        raise InvalidInput(f"concurrency: must be a whole number of clients >= 1, got {concurrency!r}")
    t = _steps(_case(model, inst, settings), int(isl_tokens), int(osl_tokens), k)
    notes = []
    running = min(int(concurrency), t.fit)
    if running < concurrency:
        notes.append(f"memory-bound: {t.fit} requests of {isl_tokens + osl_tokens} tokens fit; "
                     f"{concurrency - running} clients wait in the queue (their wait is in TTFT)")
    s = _solve(t, int(isl_tokens), int(osl_tokens), spec.accepted if spec else 1.0, float(running), None)
    x = running / (s["ttft"] + (osl_tokens - 1) * s["tpot"])
    return _point(s, int(osl_tokens), x, (concurrency - running) / x, notes)


def colocated_open_loop(model: ModelSpec, inst: Instance, isl_tokens: int, osl_tokens: int, rate_rps: float,
                        settings: CacheSettings | None = None, spec: SpecDecode | None = None) -> ServingPoint:
    """Steady state of an aggregated engine fed Poisson arrivals at ``rate_rps``; a rate the
    engine cannot sustain (prefill budget or memory) is a one-line InvalidInput."""
    k = _check(isl_tokens, osl_tokens, spec)
    if not isinstance(rate_rps, int | float) or not math.isfinite(rate_rps) or rate_rps <= 0:
        raise InvalidInput(f"rate_rps: must be a positive number of requests per second, got {rate_rps!r}")
    t = _steps(_case(model, inst, settings), int(isl_tokens), int(osl_tokens), k)
    s = _solve(t, int(isl_tokens), int(osl_tokens), spec.accepted if spec else 1.0, None, float(rate_rps))
    in_system = rate_rps * (s["ttft"] + (osl_tokens - 1) * s["tpot"])
    if not s["converged"] or s.get("rho", 1.0) >= 1.0 or in_system > t.fit:
        raise InvalidInput(f"rate_rps: {rate_rps:g} requests/s is more than {inst.name} sustains for "
                           f"{isl_tokens}/{osl_tokens}-token requests (prefill budget or memory); lower the rate")
    return _point(s, int(osl_tokens), float(rate_rps), 0.0, [])


def speedup_curve(model: ModelSpec, inst: Instance, context_tokens: float, batches, acceptances, k: int,
                  settings: CacheSettings | None = None):
    """TPOT speed-up of speculative decoding with ``k`` draft tokens, per decode batch and
    per-position acceptance rate ``r`` (accepted tokens per step ``sum_{i<=k} r^i``), at
    ``context_tokens`` of context: a pandas DataFrame with columns batch, acceptance,
    accepted_per_step, tpot_s (no drafting), spec_tpot_s, speedup, pays (speed-up > 1). It stops
    paying where the verify step's extra tokens cost more than they gain (large, compute-bound batches)."""
    import pandas as pd

    kv = settings.kv_dtype if settings is not None else "bf16"
    eng = inst.engine_profile
    rows = []
    for b in batches:
        base = float(decode_ops(model, inst, int(b), context_tokens, eng, kv).total_s)
        step = float(decode_ops(model, inst, int(b) * (k + 1), context_tokens, eng, kv).total_s)
        step += _draft_s(model, inst, int(b), context_tokens, k, kv)
        for r in acceptances:
            spec = SpecDecode(k, acceptance_rates=(float(r),) * k)
            rows.append(dict(batch=int(b), acceptance=float(r), accepted_per_step=spec.accepted, tpot_s=base,
                             spec_tpot_s=step / spec.accepted, speedup=base * spec.accepted / step))
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
    _check(isl_tokens, osl_tokens, None)
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
        from prfaas_plan.perf.latency import decode_step_s

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


__all__ = ["ServingPoint", "SpecDecode", "colocated_closed_loop", "colocated_open_loop", "disaggregated_closed_loop",
           "max_sustainable_rate", "speedup_curve"]
