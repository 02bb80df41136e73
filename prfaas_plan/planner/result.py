"""What the planner returns: one deployment's :class:`Plan`, a scenario's :class:`PlanResult`, and how
they show themselves (one-line routing text, tables, HTML, the plan JSON).

Rates are requests per second, link rates Gbps (1e9 bit/s), prices US dollars per hour.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from prfaas_plan.units import GBPS_BITS_PER_S, usd_per_million_tokens

if TYPE_CHECKING:
    import pandas as pd

    from prfaas_plan.planner.inputs import Buckets, PlanInputs
    from prfaas_plan.scenario import Scenario
    from prfaas_plan.vocab import PlanMode

PATHS = ("prfaas", "pd_p", "pd_d")
"""The stages of a PrfaaS-PD deployment: PrfaaS prefill, local prefill (PD-P), local decode (PD-D)."""
STAGE_NAMES = {"prfaas": "PrfaaS prefill (compute)", "pd_p": "local prefill (PD-P)",
               "pd_d": "decode (PD-D)", "link": "inter-DC link bandwidth", "buffer": "PrfaaS transfer buffer"}
"""How a binding constraint is named to users."""


@dataclass(frozen=True)
class Plan:
    """One deployment's capacity plan (PrfaaS-PD or a baseline).

    stage_rps: the request rate each stage alone could sustain (Eq. 6's three terms).
    routing_columns: per-bucket columns (exact mode: tokens, prob, offload_fraction, t_remote_s,
    t_local_s, kv_bytes), else None; :attr:`routing` is the same as a DataFrame.
    """

    name: str
    mode: PlanMode
    threshold_tokens: float | None
    instances: dict[str, int]
    gpus: dict[str, int]
    lambda_max_rps: float
    offload_fraction: float
    stage_rps: dict[str, float]
    egress_gbps: float
    link_gbps: float
    binding: str
    cost_usd_per_hour: float
    mean_input_tokens: float
    output_tokens: float
    is_threshold: bool = True
    routing_columns: dict[str, np.ndarray] | None = field(default=None, compare=False, repr=False)

    @cached_property
    def routing(self) -> pd.DataFrame | None:
        """The per-bucket routing (exact mode) as a DataFrame, else None; built on first use, so
        that planning imports no pandas."""
        if self.routing_columns is None:
            return None
        import pandas as pd

        return pd.DataFrame(self.routing_columns)

    @property
    def routing_kind(self) -> str:
        """``"none"`` (nothing offloaded), ``"all"`` (everything offloaded, t = 0), ``"threshold"``
        (lengths above ``threshold_tokens`` offloaded) or ``"per-bucket"`` (offload shares per
        length bucket that no single threshold expresses: see :meth:`offload_bands`)."""
        if self.offload_fraction <= 0 or self.threshold_tokens is None:
            return "none"
        if self.offload_fraction >= 1 - 1e-9:
            return "all"
        return "threshold" if self.is_threshold else "per-bucket"

    def offload_bands(self) -> list[tuple[float, float, float]]:
        """Runs of consecutive length buckets with one offload share, as ``(first_tokens,
        last_tokens, share)`` (bucket representative lengths in tokens; share 0-1), shortest
        first. Empty for paper-mode plans, which route by threshold and have no buckets."""
        if self.routing_columns is None:
            return []
        tokens = np.asarray(self.routing_columns["tokens"], dtype=float)
        share = np.asarray(self.routing_columns["offload_fraction"], dtype=float).round(3)
        starts = np.flatnonzero(np.r_[True, np.diff(share) != 0])
        ends = np.r_[starts[1:] - 1, len(share) - 1]
        return [(float(tokens[a]), float(tokens[b]), float(share[a])) for a, b in zip(starts, ends)]

    def routing_text(self) -> str:
        """One line saying how requests are routed, e.g. ``t = 22,051 tokens (offload 44%)``."""
        kind = self.routing_kind
        if kind == "none":
            return "no offload: every request is prefilled locally (no threshold applies)"
        if kind == "all":
            return "t = 0: every request is prefilled on the PrfaaS cluster"
        if kind == "threshold":
            return f"t = {self.threshold_tokens:,.0f} tokens (offload {self.offload_fraction:.0%})"
        bands = ", ".join(f"{lo:,.0f}{f'-{hi:,.0f}' if hi > lo else ''} tokens: {share:.0%}"
                          for lo, hi, share in self.offload_bands())
        return (f"not a threshold: {self.offload_fraction:.0%} of requests offloaded by per-bucket shares "
                f"(uncached length: share offloaded) {bands}")

    @property
    def link_utilisation(self) -> float:
        """Egress over the nominal link rate (0-1)."""
        return self.egress_gbps / self.link_gbps if self.link_gbps > 0 else 0.0

    @property
    def utilisation(self) -> dict[str, float]:
        """Busy fraction of each stage when running at ``lambda_max_rps``."""
        return {k: (self.lambda_max_rps / v if v > 0 else 0.0) for k, v in self.stage_rps.items() if np.isfinite(v)}

    @property
    def usd_per_million_tokens(self) -> float:
        """Dollars per million tokens served (input + output) at ``lambda_max_rps``."""
        return usd_per_million_tokens(self.cost_usd_per_hour, self.lambda_max_rps,
                                      self.mean_input_tokens + self.output_tokens)

    @property
    def rps_per_usd_hour(self) -> float:
        """Requests/s served per dollar-hour."""
        return self.lambda_max_rps / self.cost_usd_per_hour if self.cost_usd_per_hour else float("inf")

    def row(self) -> dict[str, Any]:
        """The plan as one table row (instance counts, Lambda_max, egress, binding, cost)."""
        return {
            "plan": self.name, "mode": self.mode, "routing": self.routing_kind,
            "threshold_tokens": self.threshold_tokens if self.threshold_tokens is not None else np.nan,
            "n_prfaas": self.instances.get("prfaas", 0), "n_pd_p": self.instances.get("pd_p", 0),
            "n_pd_d": self.instances.get("pd_d", 0), "lambda_max_rps": self.lambda_max_rps,
            "offload_fraction": self.offload_fraction, "egress_gbps": self.egress_gbps,
            "link_utilisation": self.link_utilisation, "binding": self.binding,
            "cost_usd_per_hour": self.cost_usd_per_hour, "usd_per_million_tokens": self.usd_per_million_tokens,
        }


@dataclass(frozen=True)
class PlanPoint:
    """A solved operating point, before it is priced and named: what :func:`make_plan` builds a
    :class:`Plan` from.

    n_prfaas / n_pd_p / n_pd_d: instances; lambda_rps: the served rate (requests/s);
    offload_fraction: share of requests prefilled remotely; stage_rps: each stage's own rate limit;
    egress_bits_per_s: mean link load at ``lambda_rps``; link_rps: the rate the link alone allows
    (None = the link limits nothing).
    """

    name: str
    mode: PlanMode
    threshold_tokens: float | None
    n_prfaas: int
    n_pd_p: int
    n_pd_d: int
    lambda_rps: float
    offload_fraction: float
    stage_rps: dict[str, float]
    egress_bits_per_s: float
    link_rps: float | None = None
    routing_columns: dict[str, np.ndarray] | None = field(default=None, compare=False, repr=False)
    is_threshold: bool = True


BINDING_ORDER = ("link", "prfaas", "pd_p", "pd_d")
"""Which of several binding constraints is named (the first); binding means within
:data:`BINDING_TIE_REL` of the lowest rate, so that solver round-off does not pick the name."""
BINDING_TIE_REL = 1e-6


def binding_constraint(stage_rps: dict[str, float], link_rps: float | None = None) -> str:
    """The name of the stage (or the link) with the lowest rate limit (of several within
    :data:`BINDING_TIE_REL`, the first in :data:`BINDING_ORDER`); when nothing is served, every
    stage without capacity. Which of decode's two limits (TPOT SLO, memory) sets BS_max is
    :attr:`PlanInputs.decode_source`."""
    candidates = dict(stage_rps)
    if link_rps is not None:
        candidates["link"] = link_rps
    lowest = min(candidates.values())
    if lowest <= 0:
        return " and ".join(STAGE_NAMES[k] for k in BINDING_ORDER if candidates.get(k, 1.0) <= 0)
    return STAGE_NAMES[next(k for k in BINDING_ORDER if candidates.get(k, np.inf) <= lowest * (1 + BINDING_TIE_REL))]


def make_plan(inp: PlanInputs, point: PlanPoint) -> Plan:
    """Price and name an operating point: GPUs per stage, cost per hour, the binding constraint."""
    sc = inp.scenario
    gpi_remote, gpi_local = sc.spec.prfaas.gpus_per_instance, sc.spec.local.gpus_per_instance
    n_pf, n_p, n_d = point.n_prfaas, point.n_pd_p, point.n_pd_d
    cost = (n_pf * sc.prfaas_instance.price_usd_per_hour + (n_p + n_d) * sc.local_instance.price_usd_per_hour
            + (sc.spec.link.price_usd_per_hour if n_pf else 0.0))
    return Plan(
        name=point.name, mode=point.mode, threshold_tokens=point.threshold_tokens,
        instances={"prfaas": n_pf, "pd_p": n_p, "pd_d": n_d},
        gpus={"prfaas": n_pf * gpi_remote, "pd_p": n_p * gpi_local, "pd_d": n_d * gpi_local},
        lambda_max_rps=float(point.lambda_rps), offload_fraction=float(point.offload_fraction),
        stage_rps=point.stage_rps, egress_gbps=float(point.egress_bits_per_s / GBPS_BITS_PER_S),
        link_gbps=sc.spec.link.gbps, binding=binding_constraint(point.stage_rps, point.link_rps),
        cost_usd_per_hour=cost, mean_input_tokens=inp.mean_tokens, output_tokens=inp.output_tokens,
        is_threshold=point.is_threshold, routing_columns=point.routing_columns,
    )


@dataclass(frozen=True)
class PlanResult:
    """A scenario's plan, its baselines, and their latencies.

    ttft_records: one row per plan and path (prfaas, pd_p, all) with mean/P50/P90/P99 TTFT in seconds,
        at the scenario's ``load`` times the plan's own Lambda_max (``basis = "own load"``) and at
        one common rate all plans can serve (``basis = "common rate"``).
    slo_rps: the largest rate meeting the TTFT percentile SLO, per plan (when the SLO is set).
    staging: per plan, with ``decode.staging_memory`` on, the fixed point of staged decode memory and
        BS_max (:func:`prfaas_plan.planner.staging.staged`): BS_max with and without staging, plans
        solved, held bytes per decode GPU at Lambda_max and at ``load`` x Lambda_max (Little's law).
    :attr:`ttft` is ``ttft_records`` as a DataFrame (built on first use: planning imports no pandas).
    """

    scenario: Scenario
    mode: PlanMode
    plan: Plan
    baselines: dict[str, Plan]
    inputs: PlanInputs
    buckets: Buckets  # the recommended plan's (per-cluster caches for trace workloads)
    ttft_records: tuple[dict[str, Any], ...]
    slo_rps: dict[str, float]
    baseline_buckets: Buckets | None = None  # the baselines' (one shared cache); None = ``buckets``
    staging: dict[str, dict[str, Any]] | None = None  # per plan, the staging-memory fixed point (decode.staging_memory)

    def __repr__(self) -> str:
        p = self.plan
        ratios = ", ".join(f"{self.ratio(k):.2f}x {k}" for k in self.baselines)
        return (f"PlanResult({self.scenario.spec.id}, {self.mode} mode: {p.routing_text()}; PrfaaS "
                f"{p.instances['prfaas']} + PD-P {p.instances['pd_p']} + PD-D {p.instances['pd_d']}, "
                f"Lambda_max {p.lambda_max_rps:.3f} req/s, egress {p.egress_gbps:.1f} Gbps; {ratios})")

    def _repr_html_(self) -> str:
        """The plans side by side, one row each, units in the headers."""
        import html

        from prfaas_plan.display import fmt

        cols = {"plan": "plan", "routing": "routing", "threshold_tokens": "t (tokens)", "n_prfaas": "PrfaaS inst.",
                "n_pd_p": "PD-P inst.", "n_pd_d": "PD-D inst.", "lambda_max_rps": "Λ_max (req/s)",
                "egress_gbps": "egress (Gbps)", "cost_usd_per_hour": "cost ($/h)",
                "usd_per_million_tokens": "$/M tokens", "binding": "binding"}
        df = self.display_frame()[list(cols)].rename(columns=cols)
        head = html.escape(f"{self.scenario.spec.name} ({self.mode} mode): {self.plan.routing_text()}")
        return f"<p><b>{head}</b></p>" + df.to_html(index=False, float_format=fmt, na_rep="-")

    def buckets_for(self, name: str) -> Buckets:
        """The length buckets plan ``name``'s TTFT and SLO rate were computed on."""
        if name == self.plan.name or self.baseline_buckets is None:
            return self.buckets
        return self.baseline_buckets

    @property
    def threshold_tokens(self) -> float | None:
        return self.plan.threshold_tokens

    @property
    def instances(self) -> dict[str, int]:
        return self.plan.instances

    @property
    def lambda_max_rps(self) -> float:
        return self.plan.lambda_max_rps

    @property
    def egress_gbps(self) -> float:
        return self.plan.egress_gbps

    @property
    def plans(self) -> dict[str, Plan]:
        return {self.plan.name: self.plan, **self.baselines}

    @property
    def common_rate_rps(self) -> float:
        """The one rate (requests/s) at which every plan's TTFT is compared: ``load`` times the
        smallest Lambda_max."""
        return float(next(r["rate_rps"] for r in self.ttft_records if r["basis"] == "common rate"))

    @cached_property
    def ttft(self) -> pd.DataFrame:
        """The TTFT table (``ttft_records``) as a DataFrame."""
        import pandas as pd

        return pd.DataFrame(list(self.ttft_records))

    def ratio(self, baseline: str) -> float:
        """PrfaaS-PD throughput over a baseline's (NaN when the baseline serves nothing)."""
        other = self.baselines[baseline].lambda_max_rps
        return self.plan.lambda_max_rps / other if other > 0 else float("nan")

    def records(self) -> list[dict[str, Any]]:
        """One row per plan: routing, instances, Lambda_max, egress, binding, cost, P90 TTFT."""
        rows = []
        q = self.scenario.spec.slo.ttft_quantile
        col = f"p{round(q * 100)}_s"
        for name, p in self.plans.items():
            r = p.row()
            r["throughput_vs_this"] = self.plan.lambda_max_rps / p.lambda_max_rps if p.lambda_max_rps else np.nan
            r["rps_per_usd_hour"] = p.rps_per_usd_hour
            sel = [t[col] for t in self.ttft_records
                   if t["plan"] == name and t["path"] == "all" and t["basis"] == "common rate"]
            r[f"p{round(q * 100)}_ttft_s_common_rate"] = float(sel[0]) if sel else np.nan
            if name in self.slo_rps:
                r["slo_rps"] = self.slo_rps[name]
            rows.append(r)
        return rows

    def display_records(self) -> list[dict[str, Any]]:
        """:meth:`records` as tables show them to people: ``threshold_tokens`` is 0 where everything
        is offloaded and blank (NaN) where no single threshold describes the routing."""
        rows = self.records()
        for r in rows:
            if r["routing"] == "per-bucket":
                r["threshold_tokens"] = np.nan
            elif r["routing"] == "all":
                r["threshold_tokens"] = 0.0
        return rows

    def display_frame(self) -> pd.DataFrame:
        """:meth:`display_records` as a DataFrame."""
        import pandas as pd

        return pd.DataFrame(self.display_records())

    def to_frame(self) -> pd.DataFrame:
        """:meth:`records` as a DataFrame."""
        import pandas as pd

        return pd.DataFrame(self.records())

    def json_dict(self) -> dict[str, Any]:
        """The plan JSON document (``prfaas-plan plan --out``): the scenario, the plans (one record
        per :meth:`to_frame` row), the TTFT table, the decode capacity and the throughput ratios.
        The tables' numbers are as pandas writes them (10 decimals; NaN and infinity as None); a
        ratio over a baseline that serves nothing is NaN."""
        import json

        return {
            "scenario": self.scenario.spec.model_dump(), "mode": self.mode,
            "plans": json.loads(self.to_frame().to_json(orient="records")),
            "ttft": json.loads(self.ttft.to_json(orient="records")),
            "decode": {"batch_max": self.inputs.decode_batch_max, "step_s": self.inputs.decode_step_s,
                       "source": self.inputs.decode_source},
            "ratios": {k: self.ratio(k) for k in self.baselines},
            **({"staging": self.staging} if self.staging else {}),
        }
