"""Validation against measured serving runs (prfaas_plan.validate): row mapping rules, predictions
equal to the serving / latency model's for the same inputs, bad input, the HTML page.

The fixture tests/fixtures/validate/silicon_rows.csv holds 22 rows copied verbatim from
aiconfigurator-core 0.12.0's systems/silicon_sample.csv (header included), chosen to hit every rule."""

from __future__ import annotations

import html
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from prfaas_plan.engine import load_engine
from prfaas_plan.errors import InvalidInput, PlanError
from prfaas_plan.hardware import instance
from prfaas_plan.inferencex import RECIPES, _concs
from prfaas_plan.kvcache import per_gpu_kv_bytes
from prfaas_plan.layout import Layout
from prfaas_plan.model import load_model
from prfaas_plan.model.cache import CacheSettings
from prfaas_plan.perf.latency import decode_step_s, prefill_latency
from prfaas_plan.serving import BenchmarkRun, colocated_benchmark, colocated_closed_loop, disaggregated_closed_loop
from prfaas_plan.validate import (
    AIC_MIXED_CHUNK_SGLANG,
    AIC_PREFILL_HEADROOM_TOKENS,
    AIC_RUN,
    COLUMNS,
    INFERENCEX_RUN,
    _protocol,
    errors_pct,
    prompt_peak_share,
    status_counts,
    summary,
    validate_runs,
    validate_silicon,
    worst_rows,
)

FIX = Path(__file__).parent / "fixtures" / "validate"
ROWS = FIX / "silicon_rows.csv"
B200_DEEPSEEK_DEC31 = ('2026_03_25_deepseek_r1_b200_sxm_sglang_fp8_agg_8192x1024_c64_tp8_0_ep1_0_1288,source_file=2026-03-'
                       '25.csv; model=DeepSeek-R1; silicon_concurrency=64; measured=2025-12-31T15:18:00Z; wip=False; image='
                       'lmsysorg/sglang:v0.5.6-cu129-amd64,sglang,0.5.6,deepseek-ai/DeepSeek-R1,b200_sxm,fp8,agg,8192,1024,f'
                       'p8,fp8_block,64,8,1,1,8,1,,,,,,,,,,,,,,,3089.7098679655755,40.63803152042237')
"""silicon_sample.csv line 3007, verbatim: DeepSeek-R1 on 8xB200 SGLang 0.5.6, 8k/1k, 64 clients (InferenceX,
2025-12-31, before the MTP key existed)."""

B200_QWEN35_NVFP4 = ("qwen3_5_b200_sglang_fp4_agg_8192x1024_c64_cfg708,db-dump/2026-04-27; config_id=708; "
                     "silicon_concurrency=64; measured=2026-04-08T00:00:00.000Z; workflow_run_id=727; lmsysorg/sglang:"
                     "nightly-dev-20260402-d7256eb6,sglang,nightly-dev-20260402-d7256eb6,Qwen/Qwen3.5-397B-A17B,b200_sxm,"
                     "fp4,agg,8192,1024,nvfp4,nvfp4,64,4,1,1,4,1,,,,,,,,,,,,,,,1124.8230984343536,20.411993901161498")
"""silicon_sample.csv line 815, verbatim: Qwen3.5-397B-A17B labelled nvfp4 on 4xB200 SGLang (a nightly build), 8k/1k,
64 clients, InferenceX's qwen3.5-fp4-b200-sglang key, which serves NVIDIA's NVFP4 release."""

KIMI_NVFP4 = (
    '2026_03_25_kimi_k2_5_b200_sxm_vllm_fp4_agg_8192x1024_c4_tp4_0_ep4_0_569,source_file=2026-03-25.csv; model'
    '=Kimi-K2.5; silicon_concurrency=4; measured=2026-03-11T16:59:40Z; wip=False; image=vllm/vllm-openai:v0.17'
    '.0,vllm,0.17.0,moonshotai/Kimi-K2.5,b200_sxm,fp4,agg,8192,1024,nvfp4,nvfp4,4,4,1,1,1,4,,,,,,,,,,,,,,,232.'
    '0875733625144,8.834220504340893',
    'kimik2_5_b200_vllm_fp4_agg_8192x1024_c16_cfg635,db-dump/2026-04-27; config_id=635; silicon_concurrency=16'
    '; measured=2026-03-27T00:00:00.000Z; workflow_run_id=339; vllm/vllm-openai:v0.17.0,vllm,0.17.0,moonshotai'
    '/Kimi-K2.5,b200_sxm,fp4,agg,8192,1024,nvfp4,nvfp4,4,4,1,4,1,16,,,,,,,,,,,,,,,418.5063862874813,14.9191562'
    '96705278',
    '2026_04_06_kimi_k2_5_b200_sxm_vllm_fp4_agg_8192x1024_c16_tp4_ep4_1306,source_file=2026-04-06.csv; model=K'
    'imi-K2.5; silicon_concurrency=16; measured=2026-03-27T00:00:00.000Z; wip=False; image=vllm/vllm-openai:v0'
    '.17.0,vllm,0.17.0,moonshotai/Kimi-K2.5,b200_sxm,fp4,agg,8192,1024,nvfp4,nvfp4,4,4,1,4,1,16,,,,,,,,,,,,,,,'
    '418.5063862874813,14.919156296705278',
    'kimik2_5_b200_vllm_fp4_agg_8192x1024_c4_cfg811,db-dump/2026-04-27; config_id=811; silicon_concurrency=4; '
    'measured=2026-04-20T00:00:00.000Z; workflow_run_id=786; vllm/vllm-openai:v0.17.0,vllm,0.17.0,moonshotai/K'
    'imi-K2.5,b200_sxm,fp4,agg,8192,1024,nvfp4,nvfp4,4,4,1,1,4,1,,,,,,,,,,,,,,,237.8441815788392,8.81564710427'
    '232',
)
"""silicon_sample.csv lines 2288, 301, 4390 and 100, verbatim: Kimi-K2.5 labelled nvfp4 on 4xB200 vLLM 0.17.0,
InferenceX's kimik2.5-fp4-b200-vllm (NVIDIA's NVFP4 release): 8k/1k at 4 clients of 2026-03-11 (its id: tp4 ep4), 16
clients of 2026-03-27 in the database dump (written TP 4, attention DP 4, EP 16) and in the 2026-04-06 file (id
tp4_ep4, the same measurement), 4 clients of 2026-04-20 in the dump (TP 4, EP 1), the day 6c3acebfa changed the script."""

B200_LLAMA_NVFP4 = ("2026_04_06_llama_3_1_70b_b200_sxm_vllm_fp4_agg_1024x8192_c4_tp8_ep1_328,source_file=2026-04-06.csv; "
                    "model=Llama-3.1-70B; silicon_concurrency=4; measured=2025-10-29T00:00:00.000Z; wip=False,vllm,,"
                    "meta-llama/Llama-3.1-70B,b200_sxm,fp4,agg,1024,8192,nvfp4,nvfp4,4,8,1,1,8,1,,,,,,,,,,,,,,,"
                    "89.3514683819376,6.576913226412841")
"""silicon_sample.csv line 3412, verbatim: Llama-3.1-70B labelled nvfp4 on 8xB200 vLLM (no version; InferenceX's
70b-tmpl.yml served nvidia/Llama-3.3-70B-Instruct-FP4 from the vllm-openai v0.10.2 image), 1k/8k, 4 clients."""

B200_DEEPSEEK_TP4 = ("dsr1_b200_sglang_fp8_agg_8192x1024_c4_cfg271,db-dump/2026-04-27; config_id=271; silicon_concurrency=4; "
                     "measured=2026-03-25T00:00:00.000Z; workflow_run_id=337; lmsysorg/sglang:v0.5.9-cu130,sglang,0.5.9,"
                     "deepseek-ai/DeepSeek-V3,b200_sxm,fp8,agg,8192,1024,fp8,fp8_block,4,4,1,1,4,1,,,,,,,,,,,,,,,"
                     "585.9177203907166,11.535313140251242")
"""silicon_sample.csv line 437, verbatim: DeepSeek-V3 on 4xB200 SGLang 0.5.9, 8k/1k, 4 clients (InferenceX)."""


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return validate_silicon(ROWS)


def test_exact_columns(frame):
    assert tuple(frame.columns) == COLUMNS == (
        "system", "model", "engine", "engine_version", "precision", "mode", "isl", "osl", "concurrency", "tp",
        "attention_dp", "moe_tp", "moe_ep", "ttft_ms_measured", "ttft_ms_predicted", "tpot_ms_measured",
        "tpot_ms_predicted", "status")
    assert len(frame) == 22


def test_status_per_rule(frame):
    assert list(frame["status"]) == [
        "ok", "ok", "ok",
        "ok",  # Qwen3.5 "tp 64, moe 8 x 8": its id's TP 8 / EP 8 (validate._as_named)
        "ok", "ok", "ok",
        # DeepSeek-R1 on H200, disaggregated, 2026-02-07: InferenceX's config then ran each split with and
        # without MTP, which the rows do not say (inferencex.DISAGG_RECIPES); row 7 gives its workers
        "recipe ambiguous: 1P1D with or without MTP",
        "recipe ambiguous: 1P6D (prefill and decode DP attention) or 1P6D (prefill and decode DP attention) with MTP",
        "ok", "ok",
        "ok",  # vLLM Qwen3-235B tp1 with moe_tp 2: attention dp 2 (the SDK's tp x dp == moe_tp x moe_ep)
        "engine without kernel tables (trtllm)",
        "ok",  # gpt-oss-120b: labelled nvfp4, predicted as its checkpoint (MXFP4 experts, the rest bf16)
        "ok",  # Llama-3.1-8B on SGLang, one GPU
        "no hardware entry",  # b300_sxm
        "unsupported precision nvfp4", "unsupported precision nvfp4",  # NVIDIA's NVFP4 checkpoint; fp4 DeepSeek-R1
        "ok",  # vLLM tp2 x dp2 on b200: attention TP groups inside DP replicas
        "ok",  # GLM-5 on H200 SGLang: InferenceX served zai-org/GLM-5-FP8 (DSA), our glm-5
        "ok",  # gpt-oss-120b on B200 vLLM 0.15.1: its script's fp8 KV cache and MXFP8 activations into the experts
        "ok",  # MiniMax-M2.5 labelled nvfp4 on B200: NVIDIA's NVFP4 release, as #996's branch launched it
    ]
    counts = status_counts(frame).groupby("rule")["rows"].sum()
    assert counts.to_dict() == {"engine without kernel tables (trtllm)": 1, "no hardware entry": 1, "ok": 16,
                                "recipe ambiguous": 2, "unsupported precision nvfp4": 2}


def _engine(eid: str, version: str | None):
    e = load_engine(eid)
    return e.model_copy(update={"kernel_version": version}) if version and version != e.kernel_version else e


def _budget(engine, tokens: int):
    return engine.with_chunked_prefill(tokens)


def _marlin(engine):
    return engine.model_copy(update={"mxfp4_moe_kernel": "marlin"})


FP8_KV = CacheSettings(kv_dtype="fp8")


def _agg(model, gpus, eng, isl, osl, c, layout=None, gpu="h200", run=None, settings=None):
    inst = instance(gpu, gpus, layout=layout or Layout(gpus), engine=eng)
    p = colocated_closed_loop(model, inst, isl, osl, c, settings) if run is None else \
        colocated_benchmark(model, inst, isl, osl, c, run, settings)
    return p.ttft_s * 1e3, p.tpot_s * 1e3


