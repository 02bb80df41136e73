"""Scenario files: everything a plan needs, validated (pydantic), with built-in examples.

A scenario names the model, the PrfaaS pool (compute-dense GPUs in another datacenter), the
local PD pool (decode-capable GPUs), the inter-DC link, the workload, the SLOs, optional
measured profiles and decode constants, and the homogeneous baseline's GPU count.
See ``scenarios/paper-case-study.yaml`` for a commented example.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    model_serializer,
    model_validator,
)

from prfaas_plan.data import builtin_dir, find_entry, is_dir, is_file, read_yaml, validate
from prfaas_plan.defaults import (
    DEFAULT_ENGINE_PROFILE,
    DEFAULT_INSTANCE_GPUS,
    DEFAULT_LINK_EFFICIENCY,
    PAPER_MAX_TOKENS,
    PAPER_MIN_TOKENS,
    PAPER_MU_LOG_TOKENS,
    PAPER_OUTPUT_TOKENS,
    PAPER_SIGMA_LOG_TOKENS,
    PREFIX_BLOCK_TOKENS,
)
from prfaas_plan.engine import EngineProfile, load_engine
from prfaas_plan.errors import InvalidInput, shown
from prfaas_plan.hardware import MAX_INSTANCE_GPUS, MAX_POOL_GPUS, Instance, instance
from prfaas_plan.kvcache import CacheSettings
from prfaas_plan.layout import Layout, check_layout, default_layout
from prfaas_plan.model import ModelSpec, load_model
from prfaas_plan.perf.latency import ENGINE_RESERVE_GIB_PER_GPU
from prfaas_plan.perf.roofline import MeasuredProfile
from prfaas_plan.units import MIB_BYTES
from prfaas_plan.vocab import AttentionLayout, ExpertLayout, LengthKind, MoeRouting, TraceFormat

QUICK_ORIGIN = "command-line flags"
"""The origin of a :meth:`Scenario.quick` (a model and two pools given on the command line, no file)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ProfileSpec(_Strict):
    """A measured prefill profile: T_prefill (s) and optionally S_kv (MiB) at some lengths."""

    source: str
    tokens: list[PositiveInt] = Field(min_length=2)
    prefill_s: list[PositiveFloat] = Field(min_length=2)
    kv_mib: list[PositiveFloat] | None = None

    def to_profile(self) -> MeasuredProfile:
        kv = tuple(v * MIB_BYTES for v in self.kv_mib) if self.kv_mib else None
        return MeasuredProfile(tuple(self.tokens), tuple(self.prefill_s), kv, self.source)


class LayoutSpec(_Strict):
    """How each instance of a pool runs the model (:class:`prfaas_plan.layout.Layout`): attention
    ``tp`` or ``dp``, routed experts ``tp`` or ``ep`` (unset: tensor parallel unless the engines
    refuse the model's split, then expert parallel, :func:`prfaas_plan.layout.default_layout`),
    decode context parallelism ``dcp``, and under ``attention: dp`` the GPUs of each attention
    replica's TP group ``attention_tp`` (vLLM's ``--tensor-parallel-size`` beside
    ``--data-parallel-size``; default 1)."""

    attention: AttentionLayout = "tp"
    experts: ExpertLayout | None = None
    dcp: PositiveInt = 1
    attention_tp: PositiveInt | None = None

    def to_layout(self, gpus: int, model: ModelSpec) -> Layout | None:
        """The layout over ``gpus`` GPUs for ``model``; None for the default (the instance's own:
        :func:`prfaas_plan.layout.default_layout`)."""
        if self == LayoutSpec():
            return None
        experts = self.experts or default_layout(model, gpus).experts
        return Layout(gpus, self.attention, experts, self.dcp, self.attention_tp)


class PoolSpec(_Strict):
    """A pool of GPUs of one type, cut into instances of ``gpus_per_instance`` GPUs laid out as ``layout``."""

    gpu: str
    gpus: int = Field(ge=0, le=MAX_POOL_GPUS)
    gpus_per_instance: PositiveInt = Field(default=DEFAULT_INSTANCE_GPUS, le=MAX_INSTANCE_GPUS)
    layout: LayoutSpec = LayoutSpec()
    profile: ProfileSpec | None = None
    transfer_buffer_gib: PositiveFloat | None = Field(default=None, description="PrfaaS pool only: GiB per "
                                                      "instance holding KV that waits on the link (null = unlimited); "
                                                      "a full buffer holds back the next prefill")

    @model_validator(mode="after")
    def _whole(self) -> PoolSpec:
        if self.gpus % self.gpus_per_instance:
            raise ValueError(f"gpus ({self.gpus}) must be a multiple of gpus_per_instance ({self.gpus_per_instance})")
        return self

    @property
    def instances(self) -> int:
        return self.gpus // self.gpus_per_instance


