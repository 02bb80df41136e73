"""Accelerators and instances: the validated ``hardware_db`` schema.

Units: TFLOP/s = 1e12 FLOP/s (dense, no 2:4 sparsity), memory in GiB = 2**30 bytes (what vendors
sell as "80 GB" / "141 GB" is GiB: nvidia-smi shows an H100 80GB as 81,559 MiB), GB = 1e9 bytes,
TB/s = 1e12 B/s,
scale-up GB/s per GPU per direction, NIC Gbps (1e9 bit/s) per GPU.

Each GPU carries the named efficiency factors and fixed overheads of the performance model
(:class:`Efficiency`), with their provenance: datasheet defaults until the microbenchmark
harness (``prfaas-plan bench calibrate``) or a cited measurement replaces them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt

from prfaas_plan.data import find_entry, list_entries, read_yaml, validate
from prfaas_plan.engine import EngineProfile, default_engine, load_engine
from prfaas_plan.errors import InvalidInput
from prfaas_plan.layout import Layout
from prfaas_plan.model.arch import Source
from prfaas_plan.units import BITS_PER_BYTE, GB_BYTES, GBPS_BITS_PER_S, GIB_BYTES, TB_BYTES


class Efficiency(BaseModel):
    """Achieved fraction of peak per kind of work, and fixed overheads (seconds)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    gemm: float = Field(gt=0, le=1, description="fraction of dense peak reached by prefill GEMMs (dense and MoE)")
    attention: float = Field(gt=0, le=1, description="fraction of dense peak reached by attention kernels")
    linear_attention: float = Field(gt=0, le=1, description="fraction of dense peak reached by chunked linear-attention kernels")
    memory: float = Field(gt=0, le=1, description="fraction of HBM bandwidth reached when streaming weights and KV")
    comm: float = Field(gt=0, le=1, description="fraction of scale-up bandwidth reached by TP/EP collectives")
    prefill_overhead_s: float = Field(ge=0, description="fixed time per prefill request (scheduling, launch, sampling)")
    decode_step_overhead_s: float = Field(ge=0, description="fixed time per decode step (launches, sampling, scheduling)")
    provenance: str = Field(min_length=1, description="where these numbers come from")


MX_ARCHS: tuple[str, ...] = ("blackwell",)
"""Architectures whose tensor cores take OCP microscaling (MX) operands, which a ``mxfp4_w4a8`` GEMM
needs: Blackwell's fifth-generation tensor cores (MXFP8 / MXFP6 / MXFP4 with block scales in
hardware; https://resources.nvidia.com/en-us-blackwell-architecture); Hopper and earlier have none."""
FP8_RATE_DTYPES: tuple[str, ...] = ("fp8", "fp8_block", "mxfp4_w4a8")
"""GEMM dtypes whose operands enter the tensor cores as FP8 and run at the FP8 peak (MXFP8
activations into MXFP4 weights run at the FP8 rate on MX tensor cores)."""


