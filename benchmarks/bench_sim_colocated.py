"""The colocated step simulation against the closed form (issue #14): figures and run times.

MiniMax-M2.5 on 8xH200 (vLLM profile, attention TP8, experts EP8), ISL 2048 / OSL 256. Prints,
per load, the closed form's and the simulation's mean TTFT and TPOT, their gaps, and the
simulation's wall time:

* closed loop at c = 4, 16, 64: 16 seeds x 100 s pooled (deterministic request overhead), and
  the same with exponentially distributed request overheads of the same mean (``overhead_jitter``);
* open loop at the closed loop's throughputs (300 s);
* open loop at 30, 60 and 85% of the closed form's largest sustainable rate (4 seeds x 100 s
  pooled, the first 40 s, more than a request's residence at 85%, unmeasured);
* memory (on-demand KV pages, recompute preemption): Llama-3.1-70B FP8 on one H200 (vLLM
  profile), ISL 1024 / OSL 4096, closed loop at c = 32, 40, 48, 64, 96 around the 53 requests the
  pool holds at their mean context (2 seeds x 1,000 s pooled), with the preemptions counted;
* speculative decoding (MTP k = 2, per-position acceptance 0.8 / 0.6), DeepSeek-V3 on 8xH200
  (SGLang profile), ISL 1024 / OSL 256: closed loop at c = 1, 8, 32 (4 seeds x 60 s pooled) and
  open loop at 30 and 60% of the closed form's largest sustainable rate (4 seeds x 60 s pooled);
* finite benchmark runs from a burst start (``prompts_per_client``, as ``benchmark_serving.py
  --request-rate inf`` runs) against :func:`~prfaas_plan.serving.colocated_benchmark`, ISL 8192 /
  OSL 256 at c = 4, 16, 64: one request per client (the first wave alone, fixed lengths), 10 per
  client with fixed lengths, and 10 per client with lengths spread as InferenceX's (lognormal,
  relative deviation 6.4%, 4 seeds pooled).

Run: python benchmarks/bench_sim_colocated.py
(times depend on the machine and its load).
"""

from __future__ import annotations

import time

import numpy as np

from prfaas_plan.hardware import instance
from prfaas_plan.model import load_model
from prfaas_plan.serving import (
    BenchmarkRun,
    SpecDecode,
    colocated_benchmark,
    colocated_closed_loop,
    colocated_open_loop,
    max_sustainable_rate,
)
from prfaas_plan.sim import simulate_colocated

ISL, OSL = 2048, 256


def _row(label: str, p, ttft: float, tpot: float, wall_s: float, n: int) -> None:
    print(f"{label:28s} closed form {p.ttft_s * 1e3:7.1f} / {p.tpot_s * 1e3:6.2f} ms   simulation "
          f"{ttft * 1e3:8.1f} / {tpot * 1e3:6.2f} ms   gap {ttft / p.ttft_s - 1:+7.1%} / {tpot / p.tpot_s - 1:+6.1%}"
          f"   {n:6d} requests  {wall_s:5.2f} s")


def _pooled(model, inst, c: int, jitter: bool) -> tuple[float, float, int]:
    ttft, tpot = [], []
    for seed in range(16):
        df, _ = simulate_colocated(model, inst, ISL, OSL, concurrency=c, duration_s=100.0, seed=seed,
                                   overhead_jitter=jitter)
        m = df[df["measured"]]
        ttft.append(m["ttft_s"].to_numpy())
        tpot.append(m["tpot_s"].to_numpy())
    t = np.concatenate(ttft)
    return float(t.mean()), float(np.concatenate(tpot).mean()), len(t)


def _max_rate(model, inst) -> float:
    """The closed form's largest sustainable Poisson rate."""
    return max_sustainable_rate(model, inst, ISL, OSL)


