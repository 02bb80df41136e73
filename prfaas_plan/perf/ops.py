"""The kernel model: a forward pass as a list of measured ops, timed from kernel tables.

AIConfigurator's structure (ops that own their shapes, timed from a database of measured kernels),
our own arithmetic: :func:`forward_ops` lists the ops one forward pass of ``model`` runs on one rank
of an instance with a given parallel layout — the fused attention projections, the attention core
of each layer kind (a DSA layer's indexer before it), the dense FFN or the fused MoE with its
shared experts and router, the collectives of the layout, the LM head — each with how many layers
run it. Every op is timed by
the instance's :class:`~prfaas_plan.perf.kernels.KernelTables` (measured on the GPU, or transferred
from the nearest measured one), so dtype, shape and batch effects come from measurements rather
than from one efficiency factor. Around the kernels the engine profile adds its host time per
request and per step, its launch time per layer and the memory-bound elementwise passes the
tables do not measure (norms, residual adds).

Phases: ``prefill`` runs one request of ``l`` tokens (in chunks of the engine's chunked-prefill
size for the GEMMs); ``decode`` runs one step of ``batch`` requests at ``context`` tokens each.
Token counts are tokens; times are seconds; message sizes bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from prfaas_plan.engine import EngineProfile
from prfaas_plan.hardware import Instance
from prfaas_plan.layout import ACTIVATION_BYTES, Layout, collectives, instance_layout, projection_shard
from prfaas_plan.model.arch import ModelSpec
from prfaas_plan.model.kinds import DSA, GDN, KDA, MLA, SWA, Lightning
from prfaas_plan.perf.kernels import KernelTables, OpTime, kernel_tables
from prfaas_plan.vocab import GemmDtype, MoeRouting


@dataclass(frozen=True)
class Work:
    """What one forward pass processes: ``tokens`` new tokens in all (an array of prefill
    lengths, or a decode batch), ``batch`` requests, ``context_tokens`` of cache each attends to,
    split over ``attn_dp`` attention data-parallel ranks. A prefill runs on one rank; with
    ``every_rank`` every rank carries ``tokens`` of prompt at once (a busy attention-DP prefill
    worker), so the ops shared across ranks (MoE, all-token GEMMs) see ``attn_dp`` times as many."""

    phase: str
    tokens: np.ndarray
    batch: int
    context_tokens: np.ndarray
    attn_dp: int
    every_rank: bool = False

    @property
    def shared_tokens(self) -> np.ndarray:
        """Tokens the ops over every rank's tokens (MoE, ``all``-scope GEMMs) process."""
        return self.tokens * self.attn_dp if self.every_rank and self.phase == "prefill" else self.tokens

    @property
    def rank_tokens(self) -> np.ndarray:
        """Tokens one attention rank processes: a prefill request runs on one rank; a decode
        batch is spread evenly over the data-parallel ranks (the busiest rank counted)."""
        if self.phase == "prefill":
            return self.tokens
        return np.asarray(float(math.ceil(self.batch / self.attn_dp)))

    @property
    def rank_batch(self) -> int:
        return 1 if self.phase == "prefill" else math.ceil(self.batch / self.attn_dp)


@dataclass(frozen=True)
class Gemm:
    """One (fused) GEMM ``[m x k] @ [k x n]`` per rank; ``scope`` says whose tokens it sees:
    ``attention`` (the rank's own requests), ``all`` (every token of the instance) or ``head``
    (one token per request of the rank: the LM head samples the last position only)."""

    name: str
    n: int
    k: int
    dtype: GemmDtype
    scope: str = "attention"
    family: str = "gemm"

    def time(self, t: KernelTables, w: Work) -> OpTime:
        m = {"attention": w.rank_tokens, "all": w.shared_tokens}.get(self.scope, np.asarray(float(w.rank_batch)))
        return t.gemm(m, self.n, self.k, self.dtype)


