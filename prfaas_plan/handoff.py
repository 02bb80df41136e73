"""The KV handoff: from a prefill's end to the decode side holding the request, and the decode
memory a request holds while it is staged there.

One term, shared by the planner (TTFT, decode capacity), the queueing model (as its ``extra_s``)
and the simulator (its link events):

* **Transfer** (layer-wise pipelining): a remote request's transfer of ``bits`` joins the link when
  its first layer is done (prefill start + ``T/L`` for ``L`` layers) and runs at its share ``r`` of
  the link, so it alone would end at ``T/L + bits/r``; the last layer's cache can leave only when
  the prefill ends and takes ``bits / (L r)``. The KV is ready at the later of the two plus half a
  round trip: :func:`kv_ready_s`. With ``r`` constant that is the closed form
  :func:`unhidden_transfer_s`, ``max(x/L, x - T (1 - 1/L)) + rtt/2`` after the prefill ends
  (``x = bits / r``). Local (PD-P) prefills hand over inside the datacenter at no modelled cost.
* **Staging memory**: the decode side reserves a request's KV memory before the bytes arrive, at
  the point its engine profile names (:data:`prfaas_plan.engine.KvReserveAt`): when its prefill
  starts (SGLang), when its transfer starts (vLLM's NIXL connector; for a local prefill, when the
  prefill ends), or only on arrival of the bytes (nothing staged). It holds it until the request is
  admitted to a decode slot: :func:`hold_s`. By Little's law the mean bytes held are the arrival
  rate times ``E[hold x bytes]`` (:func:`held_bytes`), and what is held is not there for running
  requests: :meth:`Staging.batch_max` is the decode batch the rest leaves.

Times are seconds, sizes bits (transfers) or bytes (memory, per GPU of a decode instance), rates
bit/s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from prfaas_plan.engine import KvReserveAt

MIN_LINK_SHARE = 0.05
"""Smallest fraction of the link a transfer is assumed to get when the link is saturated (planner)."""


def link_share(egress_bits_per_s: float, link_bits_per_s: float) -> float:
    """The free share of the link one transfer gets at a mean egress (0-1): ``max(1 - rho, 5%)``."""
    return max(1.0 - egress_bits_per_s / link_bits_per_s, MIN_LINK_SHARE)


def transfer_join_s(prefill_s: float | np.ndarray, n_layers: int) -> float | np.ndarray:
    """Seconds after a prefill starts at which its transfer joins the link (its first layer is done)."""
    return prefill_s / n_layers


def last_layer_s(bits: float | np.ndarray, n_layers: int, rate_bits_per_s: float | np.ndarray) -> float | np.ndarray:
    """Seconds the last layer's share of ``bits`` takes at ``rate_bits_per_s`` after the prefill ends."""
    return bits / n_layers / rate_bits_per_s


def kv_ready_s(prefill_end_s: float, last_layer_done_s: float, transfer_end_s: float, rtt_s: float) -> float:
    """When a remote request's KV is at the decode side: the later of the last layer's share
    (``last_layer_done_s``) and the whole transfer's end, plus half a round trip; never before the
    prefill ends. The simulator calls this at its link events."""
    return max(prefill_end_s, last_layer_done_s, transfer_end_s) + rtt_s / 2


def unhidden_transfer_s(bits: float | np.ndarray, prefill_s: float | np.ndarray, rate_bits_per_s: float, n_layers: int,
                        rtt_s: float) -> float | np.ndarray:
    """The handoff's transfer part, after the prefill ends, at a constant rate (closed form of
    :func:`kv_ready_s`): ``max(x/L, x - T (1 - 1/L)) + rtt/2`` with ``x = bits / rate``; infinite
    on a link of rate 0. Vectorised over ``bits`` and ``prefill_s``."""
    bits, prefill_s = np.asarray(bits, dtype=float), np.asarray(prefill_s, dtype=float)
    if rate_bits_per_s <= 0:
        return np.full(np.broadcast(bits, prefill_s).shape, np.inf)
    x = bits / rate_bits_per_s
    ready = np.maximum(prefill_s + last_layer_s(bits, n_layers, rate_bits_per_s),
                       transfer_join_s(prefill_s, n_layers) + x)
    return ready - prefill_s + rtt_s / 2


def reserve_offset_s(reserve_at: KvReserveAt, remote: bool, prefill_s: float | np.ndarray, n_layers: int) -> float | np.ndarray:
    """Seconds after the prefill starts at which the decode side reserves the request's memory:
    0 at prefill start; at transfer start, the first layer (remote) or the prefill's end (local);
    ``inf`` when nothing is reserved before the bytes arrive."""
    prefill_s = np.asarray(prefill_s, dtype=float)
    if reserve_at == "prefill_start":
        return np.zeros_like(prefill_s)
    if reserve_at == "transfer_start":
        return transfer_join_s(prefill_s, n_layers) if remote else prefill_s
    return np.full_like(prefill_s, np.inf)


def hold_s(reserve_at: KvReserveAt, remote: bool, prefill_s: float | np.ndarray, handoff_s: float | np.ndarray,
           n_layers: int) -> float | np.ndarray:
    """Seconds a request holds staged decode memory before its decode admission (a wait for a
    decode slot not included): from the reservation point to the end of the handoff, i.e.
    ``prefill + handoff - offset``; 0 where nothing is reserved early."""
    until_ready_s = np.asarray(prefill_s, dtype=float) + np.asarray(handoff_s, dtype=float)
    return until_ready_s - np.minimum(reserve_offset_s(reserve_at, remote, prefill_s, n_layers), until_ready_s)


def held_bytes(rate_rps: float, probs: float | np.ndarray, hold_s_: float | np.ndarray, bytes_: float | np.ndarray) -> float:
    """Little's law: mean bytes held at ``rate_rps`` when a request of class ``i`` (probability
    ``probs[i]``) holds ``bytes_[i]`` for ``hold_s_[i]`` seconds."""
    return float(rate_rps * np.sum(np.asarray(probs, dtype=float) * np.asarray(hold_s_, dtype=float)
                                   * np.asarray(bytes_, dtype=float)))


@dataclass(frozen=True)
class Staging:
    """Decode-side staging memory of one decode instance (bytes per GPU: under attention TP every
    GPU holds its share of every request, so one GPU's budget is the instance's).

    reserve_at: when memory is reserved (:data:`prfaas_plan.engine.KvReserveAt`).
    memory_bytes: cache memory per GPU (:func:`prfaas_plan.perf.latency.free_cache_bytes_per_gpu`).
    running_bytes: one running request's cache per GPU at the mean decode context (what sets the
    memory bound of ``BS_max``: :class:`prfaas_plan.perf.latency.DecodeCapacity`).
    batch_max: ``BS_max`` with nothing staged (TPOT and memory bounds).
    staged_bytes: bytes per GPU a staged request holds, by its prompt tokens (its full prompt KV).
    """

    reserve_at: KvReserveAt
    memory_bytes: float
    running_bytes: float
    batch_max: int
    staged_bytes: Callable[[np.ndarray], np.ndarray]

    def batch_max_with(self, held_bytes_per_instance: float) -> int:
        """``BS_max`` when ``held_bytes_per_instance`` (per GPU) are staged: the TPOT bound, or as
        many running requests as the rest of the memory holds (at least 0)."""
        room = self.memory_bytes - held_bytes_per_instance
        return int(max(min(self.batch_max, room // self.running_bytes), 0))
