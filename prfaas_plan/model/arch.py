"""Model architectures: the validated ``model_db`` schema, and the one parameter count.

A :class:`ModelSpec` is read from a ``model_db/*.yaml`` file (or imported from a Hugging Face
``config.json``, see :mod:`prfaas_plan.model.hf_config`). It names its attention configurations
(``attention: {full: {...}, swa: {...}}``, the layer kinds of :mod:`prfaas_plan.model.kinds`) and
says which layer uses which (``layers: {count, default, at}``, 0-based indices).
:meth:`ModelSpec.param_counts` sums the kinds' weights over the layers: the count that the
performance model, the Hugging Face import and the benchmark harness all use.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_serializer, model_validator

from prfaas_plan.data import find_entry, list_entries, read_yaml, validate
from prfaas_plan.errors import InvalidInput
from prfaas_plan.model.kinds import FFN, GDN, GQA, KDA, MLA, SWA, Attention, Lightning
from prfaas_plan.model.quant import GemmDtypes
from prfaas_plan.vocab import MOE_ROUTINGS, GemmClass, GemmDtype, MoeRouting, check_choice

if TYPE_CHECKING:
    from prfaas_plan.model.cache import CacheSettings


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Layers(_Frozen):
    """Which attention config each layer uses: ``default`` everywhere except the 0-based
    indices listed under ``at``."""

    count: PositiveInt
    default: str
    at: dict[str, list[int]] = {}


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


class MTP(_Frozen):
    """Multi-token-prediction (MTP / next-n) modules: the speculative-decoding draft a checkpoint
    ships beside its main stack, loaded by an engine only when MTP is on.

    Each of the ``layers`` modules is one transformer layer of the main stack's shape: the
    attention config named ``attention`` (its KV cache grows with the request like a main
    layer's), the FFN of the stack's last layer (MoE in an MoE model), plus the input projection
    ``eh_proj`` (``2 hidden -> hidden``, unquantised) and norms. The embedding and the LM head are
    the main model's (DeepSeek-V3, arXiv 2412.19437 section 2.2: the k-th MTP module "consists of
    a shared embedding layer Emb(.), a shared output head OutHead(.), a Transformer block TRM_k(.),
    and a projection matrix M_k"; SGLang's and vLLM's MTP workers share them with the target
    model), so they are not counted again.
    """

    layers: PositiveInt = Field(description="MTP modules (one transformer layer each)")
    attention: str = Field(description="the attention config (a key of ModelSpec.attention) each MTP layer uses")


class Source(_Frozen):
    """Where values come from: a URL and the top-level fields it covers."""

    url: str = Field(pattern=r"^https?://")
    covers: list[str] = Field(min_length=1)
    note: str | None = None


_DUMPED_UNLESS_DEFAULT = {"router_dtype": "bf16", "moe_routing": "balanced"}
"""ModelSpec fields a dump carries only when they differ from these defaults."""


class ModelSpec(_Frozen):
    """One model's architecture, as the cache and performance models need it."""

    id: str
    name: str
    family: str
    total_params: float = Field(gt=0, description="all parameters (count)")
    active_params: float = Field(gt=0, description="parameters used per token (count)")
    gemm_dtypes: GemmDtypes = Field(description="dtype of each GEMM class, from the checkpoint's "
                                    "quantization_config (prfaas_plan.model.quant)")
    max_context_tokens: PositiveInt = Field(description="longest usable context (tokens), RoPE-scaled when "
                                            "context_extension is set")
    context_extension: ContextExtension | None = Field(
        default=None, description="RoPE scaling (YaRN) that max_context_tokens relies on beyond the pre-trained context")
    hidden_size: PositiveInt
    vocab_size: PositiveInt
    attention: dict[str, Attention]
    layers: Layers
    ffn: FFN
    mtp: MTP | None = Field(default=None, description="multi-token-prediction modules the checkpoint ships "
                            "(counted only when an engine runs MTP speculative decoding)")
    sources: list[Source] = Field(min_length=1)
    notes: str | None = None
    router_dtype: GemmDtype = Field(default="bf16", description="dtype the engines run the MoE router GEMM in "
                                    "(fp32 where their modeling code upcasts the hidden states and the gate)")
    moe_routing: MoeRouting = Field(default="balanced", description="token routing the fused-MoE kernel times "
                                    "are read at (prfaas_plan.vocab.MoeRouting); a calibration choice, not the checkpoint's")

    @model_serializer(mode="wrap")
    def _dump(self, handler):
        # fields at their defaults are left out of dumps, so every dump (cache keys, JSON, reports)
        # of a model that keeps them reads as before the fields existed
        data = handler(self)
        if isinstance(data, dict):
            for name, default in _DUMPED_UNLESS_DEFAULT.items():
                if getattr(self, name) == default:
                    data.pop(name, None)
        return data

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
        if self.mtp is not None and self.mtp.attention not in names:
            raise ValueError(f"mtp.attention {self.mtp.attention!r} is not one of attention: {sorted(names)}")
        covered = {field for src in self.sources for field in src.covers}
        needed = {"total_params", "active_params", "layers", "attention", "ffn", "hidden_size",
                  "vocab_size", "max_context_tokens", "gemm_dtypes"} | ({"context_extension"} if ext else set()) \
            | ({"mtp"} if self.mtp is not None else set()) | ({"router_dtype"} if self.router_dtype != "bf16" else set())
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
                ("active parameters", self.active_params / 1e9, "B"), ("GEMM dtypes", self.gemm_dtypes.describe(), ""),
                ("weights", self.weight_bytes().total_bytes / 1e9, "GB"),
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
        return self.ffn.is_moe_layer(index)

    def param_counts(self) -> ParamCounts:
        """Parameters of every part of the model, from the layer kinds' weight shapes."""
        h, f = self.hidden_size, self.ffn
        counts = self.layer_counts()  # per kind, then times its layers (not once per layer)
        moe_layers = f.moe_layer_count(self.layers.count)
        return ParamCounts(
            attention_gemm=sum(n * self.attention[k].gemm_params(h) for k, n in counts.items()),
            attention_vector=sum(n * self.attention[k].vector_params(h) for k, n in counts.items()),
            dense_ffn=(self.layers.count - moe_layers) * f.dense_params(h),
            moe_dense=moe_layers * f.moe_dense_params(h),
            router=moe_layers * f.num_experts * h, routed_expert=f.expert_params(h), moe_layers=moe_layers,
            num_experts=f.num_experts, experts_per_token=f.experts_per_token, embedding=2 * self.vocab_size * h)

    def gemm_dtype(self, cls: GemmClass) -> GemmDtype:
        """The dtype GEMM class ``cls`` runs in (``attention``, ``dense_ffn``, ``experts``, ``lm_head``)."""
        return self.gemm_dtypes.of(cls)

    def weight_bytes_per_param(self, cls: GemmClass) -> float:
        """Bytes per weight of GEMM class ``cls``, scales included (int4 g32: 0.5625 B; fp8_block
        128: 1 + 4 / 128^2 B); see :mod:`prfaas_plan.model.quant`."""
        return self.gemm_dtypes.bytes_per_param(cls)

    def with_gemm_dtypes(self, **overrides: str | int | None) -> ModelSpec:
        """This model run in other dtypes, e.g. ``with_gemm_dtypes(experts="bf16")`` (a scenario's
        override). Unknown classes or dtypes: one-line InvalidInput naming the allowed values."""
        return self.model_copy(update={"gemm_dtypes": self.gemm_dtypes.replace(**overrides)})

    def with_moe_routing(self, routing: str) -> ModelSpec:
        """This model with its fused-MoE kernels timed at ``routing`` (a MoeRouting, e.g.
        ``power_law_1.01``); an unknown value is a one-line InvalidInput naming the allowed ones."""
        check_choice(routing, MOE_ROUTINGS, "moe_routing")
        return self.model_copy(update={"moe_routing": routing})

    def weight_bytes(self) -> WeightBytes:
        """Bytes of every weight by GEMM class (scales included), all layers summed."""
        p, bpp = self.param_counts(), self.weight_bytes_per_param
        return WeightBytes(
            attention_bytes=p.attention_gemm * bpp("attention"),
            dense_ffn_bytes=(p.dense_ffn + p.moe_dense - p.router) * bpp("dense_ffn"),
            experts_bytes=p.routed * bpp("experts"), lm_head_bytes=p.lm_head * bpp("lm_head"),
            unquantised_bytes=(p.embedding - p.lm_head + p.router + p.attention_vector) * self.gemm_dtypes.unquantised_bytes_per_param,
            expert_bytes=p.routed_expert * bpp("experts"))

    def with_mtp_layers(self) -> ModelSpec:
        """This model with its MTP layers appended to the stack (indices ``count .. count + n - 1``,
        of ``mtp.attention``; FFN as the last main layer's): the model whose weights and caches an
        engine running MTP holds, less the ``eh_proj`` projections (:meth:`mtp_projection_bytes`).
        A model without MTP layers is returned as is."""
        if self.mtp is None:
            return self
        n, count, kind = self.mtp.layers, self.layers.count, self.mtp.attention
        at = {k: list(v) for k, v in self.layers.at.items()}
        if kind != self.layers.default:
            at[kind] = [*at.get(kind, []), *range(count, count + n)]
        return self.model_copy(update={"layers": Layers(count=count + n, default=self.layers.default, at=at),
                                       "mtp": None})

    def mtp_projection_bytes(self) -> float:
        """Bytes of the MTP modules' ``eh_proj`` matrices (``2h x h`` each, unquantised; 0 without
        MTP): plain replicated Linear layers in SGLang's and vLLM's MTP models, whole on every GPU."""
        n = self.mtp.layers if self.mtp is not None else 0
        return n * 2.0 * self.hidden_size * self.hidden_size * self.gemm_dtypes.unquantised_bytes_per_param

    def mtp_weight_bytes(self) -> float:
        """Bytes of the MTP modules' weights (scales included; 0 without MTP): their layers
        (:meth:`with_mtp_layers`) and ``eh_proj``; the shared embedding and LM head not again."""
        if self.mtp is None:
            return 0.0
        return (self.with_mtp_layers().weight_bytes().total_bytes - self.weight_bytes().total_bytes
                + self.mtp_projection_bytes())

    # Convenience API of docs/design.md section 7: the arithmetic lives in prfaas_plan.model.cache.
    def kv_bytes_per_token(self, settings: CacheSettings | None = None) -> int:
        """Bytes of length-growing cache per token, all layers (default: bf16 KV, vLLM)."""
        from prfaas_plan.model.cache import kv_bytes_per_token

        return kv_bytes_per_token(self, settings)

    def fixed_state_bytes(self, settings: CacheSettings | None = None) -> int:
        """Per-request bytes that do not grow with length (linear-attention states)."""
        from prfaas_plan.model.cache import fixed_state_bytes

        return fixed_state_bytes(self, settings)

    def kv_bytes(self, tokens: int, settings: CacheSettings | None = None) -> int:
        """One request's cache bytes at ``tokens`` tokens (windows capped, states included)."""
        from prfaas_plan.model.cache import kv_bytes

        return int(kv_bytes(self, tokens, settings))