def test_agg_predictions_are_the_serving_model(frame):
    # a checkpoint that ships a class quantised runs it in its own scheme (MiniMax-M2.5, Qwen3-235B-FP8:
    # FP8 block-128, whatever the per-tensor "fp8" label); a bf16 class takes the label (online FP8)
    fp8 = {"attention": "fp8", "dense_ffn": "fp8", "experts": "fp8"}
    minimax = load_model("minimax-m2.5")
    qwen35 = load_model("qwen3.5-397b-a17b").with_gemm_dtypes(attention="fp8", dense_ffn="fp8", experts="fp8_block")
    llama = load_model("llama-3.1-70b").with_gemm_dtypes(**fp8)
    kimi = load_model("kimi-k2-thinking").with_gemm_dtypes(experts="int4_w4a16", group_size=32)
    qwen3 = load_model("qwen3-235b-a22b-fp8")
    llama8 = load_model("llama-3.1-8b").with_gemm_dtypes(attention="fp8_block", dense_ffn="fp8_block")
    ix, aic = INFERENCEX_RUN, AIC_RUN  # InferenceX sources: its finite run; NVIDIA's gap-analysis files (9, 11, 14): AIC's
    expect = {
        # its labelled experts TP8 leave 192 channels per GPU, no whole 128-block: the engines refuse it, so EP8
        0: _agg(minimax, 8, _engine("vllm", "0.18.0"), 8192, 1024, 8, Layout(8, "tp", "ep"), run=ix),
        1: _agg(minimax, 4, _engine("vllm", "0.16.0"), 8192, 1024, 8, run=ix),
        # InferenceX launched it with --chunked-prefill-size 16384 --kv-cache-dtype fp8_e4m3 (inferencex.RECIPES)
        2: _agg(qwen35, 8, _budget(_engine("sglang", "0.5.9"), 16384), 1024, 8192, 64, Layout(8, "tp", "ep"), run=ix,
                settings=FP8_KV),
        # no version in the CSV: the profile's; kv-cache-dtype: fp8 in InferenceX's config.yaml
        4: _agg(llama, 2, _engine("vllm", None), 1024, 8192, 8, run=ix, settings=FP8_KV),
        5: _agg(kimi, 8, _engine("vllm", "0.16.0"), 8192, 1024, 4, run=ix),
        9: _agg(qwen3, 2, _engine("vllm", "0.12.0"), 2000, 500, 16, Layout(2, "tp", "ep"), run=aic),
        11: _agg(qwen3, 2, _engine("vllm", "0.12.0"), 1000, 100, 8, Layout(2, "dp", "tp"), run=aic),
        # NVIDIA labels it nvfp4; Hopper runs the checkpoint as stored: MXFP4 experts (W4A16), bf16 elsewhere, on
        # Marlin's kernel (gptoss_fp4_h200.sh: VLLM_MXFP4_USE_MARLIN=1, max-num-batched-tokens 8192; inferencex.RECIPES)
        13: _agg(load_model("gpt-oss-120b"), 4, _budget(_marlin(_engine("vllm", "0.18.0")), 8192), 1024, 8192, 4, run=ix),
        # gptoss_fp4_b200.sh: kv-cache-dtype fp8 and VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1 (inferencex.RECIPES)
        20: _agg(load_model("gpt-oss-120b").with_gemm_dtypes(experts="mxfp4_w4a8"), 2, _engine("vllm", "0.15.1"), 1024,
                 1024, 32, gpu="b200", run=ix, settings=FP8_KV),
        # labelled nvfp4: NVIDIA's NVFP4 release (validate.NVFP4_RELEASES); a nightly vLLM (no release: the profile's
        # kernels) with --kv-cache-dtype fp8 and the default budget (minimaxm2.5_fp4_b200.sh on #996's branch)
        21: _agg(load_model("minimax-m2.5-nvfp4"), 2, _engine("vllm", None), 1024, 1024, 32, gpu="b200", run=ix,
                 settings=FP8_KV),
        # bf16 checkpoint: online FP8; SGLang as AIConfigurator's generator launched it (validate._as_generated):
        # --enable-mixed-chunk, --max-prefill-tokens ISL + 1500
        14: _agg(llama8, 1, _engine("sglang", "0.5.6.post2").with_launch(mixed_prefill=True, max_prefill_tokens=2500),
                 1000, 100, 160, run=aic),
        # --max-num-batched-tokens $((ISL * 2)) --kv-cache-dtype fp8 in InferenceX's B200 MiniMax vLLM 0.19.0 script;
        # the dump writes its {tp: 2, ep: 2} run as TP 2, attention DP 2, EP 4 (validate._as_named): 2 GPUs
        18: _agg(minimax, 2, _budget(_engine("vllm", "0.19.0"), 2048), 1024, 1024, 512,
                 Layout(2, "tp", "ep"), "b200", run=ix, settings=FP8_KV),
        # the glm5-hopper image (no release: the profile's kernels); glm5_fp8_h200.sh's --mem-fraction-static 0.85
        19: _agg(load_model("glm-5"), 8, _engine("sglang", None).with_launch(None, None, 0.85), 1024, 1024, 4, run=ix),
    }
    for i, (ttft, tpot) in expect.items():
        row = frame.iloc[i]
        assert row["ttft_ms_predicted"] == pytest.approx(ttft, rel=1e-12), i
        assert row["tpot_ms_predicted"] == pytest.approx(tpot, rel=1e-12), i
    assert frame.iloc[0][["tp", "attention_dp", "moe_tp", "moe_ep"]].tolist() == [8, 1, 1, 8]
    assert frame.iloc[1][["tp", "attention_dp", "moe_tp", "moe_ep"]].tolist() == [4, 1, 4, 1]  # 384 = 3 x 128
    assert frame.iloc[2][["tp", "attention_dp", "moe_tp", "moe_ep"]].tolist() == [8, 1, 1, 8]
    assert frame.iloc[11][["tp", "attention_dp", "moe_tp", "moe_ep"]].tolist() == [1, 2, 2, 1]
    assert frame.iloc[18][["tp", "attention_dp", "moe_tp", "moe_ep"]].tolist() == [2, 1, 1, 2]


def test_protocol_rule_per_source(frame):
    """InferenceX sources (dated result files, database dump) get its run; NVIDIA's gap-analysis
    files AIConfigurator's benchmark; unknown sources and every disaggregated row the steady state;
    a user's run its own."""
    rows = pd.read_csv(ROWS).to_dict("records")
    got = [_protocol(r) for r in rows]
    inferencex = {0, 1, 2, 3, 4, 5, 6, 12, 13, 15, 17, 18, 19, 20, 21}  # agg rows whose source is source_file=DATE.csv / db-dump/
    aic = {9, 10, 11, 14, 16}  # source_file=.../aic-auto-gap-analysis/data/...
    assert [i for i, g in enumerate(got) if g == INFERENCEX_RUN] == sorted(inferencex)
    assert [i for i, g in enumerate(got) if g == AIC_RUN] == sorted(aic)
    assert all(got[i] is None for i in set(range(len(rows))) - inferencex - aic)  # 7, 8 disagg
    assert INFERENCEX_RUN == BenchmarkRun(prompts_per_client=10, range_ratio=0.8)
    # aiperf --request-count 10c --warmup-request-count 2c --num-dataset-entries 12c, fixed lengths (AIConfigurator's
    # eval runner): the warm-up drained first, its 2c prompts not among the 10c measured (aiperf >= 0.3.0 shuffles)
    assert AIC_RUN == BenchmarkRun(prompts_per_client=10, range_ratio=1.0, warmup_per_client=2)
    assert _protocol({**rows[9], "silicon_data_source": "source_file=2026-04-06.csv.bak; silicon_concurrency=8"}) is None
    assert _protocol({**rows[9], "run_prompts_per_client": 3}) == BenchmarkRun(3)
    # mapped rows (status ok): InferenceX 0-6, 13, 18-21; AIConfigurator 9, 10, 11, 14 (disagg 7, 8: ambiguous)
    assert frame.attrs["protocols"] == {"inferencex run": 12, "vllm bench serve run": 0, "aiconfigurator run": 4,
                                        "steady state": 0}


def test_aiconfigurator_sglang_runs_take_the_generators_launch(frame, tmp_path):
    """The gap-analysis SGLang rows from 0.5.6.post2 on ran as AIConfigurator's generator launched
    them: prompt chunks mixed into the decode steps, --max-prefill-tokens ISL + 1500 (whole prompts
    a step within it); earlier SGLang (H100's 0.5.1.post1), vLLM and InferenceX rows keep theirs."""
    assert (AIC_MIXED_CHUNK_SGLANG, AIC_PREFILL_HEADROOM_TOKENS) == ("0.5.6.post2", 1500)
    assert frame.attrs["generator_launch"] == 2  # rows 10 and 14 (H200 SGLang 0.5.6.post2)
    qwen3 = load_model("qwen3-235b-a22b-fp8")
    generated = _engine("sglang", "0.5.6.post2").with_launch(mixed_prefill=True, max_prefill_tokens=2500)
    got = frame.iloc[10][["ttft_ms_predicted", "tpot_ms_predicted"]].tolist()
    assert got == pytest.approx(list(_agg(qwen3, 4, generated, 1000, 100, 8, run=AIC_RUN)), rel=1e-12)
    # the same run prefill-first at the default budget: another prediction, so the launch is what made it
    assert got[0] != pytest.approx(_agg(qwen3, 4, _engine("sglang", "0.5.6.post2"), 1000, 100, 8, run=AIC_RUN)[0],
                                   rel=1e-3)
    # the cap follows the row's ISL: 2,000-token prompts run at 3,500 (one whole prompt a step, not 1.75)
    rows = pd.read_csv(ROWS, dtype=str, keep_default_na=False).iloc[[14]].copy()
    rows["isl"] = "2000"
    rows.to_csv(tmp_path / "long.csv", index=False)
    long = validate_silicon(tmp_path / "long.csv").iloc[0]
    llama8 = load_model("llama-3.1-8b").with_gemm_dtypes(attention="fp8_block", dense_ffn="fp8_block")
    want = _agg(llama8, 1, _engine("sglang", "0.5.6.post2").with_launch(mixed_prefill=True, max_prefill_tokens=3500),
                2000, 100, 160, run=AIC_RUN)
    assert [long["ttft_ms_predicted"], long["tpot_ms_predicted"]] == pytest.approx(list(want), rel=1e-12)
    # a version before the generator's flag, on the same row: the profile's prefill-first engine (lockstep)
    rows = pd.read_csv(ROWS, dtype=str, keep_default_na=False).iloc[[14]].copy()
    rows["backend_version"] = "0.5.4.post3"
    rows.to_csv(tmp_path / "older.csv", index=False)
    older = validate_silicon(tmp_path / "older.csv")
    want = _agg(llama8, 1, _engine("sglang", "0.5.4.post3"), 1000, 100, 160, run=AIC_RUN)
    assert older.iloc[0][["ttft_ms_predicted", "tpot_ms_predicted"]].tolist() == pytest.approx(list(want), rel=1e-12)
    assert older.attrs["generator_launch"] == 0


def test_inferencex_runs_take_their_launch_scripts_token_budget(frame):
    """DeepSeek-R1 (6) and Qwen3.5 (2) on H200 SGLang ran with --chunked-prefill-size 32768 / 16384,
    MiniMax-M2.5 on B200 vLLM 0.19.0 (18) with --max-num-batched-tokens 2 x ISL: each is predicted
    at that budget, which moves it off the engine default's prediction; InferenceX runs of recipes
    that keep the default (1: MiniMax H200 vLLM) and steady-state rows (9, 11) take the profile's."""
    ix = INFERENCEX_RUN
    deepseek = load_model("deepseek-v3")
    sglang = _engine("sglang", "0.5.9")
    at = _agg(deepseek, 8, _budget(sglang, 32768).with_launch(max_prefill_tokens=32768), 1024, 1024, 64, run=ix)
    default = _agg(deepseek, 8, sglang, 1024, 1024, 64, run=ix)
    assert frame.iloc[6][["ttft_ms_predicted", "tpot_ms_predicted"]].tolist() == pytest.approx(list(at), rel=1e-12)
    assert at[0] != pytest.approx(default[0], rel=1e-3)
    assert load_engine("sglang").chunked_prefill_tokens == load_engine("vllm").chunked_prefill_tokens == 8192
    assert frame.attrs["recipe_budget"] == 5  # rows 2, 3, 6, 13, 18 (1, 9, 11: test_agg_predictions_are_the_serving_model)
    assert frame.attrs["recipe_kv_dtype"] == 6  # rows 2, 3, 4, 18, 20, 21 (--kv-cache-dtype fp8; 6: DeepSeek H200 keeps bf16)
    assert frame.attrs["recipe_experts_dtype"] == 1  # row 20: gpt-oss on B200 vLLM, MXFP8 activations
    assert frame.attrs["recipe_moe_kernel"] == 1  # row 13: gpt-oss on H200 vLLM 0.18, Marlin's MXFP4 experts
    # row 8, the one disaggregated row without worker counts, is ambiguous (STP or MTP): no recipe workers
    # counted (test_disagg_inferencex_rows_take_their_recipes_workers moves it to a time of STP only)
    assert (frame.attrs["recipe_workers"], frame.attrs["recipe_dp_attention"]) == (0, 0)
    budgets = {(r.system, r.model_id, r.engine, r.tp, r.version, r.precision): r.budget(1024) for r in RECIPES
               if r.budget(1024) is not None}
    assert budgets == {("h200_sxm", "deepseek-v3", "sglang", None, None, None): 32768,
                       ("h200_sxm", "qwen3.5-397b-a17b", "sglang", None, None, None): 16384,
                       ("b200_sxm", "qwen3.5-397b-a17b", "sglang", None, None, "fp8"): 32768,
                       ("b200_sxm", "glm-5", "sglang", None, None, "fp8"): 32768,
                       ("b200_sxm", "qwen3.5-397b-a17b", "sglang", None, None, "bf16"): 32768,
                       ("b200_sxm", "deepseek-v3", "sglang", 8, None, None): 32768,
                       ("b200_sxm", "deepseek-v3", "sglang", 4, None, None): 8192,
                       ("b200_sxm", "minimax-m2.5", "vllm", None, "0.19.0", None): 2048,
                       ("b200_sxm", "minimax-m2.5-nvfp4", "vllm", None, "0.19.0", None): 2048,
                       ("b200_sxm", "qwen3.5-397b-a17b-nvfp4", "sglang", None, None, None): 32768,
                       ("b200_sxm", "kimi-k2.5-nvfp4", "vllm", None, None, None): 2048,
                       ("h200_sxm", "gpt-oss-120b", "vllm", None, None, None): 8192,
                       ("h100_sxm", "gpt-oss-120b", "vllm", None, None, None): 8192}
    assert all(re.search(r"InferenceX/blob/[0-9a-f]{9}/benchmarks/", r.source) for r in RECIPES)

