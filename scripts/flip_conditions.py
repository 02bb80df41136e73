#!/usr/bin/env python
"""Which branches do the tests not decide? Flip every ``if`` / ``elif`` condition of one module,
once to ``True`` and once to ``False``, and run the given tests against each flip.

    python scripts/flip_conditions.py prfaas_plan/perf/ops.py tests/test_perf.py tests/test_serving.py
    python scripts/flip_conditions.py prfaas_plan/perf/ops.py --lines 280,451 tests/   # recheck survivors

A flip that every test survives is a line no test decides (DESIGN's rule: a line that could become
``if True:`` with every test still green is untested), unless the two branches do the same thing
(a cache, a fast path, a redundant guard: an equivalent mutant, which only reading can tell). Each
flip runs in a scratch copy of the repository (``.git``, ``.venv`` and caches left out), so the
checkout is never modified; the run stops a flip's tests at the first failure (``pytest -x``).
The tests run once unflipped first, and must pass there (exit 1 if not). A flip whose tests run
past ``--timeout-s`` (default five times the unflipped run, at least 60 s) hangs or crawls: it is
killed and counted as decided. Prints one line per surviving flip and a count; exit 0 otherwise
(it is a report, not a gate).
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LEFT_OUT = shutil.ignore_patterns(".git", ".venv", "__pycache__", ".pytest_cache")
TIMEOUT_FACTOR = 5.0
"""A flip's tests may run this many times as long as the unflipped run before they count as hanging."""
TIMEOUT_FLOOR_S = 60.0
"""...but never less than this (seconds): a quick suite's run time varies with the machine's load."""


def conditions(source: str) -> list[ast.expr]:
    """The test expression of every ``if`` statement (an ``elif`` is an ``if`` in its parent's
    ``orelse``), in source order."""
    return sorted((node.test for node in ast.walk(ast.parse(source)) if isinstance(node, ast.If)),
                  key=lambda e: (e.lineno, e.col_offset))


def flipped(source: str, test: ast.expr, value: bool) -> str:
    """``source`` with the condition ``test`` (possibly spanning lines) replaced by ``value``."""
    lines = source.splitlines(keepends=True)
    start = _char_offset(lines, test.lineno, test.col_offset)
    end = _char_offset(lines, test.end_lineno, test.end_col_offset)
    return source[:start] + ("(True)" if value else "(False)") + source[end:]


def _char_offset(lines: list[str], lineno: int, byte_col: int) -> int:
    """Characters before column ``byte_col`` (ast counts UTF-8 bytes) of line ``lineno`` (1-based)."""
    return sum(len(line) for line in lines[:lineno - 1]) + len(lines[lineno - 1].encode()[:byte_col].decode())


def tests_pass(tests: list[str], cwd: Path, env: dict[str, str], timeout_s: float | None = None) -> bool:
    """Whether ``pytest -x tests`` passes in ``cwd``; False when it runs past ``timeout_s`` (it and
    every process it started are killed: it runs in a session of its own)."""
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests], cwd=cwd,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        return proc.wait(timeout=timeout_s) == 0
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        print(f"  timed out after {timeout_s:.0f} s: counted as decided", file=sys.stderr, flush=True)
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("module", help="the module to flip, relative to the repository root")
    parser.add_argument("tests", nargs="+", help="test files (or pytest node ids) to run against each flip")
    parser.add_argument("--lines", help="only the conditions starting on these lines, comma-separated")
    parser.add_argument("--timeout-s", type=float, help="a flip's tests running longer count as decided "
                        "(default: 5 x the unflipped run, at least 60 s)")
    args = parser.parse_args(argv)
    module = Path(args.module)
    source = (ROOT / module).read_text()
    tests = conditions(source)
    if args.lines:
        wanted = {int(n) for n in args.lines.split(",")}
        tests = [t for t in tests if t.lineno in wanted]
    survivors = 0
    with tempfile.TemporaryDirectory(prefix="flip-") as scratch:
        copy = Path(scratch) / ROOT.name
        shutil.copytree(ROOT, copy, ignore=LEFT_OUT)
        if (ROOT.parent / "shared").is_dir():  # tests read ../shared/ where a checkout has it
            (Path(scratch) / "shared").symlink_to(ROOT.parent / "shared")
        env = {**os.environ, "PYTHONPATH": str(copy)}

        start_s = time.monotonic()
        if not tests_pass(args.tests, copy, env):  # else every flip would count as decided
            print("the tests fail without any flip; fix them first", file=sys.stderr)
            return 1
        limit_s = args.timeout_s or max(TIMEOUT_FLOOR_S, TIMEOUT_FACTOR * (time.monotonic() - start_s))
        for i, test in enumerate(tests, 1):
            for value in (True, False):
                (copy / module).write_text(flipped(source, test, value))
                if tests_pass(args.tests, copy, env, limit_s):
                    survivors += 1
                    print(f"{module}:{test.lineno} -> {value}: if {ast.unparse(test)}", flush=True)
            print(f"[{i}/{len(tests)}]", file=sys.stderr, flush=True)
        (copy / module).write_text(source)
    print(f"{survivors} of {2 * len(tests)} flips survived")
    return 0


if __name__ == "__main__":
    sys.exit(main())
