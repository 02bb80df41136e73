"""Benchmark: what the plan report's what-if section adds (paper-case-study, altair already imported):
the grid (``analysis.whatif_grid``: paper model over 8 links x 5 x 5 pools, 401 + 64 thresholds),
the section's layout (chart data, altair chart) and its Vega-Lite spec; plus the spec's size in MB (1e6 bytes).

Run: python benchmarks/bench_whatif.py   (target: well under 1 s for section + spec on 2 cores)
"""

from __future__ import annotations

import json
import time

import altair  # noqa: F401 - imported before timing: every report imports it anyway

import prfaas_plan as pp
from prfaas_plan import analysis
from prfaas_plan.report import whatif


def _best_s(fn, repeat: int = 5) -> float:
    walls = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
    return min(walls)


def main() -> None:
    sc = pp.load_scenario("paper-case-study")
    res = pp.plan(sc, mode="paper")
    w = analysis.whatif(sc, res.inputs)
    section = whatif.whatif_section(sc, res, w)
    fig = section.blocks[1]
    spec = fig.spec()
    print(f"grid: best {_best_s(lambda: analysis.whatif_grid(res.inputs)):.3f} s")
    print(f"section (layout of the grid): best {_best_s(lambda: whatif.whatif_section(sc, res, w)):.3f} s")
    print(f"spec: best {_best_s(fig.spec):.3f} s, {len(json.dumps(spec, separators=(',', ':'))) / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
