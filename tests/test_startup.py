"""Start-up stays light (issue #18): what ``import prfaas_plan``, ``prfaas-plan --help`` and ``kv`` load.

Each case runs in a fresh interpreter and lists the heavy modules it found in ``sys.modules``: a
test of module sets, not of time (``benchmarks/bench_cli.py`` prints the times).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("scipy.stats", "sympy", "altair")
"""Modules that cost a large part of a second to import, and that no start-up path needs."""

CHECK = """
import contextlib, io, sys
{run}
heavy = [m for m in {heavy!r} if m in sys.modules]
print("loaded:", ",".join(heavy))
"""

CLI = """
from prfaas_plan.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main({argv!r})
    except SystemExit as exit:
        assert exit.code == 0, exit.code
"""


def loaded(run: str, heavy: tuple[str, ...]) -> list[str]:
    """The modules of ``heavy`` that a fresh interpreter has loaded after running ``run``."""
    r = subprocess.run([sys.executable, "-c", CHECK.format(run=run, heavy=heavy)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    (line,) = [line for line in r.stdout.splitlines() if line.startswith("loaded:")]
    return [m for m in line.removeprefix("loaded:").strip().split(",") if m]


@pytest.mark.parametrize("run", ["import prfaas_plan", CLI.format(argv=["--help"])], ids=["import", "--help"])
def test_import_and_help_load_no_heavy_module(run):
    assert loaded(run, (*HEAVY, "pandas", "pulp", "pydantic", "torch")) == []


def test_a_command_help_loads_no_library_module():
    # typer itself brings pydantic for a command's parameters; the library's modules stay out
    assert loaded(CLI.format(argv=["plan", "--help"]), (*HEAVY, "pandas", "pulp", "torch", "prfaas_plan.planner",
                                                        "prfaas_plan.scenario")) == []


def test_kv_loads_no_statistics_symbolic_chart_solver_or_dataframe_module():
    assert loaded(CLI.format(argv=["kv", "mimo-v2-flash", "--context", "32K"]), (*HEAVY, "pulp", "pandas", "torch")) == []


def test_the_check_sees_a_heavy_module():
    # the checker itself: a run that imports one reports it
    assert loaded("import sympy", HEAVY) == ["sympy"]


def test_plan_loads_no_dataframe_optimizer_or_solver_module():
    # planning needs numpy and scipy.special only: its tables are records until shown or exported,
    # Brent's method and the HiGHS bindings (and their sparse rows) come without scipy.optimize's
    # package, CBC only as the fallback
    assert loaded(CLI.format(argv=["plan", "paper-case-study"]), (*HEAVY, "pandas", "scipy.optimize", "scipy.sparse",
                                                                    "pulp", "torch")) == []
