"""One colocated (aggregated) instance, simulated step by step: :func:`simulate_colocated`.

The loop :mod:`prfaas_plan.serving` solves in closed form, run request by request, so its
steady-state approximations (mean-field decode batch, half-step wait, M/D/1 prefill queue,
linear interpolation between batches) can be checked:

* **Arrivals**: Poisson at ``rate_rps`` (open loop), or ``concurrency`` clients each sending its
  next request the moment the previous one ends (closed loop, zero think time; their first
  requests are spread uniformly over one residence estimate, ``osl`` batch-``c`` decode steps, so
  they do not start in lock step). A request reaches the engine ``engine.request_overhead_s``
  after it is sent and its TTFT counts from the send, so the overhead is paid once, on TTFT.
* **Engine step**: at each step boundary the running decodes take one token each of the budget
  ``engine.chunked_prefill_tokens_on(gpu)``; prefill chunks fill the rest first come, first served (a
  started prompt first, then waiting ones, several per step when they fit, a prompt split where
  the budget ends; under SGLang's ``--max-prefill-tokens``, ``max_prefill_tokens`` in the profile,
  a prompt after the step's first joins only while its tokens fit that cap less the decodes and
  the step's earlier chunks, whole or not at all). A request arriving during a step waits for its
  end. A prefill-first engine
  (``mixed_prefill`` false: SGLang's default) runs a step of the waiting prompts alone, with the
  whole budget, whenever one can be scheduled, and a decode step only when none can: its decodes
  advance only in decode steps (the decode bookkeeping counts those steps alone). Arrivals enter
  the queue when the scheduler polls: every ``recv_interval_steps`` decode steps, at once after
  a step with prompts and when idle; no more than ``max_running_requests`` requests are admitted.
* **Memory** (:class:`_Pool`): KV pages are allocated on demand (vLLM, SGLang:
  :data:`~prfaas_plan.perf.latency.ON_DEMAND_KV_ENGINES`): a prompt takes its pages at its first
  chunk, only if they fit beside what the running requests hold after the next step (else
  admission stops, head of line), and a decoding request grows by the tokens it produces. When
  the decodes' next tokens do not fit, the newest admitted requests are preempted by recompute
  (:func:`_preempt`: pages freed, back to the queue's front, the prompt and the output so far
  re-prefilled, the output kept); ``trtllm`` reserves ``isl + osl`` at admission and never preempts.
* **Step time**: the kernel model's step, the same functions the closed form uses: a pure
  decode step is :func:`~prfaas_plan.serving.step_table`'s decode step at that (integer) batch; a step with
  one chunk is :func:`~prfaas_plan.perf.ops.mixed_step_ops` for the batch and that chunk (its
  prefix included); a step with several chunks runs the token-linear ops (GEMMs, MoE,
  collectives, elementwise passes) once over all its tokens and each chunk's attention over its
  own prefix (two calls of :func:`mixed_step_ops`, the second without decodes, recombined).
  Decode attention is at the closed form's mean context ``isl + osl / 2``. Step times are cached
  per (batch, chunks).
* **Tokens**: a prompt's last chunk step yields its first token (TTFT ends there); each later
  step yields one more; TPOT is ``(finish - first token) / (osl - 1)``.
* **Speculative decoding** (``spec``, or the engine profile's ``speculative`` block): each
  decode takes ``k + 1`` tokens of the budget and every step carrying decodes adds the drafting
  (:func:`~prfaas_plan.perf.latency.draft_step_s`; a pure decode step is the table's verify
  step); each step advances each request by ``1 +`` its leading accepted drafts, draft ``i``
  accepted with probability ``r_i`` (:attr:`~prfaas_plan.serving.SpecDecode.position_rates`),
  drawn when its first token is out from a second generator seeded ``(seed, 1)``, so runs without
  speculative decoding draw exactly as before.
* **Lengths**: fixed (as benchmarks run), or lognormal with mean ``isl`` / ``osl`` and log-space
  deviation ``length_sigma`` (whole tokens, at least 1).
* **Window**: requests sent in ``[warmup_s, duration_s)`` are measured; the run goes on
  (arrivals and clients continuing, unrecorded) until every one of them has finished, so they all
  see steady load.
* **Finite benchmark run** (``prompts_per_client``, closed loop only): as ``benchmark_serving.py
  --request-rate inf --max-concurrency c`` runs (:class:`~prfaas_plan.serving.BenchmarkRun`), every
  client sends its first request at t = 0 and ``prompts_per_client`` requests in all; every
  request is measured, no warm-up, and the run ends when the last one finishes
  (``duration_s`` and ``warmup_s`` are not used).

Deterministic for a seed (``numpy.random.default_rng``). Units: seconds, tokens, requests/s.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from prfaas_plan.errors import InvalidInput
from prfaas_plan.hardware import Instance
from prfaas_plan.kvcache import CacheSettings
from prfaas_plan.model.arch import ModelSpec
from prfaas_plan.perf.latency import (
    ON_DEMAND_KV_ENGINES,
    draft_step_s,
    free_cache_bytes_per_gpu,
    request_bytes_per_gpu,
)
from prfaas_plan.perf.ops import mixed_step_ops
from prfaas_plan.serving import SpecDecode, step_table, with_spec

DEFAULT_COLOCATED_DURATION_S = 300.0
TOKEN_LINEAR = frozenset({"gemm", "moe", "comm", "elementwise", "launch", "overhead"})
"""Op families of a mixed step that run once over all its tokens; the others are attention."""
ARRIVAL_CHUNK = 4096


@dataclass
class _StepTimes:
    """Step times of one instance and workload, cached per (decode batch, chunks)."""

    model: ModelSpec
    inst: Instance
    settings: CacheSettings | None
    isl: int
    osl: int
    memo: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.table = step_table(self.model, self.inst, self.isl, self.osl, self.settings)
        self.k = self.table.k
        self.ctx = self.isl + self.osl / 2.0
        self.kv = self.settings.kv_dtype if self.settings is not None else "bf16"

    def _mixed(self, b: int, sizes, prefixes) -> object:
        """A step of ``b`` decodes (``b (k + 1)`` verify tokens) and the given chunks, drafting excluded."""
        return mixed_step_ops(self.model, self.inst, b * (self.k + 1), self.ctx, sizes, prefixes,
                              self.inst.engine_profile, self.kv)

    def __call__(self, b: int, chunks: tuple[tuple[int, int], ...]) -> float:
        key = (b, chunks)
        s = self.memo.get(key)
        if s is None:
            if not chunks:
                s = self.table.times(b).decode_s
            elif len(chunks) == 1:
                s = float(self._mixed(b, chunks[0][0], chunks[0][1]).total_s)
            else:
                sizes = [float(c[0]) for c in chunks]
                whole = float(self._mixed(b, sum(sizes), 0.0).total_s)
                fam = self._mixed(0, [sum(sizes), *sizes], [0.0, *(float(c[1]) for c in chunks)]).families
                attn = sum(np.asarray(v, dtype=float) for k, v in fam.items() if k not in TOKEN_LINEAR)
                attn = np.broadcast_to(attn, (len(chunks) + 1,))
                s = whole - float(attn[0]) + float(np.sum(attn[1:]))
            if chunks:
                s += draft_step_s(self.model, self.inst, b, self.ctx, self.settings)
            self.memo[key] = s
        return s


@dataclass
class _Requests:
    """Per-request records, appended as requests are sent."""

    issue: list = field(default_factory=list)
    arrive: list = field(default_factory=list)  # reaches the engine: sent + request overhead
    isl: list = field(default_factory=list)
    osl: list = field(default_factory=list)
    client: list = field(default_factory=list)
    start: list = field(default_factory=list)
    first: list = field(default_factory=list)
    finish: list = field(default_factory=list)
    done: list = field(default_factory=list)  # tokens prefilled (of ``target``)
    target: list = field(default_factory=list)  # tokens to prefill: the prompt, or the context after a preemption
    left: list = field(default_factory=list)  # after a preemption: engine steps still to run
    total: list = field(default_factory=list)  # decode steps of the request's output
    preemptions: list = field(default_factory=list)
    scan: int = 0  # every request before this one has finished

    def add(self, t: float, arrive: float, isl: int, osl: int, client: int) -> int:
        for col, v in ((self.issue, t), (self.arrive, arrive), (self.isl, isl), (self.osl, osl), (self.client, client),
                       (self.start, math.nan), (self.first, math.nan), (self.finish, math.nan), (self.done, 0),
                       (self.target, isl), (self.left, 0), (self.total, 0), (self.preemptions, 0)):
            col.append(v)
        return len(self.issue) - 1


def _lengths(rng: np.random.Generator, mean: int, sigma: float, n: int) -> np.ndarray:
    if sigma == 0.0:
        return np.full(n, mean, dtype=np.int64)
    mu = math.log(mean) - sigma * sigma / 2.0
    return np.maximum(np.rint(rng.lognormal(mu, sigma, n)), 1).astype(np.int64)


class _Source:
    """Requests sent: Poisson (drawn in chunks) or closed-loop clients; a heap of engine arrivals."""

    def __init__(self, rng, reqs: _Requests, isl: int, osl: int, sigma: float, overhead_s: float,
                 rate: float | None, clients: int | None, stagger_s: float, jitter: bool,
                 per_client: int | None = None) -> None:
        self.rng, self.reqs, self.isl, self.osl, self.sigma, self.overhead = rng, reqs, isl, osl, sigma, overhead_s
        self.jitter, self.per_client, self.sent = jitter, per_client, [0] * (clients or 0)
        self.rate, self.heap, self.last = rate, [], 0.0
        if clients is not None:
            for c, t in enumerate(np.sort(rng.uniform(0.0, stagger_s, clients))):
                self.send(float(t), c)
        else:
            self._poisson()

    def _overhead(self, n: int) -> np.ndarray:
        if not self.jitter:
            return np.full(n, self.overhead)
        return self.rng.exponential(self.overhead, n)

    def send(self, t: float, client: int) -> None:
        """Client ``client`` sends its next request at ``t`` (none once it has sent ``per_client``)."""
        if self.per_client is not None:
            if self.sent[client] >= self.per_client:
                return
            self.sent[client] += 1
        i, o = (int(x[0]) for x in (_lengths(self.rng, self.isl, self.sigma, 1), _lengths(self.rng, self.osl, self.sigma, 1)))
        arrive = t + float(self._overhead(1)[0])
        heapq.heappush(self.heap, (arrive, self.reqs.add(t, arrive, i, o, client)))

    def _poisson(self) -> None:
        times = self.last + np.cumsum(self.rng.exponential(1.0 / self.rate, ARRIVAL_CHUNK))
        isl = _lengths(self.rng, self.isl, self.sigma, ARRIVAL_CHUNK)
        osl = _lengths(self.rng, self.osl, self.sigma, ARRIVAL_CHUNK)
        over = self._overhead(ARRIVAL_CHUNK)
        for t, i, o, h in zip(times.tolist(), isl.tolist(), osl.tolist(), over.tolist(), strict=True):
            heapq.heappush(self.heap, (t + h, self.reqs.add(t, t + h, i, o, -1)))
        self.last = float(times[-1])

    def pop_until(self, t: float) -> list[int]:
        """Requests reaching the engine by ``t`` (open loop: drawing more arrivals as needed)."""
        out = []
        while self.heap and self.heap[0][0] <= t:
            out.append(heapq.heappop(self.heap)[1])
            if self.rate is not None and not self.heap:
                self._poisson()
        return out

    def next_time(self) -> float:
        if self.rate is not None and not self.heap:
            self._poisson()
        return self.heap[0][0] if self.heap else math.inf


@dataclass
class _Pool:
    """The engine's KV pool in bytes per GPU (all attention DP ranks' pools taken as one), and
    what the admitted requests hold in it: a request's cache is ``fixed_b + per_token_b x tokens``
    (the chord of :func:`~prfaas_plan.perf.latency.request_bytes_per_gpu` between the mean
    ``isl`` and ``isl + osl``: exact for full and MLA attention and fixed states). A prefilling
    request holds the pages of its whole prompt from its first chunk (``reserved``); a decoding one
    grows by ``rate`` tokens a step from ``base`` tokens at step ``s0`` (``decoding``: request ->
    (base, s0, rate, finishing step)), summed as ``fixed + slope x step`` so a step costs O(1)."""

    capacity_b: float
    fixed_b: float
    per_token_b: float
    reserved: dict = field(default_factory=dict)  # prefilling request -> bytes
    decoding: dict = field(default_factory=dict)
    admitted: dict = field(default_factory=dict)  # every request holding pages, in admission order
    held_b: float = 0.0  # reserved bytes + the decodes' bytes at step 0 of their lines
    slope_b: float = 0.0  # the decodes' growth, bytes per step

    def used_b(self, step: int) -> float:
        """Bytes held once step ``step`` has written its tokens."""
        return self.held_b + self.slope_b * (step + 1)

    def admit(self, r: int, tokens: int) -> None:
        b = self.fixed_b + self.per_token_b * tokens
        self.reserved[r], self.admitted[r] = b, None
        self.held_b += b

    def to_decode(self, r: int, base: int, s0: int, rate: float, finish_step: int) -> None:
        self.held_b -= self.reserved.pop(r)
        self.decoding[r] = (base, s0, rate, finish_step)
        self.held_b += self.fixed_b + self.per_token_b * (base - rate * s0)
        self.slope_b += self.per_token_b * rate

    def release(self, r: int) -> tuple | None:
        """Free ``r``'s pages; its decode line (base, s0, rate, finishing step) if it was decoding."""
        self.admitted.pop(r, None)
        if r in self.reserved:
            self.held_b -= self.reserved.pop(r)
            return None
        base, s0, rate, fin = line = self.decoding.pop(r)
        self.held_b -= self.fixed_b + self.per_token_b * (base - rate * s0)
        self.slope_b -= self.per_token_b * rate
        return line


