"""The validation page: predicted against measured TTFT and TPOT (:func:`validate_report`).

The numbers are :mod:`prfaas_plan.validate`'s; this module lays them out on the report page
template (Content-Security-Policy, Vega inlined, no network): one scatter plot per metric on log
axes with the 1:1 line and +-25% bands, the summary per system and model, the rows per status
rule, how the mapped rows were read (protocol, relabelling rules) and the 20 worst rows. The page
is written atomically (never a partial file).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from prfaas_plan.report.charts import SERIES_COLORS, _alt, _decade_axis
from prfaas_plan.report.files import _write
from prfaas_plan.report.page import Col, Figure, Report, Section, Table, _e

if TYPE_CHECKING:
    import pandas as pd

BAND = 0.25
"""Half-width of the shaded band around the 1:1 line (+-25% of the measured value)."""


def _scatter(ok: pd.DataFrame, metric: str, label: str):
    """Predicted against measured ``metric`` (ms) per row, coloured by model, on log axes, over
    the 1:1 line and its +-25% band."""
    import pandas as pd

    alt = _alt()
    meas, pred = ok[f"{metric}_ms_measured"], ok[f"{metric}_ms_predicted"]
    lo = float(min(meas.min(), pred.min()) / 1.5)
    hi = float(max(meas.max(), pred.max()) * 1.5)
    xs = np.geomspace(lo, hi, 24)
    ref = pd.DataFrame({"x": xs, "y": xs, "lo": xs * (1 - BAND), "hi": xs * (1 + BAND)})
    scale = alt.Scale(type="log", domain=[lo, hi])
    x_axis, y_axis = _decade_axis(f"measured {label} (ms)"), _decade_axis(f"predicted {label} (ms)")
    x = alt.X("x:Q", scale=scale, axis=x_axis)
    band = alt.Chart(ref).mark_area(opacity=0.18, color="#1f6fb2").encode(
        x=x, y=alt.Y("lo:Q", scale=scale, axis=y_axis), y2="hi:Q")
    diag = alt.Chart(ref).mark_line(color="#5b6578", strokeDash=[4, 3], strokeWidth=1.2).encode(
        x=x, y=alt.Y("y:Q", scale=scale, axis=y_axis))
    pts = ok[["system", "model", "mode", "isl", "osl", "concurrency", f"{metric}_ms_measured",
              f"{metric}_ms_predicted"]].rename(columns={f"{metric}_ms_measured": "measured",
                                                         f"{metric}_ms_predicted": "predicted"})
    dots = alt.Chart(pts).mark_circle(size=34, opacity=0.75).encode(
        x=alt.X("measured:Q", scale=scale, axis=x_axis), y=alt.Y("predicted:Q", scale=scale, axis=y_axis),
        color=alt.Color("model:N", title="model", scale=alt.Scale(range=SERIES_COLORS)),
        shape=alt.Shape("mode:N", title="mode"),
        tooltip=[alt.Tooltip(c, format=",.4g") if c in ("measured", "predicted") else c for c in pts.columns])
    return alt.layer(band, diag, dots).properties(title=f"{label}: predicted vs measured (ms, log axes)")


SHARES = ("prompt_peak_share",)
"""Columns that are fractions, shown in percent."""


def _cols(df: pd.DataFrame) -> list[Col]:
    """A column per field: text left-aligned, fractions in percent, other numbers formatted."""
    return [Col(c, c.replace("_", " "), fmt="text", text=True) if df[c].dtype == object
            else Col(c, c.replace("_", " "), fmt="pct" if c in SHARES else "num") for c in df.columns]


def _mapping(df: pd.DataFrame) -> pd.DataFrame:
    """Mapped rows per benchmark protocol, per relabelling rule, run at their launch script's token
    budget, KV-cache dtype, scheduler settings, static memory share, experts dtype or expert layout, as AIConfigurator's
    generator launched them, and at their disaggregated recipe's workers and DP attention (the frame's ``attrs``)."""
    import pandas as pd

    rows = [("run protocol", name, n) for name, n in df.attrs.get("protocols", {}).items()]
    rows += [("predicted otherwise than labelled", name, n) for name, n in df.attrs.get("remapped", {}).items()]
    rows += [("engine as launched", "token budget per step of the launch script", df.attrs.get("recipe_budget", 0)),
             ("engine as launched", "KV-cache dtype of the launch script", df.attrs.get("recipe_kv_dtype", 0)),
             ("engine as launched", "running-request cap or scheduler polling of the launch script",
              df.attrs.get("recipe_scheduler", 0)),
             ("engine as launched", "static memory share of the launch script", df.attrs.get("recipe_memory", 0)),
             ("engine as launched", "experts dtype of the launch script", df.attrs.get("recipe_experts_dtype", 0)),
             ("engine as launched", "experts kernel of the launch script", df.attrs.get("recipe_moe_kernel", 0)),
             ("engine as launched", "experts tensor-parallel as the launch script ran them (the row names expert ranks)",
              df.attrs.get("recipe_experts_tp", 0)),
             ("engine as launched", "SGLang as AIConfigurator's generator launched it (mixed chunks, max prefill tokens)",
              df.attrs.get("generator_launch", 0)),
             ("disaggregated recipe", "worker counts of the recipe in force when measured", df.attrs.get("recipe_workers", 0)),
             ("disaggregated recipe", "DP attention of the recipe (the row reads TP)", df.attrs.get("recipe_dp_attention", 0))]
    return pd.DataFrame(rows, columns=["kind", "rule", "rows"])


def validate_report(df: pd.DataFrame, path: str | Path, title: str = "Validation against measured serving runs") -> Path:
    """Write the validation page of a :func:`~prfaas_plan.validate.validate_silicon` /
    :func:`~prfaas_plan.validate.validate_runs` frame to ``path`` (one offline file) and return it."""
    from prfaas_plan.validate import errors_pct, status_counts, summary, worst_rows

    ok = errors_pct(df)
    summ, engines, counts, worst = summary(df), summary(df, by="engine"), status_counts(df), worst_rows(df)
    mapping = _mapping(df)
    blocks: list = []
    if len(ok):
        blocks += [Figure("ttft-scatter", _scatter(ok, "ttft", "TTFT"),
                          "Each dot one measured run; the dashed line is a perfect prediction, the band +-25%."),
                   Figure("tpot-scatter", _scatter(ok, "tpot", "TPOT"),
                          "Each dot one measured run; the dashed line is a perfect prediction, the band +-25%.")]
    else:
        blocks.append("<p>No row was predicted; see the rows per status below.</p>")
    sections = [
        Section("scatter", "Predicted against measured", blocks),
        Section("summary", "Errors per system and model",
                [Table("summary", summ, _cols(summ), caption="|error| in percent of the measured value; signed: "
                                                                     "the median of predicted / measured - 1 (below 0: "
                                                                     "predicted faster than measured, an optimistic plan); "
                                                                     "rows beyond 2x: predicted more than 2x off, either way")]),
        Section("engines", "Errors per system and serving engine",
                [Table("engines", engines, _cols(engines), caption="as above, per serving engine")]),
        Section("status", "Rows per status", [Table("status", counts, _cols(counts),
                                                    caption="ok: predicted and counted; repeats an earlier row: the same measured run "
                                                            "filed again, predicted as that row and counted once; "
                                                            "any other: the rule that left the row out")]),
        Section("mapping", "How the mapped rows were read", [Table(
                "mapping", mapping, [*_cols(mapping)[:2], Col("rows", "rows", fmt="int")],
                caption="the benchmark protocol each row was predicted under, the rules that predict a row "
                        "otherwise than its labels say (what its engine can load), and the InferenceX runs "
                        "predicted at the token budget per step or the KV-cache dtype their launch script set")]),
        Section("worst", "The 20 worst rows", [Table("worst", worst, _cols(worst),
                                                     caption="by how many times off the farther of TTFT and TPOT is, either way; prompt peak share: "
                                                             "the share of its GPUs' fastest dense tensor peak the run's prompts "
                                                             "alone needed at its measured request rate (above 100% it cannot "
                                                             "have prefilled every prompt, as the prediction assumes)")]),
    ]
    src = df.attrs.get("source", "")
    subtitle = (f"{len(df):,} rows{' from <code>' + _e(src) + '</code>' if src else ''}; {len(ok):,} distinct runs predicted. "
                "The rows were never used to fit or tune anything.")
    cards = [("runs predicted", f"{len(ok):,}", f"of {len(df):,} rows")]
    if len(ok):
        cards += [("TTFT median |error|", f"{ok['ttft_error_pct'].abs().median():.0f}%", "all predicted runs"),
                  ("TPOT median |error|", f"{ok['tpot_error_pct'].abs().median():.0f}%", "all predicted runs"),
                  ("TTFT median signed error", f"{ok['ttft_error_pct'].median():+.0f}%",
                   "below 0: predicted faster than measured"),
                  ("TPOT beyond 2x", f"{int(summ.loc[summ['model'] == 'all', 'tpot_rows_beyond_2x'].sum()):,}",
                   "rows predicted more than 2x off, either way")]
    report = Report("validate", title, subtitle, cards, _e("Predictions from the kernel tables and the engine "
                                                           "profiles' documented constants only."), sections)
    return _write(report, Path(path), None)


__all__ = ["validate_report"]
