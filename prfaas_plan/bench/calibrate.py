"""``prfaas-plan bench calibrate`` and ``bench validate``: a results file (or an observations
YAML) turned into a hardware entry with fitted efficiency factors (:func:`calibrate_results`,
:func:`calibrate_observations`, :class:`Calibration`, :func:`link_table`), and the model's
predictions compared with the held-out cases (:func:`validate_results`,
:func:`median_abs_error_pct`). No torch: this works on any machine.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import re
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from prfaas_plan.bench.micro import FLOPS_PER_TFLOP, MS_PER_S
from prfaas_plan.errors import InvalidInput
from prfaas_plan.model.arch import ModelSpec
from prfaas_plan.units import GB_BYTES, GIB_BYTES, TB_BYTES

MEMORY_STREAM_EFFICIENCY_MEASURED = 1.0
"""Memory efficiency written for a device whose memory bandwidth *is* the measured copy rate
(CPUs, or GPUs without a datasheet entry): streaming reaches what was measured, by construction."""

DEFAULT_COMM_EFFICIENCY = 0.70
"""Collective efficiency written when no collective was measured (single-device harness; the
value does not enter 1-device predictions). Same value as the datasheet entries' default."""

DEFAULT_DECODE_STEP_OVERHEAD_S = 0.003
"""Decode-step overhead written when none was measured (the harness times prefill only)."""

DEFAULT_NOMINAL_LINE_GBPS = 100.0
"""Nominal line rate (Gbps) the loopback transfer is compared with when neither
``--nominal-gbps`` nor a base GPU entry's ``nic_gbps`` says otherwise."""

CPU_PLACEHOLDER_TDP_W = 200.0
"""Power written for a CPU entry unless ``--tdp-w`` is given: a placeholder, not a measurement
(the harness does not read power); the YAML says so."""

CPU_PLACEHOLDER_PRICE_USD_PER_HOUR = 1.0
"""Price per device-hour written for a CPU entry unless ``--price-usd-per-hour`` is given:
a placeholder, not a quote; the YAML says so."""

MEASURED_SOURCE_URL = "https://pytorch.org/docs/stable/benchmark_utils.html"
"""URL recorded as the ``sources`` entry of a measured hardware YAML (the schema wants an http
URL); the note beside it names the results file and its SHA-256, the actual provenance."""

OBSERVATION_FIT_PARAMS = ("gemm", "attention", "prefill_overhead_s")
"""Efficiency factors fitted from an observations YAML by default (linear-attention FLOPs are
too small a share of published end-to-end latencies to identify their efficiency)."""

RESULTS_FIT_PARAMS = ("gemm", "attention", "linear_attention", "prefill_overhead_s")
"""Efficiency factors fitted from a harness results file (its calibration cases include
linear-attention hybrids, so all four are identifiable)."""

STATISTICS = ("min", "median")
"""Per-case timing statistics calibration and validation can use. The default, ``min``, is the
least-disturbed repeat: interference from other processes only ever adds time, so the fastest
repeat is the best estimate of the device's own speed (the median is kept in the results too)."""

DEFAULT_STATISTIC = "min"

FIT_LOWER_START = 1e-3
"""Smallest starting value handed to the least-squares fit for an efficiency factor."""

YAML_SIGNIFICANT_DIGITS = 5
"""Measured and fitted numbers are written to YAML with this many significant digits."""

SHA_SHORT_CHARS = 16
"""Characters of a results file's SHA-256 quoted in provenance strings (the header has all 64)."""


# --------------------------------------------------------------------------------------------
# Calibration (no torch)
# --------------------------------------------------------------------------------------------


def case_seconds(record: dict, statistic: str = DEFAULT_STATISTIC) -> float:
    """The time of one timing record under ``statistic`` ('median' or 'min' of the repeats)."""
    if statistic not in STATISTICS:
        raise InvalidInput(f"--statistic: {statistic!r} is not one of {', '.join(STATISTICS)}")
    return float(record[f"{statistic}_s"])