class LinkSpec(_Strict):
    """The inter-datacenter link: nominal Gbps (1e9 bit/s), usable fraction, round trip,
    and an optional price of the line per hour."""

    gbps: float = Field(ge=0)
    efficiency: float = Field(default=DEFAULT_LINK_EFFICIENCY, gt=0, le=1)
    rtt_s: float = Field(default=0.005, ge=0)
    price_usd_per_hour: float = Field(default=0.0, ge=0)


class WorkloadSpec(_Strict):
    """Input lengths (the paper's truncated log-normal, or a trace) and output lengths."""

    kind: LengthKind = "lognormal"
    mu: float = PAPER_MU_LOG_TOKENS
    sigma: PositiveFloat = PAPER_SIGMA_LOG_TOKENS
    min_tokens: PositiveInt = PAPER_MIN_TOKENS
    max_tokens: PositiveInt = PAPER_MAX_TOKENS
    output_tokens: PositiveFloat | None = PAPER_OUTPUT_TOKENS
    trace: str | None = None
    trace_format: TraceFormat = "auto"
    prefix_cache_blocks: int | None = Field(default=0, ge=0, description=f"LRU prefix cache size in "
                                            f"{PREFIX_BLOCK_TOKENS}-token blocks; 0 = off, null = unlimited")

    @model_validator(mode="after")
    def _check(self) -> WorkloadSpec:
        if self.kind == "trace" and not self.trace:
            raise ValueError("a trace workload needs trace: PATH")
        if self.min_tokens >= self.max_tokens:
            raise ValueError("min_tokens must be below max_tokens")
        return self


class SloSpec(_Strict):
    """Service-level objectives: time per output token, and a TTFT percentile bound."""

    tpot_s: PositiveFloat = 0.025
    ttft_quantile: float = Field(default=0.9, gt=0, lt=1)
    ttft_s: PositiveFloat | None = None


class DecodeSpec(_Strict):
    """Optional measured decode constants that override the performance model (Eq. 5), and the
    engine's memory reserve per GPU that the modelled batch must leave free."""

    batch_max: PositiveInt | None = None
    step_s: PositiveFloat | None = None
    source: str | None = None
    reserve_gib_per_gpu: NonNegativeFloat = ENGINE_RESERVE_GIB_PER_GPU
    staging_memory: bool = Field(default=False, description="charge the decode memory that requests hold before "
                                 "their KV arrives (reserved when the engine profile's kv_reserve_at says) against BS_max")


class ScenarioSpec(_Strict):
    """A whole planning scenario (the YAML file)."""

    id: str
    name: str
    description: str | None = None
    model: str
    engine_profile: str = Field(default=DEFAULT_ENGINE_PROFILE, description="serving-engine profile both pools run "
                                "(an engine_db id or a YAML path): kernel tables, host overheads, chunked prefill")
    gemm_dtypes: dict[str, str | int] = Field(default_factory=dict, description="GEMM dtypes overriding the "
                                              "checkpoint's, e.g. {experts: bf16} (ModelSpec.with_gemm_dtypes)")
    moe_routing: MoeRouting | None = Field(default=None, description="token routing the fused-MoE kernel times are "
                                           "read at, e.g. power_law_1.01 (null: the model's, balanced; "
                                           "ModelSpec.with_moe_routing)")
    cache: CacheSettings = CacheSettings()
    prfaas: PoolSpec
    local: PoolSpec
    baseline_gpus: int | None = Field(default=None, ge=0, le=2 * MAX_POOL_GPUS, description="homogeneous-PD GPUs of the local type (default: both pools' GPU count)")
    link: LinkSpec
    workload: WorkloadSpec = WorkloadSpec()
    slo: SloSpec = SloSpec()
    decode: DecodeSpec = DecodeSpec()
    load: float = Field(default=0.8, gt=0, lt=1, description="fraction of the maximum rate at which TTFT is reported")
    assumptions: list[str] = []

    @model_serializer(mode="wrap")
    def _dump(self, handler):
        # an unset moe_routing is left out, so a scenario that does not set it dumps as before the field
        data = handler(self)
        if self.moe_routing is None and isinstance(data, dict):
            data.pop("moe_routing", None)
        return data

    @model_validator(mode="after")
    def _buffer_remote_only(self) -> ScenarioSpec:
        if self.local.transfer_buffer_gib is not None:
            raise ValueError("local.transfer_buffer_gib: only the PrfaaS pool ships KV over the link; set it under prfaas")
        return self


