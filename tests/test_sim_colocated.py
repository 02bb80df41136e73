"""The colocated instance simulated step by step (:mod:`prfaas_plan.sim.colocated`) against the
closed form of :mod:`prfaas_plan.serving` (issue #14: "the same loop as a mode of the simulator,
and the two agree").

MiniMax-M2.5 on 8xH200, vLLM profile (attention TP8, experts EP8: its FP8 block-128 experts do
not split over 8 GPUs; budget 8,192 tokens), ISL 2048 / OSL 256, as benchmarks run (fixed lengths). Independent numbers: the kernel model's prefill latency and
decode step (one client alone), Little's law.

What was measured (benchmarks/bench_sim_colocated.py; closed loop: 16 seeds x 100 s pooled):

    load                     closed form TTFT / TPOT (ms)   simulation TTFT / TPOT (ms)   gap TTFT / TPOT
    closed c = 4              52.7 /  5.03                   58.2 /  5.04                 +10.5% / +0.2%
    closed c = 16             57.1 /  9.01                   79.2 /  9.01                 +38.7% / +0.0%
    closed c = 64             68.9 / 18.35                  147.6 / 18.20                +114.2% / -0.8%
    open loop at 30 / 60 / 85% of the closed form's largest sustainable rate (28.3 rps; 4 seeds x
    100 s pooled, the first 40 s, more than a residence at 85%, unmeasured):
    8.5 rps                   64.0 / 13.80                   63.7 / 13.57                  -0.4% / -1.7%
    17.0 rps                  87.2 / 23.81                   88.0 / 23.87                  +1.0% / +0.3%
    24.0 rps                 146.1 / 49.36                  148.7 / 50.46                  +1.8% / +2.2%

(In the TP8 layout the engines refuse, with vLLM's eagerly timed FP8-block GEMM rows, the decode
step was 3.5x slower and the closed loop's TTFT gaps -5.0 / +1.5 / +16.5%: the faster the decode
beside a 2,048-token prefill, the more the convoys below weigh.)

The open loop's closed form is a Markov chain of the engine's steps (the prompts that arrived
during a step join the next one), solved for its stationary distribution; its earlier fluid
picture (busy-period prompts packed into full-budget steps) ran 7% above the simulation's TPOT at
85%, measured then with a 12 s warm-up, shorter than a request's residence (22 s), so the decode
batch was still filling (353 requests on average against 420 in steady state).

The simulation found a fault in the first closed form (its prefill server was timed by a step
carrying one prompt, not a full budget, so it accepted twice the rate the loop sustains: 45 vs
~23 rps); fixed in :mod:`prfaas_plan.serving`. What remains, from the simulation's records:

1. Prompts share steps: a prompt that shares its step with another's pays the longer step.
2. Convoys (closed loop). Arrivals do not see time averages: with fixed lengths, a request that
   queued behind another's prefill finishes one chunk step after it and collides with it again
   next cycle; the closed form's half-step wait and M/D/1 queue assume independent phases
   (+10.5 / +38.7 / +114%, a strict xfail below; exponentially jittered request overheads leave
   +11 / +41 / +85%). Without jitter the deterministic loop's phases depend on the seed, hence the
   pooled seeds.

Finite benchmark runs (``prompts_per_client``: every client's first request at t = 0, as
``benchmark_serving.py --request-rate inf`` sends them) against
:func:`~prfaas_plan.serving.colocated_benchmark`, ISL 8192 / OSL 256 (InferenceX's 8k prompts):

    c     first wave alone (fixed lengths)       10 per client, lengths spread (4 seeds)   10 per client, fixed
          TTFT / TPOT gap (closed form - sim)    TTFT / TPOT gap                           TTFT gap
    4     +0.1% / +0.3%                          -3.7% / -1.5%                             -51%
    16    +0.0% / +2.2%                          +3.7% / -1.1%                             -42%
    64    -0.0% / +12.3%                         +3.3% / +0.6%                              -4%

The first wave is the same step loop: exact on TTFT; its TPOT at c = 64 is 12% above the
simulation's because with one request per client nobody sends a second, so the decodes after the
first request ends run at a shrinking batch, while the closed form takes the steady state's TPOT
for them (what a run of 10 per client has there). With fixed lengths the burst locks the clients
in phase for the whole run: each later request arrives as the one before it is mid-prefill (the
run's mean TTFT 344 ms at c = 4 against the closed form's 170 ms), a convoy the steady state
does not hold (a strict xfail below). A spread of lengths as small as InferenceX's own
(``--random-range-ratio 0.8``: uniform in [0.8 L, L], relative deviation 0.2 / sqrt(12) / 0.9 =
6.4%, here lognormal ``length_sigma = 0.064``) dissolves it, and the run means agree.

A prefill-first engine (the sglang profile, same model and layout): a step with prompts waiting
prefills them alone, so a burst of fixed lengths is prefilled before any of it decodes, its
requests end in one step, and every wave repeats it (the lockstep regime of
:func:`~prfaas_plan.serving.colocated_benchmark`: equal to the simulation's runs to 1e-6 at
ISL 8192 = the budget). Steady state, simulation against the closed form:
    closed c = 4 / 16 / 64    TTFT +15.9 / +36.9 / +181%    TPOT -0.6 / -1.3 / -6.8% (16 seeds)
    open 30 / 60 / 85%        TTFT -0.0 / -1.4 / -1.2%      TPOT +3.8 / +3.0 / -1.9% (4 seeds)
(the closed loop's TTFT gap is the convoys' of the mixed engine, larger: a prompt that arrives
behind another waits for its whole prompt step). A scheduler that polls for new requests every
30 decode steps (``--scheduler-recv-interval 30``): open loop TTFT -3.7 / -2.7 / -4.5%, TPOT
-1.8 / -1.1 / -5.6%; closed loop at c = 4 +1.2% / -0.7%. A cap of 8 running requests at c = 16:
-0.8% / -2.9%.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

import numpy as np
import pytest

from prfaas_plan.engine import load_engine
from prfaas_plan.errors import InvalidInput
from prfaas_plan.hardware import instance
from prfaas_plan.layout import Layout
from prfaas_plan.model import load_model
from prfaas_plan.perf.latency import decode_step_s, prefill_latency
from prfaas_plan.serving import (
    BenchmarkRun,
    colocated_benchmark,
    colocated_closed_loop,
    colocated_open_loop,
    max_sustainable_rate,
)
from prfaas_plan.sim import simulate_colocated
from prfaas_plan.sim.colocated import _Pool, _Requests, _schedule, _StepTimes

ISL, OSL = 2048, 256
CONCURRENCIES = (4, 16, 64)
SEEDS = range(16)
CLOSED_DURATION_S = 100.0
OPEN_DURATION_S = 100.0
OPEN_WARMUP_S = 40.0  # past a request's residence at 85% (osl x TPOT ~ 22 s), so the decode batch is in steady state
OPEN_SEEDS = range(4)
TOLERANCE = 0.05


@pytest.fixture(scope="module")
def minimax():
    return load_model("minimax-m2.5"), instance("h200", 8, engine="vllm")


def _pooled(model, inst, c: int) -> tuple[float, float]:
    """Mean TTFT and TPOT over the measured requests of 16 seeded runs (the seeds spread the
    clients' phases, which a deterministic closed loop otherwise keeps)."""
    ttft, tpot = [], []
    for seed in SEEDS:
        df, _ = simulate_colocated(model, inst, ISL, OSL, concurrency=c, duration_s=CLOSED_DURATION_S, seed=seed)
        m = df[df["measured"]]
        ttft.append(m["ttft_s"].to_numpy())
        tpot.append(m["tpot_s"].to_numpy())
    return float(np.concatenate(ttft).mean()), float(np.concatenate(tpot).mean())


@pytest.fixture(scope="module")
def closed_runs(minimax):
    model, inst = minimax
    return {c: (colocated_closed_loop(model, inst, ISL, OSL, c), _pooled(model, inst, c)) for c in CONCURRENCIES}


@pytest.fixture(scope="module")
def max_rate(minimax) -> float:
    """The closed form's largest sustainable Poisson rate."""
    return max_sustainable_rate(*minimax, ISL, OSL)


def test_one_client_is_one_request_alone(minimax):
    """c = 1: nothing shares a step, so both sides are the kernel model's own numbers exactly."""
    model, inst = minimax
    _, s = simulate_colocated(model, inst, ISL, OSL, concurrency=1, duration_s=20.0)
    assert s["mean_ttft_s"] == pytest.approx(float(prefill_latency(model, inst, ISL).total_s), rel=1e-9)
    assert s["mean_tpot_s"] == pytest.approx(decode_step_s(model, inst, 1, ISL + OSL / 2), rel=1e-9)
    p = colocated_closed_loop(model, inst, ISL, OSL, 1)
    assert s["mean_ttft_s"] == pytest.approx(p.ttft_s, rel=1e-9)
    assert s["mean_tpot_s"] == pytest.approx(p.tpot_s, rel=1e-9)


def test_littles_law_in_the_closed_loop(minimax):
    model, inst = minimax
    df, s = simulate_colocated(model, inst, ISL, OSL, concurrency=16, duration_s=60.0)
    residence = s["mean_ttft_s"] + (OSL - 1) * s["mean_tpot_s"]
    assert s["throughput_rps"] * residence == pytest.approx(16, rel=0.03)


def test_a_step_of_two_prompts_runs_their_tokens_together(minimax):
    """Two 1,024-token prompts in one step: the token-linear ops of one 2,048-token chunk plus
    each prompt's own attention (summed per prompt: the kernel tables time one sequence a call,
    so per-call costs count twice; attention is ~5% of this step)."""
    model, inst = minimax
    steps = _StepTimes(model, inst, None, ISL, OSL)
    one, two = steps(32, ((1024, 0),)), steps(32, ((1024, 0), (1024, 0)))
    long = steps(32, ((2048, 0),))
    assert one < two
    assert two == pytest.approx(long, rel=0.05)
    assert steps(32, ()) == pytest.approx(decode_step_s(model, inst, 32, ISL + OSL / 2), rel=1e-12)


@pytest.mark.parametrize("c", CONCURRENCIES)
def test_closed_loop_tpot_agrees_within_5_percent(closed_runs, c):
    p, (_, tpot) = closed_runs[c]
    assert tpot == pytest.approx(p.tpot_s, rel=TOLERANCE)


@pytest.mark.xfail(strict=True, reason="simulated TTFT +10.5 / +38.7 / +114% above the closed form at c = 4 / 16 / "
                   "64 (prompts sharing steps, convoys; see the module docstring)")
def test_closed_loop_ttft_agrees_within_5_percent(closed_runs):
    gaps = {c: closed_runs[c][1][0] / closed_runs[c][0].ttft_s - 1.0 for c in CONCURRENCIES}
    assert all(abs(g) <= TOLERANCE for g in gaps.values()), gaps


@pytest.mark.parametrize("c", [4, 16])
def test_open_loop_agrees_where_prompts_rarely_share_a_step(minimax, closed_runs, c):
    """Poisson arrivals at the closed loop's throughput at c = 4 and 16: arrivals see time
    averages and prompts seldom meet, the closed form's assumptions, and both figures agree."""
    model, inst = minimax
    rate = closed_runs[c][0].throughput_rps
    p = colocated_open_loop(model, inst, ISL, OSL, rate)
    _, s = simulate_colocated(model, inst, ISL, OSL, rate_rps=rate, duration_s=300.0)
    assert s["mean_ttft_s"] == pytest.approx(p.ttft_s, rel=TOLERANCE)
    assert s["mean_tpot_s"] == pytest.approx(p.tpot_s, rel=TOLERANCE)


@pytest.mark.parametrize("load", [0.3, 0.6, 0.85])
def test_open_loop_agrees_at_30_60_85_percent_of_the_largest_rate(minimax, max_rate, load):
    """Poisson arrivals at three loads of the closed form's largest sustainable rate (28.3 req/s),
    the step chain of :func:`~prfaas_plan.serving._step_chain` against 4 seeds x 60 measured
    seconds pooled (after a 40 s warm-up): mean TTFT within 5% (measured -0.4%, +1.0%, +1.8%) and
    mean TPOT within 5% (-1.7%, +0.3%, +2.2%) at each."""
    model, inst = minimax
    rate = load * max_rate
    p = colocated_open_loop(model, inst, ISL, OSL, rate)
    ttft, tpot = [], []
    for seed in OPEN_SEEDS:
        df, _ = simulate_colocated(model, inst, ISL, OSL, rate_rps=rate, duration_s=OPEN_DURATION_S,
                                   warmup_s=OPEN_WARMUP_S, seed=seed)
        m = df[df["measured"]]
        ttft.append(m["ttft_s"].to_numpy())
        tpot.append(m["tpot_s"].to_numpy())
    assert float(np.concatenate(ttft).mean()) == pytest.approx(p.ttft_s, rel=TOLERANCE)
    assert float(np.concatenate(tpot).mean()) == pytest.approx(p.tpot_s, rel=TOLERANCE)


def test_seeded_runs_repeat_and_lognormal_lengths_have_the_mean(minimax):
    model, inst = minimax
    a, sa = simulate_colocated(model, inst, ISL, OSL, rate_rps=2.0, duration_s=60.0, seed=3, length_sigma=0.5)
    b, sb = simulate_colocated(model, inst, ISL, OSL, rate_rps=2.0, duration_s=60.0, seed=3, length_sigma=0.5)
    assert a.equals(b) and sa == sb
    m = a[a["measured"]]
    assert m["isl_tokens"].mean() == pytest.approx(ISL, rel=0.1)
    assert m["osl_tokens"].mean() == pytest.approx(OSL, rel=0.1)
    assert m["finish_s"].notna().all() and (m["first_token_s"] >= m["start_s"]).all()
    assert (m["start_s"] >= m["arrive_s"]).all() and (m["arrive_s"] >= m["issue_s"]).all()


def test_request_overheads_are_the_profiles_or_exponential_around_it_when_jittered(minimax):
    """A request reaches the engine its profile's request overhead (vLLM: 15 ms) after it is sent;
    with ``overhead_jitter`` that delay is exponential with that mean (Kolmogorov-Smirnov over the
    run's requests; seeded, so the p-value is fixed)."""
    from scipy import stats

    model, inst = minimax
    mean_s = inst.engine_profile.request_overhead_s
    for jitter in (False, True):
        df, _ = simulate_colocated(model, inst, ISL, OSL, rate_rps=2.0, duration_s=60.0, seed=3, overhead_jitter=jitter)
        delay_s = (df["arrive_s"] - df["issue_s"]).to_numpy()
        if jitter:
            assert stats.kstest(delay_s, "expon", args=(0.0, mean_s)).pvalue > 0.05
            assert delay_s.std() == pytest.approx(mean_s, rel=0.1)
        else:
            assert delay_s == pytest.approx(np.full(len(df), mean_s), abs=1e-12)


@pytest.mark.parametrize("kwargs, field", [
    (dict(), "rate_rps"),
    (dict(rate_rps=1.0, concurrency=4), "rate_rps"),
    (dict(rate_rps=-1.0), "rate_rps"),
    (dict(concurrency=0), "concurrency"),
    (dict(concurrency=4, duration_s=0.0), "duration_s"),
    (dict(concurrency=4, warmup_s=200.0, duration_s=100.0), "warmup_s"),
    (dict(concurrency=4, seed=-1), "seed"),
    (dict(concurrency=4, length_sigma=-0.1), "length_sigma"),
])
def test_bad_input_is_one_line_naming_the_field(minimax, kwargs, field):
    model, inst = minimax
    with pytest.raises(InvalidInput, match=f"^{field}:") as err:
        simulate_colocated(model, inst, ISL, OSL, **kwargs)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("isl, osl, field", [(0, OSL, "isl_tokens"), (True, OSL, "isl_tokens"), (ISL, 2.5, "osl_tokens")])
def test_bad_lengths_are_one_line_naming_the_field(minimax, isl, osl, field):
    """A length is a whole number of tokens >= 1; a bool is not one (True would run as 1 token)."""
    model, inst = minimax
    with pytest.raises(InvalidInput, match=f"^{field}: must be a whole number of tokens >= 1"):
        simulate_colocated(model, inst, isl, osl, concurrency=4)


# On-demand KV pages (vLLM PagedAttention, SGLang's token pool): a running request holds its prompt
# and the tokens generated so far. Llama-3.1-70B FP8 on one H200 (50.1 GiB of pool, 327,680 B per
# token of bf16 KV), ISL 1,024 / OSL 4,096: 32 requests fit at their final 5,120 tokens, 53 at
# their mean 3,072 (1,024 + 4,096 / 2). Measured (benchmarks/bench_sim_colocated.py, 2 seeds x
# 1,000 s pooled; closed form / simulation, TTFT and TPOT in ms):
#
#     c = 32    156.2 / 35.18   vs  158.8 / 35.18     0 preempted
#     c = 40    159.9 / 36.55   vs  162.6 / 36.42     0 preempted
#     c = 48    163.6 / 37.93   vs  740.5 / 38.68   102 preempted (the pool's edge: the sum of the
#                                                     contexts fluctuates above it)
#     c = 64    33,165 / 38.79  vs  18,833 / 48.73  569 preempted
#     c = 96   129,163 / 38.79  vs  59,263 / 66.74  963 preempted
#
# Past the pool the engine keeps admitting prompts whose pages are free and preempts the newest
# requests, which have their first token already: part of the wait the closed form puts in TTFT
# (clients queued, Little) lands in TPOT as re-prefill stalls (strict xfail below).
LONG_ISL, LONG_OSL, LONG_C = 1024, 4096, 40


@pytest.fixture(scope="module")
def llama_fp8():
    return load_model("llama-3.1-70b").with_gemm_dtypes(attention="fp8", dense_ffn="fp8"), instance("h200", 1,
                                                                                                     engine="vllm")


def test_long_outputs_whose_final_contexts_do_not_all_fit_run_together(llama_fp8):
    """c = 40: the final contexts (40 x 5,120 tokens) exceed the pool, the mean ones (40 x 3,072)
    do not; the closed form runs all 40 (no queue) where charging the final length capped the batch
    at 32, and the simulation, allocating per generated token, agrees within 5% on mean TTFT and
    TPOT with no preemption."""
    from prfaas_plan.perf.latency import free_cache_bytes_per_gpu, requests_fit

    model, inst = llama_fp8
    free = free_cache_bytes_per_gpu(model, inst)
    final_fit = requests_fit(model, inst, LONG_ISL + LONG_OSL, free)
    assert final_fit < LONG_C <= requests_fit(model, inst, LONG_ISL + LONG_OSL / 2, free)
    p = colocated_closed_loop(model, inst, LONG_ISL, LONG_OSL, LONG_C)
    assert p.notes == ()
    ttft, tpot, preempted = [], [], 0
    for seed in range(2):
        df, s = simulate_colocated(model, inst, LONG_ISL, LONG_OSL, concurrency=LONG_C, duration_s=1000.0, seed=seed)
        m = df[df["measured"]]
        ttft.append(m["ttft_s"].to_numpy())
        tpot.append(m["tpot_s"].to_numpy())
        preempted += s["preemptions"]
        assert s["batch"] > final_fit
    assert preempted == 0
    assert float(np.concatenate(ttft).mean()) == pytest.approx(p.ttft_s, rel=TOLERANCE)
    assert float(np.concatenate(tpot).mean()) == pytest.approx(p.tpot_s, rel=TOLERANCE)


def test_an_engine_that_reserves_the_final_length_runs_only_what_fits_it(llama_fp8):
    """The same c = 40 under an engine charged ``isl + osl`` up front (TensorRT-LLM's
    GUARANTEED_NO_EVICT; the vLLM profile with ``kernel_engine: trtllm``): 32 final contexts fit,
    so 32 run, nothing is preempted, the other 8 clients wait in TTFT (seconds, not the on-demand
    engine's 0.16 s), and the simulation agrees with the closed form's memory-bound point."""
    from prfaas_plan.perf.latency import free_cache_bytes_per_gpu, requests_fit

    model, vllm = llama_fp8
    inst = replace(vllm, engine=vllm.engine_profile.model_copy(update={"kernel_engine": "trtllm"}))
    fit = requests_fit(model, inst, LONG_ISL + LONG_OSL, free_cache_bytes_per_gpu(model, inst))
    assert fit == 32 < LONG_C
    p = colocated_closed_loop(model, inst, LONG_ISL, LONG_OSL, LONG_C)
    df, s = simulate_colocated(model, inst, LONG_ISL, LONG_OSL, concurrency=LONG_C, duration_s=1000.0)
    m = df[df["measured"]]
    assert s["preemptions"] == 0 and fit * 0.99 < s["batch"] <= fit
    assert p.batch == pytest.approx(s["batch"], rel=0.01)
    assert m["ttft_s"].mean() > 10.0 and m["ttft_s"].mean() == pytest.approx(p.ttft_s, rel=TOLERANCE)
    assert m["tpot_s"].mean() == pytest.approx(p.tpot_s, rel=TOLERANCE)


def test_an_oversubscribed_pool_preempts_and_every_request_still_finishes(llama_fp8):
    """c = 96 > 53: the pool overflows, the engine preempts (recompute) the newest requests; each
    re-prefills and finishes its whole output, and Little's law still holds over the run."""
    model, inst = llama_fp8
    df, s = simulate_colocated(model, inst, LONG_ISL, LONG_OSL, concurrency=96, duration_s=1000.0)
    m = df[df["measured"]]
    assert s["preemptions"] > 0 and (m["preemptions"] > 0).any()
    assert m["finish_s"].notna().all()
    residence = s["mean_ttft_s"] + (LONG_OSL - 1) * s["mean_tpot_s"]
    assert s["throughput_rps"] * residence == pytest.approx(96, rel=0.05)


def test_a_prompt_preempted_before_its_first_token_starts_again_and_finishes(llama_fp8):
    """Prompts of 20,000 tokens take several steps' budgets, and 12 of them (with their outputs)
    overflow the pool: the newest admitted request, still mid-prefill, is preempted too (it holds
    pages but has no decode line yet), frees them and prefills its prompt again from the start;
    every request still finishes its whole output."""
    model, inst = llama_fp8
    df, s = simulate_colocated(model, inst, 20_000, 1_000, concurrency=12, duration_s=300.0)
    m = df[df["measured"]]
    assert s["preemptions"] > 0 and m["finish_s"].notna().all() and len(m) > 0
    assert (df.loc[df["finish_s"].notna(), "first_token_s"] > df.loc[df["finish_s"].notna(), "start_s"]).all()


@pytest.mark.xfail(strict=True, reason="c = 64 > 53 fit: the simulated engine preempts; TTFT -43% and TPOT +26% "
                   "against the closed form's queue (see the comment above)")
def test_an_oversubscribed_pool_agrees_with_the_queue_of_the_closed_form(llama_fp8):
    model, inst = llama_fp8
    p = colocated_closed_loop(model, inst, LONG_ISL, LONG_OSL, 64)
    ttft, tpot = [], []
    for seed in range(2):
        df, _ = simulate_colocated(model, inst, LONG_ISL, LONG_OSL, concurrency=64, duration_s=1000.0, seed=seed)
        m = df[df["measured"]]
        ttft.append(m["ttft_s"].to_numpy())
        tpot.append(m["tpot_s"].to_numpy())
    assert float(np.concatenate(ttft).mean()) == pytest.approx(p.ttft_s, rel=TOLERANCE)
    assert float(np.concatenate(tpot).mean()) == pytest.approx(p.tpot_s, rel=TOLERANCE)


# ----------------------------------------------------------------------------- finite benchmark runs
BURST_ISL, BURST_OSL = 8192, 256
SPREAD_SIGMA = 0.2 / 12 ** 0.5 / 0.9  # InferenceX's uniform [0.8 L, L] lengths: relative deviation 6.4%
BURST_SEEDS = range(4)


def _run_means(model, inst, c: int, k: int, sigma: float = 0.0, seeds=range(1)) -> tuple[float, float]:
    ttft, tpot = [], []
    for seed in seeds:
        df, _ = simulate_colocated(model, inst, BURST_ISL, BURST_OSL, concurrency=c, prompts_per_client=k,
                                   length_sigma=sigma, seed=seed)
        assert df["measured"].all() and len(df) == c * k
        ttft.append(df["ttft_s"].to_numpy())
        tpot.append(df["tpot_s"].to_numpy())
    return float(np.concatenate(ttft).mean()), float(np.concatenate(tpot).mean())


def test_a_finite_run_sends_its_requests_from_a_burst(minimax):
    model, inst = minimax
    df, s = simulate_colocated(model, inst, 1024, 16, concurrency=8, prompts_per_client=3)
    first = df.sort_values("id").head(8)
    assert (first["issue_s"] == 0.0).all() and len(df) == 24 and df["measured"].all()
    assert s["requests"] == 24 and s["throughput_rps"] == pytest.approx(24 / df["finish_s"].max(), rel=1e-12)
    with pytest.raises(InvalidInput, match="^prompts_per_client:"):
        simulate_colocated(model, inst, 1024, 16, rate_rps=1.0, prompts_per_client=3)
    with pytest.raises(InvalidInput, match="^prompts_per_client:"):
        simulate_colocated(model, inst, 1024, 16, concurrency=8, prompts_per_client=0)


@pytest.mark.parametrize("c", CONCURRENCIES)
def test_the_first_wave_agrees_with_the_simulation(minimax, c):
    """One request per client, fixed lengths: the burst's TTFT within 1% (measured <= 0.05%), TPOT
    within 15% (measured +0.3 / +2.2 / +12.3% with the experts EP8, the layout MiniMax-M2.5's FP8
    experts load in over 8 GPUs; +0.1 / +1.2 / +9.0% in the TP8 layout the engines refuse: the tail
    after the first request ends, module docstring)."""
    model, inst = minimax
    ttft, tpot = _run_means(model, inst, c, 1)
    p = colocated_benchmark(model, inst, BURST_ISL, BURST_OSL, c, BenchmarkRun(1))
    assert p.ttft_s == pytest.approx(ttft, rel=0.01)
    assert p.tpot_s == pytest.approx(tpot, rel=0.15)


@pytest.mark.parametrize("c", CONCURRENCIES)
def test_a_run_of_ten_per_client_agrees_with_the_simulation(minimax, c):
    """10 requests per client (InferenceX's --num-prompts 10 x CONC), lengths spread as InferenceX's,
    4 seeds pooled: mean TTFT within 8% (measured -3.7 / +3.7 / +3.3%; in the refused TP8 layout
    +2.6 / +2.9 / -2.8%, where 2 seeds moved c = 16 to +5.9%: the headroom), mean TPOT within 3%
    (measured -1.5 / -1.1 / +0.6%)."""
    model, inst = minimax
    ttft, tpot = _run_means(model, inst, c, 10, SPREAD_SIGMA, BURST_SEEDS)
    p = colocated_benchmark(model, inst, BURST_ISL, BURST_OSL, c, BenchmarkRun(10))
    assert p.ttft_s == pytest.approx(ttft, rel=0.08)
    assert p.tpot_s == pytest.approx(tpot, rel=0.03)


@pytest.mark.xfail(strict=True, reason="fixed lengths keep the burst's clients in phase: later requests "
                   "convoy behind each other's prefill (-51% at c = 4; module docstring)")
def test_a_fixed_length_run_of_ten_per_client_agrees(minimax):
    model, inst = minimax
    ttft, _ = _run_means(model, inst, 4, 10)
    assert colocated_benchmark(model, inst, BURST_ISL, BURST_OSL, 4, BenchmarkRun(10)).ttft_s == \
        pytest.approx(ttft, rel=0.10)


# ----------------------------------------------------------------------------- prefill-first engines
@pytest.fixture(scope="module")
def minimax_sglang():
    """The same model and layout under the sglang profile: a step prefills or decodes, prefill first."""
    model = load_model("minimax-m2.5")
    inst = instance("h200", 8, layout=Layout(8, "tp", "ep"), engine="sglang")
    assert not inst.engine_profile.mixed_prefill and instance("h200", 8, engine="vllm").engine_profile.mixed_prefill
    return model, inst


@pytest.mark.parametrize("c", CONCURRENCIES)
def test_a_prefill_first_engines_fixed_length_run_is_lockstep_and_agrees(minimax_sglang, c):
    """Fixed lengths on a prefill-first engine: every wave is prefilled before it decodes, ends in
    one step and sends the next wave together, so the simulated run of 3 per client is the closed
    form's lockstep wave (measured: TTFT, TPOT and throughput equal to 1e-6 at c = 4 / 16 / 64,
    ISL 8192 = the budget: each step is one whole prompt)."""
    model, inst = minimax_sglang
    df, s = simulate_colocated(model, inst, BURST_ISL, BURST_OSL, concurrency=c, prompts_per_client=3)
    p = colocated_benchmark(model, inst, BURST_ISL, BURST_OSL, c, BenchmarkRun(3))
    assert p.notes[-1].startswith(f"lockstep: fixed lengths on a prefill-first engine; every wave of {c}")
    assert (p.ttft_s, p.tpot_s, p.throughput_rps) == pytest.approx(
        (s["mean_ttft_s"], s["mean_tpot_s"], s["throughput_rps"]), rel=1e-3)
    # every wave alike: the first prompts' TTFT recurs in the last wave
    first, last = df.sort_values("issue_s").head(c), df.sort_values("issue_s").tail(c)
    assert np.sort(last["ttft_s"].to_numpy()) == pytest.approx(np.sort(first["ttft_s"].to_numpy()), rel=1e-9)


def test_a_prefill_first_burst_runs_no_decode_until_every_prompt_is_in(minimax_sglang):
    """4 prompts of 8192 at once: 4 prompt-only steps (no decode beside them), then all 4 decode
    together; request i's TPOT carries the 4 - i prompt steps after its first token."""
    model, inst = minimax_sglang
    df, _ = simulate_colocated(model, inst, BURST_ISL, BURST_OSL, concurrency=4, prompts_per_client=1)
    r = inst.engine_profile.request_overhead_s
    step = float(prefill_latency(model, inst, BURST_ISL).total_s) - r  # one whole-budget prompt step
    ttft = np.sort(df["ttft_s"].to_numpy())
    assert ttft == pytest.approx(r + step * np.arange(1, 5), rel=1e-9)
    decode = decode_step_s(model, inst, 4, BURST_ISL + BURST_OSL / 2)
    tpot = ((4 - np.arange(1, 5)) * step + (BURST_OSL - 1) * decode) / (BURST_OSL - 1)
    assert np.sort(df["tpot_s"].to_numpy())[::-1] == pytest.approx(tpot, rel=1e-6)


def _pooled_on(model, inst, **kw) -> tuple[float, float]:
    """Mean TTFT and TPOT over the measured requests of the seeded runs ``kw`` asks for."""
    seeds = kw.pop("seeds")
    ttft, tpot = [], []
    for seed in seeds:
        df, _ = simulate_colocated(model, inst, ISL, OSL, seed=seed, **kw)
        m = df[df["measured"]]
        ttft.append(m["ttft_s"].to_numpy())
        tpot.append(m["tpot_s"].to_numpy())
    return float(np.concatenate(ttft).mean()), float(np.concatenate(tpot).mean())


def _assert_open_loop_agrees(model, inst, load: float) -> None:
    """The simulated open loop at ``load`` x the closed form's largest rate, 4 seeds pooled, within
    :data:`TOLERANCE` of the closed form on mean TTFT and TPOT."""
    rate = load * max_sustainable_rate(model, inst, ISL, OSL)
    p = colocated_open_loop(model, inst, ISL, OSL, rate)
    ttft, tpot = _pooled_on(model, inst, rate_rps=rate, duration_s=OPEN_DURATION_S, warmup_s=OPEN_WARMUP_S,
                            seeds=OPEN_SEEDS)
    assert (ttft, tpot) == pytest.approx((p.ttft_s, p.tpot_s), rel=TOLERANCE)


@pytest.mark.parametrize("load", [0.30, 0.60, 0.85])
def test_a_prefill_first_open_loop_agrees_at_30_60_85_percent(minimax_sglang, load):
    """SGLang's steps (a prompt step carries no decode; decodes advance only when no prompt waits)
    in the closed form's step chain and in the simulator: mean TTFT and TPOT within 5% (measured
    TTFT -0.0 / -1.4 / -1.2%, TPOT +3.8 / +3.0 / -1.9%, simulation against closed form)."""
    _assert_open_loop_agrees(*minimax_sglang, load)


@pytest.mark.parametrize("c", [4, 16, pytest.param(64, marks=pytest.mark.xfail(
    strict=True, reason="simulated TPOT 6.8% below the closed form at c = 64 (prompts arriving in convoys share "
                        "prompt steps; module docstring)"))])
def test_a_prefill_first_closed_loop_tpot_agrees_within_5_percent(minimax_sglang, c):
    """Closed loop on SGLang: TPOT, the decode step over the share of time prompt steps leave it,
    within 5% of the simulation's (measured -0.6 / -1.3 / -6.8% at c = 4 / 16 / 64, 16 seeds)."""
    model, inst = minimax_sglang
    p = colocated_closed_loop(model, inst, ISL, OSL, c)
    _, tpot = _pooled_on(model, inst, concurrency=c, duration_s=CLOSED_DURATION_S, seeds=SEEDS)
    assert tpot == pytest.approx(p.tpot_s, rel=TOLERANCE)


@pytest.fixture(scope="module")
def minimax_sglang_polled(minimax_sglang):
    """SGLang taking in new requests every 30 decode steps (``--scheduler-recv-interval 30``, as
    InferenceX's B200 scripts launch it from 16 clients)."""
    model, inst = minimax_sglang
    return model, replace(inst, engine=inst.engine_profile.with_launch(recv_interval_steps=30))


@pytest.mark.parametrize("load", [0.30, 0.60, pytest.param(0.85, marks=pytest.mark.xfail(
    strict=True, reason="simulated TPOT 5.6% below the closed form at 85% (TTFT -4.5%)"))])
def test_a_polling_scheduler_open_loop_agrees(minimax_sglang_polled, load):
    """The closed form's step chain runs the 30 decode steps between polls as one step when no
    prompt waits, so a prompt arriving meanwhile waits for the poll and the prompts of one window
    are prefilled together; the simulator polls step by step (measured TTFT -3.7 / -2.7 / -4.5%,
    TPOT -1.8 / -1.1 / -5.6% at 30 / 60 / 85% of the largest rate; TTFT 276 ms at 30% against
    75 ms polling every step)."""
    _assert_open_loop_agrees(*minimax_sglang_polled, load)


def test_a_polling_scheduler_closed_loop_agrees_at_4_clients(minimax_sglang_polled, minimax_sglang):
    """Closed loop, 4 clients: TTFT adds 29 / 2 decode steps of waiting for the poll over the
    share of time the engine decodes (measured: simulation +1.2% TTFT, -0.7% TPOT)."""
    model, inst = minimax_sglang_polled
    p = colocated_closed_loop(model, inst, ISL, OSL, 4)
    ttft, tpot = _pooled_on(model, inst, concurrency=4, duration_s=CLOSED_DURATION_S, seeds=SEEDS)
    assert (ttft, tpot) == pytest.approx((p.ttft_s, p.tpot_s), rel=TOLERANCE)
    assert p.ttft_s > colocated_closed_loop(*minimax_sglang, ISL, OSL, 4).ttft_s + 10 * p.tpot_s


def test_a_running_request_cap_queues_the_other_clients(minimax_sglang):
    """``--max-running-requests 8`` with 16 clients: 8 run, 8 wait in the queue (closed form:
    Little's law on the queue; measured simulation -0.8% TTFT, -2.9% TPOT, 4 seeds)."""
    model, base = minimax_sglang
    inst = replace(base, engine=base.engine_profile.with_launch(max_running_requests=8))
    p = colocated_closed_loop(model, inst, ISL, OSL, 16)
    assert p.notes[0].startswith("running-request cap: the engine runs at most 8 requests (max_running_requests; memory holds ")
    ttft, tpot = _pooled_on(model, inst, concurrency=16, duration_s=CLOSED_DURATION_S, seeds=range(4))
    assert (ttft, tpot) == pytest.approx((p.ttft_s, p.tpot_s), rel=TOLERANCE)
    assert colocated_closed_loop(model, base, ISL, OSL, 16).ttft_s < p.ttft_s / 5


# ----------------------------------------------------------------------------- a prefill-bound closed loop
# Llama-3.1-8B (FP8 attention and FFN) on 4xH200, vLLM, 4,000 in / 100 out, 96 clients: the
# prompts keep the prefill budget 89% busy and ride in 97% of the steps, where the closed loop's
# round is steep in the rate. Its damped iteration (half steps from the unloaded point, the solver
# before) cycled between two rounds and stopped at their mean, TTFT 2,024 ms / TPOT 46.4 ms; the
# fixed point is 210 / 33.8 ms and the simulation (4 seeds x 100 s) 252 / 32.4 ms (TPOT -4.1%; the
# TTFT gap is the convoys').
SATURATED = dict(isl=4000, osl=100, c=96)


@pytest.fixture(scope="module")
def llama8_fp8_tp4():
    return load_model("llama-3.1-8b").with_gemm_dtypes(attention="fp8", dense_ffn="fp8"), instance("h200", 4,
                                                                                                    engine="vllm")


def test_a_prefill_bound_closed_loop_is_the_rounds_fixed_point(llama8_fp8_tp4):
    from prfaas_plan.serving import _closed_round, step_table

    model, inst = llama8_fp8_tp4
    isl, osl, c = SATURATED["isl"], SATURATED["osl"], SATURATED["c"]
    p = colocated_closed_loop(model, inst, isl, osl, c)
    assert p.notes == ()
    ttft, tpot, _ = _closed_round(step_table(model, inst, isl, osl), isl, osl, float(c), p.ttft_s, p.tpot_s)
    assert (ttft, tpot) == pytest.approx((p.ttft_s, p.tpot_s), rel=1e-9)
    assert p.throughput_rps * (p.ttft_s + (osl - 1) * p.tpot_s) == pytest.approx(c, rel=1e-9)  # Little


def test_a_prefill_bound_closed_loop_tpot_agrees_with_the_simulation(llama8_fp8_tp4):
    model, inst = llama8_fp8_tp4
    isl, osl, c = SATURATED["isl"], SATURATED["osl"], SATURATED["c"]
    p = colocated_closed_loop(model, inst, isl, osl, c)
    tpot = []
    for seed in range(4):
        df, _ = simulate_colocated(model, inst, isl, osl, concurrency=c, duration_s=CLOSED_DURATION_S, seed=seed)
        tpot.append(df[df["measured"]]["tpot_s"].to_numpy())
    assert float(np.concatenate(tpot).mean()) == pytest.approx(p.tpot_s, rel=TOLERANCE)


def test_sglangs_max_prefill_tokens_admits_whole_prompts():
    """SGLang's PrefillAdder: a prompt after a step's first joins only while its tokens fit
    --max-prefill-tokens less the step's decodes and what the step took (rem_input_tokens), the
    first always, split only where the step budget ends (rem_chunk_tokens); vLLM fills the budget."""
    sglang = load_engine("sglang")
    assert sglang.max_prefill_tokens == 16384  # ServerArgs' default
    room = sglang.prompt_room_tokens
    assert room(16384, 5000, 0) == 15000  # 3 whole prompts, not 3.28
    assert room(16384, 5000, 1385) == 10000  # 14,999 left: 2 whole ones
    assert room(8192, 2048, 10) == 8182  # under its default the budget (8192 on H200) binds
    assert room(16384, 9000, 0) == 9000  # one whole prompt a step
    assert room(16384, 20000, 100) == 16284  # the first prompt split at what the decodes leave
    assert load_engine("vllm").prompt_room_tokens(16384, 5000, 100) == 16284
    # the simulator's step: 4 prompts of 5,000 waiting, 16,384 tokens of budget and cap
    reqs = _Requests()
    for _ in range(4):
        reqs.add(0.0, 0.0, 5000, 10, 0)
    pool = _Pool(1e18, 0.0, 1.0)
    queue = deque(range(4))
    assert [c[1] for c in _schedule(queue, reqs, 16384, pool, 0, input_room_tokens=16384.0)] == [5000, 5000, 5000]
    assert [c[1] for c in _schedule(queue, reqs, 16384, pool, 0)] == [5000, 5000, 5000, 1384]


def test_a_whole_prompt_cap_keeps_the_lockstep_agreement(minimax_sglang):
    """A cap that binds (--max-prefill-tokens 6,000 beside the 8,192 budget: two whole 2,048-token
    prompts a step, 4,096 tokens, where the budget alone takes four): the closed form's lockstep
    wave and the simulated run of 3 per client agree (measured: TTFT +0.17 / -0.19%, TPOT and
    throughput within 0.04%, at c = 4 / 16; the closed form times a step of two prompts as one chunk
    of their tokens, the simulator each prompt's attention over its own prefix), and at c = 4 the
    burst's first pair is out sooner than under the budget alone (measured TTFT 129 against 152 ms)."""
    model, inst = minimax_sglang
    capped = instance("h200", 8, layout=inst.layout, engine=inst.engine_profile.with_launch(max_prefill_tokens=6000))
    for c in (4, 16):
        _, s = simulate_colocated(model, capped, ISL, BURST_OSL, concurrency=c, prompts_per_client=3)
        p = colocated_benchmark(model, capped, ISL, BURST_OSL, c, BenchmarkRun(3))
        assert (p.ttft_s, p.tpot_s, p.throughput_rps) == pytest.approx(
            (s["mean_ttft_s"], s["mean_tpot_s"], s["throughput_rps"]), rel=5e-3)
    four = colocated_benchmark(model, capped, ISL, BURST_OSL, 4, BenchmarkRun(3))
    free = colocated_benchmark(model, inst, ISL, BURST_OSL, 4, BenchmarkRun(3))
    assert four.ttft_s < 0.9 * free.ttft_s


@pytest.fixture(scope="module")
def minimax_sglang_capped(minimax_sglang):
    """SGLang with ``--max-prefill-tokens 2100``: one whole 2,048-token prompt a step, not four."""
    model, inst = minimax_sglang
    return model, replace(inst, engine=inst.engine_profile.with_launch(max_prefill_tokens=2100))


def test_a_whole_prompt_cap_steady_state_agrees(minimax_sglang_capped, minimax_sglang):
    """The cap in the steady state's step chain (open loop) and closed round against the simulator:
    open loop at 60% of the capped engine's largest rate, mean TTFT and TPOT within 5% (measured
    +0.2% / +3.8%; a closed form that ignored the cap would be 8.9% off in TPOT); closed loop at 16
    clients, TPOT within 5% (+0.3%); and the cap lowers the largest sustainable rate (18.7 against
    20.7 requests/s: a prompt step carries a quarter of the tokens, so per-step costs weigh more)."""
    model, inst = minimax_sglang_capped
    _assert_open_loop_agrees(model, inst, 0.60)
    p = colocated_closed_loop(model, inst, ISL, OSL, 16)
    _, tpot = _pooled_on(model, inst, concurrency=16, duration_s=CLOSED_DURATION_S, seeds=SEEDS)
    assert tpot == pytest.approx(p.tpot_s, rel=TOLERANCE)
    assert max_sustainable_rate(model, inst, ISL, OSL) < max_sustainable_rate(*minimax_sglang, ISL, OSL)


def test_a_step_budget_spent_by_one_prompt_admits_no_other():
    """A step of 8,192 tokens and two 10,000-token prompts waiting: the first takes the whole
    budget (its prompt's pages reserved), the second gets no chunk and holds no pages yet; the next
    step finishes the first (1,808 tokens) and starts the second with the 6,384 left."""
    from collections import deque

    from prfaas_plan.sim.colocated import _Pool, _Requests, _schedule

    reqs, pool = _Requests(), _Pool(capacity_b=1e12, fixed_b=0.0, per_token_b=1.0)
    queue = deque(reqs.add(0.0, 0.0, 10_000, 10, c) for c in range(2))
    assert _schedule(queue, reqs, 8_192, pool, 0) == [(0, 8_192, 0)]
    assert list(pool.admitted) == [0] and pool.used_b(0) == 10_000
    reqs.done[0] = 8_192
    assert _schedule(queue, reqs, 8_192, pool, 1) == [(0, 1_808, 8_192), (1, 6_384, 0)]
    assert list(pool.admitted) == [0, 1] and pool.used_b(1) == 20_000


def test_a_one_token_output_finishes_with_its_prefill(minimax):
    """OSL 1: the prefill's step yields the only output token, so the request finishes there (no
    decode step, no TPOT), and one client's requests each take the kernel model's prefill alone."""
    model, inst = minimax
    df, s = simulate_colocated(model, inst, ISL, 1, concurrency=1, duration_s=20.0)
    m = df[df["measured"]]
    assert len(m) > 0 and (m["finish_s"] == m["first_token_s"]).all() and m["tpot_s"].isna().all()
    assert s["mean_ttft_s"] == pytest.approx(float(prefill_latency(model, inst, ISL).total_s), rel=1e-9)


def _window_measure(intervals, lo_s: float, hi_s: float) -> float:
    """Seconds of [lo_s, hi_s) covered by the union of ``intervals`` (pairs of start, end)."""
    covered, reach = 0.0, lo_s
    for a, b in sorted((max(a, lo_s), min(b, hi_s)) for a, b in intervals if np.isfinite(a) and np.isfinite(b)):
        if b > reach:
            covered += b - max(a, reach)
            reach = b
    return covered


@pytest.mark.parametrize("load", [dict(concurrency=16), dict(rate_rps=17.0)])
def test_the_window_figures_are_the_requests_timestamps_integrated_over_the_window(minimax, load):
    """The summary's time-averaged figures count the steps that start in the measured window, not
    the warm-up nor the drain after it (which lower them: over the whole run the batch reads 14.5
    against 15.6 at c = 16, 112 against 140 at 17 req/s). Independently, from the requests' own
    timestamps: the decode batch is Little's law, the requests decoding (first token to finish)
    integrated over the window over its length; the prefill share is the window's time covered by
    some prompt's prefill (first chunk to first token; a mixed engine runs a started prompt's
    chunks in every step); steps x mean step is the window, to one step."""
    model, inst = minimax
    duration_s, warmup_s = 30.0, 6.0
    df, s = simulate_colocated(model, inst, ISL, OSL, duration_s=duration_s, warmup_s=warmup_s, seed=1, **load)
    window_s = duration_s - warmup_s
    first, finish = df["first_token_s"].to_numpy(), df["finish_s"].to_numpy()
    decoding_s = np.clip(np.minimum(finish, duration_s) - np.maximum(first, warmup_s), 0.0, None)
    assert s["preemptions"] == 0 and s["batch"] > 10
    assert s["batch"] == pytest.approx(np.nansum(decoding_s) / window_s, rel=5e-3)
    prefilling_s = _window_measure(zip(df["start_s"], df["first_token_s"]), warmup_s, duration_s)
    assert s["prefill_share"] == pytest.approx(prefilling_s / window_s, rel=1e-2)
    assert abs(s["steps"] * s["mean_step_s"] - window_s) <= s["mean_step_s"] * 3