@dataclass
class Calibration:
    """What ``bench calibrate`` derives from a results file.

    gpu: the complete hardware entry (validated :class:`~prfaas_plan.hardware.GPU`).
    peak_source / memory_source: where peak FLOP/s and memory bandwidth came from.
    micro: efficiencies read directly off the microbenchmarks (the fit's starting point).
    residuals: one row per calibration case (measured, predicted, error %).
    link: one row per connection count (measured Gbps, nominal Gbps, efficiency).
    link_efficiency / link_connections: the best multi-connection efficiency and its count.
    header: comment lines written above the YAML (provenance).
    """

    gpu: Any
    peak_source: str
    memory_source: str
    micro: dict
    residuals: Any
    link: Any
    link_efficiency: float | None
    link_connections: int | None
    nominal_gbps: float
    header: list[str]

    def yaml_text(self) -> str:
        """The hardware YAML: provenance comments, then the entry."""
        import yaml

        entry = _round_floats(self.gpu.model_dump(mode="json", exclude_none=True), YAML_SIGNIFICANT_DIGITS)
        body = yaml.safe_dump(entry, sort_keys=False, width=110)
        return "".join(f"# {line}\n" if line else "#\n" for line in self.header) + body


def _round_floats(obj, digits: int):
    """Round every float in a nested dict/list to ``digits`` significant digits."""
    if isinstance(obj, float):
        return float(f"{obj:.{digits}g}")
    if isinstance(obj, dict):
        return {k: _round_floats(v, digits) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_round_floats(v, digits) for v in obj]
    return obj


def _file_sha256(path: str | Path | None) -> str:
    if not path or not Path(path).is_file():
        return "unknown"
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def match_datasheet_gpu(device_name: str):
    """The ``hardware_db`` entry whose id (or the id's part before a '-') appears in a CUDA device
    name (``NVIDIA H200`` -> h200, ``NVIDIA A100-SXM4-80GB`` -> a100-80g; the longest id wins), or
    None. ``bench calibrate --gpu`` overrides it."""
    from prfaas_plan.hardware import list_gpus

    squashed = device_name.lower().replace(" ", "").replace("-", "")
    hits = [g for g in list_gpus() if g.id.replace("-", "") in squashed or g.id.split("-")[0] in squashed]
    return max(hits, key=lambda g: len(g.id)) if hits else None


def _median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def link_table(results: dict, nominal_gbps: float):
    """Measured loopback Gbps per connection count and the link efficiency each implies,
    ``min(1, measured / nominal)`` (loopback can exceed a real line: then the host is not the limit)."""
    import pandas as pd

    rows = results.get("transfer", {}).get("rows", [])
    return pd.DataFrame([{"connections": int(r["connections"]), "bytes": int(r["bytes"]), "seconds": float(r["seconds"]),
                          "measured_gbps": float(r["gbps"]), "nominal_gbps": float(nominal_gbps),
                          "link_efficiency": min(1.0, float(r["gbps"]) / nominal_gbps)} for r in rows])


