"""Benchmark: wall time of `prfaas-plan report paper-case-study -o x.html` in a fresh process
(imports included; the Vega JavaScript bundle cache warmed once first, as after any earlier report).

Run: python benchmarks/bench_report.py   (target: under 10 s on a 2-core machine)
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from prfaas_plan import report


def main() -> None:
    report.vega_bundle()
    with tempfile.TemporaryDirectory() as tmp:
        for args in (["report", "paper-case-study"], ["report", "paper-case-study", "--no-simulate"], ["compare"]):
            walls = []
            for _ in range(3):
                t0 = time.perf_counter()
                subprocess.run([sys.executable, "-m", "prfaas_plan.cli", *args, "-o", str(Path(tmp) / "x.html")],
                               check=True, capture_output=True)
                walls.append(time.perf_counter() - t0)
            print(f"prfaas-plan {' '.join(args)}: best {min(walls):.2f} s, median {sorted(walls)[1]:.2f} s")


if __name__ == "__main__":
    main()
