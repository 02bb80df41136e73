"""Performance model against the PrfaaS paper's published 8xH200 measurements and closed forms."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import prfaas_plan as pp
from prfaas_plan.bandwidth import (
    bandwidth_table,
    cluster_egress_gbps,
    kv_throughput_gbps,
    max_prefill_gpus,
    pd_balance,
)
from prfaas_plan.kvcache import per_gpu_kv_bytes
from prfaas_plan.perf.roofline import (
    MeasuredProfile,
    analytic_prefill,
    decode_capacity,
    decode_step_s,
    expected_experts_touched,
    layer_costs,
)

# PrfaaS paper Table 3: Phi_kv at 32K tokens on 8xH200, Gbps
PAPER_PHI_32K_GBPS = {"minimax-m2.5": 59.93, "qwen3-235b-a22b": 33.35, "qwen3.5-397b-a17b": 8.25,
                      "mimo-v2-flash": 4.66}
README_NAMES = {"minimax-m2.5": "MiniMax-M2.5", "qwen3-235b-a22b": "Qwen3-235B", "qwen3.5-397b-a17b": "Qwen3.5-397B",
                "mimo-v2-flash": "MiMo-V2-Flash"}


def readme_anchors() -> str:
    """The README's "How the numbers are anchored" section, one line (its claims are read from it)."""
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    return " ".join(text.split("## How the numbers are anchored", 1)[1].split("\n## ", 1)[0].split())


def readme_phi_error_percent(model_id: str) -> int:
    """Our Phi_kv at 32K against Table 3, in percent, as the README states it for ``model_id``."""
    match = re.search(re.escape(README_NAMES[model_id]) + r" ([+-]?\d+)%", readme_anchors())
    assert match, f"README states no Phi_kv error for {model_id}"
    return int(match.group(1))
# PrfaaS paper Table 5: the 1T hybrid model on 8xH200, seconds
TABLE5_PREFILL_S = {1024: 0.44, 8192: 0.72, 32768: 1.84, 131072: 7.40}


@pytest.fixture(scope="module")
def h200():
    return pp.instance("h200", gpus=8)


# The H200 efficiency factors are fitted to these same eight published points (in-sample: these
# bands test that one set of factors fits every model); the leave-one-out test below is the
# out-of-sample check.
@pytest.mark.parametrize("model_id", sorted(PAPER_PHI_32K_GBPS))
def test_phi_kv_at_32k_within_30_percent_of_paper(h200, model_id):
    phi = kv_throughput_gbps(pp.load_model(model_id), h200, 32768)
    assert phi == pytest.approx(PAPER_PHI_32K_GBPS[model_id], rel=0.30)
    # and off by the percentage the README states for it
    assert round(100 * (phi / PAPER_PHI_32K_GBPS[model_id] - 1)) == readme_phi_error_percent(model_id)


def test_phi_kv_ratios_within_25_percent(h200):
    phi = {m: kv_throughput_gbps(pp.load_model(m), h200, 32768) for m in PAPER_PHI_32K_GBPS}
    p = PAPER_PHI_32K_GBPS
    assert phi["minimax-m2.5"] / phi["mimo-v2-flash"] == pytest.approx(p["minimax-m2.5"] / p["mimo-v2-flash"], rel=0.25)
    assert phi["qwen3-235b-a22b"] / phi["qwen3.5-397b-a17b"] == pytest.approx(
        p["qwen3-235b-a22b"] / p["qwen3.5-397b-a17b"], rel=0.25)


def test_eq2_worked_examples(h200):
    # Eq. 2 with the paper's own Phi: 512 / 8 instances x 59.93 Gbps = 3.84 Tbps; x 33.35 = 2.13 Tbps
    for model_id, tbps in (("minimax-m2.5", 3.8), ("qwen3-235b-a22b", 2.1)):
        m = pp.load_model(model_id)
        t = float(pp.kv_bytes(m, 32768)) * 8 / (PAPER_PHI_32K_GBPS[model_id] * 1e9)
        prof = MeasuredProfile((1024, 32768), (t / 32, t))
        assert cluster_egress_gbps(m, h200, 512, 32768, profile=prof) / 1e3 == pytest.approx(tbps, rel=0.02)
        # and with our own latency model, within the Phi band
        assert cluster_egress_gbps(m, h200, 512, 32768) / 1e3 == pytest.approx(tbps, rel=0.30)


