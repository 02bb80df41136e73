"""Per-op latency from measured kernel tables: GEMM, fused MoE, attention, MLA, linear attention, comm.

The tables under ``data/hardware_db/kernels/<gpu id>/`` are reduced from NVIDIA's per-kernel
measurements in the ``aiconfigurator-core`` wheel by ``prfaas-plan bench import-kernels``
(:mod:`prfaas_plan.bench.kernels_import`; provenance in each folder's ``provenance.yaml``). Each
row holds a shape, its measured ``latency_s`` and ``efficiency = roofline_s / latency_s`` where

    roofline_s = max(flops / gemm_peak_flops(dtype), bytes / hbm_bytes_per_s)   (kernels)
    roofline_s = bytes_on_the_link / scaleup_bytes_per_s                        (collectives)

on the measuring GPU, with the FLOP and byte counts of the ``*_cost`` functions below (the importer
and this lookup share them, so a grid point reproduces its measured latency). A lookup
interpolates ``log(efficiency)`` multilinearly in ``log(token axes)`` (m, tokens, batch, isl,
context, message size) and takes the **nearest measured shape in log space** on the other axes
(n, k, hidden, heads, experts, TP/EP, GPUs), then ``latency_s = roofline_s(query) / efficiency``,
so a shape between measured ones keeps its own FLOP and byte counts. Outside the measured token
range: attention (and MLA) beyond its largest length scales by its FLOP law (``isl^2`` causal,
``isl * W`` windowed, linear in the context for decode); every other family holds the efficiency
of the nearest grid edge (said in :attr:`OpTime.source`). A dtype or op with no table falls back
to the roofline with :data:`FALLBACK_COMPUTE_EFFICIENCY` / :data:`FALLBACK_MEMORY_EFFICIENCY`.
MoE tables hold every routing kept (``routing``: :data:`prfaas_plan.vocab.MOE_ROUTINGS`, the
wheel's ``distribution``); a lookup reads its own routing's rows (the roofline fallback has no
routing, its source says so), and the rows of the kernel the engine runs (``moe_kernel``,
:data:`prfaas_plan.vocab.MOE_KERNELS`: its default, or Marlin for MXFP4 experts where the profile
switches it on, :attr:`KernelTables.mxfp4_moe_kernel`).

Engines and versions: ``<gpu>/<engine>-<engine version>/<family>.npz`` hold the tables one engine
version was measured with (H200 keeps every collected SGLang and vLLM version; the other GPUs the
newest of each source). A lookup for engine version V reads, per table, the collected version
nearest V by version tuple (major, minor, patch, post), a tie going to the newer; None reads the
newest (:func:`nearest_version`, :func:`pick_table`). ``OpTime.source`` names the version used.
SGLang's newest tables stand in for any table an engine lacks, and a table measured only with
fp8 KV (SGLang's WideEP MLA) stands in for bf16 (both said in the source) at its measured time:
the query is costed with the kv dtype its rows were measured with, so a stand-in row is never
re-priced with another dtype's cache bytes. A table a measured GPU
lacks (A100 has no MLA or GDN-prefill table) and GPUs without tables (H20, ...) take the nearest
measured GPU's through :mod:`prfaas_plan.perf.transfer` (``basis`` and every source say which).
Resolving a shape (version, nearest measured shape, grid) is cached per shape; a lookup then
costs one ``np.interp`` and its roofline.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from prfaas_plan.data import builtin_dir
from prfaas_plan.errors import InvalidInput
from prfaas_plan.hardware import GPU, load_gpu
from prfaas_plan.model.kinds import LINEAR_ATTN_CHUNK_TOKENS
from prfaas_plan.vocab import GEMM_DTYPES, MOE_KERNELS, MOE_ROUTINGS, MoeKernel, check_choice

Array = np.ndarray
KV_DTYPES: tuple[str, ...] = ("bf16", "fp8")
KERNEL_ENGINES: tuple[str, ...] = ("sglang", "vllm", "trtllm")
LINEAR_KINDS: tuple[str, ...] = ("gdn", "kda", "lightning")

WEIGHT_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp8_block": 1.0, "int4_w4a16": 0.5, "mxfp4_w4a16": 0.5, "mxfp4_w4a8": 0.5,
                "nvfp4": 0.5, "fp32": 4.0}
"""Weight bytes per element by GEMM dtype (block / group scales, under 1-3% of the weights, left out)."""
ACT_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp8_block": 1.0, "int4_w4a16": 2.0, "mxfp4_w4a16": 2.0, "mxfp4_w4a8": 1.0,
             "nvfp4": 0.5, "fp32": 4.0}
"""Activation bytes per element entering a GEMM (W4A16 keeps bf16 activations, W4A8 takes MXFP8, NVFP4
quantises them to FP4); outputs are bf16."""
OUT_BYTES = 2.0
STATE_BYTES = 4.0  # linear-attention recurrent state is fp32 in the fla / sglang kernels
SCORE_BYTES = 4.0  # a DSA indexer's scores are fp32 (DeepGEMM fp8_mqa_logits writes float logits)
DISPATCH_BYTES, COMBINE_BYTES = 1.0, 2.0  # DeepEP dispatches fp8 activations, combines bf16

FALLBACK_COMPUTE_EFFICIENCY = 0.5
"""Fraction of peak FLOP/s assumed for an op with no table: the median efficiency of the measured
H200 bf16 GEMMs at m >= 1K is 0.6-0.8 and of fused MoE 0.3-0.4; 0.5 sits between (a named guess)."""
FALLBACK_MEMORY_EFFICIENCY = 0.8
"""Fraction of HBM (or NVLink) bandwidth assumed for an op with no table: large streaming copies
reach 80-90% of HBM peak on Hopper (NVIDIA's STREAM-like numbers); 0.8 is the low end."""


@dataclass(frozen=True)
class OpTime:
    """Latency of one op (seconds; an array when a token argument was an array) and where it came from."""

    latency_s: float | Array
    source: str


# --------------------------------------------------------------------------------------------
# FLOP and byte counts (shared with the importer): each returns (flops, bytes, peak dtype)
# --------------------------------------------------------------------------------------------


def gemm_cost(m, n, k, dtype: str):
    """[m x k] @ [k x n]: 2mnk FLOPs; bytes = activations m*k + weights k*n (by dtype) + bf16 output m*n."""
    m = np.asarray(m, dtype=float)  # shape terms grouped first: one array op per term on the token axis
    return m * (2.0 * n * k), m * (k * ACT_BYTES[dtype] + n * OUT_BYTES) + k * n * WEIGHT_BYTES[dtype], dtype


def moe_cost(tokens, hidden, inter, topk, experts, moe_tp, moe_ep, dtype: str):
    """Fused gated MoE on one rank, balanced routing: ``tokens * topk / ep`` (token, expert) pairs,
    each 3 GEMMs of ``hidden x inter / tp`` (gate, up, down): 6 * pairs * hidden * inter/tp FLOPs;
    bytes = weights of the experts hit (min(local experts, pairs)) + bf16 tokens in and out. Every
    routing is costed so: a power-law table's efficiency carries what its routing changes."""
    tokens = np.asarray(tokens, dtype=float)
    pairs = tokens * (topk / moe_ep)
    inter_rank = inter / moe_tp
    hit = np.minimum(experts / moe_ep, np.maximum(pairs, 1.0))
    weights = hit * (3.0 * hidden * inter_rank * WEIGHT_BYTES[dtype])
    return pairs * (6.0 * hidden * inter_rank), weights + tokens * (hidden * 2 * OUT_BYTES), dtype


def causal_pairs(length, window):
    """(query, key) pairs of causal attention over ``length`` tokens; a window W > 0 caps each query at W keys."""
    length, w = np.asarray(length, dtype=float), np.asarray(0 if window is None else window, dtype=float)
    capped = w * (w + 1) / 2 + (length - w) * w
    return np.where((w > 0) & (length > w), capped, length * (length + 1) / 2)


def context_attention_cost(batch, isl, heads, kv_heads, head_dim, window, kv_dtype: str):
    """Prefill attention per rank: 4 * batch * heads * head_dim * causal pairs FLOPs (QK^T and PV);
    bytes = bf16 Q and O plus K and V (kv dtype), once each."""
    batch, isl = np.asarray(batch, dtype=float), np.asarray(isl, dtype=float)
    flops = 4 * batch * heads * head_dim * causal_pairs(isl, window)
    kv_b = 1.0 if kv_dtype == "fp8" else 2.0
    return flops, batch * isl * (2 * heads * head_dim * 2 + 2 * kv_heads * head_dim * kv_b), "bf16"


def generation_attention_cost(batch, context, heads, kv_heads, head_dim, window, kv_dtype: str):
    """One decode step per rank: 4 * batch * heads * head_dim * L FLOPs, L = min(context, W);
    bytes = the K and V of L tokens (kv dtype) + bf16 q and o."""
    batch, context = np.asarray(batch, dtype=float), np.asarray(context, dtype=float)
    w = np.asarray(0 if window is None else window, dtype=float)
    span = np.where(w > 0, np.minimum(context, w), context)
    kv_b = 1.0 if kv_dtype == "fp8" else 2.0
    reads = span * 2 * kv_heads * head_dim * kv_b + 2 * heads * head_dim * 2
    return 4 * batch * heads * head_dim * span, batch * reads, "bf16"


def mla_context_cost(batch, isl, heads, qk_nope_dim, qk_rope_dim, v_dim, kv_dtype: str, topk=None):
    """MLA prefill (expanded, MHA-style): 2 * batch * heads * pairs * (qk_nope + qk_rope + v) FLOPs,
    each query over at most ``topk`` keys when a DSA indexer selects them (None: all earlier keys);
    bytes = bf16 Q, K (qk dims) and V, O (v dim) per token and head."""
    batch, isl = np.asarray(batch, dtype=float), np.asarray(isl, dtype=float)
    qk = qk_nope_dim + qk_rope_dim
    flops = 2 * batch * heads * causal_pairs(isl, topk) * (qk + v_dim)
    return flops, batch * isl * heads * (2 * qk + 2 * v_dim) * 2.0, "bf16"


def mla_generation_cost(batch, context, heads, kv_lora_rank, qk_rope_dim, kv_dtype: str):
    """MLA decode (absorbed): 2 * batch * heads * context * (2 * kv_lora + rope) FLOPs; bytes = the
    latent cache (kv_lora + rope per token, kv dtype) + bf16 q and o."""
    batch, context = np.asarray(batch, dtype=float), np.asarray(context, dtype=float)
    kv_b = 1.0 if kv_dtype == "fp8" else 2.0
    flops = 2 * batch * heads * context * (2 * kv_lora_rank + qk_rope_dim)
    reads = context * (kv_lora_rank + qk_rope_dim) * kv_b + heads * (2 * kv_lora_rank + qk_rope_dim) * 2
    return flops, batch * reads, "bf16"


def dsa_indexer_cost(phase: str, batch, tokens, index_heads, index_head_dim, index_bytes_per_token):
    """A DSA lightning indexer over ``batch`` sequences: ``context`` scores each of ``tokens``
    queries against every earlier key (causal pairs), ``generation`` one query against ``tokens``
    cached keys. ``2 * heads * (head_dim + 1)`` FP8 FLOPs per pair (dot products, then the
    weighted sum over heads); bytes = the fp8 queries, the key cache (``index_bytes_per_token``)
    and the fp32 scores, written once and read once by the top-k selection."""
    batch, tokens = np.asarray(batch, dtype=float), np.asarray(tokens, dtype=float)
    pairs = causal_pairs(tokens, None) if phase == "context" else tokens
    queries = tokens if phase == "context" else 1.0
    flops = batch * pairs * (2.0 * index_heads * (index_head_dim + 1))
    keys = tokens * index_bytes_per_token
    return flops, batch * (queries * index_heads * index_head_dim + keys + pairs * 2 * SCORE_BYTES), "fp8"


def linear_attention_cost(phase: str, batch, tokens, heads, head_dim_k, head_dim_v):
    """Chunked linear attention (GDN / KDA) per rank, ``tokens`` per sequence: context FLOPs =
    batch * tokens * heads * (4 dk dv + 2 C (dk + dv)), C = 64 (as :mod:`prfaas_plan.model.kinds`);
    a decode step 4 dk dv per head. Bytes = bf16 q, k, v, o per token + the fp32 state read and written."""
    batch, tokens = np.asarray(batch, dtype=float), np.asarray(tokens, dtype=float)
    dk, dv = head_dim_k, head_dim_v
    state = batch * heads * dk * dv * STATE_BYTES * 2
    if phase == "generation":
        return batch * heads * 4 * dk * dv, state + batch * heads * (2 * dk + 2 * dv) * 2, "bf16"
    per_token = 4 * dk * dv + 2 * LINEAR_ATTN_CHUNK_TOKENS * (dk + dv)
    return batch * tokens * heads * per_token, state + batch * tokens * heads * (2 * dk + 2 * dv) * 2, "bf16"


def all_reduce_cost(message_bytes, gpus):
    """Ring all-reduce: each GPU sends 2 (n - 1) / n of the message over its scale-up link."""
    return 0.0, 2 * (gpus - 1) / gpus * np.asarray(message_bytes, dtype=float), "link"


NET_HOP_LATENCY_S = 5.0e-6
"""Latency of one network hop of NCCL's tree all-reduce with its low-latency protocol, the one it
picks for decode-sized messages: ``hwLat[NET][Tree][LL]`` = 5.0 us in NCCL's tuning model
(https://github.com/NVIDIA/nccl/blob/b6475625fbcaa2c3c0e50eed2fa1255d7514d4a2/src/graph/tuning.cc),
which charges a tree all-reduce ``2 log2(nodes)`` of them beyond its intra-node hops."""


def inter_node_all_reduce_s(message_bytes, nodes: int, gpu: GPU):
    """Seconds an all-reduce over ``nodes`` nodes adds to one node's, hierarchically as NCCL runs
    it: within each node the GPUs reduce-scatter and finally all-gather (one node's all-reduce),
    and in between each GPU all-reduces its ``1 / gpus_per_node`` share with its peers on the other
    nodes over its own NIC: ``2 ceil(log2 nodes)`` network hops (:data:`NET_HOP_LATENCY_S`) plus a
    ring's ``2 (nodes - 1) / nodes`` of the share at ``gpu.nic_bytes_per_s``."""
    share = np.asarray(message_bytes, dtype=float) / (gpu.gpus_per_node or 1)
    hops = 2 * math.ceil(math.log2(nodes))
    return hops * NET_HOP_LATENCY_S + 2 * (nodes - 1) / nodes * share / gpu.nic_bytes_per_s


def all_to_all_cost(tokens, hidden, topk, ep):
    """MoE dispatch (fp8) + combine (bf16) per rank: ``tokens * topk * hidden`` elements each way,
    the (ep - 1) / ep of them that leave the GPU."""
    tokens = np.asarray(tokens, dtype=float)
    return 0.0, tokens * (topk * hidden * (DISPATCH_BYTES + COMBINE_BYTES) * (ep - 1) / ep), "link"


def roofline_s(gpu: GPU, flops, bytes_moved, dtype: str):
    """max(compute, memory) time in seconds; ``dtype == "link"`` costs bytes on the scale-up link."""
    if dtype == "link":
        return np.asarray(bytes_moved, dtype=float) / gpu.scaleup_bytes_per_s
    return np.maximum(np.asarray(flops, dtype=float) / gpu.gemm_peak_flops(dtype),
                      np.asarray(bytes_moved, dtype=float) / gpu.memory_bytes_per_s)


# --------------------------------------------------------------------------------------------
# Table layout: which columns are matched exactly, by nearest neighbour, or interpolated
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableSpec:
    """One table of a family file: ``exact`` columns must match (codes), ``nearest`` ones take the
    nearest measured value in log space, ``axes`` are interpolated; ``length`` is the axis that
    attention extrapolates by its FLOP law (None: hold the edge efficiency)."""

    family: str
    exact: tuple[str, ...]
    nearest: tuple[str, ...]
    axes: tuple[str, ...]
    length: str | None = None

    @property
    def columns(self) -> tuple[str, ...]:
        return (*self.exact, *self.nearest, *self.axes, "latency_s", "efficiency", "kernel")


_ATTN = ("heads", "kv_heads", "head_dim", "window")
_LIN = ("v_heads", "k_heads", "head_dim_k", "head_dim_v")
TABLES: dict[str, TableSpec] = {
    "gemm": TableSpec("gemm", ("dtype",), ("n", "k"), ("m",)),
    "moe": TableSpec("moe", ("dtype", "routing", "moe_kernel"), ("hidden", "inter", "topk", "experts", "moe_tp",
                                                              "moe_ep"), ("tokens",)),
    "context_attention": TableSpec("attention", ("kv_dtype", "windowed"), _ATTN, ("batch", "isl"), "isl"),
    "generation_attention": TableSpec("attention", ("kv_dtype", "windowed"), _ATTN, ("batch", "context"), "context"),
    "mla_context": TableSpec("mla", ("kv_dtype",), ("heads",), ("batch", "isl"), "isl"),
    "mla_generation": TableSpec("mla", ("kv_dtype",), ("heads",), ("batch", "context"), "context"),
    "dsa_indexer_context": TableSpec("dsa", (), ("index_heads", "index_head_dim"), ("batch", "isl"), "isl"),
    "dsa_context": TableSpec("dsa", ("kv_dtype",), ("heads", "qk_nope_dim", "v_dim"), ("batch", "isl"), "isl"),
    "dsa_generation": TableSpec("dsa", ("kv_dtype",), ("heads", "qk_nope_dim", "v_dim"), ("batch", "context"), "context"),
    "gdn_context": TableSpec("linear_attention", (), _LIN, ("batch", "tokens")),
    "gdn_generation": TableSpec("linear_attention", (), _LIN, ("batch",)),
    "kda_context": TableSpec("linear_attention", (), _LIN, ("batch", "tokens")),
    "kda_generation": TableSpec("linear_attention", (), _LIN, ("batch",)),
    "all_reduce": TableSpec("comm", (), ("gpus",), ("message_bytes",)),
    "all_to_all_context": TableSpec("comm", (), ("hidden", "topk", "experts", "ep"), ("tokens",)),
    "all_to_all_generation": TableSpec("comm", (), ("hidden", "topk", "experts", "ep"), ("tokens",)),
}
"""Every table, by name; a family file ``<family>.npz`` stores ``<table>.<column>`` arrays, plus
``<table>.kernel_names`` (the kernel_source of each ``kernel`` code) and ``<table>.engine``."""
CODES: dict[str, tuple[str, ...]] = {"dtype": GEMM_DTYPES, "kv_dtype": KV_DTYPES, "windowed": ("no", "yes"),
                                     "routing": MOE_ROUTINGS, "moe_kernel": MOE_KERNELS}
"""Code columns: the stored integer is the index of the name in this tuple."""


@functools.lru_cache(maxsize=1)
def kernels_dir() -> Path:
    """Folder of the committed kernel tables: ``<gpu id>/<engine>-<engine version>/<family>.npz``."""
    return builtin_dir("prfaas_plan.data.hardware_db") / "kernels"


_VERSION = re.compile(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:\.?post(\d+))?")


@functools.lru_cache(maxsize=256)
def version_key(version: str) -> tuple[int, int, int, int]:
    """(major, minor, patch, post) of an engine version: ``0.5.6.post2`` -> (0, 5, 6, 2); a ``.devN``
    suffix is ignored (``0.1.dev19262`` -> (0, 1, 0, 0))."""
    found = _VERSION.match(version)
    if found is None:
        raise InvalidInput(f"kernel_version: cannot read {version!r}; use a version like 0.5.9")
    return tuple(int(g or 0) for g in found.groups())  # type: ignore[return-value]


def _version_number(version: str) -> int:
    # the version tuple as one number (each later part < 1000): distances compare lexicographically
    major, minor, patch, post = version_key(version)
    return ((major * 1000 + minor) * 1000 + patch) * 1000 + post


def nearest_version(versions, wanted: str | None) -> str:
    """The collected version to use: the newest when ``wanted`` is None, else the one nearest to
    ``wanted`` by version tuple (0.5.9 -> 0.5.10 over 0.5.6.post2); a tie goes to the newer."""
    if wanted is None:
        return max(versions, key=version_key)
    q = _version_number(wanted)
    return min(versions, key=lambda v: (abs(_version_number(v) - q), -_version_number(v)))


@functools.lru_cache(maxsize=16)
def _index(root: str) -> dict[tuple[str, str], tuple[tuple[str, str], ...]]:
    """(gpu id, engine) -> ((engine version, folder), ...) of every ``<gpu>/<engine>-<version>/``
    folder of ``root`` that has a provenance.yaml."""
    out: dict[tuple[str, str], list[tuple[str, str]]] = {}
    base = Path(root)
    for gpu_dir in sorted(base.iterdir()) if base.is_dir() else ():
        for folder in sorted(gpu_dir.iterdir()) if gpu_dir.is_dir() else ():
            engine, _, version = folder.name.partition("-")
            if engine in KERNEL_ENGINES and version and (folder / "provenance.yaml").is_file():
                out.setdefault((gpu_dir.name, engine), []).append((version, str(folder)))
    return {key: tuple(found) for key, found in out.items()}


def measured_gpus(root: str | Path | None = None) -> tuple[str, ...]:
    """Ids of the GPUs that have kernel tables."""
    return tuple(sorted({gpu for gpu, _ in _index(str(root if root is not None else kernels_dir()))}))


def engine_versions(gpu_id: str, engine: str, root: str | Path | None = None) -> dict[str, str]:
    """Collected versions of ``engine`` on ``gpu_id`` -> their table folders."""
    return dict(_index(str(root if root is not None else kernels_dir())).get((gpu_id, engine), ()))


def table_folder(gpu_id: str, table: str, engine: str = "sglang", version: str | None = None,
                 root: str | Path | None = None) -> str | None:
    """Folder of ``gpu_id``'s ``table`` for ``engine``: the collected version nearest ``version``
    (None: the newest) whose family file holds that table; None when none does (readers of whole
    tables, e.g. the transfer benchmark; lookups use :func:`pick_table`)."""
    spec = TABLES[table]
    have = {v: f for v, f in engine_versions(gpu_id, engine, root).items()
            if f"{table}.latency_s" in (load_family(f, spec.family) or {})}
    return have[nearest_version(have, version)] if have else None


@functools.lru_cache(maxsize=64)
def load_family(folder: str, family: str) -> dict[str, Array] | None:
    """All arrays of ``<folder>/<family>.npz`` (None when the file is absent); checks that every
    table in it has its columns (InvalidInput naming the file and the column)."""
    path = Path(folder) / f"{family}.npz"
    if not path.is_file():
        return None
    with np.load(path, allow_pickle=False) as npz:
        arrays = {name: npz[name] for name in npz.files}
    for table in sorted({name.split(".", 1)[0] for name in arrays}):
        spec = TABLES.get(table)
        if spec is None or spec.family != family:
            raise InvalidInput(f"{path}: unknown kernel table {table!r}; re-import with prfaas-plan bench import-kernels")
        for column in (*spec.columns, "kernel_names", "engine"):
            if f"{table}.{column}" not in arrays:
                raise InvalidInput(f"{path}: kernel table {table!r} has no column {column!r}; "
                                   "re-import it with prfaas-plan bench import-kernels")
    return arrays


def _codes_in(folder: str, table: str, codes: tuple[int, ...]) -> tuple[int, ...] | None:
    """``codes`` when ``folder`` measured them; for kv-dtype tables the other kv dtype's codes when
    only it was measured (MLA module tables hold fp8 KV only); else None."""
    if _measured_keys(folder, table, codes) is not None:
        return codes
    spec = TABLES[table]
    if "kv_dtype" not in spec.exact:
        return None
    at = spec.exact.index("kv_dtype")
    for code in range(len(KV_DTYPES)):
        other = (*codes[:at], code, *codes[at + 1:])
        if _measured_keys(folder, table, other) is not None:
            return other
    return None


@functools.lru_cache(maxsize=2048)
def pick_table(root: str, gpu_id: str, engine: str, version: str | None, table: str,
               codes: tuple[int, ...]) -> tuple[str, tuple[int, ...], tuple[str, ...]] | None:
    """(folder, codes used, notes) of the table a lookup reads: among the collected versions of
    ``engine`` on ``gpu_id`` whose table measured these codes (the kv dtype relaxed, see
    :func:`_codes_in`), the :func:`nearest_version` to ``version``; an engine with no such table
    takes SGLang's newest (said in the notes); None when neither has one."""
    for eng in dict.fromkeys((engine, "sglang")):
        have = {}
        for v, folder in _index(root).get((gpu_id, eng), ()):
            got = _codes_in(folder, table, codes)
            if got is not None:
                have[v] = (folder, got)
        if not have:
            continue
        folder, got = have[nearest_version(have, version if eng == engine else None)]
        notes = []
        if got != codes:
            at = TABLES[table].exact.index("kv_dtype")
            notes.append(f"kv {KV_DTYPES[got[at]]} rows stand in for {KV_DTYPES[codes[at]]}")
        if eng != engine:
            notes.append(f"{eng} tables stand in for {engine}")
        return folder, got, tuple(notes)
    return None


def _log2(values) -> Array:
    """log2 for nearest-neighbour distances; 0 (a full-attention window) maps to 0 like 1."""
    return np.log2(np.maximum(np.asarray(values, dtype=float), 1.0))


def _exact_mask(arrays: dict[str, Array], table: str, exact: tuple[int, ...]) -> Array:
    spec = TABLES[table]
    mask = np.ones(arrays[f"{table}.latency_s"].shape, dtype=bool)
    for column, code in zip(spec.exact, exact):
        mask &= arrays[f"{table}.{column}"] == code
    return mask


@functools.lru_cache(maxsize=256)
def _measured_keys(folder: str, table: str, exact: tuple[int, ...]) -> Array | None:
    """The distinct measured values of the nearest-neighbour columns (one row per shape), or None."""
    arrays = load_family(folder, TABLES[table].family)
    if arrays is None or f"{table}.latency_s" not in arrays:
        return None
    mask = _exact_mask(arrays, table, exact)
    if not mask.any():
        return None
    cols = [arrays[f"{table}.{c}"][mask] for c in TABLES[table].nearest]
    # distinct rows via one integer per row (np.unique(axis=0) sorts a void view, 10x slower)
    inverse = [np.unique(c, return_inverse=True) for c in cols]
    flat = np.ravel_multi_index([inv for _, inv in inverse], [len(u) for u, _ in inverse])
    _, first = np.unique(flat, return_index=True)
    return np.stack([c[first] for c in cols], axis=1).astype(float)


@dataclass(frozen=True)
class _Grid:
    """One measured shape's efficiency over its token axes: sorted log axis values and log(eff)
    on their full product (cells not measured are filled from the nearest measured cell)."""

    axes: tuple[Array, ...]
    log_eff: Array
    kernel: str
    engine: str


@functools.lru_cache(maxsize=1024)
def _grid(folder: str, table: str, exact: tuple[int, ...], key: tuple[float, ...]) -> _Grid:
    spec = TABLES[table]
    arrays = load_family(folder, spec.family)
    mask = _exact_mask(arrays, table, exact)
    for column, value in zip(spec.nearest, key):
        mask &= arrays[f"{table}.{column}"] == value
    raw = [arrays[f"{table}.{a}"][mask].astype(float) for a in spec.axes]
    values = [np.unique(r) for r in raw]
    cells = tuple(np.searchsorted(v, r) for v, r in zip(values, raw))
    log_eff = np.full([len(v) for v in values], np.nan)
    log_eff[cells] = np.log(arrays[f"{table}.efficiency"][mask].astype(float))
    if np.isnan(log_eff).any():  # fill gaps from the nearest measured cell (index distance)
        have = np.argwhere(~np.isnan(log_eff))
        for gap in np.argwhere(np.isnan(log_eff)):
            log_eff[tuple(gap)] = log_eff[tuple(have[np.argmin(((have - gap) ** 2).sum(axis=1))])]
    kernels = arrays[f"{table}.kernel"][mask]
    kernel = str(arrays[f"{table}.kernel_names"][np.bincount(kernels).argmax()])
    return _Grid(tuple(np.log(v) for v in values), log_eff, kernel, str(arrays[f"{table}.engine"]))


def _interpolate(grid: _Grid, points: list[Array]) -> tuple[Array, list[bool], bool]:
    """Multilinear interpolation of log(eff) at ``points`` (one array per axis, linear values,
    broadcasting), clamped to the grid: (log eff, per axis whether any point lies beyond the
    largest value, whether any lies below the smallest). Axes queried at one value collapse the
    grid first, so the usual case (one token array) is a single ``np.interp``."""
    table, rest, over, below, lows = grid.log_eff, [], [], False, {}
    for dim in reversed(range(len(grid.axes))):  # collapse the scalar axes, last first (indices stay valid)
        axis, p = grid.axes[dim], points[dim]
        lo, hi = (float(p), float(p)) if p.ndim == 0 else (float(p.min()), float(p.max()))
        below = below or lo <= 0 or math.log(lo) < axis[0] - 1e-12
        over.insert(0, hi > 0 and math.log(hi) > axis[-1] + 1e-12)
        if p.ndim and lo != hi:
            rest.insert(0, dim)
            lows[dim] = lo
            continue
        x = min(max(math.log(lo) if lo > 0 else axis[0], axis[0]), axis[-1])
        i = 0 if len(axis) == 1 else min(int(np.searchsorted(axis, x, side="right")) - 1, len(axis) - 2)
        t = 0.0 if len(axis) == 1 else (x - axis[i]) / (axis[i + 1] - axis[i])
        lo_row = np.take(table, i, axis=dim)
        table = lo_row if t == 0.0 else lo_row + t * (np.take(table, i + 1, axis=dim) - lo_row)
    shapes = {p.shape for p in points if p.ndim}
    shape = next(iter(shapes), ()) if len(shapes) <= 1 else np.broadcast_shapes(*shapes)
    if not rest:
        return np.full(shape, float(table)), over, below
    logs = {d: np.log(points[d] if lows[d] > 0 else np.maximum(points[d], 1e-300)) for d in rest}
    if len(rest) == 1:
        axis = grid.axes[rest[0]]
        values = np.interp(logs[rest[0]], axis, table) if len(axis) > 1 else np.full(logs[rest[0]].shape, table[0])
        return (values if values.shape == shape else np.broadcast_to(values, shape)), over, below
    weights = []
    for dim in rest:
        axis, xc = grid.axes[dim], np.clip(logs[dim], grid.axes[dim][0], grid.axes[dim][-1])
        if len(axis) == 1:
            weights.append([(np.zeros(xc.shape, dtype=int), np.ones(xc.shape))])
            continue
        i = np.clip(np.searchsorted(axis, xc, side="right") - 1, 0, len(axis) - 2)
        t = (xc - axis[i]) / (axis[i + 1] - axis[i])
        weights.append([(i, 1 - t), (i + 1, t)])
    out = np.zeros(shape)
    for corner in itertools.product(*weights):
        w = np.prod([c[1] for c in corner], axis=0)
        out = out + w * table[tuple(c[0] for c in corner)]
    return out, over, below


@functools.lru_cache(maxsize=16)
def _gpu(gpu_id: str) -> GPU:
    return load_gpu(gpu_id)


def _transfer(family: str, latency_s: Array, work: tuple, src: GPU, dst: GPU, floor_s: float, tiles) -> Array:
    """Map latencies measured on ``src`` to ``dst`` by :mod:`prfaas_plan.perf.transfer`;
    ``tiles(transfer_module)`` gives the output tiles (wave quantisation) or None."""
    try:
        from prfaas_plan.perf import transfer
    except ImportError:  # the transfer method lands separately
        raise InvalidInput(f"gpu {dst.id!r}: no kernel tables (measured: {', '.join(measured_gpus())}) and no "
                           "transfer method installed; use a measured GPU") from None
    flops, bytes_moved, pk = work
    dtype = "bf16" if pk == "link" else pk
    measured = np.asarray(latency_s, dtype=float) > 0  # an empty op (0 tokens) stays 0 s
    moved = transfer.transfer_latency_s(family, np.where(measured, latency_s, floor_s), flops, bytes_moved, src, dst,
                                        dtype, tiles(transfer) if tiles else None, floor_s=floor_s)
    return np.where(measured, moved, 0.0)


@functools.lru_cache(maxsize=256)
def _floor_s(folder: str, table: str, exact: tuple[int, ...]) -> float:
    """Smallest latency measured in ``table`` (these exact codes): the launch floor the transfer keeps."""
    arrays = load_family(folder, TABLES[table].family)
    return float(arrays[f"{table}.latency_s"][_exact_mask(arrays, table, exact)].min())

MEMO_ENTRIES = 65536  # scalar answers kept per KernelTables (a few MB at most)


def _value(x: Array, scalar: bool) -> float | Array:
    return float(x) if scalar else x


@functools.lru_cache(maxsize=8192)
def _resolve(root: str, basis: str, engine: str, version: str | None, table: str, codes: tuple[int, ...],
             query: tuple[float, ...]) -> tuple[str, tuple[int, ...], _Grid, tuple[str, ...], tuple[str, ...]] | None:
    """(folder, codes, grid, notes before, notes after) of one query shape: the table of
    :func:`pick_table`, its nearest measured shape in log space on the ``nearest`` columns (cached
    per shape: a prefill evaluation asks the same shapes again and again); None when no table."""
    picked = pick_table(root, basis, engine, version, table, codes)
    if picked is None:
        return None
    folder, got, notes = picked
    spec = TABLES[table]
    got, stand_in = _same_head_dim(folder, table, got, query)
    keys = _measured_keys(folder, table, got)
    key = tuple(keys[np.argmin(((_log2(keys) - _log2(np.array(query))) ** 2).sum(axis=1))])
    near = (f"nearest {', '.join(f'{c}={v:g}' for c, v in zip(spec.nearest, key))}",) if key != query else ()
    return folder, got, _grid(folder, table, got, key), near, (*notes, *stand_in)


def _same_head_dim(folder: str, table: str, codes: tuple[int, ...], query: tuple[float, ...]
                   ) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """An attention kernel is compiled per head dim, so a kv dtype measured only at other head dims
    (SGLang's FP8-KV prefill tables on Hopper hold head dim 512, 256 windowed) does not time the query's kernel:
    the other kv dtype's rows at the query's head dim stand in when some exist (said in the note).
    ``codes`` unchanged for tables without a kv dtype and a head dim, or when no other fits."""
    spec = TABLES[table]
    if "kv_dtype" not in spec.exact or "head_dim" not in spec.nearest:
        return codes, ()
    at, col = spec.exact.index("kv_dtype"), spec.nearest.index("head_dim")

    def has_head_dim(c: tuple[int, ...]) -> bool:
        keys = _measured_keys(folder, table, c)
        return keys is not None and bool(np.any(keys[:, col] == query[col]))

    if has_head_dim(codes):
        return codes, ()
    for code in range(len(KV_DTYPES)):
        other = (*codes[:at], code, *codes[at + 1:])
        if other != codes and has_head_dim(other):
            return other, (f"kv {KV_DTYPES[code]} rows stand in for {KV_DTYPES[codes[at]]} "
                           f"(no head_dim={query[col]:g} measured in it)",)
    return codes, ()


@dataclass(frozen=True)
class KernelTables:
    """Per-op latencies for one GPU and kernel engine. ``basis`` is the measured GPU whose tables are
    used (``== gpu.id`` when ``gpu`` is measured; else the transfer method maps them to ``gpu``);
    ``folder`` is the tables' root; ``version`` the engine version wanted (None: the newest
    collected; else per table the nearest collected, :func:`pick_table`); ``mxfp4_moe_kernel`` the
    fused-MoE kernel of MXFP4 (W4A16) experts (a MoeKernel: ``marlin`` where the engine was switched
    to Marlin, vLLM ``VLLM_MXFP4_USE_MARLIN=1``; other dtypes read the default's rows). Token
    arguments (m, tokens, batch, isl, context, message bytes) broadcast as numpy arrays; shape
    arguments are scalars."""

    gpu: GPU
    engine: str
    basis: str
    folder: str
    version: str | None = None
    mxfp4_moe_kernel: MoeKernel = "default"
    memo: dict = field(default_factory=dict, compare=False, repr=False)
    """Scalar lookups already answered, by (table, codes, shape, token values, extra cost args)."""

    def _op(self, table: str, exact: dict[str, str], near: dict[str, float], axes: dict[str, object],
            cost, tiles=None, extra: tuple = ()) -> OpTime:
        """Latency from ``table``: ``cost(**axes) -> (flops, bytes, peak dtype)`` of the query;
        ``tiles(transfer module, **axes)`` its output tiles when transferred to another GPU;
        ``extra`` the arguments ``cost`` reads beyond ``exact`` and ``near`` (the memo key)."""
        values = list(axes.values())
        scalar = all(np.ndim(v) == 0 for v in values)
        if scalar:  # a chunked prefill asks each full-chunk shape once per evaluation: answer it once
            key = (table, *exact.values(), *near.values(), *(float(v) for v in values), *extra)
            hit = self.memo.get(key)
            if hit is None:
                if len(self.memo) >= MEMO_ENTRIES:
                    self.memo.clear()
                hit = self.memo[key] = self._lookup(table, exact, near, axes, cost, tiles, values, True)
            return hit
        if not scalar and all(np.ndim(v) == 0 or (v.flat[0] == v.flat[-1] and np.min(v) == np.max(v)) for v in values):
            # one shape repeated (a chunked prefill's full chunks): time it once, broadcast
            once = self._op(table, exact, near, {a: float(np.ravel(v)[0]) for a, v in axes.items()}, cost, tiles,
                            extra)
            return OpTime(np.full(np.broadcast_shapes(*(np.shape(v) for v in values)), once.latency_s), once.source)
        return self._lookup(table, exact, near, axes, cost, tiles, values, False)

    def _lookup(self, table: str, exact: dict[str, str], near: dict[str, float], axes: dict[str, object],
                cost, tiles, values: list, scalar: bool) -> OpTime:
        """:meth:`_op` without its memo: read the table (or fall back) for one query."""
        points = [np.asarray(v, dtype=float) for v in values]  # not broadcast: a scalar axis collapses the grid
        flops, bytes_moved, pk = cost(**dict(zip(axes, points)))
        spec = TABLES[table]
        codes = tuple(CODES[c].index(exact[c]) for c in spec.exact)
        found = _resolve(self.folder, self.basis, self.engine, self.version, table, codes,
                         tuple(float(near[c]) for c in spec.nearest))
        if found is None:
            return self._elsewhere(table, exact, near, axes, cost, tiles) or \
                self._fallback(table, exact, flops, bytes_moved, pk, scalar)
        folder, got, grid, notes, stand_ins = found
        if got != codes:  # the other kv dtype's rows stand in: the query costed as they were measured
            cost = functools.partial(cost, kv_dtype=KV_DTYPES[got[spec.exact.index("kv_dtype")]])
            flops, bytes_moved, pk = cost(**dict(zip(axes, points)))
        src = self.gpu if self.basis == self.gpu.id else _gpu(self.basis)
        log_eff, over, below = _interpolate(grid, points)
        eff = np.exp(log_eff)
        latency = roofline_s(src, flops, bytes_moved, pk) / eff
        notes = list(notes)
        if spec.length is not None and any(over):  # attention: FLOP law past the grid
            edges = [np.clip(p, math.exp(ax[0]), math.exp(ax[-1])) for p, ax in zip(points, grid.axes)]
            f_edge, b_edge, _ = cost(**dict(zip(axes, edges)))
            scale = np.asarray(flops, dtype=float) / np.maximum(f_edge, 1e-300)
            past = functools.reduce(np.logical_or, [p > e for p, e in zip(points, edges)])
            latency = np.where(past, roofline_s(src, f_edge, b_edge, pk) / eff * scale, latency)
            names = [f"{a} beyond {math.exp(ax[-1]):,.0f}" for a, ax, b in zip(spec.axes, grid.axes, over) if b]
            notes.append(f"{', '.join(names)} by FLOP law")
        elif any(over) or below:
            notes.append("outside the measured range: efficiency held at the grid edge")
        if below:  # no tokens: no kernel
            for p in points:
                latency = np.where(p <= 0, 0.0, latency)
        where = f"table {self.basis} {grid.engine} {grid.kernel}"
        if self.basis != self.gpu.id:
            wave_tiles = (lambda tr: tiles(tr, **dict(zip(axes, points)))) if tiles else None
            latency = _transfer(spec.family, latency, (flops, bytes_moved, pk), src, self.gpu,
                                _floor_s(folder, table, got), wave_tiles)
            where = f"transfer {self.basis}->{self.gpu.id} from {where}"
        return OpTime(_value(latency, scalar), "; ".join([where, *notes, *stand_ins]))

    def _elsewhere(self, table, exact, near, axes, cost, tiles) -> OpTime | None:
        """The op from the nearest other measured GPU that has its table, transferred to this GPU
        (None when no GPU has it or the transfer method is absent)."""
        codes = tuple(CODES[c].index(exact[c]) for c in TABLES[table].exact)
        others = [g for g in measured_gpus(self.folder) if g not in (self.basis, self.gpu.id)
                  and pick_table(self.folder, g, self.engine, self.version, table, codes) is not None]
        if not others:
            return None
        try:
            from prfaas_plan.perf.transfer import nearest_measured
        except ImportError:
            return None
        return KernelTables(self.gpu, self.engine, nearest_measured(self.gpu, others), self.folder, self.version,
                            self.mxfp4_moe_kernel)._op(table, exact, near, axes, cost, tiles)

    def _fallback(self, table: str, exact: dict[str, str], flops, bytes_moved, pk: str, scalar: bool) -> OpTime:
        """Roofline with the named fallback efficiencies, on this GPU, for an op with no table."""
        if pk == "link":
            latency = np.asarray(bytes_moved, dtype=float) / (self.gpu.scaleup_bytes_per_s * FALLBACK_MEMORY_EFFICIENCY)
        else:
            latency = np.maximum(np.asarray(flops, dtype=float) / (self.gpu.gemm_peak_flops(pk) * FALLBACK_COMPUTE_EFFICIENCY),
                                 np.asarray(bytes_moved, dtype=float) / (self.gpu.memory_bytes_per_s * FALLBACK_MEMORY_EFFICIENCY))
        routing = exact.get("routing", "balanced")
        what = " ".join([table, *(v for c, v in exact.items() if c != "routing" and v != "default")])
        note = "" if routing == "balanced" else f"; {routing} routing priced as balanced: the roofline has no routing"
        return OpTime(_value(latency, scalar), f"roofline of {self.gpu.id} (no table for {what}; efficiency "
                                               f"{FALLBACK_COMPUTE_EFFICIENCY} compute / {FALLBACK_MEMORY_EFFICIENCY} "
                                               f"memory, perf.kernels.FALLBACK_*_EFFICIENCY){note}")

    def gemm(self, m_tokens, n: int, k: int, dtype: str) -> OpTime:
        """One GEMM [m x k] @ [k x n] in ``dtype`` (a GemmDtype)."""
        check_choice(dtype, GEMM_DTYPES, "dtype")
        return self._op("gemm", {"dtype": dtype}, {"n": n, "k": k}, {"m": m_tokens},
                        lambda m: gemm_cost(m, n, k, dtype), lambda tr, m: tr.gemm_tiles(m, n))

    def moe(self, tokens, hidden: int, inter: int, topk: int, experts: int, moe_tp: int, moe_ep: int,
            dtype: str, routing: str = "balanced") -> OpTime:
        """Fused MoE on one rank; ``tokens`` entering the layer (before top-k), routed as ``routing``
        (a MoeRouting: the table measured at that token distribution)."""
        check_choice(dtype, GEMM_DTYPES, "dtype")
        check_choice(routing, MOE_ROUTINGS, "moe_routing")
        near = {"hidden": hidden, "inter": inter, "topk": topk, "experts": experts, "moe_tp": moe_tp, "moe_ep": moe_ep}
        kernel = self.mxfp4_moe_kernel if dtype == "mxfp4_w4a16" else "default"
        return self._op("moe", {"dtype": dtype, "routing": routing, "moe_kernel": kernel}, near, {"tokens": tokens},
                        lambda tokens: moe_cost(tokens, hidden, inter, topk, experts, moe_tp, moe_ep, dtype),
                        lambda tr, tokens: tr.moe_tiles(tokens, inter, topk, experts, moe_tp, moe_ep))

    def context_attention(self, batch, isl_tokens, heads: int, kv_heads: int, head_dim: int,
                          window_tokens: int | None, kv_dtype: str) -> OpTime:
        """Prefill attention of ``batch`` sequences of ``isl_tokens``, ``heads`` query heads per rank."""
        check_choice(kv_dtype, KV_DTYPES, "kv_dtype")
        w = int(window_tokens or 0)
        near = {"heads": heads, "kv_heads": kv_heads, "head_dim": head_dim, "window": w}
        return self._op("context_attention", {"kv_dtype": kv_dtype, "windowed": "yes" if w else "no"}, near,
                        {"batch": batch, "isl": isl_tokens},
                        lambda batch, isl, kv_dtype=kv_dtype: context_attention_cost(batch, isl, heads, kv_heads,
                                                                                     head_dim, w, kv_dtype),
                        lambda tr, batch, isl: tr.context_attention_tiles(batch, isl, heads))

    def generation_attention(self, batch, context_tokens, heads: int, kv_heads: int, head_dim: int,
                             window_tokens: int | None, kv_dtype: str) -> OpTime:
        """One decode step of ``batch`` sequences each holding ``context_tokens`` of KV."""
        check_choice(kv_dtype, KV_DTYPES, "kv_dtype")
        w = int(window_tokens or 0)
        near = {"heads": heads, "kv_heads": kv_heads, "head_dim": head_dim, "window": w}
        return self._op("generation_attention", {"kv_dtype": kv_dtype, "windowed": "yes" if w else "no"}, near,
                        {"batch": batch, "context": context_tokens},
                        lambda batch, context, kv_dtype=kv_dtype: generation_attention_cost(
                            batch, context, heads, kv_heads, head_dim, w, kv_dtype))

    def mla_context(self, batch, isl_tokens, heads: int, kv_lora_rank: int, qk_rope_dim: int, qk_nope_dim: int,
                    v_dim: int, kv_dtype: str = "bf16", topk: int | None = None) -> OpTime:
        """MLA prefill, ``heads`` per rank (tables measured at DeepSeek-V3 dims; other dims by their
        roofline); ``topk``: each query attends to at most that many keys (DSA), at the efficiency
        the table measured for dense MLA at the same length (the sparse kernel is not in it)."""
        check_choice(kv_dtype, KV_DTYPES, "kv_dtype")
        return self._op("mla_context", {"kv_dtype": kv_dtype}, {"heads": heads}, {"batch": batch, "isl": isl_tokens},
                        lambda batch, isl, kv_dtype=kv_dtype: mla_context_cost(batch, isl, heads, qk_nope_dim,
                                                                                qk_rope_dim, v_dim, kv_dtype, topk),
                        extra=(qk_nope_dim, qk_rope_dim, v_dim, topk))

    def dsa_context(self, batch, isl_tokens, heads: int, qk_rope_dim: int, qk_nope_dim: int, v_dim: int, topk: int,
                    kv_dtype: str = "bf16") -> OpTime:
        """The attention core of a DSA prefill, ``heads`` per rank, each query over at most ``topk``
        keys: the measured module remainder (``dsa_context``: top-k selection, attention, the eager
        module's launches) at its efficiency against MLA's prefill work over those pairs."""
        check_choice(kv_dtype, KV_DTYPES, "kv_dtype")
        return self._op("dsa_context", {"kv_dtype": kv_dtype}, {"heads": heads, "qk_nope_dim": qk_nope_dim, "v_dim": v_dim},
                        {"batch": batch, "isl": isl_tokens},
                        lambda batch, isl, kv_dtype=kv_dtype: mla_context_cost(batch, isl, heads, qk_nope_dim,
                                                                                qk_rope_dim, v_dim, kv_dtype, topk),
                        extra=(qk_rope_dim, topk))

    def dsa_generation(self, batch, context_tokens, heads: int, kv_lora_rank: int, qk_rope_dim: int, qk_nope_dim: int,
                       v_dim: int, topk: int, kv_dtype: str = "bf16") -> OpTime:
        """The attention core of one DSA decode step of ``batch`` sequences holding ``context_tokens``
        each: the measured module remainder (``dsa_generation``: top-k selection over every key, the
        sparse attention) at its efficiency against MLA's decode work over ``min(context, topk)``."""
        check_choice(kv_dtype, KV_DTYPES, "kv_dtype")
        return self._op("dsa_generation", {"kv_dtype": kv_dtype}, {"heads": heads, "qk_nope_dim": qk_nope_dim,
                                                                    "v_dim": v_dim},
                        {"batch": batch, "context": context_tokens},
                        lambda batch, context, kv_dtype=kv_dtype: mla_generation_cost(
                            batch, np.minimum(context, topk), heads, kv_lora_rank, qk_rope_dim, kv_dtype),
                        extra=(kv_lora_rank, qk_rope_dim, topk))

    def dsa_indexer(self, phase: str, batch, tokens, index_heads: int, index_head_dim: int,
                    index_bytes_per_token: int) -> OpTime:
        """A DSA lightning indexer (:func:`dsa_indexer_cost`): its prefill scores from the measured
        table of DeepGEMM's ``fp8_mqa_logits`` (GLM-5's 32 heads of 128; other shapes by their
        roofline at that efficiency); a decode step by the roofline with the named fallback
        efficiencies, no table measuring the paged kernel alone."""
        check_choice(phase, ("context", "generation"), "phase")

        def cost(batch, isl):
            return dsa_indexer_cost(phase, batch, isl, index_heads, index_head_dim, index_bytes_per_token)

        if phase == "context":
            return self._op("dsa_indexer_context", {}, {"index_heads": index_heads, "index_head_dim": index_head_dim},
                            {"batch": batch, "isl": tokens}, cost, extra=(index_bytes_per_token,))
        flops, moved, pk = cost(batch, tokens)
        return self._fallback("dsa_indexer", {}, flops, moved, pk, all(np.ndim(v) == 0 for v in (batch, tokens)))

    def mla_generation(self, batch, context_tokens, heads: int, kv_lora_rank: int, qk_rope_dim: int,
                       kv_dtype: str = "bf16") -> OpTime:
        """One MLA decode step (absorbed) of ``batch`` sequences of ``context_tokens``."""
        check_choice(kv_dtype, KV_DTYPES, "kv_dtype")
        return self._op("mla_generation", {"kv_dtype": kv_dtype}, {"heads": heads},
                        {"batch": batch, "context": context_tokens},
                        lambda batch, context, kv_dtype=kv_dtype: mla_generation_cost(
                            batch, context, heads, kv_lora_rank, qk_rope_dim, kv_dtype), extra=(kv_lora_rank, qk_rope_dim))

    def linear_attention(self, kind: str, phase: str, batch, tokens, heads: int, head_dim_k: int, head_dim_v: int,
                         k_heads: int | None = None) -> OpTime:
        """Chunked linear attention (conv + recurrence kernels) of ``batch`` sequences of ``tokens``
        each (context) or one decode step (generation); ``heads`` value heads per rank
        (``k_heads`` key heads, default the same)."""
        check_choice(kind, LINEAR_KINDS, "kind")
        check_choice(phase, ("context", "generation"), "phase")
        near = {"v_heads": heads, "k_heads": k_heads or heads, "head_dim_k": head_dim_k, "head_dim_v": head_dim_v}
        axes = {"batch": batch, "tokens": tokens} if phase == "context" else {"batch": batch}

        def cost(batch, tokens=1.0):
            return linear_attention_cost(phase, batch, tokens, heads, head_dim_k, head_dim_v)

        # lightning attention (no table) runs the same chunked structure as GDN: GDN's efficiency, its own roofline
        source = self._op(f"{'gdn' if kind == 'lightning' else kind}_{phase}", {}, near, axes, cost)
        return source if kind != "lightning" else OpTime(source.latency_s, f"{source.source}; gdn table stands in for lightning")

    def all_reduce(self, message_bytes, gpus: int) -> OpTime:
        """All-reduce of a bf16 message of ``message_bytes`` over ``gpus`` GPUs (0 s on one GPU). Over
        more GPUs than a node holds (``gpu.gpus_per_node``) it is the node's all-reduce plus
        :func:`inter_node_all_reduce_s` (the tables measure one node)."""
        if gpus <= 1:
            return OpTime(_value(np.zeros(np.shape(message_bytes)), np.ndim(message_bytes) == 0), "one GPU: no all-reduce")
        per_node = self.gpu.gpus_per_node
        if per_node is not None and gpus > per_node:
            node = self.all_reduce(message_bytes, per_node)
            nodes = math.ceil(gpus / per_node)
            return OpTime(node.latency_s + inter_node_all_reduce_s(message_bytes, nodes, self.gpu),
                          f"{node.source}; + {nodes} nodes over the NIC (NCCL tree latency, ring bandwidth)")
        return self._op("all_reduce", {}, {"gpus": gpus}, {"message_bytes": message_bytes},
                        lambda message_bytes: all_reduce_cost(message_bytes, gpus))

    def all_to_all(self, tokens, hidden: int, topk: int, experts: int, ep: int, phase: str) -> OpTime:
        """MoE dispatch + combine of ``tokens`` per rank over ``ep`` ranks (DeepEP normal for
        context, low-latency for generation); 0 s when ep == 1."""
        check_choice(phase, ("context", "generation"), "phase")
        if ep <= 1:
            return OpTime(_value(np.zeros(np.shape(tokens)), np.ndim(tokens) == 0), "ep 1: no all-to-all")
        near = {"hidden": hidden, "topk": topk, "experts": experts, "ep": ep}
        return self._op(f"all_to_all_{phase}", {}, near, {"tokens": tokens},
                        lambda tokens: all_to_all_cost(tokens, hidden, topk, ep))


def kernel_tables(gpu: GPU, engine: str, version: str | None = None, root: str | Path | None = None,
                  mxfp4_moe_kernel: MoeKernel = "default") -> KernelTables:
    """Kernel tables for ``gpu`` and kernel ``engine`` (sglang, vllm, trtllm) at engine ``version``
    (None: the newest collected; else per table the nearest collected version, tie -> the newer,
    :func:`nearest_version`): its own measured tables when it has them, else the nearest measured
    GPU's (``basis``) through the transfer method. ``root`` overrides the committed tables (tests);
    ``mxfp4_moe_kernel``: :attr:`KernelTables.mxfp4_moe_kernel`."""
    check_choice(engine, KERNEL_ENGINES, "engine")
    check_choice(mxfp4_moe_kernel, MOE_KERNELS, "mxfp4_moe_kernel")
    if version is not None:
        version_key(version)  # an unreadable version is bad input here, not at the first lookup
    folder = str(Path(root) if root is not None else kernels_dir())
    if _is_bundled(gpu):  # one instance per (GPU, engine, version, MXFP4 kernel): its memo serves every evaluation
        return _bundled_tables(gpu.id, engine, version, folder, mxfp4_moe_kernel)
    return _tables(gpu, engine, version, folder, mxfp4_moe_kernel)


def _is_bundled(gpu: GPU) -> bool:
    try:
        return gpu == _gpu(gpu.id)
    except InvalidInput:  # a GPU from a user file, not in hardware_db
        return False


@functools.lru_cache(maxsize=64)
def _bundled_tables(gpu_id: str, engine: str, version: str | None, folder: str, mxfp4_moe_kernel: str) -> KernelTables:
    return _tables(_gpu(gpu_id), engine, version, folder, mxfp4_moe_kernel)


def _tables(gpu: GPU, engine: str, version: str | None, folder: str, mxfp4_moe_kernel: str) -> KernelTables:
    measured = measured_gpus(folder)
    if gpu.id in measured:
        return KernelTables(gpu, engine, gpu.id, folder, version, mxfp4_moe_kernel)
    if not measured:
        raise InvalidInput(f"kernel tables: none in {folder}; run prfaas-plan bench import-kernels")
    try:
        from prfaas_plan.perf.transfer import nearest_measured
    except ImportError:
        raise InvalidInput(f"gpu {gpu.id!r}: no kernel tables (measured: {', '.join(measured)}) and no transfer "
                           "method installed; use a measured GPU") from None
    return KernelTables(gpu, engine, nearest_measured(gpu, measured), folder, version, mxfp4_moe_kernel)


def clear_caches() -> None:
    """Forget every table read and every lookup resolved (after the importer rewrote a tables folder)."""
    for cached in (version_key, _index, load_family, pick_table, _measured_keys, _grid, _floor_s, _resolve,
                   _bundled_tables):
        cached.cache_clear()
