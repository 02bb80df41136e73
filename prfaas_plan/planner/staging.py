"""Staging memory in the plan: the decode memory requests hold before their KV arrives, charged
against ``BS_max`` as a fixed point with the plan, and the PrfaaS transfer buffer as a rate cap.

A request reserves its full prompt KV on the decode side at the point its engine profile names
and holds it until its decode admission (:mod:`prfaas_plan.handoff`); by Little's law a decode
instance holds ``H(Lambda) = Lambda * E[hold x bytes] / N_d`` on average, per GPU, where the hold
is, per path, prefill + unhidden transfer (less the reservation's offset; the wait for a decode
slot is taken as 0, which the simulator measures). What is held is not there for running
requests, so ``BS_max`` shrinks to ``BS(H) = min(BS_tpot, floor((M - H) / m))`` (``M`` the cache
memory per GPU, ``m`` one running request's bytes), the decode rate with it, then Lambda, then
``H``.

**The iteration** (:func:`staged`): ``H`` grows with ``BS_max`` (through Lambda) while the room
``BS(H)`` shrinks, so ``g(BS) = BS(H(Lambda(BS)))`` is non-increasing and the fixed point is the
largest integer ``BS`` with ``BS <= g(BS)``, one plan per probe: ``BS_max`` itself; if it fails,
``g(BS_max)``, a fixed point when ``g`` is non-increasing (a plan's routing can change with
``BS``, so it is checked); then bisection between the largest fixed point found and the smallest
failure. Converged when that bracket closes (integers, so exact): two or three plans on the case
study, at most ``ceil(log2(BS_max)) + 2``. When even ``BS = 1`` overflows, no rate is served with
staging on.

**The transfer buffer** (:func:`buffer_capped`): a remote request's KV occupies the PrfaaS
instance's buffer from its prefill start until its KV is ready, ``S x (T + handoff)``; the plan's
rate is capped where the mean occupancy per instance reaches the buffer (bisection on the rate,
the routing kept), and the cap is the stage ``"buffer"`` when it binds.
Rates are requests/s, times seconds, memory bytes per GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from prfaas_plan.errors import Infeasible
from prfaas_plan.handoff import held_bytes, hold_s
from prfaas_plan.planner.result import STAGE_NAMES
from prfaas_plan.planner.ttft import offload_fractions, unhidden_transfer_s
from prfaas_plan.units import BITS_PER_BYTE, GIB_BYTES

if TYPE_CHECKING:
    from prfaas_plan.planner.inputs import Buckets, PlanInputs
    from prfaas_plan.planner.result import Plan

BUFFER_RATE_RTOL = 1e-6
"""Relative tolerance of the rate bisection under a transfer buffer."""


def _remote_handoff_s(inp: PlanInputs, plan: Plan, b: Buckets, rate_rps: float) -> tuple[np.ndarray, np.ndarray]:
    """Per bucket: the offloaded share and the unhidden transfer (s) at ``rate_rps`` (0 where nothing is offloaded)."""
    frac = offload_fractions(plan, b)
    if not np.any(frac > 0):
        return frac, np.zeros_like(b.tokens)
    egress = rate_rps * float(np.dot(b.probs * frac, BITS_PER_BYTE * b.kv_bytes))
    return frac, np.where(frac > 0, unhidden_transfer_s(inp, b, egress), 0.0)


def held_decode_bytes(inp: PlanInputs, plan: Plan, b: Buckets, rate_rps: float) -> float:
    """Mean staged bytes per GPU of one decode instance at ``rate_rps`` (Little's law over both paths)."""
    st = inp.staging
    frac, handoff = _remote_handoff_s(inp, plan, b, rate_rps)
    n_layers = inp.scenario.model.layers.count
    staged = st.staged_bytes(b.tokens)
    remote = hold_s(st.reserve_at, True, b.t_remote_s, handoff, n_layers)
    local = hold_s(st.reserve_at, False, b.t_local_s, 0.0, n_layers)
    total = (held_bytes(rate_rps, b.probs * frac, remote, staged)
             + held_bytes(rate_rps, b.probs * (1 - frac), local, staged))
    return total / max(plan.instances.get("pd_d", 0), 1)


def buffer_bytes(inp: PlanInputs, plan: Plan, b: Buckets, rate_rps: float) -> float:
    """Mean bytes per PrfaaS instance in its transfer buffer at ``rate_rps``: ``S x (T + handoff)``."""
    frac, handoff = _remote_handoff_s(inp, plan, b, rate_rps)
    return held_bytes(rate_rps, b.probs * frac, b.t_remote_s + handoff, b.kv_bytes) / max(plan.instances["prfaas"], 1)


def staged(inp: PlanInputs, solve: Callable[[PlanInputs], tuple[Plan, Buckets]]
           ) -> tuple[PlanInputs, Plan, Buckets, dict[str, Any]]:
    """The fixed point of staged memory and ``BS_max`` for the plan ``solve`` makes from inputs
    (with the buckets it was solved on): the inputs with the staged ``decode_batch_max``, its plan
    and buckets, and a record of the iteration. Raises :class:`Infeasible` when even one running
    request per instance does not fit."""
    st = inp.staging
    probes: dict[int, tuple[PlanInputs, Plan, Buckets, float]] = {}

    def fits(bs: int) -> bool:
        inp_bs = replace(inp, decode_batch_max=bs)
        p, b = solve(inp_bs)
        held = held_decode_bytes(inp_bs, p, b, p.lambda_max_rps) if p.lambda_max_rps > 0 else 0.0
        probes[bs] = (inp_bs, p, b, held)
        return bs <= st.batch_max_with(held)

    lo, hi = 0, st.batch_max  # lo: the largest known fixed point (0: none yet); none above hi
    if fits(hi):
        lo = hi
    else:  # g is non-increasing, so g(BS_max) < BS_max is a fixed point below it: try it first
        guess = min(hi - 1, st.batch_max_with(probes[hi][3]))
        lo, hi = (guess, hi - 1) if guess >= 1 and fits(guess) else (0, guess - 1)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    if lo < 1:
        held = probes[min(probes)][3]
        raise Infeasible(
            f"infeasible: decode.staging_memory: requests staged before their KV arrives hold "
            f"{held / GIB_BYTES:.2f} GiB per decode GPU, leaving no room for one running request "
            f"({st.memory_bytes / GIB_BYTES:.2f} GiB for caches); add decode instances or link bandwidth")
    inp_bs, p, b, held = probes[lo]
    record = {"reserve_at": st.reserve_at, "batch_max_unstaged": st.batch_max, "batch_max": lo,
              "plans_solved": len(probes), "held_bytes_per_gpu": held, "memory_bytes_per_gpu": st.memory_bytes,
              "running_bytes_per_gpu": st.running_bytes,
              "rule": "largest integer BS_max <= floor((M - H(Lambda_max(BS_max))) / m), by bisection"}
    source = (f"{inp.decode_source}; staging memory: {held / GIB_BYTES:.2f} GiB per GPU held at Lambda_max "
              f"(reserved at {st.reserve_at.replace('_', ' ')}) leaves BS_max {lo} of {st.batch_max}")
    return replace(inp_bs, decode_source=source), p, b, record


def buffer_capped(inp: PlanInputs, plan: Plan, b: Buckets) -> Plan:
    """The plan with its rate capped where the PrfaaS transfer buffer fills (the plan itself when
    it has no buffer, no remote traffic, or room at Lambda_max)."""
    cap = inp.transfer_buffer_bytes
    lam = plan.lambda_max_rps
    if cap is None or lam <= 0 or plan.instances.get("prfaas", 0) == 0 or buffer_bytes(inp, plan, b, lam) <= cap:
        return plan
    lo, hi = 0.0, lam
    while hi - lo > BUFFER_RATE_RTOL * lam:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if buffer_bytes(inp, plan, b, mid) <= cap else (lo, mid)
    scale = lo / lam
    stage_rps = {**plan.stage_rps, "buffer": lo}
    return replace(plan, lambda_max_rps=lo, stage_rps=stage_rps, egress_gbps=plan.egress_gbps * scale,
                   binding=STAGE_NAMES["buffer"])