MINIMAX_H100_0406 = ("2026_04_06_minimax_m2_5_h100_sxm_vllm_fp8_agg_1024x8192_c64_tp4_ep4_1339,source_file=2026-04-06.csv; "
                     "model=MiniMax-M2.5; silicon_concurrency=64; measured=2026-03-28T00:00:00.000Z; wip=False; "
                     "image=vllm/vllm-openai:v0.18.0,vllm,0.18.0,MiniMaxAI/MiniMax-M2.5,h100_sxm,fp8,agg,1024,8192,fp8,fp8,"
                     "16,4,1,4,1,16,,,,,,,,,,,,,,,20067.089307378046,31.876323783831367")
MINIMAX_H100_0325 = ("2026_03_25_minimax_m2_5_h100_sxm_vllm_fp8_agg_1024x8192_c64_tp4_0_ep4_0_217,source_file=2026-03-25.csv; "
                     "model=MiniMax-M2.5; silicon_concurrency=64; measured=2026-03-27T07:59:49Z; wip=False; "
                     "image=vllm/vllm-openai:v0.18.0,vllm,0.18.0,MiniMaxAI/MiniMax-M2.5,h100_sxm,fp8,agg,1024,8192,fp8,fp8,"
                     "64,4,1,1,1,4,,,,,,,,,,,,,,,20025.53017895698,31.95631266148903")
"""silicon_sample.csv lines 4423 and 1936, verbatim: MiniMax-M2.5 on H100 vLLM 0.18, 1k/8k, 64 clients, the one config
key's TP 4 / EP 4 run, written by NVIDIA's 2026-04-06 file as attention DP 4 with experts EP 16 (its id: tp4_ep4)."""


def test_a_row_whose_sizes_write_its_ids_tp_and_ep_as_attention_dp_runs_as_its_id_says(tmp_path):
    """minimaxm2.5-fp8-h100-vllm ran {tp: 4, ep: 4} only, with a script that launches no DP: the 2026-04-06 row's
    attention DP 4 x EP 16 (16 GPUs, beyond the 8 of one H100 node) is its id's TP 4 with experts EP 4 on 4 GPUs,
    predicted as the 2026-03-25 row of that configuration is; an id that does not match the sizes leaves them."""
    header = ROWS.read_text().splitlines()[0]
    other_id = MINIMAX_H100_0406.replace("_tp4_ep4_1339", "_tp4_ep2_1339", 1)
    sglang = MINIMAX_H100_0406.replace(",vllm,0.18.0,", ",sglang,0.5.9,", 1)  # SGLang scripts do launch DP attention
    (tmp_path / "h100.csv").write_text(f"{header}\n{MINIMAX_H100_0406}\n{MINIMAX_H100_0325}\n{other_id}\n{sglang}\n")
    got = validate_silicon(tmp_path / "h100.csv")
    assert list(got.status) == ["ok"] * 4
    assert got.iloc[0][["tp", "attention_dp", "moe_tp", "moe_ep"]].tolist() == [4, 1, 1, 4]
    ttft, tpot = _agg(load_model("minimax-m2.5"), 4, _engine("vllm", "0.18.0"), 1024, 8192, 64, Layout(4, "tp", "ep"),
                      gpu="h100", run=INFERENCEX_RUN)
    for i in (0, 1):
        assert got.iloc[i][["ttft_ms_predicted", "tpot_ms_predicted"]].tolist() == pytest.approx([ttft, tpot], rel=1e-12)
    assert got.iloc[2][["tp", "attention_dp", "moe_ep"]].tolist() == [4, 4, 16]
    assert got.iloc[3][["tp", "attention_dp", "moe_ep"]].tolist() == [4, 4, 16]
    assert got.attrs["remapped"]["layout of the run's id"] == 1


QWEN35_H200_0406 = ("2026_04_06_qwen3_5_397b_h200_sxm_sglang_fp8_agg_1024x1024_c4_tp8_ep8_1889,source_file=2026-04-06.csv; "
                    "model=Qwen3.5-397B; silicon_concurrency=4; measured=2026-03-04T00:00:00.000Z; wip=False; "
                    "image=lmsysorg/sglang:v0.5.9-cu129-amd64,sglang,0.5.9,Qwen/Qwen3.5-397B-A17B,h200_sxm,fp8,agg,1024,"
                    "1024,fp8,fp8_block,4,64,1,1,8,8,,,,,,,,,,,,,,,307.79067178664263,10.08063544978878")
"""silicon_sample.csv line 4973, verbatim: Qwen3.5-397B on 8xH200 SGLang 0.5.9, 1k/1k, 4 clients, its id's TP 8 / EP 8
written as TP 64 with experts TP 8 x EP 8."""


def test_a_row_whose_tp_is_its_ids_tp_times_ep_runs_as_its_id_says(tmp_path):
    """TP 64 on an 8-GPU node is qwen3.5-fp8-h200-sglang's {tp: 8, ep: 8}: predicted as its script launched it
    (budget 16384, 128 running requests, FP8 KV, static memory 0.8) on 8 GPUs with experts EP 8."""
    header = ROWS.read_text().splitlines()[0]
    (tmp_path / "q.csv").write_text(f"{header}\n{QWEN35_H200_0406}\n")
    got = validate_silicon(tmp_path / "q.csv")
    assert got.iloc[0]["status"] == "ok"
    assert got.iloc[0][["tp", "attention_dp", "moe_tp", "moe_ep"]].tolist() == [8, 1, 1, 8]
    qwen35 = load_model("qwen3.5-397b-a17b").with_gemm_dtypes(attention="fp8", dense_ffn="fp8", experts="fp8_block")
    launched = _budget(_engine("sglang", "0.5.9"), 16384).with_launch(128, None, 0.8)
    ttft, tpot = _agg(qwen35, 8, launched, 1024, 1024, 4, Layout(8, "tp", "ep"), run=INFERENCEX_RUN, settings=FP8_KV)
    assert got.iloc[0][["ttft_ms_predicted", "tpot_ms_predicted"]].tolist() == pytest.approx([ttft, tpot], rel=1e-12)
    assert got.attrs["remapped"]["layout of the run's id"] == 1


def test_an_inferencex_run_takes_its_scripts_static_memory_share(tmp_path):
    """DeepSeek-V3 on 4xB200 fits only as its script launched SGLang (--mem-fraction-static 0.95: the
    weights and the KV pool take 95% of memory, activations the rest): under vLLM's accounting (0.9
    with the engine reserve inside) its 157.5 GiB of weights per GPU do not fit; the row is predicted
    with the script's budget 8192, 32 running requests, polling every 10 steps and FP8 KV."""
    header = ROWS.read_text().splitlines()[0]
    (tmp_path / "tp4.csv").write_text(f"{header}\n{B200_DEEPSEEK_TP4}\n")
    got = validate_silicon(tmp_path / "tp4.csv")
    assert got.iloc[0]["status"] == "ok"
    assert got.attrs["recipe_memory"] == 1
    deepseek = load_model("deepseek-v3")
    launched = _budget(_engine("sglang", "0.5.9"), 8192).with_launch(32, 10, 0.95, max_prefill_tokens=8192)
    ttft, tpot = _agg(deepseek, 4, launched, 8192, 1024, 4, gpu="b200", run=INFERENCEX_RUN, settings=FP8_KV)
    assert got.iloc[0][["ttft_ms_predicted", "tpot_ms_predicted"]].tolist() == pytest.approx([ttft, tpot], rel=1e-12)
    with pytest.raises(PlanError, match="after the engine's reserve"):
        _agg(deepseek, 4, _budget(_engine("sglang", "0.5.9"), 8192).with_launch(32, 10), 8192, 1024, 4, gpu="b200",
             run=INFERENCEX_RUN, settings=FP8_KV)
    assert {(r.system, r.model_id, r.tp): r.mem_fraction for r in RECIPES if r.spec == "none" and r.engine == "sglang"} \
        == {("h200_sxm", "deepseek-v3", None): 0.82, ("h200_sxm", "qwen3.5-397b-a17b", None): 0.8,
            ("b200_sxm", "qwen3.5-397b-a17b", None): 0.82, ("b200_sxm", "deepseek-v3", 8): 0.82,
            ("b200_sxm", "deepseek-v3", 4): 0.95, ("b200_sxm", "qwen3.5-397b-a17b-nvfp4", None): 0.85,
            ("h200_sxm", "glm-5", None): 0.85, ("b200_sxm", "glm-5", None): 0.85}
    # --max-prefill-tokens where a script sets it (every one with a budget above SGLang's default 16384 does)
    assert {(r.system, r.model_id, r.tp): (r.budget(1024), r.max_prefill) for r in RECIPES
            if r.spec == "none" and r.engine == "sglang"} \
        == {("h200_sxm", "deepseek-v3", None): (32768, 32768), ("h200_sxm", "qwen3.5-397b-a17b", None): (16384, None),
            ("b200_sxm", "qwen3.5-397b-a17b", None): (32768, 32768), ("b200_sxm", "deepseek-v3", 8): (32768, 32768),
            ("b200_sxm", "deepseek-v3", 4): (8192, 8192), ("b200_sxm", "qwen3.5-397b-a17b-nvfp4", None): (32768, 32768),
            ("h200_sxm", "glm-5", None): (None, None), ("b200_sxm", "glm-5", None): (32768, 32768)}


def test_an_nvfp4_row_of_qwen35_runs_nvidias_release_as_its_script_launched_it(tmp_path):
    """The row names the base model with nvfp4 quant modes; InferenceX served nvidia/Qwen3.5-397B-A17B-NVFP4
    (routed experts NVFP4, attention of both kinds and the shared experts bf16) with qwen3.5_fp4_b200.sh's
    --chunked-prefill-size 32768, --kv-cache-dtype fp8_e4m3, 128 running requests, polling every 30 decode
    steps from 16 clients and --mem-fraction-static 0.85; a nightly build takes the profile's kernel tables."""
    header = ROWS.read_text().splitlines()[0]
    (tmp_path / "q35.csv").write_text(f"{header}\n{B200_QWEN35_NVFP4}\n")
    got = validate_silicon(tmp_path / "q35.csv")
    assert got.iloc[0]["status"] == "ok"
    assert (got.attrs["recipe_budget"], got.attrs["recipe_kv_dtype"], got.attrs["recipe_scheduler"],
            got.attrs["recipe_memory"]) == (1, 1, 1, 1)
    release = load_model("qwen3.5-397b-a17b-nvfp4")
    launched = _budget(_engine("sglang", None), 32768).with_launch(128, 30, 0.85, max_prefill_tokens=32768)
    ttft, tpot = _agg(release, 4, launched, 8192, 1024, 64, gpu="b200", run=INFERENCEX_RUN, settings=FP8_KV)
    assert got.iloc[0][["ttft_ms_predicted", "tpot_ms_predicted"]].tolist() == pytest.approx([ttft, tpot], rel=1e-12)
    # the release's NVFP4 experts set the decode step: FP8 block ones (the base model's bf16 do not fit 4 GPUs) are slower
    fp8 = release.with_gemm_dtypes(experts="fp8_block")
    assert _agg(fp8, 4, launched, 8192, 1024, 64, gpu="b200", run=INFERENCEX_RUN, settings=FP8_KV)[1] > 1.1 * tpot
    # a day the key did not run (before #820's branch took the nightly image): the engine's defaults
    (tmp_path / "early.csv").write_text(f"{header}\n{B200_QWEN35_NVFP4.replace('2026-04-08T', '2026-04-02T')}\n")
    early = validate_silicon(tmp_path / "early.csv")
    assert early.attrs["recipe_budget"] == 0
    assert early.iloc[0]["ttft_ms_predicted"] != pytest.approx(ttft, rel=1e-3)