@dataclass(frozen=True)
class ParamCounts:
    """Parameters (counts) of a model by part, all layers summed. Left out: norms (< 0.1%) and
    multi-token-prediction layers (an optional speculative-decoding add-on:
    :meth:`ModelSpec.mtp_weight_bytes`).

    attention_gemm / attention_vector: the attention layers' matmul weights, and their other
    parameters (short-conv filters, decay parameters). dense_ffn: the dense FFN layers.
    moe_dense: shared experts and routers of the MoE layers; router: the routers' part of it.
    routed_expert: one routed expert. embedding: the input embedding and the LM head (untied).
    """

    attention_gemm: int
    attention_vector: int
    dense_ffn: int
    moe_dense: int
    router: int
    routed_expert: int
    moe_layers: int
    num_experts: int
    experts_per_token: int
    embedding: int

    @property
    def lm_head(self) -> int:
        """The LM head, half of ``embedding`` (embeddings are untied in every model of the schema)."""
        return self.embedding // 2

    @property
    def routed(self) -> int:
        """Every routed expert of every MoE layer."""
        return self.moe_layers * self.num_experts * self.routed_expert

    @property
    def outside_routed(self) -> int:
        """Everything but the routed experts (what a decode step reads whatever the batch)."""
        return self.attention_gemm + self.attention_vector + self.dense_ffn + self.moe_dense + self.embedding

    @property
    def total(self) -> int:
        return self.outside_routed + self.routed

    @property
    def gemm_per_token(self) -> int:
        """Matmul weights one token passes through in the layers (``experts_per_token`` routed
        experts, shared experts, routers; no embedding, no LM head): half its GEMM FLOPs."""
        return (self.attention_gemm + self.dense_ffn + self.moe_dense
                + self.moe_layers * self.experts_per_token * self.routed_expert)

    @property
    def active(self) -> int:
        """Parameters used per token in the layers. Model cards usually quote active parameters
        *with* embeddings, so this count is a few percent lower than a card's figure."""
        return self.gemm_per_token + self.attention_vector