@dataclass(frozen=True)
class MoE:
    """The fused routed-expert kernel of one MoE layer on one rank, tokens routed as ``routing``."""

    name: str
    hidden: int
    inter: int
    topk: int
    experts: int
    moe_tp: int
    moe_ep: int
    dtype: GemmDtype
    routing: MoeRouting = "balanced"
    family: str = "moe"

    def time(self, t: KernelTables, w: Work) -> OpTime:
        return t.moe(w.shared_tokens, self.hidden, self.inter, self.topk, self.experts, self.moe_tp, self.moe_ep,
                     self.dtype, self.routing)


@dataclass(frozen=True)
class SoftmaxAttention:
    """Causal softmax attention (GQA/SWA) over one rank's heads."""

    name: str
    heads: int
    kv_heads: int
    head_dim: int
    window: int | None
    kv_dtype: str
    family: str = "attention"

    def time(self, t: KernelTables, w: Work) -> OpTime:
        if w.phase == "prefill":
            return t.context_attention(1, w.tokens, self.heads, self.kv_heads, self.head_dim, self.window,
                                       self.kv_dtype)
        return t.generation_attention(w.rank_batch, w.context_tokens, self.heads, self.kv_heads, self.head_dim,
                                      self.window, self.kv_dtype)


@dataclass(frozen=True)
class LatentAttention:
    """Multi-head latent attention (MLA) over one rank's heads; with ``topk`` (DSA) each query
    attends only to the ``topk`` keys its indexer selected."""

    name: str
    heads: int
    kv_lora_rank: int
    qk_rope_dim: int
    qk_nope_dim: int
    v_dim: int
    topk: int | None = None
    family: str = "mla"

    def time(self, t: KernelTables, w: Work) -> OpTime:
        if w.phase == "prefill" and self.topk is not None:
            return t.dsa_context(1, w.tokens, self.heads, self.qk_rope_dim, self.qk_nope_dim, self.v_dim, self.topk)
        if w.phase == "prefill":
            return t.mla_context(1, w.tokens, self.heads, self.kv_lora_rank, self.qk_rope_dim, self.qk_nope_dim,
                                 self.v_dim)
        if self.topk is not None:
            return t.dsa_generation(w.rank_batch, w.context_tokens, self.heads, self.kv_lora_rank, self.qk_rope_dim,
                                    self.qk_nope_dim, self.v_dim, self.topk)
        return t.mla_generation(w.rank_batch, w.context_tokens, self.heads, self.kv_lora_rank, self.qk_rope_dim)


@dataclass(frozen=True)
class Indexer:
    """A DSA lightning indexer, replicated on every rank: scores all earlier keys per query."""

    name: str
    heads: int
    head_dim: int
    bytes_per_token: int
    family: str = "indexer"

    def time(self, t: KernelTables, w: Work) -> OpTime:
        if w.phase == "prefill":
            return t.dsa_indexer("context", 1, w.tokens, self.heads, self.head_dim, self.bytes_per_token)
        return t.dsa_indexer("generation", w.rank_batch, w.context_tokens, self.heads, self.head_dim,
                             self.bytes_per_token)


@dataclass(frozen=True)
class LinearAttention:
    """Chunked (prefill) or recurrent (decode) linear attention over one rank's heads."""

    name: str
    kind: str
    heads: int
    head_dim_k: int
    head_dim_v: int
    k_heads: int | None = None  # key heads per rank where they differ from the value heads (GDN)
    family: str = "linear_attention"

    def time(self, t: KernelTables, w: Work) -> OpTime:
        phase = "context" if w.phase == "prefill" else "generation"
        tokens = w.tokens if w.phase == "prefill" else np.asarray(1.0)
        return t.linear_attention(self.kind, phase, w.rank_batch, tokens, self.heads, self.head_dim_k,
                                  self.head_dim_v, k_heads=self.k_heads)


