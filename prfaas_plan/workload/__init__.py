"""Workloads: what the planner plans for, from the paper's length distribution or a replayed trace.

A :class:`Workload` is a distribution of *uncached* prompt lengths, a mean output length and an
arrival rate. :func:`paper_workload` is the paper's case study; :func:`workload_from_trace` turns
a loaded trace into one by replaying it through a prefix cache. The parts live in submodules, one
idea each, and are re-exported here:

* :mod:`~prfaas_plan.workload.lengths`: :class:`LengthDist` with :class:`TruncatedLogNormal`
  (closed-form moments; :func:`paper_lengths`) and :class:`EmpiricalLengths`;
* :mod:`~prfaas_plan.workload.traces`: :func:`load_trace` for Mooncake JSONL, Azure LLM 2023
  CSV and generic CSV traces;
* :mod:`~prfaas_plan.workload.prefix_cache`: :class:`LRUPrefixCache`, :func:`prefix_cache_replay`,
  :func:`uncached_lengths` and :func:`split_cache_replay` (one cache per cluster; :class:`TraceBlocks`
  prepares a trace once for replays at many thresholds).

Units: token counts are in tokens, times in seconds, rates in requests per second. Every
function is pure; nothing here keeps global state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from prfaas_plan.defaults import PAPER_OUTPUT_TOKENS, PREFIX_BLOCK_TOKENS
from prfaas_plan.errors import InvalidInput
from prfaas_plan.workload.lengths import EmpiricalLengths, LengthDist, TruncatedLogNormal, paper_lengths
from prfaas_plan.workload.prefix_cache import (
    LRUPrefixCache,
    PrefixReplay,
    SplitReplay,
    TraceBlocks,
    prefix_cache_replay,
    split_cache_replay,
    uncached_lengths,
)
from prfaas_plan.workload.traces import TRACE_COLUMNS, load_trace

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "TRACE_COLUMNS", "EmpiricalLengths", "LRUPrefixCache", "LengthDist", "PrefixReplay",
    "SplitReplay", "TraceBlocks", "TruncatedLogNormal", "Workload", "load_trace", "paper_lengths", "paper_workload",
    "prefix_cache_replay", "split_cache_replay", "uncached_lengths", "workload_from_trace",
]


@dataclass(frozen=True)
class Workload:
    """What the planner plans for.

    lengths: distribution of uncached input (prompt) lengths, tokens.
    output_tokens: mean output length, tokens per request.
    rate_rps: mean arrival rate, requests per second (None = not given; the planner maximises it).
    name: a label for reports.
    """

    lengths: LengthDist
    output_tokens: float
    rate_rps: float | None = None
    name: str = "workload"

    def __post_init__(self) -> None:
        if not isinstance(self.lengths, LengthDist):
            raise InvalidInput(f"lengths: {type(self.lengths).__name__} is not a length distribution")
        if not (math.isfinite(self.output_tokens) and self.output_tokens >= 0):
            raise InvalidInput(f"output_tokens: {self.output_tokens!r} must be a finite number of tokens >= 0")
        if self.rate_rps is not None and not (math.isfinite(self.rate_rps) and self.rate_rps > 0):
            raise InvalidInput(f"rate_rps: {self.rate_rps!r} must be a positive request rate (requests/s) or None")


def paper_workload() -> Workload:
    """The paper's case-study workload: :func:`paper_lengths` inputs, 1024 output tokens, no rate."""
    return Workload(paper_lengths(), float(PAPER_OUTPUT_TOKENS), None, "paper")


def workload_from_trace(
    trace: pd.DataFrame | TraceBlocks,
    capacity_blocks: int | None = None,
    name: str | None = None,
    block_tokens: int = PREFIX_BLOCK_TOKENS,
) -> Workload:
    """A workload from a loaded trace (see :func:`load_trace`).

    lengths: empirical uncached input lengths after :func:`prefix_cache_replay` with
        ``capacity_blocks`` (None = unlimited cache, 0 = no caching; traces without hash_ids need 0).
    output_tokens: the trace's mean output length.
    rate_rps: requests / (last arrival - first arrival), or None when all arrive at once.
    name: defaults to the trace file's stem (``trace.attrs['path']``), else ``"trace"``.
    ``trace`` may be a :class:`TraceBlocks` of it, prepared once for this and later replays.
    """
    import numpy as np

    frame = trace.trace if isinstance(trace, TraceBlocks) else trace
    if len(frame) == 0:
        raise InvalidInput("trace: no requests; give a trace with at least one request")
    for column in TRACE_COLUMNS:
        if column not in frame.columns:
            raise InvalidInput(f"trace: no {column!r} column; load traces with load_trace()")
    replay = prefix_cache_replay(trace, capacity_blocks, block_tokens)
    arrival_s = np.asarray(frame["arrival_s"], dtype=float)
    span_s = float(arrival_s.max() - arrival_s.min())
    rate_rps = len(frame) / span_s if span_s > 0 else None
    if name is None:
        name = Path(frame.attrs["path"]).stem if "path" in frame.attrs else "trace"
    return Workload(
        lengths=EmpiricalLengths(replay.uncached_tokens),
        output_tokens=float(np.asarray(frame["output_tokens"], dtype=float).mean()),
        rate_rps=rate_rps,
        name=name,
    )
