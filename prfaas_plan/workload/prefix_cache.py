"""Prefix caching: an LRU cache of prompt blocks, and replays of a trace through one or two of them.

A Mooncake request lists its prompt as ``hash_ids``, one per 512-token block; two requests whose
first k ids agree share k blocks of prefix KV cache. :class:`LRUPrefixCache` is the cache (the
simulator runs one per cluster); :func:`prefix_cache_replay` replays a trace through one cache
and :func:`split_cache_replay` through one per cluster, routed by a length threshold, to turn
prompt lengths into the *uncached* lengths the planner plans for; :class:`TraceBlocks` prepares a
trace once for replays at many thresholds. An unlimited cache never evicts, so whether a block
hits depends only on which earlier prompts held it: those replays run vectorised over all blocks
(only the routing, which depends on the local cache's hits, runs request by request). Token
counts are in tokens.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import chain
from typing import TYPE_CHECKING

import numpy as np

from prfaas_plan.defaults import PREFIX_BLOCK_TOKENS
from prfaas_plan.errors import InvalidInput

if TYPE_CHECKING:
    import pandas as pd

    from prfaas_plan.workload.traces import Trace


class LRUPrefixCache:
    """An incremental LRU cache of prefix blocks, keyed by Mooncake ``hash_ids``.

    capacity_blocks: None = unlimited, 0 = caching off (no hits, nothing stored).
    A request's hit is its longest run of *leading* blocks present (a block after a miss does not
    count: its KV depends on everything before it); inserting refreshes a request's blocks tail
    first, so its head ends most recently used and its tail is evicted first (as vLLM frees blocks
    in reverse order); eviction happens after the whole request is inserted. An unlimited cache
    never evicts, so it keeps no recency order (a set).
    """

    __slots__ = ("capacity_blocks", "_blocks", "evicted_blocks")

    def __init__(self, capacity_blocks: int | None) -> None:
        self.capacity_blocks = capacity_blocks
        self._blocks: OrderedDict[int, None] | set[int] = set() if capacity_blocks is None else OrderedDict()
        self.evicted_blocks = 0

    @property
    def enabled(self) -> bool:
        return self.capacity_blocks != 0

    def __len__(self) -> int:
        return len(self._blocks)

    def hit_blocks(self, hash_ids: Sequence[int]) -> int:
        """Number of leading blocks present."""
        blocks = self._blocks
        hits = 0
        for h in hash_ids:
            if h not in blocks:
                break
            hits += 1
        return hits

    def insert(self, hash_ids: Sequence[int]) -> None:
        """Insert or refresh a request's blocks, tail first, then evict least recently used."""
        blocks = self._blocks
        if isinstance(blocks, set):
            blocks.update(hash_ids)
            return
        cap = self.capacity_blocks
        if cap == 0:
            return
        for h in reversed(hash_ids):
            if h in blocks:
                blocks.move_to_end(h)
            else:
                blocks[h] = None
        while len(blocks) > cap:
            blocks.popitem(last=False)
            self.evicted_blocks += 1


@dataclass(frozen=True, eq=False)
class PrefixReplay:
    """Result of replaying a trace through an LRU prefix cache (arrays in the trace's row order).

    uncached_tokens: tokens each request must prefill (input - hit, at least 1), int64.
    hit_tokens: leading tokens each request found in the cache, int64.
    token_hit_rate: sum(hit_tokens) / sum(input_tokens).
    request_hit_rate: fraction of requests with hit_tokens > 0.
    evicted_blocks: blocks the LRU dropped over the replay.
    """

    uncached_tokens: np.ndarray
    hit_tokens: np.ndarray
    token_hit_rate: float
    request_hit_rate: float
    evicted_blocks: int


@dataclass(frozen=True, eq=False)
class SplitReplay:
    """Replay through one prefix cache per cluster, routed by a length threshold.

    local_uncached_tokens: each request's uncached length against the local cluster's cache
        (what the router sees).
    remote_uncached_tokens: its uncached length against the PrfaaS cluster's cache.
    remote: whether it was routed to the PrfaaS cluster (local uncached length > threshold).
    """

    local_uncached_tokens: np.ndarray
    remote_uncached_tokens: np.ndarray
    remote: np.ndarray