def calibrate_results(results: dict, name: str, results_path: str | Path | None = None, base=None,
                      nominal_gbps: float | None = None, params: tuple[str, ...] = RESULTS_FIT_PARAMS,
                      statistic: str = DEFAULT_STATISTIC, tdp_w: float | None = None,
                      price_usd_per_hour: float | None = None) -> Calibration:
    """Build a hardware entry for the measured device.

    Peak FLOP/s: the datasheet's bf16 peak when ``base`` (a :class:`GPU`) is given or the CUDA
    device matches a ``hardware_db`` entry; otherwise the fastest GEMM measured (then the GEMM
    efficiency is relative to what this device's GEMMs reach at best). Memory bandwidth: the copy
    test on the largest buffer (as the bandwidth itself without a datasheet, else as the memory
    efficiency). Efficiency factors ``params``: :func:`prfaas_plan.perf.calibration.fit_prefill` on the
    calibration cases only, started from the microbenchmarks' efficiencies. Link efficiency: the
    transfer test over ``nominal_gbps`` (default: the base entry's NIC, else
    :data:`DEFAULT_NOMINAL_LINE_GBPS`).
    """
    from prfaas_plan.hardware import GPU, Efficiency
    from prfaas_plan.perf.calibration import PrefillObservation, fit_prefill

    if not re_id(name):
        raise InvalidInput(f"--name: {name!r} must be a short id of letters, digits, '-', '_' or '.'")
    info = results["device"]
    if base is None and info["kind"] == "cuda":
        base = match_datasheet_gpu(info.get("name", ""))
    gemm = results.get("gemm") or []
    copies = results.get("memory") or []
    calib = [c for c in results.get("models", []) if c["role"] == "calibration"]
    if not gemm or not copies or not calib:
        raise InvalidInput("calibrate: the results file lacks GEMM, copy or calibration model cases; rerun bench run")
    achieved = [g["flops"] / case_seconds(g, statistic) for g in gemm]
    if base is not None:
        peak_flops = base.peak_flops
        fastest = gemm[int(np.argmax(achieved))]
        peak_source = (f"datasheet ({base.id}: {base.bf16_dense_tflops} TFLOP/s dense bf16); fastest measured GEMM "
                       f"{max(achieved) / FLOPS_PER_TFLOP:.1f} TFLOP/s at {fastest['m']}x{fastest['k']}x{fastest['n']}")
    else:
        i = int(np.argmax(achieved))
        peak_flops = achieved[i]
        g = gemm[i]
        peak_source = (f"fastest measured GEMM: {peak_flops / FLOPS_PER_TFLOP:.4f} TFLOP/s ({g['dtype']}) at "
                       f"{g['m']}x{g['k']}x{g['n']} ({statistic} of {g['repeats']})")
    big = max(copies, key=lambda c: c["size_mib"])
    copy_bytes_per_s = big["bytes_moved"] / case_seconds(big, statistic)
    if base is not None:
        memory_bytes_per_s = base.memory_bytes_per_s
        memory_eff = min(1.0, copy_bytes_per_s / memory_bytes_per_s)
        memory_source = (f"datasheet {base.memory_tb_per_s} TB/s; copy test {copy_bytes_per_s / TB_BYTES:.3f} TB/s "
                         f"(read + write, {big['size_mib']} MiB) -> memory efficiency {memory_eff:.3f}")
    else:
        memory_bytes_per_s = copy_bytes_per_s
        memory_eff = MEMORY_STREAM_EFFICIENCY_MEASURED
        memory_source = f"copy test: {copy_bytes_per_s / GB_BYTES:.2f} GB/s (read + write, {big['size_mib']} MiB)"
    micro = {
        "gemm": _median([g["flops"] / case_seconds(g, statistic) / peak_flops for g in gemm]),
        "attention": _median([a["flops"] / case_seconds(a, statistic) / peak_flops for a in results.get("attention", [])]),
        "swa": _median([a["flops"] / case_seconds(a, statistic) / peak_flops for a in results.get("swa", [])]),
        "linear_attention": _median([a["flops"] / case_seconds(a, statistic) / peak_flops
                                     for a in results.get("linear_attention", [])]),
        "memory": memory_eff,
    }
    base_eff = base.efficiency if base is not None else None
    start = Efficiency(
        gemm=float(np.clip(micro["gemm"], FIT_LOWER_START, 1.0)),
        attention=float(np.clip(np.nan_to_num(micro["attention"], nan=micro["gemm"]), FIT_LOWER_START, 1.0)),
        linear_attention=float(np.clip(np.nan_to_num(micro["linear_attention"], nan=micro["gemm"]), FIT_LOWER_START, 1.0)),
        memory=float(np.clip(memory_eff, FIT_LOWER_START, 1.0)),
        comm=base_eff.comm if base_eff else DEFAULT_COMM_EFFICIENCY,
        prefill_overhead_s=0.0,
        decode_step_overhead_s=base_eff.decode_step_overhead_s if base_eff else DEFAULT_DECODE_STEP_OVERHEAD_S,
        provenance="microbenchmarks (fit start)")
    nominal = float(nominal_gbps or (base.nic_gbps if base is not None else DEFAULT_NOMINAL_LINE_GBPS))
    if nominal <= 0:
        raise InvalidInput("--nominal-gbps: the nominal line rate must be positive")
    today = _dt.date.today()
    if base is not None:
        entry = base.model_dump(mode="json")
        entry.update(id=name, name=f"{base.name} (measured: {info.get('name', '')})", efficiency=start.model_dump())
        entry["sources"] = [*entry["sources"]]
    else:
        entry = {
            "id": name, "name": f"{info.get('name', 'CPU')} ({info.get('threads')} threads, torch {info.get('torch')}, "
                                f"{results['settings']['dtype']})",
            "bf16_dense_tflops": peak_flops / FLOPS_PER_TFLOP, "memory_gib": info.get("memory_bytes", 0) / GIB_BYTES or 1.0,
            "memory_tb_per_s": memory_bytes_per_s / TB_BYTES, "scaleup_gb_per_s": memory_bytes_per_s / GB_BYTES,
            "nic_gbps": nominal, "tdp_w": float(tdp_w or CPU_PLACEHOLDER_TDP_W),
            "price_usd_per_gpu_hour": float(price_usd_per_hour or CPU_PLACEHOLDER_PRICE_USD_PER_HOUR),
            "price_date": today.strftime("%Y-%m"), "efficiency": start.model_dump(), "sources": []}
    sha = _file_sha256(results_path)
    entry["sources"].append({"url": MEASURED_SOURCE_URL,
                             "covers": ["efficiency"] + ([] if base is not None else ["bf16_dense_tflops", "memory_tb_per_s"]),
                             "note": f"measured by prfaas-plan bench run on {results.get('created_utc', '?')}; results "
                                     f"{results_path or '(in memory)'} sha256 {sha[:SHA_SHORT_CHARS]}"})
    gpu_start = GPU.model_validate(entry)
    obs = [PrefillObservation(ModelSpec.model_validate(c["spec"]), gpu_start, 1, int(c["tokens"]),
                              case_seconds(c, statistic), c["case"]) for c in calib]
    cal_models = sorted({c["source_model"] for c in calib})
    cal_lengths = sorted({int(c["tokens"]) for c in calib})
    fitted, rel = fit_prefill(obs, start, tuple(params))
    import pandas as pd

    residuals = pd.DataFrame([{"case": o.label, "tokens": o.tokens, "measured_ms": o.prefill_s * MS_PER_S,
                               "predicted_ms": o.prefill_s * (1 + e) * MS_PER_S, "error_pct": 100 * e}
                              for o, e in zip(obs, rel)])
    link = link_table(results, nominal)
    link_eff = float(link["link_efficiency"].max()) if len(link) else None
    link_conn = int(link.loc[link["link_efficiency"].idxmax(), "connections"]) if len(link) else None
    res_txt = ", ".join(f"{r.case} {r.error_pct:+.0f}%" for r in residuals.itertuples())
    provenance = (f"bench calibrate: {', '.join(params)} fitted (fit_prefill, log least squares) to {len(obs)} "
                  f"calibration prefills of scaled-down {', '.join(cal_models)} at {', '.join(map(str, cal_lengths))} "
                  f"tokens, {statistic} of {results['settings']['repeats']} repeats, results sha256 {sha[:SHA_SHORT_CHARS]}; "
                  f"peak: {peak_source}; memory: {memory_source}")
    fitted = fitted.model_copy(update={"provenance": provenance})
    gpu = GPU.model_validate({**entry, "efficiency": fitted.model_dump()})
    notes = [f"Measured with prfaas-plan bench ({results.get('profile', {}).get('name', '?')}) on {info.get('name')}; "
             f"torch {info.get('torch')}, python {info.get('python')}, {info.get('threads')} threads."]
    if base is None:
        notes.append("bf16_dense_tflops holds the peak of the dtype the harness ran in "
                     f"({results['settings']['dtype']}); scaleup_gb_per_s is the copy bandwidth (no scale-up fabric); "
                     f"nic_gbps is the nominal line rate the transfer test was compared with; tdp_w and price are "
                     f"placeholders unless given on the command line.")
    if link_eff is not None:
        notes.append("Loopback KV transfer: " + ", ".join(f"{r.connections} conn {r.measured_gbps:.1f} Gbps"
                                                          for r in link.itertuples())
                     + f"; link efficiency vs {nominal:g} Gbps nominal = {link_eff:.3f} at {link_conn} connections "
                       f"(use as scenario link.efficiency / --link-efficiency).")
    gpu = gpu.model_copy(update={"notes": " ".join(notes)})
    header = [f"{name}: hardware entry measured by `prfaas-plan bench calibrate`.",
              f"results: {results_path or '(in memory)'} (sha256 {sha}), created {results.get('created_utc')}",
              f"device: {info.get('name')} ({info.get('kind')}), torch {info.get('torch')}, dtype {results['settings']['dtype']}",
              f"peak: {peak_source}", f"memory: {memory_source}",
              "microbenchmark efficiencies (fit start): " + ", ".join(f"{k} {v:.3f}" for k, v in micro.items()),
              f"fitted ({', '.join(params)}) on calibration cases {', '.join(cal_models)} x {cal_lengths} tokens:",
              f"  residuals: {res_txt}"]
    if link_eff is not None:
        header.append(f"link efficiency: {link_eff:.3f} (best of {len(link)} connection counts, {link_conn} connections, "
                      f"nominal {nominal:g} Gbps)")
    return Calibration(gpu, peak_source, memory_source, micro, residuals, link, link_eff, link_conn, nominal, header)