@pytest.mark.parametrize("tokens", sorted(TABLE5_PREFILL_S))
def test_1t_prefill_vs_table5(h200, tokens):
    lat = analytic_prefill(pp.load_model("kimi-linear-1t"), h200, tokens)
    assert float(lat.total_s) == pytest.approx(TABLE5_PREFILL_S[tokens], rel=0.15)
    assert lat.bound == "compute"


def test_vectorised_matches_scalar(h200):
    m = pp.load_model("mimo-v2-flash")
    ls = np.array([1024, 5000, 32768, 100000])
    vec = pp.prefill_time_s(m, h200, ls)
    assert np.allclose(vec, [pp.prefill_time_s(m, h200, int(x)) for x in ls])
    assert np.all(np.diff(vec) > 0)


def test_measured_profile_interpolates_linearly():
    prof = MeasuredProfile(tuple(TABLE5_PREFILL_S), tuple(TABLE5_PREFILL_S.values()))
    assert prof.prefill_time_s(8192) == pytest.approx(0.72)
    mid = (8192 + 32768) / 2
    assert prof.prefill_time_s(mid) == pytest.approx((0.72 + 1.84) / 2)


def test_expected_experts_closed_form_vs_monte_carlo():
    rng = np.random.default_rng(0)
    e, k, b = 256, 8, 32
    draws = [len({x for _ in range(b) for x in rng.choice(e, k, replace=False)}) for _ in range(2000)]
    assert expected_experts_touched(e, k, b) == pytest.approx(np.mean(draws), rel=0.01)


def test_decode_capacity_meets_slo_and_is_maximal():
    # A TPOT SLO tight enough to bind before memory does: the batch is the largest whose step
    # meets it, one more misses it
    m, h20 = pp.load_model("kimi-linear-1t"), pp.instance("h20", 8)
    cap = decode_capacity(m, h20, 28000, 0.0125)
    assert cap.binding == "tpot" and cap.batch_max < cap.memory_batch_max
    assert decode_step_s(m, h20, cap.batch_max, 28000) <= 0.0125 < decode_step_s(m, h20, cap.batch_max + 1, 28000)
    assert cap.step_s == decode_step_s(m, h20, cap.batch_max, 28000)
    assert decode_capacity(m, h20, 100000, 0.025).batch_max <= decode_capacity(m, h20, 28000, 0.025).batch_max


def test_int4_qat_layout_gives_kimi_k2_thinkings_checkpoint_size():
    # Kimi-K2-Thinking: routed experts int4 with a bf16 scale per 32 weights, the rest bf16
    # (its quantization_config); its published checkpoint is 594 GB
    assert layer_costs(pp.load_model("kimi-k2-thinking")).weight_bytes / 1e9 == pytest.approx(594, rel=0.005)


def test_every_tp_rank_holds_the_whole_mla_latent_as_vllm_reports():
    # vLLM, Kimi-K2-Thinking on 8xH200 TP8: "Available KV cache memory: 46.80 GiB" per GPU and
    # "GPU KV cache size: 715,072 tokens" for the instance: each rank holds all tokens' latents
    held = per_gpu_kv_bytes(pp.load_model("kimi-k2-thinking"), 715_072, 8)
    assert held / 2**30 == pytest.approx(46.80, abs=0.005)


def _kimi_linear_1t_weight_bytes() -> float:
    """The INT4 QAT layout by hand from the model_db shapes: routed experts int4 + a bf16 scale per
    32 weights (0.5625 B), every other weight bf16; KDA gates low-rank as in Kimi-Linear's
    checkpoint; norms left out."""
    h, inner, d = 7168, 60 * 128, 128
    kda = 3 * h * inner + 2 * (h * d + d * inner) + h * 60 + inner * h + 3 * inner * 4 + 60 + inner
    mla = h * 1536 + 1536 * 64 * 192 + h * 576 + 512 * 64 * 256 + 64 * 128 * h
    bf16 = 45 * kda + 15 * mla + 3 * h * 18432 + 59 * (3 * h * 2048 + h * 384) + 2 * 163840 * h
    return 2 * bf16 + 0.5625 * 59 * 384 * 3 * h * 2048  # 595.50 GB


