"""Validation: the performance model's TTFT and TPOT against measured serving runs it was not fitted to.

Two sources of runs, one mapping:

* :func:`validate_silicon` -- NVIDIA's 5,221 measured serving runs, ``systems/silicon_sample.csv``
  of the ``aiconfigurator-core`` wheel (https://pypi.org/project/aiconfigurator-core/0.12.0/),
  read from the installed package (``pip install 'prfaas-plan[kernels]'``) or any CSV path;
* :func:`validate_runs` -- a user's own ``vllm bench serve --save-result`` JSON files, their
  engine and GPUs named by ``--metadata gpu=h200 tp=8`` (keys :data:`RUN_METADATA`).

Honesty rules (issue #14): the rows are never used to fit or tune anything; only the kernel tables
and the engine profiles' documented constants are inputs. A row that is not predicted says why in
``status``: one of the rules below, written in :func:`_map_row`, counted by :func:`status_counts`.
Predictions are cached per identical case (model, dtypes, GPU, engine, layout, ISL, OSL,
concurrency, benchmark protocol), so the CSV's repeated configurations cost one prediction each;
a row that repeats an earlier row's case and measured TTFT and TPOT is that run filed again and
counts once (:data:`REPEATED_RUN`: its status names the row; the summaries read status ``ok``).

What a row ran is what its engine can load (counted in the frame's ``attrs["remapped"]``,
:data:`REMAPS`): a checkpoint that ships a GEMM class quantised runs it in its own scheme (the
CSV's per-tensor ``fp8`` label on the FP8 block-128 MiniMax-M2.5 and Qwen3-235B-A22B-FP8
checkpoints is not what vLLM loads, nor its ``nvfp4`` on gpt-oss-120b's MXFP4 experts or on the
attention NVIDIA's NVFP4 releases keep in bf16: :data:`NVFP4_RELEASES`), and an
expert split the engines refuse (FP8 block experts left a fraction of a block per GPU: MiniMax-M2.5
over 8 GPUs) ran expert parallel, their fix.

The benchmark protocol of a row (:func:`_protocol`, counted in the frame's
``attrs["protocols"]``): the measured numbers are means over a finite run, not a steady state.

* InferenceX rows (:data:`INFERENCEX_SOURCE`: a ``silicon_data_source`` opening with InferenceX's
  dated result files ``source_file=YYYY-MM-DD.csv`` or its database dump ``db-dump/YYYY-MM-DD``)
  are SemiAnalysis InferenceX runs, :data:`INFERENCEX_RUN`: 10 requests per client from a burst
  start, lengths uniform in ``[0.8 L, L]`` (sources at :class:`~prfaas_plan.serving.BenchmarkRun`),
  predicted by :func:`~prfaas_plan.serving.colocated_benchmark`;
* a user's ``vllm bench serve`` run: ``completed / max_concurrency`` requests per client from a
  burst start (``--request-rate inf``: vllm/benchmarks/serve.py creates every request at once and
  a semaphore of ``max_concurrency`` gates them), lengths as measured (the JSON's mean tokens);
* a row of another file that repeats an InferenceX row's configuration and measured TTFT and TPOT
  (to 0.01 ms) is that run (:data:`REMAPS`): NVIDIA's ``kimi-k2.5-gap-analysis.csv`` and
  ``qwen3.5-397b-gap-analysis.csv`` are InferenceX runs rounded to two decimals, and a row of
  theirs that repeats none is an InferenceX run of a day the CSV lacks
  (:data:`INFERENCEX_COLLECTION`);
* an InferenceX run is predicted with the engine as its launch script started it where that script
  sets the token budget per step (SGLang ``--chunked-prefill-size``, vLLM
  ``--max-num-batched-tokens``), the KV-cache dtype (``--kv-cache-dtype``), the experts' GEMM
  dtype (vLLM ``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1``) or their kernel (vLLM
  ``VLLM_MXFP4_USE_MARLIN=1``): :data:`~prfaas_plan.inferencex.RECIPES`, counted in
  ``attrs["recipe_budget"]``, ``attrs["recipe_kv_dtype"]``, ``attrs["recipe_experts_dtype"]`` and
  ``attrs["recipe_moe_kernel"]``;
* a disaggregated InferenceX row that does not give its worker counts takes those of its recipe in
  the version of InferenceX's config in force when it was measured (:data:`~prfaas_plan.inferencex.DISAGG_RECIPES`), and
  the recipe's DP attention, which such rows drop; where the recipes that fit it disagree (in
  their split, or one decodes with MTP and another not), it is left out (:data:`AMBIGUOUS_RECIPE`),
  and so is one that only MTP recipes ran (:data:`SPECULATIVE_RUN`); counted in
  ``attrs["recipe_workers"]`` and ``attrs["recipe_dp_attention"]``;
* NVIDIA's ``aic-auto-gap-analysis`` files (:data:`AIC_SOURCE`) do not say how they were
  measured; they are taken as runs of AIConfigurator's own benchmark, :data:`AIC_RUN`: fixed
  lengths, 10 requests per client from a burst start (after a warm-up of 2 per client, drained
  first, with prompts of its own), predicted by :func:`~prfaas_plan.serving.colocated_benchmark`
  (the first wave a burst, the rest at the steady state; SGLang from 0.5.6.post2 on as
  AIConfigurator's generator launched it, with ``--enable-mixed-chunk`` and ``--max-prefill-tokens``:
  :func:`_as_generated`, counted in ``attrs["generator_launch"]``; an earlier SGLang, prefill-first,
  repeats the burst every wave: its lockstep regime);
* any other source and every disaggregated row keep the steady state
  (:func:`~prfaas_plan.serving.colocated_closed_loop`, :func:`~prfaas_plan.serving.disaggregated_closed_loop`).

Units: lengths in tokens, times in milliseconds where a name says ``_ms`` (the CSV's unit), errors
in percent of the measured value (``_pct``).
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
from collections import Counter
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from prfaas_plan.data import is_dir, is_file
from prfaas_plan.errors import InvalidInput, PlanError, shown
from prfaas_plan.inferencex import DISAGG_RECIPES, RECIPES, parse_utc
from prfaas_plan.layout import Layout, check_layout, expert_tp_problem
from prfaas_plan.perf.kernels import version_key
from prfaas_plan.serving import BenchmarkRun
from prfaas_plan.units import MS_PER_S
from prfaas_plan.vocab import GEMM_CLASSES, MOE_ROUTINGS, GemmDtype, KvDtype, MoeKernel, check_choice

if TYPE_CHECKING:
    import pandas as pd

    from prfaas_plan.hardware import Instance
    from prfaas_plan.model.arch import ModelSpec
    from prfaas_plan.model.cache import CacheSettings
    from prfaas_plan.model.quant import GemmDtypes

COLUMNS = ("system", "model", "engine", "engine_version", "precision", "mode", "isl", "osl", "concurrency", "tp",
           "attention_dp", "moe_tp", "moe_ep", "ttft_ms_measured", "ttft_ms_predicted", "tpot_ms_measured",
           "tpot_ms_predicted", "status")
"""The columns of every validation frame, in order."""

REQUIRED_COLUMNS = ("silicon_data_source", "backend", "backend_version", "model_path", "system", "precision", "mode",
                    "isl", "osl", "gemm_quant_mode", "moe_quant_mode", "batch_size", "tp_size", "pp_size",
                    "attention_dp_size", "moe_tp_size", "moe_ep_size", "silicon_ttft_ms", "silicon_tpot_ms")
"""CSV columns the mapping reads (the silicon CSV's names); the disaggregated rows' ``prefill_*`` /
``decode_*`` layout columns are read when present."""

MODEL_IDS = {
    "MiniMaxAI/MiniMax-M2.5": "minimax-m2.5",
    "Qwen/Qwen3.5-397B-A17B": "qwen3.5-397b-a17b",
    "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b-fp8",
    # DeepSeek-R1 is DeepSeek-V3's architecture retrained (same config.json but for the weights):
    # https://huggingface.co/deepseek-ai/DeepSeek-R1/blob/main/config.json
    "deepseek-ai/DeepSeek-V3": "deepseek-v3",
    "deepseek-ai/DeepSeek-R1": "deepseek-v3",
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    # NVIDIA's ModelOpt FP8 copy of it: per-tensor FP8 weights and activations of the linear layers
    # in the transformer blocks, LM head bf16 (https://huggingface.co/nvidia/Llama-3.1-8B-Instruct-FP8);
    # its rows' gemm_quant_mode fp8 is that scheme, applied to the bf16 entry's attention and FFN
    "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b",
    "Qwen/Qwen3-32B": "qwen3-32b",
    # Kimi-K2.5's text model is Kimi-K2's architecture (61 MLA layers, 64 heads, 384 routed top-8
    # experts of 2048, 1 shared, first layer dense; aiconfigurator_core/model_configs/
    # moonshotai--Kimi-K2.5_config.json) with the same INT4 QAT block as K2-Thinking (routed experts
    # int4 group 32, the rest bf16): our kimi-k2-thinking entry.
    "moonshotai/Kimi-K2.5": "kimi-k2-thinking",
    "openai/gpt-oss-120b": "gpt-oss-120b",
    # InferenceX's glm5-fp8-h200-sglang and glm5-fp8-b200-sglang serve model: zai-org/GLM-5-FP8
    # (.github/configs/nvidia-master.yaml from ebb48d4bc, 2026-03-18): our glm-5 entry
    "zhipuai/GLM-5": "glm-5",
}
"""The CSV's Hugging Face model paths that have a model_db entry, and that entry's id."""

NVFP4_RELEASES = {
    # InferenceX's minimaxm2.5-fp4-b200-vllm serves model: nvidia/MiniMax-M2.5-NVFP4
    # (.github/configs/nvidia-master.yaml from 79bd988e9, 2026-04-08, and its PR branch)
    "MiniMaxAI/MiniMax-M2.5": "minimax-m2.5-nvfp4",
    # qwen3.5-fp4-b200-sglang serves model: nvidia/Qwen3.5-397B-A17B-NVFP4 (85d02c46b on #820's branch,
    # 2026-04-03, merged as 48d35c480)
    "Qwen/Qwen3.5-397B-A17B": "qwen3.5-397b-a17b-nvfp4",
    # kimik2.5-fp4-b200-vllm serves model: nvidia/Kimi-K2.5-NVFP4 (f3f5c75e7, 2026-03-10, and every version since)
    "moonshotai/Kimi-K2.5": "kimi-k2.5-nvfp4",
    # .github/workflows/70b-tmpl.yml's bmk-b200-fp4 served model: nvidia/Llama-3.3-70B-Instruct-FP4 (its 2025-10 runs)
    "meta-llama/Llama-3.1-70B": "llama-3.3-70b-nvfp4",
}
"""The NVFP4 release of a model path, where the model database holds it: the CSV names an NVFP4
run by its base model with ``nvfp4`` quant modes, and InferenceX's fp4 config keys serve NVIDIA's
ModelOpt releases, whose own dtypes (:func:`_native_fp4`) the row then runs in."""

SYSTEM_GPUS = {"h200_sxm": "h200", "h100_sxm": "h100", "b200_sxm": "b200"}
"""The CSV's systems that have a hardware_db entry (gb200, gb300, b300_sxm have none)."""

QUANT_DTYPES = {"bf16": "bf16", "fp8": "fp8", "fp8_block": "fp8_block", "int4_wo": "int4_w4a16"}
"""The CSV's gemm/moe quant modes as GEMM dtypes. ``int4_wo`` (weight-only int4) is the W4A16
group-32 scheme of the Kimi checkpoints' quantization_config (group_size 32)."""

ENGINES = ("vllm", "sglang")
"""Backends whose kernels we hold (trtllm tables are not imported)."""

RELEASE = re.compile(r"^\d+(\.\d+)*(\.?post\d+)?$")
"""A release number an engine profile's kernel_version accepts; other versions (nightly builds,
missing ones) run the profile's own kernel_version, the newest tables collected."""

CONCURRENCY = re.compile(r"silicon_concurrency=(-?\d+)")

MEASURED = re.compile(r"(?:^|; )measured=([^;]+)")
"""When a row's run was measured (InferenceX: the workflow's start, 3-4 s after the config commit
that triggered it; ``T00:00:00.000Z`` where the record keeps only the date)."""
INFERENCEX_SOURCE = re.compile(r"^(source_file=\d{4}-\d{2}-\d{2}\.csv|db-dump/\d{4}-\d{2}-\d{2});")
"""A ``silicon_data_source`` of an InferenceX run: its dated result files or its database dump
(their fields ``measured=``, ``image=``/``wip=``/``workflow_run_id=`` are InferenceX's run records)."""

INFERENCEX_COLLECTION = re.compile(r"^source_file=(kimi-k2\.5|qwen3\.5-397b)-gap-analysis\.csv;")
"""A ``silicon_data_source`` of NVIDIA's files that collect InferenceX runs without their records
(``kimi-k2.5-gap-analysis.csv``, ``qwen3.5-397b-gap-analysis.csv``: 77 of their 85 mapped aggregated
rows repeat a dated InferenceX row to 0.01 ms, :data:`REMAPS`); a row of theirs that repeats none is
an InferenceX run of a day the CSV does not hold."""

INFERENCEX_RUN = BenchmarkRun(prompts_per_client=10, range_ratio=0.8)
"""InferenceX's protocol: ``--num-prompts $((CONC * 10))``, ``--request-rate inf``,
``RANDOM_RANGE_RATIO: 0.8`` (https://github.com/SemiAnalysisAI/InferenceX: benchmarks/benchmark_lib.sh,
.github/workflows/benchmark-tmpl.yml)."""

AIC_SOURCE = re.compile(r"^source_file=[^;]*aic-auto-gap-analysis/")
"""A ``silicon_data_source`` of NVIDIA's AIConfigurator gap-analysis files (``.../aic-auto-gap-analysis/data/<system>/<backend>/<version>/<model>.csv``)."""

AIC_RUN = BenchmarkRun(prompts_per_client=10, range_ratio=1.0, warmup_per_client=2)
"""AIConfigurator's own benchmark runner, an assumption for the gap-analysis files, which name no
protocol: ai-dynamo/aiconfigurator src/aiconfigurator/eval/benchmarks/genai_perf_runner.py (from
961028348 of 2025-08-22 to its removal in c0c44d911 of 2026-03-03) runs, per concurrency ``c``,
``--concurrency c --request-count 10c --warmup-request-count 2c --num-dataset-entries 12c`` with
``--synthetic-input-tokens-stddev 0 --output-tokens-stddev 0`` (fixed lengths, ``min_tokens`` =
``max_tokens`` = OSL). Its tool was genai-perf until 4361371a6 of 2025-10-14 ("feat: add aiperf
for eval") made it ``aiperf``, which tools/automation/launch_eval.sh installs, the latest release,
into the engine's container for each evaluation.

The rows' engines were released after aiperf 0.3.0 (2025-11-20,
https://pypi.org/project/aiperf/0.3.0/; vLLM 0.12.0 2025-12-03, SGLang 0.5.6.post2 2025-12-11,
0.5.8.post1 2026-02-05), but for H100's SGLang 0.5.1.post1 (2025-08-24), whose runs may be older
and so genai-perf's, which resent the warm-up's prompts (perf_analyzer's measured clients start
again at dataset entry 0; not modelled), or aiperf 0.1-0.2's, which drew entries
with replacement; they are taken as the rest. From 0.3.0 on aiperf draws a synthetic dataset's
entries without replacement (``InputDefaults.DATASET_SAMPLING_STRATEGY = SHUFFLE``,
aiperf/dataset/dataset_samplers.py ``ShuffleSampler``, one sampler for the warm-up and the
measured phase: aiperf/dataset/dataset_manager.py), so the 2c warm-up and the 10c measured
requests are 12c distinct prompts, windows of its corpus at random starts
(aiperf/dataset/generator/prompt.py ``_sample_tokens``) that share no prefix: no measured prompt
is served from the warm-up's cache. The warm-up's credits are returned before the measured phase
starts (aiperf/timing/credit_issuing_strategy.py ``_execute_phases``), so the measured requests
begin with a burst of ``c`` as a run without warm-up does. Predicted by
:func:`~prfaas_plan.serving.colocated_benchmark`.

AIConfigurator's later generated benchmark
(generator/config/backend_templates/benchmark/bench_run.sh.j2 @095f58a51, from 2026-02-11) runs
aiperf with 20c requests, ``--random-seed 100`` and no ``--num-dataset-entries`` (aiperf's default
of 100 entries, the same 100 in every run of a sweep), which would serve most prompts from the
prefix cache; no row carries a date after it (the three dated H100 vLLM rows, on Dynamo 0.8.0's
runtime image, are of 2026-01-23 and 25)."""

AIC_MIXED_CHUNK_SGLANG = "0.5.6.post2"
"""The first SGLang release AIConfigurator's generator launched with ``--enable-mixed-chunk``: the
gap-analysis runs are taken as its eval pipeline's (:data:`AIC_RUN`), which starts the engine with
the generator's ``agg/run_0.sh`` (src/aiconfigurator/eval/pipeline.py). Its SGLang rule
``agg enable_mixed_chunk = true`` (generator/rule_plugin/sglang.rule, fa895ffb1) reached the command
line on 2026-01-19 (07a377923, 22:33 +08:00: the mapping's key fixed), two minutes after the
generator's runtime became Dynamo 0.8.0's (dfeb6a0f1), the image whose SGLang is 0.5.6.post2 (its
template, backend_templates/sglang/cli_args.0.5.6.post2.j2 of c46a56b02, 2026-01-23, emits the flag);
the flag stays in every later template and rule. Earlier SGLang releases (H100's 0.5.1.post1) keep the
profile's prefill-first steps: their runs predate the rule."""

AIC_PREFILL_HEADROOM_TOKENS = 1500
"""The generator's SGLang ``--max-prefill-tokens``: the run's ISL plus this many
(``agg_prefill_decode max_prefill_tokens = SlaConfig.isl + 1500`` in the same rule file since
95ddf241a, 2025-12-04; emitted by the 0.5.6.post2 template)."""


def _as_generated(case: Case) -> Case:
    """``case`` on the engine as AIConfigurator's generator launched an aggregated SGLang run of
    :data:`AIC_MIXED_CHUNK_SGLANG` or later: prompt chunks mixed into the decode steps, and
    ``--max-prefill-tokens`` ISL + :data:`AIC_PREFILL_HEADROOM_TOKENS` (whole prompts a step within it,
    :meth:`~prfaas_plan.engine.EngineProfile.prompt_room_tokens`). Its other flags depend on the
    configuration AIConfigurator chose for the row (``--max-running-requests``, the KV dtype), which
    the row does not give: the profile's stand."""
    if (case.run != AIC_RUN or case.engine_id != "sglang" or case.decode_layout is not None
            or case.kernel_version is None or version_key(case.kernel_version) < version_key(AIC_MIXED_CHUNK_SGLANG)):
        return case
    return replace(case, mixed_prefill=True, max_prefill_tokens=case.isl_tokens + AIC_PREFILL_HEADROOM_TOKENS)


REPEAT_RESOLUTION_MS = 0.01
"""The TTFT / TPOT resolution NVIDIA's gap-analysis files round InferenceX measurements to (two decimals, ms)."""


REMAPS = ("checkpoint dtypes over the label", "experts ep: tp split refused", "inferencex run: same measurement",
          "layout of the run's id")
"""Rules that predict a row otherwise than its labels say, as counted in a frame's ``attrs["remapped"]``:
a quantised checkpoint runs in its own scheme (:func:`_online`); an expert split the engines
refuse ran expert parallel (:func:`_layout`); a row of another file that repeats an InferenceX row's
configuration and measured TTFT and TPOT (to the file's 0.01 ms) is that InferenceX run, predicted
under its protocol (:func:`_frame`; NVIDIA's ``kimi-k2.5-gap-analysis.csv`` and
``qwen3.5-397b-gap-analysis.csv`` collect InferenceX runs); a row whose sizes are its id's TP and EP
as NVIDIA's 2026-04-06 file rewrote them runs as its id says, and a database-dump vLLM row so written
runs at the TP and EP its sizes give (:func:`_as_named`)."""

PROTOCOLS = ("inferencex run", "vllm bench serve run", "aiconfigurator run", "steady state")
"""The names :func:`_protocol` gives, as counted in a frame's ``attrs["protocols"]``."""

RUN_KEYS = ("completed", "total_input_tokens", "total_output_tokens", "mean_ttft_ms", "mean_tpot_ms", "max_concurrency")
"""Keys of a ``vllm bench serve --save-result`` JSON (vllm/benchmarks/serve.py, save_result) this reads."""

RUN_METADATA = ("gpu", "tp", "attention_dp", "moe_tp", "moe_ep", "engine_version")
"""``--metadata KEY=VALUE`` keys that say where a run ran (tp default 1, the rest as the CSV's defaults)."""

# The rules that leave a row out (the ``status`` of a row not predicted).
UNKNOWN_MODEL = "unknown model"
UNSUPPORTED_PRECISION = "unsupported precision"
NO_HARDWARE = "no hardware entry"
NO_KERNELS = "engine without kernel tables"
UNSUPPORTED_LAYOUT = "unsupported layout"
LAYOUT_REJECTED = "layout rejected"
INVALID_CONCURRENCY = "invalid concurrency"
NO_CONCURRENCY = "no max_concurrency (open-loop run)"
NO_GPU = "no gpu in the run's metadata"
PREDICTION_FAILED = "prediction failed"
AMBIGUOUS_RECIPE = "recipe ambiguous"
SPECULATIVE_RUN = "speculative decoding run"
REPEATED_RUN = "repeats an earlier row"
"""A row predicted as an earlier row (the same :class:`Case`, protocol and launch included) with
the same measured TTFT and TPOT (to :data:`REPEAT_RESOLUTION_MS`) is that measured run filed again
(NVIDIA's files collect each other's runs: one InferenceX run can stand in its dated file, a
collection file and the 2026-04-06 file). It carries the prediction, equal to that row's, but
counts once: its status names the row (``repeats an earlier row: row 17``, the frame's index), so
that no figure weighs a run by the number of files that hold it."""


@dataclass(frozen=True)
class Case:
    """One row mapped to our inputs: everything a prediction depends on (the cache key)."""

    model_id: str
    dtypes: tuple[tuple[str, str], ...]  # GEMM class -> dtype overrides of the model's own
    gpu_id: str
    engine_id: str
    kernel_version: str | None  # None: the profile's own
    layout: Layout  # the aggregated worker, or the prefill worker of a disaggregated row
    decode_layout: Layout | None  # the decode worker of a disaggregated row
    isl_tokens: int
    osl_tokens: int
    concurrency: int
    decode_batch: int | None  # requests per decode worker of a disaggregated row
    prefill_workers: int | None = None  # workers of a disaggregated row, where the row gives them
    decode_workers: int | None = None
    run: BenchmarkRun | None = None  # the finite run an aggregated row measured; None: steady state
    moe_routing: str = "balanced"  # the MoE kernel tables' routing (vocab.MoeRouting), a calibration choice
    token_budget: int | None = None  # tokens per engine step as the run's recipe launched it; None: the profile's
    kv_dtype: KvDtype = "bf16"  # the KV cache's element type as the run's recipe launched it
    max_running: int | None = None  # --max-running-requests as the run's recipe launched it; None: the profile's
    recv_interval_steps: int | None = None  # --scheduler-recv-interval as the run's recipe launched it; None: the profile's
    mem_fraction: float | None = None  # --mem-fraction-static as the run's recipe launched it; None: the profile's
    experts_dtype: GemmDtype | None = None  # the experts' GEMM dtype as the run's recipe launched it; None: the checkpoint's
    mxfp4_moe_kernel: MoeKernel | None = None  # MXFP4 experts' kernel as the run's recipe launched it; None: the profile's
    mixed_prefill: bool | None = None  # SGLang --enable-mixed-chunk as the run was launched; None: the profile's
    max_prefill_tokens: int | None = None  # SGLang --max-prefill-tokens as the run was launched; None: the profile's


@dataclass(frozen=True)
class RowContext:
    """What one aggregated prediction runs on."""

    model: ModelSpec
    inst: Instance
    isl_tokens: int
    osl_tokens: int
    concurrency: int
    run: BenchmarkRun | None = None
    settings: CacheSettings | None = None  # how the engine stores the cache; None: bf16 KV


# ----------------------------------------------------------------------------- row mapping
def _num(row: dict, key: str) -> float | None:
    """A numeric cell, None when empty or absent."""
    v = row.get(key)
    if v is None or (isinstance(v, float) and math.isnan(v)) or v == "":
        return None
    return float(v)


def _fp4_label(row: dict) -> bool:
    """Whether the row's quant modes say ``nvfp4``."""
    return "nvfp4" in (row.get("gemm_quant_mode"), row.get("moe_quant_mode"))


def _native_fp4(row: dict, stored: GemmDtypes | None) -> bool:
    """Whether ``row`` labels ``nvfp4`` the run of a checkpoint that stores its 4-bit classes in a
    scheme of its own, which the engine serves as stored: NVIDIA's NVFP4 releases
    (:data:`NVFP4_RELEASES`: attention bf16, experts NVFP4), and gpt-oss-120b, whose rows NVIDIA's
    files label ``fp4`` / ``nvfp4`` on every GPU, Hopper's too (no FP4 tensor cores), while it ships
    MXFP4 experts and bf16 elsewhere (its quantization_config) and InferenceX's scripts serve it
    without ``--quantization`` (benchmarks/single_node/gptoss_fp4_h200.sh)."""
    four_bit = ("mxfp4_w4a16", "nvfp4")
    return stored is not None and _fp4_label(row) and any(getattr(stored, c) in four_bit for c in GEMM_CLASSES)


def _dtypes(row: dict, stored: GemmDtypes | None = None) -> tuple[tuple[str, str], ...] | str:
    """GEMM dtype overrides from gemm_quant_mode (attention, dense FFN) and moe_quant_mode (experts),
    or the status leaving the row out. Empty modes keep the checkpoint's dtypes (``stored``); so do
    ``int4_wo`` as the gemm mode (the Kimi checkpoints leave attention, shared experts and the dense
    MLP in bf16: quantization_config ``ignore``) and ``nvfp4`` on a checkpoint that stores its own
    4-bit scheme (:func:`_native_fp4`). :func:`_online` then keeps only the overrides of classes the
    checkpoint ships in bf16."""
    out = []
    native = _native_fp4(row, stored)
    for col, classes in (("gemm_quant_mode", ("attention", "dense_ffn")), ("moe_quant_mode", ("experts",))):
        mode = row.get(col)
        if not isinstance(mode, str) or not mode or (native and mode == "nvfp4"):
            continue
        if mode not in QUANT_DTYPES:
            return f"{UNSUPPORTED_PRECISION} {mode}"
        if mode == "int4_wo" and col == "gemm_quant_mode":
            continue
        out += [(c, QUANT_DTYPES[mode]) for c in classes]
    return tuple(out)


def _online(dtypes: tuple[tuple[str, str], ...], stored: GemmDtypes) -> tuple[tuple[str, str], ...]:
    """The overrides an engine can apply to a checkpoint whose dtypes are ``stored``: online
    quantisation of the classes it ships in bf16 (vLLM ``--quantization fp8`` on Llama-3.1-70B). A class the checkpoint
    ships quantised runs in the checkpoint's own scheme whatever the row's label says: the engine
    loads those weights as stored (MiniMax-M2.5 and Qwen3-235B-A22B-FP8 are FP8 block-128 in their
    quantization_config; the CSV labels their vLLM rows per-tensor ``fp8``)."""
    return tuple((c, d) for c, d in dtypes if getattr(stored, c) == "bf16")


def _layout(model: ModelSpec, row: dict, prefix: str = "") -> Layout | str:
    """The worker's Layout from the CSV's sizes, or a status. GPUs per worker = tp x attention_dp x pp
    (aiconfigurator's convention: ``ModelConfig.total_gpus_per_worker`` and ``resolve_moe_parallelism``,
    aiconfigurator_core/sdk/config.py: tp * attention_dp == moe_tp * moe_ep, a missing MoE size
    inferred from the other). Empty or 0 sizes are the SDK's default 1, but for an MoE model whose
    attention_dp is empty while its MoE sizes span more GPUs than tp, attention_dp is what that
    invariant gives (the vLLM Qwen3-235B-A22B-FP8 rows: tp 1 with moe_tp 2 are 2 GPUs, as the 235 GB
    checkpoint does not fit one 141 GB H200). tp > 1 with attention_dp > 1 is attention TP groups
    inside DP replicas (:class:`~prfaas_plan.layout.Layout` ``attention_tp``)."""
    def size(name: str) -> int | None:
        v = _num(row, f"{prefix}{name}")
        return int(v) if v else None

    tp, dp, pp = size("tp_size") or 1, size("attention_dp_size"), size("pp_size") or 1
    moe_tp, moe_ep = size("moe_tp_size"), size("moe_ep_size")
    moe = model.ffn.num_experts > 0
    if dp is None and moe and moe_tp and moe_ep and moe_tp * moe_ep > tp and moe_tp * moe_ep % tp == 0:
        dp = moe_tp * moe_ep // tp
    dp = dp or 1
    gpus = tp * dp
    if (moe_tp is None and moe_ep is None) or not moe:  # a dense model's MoE sizes say nothing (the CSV's 1 x 1)
        moe_tp, moe_ep = gpus, 1
    elif moe_tp is None:  # at least 1: more expert ranks than GPUs is named as such below
        moe_tp = max(gpus // moe_ep, 1)
    elif moe_ep is None:
        moe_ep = max(gpus // moe_tp, 1)
    if pp > 1:
        return f"{UNSUPPORTED_LAYOUT}: pipeline parallel {pp}"
    if moe_tp * moe_ep != gpus or (moe_tp > 1 and moe_ep > 1):
        return f"{UNSUPPORTED_LAYOUT}: experts tp {moe_tp} x ep {moe_ep} on {gpus} GPUs"
    experts = "ep" if moe_ep > 1 else "tp"
    if experts == "tp" and moe and expert_tp_problem(model, moe_tp):
        experts = "ep"  # the engines refuse the labelled expert split; their fix, and so the run's: EP
    try:
        layout = Layout(gpus, "dp" if dp > 1 else "tp", experts, attention_tp=tp if dp > 1 else None)
        return check_layout(model, layout)
    except PlanError as exc:
        return f"{LAYOUT_REJECTED}: {exc}"


NAMED_LAYOUT = re.compile(r"_tp(\d+)_ep(\d+)_\d+$")
"""The TP and EP sizes an InferenceX run's id names (``..._agg_1024x8192_c64_tp4_ep4_1339``)."""


def _source(row: dict) -> str:
    """A row's ``silicon_data_source`` ("" where the CSV leaves it empty)."""
    return str(row.get("silicon_data_source") or "")


def _as_named(row: dict) -> dict:
    """``row`` with the layout its InferenceX id names (``..._tp{T}_ep{E}_N``: TP ``T``, experts EP
    ``E``, on ``T`` GPUs) where its sizes are that layout as NVIDIA's ``source_file=2026-04-06.csv``
    rewrote it, a layout no single-node config key ran:

    * TP ``T x E`` with experts TP ``T`` x EP ``E`` (its SGLang and TRT-LLM rows: "tp 64" on an
      8-GPU node);
    * attention DP ``T`` with experts EP ``T x E`` (its vLLM MiniMax-M2.5 and Kimi-K2.5 rows, ``T x T``
      GPUs: 16 on an 8-GPU H100 node), whose config keys ran no attention DP
      (``minimaxm2.5-fp8-h100-vllm``: ``{tp: 4, ep: 4}`` only; ``minimaxm2.5-fp8-b200-vllm``:
      ``{tp: 2|4}``, ``{tp: 2, ep: 2}``, ``{tp: 4, ep: 4}``; .github/configs/nvidia-master.yaml at
      51e31df4a) and whose scripts launch none (``vllm serve --tensor-parallel-size`` with
      ``--enable-expert-parallel``). SGLang's DP-attention runs are written otherwise (attention TP 1
      x DP ``T``) and kept.

    InferenceX's database dump (``db-dump/...``, ids ``..._cfgN`` that name no layout) writes its vLLM
    rows the same way: a dump row of sizes TP ``T``, attention DP ``T``, experts EP ``T x E`` is the
    run of TP ``T`` and EP ``E`` (its Kimi-K2.5 and MiniMax-M2.5 rows of 2026-03-27 and 04-03 repeat
    the 2026-04-06 file's ``tp4_ep4`` / ``tp2_ep2`` rows to 0.01 ms, 25 rows; the dump's ``batch_size``
    there is the concurrency over ``T``).

    Any other row is returned as it is."""
    if row["mode"] != "agg" or not INFERENCEX_SOURCE.match(_source(row)):
        return row
    sizes = tuple(_num(row, f"{c}_size") or 1 for c in ("tp", "attention_dp", "moe_tp", "moe_ep"))
    m = NAMED_LAYOUT.search(str(row.get("id") or ""))
    if m is not None:
        tp, ep = int(m.group(1)), int(m.group(2))
    elif row["backend"] == "vllm" and _source(row).startswith("db-dump/") and sizes[0] > 1 and sizes[3] % sizes[0] == 0:
        tp, ep = int(sizes[0]), int(sizes[3] // sizes[0])
    else:
        return row
    written = {(tp * ep, 1, tp, ep)} | ({(tp, tp, 1, tp * ep)} if row["backend"] == "vllm" else set())
    if ep > 1 and tp % ep == 0 and sizes in written:
        return {**row, "tp_size": tp, "attention_dp_size": 1, "moe_tp_size": tp // ep, "moe_ep_size": ep}
    return row


def _concurrency(row: dict, strict: bool) -> int | str:
    """Clients of the closed loop: silicon_concurrency=N of the data source, else batch_size.
    Negative in a user's file is bad input (``strict``); <= 0 otherwise leaves the row out."""
    m = CONCURRENCY.search(_source(row))
    c = int(m.group(1)) if m else _num(row, "batch_size")
    if c is not None and c < 0 and strict:
        raise InvalidInput(f"concurrency: row {row.get('id', '?')} has concurrency {c}; give a count >= 1")
    if c is None or c <= 0:
        return INVALID_CONCURRENCY
    return int(c)


def _protocol(row: dict) -> BenchmarkRun | None:
    """The finite run an aggregated row measured (see the module docstring), None for the steady
    state: a user's run carries its own (``run_prompts_per_client``, :func:`_run_row`); an InferenceX
    source (:data:`INFERENCEX_SOURCE`, :data:`INFERENCEX_COLLECTION`) is :data:`INFERENCEX_RUN`, a
    gap-analysis file (:data:`AIC_SOURCE`) :data:`AIC_RUN`; any other source, the steady state."""
    if row["mode"] == "disagg":
        return None
    per_client = row.get("run_prompts_per_client")
    if per_client is not None:
        return BenchmarkRun(int(per_client))
    source = _source(row)
    if INFERENCEX_SOURCE.match(source) or INFERENCEX_COLLECTION.match(source):
        return INFERENCEX_RUN
    return AIC_RUN if AIC_SOURCE.match(source) else None


def protocol_name(run: BenchmarkRun | None) -> str:
    """The :data:`PROTOCOLS` name of a case's run."""
    return PROTOCOLS[3] if run is None else PROTOCOLS[0] if run == INFERENCEX_RUN else \
        PROTOCOLS[2] if run == AIC_RUN else PROTOCOLS[1]


def _map_row(row: dict, models: dict, strict: bool = False, moe_routing: str = "balanced") -> Case | str:
    """One CSV row as a :class:`Case` (its model's MoE timed at ``moe_routing``), or the status (a
    rule of this module) that leaves it out."""
    model_id = MODEL_IDS.get(row["model_path"])
    if _fp4_label(row):
        model_id = NVFP4_RELEASES.get(row["model_path"], model_id)
    dtypes = _dtypes(row, _model(models, model_id, ()).gemm_dtypes if model_id else None)
    if model_id is None:  # NVIDIA's own NVFP4 checkpoints are named by their precision
        return dtypes if isinstance(dtypes, str) and "NVFP4" in row["model_path"] else UNKNOWN_MODEL
    gpu_id = SYSTEM_GPUS.get(row["system"])
    if gpu_id is None:
        return NO_HARDWARE
    engine = row["backend"]
    if engine not in ENGINES:
        return f"{NO_KERNELS} ({engine})"
    if isinstance(dtypes, str):
        return dtypes
    version = row.get("backend_version")
    version = version if isinstance(version, str) and RELEASE.match(version) else None
    concurrency = _concurrency(row, strict)
    if isinstance(concurrency, str):
        return concurrency
    dtypes = _online(dtypes, _model(models, model_id, ()).gemm_dtypes)
    model = _model(models, model_id, dtypes, moe_routing)
    disagg = row["mode"] == "disagg"
    row = _as_named(row)
    layout = _layout(model, row, "prefill_" if disagg else "")
    decode = _layout(model, row, "decode_") if disagg else None
    for lay in (layout, decode):
        if isinstance(lay, str):
            return lay
    batch = _decode_batch(row, decode, concurrency) if disagg else None
    if batch is not None and batch <= 0:
        return INVALID_CONCURRENCY
    workers = [_num(row, f"{role}_num_workers") for role in ("prefill", "decode")]
    case = Case(model_id, dtypes, gpu_id, engine, version, layout, decode, int(row["isl"]), int(row["osl"]),
                concurrency, batch, *(int(w) if w else None for w in workers), run=_protocol(row),
                moe_routing=moe_routing)
    return _with_recipe(row, case, model) if disagg else case


def _with_recipe(row: dict, case: Case, model: ModelSpec) -> Case | str:
    """A disaggregated InferenceX row without worker counts, with those of its recipe
    (:data:`~prfaas_plan.inferencex.DISAGG_RECIPES`) and its DP attention (checked on ``model``); :data:`AMBIGUOUS_RECIPE`
    when the recipes that fit it differ in their split or in their speculative decoding (the row
    says neither), :data:`SPECULATIVE_RUN` when every one decodes with MTP, as for an aggregated
    run (:func:`_as_launched`); unchanged when none fits (or the row is not InferenceX's). A row
    that gives its worker counts is checked against the recipes of that split for MTP only."""
    if not INFERENCEX_SOURCE.match(_source(row)):
        return case
    span = _measured_span(row)
    fit = [r for r in DISAGG_RECIPES if span and r.fits(row, case, span)]
    if case.decode_workers is not None:  # the row's own split: only whether it ran with MTP is open
        workers = (case.prefill_workers or 1, case.decode_workers)
        same = [r for r in fit if (r.prefill_workers, r.decode_workers) == workers]
        specs = {r.spec for r in same}
        if len(specs) > 1:
            return f"{AMBIGUOUS_RECIPE}: {_split_name(workers[0], False, workers[1], False)} with or without MTP"
        return f"{SPECULATIVE_RUN}: {same[0].key} ({same[0].spec})" if specs - {"none"} else case
    runs = sorted({(r.split, r.spec) for r in fit}, key=lambda run: (run[0], run[1] != "none", run[1]))
    if len(runs) > 1:
        return f"{AMBIGUOUS_RECIPE}: " + " or ".join(_split_name(*split) + ("" if spec == "none" else f" with {spec.upper()}")
                                                    for split, spec in runs)
    if not runs:
        return case
    ((n_prefill, prefill_dp, n_decode, decode_dp), spec), = runs
    if spec != "none":
        return f"{SPECULATIVE_RUN}: {fit[0].key} ({spec})"
    try:
        layouts = [check_layout(model, _with_dp_attention(lay, dp))
                   for lay, dp in ((case.layout, prefill_dp), (case.decode_layout, decode_dp))]
    except PlanError as exc:
        return f"{LAYOUT_REJECTED}: {exc}"
    return replace(case, prefill_workers=n_prefill, decode_workers=n_decode,
                   decode_batch=math.ceil(case.concurrency / n_decode), layout=layouts[0], decode_layout=layouts[1])


def _split_name(n_prefill: int, prefill_dp: bool, n_decode: int, decode_dp: bool) -> str:
    """``1P6D``, with `` (DP attention)`` after the roles whose attention runs data parallel."""
    dp = [role for role, on in (("prefill", prefill_dp), ("decode", decode_dp)) if on]
    return f"{n_prefill}P{n_decode}D" + (f" ({' and '.join(dp)} DP attention)" if dp else "")


def _with_dp_attention(layout: Layout, dp: bool) -> Layout:
    """The worker with attention data parallel over its GPUs (SGLang ``--enable-dp-attention
    --dp N --tp N``: one GPU per attention replica) where its recipe sets ``dp-attn``."""
    return replace(layout, attention="dp", attention_tp=None) if dp and layout.attention == "tp" else layout


def _measured_span(row: dict) -> tuple[datetime, datetime] | None:
    """When an InferenceX row was measured, from its ``measured=`` field: that second, or its whole
    day (UTC) when only the date is given (``T00:00:00.000Z``); None without one."""
    m = MEASURED.search(_source(row))
    if m is None:
        return None
    stamp = m.group(1)
    start = parse_utc(stamp)
    whole_day = "T" not in stamp or stamp.endswith("T00:00:00.000Z")
    return start, start + (timedelta(days=1) if whole_day else timedelta(seconds=1))


def _decode_batch(row: dict, decode: Layout, concurrency: int) -> int:
    """Requests on one decode worker of a disaggregated row: decode_batch_size is per attention-DP
    rank (decode_batch_size x decode_attention_dp_size == concurrency / decode_num_workers in 267 of
    the CSV's 274 rows that give both); without it, the closed loop's share of one worker."""
    per_rank = _num(row, "decode_batch_size")
    if per_rank is not None:
        return int(per_rank) * decode.attn_dp
    return math.ceil(concurrency / (_num(row, "decode_num_workers") or 1))


# ----------------------------------------------------------------------------- prediction
def _model(models: dict, model_id: str, dtypes: tuple[tuple[str, str], ...],
           moe_routing: str = "balanced") -> ModelSpec:
    """The model in the row's dtypes, its MoE timed at ``moe_routing`` (memoised in ``models``,
    one validation's cache)."""
    key = (model_id, dtypes, moe_routing)
    if key not in models:
        from prfaas_plan.model import load_model

        # _online drops the int4 label of the Kimi rows (their checkpoint's experts are int4 already),
        # so the checkpoint's own W4A16 group-32 scheme stands
        model = load_model(model_id).with_gemm_dtypes(**dict(dtypes)) if dtypes else load_model(model_id)
        models[key] = model.with_moe_routing(moe_routing) if moe_routing != model.moe_routing else model
    return models[key]


def _instance(case: Case, layout: Layout) -> Instance:
    """The worker: the row's GPU and layout under the backend's profile at the row's version, so
    that the nearest collected kernel tables of that version are used."""
    from prfaas_plan.engine import load_engine
    from prfaas_plan.hardware import instance

    engine = load_engine(case.engine_id)
    if case.kernel_version is not None and case.kernel_version != engine.kernel_version:
        engine = engine.model_copy(update={"kernel_version": case.kernel_version})
    if case.token_budget is not None:
        engine = engine.with_chunked_prefill(case.token_budget)
    engine = engine.with_launch(case.max_running, case.recv_interval_steps, case.mem_fraction, case.mixed_prefill,
                                case.max_prefill_tokens)
    if case.mxfp4_moe_kernel is not None:
        engine = engine.model_copy(update={"mxfp4_moe_kernel": case.mxfp4_moe_kernel})
    return instance(case.gpu_id, layout.gpus, layout=layout, engine=engine)


def _predict_agg(ctx: RowContext) -> tuple[float, float]:
    """(TTFT, TPOT) in ms of an aggregated engine at the row's closed-loop concurrency: the
    steady state (:func:`prfaas_plan.serving.colocated_closed_loop`: the engine's step loop, chunked
    prefill mixed into decode steps, TTFT with the wait for a prefill slot), or the means of the
    row's finite run (:func:`prfaas_plan.serving.colocated_benchmark`: its first wave and the
    steady state) when ``ctx.run`` is given."""
    from prfaas_plan.serving import colocated_benchmark, colocated_closed_loop

    if ctx.run is None:
        point = colocated_closed_loop(ctx.model, ctx.inst, ctx.isl_tokens, ctx.osl_tokens, ctx.concurrency,
                                      ctx.settings)
    else:
        point = colocated_benchmark(ctx.model, ctx.inst, ctx.isl_tokens, ctx.osl_tokens, ctx.concurrency, ctx.run,
                                    ctx.settings)
    return point.ttft_s * MS_PER_S, point.tpot_s * MS_PER_S


def _predict_disagg(model: ModelSpec, prefill: Instance, decode: Instance, case: Case,
                    settings: CacheSettings | None = None) -> tuple[float, float]:
    """(TTFT, TPOT) in ms of a disaggregated row: the closed loop of the row's concurrency over its
    prefill and decode workers (:func:`prfaas_plan.serving.disaggregated_closed_loop`: prefill
    queueing, KV transfer, decode batch from Little's law). Decode workers: the case's
    ``decode_workers`` when it carries one, else ``concurrency / decode_batch`` rounded (>= 1);
    prefill workers: the case's ``prefill_workers`` when it carries one, else 1."""
    from prfaas_plan.serving import disaggregated_closed_loop

    n_decode = case.decode_workers or max(1, round(case.concurrency / case.decode_batch))
    n_prefill = case.prefill_workers or 1
    point = disaggregated_closed_loop(model, prefill, int(n_prefill), decode, int(n_decode), case.isl_tokens,
                                      case.osl_tokens, case.concurrency, settings)
    return point.ttft_s * MS_PER_S, point.tpot_s * MS_PER_S


def predict(case: Case, models: dict) -> tuple[float, float] | str:
    """(TTFT ms, TPOT ms) of one case, or the status of a prediction the model refuses."""
    from prfaas_plan.model.cache import CacheSettings

    dtypes = case.dtypes if case.experts_dtype is None else (*case.dtypes, ("experts", case.experts_dtype))
    model = _model(models, case.model_id, dtypes, case.moe_routing)
    settings = CacheSettings(kv_dtype=case.kv_dtype) if case.kv_dtype != "bf16" else None
    try:
        if case.decode_layout is not None:
            return _predict_disagg(model, _instance(case, case.layout), _instance(case, case.decode_layout), case,
                                   settings)
        ctx = RowContext(model, _instance(case, case.layout), case.isl_tokens, case.osl_tokens, case.concurrency,
                         case.run, settings)
        return _predict_agg(ctx)
    except PlanError as exc:
        return f"{PREDICTION_FAILED}: {exc}"


# ----------------------------------------------------------------------------- frames
def _out_row(row: dict, case: Case | str, got: tuple[float, float] | str) -> dict:
    """The row in :data:`COLUMNS` (the decode worker's layout for a disaggregated row)."""
    model = case.model_id if isinstance(case, Case) else row["model_path"]
    lay = (case.decode_layout or case.layout) if isinstance(case, Case) else None
    ok = isinstance(got, tuple)
    version = row.get("backend_version")
    return {
        "system": row["system"], "model": model, "engine": row["backend"],
        "engine_version": version if isinstance(version, str) else "",
        "precision": row.get("precision") if isinstance(row.get("precision"), str) else "",
        "mode": row["mode"], "isl": int(row["isl"]), "osl": int(row["osl"]),
        "concurrency": case.concurrency if isinstance(case, Case) else _concurrency_or_nan(row),
        **({"tp": lay.attn_tp, "attention_dp": lay.attn_dp, "moe_tp": lay.moe_tp, "moe_ep": lay.moe_ep} if lay else
           {c: _num(row, f"{c}_size") for c in ("tp", "attention_dp", "moe_tp", "moe_ep")}),
        "ttft_ms_measured": float(row["silicon_ttft_ms"]), "ttft_ms_predicted": got[0] if ok else math.nan,
        "tpot_ms_measured": float(row["silicon_tpot_ms"]), "tpot_ms_predicted": got[1] if ok else math.nan,
        "status": "ok" if ok else (got if isinstance(got, str) else case),
    }


def _concurrency_or_nan(row: dict) -> float:
    m = CONCURRENCY.search(_source(row))
    c = int(m.group(1)) if m else _num(row, "batch_size")
    return math.nan if c is None else float(c)


def _frame(rows: list[dict], strict: bool, moe_routing: str = "balanced") -> pd.DataFrame:
    """Map, predict (once per identical case) and tabulate ``rows``, MoE timed at ``moe_routing``;
    a repeat of an earlier row's measured run is marked :data:`REPEATED_RUN`."""
    import pandas as pd

    models: dict = {}
    predictions: dict[Case, tuple[float, float] | str] = {}
    protocols: Counter = Counter()
    remapped: Counter = Counter()
    runs: dict[tuple, int] = {}  # each measured run, as predicted: the first row that holds it
    budgets = kv_dtypes = schedulers = memories = experts = kernels = experts_tp = workers = dp_attention = generated = 0
    cases = [_map_row(row, models, strict, moe_routing) for row in rows]
    spans = [_measured_span(row) for row in rows]
    measured = [_measurement(row, case) if isinstance(case, Case) else None for row, case in zip(rows, cases)]
    inferencex: dict[tuple, tuple[datetime, datetime] | None] = {}  # each InferenceX measurement: when, narrowest
    dated = [bool(INFERENCEX_SOURCE.match(_source(row))) for row in rows]
    for case, key, span, ix in zip(cases, measured, spans, dated):
        if ix and isinstance(case, Case) and case.run == INFERENCEX_RUN:
            inferencex[key] = min((s for s in (inferencex.get(key), span) if s is not None),
                                  key=lambda s: s[1] - s[0], default=None)
    out = []
    for row, case, key, span, ix in zip(rows, cases, measured, spans, dated):
        got: tuple[float, float] | str | None = None
        if isinstance(case, Case):
            twin = not ix and case.decode_layout is None and key in inferencex
            span = inferencex[key] if twin else span
            case = _as_launched(row, replace(case, run=INFERENCEX_RUN) if twin else case, span)
            if isinstance(case, str):  # a rule of _as_launched left it out
                out.append(_out_row(row, case, case))
                continue
            protocols[protocol_name(case.run)] += 1
            budgets += case.token_budget is not None
            kv_dtypes += case.kv_dtype != "bf16"
            schedulers += case.max_running is not None or case.recv_interval_steps is not None
            memories += case.mem_fraction is not None
            experts += case.experts_dtype is not None
            kernels += case.mxfp4_moe_kernel is not None
            generated += case.mixed_prefill is not None
            experts_tp += _experts_tp_by_recipe(row, case)
            took_workers, took_dp = _from_recipe(row, case)
            workers += took_workers
            dp_attention += took_dp
            remapped.update(_remapped(row, case, _model(models, case.model_id, ()).gemm_dtypes, twin))
            if case not in predictions:
                predictions[case] = predict(case, models)
            got = predictions[case]
            first = runs.setdefault((case.run, _measurement(row, case)), len(out))  # the case and what it measured
            if first != len(out):
                out.append({**_out_row(row, case, got), "status": f"{REPEATED_RUN}: row {first}"})
                continue
        out.append(_out_row(row, case, got if got is not None else case))
    df = pd.DataFrame(out, columns=list(COLUMNS))
    df.attrs["unique_predictions"] = len(predictions)
    df.attrs["protocols"] = {name: protocols[name] for name in PROTOCOLS}  # mapped rows per protocol
    df.attrs["remapped"] = {name: remapped[name] for name in REMAPS}  # mapped rows per relabelling rule
    df.attrs["recipe_budget"] = budgets  # InferenceX runs at their launch script's token budget (RECIPES)
    df.attrs["recipe_kv_dtype"] = kv_dtypes  # ... and at its KV-cache dtype
    df.attrs["recipe_scheduler"] = schedulers  # ... and at its running-request cap or scheduler polling
    df.attrs["recipe_memory"] = memories  # ... and at its static memory share
    df.attrs["recipe_experts_dtype"] = experts  # ... and with its experts' GEMM dtype
    df.attrs["recipe_moe_kernel"] = kernels  # ... and with its experts' kernel
    df.attrs["recipe_experts_tp"] = experts_tp  # ... and its experts tensor-parallel where the row names expert ranks
    df.attrs["generator_launch"] = generated  # AIConfigurator runs as its generator launched SGLang (_as_generated)
    df.attrs["recipe_workers"] = workers  # disaggregated runs at their recipe's workers (DISAGG_RECIPES)
    df.attrs["recipe_dp_attention"] = dp_attention  # ... and at its DP attention, which the row does not give
    return df


def _experts_tp_by_recipe(row: dict, case: Case) -> bool:
    """Whether an aggregated row that names expert ranks runs its experts tensor-parallel, as its
    recipe's script launched them (:attr:`~prfaas_plan.inferencex.Recipe.experts_tp`)."""
    return case.decode_layout is None and case.layout.experts == "tp" and (_num(row, "moe_ep_size") or 1) > 1


def _from_recipe(row: dict, case: Case) -> tuple[bool, bool]:
    """Whether a disaggregated row took its worker counts, and DP attention, from its recipe
    (:func:`_with_recipe`): the row gives neither."""
    if case.decode_layout is None or case.decode_workers is None or _num(row, "decode_num_workers") is not None:
        return False, False
    roles = (("prefill", case.layout), ("decode", case.decode_layout))
    return True, any(lay.attention == "dp" and (_num(row, f"{r}_attention_dp_size") or 1) == 1 for r, lay in roles)


def _measurement(row: dict, case: Case) -> tuple:
    """What identifies one measured run: its configuration (``case`` but for the protocol) and its
    TTFT and TPOT to the :data:`REPEAT_RESOLUTION_MS` the gap-analysis files round them to."""
    return (replace(case, run=None), round(float(row["silicon_ttft_ms"]) / REPEAT_RESOLUTION_MS),
            round(float(row["silicon_tpot_ms"]) / REPEAT_RESOLUTION_MS))


def _as_launched(row: dict, case: Case, span: tuple[datetime, datetime] | None) -> Case | str:
    """``case`` on the engine as the run's launch script started it: an InferenceX run whose script
    sets the token budget per step, the KV-cache dtype, the most running requests or the
    scheduler's polling interval (:data:`~prfaas_plan.inferencex.RECIPES`, those whose config key ran the row) takes them;
    the status that leaves it out where the recipes that ran it launch the engine differently
    (:data:`AMBIGUOUS_RECIPE`) or the one that ran it decoded speculatively (:data:`SPECULATIVE_RUN`);
    an AIConfigurator run, as its generator launched the engine (:func:`_as_generated`);
    ``span``: when it was measured (:func:`_measured_span`; a repeat, when the run it repeats was)."""
    if case.run != INFERENCEX_RUN:
        return _as_generated(case)
    ran = [r for r in RECIPES if r.applies(row, case) and r.ran(case, span)]
    if len(ran) > 1:
        names = [r.key or r.source for r in ran]
        if len(set(names)) < len(names):  # one key's script versions: name each
            names = [r.name for r in ran]
        return f"{AMBIGUOUS_RECIPE}: {' or '.join(names)}"
    if not ran:
        return case
    recipe, = ran
    if recipe.spec != "none":
        return f"{SPECULATIVE_RUN}: {recipe.key} ({recipe.spec})"
    layout = replace(case.layout, experts="tp") if recipe.experts_tp else case.layout
    return replace(case, layout=layout, token_budget=recipe.budget(case.isl_tokens), kv_dtype=recipe.kv_dtype or case.kv_dtype,
                   max_running=recipe.running(case.isl_tokens, case.osl_tokens),
                   recv_interval_steps=recipe.recv_steps(case.concurrency), mem_fraction=recipe.mem_fraction,
                   max_prefill_tokens=recipe.max_prefill,
                   experts_dtype=recipe.experts_dtype, mxfp4_moe_kernel=recipe.mxfp4_moe_kernel)


def _remapped(row: dict, case: Case, stored: GemmDtypes, twin: bool = False) -> list[str]:
    """The :data:`REMAPS` rules that changed what ``row``'s labels say about ``case`` (``stored``: the
    checkpoint's dtypes; ``twin``: the row repeats an InferenceX measurement)."""
    rules = []
    if _native_fp4(row, stored) or any(getattr(stored, c) not in ("bf16", d) for c, d in _dtypes(row, stored)):
        rules.append(REMAPS[0])
    roles = (("prefill_", case.layout), ("decode_", case.decode_layout)) if case.decode_layout else (("", case.layout),)
    if any(lay.experts == "ep" and (_num(row, f"{p}moe_ep_size") or 1) <= 1 for p, lay in roles):
        rules.append(REMAPS[1])
    if twin:
        rules.append(REMAPS[2])
    if _as_named(row) is not row:
        rules.append(REMAPS[3])
    return rules


def default_csv() -> Path:
    """The silicon CSV of the installed aiconfigurator-core (found without importing its compiled module)."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    for root in roots:
        path = Path(root) / "systems" / "silicon_sample.csv"
        if path.is_file():
            return path
    raise InvalidInput("csv: aiconfigurator-core is not installed; pip install 'prfaas-plan[kernels]' "
                       "or give --csv PATH to its systems/silicon_sample.csv")


def system_names(systems) -> set[str] | None:
    """The CSV system names of ``systems`` (CSV names or our GPU ids: h200 == h200_sxm)."""
    if systems is None:
        return None
    names = [systems] if isinstance(systems, str) else list(systems)
    ours = {v: k for k, v in SYSTEM_GPUS.items()}
    return {ours.get(s, s) for s in names}


def validate_silicon(csv_path: str | Path | None = None, systems=None, moe_routing: str = "balanced") -> pd.DataFrame:
    """Every row of the silicon CSV (default: the installed aiconfigurator-core's) with our TTFT and
    TPOT predictions beside the measured ones, in :data:`COLUMNS`; ``systems`` keeps only those
    (CSV names like ``h200_sxm`` or our ids like ``h200``); ``moe_routing`` the routing the MoE
    kernel tables are read at (:data:`prfaas_plan.vocab.MOE_ROUTINGS`; unknown: InvalidInput)."""
    import pandas as pd

    check_choice(moe_routing, MOE_ROUTINGS, "moe_routing")
    path = Path(csv_path) if csv_path is not None else default_csv()
    if not is_file(path):
        raise InvalidInput(f"csv: {shown(path)} is not a file; give the path of silicon_sample.csv")
    try:
        df = pd.read_csv(path, low_memory=False)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"csv: {path} is not a readable CSV ({str(exc).splitlines()[0]})") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise InvalidInput(f"csv: {path} lacks the columns {', '.join(missing)}; give aiconfigurator-core's "
                           "systems/silicon_sample.csv or a CSV with its columns")
    keep = system_names(systems)
    if keep is not None:
        df = df[df["system"].isin(keep)]
    out = _frame(df.to_dict("records"), strict=csv_path is not None, moe_routing=moe_routing)
    out.attrs["source"] = str(path)
    return out


# ----------------------------------------------------------------------------- vllm bench serve runs
def _run_row(path: Path, doc: dict) -> dict:
    """A ``vllm bench serve`` result as a CSV-like row (ISL, OSL = the tokens per completed request)."""
    missing = [k for k in RUN_KEYS if k not in doc]
    if missing:
        raise InvalidInput(f"runs: {path} is not a `vllm bench serve --save-result` JSON (no "
                           f"{', '.join(missing)}); give the files vllm bench serve wrote")
    done = doc["completed"]
    if not isinstance(done, int | float) or done <= 0:
        raise InvalidInput(f"runs: {path} has completed={done!r}; a run needs at least one completed request")
    conc = doc["max_concurrency"]
    if isinstance(conc, int | float) and conc < 0:
        raise InvalidInput(f"runs: {path} has max_concurrency={conc}; give a count >= 1")
    model = doc.get("model_id", "")
    return {
        "id": str(path), "silicon_data_source": f"silicon_concurrency={int(conc)}" if conc is not None else "",
        "backend": "vllm", "backend_version": str(doc.get("engine_version", "")),
        "model_path": next((k for k, v in MODEL_IDS.items() if model in (k, v)), model),
        "system": str(doc.get("gpu", "")), "precision": doc.get("precision"), "mode": "agg",
        "isl": round(doc["total_input_tokens"] / done), "osl": round(doc["total_output_tokens"] / done),
        "gemm_quant_mode": doc.get("gemm_quant_mode"), "moe_quant_mode": doc.get("moe_quant_mode"),
        "batch_size": None, "tp_size": doc.get("tp", 1), "pp_size": 1, "attention_dp_size": doc.get("attention_dp"),
        "moe_tp_size": doc.get("moe_tp"), "moe_ep_size": doc.get("moe_ep"),
        "silicon_ttft_ms": doc["mean_ttft_ms"], "silicon_tpot_ms": doc["mean_tpot_ms"],
        # every request measured from a burst start (--request-rate inf), completed / max_concurrency per client
        "run_prompts_per_client": max(1, round(done / conc)) if isinstance(conc, int | float) and conc > 0 else None,
    }


def validate_runs(path: str | Path) -> pd.DataFrame:
    """``vllm bench serve --save-result`` JSON files (one file, or every ``*.json`` of a folder) in
    :data:`COLUMNS`; the GPU and layout come from ``--metadata gpu=h200 tp=8 ...`` (:data:`RUN_METADATA`;
    a GPU id of the hardware database or a CSV system name). Measured: mean TTFT and TPOT."""
    import pandas as pd

    p = Path(path)
    files = sorted(p.glob("*.json")) if is_dir(p) else [p]
    if not files or not all(is_file(f) for f in files):
        raise InvalidInput(f"runs: {shown(p)} is neither a result JSON nor a folder of them")
    rows, no_gpu = [], []
    for f in files:
        try:
            doc = json.loads(f.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InvalidInput(f"runs: {f} is not JSON ({exc}); give vllm bench serve's result files") from None
        if not isinstance(doc, dict):
            raise InvalidInput(f"runs: {f} is not a `vllm bench serve --save-result` JSON (not an object)")
        row = _run_row(f, doc)
        row["system"] = next((k for k, v in SYSTEM_GPUS.items() if row["system"] in (k, v)), row["system"])
        (rows if row["system"] else no_gpu).append(row)
    df = _frame([r for r in rows if r["silicon_data_source"]], strict=True)
    left = [{**_blank(r), "status": NO_CONCURRENCY} for r in rows if not r["silicon_data_source"]]
    left += [{**_blank(r), "status": NO_GPU} for r in no_gpu]
    return pd.concat([df, pd.DataFrame(left, columns=list(COLUMNS))], ignore_index=True) if left else df


def _blank(row: dict) -> dict:
    """A run left out before mapping: its measured values, nothing predicted."""
    return {c: math.nan for c in COLUMNS} | {
        "system": row["system"], "model": MODEL_IDS.get(row["model_path"], row["model_path"]), "engine": "vllm", "engine_version": row["backend_version"],
        "precision": "", "mode": "agg", "isl": row["isl"], "osl": row["osl"],
        "ttft_ms_measured": float(row["silicon_ttft_ms"]), "tpot_ms_measured": float(row["silicon_tpot_ms"])}


# ----------------------------------------------------------------------------- summaries
def errors_pct(df: pd.DataFrame) -> pd.DataFrame:
    """The predicted rows with their signed errors in percent of the measured value: status ``ok``,
    each measured run once (a row marked :data:`REPEATED_RUN` is not among them)."""
    ok = df[df["status"] == "ok"].copy()
    ok["ttft_error_pct"] = (ok["ttft_ms_predicted"] / ok["ttft_ms_measured"] - 1) * 100
    ok["tpot_error_pct"] = (ok["tpot_ms_predicted"] / ok["tpot_ms_measured"] - 1) * 100
    return ok


def off_factor(predicted, measured):
    """How many times off a prediction is, either way: ``max(p / m, m / p)`` (1 = exact). An
    |error| in percent cannot tell a 3x under-prediction (|error| 67%) from a 1.7x over-prediction
    (70%); this can."""
    import numpy as np

    r = np.asarray(predicted, dtype=float) / np.asarray(measured, dtype=float)
    return np.maximum(r, 1.0 / r)


SUMMARY_GROUPS = ("model", "engine")
"""What :func:`summary` breaks each system and mode down by."""


def summary(df: pd.DataFrame, by: str = "model") -> pd.DataFrame:
    """Per system, mode and ``by`` (a column of :data:`SUMMARY_GROUPS`: the model, or the serving
    engine; and each system's and mode's ``all``): n, median and max |error| of TTFT and TPOT in
    percent, their median signed error (``*_median_signed_error_pct``: below 0 the model predicts
    faster than measured, an optimistic plan; above 0 a pessimistic one), and the rows predicted
    more than 2x off either way (:func:`off_factor` > 2), over the predicted rows."""
    import pandas as pd

    check_choice(by, SUMMARY_GROUPS, "by")
    ok = errors_pct(df)
    ok["ttft_abs"], ok["tpot_abs"] = ok["ttft_error_pct"].abs(), ok["tpot_error_pct"].abs()
    for m in ("ttft", "tpot"):
        ok[f"{m}_2x"] = off_factor(ok[f"{m}_ms_predicted"], ok[f"{m}_ms_measured"]) > 2.0
    parts = [ok, ok.assign(**{by: "all"})]
    both = pd.concat(parts, ignore_index=True)
    g = both.groupby(["system", "mode", by], sort=True)
    out = g.agg(n=("status", "size"), ttft_median_abs_error_pct=("ttft_abs", "median"),
                ttft_max_abs_error_pct=("ttft_abs", "max"), ttft_median_signed_error_pct=("ttft_error_pct", "median"),
                ttft_rows_beyond_2x=("ttft_2x", "sum"),
                tpot_median_abs_error_pct=("tpot_abs", "median"), tpot_max_abs_error_pct=("tpot_abs", "max"),
                tpot_median_signed_error_pct=("tpot_error_pct", "median"),
                tpot_rows_beyond_2x=("tpot_2x", "sum")).reset_index()
    return out


def status_counts(df: pd.DataFrame) -> pd.DataFrame:
    """Rows per rule (the status up to its first colon) and system."""
    rule = df["status"].str.split(":", n=1).str[0]
    counts = df.assign(rule=rule).groupby(["rule", "system"]).size().rename("rows").reset_index()
    return counts.sort_values(["rule", "system"], ignore_index=True)


def prompt_peak_share(df: pd.DataFrame) -> pd.Series:
    """Per aggregated row, the share of its GPUs' fastest dense tensor-core peak
    (:attr:`~prfaas_plan.hardware.GPU.fastest_dense_flops`) that
    its prompts alone need at its measured request rate: ``concurrency / (TTFT + (OSL - 1) * TPOT)``
    requests a second (Little's law over a closed loop of that many clients), each ``isl`` tokens of
    the model's prefill FLOPs (:func:`~prfaas_plan.perf.roofline.prefill_flops`), over ``tp x
    attention_dp`` GPUs. A lower bound on the compute the run spent on prompts, as no kernel reaches
    the peak and decoding comes on top: above 1 the run cannot have prefilled every prompt (a prefix
    cache served some), which the predictions assume it did. NaN for disaggregated rows and rows
    whose model or GPU the databases lack."""
    import numpy as np
    import pandas as pd

    from prfaas_plan.hardware import load_gpu
    from prfaas_plan.model import load_model
    from prfaas_plan.perf.roofline import prefill_flops

    out = pd.Series(np.nan, index=df.index, dtype=float)
    agg = df[(df["mode"] == "agg") & (df["isl"] > 0) & (df["concurrency"] > 0)]
    for (model_id, system), rows in agg.groupby(["model", "system"]):
        try:
            flops = prefill_flops(load_model(model_id), rows["isl"].to_numpy(dtype=float)).total
            flops_per_s = load_gpu(SYSTEM_GPUS.get(system, system)).fastest_dense_flops
        except InvalidInput:  # not in the model or hardware database, or prompts beyond the model's context
            continue
        requests_per_s = rows["concurrency"] / ((rows["ttft_ms_measured"] + (rows["osl"] - 1) * rows["tpot_ms_measured"])
                                                / MS_PER_S)
        out[rows.index] = requests_per_s * flops / (rows["tp"] * rows["attention_dp"].fillna(1) * flops_per_s)
    return out


def worst_rows(df: pd.DataFrame, n: int = 20) -> pd.DataFrame:
    """The ``n`` predicted rows farthest from their measurement (the larger of TTFT's and TPOT's
    :func:`off_factor`, so an under-prediction ranks as far as an over-prediction by the same factor),
    with the share of their GPUs' peak their prompts needed (``prompt_peak_share``,
    :func:`prompt_peak_share`)."""
    import pandas as pd

    ok = errors_pct(df)
    key = pd.concat([pd.Series(off_factor(ok[f"{m}_ms_predicted"], ok[f"{m}_ms_measured"]), index=ok.index)
                     for m in ("ttft", "tpot")], axis=1).max(axis=1)
    worst = ok.loc[key.sort_values(ascending=False).index[:n]]
    return worst.assign(prompt_peak_share=prompt_peak_share(worst)).reset_index(drop=True)


__all__ = ["AIC_RUN", "AIC_SOURCE", "COLUMNS", "Case", "INFERENCEX_COLLECTION", "INFERENCEX_RUN", "INFERENCEX_SOURCE", "MODEL_IDS", "NVFP4_RELEASES", "PROTOCOLS",
           "REMAPS", "REPEATED_RUN", "REQUIRED_COLUMNS", "SUMMARY_GROUPS", "SYSTEM_GPUS", "default_csv", "errors_pct", "off_factor",
           "predict", "prompt_peak_share", "protocol_name", "status_counts", "summary", "system_names", "validate_runs",
           "validate_silicon", "worst_rows"]
