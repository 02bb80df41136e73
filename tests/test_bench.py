"""The microbenchmark harness (prfaas_plan.bench): scaled-down models, their real KV tensors, the
chunked linear-attention kernel, loopback transfer, calibration and held-out validation.

Units: seconds, bytes, tokens, Gbps = 1e9 bit/s. One CPU harness run (``bench run --quick`` on
:data:`TEST_PROFILE`, the quick profile with fewer shapes, lengths and repeats) is shared by the
tests that read a results file; the end-to-end test (marked ``slow``, run by default; deselect
with ``-m "not slow"``) calibrates on its calibration cases and asserts the median absolute error
of predicted prefill latency on the held-out cases. Torch runs on one thread (as the CPU profiles
do): on a busy 2-core machine a second OpenMP worker only adds stalls.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")

from prfaas_plan import bench  # noqa: E402
from prfaas_plan.cli import main  # noqa: E402
from prfaas_plan.hardware import load_gpu  # noqa: E402
from prfaas_plan.kvcache import CacheSettings, kv_bytes, recurrent_dtype  # noqa: E402
from prfaas_plan.model.arch import list_model_specs  # noqa: E402
from prfaas_plan.perf.roofline import layer_costs  # noqa: E402
from prfaas_plan.units import DTYPE_BYTES, MIB_BYTES  # noqa: E402

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

TEST_PROFILE = replace(
    bench.PROFILES["cpu-quick"], name="cpu-test", repeats=3,
    gemm_shapes=((512, 512, 512), (1024, 1024, 1024), (1024, 256, 1024), (1024, 256, 768), (512, 1024, 256)),
    attention_lengths_tokens=(256, 512), swa_lengths_tokens=(512,), linear_lengths_tokens=(512,),
    copy_sizes_mib=(16, 64), calibration_lengths_tokens=(128, 256, 512), holdout_lengths_tokens=(384,),
    validation_lengths_tokens=(256, 512), transfer_connections=(1, 3), transfer_bytes_per_setting=8 * MIB_BYTES)
"""The CPU quick profile at the same model scale, with fewer shapes, lengths (to 512 tokens) and repeats."""

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


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Torch on one thread for this module (restored after)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def harness_results(tmp_path_factory, one_torch_thread) -> Path:
    """The results file of one ``bench run --device cpu --quick`` on :data:`TEST_PROFILE`."""
    path = tmp_path_factory.mktemp("bench") / "results.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("prfaas_plan.bench.harness.profile_for", lambda device, quick: TEST_PROFILE)
        _cli("bench", "run", "--device", "cpu", "--quick", "-o", str(path), "--no-progress", "-f", "json")
    return path


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
    """The torch layers hold exactly the weights perf.layer_costs reads (so the roofline's bytes
    and FLOPs are the benchmarked model's), its GEMMs are every weight but the per-head vectors,
    and total_params counts every parameter."""
    for model_id, (_, _, small, model) in scaled.items():
        costs = layer_costs(small)
        counts = small.param_counts()
        assert model.total_params() * DTYPE_BYTES["fp32"] == costs.weight_bytes, model_id
        assert model.gemm_params() == counts.total - counts.attention_vector, model_id
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
                elif kind.kind == "dsa":  # the indexer's keys are bytes whatever the KV dtype
                    assert set(layer) == {"latent", "k_rope", "index_k"} and layer["index_k"].dtype == torch.uint8
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
    fit = bench.calibrate_observations(PAPER_OBSERVATIONS, "h200")
    h200 = load_gpu("h200").efficiency
    for name in bench.OBSERVATION_FIT_PARAMS:
        assert getattr(fit.gpu.efficiency, name) == pytest.approx(getattr(h200, name), abs=2e-3), name
    assert len(fit.residuals) == 8 and fit.residuals["error_pct"].abs().max() < 25
    table = fit.parameter_table()
    assert table.set_index("parameter")["fitted"].to_dict() == {k: k in bench.OBSERVATION_FIT_PARAMS
                                                                 for k in bench.TABLE_FACTORS}


def test_observation_fit_yaml_is_the_fitted_entry_renamed(tmp_path):
    """The YAML ``bench calibrate obs.yaml --gpu h200 -o my.yaml`` writes loads back as the fitted
    entry under the new id (a comment line naming the base entry and the observations file)."""
    fit = bench.calibrate_observations(PAPER_OBSERVATIONS, "h200", ("gemm",))
    text = fit.yaml_text("my-h200")
    assert text.startswith(f"# my-h200: h200 with efficiency fitted by `prfaas-plan bench calibrate {PAPER_OBSERVATIONS}`\n")
    path = tmp_path / "my-h200.yaml"
    path.write_text(text)
    loaded = load_gpu(path)
    assert loaded == fit.gpu.model_copy(update={"id": "my-h200"})
    assert loaded.efficiency.attention == load_gpu("h200").efficiency.attention  # not fitted: unchanged


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


def test_time_call_times_each_repeat_after_timer_warmup():
    """time_call makes TIMER_WARMUP_CALLS untimed calls before each of ``repeats`` timed ones, in
    torch's current thread count (torch's Timer would otherwise run on one thread)."""
    threads_seen = []
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        rec = bench.time_call(lambda: threads_seen.append(torch.get_num_threads()), 4)
    finally:
        torch.set_num_threads(before)
    assert len(threads_seen) == 4 * (1 + bench.TIMER_WARMUP_CALLS) and set(threads_seen) == {2}
    assert rec["repeats"] == len(rec["times_s"]) == 4 and rec["warmup"] == bench.TIMER_WARMUP_CALLS
    assert rec["min_s"] == min(rec["times_s"]) and rec["median_s"] == statistics.median(rec["times_s"])
    assert all(t > 0 for t in rec["times_s"])


def test_results_file_records_every_case_and_repeat(harness_results):
    """The shared run: every shape and length of the profile measured, ``repeats`` times each;
    KV bytes exact in every model case; the transfer intact over every connection count."""
    results = bench.load_results(harness_results)
    assert results["device"]["kind"] == "cpu" and results["device"]["torch"] == torch.__version__
    assert results["profile"]["name"] == TEST_PROFILE.name and results["settings"]["timing"] == bench.TIMING_METHOD
    assert [(g["m"], g["k"], g["n"]) for g in results["gemm"]] == list(TEST_PROFILE.gemm_shapes)
    assert [c["size_mib"] for c in results["memory"]] == list(TEST_PROFILE.copy_sizes_mib)
    assert [(a["tokens"], a["flavour"]) for a in results["linear_attention"]] == \
        [(l, f) for l in TEST_PROFILE.linear_lengths_tokens for f in bench.LINEAR_FLAVOURS]
    records = [r for k in ("gemm", "attention", "swa", "linear_attention", "memory", "models") for r in results[k]]
    for r in records:
        assert len(r["times_s"]) == r["repeats"] == TEST_PROFILE.repeats
        assert r["min_s"] == min(r["times_s"]) and r["median_s"] == statistics.median(r["times_s"]) > 0
    assert all(c["kv_match"] and c["kv_bytes_measured"] == c["kv_bytes_model"] for c in results["models"])
    expected_cases = {bench.model_case_name(m, l) for m in TEST_PROFILE.calibration_models
                      for l in TEST_PROFILE.calibration_lengths_tokens + TEST_PROFILE.holdout_lengths_tokens}
    expected_cases |= {bench.model_case_name(m, l) for m in TEST_PROFILE.validation_models
                       for l in TEST_PROFILE.validation_lengths_tokens}
    assert {c["case"] for c in results["models"]} == expected_cases
    rows = results["transfer"]["rows"]
    assert [r["connections"] for r in rows] == list(TEST_PROFILE.transfer_connections)
    assert results["transfer"]["integrity_ok"] and all(r["gbps"] > 0 for r in rows)
    assert len(bench.micro_table(results)) == len(records) - len(results["models"])
    assert bench.model_case_table(results)["case"].tolist() == [c["case"] for c in results["models"]]


@pytest.mark.slow
def test_quick_cpu_harness_calibrates_and_predicts_held_out_prefill(harness_results, tmp_path, capsys):
    """calibrate + validate of the shared run: held-out median |error| < 30%, validation mixes
    never in the fit, provenance naming the results file, the link block from the transfer rows."""
    hw_path = tmp_path / "measured" / "cpu-quick.yaml"
    link_path = tmp_path / "link.yaml"
    _cli("bench", "calibrate", str(harness_results), "-o", str(hw_path), "--nominal-gbps", "100",
         "--link-yaml", str(link_path), "-f", "json")
    capsys.readouterr()
    _cli("bench", "validate", str(harness_results), "--hardware", str(hw_path), "-f", "json")
    table = json.loads(capsys.readouterr().out)

    results = bench.load_results(harness_results)
    held_out_models = {row["case"].split("@")[0] for row in table if row["held_out"] == "model"}
    assert held_out_models == set(THREE_MIXES)
    calibration_models = {c["source_model"] for c in results["models"] if c["role"] == "calibration"}
    assert not calibration_models & held_out_models  # validation mixes never enter the fit
    median = statistics.median(abs(row["error_pct"]) for row in table)
    print(f"median |error| {median:.1f}% over {len(table)} held-out cases")
    assert median < MAX_MEDIAN_ABS_ERROR_PCT

    gpu = load_gpu(hw_path)
    assert gpu.id == "cpu-quick" and "calibration prefills" in gpu.efficiency.provenance
    assert str(harness_results) in hw_path.read_text()  # provenance: which results file
    best = max(min(1.0, r["gbps"] / 100.0) for r in results["transfer"]["rows"])
    link = yaml.safe_load(link_path.read_text())
    assert link == {"link": {"gbps": 100.0, "efficiency": round(best, 4)}}
    assert link_path.read_text().startswith(f"# measured by prfaas-plan bench ({harness_results}): best of 2 "
                                            "connection counts")


def test_calibration_tables_and_yaml_match_the_entry(harness_results):
    """The parameter table lists the entry's own values; the YAML loads back as the entry (floats
    to YAML_SIGNIFICANT_DIGITS digits) under its provenance header."""
    results = bench.load_results(harness_results)
    cal = bench.calibrate_results(results, "cpu-test", harness_results, params=("gemm", "attention"))
    table = cal.parameter_table().set_index("parameter")
    for k in bench.TABLE_FACTORS:
        assert table.loc[k, "value"] == getattr(cal.gpu.efficiency, k)
        assert bool(table.loc[k, "fitted"]) == (k in ("gemm", "attention"))
    assert table.loc["peak_tflops_per_s", "value"] == cal.gpu.bf16_dense_tflops
    text = cal.yaml_text()
    assert text.splitlines()[: len(cal.header)] == [f"# {line}" for line in cal.header]
    body = yaml.safe_load(text)
    assert body["id"] == "cpu-test" and body["efficiency"]["provenance"] == cal.gpu.efficiency.provenance
    assert body["efficiency"]["gemm"] == pytest.approx(cal.gpu.efficiency.gemm, rel=1e-4)
    no_link = bench.calibrate_results({**results, "transfer": {}}, "cpu-test")
    assert no_link.link_efficiency is None and no_link.link_yaml_text("x.json") is None
