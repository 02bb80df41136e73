"""scripts/make_reports.py writes the example reports byte for byte the same wherever it runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests" / "fixtures" / "traces" / "mooncake_conversation_rows4183-4212.jsonl"


@pytest.mark.slow
def test_example_reports_are_byte_reproducible(tmp_path):
    outs = []
    for name in ("first", "second"):
        cwd = tmp_path / name
        cwd.mkdir()
        r = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_reports.py"), "--out", "reports",
                            "--trace", str(TRACE)], cwd=cwd, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        outs.append(cwd / "reports")
    names = sorted(p.name for p in outs[0].glob("*.html"))
    assert names == ["model-comparison.html", "mooncake-trace-plan.html", "paper-case-study.html"]
    for name in names:
        first = (outs[0] / name).read_bytes()
        assert first == (outs[1] / name).read_bytes(), name
        # nothing that depends on where the checkout or the run lives
        for place in (str(ROOT), str(tmp_path)):
            assert place.encode() not in first, (name, place)
