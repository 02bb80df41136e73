"""A plan's time to first token: its TTFT distribution at a rate, the percentile table, and the
largest rate that meets a TTFT percentile SLO.

TTFT = prefill wait + prefill + the KV transfer that layer-wise pipelining does not hide + one
decode step, per path (PrfaaS, local PD-P) and over all requests, from the M/G/c model of
:mod:`prfaas_plan.queueing`. Times are seconds, rates requests/s, link rates bit/s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from prfaas_plan.errors import InvalidInput
from prfaas_plan.handoff import link_share
from prfaas_plan.handoff import unhidden_transfer_s as unhidden_transfer
from prfaas_plan.queueing import ServiceMix, TTFTDist, max_rate_for_slo, mixed_ttft, ttft_distribution
from prfaas_plan.units import BITS_PER_BYTE

if TYPE_CHECKING:
    import pandas as pd

    from prfaas_plan.planner.inputs import Buckets, PlanInputs
    from prfaas_plan.planner.result import Plan

SLO_RATE_CAP = 1 - 1e-6
"""The SLO rate is sought below this share of Lambda_max (at Lambda_max itself the wait is infinite)."""


def offload_fractions(plan: Plan, b: Buckets) -> np.ndarray:
    """Fraction of each bucket's requests that the plan sends to the PrfaaS cluster."""
    routing = plan.routing_columns
    if routing is not None and len(routing["offload_fraction"]) == len(b.tokens):
        return routing["offload_fraction"]
    if plan.instances.get("prfaas", 0) == 0 or plan.threshold_tokens is None:
        return np.zeros_like(b.tokens)
    return (b.tokens > plan.threshold_tokens).astype(float)


def unhidden_transfer_s(inp: PlanInputs, b: Buckets, egress_bits_per_s: float) -> np.ndarray:
    """KV transfer time that layer-wise pipelining does not hide, per bucket (seconds): the
    handoff term :func:`prfaas_plan.handoff.unhidden_transfer_s` at the link's free share
    ``link * max(1 - utilisation, 5%)`` (:func:`prfaas_plan.handoff.link_share`)."""
    link = inp.link_bits_per_s
    rate = link * link_share(egress_bits_per_s, link) if link > 0 else 0.0
    return unhidden_transfer(BITS_PER_BYTE * b.kv_bytes, b.t_remote_s, rate, inp.scenario.model.layers.count,
                             inp.scenario.spec.link.rtt_s)


def ttft_at(inp: PlanInputs, plan: Plan, b: Buckets, rate_rps: float) -> dict[str, TTFTDist]:
    """TTFT distributions at ``rate_rps`` (Poisson): per path (``"prfaas"``, ``"pd_p"``) and over
    all requests (``"all"``)."""
    frac = offload_fractions(plan, b)
    w_remote = b.probs * frac
    w_local = b.probs * (1 - frac)
    p_remote = float(w_remote.sum())
    egress = rate_rps * float(np.dot(w_remote, BITS_PER_BYTE * b.kv_bytes))
    step = inp.decode_step_s
    parts, out = [], {}
    if p_remote > 1e-12:
        mix = ServiceMix(b.t_remote_s, w_remote / p_remote)
        extra = unhidden_transfer_s(inp, b, egress)
        out["prfaas"] = ttft_distribution(rate_rps * p_remote, plan.instances["prfaas"], mix, extra, step)
        parts.append((p_remote, out["prfaas"]))
    if 1 - p_remote > 1e-12:
        n_local = plan.instances["pd_p"]
        if n_local < 1:
            raise InvalidInput(f"{plan.name}: requests are routed to local prefill but it has no instances")
        mix = ServiceMix(b.t_local_s, w_local / w_local.sum())
        out["pd_p"] = ttft_distribution(rate_rps * (1 - p_remote), n_local, mix, 0.0, step)
        parts.append((1 - p_remote, out["pd_p"]))
    total = sum(w for w, _ in parts)
    out["all"] = mixed_ttft([(w / total, d) for w, d in parts])
    return out


def ttft_records(inp: PlanInputs, plans: dict[str, Plan], plan_buckets: dict[str, Buckets],
                 load: float) -> list[dict[str, Any]]:
    """Mean/P50/P90/P99 TTFT (seconds) of every plan that serves a rate, per path, at ``load`` times
    its own Lambda_max (``basis = "own load"``) and at ``load`` times the smallest Lambda_max of
    them all (``"common rate"``): one dict per plan, basis and path."""
    common = load * min(p.lambda_max_rps for p in plans.values() if p.lambda_max_rps > 0)
    rows: list[dict[str, Any]] = []
    for name, p in plans.items():
        if p.lambda_max_rps <= 0:
            continue
        for basis, rate in (("own load", load * p.lambda_max_rps), ("common rate", common)):
            for path, dist in ttft_at(inp, p, plan_buckets[name], rate).items():
                pc = dist.percentiles()
                rows.append({"plan": name, "basis": basis, "path": path, "rate_rps": rate,
                             "mean_s": pc["mean"], "p50_s": pc["p50"], "p90_s": pc["p90"], "p99_s": pc["p99"]})
    return rows


def ttft_table(inp: PlanInputs, plans: dict[str, Plan], plan_buckets: dict[str, Buckets],
               load: float) -> pd.DataFrame:
    """:func:`ttft_records` as a DataFrame."""
    import pandas as pd

    return pd.DataFrame(ttft_records(inp, plans, plan_buckets, load))


def slo_rate(inp: PlanInputs, plan: Plan, b: Buckets, quantile: float, slo_s: float) -> float:
    """Largest Poisson rate (requests/s, below Lambda_max) whose TTFT ``quantile`` over all
    requests meets ``slo_s`` seconds (:func:`prfaas_plan.queueing.max_rate_for_slo`); 0 when even
    an empty system misses it."""
    return max_rate_for_slo(lambda rate: ttft_at(inp, plan, b, rate)["all"], plan.lambda_max_rps * SLO_RATE_CAP,
                            quantile, slo_s)
