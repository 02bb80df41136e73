"""Self-contained HTML reports: a scenario's capacity plan, and a comparison of models' KV traffic.

Two pages, each one file that opens with no network:

* :func:`write_report` -- a scenario's inputs, the recommended PrfaaS-PD plan and its binding
  constraint, the baselines, Lambda_max against the threshold and the P:D split (the paper's
  Figure 5), TTFT distributions, egress and queue time series (when the simulator is available),
  cost, the formulas and every assumption;
* :func:`write_compare` -- KV bytes per token and fixed state per model, ``S_kv(l)`` and
  ``Phi_kv(l)`` over 1K-1M tokens, and the inter-DC link a prefill cluster needs.

Charts are altair (Vega-Lite) specs rendered in the browser by vega-embed as SVG. The
Vega/Vega-Lite/vega-embed JavaScript comes from ``vl_convert.javascript_bundle()`` (no network; the
bundle is cached on disk, see :func:`vega_bundle`) and is inlined once per page, after the text, so
a page with many charts carries one copy. A Content-Security-Policy meta tag forbids every network
fetch, so a page that tried to load anything would fail loudly in the browser. Pages are written
atomically (temporary file in the same folder, then ``os.replace``): a failure never leaves a
partial file. ``png_dir`` writes each chart as PNG (2x scale) and SVG for slides, via vl_convert.

Every table cell carries its exact value in ``data-value`` (``<table data-table=NAME>``, rows
``data-row``, cells ``data-col``), so tests and scripts can read the numbers back; the page
declares its number of charts in ``<body data-chart-count>`` and marks ``data-charts-rendered``
once vega-embed has drawn them.

Units: rates in requests/s, lengths in tokens (K = 1024), times in seconds, link rates in Gbps
(1e9 bit/s), cache sizes in MiB (2^20 B), money in US dollars.
"""

from __future__ import annotations

import html
import json
import math
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd

from ._data import atomic_write, check_output_path
from .errors import PlanError

__all__ = [
    "DEFAULT_COMPARE_MODELS", "Report", "build_compare", "build_report", "export_figures",
    "vega_bundle", "write_compare", "write_report",
]

DEFAULT_COMPARE_MODELS: tuple[str, ...] = (
    "minimax-m2.5", "qwen3-235b-a22b", "qwen3.5-397b-a17b", "mimo-v2-flash", "ring-2.5-1t", "kimi-linear-1t",
)
"""The paper's models: dense-attention MiniMax-M2.5 and Qwen3-235B beside the hybrids."""

FLAGSHIP_PAIR = ("mimo-v2-flash", "minimax-m2.5")
"""(hybrid, dense) pair the comparison page leads with when both are on it."""

STANDARD_LINES_GBPS = (10.0, 100.0, 400.0)

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

CSS = """
:root{--fg:#1d2330;--muted:#5b6578;--line:#e3e7ee;--accent:#1f6fb2;--panel:#f6f8fb}
*{box-sizing:border-box}
body{margin:0;font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;color:var(--fg);background:#fff}
header,main,footer{max-width:1240px;margin:0 auto;padding:0 28px}
header{padding-top:22px}
h1{font-size:23px;line-height:1.25;margin:0 0 4px}
h2{font-size:19px;margin:26px 0 6px}
h3{font-size:15px;margin:16px 0 4px}
p{margin:6px 0 10px;max-width:980px}
a{color:var(--accent)}
.sub{color:var(--muted);font-size:13.5px;margin:0}
.lead{font-size:15.5px;margin:12px 0 4px}
nav.toc{font-size:13px;margin:10px 0 0;color:var(--muted)}
nav.toc a{margin-right:12px;text-decoration:none}
section{border-top:1px solid var(--line);margin-top:22px}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(180px,1fr));gap:10px;margin:14px 0 6px}
.card{background:var(--panel);border:1px solid var(--line);border-radius:8px;padding:10px 14px}
.card .k{font-size:11.5px;text-transform:uppercase;letter-spacing:.04em;color:var(--muted)}
.card .v{font-size:22px;font-weight:650;line-height:1.3}
.card .n{font-size:12.5px;color:var(--muted)}
.figs{display:grid;grid-template-columns:repeat(auto-fit,minmax(570px,1fr));gap:14px 26px;margin:10px 0}
figure{margin:0;min-width:0}
figcaption{font-size:12.5px;color:var(--muted);margin-top:2px;max-width:640px}
.chart{min-height:140px;overflow-x:auto}
.cols{display:flex;flex-wrap:wrap;gap:10px 40px;align-items:flex-start}
.col{min-width:0}
.tablewrap{overflow-x:auto;margin:6px 0 12px}
table{border-collapse:collapse;font-size:13px;font-variant-numeric:tabular-nums}
caption{text-align:left;font-size:12.5px;color:var(--muted);padding:2px 0 4px;caption-side:top}
th,td{padding:4px 10px;border-bottom:1px solid var(--line);text-align:right;white-space:nowrap;vertical-align:top}
th{font-weight:600;background:var(--panel);vertical-align:bottom}
th .u{display:block;font-weight:400;color:var(--muted);font-size:11.5px}
td.t,th.t{text-align:left;white-space:normal;max-width:520px}
tr.hl td{background:#eef5fc;font-weight:600}
details{margin:4px 0 10px}
details>summary{cursor:pointer;color:var(--accent);font-size:13px}
pre{background:var(--panel);border:1px solid var(--line);padding:8px 12px;border-radius:6px;overflow-x:auto;font-size:12.5px;line-height:1.35}
code{font-size:12.5px}
ul{margin:4px 0 10px;padding-left:22px;max-width:1000px}
li{margin:2px 0}
.note{background:#fff8e6;border:1px solid #f0dca8;padding:8px 12px;border-radius:6px;max-width:980px}
.tag{display:inline-block;font-size:11px;padding:0 6px;border-radius:4px;margin-right:4px}
.tag.m{background:#e3f2e7;color:#22633a}.tag.d{background:#e8eefa;color:#2b4c8c}
#report-errors{color:#a32020;background:#fdeeee;border:1px solid #f2c4c4;padding:8px 12px;border-radius:6px;white-space:pre-wrap}
footer{color:var(--muted);font-size:12px;padding-top:18px;padding-bottom:28px}
@media print{.chart{break-inside:avoid}}
"""

CSP = ("default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; "
       "img-src data: blob:; font-src data:")

RUNNER_JS = """
(function(){
  var errors = [];
  function fail(msg){
    errors.push(String(msg));
    var el = document.getElementById('report-errors');
    if (el) { el.hidden = false; el.textContent = 'Chart errors:\\n' + errors.join('\\n'); }
    document.body.setAttribute('data-chart-errors', String(errors.length));
  }
  window.__reportFail = fail;
  window.addEventListener('error', function(e){ fail(e.message || e); });
  window.addEventListener('unhandledrejection', function(e){ fail(e.reason); });
})();
"""

EMBED_JS = """
(function(){
  var fail = window.__reportFail;
  if (typeof vegaEmbed !== 'function') { fail('vega-embed did not load'); return; }
  var specs = JSON.parse(document.getElementById('report-specs').textContent);
  var els = Array.prototype.slice.call(document.querySelectorAll('[data-chart]'));
  var done = 0;
  Promise.all(els.map(function(el){
    var spec = specs[el.getAttribute('data-chart')];
    if (!spec) { fail('no spec for chart ' + el.getAttribute('data-chart')); return null; }
    return vegaEmbed(el, spec, {renderer: 'svg', actions: false}).then(function(){
      done += 1; el.setAttribute('data-rendered', 'true');
    }).catch(function(err){
      el.textContent = 'This chart failed to render: ' + err;
      fail(el.getAttribute('data-chart') + ': ' + err);
    });
  })).then(function(){ document.body.setAttribute('data-charts-rendered', String(done)); });
})();
"""


# ----------------------------------------------------------------------------- page model
@dataclass
class Col:
    """A table column: DataFrame key, header label, unit line, and a formatter."""

    key: str
    label: str
    unit: str = ""
    fmt: str | Callable[[Any], str] = "num"
    text: bool = False  # left-aligned, wrapping
    display: str | None = None  # show this column's text instead of formatting ``key``


@dataclass
class Table:
    """A table of numbers; ``df`` holds the exact values (what ``data-value`` carries)."""

    name: str
    df: pd.DataFrame
    cols: list[Col]
    row_key: str | None = None
    caption: str = ""
    highlight: str | None = None

    def value(self, row: str, col: str):
        """The exact value in row ``row`` (by ``row_key``) and column ``col``."""
        sel = self.df[self.df[self.row_key].astype(str) == str(row)]
        return sel[col].iloc[0]


@dataclass
class Figure:
    """One chart: an altair chart, a caption, and the numbers behind it (shown collapsed)."""

    name: str
    chart: Any
    caption: str = ""
    data: Table | None = None

    def spec(self) -> dict:
        spec = self.chart.to_dict()
        spec["config"] = {**CHART_CONFIG, **spec.get("config", {})}
        return spec


@dataclass
class Columns:
    """Blocks laid out side by side (wrapping on narrow screens)."""

    blocks: list


def _walk(blocks):
    for b in blocks:
        if isinstance(b, Columns):
            yield from _walk(b.blocks)
        else:
            yield b


@dataclass
class Section:
    id: str
    title: str
    blocks: list = field(default_factory=list)  # str (HTML), Figure, Table


@dataclass
class Report:
    """A page: header (title, cards, lead), sections of HTML, figures and tables.

    ``result`` is the :class:`~prfaas_plan.planner.PlanResult` behind a plan report (None for a
    comparison); ``data`` holds the frames behind a comparison.
    """

    kind: str
    title: str
    subtitle: str
    cards: list[tuple[str, str, str]]
    lead: str
    sections: list[Section]
    result: Any = None
    data: dict = field(default_factory=dict)

    @property
    def figures(self) -> list[Figure]:
        return [b for s in self.sections for b in _walk(s.blocks) if isinstance(b, Figure)]

    @property
    def tables(self) -> dict[str, Table]:
        out = {}
        for s in self.sections:
            for b in _walk(s.blocks):
                if isinstance(b, Table):
                    out[b.name] = b
                elif isinstance(b, Figure) and b.data is not None:
                    out[b.data.name] = b.data
        return out

    def specs(self) -> dict[str, dict]:
        specs = {f.name: f.spec() for f in self.figures}
        if len(specs) != len(self.figures):
            raise PlanError("report: two charts share a name")  # pragma: no cover - a bug, not input
        return specs

    def to_html(self, bundle: str | None = None, specs: dict | None = None) -> str:
        """The whole page as one string (JavaScript inlined once)."""
        return _page_html(self, vega_bundle() if bundle is None else bundle, self.specs() if specs is None else specs)


# ----------------------------------------------------------------------------- formatting
def _num(v: float) -> str:
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    if a >= 0.01:
        return f"{v:.3f}"
    return f"{v:.3g}"


def _fmt(v, how) -> str:
    if v is None or (isinstance(v, (float, np.floating)) and math.isnan(v)):
        return "–"
    if isinstance(v, (float, np.floating)) and math.isinf(v):
        return "∞" if v > 0 else "−∞"
    if callable(how):
        return how(v)
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if how == "text" or isinstance(v, str):
        return str(v)
    v = float(v)
    if how == "int":
        return f"{round(v):,}"
    if how == "pct":
        return f"{100 * v:.1f}%"
    if how == "ratio":
        return f"{v:.2f}×"
    if how == "usd":
        return f"${v:,.2f}"
    if how == "usd3":
        return f"${v:,.3f}"
    if how == "tokens":
        return _tokens(v)
    if how.startswith("{"):
        return how.format(v)
    return _num(v)


