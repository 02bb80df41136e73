"""The microbenchmark harness (prfaas_plan.bench): scaled-down models, their real KV tensors, the
chunked linear-attention kernel, loopback transfer, calibration and held-out validation.

Units: seconds, bytes, tokens, Gbps = 1e9 bit/s. The end-to-end test (marked ``slow``, run by
default; deselect with ``-m "not slow"``) runs the CPU quick harness, calibrates on its
calibration cases and asserts the median absolute error of predicted prefill latency on the
held-out cases.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from prfaas_plan import bench  # noqa: E402
from prfaas_plan.cli import main  # noqa: E402
from prfaas_plan.hardware import load_gpu  # noqa: E402
from prfaas_plan.kvcache import CacheSettings, kv_bytes, recurrent_dtype  # noqa: E402
from prfaas_plan.model.arch import list_model_specs  # noqa: E402
from prfaas_plan.perf.roofline import layer_costs  # noqa: E402
from prfaas_plan.units import DTYPE_BYTES  # noqa: E402

PAPER_OBSERVATIONS = Path(__file__).resolve().parents[1] / "bench_results" / "prfaas-paper-h200.yaml"
THREE_MIXES = ("llama-3.1-70b", "kimi-linear-48b-a3b", "mimo-v2-flash")
"""Dense GQA; MLA + KDA hybrid; SWA + GQA hybrid: the held-out layer mixes the issue names."""

CPU_SCALE = bench.PROFILES["cpu-quick"].scale
TINY_SCALE = bench.ScaleSpec(hidden_size=64, dim_scale=0.125, layers=8, max_experts=4, max_experts_per_token=2,
                             vocab_size=256)
"""A smaller copy for the structural tests (cache bytes and weights do not depend on size; the
harness itself checks the cache bytes of every CPU-quick-scale case, see the slow test)."""
MAX_MEDIAN_ABS_ERROR_PCT = 30.0
"""Acceptance bound on the median |predicted / measured - 1| over held-out cases."""

QUICK_BUDGET_S = 120.0
"""run + calibrate + validate of the CPU quick harness must finish within this (2 minutes)."""

SETTINGS = {
    "vllm-bf16": CacheSettings(),
    "sglang-fp32-states": CacheSettings(engine="sglang"),
    "fp8-paged16": CacheSettings(kv_dtype="fp8", block_tokens=16),
    "fp32-kv-fp32-conv": CacheSettings(kv_dtype="fp32", conv_dtype="fp32", state_dtype="bf16"),
}
TOKEN_COUNTS = (1, 3, 64, 100, 129, 300)
"""Lengths around the conv kernel (3), the linear chunk (64), the SWA window (128) and pages (16)."""


def _cli(*argv: str) -> None:
    """Run the CLI in-process; typer ends a successful command with SystemExit(0)."""
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    assert exc.value.code in (0, None), argv


@pytest.fixture(scope="module")
def scaled() -> dict:
    """Every model_db entry: the CPU-quick-scale spec, and a tiny-scale spec with its torch model."""
    out = {}
    for spec in list_model_specs():
        tiny = bench.scale_model(spec, TINY_SCALE, "fp32")
        out[spec.id] = (spec, bench.scale_model(spec, CPU_SCALE, "fp32"), tiny,
                        bench.ScaledModel(tiny, "cpu", "fp32", seed=1))
    return out


def test_scale_model_keeps_layer_kinds_and_shares(scaled):
    for model_id, (full, small, _, _) in scaled.items():
        kinds_full = {full.attention[n].kind for n in full.layer_kinds}
        kinds_small = {small.attention[n].kind for n in small.layer_kinds}
        assert kinds_small == kinds_full, model_id
        assert small.layers.count == CPU_SCALE.layers and small.hidden_size == CPU_SCALE.hidden_size
        assert len(small.layer_kinds) == small.layers.count  # no stale cached pattern from model_copy
        for name, count in small.layer_counts().items():
            share = full.layer_counts()[name] * small.layers.count / full.layers.count
            assert abs(count - share) <= 1.0, (model_id, name, count, share)  # rounding, >= 1 per kind
        for name, attn in small.attention.items():
            if attn.kind == "swa":
                assert attn.window_tokens == full.attention[name].window_tokens  # windows stay in tokens
        assert (small.ffn.num_experts > 0) == (full.ffn.num_experts > 0)
        assert small.ffn.experts_per_token <= CPU_SCALE.max_experts_per_token or not small.ffn.num_experts
        assert small.active_params <= small.total_params


def test_kimi_linear_pattern_matches_the_real_period(scaled):
    small = scaled["kimi-linear-48b-a3b"][1]
    assert scaled["kimi-linear-48b-a3b"][2].layer_kinds == small.layer_kinds
    assert small.layer_kinds == ("kda", "kda", "kda", "mla", "kda", "kda", "kda", "mla")


def test_torch_weights_are_exactly_the_roofline_weights(scaled):
    """The torch layers hold exactly the GEMM weights perf.layer_costs counts (so the roofline's
    FLOPs are the benchmarked model's FLOPs), and total_params counts every parameter."""
    for model_id, (_, _, small, model) in scaled.items():
        costs = layer_costs(small)
        assert model.gemm_params() * DTYPE_BYTES["fp32"] == costs.weight_bytes, model_id
        assert model.total_params() == small.total_params, model_id


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_measured_kv_tensor_bytes_equal_cache_model(scaled, setting):
    """Sum of tensor.nbytes of the cache a real forward returns == kvcache.kv_bytes, exactly, for
    every model_db layer mix (the three named mixes included) and cache setting."""
    settings = SETTINGS[setting]
    assert set(THREE_MIXES) <= set(scaled)
    for model_id, (_, _, small, model) in scaled.items():
        for tokens in TOKEN_COUNTS:
            _, cache = model.prefill(model.token_ids(tokens), settings)
            assert bench.cache_nbytes(cache) == kv_bytes(small, tokens, settings), (model_id, tokens)
            for kind, layer in zip((small.attention[n] for n in small.layer_kinds), cache):
                if kind.kind in ("gqa", "swa"):
                    assert layer["k"].dtype == bench.torch_dtype(settings.kv_dtype)
                elif kind.kind == "mla":
                    assert set(layer) == {"latent", "k_rope"}
                else:
                    assert layer["recurrent"].dtype == bench.torch_dtype(recurrent_dtype(kind, settings))
                    if "conv" in layer:
                        assert layer["conv"].dtype == bench.torch_dtype(settings.conv_dtype)


def test_sliding_window_cache_keeps_the_last_window_tokens(scaled):
    _, _, small, model = scaled["mimo-v2-flash"]
    window = next(a.window_tokens for a in small.attention.values() if a.kind == "swa")
    _, cache = model.prefill(model.token_ids(300), CacheSettings(kv_dtype="fp32"))
    swa_layer = small.layer_kinds.index(next(n for n, a in small.attention.items() if a.kind == "swa"))
    full_layer = small.layer_kinds.index(next(n for n, a in small.attention.items() if a.kind == "gqa"))
    assert cache[swa_layer]["k"].shape[0] == window
    assert cache[full_layer]["k"].shape[0] == 300


@pytest.mark.parametrize("flavour", ["gdn", "kda", "lightning"])
@pytest.mark.parametrize("tokens", [1, 64, 150])
def test_chunked_linear_attention_matches_token_recurrence(flavour, tokens):
    gen = torch.Generator().manual_seed(7)
    heads, dk, dv = 3, 16, 8
    q = torch.nn.functional.normalize(torch.randn(heads, tokens, dk, generator=gen), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(heads, tokens, dk, generator=gen), dim=-1)
    v = torch.randn(heads, tokens, dv, generator=gen)
    width = dk if flavour == "kda" else 1
    g = -torch.rand(heads, tokens, width, generator=gen) * abs(bench.LINEAR_LOG_DECAY_FLOOR)
    beta = None if flavour == "lightning" else torch.rand(heads, tokens, generator=gen)
    s0 = torch.randn(heads, dk, dv, generator=gen) * 0.1
    o_chunk, s_chunk = bench.chunked_linear_attention(q, k, v, g, beta, initial_state=s0)
    o_ref, s_ref = bench.recurrent_linear_attention(q, k, v, g, beta, initial_state=s0)
    assert torch.allclose(o_chunk, o_ref, atol=1e-4, rtol=1e-4)
    assert torch.allclose(s_chunk, s_ref, atol=1e-4, rtol=1e-4)


def _dense_reference(q, k, v, scale, window=None):
    """Attention with an explicit [T, T] mask (GQA by repeating KV heads)."""
    heads, tokens = q.shape[0], q.shape[1]
    k = k.repeat_interleave(heads // k.shape[0], dim=0)
    v = v.repeat_interleave(heads // v.shape[0], dim=0)
    i = torch.arange(tokens)[:, None]
    j = torch.arange(tokens)[None, :]
    allowed = (j <= i) & ((i - j < window) if window else torch.ones_like(j <= i))
    scores = (q @ k.transpose(-1, -2)) * scale
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ v


@pytest.mark.parametrize("window", [None, 16, 48])
def test_attention_kernels_match_explicit_masks(window):
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(4, 100, 24, generator=gen)
    k = torch.randn(2, 100, 24, generator=gen)
    v = torch.randn(2, 100, 16, generator=gen)  # dv < dq: padded inside, sliced back
    scale = 1.0 / math.sqrt(24)
    got = bench.causal_attention(q, k, v, scale) if window is None else \
        bench.sliding_window_attention(q, k, v, window, scale)
    assert got.shape == (4, 100, 16)
    assert torch.allclose(got, _dense_reference(q, k, v, scale, window), atol=1e-5)


def test_loopback_transfer_delivers_the_serialised_cache(scaled):
    _, _, _, model = scaled["kimi-linear-48b-a3b"]
    _, cache = model.prefill(model.token_ids(40), CacheSettings())
    payload = bench.serialise_cache(cache)
    out = bench.loopback_transfer(payload, 1, len(payload), keep_received=True)
    assert out["received"][0] == payload
    restored = bench.deserialise_cache(out["received"][0])
    for got, sent in zip(restored, cache):
        assert set(got) == set(sent)
        for name in sent:
            assert got[name].dtype == sent[name].dtype and torch.equal(got[name], sent[name])
    total = 3 * len(payload) + 5  # not a multiple of the connection count or the payload
    multi = bench.loopback_transfer(payload, 3, total, keep_received=True)
    assert sum(len(r) for r in multi["received"]) == total
    assert all(r == (payload * 2)[: len(r)] for r in multi["received"])
    assert multi["gbps"] > 0 and math.isclose(multi["gbps"], total * 8 / multi["seconds"] / 1e9)


def test_calibrate_observations_reproduces_the_h200_entry():
    """bench calibrate on the paper's observations gives the factors hardware_db/h200.yaml cites."""
    fitted, table = bench.calibrate_observations(PAPER_OBSERVATIONS, "h200")
    h200 = load_gpu("h200").efficiency
    for name in bench.OBSERVATION_FIT_PARAMS:
        assert getattr(fitted.efficiency, name) == pytest.approx(getattr(h200, name), abs=2e-3), name
    assert len(table) == 8 and table["error_pct"].abs().max() < 25


def test_link_efficiency_is_measured_over_nominal():
    results = {"transfer": {"rows": [{"connections": 1, "bytes": 8, "seconds": 1.0, "gbps": 4.0},
                                     {"connections": 4, "bytes": 8, "seconds": 1.0, "gbps": 12.0}]}}
    table = bench.link_table(results, nominal_gbps=10.0)
    assert table["link_efficiency"].tolist() == [0.4, 1.0]  # 12 Gbps on a 10 Gbps line: capped at 1


def test_cli_help_does_not_import_torch():
    code = ("import sys\nfrom prfaas_plan.cli import main\n"
            "for argv in (['--help'], ['bench', '--help']):\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "print('TORCH', 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "TORCH False" in out and "calibrate" in out


def test_bad_inputs_are_one_line_errors(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text('{"schema": "something-else"}')
    with pytest.raises(SystemExit) as exc:
        main(["bench", "validate", str(bad)])
    assert exc.value.code == 2
    assert "not a bench results file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["bench", "calibrate", str(PAPER_OBSERVATIONS)])
    assert exc.value.code == 2 and "--gpu" in capsys.readouterr().err
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit) as exc:
            main(["bench", "run", "--device", "cuda", "-o", str(tmp_path / "r.json")])
        assert exc.value.code == 2 and "no CUDA device" in capsys.readouterr().err


@pytest.mark.slow
def test_quick_cpu_harness_calibrates_and_predicts_held_out_prefill(tmp_path, capsys):
    """run + calibrate + validate on the CPU (quick): held-out median |error| < 30%, KV bytes
    exact in every case, transfer Gbps per connection count turned into a link efficiency."""
    results_path = tmp_path / "results.json"
    hw_path = tmp_path / "measured" / "cpu-quick.yaml"
    link_path = tmp_path / "link.yaml"
    started = time.perf_counter()
    _cli("bench", "run", "--device", "cpu", "--quick", "-o", str(results_path), "--no-progress", "-f", "json")
    _cli("bench", "calibrate", str(results_path), "-o", str(hw_path), "--nominal-gbps", "100",
         "--link-yaml", str(link_path), "-f", "json")
    capsys.readouterr()
    _cli("bench", "validate", str(results_path), "--hardware", str(hw_path), "-f", "json")
    table = json.loads(capsys.readouterr().out)
    elapsed_s = time.perf_counter() - started

    results = bench.load_results(results_path)
    assert results["device"]["kind"] == "cpu" and results["device"]["torch"] == torch.__version__
    assert all(c["kv_match"] and c["kv_bytes_measured"] == c["kv_bytes_model"] for c in results["models"])
    held_out_models = {row["case"].split("@")[0] for row in table if row["held_out"] == "model"}
    assert held_out_models == set(THREE_MIXES)
    calibration_models = {c["source_model"] for c in results["models"] if c["role"] == "calibration"}
    assert not calibration_models & held_out_models  # validation mixes never enter the fit
    errors = sorted(abs(row["error_pct"]) for row in table)
    median = errors[len(errors) // 2] if len(errors) % 2 else sum(errors[len(errors) // 2 - 1: len(errors) // 2 + 1]) / 2
    print(f"median |error| {median:.1f}% over {len(errors)} held-out cases")
    assert median < MAX_MEDIAN_ABS_ERROR_PCT

    gpu = load_gpu(hw_path)
    assert gpu.id == "cpu-quick" and "calibration prefills" in gpu.efficiency.provenance
    assert str(results_path) in hw_path.read_text()  # provenance: which results file
    rows = results["transfer"]["rows"]
    assert [r["connections"] for r in rows] == list(bench.PROFILES["cpu-quick"].transfer_connections)
    assert results["transfer"]["integrity_ok"] and all(r["gbps"] > 0 for r in rows)
    best = max(min(1.0, r["gbps"] / 100.0) for r in rows)
    assert f"efficiency: {round(best, 4)}" in link_path.read_text()
    assert elapsed_s < QUICK_BUDGET_S
