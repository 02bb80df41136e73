"""The README as a new user reads it: every line of the tour runs as written, from the checkout."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def tour_lines() -> list[str]:
    block = README.split("## A short tour", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def test_tour_starts_by_activating_the_setup_venv():
    lines = tour_lines()
    assert lines[0] == "source .venv/bin/activate"
    setup = README.split("## Set-up", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    assert "python3 -m venv .venv" in setup


def _checkout_copy(tmp_path: Path) -> Path:
    """The files the tour reads, laid out as in a fresh clone (it writes into the checkout)."""
    for rel in ("prfaas_plan/data/scenarios", "tests/fixtures/traces", "tests/fixtures/validate"):
        shutil.copytree(ROOT / rel, tmp_path / rel)
    return tmp_path


@pytest.mark.slow
def test_every_tour_line_succeeds_as_written(tmp_path):
    """Each prfaas-plan line of the tour, in order, exits 0. Not run here: ``source`` (the test
    runs in the venv already), the gpu extra's ``pip install`` (the test extra holds torch) and
    ``bench run --quick`` (test_bench runs that harness; it takes minutes on 2 cores)."""
    cwd = _checkout_copy(tmp_path)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", "COLUMNS": "100"}
    ran = 0
    for line in tour_lines():
        if line.startswith(("source ", "pip ")) or "bench run" in line:
            continue
        args = shlex.split(line)
        assert args[0] == "prfaas-plan", line
        r = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"{line}\n{r.stderr[-2000:]}"
        ran += 1
    assert ran >= 14
    assert (cwd / "sim" / "summary.json").is_file() and (cwd / "sweep.html").is_file()


def test_dask_sweep_without_the_extra_says_which_to_install_before_any_work(tmp_path, monkeypatch):
    import importlib.util

    from prfaas_plan import sweeps
    from prfaas_plan.errors import PlanError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "distributed" else real(name, *a))
    out = tmp_path / "s.parquet"
    with pytest.raises(PlanError, match=r"prfaas-plan\[sweep\]"):
        sweeps.sweep(ROOT / "prfaas_plan" / "data" / "scenarios" / "grids" / "paper-link-threshold.yaml", executor="dask", out=out)
    assert list(tmp_path.iterdir()) == []  # no cell ran, no sidecar folder was made


def test_what_the_readme_writes_into_the_checkout_is_git_ignored():
    # the main command's report and every output the tour names (-o / --out / --html / calibrate -o)
    written = re.findall(r"(?:-o|--out|--html) (\S+)", README.split("## How the numbers are anchored")[0])
    written = [w for w in written if not w.startswith("$")]
    assert {"paper-case-study.html", "sim/", "sweep.parquet", "results.json"} <= set(written)
    written.append("sweep.parquet.cells/")
    r = subprocess.run(["git", "check-ignore", "--no-index", *written], cwd=ROOT, capture_output=True, text=True)
    assert sorted(r.stdout.split()) == sorted(written), r.stdout
