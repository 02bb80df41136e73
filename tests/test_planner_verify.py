"""Exact mode checks its own answer: HiGHS's MILP against an LP at fixed P:D splits, CBC as the fallback.

The grid is benchmarks/bench_sweep.py's 200-cell plan grid (paper case study over link.gbps x
prfaas.gpus x workload.mu), where CBC used to call every workload.mu = 10.7 cell infeasible.
benchmarks/bench_plan_solvers.py compares HiGHS with CBC on all of it.
"""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

import numpy as np
import pytest

import prfaas_plan as pp
from prfaas_plan import planner as P
from prfaas_plan.errors import Infeasible
from prfaas_plan.planner import milp as M

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_sweep.py"
HEADROOM_REL = 1e-6  # the MILP's tie-break stage may give up this much Lambda for headroom
CBC_AGREE_REL = 1e-6  # HiGHS and CBC answers agree to this (relative), each after its tie-break
CBC_DIGITS_REL = 5e-8  # half a unit in the 8th significant digit, as CBC's solution file prints values


def _bench_grid() -> list[dict]:
    spec = importlib.util.spec_from_file_location("bench_sweep", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    axes = mod.plan_grid(200, P.DEFAULT_BUCKETS)["axes"]
    return [dict(zip(axes, v)) for v in itertools.product(*axes.values())]


GRID = _bench_grid()


@pytest.fixture(scope="module")
def sc():
    return pp.load_scenario("paper-case-study")


def _inputs(sc, cell: dict):
    inp = P.plan_inputs(sc.with_updates(**cell))
    return inp, P.buckets(inp, P.DEFAULT_BUCKETS)


EXAMPLE = {"link.gbps": 200.0, "prfaas.gpus": 40, "workload.mu": 10.7}


def _sample(per_mu: int = 4, seed: int = 7) -> list[dict]:
    """A seeded sample of the grid, ``per_mu`` cells of each workload.mu."""
    rng = np.random.default_rng(seed)
    out = []
    for mu in sorted({c["workload.mu"] for c in GRID}):
        cells = [c for c in GRID if c["workload.mu"] == mu]
        out += [cells[i] for i in rng.choice(len(cells), per_mu, replace=False)]
    return out


def test_grid_is_the_benchmarks_200_cells():
    assert len(GRID) == 200 and EXAMPLE in GRID
    assert sum(c["workload.mu"] == 10.7 for c in GRID) == 50


def test_example_cell_plans_the_best_fixed_count_lp(sc):
    # the cell: CBC said "Optimal" with Lambda = 0; the best fixed-count LP serves a
    # positive rate (2.394 req/s at N_p = 3, N_d = 5 when the issue was filed; 2.248 at 2 + 6 with
    # the kernel model's slower H20 decode steps)
    inp, b = _inputs(sc, EXAMPLE)
    lp = P.best_fixed_count_lp(inp, b, inp.n_prfaas, inp.n_local)
    assert lp.lambda_rps > 2.0
    milp = P.solve_exact(inp, b, inp.n_prfaas, inp.n_local)
    assert milp.solver == "highs"  # the MILP itself, verified, not a fallback
    assert (milp.n_p, milp.n_d) == (lp.n_p, lp.n_d)
    assert milp.lambda_rps == pytest.approx(lp.lambda_rps, rel=2 * HEADROOM_REL)
    res = pp.plan(sc.with_updates(**EXAMPLE))
    assert res.lambda_max_rps == pytest.approx(lp.lambda_rps, rel=2 * HEADROOM_REL)
    assert res.instances == {"prfaas": 5, "pd_p": lp.n_p, "pd_d": lp.n_d}


@pytest.mark.parametrize("cell", _sample(), ids=lambda c: "-".join(f"{v:g}" for v in c.values()))
def test_milp_matches_fixed_count_lp_on_a_sample_of_the_grid(sc, cell):
    inp, b = _inputs(sc, cell)
    milp = P.solve_exact(inp, b, inp.n_prfaas, inp.n_local)
    lp = P.best_fixed_count_lp(inp, b, inp.n_prfaas, inp.n_local)
    assert milp.solver == "highs" and lp.lambda_rps > 0
    assert lp.lambda_rps * (1 - 1.5 * HEADROOM_REL) <= milp.lambda_rps <= lp.lambda_rps * (1 + 1e-7)
    # the MILP's rates are a feasible point of the model written the plain way
    assert np.allclose(milp.y_rps + milp.z_rps, milp.lambda_rps * b.probs, rtol=1e-6, atol=1e-12)
    assert np.dot(milp.y_rps, b.t_remote_s) <= inp.n_prfaas * (1 + 1e-6)
    assert np.dot(milp.z_rps, b.t_local_s) <= milp.n_p * (1 + 1e-6)
    assert np.dot(milp.y_rps, 8 * b.kv_bytes) <= inp.link_bits_per_s * (1 + 1e-6)
    # the fallback solver agrees: same split, Lambda within CBC_AGREE_REL (CBC runs at primal and dual
    # tolerances of 1e-10: at its defaults link-bound optima came out up to 2.9e-5 low)
    cbc = M.cbc_solution(inp, b, M.Pools(inp.n_prfaas, inp.n_local))
    assert (cbc.n_p, cbc.n_d) == (milp.n_p, milp.n_d)
    assert abs(cbc.lambda_rps - milp.lambda_rps) <= CBC_AGREE_REL * milp.lambda_rps


def test_baselines_match_fixed_count_lp(sc):
    inp, b = _inputs(sc, EXAMPLE)
    homog = P.solve_exact(inp, b, 0, inp.n_baseline, allow_remote=False)
    naive = P.solve_exact(inp, b, inp.n_prfaas, inp.n_local, allow_local_prefill=False, min_decode=inp.n_local)
    homog_lp = P.best_fixed_count_lp(inp, b, 0, inp.n_baseline, allow_remote=False)
    naive_lp = P.best_fixed_count_lp(inp, b, inp.n_prfaas, inp.n_local, allow_local_prefill=False,
                                     min_decode=inp.n_local)
    for milp, lp in ((homog, homog_lp), (naive, naive_lp)):
        assert milp.solver == "highs" and lp.lambda_rps > 0
        assert milp.lambda_rps == pytest.approx(lp.lambda_rps, rel=2 * HEADROOM_REL)
    # naive: every request on the PrfaaS pool, all 8 local instances decode
    assert naive.n_d == 8 and naive.z_rps.sum() == pytest.approx(0.0, abs=1e-12)


def _fake(nb: int, lam: float, n_p: int = 3, n_d: int = 5) -> P.ExactSolution:
    return P.ExactSolution(lam, np.zeros(nb), np.full(nb, lam) / nb, n_p, n_d)


@pytest.mark.parametrize("highs_answer", ["zero", "no optimum", "too high", "too low"])
def test_a_wrong_highs_answer_goes_to_cbc(sc, monkeypatch, highs_answer):
    # what a solver may get wrong: "Optimal" with Lambda = 0, no optimum, or a rate its own split
    # cannot serve (or could serve more of); the check catches each and CBC solves instead
    inp, b = _inputs(sc, EXAMPLE)
    nb = len(b.tokens)
    fake = {"zero": _fake(nb, 0.0), "no optimum": None, "too high": _fake(nb, 2.5), "too low": _fake(nb, 2.3)}
    lp = P.best_fixed_count_lp(inp, b, inp.n_prfaas, inp.n_local)
    monkeypatch.setattr(M, "highs_solution", lambda *a, **k: fake[highs_answer])
    sol = P.solve_exact(inp, b, inp.n_prfaas, inp.n_local)
    assert sol.solver == "cbc" and (sol.n_p, sol.n_d) == (lp.n_p, lp.n_d)
    assert sol.lambda_rps == pytest.approx(lp.lambda_rps, rel=2 * HEADROOM_REL)


def test_a_good_highs_answer_passes_the_check_only_at_its_own_rate(sc):
    inp, b = _inputs(sc, EXAMPLE)
    pools = M.Pools(inp.n_prfaas, inp.n_local)
    sol = M.highs_solution(inp, b, pools)
    assert M.verified(inp, b, pools, sol)
    for scale in (1 + 1e-5, 1 - 1e-5):  # a Lambda 1e-5 off, with rates scaled to stay balanced
        off = P.ExactSolution(sol.lambda_rps * scale, sol.y_rps * scale, sol.z_rps * scale, sol.n_p, sol.n_d)
        assert not M.verified(inp, b, pools, off)


@pytest.mark.parametrize("cbc_answer", ["zero", "no optimum"])
def test_a_wrong_milp_zero_is_overruled_by_the_check(sc, monkeypatch, cbc_answer):
    # what CBC 2.10's preprocessing did: "Optimal", Lambda = 0, on a feasible cell (both solvers here)
    inp, b = _inputs(sc, EXAMPLE)
    lp = P.best_fixed_count_lp(inp, b, inp.n_prfaas, inp.n_local)
    fake = _fake(len(b.tokens), 0.0, 0, 1) if cbc_answer == "zero" else None
    monkeypatch.setattr(M, "highs_solution", lambda *a, **k: fake)
    monkeypatch.setattr(M, "cbc_solution", lambda *a, **k: fake)
    sol = P.solve_exact(inp, b, inp.n_prfaas, inp.n_local)
    assert lp.lambda_rps > 0 and sol.solver == "lp" and (sol.n_p, sol.n_d) == (lp.n_p, lp.n_d)
    assert sol.lambda_rps == lp.lambda_rps
    res = pp.plan(sc.with_updates(**EXAMPLE))  # the user sees the plan, not "infeasible"
    assert res.lambda_max_rps == pytest.approx(lp.lambda_rps, rel=1e-9)
    assert res.instances == {"prfaas": 5, "pd_p": lp.n_p, "pd_d": lp.n_d}


def test_fixed_count_lp_is_eq_6_when_routing_is_forced(sc):
    # all local (no PrfaaS pool) or all remote: Lambda = min(capacities), in closed form
    inp, b = _inputs(sc, EXAMPLE)
    dec = inp.decode_rps_per_instance
    local = M.fixed_count_lp(inp, b, M.Pools(0, 8, allow_remote=False), 3)
    assert local.lambda_rps == pytest.approx(min(3 / np.dot(b.probs, b.t_local_s), 5 * dec), rel=1e-9)
    remote = M.fixed_count_lp(inp, b, M.Pools(5, 8, allow_local_prefill=False, min_decode=8), 0)
    caps = (5 / np.dot(b.probs, b.t_remote_s), inp.link_bits_per_s / np.dot(b.probs, 8 * b.kv_bytes), 8 * dec)
    assert remote.lambda_rps == pytest.approx(min(caps), rel=1e-9)


def test_solving_prints_nothing_and_leaves_pulp_unimported(sc, capfd):
    import subprocess
    import sys

    inp, b = _inputs(sc, EXAMPLE)
    P.solve_exact(inp, b, inp.n_prfaas, inp.n_local)
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    code = ("import sys, prfaas_plan as pp; pp.plan(pp.load_scenario('paper-case-study')); "
            "print('pulp' in sys.modules)")
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == "False"


def test_really_infeasible_is_reported_after_the_check_agrees(sc, monkeypatch):
    # one local instance must decode, so nothing prefills locally; a 0 Gbps link ships nothing
    bad = {"local.gpus": 8, "link.gbps": 0.0}
    inp, b = _inputs(sc, bad)
    calls = []
    check = M.best_fixed_count_lp
    monkeypatch.setattr(M, "best_fixed_count_lp", lambda *a, **k: calls.append(a) or check(*a, **k))
    sol = P.solve_exact(inp, b, inp.n_prfaas, inp.n_local)
    assert calls and sol.solver == "lp" and sol.lambda_rps == 0.0
    with pytest.raises(Infeasible, match="infeasible: no request rate can be served; binding constraint: "
                                           r"inter-DC link bandwidth and local prefill \(PD-P\)"):
        pp.plan(sc.with_updates(**bad))


def test_no_prfaas_pool_and_one_local_instance_names_both_prefill_paths(sc):
    # used to say "decode (PD-D)": decode has capacity, nothing can prefill
    with pytest.raises(Infeasible, match=r"binding constraint: PrfaaS prefill \(compute\) and local prefill"):
        pp.plan(sc.with_updates(**{"prfaas.gpus": 0, "local.gpus": 8}))


def _solutions(inp, b) -> list:
    """The case study's three MILPs (PrfaaS-PD and both baselines) and the LP at every split."""
    sols = [M.solve_exact(inp, b, inp.n_prfaas, inp.n_local),
            M.solve_exact(inp, b, 0, inp.n_baseline, allow_remote=False),
            M.solve_exact(inp, b, inp.n_prfaas, inp.n_local, allow_local_prefill=False, min_decode=inp.n_local)]
    pools = M.Pools(inp.n_prfaas, inp.n_local)
    return sols + [M.fixed_count_lp(inp, b, pools, n_p) for n_p in range(inp.n_local)]


@pytest.mark.parametrize("cell", [{}, EXAMPLE], ids=["case-study", "mu-10.7"])
def test_highs_loaded_alone_answers_as_scipy_optimize_does(sc, cell, monkeypatch):
    # scipy's HiGHS bindings loaded on their own (no scipy.optimize import) against scipy.optimize.milp
    # and linprog(method="highs-ds") on the same models: the same floats, bit for bit
    assert M._highs_core() is not None  # this scipy lays its bindings out as the loader expects
    inp, b = _inputs(sc, cell)
    alone = _solutions(inp, b)
    monkeypatch.setattr(M, "_highs_core", lambda: None)
    via_scipy = _solutions(inp, b)
    assert [s.solver for s in alone] == [s.solver for s in via_scipy]
    for a, s in zip(alone, via_scipy):
        assert (a.lambda_rps, a.n_p, a.n_d) == (s.lambda_rps, s.n_p, s.n_d)
        assert np.array_equal(a.y_rps, s.y_rps) and np.array_equal(a.z_rps, s.z_rps)
    assert alone[0].lambda_rps > 0 and alone[0].solver == "highs"


@pytest.mark.parametrize("cell", [{}, EXAMPLE, GRID[0], GRID[-1]], ids=["case-study", "mu-10.7", "grid-first", "grid-last"])
def test_heuristics_switched_off_change_no_answer(sc, cell, monkeypatch):
    # MILP_OPTIONS (symmetry detection off) and ROUTING_MILP_OPTIONS (also the feasibility jump off)
    # against HiGHS's defaults for both: the same floats, bit for bit, for all three MILPs and the LPs
    inp, b = _inputs(sc, cell)
    tuned = _solutions(inp, b)
    assert M.MILP_OPTIONS["mip_detect_symmetry"] is False
    assert M.ROUTING_MILP_OPTIONS["mip_heuristic_run_feasibility_jump"] is False
    defaults = {"log_to_console": False, "mip_rel_gap": 0.0}
    monkeypatch.setattr(M, "MILP_OPTIONS", defaults)
    monkeypatch.setattr(M, "ROUTING_MILP_OPTIONS", defaults)
    for a, s in zip(tuned, _solutions(inp, b)):
        assert (a.solver, a.lambda_rps, a.n_p, a.n_d) == (s.solver, s.lambda_rps, s.n_p, s.n_d)
        assert np.array_equal(a.y_rps, s.y_rps) and np.array_equal(a.z_rps, s.z_rps)


def test_model_matrix_is_scipys_compressed_columns(sc):
    # the MILP's and the LP's rows, built without scipy.sparse, are the arrays scipy.sparse.csc_array
    # holds for the same matrices (canonical form: rows ascending per column, no stored zeros)
    from scipy.sparse import csc_array

    inp, b = _inputs(sc, EXAMPLE)
    k = M._Coefficients.of(inp, b)
    for pools in (M.Pools(inp.n_prfaas, inp.n_local), M.Pools(0, inp.n_baseline, allow_remote=False)):
        a, _, _ = M._highs_model(k, pools)
        dense = np.zeros(a.shape)
        dense[a.index, np.repeat(np.arange(a.shape[1]), np.diff(a.start))] = a.value
        ref = csc_array(dense)
        assert np.array_equal(a.start, ref.indptr) and np.array_equal(a.index, ref.indices)
        assert np.array_equal(a.value, ref.data) and (a.value != 0).all()
        n = len(b.tokens)
        assert np.array_equal(dense[:n, 0], -np.ones(n)) and np.array_equal(dense[:n, 1:n + 1], np.eye(n))
        assert np.array_equal(dense[n + 1, 1:n + 1], k.remote)  # the PrfaaS-busy row


# ----------------------------------------------------------------------------- the LP path (many buckets)
MANY = 2048  # buckets: the LP path's size (M.LP_PATH_MIN_BUCKETS and up)


@pytest.fixture(scope="module")
def many(sc):
    inp = P.plan_inputs(sc)
    return inp, P.buckets(inp, MANY)


def _no_milp(*args, **kwargs):
    raise AssertionError("the MILP ran")


def test_lp_path_is_cbcs_answer_at_many_buckets(many, monkeypatch):
    # the PrfaaS-PD model at 2,048 buckets, solved as LPs only, against CBC's MILP (both stages) and
    # the exhaustive best fixed-count LP: the same split, the same Lambda, the same least utilisation
    inp, b = many
    assert MANY >= M.LP_PATH_MIN_BUCKETS > P.DEFAULT_BUCKETS
    pools = M.Pools(inp.n_prfaas, inp.n_local)
    cbc = M.cbc_solution(inp, b, pools)
    exhaustive = P.best_fixed_count_lp(inp, b, inp.n_prfaas, inp.n_local)
    monkeypatch.setattr(M, "_highs_milp", _no_milp)
    sol = P.solve_exact(inp, b, inp.n_prfaas, inp.n_local)
    assert sol.solver == "highs" and (sol.n_p, sol.n_d) == (cbc.n_p, cbc.n_d) == (exhaustive.n_p, exhaustive.n_d)
    assert abs(sol.lambda_rps - cbc.lambda_rps) <= CBC_AGREE_REL * cbc.lambda_rps
    assert sol.lambda_rps == pytest.approx(exhaustive.lambda_rps * (1 - HEADROOM_REL), rel=1e-12)

    def busiest(s: P.ExactSolution) -> float:  # the tie-break's objective: the busier prefill pool's utilisation
        return max(np.dot(s.y_rps, b.t_remote_s) / inp.n_prfaas, np.dot(s.z_rps, b.t_local_s) / inp.n_local)

    # CBC's solution file holds its values to 8 significant digits (Lambda 3.2372209): each rate is
    # off by up to 5e-8 of itself, so the utilisations (~1) agree to 5e-8; the exhaustive best is busier
    assert abs(busiest(sol) - busiest(cbc)) <= CBC_DIGITS_REL < busiest(exhaustive) - busiest(sol)
    assert sol.y_rps.sum() == pytest.approx(cbc.y_rps.sum(), rel=1e-6)  # the offload share: CBC's


def test_lp_path_runs_five_lps_and_only_where_both_paths_are_open(sc, many, monkeypatch):
    # the relaxation, the LPs at its floor and both neighbours, one tie-break (then the verification's
    # three fixed-count LPs); the baselines and the
    # default bucket count keep the MILP
    inp, b = many
    runs, path = [], []
    run, lp_path = M._highs_run, M.lp_path_solution
    monkeypatch.setattr(M, "_highs_run", lambda *a: runs.append(a[-2].any()) or run(*a))
    monkeypatch.setattr(M, "lp_path_solution", lambda *a: path.append(a[2]) or lp_path(*a))
    P.solve_exact(inp, b, inp.n_prfaas, inp.n_local)
    assert runs == [False] * 8 and len(path) == 1  # the five, the verification's at the split and both neighbours
    P.solve_exact(inp, b, 0, inp.n_baseline, allow_remote=False)
    P.solve_exact(inp, b, inp.n_prfaas, inp.n_local, allow_local_prefill=False, min_decode=inp.n_local)
    inp128, b128 = _inputs(sc, {})
    P.solve_exact(inp128, b128, inp128.n_prfaas, inp128.n_local)
    assert len(path) == 1 and sum(runs) == 6  # three MILPs, two stages each


@pytest.mark.parametrize("start", ["lowest", "highest"])
def test_lp_path_climbs_to_the_best_split_from_either_end(many, monkeypatch, start):
    inp, b = many
    pools = M.Pools(inp.n_prfaas, inp.n_local)
    exhaustive = P.best_fixed_count_lp(inp, b, inp.n_prfaas, inp.n_local)
    assert 1 < exhaustive.n_p < inp.n_local - 2  # a climb of at least two steps either way
    monkeypatch.setattr(M, "_relaxed_n_p", lambda *a: 0.0 if start == "lowest" else float(inp.n_local))
    sol = M.lp_path_solution(inp, b, pools)
    assert (sol.n_p, sol.n_d) == (exhaustive.n_p, exhaustive.n_d)
    assert sol.lambda_rps == pytest.approx(exhaustive.lambda_rps * (1 - HEADROOM_REL), rel=1e-12)


def test_lp_relaxation_brackets_the_best_split(many):
    inp, b = many
    relaxed = M._relaxed_n_p(M._Coefficients.of(inp, b), M.Pools(inp.n_prfaas, inp.n_local))
    exhaustive = P.best_fixed_count_lp(inp, b, inp.n_prfaas, inp.n_local)
    assert exhaustive.n_p in (np.floor(relaxed), np.ceil(relaxed))


def test_lp_path_tie_break_takes_the_split_with_most_headroom(many, monkeypatch):
    # a neighbour split said to reach the same Lambda and to leave more headroom is the answer
    inp, b = many
    pools = M.Pools(inp.n_prfaas, inp.n_local)
    best = P.best_fixed_count_lp(inp, b, inp.n_prfaas, inp.n_local)
    fixed, headroom = M.fixed_count_lp, M._headroom_lp

    def tied(inp_, b_, pools_, n_p):
        return fixed(inp_, b_, pools_, best.n_p if n_p == best.n_p + 1 else n_p)

    def roomier(k, pools_, lam, n_p):
        found = headroom(k, pools_, lam, best.n_p)
        return (found[0], found[1] - (n_p == best.n_p + 1))

    monkeypatch.setattr(M, "fixed_count_lp", tied)
    monkeypatch.setattr(M, "_headroom_lp", roomier)
    assert M.lp_path_solution(inp, b, pools).n_p == best.n_p + 1


def test_lp_path_keeps_the_first_stage_when_the_tie_break_fails(many, monkeypatch):
    inp, b = many
    pools = M.Pools(inp.n_prfaas, inp.n_local)
    monkeypatch.setattr(M, "_headroom_lp", lambda *a: None)
    sol = M.lp_path_solution(inp, b, pools)
    first = M.fixed_count_lp(inp, b, pools, sol.n_p)
    assert sol.solver == "highs" and sol.lambda_rps == first.lambda_rps and np.array_equal(sol.y_rps, first.y_rps)


@pytest.mark.parametrize("failure", ["relaxation", "a split serves nothing"])
def test_lp_path_leaves_to_the_milp_where_an_lp_fails(many, monkeypatch, failure):
    inp, b = many
    pools = M.Pools(inp.n_prfaas, inp.n_local)
    if failure == "relaxation":
        monkeypatch.setattr(M, "_relaxed_n_p", lambda *a: None)
    else:
        fixed = M.fixed_count_lp
        monkeypatch.setattr(M, "fixed_count_lp", lambda i, bb, p, n_p: fixed(i, bb, p, n_p) if n_p != 2 else
                            P.ExactSolution(0.0, np.zeros(MANY), np.zeros(MANY), n_p, inp.n_local - n_p, "lp"))
    assert M.lp_path_solution(inp, b, pools) is None
    milp = []
    run = M._highs_milp
    monkeypatch.setattr(M, "_highs_milp", lambda *a: milp.append(1) or run(*a))
    sol = M.highs_solution(inp, b, pools)
    assert milp and sol.lambda_rps > 0


def test_lp_path_with_no_local_prefill_instance_offloads_everything(sc):
    # 64 PrfaaS GPUs: the best split gives every local instance to decode, so every request is
    # offloaded, exactly, and the PrfaaS pool binds (as CBC says; HiGHS's MILP took 1 + 7 here,
    # 1.4% lower, at this bucket count)
    inp = P.plan_inputs(sc.with_updates(**{"link.gbps": 40, "prfaas.gpus": 64}))
    b = P.buckets(inp, MANY)
    exhaustive = P.best_fixed_count_lp(inp, b, inp.n_prfaas, inp.n_local)
    sol = P.solve_exact(inp, b, inp.n_prfaas, inp.n_local)
    assert (sol.n_p, sol.n_d) == (exhaustive.n_p, exhaustive.n_d) == (0, inp.n_local)
    assert sol.lambda_rps == pytest.approx(exhaustive.lambda_rps * (1 - HEADROOM_REL), rel=1e-12)
    assert not sol.z_rps.any() and np.array_equal(sol.y_rps, sol.lambda_rps * b.probs)
    assert P.exact_plan(inp, b, "prfaas-pd", sol, inp.n_prfaas).binding == "PrfaaS prefill (compute)"


def test_a_milp_answer_a_neighbouring_split_beats_is_not_verified(sc, monkeypatch):
    # the sweep cell where HiGHS's MILP at 2,048 buckets stops at the split 1 + 7 (1.4% short): the LP path
    # off, the check rejects it (the split 0 + 8 serves more) and CBC's answer, the best split, stands
    inp = P.plan_inputs(sc.with_updates(**{"link.gbps": 40, "prfaas.gpus": 64}))
    b = P.buckets(inp, MANY)
    monkeypatch.setattr(M, "lp_path_solution", lambda *a: None)
    pools = M.Pools(inp.n_prfaas, inp.n_local)
    milp = M.highs_solution(inp, b, pools)
    assert (milp.n_p, milp.n_d) == (1, inp.n_local - 1)
    assert M.fixed_count_lp(inp, b, pools, 1).lambda_rps * (1 + M.CHECK_REL) >= milp.lambda_rps  # agrees at its split
    assert not M.verified(inp, b, pools, milp)
    sol = P.solve_exact(inp, b, inp.n_prfaas, inp.n_local)
    exhaustive = P.best_fixed_count_lp(inp, b, inp.n_prfaas, inp.n_local)
    assert sol.solver == "cbc" and (sol.n_p, sol.n_d) == (exhaustive.n_p, exhaustive.n_d) == (0, inp.n_local)


@pytest.mark.parametrize("run", [M._highs_run, M._scipy_run], ids=["highs-core", "scipy.optimize"])
def test_both_solver_paths_solve_a_textbook_lp_and_milp_and_say_none_when_infeasible(run):
    """max x + y s.t. x + 2y <= 4, 3x + y <= 6, x, y >= 0: the LP optimum is the vertex (1.6, 1.2),
    x + y = 2.8 (Cramer's rule); in integers no point sums to 3 ((1, 2) and (2, 1) break a row), so
    the MILP optimum is 2. With x >= 3 no point is feasible: no answer, not a wrong one."""
    a = M._Csc.dense(np.array([[1.0, 2.0], [3.0, 1.0]]))
    cost, lo, hi = np.array([-1.0, -1.0]), np.full(2, -np.inf), np.array([4.0, 6.0])
    x, fun = run(cost, a, lo, hi, np.zeros(2), np.full(2, np.inf), np.zeros(2, dtype=np.int32), M.MILP_OPTIONS)
    assert x == pytest.approx([1.6, 1.2], abs=1e-9) and fun == pytest.approx(-2.8, abs=1e-9)
    x, fun = run(cost, a, lo, hi, np.zeros(2), np.full(2, np.inf), np.ones(2, dtype=np.int32), M.MILP_OPTIONS)
    assert fun == pytest.approx(-2.0, abs=1e-9) and x.sum() == pytest.approx(2.0, abs=1e-9)
    assert np.allclose(x, np.round(x), atol=1e-9)
    for integral in (np.zeros(2, dtype=np.int32), np.ones(2, dtype=np.int32)):
        assert run(cost, a, lo, hi, np.array([3.0, 0.0]), np.full(2, np.inf), integral, M.MILP_OPTIONS) is None