def _tokens(v: float) -> str:
    """27937 -> '27,937 (27.3K)'; whole K -> '32K'."""
    v = float(v)
    if v >= 1024 and abs(v / 1024 - round(v / 1024)) < 1e-9:
        k = round(v / 1024)
        return f"{k // 1024}M" if k >= 1024 and k % 1024 == 0 else f"{k}K"
    if v >= 1024:
        return f"{v:,.0f} ({v / 1024:.1f}K)"
    return f"{v:,.0f}"


def _raw(v) -> str:
    """The exact value for ``data-value``: repr of floats (round-trips), str otherwise."""
    if v is None:
        return ""
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    return str(v)


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _table_html(t: Table) -> str:
    head = "".join(
        f'<th class="{"t" if c.text else ""}" data-col="{_e(c.key)}">{_e(c.label)}'
        + (f'<span class="u">{_e(c.unit)}</span>' if c.unit else "") + "</th>" for c in t.cols)
    rows = []
    for rec in t.df.to_dict("records"):
        key = _raw(rec[t.row_key]) if t.row_key else ""
        cls = ' class="hl"' if t.highlight is not None and key == t.highlight else ""
        attr = f' data-row="{_e(key)}"' if t.row_key else ""
        cells = "".join(
            f'<td{" class=t" if c.text else ""} data-col="{_e(c.key)}" data-value="{_e(_raw(rec.get(c.key)))}">'
            f"{_e(rec[c.display] if c.display else _fmt(rec.get(c.key), c.fmt))}</td>" for c in t.cols)
        rows.append(f"<tr{attr}{cls}>{cells}</tr>")
    cap = f"<caption>{_e(t.caption)}</caption>" if t.caption else ""
    return (f'<div class="tablewrap"><table data-table="{_e(t.name)}">{cap}<thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')


def _figure_html(f: Figure) -> str:
    title = _chart_title(f.chart)
    data = ""
    if f.data is not None:
        data = f"<details><summary>Numbers behind this chart</summary>{_table_html(f.data)}</details>"
    cap = f"<figcaption>{f.caption}</figcaption>" if f.caption else ""
    return (f'<figure><div class="chart" data-chart="{_e(f.name)}" role="img" aria-label="{_e(title)}"></div>'
            f"{cap}{data}</figure>")


def _chart_title(chart) -> str:
    t = getattr(chart, "title", None)
    if isinstance(t, str):
        return t
    text = getattr(t, "text", None)
    return text if isinstance(text, str) else ""


def _script_json(obj) -> str:
    """JSON safe inside <script>: no NaN/Infinity, and no '<' that could close the element."""
    return json.dumps(obj, allow_nan=False, separators=(",", ":")).replace("<", "\\u003c")


def _page_html(r: Report, bundle: str, specs: dict) -> str:
    from . import __version__

    parts = []
    for s in r.sections:
        chunk, figs = [], []
        for b in list(s.blocks) + [None]:
            if isinstance(b, Figure):
                figs.append(_figure_html(b))
                continue
            if figs:
                chunk.append(f'<div class="figs">{"".join(figs)}</div>')
                figs = []
            if isinstance(b, Table):
                chunk.append(_table_html(b))
            elif isinstance(b, Columns):
                chunk.append('<div class="cols">' + "".join(
                    f'<div class="col">{_figure_html(x) if isinstance(x, Figure) else _table_html(x) if isinstance(x, Table) else x}</div>'
                    for x in b.blocks) + "</div>")
            elif isinstance(b, str):
                chunk.append(b)
        parts.append(f'<section id="{_e(s.id)}"><h2>{_e(s.title)}</h2>{"".join(chunk)}</section>')
    toc = "".join(f'<a href="#{_e(s.id)}">{_e(s.title)}</a>' for s in r.sections)
    cards = "".join(f'<div class="card"><div class="k">{_e(k)}</div><div class="v">{_e(v)}</div>'
                    f'<div class="n">{_e(n)}</div></div>' for k, v, n in r.cards)
    safe_bundle = bundle.replace("</script", "<\\/script")
    n = len(r.figures)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="generator" content="prfaas-plan {__version__}">
<title>{_e(r.title)}</title>
<style>{CSS}</style>
</head>
<body data-report="{_e(r.kind)}" data-chart-count="{n}">
<header>
<h1>{_e(r.title)}</h1>
<p class="sub">{r.subtitle}</p>
<div class="cards">{cards}</div>
<p class="lead">{r.lead}</p>
<nav class="toc">{toc}</nav>
<pre id="report-errors" hidden></pre>
</header>
<main>
{"".join(parts)}
</main>
<footer>Generated by prfaas-plan {__version__}. Charts: Vega-Lite via
vega-embed, inlined (no network). Every table cell carries its exact value in a <code>data-value</code> attribute.</footer>
<script>{RUNNER_JS}</script>
<script id="report-specs" type="application/json">{_script_json(specs)}</script>
<script>{safe_bundle}</script>
<script>{EMBED_JS}</script>
</body></html>
"""


# ----------------------------------------------------------------------------- JavaScript bundle
def _vl_version() -> str | None:
    """The Vega-Lite version (major.minor) altair writes, when vl_convert has it."""
    import altair as alt
    import vl_convert as vlc

    want = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    return want if want in vlc.get_vegalite_versions() else None


def _cache_dir() -> Path:
    base = os.environ.get("PRFAAS_PLAN_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "prfaas-plan")
    return Path(base)


@lru_cache(maxsize=1)
def vega_bundle() -> str:
    """The Vega, Vega-Lite and vega-embed JavaScript as one string, with no external references
    (``vl_convert.javascript_bundle``, which defines ``window.vegaEmbed``). Building it takes a few
    seconds, so it is cached in ``$PRFAAS_PLAN_CACHE_DIR`` (default ``~/.cache/prfaas-plan``) under
    a name that includes the vl-convert and Vega-Lite versions; an unwritable cache is skipped."""
    from importlib.metadata import version

    import vl_convert as vlc

    vl = _vl_version()
    path = _cache_dir() / f"vega-bundle-vlconvert{version('vl-convert-python')}-vl{vl or 'latest'}.js"
    try:
        text = path.read_text(encoding="utf-8")
        if "window.vegaEmbed" in text:
            return text
    except OSError:
        pass
    text = vlc.javascript_bundle(vl_version=vl) if vl else vlc.javascript_bundle()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, text.encode("utf-8"))
    except (OSError, PlanError):
        pass
    return text


# ----------------------------------------------------------------------------- files
def _check_png_dir(png_dir) -> Path | None:
    if png_dir is None:
        return None
    d = Path(png_dir)
    if d.exists() and not d.is_dir():
        raise PlanError(f"--png: {d} exists and is not a folder")
    if not d.exists():
        parent = d.parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            raise PlanError(f"--png: cannot create folder {d} (parent {parent} is not writable)")
    elif not os.access(d, os.W_OK | os.X_OK):
        raise PlanError(f"--png: cannot write to folder {d} (permission denied)")
    return d


def _render_images(report: Report, specs: dict) -> dict[str, bytes]:
    """PNG (2x) and SVG of every chart, rendered by vl_convert, keyed by file name."""
    import vl_convert as vlc

    vl = _vl_version()
    kw = {"vl_version": vl} if vl else {}
    out = {}
    for name, spec in specs.items():
        out[f"{name}.png"] = vlc.vegalite_to_png(spec, scale=2, **kw)
        out[f"{name}.svg"] = vlc.vegalite_to_svg(spec, **kw).encode("utf-8")
    return out


def export_figures(report: Report, png_dir) -> list[Path]:
    """Write each chart of ``report`` as ``NAME.png`` (2x scale) and ``NAME.svg`` into ``png_dir``."""
    d = _check_png_dir(png_dir)
    images = _render_images(report, report.specs())
    return _write_images(d, images)


def _write_images(d: Path, images: dict[str, bytes]) -> list[Path]:
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PlanError(f"--png: cannot create folder {d} ({exc.strerror or exc})") from None
    paths = []
    for name, data in images.items():
        atomic_write(d / name, data)
        paths.append(d / name)
    return paths


def _write(report: Report, path: Path, png_dir: Path | None) -> Path:
    specs = report.specs()
    page = report.to_html(specs=specs).encode("utf-8")
    if png_dir is not None:  # images first: if their folder fails, no page is left behind either
        _write_images(png_dir, _render_images(report, specs))
    atomic_write(path, page)
    return path


# ----------------------------------------------------------------------------- chart helpers
def _alt():
    import altair as alt

    return alt


def _finite(df: pd.DataFrame) -> pd.DataFrame:
    """Replace +-inf by NaN (Vega-Lite data must be finite or null)."""
    return df.replace([np.inf, -np.inf], np.nan)


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


def _token_ticks(lo: float, hi: float) -> list[int]:
    return [2 ** k for k in range(0, 24) if lo <= 2 ** k <= hi]


# ----------------------------------------------------------------------------- the plan report
def build_report(sc, mode: str = "exact", result=None, simulate: bool | None = None,
                 sim_duration_s: float = 600.0, seed: int = 0, load: float | None = None) -> Report:
    """Compute everything the plan report shows (see the module docstring) and lay it out.

    sc: a :class:`~prfaas_plan.scenario.Scenario`; mode: ``exact`` or ``paper``; result: a
    precomputed :class:`~prfaas_plan.planner.PlanResult` (else :func:`~prfaas_plan.planner.plan`);
    simulate: run the simulator for time series and a simulated TTFT CDF (None = yes);
    sim_duration_s / seed: the simulation's length and seed; load: fraction of Lambda_max for TTFT.
    """
    from .planner import plan as run_plan

    if mode not in ("exact", "paper"):
        raise PlanError(f"--mode: {mode!r} is not a planner mode; use exact or paper")
    from .simulate import simulate as run_simulation

    res = result if result is not None else run_plan(sc, mode=mode, load=load)
    sim, sim_note = None, ""
    if simulate is None or simulate:
        try:
            sim = run_simulation(sc, res, load=sc.spec.load if load is None else load, duration_s=sim_duration_s,
                                 seed=seed)
        except PlanError as exc:
            sim_note = f"The simulation could not run: {exc}"
        except Exception as exc:  # noqa: BLE001 - a simulator bug must not cost the user the whole report
            sim_note = f"The simulation failed ({type(exc).__name__}: {exc})"
        if sim is not None and not (hasattr(sim, "requests") and hasattr(sim, "timeseries")):
            sim, sim_note = None, "The simulator returned no requests/timeseries frames"
    else:
        sim_note = "Simulation was turned off for this report"
    return _plan_page(sc, res, sim, sim_note, sim_duration_s, seed)


def write_report(sc, path, mode: str = "exact", png_dir=None, result=None, simulate: bool | None = None,
                 sim_duration_s: float = 600.0, seed: int = 0, load: float | None = None) -> Path:
    """Write the plan report of scenario ``sc`` (a Scenario, built-in id or YAML path) to ``path``
    (one self-contained HTML file, written atomically); with ``png_dir``, also every chart as PNG
    and SVG. Returns the path. Bad input raises :class:`PlanError` and leaves no file."""
    path = check_output_path(path)
    png = _check_png_dir(png_dir)
    if not hasattr(sc, "spec"):
        from .scenario import load_scenario

        sc = load_scenario(sc)
    report = build_report(sc, mode=mode, result=result, simulate=simulate, sim_duration_s=sim_duration_s,
                          seed=seed, load=load)
    return _write(report, path, png)


def _short_name(m) -> str:
    """A model's display name without a parenthesised remark ('Kimi-Linear-1T (PrfaaS ...)' -> 'Kimi-Linear-1T')."""
    return m.name.split(" (")[0].strip() or m.id