@dataclass(frozen=True)
class Comm:
    """One collective of the layout (:func:`prfaas_plan.layout.collectives`), ``bytes_per_token``
    per token an attention rank holds. All-gathers and reduce-scatters take half an all-reduce of
    the same bytes (a ring all-reduce is one of each); an expert-parallel all-to-all is timed as
    dispatch plus combine by the tables, so it is listed once (its dispatch), for the
    ``token_fraction`` of the rank's tokens each GPU sends (``1 / attn_tp``: a TP group splits its
    replica's tokens)."""

    name: str
    op: str
    bytes_per_token: float
    ranks: int
    hidden: int = 0
    topk: int = 0
    experts: int = 0
    token_fraction: float = 1.0
    family: str = "comm"

    def time(self, t: KernelTables, w: Work) -> OpTime:
        m = w.rank_tokens
        if self.op == "all_to_all":
            return t.all_to_all(m * self.token_fraction, self.hidden, self.topk, self.experts, self.ranks,
                                "context" if w.phase == "prefill" else "generation")
        r = t.all_reduce(m * self.bytes_per_token, self.ranks)
        return r if self.op == "all_reduce" else OpTime(0.5 * r.latency_s, r.source)


Op = Gemm | MoE | SoftmaxAttention | LatentAttention | Indexer | LinearAttention | Comm


@dataclass(frozen=True)
class Step:
    """One op and how many times a forward pass runs it (its layers)."""

    op: Op
    count: int


def attention_gemms(model: ModelSpec, name: str, tp: int) -> list[Gemm]:
    """The projections of one ``name`` attention layer per rank, each sharded by
    :func:`prfaas_plan.layout.projection_shard` (the rule the weights per GPU follow), fused as the
    engines fuse them: column-parallel projections reading the same input into one GEMM
    (``qkv_proj``), likewise the replicated low-rank down-projections (``fused_qkv_a_proj``)."""
    attn, dtype = model.attention[name], model.gemm_dtype("attention")
    fused: dict[tuple[str, int], int] = {}
    for wname, shape in attn.gemm_shapes(model.hidden_size).items():
        cls, n, k = projection_shard(attn, wname, shape, tp)
        key = (cls, k) if cls != "row" else (f"row:{wname}", k)
        fused[key] = fused.get(key, 0) + n
    return [Gemm(f"{name}.{cls.split(':')[-1]}", n, k, dtype) for (cls, k), n in fused.items()]


def attention_core(model: ModelSpec, name: str, tp: int, kv_dtype: str):
    """The attention kernel of one ``name`` layer on one of ``tp`` ranks (DSA's indexer is
    :func:`attention_ops`'s)."""
    a = model.attention[name]
    if isinstance(a, MLA):
        return LatentAttention(f"{name}.mla", math.ceil(a.num_heads / tp), a.kv_lora_rank, a.qk_rope_head_dim,
                               a.qk_nope_head_dim, a.v_head_dim, a.index_topk if isinstance(a, DSA) else None)
    if isinstance(a, GDN):
        return LinearAttention(f"{name}.gdn", "gdn", math.ceil(a.num_v_heads / tp), a.head_dim_k, a.head_dim_v,
                               math.ceil(a.num_qk_heads / tp))
    if isinstance(a, KDA | Lightning):
        kind = "kda" if isinstance(a, KDA) else "lightning"
        return LinearAttention(f"{name}.{kind}", kind, math.ceil(a.num_heads / tp), a.head_dim, a.head_dim)
    window = a.window_tokens if isinstance(a, SWA) else None
    return SoftmaxAttention(f"{name}.attention", math.ceil(a.num_heads / tp), math.ceil(a.num_kv_heads / tp),
                            a.head_dim_k, window, kv_dtype)


def attention_ops(model: ModelSpec, name: str, tp: int, kv_dtype: str) -> list[Op]:
    """The kernels of one ``name`` layer's attention on one of ``tp`` ranks: the attention core,
    preceded for DSA by its indexer (whole on every rank)."""
    a, core = model.attention[name], attention_core(model, name, tp, kv_dtype)
    if isinstance(a, DSA):
        return [Indexer(f"{name}.indexer", a.index_n_heads, a.index_head_dim, a.index_bytes_per_token), core]
    return [core]