def _schedule(queue: deque, reqs: _Requests, avail: int, pool: _Pool, step: int, limit: int | None = None,
              input_room_tokens: float | None = None) -> list:
    """Prefill chunks of one step, FCFS within ``avail`` tokens: [(request, tokens, prefix)]; a
    request not yet holding pages is admitted only if its prompt's pages fit the pool beside the
    decodes' next step and fewer than ``limit`` requests run (else admission stops: head-of-line,
    as vLLM V1's waiting loop and SGLang's ``--max-running-requests`` check do). ``input_room_tokens``: SGLang's
    ``--max-prefill-tokens`` less the step's decode tokens; a request after the first joins only if
    the tokens it has left fit what the step's earlier chunks left of it (``PrefillAdder``'s
    ``rem_input_tokens``), else the step stops there."""
    chunks = []
    for r in queue:
        if avail <= 0:
            break
        if input_room_tokens is not None and chunks and reqs.target[r] - reqs.done[r] > input_room_tokens:
            break
        if r not in pool.admitted:
            if limit is not None and len(pool.admitted) >= limit:
                break
            tokens = reqs.target[r]
            if pool.fixed_b + pool.per_token_b * tokens > pool.capacity_b - pool.used_b(step):
                break
            pool.admit(r, tokens)
        take = min(avail, reqs.target[r] - reqs.done[r])
        chunks.append((r, take, reqs.done[r]))
        avail -= take
        if input_room_tokens is not None:
            input_room_tokens -= take
    return chunks


