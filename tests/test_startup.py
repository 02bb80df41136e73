"""Start-up stays light (issue #18): what ``import prfaas_plan``, ``prfaas-plan --help`` and ``kv`` load.

Each case runs in a fresh interpreter and lists the heavy modules it found in ``sys.modules``: a
test of module sets, not of time (``benchmarks/bench_cli.py`` prints the times).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


def test_kv_loads_no_numeric_statistics_symbolic_chart_solver_or_dataframe_module():
    # a request's bytes at a few lengths are plain integer arithmetic: numpy alone costs 0.1-0.2 s
    for argv in (["kv", "mimo-v2-flash", "--context", "32K"], ["kv", "qwen3.5-397b-a17b", "--block-tokens", "16", "--tp", "8"]):
        assert loaded(CLI.format(argv=argv), (*HEAVY, "numpy", "pulp", "pandas", "torch")) == []


TRACE_30 = str(Path(__file__).parent / "fixtures" / "traces" / "mooncake_conversation_rows4183-4212.jsonl")


@pytest.mark.parametrize("argv", [
    ["simulate", "paper-case-study", "--duration", "60"],
    ["simulate", "paper-case-study", "--trace", TRACE_30],
    ["plan", "paper-case-study", "--trace", TRACE_30],
    ["report", "paper-case-study", "--sim-duration", "60", "-o", "{tmp}/r.html"],
], ids=["simulate", "simulate-trace", "plan-trace", "report"])
def test_simulating_replaying_and_reporting_load_no_dataframe_module(argv, tmp_path):
    # the simulator's records, a trace and the plan report are numpy columns and records end to end:
    # pandas (0.3-0.5 s) is imported only where a frame is asked for (the API's frames, -f json, --out)
    argv = [a.format(tmp=tmp_path) for a in argv]
    assert loaded(CLI.format(argv=argv), ("pandas", "scipy.stats", "sympy", "pulp", "torch")) == []


def test_the_check_sees_a_heavy_module():
    # the checker itself: a run that imports one reports it
    assert loaded("import sympy", HEAVY) == ["sympy"]


def test_plan_loads_no_dataframe_optimizer_or_solver_module():
    # planning needs numpy and scipy.special's ndtr ufunc only: its tables are records until shown or exported,
    # Brent's method and the HiGHS bindings (and their sparse rows) come without scipy.optimize's
    # package, CBC only as the fallback
    assert loaded(CLI.format(argv=["plan", "paper-case-study"]), (*HEAVY, "pandas", "scipy.optimize", "scipy.sparse",
                                                                    "scipy.special", "pulp", "torch")) == []


def test_help_skips_the_rich_modules_typer_imports_but_does_not_use():
    # typer's help formatter imports rich.markdown and rich.traceback (markdown_it, pygments): the
    # command line imports it with stand-ins, which leave sys.modules at once
    assert loaded(CLI.format(argv=["--help"]), ("typer.rich_utils", "rich.markdown", "rich.traceback",
                                                "markdown_it")) == ["typer.rich_utils"]


def test_a_command_builds_only_itself():
    # typer turns every registered function into a click command on each run; a run builds the one it names
    from prfaas_plan.cli import COMMANDS, GROUPS, app, build_app, listing_app

    names = {c.name or c.callback.__name__ for c in build_app(["kv"]).registered_commands}
    assert names == {"kv"} and not build_app(["kv"]).registered_groups
    assert [g.name for g in build_app(["bench"]).registered_groups] == ["bench"]
    assert len(app.registered_commands) == len(COMMANDS) and len(app.registered_groups) == len(GROUPS)
    listed = listing_app()  # what --help lists: every name, no command's parameters
    assert [c.name for c in listed.registered_commands] == list(COMMANDS)
    assert [g.name for g in listed.registered_groups] == list(GROUPS)


@pytest.mark.parametrize("argv", [["kv", "mimo-v2-flash", "--context", "32K"], ["kv", "--help"], ["bench", "--help"],
                                  ["plan"], ["kv", "no-such-model"], ["plann"], ["--help"], []])
def test_a_one_command_app_prints_what_the_whole_app_prints(argv, capsys, monkeypatch):
    """stdout, stderr and exit code of ``main`` as it runs (the named command built alone) and with
    the whole app, for a command, its help, a group, a missing argument, bad input, a typo, no arguments."""
    from prfaas_plan import cli

    def run() -> tuple:
        with pytest.raises(SystemExit) as exit:
            cli.main(argv)
        out = capsys.readouterr()
        return exit.value.code, out.out, out.err

    one = run()
    monkeypatch.setattr(cli, "_app_for", lambda args: cli.app)
    assert one == run()


def test_plan_buckets_use_scipys_normal_cdf_without_its_package():
    # the log-normal's buckets come from scipy.special.ndtr loaded from its extension alone
    run = ("import numpy as np\nfrom prfaas_plan.workload.lengths import paper_lengths\n"
           "paper_lengths().buckets(256)")
    assert loaded(run, ("scipy.special",)) == []


def test_the_console_script_runs_main_then_freezes_the_collector_for_shutdown():
    # pyproject's script is cli.run; after main() it freezes the collector's objects, so the
    # interpreter's last collection skips them (read back by an atexit hook, which runs after run())
    import tomllib
    from pathlib import Path

    scripts = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"prfaas-plan": "prfaas_plan.cli:run"}
    code = ("import atexit, gc, sys\nfrom prfaas_plan.cli import run\n"
            "atexit.register(lambda: print('frozen', gc.get_freeze_count(), file=sys.stderr))\n"
            "sys.argv = ['prfaas-plan', 'kv', 'mimo-v2-flash']\nrun()\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "B/token" in r.stdout  # main's table was printed
    (line,) = [line for line in r.stderr.splitlines() if line.startswith("frozen")]
    assert int(line.split()[1]) > 10_000
    bad = subprocess.run([sys.executable, "-c", code.replace("'mimo-v2-flash'", "'no-such-model'")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("prfaas-plan: error: unknown model 'no-such-model'")