def re_id(name: str) -> bool:
    """Whether ``name`` is a valid hardware id (letters, digits, '-', '_', '.')."""
    return bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", name or ""))


def calibrate_observations(path: str | Path, gpu_ref: str, params: tuple[str, ...] = OBSERVATION_FIT_PARAMS):
    """Fit ``params`` to an observations YAML (``calibration.load_observations`` format) for the
    GPU ``gpu_ref``, starting from that entry's efficiency. Returns (fitted GPU, residuals table)."""
    import pandas as pd

    from prfaas_plan.hardware import load_gpu
    from prfaas_plan.perf.calibration import fit_prefill, load_observations

    gpu = load_gpu(gpu_ref)
    obs = [o for o in load_observations(path) if o.gpu.id == gpu.id]
    if not obs:
        raise InvalidInput(f"{path}: no observations for gpu {gpu.id}; check --gpu")
    obs = [replace(o, gpu=gpu) for o in obs]
    provenance = (f"bench calibrate: {', '.join(params)} fitted (fit_prefill, log least squares) to {len(obs)} "
                  f"observations in {path}")
    fitted, rel = fit_prefill(obs, gpu.efficiency, tuple(params), provenance)
    table = pd.DataFrame([{"label": o.label, "model": o.model.id, "gpus": o.gpus, "tokens": o.tokens,
                           "measured_s": o.prefill_s, "predicted_s": o.prefill_s * (1 + e), "error_pct": 100 * e}
                          for o, e in zip(obs, rel)])
    return gpu.model_copy(update={"efficiency": fitted}), table


