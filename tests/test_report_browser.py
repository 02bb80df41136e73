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