def _gpu_ratio(a: int, b: int) -> str:
    if a == 0:
        return f"0 : {b}"
    if b == 0:
        return f"{a} : 0"
    g = math.gcd(a, b)
    return f"{a // g} : {b // g}"


def _plan_page(sc, res, sim, sim_note: str, sim_duration_s: float, seed: int) -> Report:
    from .units import GBPS_BITS_PER_S

    alt = _alt()
    inp, best, b = res.inputs, res.plan, res.buckets
    spec = sc.spec
    gpu_r, gpu_l = sc.prfaas_instance.gpu, sc.local_instance.gpu
    q = spec.slo.ttft_quantile
    qn = f"P{round(q * 100)}"
    frame = res.to_frame()
    frame["label"] = [PLAN_LABELS.get(n, n) for n in frame["plan"]]
    frame["gpus_remote"] = [res.plans[n].gpus["prfaas"] for n in frame["plan"]]
    frame["gpus_local"] = [res.plans[n].gpus["pd_p"] + res.plans[n].gpus["pd_d"] for n in frame["plan"]]
    gains = {n: res.ratio(n) for n in res.baselines if res.baselines[n].lambda_max_rps > 0}
    ttft_col = f"p{round(q * 100)}_ttft_s_common_rate"
    common_rate = float(res.ttft.loc[res.ttft.basis == "common rate", "rate_rps"].iloc[0])
    link_rps = (best.lambda_max_rps * inp.link_bits_per_s / (best.egress_gbps * GBPS_BITS_PER_S)
                if best.egress_gbps > 0 else math.inf)
    r_gpus, l_gpus = best.gpus["prfaas"], best.gpus["pd_p"] + best.gpus["pd_d"]
    tokens_per_req = best.mean_input_tokens + best.output_tokens
    t_best = best.threshold_tokens

    # ---- header
    title = f"PrfaaS capacity plan: {spec.name}"
    subtitle = (f"Scenario <code>{_e(spec.id)}</code> · planner mode <b>{_e(res.mode)}</b> · model "
                f"{_e(sc.model.name)} · PrfaaS pool {spec.prfaas.gpus}×{_e(gpu_r.id.upper())}, local pool "
                f"{spec.local.gpus}×{_e(gpu_l.id.upper())}, link {spec.link.gbps:g} Gbps · workload "
                + (f"trace {_e(Path(spec.workload.trace).name)}" if spec.workload.kind == "trace"
                   else "truncated log-normal lengths"))
    gain_txt = ", ".join(f"{g - 1:+.0%} vs {PLAN_LABELS.get(n, n)}" for n, g in gains.items())
    t_txt = _tokens(t_best) if t_best is not None else "none (nothing offloaded)"
    ttft_best = float(frame.loc[frame.plan == best.name, ttft_col].iloc[0])
    cards = [
        ("Throughput Λmax", f"{best.lambda_max_rps:.2f} req/s", gain_txt or "no baseline"),
        ("Threshold t", f"{t_best / 1024:.1f}K" if t_best else "none",
         (f"{t_best:,.0f} tokens; " if t_best else "") + f"{best.offload_fraction:.1%} of requests prefilled remotely"),
        ("Instances", f"{best.instances['prfaas']} + {best.instances['pd_p']} + {best.instances['pd_d']}",
         f"PrfaaS + PD-P + PD-D · {gpu_r.id.upper()}:{gpu_l.id.upper()} GPUs = {_gpu_ratio(r_gpus, l_gpus)}"),
        ("Inter-DC egress", f"{best.egress_gbps:.1f} Gbps", f"{best.link_utilisation:.0%} of the {spec.link.gbps:g} Gbps link"),
        ("Cost per M tokens", f"${best.usd_per_million_tokens:.3f}", f"input + output; ${best.cost_usd_per_hour:,.2f} per hour"),
        (f"{qn} TTFT", f"{ttft_best:.2f} s", f"at {common_rate:.2f} req/s, a rate every plan serves"),
    ]
    lead = (f"<b>Binding constraint: {_e(best.binding)}.</b> Requests whose uncached prompt exceeds "
            f"t = {_e(t_txt)} tokens are prefilled on the PrfaaS cluster and their KV cache shipped over the "
            f"link; the rest are prefilled locally. PrfaaS-PD serves {best.lambda_max_rps:.2f} requests/s "
            f"({best.lambda_max_rps * tokens_per_req:,.0f} tokens/s in + out)"
            + (f", {_e(gain_txt)}" if gain_txt else "") + ".")

    sections = []

    # ---- recommended plan
    kv = [
        ("threshold_tokens", "Threshold t (uncached prompt length)", t_best if t_best is not None else float("nan"), "tokens", "tokens"),
        ("offload_fraction", "Requests prefilled on PrfaaS (p)", best.offload_fraction, "", "pct"),
        ("n_prfaas", "PrfaaS instances", best.instances["prfaas"], f"of {spec.prfaas.gpus_per_instance}×{gpu_r.id.upper()}", "int"),
        ("n_pd_p", "Local prefill instances (PD-P)", best.instances["pd_p"], f"of {spec.local.gpus_per_instance}×{gpu_l.id.upper()}", "int"),
        ("n_pd_d", "Local decode instances (PD-D)", best.instances["pd_d"], f"of {spec.local.gpus_per_instance}×{gpu_l.id.upper()}", "int"),
        ("gpus_remote", f"{gpu_r.id.upper()} GPUs (PrfaaS)", r_gpus, "GPUs", "int"),
        ("gpus_local", f"{gpu_l.id.upper()} GPUs (PD-P + PD-D)", l_gpus, "GPUs", "int"),
        ("gpu_ratio", f"{gpu_r.id.upper()} : {gpu_l.id.upper()} GPU ratio", _gpu_ratio(r_gpus, l_gpus), "", "text"),
        ("lambda_max_rps", "Throughput Λmax", best.lambda_max_rps, "requests/s", "num"),
        ("tokens_per_s", "Token throughput (input + output)", best.lambda_max_rps * tokens_per_req, "tokens/s", "int"),
        ("egress_gbps", "Mean inter-DC egress at Λmax", best.egress_gbps, "Gbps", "num"),
        ("link_utilisation", "Link utilisation (of nominal)", best.link_utilisation, "", "pct"),
        ("binding", "Binding constraint", best.binding, "", "text"),
        ("cost_usd_per_hour", "Cost", best.cost_usd_per_hour, "$/hour", "usd"),
        ("usd_per_million_tokens", "Cost per million tokens", best.usd_per_million_tokens, "$/M tokens", "usd3"),
        ("is_threshold", "Optimal routing is a threshold", best.is_threshold, "", "text"),
    ]
    plan_df = pd.DataFrame([{"key": k, "quantity": lab, "value": v, "unit": u, "value_text": _fmt(v, f)}
                            for k, lab, v, u, f in kv])
    plan_tbl = Table("plan", plan_df, [Col("quantity", "Quantity", text=True), Col("value", "Value", display="value_text"),
                                       Col("unit", "Unit", text=True)], row_key="key",
                     caption=f"The recommended plan ({res.mode} mode)")

    stage_names = {"prfaas": "PrfaaS prefill (Eq. 3 compute, ÷ p)", "pd_p": "Local prefill PD-P (Eq. 4, ÷ (1 − p))",
                   "pd_d": "Decode PD-D (Eq. 5)", "link": "Inter-DC link (Eq. 3 bandwidth, ÷ p)"}
    stage_rows = []
    for key in ("prfaas", "pd_p", "pd_d", "link"):
        rate = link_rps if key == "link" else best.stage_rps[key]
        stage_rows.append({"stage": key, "name": stage_names[key], "rate_rps": rate,
                           "utilisation": best.lambda_max_rps / rate if rate and math.isfinite(rate) else 0.0,
                           "instances": best.instances.get(key, np.nan) if key != "link" else np.nan})
    stage_tbl = Table("stages", pd.DataFrame(stage_rows),
                      [Col("name", "Stage", text=True), Col("rate_rps", "Rate it alone sustains", "requests/s"),
                       Col("utilisation", "Busy at Λmax", fmt="pct"), Col("instances", "Instances", fmt="int")],
                      row_key="stage", caption="Each stage's capacity; the smallest one is Λmax (Eq. 6)")
    binding_key = min(stage_rows, key=lambda r: r["rate_rps"])["stage"]
    stage_tbl.highlight = binding_key
    # ---- baselines
    names = list(frame["plan"])
    bar_df = frame[["plan", "label", "lambda_max_rps", "throughput_vs_this"]].copy()
    bar_df["text"] = [f"{v:.2f} req/s" + ("" if n == best.name else f"  (PrfaaS-PD: {g:.2f}×)")
                      for n, v, g in zip(bar_df.plan, bar_df.lambda_max_rps, bar_df.throughput_vs_this)]
    base = alt.Chart(_finite(bar_df)).encode(
        y=alt.Y("label:N", sort=[PLAN_LABELS.get(n, n) for n in names], title=None),
        x=alt.X("lambda_max_rps:Q", title="maximum throughput Λmax (requests/s)", scale=alt.Scale(nice=True)))
    bars = base.mark_bar(height=26).encode(color=alt.Color("label:N", scale=_plan_scale(names), legend=None))
    labels = base.mark_text(align="left", dx=4, fontSize=11.5, color="#1d2330").encode(text="text:N")
    xmax = float(bar_df.lambda_max_rps.max()) * 1.45
    bars_chart = alt.layer(bars, labels).encode(x=alt.X("lambda_max_rps:Q", scale=alt.Scale(domain=[0, xmax]),
                                                        title="maximum throughput Λmax (requests/s)")).properties(
        width=BAR_WIDTH, height=40 * len(names) + 20,
        title=alt.Title("Throughput: PrfaaS-PD vs the baselines", subtitle=f"{res.mode} mode, same scenario inputs"))
    base_cols = [
        Col("label", "Plan", text=True), Col("threshold_tokens", "t", "tokens", "tokens"),
        Col("n_prfaas", "PrfaaS", "instances", "int"), Col("n_pd_p", "PD-P", "instances", "int"),
        Col("n_pd_d", "PD-D", "instances", "int"), Col("lambda_max_rps", "Λmax", "requests/s"),
        Col("throughput_vs_this", "PrfaaS-PD ÷ this", "throughput ratio", "ratio"),
        Col("offload_fraction", "Offloaded", "share of requests", "pct"),
        Col("egress_gbps", "Egress", "Gbps"), Col("link_utilisation", "Link", "utilisation", "pct"),
        Col("binding", "Binding constraint", text=True), Col("usd_per_million_tokens", "Cost", "$/M tokens", "usd3"),
        Col(ttft_col, f"{qn} TTFT", f"s, at {common_rate:.2f} req/s"),
    ]
    if res.slo_rps:
        base_cols.append(Col("slo_rps", "TTFT-SLO rate", "requests/s"))
    sections.append(Section("plan", "Recommended plan", [
        f"<p>{_e(best.binding[0].upper() + best.binding[1:])} binds: it is the stage with the smallest "
        f"capacity below. The other stages have headroom at Λmax; adding capacity there does not raise "
        f"throughput. {'The optimal routing is a length threshold.' if best.is_threshold else 'The optimal routing is <b>not</b> a pure threshold (some lengths are split between paths).'}</p>",
        Columns([plan_tbl, Figure("throughput-vs-baselines", bars_chart,
                                  "Λmax of each plan; the ratio is PrfaaS-PD's throughput over the plan's.")]),
        stage_tbl]))

    base_tbl = Table("baselines", frame, base_cols, row_key="plan", highlight=best.name,
                     caption="One row per plan (planner.PlanResult.to_frame); t = 0 means every request is prefilled remotely")
    sections.append(Section("baselines", "PrfaaS-PD vs the baselines", [
        "<p>Homogeneous PD runs prefill and decode on the local GPU type only "
        f"({sc.baseline_instances * spec.local.gpus_per_instance}×{_e(gpu_l.id.upper())}); naive heterogeneous "
        "prefills every request on the PrfaaS pool and decodes on all local instances, with no threshold.</p>",
        base_tbl]))

    # ---- Figure 5: sweeps
    from .planner import sweep_np, sweep_threshold

    n_p_best = best.instances["pd_p"]
    t_ref = float(t_best) if t_best is not None and t_best > 0 else float(inp.lengths.quantile(0.5))
    sw_t = _finite(sweep_threshold(inp, n_p_best, points=120))
    sw_n = _finite(sweep_np(inp, t_ref))
    series = {"lambda_max_rps": "Λmax (Eq. 6)", "prfaas_rps": "PrfaaS: Θprfaas / p",
              "pd_p_rps": "PD-P: Θpdp / (1 − p)", "pd_d_rps": "PD-D: Θpdd"}
    s_colors = ["#1d2330", "#1f6fb2", "#e08a2c", "#3a9b5c"]
    lam_peak = float(np.nanmax(sw_t.lambda_max_rps)) if len(sw_t) else best.lambda_max_rps
    ymax = max(lam_peak, best.lambda_max_rps) * 2.2

    def sweep_chart(df, xcol, xenc, title, subtitle, rule_x, rule_label):
        long = df.melt(id_vars=[xcol], value_vars=list(series), var_name="key", value_name="rps")
        long["series"] = long["key"].map(series)
        long = long.dropna(subset=["rps"])
        lines = alt.Chart(long).mark_line(clip=True, interpolate="linear").encode(
            x=xenc, y=alt.Y("rps:Q", title="request rate (requests/s)", scale=alt.Scale(domain=[0, ymax])),
            color=alt.Color("series:N", title=None, scale=alt.Scale(domain=list(series.values()), range=s_colors)),
            strokeDash=alt.condition(alt.datum.key == "lambda_max_rps", alt.value([1, 0]), alt.value([5, 3])),
            size=alt.condition(alt.datum.key == "lambda_max_rps", alt.value(3.2), alt.value(1.8)))
        rule_df = pd.DataFrame({xcol: [rule_x], "label": [rule_label]})
        rule = alt.Chart(rule_df).mark_rule(color="#c8443c", strokeDash=[2, 2]).encode(x=alt.X(f"{xcol}:Q"))
        text = alt.Chart(rule_df).mark_text(align="left", dx=4, dy=-6, color="#c8443c", fontSize=11).encode(
            x=alt.X(f"{xcol}:Q"), y=alt.value(8), text="label:N")
        return alt.layer(lines, rule, text).properties(width=CHART_WIDTH, height=CHART_HEIGHT,
                                                       title=alt.Title(title, subtitle=subtitle))

    lo_t, hi_t = float(sw_t.threshold_tokens.min()), float(sw_t.threshold_tokens.max())
    ch_t = sweep_chart(
        sw_t, "threshold_tokens",
        alt.X("threshold_tokens:Q", scale=alt.Scale(type="log", domain=[lo_t, hi_t], nice=False),
              axis=_log_token_axis("threshold t (uncached prompt tokens, log scale)")),
        "Λmax against the threshold t", f"paper model (Eqs. 3-6), N_p = {n_p_best} PD-P of {inp.n_local} local instances",
        t_ref, f"t = {_tokens(t_ref)}")
    ch_n = sweep_chart(
        sw_n, "n_pd_p",
        alt.X("n_pd_p:Q", title="local prefill instances N_p (the rest decode)",
              scale=alt.Scale(domain=[0, max(inp.n_local - 1, 1)]), axis=alt.Axis(tickMinStep=1, format="d")),
        "Λmax against the P:D split", f"paper model (Eqs. 3-6), t = {_tokens(t_ref)} tokens", n_p_best,
        f"N_p = {n_p_best}")
    sw_t_tbl = Table("sweep-threshold", sw_t, [
        Col("threshold_tokens", "t", "tokens", "int"), Col("offload_fraction", "p", "", "pct"),
        Col("prfaas_rps", "PrfaaS", "requests/s"), Col("pd_p_rps", "PD-P", "requests/s"),
        Col("pd_d_rps", "PD-D", "requests/s"), Col("lambda_max_rps", "Λmax", "requests/s")])
    sw_n_tbl = Table("sweep-np", sw_n, [
        Col("n_pd_p", "N_p", "instances", "int"), Col("n_pd_d", "N_d", "instances", "int"),
        Col("prfaas_rps", "PrfaaS", "requests/s"), Col("pd_p_rps", "PD-P", "requests/s"),
        Col("pd_d_rps", "PD-D", "requests/s"), Col("lambda_max_rps", "Λmax", "requests/s")], row_key="n_pd_p")
    sections.append(Section("sweeps", "Λmax against t and the P:D split (the paper's Figure 5)", [
        "<p>Each curve is the request rate one stage could sustain on its own; Λmax is their minimum. "
        "The optimum sits where the two prefill stages cross (Eq. 7) and where prefill output meets decode "
        "capacity (Eq. 8). Curves above the plot are clipped.</p>",
        Figure("lambda-vs-threshold", ch_t, "Solid black: Λmax. Red: the plan's threshold.", sw_t_tbl),
        Figure("lambda-vs-pd-split", ch_n, "Solid black: Λmax. Red: the plan's P:D split.", sw_n_tbl)]))

    # ---- TTFT
    from .planner import ttft_at

    def cdf_frame(basis: str):
        rows = res.ttft[(res.ttft.path == "all") & (res.ttft.basis == basis)]
        hi = float(np.nanmax(np.where(np.isfinite(rows.p99_s), rows.p99_s, np.nan))) * 1.25 if len(rows) else 10.0
        if not math.isfinite(hi) or hi <= 0:
            hi = 10.0
        grid = np.linspace(0.0, hi, 241)
        frames = []
        for _, r in rows.iterrows():
            p = res.plans[r.plan]
            cdf = ttft_at(inp, p, b, float(r.rate_rps))["all"].cdf(grid)
            frames.append(pd.DataFrame({"ttft_s": grid, "cdf": cdf, "plan": r.plan,
                                        "label": PLAN_LABELS.get(r.plan, r.plan) + " (model)",
                                        "rate_rps": float(r.rate_rps)}))
        return pd.concat(frames, ignore_index=True), hi

    def cdf_chart(df, title, subtitle, extra=None):
        plans_here = list(dict.fromkeys(df.plan))
        dom = [PLAN_LABELS.get(n, n) + " (model)" for n in plans_here]
        rng = [PLAN_COLORS.get(n, "#5b6578") for n in plans_here]
        layers = []
        if extra is not None:
            dom.append(extra.label.iloc[0])
            rng.append("#c8443c")
        color = alt.Color("label:N", title=None, scale=alt.Scale(domain=dom, range=rng), legend=alt.Legend(columns=2))
        layers.append(alt.Chart(df).mark_line().encode(
            x=alt.X("ttft_s:Q", title="time to first token (s)"),
            y=alt.Y("cdf:Q", title="share of requests with TTFT ≤ x", axis=alt.Axis(format="%"),
                    scale=alt.Scale(domain=[0, 1])), color=color))
        if extra is not None:
            layers.append(alt.Chart(extra).mark_line(strokeDash=[5, 3], clip=True).encode(
                x="ttft_s:Q", y="cdf:Q", color=color))
        if spec.slo.ttft_s is not None:
            slo_df = pd.DataFrame({"x": [spec.slo.ttft_s], "label": [f"{qn} SLO {spec.slo.ttft_s:g} s"]})
            layers.append(alt.Chart(slo_df).mark_rule(color="#c8443c", strokeDash=[2, 2]).encode(x="x:Q"))
        q_df = pd.DataFrame({"y": [q], "label": [qn]})
        layers.append(alt.Chart(q_df).mark_rule(color="#9aa3b2", strokeDash=[2, 3]).encode(y="y:Q"))
        layers.append(alt.Chart(q_df).mark_text(align="right", dy=-6, color="#5b6578", fontSize=10.5).encode(
            y="y:Q", x=alt.value(CHART_WIDTH - 2), text="label:N"))
        return alt.layer(*layers).properties(width=CHART_WIDTH, height=CHART_HEIGHT,
                                             title=alt.Title(title, subtitle=subtitle))

    cdf_common, hi_common = cdf_frame("common rate")
    sim_cdf = None
    if sim is not None:
        tt = np.asarray(sim.requests["ttft_s"], dtype=float)
        tt = tt[np.isfinite(tt)]
        if tt.size:
            qs = np.linspace(0, 1, 201)
            sim_cdf = pd.DataFrame({"ttft_s": np.quantile(tt, qs), "cdf": qs,
                                    "label": f"PrfaaS-PD (simulated, {tt.size:,} requests)"})
    sim_load = spec.load
    cdf_own, _ = cdf_frame("own load")
    ch_c = cdf_chart(cdf_common, "TTFT distribution at a common rate",
                     f"{common_rate:.2f} req/s for every plan ({spec.load:.0%} of the smallest Λmax); M/G/c model", None)
    ch_o = cdf_chart(cdf_own, "TTFT distribution at each plan's own load",
                     f"each plan at {spec.load:.0%} of its own Λmax; M/G/c model"
                     + ("; dashed: simulation" if sim_cdf is not None else ""), sim_cdf)
    ttft_tbl = Table("ttft", res.ttft.assign(label=[PLAN_LABELS.get(n, n) for n in res.ttft.plan],
                                            key=[f"{p}|{bs}|{pa}" for p, bs, pa in zip(res.ttft.plan, res.ttft.basis, res.ttft.path)]),
                     [Col("label", "Plan", text=True), Col("basis", "Rate basis", text=True),
                      Col("path", "Path", text=True), Col("rate_rps", "Rate", "requests/s"),
                      Col("mean_s", "Mean", "s"), Col("p50_s", "P50", "s"), Col("p90_s", "P90", "s"),
                      Col("p99_s", "P99", "s")], row_key="key",
                     caption="TTFT percentiles from the queueing model (planner.PlanResult.ttft); path all = every request")
    ttft_blocks = [
        "<p>TTFT = wait for a prefill instance (M/G/c, Poisson arrivals) + prefill + the KV transfer that "
        "layer-wise pipelining does not hide + the first decode step. Paths: <i>prfaas</i> (long requests, "
        "remote prefill), <i>pd_p</i> (short requests, local prefill), <i>all</i> (the mixture).</p>",
        Figure("ttft-cdf-common-rate", ch_c, "Analytic CDFs (queueing.TTFTDist.cdf) over a grid of TTFT values.",
               Table("ttft-cdf-common-rate-data", cdf_common[cdf_common.index % 8 == 0].reset_index(drop=True),
                     [Col("label", "Plan", text=True), Col("ttft_s", "TTFT", "s"), Col("cdf", "P(TTFT ≤ x)", "", "pct")])),
        Figure("ttft-cdf-own-load", ch_o, "Each plan at the same fraction of its own capacity"
               + (" (dashed: the simulator's requests)." if sim_cdf is not None else "."),
               Table("ttft-cdf-own-load-data", cdf_own[cdf_own.index % 8 == 0].reset_index(drop=True),
                     [Col("label", "Plan", text=True), Col("ttft_s", "TTFT", "s"), Col("cdf", "P(TTFT ≤ x)", "", "pct")])),
        ttft_tbl,
    ]
    if sim is None:
        ttft_blocks.insert(1, f'<p class="note">{_e(sim_note)}; the TTFT curves are the queueing model only.</p>')
    sections.append(Section("ttft", "Time to first token", ttft_blocks))

    # ---- time series
    ts_blocks: list = []
    if sim is not None and getattr(sim, "timeseries", None) is not None and len(sim.timeseries):
        ts = _downsample(pd.DataFrame(sim.timeseries), "time_s", 1500)
        link_df = pd.DataFrame({"y": [spec.link.gbps, spec.link.gbps * spec.link.efficiency],
                                "label": [f"link {spec.link.gbps:g} Gbps", f"usable {spec.link.gbps * spec.link.efficiency:g} Gbps"]})
        dt = float(np.median(np.diff(ts.time_s))) if len(ts) > 1 else 1.0
        win = max(1, int(round(30.0 / dt))) if dt > 0 else 1
        eg_df = pd.DataFrame({"time_s": ts.time_s, "raw": ts.egress_gbps,
                              "mean": ts.egress_gbps.rolling(win, min_periods=1, center=True).mean()})
        eg_long = eg_df.melt(id_vars=["time_s"], var_name="key", value_name="gbps")
        eg_long["kind"] = eg_long["key"].map({"raw": f"per {dt:g} s", "mean": f"{win * dt:g} s moving mean"})
        plan_mean = best.egress_gbps * sim_load
        link_df = pd.concat([link_df, pd.DataFrame({"y": [plan_mean], "label": [f"planner mean {plan_mean:.1f} Gbps"]})],
                            ignore_index=True)
        eg = alt.layer(
            alt.Chart(eg_long).mark_line().encode(
                x=alt.X("time_s:Q", title="simulated time (s)"), y=alt.Y("gbps:Q", title="inter-DC egress (Gbps)"),
                color=alt.Color("kind:N", title=None, scale=alt.Scale(
                    domain=[f"per {dt:g} s", f"{win * dt:g} s moving mean"], range=["#a9c8e6", "#1f4f82"])),
                strokeWidth=alt.condition(alt.datum.key == "raw", alt.value(1.0), alt.value(2.4))),
            alt.Chart(link_df).mark_rule(color="#c8443c", strokeDash=[4, 3]).encode(y="y:Q"),
            alt.Chart(link_df).mark_text(align="right", dx=-4, dy=-5, color="#c8443c", fontSize=10.5).encode(
                y="y:Q", x=alt.value(CHART_WIDTH), text="label:N"),
        ).properties(width=CHART_WIDTH, height=CHART_HEIGHT, title=alt.Title(
            "Inter-DC egress over time", subtitle=f"simulation at {sim_load:.0%} of Λmax, seed {seed}"))
        qlong = ts.melt(id_vars=["time_s"], value_vars=[c for c in ("remote_queue", "local_queue") if c in ts],
                        var_name="queue", value_name="waiting")
        qlong["queue"] = qlong["queue"].map({"remote_queue": "PrfaaS prefill queue", "local_queue": "local prefill queue"})
        qc = alt.Chart(qlong).mark_line(strokeWidth=1.5).encode(
            x=alt.X("time_s:Q", title="simulated time (s)"), y=alt.Y("waiting:Q", title="requests waiting"),
            color=alt.Color("queue:N", title=None)).properties(
            width=CHART_WIDTH, height=CHART_HEIGHT, title=alt.Title("Prefill queues over time", subtitle="simulation"))
        ts_blocks += [Figure("egress-timeseries", eg, "Egress the simulated link carried."),
                      Figure("queue-timeseries", qc, "Requests waiting for a prefill instance.")]
    else:
        ts_blocks.append(
            f'<p class="note">{_e(sim_note)}, so no egress or queue time series are shown. The planner\'s '
            f"steady-state mean egress at Λmax is {best.egress_gbps:.2f} Gbps ({best.link_utilisation:.1%} of the "
            f"{spec.link.gbps:g} Gbps link); at {spec.load:.0%} load it is {best.egress_gbps * spec.load:.2f} Gbps.</p>")
    sections.append(Section("timeseries", "Egress and queues over time", ts_blocks))

    # ---- cost
    cost = frame[["plan", "label", "cost_usd_per_hour", "usd_per_million_tokens", "rps_per_usd_hour",
                  "gpus_remote", "gpus_local", "lambda_max_rps"]].copy()
    cost["remote_usd_per_hour"] = cost.gpus_remote * gpu_r.price_usd_per_gpu_hour
    cost["local_usd_per_hour"] = cost.gpus_local * gpu_l.price_usd_per_gpu_hour
    cost["link_usd_per_hour"] = [spec.link.price_usd_per_hour if g else 0.0 for g in cost.gpus_remote]
    cost["text"] = [f"${v:.3f}" for v in cost.usd_per_million_tokens]
    cb = alt.Chart(_finite(cost)).encode(
        y=alt.Y("label:N", sort=[PLAN_LABELS.get(n, n) for n in names], title=None),
        x=alt.X("usd_per_million_tokens:Q", title="cost ($ per million tokens, input + output)",
                scale=alt.Scale(domain=[0, float(cost.usd_per_million_tokens.replace(np.inf, np.nan).max()) * 1.3])))
    cost_chart = alt.layer(
        cb.mark_bar(height=26).encode(color=alt.Color("label:N", scale=_plan_scale(names), legend=None)),
        cb.mark_text(align="left", dx=4, fontSize=11.5, color="#1d2330").encode(text="text:N"),
    ).properties(width=BAR_WIDTH, height=40 * len(names) + 20, title=alt.Title(
        "Cost per million tokens", subtitle=f"at each plan's Λmax; {gpu_r.id.upper()} ${gpu_r.price_usd_per_gpu_hour:.2f}, "
        f"{gpu_l.id.upper()} ${gpu_l.price_usd_per_gpu_hour:.2f} per GPU-hour"))
    cost_tbl = Table("cost", cost, [
        Col("label", "Plan", text=True), Col("remote_usd_per_hour", f"{gpu_r.id.upper()} GPUs", "$/hour", "usd"),
        Col("local_usd_per_hour", f"{gpu_l.id.upper()} GPUs", "$/hour", "usd"),
        Col("link_usd_per_hour", "Link", "$/hour", "usd"), Col("cost_usd_per_hour", "Total", "$/hour", "usd"),
        Col("lambda_max_rps", "Λmax", "requests/s"), Col("rps_per_usd_hour", "Throughput per cost", "requests/s per $/hour", "{:.4f}"),
        Col("usd_per_million_tokens", "Cost", "$/M tokens", "usd3")], row_key="plan", highlight=best.name,
        caption=f"GPU prices from hardware_db ({gpu_r.id}: {gpu_r.price_date}; {gpu_l.id}: {gpu_l.price_date}); "
                f"tokens = mean uncached input ({best.mean_input_tokens:,.0f}) + output ({best.output_tokens:,.0f}) per request")
    sections.append(Section("cost", "Cost", [
        Figure("cost-per-million-tokens", cost_chart, "Dollars per million tokens served at Λmax (lower is better)."),
        cost_tbl]))

    # ---- inputs
    sections.append(Section("inputs", "Inputs", _inputs_blocks(sc, res, alt)))

    # ---- formulas and assumptions
    sections.append(Section("formulas", "Formulas", _formula_blocks(sc, res)))
    sections.append(Section("assumptions", "Assumptions and provenance", _assumption_blocks(sc, res, sim, sim_note)))
    return Report("plan", title, subtitle, cards, lead, sections, result=res,
                  data={"simulation": sim, "sweep_threshold": sw_t, "sweep_np": sw_n})