@dataclass(frozen=True)
class Scenario:
    """A loaded scenario: the spec plus its resolved model and instances."""

    spec: ScenarioSpec
    origin: str
    extra_model_dirs: tuple[Path, ...] = ()

    @cached_property
    def model(self) -> ModelSpec:
        model = load_model(self.spec.model, self.extra_model_dirs)
        model = model.with_gemm_dtypes(**self.spec.gemm_dtypes) if self.spec.gemm_dtypes else model
        return model.with_moe_routing(self.spec.moe_routing) if self.spec.moe_routing else model

    @cached_property
    def engine(self) -> EngineProfile:
        """The serving-engine profile both pools run."""
        return load_engine(self.spec.engine_profile)

    def _instance(self, pool: PoolSpec, name: str) -> Instance:
        """A pool's instance; a layout the model cannot take is an InvalidInput naming ``name.layout``."""
        try:
            layout = pool.layout.to_layout(pool.gpus_per_instance, self.model)
        except InvalidInput as exc:
            raise InvalidInput(f"{name}.{exc}") from None
        if layout is not None:
            check_layout(self.model, layout, f"{name}.layout")
        return instance(pool.gpu, pool.gpus_per_instance, layout=layout, engine=self.engine)

    @cached_property
    def prfaas_instance(self) -> Instance:
        return self._instance(self.spec.prfaas, "prfaas")

    @cached_property
    def local_instance(self) -> Instance:
        return self._instance(self.spec.local, "local")

    @property
    def cache(self) -> CacheSettings:
        return self.spec.cache

    @property
    def prfaas_profile(self) -> MeasuredProfile | None:
        p = self.spec.prfaas.profile
        return p.to_profile() if p else None

    @property
    def local_profile(self) -> MeasuredProfile | None:
        p = self.spec.local.profile
        return p.to_profile() if p else None

    @property
    def baseline_instances(self) -> int:
        gpus = self.spec.baseline_gpus
        if gpus is None:
            gpus = self.spec.prfaas.gpus + self.spec.local.gpus
        return gpus // self.spec.local.gpus_per_instance

    def with_updates(self, **changes) -> Scenario:
        """A copy with top-level or dotted fields replaced (``{"link.gbps": 20}``), re-validated."""
        data = self.spec.model_dump()
        for key, value in changes.items():
            node = data
            parts = key.split(".")
            for part in parts[:-1]:
                if not isinstance(node.get(part), dict):
                    raise InvalidInput(f"{key}: no such scenario field")
                node = node[part]
            if parts[-1] not in node and key not in ScenarioSpec.model_fields:  # (unset fields are not dumped)
                raise InvalidInput(f"{key}: no such scenario field")
            node[parts[-1]] = value
        return Scenario(validate(ScenarioSpec, data, f"{self.origin} (with {', '.join(changes)})"),
                        self.origin, self.extra_model_dirs)


    def with_trace(self, trace: str | Path, prefix_cache_blocks: int | None = None) -> Scenario:
        """A copy whose workload is ``trace``: its uncached input lengths and its own output
        lengths (the trace's mean sets L_out), with an LRU prefix cache of ``prefix_cache_blocks``
        512-token blocks (None = unlimited, 0 = off). ``plan``, ``simulate`` and ``report`` all
        build trace scenarios here, so that one trace gives one plan everywhere."""
        return self.with_updates(**{"workload.kind": "trace", "workload.trace": str(trace),
                                    "workload.output_tokens": None,
                                    "workload.prefix_cache_blocks": prefix_cache_blocks})

    @classmethod
    def quick(cls, model: str, prfaas: tuple[str, int], local: tuple[str, int], link_gbps: float,
              trace: str | Path | None = None, prefix_cache_blocks: int | None = None) -> Scenario:
        """A scenario without a file: ``model`` (an id or path), the PrfaaS and local pools as
        (GPU id, GPU count), a link of ``link_gbps`` Gbps, every other field its default; with a
        ``trace``, its workload as :meth:`with_trace` makes it. Validated as a file would be."""
        data = {"id": "quick", "name": f"{model} quick plan", "model": model,
                "prfaas": {"gpu": prfaas[0], "gpus": prfaas[1]}, "local": {"gpu": local[0], "gpus": local[1]},
                "link": {"gbps": link_gbps}}
        sc = cls(validate(ScenarioSpec, data, QUICK_ORIGIN), QUICK_ORIGIN)
        return sc.with_trace(trace, prefix_cache_blocks) if trace is not None else sc

    @property
    def origin_label(self) -> str:
        """Where the scenario came from, for reports: ``built-in`` for the package's own
        scenarios (so that a report does not depend on where the package is installed), else
        the path as given."""
        if self.origin != QUICK_ORIGIN and Path(self.origin).parent == builtin_dir("prfaas_plan.data.scenarios"):
            return "built-in"
        return self.origin

    @property
    def output_tokens_source(self) -> str:
        """Where the mean output length L_out comes from, for reports and the CLI."""
        w = self.spec.workload
        if w.kind == "trace" and w.output_tokens is None:
            return "the trace's mean output length"
        return "workload.output_tokens"


