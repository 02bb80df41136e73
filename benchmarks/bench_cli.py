"""Start-up speed of the command line (issue #18): fresh processes of each command, this tree against the previous one.

For ``--help``, ``kv``, ``plan``, ``report``, ``compare`` and ``simulate`` it prints the min and
median wall time of several fresh processes (imports included), the previous implementation's
(``_baseline.BASELINE_REV``) beside them (the two trees' runs interleaved), and the #18 target
where there is one. With
``--importtime`` it also prints, per command, where the imports' time goes: the packages
imported at the top level, and the package's own modules, by cumulative ``-X importtime``.

Run: python benchmarks/bench_cli.py [--repeats N] [--only SUBSTRING] [--importtime] [--no-baseline]
(figures depend on the machine and its load: the targets are for 2 idle cores).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from _baseline import (  # benchmarks/ is on sys.path: it holds this script
    CONSOLE_SCRIPT_CODE,
    ROOT,
    baseline_root,
    cli_wall_s,
    stats,
)

TRACE = ROOT / "tests" / "fixtures" / "traces" / "mooncake_conversation_rows4183-4212.jsonl"


def cases(out: Path) -> list[tuple[str, list[str], float | None]]:
    """(label, arguments, #18 target in seconds or None) of each timed command."""
    return [
        ("--help", ["--help"], 0.3),
        ("kv mimo-v2-flash", ["kv", "mimo-v2-flash"], 0.5),
        ("plan paper-case-study", ["plan", "paper-case-study"], 1.0),
        ("report paper-case-study", ["report", "paper-case-study", "-o", str(out / "report.html")], 2.0),
        ("compare (3 models)", ["compare", "mimo-v2-flash", "minimax-m2.5", "kimi-linear-1t", "-o",
                                str(out / "compare.html")], 1.5),
        ("simulate --trace mooncake", ["simulate", "paper-case-study", "--trace", str(TRACE)], None),
    ]


def import_times_us(args: list[str]) -> tuple[dict[str, int], dict[str, int]]:
    """Cumulative import microseconds of one run of the command: per top-level package imported
    at the top level, and per module of ``prfaas_plan`` (each module's own cumulative time)."""
    r = subprocess.run([sys.executable, "-X", "importtime", "-c", CONSOLE_SCRIPT_CODE, *args], capture_output=True, text=True,
                       cwd=ROOT)
    packages: dict[str, int] = defaultdict(int)
    ours: dict[str, int] = {}
    for line in r.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.split("|")
        depth = (len(name) - len(name.lstrip()) - 1) // 2
        module = name.strip()
        if depth == 0:
            packages[module.split(".")[0]] += int(cumulative)
        if module.startswith("prfaas_plan"):
            ours[module] = max(ours.get(module, 0), int(cumulative))
    return dict(packages), ours


def print_import_times(label: str, args: list[str], top: int = 12) -> None:
    packages, ours = import_times_us(args)
    print(f"  imports of {label}: {sum(packages.values()) / 1e6:.3f} s in all (cumulative, top level)")
    for name, us in sorted(packages.items(), key=lambda kv: -kv[1])[:top]:
        print(f"    {us / 1e6:7.3f} s  {name}")
    print("  of which the package's own modules (cumulative, each with what it imports):")
    for name, us in sorted(ours.items(), key=lambda kv: -kv[1])[:top]:
        print(f"    {us / 1e6:7.3f} s  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="fresh processes per command and tree")
    parser.add_argument("--only", default="", help="only commands whose label contains this")
    parser.add_argument("--importtime", action="store_true", help="also attribute each command's import time")
    parser.add_argument("--no-baseline", action="store_true", help="time this tree only")
    opts = parser.parse_args()
    old_root = None if opts.no_baseline else baseline_root()
    with tempfile.TemporaryDirectory() as tmp:
        for label, args, target_s in cases(Path(tmp)):
            if opts.only not in label:
                continue
            trees = [None] if old_root is None else [None, old_root]
            runs: dict[Path | None, list[float]] = {tree: [] for tree in trees}
            for i in range(opts.repeats + 1):  # interleaved, so that a busy spell hits both trees
                for tree in trees:
                    wall_s = cli_wall_s(args, pythonpath=tree)
                    if i:  # the first round warms the file cache
                        runs[tree].append(wall_s)
            new_s, old_s = runs[None], runs.get(old_root)
            goal = f"  (#18 target <= {target_s:g} s)" if target_s is not None else ""
            print(stats(f"prfaas-plan {label}", new_s, old_s) + goal, flush=True)
            if opts.importtime:
                print_import_times(label, args)


if __name__ == "__main__":
    main()
