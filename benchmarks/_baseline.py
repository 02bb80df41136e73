"""The previous implementation, for side-by-side benchmarks: a pre-change commit made importable.

``baseline_root()`` extracts commit :data:`BASELINE_REV` (the commit the working tree's changes
start from; ``PRFAAS_BASELINE_REV`` picks another, e.g. ``1ddbf07``, the last before the
architecture and speed work) with ``git archive`` into a temporary folder, once per machine and
commit, links its data folders into its package where that commit kept them outside it (it mapped
them with ``package-dir``, so a bare checkout on ``PYTHONPATH`` could not find them), and compiles
it to bytecode. ``compiled`` compiles this tree's package too: with ``PYTHONDONTWRITEBYTECODE`` set,
a tree without bytecode would compile its sources in every timed process. ``cli_wall_s`` and
``python_wall_s`` time a fresh process of either tree, imports included; ``stats`` prints min and median.
"""

from __future__ import annotations

import compileall
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE_REV = os.environ.get("PRFAAS_BASELINE_REV", "74221fb")
"""The commit benchmarks compare against: the last before issue #18's start-up round (imports kept
off each command's path, YAML through libyaml, one command built per run, altair's debug mode off)."""


def compiled(root: Path) -> Path:
    """``root`` with its ``prfaas_plan`` package compiled to bytecode (``__pycache__``), quietly."""
    compileall.compile_dir(str(root / "prfaas_plan"), quiet=2)
    return root


def baseline_root(rev: str = BASELINE_REV) -> Path:
    """A folder holding commit ``rev``'s ``prfaas_plan`` package, importable via ``PYTHONPATH``."""
    compiled(ROOT)  # both trees timed with their bytecode
    root = Path(tempfile.gettempdir()) / f"prfaas-plan-baseline-{rev}"
    if not (root / ".complete").exists():
        root.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
        for name in ("model_db", "hardware_db", "scenarios"):
            link = root / "prfaas_plan" / name
            if (root / name).is_dir() and not link.exists():
                link.symlink_to(root / name, target_is_directory=True)
        compiled(root)
        (root / ".complete").touch()
    return root


def _env(pythonpath: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return env


CONSOLE_SCRIPT_CODE = ("import sys; from prfaas_plan import cli; sys.argv = ['prfaas-plan', *sys.argv[1:]]; "
                       "getattr(cli, 'run', cli.main)()")
"""``python -c`` code that runs a tree's ``prfaas-plan`` console script with the arguments that follow."""


def python_wall_s(code: str, pythonpath: Path | None = None, cwd: Path | None = None) -> float:
    """Wall time of ``python -c code`` in a fresh process (``pythonpath`` None = this checkout; the process runs
    in ``cwd``, else in ``pythonpath``, so that the folder itself shadows no other tree)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, env=_env(pythonpath),
                   cwd=cwd or pythonpath or ROOT)
    return time.perf_counter() - t0


def cli_wall_s(args: list[str], pythonpath: Path | None = None, cwd: Path | None = None) -> float:
    """Wall time of the console script ``prfaas-plan ARGS`` in a fresh process, imports included (its
    entry point, ``cli.run``, where the tree has one, else ``cli.main``, as that tree's script called)."""
    code = CONSOLE_SCRIPT_CODE
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True, env=_env(pythonpath),
                   cwd=cwd or pythonpath or ROOT)
    return time.perf_counter() - t0


def stats(label: str, new_s: list[float], old_s: list[float] | None = None, unit: str = "s") -> str:
    """One line: min and median of the new runs, and (given old runs) old/new of the medians."""
    scale = {"s": 1.0, "ms": 1e3, "us": 1e6}[unit]
    line = f"{label}: min {min(new_s) * scale:.3f} {unit}, median {statistics.median(new_s) * scale:.3f} {unit}"
    if old_s:
        ratio = statistics.median(old_s) / statistics.median(new_s)
        line += (f"  | before: min {min(old_s) * scale:.3f} {unit}, median {statistics.median(old_s) * scale:.3f} "
                 f"{unit}  | {ratio:.2f}x faster")
    return line
