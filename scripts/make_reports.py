#!/usr/bin/env python
"""Regenerate the example reports committed in ``reports/`` (overwriting them).

    python scripts/make_reports.py [--png]

* ``reports/paper-case-study.html``: the PrfaaS paper's case study (``prfaas-plan report
  paper-case-study``, exact mode);
* ``reports/model-comparison.html``: KV traffic of the paper's models (``prfaas-plan compare``);
* ``reports/mooncake-trace-plan.html``: the case study with its workload replaced by the Mooncake
  conversation trace (``../shared/traces/mooncake_conversation.jsonl``) and an unlimited prefix cache.

Each file is written atomically. With ``--png``, every chart is also written as PNG and SVG into
``reports/png/<report>/``. The trace path can be overridden with ``--trace``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = ROOT.parent / "shared" / "traces" / "mooncake_conversation.jsonl"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "reports", help="folder for the reports (default: reports/)")
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="Mooncake conversation trace (JSONL)")
    ap.add_argument("--png", action="store_true", help="also export every chart as PNG and SVG")
    ap.add_argument("--seed", type=int, default=0, help="simulation seed")
    args = ap.parse_args(argv)

    import prfaas_plan as pp
    from prfaas_plan.report import write_compare, write_report

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    png = (lambda name: out / "png" / name) if args.png else (lambda name: None)
    sc = pp.load_scenario("paper-case-study")
    jobs = [
        ("paper-case-study.html", lambda p: write_report(sc, p, mode="exact", png_dir=png("paper-case-study"),
                                                         seed=args.seed)),
        ("model-comparison.html", lambda p: write_compare(None, p, png_dir=png("model-comparison"))),
    ]
    if args.trace.is_file():
        trace_sc = sc.with_updates(**{"workload.kind": "trace", "workload.trace": str(args.trace),
                                      "workload.prefix_cache_blocks": None,
                                      "name": "PrfaaS case study on the Mooncake conversation trace (prefix caching)"})
        jobs.append(("mooncake-trace-plan.html", lambda p: write_report(trace_sc, p, mode="exact",
                                                                        png_dir=png("mooncake-trace-plan"),
                                                                        seed=args.seed)))
    else:
        print(f"skipping mooncake-trace-plan.html: trace {args.trace} not found", file=sys.stderr)
    for name, job in jobs:
        t0 = time.perf_counter()
        path = job(out / name)
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} "
              f"({path.stat().st_size / 1e6:.1f} MB, {time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