def load_scenario(ref: str | Path, extra_model_dirs: tuple[Path, ...] = ()) -> Scenario:
    """Load a built-in scenario by id (``paper-case-study``) or a YAML path."""
    path = find_entry(ref, "prfaas_plan.data.scenarios", "scenario")
    spec = validate(ScenarioSpec, read_yaml(path), str(path))
    sc = Scenario(spec, str(path), tuple(Path(d) for d in extra_model_dirs))
    _ = sc.model, sc.engine, sc.prfaas_instance, sc.local_instance  # resolved now: an unknown model or GPU is reported here
    return sc


def resolve_trace(sc: Scenario, ref: str) -> Path:
    """A trace path as given (relative to the working directory), else next to the scenario file."""
    path = Path(ref)
    if not is_file(path) and not path.is_absolute():
        beside = Path(sc.origin).parent / ref
        if is_file(beside):
            return beside
    if not is_file(path):
        problem = "is a folder" if is_dir(path) else "not found"
        raise InvalidInput(f"workload.trace: {shown(ref)} {problem}; give a path to a Mooncake JSONL, Azure CSV or CSV trace")
    return path


@dataclass(frozen=True)
class ResolvedWorkload:
    """A scenario's workload: ``workload`` (uncached lengths with one shared prefix cache),
    the mean *total* input length in tokens (cached prefix included; it sets the decode
    context), and for trace workloads with prefix caching the trace itself, the cache size, and
    the trace prepared for replays (the one the workload was replayed on), so that the planner
    can replay one cache per cluster."""

    workload: object  # workload.Workload
    mean_input_tokens: float
    trace: object | None = None  # workload.traces.Trace (numpy columns)
    cache_blocks: int | None = 0
    blocks: object | None = None  # workload.TraceBlocks of ``trace``


def build_workload(sc: Scenario) -> ResolvedWorkload:
    """Resolve the scenario's workload section (see :class:`ResolvedWorkload`)."""
    from prfaas_plan.workload import TraceBlocks, TruncatedLogNormal, Workload, workload_from_trace
    from prfaas_plan.workload.traces import read_trace

    w = sc.spec.workload
    if w.kind == "lognormal":
        lengths = TruncatedLogNormal(w.mu, w.sigma, w.min_tokens, w.max_tokens)
        return ResolvedWorkload(Workload(lengths, float(w.output_tokens or 0.0), None, sc.spec.id),
                                float(lengths.mean_tokens()))
    trace = read_trace(resolve_trace(sc, w.trace), w.trace_format)
    if "hash_ids" not in trace.columns and w.prefix_cache_blocks != 0:
        raise InvalidInput("workload.prefix_cache_blocks: this trace has no hash_ids; set prefix_cache_blocks: 0")
    blocks = TraceBlocks(trace)
    wl = workload_from_trace(blocks, w.prefix_cache_blocks)
    if w.output_tokens is not None:
        wl = Workload(wl.lengths, float(w.output_tokens), wl.rate_rps, wl.name)
    return ResolvedWorkload(wl, float(trace["input_tokens"].mean()), trace, w.prefix_cache_blocks, blocks)
