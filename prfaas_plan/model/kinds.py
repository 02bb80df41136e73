"""Layer kinds: what each attention kind and the FFN own — weights, FLOPs, cache elements, TP shard.

One pydantic class per attention kind (the ``attention:`` entries of a ``model_db`` file) and one
for the feed-forward blocks. Each answers, for one layer, every question the rest of the package
asks about it (AIConfigurator's op classes own their weights and latency; LLM-Viewer declares a
family's layer shapes once), so that no other module switches on ``kind``:

* **weights**: :meth:`gemm_shapes` (the matmul weights, ``(in, out)`` elements, low-rank where the
  checkpoint is low-rank) and :meth:`vector_shapes` (short-conv filters, decay parameters), the
  shapes the torch models of the benchmark harness are built from; norms are left out (< 0.1%);
* **FLOPs**: per token pair of softmax attention in prefill (:attr:`pair_flops`), per token of
  chunked linear attention (:attr:`linear_flops_per_token`); the GEMMs cost ``2 * gemm_params`` per
  token (decode's attention is timed from the kernel tables, :mod:`prfaas_plan.perf.kernels`);
* **cache**: elements per token of a growing cache (:attr:`kv_elements_per_token`, kept for the
  last :attr:`window` tokens only when there is a window), fixed conv and recurrent state
  elements per request, and the element type vLLM keeps the recurrent state in;
* **tensor parallelism**: what one of ``tp`` ranks holds, and why a ``tp`` cannot shard the layer.

Counts are elements or parameters (plain integers); FLOPs are floating-point operations.
Bytes, dtypes and engine conventions are applied by :mod:`prfaas_plan.model.cache`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, ClassVar, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from prfaas_plan.errors import InvalidInput
from prfaas_plan.vocab import StateDtype

LINEAR_ATTN_CHUNK_TOKENS = 64
"""Chunk size of chunked linear-attention kernels (flash-linear-attention's default), which sets
the intra-chunk quadratic work per token."""

Resize = Callable[[float], int]
"""How :meth:`scaled` maps a head count or a dim to its scaled value."""

Shapes = dict[str, tuple[int, ...]]
"""Named weight shapes of one layer, in elements (a GEMM weight is ``(in, out)``)."""


def _numel(shapes: Shapes) -> int:
    return sum(math.prod(s) for s in shapes.values())


def heads_per_rank(heads: int, tp: int) -> int:
    """Heads one of ``tp`` ranks holds: split evenly, never below one whole head per rank."""
    return max(1, math.ceil(heads / tp))


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class _Kind(_Frozen):
    """What every attention kind answers; the defaults are those of a kind that has none of it."""

    def gemm_shapes(self, hidden: int) -> Shapes:
        raise NotImplementedError

    def vector_shapes(self, hidden: int) -> Shapes:
        """Parameters that are not matmul weights (short-conv filters, decay parameters)."""
        return {}

    def gemm_params(self, hidden: int) -> int:
        """Matmul weights of one layer (parameters)."""
        return _numel(self.gemm_shapes(hidden))

    def vector_params(self, hidden: int) -> int:
        """Non-matmul parameters of one layer (parameters)."""
        return _numel(self.vector_shapes(hidden))

    @property
    def window(self) -> int | None:
        """Tokens a sliding window keeps (None: the cache grows with the request)."""
        return None

    pair_flops: ClassVar[int] = 0  # FLOPs per (query, key) pair of softmax attention in prefill
    linear_flops_per_token: ClassVar[int] = 0  # FLOPs per token of chunked linear attention
    kv_elements_per_token: ClassVar[int] = 0  # elements per token of a length-growing cache
    conv_channels: ClassVar[int] = 0  # channels of the short convolution(s)
    conv_elements: ClassVar[int] = 0  # conv state elements per request (the last conv_kernel - 1 inputs)
    recurrent_elements: ClassVar[int] = 0  # recurrent state elements per request
    checkpoint_state_dtype: ClassVar[StateDtype | None] = None  # recurrent-state dtype the checkpoint states
    vllm_state_dtype: ClassVar[StateDtype] = "bf16"  # recurrent-state dtype vLLM uses

    index_bytes_per_token: ClassVar[int] = 0  # bytes per token of a growing cache kept in its own dtype

    @property
    def capped_pairs(self) -> tuple[int, int] | None:
        """(FLOPs per pair, keys per query) of attention whose queries see at most a fixed number
        of keys (a sliding window, a top-k selection); None when every query sees all earlier keys."""
        return None if self.window is None else (self.pair_flops, self.window)

    @property
    def full_pair_flops(self) -> int:
        """FLOPs per (query, key) pair of the attention that sees every earlier key."""
        return self.pair_flops if self.capped_pairs is None else 0

    def rank_kv_elements_per_token(self, tp: int) -> int:
        """Growing-cache elements per token one of ``tp`` ranks holds."""
        return self.kv_elements_per_token

    def rank_state_fraction(self, tp: int) -> float:
        """Fraction of the fixed state one of ``tp`` ranks holds (the busiest rank)."""
        return 1.0

    def tp_problem(self, tp: int) -> str | None:
        """Why vLLM cannot shard this layer over ``tp`` ranks (``"has ..."``), or None."""
        return None

    def scaled(self, heads: Resize, dim: Resize) -> _Kind:
        """A copy with head counts ``heads(n)`` and head dims / ranks ``dim(d)`` (the benchmark
        harness's scaled-down models); windows and conv kernels are kept."""
        raise NotImplementedError


class GQA(_Kind):
    """Full causal attention, MHA/GQA; K and V head dims may differ (MiMo: 192/128)."""

    kind: Literal["gqa"]
    num_heads: PositiveInt
    num_kv_heads: PositiveInt
    head_dim_k: PositiveInt
    head_dim_v: PositiveInt
    output_gate: bool = False
    """A sigmoid gate on the attention output, from its own projection (Qwen3-Next, Qwen3.5:
    ``attn_output_gate``; their q_proj is twice as wide, query and gate)."""

    def gemm_shapes(self, hidden: int) -> Shapes:
        shapes = {"wq": (hidden, self.num_heads * self.head_dim_k), "wk": (hidden, self.num_kv_heads * self.head_dim_k),
                  "wv": (hidden, self.num_kv_heads * self.head_dim_v), "wo": (self.num_heads * self.head_dim_v, hidden)}
        if self.output_gate:
            shapes["wg"] = (hidden, self.num_heads * self.head_dim_v)
        return shapes

    @property
    def pair_flops(self) -> int:
        """Scores and values: ``2 * H * (d_k + d_v)`` per (query, key) pair."""
        return 2 * self.num_heads * (self.head_dim_k + self.head_dim_v)

    @property
    def kv_elements_per_token(self) -> int:
        return self.num_kv_heads * (self.head_dim_k + self.head_dim_v)

    def rank_kv_elements_per_token(self, tp: int) -> int:
        """KV heads shard across ranks down to one head per rank (then replicate)."""
        return heads_per_rank(self.num_kv_heads, tp) * (self.head_dim_k + self.head_dim_v)

    def tp_problem(self, tp: int) -> str | None:
        """Query heads must divide evenly; KV heads must divide evenly or divide ``tp``."""
        kv = self.num_kv_heads
        if kv % tp and tp % kv:
            return f"has {kv} KV heads: {tp} neither divides them nor is a multiple of them"
        if self.num_heads % tp:
            return f"has {self.num_heads} query heads, not divisible by {tp}"
        return None

    def scaled(self, heads: Resize, dim: Resize) -> GQA:
        """Keeps the GQA group size where the head count allows."""
        kv = heads(self.num_kv_heads)
        return self.model_copy(update={"num_heads": kv * heads(self.num_heads / kv), "num_kv_heads": kv,
                                       "head_dim_k": dim(self.head_dim_k), "head_dim_v": dim(self.head_dim_v)})


class SWA(GQA):
    """Sliding-window attention: GQA that keeps only the last ``window_tokens`` tokens (its own
    head counts and dims, which may differ from the model's full-attention layers)."""

    kind: Literal["swa"]  # type: ignore[assignment]
    window_tokens: PositiveInt

    @property
    def window(self) -> int | None:
        return self.window_tokens


class MLA(_Kind):
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

    def gemm_shapes(self, hidden: int) -> Shapes:
        h, n = hidden, self.num_heads
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        q = {"wq_a": (h, self.q_lora_rank), "wq_b": (self.q_lora_rank, n * qk)} if self.q_lora_rank \
            else {"wq": (h, n * qk)}
        return {**q, "wkv_a": (h, self.kv_lora_rank + self.qk_rope_head_dim),
                "wkv_b": (self.kv_lora_rank, n * (self.qk_nope_head_dim + self.v_head_dim)),
                "wo": (n * self.v_head_dim, h)}

    @property
    def pair_flops(self) -> int:
        """Prefill decompresses the latent: ``2 * H * (d_nope + d_rope + d_v)`` per pair."""
        return 2 * self.num_heads * (self.qk_nope_head_dim + self.qk_rope_head_dim + self.v_head_dim)

    @property
    def kv_elements_per_token(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim

    def tp_problem(self, tp: int) -> str | None:
        """The latent has no head axis (every rank holds all of it); query heads must divide."""
        return f"has {self.num_heads} query heads, not divisible by {tp}" if self.num_heads % tp else None

    def scaled(self, heads: Resize, dim: Resize) -> MLA:
        return self.model_copy(update={
            "num_heads": heads(self.num_heads), "kv_lora_rank": dim(self.kv_lora_rank),
            "q_lora_rank": dim(self.q_lora_rank) if self.q_lora_rank else None,
            "qk_nope_head_dim": dim(self.qk_nope_head_dim), "qk_rope_head_dim": dim(self.qk_rope_head_dim),
            "v_head_dim": dim(self.v_head_dim)})


INDEX_SCALE_BLOCK = 128
"""Channels of a DSA indexer key that share one fp32 scale (the quant block of its fp8 keys)."""
INDEX_SCALE_BYTES = 4
"""Bytes of one such scale (fp32)."""


def index_key_bytes(index_head_dim: int) -> int:
    """Bytes of one token's DSA indexer key as vLLM and SGLang store it: fp8 channels plus one fp32
    scale per :data:`INDEX_SCALE_BLOCK` of them (``index_head_dim + index_head_dim // 128 * 4``)."""
    return index_head_dim + math.ceil(index_head_dim / INDEX_SCALE_BLOCK) * INDEX_SCALE_BYTES


class DSA(MLA):
    """DeepSeek sparse attention (DeepSeek-V3.2, GLM-5): MLA whose queries attend to the
    ``index_topk`` keys a lightning indexer selects. The indexer scores every earlier key with
    ``index_n_heads`` heads of ``index_head_dim`` over its own key cache: one fp8 key of
    ``index_head_dim`` channels plus one fp32 scale per :data:`INDEX_SCALE_BLOCK` per token,
    stored as bytes whatever the KV dtype (vLLM and SGLang: ``index_head_dim + index_head_dim //
    128 * 4`` = 132 bytes). Its projections (``wq_b`` from the query latent, ``wk`` and
    ``weights_proj`` from the hidden state) are replicated on every TP rank, as the engines build
    them (``ReplicatedLinear``)."""

    kind: Literal["dsa"]  # type: ignore[assignment]
    index_n_heads: PositiveInt
    index_head_dim: PositiveInt
    index_topk: PositiveInt

    def gemm_shapes(self, hidden: int) -> Shapes:
        rank = self.q_lora_rank or hidden  # without a query latent the indexer reads the hidden state
        return {**super().gemm_shapes(hidden), "idx_wq_b": (rank, self.index_n_heads * self.index_head_dim),
                "idx_wk": (hidden, self.index_head_dim), "idx_weights": (hidden, self.index_n_heads)}

    @property
    def index_bytes_per_token(self) -> int:
        """Indexer key cache per token (:func:`index_key_bytes`)."""
        return index_key_bytes(self.index_head_dim)

    @property
    def index_pair_flops(self) -> int:
        """The indexer's score of one (query, key) pair: a dot product per head, then its
        weighted sum over heads: ``2 * n_idx * (d_idx + 1)``."""
        return 2 * self.index_n_heads * (self.index_head_dim + 1)

    @property
    def capped_pairs(self) -> tuple[int, int] | None:
        return self.pair_flops, self.index_topk

    @property
    def full_pair_flops(self) -> int:
        """Only the indexer sees every earlier key."""
        return self.index_pair_flops

    def scaled(self, heads: Resize, dim: Resize) -> DSA:
        return super().scaled(heads, dim).model_copy(update={
            "index_n_heads": heads(self.index_n_heads), "index_head_dim": dim(self.index_head_dim)})


class _Linear(_Kind):
    """A linear-attention kind: a fixed recurrent state of ``state_heads x d_k x d_v`` per request."""

    @property
    def _state_dims(self) -> tuple[int, int, int]:
        """(heads, d_k, d_v) of the recurrent state."""
        raise NotImplementedError

    @property
    def linear_flops_per_token(self) -> int:
        """Chunked linear attention: ``~4 d_k d_v`` per head (state update and readout) plus the
        intra-chunk part ``2 C (d_k + d_v)``."""
        heads, dk, dv = self._state_dims
        return heads * (4 * dk * dv + 2 * LINEAR_ATTN_CHUNK_TOKENS * (dk + dv))

    @property
    def recurrent_elements(self) -> int:
        heads, dk, dv = self._state_dims
        return heads * dk * dv

    def rank_state_fraction(self, tp: int) -> float:
        """States shard by heads; with unevenly split heads the busiest rank is counted."""
        heads = self._state_dims[0]
        return heads_per_rank(heads, tp) / heads


class GDN(_Linear):
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

    def gemm_shapes(self, hidden: int) -> Shapes:
        """in_proj_qkvz (q, k, v and the output gate z), in_proj_ba (beta, alpha), out_proj."""
        v = self.num_v_heads * self.head_dim_v
        return {"w_qkvz": (hidden, 2 * self.num_qk_heads * self.head_dim_k + 2 * v),
                "w_ba": (hidden, 2 * self.num_v_heads), "wo": (v, hidden)}

    def vector_shapes(self, hidden: int) -> Shapes:
        return {"conv": (self.conv_channels, self.conv_kernel), "a_log": (self.num_v_heads,),
                "dt_bias": (self.num_v_heads,)}

    @property
    def _state_dims(self) -> tuple[int, int, int]:
        return self.num_v_heads, self.head_dim_k, self.head_dim_v

    @property
    def conv_channels(self) -> int:
        """Channels of the short convolution over q, k and v (count)."""
        return 2 * self.num_qk_heads * self.head_dim_k + self.num_v_heads * self.head_dim_v

    @property
    def conv_elements(self) -> int:
        """Conv state elements as vLLM and SGLang keep it: the last ``conv_kernel - 1`` inputs."""
        return (self.conv_kernel - 1) * self.conv_channels

    @property
    def checkpoint_state_dtype(self) -> StateDtype | None:
        return self.ssm_dtype

    @property
    def vllm_state_dtype(self) -> StateDtype:
        """The checkpoint's ``mamba_ssm_dtype``, else the model dtype (bf16)."""
        return self.ssm_dtype or "bf16"

    def scaled(self, heads: Resize, dim: Resize) -> GDN:
        """Keeps the ratio of value to query/key heads."""
        qk = heads(self.num_qk_heads)
        return self.model_copy(update={"num_qk_heads": qk, "num_v_heads": qk * max(1, self.num_v_heads // self.num_qk_heads),
                                       "head_dim_k": dim(self.head_dim_k), "head_dim_v": dim(self.head_dim_v)})


class KDA(_Linear):
    """Kimi Delta Attention (Kimi Linear): separate q/k/v short convs plus a d x d state per head.

    Weights as in the checkpoint (``KimiDeltaAttention`` of Kimi-Linear's modeling_kimi.py,
    https://huggingface.co/moonshotai/Kimi-Linear-48B-A3B-Instruct/blob/main/modeling_kimi.py):
    q/k/v projections, the decay gate ``f`` and the output gate ``g`` both low-rank
    (hidden -> head_dim -> heads x head_dim: ``f_a_proj``/``f_b_proj``, ``g_a_proj``/``g_b_proj``),
    ``b_proj`` (beta per head), ``o_proj``; ``A_log`` per head and ``dt_bias`` per channel."""

    kind: Literal["kda"]
    num_heads: PositiveInt
    head_dim: PositiveInt
    num_k_heads: PositiveInt | None = None  # defaults to num_heads
    head_dim_k: PositiveInt | None = None  # defaults to head_dim
    conv_kernel: PositiveInt

    @property
    def _key_width(self) -> int:
        return (self.num_k_heads or self.num_heads) * (self.head_dim_k or self.head_dim)

    def gemm_shapes(self, hidden: int) -> Shapes:
        h, d, v = hidden, self.head_dim, self.num_heads * self.head_dim
        return {"w_qkv": (h, 2 * self._key_width + v), "w_f_a": (h, d), "w_f_b": (d, v),
                "w_g_a": (h, d), "w_g_b": (d, v), "w_beta": (h, self.num_heads), "wo": (v, h)}

    def vector_shapes(self, hidden: int) -> Shapes:
        return {"conv": (self.conv_channels, self.conv_kernel), "a_log": (self.num_heads,),
                "dt_bias": (self.num_heads * self.head_dim,)}

    @property
    def _state_dims(self) -> tuple[int, int, int]:
        return self.num_heads, self.head_dim, self.head_dim

    @property
    def conv_channels(self) -> int:
        """Channels of the q, k and v short convolutions together (count)."""
        return self.num_heads * self.head_dim + 2 * self._key_width

    @property
    def conv_elements(self) -> int:
        """Conv state elements as vLLM and SGLang keep it: the last ``conv_kernel - 1`` inputs."""
        return (self.conv_kernel - 1) * self.conv_channels

    vllm_state_dtype: ClassVar[StateDtype] = "fp32"  # vLLM's kda_state_dtype: always float32

    def scaled(self, heads: Resize, dim: Resize) -> KDA:
        """Separate key heads or dims are not scaled (the bench layers do not support them)."""
        if self.num_k_heads not in (None, self.num_heads) or self.head_dim_k not in (None, self.head_dim):
            raise InvalidInput("scale: KDA with separate key heads or dims is not supported by the bench layers")
        return self.model_copy(update={"num_heads": heads(self.num_heads), "head_dim": dim(self.head_dim)})


class Lightning(_Linear):
    """Lightning / SimpleGLA linear attention (Ring-2.5, Ling-2.5): d x d state per head, no conv."""

    kind: Literal["lightning"]
    num_heads: PositiveInt
    head_dim: PositiveInt

    def gemm_shapes(self, hidden: int) -> Shapes:
        """Fused query_key_value, the output gate g_proj, the output projection dense."""
        inner = self.num_heads * self.head_dim
        return {"w_qkv": (hidden, 3 * inner), "w_g": (hidden, inner), "wo": (inner, hidden)}

    def scaled(self, heads: Resize, dim: Resize) -> Lightning:
        return self.model_copy(update={"num_heads": heads(self.num_heads), "head_dim": dim(self.head_dim)})

    @property
    def _state_dims(self) -> tuple[int, int, int]:
        return self.num_heads, self.head_dim, self.head_dim


Attention = Annotated[Union[GQA, SWA, MLA, DSA, GDN, KDA, Lightning], Field(discriminator="kind")]


class FFN(_Frozen):
    """Feed-forward blocks (SwiGLU: gate, up and down, ``3 * hidden * width`` weights each).
    Dense models set only ``dense_intermediate``; MoE models give the expert sizes, and their first
    ``first_dense_layers`` layers use the dense FFN."""

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

    def is_moe_layer(self, index: int) -> bool:
        """Whether the 0-based layer ``index`` is an MoE layer."""
        return self.num_experts > 0 and index >= self.first_dense_layers

    def moe_layer_count(self, layers: int) -> int:
        """MoE layers of a ``layers``-layer stack (all but the first dense ones; none when dense)."""
        return max(layers - self.first_dense_layers, 0) if self.num_experts else 0

    def dense_params(self, hidden: int) -> int:
        """Weights of one dense FFN block (parameters)."""
        return 3 * hidden * (self.dense_intermediate or 0)

    def expert_params(self, hidden: int) -> int:
        """Weights of one routed expert (parameters)."""
        return 3 * hidden * self.expert_intermediate

    def moe_dense_params(self, hidden: int) -> int:
        """Weights of one MoE layer that every token uses: shared experts and the router."""
        return 3 * hidden * self.num_shared_experts * self.shared_intermediate + hidden * self.num_experts


__all__ = ["DSA", "GQA", "GDN", "INDEX_SCALE_BLOCK", "KDA", "LINEAR_ATTN_CHUNK_TOKENS", "MLA", "SWA", "Attention", "FFN",
           "Lightning", "Shapes", "heads_per_rank", "index_key_bytes"]
