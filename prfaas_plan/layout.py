"""Parallel layouts of one instance: how attention, experts and the decode cache spread over its GPUs.

A :class:`Layout` names the engines' choices (vLLM, SGLang): attention tensor parallel (heads
split over every GPU) or data parallel (each replica runs attention for its own requests, on one
GPU or on a TP group of ``attention_tp`` GPUs: vLLM ``--data-parallel-size`` with
``--tensor-parallel-size``, SGLang ``--dp`` with ``--enable-dp-attention``), routed experts tensor parallel (each expert's intermediate split) or expert parallel (whole
experts per GPU), and decode context parallelism (DCP: each request's growing cache sharded by
token over ``dcp`` ranks of the attention TP group). This module answers, per layout, which
degrees a model can take (:func:`check_layout`), how each attention projection shards over a TP
group (:func:`projection_split`, the one rule the weights and the kernel model's GEMMs share), the
weight bytes the busiest GPU holds (:func:`weight_bytes_per_gpu`) and the collectives of one
forward pass (:func:`collectives`).
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
from typing import TYPE_CHECKING, Literal

from prfaas_plan.errors import InvalidInput
from prfaas_plan.model.arch import ModelSpec
from prfaas_plan.model.kinds import GQA, MLA, Attention
from prfaas_plan.units import DTYPE_BYTES
from prfaas_plan.vocab import ATTENTION_LAYOUTS, EXPERT_LAYOUTS, AttentionLayout, ExpertLayout

if TYPE_CHECKING:
    from prfaas_plan.hardware import Instance

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

_REPLICATED_UNDER_TP = frozenset({"wq_a", "wkv_a", "w_f_a", "w_g_a", "idx_wq_b", "idx_wk", "idx_weights"})
"""Projections every TP rank holds whole: MLA's low-rank q/kv ``fused_qkv_a_proj``
(``disable_tp=True`` in vLLM), by the same reasoning KDA's gate down-projections (``f_a_proj``,
``g_a_proj``: hidden -> head_dim, too narrow to split), and a DSA indexer's ``wq_b``, ``wk`` and
``weights_proj`` (``ReplicatedLinear`` in vLLM and SGLang: every rank scores every key)."""
_KV_PROJECTIONS = frozenset({"wk", "wv"})
"""GQA projections split by KV head: a rank holds ``heads_per_rank(kv, tp)`` heads of them."""


@dataclass(frozen=True)
class Layout:
    """How one instance's ``gpus`` GPUs run the model.

    attention: ``tp`` splits heads over all GPUs; ``dp`` runs ``attn_dp`` data-parallel replicas
    of attention, each over its own ``attention_tp`` GPUs (default 1: whole attention per GPU;
    more: TP groups inside DP replicas, vLLM's ``--data-parallel-size`` x
    ``--tensor-parallel-size``, SGLang's ``--dp`` with ``--enable-dp-attention`` and attention TP
    ``--tp / --dp``).
    experts: ``tp`` splits each routed expert's intermediate over all GPUs; ``ep`` places whole
    experts, ``ceil(E / gpus)`` on the busiest GPU.
    dcp: decode context parallelism; each request's growing cache is token-sharded over ``dcp``
    ranks of the attention TP group (it must divide ``attn_tp``).
    """

    gpus: int
    attention: AttentionLayout = "tp"
    experts: ExpertLayout = "tp"
    dcp: int = 1
    attention_tp: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, Integral) or self.gpus < 1:
            raise InvalidInput(f"layout.gpus: a layout needs a whole number of GPUs >= 1, got {self.gpus!r}")
        if self.attention not in ATTENTION_LAYOUTS:
            raise InvalidInput(f"layout.attention: unknown layout {self.attention!r}; use one of {', '.join(ATTENTION_LAYOUTS)}")
        if self.experts not in EXPERT_LAYOUTS:
            raise InvalidInput(f"layout.experts: unknown layout {self.experts!r}; use one of {', '.join(EXPERT_LAYOUTS)}")
        if isinstance(self.dcp, bool) or not isinstance(self.dcp, Integral) or self.dcp < 1:
            raise InvalidInput(f"layout.dcp: decode context parallelism must be a whole number >= 1, got {self.dcp!r}")
        t = self.attention_tp
        if t is not None and (isinstance(t, bool) or not isinstance(t, Integral) or t < 1):
            raise InvalidInput(f"layout.attention_tp: GPUs per attention replica must be a whole number >= 1, got {t!r}")
        if t is not None and self.attention == "tp" and t != self.gpus:
            raise InvalidInput(f"layout.attention_tp: tensor-parallel attention spans all {self.gpus} GPUs, got "
                               f"attention_tp {t}; use attention: dp for {t}-GPU TP groups inside DP replicas")
        if t is not None and self.attention == "dp" and (self.gpus % t or t == self.gpus):
            valid = ", ".join(str(d) for d in range(1, self.gpus) if self.gpus % d == 0)
            raise InvalidInput(f"layout.attention_tp: {t} GPUs per attention replica must divide the {self.gpus} GPUs "
                               f"into at least 2 data-parallel replicas; use one of {valid or '1 with attention: tp'}")
        if t == (self.gpus if self.attention == "tp" else 1):  # the default, spelt out: one canonical value
            object.__setattr__(self, "attention_tp", None)

    @property
    def attn_tp(self) -> int:
        """Tensor-parallel degree of attention (GPUs that share one request's attention)."""
        if self.attention == "tp":
            return self.gpus
        return self.attention_tp or 1

    @property
    def attn_dp(self) -> int:
        """Attention data-parallel replicas (``attn_tp * attn_dp == gpus``)."""
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
        """GPUs that hold a share of one request's cache: the attention TP group (1 under pure DP)."""
        return self.attn_tp

    @property
    def label(self) -> str:
        """``"tp8"``, ``"tp8 dcp8"``, ``"dp8 attention, ep8 experts"``, ``"tp4 x dp2 attention, ep8
        experts"`` and the like."""
        if self.attention == "tp":
            attn = f"tp{self.gpus}"
        elif self.attn_tp > 1:
            attn = f"tp{self.attn_tp} x dp{self.attn_dp} attention"
        else:
            attn = f"dp{self.gpus} attention"
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
    problem = expert_tp_problem(model, layout.moe_tp)
    if problem:
        raise InvalidInput(f"{field}.experts: {problem} (SGLang and vLLM refuse to load it); use experts: ep")
    check_tp(model, layout.attn_tp, f"{field}.attention")
    return layout


def expert_tp_problem(model: ModelSpec, moe_tp: int) -> str | None:
    """Why the routed experts cannot be split ``moe_tp`` ways, or None: FP8 block-quantised expert
    weights split by intermediate channel must leave every GPU a whole number of blocks (vLLM
    ``Fp8MoEMethod.create_weights`` and SGLang's: "The output_size of gate's and up's weight = 192
    is not divisible by weight quantization block_n = 128", vllm/model_executor/layers/quantization/fp8.py;
    the engines' fix is ``--enable-expert-parallel``)."""
    if moe_tp == 1 or not model.ffn.num_experts or model.gemm_dtype("experts") != "fp8_block":
        return None
    block, inter = model.gemm_dtypes.block, model.ffn.expert_intermediate
    if inter % moe_tp == 0 and (inter // moe_tp) % block == 0:
        return None
    return (f"{model.id}'s FP8 block-{block} experts split over {moe_tp} GPUs leave {inter / moe_tp:g} intermediate "
            f"channels per GPU, not a whole number of {block}-channel blocks")


def default_layout(model: ModelSpec, gpus: int) -> Layout:
    """The layout an instance of ``gpus`` GPUs runs ``model`` in when none is given: attention and
    experts tensor parallel, the experts expert parallel instead where the engines refuse their
    tensor-parallel split (:func:`expert_tp_problem`: ``--enable-expert-parallel``, their fix)."""
    layout = Layout(gpus)
    return Layout(gpus, experts="ep") if expert_tp_problem(model, layout.moe_tp) else layout


def instance_layout(model: ModelSpec, inst: Instance) -> Layout:
    """The layout ``inst`` runs ``model`` in: its own (checked by :func:`check_layout`), or
    :func:`default_layout` when it gives none."""
    if inst.layout is None:
        return check_layout(model, default_layout(model, inst.gpus))
    return check_layout(model, inst.layout)


ParallelClass = Literal["column", "row", "replicated"]
"""How a projection shards over TP ranks: output columns split, input rows split (``o_proj``), or whole."""


def projection_split(attn: Attention, name: str, tp: int) -> tuple[ParallelClass, float]:
    """How one of ``tp`` ranks holds the attention projection ``name`` (a key of
    ``attn.gemm_shapes``): its parallel class and the fraction of the split axis the busiest rank
    holds. The output projection ``wo`` is row-parallel; the low-rank down-projections
    (:data:`_REPLICATED_UNDER_TP`) are whole; every other projection is column-parallel, GQA's K
    and V by KV head (replicated below one head per rank), linear-attention kinds by their
    (possibly uneven) head split, the rest by heads (``1 / tp``)."""
    if name in _REPLICATED_UNDER_TP:
        return "replicated", 1.0
    split = attn.rank_state_fraction(tp) if attn.recurrent_elements else 1.0 / tp
    if name in _KV_PROJECTIONS and attn.kv_elements_per_token:
        split = attn.rank_kv_elements_per_token(tp) / attn.kv_elements_per_token
    return ("row" if name.startswith("wo") else "column"), split


def projection_shard(attn: Attention, name: str, shape: tuple[int, ...], tp: int) -> tuple[ParallelClass, int, int]:
    """(parallel class, n, k) of projection ``name`` of weight shape ``(k, n)`` (``(in, out)``)
    on the busiest of ``tp`` ranks, by :func:`projection_split` (the split axis rounded up to
    whole elements)."""
    k, n = shape
    cls, split = projection_split(attn, name, tp)
    if cls == "row":
        return cls, n, math.ceil(k * split - 1e-9)
    return cls, (n if cls == "replicated" else math.ceil(n * split - 1e-9)), k


def _attention_rank_params(attn: Attention, hidden: int, tp: int) -> tuple[float, float]:
    """(GEMM weights, other weights) of one attention layer on the busiest of ``tp`` ranks
    (parameters), each projection as :func:`projection_split` holds it; vector parameters by the
    layer's head split."""
    split = attn.rank_state_fraction(tp) if attn.recurrent_elements else 1.0 / tp
    gemm = sum(math.prod(shape) * projection_split(attn, name, tp)[1] for name, shape in attn.gemm_shapes(hidden).items())
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
    ``moe_combine``, ``moe_gather``, ``dcp_query``, ``dcp_lse``, ``dcp_output``, ``lm_head``);
    tokens: the tokens each rank sends in an all-to-all (None for the others).
    """

    op: CollectiveOp
    message_bytes: float
    ranks: int
    count_per_forward: int
    after: str
    tokens: float | None = None


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

    Attention TP groups (``attn_tp > 1``): an all-reduce of the hidden states (``tokens x hidden x
    2`` B of the group's tokens) within the group after every attention o_proj and every dense
    FFN; generation gathers the vocab-split logits (``tokens x vocab x 2`` B; prefill samples one
    token per request, left out). MoE layers, over all GPUs: with one attention replica (TP) an
    all-reduce of the partial sums over every GPU (experts TP, or EP where every rank holds every
    token and its experts' share: vLLM's ``FusedMoE`` all-reduce). With ``attn_dp`` replicas of
    ``ceil(tokens / attn_dp)`` tokens each: experts EP take an all-to-all dispatch (``topk x
    hidden`` per token at the dispatch dtype) and combine (bf16) over all GPUs, the ranks of a TP
    group each sending ``1 / attn_tp`` of the replica's tokens (sequence-parallel MoE) and
    all-gathering them back within the group after the combine; experts TP an all-gather of
    every replica's tokens over the ``attn_dp`` ranks of the same TP index before, a
    reduce-scatter after, and the TP group's all-reduce of the partial sums (vLLM's naive DP
    dispatch). DCP adds per-layer query/LSE gathers and an output reduce-scatter in generation.
    """
    if phase not in ("context", "generation"):
        raise InvalidInput(f"phase: unknown phase {phase!r}; use context or generation")
    h, act = model.hidden_size, ACTIVATION_BYTES
    moe = model.ffn.moe_layer_count(model.layers.count)
    dense = model.layers.count - moe
    tp, dp = layout.attn_tp, layout.attn_dp
    rank_tokens = math.ceil(tokens / dp)  # tokens of one attention replica (the busiest)
    replica_bytes = rank_tokens * h * act
    out: list[Collective] = []
    if tp > 1:
        out.append(Collective("all_reduce", replica_bytes, tp, model.layers.count, "attention"))
        if dense:
            out.append(Collective("all_reduce", replica_bytes, tp, dense, "dense_ffn"))
    if moe and dp == 1:
        out.append(Collective("all_reduce", replica_bytes, layout.gpus, moe, "moe"))
    elif moe and layout.experts == "ep":
        sent, topk = rank_tokens / tp, model.ffn.experts_per_token
        out += [Collective("all_to_all", sent * topk * h * _dispatch_bytes_per_element(model), layout.gpus, moe,
                           "moe_dispatch", sent),
                Collective("all_to_all", sent * topk * h * act, layout.gpus, moe, "moe_combine", sent)]
        if tp > 1:
            out.append(Collective("all_gather", replica_bytes, tp, moe, "moe_gather"))
    elif moe:
        gathered = replica_bytes * dp  # replicas pad to the busiest one's tokens
        out += [Collective("all_gather", gathered, dp, moe, "moe_dispatch"),
                Collective("reduce_scatter", gathered, dp, moe, "moe_combine")]
        if tp > 1:
            out.append(Collective("all_reduce", replica_bytes, tp, moe, "moe"))
    if tp > 1 and phase == "generation":
        out.append(Collective("all_gather", rank_tokens * model.vocab_size * act, tp, 1, "lm_head"))
    if layout.dcp > 1 and phase == "generation":
        out += _dcp_collectives(model, layout, rank_tokens)
    return out


__all__ = ["ACTIVATION_BYTES", "Collective", "CollectiveOp", "Layout", "ParallelClass", "Phase", "check_layout",
           "check_tp", "collectives", "projection_shard", "projection_split", "weight_bytes_per_gpu"]