def test_kimi_k25_nvfp4_rows_run_the_release_with_experts_tp_as_its_script_launched_them(tmp_path):
    """kimik2.5_fp4_b200.sh never passed --enable-expert-parallel (2cbaec340: "fix bogus ep ... script has no
    EP support"), nor --kv-cache-dtype before 6c3acebfa (vLLM takes the checkpoint's FP8 KV scheme): rows
    labelled EP 4 run the experts TP 4 with an FP8 cache; the dump's row written as attention DP 4 with EP 16
    is the 2026-04-06 file's tp4_ep4 run, which then repeats it; a row of the day the script changed is
    ambiguous between its two versions."""
    header = ROWS.read_text().splitlines()[0]
    (tmp_path / "kimi.csv").write_text("\n".join([header, *KIMI_NVFP4]) + "\n")
    got = validate_silicon(tmp_path / "kimi.csv")
    assert got["status"].tolist() == [
        "ok", "ok", "repeats an earlier row: row 1",
        "recipe ambiguous: kimik2.5-fp4-b200-vllm@a58dedd5a or kimik2.5-fp4-b200-vllm@6c3acebfa"]
    assert got.attrs["recipe_experts_tp"] == 3 and got.attrs["recipe_kv_dtype"] == 3
    assert got.attrs["remapped"]["layout of the run's id"] == 2  # the dump's row and the 2026-04-06 file's
    release, vllm = load_model("kimi-k2.5-nvfp4"), _engine("vllm", "0.17.0")
    for i, c in ((0, 4), (1, 16)):
        want = _agg(release, 4, vllm, 8192, 1024, c, Layout(4), gpu="b200", run=INFERENCEX_RUN, settings=FP8_KV)
        assert got.iloc[i][["ttft_ms_predicted", "tpot_ms_predicted"]].tolist() == pytest.approx(list(want), rel=1e-12)
        assert got.iloc[i][["tp", "attention_dp", "moe_tp", "moe_ep"]].tolist() == [4, 1, 4, 1]
    as_labelled = _agg(release, 4, vllm, 8192, 1024, 4, Layout(4, "tp", "ep"), gpu="b200", run=INFERENCEX_RUN,
                       settings=FP8_KV)
    assert as_labelled[1] != pytest.approx(got.iloc[0]["tpot_ms_predicted"], rel=1e-3)


def test_an_nvfp4_llama_row_runs_nvidias_fp4_release_with_its_scripts_fp8_cache(tmp_path):
    """The CSV names the base model; the run served NVIDIA's FP4 release (attention and MLP NVFP4) with
    70b_fp4_b200_docker.sh's config.yaml kv-cache-dtype fp8: the release, not the bf16 entry the FP8 rows use."""
    header = ROWS.read_text().splitlines()[0]
    (tmp_path / "llama.csv").write_text(f"{header}\n{B200_LLAMA_NVFP4}\n")
    got = validate_silicon(tmp_path / "llama.csv")
    assert got.iloc[0][["status", "model"]].tolist() == ["ok", "llama-3.3-70b-nvfp4"]
    assert got.attrs["recipe_kv_dtype"] == 1
    want = _agg(load_model("llama-3.3-70b-nvfp4"), 8, _engine("vllm", None), 1024, 8192, 4, gpu="b200",
                run=INFERENCEX_RUN, settings=FP8_KV)
    assert got.iloc[0][["ttft_ms_predicted", "tpot_ms_predicted"]].tolist() == pytest.approx(list(want), rel=1e-12)
    fp8 = _agg(load_model("llama-3.1-70b").with_gemm_dtypes(attention="fp8", dense_ffn="fp8"), 8, _engine("vllm", None),
               1024, 8192, 4, gpu="b200", run=INFERENCEX_RUN, settings=FP8_KV)
    assert fp8[1] > 1.1 * want[1]  # FP4 weights: fewer bytes a decode step reads (at TP8 and 4 clients mostly latency)


def test_inferencex_runs_take_their_launch_scripts_scheduler_settings(tmp_path):
    """DeepSeek-R1 on B200 SGLang TP8 at 64 clients: the script's --max-running-requests 128 and
    --scheduler-recv-interval 30 (10 below 16 clients), with its chunked prefill 32768 and FP8 KV:
    a new request waits for the scheduler's poll, 29 / 2 decode steps on average while it decodes,
    which the prediction carries (8k/1k: TTFT 937 -> 1,169 ms, measured 3,090; TPOT 38.0 ms, measured 40.6)."""
    header = ROWS.read_text().splitlines()[0]
    (tmp_path / "b200.csv").write_text(f"{header}\n{B200_DEEPSEEK_DEC31}\n")
    got = validate_silicon(tmp_path / "b200.csv")
    assert got.attrs["recipe_scheduler"] == 1
    deepseek = load_model("deepseek-v3")
    launched = _budget(_engine("sglang", "0.5.6"), 32768).with_launch(max_prefill_tokens=32768)
    ttft, tpot = _agg(deepseek, 8, launched.with_launch(128, 30), 8192, 1024, 64, gpu="b200", run=INFERENCEX_RUN,
                      settings=FP8_KV)
    assert got.iloc[0][["ttft_ms_predicted", "tpot_ms_predicted"]].tolist() == pytest.approx([ttft, tpot], rel=1e-12)
    polled_every_step = _agg(deepseek, 8, launched, 8192, 1024, 64, gpu="b200", run=INFERENCEX_RUN, settings=FP8_KV)
    assert ttft - polled_every_step[0] > 5 * tpot
    settings = {(r.system, r.model_id, r.tp, r.precision): (r.running(1024, 1024), r.running(8192, 1024),
                                                          r.recv_steps(8), r.recv_steps(64))
                for r in RECIPES if r.max_running is not None}
    assert settings == {("h200_sxm", "deepseek-v3", None, None): (512, 256, None, None),
                        ("h200_sxm", "qwen3.5-397b-a17b", None, None): (128, 128, None, None),
                        ("b200_sxm", "qwen3.5-397b-a17b", None, "fp8"): (128, 128, 10, 30),
                        ("b200_sxm", "qwen3.5-397b-a17b", None, "bf16"): (128, 128, 10, 30),
                        ("b200_sxm", "deepseek-v3", 8, None): (128, 128, 10, 30),
                        ("b200_sxm", "deepseek-v3", 4, None): (32, 32, 10, 10),
                        ("b200_sxm", "qwen3.5-397b-a17b-nvfp4", None, None): (128, 128, 10, 30)}


# silicon_sample.csv lines, verbatim: DeepSeek-R1 on 8xB200 at 64 and 256 clients on 2026-03-25, when
# one commit (12ba0ae07) started the STP and the MTP key; Qwen3.5 on 4xB200, EP 1, the day the MTP key
# was added (35d4bb367); MiniMax-M2.5 on 2xB200 vLLM 0.19.0, 9 s after the last commit of pull request
# #947's branch (beb6a6b18), before its merge; Qwen3.5 on 4xB200, EP 4, 3 s after the STP key's 6a5dad463
CONFIG_RUNS = (
    "2026_03_25_deepseek_r1_b200_sxm_sglang_fp8_agg_1024x1024_c64_tp8_0_ep1_0_288,source_file=2026-03-25.csv; "
    "model=DeepSeek-R1; silicon_concurrency=64; measured=2026-03-25T16:34:14Z; wip=False; image=lmsysorg/sglang:"
    "v0.5.9-cu130,sglang,0.5.9,deepseek-ai/DeepSeek-R1,b200_sxm,fp8,agg,1024,1024,fp8,fp8_block,64,8,1,1,8,1,,,,,,"
    ",,,,,,,,,798.9930182558055,22.52931171204235",
    "2026_03_25_deepseek_r1_b200_sxm_sglang_fp8_agg_1024x1024_c256_tp8_0_ep1_0_283,source_file=2026-03-25.csv; "
    "model=DeepSeek-R1; silicon_concurrency=256; measured=2026-03-25T16:34:14Z; wip=False; image=lmsysorg/sglang:"
    "v0.5.9-cu130,sglang,0.5.9,deepseek-ai/DeepSeek-R1,b200_sxm,fp8,agg,1024,1024,fp8,fp8_block,256,8,1,1,8,1,,,,,"
    ",,,,,,,,,,2100.883371997088,42.55077158769099",
    "2026_04_06_qwen3_5_397b_b200_sxm_sglang_fp8_agg_1024x1024_c256_tp4_ep1_1957,source_file=2026-04-06.csv; "
    "model=Qwen3.5-397B; silicon_concurrency=256; measured=2026-03-20T00:00:00.000Z; wip=False; image=lmsysorg/"
    "sglang:v0.5.9-cu130,sglang,0.5.9,Qwen/Qwen3.5-397B-A17B,b200_sxm,fp8,agg,1024,1024,fp8,fp8_block,256,4,1,1,4,1"
    ",,,,,,,,,,,,,,,2485.321115226361,47.87484859135459",
    "2026_03_25_minimax_m2_5_b200_sxm_vllm_fp8_agg_1024x1024_c16_tp2_0_ep2_0_63,source_file=2026-03-25.csv; "
    "model=MiniMax-M2.5; silicon_concurrency=16; measured=2026-04-03T02:34:55Z; wip=True; image=vllm/vllm-openai:"
    "v0.19.0-cu130,vllm,0.19.0,MiniMaxAI/MiniMax-M2.5,b200_sxm,fp8,agg,1024,1024,fp8,fp8,16,2,1,1,1,2,,,,,,,,,,,,,"
    ",,99.48532253620216,13.619994021293897",
    "2026_03_25_qwen3_5_397b_b200_sxm_sglang_fp8_agg_1024x1024_c32_tp4_0_ep4_0_342,source_file=2026-03-25.csv; "
    "model=Qwen3.5-397B; silicon_concurrency=32; measured=2026-03-24T00:52:21Z; wip=False; image=lmsysorg/sglang:"
    "v0.5.9-cu130-amd64,sglang,0.5.9,Qwen/Qwen3.5-397B-A17B,b200_sxm,fp8,agg,1024,1024,fp8,fp8_block,32,4,1,1,1,4,,"
    ",,,,,,,,,,,,,661.896740739212,18.854730144085675",
)


