"""Tests for prfaas_plan.workload.prefix_cache: the LRU prefix cache and the trace replays.

Expected hits are worked out by hand on tiny traces, by a plain-list LRU written from the
documented rules (slow but obvious), and by a set-based pass over the real Mooncake trace.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prfaas_plan.errors import PlanError
from prfaas_plan.workload import (
    LRUPrefixCache,
    PrefixReplay,
    TraceBlocks,
    load_trace,
    prefix_cache_replay,
    split_cache_replay,
    uncached_lengths,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "traces"
MOONCAKE_FIXTURE = FIXTURES / "mooncake_conversation_rows4183-4212.jsonl"
MOONCAKE_CONVERSATION = Path(__file__).resolve().parents[2] / "shared" / "traces" / "mooncake_conversation.jsonl"
needs_mooncake = pytest.mark.skipif(
    not MOONCAKE_CONVERSATION.is_file(),
    reason=f"real Mooncake trace not present at {MOONCAKE_CONVERSATION}",
)

BLOCK_TOKENS = 512


def _one_line_error(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


def make_trace(requests: list[tuple[int, list[int]]], arrivals_s: list[float] | None = None) -> pd.DataFrame:
    """A hand-made trace from (input_tokens, hash_ids) pairs, arriving 1 s apart by default."""
    return pd.DataFrame(
        {
            "arrival_s": arrivals_s if arrivals_s is not None else [float(i) for i in range(len(requests))],
            "input_tokens": [tokens for tokens, _ in requests],
            "output_tokens": [1] * len(requests),
            "hash_ids": pd.Series([ids for _, ids in requests], dtype=object),
        }
    )


def test_lru_unlimited_hits_and_last_token_rule():
    trace = make_trace([(1500, [1, 2, 3]), (1400, [1, 2, 4]), (1500, [1, 2, 3]), (100, [7])])
    replay = prefix_cache_replay(trace, capacity_blocks=None)
    # B reuses blocks 1, 2 (1024 tokens); C finds all three blocks but must compute its last token.
    assert replay.hit_tokens.tolist() == [0, 1024, 1499, 0]
    assert replay.uncached_tokens.tolist() == [1500, 376, 1, 100]
    assert replay.token_hit_rate == pytest.approx((1024 + 1499) / (1500 + 1400 + 1500 + 100))
    assert replay.request_hit_rate == pytest.approx(2 / 4)
    assert replay.evicted_blocks == 0
    assert isinstance(replay, PrefixReplay)
    np.testing.assert_array_equal(uncached_lengths(trace, None), replay.uncached_tokens)


def test_lru_matches_prefixes_only():
    # B's blocks 2 and 3 are cached, but its first block misses, so nothing is reusable.
    trace = make_trace([(1536, [1, 2, 3]), (1536, [9, 2, 3]), (1536, [1, 5, 3])])
    replay = prefix_cache_replay(trace, capacity_blocks=None)
    assert replay.hit_tokens.tolist() == [0, 0, 512]


def test_lru_evictions_at_capacity_two_blocks():
    trace = make_trace(
        [
            (1024, [1, 2]),  # miss; cache (LRU -> MRU): 2, 1
            (512, [3]),  # miss; 2, 1, 3 -> evict 2 -> 1, 3
            (1024, [1, 2]),  # block 1 hits, block 2 was evicted; 3, 2, 1 -> evict 3 -> 2, 1
            (512, [3]),  # miss (evicted); 2, 1, 3 -> evict 2 -> 1, 3
            (1536, [5, 6, 7]),  # miss; 1, 3, 7, 6, 5 -> evict 1, 3, 7 -> 6, 5 (head kept)
            (1536, [5, 6, 7]),  # blocks 5, 6 hit, 7 misses; 7, 6, 5 -> evict 7
        ]
    )
    replay = prefix_cache_replay(trace, capacity_blocks=2)
    assert replay.hit_tokens.tolist() == [0, 0, 512, 0, 0, 1024]
    assert replay.evicted_blocks == 1 + 1 + 1 + 3 + 1
    unlimited = prefix_cache_replay(trace, capacity_blocks=None)
    assert unlimited.hit_tokens.tolist() == [0, 0, 1023, 511, 0, 1535]


def test_lru_replays_in_arrival_order_and_reports_in_row_order():
    # Row 0 arrives last, so it is the one that hits.
    trace = make_trace([(1024, [1, 2]), (1024, [1, 2])], arrivals_s=[5.0, 1.0])
    replay = prefix_cache_replay(trace, capacity_blocks=None)
    assert replay.hit_tokens.tolist() == [1023, 0]


def test_no_caching_needs_no_hash_ids():
    trace = pd.DataFrame({"arrival_s": [0.0, 1.0], "input_tokens": [10, 20], "output_tokens": [1, 1]})
    replay = prefix_cache_replay(trace, capacity_blocks=0)
    assert replay.uncached_tokens.tolist() == [10, 20]
    assert replay.token_hit_rate == 0.0 and replay.request_hit_rate == 0.0
    with pytest.raises(PlanError) as excinfo:
        prefix_cache_replay(trace, capacity_blocks=None)
    assert "capacity_blocks=0" in _one_line_error(excinfo)
    for bad in (-1, 2.5, True):
        with pytest.raises(PlanError, match=rf"^capacity_blocks: {bad!r} must be a whole number of blocks >= 0"):
            prefix_cache_replay(trace, capacity_blocks=bad)
    with pytest.raises(PlanError, match="^block_tokens: 0 must be a positive whole number of tokens$"):
        prefix_cache_replay(trace, capacity_blocks=0, block_tokens=0)
    with pytest.raises(PlanError, match="^trace: no 'input_tokens' column; load traces with load_trace"):
        prefix_cache_replay(trace.drop(columns="input_tokens"), capacity_blocks=0)
    with pytest.raises(PlanError, match="^trace: input_tokens must be at least 1 token per request$"):
        prefix_cache_replay(trace.assign(input_tokens=[10, 0]), capacity_blocks=0)


@pytest.mark.parametrize("capacity_blocks", [None, 4])
def test_a_frame_without_arrivals_replays_in_row_order_and_blockless_prompts_hit_nothing(capacity_blocks):
    """Without ``arrival_s`` the rows are the arrival order (row 1 hits row 0's two blocks, not the
    reverse); prompts shorter than a block carry no hash ids and hit nothing, also when none has any."""
    rows = make_trace([(1024, [1, 2]), (1100, [1, 2, 3]), (100, [])]).drop(columns="arrival_s")
    assert prefix_cache_replay(rows, capacity_blocks).hit_tokens.tolist() == [0, 1024, 0]
    blockless = make_trace([(100, []), (200, [])])
    assert prefix_cache_replay(blockless, capacity_blocks).hit_tokens.tolist() == [0, 0]


def reference_lru_hit_blocks(hash_ids: list[list[int]], capacity_blocks: int | None) -> list[int]:
    """A plain-list LRU with the same documented rules (slow but obvious)."""
    recency: list[int] = []  # least recently used first
    hits: list[int] = []
    for ids in hash_ids:
        run = 0
        while run < len(ids) and ids[run] in recency:
            run += 1
        hits.append(run)
        for block in reversed(ids):
            if block in recency:
                recency.remove(block)
            recency.append(block)
        while capacity_blocks is not None and len(recency) > capacity_blocks:
            recency.pop(0)
    return hits


@settings(max_examples=200, deadline=None)
@given(
    hash_ids=st.lists(st.lists(st.integers(0, 12), min_size=1, max_size=6, unique=True), min_size=1, max_size=25),
    capacity_blocks=st.one_of(st.none(), st.integers(0, 8)),
)
def test_lru_matches_reference_implementation(hash_ids, capacity_blocks):
    inputs_tokens = [BLOCK_TOKENS * len(ids) for ids in hash_ids]
    trace = make_trace(list(zip(inputs_tokens, hash_ids)))
    replay = prefix_cache_replay(trace, capacity_blocks)
    expected_blocks = np.array(reference_lru_hit_blocks(hash_ids, capacity_blocks))
    expected_hit_tokens = np.minimum(expected_blocks * BLOCK_TOKENS, np.array(inputs_tokens) - 1)
    np.testing.assert_array_equal(replay.hit_tokens, expected_hit_tokens)
    assert np.all(replay.uncached_tokens >= 1)


# --------------------------------------------------------------------------------------------
# The real Mooncake conversation trace
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mooncake_trace() -> pd.DataFrame:
    return load_trace(MOONCAKE_CONVERSATION)


@needs_mooncake
def test_mooncake_conversation_no_caching(mooncake_trace):
    assert len(mooncake_trace) == 12_031
    np.testing.assert_array_equal(uncached_lengths(mooncake_trace, 0), mooncake_trace["input_tokens"].to_numpy())
    # hash_ids cover the prompt in 512-token blocks.
    blocks = mooncake_trace["hash_ids"].map(len).to_numpy()
    np.testing.assert_array_equal(blocks, np.ceil(mooncake_trace["input_tokens"].to_numpy() / BLOCK_TOKENS))


@needs_mooncake
def test_mooncake_conversation_unlimited_cache_hit_rate(mooncake_trace):
    """Bounds from a set-based pass (unlimited cache = every block seen earlier is cached).

    Upper: 512 x (blocks whose hash id appeared in an earlier request) / input tokens, because
    a request can reuse at most its previously seen blocks. Lower: the same for blocks in a
    leading run of previously seen ids, minus 512 per request whose every block was seen (only
    such a request can lose tokens, to the partial last block and the last-token rule).
    """
    seen: set[int] = set()
    seen_blocks = leading_seen_blocks = fully_seen_requests = 0
    for ids in mooncake_trace["hash_ids"]:
        flags = [block in seen for block in ids]
        run = next((i for i, flag in enumerate(flags) if not flag), len(flags))
        seen_blocks += sum(flags)
        leading_seen_blocks += run
        fully_seen_requests += run == len(ids)
        seen.update(ids)
    input_tokens_total = int(mooncake_trace["input_tokens"].sum())
    upper = BLOCK_TOKENS * seen_blocks / input_tokens_total
    lower = BLOCK_TOKENS * (leading_seen_blocks - fully_seen_requests) / input_tokens_total

    replay = prefix_cache_replay(mooncake_trace, capacity_blocks=None)
    assert lower <= replay.token_hit_rate <= upper
    assert 0.30 < replay.token_hit_rate < 0.45  # "substantial": hand pass gives 0.3736..0.3738
    assert np.all(replay.uncached_tokens >= 1)
    assert np.all(replay.uncached_tokens + replay.hit_tokens == mooncake_trace["input_tokens"].to_numpy())


@needs_mooncake
def test_mooncake_conversation_finite_cache_is_monotone(mooncake_trace):
    """LRU keeps the c most recently used blocks, so a bigger cache never hits less."""
    rates = [prefix_cache_replay(mooncake_trace, c).token_hit_rate for c in (0, 1_000, 10_000, 100_000)]
    unlimited = prefix_cache_replay(mooncake_trace, None)
    assert rates == sorted(rates) and rates[0] == 0.0
    unique_blocks = len({b for ids in mooncake_trace["hash_ids"] for b in ids})
    big = prefix_cache_replay(mooncake_trace, unique_blocks)  # never evicts
    assert big.evicted_blocks == 0
    np.testing.assert_array_equal(big.hit_tokens, unlimited.hit_tokens)
    assert rates[-1] <= unlimited.token_hit_rate


# --------------------------------------------------------------------------------------------
# One prefix cache per cluster
# --------------------------------------------------------------------------------------------


def _split_trace():
    path = MOONCAKE_CONVERSATION if MOONCAKE_CONVERSATION.exists() else MOONCAKE_FIXTURE
    return load_trace(path)


def test_split_replay_degenerates_to_one_cache_at_the_extremes():
    trace = _split_trace()
    shared = prefix_cache_replay(trace, None).uncached_tokens
    all_local = split_cache_replay(trace, None, np.inf)
    assert not all_local.remote.any()
    assert np.array_equal(all_local.local_uncached_tokens, shared)
    all_remote = split_cache_replay(trace, None, 0)
    assert all_remote.remote.all()
    assert np.array_equal(all_remote.remote_uncached_tokens, shared)


def test_split_replay_hits_less_than_one_shared_cache():
    trace = _split_trace()
    shared = prefix_cache_replay(trace, None).uncached_tokens
    r = split_cache_replay(trace, None, float(np.median(shared)))
    served = np.where(r.remote, r.remote_uncached_tokens, r.local_uncached_tokens)
    assert 0 < r.remote.mean() < 1
    # each cluster only caches what it prefilled: never more hits than one shared cache
    assert np.all(r.local_uncached_tokens >= shared) and np.all(r.remote_uncached_tokens >= shared)
    assert served.sum() > shared.sum()


def reference_split_hit_blocks(
    hash_ids: list[list[int]], capacity_blocks: int | None, inputs_tokens: list[int], threshold_tokens: float
) -> tuple[list[int], list[int], list[bool]]:
    """Two plain-list LRUs with the documented rules; a request goes remote when its uncached length
    against the local cache exceeds the threshold, and only the cache that prefilled it stores it."""
    recency: tuple[list[int], list[int]] = ([], [])  # least recently used first
    local_hits, remote_hits, remote = [], [], []
    for ids, tokens in zip(hash_ids, inputs_tokens):
        runs = []
        for cache in recency:
            run = 0
            while run < len(ids) and ids[run] in cache:
                run += 1
            runs.append(run)
        goes_remote = tokens - min(runs[0] * BLOCK_TOKENS, tokens - 1) > threshold_tokens
        local_hits.append(runs[0])
        remote_hits.append(runs[1])
        remote.append(goes_remote)
        cache = recency[int(goes_remote)]
        if capacity_blocks != 0:
            for block in reversed(ids):
                if block in cache:
                    cache.remove(block)
                cache.append(block)
            while capacity_blocks is not None and len(cache) > capacity_blocks:
                cache.pop(0)
    return local_hits, remote_hits, remote


@settings(max_examples=100, deadline=None)
@given(
    hash_ids=st.lists(st.lists(st.integers(0, 12), min_size=1, max_size=6, unique=True), min_size=1, max_size=25),
    capacity_blocks=st.one_of(st.none(), st.integers(0, 8)),
    threshold_tokens=st.sampled_from([0.0, 300.0, 700.0, 1500.0, float("inf")]),
    short_tail_tokens=st.integers(0, BLOCK_TOKENS - 1),
)
def test_split_replay_matches_reference_implementation(hash_ids, capacity_blocks, threshold_tokens, short_tail_tokens):
    inputs_tokens = [BLOCK_TOKENS * len(ids) - short_tail_tokens for ids in hash_ids]
    trace = make_trace(list(zip(inputs_tokens, hash_ids)))
    r = split_cache_replay(trace, capacity_blocks, threshold_tokens)
    local_hits, remote_hits, remote = reference_split_hit_blocks(hash_ids, capacity_blocks, inputs_tokens, threshold_tokens)
    inputs = np.array(inputs_tokens)
    np.testing.assert_array_equal(r.local_uncached_tokens, inputs - np.minimum(np.array(local_hits) * BLOCK_TOKENS, inputs - 1))
    np.testing.assert_array_equal(r.remote_uncached_tokens, inputs - np.minimum(np.array(remote_hits) * BLOCK_TOKENS, inputs - 1))
    np.testing.assert_array_equal(r.remote, remote)
    assert r.local_uncached_tokens.dtype == np.int64 and r.remote.dtype == bool


def test_unlimited_cache_counts_blocks_and_never_evicts():
    cache = LRUPrefixCache(None)
    for ids in ([1, 2, 3], [1, 2, 4], [5]):
        cache.insert(ids)
    assert len(cache) == 5 and cache.evicted_blocks == 0 and cache.enabled
    assert cache.hit_blocks([1, 2, 4, 9]) == 3 and cache.hit_blocks([9, 1]) == 0
    off = LRUPrefixCache(0)
    off.insert([1, 2])
    assert len(off) == 0 and off.hit_blocks([1]) == 0 and not off.enabled


def _in_arrival_order(arrivals_s: list[float]) -> list[int]:
    return sorted(range(len(arrivals_s)), key=lambda row: arrivals_s[row])  # sorted() is stable: ties keep rows


@settings(max_examples=100, deadline=None)
@given(
    hash_ids=st.lists(st.lists(st.integers(0, 9), min_size=0, max_size=6), min_size=1, max_size=25),
    arrival_slots=st.data(),
    id_scale=st.sampled_from([1, -1, 10**15]),
    threshold_tokens=st.sampled_from([0.0, 700.0, 1500.0, float("inf")]),
)
def test_unlimited_replays_match_reference_with_repeats_ties_and_sparse_ids(hash_ids, arrival_slots, id_scale,
                                                                           threshold_tokens):
    """The unlimited-cache replays (one vectorised pass over the blocks) against the plain-list
    references, with ids repeated inside a prompt, arrivals out of row order with ties, and ids
    that are negative or far apart (indexed through np.unique rather than used as they are), and
    prompts without blocks."""
    arrivals_s = [float(a) for a in arrival_slots.draw(st.lists(st.integers(0, 3), min_size=len(hash_ids),
                                                               max_size=len(hash_ids)))]
    ids = [[block * id_scale for block in row] for row in hash_ids]
    inputs_tokens = [max(BLOCK_TOKENS * len(row) - 100, 1) for row in ids]  # a prompt without blocks: 1 token
    trace = make_trace(list(zip(inputs_tokens, ids)), arrivals_s)
    order = _in_arrival_order(arrivals_s)
    inputs = np.array(inputs_tokens)

    def to_rows(per_arrival):
        out = np.empty(len(order), dtype=np.int64)
        out[order] = per_arrival
        return out

    shared = to_rows(reference_lru_hit_blocks([ids[r] for r in order], None))
    np.testing.assert_array_equal(prefix_cache_replay(trace, None).hit_tokens,
                                  np.minimum(shared * BLOCK_TOKENS, inputs - 1))
    local, remote_hits, remote = reference_split_hit_blocks([ids[r] for r in order], None,
                                                            [inputs_tokens[r] for r in order], threshold_tokens)
    r = split_cache_replay(trace, None, threshold_tokens)
    np.testing.assert_array_equal(r.local_uncached_tokens, inputs - np.minimum(to_rows(local) * BLOCK_TOKENS, inputs - 1))
    np.testing.assert_array_equal(r.remote_uncached_tokens,
                                  inputs - np.minimum(to_rows(remote_hits) * BLOCK_TOKENS, inputs - 1))
    np.testing.assert_array_equal(r.remote, to_rows(remote).astype(bool))


def test_prepared_trace_replays_like_the_frame_at_every_threshold():
    """One TraceBlocks serves several thresholds (as the planner's fixed-point passes use it) and
    gives what replaying the frame gives; a never-evicting LRU (the sequential replay of both
    caches) agrees with the unlimited cache's vectorised PrfaaS side on the real trace."""
    trace = _split_trace()
    blocks = TraceBlocks(trace)
    unique_blocks = len({b for ids in trace["hash_ids"] for b in ids})
    shared = prefix_cache_replay(trace, None).uncached_tokens
    for threshold in (0.0, float(np.percentile(shared, 30)), float(np.median(shared)), np.inf):
        prepared, fresh = split_cache_replay(blocks, None, threshold), split_cache_replay(trace, None, threshold)
        lru = split_cache_replay(trace, unique_blocks, threshold)
        for name in ("local_uncached_tokens", "remote_uncached_tokens", "remote"):
            np.testing.assert_array_equal(getattr(prepared, name), getattr(fresh, name))
            np.testing.assert_array_equal(getattr(prepared, name), getattr(lru, name))


def test_one_preparation_serves_the_shared_replay_and_then_the_split_ones():
    """The scenario's workload replays the trace through one shared cache on a TraceBlocks and the
    planner's split replays reuse it: every replay, and the workload, equal those made from the frame."""
    from prfaas_plan.workload import workload_from_trace

    trace = _split_trace()
    blocks = TraceBlocks(trace)
    for capacity in (None, 0, 40):
        got, want = prefix_cache_replay(blocks, capacity), prefix_cache_replay(trace, capacity)
        np.testing.assert_array_equal(got.uncached_tokens, want.uncached_tokens)
        np.testing.assert_array_equal(got.hit_tokens, want.hit_tokens)
        assert (got.token_hit_rate, got.request_hit_rate, got.evicted_blocks) == \
            (want.token_hit_rate, want.request_hit_rate, want.evicted_blocks)
    shared = prefix_cache_replay(trace, None).uncached_tokens
    assert shared.min() < shared.max()  # some prompt hit, so the threshold below splits the trace
    for threshold in (float(np.median(shared)), float(np.percentile(shared, 80))):
        prepared, fresh = split_cache_replay(blocks, None, threshold), split_cache_replay(trace, None, threshold)
        assert prepared.remote.any() and not prepared.remote.all()
        for name in ("local_uncached_tokens", "remote_uncached_tokens", "remote"):
            np.testing.assert_array_equal(getattr(prepared, name), getattr(fresh, name))
    from_blocks, from_frame = workload_from_trace(blocks), workload_from_trace(trace)
    np.testing.assert_array_equal(from_blocks.lengths.tokens, from_frame.lengths.tokens)
    assert (from_blocks.output_tokens, from_blocks.rate_rps, from_blocks.name) == \
        (from_frame.output_tokens, from_frame.rate_rps, from_frame.name)


def test_replays_of_the_numpy_trace_are_the_frames():
    """The planner's own trace (read_trace: numpy columns, no pandas) replays as the frame does:
    the shared replay at each capacity, the split replays on a TraceBlocks of it."""
    from prfaas_plan.workload.traces import read_trace

    path = MOONCAKE_CONVERSATION if MOONCAKE_CONVERSATION.exists() else MOONCAKE_FIXTURE
    frame, trace = load_trace(path), read_trace(path)
    for capacity in (None, 0, 40):
        got, want = prefix_cache_replay(trace, capacity), prefix_cache_replay(frame, capacity)
        np.testing.assert_array_equal(got.uncached_tokens, want.uncached_tokens)
        assert (got.token_hit_rate, got.evicted_blocks) == (want.token_hit_rate, want.evicted_blocks)
    assert prefix_cache_replay(trace, None).token_hit_rate > 0.1
    blocks = TraceBlocks(trace)
    threshold = float(np.median(prefix_cache_replay(trace, None).uncached_tokens))
    for capacity in (None, 40):
        got, want = split_cache_replay(blocks, capacity, threshold), split_cache_replay(frame, capacity, threshold)
        assert got.remote.any() and not got.remote.all()
        for name in ("local_uncached_tokens", "remote_uncached_tokens", "remote"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
