"""The vocabularies: every closed set of names a user can type, as ``Literal`` types.

One place for the names that pydantic files, dataclasses, sweep grids and the typer CLI accept, so
that a value valid in one is valid in all. Each ``Literal`` comes with its tuple of names (for
messages and loops); ``typing.get_args`` keeps the two from drifting apart.
"""

from __future__ import annotations

from typing import Literal, get_args

from prfaas_plan.errors import InvalidInput

Dtype = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"]
"""Element types of a model's weights and caches (``units.DTYPE_BYTES`` gives their sizes)."""
KvDtype = Literal["bf16", "fp8", "fp32"]
"""Element types a serving engine stores KV caches in."""
StateDtype = Literal["fp32", "bf16"]
"""Element types of linear-attention recurrent states."""
Engine = Literal["vllm", "sglang", "hf"]
"""Whose cache layout to follow: vLLM, SGLang, or what a transformers 5 cache holds."""
PlanMode = Literal["exact", "paper"]
"""The planner's two modes: the bucketed MILP, or the paper's closed-form case study."""
Policy = Literal["fixed", "short", "dual"]
"""The simulator's schedulers: fixed threshold, short-term (link-aware), dual-timescale."""
SweepRun = Literal["plan", "simulate"]
"""What a sweep cell runs."""
SweepExecutor = Literal["local", "dask", "serial"]
"""Where a sweep's cells run: local processes, a dask.distributed cluster, or in this process."""
LengthKind = Literal["lognormal", "trace"]
"""How a scenario gives its request lengths."""
TraceFormat = Literal["auto", "mooncake", "azure", "csv"]
"""Request-trace file formats (``auto`` reads the file's first record)."""
TableFormat = Literal["table", "json", "csv"]
"""How the CLI prints a table: for humans, or for programs."""
BenchDevice = Literal["auto", "cpu", "cuda"]
"""Where the microbenchmark harness runs."""
BenchStatistic = Literal["min", "median"]
"""Which per-case time of the repeats calibration uses."""
GemmDtype = Literal["bf16", "fp8", "fp8_block", "int4_w4a16", "fp32", "mxfp4_w4a16", "mxfp4_w4a8", "nvfp4"]
"""How a GEMM runs: bf16; FP8 e4m3 with per-tensor scales; FP8 with 128x128 block scales
(DeepSeek-style); int4 weights in groups with bf16 activations (Marlin-style W4A16); MXFP4 weights
(OCP microscaling: e2m1 elements, one e8m0 scale per 32) with bf16 activations, as gpt-oss ships
its experts and Hopper runs them; MXFP4 weights with MXFP8 activations (Blackwell's MX tensor cores,
at the FP8 rate); NVFP4 weights and activations (e2m1, one FP8 e4m3 scale per 16; Blackwell's FP4
tensor cores, at the FP4 rate); fp32 (the CPU microbenchmark's torch drafts only)."""
GemmClass = Literal["attention", "dense_ffn", "experts", "lm_head"]
"""The GEMM classes a checkpoint quantises separately (projections of attention, dense FFNs and
shared experts, routed experts, the output head)."""
AttentionLayout = Literal["tp", "dp"]
"""Attention across an instance's GPUs: tensor parallel (heads split) or data parallel (each rank
runs whole attention for its own requests)."""
ExpertLayout = Literal["tp", "ep"]
"""Routed experts across an instance's GPUs: tensor parallel (each expert split) or expert
parallel (whole experts per rank, all-to-all dispatch)."""
KernelFamily = Literal["gemm", "moe", "attention", "mla", "dsa", "linear_attention", "comm"]
"""Families of measured kernel tables (``hardware_db/kernels``)."""

DTYPES: tuple[str, ...] = get_args(Dtype)
KV_DTYPES: tuple[str, ...] = get_args(KvDtype)
ENGINES: tuple[str, ...] = get_args(Engine)
PLAN_MODES: tuple[str, ...] = get_args(PlanMode)
POLICIES: tuple[str, ...] = get_args(Policy)
SWEEP_EXECUTORS: tuple[str, ...] = get_args(SweepExecutor)
TRACE_FORMATS: tuple[str, ...] = get_args(TraceFormat)
BENCH_DEVICES: tuple[str, ...] = get_args(BenchDevice)
BENCH_STATISTICS: tuple[str, ...] = get_args(BenchStatistic)
GEMM_DTYPES: tuple[str, ...] = get_args(GemmDtype)
GEMM_CLASSES: tuple[str, ...] = get_args(GemmClass)
ATTENTION_LAYOUTS: tuple[str, ...] = get_args(AttentionLayout)
EXPERT_LAYOUTS: tuple[str, ...] = get_args(ExpertLayout)
KERNEL_FAMILIES: tuple[str, ...] = get_args(KernelFamily)

MoeRouting = Literal["balanced", "power_law_1.01"]
"""Token-to-expert routing a fused-MoE kernel time is read at (the ``distribution`` column of the
aiconfigurator-core 0.12.0 MoE tables, https://pypi.org/project/aiconfigurator-core/):
``balanced`` spreads tokens evenly over the experts; ``power_law_1.01`` draws expert loads from a
power law of exponent 1.01, NVIDIA AIConfigurator's default for serving (``sdk/config.py``:
``workload_distribution = "power_law"``; alpha 1.01 in ``sdk/models/deepseek.py``,
``hybrid_moe.py``, ``nemotron_h.py``; 1.2, not kept, in ``sdk/models/moe.py``, ``qwen35.py``)."""
MOE_ROUTINGS: tuple[str, ...] = get_args(MoeRouting)

MoeKernel = Literal["default", "marlin"]
"""Which fused-MoE kernel a lookup reads where an engine offers another behind a switch: ``default``,
the kernel the engine picks unasked (per dtype: :data:`prfaas_plan.bench.kernels_import.KERNEL_PREFERENCE`);
``marlin``, Marlin's weight-only kernel, which vLLM runs for MXFP4 experts with
``VLLM_MXFP4_USE_MARLIN=1`` (:data:`prfaas_plan.bench.kernels_import.SWITCHED_MOE_KERNELS`)."""
MOE_KERNELS: tuple[str, ...] = get_args(MoeKernel)


def check_choice(value: str, allowed: tuple[str, ...], field: str) -> None:
    """A one-line InvalidInput naming ``field`` and the allowed names, unless ``value`` is one of them."""
    if value not in allowed:
        raise InvalidInput(f"{field}: unknown {value!r}; use one of {', '.join(allowed)}")