def test_inferencex_rows_take_the_recipes_their_config_ran(tmp_path):
    """A recipe launches a row only where its config key ran it (a version in force when it was
    measured lists its lengths, GPUs, expert ranks and concurrency; inferencex.Recipe.ran): the two
    DeepSeek keys both ran 64 clients that day and launch the engine differently (left out as
    ambiguous); only the MTP key ran 256 (left out: speculative decoding), and only Qwen3.5's MTP
    key ran EP 1 on 4 GPUs, only its STP key EP 4 (at its script's 32,768-token budget, FP8 KV,
    128 requests, polls every 30 steps); a pull request's branch ran MiniMax on vLLM 0.19.0 with the
    recipe's 2 x ISL budget and FP8 KV. Moved 1 h earlier, before that branch commit, no recipe ran the
    MiniMax row: it keeps the engine defaults; moved to 2025-12-31, before the MTP key existed,
    the 256-client DeepSeek row is one the STP key (4 to 64 clients) did not run: defaults too."""
    assert _concs(4, 64) == (4, 8, 16, 32, 64) and _concs(8, 24) == (8, 16, 24) and _concs(4, 4) == (4,)
    header = ROWS.read_text().splitlines()[0]
    (tmp_path / "runs.csv").write_text("\n".join([header, *CONFIG_RUNS]) + "\n")
    got = validate_silicon(tmp_path / "runs.csv")
    assert got["status"].tolist() == [
        "recipe ambiguous: dsr1-fp8-b200-sglang or dsr1-fp8-b200-sglang-mtp",
        "speculative decoding run: dsr1-fp8-b200-sglang-mtp (mtp)",
        "speculative decoding run: qwen3.5-fp8-b200-sglang-mtp (mtp)", "ok", "ok"]
    assert (got.attrs["recipe_budget"], got.attrs["recipe_kv_dtype"], got.attrs["recipe_scheduler"]) == (2, 2, 1)
    qwen35 = load_model("qwen3.5-397b-a17b").with_gemm_dtypes(attention="fp8", dense_ffn="fp8", experts="fp8_block")
    stp = _agg(qwen35, 4, _budget(_engine("sglang", "0.5.9"), 32768).with_launch(128, 30, max_prefill_tokens=32768),
               1024, 1024, 32,
               Layout(4, "tp", "ep"), gpu="b200", run=INFERENCEX_RUN, settings=FP8_KV)
    assert got.iloc[4][["ttft_ms_predicted", "tpot_ms_predicted"]].tolist() == pytest.approx(list(stp), rel=1e-12)
    minimax = load_model("minimax-m2.5")
    launched = _agg(minimax, 2, _budget(_engine("vllm", "0.19.0"), 2048), 1024, 1024, 16, Layout(2, "tp", "ep"),
                    gpu="b200", run=INFERENCEX_RUN, settings=FP8_KV)
    assert got.iloc[3][["ttft_ms_predicted", "tpot_ms_predicted"]].tolist() == pytest.approx(list(launched), rel=1e-12)
    moved = [CONFIG_RUNS[3].replace("2026-04-03T02:34:55Z", "2026-04-03T01:34:55Z"),
             CONFIG_RUNS[1].replace("2026-03-25T16:34:14Z", "2025-12-31T15:18:00Z")]
    (tmp_path / "moved.csv").write_text("\n".join([header, *moved]) + "\n")
    before = validate_silicon(tmp_path / "moved.csv")
    assert before["status"].tolist() == ["ok", "ok"]
    assert (before.attrs["recipe_budget"], before.attrs["recipe_kv_dtype"], before.attrs["recipe_scheduler"]) == (0, 0, 0)
    defaults = _agg(minimax, 2, _engine("vllm", "0.19.0"), 1024, 1024, 16, Layout(2, "tp", "ep"), gpu="b200",
                    run=INFERENCEX_RUN)
    assert before.iloc[0][["ttft_ms_predicted", "tpot_ms_predicted"]].tolist() == pytest.approx(list(defaults), rel=1e-12)


def test_inferencex_runs_take_their_launch_scripts_kv_cache_dtype(frame):
    """Llama-3.1-70B (4: InferenceX's config.yaml ``kv-cache-dtype: fp8``), Qwen3.5 on H200 (2:
    ``--kv-cache-dtype fp8_e4m3``) and MiniMax-M2.5 on B200 vLLM 0.19.0 (18) are predicted with an FP8
    KV cache (test_agg_predictions_are_the_serving_model), and it moves them off the bf16 prediction;
    DeepSeek on H200 SGLang (6: no such flag) keeps bf16. The cache of a request halves: Llama's
    80 layers x 8 KV heads x 128 x (K, V) x 1 byte = 163,840 B per token on one GPU."""
    llama = load_model("llama-3.1-70b").with_gemm_dtypes(attention="fp8", dense_ffn="fp8", experts="fp8")
    bf16 = _agg(llama, 2, _engine("vllm", None), 1024, 8192, 8, run=INFERENCEX_RUN)
    assert frame.iloc[4]["tpot_ms_predicted"] != pytest.approx(bf16[1], rel=1e-4)
    assert per_gpu_kv_bytes(llama, 1, 1, FP8_KV) == 80 * 8 * 128 * 2 == per_gpu_kv_bytes(llama, 1, 1) // 2
    kv = {(r.system, r.model_id, r.engine, r.version, r.precision) for r in RECIPES if r.kv_dtype == "fp8"}
    assert kv == {("h200_sxm", "qwen3.5-397b-a17b", "sglang", None, None),
                  ("b200_sxm", "qwen3.5-397b-a17b", "sglang", None, "fp8"),
                  ("b200_sxm", "glm-5", "sglang", None, "fp8"),
                  ("b200_sxm", "deepseek-v3", "sglang", None, None),
                  ("b200_sxm", "minimax-m2.5", "vllm", "0.19.0", None),
                  ("b200_sxm", "gpt-oss-120b", "vllm", "0.15.1", None),
                  ("b200_sxm", "minimax-m2.5-nvfp4", "vllm", None, None), ("b200_sxm", "minimax-m2.5-nvfp4", "vllm", "0.19.0", None),
                  ("b200_sxm", "qwen3.5-397b-a17b-nvfp4", "sglang", None, None),
                  ("b200_sxm", "kimi-k2.5-nvfp4", "vllm", None, None),
                  ("b200_sxm", "llama-3.3-70b-nvfp4", "vllm", None, None),
                  *((s, "llama-3.1-70b", "vllm", None, None) for s in ("h100_sxm", "h200_sxm", "b200_sxm"))}


def test_a_repeated_inferencex_measurement_is_that_run(tmp_path):
    """NVIDIA's kimi-k2.5-gap-analysis.csv repeats InferenceX runs rounded to 0.01 ms: its row (copied
    verbatim, with the InferenceX row it repeats) is predicted under InferenceX's protocol, exactly as
    that row, and so is its row 0.02 ms off (the file collects InferenceX runs: one of a day the CSV
    does not hold). A row of another file is that InferenceX run only where it repeats it: 0.02 ms off
    it is another measurement and keeps the steady state. A repeat carries its run's prediction and
    counts once (validate.REPEATED_RUN)."""
    twins = pd.read_csv(FIX / "inferencex_twin_rows.csv")
    assert twins.silicon_data_source.str.startswith(("source_file=2026-04-06.csv;",
                                                     "source_file=kimi-k2.5-gap-analysis.csv;")).all()
    off = twins.iloc[[1]].assign(silicon_ttft_ms=twins.silicon_ttft_ms.iloc[1] + 0.02)
    elsewhere = twins.iloc[[1]].assign(silicon_data_source="source_file=other.csv; silicon_concurrency=4")
    path = tmp_path / "rows.csv"
    pd.concat([twins, off, elsewhere, elsewhere.assign(silicon_ttft_ms=off.silicon_ttft_ms)]).to_csv(path, index=False)
    got = validate_silicon(path)
    # the twin and the other file's exact repeat are the dated run filed again: predicted, counted once
    assert list(got.status) == ["ok", "repeats an earlier row: row 0", "ok", "repeats an earlier row: row 0", "ok"]
    assert summary(got).set_index("model").loc["all", "n"] == 3
    kimi = load_model("kimi-k2-thinking").with_gemm_dtypes(experts="int4_w4a16", group_size=32)
    for i, run in enumerate((INFERENCEX_RUN,) * 4 + (None,)):
        ttft, tpot = _agg(kimi, 8, _engine("vllm", "0.16.0"), 8192, 1024, 4, run=run)
        assert got.iloc[i][["ttft_ms_predicted", "tpot_ms_predicted"]].tolist() == pytest.approx([ttft, tpot],
                                                                                                  rel=1e-12), i
    assert got.iloc[4].ttft_ms_predicted != pytest.approx(got.iloc[1].ttft_ms_predicted, rel=1e-3)
    assert got.attrs["protocols"] == {"inferencex run": 4, "vllm bench serve run": 0, "aiconfigurator run": 0,
                                      "steady state": 1}
    assert got.attrs["remapped"]["inferencex run: same measurement"] == 2  # the repeats, not the day the CSV lacks


def _moved(i: int, measured: str, **cols) -> pd.DataFrame:
    """Fixture row ``i`` measured at ``measured`` instead (its ``measured=`` stamp replaced), with ``cols`` set."""
    src = pd.read_csv(ROWS).iloc[[i]]
    stamp = src.silicon_data_source.str.extract(r"measured=([^;]+)")[0].iloc[0]
    return src.assign(silicon_data_source=src.silicon_data_source.str.replace(stamp, measured, regex=False), **cols)


def test_disagg_prediction_is_prefill_and_decode_workers(tmp_path):
    """cfg434 (row 7) measured on 2026-02-06, when InferenceX's H200 config ran no MTP entry: prefill
    worker tp8, decode worker attention dp8 / experts ep8 at 32 per rank (x8 ranks): the closed loop of
    256 clients over one prefill and 256 / 256 = 1 decode worker."""
    model = load_model("deepseek-v3")  # its checkpoint's FP8 block-128 everywhere, not the per-tensor label
    eng = _engine("sglang", "0.5.8.post1")
    pre = instance("h200", 8, layout=Layout(8), engine=eng)
    dec = instance("h200", 8, layout=Layout(8, "dp", "ep"), engine=eng)
    _moved(7, "2026-02-06T00:00:00.000Z").to_csv(tmp_path / "r.csv", index=False)
    row = validate_silicon(tmp_path / "r.csv").iloc[0]
    assert (row["isl"], row["osl"], row["concurrency"], row["status"]) == (8192, 1024, 256, "ok")
    point = disaggregated_closed_loop(model, pre, 1, dec, 1, 8192, 1024, 256)
    assert row["ttft_ms_predicted"] == pytest.approx(point.ttft_s * 1e3, rel=1e-12)
    assert row["tpot_ms_predicted"] == pytest.approx(point.tpot_s * 1e3, rel=1e-12)
    # queueing: above the unloaded prefill, below the saturated closed loop's bound
    assert row["ttft_ms_predicted"] > float(prefill_latency(model, pre, 8192).total_s) * 1e3


def test_disagg_inferencex_rows_take_their_recipes_workers(tmp_path):
    """Row 8, an InferenceX DeepSeek-R1 run on H200 (1K/1K, c = 1,024, prefill and decode TP8 x EP8)
    that gives no worker counts, measured on 2026-02-06 (the config of its own date, 02-07 22:52, also
    runs that split with MTP: test_status_per_rule): InferenceX's config runs that layout as 1 prefill
    and 6 decode workers with DP attention (inferencex.DISAGG_RECIPES; the CSV's row reads attention
    TP8), and it is predicted so, not as one TP decode worker. At 8K/1K, c = 16
    the config runs 1P6D and 1P3D: the row is left out, saying so; a concurrency no recipe runs
    (c = 2,048 at 8K/1K) keeps the row's own (none: one per role)."""
    model = load_model("deepseek-v3")
    eng = _engine("sglang", "0.5.8.post1")
    pre, dec = (instance("h200", 8, layout=Layout(8, "dp", "ep"), engine=eng) for _ in range(2))
    stp = _moved(8, "2026-02-06T12:00:00Z")
    stp.to_csv(tmp_path / "s.csv", index=False)
    row = validate_silicon(tmp_path / "s.csv").iloc[0]
    assert (row["isl"], row["osl"], row["concurrency"], row["status"]) == (1024, 1024, 1024, "ok")
    six = disaggregated_closed_loop(model, pre, 1, dec, 6, 1024, 1024, 1024)
    assert row["ttft_ms_predicted"] == pytest.approx(six.ttft_s * 1e3, rel=1e-12)
    assert row["tpot_ms_predicted"] == pytest.approx(six.tpot_s * 1e3, rel=1e-12)
    tp_pre, tp_dec = (instance("h200", 8, layout=Layout(8, "tp", "ep"), engine=eng) for _ in range(2))
    tp_six = disaggregated_closed_loop(model, tp_pre, 1, tp_dec, 6, 1024, 1024, 1024)
    assert abs(tp_six.ttft_s / six.ttft_s - 1) > 0.1  # the attention layout matters here
    one = disaggregated_closed_loop(model, tp_pre, 1, tp_dec, 1, 1024, 1024, 1024)
    assert one.tpot_s > 1.2 * tp_six.tpot_s  # six decode workers hold a sixth of the batch each
    src = stp
    variants = pd.concat([src.assign(isl=8192, prefill_moe_ep_size=1, decode_moe_ep_size=1, prefill_moe_tp_size=8,
                                     decode_moe_tp_size=8, silicon_ttft_ms=900.0,
                                     silicon_data_source=src.silicon_data_source.str.replace("=1024", f"={c}"))
                          for c in (16, 2048)])
    variants.to_csv(tmp_path / "v.csv", index=False)
    got = validate_silicon(tmp_path / "v.csv")
    assert got["status"].tolist()[0] == "recipe ambiguous: 1P3D or 1P6D"
    assert got["status"].tolist()[1] == "ok"
    # a row not from InferenceX (the same row under another source) takes no recipe: one worker per role
    src.assign(silicon_data_source=src.silicon_data_source.str.replace("source_file=2026-03-25.csv",
                                                                      "source_file=mine.csv")).to_csv(
        tmp_path / "o.csv", index=False)
    other = validate_silicon(tmp_path / "o.csv")
    assert other.iloc[0]["tpot_ms_predicted"] == pytest.approx(one.tpot_s * 1e3, rel=1e-12)
    eng_tep = instance("h200", 8, layout=Layout(8), engine=eng)
    lone = disaggregated_closed_loop(model, eng_tep, 1, eng_tep, 1, 8192, 1024, 2048)
    assert got.iloc[1]["tpot_ms_predicted"] == pytest.approx(lone.tpot_s * 1e3, rel=1e-12)