def _hash_ids(trace: pd.DataFrame | Trace) -> list[list[int]]:
    if "hash_ids" not in trace.columns:
        source = trace.attrs.get("path", "trace")
        raise InvalidInput(
            f"{source}: no 'hash_ids' column, so prefix caching cannot be replayed; "
            "use a Mooncake trace or pass capacity_blocks=0 (no caching)"
        )
    return list(trace["hash_ids"])


def _arrival_order(trace: pd.DataFrame | Trace) -> list[int]:
    """Row indices in arrival order (ties keep row order)."""
    if "arrival_s" in trace.columns:
        return np.argsort(np.asarray(trace["arrival_s"], dtype=float), kind="stable").tolist()
    return list(range(len(trace)))


def _uncached(input_tokens: np.ndarray, hit_blocks: np.ndarray, block_tokens: int) -> np.ndarray:
    """input - min(hit_blocks * block_tokens, input - 1): the last prompt token is always computed."""
    return input_tokens - np.minimum(hit_blocks * block_tokens, input_tokens - 1)


@dataclass(frozen=True, eq=False)
class TraceBlocks:
    """A trace's prompts as the replays read them, each part worked out once (a plan replays the
    same trace at several thresholds). Per-request lists are in *arrival* order (ties keep row
    order); ``order[i]`` is the row of the i-th arrival. ``_flat`` lists every block of every
    prompt in that order: its code (the hash id itself when the ids are dense non-negative
    integers, as Mooncake's are, else its index among the distinct ids), the arrival index of
    its request, its index in the prompt, and per code the first arrival whose prompt holds it."""

    trace: pd.DataFrame | Trace

    @cached_property
    def input_tokens(self) -> np.ndarray:
        """Prompt tokens per row (int64, row order)."""
        return np.asarray(self.trace["input_tokens"], dtype=np.int64)

    @cached_property
    def order(self) -> list[int]:
        return _arrival_order(self.trace)

    @cached_property
    def rows(self) -> np.ndarray:
        """``order`` as an index array."""
        return np.array(self.order, dtype=np.intp)

    @cached_property
    def tokens(self) -> list[int]:
        """Prompt tokens per arrival, as Python ints (numpy scalars cost ~1 us each in a loop)."""
        return self.input_tokens[self.rows].tolist()

    @cached_property
    def hash_ids(self) -> list[list[int]]:
        """Each arrival's block hash ids (InvalidInput when the trace has none)."""
        rows = _hash_ids(self.trace)
        return [rows[r] for r in self.order]

    @cached_property
    def lens(self) -> np.ndarray:
        """Blocks per arrival (int64)."""
        return np.fromiter(map(len, self.hash_ids), dtype=np.int64, count=len(self.hash_ids))

    @cached_property
    def _flat(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        lens = self.lens
        flat = np.fromiter(chain.from_iterable(self.hash_ids), dtype=np.int64, count=int(lens.sum()))
        if flat.size == 0 or (flat.min() >= 0 and flat.max() < 4 * flat.size):  # dense ids (Mooncake's): their own code
            codes, n_codes = flat, int(flat.max(initial=-1)) + 1
        else:
            unique, codes = np.unique(flat, return_inverse=True)
            codes, n_codes = codes.reshape(-1), unique.size
        pos = np.repeat(np.arange(lens.size), lens)
        offset = np.arange(flat.size) - np.repeat(np.cumsum(lens) - lens, lens)
        return codes, pos, offset, self._first_arrival(codes, pos, n_codes)

    @staticmethod
    def _first_arrival(codes: np.ndarray, pos: np.ndarray, n_codes: int) -> np.ndarray:
        """Per code, the first arrival index among ``pos`` holding it (past the end where none does)."""
        first = np.full(n_codes, np.iinfo(np.int64).max)
        np.minimum.at(first, codes, pos)
        return first

    def leading_hits(self, cached_before: np.ndarray) -> np.ndarray:
        """Hit blocks per arrival: the run of leading blocks with ``cached_before`` true (one bool
        per flat block: it was in the cache when its request arrived)."""
        _, _, offset, _ = self._flat
        lens, hits = self.lens, self.lens.copy()
        blocked = lens > 0
        if blocked.any():  # per prompt, the offset of its first missing block (none missing: past the end)
            miss_offset = np.where(cached_before, np.iinfo(np.int64).max, offset)
            first_miss = np.minimum.reduceat(miss_offset, (np.cumsum(lens) - lens)[blocked])
            hits[blocked] = np.minimum(first_miss, lens[blocked])
        return hits

    def unlimited_hits(self, inserted: np.ndarray | None = None) -> np.ndarray:
        """Hit blocks per arrival against an unlimited cache holding the blocks of every earlier
        arrival with ``inserted`` true (None: every arrival): a block hits when its hash id was in
        an earlier such prompt. No eviction, so the order of insertion does not matter."""
        codes, pos, _, first = self._flat
        if inserted is not None:
            kept = inserted[pos]
            first = self._first_arrival(codes[kept], pos[kept], first.size)
        return self.leading_hits(first[codes] < pos)

    def to_rows(self, per_arrival: list | np.ndarray, dtype: type) -> np.ndarray:
        """A per-arrival sequence as an array in row order."""
        out = np.empty(self.rows.size, dtype=dtype)
        out[self.rows] = per_arrival
        return out


def _routed_local_hits(blocks: TraceBlocks, capacity_blocks: int | None, threshold_tokens: float,
                       block_tokens: int) -> tuple[list[int], list[int] | None, list[bool]]:
    """Replay the arrivals in order: (local hit blocks, PrfaaS hit blocks or None when left to
    :meth:`TraceBlocks.unlimited_hits`, routed remote) per arrival. An unlimited local cache is a
    set updated by the requests kept local; a finite one runs both LRUs."""
    n = len(blocks.tokens)
    local_hits, remote = [0] * n, [False] * n
    if capacity_blocks is None:
        local: set[int] = set()
        one_token_goes_remote = 1 > threshold_tokens  # uncached = max(tokens - hit tokens, 1)
        for i, (ids, tokens) in enumerate(zip(blocks.hash_ids, blocks.tokens)):
            hits = 0
            for h in ids:
                if h not in local:
                    break
                hits += 1
            local_hits[i] = hits
            if tokens - hits * block_tokens > threshold_tokens or one_token_goes_remote:
                remote[i] = True
            else:
                local.update(ids)
        return local_hits, None, remote
    caches, remote_hits = (LRUPrefixCache(capacity_blocks), LRUPrefixCache(capacity_blocks)), [0] * n
    for i, (ids, tokens) in enumerate(zip(blocks.hash_ids, blocks.tokens)):
        hits = local_hits[i] = caches[0].hit_blocks(ids)
        remote_hits[i] = caches[1].hit_blocks(ids)
        routed_remote = remote[i] = tokens - min(hits * block_tokens, tokens - 1) > threshold_tokens
        caches[routed_remote].insert(ids)
    return local_hits, remote_hits, remote


def split_cache_replay(trace: pd.DataFrame | Trace | TraceBlocks, capacity_blocks: int | None, threshold_tokens: float,
                       block_tokens: int = PREFIX_BLOCK_TOKENS) -> SplitReplay:
    """Replay ``trace`` through two LRU caches of ``capacity_blocks`` each, one per cluster: a
    request whose local uncached length exceeds ``threshold_tokens`` is prefilled (and its blocks
    cached) on the PrfaaS cluster, else locally. Each cluster only caches what it prefilled, so
    hit rates are lower than with one shared cache (:func:`prefix_cache_replay`).

    ``trace`` may be a :class:`TraceBlocks` of it, prepared once for many thresholds. With an
    unlimited cache the routing needs only the local cache, replayed in a loop; the PrfaaS hits
    then follow from the routing in one vectorised pass (a block hits when an earlier request
    routed remote held it), equal to replaying that cache alongside."""
    blocks = trace if isinstance(trace, TraceBlocks) else TraceBlocks(trace)
    local_hits, remote_hits, remote = _routed_local_hits(blocks, capacity_blocks, threshold_tokens, block_tokens)
    routed = np.array(remote, dtype=bool)
    remote_blocks = blocks.unlimited_hits(routed) if remote_hits is None else np.array(remote_hits, dtype=np.int64)
    hit_blocks = np.array([blocks.to_rows(local_hits, np.int64), blocks.to_rows(remote_blocks, np.int64)])
    uncached = _uncached(blocks.input_tokens, hit_blocks, block_tokens)
    return SplitReplay(uncached[0], uncached[1], blocks.to_rows(routed, bool))


def _check_replay_args(trace: pd.DataFrame | Trace, capacity_blocks: int | None, block_tokens: int) -> None:
    if capacity_blocks is not None and (
        isinstance(capacity_blocks, bool) or not isinstance(capacity_blocks, (int, np.integer)) or capacity_blocks < 0
    ):
        raise InvalidInput(
            f"capacity_blocks: {capacity_blocks!r} must be a whole number of blocks >= 0, or None for unlimited"
        )
    if isinstance(block_tokens, bool) or not isinstance(block_tokens, (int, np.integer)) or block_tokens < 1:
        raise InvalidInput(f"block_tokens: {block_tokens!r} must be a positive whole number of tokens")
    if "input_tokens" not in trace.columns:
        raise InvalidInput("trace: no 'input_tokens' column; load traces with load_trace()")


def prefix_cache_replay(
    trace: pd.DataFrame | Trace | TraceBlocks, capacity_blocks: int | None, block_tokens: int = PREFIX_BLOCK_TOKENS
) -> PrefixReplay:
    """Replay ``trace`` in arrival order through one LRU cache of ``capacity_blocks`` blocks.

    ``trace`` may be a :class:`TraceBlocks` of it, whose preparation the unlimited replay then
    shares with later replays of the same trace (:func:`split_cache_replay`).

    capacity_blocks: cache size in blocks; ``None`` = unlimited, ``0`` = no caching (then the
        trace needs no ``hash_ids``).
    block_tokens: tokens per block; block i of a request covers tokens
        [block_tokens * i, block_tokens * (i + 1)) of its prompt (Mooncake: 512).

    For each request (ties in ``arrival_s`` keep row order): its hit is the longest run of
    *leading* hash ids present in the cache (a later block found after a miss does not count,
    since KV of a block depends on everything before it). Then all its blocks are inserted or
    refreshed, tail first, so its leading blocks are the most recently used and, when the cache
    overflows, a request's tail blocks are evicted before its head (as vLLM frees blocks in
    reverse order). Eviction happens after the whole request is inserted.

    hit_tokens = min(hit_blocks * block_tokens, input_tokens - 1): a request always computes at
    least its last prompt token (it needs that token's logits to start decoding), so
    uncached_tokens = input_tokens - hit_tokens >= 1.
    """
    blocks = trace if isinstance(trace, TraceBlocks) else None
    trace = trace.trace if isinstance(trace, TraceBlocks) else trace
    _check_replay_args(trace, capacity_blocks, block_tokens)
    input_tokens = np.asarray(trace["input_tokens"], dtype=np.int64)
    if input_tokens.size and input_tokens.min() < 1:
        raise InvalidInput("trace: input_tokens must be at least 1 token per request")
    hit_blocks = np.zeros(input_tokens.size, dtype=np.int64)
    cache = LRUPrefixCache(capacity_blocks)
    if capacity_blocks is None:  # nothing evicted: a block hits when an earlier prompt held it
        blocks = blocks if blocks is not None else TraceBlocks(trace)
        hit_blocks = blocks.to_rows(blocks.unlimited_hits(), np.int64)
    elif cache.enabled:
        hash_ids = _hash_ids(trace)
        for row in _arrival_order(trace):
            hit_blocks[row] = cache.hit_blocks(hash_ids[row])
            cache.insert(hash_ids[row])
    uncached_tokens = _uncached(input_tokens, hit_blocks, block_tokens)
    hit_tokens = input_tokens - uncached_tokens
    total_input_tokens = int(input_tokens.sum())
    return PrefixReplay(
        uncached_tokens=uncached_tokens,
        hit_tokens=hit_tokens,
        token_hit_rate=float(hit_tokens.sum() / total_input_tokens) if total_input_tokens else 0.0,
        request_hit_rate=float(np.mean(hit_tokens > 0)) if hit_tokens.size else 0.0,
        evicted_blocks=cache.evicted_blocks,
    )


def uncached_lengths(
    trace: pd.DataFrame | Trace, capacity_blocks: int | None, block_tokens: int = PREFIX_BLOCK_TOKENS
) -> np.ndarray:
    """Uncached prompt tokens per request (int64, row order); see :func:`prefix_cache_replay`."""
    return prefix_cache_replay(trace, capacity_blocks, block_tokens).uncached_tokens
