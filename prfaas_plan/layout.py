"""Parallel layouts of one instance: how attention, experts and the decode cache spread over its GPUs.

A :class:`Layout` names the engines' choices (vLLM, SGLang): attention tensor parallel (heads
split over every GPU) or data parallel (each GPU runs whole attention for its own requests),
routed experts tensor parallel (each expert's intermediate split) or expert parallel (whole
experts per GPU), and decode context parallelism (DCP: each request's growing cache sharded by
token over ``dcp`` ranks of the attention TP group). This module answers, per layout, which
degrees a model can take (:func:`check_layout`), the weight bytes the busiest GPU holds
(:func:`weight_bytes_per_gpu`) and the collectives of one forward pass (:func:`collectives`).
Where the cache lives is :func:`prfaas_plan.kvcache.per_gpu_kv_bytes`'s.

The engines' rules this follows, with their sources:

* vLLM data parallel deployment (https://docs.vllm.ai/en/latest/serving/data_parallel_deployment/):
  a DP rank is a whole engine, so attention, dense FFNs, shared experts, embeddings and the LM
  head are replicated on every rank ("model weights are replicated across separate
  instances/GPUs"); expert layers form one group over all ``DP x TP`` GPUs, tensor parallel by
  default, expert parallel with ``--enable-expert-parallel``. SGLang's DP attention differs by
  default (its dense MLPs and LM head stay TP over the whole group unless ``--moe-dense-tp-size 1``
  and ``--enable-dp-lm-head``); we follow vLLM.
* vLLM ``determine_expert_map`` (vllm/model_executor/layers/fused_moe/layer.py): experts are
  spread evenly and the remainder goes to the first ranks, so ``num_experts`` need not divide
  by the EP size; the busiest rank holds ``ceil(E / ep)`` experts.
* vLLM MLA (vllm/model_executor/models/deepseek_v2.py): ``fused_qkv_a_proj`` (the q and kv
  down-projections) is built with ``disable_tp=True`` and the router gate is a
  ``ReplicatedLinear``: every TP rank holds them whole.
* DCP (https://docs.vllm.ai/en/latest/serving/context_parallel_deployment.html; SGLang
  https://docs.sglang.io/docs/advanced_features/dcp.md): it reuses the TP group (``tp % dcp ==
  0``), stripes each request's growing cache by token over ``dcp`` ranks, gathers the queries
  over the DCP group and merges the partial outputs with their log-sum-exp; linear-attention
  states are request-indexed and not sharded ("DCP grows long-context KV capacity but does not
  raise the KDA concurrency ceiling").

Bytes are bytes; token counts are tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral
from typing import Literal

from prfaas_plan.errors import InvalidInput
from prfaas_plan.model.arch import ModelSpec
from prfaas_plan.model.kinds import GQA, MLA, Attention
from prfaas_plan.units import DTYPE_BYTES
from prfaas_plan.vocab import ATTENTION_LAYOUTS, EXPERT_LAYOUTS, AttentionLayout, ExpertLayout

CollectiveOp = Literal["all_reduce", "all_to_all", "all_gather", "reduce_scatter"]
"""The collectives a forward pass runs."""
Phase = Literal["context", "generation"]
"""Prefill (context) or decode (generation) forward passes."""

ACTIVATION_BYTES = 2
"""Bytes per activation element that collectives move (bf16 hidden states)."""
LSE_BYTES = 4
"""Bytes per log-sum-exp value merged across DCP ranks (fp32)."""
FP8_SCALE_BLOCK = 128
"""Channels per fp32 scale of an FP8 expert dispatch (DeepEP quantises per 128 channels)."""

_REPLICATED_UNDER_TP = frozenset({"wq_a", "wkv_a", "w_f_a", "w_g_a"})
"""Low-rank down-projections every TP rank holds whole: MLA's q/kv ``fused_qkv_a_proj``
(``disable_tp=True`` in vLLM) and, by the same reasoning, KDA's gate down-projections
(``f_a_proj``, ``g_a_proj``: hidden -> head_dim, too narrow to split)."""
_KV_PROJECTIONS = frozenset({"wk", "wv"})
"""GQA projections split by KV head: a rank holds ``heads_per_rank(kv, tp)`` heads of them."""


@dataclass(frozen=True)
class Layout:
    """How one instance's ``gpus`` GPUs run the model.

    attention: ``tp`` splits heads over all GPUs; ``dp`` gives each GPU whole attention for its
    own requests (``attn_dp = gpus`` ranks of attention TP 1).
    experts: ``tp`` splits each routed expert's intermediate over all GPUs; ``ep`` places whole
    experts, ``ceil(E / gpus)`` on the busiest GPU.
    dcp: decode context parallelism; each request's growing cache is token-sharded over ``dcp``
    ranks of the attention TP group (it must divide ``attn_tp``).
    """

    gpus: int
    attention: AttentionLayout = "tp"
    experts: ExpertLayout = "tp"
    dcp: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, Integral) or self.gpus < 1:
            raise InvalidInput(f"layout.gpus: a layout needs a whole number of GPUs >= 1, got {self.gpus!r}")
        if self.attention not in ATTENTION_LAYOUTS:
            raise InvalidInput(f"layout.attention: unknown layout {self.attention!r}; use one of {', '.join(ATTENTION_LAYOUTS)}")
        if self.experts not in EXPERT_LAYOUTS:
            raise InvalidInput(f"layout.experts: unknown layout {self.experts!r}; use one of {', '.join(EXPERT_LAYOUTS)}")
        if isinstance(self.dcp, bool) or not isinstance(self.dcp, Integral) or self.dcp < 1:
            raise InvalidInput(f"layout.dcp: decode context parallelism must be a whole number >= 1, got {self.dcp!r}")

    @property
    def attn_tp(self) -> int:
        """Tensor-parallel degree of attention (GPUs that share one request's attention)."""
        return self.gpus if self.attention == "tp" else 1

    @property
    def attn_dp(self) -> int:
        """Attention data-parallel ranks (``attn_tp * attn_dp == gpus``)."""
        return self.gpus // self.attn_tp

    @property
    def moe_tp(self) -> int:
        """Tensor-parallel degree of each routed expert."""
        return self.gpus if self.experts == "tp" else 1

    @property
    def moe_ep(self) -> int:
        """Expert-parallel ranks (``moe_tp * moe_ep == gpus``)."""
        return self.gpus // self.moe_tp

    @property
    def ranks_per_request(self) -> int:
        """GPUs that hold a share of one request's cache: the attention TP group (1 under DP)."""
        return self.attn_tp

    @property
    def label(self) -> str:
        """``"tp8"``, ``"tp8 dcp8"``, ``"dp8 attention, ep8 experts"`` and the like."""
        attn = f"tp{self.gpus}" if self.attention == "tp" else f"dp{self.gpus} attention"
        parts = [attn + (f" dcp{self.dcp}" if self.dcp > 1 else "")]
        if (self.attention, self.experts) != ("tp", "tp"):
            parts.append(f"{self.experts}{self.gpus} experts")
        return ", ".join(parts)


def _tp_problem(model: ModelSpec, tp: int) -> str | None:
    """Why ``tp`` cannot shard ``model``'s attention the way vLLM does, or None (each kind's rule:
    :meth:`prfaas_plan.model.kinds.GQA.tp_problem`)."""
    for name, attn in model.attention.items():
        problem = attn.tp_problem(tp)
        if problem:
            return f"{name} attention {problem}"
    return None


def check_tp(model: ModelSpec, tp: int, field: str = "tp") -> int:
    """``tp`` when it is a tensor-parallel degree that can shard ``model`` (see :func:`_tp_problem`),
    else a one-line PlanError naming ``field`` and the valid degrees up to 64. Linear-attention
    states shard by heads too, but unevenly split heads are allowed: the busiest rank is counted."""
    if isinstance(tp, bool) or int(tp) != tp or tp < 1:
        raise InvalidInput(f"{field}: tensor-parallel degree must be a whole number >= 1, got {tp!r}")
    problem = _tp_problem(model, int(tp))
    if problem:
        valid = ", ".join(str(t) for t in range(1, 65) if _tp_problem(model, t) is None)
        raise InvalidInput(f"{field}: {model.id} cannot be split over {tp} GPUs ({problem}); valid degrees: {valid}")
    return int(tp)


def check_layout(model: ModelSpec, layout: Layout, field: str = "layout") -> Layout:
    """``layout`` when ``model`` can run in it, else a one-line InvalidInput naming the field
    (``field``.attention / .experts / .dcp) and the fix."""
    if layout.attention == "dp" and layout.gpus == 1:
        raise InvalidInput(f"{field}.attention: data-parallel attention needs at least 2 GPUs per instance, got 1; "
                           "use attention: tp")
    if layout.attn_tp % layout.dcp:
        valid = ", ".join(str(d) for d in range(1, layout.attn_tp + 1) if layout.attn_tp % d == 0)
        raise InvalidInput(f"{field}.dcp: decode context parallelism {layout.dcp} must divide the attention "
                           f"tensor-parallel degree {layout.attn_tp} (it shards within the TP group); use one of {valid}")
    experts = model.ffn.num_experts
    if layout.experts == "ep" and experts == 0:
        raise InvalidInput(f"{field}.experts: {model.id} is dense (no routed experts); use experts: tp")
    if layout.experts == "ep" and layout.moe_ep > experts:
        raise InvalidInput(f"{field}.experts: expert parallelism over {layout.moe_ep} GPUs needs at least "
                           f"{layout.moe_ep} experts and {model.id} has {experts}; use experts: tp or fewer GPUs per instance")
    check_tp(model, layout.attn_tp, f"{field}.attention")
    return layout


def _attention_rank_params(attn: Attention, hidden: int, tp: int) -> tuple[float, float]:
    """(GEMM weights, other weights) of one attention layer on the busiest of ``tp`` ranks
    (parameters): projections split by heads, KV projections by KV head (replicated below one
    head per rank), low-rank down-projections whole; linear-attention kinds by their (possibly
    uneven) head split."""
    split = attn.rank_state_fraction(tp) if attn.recurrent_elements else 1.0 / tp
    kv_split = attn.rank_kv_elements_per_token(tp) / attn.kv_elements_per_token if attn.kv_elements_per_token else split
    gemm = 0.0
    for name, shape in attn.gemm_shapes(hidden).items():
        n = math.prod(shape)
        gemm += n if name in _REPLICATED_UNDER_TP else n * (kv_split if name in _KV_PROJECTIONS else split)
    return gemm, attn.vector_params(hidden) * split


def weight_bytes_per_gpu(model: ModelSpec, layout: Layout) -> float:
    """Weight bytes on the busiest GPU of ``layout`` (scales included, per GEMM class dtype:
    :meth:`~prfaas_plan.model.arch.ModelSpec.weight_bytes_per_param`).

    Attention, dense FFNs, shared experts, the input embedding and the LM head are split over the
    attention TP degree (so replicated under DP attention, vLLM's rule); MLA down-projections and
    routers are whole on every rank; routed experts are split over ``moe_tp`` (TP) or placed
    whole, ``ceil(E / moe_ep)`` on the busiest rank (EP). The input embedding, routers and
    linear-attention vector parameters are unquantised (as in :meth:`ModelSpec.weight_bytes`).
    """
    h, tp, bpp = model.hidden_size, layout.attn_tp, model.weight_bytes_per_param
    p = model.param_counts()
    per_layer = [_attention_rank_params(model.attention[k], h, tp) for k in model.layer_kinds]
    attention_gemm, attention_vector = sum(g for g, _ in per_layer), sum(v for _, v in per_layer)
    if layout.experts == "ep":
        experts = p.moe_layers * math.ceil(p.num_experts / layout.moe_ep) * p.routed_expert
    else:
        experts = p.routed / layout.moe_tp
    unquantised = attention_vector + p.router + (p.embedding - p.lm_head) / tp
    return (attention_gemm * bpp("attention") + (p.dense_ffn + p.moe_dense - p.router) / tp * bpp("dense_ffn")
            + experts * bpp("experts") + p.lm_head / tp * bpp("lm_head") + unquantised * model.gemm_dtypes.unquantised_bytes_per_param)


@dataclass(frozen=True)
class Collective:
    """One kind of collective in a forward pass.

    op: the collective; message_bytes: the whole tensor per rank (the input of an all-reduce or
    reduce-scatter, the gathered output of an all-gather, what one rank sends in an all-to-all);
    ranks: GPUs taking part; count_per_forward: how many times a forward runs it; after: the part
    of the layer it belongs to (``attention``, ``dense_ffn``, ``moe``, ``moe_dispatch``,
    ``moe_combine``, ``dcp_query``, ``dcp_lse``, ``dcp_output``, ``lm_head``).
    """

    op: CollectiveOp
    message_bytes: float
    ranks: int
    count_per_forward: int
    after: str


def _dispatch_bytes_per_element(model: ModelSpec) -> float:
    """Bytes per hidden element of an expert-parallel dispatch: FP8 with one fp32 scale per 128
    channels when the experts run FP8 GEMMs (DeepEP quantises before dispatch), else bf16."""
    fp8 = model.gemm_dtype("experts") in ("fp8", "fp8_block")
    return DTYPE_BYTES["fp8"] + 4 / FP8_SCALE_BLOCK if fp8 else ACTIVATION_BYTES


def _dcp_head_dims(attn: Attention) -> tuple[int, int, int] | None:
    """(query heads, query width, output width) per head of a decode attention kernel that DCP
    splits by token, or None for kinds DCP leaves alone (windows, linear attention). MLA decodes
    in the absorbed form: queries over latent + RoPE, outputs in the latent."""
    if isinstance(attn, MLA):
        return attn.num_heads, attn.kv_lora_rank + attn.qk_rope_head_dim, attn.kv_lora_rank
    if isinstance(attn, GQA) and attn.window is None:
        return attn.num_heads, attn.head_dim_k, attn.head_dim_v
    return None


def _dcp_collectives(model: ModelSpec, layout: Layout, tokens: int) -> list[Collective]:
    """Per DCP'd layer: all-gather the queries of the DCP group's heads, all-gather the partial
    log-sum-exps, reduce-scatter the partial outputs back to the rank's heads (vLLM's DCP)."""
    out = []
    counts = model.layer_counts()
    for name, attn in model.attention.items():
        dims = _dcp_head_dims(attn)
        if dims is None or not counts[name]:
            continue
        heads, q_width, out_width = dims
        group_heads = heads // layout.attn_tp * layout.dcp  # heads of the DCP group after the gather
        out += [Collective("all_gather", tokens * group_heads * q_width * ACTIVATION_BYTES, layout.dcp, counts[name], "dcp_query"),
                Collective("all_gather", tokens * group_heads * LSE_BYTES, layout.dcp, counts[name], "dcp_lse"),
                Collective("reduce_scatter", tokens * group_heads * out_width * ACTIVATION_BYTES, layout.dcp,
                           counts[name], "dcp_output")]
    return out


def collectives(model: ModelSpec, layout: Layout, tokens: int, phase: Phase) -> list[Collective]:
    """The collectives of one forward pass of ``tokens`` tokens over the whole instance.

    Attention TP: an all-reduce of the hidden states (``tokens x hidden x 2`` B) after every
    attention o_proj and every dense FFN, and after every MoE layer over all GPUs (with experts
    TP the partial sums; with EP every rank holds every token and its experts' share, vLLM's
    ``FusedMoE`` all-reduce). DP attention: each rank holds ``ceil(tokens / gpus)`` tokens and
    its attention and dense layers need nothing; per MoE layer experts EP take an all-to-all
    dispatch (``t x topk x hidden`` at the dispatch dtype) and combine (bf16) over all GPUs,
    experts TP an all-gather of every rank's tokens before and a reduce-scatter after. DCP adds
    per-layer query/LSE gathers and an output reduce-scatter in generation. Generation under
    attention TP gathers the vocab-split logits (``tokens x vocab x 2`` B); prefill samples one
    token per request, left out.
    """
    if phase not in ("context", "generation"):
        raise InvalidInput(f"phase: unknown phase {phase!r}; use context or generation")
    h, act = model.hidden_size, ACTIVATION_BYTES
    params = model.param_counts()
    moe, dense = params.moe_layers, model.layers.count - params.moe_layers
    hidden_bytes = tokens * h * act
    out: list[Collective] = []
    if layout.attn_tp > 1:
        out.append(Collective("all_reduce", hidden_bytes, layout.attn_tp, model.layers.count, "attention"))
        if dense:
            out.append(Collective("all_reduce", hidden_bytes, layout.attn_tp, dense, "dense_ffn"))
        if moe:
            out.append(Collective("all_reduce", hidden_bytes, layout.gpus, moe, "moe"))
        if phase == "generation":
            out.append(Collective("all_gather", tokens * model.vocab_size * act, layout.attn_tp, 1, "lm_head"))
    elif moe:
        rank_tokens = math.ceil(tokens / layout.attn_dp)
        if layout.experts == "ep":
            topk = params.experts_per_token
            out += [Collective("all_to_all", rank_tokens * topk * h * _dispatch_bytes_per_element(model), layout.gpus,
                               moe, "moe_dispatch"),
                    Collective("all_to_all", rank_tokens * topk * h * act, layout.gpus, moe, "moe_combine")]
        else:
            gathered = rank_tokens * layout.attn_dp * h * act  # ranks pad to the busiest rank's tokens
            out += [Collective("all_gather", gathered, layout.gpus, moe, "moe_dispatch"),
                    Collective("reduce_scatter", gathered, layout.gpus, moe, "moe_combine")]
    if layout.dcp > 1 and phase == "generation":
        out += _dcp_collectives(model, layout, tokens)
    return out


__all__ = ["ACTIVATION_BYTES", "Collective", "CollectiveOp", "Layout", "Phase", "check_layout", "check_tp",
           "collectives", "weight_bytes_per_gpu"]
