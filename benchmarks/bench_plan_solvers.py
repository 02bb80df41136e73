"""HiGHS (the planner's solver) against CBC (its fallback) on every exact-mode MILP of the sweep grids.

    python benchmarks/bench_plan_solvers.py            # 200 + 20 cells and the case study, 128 buckets
    python benchmarks/bench_plan_solvers.py --n-buckets 256 --cells 40

For each cell (benchmarks/bench_sweep.py's 200-cell plan grid, the bundled grid
scenarios/grids/paper-link-threshold.yaml, and the case study itself) it solves the three models
of a plan (PrfaaS-PD, homogeneous PD, naive heterogeneous) with :func:`planner.solve_exact` (HiGHS's
MILP, or for PrfaaS-PD from planner.milp.LP_PATH_MIN_BUCKETS buckets up its LP path; verified, CBC
only as the fallback) and with CBC alone, and prints the largest |Lambda difference|
(req/s, absolute and relative), and how many models differ in P:D split, threshold t,
routing kind or binding constraint, or fell back to CBC. Exit status 1 when a Lambda differs beyond 1e-6 (relative) or a
P:D split differs; a different t at the same Lambda and split is a tie the two solvers break differently (CBC
then offloads a few buckets of ~1e-9 probability, reported as per-bucket routing), printed but not an error.
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path

import prfaas_plan as pp
from prfaas_plan.planner import buckets, exact_plan, plan_inputs, solve_exact
from prfaas_plan.planner.milp import Pools, cbc_solution
from prfaas_plan.sweeps import expand_grid

HERE = Path(__file__).resolve().parent
GRID_FILE = Path(pp.__file__).parent / "data" / "scenarios" / "grids" / "paper-link-threshold.yaml"
AGREE_REL = 1e-6  # the agreement; CBC at 1e-10 primal/dual tolerances: 6.2e-8 measured (221 cells),
# 5.1e-8 at 2,048 buckets (41 cells, the LP path)


def _bench_sweep_grid(cells: int, n_buckets: int) -> dict:
    spec = importlib.util.spec_from_file_location("bench_sweep", HERE / "bench_sweep.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.plan_grid(cells, n_buckets)


def scenarios(cells: int, n_buckets: int) -> list[tuple[str, pp.Scenario]]:
    """(label, scenario) of every cell of both grids, then the case study."""
    out = []
    for grid in (_bench_sweep_grid(cells, n_buckets), GRID_FILE):
        _, base, grid_cells = expand_grid(grid)
        for c in grid_cells:
            out.append((", ".join(f"{k}={v}" for k, v in c.inputs.items()), base.with_updates(**c.inputs)))
    out.append(("paper-case-study", pp.load_scenario("paper-case-study")))
    return out


def models(n_prfaas: int, n_local: int, n_baseline: int) -> dict[str, Pools]:
    """The pools of the three plans, as :func:`planner.plan` solves them."""
    out = {"prfaas-pd": Pools(n_prfaas, n_local, allow_remote=n_prfaas > 0)}
    if n_baseline >= 2:
        out["homogeneous-pd"] = Pools(0, n_baseline, allow_remote=False)
    if n_prfaas >= 1 and n_local >= 1:
        out["naive-heterogeneous"] = Pools(n_prfaas, n_local, allow_local_prefill=False, min_decode=n_local)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", type=int, default=200)
    ap.add_argument("--n-buckets", type=int, default=128)
    args = ap.parse_args()
    worst_abs = worst_rel = 0.0
    worst_at = ""
    n_models = split_diff = t_diff = shape_diff = fallbacks = 0
    highs_s = cbc_s = 0.0
    cells = scenarios(args.cells, args.n_buckets)
    for label, sc in cells:
        inp = plan_inputs(sc)
        b = buckets(inp, args.n_buckets)
        for name, pools in models(inp.n_prfaas, inp.n_local, inp.n_baseline).items():
            t0 = time.perf_counter()
            new = solve_exact(inp, b, pools.n_prfaas, pools.n_local, pools.allow_remote, pools.allow_local_prefill,
                              pools.min_decode)
            t1 = time.perf_counter()
            old = cbc_solution(inp, b, pools)
            t2 = time.perf_counter()
            highs_s, cbc_s = highs_s + t1 - t0, cbc_s + t2 - t1
            n_models += 1
            fallbacks += new.solver != "highs"
            if old is None:
                print(f"CBC found no optimum: {label} {name} (HiGHS: {new.lambda_rps:.6f} req/s)")
                continue
            diff = abs(new.lambda_rps - old.lambda_rps)
            if diff > worst_abs:
                worst_abs, worst_at = diff, f"{label} {name}"
            worst_rel = max(worst_rel, diff / old.lambda_rps if old.lambda_rps > 0 else 0.0)
            p_new = exact_plan(inp, b, name, new, pools.n_prfaas)
            p_old = exact_plan(inp, b, name, old, pools.n_prfaas)
            split_diff += (new.n_p, new.n_d) != (old.n_p, old.n_d)
            t_diff += p_new.threshold_tokens != p_old.threshold_tokens
            shape_diff += ((p_new.is_threshold, p_new.routing_kind, p_new.binding)
                           != (p_old.is_threshold, p_old.routing_kind, p_old.binding))
            if ((new.n_p, new.n_d, p_new.threshold_tokens, p_new.binding, p_new.routing_kind)
                    != (old.n_p, old.n_d, p_old.threshold_tokens, p_old.binding, p_old.routing_kind)):
                print(f"differ: {label} {name}: HiGHS {new.n_p}+{new.n_d} t={p_new.threshold_tokens} "
                      f"{p_new.binding} {new.lambda_rps:.7f}; CBC {old.n_p}+{old.n_d} t={p_old.threshold_tokens} "
                      f"{p_old.binding} {old.lambda_rps:.7f}")
    print(f"{len(cells)} cells, {n_models} MILPs at {args.n_buckets} buckets")
    print(f"max |Lambda HiGHS - Lambda CBC| = {worst_abs:.3g} req/s (relative {worst_rel:.3g}) at {worst_at}")
    print(f"P:D splits differing: {split_diff}; thresholds differing: {t_diff}; routing kinds or bindings differing: "
          f"{shape_diff}; HiGHS answers not verified (CBC fallback): {fallbacks}")
    print(f"time: HiGHS (verified) {highs_s:.1f} s, CBC {cbc_s:.1f} s")
    if worst_rel > AGREE_REL or split_diff:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