def _preempt(pool: _Pool, queue: deque, reqs: _Requests, finishing: dict, step: int) -> int:
    """Preempt the newest admitted requests until the decodes' next token fits the pool (vLLM:
    recompute preemption of the lowest-priority, last-scheduled request; SGLang: retraction): a
    victim frees its pages and goes back to the queue's front to re-prefill its prompt and the
    tokens it has produced, keeping its output (its remaining decode steps continue after the
    re-prefill, whose step yields its next token). Returns the decodes preempted."""
    preempted = 0
    while pool.admitted and pool.used_b(step) > pool.capacity_b:
        r = next(reversed(pool.admitted))
        line = pool.release(r)
        reqs.preemptions[r] += 1
        if line is None:  # mid-prefill: start its prompt again
            reqs.done[r] = 0
            continue
        base, s0, rate, fin = line
        finishing[fin].remove(r)
        done_steps = step - s0  # steps s0 .. step - 1 have run
        reqs.target[r] = int(round(base + rate * done_steps))
        reqs.left[r] = fin - step + 1  # steps still to run (step .. fin), the re-prefill's counting as one
        reqs.done[r] = 0
        queue.appendleft(r)
        preempted += 1
    return preempted


def _decode_steps(rng: np.random.Generator | None, rates: np.ndarray, tokens: int) -> int:
    """Decode steps until ``tokens`` more tokens are out: one per token without speculative
    decoding (``rng`` None), else each step yields 1 + its leading accepted drafts (draft ``i``
    accepted with probability ``rates[i]``)."""
    if rng is None or tokens <= 0:
        return tokens
    accepted = rng.random((tokens, len(rates))) < rates  # at most ``tokens`` steps
    gained = 1 + np.cumprod(accepted, axis=1).sum(axis=1)
    return int(np.searchsorted(np.cumsum(gained), tokens)) + 1


