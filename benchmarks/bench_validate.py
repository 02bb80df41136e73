"""Benchmark: ``prfaas-plan validate silicon`` over the whole silicon CSV (5,221 rows) in a fresh
process, imports included, and the figures it prints.

    python benchmarks/bench_validate.py [--csv PATH] [--repeat 3]

Default CSV: the installed aiconfigurator-core's systems/silicon_sample.csv (``pip install
'prfaas-plan[kernels]'``). Target on a 2-core machine: <= 20 s. Also printed: the in-process time
of the h200_sxm rows alone and of all rows, the number of distinct predictions (the cache key:
model, dtypes, GPU, engine, layout, ISL, OSL, concurrency, benchmark protocol), the mapped rows per
protocol rule, and the summary and status counts.
Other processes on the same CPUs skew wall times; the CPU seconds of the child are printed too.
"""

from __future__ import annotations

import argparse
import resource
import time

from _baseline import cli_wall_s, stats  # benchmarks/ is on sys.path: it holds this script


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", default=None, help="silicon_sample.csv (default: the installed aiconfigurator-core's)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import pandas as pd

    from prfaas_plan.validate import status_counts, summary, validate_silicon

    pd.set_option("display.width", 200)
    for label, systems in (("h200_sxm rows", ["h200_sxm"]), ("all rows", None)):
        t0 = time.perf_counter()
        df = validate_silicon(args.csv, systems)
        print(f"in process, {label}: {time.perf_counter() - t0:.2f} s for {len(df):,} rows, "
              f"{df.attrs['unique_predictions']:,} distinct predictions")
    print("mapped rows per protocol:", df.attrs["protocols"])
    print(summary(df).round(1).to_string(index=False))
    print(status_counts(df).to_string(index=False))
    cli = ["validate", "silicon", "--format", "csv"] + (["--csv", args.csv] if args.csv else [])
    walls, cpus = [], []
    for _ in range(args.repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        walls.append(cli_wall_s(cli))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    print(stats("prfaas-plan validate silicon (all rows, fresh process), wall s; target <= 20 s", walls))
    print(stats("  CPU s", cpus))


if __name__ == "__main__":
    main()