def _downsample(df: pd.DataFrame, xcol: str, n: int) -> pd.DataFrame:
    """At most about ``n`` rows: means over equal-width bins of ``xcol``."""
    df = _finite(df)
    if len(df) <= n:
        return df.reset_index(drop=True)
    x = df[xcol].to_numpy(dtype=float)
    bins = np.linspace(x.min(), x.max(), n + 1)
    idx = np.clip(np.digitize(x, bins) - 1, 0, n - 1)
    num = df.select_dtypes("number")
    out = num.groupby(idx).mean()
    return out.reset_index(drop=True)


def _inputs_blocks(sc, res, alt) -> list:
    from .planner import offload_fractions
    from .units import MIB_BYTES

    spec, inp, b, best = sc.spec, res.inputs, res.buckets, res.plan
    w = spec.workload
    m = sc.model
    mix = " + ".join(f"{n} {m.attention[k].kind}" for k, n in m.layer_counts().items())
    if w.kind == "lognormal":
        wl = (f"truncated log-normal lengths, μ = {w.mu:g}, σ = {w.sigma:g}, in [{w.min_tokens:,}, "
              f"{w.max_tokens:,}] tokens")
    else:
        blocks = w.prefix_cache_blocks
        pc = ("no prefix cache" if blocks == 0 else "unlimited prefix cache (512-token blocks)" if blocks is None
              else f"LRU prefix cache of {blocks:,} blocks of 512 tokens")
        wl = f"trace {Path(w.trace).name} ({w.trace_format}), {pc}; lengths are the uncached suffixes"
    rows = [
        ("model", "Model", f"{m.name} ({m.id}): {m.layers.count} layers, {mix}; "
                           f"{m.total_params / 1e9:,.0f}B total / {m.active_params / 1e9:,.1f}B active parameters"),
        ("cache", "Cache storage", f"{spec.cache.kv_dtype} KV, {spec.cache.engine} state dtypes"
                                   + (f", states {spec.cache.state_dtype}" if spec.cache.state_dtype else "")),
        ("prfaas", "PrfaaS pool", f"{spec.prfaas.gpus} × {sc.prfaas_instance.gpu.name} = "
                                  f"{spec.prfaas.instances} instances of {spec.prfaas.gpus_per_instance} GPUs"),
        ("local", "Local PD pool", f"{spec.local.gpus} × {sc.local_instance.gpu.name} = "
                                   f"{spec.local.instances} instances of {spec.local.gpus_per_instance} GPUs"),
        ("baseline", "Homogeneous baseline", f"{sc.baseline_instances * spec.local.gpus_per_instance} × "
                                             f"{sc.local_instance.gpu.name} ({sc.baseline_instances} instances)"),
        ("link", "Inter-DC link", f"{spec.link.gbps:g} Gbps nominal × {spec.link.efficiency:g} usable, RTT "
                                  f"{spec.link.rtt_s * 1e3:g} ms, ${spec.link.price_usd_per_hour:g}/hour"),
        ("workload", "Workload", wl),
        ("mean_tokens", "Mean uncached input", f"{inp.mean_tokens:,.0f} tokens"),
        ("output", "Output per request", f"{inp.output_tokens:,.0f} tokens"),
        ("decode_context", "Decode context (mean)", f"{inp.decode_context_tokens:,.0f} tokens (mean total input + half the output)"),
        ("slo", "SLOs", f"TPOT {spec.slo.tpot_s * 1e3:g} ms ({1 / spec.slo.tpot_s:g} tokens/s per request); "
                        + (f"{spec.slo.ttft_quantile:.0%} TTFT ≤ {spec.slo.ttft_s:g} s" if spec.slo.ttft_s
                           else f"TTFT reported at P{round(spec.slo.ttft_quantile * 100)}, no bound")),
        ("decode", "Decode capacity (Eq. 5)", f"BS_max = {inp.decode_batch_max}, T_decode = {inp.decode_step_s * 1e3:.2f} ms, "
                                              f"{inp.decode_rps_per_instance:.3f} requests/s per instance"),
        ("load", "Load for TTFT", f"{spec.load:.0%} of Λmax"),
    ]
    inputs_tbl = Table("inputs", pd.DataFrame([{"key": k, "item": a, "value": v} for k, a, v in rows]),
                       [Col("item", "Input", text=True), Col("value", "Value", text=True)], row_key="key",
                       caption=f"Scenario {spec.id} ({sc.origin})")

    # length distribution, split by route
    frac = offload_fractions(best, b)
    lo, hi = float(np.min(b.tokens)), float(np.max(b.tokens))
    edges = np.geomspace(lo * 0.999, hi * 1.001, 41)
    idx = np.clip(np.digitize(b.tokens, edges) - 1, 0, 39)
    remote = np.bincount(idx, weights=b.probs * frac, minlength=40)
    local = np.bincount(idx, weights=b.probs * (1 - frac), minlength=40)
    dist = pd.DataFrame({"lo_tokens": edges[:-1], "hi_tokens": edges[1:], "prfaas": remote, "local": local})
    long = pd.concat([  # stacked by hand: remote at the bottom, local on top
        pd.DataFrame({"lo_tokens": dist.lo_tokens, "hi_tokens": dist.hi_tokens, "path": "PrfaaS (remote prefill)",
                      "y0": 0.0, "y1": dist.prfaas}),
        pd.DataFrame({"lo_tokens": dist.lo_tokens, "hi_tokens": dist.hi_tokens, "path": "PD-P (local prefill)",
                      "y0": dist.prfaas, "y1": dist.prfaas + dist.local})], ignore_index=True)
    long = long[long.y1 > long.y0]
    hist = alt.Chart(long).mark_rect(stroke="white", strokeWidth=0.5).encode(
        x=alt.X("lo_tokens:Q", scale=alt.Scale(type="log", domain=[float(edges[0]), float(edges[-1])], nice=False),
                axis=_log_token_axis("uncached prompt length (tokens, log scale)")),
        x2="hi_tokens:Q",
        y=alt.Y("y0:Q", title="share of requests per bin", axis=alt.Axis(format="%")), y2="y1:Q",
        color=alt.Color("path:N", title=None, scale=alt.Scale(
            domain=["PrfaaS (remote prefill)", "PD-P (local prefill)"], range=["#1f6fb2", "#e08a2c"])),
    ).properties(width=CHART_WIDTH, height=CHART_HEIGHT, title=alt.Title(
        "Where requests are prefilled", subtitle=f"the workload's uncached lengths, routed by the {res.mode}-mode plan"))
    dist_tbl = Table("length-distribution", dist, [
        Col("lo_tokens", "From", "tokens", "int"), Col("hi_tokens", "To", "tokens", "int"),
        Col("prfaas", "PrfaaS", "share", "{:.4f}"), Col("local", "PD-P", "share", "{:.4f}")])

    # per-length model numbers
    lens = [l for l in (1024, 4096, 8192, 32768, 131072) if l <= m.max_context_tokens]
    lens = [l for l in lens if lo * 0.5 <= l <= hi * 2] or lens
    arr = np.asarray(lens, dtype=float)
    t_r, t_l, s = inp.t_remote(arr), inp.t_local(arr), inp.kv_bytes(arr)
    per = pd.DataFrame({"tokens": lens, "t_remote_s": t_r, "t_local_s": t_l, "kv_mib": s / MIB_BYTES,
                        "phi_gbps": s * 8 / t_r / 1e9})
    r_src = "measured" if sc.prfaas_profile is not None else "modelled"
    l_src = "measured" if sc.local_profile is not None else "modelled"
    k_src = "measured" if sc.prfaas_profile is not None and sc.prfaas_profile.kv_bytes is not None else "cache model"
    per_tbl = Table("per-length", per, [
        Col("tokens", "Length", "tokens", "tokens"),
        Col("t_remote_s", f"T_prefill {sc.prfaas_instance.name}", f"s ({r_src})"),
        Col("t_local_s", f"T_prefill {sc.local_instance.name}", f"s ({l_src})"),
        Col("kv_mib", "S_kv", f"MiB ({k_src})"), Col("phi_gbps", f"Φ_kv {sc.prfaas_instance.name}", "Gbps (Eq. 1)")],
        row_key="tokens", caption="The functions the planner uses, at a few lengths")
    return [inputs_tbl, Figure("length-distribution", hist, "Stacked: requests prefilled remotely and locally, "
                               "per log-spaced length bin.", dist_tbl), per_tbl]


