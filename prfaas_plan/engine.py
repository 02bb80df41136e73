"""Serving-engine profiles: what belongs to a serving stack, not to a GPU.

A GPU's kernel speeds come from measured kernel tables (:mod:`prfaas_plan.perf.kernels`); what the
engine adds around them lives here, as named profiles with sources (``data/engine_db/*.yaml``):
which kernel tables it runs (``kernel_engine``, at the collected version nearest its
``kernel_version``), host time per request and per step, the elementwise passes its unfused
kernels make per layer, its chunked-prefill size, whether decode runs in CUDA graphs, and
whether it runs speculative decoding (``speculative``: off in every bundled profile). (Whose
cache conventions apply, the state dtypes, is a scenario's ``cache.engine``.)

Profiles are frozen pydantic models; times are seconds, sizes tokens.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from prfaas_plan.data import find_entry, read_yaml, validate
from prfaas_plan.defaults import DEFAULT_ENGINE_PROFILE
from prfaas_plan.model.arch import Source
from prfaas_plan.vocab import MoeKernel

if TYPE_CHECKING:
    from prfaas_plan.hardware import GPU

KernelEngine = Literal["sglang", "vllm", "trtllm"]
"""Whose measured kernels a profile runs (the engine folders of the kernel tables)."""

KvReserveAt = Literal["prefill_start", "transfer_start", "arrival"]
"""When a disaggregated decode instance reserves a request's KV memory: when its prefill starts
(SGLang pre-allocates while prefill runs), when its transfer starts (vLLM's NIXL connector), or
only once the bytes have arrived."""

PACKAGE = "prfaas_plan.data.engine_db"


def mean_accepted_tokens(acceptance_rates) -> float:
    """Mean tokens a request gains per verify step when draft position ``i`` is accepted with
    probability ``r_i`` given the earlier ones were: ``1 + sum_i prod_{j<=i} r_j`` (the bonus
    token included)."""
    import numpy as np  # here, not at import: the kv command loads engine profiles without numpy

    return float(1.0 + np.cumprod(np.asarray(acceptance_rates, dtype=float)).sum())


class Speculative(BaseModel):
    """Speculative decoding as an engine runs it: ``method`` (``mtp``: the model's own MTP
    modules draft), ``draft_tokens`` (k) drafted per step, and either the mean tokens a request
    gains per verify step (``accepted_per_step``, in ``[1, k + 1]``, the bonus token included) or
    the acceptance rate of each draft position given the earlier ones were accepted
    (``acceptance_rates``, k values in ``[0, 1]``). A verify step processes ``k + 1`` tokens per
    request and each request holds ``k`` more KV slots."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    method: Literal["mtp"] = "mtp"
    draft_tokens: int = Field(strict=True, ge=0)
    accepted_per_step: float | None = Field(default=None, ge=1)
    acceptance_rates: tuple[float, ...] | None = None

    @model_validator(mode="after")
    def _check(self) -> Speculative:
        # each message starts with the field it is about: serving.SpecDecode names it so
        k = self.draft_tokens
        if (self.accepted_per_step is None) == (self.acceptance_rates is None):
            raise ValueError("accepted_per_step: give exactly one of accepted_per_step or acceptance_rates")
        if self.accepted_per_step is not None and self.accepted_per_step > k + 1:
            raise ValueError(f"accepted_per_step: must lie in [1, k+1] = [1, {k + 1}] tokens per step, "
                             f"got {self.accepted_per_step}")
        rates = self.acceptance_rates
        if rates is not None and (len(rates) != k or any(not 0.0 <= r <= 1.0 for r in rates)):
            raise ValueError(f"acceptance_rates: give {k} rates in [0, 1], one per draft token, got {rates}")
        return self

    @property
    def accepted_tokens(self) -> float:
        """Mean tokens a request gains per verify step (:func:`mean_accepted_tokens`)."""
        if self.accepted_per_step is not None:
            return float(self.accepted_per_step)
        return mean_accepted_tokens(self.acceptance_rates)


class GpuTier(BaseModel):
    """An engine default that depends on the GPU: ``chunked_prefill_tokens`` on GPUs of at least
    ``min_memory_gib`` (the hardware entry's ``memory_gib``) whose ``arch`` is not in ``except_arch``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_memory_gib: float = Field(ge=0)
    chunked_prefill_tokens: PositiveInt
    except_arch: tuple[str, ...] = ()


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
    chunked_prefill_by_gpu: the engine's GPU-dependent default of that budget (:class:`GpuTier`,
    the first that holds applies; none: ``chunked_prefill_tokens``), read by
    :meth:`chunked_prefill_tokens_on`.
    kv_reserve_at: when a disaggregated decode instance reserves a request's KV memory
    (:data:`KvReserveAt`).
    dp_attention_divides_budget: under attention data parallelism the engine divides the step
    budget among the DP ranks (SGLang: each rank takes ``budget // dp`` tokens a step); False: each
    rank keeps the whole budget (vLLM: every DP rank is an engine core with its own scheduler).
    mixed_prefill: whether a step carries prompt chunks beside the running decodes (vLLM V1:
    decodes first, prompts fill the budget they leave); False: a step either prefills or decodes,
    prefill first while prompts wait (SGLang without ``--enable-mixed-chunk``), so a burst of
    prompts is prefilled before any of them decodes.
    max_running_requests: the most requests the engine runs at once (SGLang
    ``--max-running-requests``); None: as many as the KV cache holds. More clients wait in its queue.
    max_prefill_tokens: prompt tokens a step admits whole prompts within (SGLang
    ``--max-prefill-tokens``, default 16,384): a waiting prompt joins a step that already carries
    one only while its tokens fit this, less the step's decode tokens and the prompt tokens it
    took; the first prompt always joins, chunked at the step budget (:meth:`prompt_room_tokens`).
    None: no such limit, prompts fill the budget and the last is split (vLLM).
    recv_interval_steps: the scheduler takes in newly arrived requests once every this many decode
    steps, and at once after a prompt step or when idle (SGLang ``--scheduler-recv-interval``,
    default 1: every step).
    speculative: speculative decoding (:class:`Speculative`), or None (off); a profile that sets
    it names its acceptance's source (a ``sources`` entry covering ``speculative``).
    static_memory_fraction: the share of each GPU's memory the weights and the KV pool take
    together, activations and CUDA graphs living outside it (SGLang ``--mem-fraction-static`` as a
    launch sets it); None: vLLM's accounting, ``gpu_memory_utilization`` 0.9 with the engine's
    reserve inside (:func:`~prfaas_plan.perf.latency.free_cache_bytes_per_gpu`).
    mxfp4_moe_kernel: the fused-MoE kernel of MXFP4 (W4A16) experts (:data:`~prfaas_plan.vocab.MoeKernel`):
    the engine's default (vLLM on Hopper: OpenAI's triton_kernels), or ``marlin`` where a launch
    switches it on (vLLM ``VLLM_MXFP4_USE_MARLIN=1``).
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
    chunked_prefill_by_gpu: tuple[GpuTier, ...] = ()
    cuda_graphs: bool = True
    kv_reserve_at: KvReserveAt
    dp_attention_divides_budget: bool = False
    mixed_prefill: bool = True
    max_running_requests: PositiveInt | None = None
    max_prefill_tokens: PositiveInt | None = None
    recv_interval_steps: PositiveInt = 1
    speculative: Speculative | None = None
    static_memory_fraction: float | None = Field(default=None, gt=0, le=1)
    mxfp4_moe_kernel: MoeKernel = "default"
    provenance: str = Field(min_length=1, description="where the numbers come from, and what was fitted to what")
    sources: list[Source] = Field(min_length=1)
    notes: str | None = None

    @model_validator(mode="after")
    def _speculative_has_a_source(self) -> EngineProfile:
        if self.speculative is not None and not any("speculative" in s.covers for s in self.sources):
            raise ValueError("speculative: add a sources entry covering speculative (where the acceptance comes from)")
        return self

    def with_speculative(self, speculative: Speculative | None) -> EngineProfile:
        """This profile with speculative decoding set (None: off), e.g. from an API argument."""
        return self.model_copy(update={"speculative": speculative})

    def chunked_prefill_tokens_on(self, gpu: GPU) -> int:
        """Tokens per step on ``gpu``: the first :attr:`chunked_prefill_by_gpu` tier it meets, else
        :attr:`chunked_prefill_tokens`."""
        for tier in self.chunked_prefill_by_gpu:
            if gpu.memory_gib >= tier.min_memory_gib and gpu.arch not in tier.except_arch:
                return tier.chunked_prefill_tokens
        return self.chunked_prefill_tokens

    def rank_prefill_tokens_on(self, gpu: GPU, attn_dp: int) -> int:
        """Prompt tokens one attention-DP rank takes a step (:attr:`dp_attention_divides_budget`)."""
        budget = self.chunked_prefill_tokens_on(gpu)
        return max(budget // attn_dp, 1) if self.dp_attention_divides_budget else budget

    def with_launch(self, max_running_requests: int | None = None, recv_interval_steps: int | None = None,
                    static_memory_fraction: float | None = None, mixed_prefill: bool | None = None,
                    max_prefill_tokens: int | None = None) -> EngineProfile:
        """This profile with the launch flags a run set (None: the profile's own)."""
        update = {k: v for k, v in (("max_running_requests", max_running_requests),
                                    ("recv_interval_steps", recv_interval_steps),
                                    ("static_memory_fraction", static_memory_fraction),
                                    ("mixed_prefill", mixed_prefill),
                                    ("max_prefill_tokens", max_prefill_tokens)) if v is not None}
        return self.model_copy(update=update) if update else self

    def with_chunked_prefill(self, tokens: int) -> EngineProfile:
        """This profile with one token budget on every GPU (a launch flag that sets it)."""
        return self.model_copy(update={"chunked_prefill_tokens": tokens, "chunked_prefill_by_gpu": ()})

    def prompt_room_tokens(self, budget_tokens: int, prompt_tokens: int, decode_tokens: float) -> float:
        """Prompt tokens one step takes while prompts of ``prompt_tokens`` each wait, beside
        ``decode_tokens`` decode tokens, with a step budget of ``budget_tokens`` (the instance's
        ``chunked_prefill_tokens``): the budget the decodes leave; under :attr:`max_prefill_tokens`
        only the whole prompts that fit it less the decode tokens, at least one (chunked at the
        budget), as SGLang's ``PrefillAdder`` admits them (``rem_input_tokens`` and
        ``rem_chunk_tokens``, both less the decodes). At least 1."""
        room = budget_tokens - decode_tokens
        if self.max_prefill_tokens is not None:
            whole = max(math.floor((self.max_prefill_tokens - decode_tokens) / prompt_tokens), 1)
            room = min(room, whole * prompt_tokens)
        return max(room, 1.0)

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

