"""What a sweep's heatmap page shows, computed: the sweep table aggregated over its axes.

:func:`heatmap_data` checks the two axes a page draws (``x`` and ``y``; the other axes get a
drop-down each), picks the metrics the table has (:data:`METRICS`, plus the simulator's), and
averages every metric over the seeds of a cell. Cells that did not plan (status infeasible or
error) count as failed and keep their first error message.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from prfaas_plan.errors import InvalidInput, did_you_mean
from prfaas_plan.sweeps.cells import json_scalar

METRICS = (
    ("lambda_max_rps", "Throughput Λmax (req/s)", "viridis", False),
    ("usd_per_million_tokens", "Cost ($ per million tokens)", "viridis", True),
    ("ttft_p90_s", "P90 TTFT at the scenario's load (s)", "viridis", True),
)
"""(column, title, colour scheme, lower is better) of the heatmaps; a simulated sweep adds its
``sim_ttft_p90_s`` and ``sim_throughput_rps``."""
SIM_METRICS = {"sim_ttft_p90_s": ("Simulated P90 TTFT (s, mean over seeds)", True),
               "sim_throughput_rps": ("Simulated throughput (req/s, mean over seeds)", False)}


def safe_name(name: str) -> str:
    """A column name Vega expressions can address (``link.gbps`` -> ``link_gbps``)."""
    return "".join(ch if ch.isalnum() else "_" for ch in name)


def spec_value(v: Any) -> Any:
    """An axis value for a chart spec, which is strict JSON: a missing value (NaN) is null."""
    v = json_scalar(v)
    return None if isinstance(v, float) and math.isnan(v) else v


@dataclass(frozen=True)
class HeatmapData:
    """A sweep aggregated for its heatmaps.

    data: one row per combination of axis values; columns renamed by :func:`safe_name`: the axes,
    ``cells``, ``failed``, ``error`` and each metric (mean over seeds, NaN where no cell planned).
    metrics: (column, title, colour scheme, lower is better) of each panel. choices: the values of
    each drop-down axis, in the table's order; order: the sorted values of every axis.
    """

    axes: list[str]
    x: str
    y: str | None
    others: list[str]
    metrics: list[tuple[str, str, str, bool]]
    data: pd.DataFrame
    choices: dict[str, list]
    order: dict[str, list]


def _metrics(df: pd.DataFrame) -> list[tuple[str, str, str, bool]]:
    out = [m for m in METRICS if m[0] in df.columns]
    return out + [(c, title, "viridis", lower) for c, (title, lower) in SIM_METRICS.items() if c in df.columns]


def _axes(df: pd.DataFrame, x: str | None, y: str | None) -> tuple[list[str], str, str | None]:
    axes = list(df.attrs.get("axes") or [])
    if not axes:
        raise InvalidInput("--html: this table does not say its axes; pass the frame returned by sweep()")
    x = x or axes[0]
    if y is None and len(axes) > 1:
        y = next(a for a in axes if a != x)
    for flag, a in (("--x", x), ("--y", y)):
        if a is not None and a not in axes:
            raise InvalidInput(f"{flag}: {a!r} is not an axis of this sweep{did_you_mean(a, axes)}; axes: {', '.join(axes)}")
    if x == y:
        raise InvalidInput("--x/--y: give two different axes")
    return axes, x, y


def _sorted(values: list) -> list:
    try:
        return [spec_value(v) for v in sorted(values)]
    except TypeError:
        return [spec_value(v) for v in values]


def heatmap_data(df: pd.DataFrame, x: str | None = None, y: str | None = None) -> HeatmapData:
    """The heatmaps' data of a sweep table (as returned by ``sweep`` or ``read_results``) over
    axes ``x`` and ``y`` (default: the first two)."""
    axes, x, y = _axes(df, x, y)
    metrics = _metrics(df)
    if not metrics:
        raise InvalidInput("--html: the sweep has no throughput/cost/TTFT columns (did every cell fail?)")
    cols = [m[0] for m in metrics]
    ok = df[df["status"] == "ok"]
    agg = df.groupby(axes, dropna=False, sort=False).agg(
        cells=("status", "size"), failed=("status", lambda s: int((s != "ok").sum())),
        error=("error", lambda s: next((e for e in s if isinstance(e, str) and e), ""))).reset_index()
    if len(ok):
        means = ok.groupby(axes, dropna=False, sort=False)[cols].mean(numeric_only=True).reset_index()
        agg = agg.merge(means, on=axes, how="left")
    for c in cols:
        if c not in agg:
            agg[c] = math.nan
    data = agg.rename(columns={a: safe_name(a) for a in axes} | {c: safe_name(c) for c in cols})
    data = data.replace([math.inf, -math.inf], math.nan)
    others = [a for a in axes if a not in (x, y)]
    return HeatmapData(axes, x, y, others, metrics, data,
                       choices={a: [spec_value(v) for v in pd.unique(df[a])] for a in others},
                       order={a: _sorted(list(pd.unique(df[a]))) for a in axes})
