"""Shared chart style and altair helpers of the report pages.

The style every chart gets (font, sizes, plan and series colours, the Vega-Lite ``config`` merged
into each spec) and the small helpers the pages build their charts with: altair imported lazily
(:func:`_alt`), finite-only data, the plan colour scale and log-scale token axes,
:func:`unvalidated` (charts built without altair's schema check of every object) and
:class:`AssembledSpec` (a spec put together from altair's parts, for a nesting altair copies over and over).
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

    from prfaas_plan.tabular import Rows

# ----------------------------------------------------------------------------- style
FONT = 'system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif'
CHART_WIDTH, CHART_HEIGHT = 470, 260
BAR_WIDTH = 370  # horizontal bars leave room for category labels
PLAN_LABELS = {"prfaas-pd": "PrfaaS-PD", "homogeneous-pd": "Homogeneous PD", "naive-heterogeneous": "Naive heterogeneous"}
PLAN_COLORS = {"prfaas-pd": "#1f6fb2", "homogeneous-pd": "#8c96a3", "naive-heterogeneous": "#e08a2c"}
SERIES_COLORS = ["#1f6fb2", "#e08a2c", "#3a9b5c", "#c8443c", "#7b5ea7", "#8c6d31", "#d16ba5", "#5b6578"]

CHART_CONFIG: dict[str, Any] = {
    "font": FONT,
    "background": "white",
    "padding": 6,
    "view": {"stroke": "#e3e7ee", "continuousWidth": CHART_WIDTH, "continuousHeight": CHART_HEIGHT},
    "axis": {"labelFontSize": 11, "titleFontSize": 12, "titleFontWeight": 500, "labelColor": "#333",
             "titleColor": "#1d2330", "gridColor": "#eceff4", "domainColor": "#9aa3b2", "tickColor": "#9aa3b2"},
    "legend": {"orient": "bottom", "direction": "horizontal", "labelFontSize": 11, "titleFontSize": 11,
               "titleFontWeight": 500, "symbolStrokeWidth": 2.5, "columns": 3, "labelLimit": 230},
    "title": {"fontSize": 13.5, "fontWeight": 600, "anchor": "start", "color": "#1d2330",
              "subtitleFontSize": 11.5, "subtitleColor": "#5b6578", "offset": 8},
    "range": {"category": SERIES_COLORS},
    "line": {"strokeWidth": 2.2},
    "bar": {"cornerRadiusEnd": 2},
}


# ----------------------------------------------------------------------------- chart helpers
def _alt():
    import altair as alt

    return alt


F = TypeVar("F", bound=Callable[..., Any])


def unvalidated(fn: F) -> F:
    """``fn`` run with altair's ``debug_mode`` off. In debug mode (altair's default) every chart
    object validates itself against the Vega-Lite schema as it is built, and again as each layer
    or concatenation copies it: 0.1-0.2 s a page. The specs are the same either way; the tests
    validate each chart's whole spec (``Figure.spec(validate=True)``)."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        from altair.utils.schemapi import debug_mode

        with debug_mode(False):
            return fn(*args, **kwargs)

    return run  # type: ignore[return-value]


@dataclass(frozen=True)
class AssembledSpec:
    """A finished Vega-Lite spec (a dict) where a :class:`~.page.Figure` takes an altair chart: for
    a chart whose parts altair builds but whose nesting it would copy over and over (a
    concatenation deep-copies its subcharts as it is made, and each ``to_dict`` copies it again,
    re-making every level: 0.04 s of the what-if chart's 0.08 s). ``title``: the chart's title text."""

    spec: dict[str, Any]
    title: str = ""

    def to_dict(self, validate: bool = True) -> dict[str, Any]:
        """A copy of the spec, checked against the Vega-Lite schema with ``validate``."""
        if validate:
            _alt().TopLevelSpec.validate(self.spec)
        return copy.deepcopy(self.spec)


def _finite(df: pd.DataFrame) -> pd.DataFrame:
    """Replace +-inf by NaN (Vega-Lite data must be finite or null)."""
    return df.replace([np.inf, -np.inf], np.nan)


def _null(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v


def _plain(v: Any) -> Any:
    """A numpy scalar (in an object column) as the Python value it holds."""
    return v.item() if isinstance(v, np.generic) else v


@functools.lru_cache(maxsize=1)
def _shared_data_class() -> type:
    alt = _alt()

    class SharedInlineData(alt.InlineData):
        """``alt.InlineData`` that altair's deep copies keep by reference (as they keep a DataFrame):
        every layer and concatenation copies its charts, values and all."""

        def __deepcopy__(self, memo: Any = None) -> SharedInlineData:
            return self

    return SharedInlineData


def chart_data(data: pd.DataFrame | Rows, keys: Sequence[str] | None = None):
    """A chart's inline data from a DataFrame or records (``keys``: those columns, in that order;
    default all), as altair writes a DataFrame: the rows' values, NaN and +-inf as null, named by
    their content in the spec's ``datasets``. The spec is the one the DataFrame gives, without
    pandas or altair's per-frame sanitising, and the values are not copied with every layer.
    Charts sharing one data object (layers of one base) share it in the spec too."""
    if isinstance(data, list):
        values = [{k: _null(r[k]) for k in (keys or r)} for r in data]
    else:  # by column (a DataFrame's to_dict("records") builds each value in Python: 5x slower)
        keys = list(data.columns if keys is None else keys)
        cols = [[_null(_plain(v)) for v in data[k].tolist()] for k in keys]
        values = [dict(zip(keys, row)) for row in zip(*cols)]
    return _shared_data_class()(values=values)


def props(chart, **properties: Any):
    """``chart.properties(**properties)`` without altair's jsonschema check of each property
    (which it runs even with debug mode off; the tests validate every whole spec)."""
    copy = chart.copy(deep=False)
    for key, value in properties.items():
        copy[key] = value
    return copy


def _plan_scale(names: Iterable[str]):
    alt = _alt()
    names = list(names)
    labels = [PLAN_LABELS.get(n, n) for n in names]
    return alt.Scale(domain=labels, range=[PLAN_COLORS.get(n, "#5b6578") for n in names])


def _log_token_axis(title: str, values: list[int] | None = None):
    alt = _alt()
    return alt.Axis(title=title, values=values or [2 ** k for k in range(7, 21)], labelExpr=(
        "datum.value >= 1048576 ? format(datum.value / 1048576, 'd') + 'M' : "
        "datum.value >= 1024 ? format(datum.value / 1024, 'd') + 'K' : format(datum.value, 'd')"),
        labelOverlap=True)


def _decade_axis(title: str):
    """A log-scale value axis ticked at powers of ten only (Vega's default also labels 2, 3 and 5
    times each power, whose labels collide: 10,000 over 20,000)."""
    alt = _alt()
    return alt.Axis(title=title, values=[10.0 ** k for k in range(-4, 10)], format=",~g")


def _token_ticks(lo: float, hi: float) -> list[int]:
    return [2 ** k for k in range(0, 24) if lo <= 2 ** k <= hi]