def ffn_ops(model: ModelSpec, layout: Layout) -> tuple[list[Gemm], list[Op]]:
    """The dense FFN of a dense layer, and the ops of an MoE layer (router, shared experts,
    routed experts), per rank. Dense parts split over the attention TP group; experts over
    ``moe_tp x moe_ep``."""
    f, h, tp = model.ffn, model.hidden_size, layout.attn_tp
    dense_dtype = model.gemm_dtype("dense_ffn")
    dense: list[Gemm] = []
    if f.dense_intermediate:
        inter = math.ceil(f.dense_intermediate / tp)
        dense = [Gemm("dense_ffn.gate_up", 2 * inter, h, dense_dtype), Gemm("dense_ffn.down", h, inter, dense_dtype)]
    moe: list[Op] = []
    if f.num_experts:
        moe.append(Gemm("moe.router", f.num_experts, h, model.router_dtype))
        if f.num_shared_experts:
            shared = math.ceil(f.num_shared_experts * f.shared_intermediate / tp)
            moe += [Gemm("moe.shared.gate_up", 2 * shared, h, dense_dtype),
                    Gemm("moe.shared.down", h, shared, dense_dtype)]
        moe.append(MoE("moe.experts", h, f.expert_intermediate, f.experts_per_token, f.num_experts,
                       layout.moe_tp, layout.moe_ep, model.gemm_dtype("experts"), model.moe_routing))
    return dense, moe


def forward_ops(model: ModelSpec, layout: Layout, kv_dtype: str = "bf16", phase: str = "prefill") -> list[Step]:
    """Every op of one forward pass on one rank, with its layer count (see the module docstring)."""
    tp = layout.attn_tp
    counts = model.layer_counts()
    steps: list[Step] = []
    for name, count in counts.items():
        if count:
            steps += [Step(g, count) for g in attention_gemms(model, name, tp)]
            steps += [Step(op, count) for op in attention_ops(model, name, tp, kv_dtype)]
    dense, moe = ffn_ops(model, layout)
    moe_layers = model.ffn.moe_layer_count(model.layers.count)
    steps += [Step(op, model.layers.count - moe_layers) for op in dense]
    steps += [Step(op, moe_layers) for op in moe]
    f = model.ffn
    # one token per attention rank: every message is linear in the tokens a rank holds
    for c in collectives(model, layout, layout.attn_dp, "context" if phase == "prefill" else "generation"):
        if c.after != "moe_combine" or c.op != "all_to_all":
            steps.append(Step(Comm(f"comm.{c.op}.{c.after}", c.op, c.message_bytes, c.ranks, model.hidden_size,
                                   f.experts_per_token, f.num_experts, c.tokens or 1.0), c.count_per_forward))
    lm_dtype = model.gemm_dtype("lm_head")
    steps.append(Step(Gemm("lm_head", math.ceil(model.vocab_size / tp), model.hidden_size, lm_dtype, "head"), 1))
    return steps


@dataclass(frozen=True)
class OpBreakdown:
    """A latency from the kernel model: total seconds, seconds per op family and per op, and
    where each op's time came from (``sources``: op name -> table / transfer / roofline)."""

    total_s: np.ndarray | float
    families: dict[str, np.ndarray | float]
    ops: dict[str, np.ndarray | float]
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def bound(self) -> np.ndarray | str:
        """The op family that takes the most time (per length for arrays)."""
        names = sorted(self.families)
        terms = np.stack(np.broadcast_arrays(*(np.asarray(self.families[n], dtype=float) for n in names)))
        out = np.array(names)[np.argmax(terms, axis=0)]
        return str(out) if out.ndim == 0 else out


def engine_tables(inst: Instance, engine: EngineProfile) -> KernelTables:
    """The kernel tables ``engine`` runs on ``inst``'s GPU: its kernel engine's, at the collected
    versions nearest its own, its MXFP4 experts on the kernel it selects."""
    return kernel_tables(inst.gpu, engine.kernel_engine, engine.kernel_version, mxfp4_moe_kernel=engine.mxfp4_moe_kernel)