class GPU(BaseModel):
    """One accelerator type."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    id: str
    name: str
    bf16_dense_tflops: PositiveFloat
    fp8_dense_tflops: PositiveFloat | None = None
    fp4_dense_tflops: PositiveFloat | None = Field(
        default=None, description="dense FP4 tensor-core peak, TFLOP/s (Blackwell): NVFP4 GEMMs; None: no FP4 tensor cores")
    fp32_tflops: PositiveFloat | None = Field(
        default=None, description="FP32 (non-tensor-core) peak, TFLOP/s: GEMMs an engine runs in fp32 (MoE routers)")
    memory_gib: PositiveFloat
    memory_tb_per_s: PositiveFloat
    scaleup_gb_per_s: PositiveFloat = Field(description="NVLink-class bandwidth per GPU per direction, GB/s")
    nic_gbps: PositiveFloat = Field(description="scale-out NIC bandwidth per GPU, Gbps")
    gpus_per_node: PositiveInt | None = Field(
        default=None, description="GPUs of one server sharing its scale-up link (an HGX board: 8); a collective over "
                                  "more crosses the NICs (None: any count is one scale-up domain)")
    tdp_w: PositiveFloat
    arch: Literal["ampere", "ada", "hopper", "blackwell", "cdna3"] | None = Field(
        default=None, description="micro-architecture; kernels carry over best within one (perf.transfer)")
    sm_count: PositiveInt | None = Field(
        default=None, description="streaming multiprocessors (AMD: compute units); sets a kernel's wave tail")
    boost_clock_ghz: PositiveFloat | None = Field(
        default=None, description="maximum SM boost clock, GHz; latency-bound kernel work scales with its inverse")
    price_usd_per_gpu_hour: PositiveFloat
    price_date: str
    efficiency: Efficiency
    sources: list[Source] = Field(min_length=1)
    notes: str | None = None

    @property
    def peak_flops(self) -> float:
        """Dense bf16 FLOP/s."""
        return self.bf16_dense_tflops * 1e12

    @property
    def fastest_dense_flops(self) -> float:
        """The largest dense tensor-core FLOP/s of any dtype (FP4, else FP8, else bf16): a bound no
        kernel of this GPU exceeds."""
        return max(t for t in (self.bf16_dense_tflops, self.fp8_dense_tflops, self.fp4_dense_tflops) if t) * 1e12

    def check_gemm_dtype(self, dtype: str) -> None:
        """One-line InvalidInput where GEMM dtype ``dtype`` needs tensor cores this GPU lacks: MX
        operands (:data:`MX_ARCHS`) for mxfp4_w4a8, FP4 (``fp4_dense_tflops``) for nvfp4."""
        if dtype == "mxfp4_w4a8" and self.arch not in MX_ARCHS:
            raise InvalidInput(f"gemm_dtypes: {self.id} ({self.arch}) has no MX tensor cores, so it cannot run mxfp4_w4a8 "
                               "(MXFP8 activations); use mxfp4_w4a16 on it")
        if dtype == "nvfp4" and self.fp4_dense_tflops is None:
            raise InvalidInput(f"gemm_dtypes: {self.id} has no FP4 tensor cores (no fp4_dense_tflops), so it cannot run "
                               "nvfp4; plan it on a GPU with FP4 tensor cores (b200), or plan the checkpoint's bf16 "
                               "or FP8 release on this one")

    def gemm_peak_flops(self, dtype: str) -> float:
        """Dense FLOP/s of a GEMM in ``dtype``: the FP8 peak for :data:`FP8_RATE_DTYPES` (fp8, fp8_block;
        mxfp4_w4a8, FP8 activations into FP4 weights on MX tensor cores), the bf16 peak where the GPU
        has no FP8 units; the FP4 peak for nvfp4; the FP32 peak for fp32 (a model's ``router_dtype``);
        the bf16 peak otherwise (int4_w4a16 and mxfp4_w4a16 dequantize to bf16). Refuses what
        :meth:`check_gemm_dtype` refuses, and fp32 on a GPU that states no FP32 peak."""
        self.check_gemm_dtype(dtype)
        if dtype == "nvfp4":
            return self.fp4_dense_tflops * 1e12
        if dtype in FP8_RATE_DTYPES and self.fp8_dense_tflops is not None:
            return self.fp8_dense_tflops * 1e12
        if dtype == "fp32":
            if self.fp32_tflops is None:
                raise InvalidInput(f"hardware.fp32_tflops: {self.id} states no FP32 peak, which an fp32 GEMM (a model's "
                                   "router_dtype) needs; add fp32_tflops to its hardware_db entry")
            return self.fp32_tflops * 1e12
        return self.peak_flops

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * GIB_BYTES

    @property
    def memory_bytes_per_s(self) -> float:
        return self.memory_tb_per_s * TB_BYTES

    @property
    def scaleup_bytes_per_s(self) -> float:
        return self.scaleup_gb_per_s * GB_BYTES

    @property
    def nic_bytes_per_s(self) -> float:
        """Scale-out NIC bandwidth per GPU, bytes/s."""
        return self.nic_gbps * GBPS_BITS_PER_S / BITS_PER_BYTE


MAX_INSTANCE_GPUS = 1024
"""Most GPUs in one instance (one model replica; an NVL72 rack is 72): a larger count is a typo."""
MAX_POOL_GPUS = 100_000
"""Most GPUs in one pool or cluster (the largest 2026 datacenters hold ~200k, for training): beyond is a typo."""


@dataclass(frozen=True)
class Instance:
    """A serving instance: ``gpus`` GPUs of one type running one model replica, in ``layout``
    (None: the model's :func:`~prfaas_plan.layout.default_layout`, tensor parallel over all its
    GPUs unless the engines refuse the experts' split; :func:`~prfaas_plan.layout.instance_layout`
    resolves it), under the serving engine ``engine`` (None:
    :data:`~prfaas_plan.engine.DEFAULT_ENGINE_PROFILE`)."""

    gpu: GPU
    gpus: int = 8
    layout: Layout | None = None
    engine: EngineProfile | None = None

    def __post_init__(self) -> None:
        if self.gpus <= 0:
            raise InvalidInput(f"gpus: an instance needs at least 1 GPU, got {self.gpus}")
        if self.gpus > MAX_INSTANCE_GPUS:
            raise InvalidInput(f"gpus: {self.gpus:,} GPUs per instance is more than {MAX_INSTANCE_GPUS:,}; an "
                            "instance is one model replica")
        if self.layout is not None and self.layout.gpus != self.gpus:
            raise InvalidInput(f"layout.gpus: the layout spans {self.layout.gpus} GPUs but the instance has "
                               f"{self.gpus}; give both the same count")

    @property
    def parallel(self) -> Layout:
        """The instance's layout, TP over all its GPUs when none was given: the model-free view, right
        for what the experts' placement does not change (attention DP ranks); a model's ops read
        :func:`~prfaas_plan.layout.instance_layout`."""
        return self.layout or Layout(self.gpus)

    @property
    def engine_profile(self) -> EngineProfile:
        """The instance's serving-engine profile (the default one when none was given)."""
        return self.engine or default_engine()

    @property
    def chunked_prefill_tokens(self) -> int:
        """Prompt tokens one engine step takes on this instance: its profile's budget on its GPU
        (:meth:`~prfaas_plan.engine.EngineProfile.chunked_prefill_tokens_on`)."""
        return self.engine_profile.chunked_prefill_tokens_on(self.gpu)

    @property
    def name(self) -> str:
        return f"{self.gpus}x{self.gpu.id}"

    def __repr__(self) -> str:
        return (f"Instance({self.name}: {self.peak_flops / 1e15:,.1f} PFLOP/s bf16, {self.memory_bytes / 2**30:,.0f} GiB, "
                f"${self.price_usd_per_hour:,.2f}/h)")

    def _repr_html_(self) -> str:
        from prfaas_plan.display import html_table

        g = self.gpu
        return html_table(f"{self.name} ({g.name})", [
            ("GPUs", self.gpus, ""), ("dense bf16", self.peak_flops / 1e12, "TFLOP/s"),
            ("memory", self.memory_bytes / 2**30, "GiB"), ("memory bandwidth", self.memory_bytes_per_s / 1e12, "TB/s"),
            ("price", self.price_usd_per_hour, "$/hour")])

    @property
    def peak_flops(self) -> float:
        return self.gpus * self.gpu.peak_flops

    @property
    def memory_bytes(self) -> float:
        return self.gpus * self.gpu.memory_bytes

    @property
    def memory_bytes_per_s(self) -> float:
        return self.gpus * self.gpu.memory_bytes_per_s

    @property
    def price_usd_per_hour(self) -> float:
        return self.gpus * self.gpu.price_usd_per_gpu_hour


def load_gpu(ref: str | Path, extra_dirs: tuple[Path, ...] = ()) -> GPU:
    """Load a GPU by ``hardware_db`` id or YAML path."""
    path = find_entry(ref, "prfaas_plan.data.hardware_db", "hardware", tuple(Path(d) for d in extra_dirs))
    return validate(GPU, read_yaml(path), str(path))


def list_gpus(extra_dirs: tuple[Path, ...] = ()) -> list[GPU]:
    return [load_gpu(p) for p in list_entries("prfaas_plan.data.hardware_db", tuple(Path(d) for d in extra_dirs))]


def instance(gpu: str | GPU, gpus: int = 8, extra_dirs: tuple[Path, ...] = (), layout: Layout | None = None,
             engine: str | EngineProfile | None = None) -> Instance:
    """An instance of ``gpus`` GPUs of the given type (id, path or :class:`GPU`) in ``layout``
    (None: TP over all of them) under the engine profile ``engine`` (id, path or profile)."""
    spec = gpu if isinstance(gpu, GPU) else load_gpu(gpu, extra_dirs)
    return Instance(spec, int(gpus), layout, load_engine(engine) if engine is not None else None)