# --------------------------------------------------------------------------------------------
# Validation (no torch)
# --------------------------------------------------------------------------------------------


def validate_results(results: dict, gpu, statistic: str = DEFAULT_STATISTIC, roles: tuple[str, ...] = ("validation",)):
    """Predicted (``perf.analytic_prefill`` on ``gpu``, one device) vs measured prefill for every
    held-out model case. Returns a DataFrame (case, layer mix, what is held out, tokens,
    predicted/measured ms, error %, bound)."""
    import pandas as pd

    from prfaas_plan.hardware import Instance
    from prfaas_plan.perf.roofline import analytic_prefill

    rows = []
    for c in results.get("models", []):
        if c["role"] not in roles:
            continue
        spec = ModelSpec.model_validate(c["spec"])
        lat = analytic_prefill(spec, Instance(gpu, 1), int(c["tokens"]))
        measured = case_seconds(c, statistic)
        predicted = float(lat.total_s)
        rows.append({"case": c["case"], "layer_mix": c["layer_mix"], "held_out": c.get("held_out") or c["role"],
                     "tokens": int(c["tokens"]), "predicted_ms": predicted * MS_PER_S, "measured_ms": measured * MS_PER_S,
                     "error_pct": 100.0 * (predicted / measured - 1.0), "spread_pct": float(c["spread_pct"]),
                     "bound": str(lat.bound)})
    if not rows:
        raise InvalidInput("validate: the results file has no held-out model cases")
    return pd.DataFrame(rows)


def median_abs_error_pct(table) -> float:
    """Median of |error %| over a validation table (NaN for an empty one)."""
    errors = np.abs(table["error_pct"].to_numpy())
    return float(np.median(errors)) if errors.size else float("nan")