@dataclass(frozen=True)
class WeightBytes:
    """Bytes of a model's weights (scales included) by GEMM class, all layers summed
    (:meth:`ModelSpec.weight_bytes`).

    dense_ffn_bytes: dense FFN layers and shared experts. experts_bytes: every routed expert;
    expert_bytes: one routed expert of one layer. unquantised_bytes: the input embedding, the
    routers and the linear-attention vector parameters, bf16 in every checkpoint. Norms and
    multi-token-prediction layers are left out, as in :class:`ParamCounts`.
    """

    attention_bytes: float
    dense_ffn_bytes: float
    experts_bytes: float
    lm_head_bytes: float
    unquantised_bytes: float
    expert_bytes: float

    @property
    def outside_experts_bytes(self) -> float:
        """Everything but the routed experts (what a decode step reads whatever the batch)."""
        return self.attention_bytes + self.dense_ffn_bytes + self.lm_head_bytes + self.unquantised_bytes

    @property
    def total_bytes(self) -> float:
        return self.outside_experts_bytes + self.experts_bytes


def load_model_yaml(ref: str | Path, extra_dirs: tuple[Path, ...] = ()) -> ModelSpec:
    """A model by ``model_db`` id or YAML path; :func:`prfaas_plan.model.load_model`, the loader
    to use, also reads Hugging Face ``config.json`` files."""
    path = find_entry(ref, "prfaas_plan.data.model_db", "model", tuple(Path(d) for d in extra_dirs))
    if path.suffix == ".json":
        raise InvalidInput(f"{path}: a Hugging Face config.json; load it with prfaas_plan.model.load_model")
    return validate(ModelSpec, read_yaml(path), str(path))


def list_model_specs(extra_dirs: tuple[Path, ...] = ()) -> list[ModelSpec]:
    """Every model of ``model_db`` and of ``extra_dirs``."""
    return [load_model_yaml(p) for p in list_entries("prfaas_plan.data.model_db", tuple(Path(d) for d in extra_dirs))]


__all__ = ["FFN", "GDN", "GQA", "KDA", "MLA", "MTP", "SWA", "Attention", "ContextExtension", "GemmDtypes", "Layers",
           "Lightning", "ModelSpec", "ParamCounts", "Source", "WeightBytes", "list_model_specs", "load_model_yaml"]