def _formula_blocks(sc, res) -> list:
    import sympy

    from .kvcache import kv_bytes_expr

    m = sc.model
    expr = kv_bytes_expr(m, sc.cache)
    pretty = sympy.pretty(expr, use_unicode=True)
    latex = sympy.latex(expr)
    prof = sc.prfaas_profile
    prof_note = ""
    if prof is not None and prof.kv_bytes is not None:
        prof_note = (" The planner ships the measured S_kv of the PrfaaS profile (interpolated piecewise-linearly "
                     "in l), not this formula; the formula is shown for comparison.")
    inp, best = res.inputs, res.plan
    from .planner import paper_stage_rates

    t = best.threshold_tokens if best.threshold_tokens else float(inp.lengths.quantile(0.5))
    g = paper_stage_rates(inp, np.array([t]), np.array([best.instances["pd_p"]]))
    at = {k: float(np.asarray(v)[0, 0]) for k, v in g.items()}
    p = at["p"]
    eq_rows = pd.DataFrame([
        {"key": "p", "quantity": "p = P(L > t)", "value": p, "unit": ""},
        {"key": "l_long", "quantity": "l_long = E[L | L > t]", "value": at["l_long"], "unit": "tokens"},
        {"key": "l_short", "quantity": "l_short = E[L | L ≤ t]", "value": at["l_short"], "unit": "tokens"},
        {"key": "theta_prfaas", "quantity": "Θ_prfaas (Eq. 3)", "value": at["prfaas"] * p, "unit": "requests/s"},
        {"key": "theta_pdp", "quantity": "Θ_pdp (Eq. 4)", "value": at["pd_p"] * (1 - p), "unit": "requests/s"},
        {"key": "theta_pdd", "quantity": "Θ_pdd (Eq. 5)", "value": at["pd_d"], "unit": "requests/s"},
        {"key": "lambda_max", "quantity": "Λmax (Eq. 6)", "value": at["lambda"], "unit": "requests/s"},
    ])
    eq_tbl = Table("equations-at-plan", eq_rows, [Col("quantity", "Quantity", text=True), Col("value", "Value"),
                                                  Col("unit", "Unit", text=True)], row_key="key",
                   caption=f"The paper's equations evaluated at this plan's t = {_tokens(t)} and N_p = {best.instances['pd_p']}")
    eqs = """Eq. 1  Φ_kv(l) = S_kv(l) / T_prefill(l)                                  KV throughput of one instance (bit/s)
Eq. 2  B_out ≈ (N_gpus / gpus_per_instance) · Φ_kv(L_avg)                  cluster egress
       p = P(L > t),  l_long = E[L | L > t],  l_short = E[L | L ≤ t],  L_out = mean output tokens
Eq. 3  Θ_prfaas = min( N_prfaas / T_prefill,H200(l_long),  B_out / S_kv(l_long) )
Eq. 4  Θ_pdp    = N_p / T_prefill,H20(l_short)
Eq. 5  Θ_pdd    = N_d · BS_max / (T_decode · L_out)          BS_max, T_decode: largest batch meeting the TPOT SLO
Eq. 6  Λ_max    = min( Θ_prfaas / p,  Θ_pdp / (1 − p),  Θ_pdd )"""
    blocks = [
        f"<h3>Cache bytes of one request, S_kv(l), for {_e(m.name)}</h3>"
        f"<p>In bytes, l = tokens kept; from kvcache.kv_bytes_expr ({_e(sc.cache.kv_dtype)} KV, "
        f"{_e(sc.cache.engine)} state dtypes).{prof_note}</p>"
        f"<pre>S_kv(l) =\n{_e(pretty)}</pre>"
        f"<details><summary>LaTeX</summary><pre>{_e(latex)}</pre></details>",
        f"<h3>The paper's model (PrfaaS, arXiv 2604.15039)</h3><pre>{_e(eqs)}</pre>",
    ]
    if res.mode == "exact":
        blocks.append(
            "<h3>Exact mode (the plan above)</h3><pre>"
            + _e("""maximise Λ over y_b, z_b ≥ 0 (offloaded / local request rate of length bucket b), integers N_p, N_d
  y_b + z_b = Λ · p_b                          for every bucket b
  Σ_b y_b · T_H200(l_b)      ≤ N_prfaas         PrfaaS prefill busy time
  Σ_b z_b · T_H20(l_b)       ≤ N_p              local prefill busy time
  8 · Σ_b y_b · S_kv(l_b)    ≤ link_efficiency · B_link
  Λ ≤ N_d · BS_max / (T_decode · L_out),   N_p + N_d ≤ N_local
then, at the optimal Λ, minimise the busier prefill stage's utilisation (headroom tie-break).
t = shortest offloaded bucket; it uses E[T(L)] where the paper uses T(E[L]).""")
            + f"</pre><p>{len(res.buckets.tokens)} buckets. Solver: CBC via pulp.</p>")
    blocks.append(eq_tbl)
    return blocks


