"""Cross-datacenter bandwidth: KV throughput per instance (Eq. 1), cluster egress (Eq. 2), the
largest prefill cluster a link can feed, and the prefill:decode ratio that balances them (Eq. 8).

The only home of these formulas: on numbers (:func:`phi_kv_gbps`, :func:`egress_gbps`,
:func:`gpus_on_link`, for tables and reports that already hold S_kv and T_prefill) and on a model
and instance (:func:`kv_throughput_gbps`, :func:`cluster_egress_gbps`, :func:`max_prefill_gpus`).

Gbps = 1e9 bit/s. ``link_efficiency`` is the fraction of a line's nominal rate that multi-stream
TCP actually delivers (measured by ``prfaas-plan bench`` on loopback; 0.9 by default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from prfaas_plan.defaults import DEFAULT_LINK_EFFICIENCY
from prfaas_plan.errors import InvalidInput
from prfaas_plan.hardware import Instance
from prfaas_plan.kvcache import CacheSettings, kv_bytes
from prfaas_plan.model.arch import ModelSpec
from prfaas_plan.perf.latency import decode_capacity, prefill_latency, prefill_time_s
from prfaas_plan.perf.roofline import MeasuredProfile
from prfaas_plan.units import MIB_BYTES, bytes_per_s_to_gbps, format_tokens

if TYPE_CHECKING:
    import pandas as pd


def phi_kv_gbps(kv_bytes, prefill_s):
    """Eq. 1 on numbers: ``Phi_kv = S_kv / T_prefill``, Gbps, from ``kv_bytes`` (bytes) and
    ``prefill_s`` (seconds); scalars or numpy arrays."""
    return bytes_per_s_to_gbps(np.asarray(kv_bytes, dtype=float) / np.asarray(prefill_s, dtype=float))


def egress_gbps(phi_gbps, cluster_gpus: int, gpus_per_instance: int):
    """Eq. 2 on numbers: ``B_out = (N_gpus / gpus_per_instance) * Phi_kv``, Gbps, every instance of
    a ``cluster_gpus``-GPU prefill cluster busy."""
    return cluster_gpus / gpus_per_instance * phi_gbps


def gpus_on_link(phi_gbps, link_gbps: float, link_efficiency: float, gpus_per_instance: int):
    """The most prefill GPUs (whole instances of ``gpus_per_instance``) whose KV streams, ``phi_gbps``
    each instance, fit ``link_gbps * link_efficiency``: ``floor(link * eff / Phi_kv) * gpus``."""
    return (np.floor(link_gbps * link_efficiency / np.asarray(phi_gbps, dtype=float)) * gpus_per_instance).astype(int)


def kv_throughput_gbps(model: ModelSpec, inst: Instance, tokens, settings: CacheSettings | None = None,
                       profile: MeasuredProfile | None = None):
    """Eq. 1: ``Phi_kv(l) = S_kv(l) / T_prefill(l)``, Gbps, for one instance prefilling back to back
    requests of ``tokens`` tokens (the measured profile's T and S_kv when given)."""
    t = prefill_time_s(model, inst, tokens, profile, settings)
    s = kv_bytes(model, tokens, settings) if profile is None or profile.kv_bytes is None else profile.kv_bytes_at(tokens)
    phi = phi_kv_gbps(s, t)
    return phi if np.ndim(phi) else float(phi)


def cluster_egress_gbps(model: ModelSpec, inst: Instance, cluster_gpus: int, tokens,
                        settings: CacheSettings | None = None, profile: MeasuredProfile | None = None):
    """Eq. 2: ``B_out = (N_gpus / gpus_per_instance) * Phi_kv(l)`` in Gbps, every instance busy
    prefilling requests of ``tokens`` tokens."""
    if cluster_gpus <= 0:
        raise InvalidInput("--cluster-gpus: a cluster needs at least 1 GPU")
    return egress_gbps(kv_throughput_gbps(model, inst, tokens, settings, profile), cluster_gpus, inst.gpus)


def max_prefill_gpus(model: ModelSpec, inst: Instance, tokens: int, link_gbps: float,
                     link_efficiency: float = DEFAULT_LINK_EFFICIENCY,
                     settings: CacheSettings | None = None, profile: MeasuredProfile | None = None) -> int:
    """The most GPUs (whole instances) of prefill whose KV stream fits ``link_gbps * efficiency``."""
    if not (0 < link_gbps < float("inf")) or not 0 < link_efficiency <= 1:  # rejects NaN too
        raise InvalidInput("--link-gbps must be positive and the link efficiency in (0, 1]")
    phi = float(kv_throughput_gbps(model, inst, tokens, settings, profile))
    return int(gpus_on_link(phi, link_gbps, link_efficiency, inst.gpus))


@dataclass(frozen=True)
class PDBalance:
    """Eq. 8: decode instances needed per prefill instance so that prefill output equals decode
    capacity, for requests of ``tokens`` input and ``output_tokens`` output tokens."""

    prefill_rps_per_instance: float
    decode_rps_per_instance: float
    decode_per_prefill_instance: float
    decode_gpus_per_prefill_gpu: float
    decode_batch_max: int
    decode_step_s: float


def pd_balance(model: ModelSpec, prefill: Instance, decode: Instance, tokens: int, output_tokens: int,
               tpot_s: float, settings: CacheSettings | None = None,
               profile: MeasuredProfile | None = None) -> PDBalance:
    """Balance one prefill instance's request rate against decode capacity (Eq. 5 and 8). The
    decode context is the prompt plus half the output (the mean over a request's decode)."""
    p_rps = 1.0 / float(prefill_time_s(model, prefill, tokens, profile, settings))
    cap = decode_capacity(model, decode, tokens + output_tokens / 2, tpot_s, settings)
    d_rps = cap.requests_per_s(output_tokens)
    ratio = p_rps / d_rps
    return PDBalance(p_rps, d_rps, ratio, ratio * decode.gpus / prefill.gpus, cap.batch_max, cap.step_s)


def bandwidth_table(models: list[ModelSpec], inst: Instance, contexts: list[int], cluster_gpus: int,
                    link_gbps: float, link_efficiency: float = DEFAULT_LINK_EFFICIENCY,
                    settings: CacheSettings | None = None) -> pd.DataFrame:
    """One row per model and context: S_kv, T_prefill and its bound, Phi_kv (Eq. 1), cluster
    egress (Eq. 2), and the largest prefill cluster the link feeds."""
    import pandas as pd

    rows = []
    lengths = np.asarray(contexts, dtype=float)
    for m in models:
        lat = prefill_latency(m, inst, lengths, settings)
        s = np.asarray(kv_bytes(m, lengths, settings), dtype=float)
        t = np.asarray(lat.total_s, dtype=float)
        phi = phi_kv_gbps(s, t)
        egress = egress_gbps(phi, cluster_gpus, inst.gpus)
        gpus = gpus_on_link(phi, link_gbps, link_efficiency, inst.gpus)
        bounds = np.atleast_1d(lat.bound)
        for i, l in enumerate(contexts):
            rows.append({
                "model": m.id, "context": format_tokens(l), "context_tokens": l,
                "kv_mib": s[i] / MIB_BYTES, "prefill_s": t[i], "bound": str(bounds[i]),
                "phi_kv_gbps": phi[i], "cluster_egress_gbps": egress[i], "max_prefill_gpus_on_link": int(gpus[i]),
            })
    return pd.DataFrame(rows)