@pytest.mark.parametrize(("measured", "expected"), [
    ("2026-02-06T12:00:00Z", (1, "ok")),  # before B200's first disaggregated config: the row's own
    ("2026-02-07T07:09:01Z", (3, "ok")),  # STP 1P3D only; the MTP key arrives 2026-02-10
    ("2026-02-07T00:00:00.000Z", (3, "ok")),  # a date-only record: the config of any time that day
    ("2026-02-13T19:05:38Z", (None, "recipe ambiguous: 1P1D with MTP or 1P3D")),  # MTP runs c = 64 as 1P1D
])
def test_disagg_recipes_are_those_in_force_when_the_row_was_measured(tmp_path, measured, expected):
    """Row 8 as a B200 run at 1K/1K, c = 64 (TP8 x EP8 both roles), measured at four times: it
    takes the recipes of the config versions in force then (inferencex.DISAGG_RECIPES' since/until)."""
    src = pd.read_csv(ROWS).iloc[[8]]
    src = src.assign(system="b200_sxm", silicon_data_source=src.silicon_data_source.str.replace(
        "silicon_concurrency=1024", "silicon_concurrency=64").str.replace("2026-02-07T22:52:25Z", measured))
    src.to_csv(tmp_path / "b.csv", index=False)
    got = validate_silicon(tmp_path / "b.csv").iloc[0]
    n_decode, status = expected
    assert got["status"] == status
    if n_decode is not None:
        eng = _engine("sglang", "0.5.8.post1")
        pre, dec = (instance("b200", 8, layout=Layout(8, "tp", "ep"), engine=eng) for _ in range(2))
        point = disaggregated_closed_loop(load_model("deepseek-v3"), pre, 1, dec, n_decode, 1024, 1024, 64)
        assert got["tpot_ms_predicted"] == pytest.approx(point.tpot_s * 1e3, rel=1e-12)


@pytest.mark.parametrize(("system", "ep", "conc", "measured", "status"), [
    # the CSV's B200 rows of this label and stamp measure 7.77 and 12.87 ms TPOT: the MTP and the STP run
    ("b200_sxm", 8, 32, "2026-03-18T21:01:05Z", "recipe ambiguous: 1P3D or 1P3D with MTP"),
    ("h100_sxm", 1, 64, "2026-03-01T00:00:00.000Z", "speculative decoding run: dsr1-fp8-h100-dynamo-sglang (mtp)"),
    ("h100_sxm", 1, 64, "2026-02-11T00:00:00.000Z", "ok"),  # H100's key before it turned MTP (02-13)
])
def test_a_disagg_row_that_mtp_may_have_run_is_not_predicted_as_stp(tmp_path, system, ep, conc, measured, status):
    """Row 8 as a run of another system, expert split, concurrency and time: where the InferenceX
    entries that fit it decode with and without MTP it is ambiguous (the row does not say which ran),
    where only MTP entries fit it is a speculative run, left out as aggregated ones are."""
    tp = 8 if system == "b200_sxm" else 16  # H100's recipes run TP16 over two nodes
    row = _moved(8, measured, system=system, prefill_tp_size=tp, decode_tp_size=tp, prefill_moe_ep_size=ep,
                 decode_moe_ep_size=ep, prefill_moe_tp_size=tp // ep, decode_moe_tp_size=tp // ep)
    row = row.assign(silicon_data_source=row.silicon_data_source.str.replace("silicon_concurrency=1024",
                                                                             f"silicon_concurrency={conc}"))
    row.to_csv(tmp_path / "m.csv", index=False)
    assert validate_silicon(tmp_path / "m.csv").iloc[0]["status"] == status


def test_a_disagg_row_with_its_workers_that_only_mtp_ran_is_a_speculative_run(tmp_path):
    """Row 7 (it gives its workers, 1P1D) as a B200 run at 8K/1K, c = 16, EP8 both roles, on
    2026-02-20: the B200 config then runs 1P1D at c = 16 in its MTP key only."""
    row = _moved(7, "2026-02-20T00:00:00.000Z", system="b200_sxm", prefill_moe_ep_size=8, prefill_moe_tp_size=1,
                 decode_batch_size=2)
    row = row.assign(silicon_data_source=row.silicon_data_source.str.replace("silicon_concurrency=256",
                                                                             "silicon_concurrency=16"))
    row.to_csv(tmp_path / "w.csv", index=False)
    assert validate_silicon(tmp_path / "w.csv").iloc[0]["status"] == \
        "speculative decoding run: dsr1-fp8-b200-dynamo-sglang-mtp (mtp)"
    row.assign(silicon_data_source=row.silicon_data_source.str.replace("2026-02-20", "2026-02-10")).to_csv(
        tmp_path / "w.csv", index=False)  # before the MTP key (02-12): no entry runs 1P1D at c = 16, the row's own
    assert validate_silicon(tmp_path / "w.csv").iloc[0]["status"] == "ok"


@pytest.fixture(scope="module")
def disagg():
    model = load_model("deepseek-v3")
    pre = instance("h200", 8, layout=Layout(8), engine="sglang")
    dec = instance("h200", 8, layout=Layout(8, "dp", "ep"), engine="sglang")
    return model, pre, dec


def test_a_busy_attention_dp_prefill_shares_its_moe_over_every_rank():
    """Every rank of a DP8 worker prefilling 1,024 tokens at once (``every_rank``): attention is one
    rank's 1,024 tokens, as a lone prefill's; the MoE runs all ranks' 8,192, as a lone 8,192-token
    prefill's MoE on the same worker. Under attention TP it changes nothing."""
    model = load_model("deepseek-v3")
    dp = instance("h200", 8, layout=Layout(8, "dp", "ep"), engine="sglang")
    busy = prefill_latency(model, dp, 1024, every_rank=True)
    lone, wide = prefill_latency(model, dp, 1024), prefill_latency(model, dp, 8192)
    assert busy.ops["moe.experts"] == pytest.approx(wide.ops["moe.experts"], rel=1e-12)
    assert busy.ops["mla.mla"] == pytest.approx(lone.ops["mla.mla"], rel=1e-12)
    assert busy.ops["moe.experts"] > 2 * lone.ops["moe.experts"]
    tp = instance("h200", 8, layout=Layout(8, "tp", "ep"), engine="sglang")
    assert prefill_latency(model, tp, 1024, every_rank=True).total_s == prefill_latency(model, tp, 1024).total_s


def test_an_attention_dp_prefill_rank_chunks_at_its_share_of_the_budget():
    """SGLang divides the step budget among DP-attention ranks (server_args: chunked_prefill_size //
    dp_size): one 8K prompt alone on a DP8 prefill worker runs in 1,024-token chunks, as on a
    worker launched with that budget undivided; vLLM's ranks keep 8,192 each."""
    model = load_model("deepseek-v3")
    dec = instance("h200", 8, layout=Layout(8, "tp", "ep"), engine="sglang")

    def ttft(eng) -> float:
        pre = instance("h200", 8, layout=Layout(8, "dp", "ep"), engine=eng)
        return disaggregated_closed_loop(model, pre, 1, dec, 1, 8192, 64, 1).ttft_s

    for eid, chunk in (("sglang", 1024), ("vllm", 8192)):
        eng = load_engine(eid)
        undivided = eng.model_copy(update={"dp_attention_divides_budget": False})
        assert ttft(eng) == pytest.approx(ttft(undivided.with_chunked_prefill(chunk)), rel=1e-12)
    sglang = load_engine("sglang")
    assert ttft(sglang) > 1.01 * ttft(sglang.model_copy(update={"dp_attention_divides_budget": False}))


def test_an_attention_dp_prefill_worker_is_one_server_per_rank():
    """A DP8 prefill worker at 1K prompts: 8 servers (one scheduler per rank), each serving one
    prompt per busy forward (its 1,024-token share of SGLang's 8,192 budget, the MoE over all
    ranks' tokens). Its utilisation is then the arrival rate times that forward over 8 (M/D/c),
    the others' arrivals ``X (c - 1) / c`` by the closed loop."""
    model = load_model("deepseek-v3")
    eng = load_engine("sglang")
    pre = instance("h200", 8, layout=Layout(8, "dp", "ep"), engine=eng)
    dec = instance("h200", 8, layout=Layout(8, "tp", "ep"), engine=eng)
    c = 64
    point = disaggregated_closed_loop(model, pre, 1, dec, 4, 1024, 256, c)
    rank = instance("h200", 8, layout=Layout(8, "dp", "ep"), engine=eng.with_chunked_prefill(1024))
    forward_s = float(prefill_latency(model, rank, 1024, every_rank=True).total_s)
    assert point.prefill_share == pytest.approx(point.throughput_rps * (c - 1) / c * forward_s / 8, rel=1e-9)
    assert 0.1 < point.prefill_share < 0.9  # one server per worker would saturate it


def test_disagg_one_client_is_prefill_transfer_decode(disagg):
    model, pre, dec = disagg
    for isl in (1024, 8192):  # a prompt below and at/above the prefill budget
        p = disaggregated_closed_loop(model, pre, 2, dec, 3, isl, 512, 1)
        kv = per_gpu_kv_bytes(model, isl, pre.parallel) / (min(pre.gpu.nic_gbps, dec.gpu.nic_gbps) * 1e9 / 8)
        assert p.ttft_s == pytest.approx(float(prefill_latency(model, pre, isl).total_s) + kv, rel=0, abs=1e-9)
        assert p.tpot_s == pytest.approx(decode_step_s(model, dec, 1, isl + 256), rel=0, abs=1e-9)
        assert 0 < kv < 0.1 * p.ttft_s  # the transfer is small


def test_disagg_littles_law_and_monotone(disagg):
    model, pre, dec = disagg
    last = None
    for c in (1, 4, 16, 64, 256, 1024, 4096):
        p = disaggregated_closed_loop(model, pre, 1, dec, 2, 4096, 1024, c)
        assert p.throughput_rps * (p.ttft_s + 1023 * p.tpot_s) == pytest.approx(c, rel=1e-6)
        assert p.output_tokens_per_s == pytest.approx(1024 * p.throughput_rps, rel=1e-12)
        if last is not None:
            # throughput plateaus at the prefill workers' capacity once they saturate (flat to ~1e-5)
            assert p.ttft_s >= last.ttft_s and p.throughput_rps >= last.throughput_rps * (1 - 1e-4)
            # TPOT: the kernel tables' decode step is not strictly monotone in the batch at ~1e-4
            assert p.tpot_s >= last.tpot_s * (1 - 1e-3) and p.batch >= last.batch * (1 - 1e-4)
        last = p
    assert any("memory-bound" in n for n in last.notes)
    # more prefill workers: shorter TTFT at the same load
    assert disaggregated_closed_loop(model, pre, 4, dec, 2, 4096, 1024, 256).ttft_s < \
        disaggregated_closed_loop(model, pre, 1, dec, 2, 4096, 1024, 256).ttft_s


@pytest.mark.parametrize("kw", [dict(n_prefill_workers=0), dict(n_decode_workers=0), dict(concurrency=0),
                                dict(n_decode_workers=1.5), dict(isl_tokens=0)])
def test_disagg_bad_input_one_line(disagg, kw):
    model, pre, dec = disagg
    args = dict(n_prefill_workers=1, n_decode_workers=1, isl_tokens=1024, osl_tokens=128, concurrency=8) | kw
    with pytest.raises(InvalidInput) as exc:
        disaggregated_closed_loop(model, pre, args["n_prefill_workers"], dec, args["n_decode_workers"],
                                  args["isl_tokens"], args["osl_tokens"], args["concurrency"])
    assert "\n" not in str(exc.value) and str(exc.value).split(":")[0] in kw


def test_summary_counts_and_errors(frame):
    s = summary(frame).set_index(["system", "mode", "model"])
    ok = frame[frame["status"] == "ok"]
    mm = ok[(ok["model"] == "minimax-m2.5") & (ok["system"] == "h200_sxm")]
    err = ((mm["ttft_ms_predicted"] / mm["ttft_ms_measured"] - 1).abs() * 100)
    got = s.loc[("h200_sxm", "agg", "minimax-m2.5")]
    assert got["n"] == 2
    assert got["ttft_median_abs_error_pct"] == pytest.approx(err.median())
    assert got["ttft_max_abs_error_pct"] == pytest.approx(err.max())
    signed = (mm["tpot_ms_predicted"] / mm["tpot_ms_measured"] - 1) * 100
    assert got["tpot_median_signed_error_pct"] == pytest.approx(signed.median())
    assert s.loc[("h200_sxm", "agg", "all"), "n"] == 13
    assert s.loc[("b200_sxm", "agg", "all"), "n"] == 3


def test_summary_per_engine(frame):
    """The same figures per serving engine: each engine's rows, and the system's ``all`` equal to the
    per-model summary's; an unknown grouping is one line naming ``by``."""
    s = summary(frame, by="engine").set_index(["system", "mode", "engine"])
    ok = frame[(frame["status"] == "ok") & (frame["system"] == "h200_sxm") & (frame["mode"] == "agg")]
    for engine, rows in ok.groupby("engine"):
        err = (rows["ttft_ms_predicted"] / rows["ttft_ms_measured"] - 1).abs() * 100
        got = s.loc[("h200_sxm", "agg", engine)]
        assert got["n"] == len(rows) and got["ttft_median_abs_error_pct"] == pytest.approx(err.median())
    assert set(ok["engine"]) == {"vllm", "sglang"}
    per_model = summary(frame).set_index(["system", "mode", "model"])
    assert s.loc[("h200_sxm", "agg", "all")].to_dict() == per_model.loc[("h200_sxm", "agg", "all")].to_dict()
    with pytest.raises(InvalidInput, match="^by: unknown 'gpu'"):
        summary(frame, by="gpu")


def test_beyond_2x_counts_both_ways():
    """A 3x under-prediction has |error| 67%, less than a 1.8x over-prediction's 80%; the 2x count
    and the worst-row order go by how many times off a row is, either way."""
    ratios = {"a": 1 / 3, "b": 1.8, "c": 2.5, "d": 1.0}
    df = pd.DataFrame([{c: math.nan for c in COLUMNS} | {
        "system": "h200_sxm", "mode": "agg", "model": name, "status": "ok",
        "ttft_ms_measured": 100.0, "ttft_ms_predicted": 100.0,
        "tpot_ms_measured": 10.0, "tpot_ms_predicted": 10.0 * r} for name, r in ratios.items()])
    s = summary(df).set_index("model")
    assert s.loc["all", "tpot_rows_beyond_2x"] == 2 and s.loc["all", "ttft_rows_beyond_2x"] == 0
    assert s.loc["b", "tpot_max_abs_error_pct"] > s.loc["a", "tpot_max_abs_error_pct"]  # why |error| cannot say
    assert list(worst_rows(df)["model"]) == ["a", "c", "b", "d"]
    # the sign |error| drops: errors -66.7%, +80%, +150%, 0% -> median (0 + 80) / 2 = +40%
    assert s.loc["all", "tpot_median_signed_error_pct"] == pytest.approx(40.0)
    assert s.loc["a", "tpot_median_signed_error_pct"] == pytest.approx(-200 / 3)


def test_runs_json(frame):
    df = validate_runs(FIX / "runs")
    assert tuple(df.columns) == COLUMNS
    by = df.set_index("status")
    closed = by.loc["ok"]
    doc = json.loads((FIX / "runs" / "vllm-infqps-concurrency16-MiniMax-M2.5-20260310-141502.json").read_text())
    assert (closed["isl"], closed["osl"], closed["concurrency"]) == (1024, 1024, 16)  # 163840 / 160 tokens
    assert closed["ttft_ms_measured"] == doc["mean_ttft_ms"] and closed["tpot_ms_measured"] == doc["mean_tpot_ms"]
    model = load_model("minimax-m2.5")  # the checkpoint's FP8 block-128; tp=8 runs its experts EP8
    # 160 completed over 16 clients: 10 requests per client from a burst start, lengths as measured
    ttft, tpot = _agg(model, 8, _engine("vllm", "0.18.0"), 1024, 1024, 16, Layout(8, "tp", "ep"), run=BenchmarkRun(10))
    assert closed["ttft_ms_predicted"] == pytest.approx(ttft, rel=1e-12)
    assert closed["tpot_ms_predicted"] == pytest.approx(tpot, rel=1e-12)
    assert math.isnan(by.loc["no max_concurrency (open-loop run)", "ttft_ms_predicted"])


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "prfaas_plan.cli", "validate", *args],
                          capture_output=True, text=True, timeout=120)