def _assumption_blocks(sc, res, sim, sim_note: str) -> list:
    spec, inp = sc.spec, res.inputs
    gpu_r, gpu_l = sc.prfaas_instance.gpu, sc.local_instance.gpu

    def tag(measured: bool) -> str:
        return '<span class="tag m">measured</span>' if measured else '<span class="tag d">modelled</span>'

    pr, pl = sc.prfaas_profile, sc.local_profile
    items = [
        f"{tag(pr is not None)}T_prefill on {_e(sc.prfaas_instance.name)}: "
        + (f"profile — {_e(pr.source)} (points at {', '.join(_tokens(t) for t in pr.tokens)} tokens, "
           "interpolated piecewise-linearly in l, extrapolated linearly)" if pr is not None
           else f"roofline performance model with {_e(gpu_r.id)} efficiency factors"),
        f"{tag(pr is not None and pr.kv_bytes is not None)}S_kv (bytes shipped per request): "
        + ("the same measured profile" if pr is not None and pr.kv_bytes is not None
           else "the cache model (exact bytes from the model's architecture)"),
        f"{tag(pl is not None)}T_prefill on {_e(sc.local_instance.name)}: "
        + (f"profile — {_e(pl.source)}" if pl is not None
           else f"roofline performance model with {_e(gpu_l.id)} efficiency factors"),
        f"{tag(not inp.decode_source.startswith('performance model'))}Decode batch size and step time: "
        f"{_e(inp.decode_source)} (BS_max = {inp.decode_batch_max}, T_decode = {inp.decode_step_s * 1e3:.2f} ms)",
        f"Efficiency factors of {_e(gpu_r.name)}: {_e(gpu_r.efficiency.provenance)}",
        f"Efficiency factors of {_e(gpu_l.name)}: {_e(gpu_l.efficiency.provenance)}",
        f"Prices: {_e(gpu_r.id)} ${gpu_r.price_usd_per_gpu_hour:.2f}/GPU-hour ({_e(gpu_r.price_date)}), "
        f"{_e(gpu_l.id)} ${gpu_l.price_usd_per_gpu_hour:.2f}/GPU-hour ({_e(gpu_l.price_date)}), link "
        f"${spec.link.price_usd_per_hour:g}/hour.",
        f"The link delivers {spec.link.efficiency:.0%} of its nominal {spec.link.gbps:g} Gbps to KV transfers "
        "(multi-stream TCP); transfers are pipelined layer by layer, so only the last layer's share and half "
        "a round trip add to TTFT unless the link is slower than the prefill.",
        "TTFT uses an M/G/c approximation per prefill path (Poisson arrivals, FCFS); see prfaas_plan.queueing "
        "for its measured error. The common rate is the scenario load times the smallest Λmax of all plans.",
        f"Planner mode {res.mode}: " + ("Eqs. 3-8 exactly as the paper writes them, grid search over t and N_p."
                                       if res.mode == "paper" else
                                       "bucketed MILP over routing and the P:D split (expectations E[T(L)]).")
        + " Λmax against t and N_p (Figure 5) always uses the paper's equations.",
        ("Time series and the simulated TTFT come from prfaas_plan.simulate." if sim is not None
         else _e(sim_note) + "."),
    ]
    own = "".join(f"<li>{_e(a)}</li>" for a in spec.assumptions) or "<li>(none stated)</li>"
    return [f"<h3>Stated in the scenario file</h3><ul>{own}</ul>",
            "<h3>Measured and modelled numbers</h3><ul>" + "".join(f"<li>{i}</li>" for i in items) + "</ul>"]


