"""Tables of the model and hardware databases (pandas), for the API and the CLI."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from prfaas_plan.hardware import list_gpus
from prfaas_plan.kvcache import CacheSettings, fixed_state_bytes, kv_bytes_per_token
from prfaas_plan.model.arch import list_model_specs


def list_models(extra_dirs: tuple[Path, ...] = (), settings: CacheSettings | None = None) -> pd.DataFrame:
    """One row per model: layer mix, parameters, cache bytes per token and fixed state bytes."""
    rows = []
    for m in list_model_specs(extra_dirs):
        mix = " + ".join(f"{n} {m.attention[k].kind}" for k, n in m.layer_counts().items())
        rows.append({
            "id": m.id, "name": m.name, "family": m.family, "layers": m.layers.count, "layer_mix": mix,
            "total_params_b": m.total_params / 1e9, "active_params_b": m.active_params / 1e9,
            "gemm_dtypes": m.gemm_dtypes.describe(), "weight_gb": m.weight_bytes().total_bytes / 1e9,
            "max_context_tokens": m.max_context_tokens,
            "kv_bytes_per_token": kv_bytes_per_token(m, settings),
            "fixed_state_bytes": fixed_state_bytes(m, settings),
        })
    return pd.DataFrame(rows)


def list_hardware(extra_dirs: tuple[Path, ...] = ()) -> pd.DataFrame:
    """One row per accelerator: peak FLOP/s, memory, bandwidths, power, price."""
    rows = [{
        "id": g.id, "name": g.name, "bf16_dense_tflops": g.bf16_dense_tflops,
        "fp8_dense_tflops": g.fp8_dense_tflops, "fp4_dense_tflops": g.fp4_dense_tflops, "memory_gib": g.memory_gib,
        "memory_tb_per_s": g.memory_tb_per_s, "scaleup_gb_per_s": g.scaleup_gb_per_s,
        "nic_gbps": g.nic_gbps, "tdp_w": g.tdp_w, "price_usd_per_gpu_hour": g.price_usd_per_gpu_hour,
        "price_date": g.price_date, "efficiency_provenance": g.efficiency.provenance,
    } for g in list_gpus(extra_dirs)]
    return pd.DataFrame(rows)