def _run(model: ModelSpec, inst: Instance, engine: EngineProfile, work: Work, kv_dtype: str,
         gemm_chunks: Chunks | None = None) -> OpBreakdown:
    """Time every op of ``forward_ops`` for ``work`` and add the engine's per-layer costs."""
    layout = instance_layout(model, inst)
    tables = engine_tables(inst, engine)
    families: dict[str, np.ndarray] = {}
    ops: dict[str, np.ndarray] = {}
    sources: dict[str, str] = {}
    for s in forward_ops(model, layout, kv_dtype, work.phase):
        t = _timed(s.op, tables, work, gemm_chunks)
        layers_s = s.count * t.latency_s
        ops[s.op.name] = ops.get(s.op.name, 0.0) + layers_s
        families[s.op.family] = families.get(s.op.family, 0.0) + layers_s
        sources[s.op.name] = t.source
    layers = model.layers.count
    act = work.rank_tokens if work.phase == "prefill" else np.asarray(float(work.rank_batch))
    families["elementwise"] = (layers * engine.elementwise_passes * act * model.hidden_size * ACTIVATION_BYTES
                               / (inst.gpu.memory_bytes_per_s * inst.gpu.efficiency.memory))
    families["launch"] = np.asarray(layers * engine.layer_launch_s_for(work.phase))
    total = sum(np.broadcast_arrays(*families.values()))
    return OpBreakdown(total, families, ops, sources)


def _timed(op: Op, tables: KernelTables, work: Work, gemm_chunks: Chunks | None) -> OpTime:
    """One op's time; in a chunked prefill the token-linear ops (GEMMs, MoE, collectives) run
    once per chunk of the chunked-prefill size, the attention kernels once over the whole request."""
    if gemm_chunks is None or op.family not in ("gemm", "moe", "comm") or (isinstance(op, Gemm) and op.scope == "head"):
        return op.time(tables, work)
    whole = op.time(tables, gemm_chunks.whole)
    tail = op.time(tables, gemm_chunks.tail)
    return OpTime(gemm_chunks.full * whole.latency_s + np.where(gemm_chunks.has_tail, tail.latency_s, 0.0),
                  whole.source)


def _with_tokens(work: Work, tokens) -> Work:
    t = np.asarray(tokens, dtype=float)
    return Work(work.phase, t, work.batch, t, work.attn_dp, work.every_rank)


@dataclass(frozen=True)
class Chunks:
    """A chunked prefill, worked out once for all its ops: ``whole`` (one full chunk of the
    chunked-prefill size) and ``tail`` (the last partial chunk, at least 1 token) as the work the
    token-linear ops see, ``full`` the number of whole chunks and ``has_tail`` whether a partial
    chunk runs (per length)."""

    whole: Work
    tail: Work
    full: np.ndarray
    has_tail: np.ndarray

    @classmethod
    def of(cls, work: Work, size: float) -> Chunks:
        full, rest = np.floor(work.tokens / size), np.mod(work.tokens, size)
        return cls(_with_tokens(work, size), _with_tokens(work, np.maximum(rest, 1.0)), full, rest > 0)


def prefill_ops(model: ModelSpec, inst: Instance, tokens, engine: EngineProfile, kv_dtype: str = "bf16",
                every_rank: bool = False) -> OpBreakdown:
    """Prefill latency of one request of ``tokens`` tokens (array or scalar) on ``inst``: the
    kernels of every layer, the engine's launch time per layer and per-chunk step overhead, and
    its request overhead. ``every_rank``: each attention-DP rank prefills such a request at once
    (:class:`Work`)."""
    l = np.asarray(tokens, dtype=float)
    size = float(engine.chunked_prefill_tokens_on(inst.gpu))
    work = Work("prefill", l, 1, l, inst.parallel.attn_dp, every_rank)
    b = _run(model, inst, engine, work, kv_dtype, Chunks.of(work, size) if np.any(l > size) else None)
    n_chunks = np.ceil(l / size)
    fam = {**b.families, "overhead": engine.request_overhead_s + n_chunks * engine.step_overhead_s}
    total = b.total_s + fam["overhead"]
    return OpBreakdown(total if l.ndim else float(total), fam, b.ops, b.sources)