def test_bad_inputs_exit_2_one_line(tmp_path):
    rows = pd.read_csv(ROWS, dtype=str, keep_default_na=False)
    rows.drop(columns=["silicon_ttft_ms", "moe_ep_size"]).to_csv(tmp_path / "cols.csv", index=False)
    neg = rows.iloc[:1].copy()
    neg["silicon_data_source"] = neg["silicon_data_source"].str.replace("silicon_concurrency=8", "silicon_concurrency=-4")
    neg.to_csv(tmp_path / "neg.csv", index=False)
    run = {"model_id": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h200", "tp": 1, "max_concurrency": 64,
           "completed": 640, "total_input_tokens": 640 * 2000, "total_output_tokens": 640 * 100,
           "mean_ttft_ms": 10.0, "mean_tpot_ms": 1.0}
    for name, doc in (("negative.json", {**run, "max_concurrency": -4}), ("none.json", {**run, "completed": 0}),
                      ("list.json", [run])):
        (tmp_path / name).write_text(json.dumps(doc))
    cases = {
        ("--csv", str(tmp_path / "cols.csv")): "moe_ep_size, silicon_ttft_ms",
        ("runs", str(FIX / "genai_perf_profile_export.json")): "is not a `vllm bench serve --save-result` JSON",
        ("--csv", str(tmp_path / "neg.csv")): "concurrency",
        ("runs",): "give the result JSON file or folder",
        ("runs", str(tmp_path / "negative.json")): "max_concurrency=-4; give a count >= 1",
        ("runs", str(tmp_path / "none.json")): "completed=0; a run needs at least one completed request",
        ("runs", str(tmp_path / "list.json")): "is not a `vllm bench serve --save-result` JSON (not an object)",
        ("runs", str(tmp_path / "missing.json")): "is neither a result JSON nor a folder of them",
        ("--csv", str(tmp_path / "missing.csv")): "is not a file; give the path of silicon_sample.csv",
        ("runs", "a" * 100_000): "... (100,000 characters) is neither a result JSON nor a folder of them",  # ENAMETOOLONG
    }
    for args, words in cases.items():
        r = _cli(*args)
        assert r.returncode == 2, (args, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0] and "Traceback" not in r.stderr, (args, r.stderr)


# a dense model's row from silicon_sample.csv (line 917) with MoE sizes 1 x 1 on its two GPUs
QWEN3_32B_TP2 = ("qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_sglang_agg_1024x128_c16_tp2_epnone_1,source_file=/Users/"
                 "harrli/projects/aic-auto-gap-analysis/data/h100_sxm/sglang/0.5.1.post1/Qwen_Qwen3-32B.csv; "
                 "silicon_concurrency=16,sglang,0.5.1.post1,Qwen/Qwen3-32B,h100_sxm,,agg,1024,128,,,16,2,1,,1,1,,,,,,,,"
                 ",,,,,,,840.8064807531249,16.538571871875")


def test_a_dense_models_moe_sizes_do_not_make_its_layout(tmp_path):
    # the CSV writes moe_tp 1 x moe_ep 1 for dense models whatever their GPUs: the worker is TP over tp_size
    header = ROWS.read_text().splitlines()[0]
    (tmp_path / "dense.csv").write_text(f"{header}\n{QWEN3_32B_TP2}\n")
    row = validate_silicon(tmp_path / "dense.csv").iloc[0]
    assert row["status"] == "ok"
    ttft, tpot = _agg(load_model("qwen3-32b"), 2, _engine("sglang", "0.5.1.post1"), 1024, 128, 16, gpu="h100",
                      run=AIC_RUN)
    assert (row["ttft_ms_predicted"], row["tpot_ms_predicted"]) == (pytest.approx(ttft, rel=1e-12),
                                                                  pytest.approx(tpot, rel=1e-12))


def test_zero_concurrency_is_a_status(tmp_path):
    rows = pd.read_csv(ROWS, dtype=str, keep_default_na=False).iloc[:1].copy()
    rows["silicon_data_source"] = rows["silicon_data_source"].str.replace("silicon_concurrency=8", "silicon_concurrency=0")
    rows.to_csv(tmp_path / "zero.csv", index=False)
    assert validate_silicon(tmp_path / "zero.csv")["status"].tolist() == ["invalid concurrency"]
    with pytest.raises(InvalidInput, match="csv: .* lacks the columns"):
        pd.DataFrame({"id": [1]}).to_csv(tmp_path / "x.csv", index=False)
        validate_silicon(tmp_path / "x.csv")


def test_prompt_peak_share_is_littles_law_over_the_gpus_fastest_peak():
    """H200 Llama-3.1-8B-FP8 on vLLM 0.12, TP1, 2000/100 at 64 clients (silicon_sample.csv line 1712:
    TTFT 121.73 ms, TPOT 9.74 ms): 64 / (0.12173 + 99 x 0.00974) s = 59.1 requests a second of
    2,000-token prompts at 2 x 6,979,321,856 GEMM FLOPs a token plus 524,288 per causal pair, over
    H200's FP8 dense peak, 1,978.9 TFLOP/s: 86% of it for prompts alone. B200 divides by its FP4
    peak (9,000 TFLOP/s) whatever the row's dtype, so the share stays a lower bound; a disaggregated
    row, an unknown model, an unknown GPU, and a row without prompt tokens or clients get none (and
    leave the others of their model and GPU theirs)."""
    base = {c: math.nan for c in COLUMNS} | {"model": "llama-3.1-8b", "system": "h200_sxm", "mode": "agg",
                                             "status": "ok", "isl": 2000, "osl": 100, "concurrency": 64.0, "tp": 1.0,
                                             "attention_dp": 1.0, "ttft_ms_measured": 121.73, "tpot_ms_measured": 9.74,
                                             "ttft_ms_predicted": 207.03, "tpot_ms_predicted": 25.33}
    df = pd.DataFrame([base, base | {"system": "b200_sxm", "tp": 2.0, "attention_dp": math.nan},
                       base | {"mode": "disagg"}, base | {"model": "no-such-model"}, base | {"system": "gb200"},
                       base | {"isl": 0}, base | {"concurrency": 0.0}])  # no prompt, no clients: no rate to speak of
    rate = 64 / ((121.73 + 99 * 9.74) / 1e3)
    flops = 2 * 6_979_321_856 * 2000 + 524_288 * 2000 * 2001 / 2
    share = prompt_peak_share(df)
    assert share[0] == pytest.approx(rate * flops / 1978.9e12, rel=1e-12) and 0.86 < share[0] < 0.87
    assert share[1] == pytest.approx(rate * flops / (2 * 9000e12), rel=1e-12)
    assert share[2:].isna().all()
    worst = worst_rows(df).set_index(["system", "mode", "model", "isl", "concurrency"])  # with each row's share
    assert worst.loc[("h200_sxm", "agg", "llama-3.1-8b", 2000, 64.0), "prompt_peak_share"] == pytest.approx(share[0])
    assert worst.loc[("b200_sxm", "agg", "llama-3.1-8b", 2000, 64.0), "prompt_peak_share"] == pytest.approx(share[1])


