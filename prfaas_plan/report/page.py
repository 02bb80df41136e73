"""A report page and its HTML: the page model, cell formatting, and the self-contained page.

* the page model: :class:`Report` (header, sections), :class:`Section`, :class:`Figure` (an altair
  chart, its caption and the numbers behind it), :class:`Table` and :class:`Col`, :class:`Columns`;
* cell formatting (``_fmt``, ``_tokens``, ...) and the exact value each cell carries in
  ``data-value`` (``_raw``);
* the page template: CSS, the Content-Security-Policy that forbids every network fetch, the chart
  runner and embed scripts, and ``_page_html``, which inlines the chart specs and the Vega bundle
  (:func:`~prfaas_plan.report.bundle.vega_bundle`) once per page.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from prfaas_plan.errors import InvalidInput
from prfaas_plan.report.bundle import vega_bundle
from prfaas_plan.report.charts import CHART_CONFIG, unvalidated

if TYPE_CHECKING:
    import pandas as pd

    from prfaas_plan.tabular import Rows

# ----------------------------------------------------------------------------- page template
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
th,td{padding:4px 8px;border-bottom:1px solid var(--line);text-align:right;white-space:nowrap;vertical-align:top}
th{font-weight:600;background:var(--panel);vertical-align:bottom;white-space:normal}
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
.whatif-controls{display:grid;grid-template-columns:repeat(auto-fill,minmax(420px,1fr));gap:2px 28px;background:var(--panel);border:1px solid var(--line);border-radius:8px;padding:8px 14px;margin:10px 0 4px;max-width:980px}
.whatif-controls label{display:flex;align-items:center;gap:10px;font-size:13px}
.whatif-controls .vega-bind-name{min-width:150px}
.whatif-controls input[type=range]{flex:1;min-width:160px}
.whatif-controls span:not(.vega-bind-name){min-width:28px;font-variant-numeric:tabular-nums}
.whatif-controls input[name$="_step"]+span{display:none}
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
  var done = 0, views = window.__reportViews = {};
  Promise.all(els.map(function(el){
    var spec = specs[el.getAttribute('data-chart')];
    if (!spec) { fail('no spec for chart ' + el.getAttribute('data-chart')); return null; }
    return vegaEmbed(el, spec, {renderer: 'svg', actions: false}).then(function(res){
      views[el.getAttribute('data-chart')] = res.view;  // for scripts and tests: the Vega view API
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
    """A table of numbers; ``df`` holds the exact values (what ``data-value`` carries): a DataFrame,
    or its records (:data:`~prfaas_plan.analysis.Rows`, for a page built without pandas)."""

    name: str
    df: pd.DataFrame | Rows
    cols: list[Col]
    row_key: str | None = None
    caption: str = ""
    highlight: str | None = None

    def value(self, row: str, col: str):
        """The exact value in row ``row`` (by ``row_key``) and column ``col``."""
        return next(r[col] for r in _records(self.df) if str(r[self.row_key]) == str(row))


def _records(df: pd.DataFrame | Rows) -> Rows:
    """A table's rows as dicts (a DataFrame's ``to_dict("records")``; records as they are)."""
    return df if isinstance(df, list) else df.to_dict("records")


@dataclass
class Figure:
    """One chart: an altair chart, a caption, and the numbers behind it (shown collapsed).

    ``datasets``: named inline datasets (``alt.Data(name=...)`` in the chart) added to the spec
    after altair's ``to_dict``, which would otherwise walk and validate every value (seconds for
    the what-if grid)."""

    name: str
    chart: Any
    caption: str = ""
    data: Table | None = None
    datasets: dict[str, list] = field(default_factory=dict)

    def spec(self, validate: bool = False) -> dict:
        """The Vega-Lite spec; altair's schema validation (about 0.1 s a page) only with ``validate``
        (the tests validate every chart once)."""
        spec = self.chart.to_dict(validate=validate)
        spec["config"] = {**CHART_CONFIG, **spec.get("config", {})}
        if self.datasets:
            spec["datasets"] = {**spec.get("datasets", {}), **self.datasets}
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
    comparison or a sweep); ``data`` holds the numbers behind a page: a comparison's records, a plan
    report's simulation, Figure 5 sweeps (numpy columns) and :class:`~prfaas_plan.analysis.PlanReport`.
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

    @unvalidated
    def specs(self) -> dict[str, dict]:
        specs = {f.name: f.spec() for f in self.figures}
        if len(specs) != len(self.figures):
            raise InvalidInput("report: two charts share a name")  # pragma: no cover - a bug, not input
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
    for rec in _records(t.df):
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


_SCRIPT_ESCAPES = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                   ("\u2029", "\\u2029"))
"""Characters and their JSON escapes inside a script element (replaced one by one: ``str.replace``
runs in C, ``str.translate`` with a table looks up every character in Python; 0.1 s a report)."""


def _script_json(obj) -> str:
    """JSON safe inside <script>: no NaN/Infinity, and none of ``< > &`` (no ``</script>`` or
    ``<!--`` can end the element) nor U+2028/2029 (line breaks to older JavaScript parsers)."""
    text = json.dumps(obj, allow_nan=False, separators=(",", ":"))
    for char, escape in _SCRIPT_ESCAPES:
        text = text.replace(char, escape)
    return text


def _page_html(r: Report, bundle: str, specs: dict) -> str:
    from prfaas_plan import __version__

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
