"""Benchmark: wall time of the report commands in a fresh process (imports included), this checkout
beside the previous implementation (``benchmarks/_baseline.py``, ``BASELINE_REV``), and whether the
two write the same bytes.

    python benchmarks/bench_report.py [--repeat 5]

Cases: ``prfaas-plan report paper-case-study`` (with and without the simulation) and ``prfaas-plan
compare`` (the paper's six models, and three). The Vega JavaScript bundle cache is warmed once
first, as after any earlier report. Targets on a 2-core machine: report <= 2.0 s, compare
(3 models) <= 1.5 s. Other processes on the same CPUs skew the wall times (compare the medians);
the CPU seconds (user + system of the child process) are printed too: busy neighbours inflate
those far less.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import resource
import statistics
import tempfile
from pathlib import Path

from _baseline import baseline_root, cli_wall_s, stats  # benchmarks/ is on sys.path: it holds this script

CASES = {
    "report paper-case-study": ["report", "paper-case-study"],
    "report paper-case-study --no-simulate": ["report", "paper-case-study", "--no-simulate"],
    "compare (6 models)": ["compare"],
    "compare (3 models)": ["compare", "mimo-v2-flash", "minimax-m2.5", "kimi-linear-1t"],
}


def _timed(args: list[str], **kw) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one fresh CLI process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = cli_wall_s(args, **kw)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="runs per case and tree")
    args = ap.parse_args()
    old_root = baseline_root()
    print(f"# {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}; previous: {old_root}")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        cli_wall_s(["compare", "mimo-v2-flash", "-o", str(out / "warm.html")])  # the bundle cache
        for label, case in CASES.items():
            new, old = [], []
            for _ in range(args.repeat):  # interleaved, so that a busy spell hits both trees
                new.append(_timed([*case, "-o", str(out / "new.html")]))
                old.append(_timed([*case, "-o", str(out / "old.html")], pythonpath=old_root))
            same = filecmp.cmp(out / "new.html", out / "old.html", shallow=False)
            cpu_new, cpu_old = (statistics.median(c for _, c in runs) for runs in (new, old))
            print(stats(f"prfaas-plan {label}", [w for w, _ in new], [w for w, _ in old])
                  + f"  | CPU median {cpu_new:.2f} s vs {cpu_old:.2f} s | bytes {'identical' if same else 'DIFFER'}",
                  flush=True)


if __name__ == "__main__":
    main()
