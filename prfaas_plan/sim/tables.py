"""Token tables: a length function's values by whole token count, each count evaluated once per run.

The plan's time functions (prefill seconds, KV bytes by uncached tokens) are elementwise numpy
functions, so a value does not depend on the array it is computed in: a table filled on the
distinct counts gives the very values of evaluating every request's count, at a fraction of
the cost (a million prompts hold ~10^5 distinct lengths, and the kernel model costs ~2 us per
length).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import chain

import numpy as np

from prfaas_plan.defaults import PREFIX_BLOCK_TOKENS

LengthFn = Callable[[np.ndarray], np.ndarray]
MAX_TABLE_TOKENS = 1 << 22  # longer prompts are evaluated as they come (a table would take > 32 MiB per function)


class TokenTable:
    """Length functions' values (float64) at whole token counts, computed on first need.

    :meth:`at` gives each function's values at an array of counts (the counts not seen before
    are evaluated together, once); :meth:`as_lists` the tables as lists indexed by count, for
    scalar look-ups in the event loop (NaN where a count was never asked for)."""

    def __init__(self, *fns: LengthFn) -> None:
        self.fns = fns
        self.values = [np.zeros(0) for _ in fns]  # NaN: not evaluated
        self.known = np.zeros(0, dtype=bool)

    def at(self, tokens: np.ndarray) -> list[np.ndarray]:
        """``[fn(tokens) for fn in fns]`` for an array of whole counts >= 0."""
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.size and tokens.max() >= MAX_TABLE_TOKENS:
            return [np.asarray(fn(tokens.astype(float)), dtype=float) for fn in self.fns]
        self._fill(tokens)
        return [values[tokens] for values in self.values]

    def as_lists(self, tokens: np.ndarray) -> list[list[float]]:
        """The tables over counts 0..max(tokens), with every count of ``tokens`` filled in."""
        self._fill(np.asarray(tokens, dtype=np.int64))
        return [values.tolist() for values in self.values]

    def _fill(self, tokens: np.ndarray) -> None:
        """Evaluate the counts of ``tokens`` not seen before (all together, once)."""
        top = int(tokens.max()) + 1 if tokens.size else 0
        if top > self.known.size:
            grow = top - self.known.size
            self.values = [np.concatenate([v, np.full(grow, np.nan)]) for v in self.values]
            self.known = np.concatenate([self.known, np.zeros(grow, dtype=bool)])
        unknown = ~self.known[tokens]
        if unknown.any():  # (distinct counts cost more than the look-up: only on counts not seen before)
            new = distinct(tokens[unknown])
            for fn, values in zip(self.fns, self.values):
                values[new] = np.asarray(fn(new.astype(float)), dtype=float)
            self.known[new] = True


def cached_lengths(input_tokens: np.ndarray, hash_ids: Sequence[Sequence]) -> np.ndarray:
    """Every uncached length a request can prefill under prefix caching: its input minus a hit of
    ``m`` whole blocks, at least one token left (as the engine's look-up caps a hit). A cache holds
    only blocks that requests before it brought, so ``m`` runs up to the request's leading blocks
    that an earlier request also holds (up to all its blocks where the ids are not integers)."""
    counts = np.fromiter(map(len, hash_ids), dtype=np.int64, count=len(hash_ids))
    try:
        flat = np.fromiter(chain.from_iterable(hash_ids), dtype=np.int64, count=int(counts.sum()))
    except (TypeError, ValueError, OverflowError):
        hits = counts
    else:
        hits = _held_before(flat, counts)
    inputs = np.repeat(np.asarray(input_tokens, dtype=np.int64), hits + 1)  # hits of 0..hits whole blocks
    m = np.arange(inputs.size) - np.repeat(np.cumsum(hits + 1) - (hits + 1), hits + 1)
    return distinct(inputs - np.minimum(m * PREFIX_BLOCK_TOKENS, inputs - 1))


def distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` of a 1-d integer array (sorted, each value once), by sorting: numpy 2.x's
    ``np.unique`` hashes instead, ~15x slower on 10^5 token counts."""
    ordered = np.sort(values)
    first = np.ones(ordered.size, dtype=bool)  # each value's first place in the sorted order
    first[1:] = ordered[1:] != ordered[:-1]
    return ordered[first]


def _held_before(flat: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Per request (``counts`` blocks each of the ids ``flat``, in arrival order): how many of its
    leading blocks an earlier request holds too."""
    owner = np.repeat(np.arange(counts.size), counts)
    _, first, inverse = np.unique(flat, return_index=True, return_inverse=True)
    fresh = owner[first][inverse] == owner  # no earlier request holds it
    place = np.arange(flat.size) - np.repeat(np.cumsum(counts) - counts, counts)
    lead = counts.copy()
    np.minimum.at(lead, owner[fresh], place[fresh])  # the place of its first fresh block
    return lead