# ----------------------------------------------------------------------------- the comparison
def build_compare(models: Iterable[str] | None = None, hardware: str = "h200", gpus: int = 8, cluster_gpus: int = 512,
                  context_tokens: int = 32768, settings=None, link_efficiency: float = 0.9,
                  extra_model_dirs: tuple = (), extra_hardware_dirs: tuple = ()) -> Report:
    """Compute and lay out the model comparison (see :func:`write_compare`)."""
    from .arch import load_model
    from .hardware import instance
    from .kvcache import DEFAULT_SETTINGS, fixed_state_bytes, kv_bytes, kv_bytes_expr, kv_bytes_per_token
    from .perf import analytic_prefill
    from .units import MIB_BYTES

    alt = _alt()
    ids = list(models) if models else list(DEFAULT_COMPARE_MODELS)
    if len(set(ids)) != len(ids):
        raise PlanError("models: a model is listed twice")
    if gpus < 1:
        raise PlanError("--gpus: an instance needs at least 1 GPU")
    if cluster_gpus < 1:
        raise PlanError("--cluster-gpus: a cluster needs at least 1 GPU")
    if not 0 < link_efficiency <= 1:
        raise PlanError("link efficiency must be in (0, 1]")
    settings = settings or DEFAULT_SETTINGS
    specs = [load_model(i, tuple(extra_model_dirs)) for i in ids]
    inst = instance(hardware, gpus, tuple(extra_hardware_dirs))
    n_inst = cluster_gpus / gpus
    ref = int(context_tokens)

    names = [_short_name(m) for m in specs]
    rows, curves, exprs = [], [], []
    grid_all = np.unique(np.round(1024 * 2 ** (np.arange(0, 41) / 4)).astype(np.int64))  # 1K..1M, 4 per octave
    for m in specs:
        g = grid_all[grid_all <= m.max_context_tokens]
        if m.max_context_tokens not in g and m.max_context_tokens >= 1024:
            g = np.append(g, m.max_context_tokens)
        g = g.astype(float)
        s = np.asarray(kv_bytes(m, g, settings), dtype=float)
        lat = analytic_prefill(m, inst, g)
        t = np.asarray(lat.total_s, dtype=float)
        phi = s * 8 / t / 1e9
        curves.append(pd.DataFrame({"model": m.id, "name": _short_name(m), "tokens": g.astype(np.int64), "kv_mib": s / MIB_BYTES,
                                    "prefill_s": t, "phi_gbps": phi, "cluster_gbps": n_inst * phi}))
        mix = " + ".join(f"{n} {m.attention[k].kind}" for k, n in m.layer_counts().items())
        row = {"model": m.id, "name": _short_name(m), "full_name": m.name, "layer_mix": mix, "max_context_tokens": m.max_context_tokens,
               "kv_bytes_per_token": kv_bytes_per_token(m, settings),
               "fixed_state_bytes": fixed_state_bytes(m, settings)}
        row["kv_kib_per_token"] = row["kv_bytes_per_token"] / 1024
        row["fixed_state_mib"] = row["fixed_state_bytes"] / MIB_BYTES
        if ref <= m.max_context_tokens:
            lr = analytic_prefill(m, inst, float(ref))
            s_ref = float(kv_bytes(m, float(ref), settings))
            t_ref = float(lr.total_s)
            phi_ref = s_ref * 8 / t_ref / 1e9
            row.update({"kv_mib_ref": s_ref / MIB_BYTES, "prefill_s_ref": t_ref, "bound_ref": str(lr.bound),
                        "phi_gbps_ref": phi_ref, "cluster_gbps_ref": n_inst * phi_ref})
            for line in STANDARD_LINES_GBPS:
                row[f"util_{line:g}g"] = n_inst * phi_ref / line
            row["max_gpus_100g"] = int(np.floor(100.0 * link_efficiency / phi_ref)) * gpus
            fits = [line for line in STANDARD_LINES_GBPS if n_inst * phi_ref <= line * link_efficiency]
            row["smallest_line"] = f"{fits[0]:g} Gbps" if fits else f"more than {STANDARD_LINES_GBPS[-1]:g} Gbps"
            row["lines_100g"] = int(math.ceil(n_inst * phi_ref / (100.0 * link_efficiency)))
        else:
            row.update({"kv_mib_ref": np.nan, "prefill_s_ref": np.nan, "bound_ref": "beyond max context",
                        "phi_gbps_ref": np.nan, "cluster_gbps_ref": np.nan, "max_gpus_100g": np.nan, "lines_100g": np.nan,
                        "smallest_line": "–", **{f"util_{line:g}g": np.nan for line in STANDARD_LINES_GBPS}})
        rows.append(row)
        exprs.append((m, kv_bytes_expr(m, settings)))
    table = pd.DataFrame(rows)
    curve = pd.concat(curves, ignore_index=True)
    ref_txt = _tokens(ref)
    inst_txt = f"{gpus}×{inst.gpu.id.upper()}"

    # ---- headline
    by = table.set_index("model")
    hy, dn = FLAGSHIP_PAIR
    if hy in by.index and dn in by.index and np.isfinite(by.loc[hy, "phi_gbps_ref"]) and np.isfinite(by.loc[dn, "phi_gbps_ref"]):
        a, z = by.loc[hy], by.loc[dn]
    else:
        ok = table.dropna(subset=["phi_gbps_ref"])
        if len(ok) >= 2:
            a, z = ok.loc[ok.phi_gbps_ref.idxmin()], ok.loc[ok.phi_gbps_ref.idxmax()]
        else:
            a = z = None
    cards, lead = [], ""
    flagship = a is not None and a["name"] == by.loc[hy, "name"] if hy in by.index else False
    if a is not None and a["name"] != z["name"]:
        kv_ratio = z["kv_mib_ref"] / a["kv_mib_ref"]
        phi_ratio = z["phi_gbps_ref"] / a["phi_gbps_ref"]
        cards = [
            (f"KV per {ref_txt} request", f"{kv_ratio:.1f}× less", f"{a['name']} {a['kv_mib_ref']:,.0f} MiB vs {z['name']} {z['kv_mib_ref']:,.0f} MiB"),
            (f"KV traffic per {inst_txt}", f"{phi_ratio:.1f}× less", f"{a['phi_gbps_ref']:.2f} vs {z['phi_gbps_ref']:.1f} Gbps (Eq. 1, {ref_txt} prompts)"),
            (f"Egress of {cluster_gpus} GPUs", f"{a['cluster_gbps_ref']:,.0f} vs {z['cluster_gbps_ref']:,.0f} Gbps",
             f"{a['lines_100g']:.0f} vs {z['lines_100g']:.0f} lines of 100 Gbps at {link_efficiency:.0%} usable (Eq. 2)"),
        ]
        lead = (f"At {ref_txt}-token prompts, <b>{_e(a['name'])}</b> ships <b>{kv_ratio:.1f}× fewer KV bytes</b> per "
                f"request than <b>{_e(z['name'])}</b> and, prefilling back to back on one {inst_txt} instance, emits "
                f"<b>{phi_ratio:.1f}× less KV traffic</b> ({a['phi_gbps_ref']:.2f} vs {z['phi_gbps_ref']:.1f} Gbps). "
                f"A {cluster_gpus}-GPU prefill cluster of {_e(a['name'])} emits {a['cluster_gbps_ref']:,.0f} Gbps "
                f"({a['lines_100g']:.0f}× 100 Gbps lines); of {_e(z['name'])}, {z['cluster_gbps_ref']:,.0f} Gbps "
                f"({z['lines_100g']:.0f}× 100 Gbps lines).")
        if flagship and z["name"] == by.loc[dn, "name"] and ref == 32768 and inst.gpu.id == "h200" and gpus == 8:
            lead += (" (The PrfaaS paper's Table 3 measures 60 vs 4.66 Gbps, 12.9×, on 8×H200; the numbers here are "
                     f"the roofline model on {inst_txt}.)")
    lines_txt = " / ".join(f"{v:g}" for v in STANDARD_LINES_GBPS)
    cards.append(("Models", str(len(specs)), ", ".join(names)))

    model_dom = names
    model_scale = alt.Scale(domain=model_dom, range=(SERIES_COLORS * 4)[:len(model_dom)])
    color = alt.Color("name:N", title=None, scale=model_scale)

    def bars(df, col, title, axis_title, subtitle, fmt):
        d = df[["name", col]].copy()
        d["text"] = [fmt(v) for v in d[col]]
        base = alt.Chart(_finite(d)).encode(y=alt.Y("name:N", sort=model_dom, title=None, axis=alt.Axis(labelLimit=170)),
                                            x=alt.X(f"{col}:Q", title=axis_title,
                                                    scale=alt.Scale(domain=[0, float(np.nanmax(d[col])) * 1.3 or 1])))
        return alt.layer(base.mark_bar(height=22).encode(color=alt.Color("name:N", scale=model_scale, legend=None)),
                         base.mark_text(align="left", dx=4, fontSize=11.5, color="#1d2330").encode(text="text:N")
                         ).properties(width=BAR_WIDTH, height=34 * len(specs) + 10,
                                      title=alt.Title(title, subtitle=subtitle))

    per_tok = bars(table, "kv_kib_per_token", "KV cache per token (growing part)", "KiB per token (all layers)",
                   f"{settings.kv_dtype} KV; full-attention / MLA layers only", lambda v: f"{v:,.1f} KiB")
    fixed = bars(table, "fixed_state_mib", "Fixed state per request", "MiB per request",
                 f"linear-attention states + full sliding windows; {settings.engine} state dtypes",
                 lambda v: f"{v:,.1f} MiB")

    tick_vals = _token_ticks(1024, 2 ** 20)
    xenc = alt.X("tokens:Q", scale=alt.Scale(type="log", domain=[1024, 2 ** 20], nice=False),
                 axis=_log_token_axis("prompt length l (tokens, log scale)", tick_vals))

    def curve_chart(col, title, ytitle, subtitle, extra=()):
        base = alt.Chart(_finite(curve)).mark_line(point=alt.OverlayMarkDef(size=14, filled=True)).encode(
            x=xenc, y=alt.Y(f"{col}:Q", title=ytitle, scale=alt.Scale(type="log")), color=color,
            tooltip=[alt.Tooltip("name:N", title="model"), alt.Tooltip("tokens:Q", format=","),
                     alt.Tooltip(f"{col}:Q", format=",.3~g")])
        return alt.layer(base, *extra).properties(width=CHART_WIDTH, height=CHART_HEIGHT + 30,
                                                  title=alt.Title(title, subtitle=subtitle))

    s_chart = curve_chart("kv_mib", "KV cache of one request, S_kv(l)", "S_kv (MiB, log scale)",
                          "each model stops at its maximum context")
    phi_chart = curve_chart("phi_gbps", f"KV throughput of one {inst_txt} instance, Φ_kv(l)",
                            "Φ_kv (Gbps, log scale)", f"Eq. 1: S_kv(l) / T_prefill(l), roofline model on {inst_txt}")
    lines_df = pd.DataFrame({"y": list(STANDARD_LINES_GBPS), "label": [f"{v:g} Gbps line" for v in STANDARD_LINES_GBPS]})
    rules = (alt.Chart(lines_df).mark_rule(color="#c8443c", strokeDash=[4, 3]).encode(y="y:Q"),
             alt.Chart(lines_df).mark_text(align="left", dx=3, dy=-5, color="#c8443c", fontSize=10.5).encode(
                 y="y:Q", x=alt.value(2), text="label:N"))
    egress_chart = curve_chart("cluster_gbps", f"Egress of a {cluster_gpus}-GPU prefill cluster, B_out(l)",
                               "B_out (Gbps, log scale)",
                               f"Eq. 2: {n_inst:g} instances of {inst_txt}, all prefilling; dashed: {lines_txt} Gbps lines",
                               rules)
    eg = table[["name", "cluster_gbps_ref"]].dropna().copy()
    eg["text"] = [f"{v:,.0f} Gbps" for v in eg.cluster_gbps_ref]
    eg["base"] = 1.0  # log-scale bars need a positive baseline
    ymax = max(float(eg.cluster_gbps_ref.max()) if len(eg) else 1.0, STANDARD_LINES_GBPS[-1]) * 3
    eg_base = alt.Chart(eg).encode(x=alt.X("name:N", sort=model_dom, title=None, axis=alt.Axis(labelAngle=-25, labelLimit=160)))
    eg_chart = alt.layer(
        eg_base.mark_bar(width=34).encode(y=alt.Y("cluster_gbps_ref:Q", title="cluster egress (Gbps, log scale)",
                                                   scale=alt.Scale(type="log", domain=[1, ymax])), y2="base:Q",
                                          color=alt.Color("name:N", scale=model_scale, legend=None)),
        eg_base.mark_text(dy=-7, fontSize=11, color="#1d2330").encode(y="cluster_gbps_ref:Q", text="text:N"),
        *rules,
    ).properties(width=CHART_WIDTH, height=CHART_HEIGHT + 30, title=alt.Title(
        f"Link a {cluster_gpus}-GPU prefill cluster needs at {ref_txt}",
        subtitle=f"Eq. 2 on {inst_txt}; dashed: {lines_txt} Gbps lines (nominal)"))

    cols = [Col("name", "Model", text=True), Col("layer_mix", "Layers", text=True),
            Col("max_context_tokens", "Max context", "tokens", "tokens"),
            Col("kv_bytes_per_token", "KV per token", "bytes", "int"),
            Col("fixed_state_mib", "Fixed state", "MiB/request"),
            Col("kv_mib_ref", f"S_kv({ref_txt})", "MiB"), Col("prefill_s_ref", f"T_prefill({ref_txt})", f"s, {inst_txt}"),
            Col("phi_gbps_ref", f"Φ_kv({ref_txt})", "Gbps/instance"),
            Col("cluster_gbps_ref", "B_out", f"Gbps, {cluster_gpus} GPUs"),
            *[Col(f"util_{v:g}g", f"÷ {v:g} Gbps", "line load", "{:,.2f}") for v in STANDARD_LINES_GBPS],
            Col("lines_100g", "100 Gbps lines", f"needed, {link_efficiency:.0%} usable", "int"),
            Col("max_gpus_100g", "Prefill GPUs", "one 100 Gbps line feeds", "int")]
    main_tbl = Table("models", table, cols, row_key="model",
                     caption=f"At {ref_txt}-token prompts (1K = 1024). What bounds T_prefill: "
                             + ", ".join(f"{n} {b}" for n, b in zip(table.name, table.bound_ref))
                             + ". Line load = B_out ÷ nominal line rate (above 1: the line is too small).")
    curve_tbl = Table("curves", curve, [Col("name", "Model", text=True), Col("tokens", "l", "tokens", "int"),
                                        Col("kv_mib", "S_kv", "MiB"), Col("prefill_s", "T_prefill", f"s, {inst_txt}"),
                                        Col("phi_gbps", "Φ_kv", "Gbps"), Col("cluster_gbps", "B_out", f"Gbps, {cluster_gpus} GPUs")])

    formula_txt = "\n\n".join(f"{m.name}:\nS_kv(l) =\n{__import__('sympy').pretty(e, use_unicode=True)}" for m, e in exprs)
    eqs = ("Eq. 1  Φ_kv(l) = S_kv(l) / T_prefill(l)                     one instance prefilling back to back\n"
           "Eq. 2  B_out   = (N_gpus / gpus_per_instance) · Φ_kv(l)     every instance of the cluster busy\n"
           "       max prefill GPUs on a line = floor(line · efficiency / Φ_kv(l)) · gpus_per_instance")
    assumptions = [
        f"Cache bytes: exact arithmetic from each model's architecture ({settings.kv_dtype} KV cache, "
        f"{settings.engine} state dtypes; no paging).",
        f"T_prefill: the roofline performance model on {inst_txt} ({_e(inst.gpu.name)}), no measured profile; "
        f"efficiency factors: {_e(inst.gpu.efficiency.provenance)}.",
        f"Link lines are nominal; 'smallest line' and 'max prefill GPUs' assume {link_efficiency:.0%} of it is usable.",
        "Token counts: K = 1024, M = 1024²; MiB = 2²⁰ B; Gbps = 10⁹ bit/s.",
        "Models whose maximum context is below a length are not drawn beyond it.",
    ]
    sections = [
        Section("bytes", "Cache bytes per token and per request", [
            Figure("kv-bytes-per-token", per_tok, "The part of the cache that grows with every token.",
                   Table("kv-bytes-per-token-data", table[["model", "name", "kv_bytes_per_token", "kv_kib_per_token"]],
                         [Col("name", "Model", text=True), Col("kv_bytes_per_token", "KV", "bytes/token", "int"),
                          Col("kv_kib_per_token", "KV", "KiB/token")], row_key="model")),
            Figure("fixed-state", fixed, "Bytes every request holds whatever its length (recurrent + conv states, "
                   "full sliding windows).",
                   Table("fixed-state-data", table[["model", "name", "fixed_state_bytes", "fixed_state_mib"]],
                         [Col("name", "Model", text=True), Col("fixed_state_bytes", "Fixed state", "bytes", "int"),
                          Col("fixed_state_mib", "Fixed state", "MiB")], row_key="model"))]),
        Section("curves", "KV cache and KV throughput against prompt length", [
            Figure("s-kv-curve", s_chart, "One request's cache bytes, 1K to 1M tokens.",
                   Table("s-kv-curve-data", curve, curve_tbl.cols[:3])),
            Figure("phi-kv-curve", phi_chart, "The KV stream one prefill instance emits (Eq. 1).",
                   Table("phi-kv-curve-data", curve, [curve_tbl.cols[0], curve_tbl.cols[1], curve_tbl.cols[3], curve_tbl.cols[4]]))]),
        Section("link", "The link a prefill cluster needs", [
            Figure("cluster-egress-curve", egress_chart, f"{cluster_gpus} GPUs of prefill ({n_inst:g} instances) against "
                   f"standard {lines_txt} Gbps lines.", Table("cluster-egress-curve-data", curve,
                                                               [curve_tbl.cols[0], curve_tbl.cols[1], curve_tbl.cols[5]])),
            Figure("cluster-egress-bars", eg_chart, f"The same at {ref_txt}-token prompts.",
                   Table("cluster-egress-bars-data", table[["model", "name", "cluster_gbps_ref"]],
                         [Col("name", "Model", text=True), Col("cluster_gbps_ref", "B_out", "Gbps")], row_key="model"))]),
        Section("table", "The numbers behind the charts", [main_tbl,
                                                           f"<details><summary>Every curve point ({len(curve)} rows)</summary>{_table_html(curve_tbl)}</details>"]),
        Section("formulas", "Formulas", [f"<pre>{_e(eqs)}</pre>", f"<h3>S_kv(l) per model (bytes)</h3><pre>{_e(formula_txt)}</pre>"]),
        Section("assumptions", "Assumptions", ["<ul>" + "".join(f"<li>{x}</li>" for x in assumptions) + "</ul>"]),
    ]
    title = "KV traffic by model: what crosses the datacenter link"
    subtitle = (f"{len(specs)} models · prefill on {inst_txt} ({_e(inst.gpu.name)}) · {cluster_gpus}-GPU cluster · "
                f"reference prompt {ref_txt} tokens · {settings.kv_dtype} KV, {settings.engine} state dtypes")
    return Report("compare", title, subtitle, cards, lead, sections,
                  data={"models": table, "curves": curve, "instance": inst})