def _prompt_done(r: int, t: float, step_no: int, reqs: _Requests, pool: _Pool, finishing: dict, source: _Source,
                 closed: bool, duration_s: float, accept) -> int:
    """Request ``r``'s prefill (or re-prefill) ended at ``t`` with step ``step_no``: its first
    token (TTFT) the first time; then it decodes, or finishes. Returns the change of the decode batch."""
    if math.isnan(reqs.first[r]):
        reqs.first[r] = t
        left = _decode_steps(*accept, reqs.osl[r] - 1)
        total = left
    else:  # a preempted request's re-prefill step yields its next token
        left, total = reqs.left[r] - 1, reqs.total[r]
    if left <= 0:
        pool.release(r)
        _finish(reqs, r, t, source, closed, duration_s)
        return 0
    reqs.total[r] = total
    fin = step_no + left
    rate = (reqs.osl[r] - 1) / total  # tokens a step (1 without speculative decoding)
    pool.to_decode(r, reqs.target[r], step_no + 1, rate, fin)
    finishing.setdefault(fin, []).append(r)
    return 1


def _run(steps: _StepTimes, source: _Source, reqs: _Requests, pool: _Pool, duration_s: float, warmup_s: float,
         closed: bool, accept: tuple[np.random.Generator | None, np.ndarray]) -> dict:
    """The step loop; returns time-weighted figures over the steps starting in the window. A
    prefill-first engine's prompt steps carry no decode and do not count as decode steps
    (``step_no`` counts the steps that advance the decodes)."""
    budget, per_decode = steps.table.budget, steps.k + 1
    eng = steps.inst.engine_profile
    cap_tokens = eng.max_prefill_tokens  # SGLang --max-prefill-tokens: whole prompts after the first (None: vLLM)
    mixed, limit, recv_every = eng.mixed_prefill, eng.max_running_requests, eng.recv_interval_steps
    queue: deque = deque()  # requests waiting for or in prefill, FCFS
    finishing: dict[int, list[int]] = {}  # step index -> requests whose last token it yields
    t, step_no, batch = 0.0, 0, 0
    since_poll = recv_every  # decode steps since the scheduler last took in arrivals
    acc = dict(time_s=0.0, batch_s=0.0, chunk_s=0.0, steps=0, preemptions=0)
    while True:
        if since_poll >= recv_every or (not queue and batch == 0):  # a poll: every recv_every decode steps
            queue.extend(source.pop_until(t))
            since_poll = 0
        if not queue and batch == 0:
            nxt = source.next_time()
            if not math.isfinite(nxt) or (source.reqs.issue and _all_done(reqs, duration_s, nxt)):
                break
            t = nxt
            continue
        # a prefill-first engine: a step of the waiting prompts alone while any can be scheduled
        chunks = [] if mixed else _schedule(queue, reqs, budget, pool, step_no - 1, limit, cap_tokens)
        decoding = batch if mixed or not chunks else 0  # decodes this step advances
        if decoding:
            gone = _preempt(pool, queue, reqs, finishing, step_no)
            batch -= gone
            decoding = batch
            acc["preemptions"] += gone
        if mixed:
            chunks = _schedule(queue, reqs, budget - batch * per_decode, pool, step_no, limit,
                               None if cap_tokens is None else cap_tokens - batch * per_decode)
        s = steps(decoding, tuple((c[1], c[2]) for c in chunks))
        if warmup_s <= t < duration_s:
            acc["time_s"] += s
            acc["batch_s"] += decoding * s
            acc["chunk_s"] += s if chunks else 0.0
            acc["steps"] += 1
        t += s
        since_poll += recv_every if chunks else 1  # after a prompt step the scheduler polls at once
        done_no = step_no if mixed or decoding else step_no - 1  # its prompts decode from the next decode step
        for r, take, _ in chunks:
            if math.isnan(reqs.start[r]):
                reqs.start[r] = t - s
            reqs.done[r] += take
            if reqs.done[r] == reqs.target[r]:
                # FCFS: a step's chunks are the queue's first requests, each but the last whole, so
                # a finished prompt is the head (the ones before it in this step already left)
                head = queue.popleft()
                assert head == r
                batch += _prompt_done(r, t, done_no, reqs, pool, finishing, source, closed, duration_s, accept)
        if mixed or decoding:
            for r in finishing.pop(step_no, ()):
                pool.release(r)
                _finish(reqs, r, t, source, closed, duration_s)
                batch -= 1
            step_no += 1
        if t >= duration_s and _all_done(reqs, duration_s, t):
            break
    return acc


