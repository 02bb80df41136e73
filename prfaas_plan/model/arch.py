"""Model architectures: the validated ``model_db`` schema and what each layer kind caches.

A :class:`ModelSpec` is read from a ``model_db/*.yaml`` file (or imported from a Hugging Face
``config.json``, see :mod:`prfaas_plan.model.hf_config`). It names its attention configurations
(``attention: {full: {...}, swa: {...}}``) and says which layer uses which
(``layers: {count, default, at}``, 0-based indices). Each attention kind knows the *shape* of
what it caches, in elements: per token for length-growing caches (GQA, SWA, MLA) and per
request for fixed recurrent states (Gated DeltaNet, KDA, Lightning). Bytes, dtypes and engine
conventions live one step later, in :mod:`prfaas_plan.kvcache`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from prfaas_plan.data import find_entry, list_entries, read_yaml, validate

Dtype = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"]
StateDtype = Literal["fp32", "bf16"]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class GQA(_Frozen):
    """Full causal attention, MHA/GQA; K and V head dims may differ (MiMo: 192/128)."""

    kind: Literal["gqa"]
    num_heads: PositiveInt
    num_kv_heads: PositiveInt
    head_dim_k: PositiveInt
    head_dim_v: PositiveInt

    @property
    def kv_elements_per_token(self) -> int:
        return self.num_kv_heads * (self.head_dim_k + self.head_dim_v)


class SWA(_Frozen):
    """Sliding-window attention: GQA that keeps only the last ``window_tokens`` tokens (its own
    head counts and dims, which may differ from the model's full-attention layers)."""

    kind: Literal["swa"]
    num_heads: PositiveInt
    num_kv_heads: PositiveInt
    head_dim_k: PositiveInt
    head_dim_v: PositiveInt
    window_tokens: PositiveInt

    kv_elements_per_token = GQA.kv_elements_per_token


class MLA(_Frozen):
    """Multi-head latent attention (DeepSeek-V3, Kimi): caches the compressed latent plus the
    decoupled RoPE key, ``kv_lora_rank + qk_rope_head_dim`` elements per token, whatever the
    head count."""

    kind: Literal["mla"]
    num_heads: PositiveInt
    kv_lora_rank: PositiveInt
    q_lora_rank: PositiveInt | None = None
    qk_nope_head_dim: PositiveInt
    qk_rope_head_dim: PositiveInt
    v_head_dim: PositiveInt

    @property
    def kv_elements_per_token(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim


class GDN(_Frozen):
    """Gated DeltaNet (Qwen3-Next, Qwen3.5): fixed conv + recurrent state per request.

    ``ssm_dtype`` is the checkpoint's ``mamba_ssm_dtype`` when it states one (vLLM and SGLang
    both honour it for the recurrent state)."""

    kind: Literal["gdn"]
    num_qk_heads: PositiveInt
    num_v_heads: PositiveInt
    head_dim_k: PositiveInt
    head_dim_v: PositiveInt
    conv_kernel: PositiveInt
    ssm_dtype: StateDtype | None = None

    @property
    def conv_channels(self) -> int:
        """Channels of the short convolution over q, k and v (count)."""
        return 2 * self.num_qk_heads * self.head_dim_k + self.num_v_heads * self.head_dim_v

    @property
    def conv_elements(self) -> int:
        """Conv state elements as vLLM and SGLang keep it: the last ``conv_kernel - 1`` inputs."""
        return (self.conv_kernel - 1) * self.conv_channels

    @property
    def recurrent_elements(self) -> int:
        return self.num_v_heads * self.head_dim_k * self.head_dim_v


class KDA(_Frozen):
    """Kimi Delta Attention (Kimi Linear): separate q/k/v short convs plus a d x d state per head."""

    kind: Literal["kda"]
    num_heads: PositiveInt
    head_dim: PositiveInt
    num_k_heads: PositiveInt | None = None  # defaults to num_heads
    head_dim_k: PositiveInt | None = None  # defaults to head_dim
    conv_kernel: PositiveInt

    @property
    def conv_channels(self) -> int:
        """Channels of the q, k and v short convolutions together (count)."""
        n_k = self.num_k_heads or self.num_heads
        d_k = self.head_dim_k or self.head_dim
        return self.num_heads * self.head_dim + 2 * n_k * d_k

    @property
    def conv_elements(self) -> int:
        """Conv state elements as vLLM and SGLang keep it: the last ``conv_kernel - 1`` inputs."""
        return (self.conv_kernel - 1) * self.conv_channels

    @property
    def recurrent_elements(self) -> int:
        return self.num_heads * self.head_dim * self.head_dim


class Lightning(_Frozen):
    """Lightning / SimpleGLA linear attention (Ring-2.5, Ling-2.5): d x d state per head, no conv."""

    kind: Literal["lightning"]
    num_heads: PositiveInt
    head_dim: PositiveInt

    conv_elements: ClassVar[int] = 0  # no short convolution in Lightning layers
    conv_channels: ClassVar[int] = 0

    @property
    def recurrent_elements(self) -> int:
        return self.num_heads * self.head_dim * self.head_dim


Attention = Annotated[Union[GQA, SWA, MLA, GDN, KDA, Lightning], Field(discriminator="kind")]
GROWING_KINDS = ("gqa", "swa", "mla")
LINEAR_KINDS = ("gdn", "kda", "lightning")


class Layers(_Frozen):
    """Which attention config each layer uses: ``default`` everywhere except the 0-based
    indices listed under ``at``."""

    count: PositiveInt
    default: str
    at: dict[str, list[int]] = {}


class FFN(_Frozen):
    """Feed-forward blocks. Dense models set only ``dense_intermediate``; MoE models give the
    expert sizes, and their first ``first_dense_layers`` layers use the dense FFN."""

    dense_intermediate: PositiveInt | None = None
    num_experts: int = Field(default=0, ge=0)
    experts_per_token: int = Field(default=0, ge=0)
    expert_intermediate: int = Field(default=0, ge=0)
    num_shared_experts: int = Field(default=0, ge=0)
    shared_intermediate: int = Field(default=0, ge=0)
    first_dense_layers: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> FFN:
        if self.num_experts == 0 and self.dense_intermediate is None:
            raise ValueError("a dense model needs dense_intermediate")
        if self.num_experts and not (0 < self.experts_per_token <= self.num_experts):
            raise ValueError("experts_per_token must be between 1 and num_experts")
        if self.num_experts and self.expert_intermediate <= 0:
            raise ValueError("expert_intermediate must be positive for an MoE model")
        if self.first_dense_layers and self.dense_intermediate is None:
            raise ValueError("first_dense_layers needs dense_intermediate")
        return self


class ContextExtension(_Frozen):
    """How ``max_context_tokens`` reaches past the pre-trained context: RoPE scaling (YaRN)
    by ``factor`` over ``original_tokens``, as a config's ``rope_scaling`` states it."""

    method: Literal["yarn"]
    factor: float = Field(gt=1)
    original_tokens: PositiveInt

    @property
    def extended_tokens(self) -> int:
        """Context the scaling reaches, ``factor * original_tokens`` (tokens)."""
        return int(self.factor * self.original_tokens)

    def describe(self) -> str:
        """``"YaRN x4 over 32,768 tokens"``."""
        return f"{'YaRN' if self.method == 'yarn' else self.method} x{self.factor:g} over {self.original_tokens:,} tokens"


class Source(_Frozen):
    """Where values come from: a URL and the top-level fields it covers."""

    url: str = Field(pattern=r"^https?://")
    covers: list[str] = Field(min_length=1)
    note: str | None = None


class ModelSpec(_Frozen):
    """One model's architecture, as the cache and performance models need it."""

    id: str
    name: str
    family: str
    total_params: float = Field(gt=0, description="all parameters (count)")
    active_params: float = Field(gt=0, description="parameters used per token (count)")
    weight_dtype: Dtype = Field(description="dtype of the routed-expert weights (of all weights in a dense model)")
    dense_weight_dtype: Dtype | None = Field(
        default=None, description="dtype of every other weight (attention, dense FFN, shared experts, embeddings); "
        "default weight_dtype. INT4 QAT checkpoints such as Kimi-K2-Thinking keep these in bf16")
    weight_group_size: PositiveInt | None = Field(
        default=None, description="weights per bf16 scale when weight_dtype is group-quantised (int4 g32: +0.5 bit)")
    activation_dtype: Dtype = "bf16"
    max_context_tokens: PositiveInt = Field(description="longest usable context (tokens), RoPE-scaled when "
                                            "context_extension is set")
    context_extension: ContextExtension | None = Field(
        default=None, description="RoPE scaling (YaRN) that max_context_tokens relies on beyond the pre-trained context")
    hidden_size: PositiveInt
    vocab_size: PositiveInt
    attention: dict[str, Attention]
    layers: Layers
    ffn: FFN
    sources: list[Source] = Field(min_length=1)
    notes: str | None = None

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        names = set(self.attention)
        if self.layers.default not in names:
            raise ValueError(f"layers.default {self.layers.default!r} is not one of attention: {sorted(names)}")
        seen: set[int] = set()
        for name, idx in self.layers.at.items():
            if name not in names:
                raise ValueError(f"layers.at names {name!r}, which is not one of attention: {sorted(names)}")
            for i in idx:
                if not 0 <= i < self.layers.count or i in seen:
                    raise ValueError(f"layers.at.{name}: index {i} is out of range or repeated")
                seen.add(i)
        if self.active_params > self.total_params:
            raise ValueError("active_params exceeds total_params")
        ext = self.context_extension
        if ext and not ext.original_tokens < self.max_context_tokens <= ext.extended_tokens:
            raise ValueError(f"max_context_tokens {self.max_context_tokens:,} must lie above context_extension's "
                             f"original_tokens and within its {ext.extended_tokens:,} tokens ({ext.describe()})")
        covered = {field for src in self.sources for field in src.covers}
        needed = {"total_params", "active_params", "layers", "attention", "ffn", "hidden_size",
                  "vocab_size", "max_context_tokens", "weight_dtype"} | ({"context_extension"} if ext else set())
        missing = sorted(needed - covered)
        if missing:
            raise ValueError(f"no source covers {', '.join(missing)}; add a sources entry with its URL")
        return self

    @property
    def layer_kinds(self) -> tuple[str, ...]:
        """Name of the attention config of every layer, in order (derived on each call, so that
        ``model_copy(update=...)`` never carries a stale pattern)."""
        kinds = [self.layers.default] * self.layers.count
        for name, idx in self.layers.at.items():
            for i in idx:
                kinds[i] = name
        return tuple(kinds)

    def context_note(self, tokens: int) -> str | None:
        """What a context of ``tokens`` tokens relies on beyond the pre-trained context
        (``"YaRN x4 over 32,768 tokens"``), or None when it needs no RoPE scaling."""
        ext = self.context_extension
        return ext.describe() if ext and tokens > ext.original_tokens else None

    def layer_counts(self) -> dict[str, int]:
        """How many layers use each named attention config."""
        kinds = self.layer_kinds
        return {name: kinds.count(name) for name in self.attention}

    def _display_rows(self) -> list[tuple[str, object, str]]:
        mix = ", ".join(f"{self.attention[k].kind} {n}" for k, n in self.layer_counts().items() if n)
        return [("layers", f"{self.layers.count} ({mix})", ""), ("total parameters", self.total_params / 1e9, "B"),
                ("active parameters", self.active_params / 1e9, "B"), ("weights", self.weight_dtype, "dtype"),
                ("KV cache per token", self.kv_bytes_per_token(), "bytes (bf16, vLLM)"),
                ("fixed state per request", self.fixed_state_bytes(), "bytes"),
                ("max context", self.max_context_tokens,
                 f"tokens ({self.context_extension.describe()})" if self.context_extension else "tokens")]

    def __repr__(self) -> str:
        return (f"ModelSpec({self.id!r}: {self.layers.count} layers, {self.total_params / 1e9:,.1f} B params, "
                f"{self.kv_bytes_per_token():,} B/token + {self.fixed_state_bytes():,} B/request)")

    def _repr_html_(self) -> str:
        from prfaas_plan.display import html_table

        return html_table(f"{self.name} ({self.id})", self._display_rows())

    def is_moe_layer(self, index: int) -> bool:
        return self.ffn.num_experts > 0 and index >= self.ffn.first_dense_layers

    # Convenience API of docs/design.md section 7; the arithmetic lives in kvcache (imported lazily
    # so that this lower module does not depend on a higher one at import time).
    def kv_bytes_per_token(self, settings=None) -> int:
        """Bytes of length-growing cache per token, all layers (default: bf16 KV, vLLM)."""
        from prfaas_plan.kvcache import kv_bytes_per_token

        return kv_bytes_per_token(self, settings)

    def fixed_state_bytes(self, settings=None) -> int:
        """Per-request bytes that do not grow with length (linear-attention states)."""
        from prfaas_plan.kvcache import fixed_state_bytes

        return fixed_state_bytes(self, settings)

    def kv_bytes(self, tokens: int, settings=None) -> int:
        """One request's cache bytes at ``tokens`` tokens (windows capped, states included)."""
        from prfaas_plan.kvcache import kv_bytes

        return int(kv_bytes(self, tokens, settings))


def load_model(ref: str | Path, extra_dirs: tuple[Path, ...] = ()) -> ModelSpec:
    """Load a model by ``model_db`` id, a YAML path, or a Hugging Face ``config.json`` path."""
    path = find_entry(ref, "prfaas_plan.data.model_db", "model", tuple(Path(d) for d in extra_dirs))
    if path.suffix == ".json":
        from prfaas_plan.model.hf_config import load_hf_config

        return load_hf_config(path)
    return validate(ModelSpec, read_yaml(path), str(path))


def list_model_specs(extra_dirs: tuple[Path, ...] = ()) -> list[ModelSpec]:
    return [load_model(p) for p in list_entries("prfaas_plan.data.model_db", tuple(Path(d) for d in extra_dirs))]
