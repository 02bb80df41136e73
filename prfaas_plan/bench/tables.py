"""What ``bench run`` prints: a results file's microbenchmarks, model cases and transfer rows as tables.

Times in ms, rates from the fastest repeat (TFLOP/s, or GB/s for copies). No torch.
"""

from __future__ import annotations

import pandas as pd

from prfaas_plan.bench.micro import FLOPS_PER_TFLOP
from prfaas_plan.units import GB_BYTES, MS_PER_S

_MICRO_SECTIONS = (("attention", "attention"), ("swa", "swa"), ("linear_attention", "linear"))
"""The attention sections of a results file and their labels in the microbenchmark table."""


def model_case_table(results: dict) -> pd.DataFrame:
    """One row per scaled-down model prefill: role, layer mix, tokens, median/min ms, spread %,
    KV bytes measured vs modelled."""
    return pd.DataFrame([{"case": c["case"], "role": c["role"], "layer_mix": c["layer_mix"], "tokens": c["tokens"],
                          "median_ms": c["median_s"] * MS_PER_S, "min_ms": c["min_s"] * MS_PER_S,
                          "spread_pct": c["spread_pct"], "kv_bytes_measured": c["kv_bytes_measured"],
                          "kv_bytes_model": c["kv_bytes_model"], "kv_match": c["kv_match"]} for c in results["models"]])


def _timing_row(test: str, record: dict, rate: float, unit: str) -> dict:
    """One microbenchmark row: median/min ms, spread %, and a rate in ``unit``."""
    return {"test": test, "median_ms": record["median_s"] * MS_PER_S, "min_ms": record["min_s"] * MS_PER_S,
            "spread_pct": record["spread_pct"], "rate": rate, "unit": unit}


def micro_table(results: dict) -> pd.DataFrame:
    """One row per microbenchmark (GEMMs, attention kinds, copies), rate from the fastest repeat."""
    rows = [_timing_row(f"gemm {g['m']}x{g['k']}x{g['n']} {g['dtype']}", g, g["flops"] / g["min_s"] / FLOPS_PER_TFLOP,
                        "TFLOP/s") for g in results["gemm"]]
    for key, label in _MICRO_SECTIONS:
        for a in results[key]:
            extra = f" {a['flavour']}" if key == "linear_attention" else ""
            rows.append(_timing_row(f"{label}{extra} {a['tokens']} tok", a,
                                    a["flops"] / a["min_s"] / FLOPS_PER_TFLOP, "TFLOP/s"))
    rows += [_timing_row(f"copy {m['size_mib']} MiB", m, m["bytes_moved"] / m["min_s"] / GB_BYTES, "GB/s")
             for m in results["memory"]]
    return pd.DataFrame(rows)


def transfer_table(results: dict) -> pd.DataFrame:
    """One row per connection count of the loopback transfer (bytes, seconds, Gbps)."""
    return pd.DataFrame(results["transfer"]["rows"])