def _finish(reqs: _Requests, r: int, t: float, source: _Source, closed: bool, duration_s: float) -> None:
    reqs.finish[r] = t
    if closed:
        source.send(t, reqs.client[r])


def _all_done(reqs: _Requests, duration_s: float, t: float) -> bool:
    """Every request sent before ``duration_s`` has finished, and no later one is measured (``t``
    is past the window)."""
    if t < duration_s:
        return False
    issue, finish = reqs.issue, reqs.finish
    return all(not (issue[i] < duration_s and math.isnan(finish[i])) for i in range(_all_done_from(reqs), len(issue)))


def _all_done_from(reqs: _Requests) -> int:
    """First request that may be unfinished (records before it all finished): scan start, cached."""
    i = reqs.scan
    while i < len(reqs.finish) and not math.isnan(reqs.finish[i]):
        i += 1
    reqs.scan = i
    return i


def _check(isl, osl, rate_rps, concurrency, duration_s, warmup_s, seed, sigma) -> None:
    for name, v in (("isl_tokens", isl), ("osl_tokens", osl)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
            raise InvalidInput(f"{name}: must be a whole number of tokens >= 1, got {v!r}")
    if (rate_rps is None) == (concurrency is None):
        raise InvalidInput("rate_rps: give exactly one of rate_rps (open loop) or concurrency (closed loop)")
    if rate_rps is not None and (isinstance(rate_rps, bool) or not isinstance(rate_rps, int | float)
                                 or not math.isfinite(rate_rps) or rate_rps <= 0):
        raise InvalidInput(f"rate_rps: must be a positive number of requests per second, got {rate_rps!r}")
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int | np.integer)
                                    or concurrency < 1):
        raise InvalidInput(f"concurrency: must be a whole number of clients >= 1, got {concurrency!r}")
    if not isinstance(duration_s, int | float) or not math.isfinite(duration_s) or duration_s <= 0:
        raise InvalidInput(f"duration_s: must be a positive number of seconds, got {duration_s!r}")
    if warmup_s is not None and not (isinstance(warmup_s, int | float) and 0 <= warmup_s < duration_s):
        raise InvalidInput(f"warmup_s: must lie in [0, duration_s) = [0, {duration_s:g}), got {warmup_s!r}")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise InvalidInput(f"seed: must be a whole number >= 0, got {seed!r}")
    if not isinstance(sigma, int | float) or not math.isfinite(sigma) or sigma < 0:
        raise InvalidInput(f"length_sigma: must be a number >= 0, got {sigma!r}")


