"""Benchmark: memory and wall time of long simulations, and the t-digest's P90 against the exact one.

Runs, each in its own process under ``/usr/bin/time -v`` (max RSS, wall time):

1. ``prfaas-plan simulate paper-case-study --load 0.8 --duration D --out DIR`` for each request
   count (default 1 M and 10 M; D = count / (0.8 Lambda_max)): runs over a million requests keep
   running totals and a t-digest and stream their records to DIR/requests.parquet;
2. the same 1 M-request run in memory, every record kept (``max_rows_in_memory`` above the count),
   for the exact P90 TTFT. Both runs make the same draws, so they simulate the same requests.

Prints max RSS (MiB = 2^20 B) and wall time (s) per run, the RSS ratio between the largest and the
smallest streamed run, and the relative difference of the streamed P90 TTFT from the exact one.
Without /usr/bin/time (Debian package ``time``) the RSS comes from getrusage(RUSAGE_CHILDREN).
Run: python benchmarks/bench_sim_memory.py [--requests 1000000 10000000] [--no-exact]
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LOAD = 0.8
TIME = Path("/usr/bin/time")
EXACT = """
import json, sys, time
import prfaas_plan as pp
from prfaas_plan.sim import simulate
sc = pp.load_scenario("paper-case-study")
res = pp.plan(sc)
t0 = time.perf_counter()
sim = simulate(sc, res, load={load!r}, duration_s={duration!r}, max_rows_in_memory=10**12)
s = sim.summary()
print(json.dumps({{"requests": s["requests"], "ttft_p90_s": s["ttft_p90_s"], "sim_s": time.perf_counter() - t0}}))
"""


def measured(cmd: list[str]) -> tuple[dict, float, float]:
    """Run ``cmd`` (which prints JSON: an object or a list of one); returns (that object, max RSS MiB, wall s)."""
    t0 = time.perf_counter()
    if TIME.is_file():
        r = subprocess.run([str(TIME), "-v", *cmd], capture_output=True, text=True)
        rss_kib = float(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1))
    else:
        r = subprocess.run(cmd, capture_output=True, text=True)
        rss_kib = float(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)  # largest child so far
    wall_s = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-2000:]}")
    out = json.loads(r.stdout)
    return (out[0] if isinstance(out, list) else out), rss_kib / 1024, wall_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, nargs="+", default=[1_000_000, 10_000_000], help="request counts")
    ap.add_argument("--no-exact", action="store_true", help="skip the in-memory reference run")
    args = ap.parse_args()
    import prfaas_plan as pp
    from prfaas_plan.sim import MAX_ROWS_IN_MEMORY, Policy

    lam = pp.plan(pp.load_scenario("paper-case-study")).lambda_max_rps
    exe = Path(sys.executable).with_name("prfaas-plan")
    print(f"paper-case-study at {LOAD:.0%} of Lambda_max = {lam:.3f} req/s; "
          f"RSS from {'/usr/bin/time -v' if TIME.is_file() else 'getrusage(RUSAGE_CHILDREN)'}")
    counts = sorted(args.requests)
    streamed = {}
    for n in counts:
        duration = n / (LOAD * lam)
        folder = Path(tempfile.mkdtemp(prefix="bench-sim-"))
        try:
            s, rss, wall = measured([str(exe), "simulate", "paper-case-study", "--load", repr(LOAD), "--duration",
                                     repr(duration), "--out", str(folder / "run"), "--format", "json"])
            records_mib = (folder / "run" / "requests.parquet").stat().st_size / 2**20
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        streamed[n] = (s, rss, duration)
        kept = s["requests"] <= MAX_ROWS_IN_MEMORY and duration / Policy().period_s <= MAX_ROWS_IN_MEMORY
        print(f"--out, {'in memory' if kept else 'streamed '} {s['requests']:>11,} requests ({duration:,.0f} simulated s): max RSS {rss:8,.0f} MiB, "
              f"wall {wall:7.1f} s, requests.parquet {records_mib:,.0f} MiB, P90 TTFT {s['ttft_p90_s']:.4f} s")
    lo, hi = counts[0], counts[-1]
    if hi != lo:
        print(f"RSS ratio {hi:,} / {lo:,} requests: {streamed[hi][1] / streamed[lo][1]:.2f} (target <= 1.5)")
    if not args.no_exact:
        s_lo, _, duration = streamed[lo]
        code = EXACT.format(load=LOAD, duration=duration)
        exact, rss, wall = measured([sys.executable, "-c", code])
        assert exact["requests"] == s_lo["requests"]
        rel = s_lo["ttft_p90_s"] / exact["ttft_p90_s"] - 1
        print(f"no --out, every record in memory {exact['requests']:>11,} requests: max RSS {rss:8,.0f} MiB, wall {wall:7.1f} s, "
              f"exact P90 TTFT {exact['ttft_p90_s']:.4f} s; streamed t-digest P90 differs by {rel:+.4%} (target within 1%)")


if __name__ == "__main__":
    main()
