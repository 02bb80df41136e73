"""Self-contained HTML reports: a scenario's capacity plan, and a comparison of models' KV traffic.

Two pages, each one file that opens with no network:

* :func:`write_report` -- a scenario's inputs, the recommended PrfaaS-PD plan and its binding
  constraint, the baselines, Lambda_max against the threshold and the P:D split (the paper's
  Figure 5), a what-if section whose sliders (link, pool sizes, t) move over a grid precomputed
  with the paper's model, TTFT distributions, egress and queue time series (when the simulator is
  available), cost, the formulas and every assumption;
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
once vega-embed has drawn them; ``window.__reportViews[NAME]`` holds each chart's Vega view.

Units: rates in requests/s, lengths in tokens (K = 1024), times in seconds, link rates in Gbps
(1e9 bit/s), cache sizes in MiB (2^20 B), money in US dollars.

The package, one idea a module:

* :mod:`.page` -- the page model (sections, figures, tables), cell formatting and the HTML page
  (CSS, Content-Security-Policy, chart runner, inlined JavaScript);
* :mod:`.bundle` -- the cached Vega JavaScript bundle;
* :mod:`.files` -- PNG/SVG export and the atomic page write;
* :mod:`.formulas` -- S_kv(l) written out (as sympy would print it, without sympy);
* :mod:`.charts` -- the shared chart style and altair helpers;
* :mod:`.plan_report` and :mod:`.plan_sections` -- the plan report and its reference sections
  (inputs, formulas, assumptions);
* :mod:`.whatif` -- the plan report's what-if sliders and chart;
* :mod:`.compare` -- the model comparison;
* :mod:`.sweep_page` -- a sweep's heatmaps (:func:`sweep_report`).

Every number on a page is computed by :mod:`prfaas_plan.analysis` (or, for a sweep,
:mod:`prfaas_plan.sweeps`); these modules only format and draw.

altair and vl_convert are imported only when a chart is built or a bundle or image rendered, so
``import prfaas_plan.report`` stays cheap.
"""

from __future__ import annotations

from prfaas_plan.report.bundle import vega_bundle
from prfaas_plan.report.compare import DEFAULT_COMPARE_MODELS, build_compare, write_compare
from prfaas_plan.report.files import export_figures
from prfaas_plan.report.page import Report
from prfaas_plan.report.plan_report import build_report, write_report
from prfaas_plan.report.sweep_page import sweep_report

__all__ = [
    "DEFAULT_COMPARE_MODELS", "Report", "build_compare", "build_report", "export_figures",
    "sweep_report", "vega_bundle", "write_compare", "write_report",
]