def _check_run(prompts_per_client, concurrency) -> bool:
    """Whether a finite benchmark run is asked for (``prompts_per_client`` given, closed loop only)."""
    if prompts_per_client is None:
        return False
    if isinstance(prompts_per_client, bool) or not isinstance(prompts_per_client, int | np.integer) \
            or prompts_per_client < 1:
        raise InvalidInput(f"prompts_per_client: must be a whole number >= 1, got {prompts_per_client!r}")
    if concurrency is None:
        raise InvalidInput("prompts_per_client: a finite run needs concurrency (closed-loop clients), not rate_rps")
    return True


def _pool(model: ModelSpec, inst: Instance, isl: int, osl: int, settings: CacheSettings | None) -> _Pool:
    """The instance's KV pool (:func:`~prfaas_plan.perf.latency.free_cache_bytes_per_gpu` on each
    of its attention DP ranks) and the chord of one request's cache between ``isl`` and ``isl + osl``
    tokens; an engine that reserves a request's final length up front (not in
    :data:`~prfaas_plan.perf.latency.ON_DEMAND_KV_ENGINES`) is charged ``isl + osl`` from its first
    chunk and never grows."""
    free = free_cache_bytes_per_gpu(model, inst) * inst.parallel.attn_dp
    lo, hi = (float(request_bytes_per_gpu(model, inst, n, settings)) for n in (isl, isl + osl))
    if inst.engine_profile.kernel_engine not in ON_DEMAND_KV_ENGINES:
        return _Pool(free, hi, 0.0)
    per_token = (hi - lo) / osl
    return _Pool(free, lo - per_token * isl, per_token)