def decode_ops(model: ModelSpec, inst: Instance, batch: int, context_tokens, engine: EngineProfile,
               kv_dtype: str = "bf16") -> OpBreakdown:
    """One decode step of ``batch`` requests at ``context_tokens`` each (the step's kernels, the
    engine's per-layer launch in CUDA graphs, and its step overhead)."""
    ctx = np.asarray(context_tokens, dtype=float)
    work = Work("decode", np.asarray(float(batch)), int(batch), ctx, inst.parallel.attn_dp)
    b = _run(model, inst, engine, work, kv_dtype)
    fam = {**b.families, "overhead": engine.step_overhead_s}
    total = b.total_s + engine.step_overhead_s
    return OpBreakdown(total if np.ndim(total) else float(total), fam, b.ops, b.sources)



def mixed_step_ops(model: ModelSpec, inst: Instance, decode_batch: int, decode_context, prefill_tokens,
                   prefill_context, engine: EngineProfile, kv_dtype: str = "bf16") -> OpBreakdown:
    """One engine step of continuous batching (vLLM V1 / SGLang chunked prefill): ``decode_batch``
    requests decoding at ``decode_context`` tokens each plus one prefill chunk of
    ``prefill_tokens`` tokens (array or scalar) whose request already holds ``prefill_context``
    tokens of cache (its prefix). The token-linear ops (GEMMs, MoE, collectives, LM head,
    elementwise passes) run once over every token of the step, the chunk on one attention rank
    beside that rank's share of the decodes; decode attention runs for the batch; the chunk's
    attention is the causal cost of ``prefix + chunk`` tokens less that of ``prefix`` (the chunk's
    queries over all earlier keys). With prefill it launches eagerly; plus the step overhead.
    Without prefill it is :func:`decode_ops`; without decodes and prefix it is the kernels of
    :func:`prefill_ops` for one chunk (no request overhead)."""
    p = np.asarray(prefill_tokens, dtype=float)
    if not np.any(p > 0):
        return decode_ops(model, inst, decode_batch, decode_context, engine, kv_dtype)
    prefix = np.asarray(prefill_context, dtype=float)
    b, dp = int(decode_batch), inst.parallel.attn_dp
    rank_m = math.ceil(b / dp) + p  # the busiest rank: its share of the decodes and the chunk
    tables = engine_tables(inst, engine)
    dec = Work("decode", np.asarray(float(b)), b, np.asarray(decode_context, dtype=float), dp)
    families: dict[str, np.ndarray] = {}
    ops: dict[str, np.ndarray] = {}
    sources: dict[str, str] = {}
    for s in forward_ops(model, instance_layout(model, inst), kv_dtype, "prefill"):
        op = s.op
        if op.family in ("gemm", "moe", "comm"):
            whole = isinstance(op, MoE) or (isinstance(op, Gemm) and op.scope != "attention")
            t = op.time(tables, Work("prefill", b + p if whole else rank_m, 1, p, dp))
            lat = t.latency_s
        else:
            t = op.time(tables, Work("prefill", prefix + p, 1, prefix + p, dp))
            lat = t.latency_s - np.where(prefix > 0, op.time(tables, Work("prefill", np.maximum(prefix, 1.0), 1,
                                                                            prefix, dp)).latency_s, 0.0)
            if b:
                lat = lat + op.time(tables, dec).latency_s
        ops[op.name] = ops.get(op.name, 0.0) + s.count * lat
        families[op.family] = families.get(op.family, 0.0) + s.count * lat
        sources[op.name] = t.source
    layers = model.layers.count
    families["elementwise"] = (layers * engine.elementwise_passes * rank_m * model.hidden_size * ACTIVATION_BYTES
                               / (inst.gpu.memory_bytes_per_s * inst.gpu.efficiency.memory))
    families["launch"] = np.asarray(layers * engine.layer_launch_s_for("prefill"))
    families["overhead"] = np.asarray(engine.step_overhead_s)
    total = sum(np.broadcast_arrays(*families.values()))
    return OpBreakdown(total if np.ndim(total) else float(total), families, ops, sources)