def write_compare(models: Iterable[str] | None, path, hardware: str = "h200", gpus: int = 8, cluster_gpus: int = 512,
                  png_dir=None, context_tokens: int = 32768, settings=None, link_efficiency: float = 0.9,
                  extra_model_dirs: tuple = (), extra_hardware_dirs: tuple = ()) -> Path:
    """Write the model comparison to ``path`` (one self-contained HTML file, written atomically):
    KV bytes per token and fixed state (bars), S_kv(l) and Phi_kv(l) over 1K-1M tokens, the egress
    of a ``cluster_gpus``-GPU prefill cluster of ``gpus``-GPU ``hardware`` instances against 10 /
    100 / 400 Gbps lines, and a table of every number. ``models`` None or empty = the paper's
    models (:data:`DEFAULT_COMPARE_MODELS`). With ``png_dir``, also every chart as PNG and SVG.
    Bad input (an unknown model, an unwritable path) raises :class:`PlanError` and leaves no file."""
    path = check_output_path(path)
    png = _check_png_dir(png_dir)
    report = build_compare(models, hardware=hardware, gpus=gpus, cluster_gpus=cluster_gpus,
                           context_tokens=context_tokens, settings=settings, link_efficiency=link_efficiency,
                           extra_model_dirs=extra_model_dirs, extra_hardware_dirs=extra_hardware_dirs)
    return _write(report, path, png)
