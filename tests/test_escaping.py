"""User strings on the HTML pages (plan, compare, sweep) are text, never markup or script.

A payload that closes a ``<script>`` element, breaks out of an attribute and opens an element
goes into every user-controlled string a page shows: the scenario's name, id, assumptions and
profile source, a model's name and id (a model YAML loaded by path), a GPU's id and name (a
hardware YAML loaded by path), and a sweep axis value (``prfaas-plan sweep ... --html``). The page
must carry no raw ``<`` of the payload anywhere (HTML text and attributes are entity-escaped, the
JSON inside ``<script>`` has ``<``, ``>`` and ``&`` as ``\\u003c`` ...), while parsing the page gives
the payload back exactly. test_report_browser.py checks the same pages in Chromium.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import yaml
from typer.testing import CliRunner

import prfaas_plan as pp

ROOT = Path(__file__).resolve().parents[1]
PAYLOAD = ('</script><script>window.__pwned=1</script>"\'><img id=pwned src=x onerror=window.__pwned=2>'
           '<!--&amp;\u2028')
"""Closes a script element, then an attribute; opens an element whose handler runs; an HTML comment,
an entity and U+2028 (a line break to older JavaScript)."""
AXIS_PAYLOAD = PAYLOAD.replace("\u2028", "")
"""Vega-Lite compiles a sort order into an expression, whose parser rejects U+2028: the sweep's
chart would fail (visibly) with it, so the axis value leaves it out."""


def write_payload_pages(folder: Path) -> dict[str, Path]:
    """The plan report, the model comparison and a sweep page, with PAYLOAD in every user string."""
    from prfaas_plan.cli import app
    from prfaas_plan.report import write_compare, write_report

    model = yaml.safe_load((ROOT / "prfaas_plan" / "data" / "model_db" / "mimo-v2-flash.yaml").read_text())
    model.update(id="mimo-copy" + PAYLOAD, name="MiMo " + PAYLOAD)
    gpu = yaml.safe_load((ROOT / "prfaas_plan" / "data" / "hardware_db" / "h20.yaml").read_text())
    gpu.update(id="h20" + PAYLOAD, name="H20 " + PAYLOAD)
    (folder / "model.yaml").write_text(yaml.safe_dump(model, allow_unicode=True))
    (folder / "gpu.yaml").write_text(yaml.safe_dump(gpu, allow_unicode=True))
    sc = pp.load_scenario("paper-case-study").with_updates(**{
        "name": "Case " + PAYLOAD, "id": "case" + PAYLOAD, "model": str(folder / "model.yaml"),
        "local.gpu": str(folder / "gpu.yaml"), "assumptions": ["Assume " + PAYLOAD],
        "prfaas.profile.source": "Table " + PAYLOAD})
    pages = {"plan": write_report(sc, folder / "plan.html", mode="paper", simulate=False),
             "compare": write_compare([str(folder / "model.yaml"), "minimax-m2.5"], folder / "compare.html",
                                      hardware=str(folder / "gpu.yaml"))}
    grid = {"scenario": "paper-case-study", "run": "plan", "mode": "paper",
            "axes": {"name": ["plain", "Axis " + AXIS_PAYLOAD], "link.gbps": [100]}}
    (folder / "grid.yaml").write_text(yaml.safe_dump(grid, allow_unicode=True))
    r = CliRunner().invoke(app, ["sweep", str(folder / "grid.yaml"), "-o", str(folder / "s.parquet"), "--executor",
                                 "serial", "--no-progress", "--html", str(folder / "sweep.html"), "--x", "name"])
    assert r.exit_code == 0, r.output
    pages["sweep"] = folder / "sweep.html"
    return pages


class _Text(HTMLParser):
    """The page's text (outside scripts and styles), its attribute values and its JSON specs."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.attrs: list[str] = []
        self.specs = ""
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        self.attrs += [v for _, v in attrs if v]
        self._in = "specs" if dict(attrs).get("id") == "report-specs" else tag

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        if self._in == "specs":
            self.specs += data
        elif self._in not in ("script", "style"):
            self.text.append(data)


def _strings(obj):
    """Every string in a JSON value."""
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)


def test_user_strings_are_escaped_on_every_page(tmp_path):
    pages = write_payload_pages(tmp_path)
    for kind, path in pages.items():
        page = path.read_text(encoding="utf-8")
        raw = AXIS_PAYLOAD if kind == "sweep" else PAYLOAD
        # no raw piece of the payload: not the element, not the script, not the comment (any case: GPU ids are upper-cased)
        for piece in ("<img id=pwned", "<script>window.__pwned", "<!--&amp;"):
            assert piece.lower() not in page.lower(), f"{kind}: {piece!r} is in the page unescaped"
        parsed = _Text()
        parsed.feed(page)
        specs = re.search(r'<script id="report-specs" type="application/json">(.*?)</script>', page, re.S).group(1)
        assert not set("<>&") & set(specs), f"{kind}: raw < > & in the JSON specs"
        if kind != "plan":  # the plan's charts show no user string
            assert any(raw in v for v in _strings(json.loads(specs))), f"{kind}: the specs lost the payload"
        shown = "".join(parsed.text)
        if kind == "plan":
            assert "PrfaaS capacity plan: Case " + PAYLOAD in shown  # the h1, as text
            assert "Assume " + PAYLOAD in shown and "Table " + PAYLOAD in shown and "MiMo " + PAYLOAD in shown
            assert "mimo-copy" + PAYLOAD in shown and "H20 " + PAYLOAD in shown
        elif kind == "compare":
            assert "MiMo " + PAYLOAD in shown and "8×" + ("H20" + PAYLOAD).upper() in shown
            assert "mimo-copy" + PAYLOAD in parsed.attrs  # the table row key