def test_decode_batch_fills_what_weights_and_engine_reserve_leave():
    # kimi-linear-1t on 8xH20 at the case study's decode context (27,600 + 512 tokens), by hand:
    # per GPU 0.9 x 96 GiB, minus 595.50 GB / 8 of weights, minus 10.9 GiB of engine reserve;
    # per request per GPU 15 MLA layers x 1,152 B x 28,112 tokens (the latent, replicated) plus
    # 8 of the 60 KDA heads' states (45 layers x 60 heads x 67,840 B x 8 / 60)
    m, h20 = pp.load_model("kimi-linear-1t"), pp.instance("h20", 8)
    weights = _kimi_linear_1t_weight_bytes()
    assert weights / 1e9 == pytest.approx(595.50, abs=0.005)
    assert layer_costs(m).weight_bytes == weights
    free = 0.9 * 96 * 2**30 - weights / 8 - 10.9 * 2**30
    per_req = 15 * 1152 * 28112 + 45 * 60 * 67840 * 8 / 60
    cap = decode_capacity(m, h20, 28112, 0.025)
    assert cap.memory_batch_max == int(free // per_req) == 12
    assert cap.binding == "memory" and cap.batch_max == 12


def test_pd_balance_is_rate_ratio():
    m = pp.load_model("kimi-linear-1t")
    bal = pd_balance(m, pp.instance("h200"), pp.instance("h20"), 32768, 1024, 0.025)
    assert bal.decode_per_prefill_instance == pytest.approx(bal.prefill_rps_per_instance / bal.decode_rps_per_instance)
    assert bal.decode_rps_per_instance == pytest.approx(bal.decode_batch_max / (bal.decode_step_s * 1024))


def test_max_prefill_gpus_fits_link(h200):
    m = pp.load_model("minimax-m2.5")
    gpus = max_prefill_gpus(m, h200, 32768, 100, 0.9)
    phi = kv_throughput_gbps(m, h200, 32768)
    assert gpus / 8 * phi <= 90 < (gpus / 8 + 1) * phi


def test_bandwidth_table_columns_against_closed_forms(h200):
    # The table the CLI prints: Eq. 1 from its own S_kv and T columns, Eq. 2 and the largest
    # prefill cluster a 100 Gbps line (90% usable) feeds, each by its closed form
    models = [pp.load_model(m) for m in ("minimax-m2.5", "kimi-linear-1t")]
    df = bandwidth_table(models, h200, [8192, 32768], cluster_gpus=512, link_gbps=100, link_efficiency=0.9)
    for row in df.itertuples():
        phi = row.kv_mib * 2**20 * 8 / row.prefill_s / 1e9
        assert row.phi_kv_gbps == pytest.approx(phi, rel=1e-12)
        assert row.cluster_egress_gbps == pytest.approx(512 / 8 * phi, rel=1e-12)
        instances = int(90 // phi)  # whole instances whose streams fit 90 Gbps
        assert row.max_prefill_gpus_on_link == 8 * instances
        assert instances * phi <= 90 < (instances + 1) * phi


def test_bad_inputs_are_plan_errors(h200):
    m = pp.load_model("qwen3-235b-a22b")
    with pytest.raises(pp.PlanError, match="gpus"):
        pp.instance("h200", gpus=0)
    with pytest.raises(pp.PlanError, match="unknown hardware"):
        pp.instance("h2000")
    with pytest.raises(pp.PlanError, match="exceeds"):
        pp.prefill_time_s(m, h200, m.max_context_tokens + 1)


def test_h200_fit_leave_one_out():
    """Fit the three H200 factors on seven of the paper's eight measurements, predict the eighth.
    Out of sample the prefill latency is off by the median and worst percentages the README states."""
    from prfaas_plan.perf.calibration import fit_prefill, load_observations, predict

    obs = load_observations(Path(__file__).resolve().parents[1] / "bench_results" / "prfaas-paper-h200.yaml")
    start = pp.load_gpu("h200").efficiency
    errors = []
    for i, held_out in enumerate(obs):
        eff, _ = fit_prefill(obs[:i] + obs[i + 1:], start, ("gemm", "attention", "prefill_overhead_s"))
        errors.append(predict([held_out], eff)[0] / held_out.prefill_s - 1)
    errors = np.abs(errors)
    claim = re.search(r"held-out prefill latency is off by (\d+)% \(median\) and (\d+)% \(worst, ([^)]+)\)",
                      readme_anchors())
    assert claim, "README states no leave-one-out figures"
    assert round(100 * np.median(errors)) == int(claim.group(1)), errors
    assert round(100 * errors.max()) == int(claim.group(2)), errors
    assert README_NAMES[obs[int(np.argmax(errors))].model.id] == claim.group(3)
