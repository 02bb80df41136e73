"""Discrete-event simulation of a PrfaaS-PD deployment (docs/design.md section 6): :func:`simulate`.

The simulator replays or generates requests and follows each one through the system the planner
plans for, so that the closed forms of :mod:`planner` and :mod:`queueing` can be checked and what
they cannot express (bursts, link degradation, scheduler reaction, prefix caches) can be measured.

What is modelled, and the assumptions
-------------------------------------
* **Arrivals**: Poisson at ``rate_rps`` (or ``load`` x the plan's Lambda_max), a two-state
  Markov-modulated Poisson process (:class:`Bursty`), or a trace's timestamps divided by
  ``rate_scale``. Synthetic prompts draw their uncached length from the scenario's length
  distribution and have the scenario's (mean) output length; traces give both per request.
* **Prefix caches**: one LRU cache of 512-token blocks per cluster (Mooncake ``hash_ids``),
  ``workload.prefix_cache_blocks`` blocks each (0 = off, None = unlimited), with the logic of
  :func:`workload.prefix_cache_replay`: a hit is the run of leading blocks present; a request's
  blocks are inserted tail first, then the LRU evicts. Look-up is at arrival, insertion when the
  request's prefill ends on that cluster. KV shipped to the local cluster is transfer cache and is
  not kept (docs/design.md section 1), so each cluster caches only what it prefilled.
* **Router**: a request's routing length is its incremental length (prompt minus the longer of
  its two cached prefixes, as the planner's single-cache workload sees it). The ``fixed`` policy
  offloads it to PrfaaS with the plan's per-bucket probability (:func:`planner.offload_fractions`,
  i.e. the threshold t with at most one partial bucket). The chosen cluster prefills the prompt
  minus *its own* cached prefix (at least one token).
* **Prefill pools**: FCFS, ``c`` identical servers, one request at a time each; service time
  ``T_remote(l)`` / ``T_local(l)`` of :class:`planner.PlanInputs`. FCFS multi-server queues are
  computed with the Kiefer-Wolfowitz recursion (a request starts on the server that frees first),
  which is exact and needs no events for service starts.
* **Inter-DC link**: processor sharing of the usable bit rate (nominal Gbps x the scenario's link
  efficiency) among active transfers, with capacity changing at link events. A remote request's
  transfer of ``8 S_kv(l)`` bits joins the link when its first layer is done (prefill start +
  ``T/L``, L layers; the cache leaves layer by layer, so the transfer can run ahead of the prefill);
  its KV is ready at ``max(prefill end + last layer's share, transfer end) + rtt/2``, where the
  last layer's share is ``8 S / L`` bits at the per-transfer rate at prefill end. On a lightly
  loaded link this is :func:`planner.unhidden_transfer_s`: ``max(x/L, x - T (1 - 1/L)) + rtt/2``
  (tested request by request); on a loaded one it is processor sharing, whose mean slowdown
  ``1 / (1 - rho)`` is the planner's ``share = 1 - utilisation`` (M/G/1-PS, also tested). Both
  are the one handoff term of :mod:`prfaas_plan.handoff`. The transfer itself is not limited by the
  rate the prefill produces the cache. PrfaaS memory for KV waiting on the link is unlimited
  unless ``prfaas.transfer_buffer_gib`` is set: then a remote request's KV occupies it (pooled
  over the PrfaaS instances) from prefill start until ready, and a prefill starts only when it fits.
* **Decode**: each PD-D instance runs continuous batching with ``BS_max`` slots; a request holds
  one slot for ``output_tokens x T_decode`` seconds (``T_decode = PlanInputs.decode_step_s``,
  independent of batch occupancy, so TPOT is ``T_decode``), FCFS for slots when all are busy.
  With ``decode.staging_memory`` on, decode memory is limited: a request reserves its prompt's KV
  on a decode instance when its engine profile says (``kv_reserve_at``: prefill start, transfer
  start, or not before the bytes arrive) and holds it until admitted; an instance admits while
  it has a slot (the plan's ``BS_max``, lowered by the planner's staging fixed point) and memory (running requests at the planner's bytes
  each), so staged memory squeezes the running batch and requests wait for decode memory. Held
  memory (mean, P50, P99) is in the summary (``held_decode_gib_*``). Not with the ``dual`` policy.
* **TTFT** = arrival -> first token = prefill wait + prefill + unhidden transfer + decode-slot
  wait + one decode step.
* **Policies** (:class:`Policy`): ``fixed`` (the plan's routing), ``short`` (the paper's
  short-term rule: every ``period_s`` raise t by ``raise_factor`` when link utilisation exceeds
  ``high`` (egress demand over usable capacity) or the PrfaaS queue exceeds ``queue_high`` per
  instance, unless the local prefill queue is already long; relax it back towards the plan when
  both are below the low levels or local prefill is the congested side; while bandwidth is scarce
  route by the *local* cluster's uncached length, so requests whose prefix is cached locally stay
  local), and ``dual`` (``short`` plus the long-term rebalancer: every ``rebalance_period_s`` move
  one local instance between the PD-P and PD-D roles when one side is much busier than the other,
  and re-plan t on the recently observed lengths). A converted instance first finishes the work
  already assigned to it.
* **Trace replay is open loop**: timestamps are kept whatever the latency, so under overload a
  conversation's next turn can arrive before the previous turn's prefill ended (and miss the
  cache), which a real client, waiting for the answer, would not do.

Records and memory
------------------
Arrivals are generated, and per-request records handed on, a chunk of ``CHUNK_REQUESTS`` at a time
(in arrival order, once every request of the chunk holds a decode slot); time-series rows likewise.
A run of at most ``max_rows_in_memory`` requests and rows keeps them in memory (exact percentiles);
a longer one keeps only running sums and a t-digest (``fastdigest``) for percentiles, so its
memory stays flat whatever its length, and ``out_dir`` streams the records to parquet files.

Everything is deterministic for a seed: the random draws are made with numpy in chunks that
reproduce, value for value, one generator drawing all arrival times, then all lengths, then all
routing draws; the event loop (``heapq``, plain Python) breaks ties by event kind and request id.

The package, one idea a module: :mod:`~prfaas_plan.sim.params` (the :class:`Setup` from a plan),
:mod:`~prfaas_plan.sim.arrivals` (Poisson, :class:`Bursty`, traces), :mod:`~prfaas_plan.sim.link`
(link drops and traces, processor sharing), :mod:`~prfaas_plan.sim.policies` (the schedulers),
:mod:`~prfaas_plan.sim.engine` (the event loop), :mod:`~prfaas_plan.sim.ring` (requests in flight),
:mod:`~prfaas_plan.sim.result` (:class:`SimResult`, summaries), :mod:`~prfaas_plan.sim.outputs`
(the sink, parquet/JSON files and their folder); :mod:`~prfaas_plan.sim.colocated`
(:func:`simulate_colocated`: one colocated instance step by step, the check of :mod:`prfaas_plan.serving`).

Units: seconds (``_s``), requests per second (``_rps``), tokens (``_tokens``), Gbps = 1e9 bit/s.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from prfaas_plan.defaults import DEFAULT_SIM_DURATION_S
from prfaas_plan.errors import InvalidInput
from prfaas_plan.sim.arrivals import (
    CHUNK_REQUESTS,
    MAX_SIM_REQUESTS,
    Arrivals,
    Bursty,
    Source,
    poisson_times,
    source_for,
)
from prfaas_plan.sim.colocated import simulate_colocated
from prfaas_plan.sim.engine import Engine, run_engine
from prfaas_plan.sim.link import LinkEvent, check_link_events, parse_link_drop, read_link_trace
from prfaas_plan.sim.outputs import (
    MAX_ROWS_IN_MEMORY,
    OUTPUT_FILES,
    TIMESERIES_COLUMNS,
    Sink,
    check_out_dir,
    output_folder,
    stage_summary,
    write_outputs,
)
from prfaas_plan.sim.params import Routing, Setup
from prfaas_plan.sim.policies import Policy
from prfaas_plan.sim.result import SimResult, Totals
from prfaas_plan.vocab import POLICIES

if TYPE_CHECKING:
    import pandas as pd

    from prfaas_plan.planner import PlanResult
    from prfaas_plan.scenario import Scenario

__all__ = [
    "CHUNK_REQUESTS", "MAX_ROWS_IN_MEMORY", "MAX_SIM_REQUESTS", "OUTPUT_FILES", "TIMESERIES_COLUMNS",
    "Arrivals", "Bursty", "Engine", "LinkEvent", "Policy", "Routing", "Setup", "SimResult", "Source",
    "check_out_dir", "parse_link_drop", "poisson_times", "read_link_trace", "run_engine", "simulate",
    "simulate_colocated", "write_outputs",
]


def _result(eng: Engine, setup: Setup, policy: Policy, ttft_quantile: float = 0.9, info: dict | None = None,
            out_dir: Path | None = None) -> SimResult:
    """The :class:`SimResult` of a finished engine: its frames or totals, cache figures and run info."""
    sink = eng.sink
    cache = {}
    if eng.caching:
        for name, code in (("local", 0), ("remote", 1)):
            hit, tot = sink.tokens[code]
            cache[f"{name}_token_hit_rate"] = float(hit / tot) if tot else 0.0
        cache["local_evicted_blocks"] = eng.local_cache.evicted_blocks
        cache["remote_evicted_blocks"] = eng.remote_cache.evicted_blocks
    base_info = {"events": eng.events, "role_changes": len(eng.role_changes)}
    base_info.update(info or {})
    totals = None if sink.totals is None else sink.totals.figures()
    return SimResult(policy, eng.horizon_s, setup.ttft_slo_s, ttft_quantile, setup.tpot_slo_s, cache, base_info,
                     eng.frames, totals, out_dir, eng.staging_figures())


def simulate(sc: Scenario, res: PlanResult | None = None, *, rate_rps: float | None = None, load: float | None = None,
             duration_s: float | None = DEFAULT_SIM_DURATION_S, trace: str | Path | pd.DataFrame | None = None,
             rate_scale: float = 1.0,
             policy: str | Policy = "fixed", link_events: Sequence[LinkEvent] = (), seed: int = 0,
             progress: Callable[[float], None] | None = None, arrivals: str | Bursty | None = None,
             out_dir: str | Path | None = None, max_rows_in_memory: int = MAX_ROWS_IN_MEMORY) -> SimResult:
    """Simulate a scenario's PrfaaS-PD plan.

    sc: a :class:`scenario.Scenario`; res: its :class:`planner.PlanResult` (default ``plan(sc)``).
    rate_rps / load: Poisson arrivals at this rate, or at ``load`` x ``res.lambda_max_rps``
        (default: the scenario's ``load``); lengths from the scenario's length distribution.
    arrivals: ``"poisson"`` (default) or a :class:`Bursty` Markov-modulated process.
    trace: a trace file (see :func:`workload.load_trace`) or DataFrame to replay; timestamps are
        divided by ``rate_scale``. A trace-workload scenario replays its own trace when no rate,
        load or trace is given. Mooncake ``hash_ids`` drive the per-cluster prefix caches
        (``workload.prefix_cache_blocks`` blocks each; 0 = off, None = unlimited).
    rate_scale: multiplies the arrival rate: trace timestamps are divided by it, a Poisson rate
        multiplied (a Bursty process sets its own rates).
    duration_s: arrivals during [0, duration_s) (synthetic: default 600 s; a trace: the requests
        arriving before it, or the whole trace when None). Requests still in the system at the end
        run to completion.
    policy: ``fixed``, ``short``, ``dual`` or a :class:`Policy`.
    link_events: (start_s, end_s, gbps) windows of a different nominal link rate (see
        :func:`parse_link_drop`, :func:`read_link_trace`); usable = gbps x link efficiency.
    seed: all random draws (arrivals, lengths, partial-bucket routing) come from it.
    progress: called with the fraction of arrivals processed (0..1).
    out_dir: a folder (created if missing) to stream the per-request records (requests.parquet)
        and the time series (timeseries.parquet) into as the run goes, then summary.json and
        manifest.json; all appear together when the run ends, and a failed run leaves the folder
        as it was (see :func:`write_outputs`: other files there are never touched).
    max_rows_in_memory: a run with at most this many requests and time-series rows keeps them in
        memory (``requests``, ``timeseries``; exact percentiles). A larger one keeps only running
        totals, with percentiles from a t-digest (relative error ~1e-4 at P90 over a million
        requests), so its memory does not grow with its length; its records are on disk when
        ``out_dir`` is given. The arrival draws, and so every request's record, are the same
        either way.
    """
    from prfaas_plan.planner import plan as make_plan
    from prfaas_plan.scenario import Scenario

    if not isinstance(sc, Scenario):
        raise InvalidInput(f"sc: {type(sc).__name__} is not a Scenario; give load_scenario(...) first "
                           "(a plan goes in as res=)")
    pol = Policy(name=policy) if isinstance(policy, str) else policy
    if not isinstance(pol, Policy):
        raise InvalidInput(f"policy: {policy!r} must be one of {', '.join(POLICIES)} or a Policy")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InvalidInput(f"--seed: {seed!r} must be a whole number >= 0")
    if not (isinstance(rate_scale, (int, float)) and math.isfinite(rate_scale) and rate_scale > 0):
        raise InvalidInput(f"--rate-scale: {rate_scale!r} must be a positive factor")
    if isinstance(max_rows_in_memory, bool) or not isinstance(max_rows_in_memory, (int, np.integer)) or max_rows_in_memory < 0:
        raise InvalidInput(f"max_rows_in_memory: {max_rows_in_memory!r} must be a whole number >= 0")
    events = check_link_events(link_events)
    res = make_plan(sc) if res is None else res
    setup = Setup.from_plan(res, sc)
    if setup.staging is not None and pol.name == "dual":
        raise InvalidInput("policy: the dual policy moves decode instances, which staging memory does not model; "
                           "use fixed or short, or set decode.staging_memory: false")
    info = {"lambda_max_rps": res.lambda_max_rps, "threshold_tokens": res.threshold_tokens or np.nan,
            "n_prfaas": setup.n_prfaas, "n_pd_p": setup.n_pd_p, "n_pd_d": setup.n_pd_d, "seed": int(seed)}

    def run(paths: dict[str, Path] | None, out: Path | None) -> SimResult:
        rng = np.random.default_rng(int(seed))
        source = source_for(setup, sc, res, rate_rps, load, duration_s, trace, rate_scale, arrivals, rng)
        small = max(source.n, source.horizon_s / pol.period_s) <= max_rows_in_memory
        totals = None if small else Totals(0.0, source.horizon_s, ttft_slo_s=setup.ttft_slo_s,
                                           tpot_slo_s=setup.tpot_slo_s, exact=False)
        eng = run_engine(setup, source, pol, events, source.horizon_s, rng, progress, Sink(totals, paths))
        return _result(eng, setup, pol, sc.spec.slo.ttft_quantile, info, out)

    if out_dir is None:
        return run(None, None)
    with output_folder(out_dir) as stage:
        result = run({kind: stage(f"{kind}.parquet") for kind in ("requests", "timeseries")}, Path(out_dir).resolve())
        stage_summary(result, stage)
    return result
