"""Serving-engine profiles: what belongs to a serving stack, not to a GPU.

A GPU's kernel speeds come from measured kernel tables (:mod:`prfaas_plan.perf.kernels`); what the
engine adds around them lives here, as named profiles with sources (``data/engine_db/*.yaml``):
which kernel tables it runs (``kernel_engine``, at the collected version nearest its
``kernel_version``), host time per request and per step, the elementwise passes its unfused
kernels make per layer, its chunked-prefill size and whether decode runs in CUDA graphs. (Whose
cache conventions apply, the state dtypes, is a scenario's ``cache.engine``.)

Profiles are frozen pydantic models; times are seconds, sizes tokens.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from prfaas_plan.data import find_entry, list_entries, read_yaml, validate
from prfaas_plan.defaults import DEFAULT_ENGINE_PROFILE
from prfaas_plan.model.arch import Source

KernelEngine = Literal["sglang", "vllm", "trtllm"]
"""Whose measured kernels a profile runs (the engine folders of the kernel tables)."""

KvReserveAt = Literal["prefill_start", "transfer_start", "arrival"]
"""When a disaggregated decode instance reserves a request's KV memory: when its prefill starts
(SGLang pre-allocates while prefill runs), when its transfer starts (vLLM's NIXL connector), or
only once the bytes have arrived."""

PACKAGE = "prfaas_plan.data.engine_db"


class EngineProfile(BaseModel):
    """One serving engine's run-time costs around the kernels.

    request_overhead_s: host time per request on the prefill path (HTTP, tokenisation,
    scheduling, sampling and detokenising the first token), charged once per prefill.
    step_overhead_s: host time per engine step not hidden behind the GPU (scheduling, sampling).
    layer_launch_s: launch and dispatch time per layer where kernels run eagerly (prefill);
    decode steps in CUDA graphs pay ``graph_layer_launch_s`` instead.
    elementwise_passes: reads+writes of one ``tokens x hidden`` bf16 activation per layer by the
    kernels the tables do not measure (norms, residual adds, RoPE, activation, quantisation).
    chunked_prefill_tokens: the most prompt tokens one step takes; longer prompts run in chunks.
    kv_reserve_at: when a disaggregated decode instance reserves a request's KV memory
    (:data:`KvReserveAt`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    id: str
    name: str
    kernel_engine: KernelEngine
    kernel_version: str = Field(pattern=r"^\d+(\.\d+)*(\.?post\d+)?$",
                                description="the engine version the profile models; per kernel family the tables "
                                            "of the nearest collected version are used (perf.kernels.pick_table)")
    request_overhead_s: float = Field(ge=0, le=10)
    step_overhead_s: float = Field(ge=0, le=1)
    layer_launch_s: float = Field(ge=0, le=0.01)
    graph_layer_launch_s: float = Field(ge=0, le=0.01)
    elementwise_passes: float = Field(ge=0, le=100)
    chunked_prefill_tokens: PositiveInt
    cuda_graphs: bool = True
    kv_reserve_at: KvReserveAt
    provenance: str = Field(min_length=1, description="where the numbers come from, and what was fitted to what")
    sources: list[Source] = Field(min_length=1)
    notes: str | None = None

    def layer_launch_s_for(self, phase: str) -> float:
        """Launch time per layer in ``phase`` (``"prefill"`` eager, ``"decode"`` in graphs if enabled)."""
        return self.graph_layer_launch_s if phase == "decode" and self.cuda_graphs else self.layer_launch_s


@lru_cache(maxsize=1)
def default_engine() -> EngineProfile:
    """The bundled :data:`DEFAULT_ENGINE_PROFILE`, read once (read-only package data)."""
    return load_engine(DEFAULT_ENGINE_PROFILE)


def load_engine(ref: str | Path | EngineProfile, extra_dirs: tuple[Path, ...] = ()) -> EngineProfile:
    """An engine profile by ``engine_db`` id or YAML path (a profile is returned as is)."""
    if isinstance(ref, EngineProfile):
        return ref
    path = find_entry(ref, PACKAGE, "engine profile", tuple(Path(d) for d in extra_dirs))
    return validate(EngineProfile, read_yaml(path), str(path))


def list_engines(extra_dirs: tuple[Path, ...] = ()) -> list[EngineProfile]:
    """Every bundled (and user) engine profile, by id."""
    return [load_engine(p) for p in list_entries(PACKAGE, tuple(Path(d) for d in extra_dirs))]
