"""Tables as plain records and numpy columns, typed and reduced as pandas would do it, without pandas.

The report pages build their tables and charts from :data:`Rows` (records) and :data:`Columns`
(numpy columns) so that ``prfaas-plan report`` and ``compare`` never import pandas (0.3-0.5 s of
their start-up). What pandas would add is reproduced here to the last bit, so every page is
byte-identical to one built from DataFrames: the value types of ``DataFrame.to_dict("records")``
(:func:`frame_rows`, :func:`columns_rows`), a melt to long form (:func:`melt`), a groupby mean (:func:`group_means`, behind
:func:`downsample`) and a centred rolling mean (:func:`centred_mean`). Tests compare each with
pandas itself.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

Rows = list[dict[str, Any]]
"""A table as records (one dict per row, the same keys in each): the reports' numbers, built
without pandas (0.5 s to import) so that ``prfaas-plan compare`` and ``report`` never load it."""
Columns = dict[str, np.ndarray]
"""A table as equal-length numpy columns, by name."""


def _plain(v: Any) -> Any:
    """A numpy scalar as the Python number it holds (JSON-serialisable); anything else as it is."""
    return v.item() if isinstance(v, np.generic) else v


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def frame_rows(rows: list[dict[str, Any]]) -> Rows:
    """``rows`` typed as ``pd.DataFrame(rows).to_dict("records")`` gives them: every key of any row
    in each (a missing one NaN), in order of first appearance; Python numbers, not numpy scalars;
    a column of numbers with any float or missing value (None, NaN) all floats, None as NaN (pandas
    infers float64); a column of strings with missing values those as NaN (pandas' str dtype)."""
    keys = list(dict.fromkeys(k for r in rows for k in r))
    rows = [{k: _plain(r.get(k, math.nan)) for k in keys} for r in rows]
    for key in keys:
        present = [r[key] for r in rows if r[key] is not None]
        if not present:
            continue
        if all(_number(v) for v in present):
            if len(present) < len(rows) or any(isinstance(v, float) for v in present):
                for r in rows:
                    r[key] = math.nan if r[key] is None else float(r[key])
        elif all(isinstance(v, str) or (isinstance(v, float) and math.isnan(v)) for v in present):
            for r in rows:
                if r[key] is None:
                    r[key] = math.nan
    return rows


def columns_rows(cols: Columns) -> Rows:
    """Records of numpy columns (``pd.DataFrame(cols).to_dict("records")``: each value the Python
    number or string its column holds)."""
    keys = list(cols)
    return [dict(zip(keys, vals)) for vals in zip(*(np.asarray(v).tolist() for v in cols.values()))]


def finite(cols: Columns) -> Columns:
    """+-inf replaced by NaN in float columns (chart data must be finite or null)."""
    return {k: np.where(np.isinf(v), np.nan, v) if np.asarray(v).dtype.kind == "f" else v for k, v in cols.items()}


def _kahan_means(x: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Mean of ``x`` per label (labels sorted, NaN skipped), summed in row order with Kahan
    compensation: pandas' Cython groupby mean."""
    order = np.argsort(labels, kind="stable")
    _, first, counts = np.unique(labels[order], return_index=True, return_counts=True)
    v = np.asarray(x, dtype=float)[order]
    total, comp, nobs = np.zeros(len(first)), np.zeros(len(first)), np.zeros(len(first), dtype=np.int64)
    for k in range(int(counts.max(initial=0))):
        g = np.flatnonzero(counts > k)
        val = v[first[g] + k]
        ok = ~np.isnan(val)
        g, val = g[ok], val[ok]
        y = val - comp[g]
        t = total[g] + y
        c = t - total[g] - y
        comp[g] = np.where(np.isnan(c), 0.0, c)  # an infinite value: pandas restarts the compensation
        total[g] = t
        nobs[g] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(nobs > 0, total / nobs, np.nan)


def group_means(cols: Columns, labels: np.ndarray) -> Columns:
    """Means of the numeric columns per label (labels sorted), to the last bit as
    ``pd.DataFrame(cols).groupby(labels).mean()`` gives them: with the labels in order and no NaN
    in any float column (pandas checks its float columns together), ``np.add.reduceat`` over each
    label's run of rows; otherwise :func:`_kahan_means`."""
    numeric = {k: np.asarray(v) for k, v in cols.items() if np.asarray(v).dtype.kind in "iuf"}
    in_order = bool(np.all(labels[1:] >= labels[:-1]))
    float_nan = any(np.isnan(v).any() for v in numeric.values() if v.dtype.kind == "f")
    starts = np.flatnonzero(np.r_[True, labels[1:] != labels[:-1]])
    sizes = np.diff(starts, append=len(labels)).astype(float)
    return {k: np.add.reduceat(v.astype(float), starts) / sizes
            if in_order and not (float_nan and v.dtype.kind == "f") else _kahan_means(v, labels)
            for k, v in numeric.items()}


def downsample(cols: Columns, xcol: str, n: int) -> Columns:
    """At most about ``n`` rows: means of the numeric columns over equal-width bins of ``xcol``
    (+-inf as NaN first)."""
    cols = finite(cols)
    x = np.asarray(cols[xcol], dtype=float)
    if len(x) <= n:
        return cols
    bins = np.linspace(x.min(), x.max(), n + 1)
    return group_means(cols, np.clip(np.digitize(x, bins) - 1, 0, n - 1))


def centred_mean(v: np.ndarray, window: int) -> np.ndarray:
    """The centred moving mean over ``window`` values (fewer at the ends; NaN skipped), as pandas'
    ``rolling(window, min_periods=1, center=True).mean()`` computes it to the last bit: a running
    Kahan sum (values added and removed with their own compensations), a window of one repeated
    value is that value, and a mean of a sign the window's values lack is 0."""
    v = np.asarray(v, dtype=float).tolist()
    n = len(v)
    ahead = (window - 1) // 2  # pandas' centred window: ``ahead`` values after i, the rest before
    end = [min(i + 1 + ahead, n) for i in range(n)]
    start = [max(i + 1 + ahead - window, 0) for i in range(n)]
    out = []
    total = comp_add = comp_rem = 0.0
    nobs = neg = same = 0
    prev = math.nan

    def add(x: float) -> None:
        nonlocal total, comp_add, nobs, neg, same, prev
        if x == x:
            nobs += 1
            y = x - comp_add
            t = total + y
            comp_add = t - total - y
            total = t
            neg += math.copysign(1.0, x) < 0
            same = same + 1 if x == prev else 1
            prev = x

    for i in range(n):
        if i == 0 or start[i] >= end[i - 1]:
            total = comp_add = comp_rem = 0.0
            nobs = neg = same = 0
            prev = v[start[i]] if start[i] < n else math.nan
            for j in range(start[i], end[i]):
                add(v[j])
        else:
            for j in range(start[i - 1], start[i]):
                x = v[j]
                if x == x:
                    nobs -= 1
                    y = -x - comp_rem
                    t = total + y
                    comp_rem = t - total - y
                    total = t
                    neg -= math.copysign(1.0, x) < 0
            for j in range(end[i - 1], end[i]):
                add(v[j])
        mean = math.nan
        if nobs > 0:
            mean = total / nobs
            if same >= nobs:
                mean = prev
            elif (neg == 0 and mean < 0) or (neg == nobs and mean > 0):
                mean = 0.0
        out.append(mean)
    return np.array(out, dtype=float)


def melt(cols: Columns, x: str, var: str, value: str, names: dict[str, str], label: str | None = None) -> Rows:
    """``pd.DataFrame(cols).melt(id_vars=[x], value_vars=list(names), var_name=var, value_name=value)``
    as records (the value columns one after another, their numbers promoted together), each
    column's name under ``var`` given as ``names[column]``, or, with ``label``, kept and its
    ``names`` entry added as ``label``."""
    if not names:
        return []
    n = len(cols[x])
    xs = np.asarray(cols[x]).tolist() * len(names)
    values = np.concatenate([np.asarray(cols[k]) for k in names]).tolist()
    keys = [k for k in names for _ in range(n)]
    if label is None:
        return [{x: a, var: names[k], value: v} for a, k, v in zip(xs, keys, values)]
    return [{x: a, var: k, value: v, label: names[k]} for a, k, v in zip(xs, keys, values)]


__all__ = ["Columns", "Rows", "centred_mean", "columns_rows", "downsample", "finite", "frame_rows", "group_means", "melt"]
