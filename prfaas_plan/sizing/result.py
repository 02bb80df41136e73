"""What a sizing returns: the SLOs it met (:class:`SizingSLO`), each candidate's bill of materials
(:class:`SizedPlan` of :class:`SizedPool`), and the comparison of candidates (:class:`SizingResult`).

Rates are requests/s, times seconds, prices US dollars per hour, link rates Gbps (1e9 bit/s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from prfaas_plan.errors import InvalidInput
from prfaas_plan.units import usd_per_million_tokens

if TYPE_CHECKING:
    import pandas as pd

    from prfaas_plan.scenario import Scenario
    from prfaas_plan.sizing.tiers import LinkTier

PoolRole = Literal["prfaas_prefill", "local_prefill", "local_decode", "colocated"]
"""What a bought pool does: PrfaaS-site prefill, local prefill (PD-P), local decode (PD-D), or both (aggregated)."""
Site = Literal["prfaas", "local"]
PlanKind = Literal["prfaas-pd", "homogeneous-pd", "colocated", "naive-heterogeneous"]


@dataclass(frozen=True)
class SizingSLO:
    """The SLOs a sizing must meet: the ``ttft_quantile`` of TTFT at most ``ttft_s`` seconds (None:
    no TTFT SLO), and ``tpot_s`` seconds per output token (None: the scenario's)."""

    ttft_s: float | None = None
    ttft_quantile: float = 0.9
    tpot_s: float | None = None

    def __post_init__(self) -> None:
        for name, v in (("ttft_s", self.ttft_s), ("tpot_s", self.tpot_s)):
            if v is not None and not 0 < v < math.inf:
                raise InvalidInput(f"{name}: {v!r} is not a positive, finite number of seconds")
        if not 0 < self.ttft_quantile < 1:
            raise InvalidInput(f"ttft_quantile: {self.ttft_quantile!r} must be between 0 and 1 (e.g. 0.9)")

    @classmethod
    def of_scenario(cls, sc: Scenario) -> SizingSLO:
        """The scenario's own SLOs (its TTFT percentile and TPOT), which ``size`` meets when given none."""
        s = sc.spec.slo
        return cls(s.ttft_s, s.ttft_quantile, s.tpot_s)

    @property
    def ttft_label(self) -> str:
        """``ttft_p90`` and the like: how a binding TTFT SLO is named."""
        return f"ttft_p{round(self.ttft_quantile * 100)}"


@dataclass(frozen=True)
class SizedPool:
    """One bought pool: ``instances`` instances of ``gpus_per_instance`` GPUs of type ``gpu``
    (hardware_db id) in the parallel ``layout`` (a label such as ``tp8`` or ``dp8-ep8``)."""

    role: PoolRole
    site: Site
    gpu: str
    gpus_per_instance: int
    layout: str
    instances: int

    @property
    def gpus(self) -> int:
        return self.instances * self.gpus_per_instance


@dataclass(frozen=True)
class SizedPlan:
    """The cheapest plan of one kind (and GPU choice) for ``target_rps``: its pools, link, routing
    threshold ``threshold_tokens`` (None: no single threshold, or nothing offloaded), what the
    bought plan can serve (``lambda_max_rps``, under its routing), its TTFT percentile at the target
    (queueing model; reported with or without a TTFT SLO; an estimate for colocated) and TPOT, its
    $/hour split into GPUs, link and energy, what binds, and whether it meets the target and SLOs
    (``reason`` says why not, naming the constraint)."""

    kind: PlanKind
    label: str
    pools: tuple[SizedPool, ...]
    link: LinkTier | None
    threshold_tokens: float | None
    target_rps: float
    lambda_max_rps: float
    ttft_quantile_s: float | None
    tpot_s: float | None
    gpu_usd_per_hour: float
    link_usd_per_hour: float
    energy_usd_per_hour: float
    energy_kwh_per_million_tokens: float
    binding: str
    feasible: bool
    reason: str = ""
    tokens_per_request: float = 0.0
    egress_gbps: float = 0.0

    @classmethod
    def infeasible(cls, kind: PlanKind, label: str, target_rps: float, binding: str, reason: str,
                   tokens_per_request: float) -> SizedPlan:
        """A candidate that cannot meet the target and SLOs: nothing bought, infinite cost, ``binding``
        the constraint and ``reason`` the one line that says why."""
        return cls(kind, label, (), None, None, target_rps, 0.0, None, None, math.inf, 0.0, 0.0, math.inf, binding,
                   False, reason, tokens_per_request=tokens_per_request)

    @property
    def usd_per_hour(self) -> float:
        """GPUs + link + energy, dollars per hour."""
        return self.gpu_usd_per_hour + self.link_usd_per_hour + self.energy_usd_per_hour

    @property
    def usd_per_million_tokens(self) -> float:
        """Dollars per million tokens (input + output) served at the target rate."""
        return usd_per_million_tokens(self.usd_per_hour, self.target_rps, self.tokens_per_request)

    @property
    def gpus(self) -> int:
        return sum(p.gpus for p in self.pools)

    def bill_of_materials(self) -> str:
        """One line: ``4 x 8xh200 (tp8) PrfaaS prefill + ... + line-100g``."""
        names = {"prfaas_prefill": "PrfaaS prefill", "local_prefill": "local prefill", "local_decode": "local decode",
                 "colocated": "colocated"}
        parts = [f"{p.instances} x {p.gpus_per_instance}x{p.gpu} ({p.layout}) {names[p.role]}" for p in self.pools
                 if p.instances]
        return " + ".join(parts + ([self.link.id] if self.link is not None else []))

    def row(self) -> dict:
        """The plan as one table row (machine column names)."""
        by_role = {p.role: p for p in self.pools}

        def n(role: str) -> int:
            return by_role[role].instances if role in by_role else 0

        return {"kind": self.kind, "label": self.label, "feasible": self.feasible,
                "usd_per_hour": self.usd_per_hour, "gpu_usd_per_hour": self.gpu_usd_per_hour,
                "link_usd_per_hour": self.link_usd_per_hour, "energy_usd_per_hour": self.energy_usd_per_hour,
                "usd_per_million_tokens": self.usd_per_million_tokens, "gpus": self.gpus,
                "n_prfaas": n("prfaas_prefill"), "n_pd_p": n("local_prefill"), "n_pd_d": n("local_decode"),
                "n_colocated": n("colocated"), "link": self.link.id if self.link is not None else None,
                "egress_gbps": self.egress_gbps,
                "threshold_tokens": self.threshold_tokens if self.threshold_tokens is not None else math.nan,
                "lambda_max_rps": self.lambda_max_rps,
                "ttft_quantile_s": self.ttft_quantile_s if self.ttft_quantile_s is not None else math.nan,
                "tpot_s": self.tpot_s if self.tpot_s is not None else math.nan,
                "energy_kwh_per_million_tokens": self.energy_kwh_per_million_tokens,
                "binding": self.binding, "bill_of_materials": self.bill_of_materials(), "reason": self.reason}


@dataclass(frozen=True)
class SizingResult:
    """A sizing: the target, the SLOs, the cheapest feasible plan (``winner``), the best plan of
    each kind and GPU choice (``candidates``, feasible or not), the passes of the percentile-SLO
    loop (``iterations``, summed over candidates) and the loop's ``stopping_rule``."""

    target_rps: float
    slo: SizingSLO
    winner: SizedPlan
    candidates: tuple[SizedPlan, ...]
    iterations: int
    stopping_rule: str
    skipped: tuple[str, ...] = ()

    def table(self) -> pd.DataFrame:
        """One row per candidate, cheapest first: its costs, pools, link, t, Lambda_max, TTFT/TPOT,
        what binds, and ``margin_vs_winner`` (its $/hour over the winner's, minus 1; NaN when infeasible)."""
        import pandas as pd

        rows = []
        for c in sorted(self.candidates, key=lambda c: (not c.feasible, c.usd_per_hour)):
            r = c.row()
            r["margin_vs_winner"] = c.usd_per_hour / self.winner.usd_per_hour - 1 if c.feasible else math.nan
            r["winner"] = c == self.winner
            rows.append(r)
        return pd.DataFrame(rows)

    def equal_cost_rps(self) -> pd.DataFrame:
        """Each feasible candidate's throughput with the winner's $/hour, most first: the target
        rate scaled by the winner's $/hour over the candidate's (its cost per request/s at the
        target, taken as linear in the rate: fractional plans, integer instances ignored), and that
        over the target (``vs_winner``: the winner's own row is 1; the paper's "at equal cost")."""
        import pandas as pd

        budget = self.winner.usd_per_hour
        rows = [{"kind": c.kind, "label": c.label, "usd_per_hour": budget,
                 "rps_at_equal_cost": self.target_rps * budget / c.usd_per_hour, "vs_winner": budget / c.usd_per_hour}
                for c in self.candidates if c.feasible]
        return pd.DataFrame(rows).sort_values("rps_at_equal_cost", ascending=False, ignore_index=True)


__all__ = ["PlanKind", "PoolRole", "Site", "SizedPlan", "SizedPool", "SizingResult", "SizingSLO"]