def test_html_page_and_json(tmp_path):
    page = tmp_path / "v.html"
    r = _cli("--csv", str(ROWS), "--html", str(page), "--format", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert {(o["system"], o["model"]) for o in out} >= {("h200_sxm", "minimax-m2.5"), ("h200_sxm", "all")}
    text = page.read_text()
    for name in ("ttft-scatter", "tpot-scatter"):
        assert name in text
    assert 'data-table="engines"' in text  # the per-engine summary
    assert '"type":"log"' in text.replace(" ", "") and "predicted vs measured" in text
    assert 'data-table="worst"' in text and "Content-Security-Policy" in text
    worst = html.unescape(re.search(r'data-table="worst".*?</table>', text, re.S).group(0))
    assert "prompt peak share" in worst and re.search(r">\d+\.\d%</td>", worst)  # a share, in percent
    # the rows per protocol and per relabelling rule, as the frame counts them (test_protocol_rule_per_source)
    mapping = html.unescape(re.search(r'data-table="mapping".*?</table>', text, re.S).group(0))
    for rule, n in (("inferencex run", 12), ("aiconfigurator run", 4), ("steady state", 0),
                    ("checkpoint dtypes over the label", 10), ("layout of the run's id", 2),
                    ("experts ep: tp split refused", 1), ("token budget per step of the launch script", 5),
                    ("KV-cache dtype of the launch script", 6), ("experts dtype of the launch script", 1),
                    ("experts kernel of the launch script", 1),
                    ("running-request cap or scheduler polling of the launch script", 3),
                    ("static memory share of the launch script", 4),
                    ("SGLang as AIConfigurator's generator launched it (mixed chunks, max prefill tokens)", 2)):
        assert re.search(rf"{re.escape(rule)}</td>\s*<td[^>]*>{n}</td>", mapping), rule
    assert [p.name for p in tmp_path.iterdir()] == ["v.html"]  # atomic: no temporary file left


def test_table_says_how_many_rows_each_run_protocol_predicted():
    r = _cli("--csv", str(ROWS))
    assert r.returncode == 0, r.stderr
    # the fixture's mapped rows: 12 InferenceX runs, 4 AIConfigurator runs (test_protocol_rule_per_source)
    lines = r.stdout.splitlines()
    assert "rows mapped per run protocol: inferencex run 12, aiconfigurator run 4" in lines
    assert "rows run at their launch script's token budget per step: 5" in lines  # RECIPES: 2, 3, 6, 13, 18
    assert "rows run at their launch script's KV-cache dtype: 6" in lines  # RECIPES: 2, 3, 4, 18, 20, 21
    assert "rows run at their launch script's experts dtype: 1" in lines  # RECIPES: 20
    assert "rows run with their launch script's experts kernel: 1" in lines  # RECIPES: 13 (Marlin)
    assert "rows run at their launch script's static memory share: 4" in lines  # SGLang RECIPES: 2, 3, 6, 19
    assert ("rows run as AIConfigurator's generator launched SGLang (mixed chunks, --max-prefill-tokens ISL + 1500): 2"
            in lines)  # 10, 14
    # relabelled (validate.REMAPS): per-tensor "fp8" on the block-128 checkpoints of MiniMax-M2.5
    # (0, 1, 18), DeepSeek-V3/R1 (6; 7 and 8 are left out), Qwen3-235B-FP8 (9, 11) and GLM-5-FP8 (19), "nvfp4" on gpt-oss's
    # MXFP4 checkpoint (13, 20) and on MiniMax's NVFP4 release, whose attention is bf16 (21); experts TP8 refused (0)
    assert lines[-2] == ("rows predicted otherwise than labelled: checkpoint dtypes over the label 10, "
                         "experts ep: tp split refused 1, layout of the run's id 2")  # 3: TP 64 is its id's TP 8 / EP 8;
    # 18: the database dump's TP 2 / DP 2 / EP 4 is its {tp: 2, ep: 2} run
    # and the run whose prompts needed the most of its GPUs' peak (validate.prompt_peak_share)
    ok = errors_pct(validate_silicon(ROWS))
    share = prompt_peak_share(ok)
    top = ok.loc[share.idxmax()]
    assert lines[-1] == (f"prompt compute at the measured request rate: at most {share.max():.1%} of the GPUs' fastest "
                         f"dense peak ({top['model']} on {top['system']}, {top['engine']} {top['engine_version']}, "
                         f"{top['isl']:.0f}/{top['osl']:.0f} tokens, {top['concurrency']:.0f} clients); runs above "
                         "100%, which cannot have prefilled every prompt: 0")


def test_a_run_that_cannot_have_prefilled_its_prompts_is_counted(tmp_path):
    """A `vllm bench serve` result of Llama-3.1-8B on one H200 at 64 clients, 2000/100, TTFT 10 ms and
    TPOT 1 ms: 64 / (0.010 + 99 x 0.001) s = 587 requests a second of 2,000-token prompts need 8.9x
    the H200's FP8 dense peak (test_prompt_peak_share_is_littles_law_over_the_gpus_fastest_peak's
    arithmetic): the table's last line counts it (the run names no engine version)."""
    run = {"model_id": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h200", "tp": 1, "max_concurrency": 64,
           "completed": 640, "total_input_tokens": 640 * 2000, "total_output_tokens": 640 * 100,
           "mean_ttft_ms": 10.0, "mean_tpot_ms": 1.0}
    (tmp_path / "run.json").write_text(json.dumps(run))
    r = _cli("runs", str(tmp_path / "run.json"))
    assert r.returncode == 0, r.stderr
    share = 64 / 0.109 * (2 * 6_979_321_856 * 2000 + 524_288 * 2000 * 2001 / 2) / 1978.9e12
    assert r.stdout.splitlines()[-1] == (
        f"prompt compute at the measured request rate: at most {share:.1%} of the GPUs' fastest dense peak "
        "(llama-3.1-8b on h200_sxm, vllm, 2000/100 tokens, 64 clients); runs above 100%, which cannot have "
        "prefilled every prompt: 1")


def test_no_prompt_compute_line_without_a_predicted_run(tmp_path):
    """An open-loop run alone (left out by rule): no run to rate, so no prompt-compute line."""
    shutil.copy(FIX / "runs" / "vllm-infqps-MiniMax-M2.5-20260310-150011.json", tmp_path)
    r = _cli("runs", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "no max_concurrency (open-loop run)" in r.stdout and "prompt compute" not in r.stdout


def _cards(page: str) -> dict[str, str]:
    """A page's headline cards: title -> value."""
    return dict(re.findall(r'<div class="k">(.*?)</div><div class="v">(.*?)</div>', page))


def test_html_page_cards_are_the_frames_errors_or_say_nothing_was_predicted(frame, tmp_path):
    """The cards give the predicted runs' median |error| and signed error from errors_pct; a frame
    with no predicted row draws no scatter and says so."""
    from prfaas_plan.report.validate_page import validate_report
    from prfaas_plan.validate import errors_pct

    ok = errors_pct(frame)
    cards = _cards(validate_report(frame, tmp_path / "v.html").read_text())
    assert cards["runs predicted"] == f"{len(ok):,}" and len(ok) > 0
    assert cards["TTFT median |error|"] == f"{ok['ttft_error_pct'].abs().median():.0f}%"
    assert cards["TPOT median |error|"] == f"{ok['tpot_error_pct'].abs().median():.0f}%"
    assert cards["TTFT median signed error"] == f"{ok['ttft_error_pct'].median():+.0f}%"
    none = frame[frame["status"] != "ok"]
    none.attrs = frame.attrs
    text = validate_report(none, tmp_path / "none.html").read_text()
    cards = _cards(text)
    assert cards == {"runs predicted": "0"} and "No row was predicted; see the rows per status below." in text
    assert "tpot-scatter" not in text


def test_html_failure_leaves_no_file(tmp_path, monkeypatch):
    from prfaas_plan.report import validate_page

    def boom(*a, **k):
        raise RuntimeError("render failed")

    monkeypatch.setattr(validate_page.Report, "to_html", boom)
    with pytest.raises(RuntimeError):
        validate_page.validate_report(validate_silicon(ROWS), tmp_path / "v.html")
    assert list(tmp_path.iterdir()) == []


def test_default_csv_is_the_installed_package(tmp_path, monkeypatch):
    import importlib.machinery
    import shutil

    from prfaas_plan import validate

    monkeypatch.setattr(validate.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(InvalidInput, match=r"pip install 'prfaas-plan\[kernels\]' or give --csv PATH"):
        validate_silicon()
    (tmp_path / "systems").mkdir()
    shutil.copy(ROWS, tmp_path / "systems" / "silicon_sample.csv")
    spec = importlib.machinery.ModuleSpec("aiconfigurator_core", None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path)]
    monkeypatch.setattr(validate.importlib.util, "find_spec", lambda name: spec if name == "aiconfigurator_core" else None)
    df = validate_silicon(systems=["h200"])
    assert df.attrs["source"] == str(tmp_path / "systems" / "silicon_sample.csv")
    assert set(df["system"]) == {"h200_sxm"} and len(df) == 16


def test_scatter_specs_are_valid_vega_lite(frame):
    from prfaas_plan.report.validate_page import BAND, _scatter
    from prfaas_plan.validate import errors_pct

    ok = errors_pct(frame)
    for metric in ("ttft", "tpot"):
        spec = _scatter(ok, metric, metric.upper()).to_dict(validate=True)
        band = next(d for d in spec["datasets"].values() if "lo" in d[0])
        assert all(r["lo"] == pytest.approx(r["x"] * (1 - BAND)) and r["hi"] == pytest.approx(r["x"] * (1 + BAND))
                   for r in band)
        assert spec["layer"][2]["encoding"]["x"]["scale"]["type"] == "log"


@pytest.mark.parametrize(("sizes", "expected"), [
    # one MoE size given: the other is what tp x attention_dp leaves (aiconfigurator's invariant)
    (dict(tp_size=4, moe_tp_size=4), Layout(4)),
    (dict(tp_size=4, moe_ep_size=4), Layout(4, "tp", "ep")),
    (dict(tp_size=4, attention_dp_size=2, moe_ep_size=8), Layout(8, "dp", "ep", attention_tp=4)),
    # what the model cannot express is a status naming it
    (dict(tp_size=4, pp_size=2, moe_tp_size=4), "unsupported layout: pipeline parallel 2"),
    (dict(tp_size=4, moe_tp_size=2, moe_ep_size=2), "unsupported layout: experts tp 2 x ep 2 on 4 GPUs"),
    (dict(tp_size=4, moe_tp_size=2, moe_ep_size=4), "unsupported layout: experts tp 2 x ep 4 on 8 GPUs"),  # DP 2 inferred
    (dict(tp_size=4, attention_dp_size=1, moe_ep_size=8), "unsupported layout: experts tp 1 x ep 8 on 4 GPUs"),
])
def test_a_rows_sizes_make_its_layout_or_say_why_not(sizes, expected):
    """Qwen3-235B-A22B-FP8 (128 experts of 1,536 channels, FP8 block-128: TP4 leaves 384, three blocks)."""
    from prfaas_plan.validate import _layout

    assert _layout(load_model("qwen3-235b-a22b-fp8"), sizes) == expected


def test_a_pipeline_parallel_run_and_an_empty_decode_batch_are_statuses(tmp_path):
    """Row 1 of the fixture re-run with pipeline parallel 2 (no layout of ours pipelines), and the
    disaggregated row 8 with no request per decode rank: each row says why it is not predicted."""
    rows = pd.read_csv(ROWS, dtype=str, keep_default_na=False)
    piped = rows.iloc[[0]].assign(pp_size="2")
    idle = rows.iloc[[7]].assign(decode_batch_size="0")
    pd.concat([piped, idle]).to_csv(tmp_path / "odd.csv", index=False)
    assert validate_silicon(tmp_path / "odd.csv")["status"].tolist() == [
        "unsupported layout: pipeline parallel 2", "invalid concurrency"]


def test_a_decode_worker_holds_its_ranks_batches_or_its_share_of_the_clients():
    """decode_batch_size is per attention-DP rank (x 8 ranks); without it, the clients spread over
    the decode workers (100 over 3: the busiest holds 34)."""
    from prfaas_plan.validate import _decode_batch

    assert _decode_batch({"decode_batch_size": "16"}, Layout(8, "dp", "ep"), 512) == 128
    assert _decode_batch({"decode_num_workers": "3"}, Layout(8), 100) == 34
    assert _decode_batch({}, Layout(8), 100) == 100


def test_only_an_aggregated_inferencex_row_is_read_as_its_id_names_it():
    """``..._tp8_ep8_N`` in the id of an InferenceX aggregated row written "TP 64, MoE 8 x 8" is TP 8 with
    experts EP 8; the same id on a disaggregated row, or on a row of another source, is left as written."""
    from prfaas_plan.validate import _as_named

    row = {"id": "qwen3.5_h200_sglang_agg_1024x1024_c64_tp8_ep8_1339", "mode": "agg", "backend": "sglang",
           "silicon_data_source": "source_file=2026-03-04.csv; measured=2026-03-04", "tp_size": 64,
           "attention_dp_size": 1, "moe_tp_size": 8, "moe_ep_size": 8}
    assert _as_named(row) == {**row, "tp_size": 8, "attention_dp_size": 1, "moe_tp_size": 1, "moe_ep_size": 8}
    for other in ({**row, "mode": "disagg"}, {**row, "silicon_data_source": "source_file=/Users/x/gap.csv;"}):
        assert _as_named(other) is other