def simulate_colocated(model: ModelSpec, inst: Instance, isl_tokens: int, osl_tokens: int,
                       rate_rps: float | None = None, concurrency: int | None = None,
                       duration_s: float = DEFAULT_COLOCATED_DURATION_S, seed: int = 0,
                       settings: CacheSettings | None = None, warmup_s: float | None = None,
                       length_sigma: float = 0.0, overhead_jitter: bool = False, spec: SpecDecode | None = None,
                       prompts_per_client: int | None = None):
    """Simulate one colocated instance step by step (see the module docstring).

    Give ``rate_rps`` (Poisson, open loop) or ``concurrency`` (closed loop); ``spec`` turns
    speculative decoding on (None: as the instance's engine profile says). Requests sent in
    ``[warmup_s, duration_s)`` (default warm-up: a fifth of the duration) are measured; with
    ``prompts_per_client`` (closed loop) a finite run from a burst start, every request measured.
    Returns ``(requests, summary)``: a pandas DataFrame, one row per request sent (id, issue_s,
    arrive_s (reaches the engine), isl_tokens, osl_tokens, start_s (first chunk scheduled), first_token_s, finish_s, ttft_s,
    tpot_s, measured), and a dict: mode, requests (measured), mean_ttft_s, p50/p90/p99_ttft_s,
    mean_tpot_s, throughput_rps (measured requests over the window; a finite run: over 0 to its
    last finish), mean_step_s, batch
    (time-averaged decode batch), prefill_share (time in steps carrying a chunk), steps,
    end_s (when the last measured request finished)."""
    import pandas as pd

    _check(isl_tokens, osl_tokens, rate_rps, concurrency, duration_s, warmup_s, seed, length_sigma)
    finite = _check_run(prompts_per_client, concurrency)
    warm = 0.0 if finite else duration_s / 5.0 if warmup_s is None else float(warmup_s)
    window_s = math.inf if finite else float(duration_s)
    inst = with_spec(inst, spec)
    steps = _StepTimes(model, inst, settings, int(isl_tokens), int(osl_tokens))
    on = SpecDecode.from_profile(inst.engine_profile)
    accept = (None, np.zeros(0)) if on is None or steps.k == 0 else \
        (np.random.default_rng((int(seed), 1)), np.asarray(on.position_rates))
    rng = np.random.default_rng(int(seed))
    reqs = _Requests()
    clients = None if concurrency is None else int(concurrency)
    stagger = 0.0 if clients is None or finite else osl_tokens * steps(min(clients, steps.table.fit), ())
    source = _Source(rng, reqs, int(isl_tokens), int(osl_tokens), float(length_sigma), steps.table.request_s,
                     None if rate_rps is None else float(rate_rps), clients, stagger, bool(overhead_jitter),
                     int(prompts_per_client) if finite else None)
    acc = _run(steps, source, reqs, _pool(model, inst, int(isl_tokens), int(osl_tokens), settings), window_s,
               warm, clients is not None, accept)
    df = pd.DataFrame({"issue_s": reqs.issue, "arrive_s": reqs.arrive, "isl_tokens": reqs.isl, "osl_tokens": reqs.osl, "start_s": reqs.start,
                       "first_token_s": reqs.first, "finish_s": reqs.finish, "preemptions": reqs.preemptions})
    df.insert(0, "id", np.arange(len(df)))
    df["ttft_s"] = df["first_token_s"] - df["issue_s"]
    df["tpot_s"] = ((df["finish_s"] - df["first_token_s"]) / (df["osl_tokens"] - 1)).where(df["osl_tokens"] > 1)
    df["measured"] = (df["issue_s"] >= warm) & (df["issue_s"] < window_s) & df["finish_s"].notna()
    m = df[df["measured"]]
    span_s = float(m["finish_s"].max()) if finite and len(m) else duration_s - warm
    ttft = m["ttft_s"].to_numpy()
    summary = dict(mode="closed" if clients is not None else "open", requests=len(m),
                   mean_ttft_s=float(np.mean(ttft)) if len(m) else math.nan,
                   **{f"p{q}_ttft_s": float(np.percentile(ttft, q)) if len(m) else math.nan for q in (50, 90, 99)},
                   mean_tpot_s=float(m["tpot_s"].mean()) if len(m) else math.nan,
                   throughput_rps=len(m) / span_s,
                   mean_step_s=acc["time_s"] / acc["steps"] if acc["steps"] else math.nan,
                   batch=acc["batch_s"] / acc["time_s"] if acc["time_s"] else 0.0,
                   prefill_share=acc["chunk_s"] / acc["time_s"] if acc["time_s"] else 0.0,
                   steps=acc["steps"], preemptions=int(m["preemptions"].sum()), end_s=float(m["finish_s"].max()) if len(m) else math.nan)
    return df, summary


__all__ = ["DEFAULT_COLOCATED_DURATION_S", "simulate_colocated"]