def main() -> None:
    model, inst = load_model("minimax-m2.5"), instance("h200", 8, engine="vllm")
    colocated_closed_loop(model, inst, ISL, OSL, 1)  # load the kernel tables once
    throughputs = {}
    for jitter in (False, True):
        for c in (4, 16, 64):
            p = colocated_closed_loop(model, inst, ISL, OSL, c)
            throughputs[c] = p.throughput_rps
            t = time.perf_counter()
            ttft, tpot, n = _pooled(model, inst, c, jitter)
            _row(f"closed c={c}{' jitter' if jitter else ''}", p, ttft, tpot, time.perf_counter() - t, n)
    for c in (4, 16, 64):
        p = colocated_open_loop(model, inst, ISL, OSL, throughputs[c])
        t = time.perf_counter()
        _, s = simulate_colocated(model, inst, ISL, OSL, rate_rps=throughputs[c], duration_s=300.0)
        _row(f"open {throughputs[c]:.3f} rps", p, s["mean_ttft_s"], s["mean_tpot_s"], time.perf_counter() - t,
             s["requests"])
    top = _max_rate(model, inst)
    print(f"closed form's largest sustainable rate: {top:.1f} rps")
    for load in (0.3, 0.6, 0.85):
        p = colocated_open_loop(model, inst, ISL, OSL, load * top)
        t = time.perf_counter()
        runs = [simulate_colocated(model, inst, ISL, OSL, rate_rps=load * top, duration_s=100.0, warmup_s=40.0,
                                   seed=seed)[0] for seed in range(4)]
        m = [df[df["measured"]] for df in runs]
        ttft = float(np.concatenate([x["ttft_s"].to_numpy() for x in m]).mean())
        tpot = float(np.concatenate([x["tpot_s"].to_numpy() for x in m]).mean())
        _row(f"open {load:.0%} = {load * top:.1f} rps", p, ttft, tpot, time.perf_counter() - t, sum(len(x) for x in m))


def memory() -> None:
    """Closed form vs simulation where the KV pool binds: pages allocated per generated token,
    the newest requests preempted (recompute) when the decodes' next tokens do not fit."""
    model = load_model("llama-3.1-70b").with_gemm_dtypes(attention="fp8", dense_ffn="fp8")
    inst, isl, osl = instance("h200", 1, engine="vllm"), 1024, 4096
    for c in (32, 40, 48, 64, 96):
        p = colocated_closed_loop(model, inst, isl, osl, c)
        t = time.perf_counter()
        runs = [simulate_colocated(model, inst, isl, osl, concurrency=c, duration_s=1000.0, seed=s) for s in range(2)]
        m = [df[df["measured"]] for df, _ in runs]
        ttft = float(np.concatenate([x["ttft_s"].to_numpy() for x in m]).mean())
        tpot = float(np.concatenate([x["tpot_s"].to_numpy() for x in m]).mean())
        _row(f"memory c={c} ({sum(s['preemptions'] for _, s in runs)} preempted)", p, ttft, tpot,
             time.perf_counter() - t, sum(len(x) for x in m))


def spec_decode() -> None:
    """Closed form vs simulation with MTP speculative decoding (each step's accepted tokens drawn)."""
    model, inst = load_model("deepseek-v3"), instance("h200", 8, engine="sglang")
    spec, isl, osl, seeds = SpecDecode(2, acceptance_rates=(0.8, 0.6)), 1024, 256, range(4)
    top = max_sustainable_rate(model, inst, isl, osl, spec=spec)
    loads = [("closed", c, colocated_closed_loop(model, inst, isl, osl, c, spec=spec)) for c in (1, 8, 32)]
    loads += [("open", f * top, colocated_open_loop(model, inst, isl, osl, f * top, spec=spec)) for f in (0.3, 0.6)]
    for mode, load, p in loads:
        t = time.perf_counter()
        kw = dict(concurrency=load) if mode == "closed" else dict(rate_rps=load)
        runs = [simulate_colocated(model, inst, isl, osl, duration_s=60.0, seed=s, spec=spec, **kw)[0] for s in seeds]
        m = [df[df["measured"]] for df in runs]
        ttft = float(np.concatenate([x["ttft_s"].to_numpy() for x in m]).mean())
        tpot = float(np.concatenate([x["tpot_s"].to_numpy() for x in m]).mean())
        _row(f"MTP {mode} {load:.3g}", p, ttft, tpot, time.perf_counter() - t, sum(len(x) for x in m))


def burst() -> None:
    """Closed form vs simulation of finite runs from a burst start (every client's first request at t = 0)."""
    model, inst = load_model("minimax-m2.5"), instance("h200", 8, engine="vllm")
    isl, osl, sigma = 8192, 256, 0.2 / 12 ** 0.5 / 0.9
    for k, spread, seeds in ((1, 0.0, range(1)), (10, 0.0, range(1)), (10, sigma, range(4))):
        for c in (4, 16, 64):
            p = colocated_benchmark(model, inst, isl, osl, c, BenchmarkRun(k))
            t = time.perf_counter()
            runs = [simulate_colocated(model, inst, isl, osl, concurrency=c, prompts_per_client=k, length_sigma=spread,
                                       seed=s)[0] for s in seeds]
            ttft = float(np.concatenate([x["ttft_s"].to_numpy() for x in runs]).mean())
            tpot = float(np.concatenate([x["tpot_s"].to_numpy() for x in runs]).mean())
            _row(f"burst {k}/client c={c}{' spread' if spread else ''}", p, ttft, tpot, time.perf_counter() - t,
                 sum(len(x) for x in runs))


if __name__ == "__main__":
    main()
    memory()
    spec_decode()
    burst()
