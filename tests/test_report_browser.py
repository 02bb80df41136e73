"""The example reports in a real browser, offline: every declared chart renders as SVG and the
console stays silent.

Headless Chromium opens each report from a file:// URL with the network cut off (a dead proxy, a
resolver that resolves nothing, no background services; the page's own Content-Security-Policy
forbids fetches too), runs its JavaScript for up to 15 s of virtual time, and dumps the DOM. The
page declares its charts (``<body data-chart-count>``) and marks ``data-charts-rendered`` when
vega-embed has drawn them; each drawn chart is one ``<svg class="marks">``. Console messages
(``--enable-logging=stderr``) must be absent: an uncaught error, a failed fetch or a Vega warning
all fail the test. A screenshot of each report's first screen (1400x1000) is written to
``test-artifacts/`` for review.

Without Chromium (``apt-get install chromium``) the tests are skipped with that reason.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "reports"
ARTIFACTS = ROOT / "test-artifacts"
EXAMPLES = ("paper-case-study.html", "model-comparison.html", "mooncake-trace-plan.html")

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
    "--disable-default-apps", "--mute-audio", "--hide-scrollbars",
    "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",  # network off
]


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


CHROMIUM = _chromium()
if CHROMIUM is None and os.environ.get("CI"):
    # .ci/run installs Chromium: in CI a missing browser is a failure, not a skip
    raise RuntimeError("CI=true but Chromium is not installed; .ci/run must install Debian's chromium")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium not installed (apt-get install chromium); offline browser rendering not checked")


def _run(url: str, *extra: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="prfaas-chromium-") as profile:
        return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *extra, url],
                              capture_output=True, text=True, timeout=180)


def _check(path: Path, shot_name: str) -> dict:
    url = path.resolve().as_uri()
    r = _run(url, "--enable-logging=stderr", "--v=0", "--virtual-time-budget=15000", "--dump-dom")
    dom = r.stdout
    assert "<body" in dom, f"Chromium produced no DOM (rc {r.returncode}): {r.stderr[-2000:]}"
    declared = int(re.search(r'data-chart-count="(\d+)"', dom).group(1))
    rendered = re.search(r'data-charts-rendered="(\d+)"', dom)
    svgs = len(re.findall(r'<svg[^>]*class="marks"', dom))
    errors = re.search(r'<pre id="report-errors"[^>]*>(.*?)</pre>', dom, re.S)
    console = [line for line in r.stderr.splitlines() if ":CONSOLE" in line]
    assert declared >= 6
    assert rendered is not None, f"vega-embed never finished; console: {console}"
    assert int(rendered.group(1)) == declared, f"{rendered.group(1)} of {declared} charts rendered"
    assert svgs == declared, f"{svgs} SVG charts for {declared} declared"
    assert not re.search(r"<body[^>]*data-chart-errors=", dom), errors.group(1) if errors else ""
    assert console == [], "console output:\n" + "\n".join(console)
    assert not re.search(r"Uncaught|ERR_|Refused to", "\n".join(console))

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / shot_name
    if shot.exists():
        shot.unlink()
    _run(url, "--virtual-time-budget=15000", "--window-size=1400,1000", f"--screenshot={shot}")
    assert shot.is_file() and shot.stat().st_size > 20_000, f"no screenshot at {shot}"
    return {"declared": declared, "svgs": svgs}


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_report_renders_offline(name):
    path = REPORTS / name
    if not path.is_file():
        pytest.fail(f"{path} is missing; run scripts/make_reports.py")
    got = _check(path, name.replace(".html", ".png"))
    assert got["svgs"] == got["declared"]


def test_fresh_report_renders_offline(tmp_path):
    """The current code (not only the committed files): a comparison and a paper-mode plan."""
    import prfaas_plan as pp
    from prfaas_plan.report import write_compare, write_report

    c = write_compare(["mimo-v2-flash", "minimax-m2.5", "kimi-linear-1t"], tmp_path / "c.html")
    _check(c, "fresh-compare.png")
    p = write_report(pp.load_scenario("paper-case-study"), tmp_path / "p.html", mode="paper")
    _check(p, "fresh-paper-mode.png")


# ----------------------------------------------------------------------------- a probe inside the page
PROBE_JS = """
<script>
(function(){
  var tries = 0;
  function measure(){
    document.querySelectorAll('details').forEach(function(d){ d.open = true; });  // hidden tables count too
    var main = (document.querySelector('main') || document.body).getBoundingClientRect();
    var tables = Array.prototype.map.call(document.querySelectorAll('table[data-table]'), function(t){
      var wrap = t.closest('.tablewrap'), box = t.getBoundingClientRect();
      return {name: t.getAttribute('data-table'), width_px: Math.round(box.width),
              room_px: wrap.clientWidth, scroll_px: wrap.scrollWidth, right_px: box.right, main_right_px: main.right};
    });
    var logTicks = [], overlaps = [];
    document.querySelectorAll('g[aria-roledescription="axis"]').forEach(function(g){
      if ((g.getAttribute('aria-label') || '').indexOf('log scale') < 0) return;
      logTicks.push(Array.prototype.map.call(g.querySelectorAll('.role-axis-label text'), function(t){ return t.textContent; }));
    });
    document.querySelectorAll('[data-chart]').forEach(function(c){  // a text mark drawn over a bar
      var bars = Array.prototype.map.call(c.querySelectorAll('.mark-rect.role-mark path'), function(p){ return p.getBoundingClientRect(); });
      c.querySelectorAll('.mark-text.role-mark text').forEach(function(t){
        var b = t.getBoundingClientRect();
        bars.forEach(function(r){
          var dx = Math.min(b.right, r.right) - Math.max(b.left, r.left), dy = Math.min(b.bottom, r.bottom) - Math.max(b.top, r.top);
          if (dx > 2 && dy > 2) overlaps.push(c.getAttribute('data-chart') + ': ' + t.textContent);
        });
      });
    });
    var shown = document.body.cloneNode(true);  // the text a reader sees: not the scripts'
    shown.querySelectorAll('script, style').forEach(function(e){ e.remove(); });
    var out = {tables: tables, log_ticks: logTicks, text_over_bars: overlaps, page_scroll_px: document.documentElement.scrollWidth,
               window_px: window.innerWidth, pwned: window.__pwned === undefined ? null : String(window.__pwned),
               pwned_elements: document.querySelectorAll('[id=pwned i]').length, text: shown.textContent,
               rendered: document.body.getAttribute('data-charts-rendered'),
               declared: document.body.getAttribute('data-chart-count'),
               errors: document.body.getAttribute('data-chart-errors')};
    var pre = document.createElement('pre');
    pre.id = 'probe';
    pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  }
  (function wait(){
    var b = document.body;
    if (b.hasAttribute('data-charts-rendered') || b.hasAttribute('data-chart-errors') || tries++ > 150) measure();
    else setTimeout(wait, 100);
  })();
})();
</script>
"""


def _probe(path: Path, width_px: int = 1400) -> dict:
    """Open ``path`` with PROBE_JS appended, ``width_px`` wide, and return what the probe measured."""
    import html
    import json

    text = path.read_text(encoding="utf-8")
    at = text.rfind("</body>")
    probed = path.with_name(path.stem + ".probe.html")
    probed.write_text(text[:at] + PROBE_JS + text[at:], encoding="utf-8")
    r = _run(probed.resolve().as_uri(), "--virtual-time-budget=20000", f"--window-size={width_px},3000", "--dump-dom")
    m = re.search(r'<pre id="probe">(.*?)</pre>', r.stdout, re.S)
    assert m, (f"{path.name}: the probe appended to the page never ran (rc {r.returncode}): the page's own markup "
               "swallowed it (an unescaped '<!--' or '<script>'?)")
    return json.loads(html.unescape(m.group(1)))


def test_user_strings_render_as_text_in_the_browser(tmp_path):
    """A `</script>` payload in a scenario name, a model name and a sweep axis value (plus ids,
    assumptions, a GPU): nothing of it runs or becomes an element, every chart still renders, and
    the payload is on the page as text."""
    from test_escaping import PAYLOAD, write_payload_pages

    pages = write_payload_pages(tmp_path)
    shown = {"plan": ["PrfaaS capacity plan: Case " + PAYLOAD, "MiMo " + PAYLOAD],
             "compare": ["MiMo " + PAYLOAD], "sweep": ["Axis </script><script>"]}  # the axis label is cut short
    for kind, path in pages.items():
        got = _probe(path)
        assert got["pwned"] is None and got["pwned_elements"] == 0, f"{kind}: the payload ran or made an element"
        assert got["errors"] is None and got["rendered"] == got["declared"], f"{kind}: {got['rendered']} of {got['declared']} charts"
        for s in shown[kind]:
            assert s in got["text"], f"{kind}: {s!r} is not on the page as text"


@pytest.fixture(scope="module")
def fresh_pages(tmp_path_factory):
    """The paper-mode plan report and the default comparison, written by the current code."""
    import prfaas_plan as pp
    from prfaas_plan.report import write_compare, write_report

    d = tmp_path_factory.mktemp("fresh")
    return {"plan": write_report(pp.load_scenario("paper-case-study"), d / "plan.html", mode="paper", simulate=False),
            "compare": write_compare(None, d / "compare.html")}


@pytest.mark.parametrize("kind", ["plan", "compare"])
def test_tables_fit_a_1400_px_window(fresh_pages, kind):
    """At 1,400 px every table (those in collapsed <details> opened) fits its column: no scrolling,
    nothing past the page's content edge (the baselines and compare tables were 58 and 330 px wider)."""
    got = _probe(fresh_pages[kind], 1400)
    assert got["window_px"] == 1400 and got["page_scroll_px"] <= 1400
    assert len(got["tables"]) >= 6
    for t in got["tables"]:
        assert t["scroll_px"] <= t["room_px"], f"{t['name']}: {t['scroll_px']} px in {t['room_px']} px"
        assert t["right_px"] <= t["main_right_px"], f"{t['name']} ends at {t['right_px']} px, past the page"


def test_compare_charts_label_clear_of_bars_and_tick_log_axes_by_decade(fresh_pages):
    """Drawn at 1,400 px, no text mark of the comparison lies over a bar (the 10/100/400 Gbps line
    labels sat on the bars) and its log value axes label powers of ten only (they printed 10,000
    right over 20,000). Token axes (1K, 2K, ...) are powers of two by design."""
    import math

    got = _probe(fresh_pages["compare"], 1400)
    assert got["text_over_bars"] == []
    numeric = [lab for axis in got["log_ticks"] for lab in axis if re.fullmatch(r"[\d,.]+", lab)]
    assert len(numeric) >= 12  # four log value axes were drawn
    for lab in numeric:
        exponent = math.log10(float(lab.replace(",", "")))
        assert abs(exponent - round(exponent)) < 1e-9, f"log-axis label {lab} is not a power of ten"
