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
import pandas as pd
import yaml

from prfaas_plan.bench.micro import FLOPS_PER_TFLOP
from prfaas_plan.errors import InvalidInput
from prfaas_plan.hardware import GPU, Efficiency, Instance, list_gpus, load_gpu
from prfaas_plan.model.arch import ModelSpec
from prfaas_plan.perf.calibration import FITTABLE, PrefillObservation, fit_prefill, load_observations
from prfaas_plan.perf.roofline import analytic_prefill
from prfaas_plan.units import GB_BYTES, GIB_BYTES, MS_PER_S, TB_BYTES
from prfaas_plan.vocab import BENCH_STATISTICS

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

STATISTICS = BENCH_STATISTICS
"""Per-case timing statistics calibration and validation can use. The default, ``min``, is the
least-disturbed repeat: interference from other processes only ever adds time, so the fastest
repeat is the best estimate of the device's own speed (the median is kept in the results too)."""

DEFAULT_STATISTIC = "min"
"""The statistic calibration and validation use unless told otherwise."""

FIT_LOWER_START = 1e-3
"""Smallest starting value handed to the least-squares fit for an efficiency factor."""

YAML_SIGNIFICANT_DIGITS = 5
"""Measured and fitted numbers are written to YAML with this many significant digits."""

SHA_SHORT_CHARS = 16
"""Characters of a results file's SHA-256 quoted in provenance strings (the header has all 64)."""

YAML_WIDTH_CHARS = 110
"""Line width hardware YAML is written with."""

TABLE_FACTORS = (*FITTABLE, "memory", "comm")
"""Efficiency factors the calibrate tables list: the fittable ones, then memory and comm."""


# --------------------------------------------------------------------------------------------
# Calibration (no torch)
# --------------------------------------------------------------------------------------------


def case_seconds(record: dict, statistic: str = DEFAULT_STATISTIC) -> float:
    """The time of one timing record under ``statistic`` ('median' or 'min' of the repeats), s."""
    if statistic not in STATISTICS:
        raise InvalidInput(f"--statistic: {statistic!r} is not one of {', '.join(STATISTICS)}")
    return float(record[f"{statistic}_s"])


def _round_floats(obj: Any, digits: int) -> Any:
    """Round every float in a nested dict/list to ``digits`` significant digits."""
    if isinstance(obj, float):
        return float(f"{obj:.{digits}g}")
    if isinstance(obj, dict):
        return {k: _round_floats(v, digits) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_round_floats(v, digits) for v in obj]
    return obj


def _entry_yaml(gpu: GPU) -> str:
    """A hardware entry as YAML (no ``None`` fields, keys in schema order)."""
    return yaml.safe_dump(gpu.model_dump(mode="json", exclude_none=True), sort_keys=False, width=YAML_WIDTH_CHARS)


@dataclass(frozen=True)
class Calibration:
    """What ``bench calibrate`` derives from a results file.

    gpu: the complete hardware entry (validated :class:`~prfaas_plan.hardware.GPU`).
    peak_source / memory_source: where peak FLOP/s and memory bandwidth came from.
    micro: efficiencies read directly off the microbenchmarks (the fit's starting point).
    residuals: one row per calibration case (measured, predicted ms, error %).
    link: one row per connection count (measured Gbps, nominal Gbps, efficiency).
    link_efficiency / link_connections: the best multi-connection efficiency and its count.
    nominal_gbps: the line rate (Gbps) the transfer test was compared with.
    header: comment lines written above the YAML (provenance).
    params: the efficiency factors that were fitted.
    """

    gpu: GPU
    peak_source: str
    memory_source: str
    micro: dict[str, float]
    residuals: pd.DataFrame
    link: pd.DataFrame
    link_efficiency: float | None
    link_connections: int | None
    nominal_gbps: float
    header: tuple[str, ...]
    params: tuple[str, ...] = RESULTS_FIT_PARAMS

    def yaml_text(self) -> str:
        """The hardware YAML: provenance comments, then the entry (floats to
        :data:`YAML_SIGNIFICANT_DIGITS` significant digits)."""
        entry = _round_floats(self.gpu.model_dump(mode="json", exclude_none=True), YAML_SIGNIFICANT_DIGITS)
        body = yaml.safe_dump(entry, sort_keys=False, width=YAML_WIDTH_CHARS)
        return "".join(f"# {line}\n" if line else "#\n" for line in self.header) + body

    def link_yaml_text(self, source: str | Path) -> str | None:
        """The scenario ``link`` block (nominal Gbps, measured efficiency to 4 decimals) with a
        comment naming ``source``; None when the results file has no transfer rows."""
        if self.link_efficiency is None:
            return None
        return (f"# measured by prfaas-plan bench ({source}): best of {len(self.link)} connection counts, "
                f"{self.link_connections} connections\n"
                + yaml.safe_dump({"link": {"gbps": self.nominal_gbps, "efficiency": round(self.link_efficiency, 4)}},
                                 sort_keys=False))

    def parameter_table(self) -> pd.DataFrame:
        """One row per efficiency factor (fitted value, microbenchmark value, fitted or not),
        then the peak (TFLOP/s) and memory bandwidth (GB/s) of the entry."""
        eff = self.gpu.efficiency
        nan = float("nan")
        rows = [{"parameter": k, "value": float(getattr(eff, k)),
                 "microbenchmark": float(self.micro[k]) if k in self.micro else nan,
                 "fitted": k in self.params} for k in TABLE_FACTORS]
        rows += [{"parameter": "peak_tflops_per_s", "value": self.gpu.bf16_dense_tflops, "microbenchmark": nan,
                  "fitted": False},
                 {"parameter": "memory_gb_per_s", "value": self.gpu.memory_tb_per_s * TB_BYTES / GB_BYTES,
                  "microbenchmark": nan, "fitted": False}]
        return pd.DataFrame(rows)


@dataclass(frozen=True)
class ObservationFit:
    """What ``bench calibrate`` fits from an observations YAML.

    gpu: the base entry with the fitted efficiency. residuals: one row per observation
    (measured / predicted s, error %). params: the factors fitted. source: the YAML's path.
    """

    gpu: GPU
    residuals: pd.DataFrame
    params: tuple[str, ...]
    source: str

    def parameter_table(self) -> pd.DataFrame:
        """One row per efficiency factor: its value and whether it was fitted."""
        eff = self.gpu.efficiency
        return pd.DataFrame([{"parameter": k, "value": getattr(eff, k), "fitted": k in self.params}
                             for k in TABLE_FACTORS])

    def yaml_text(self, entry_id: str) -> str:
        """The fitted entry renamed ``entry_id``, as YAML under a one-line comment naming the
        base entry and the observations file."""
        entry = self.gpu.model_copy(update={"id": entry_id})
        return (f"# {entry.id}: {self.gpu.id} with efficiency fitted by `prfaas-plan bench calibrate "
                f"{self.source}`\n" + _entry_yaml(entry))


def _file_sha256(path: str | Path | None) -> str:
    """Hex SHA-256 of a file's bytes, or 'unknown' when there is no such file."""
    if not path or not Path(path).is_file():
        return "unknown"
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def match_datasheet_gpu(device_name: str) -> GPU | None:
    """The ``hardware_db`` entry whose id (or the id's part before a '-') appears in a CUDA device
    name (``NVIDIA H200`` -> h200, ``NVIDIA A100-SXM4-80GB`` -> a100-80g; the longest id wins), or
    None. ``bench calibrate --gpu`` overrides it."""
    squashed = device_name.lower().replace(" ", "").replace("-", "")
    hits = [g for g in list_gpus() if g.id.replace("-", "") in squashed or g.id.split("-")[0] in squashed]
    return max(hits, key=lambda g: len(g.id)) if hits else None


def _median(values: list[float]) -> float:
    """Median of ``values``; NaN for none."""
    return float(statistics.median(values)) if values else float("nan")


def link_table(results: dict, nominal_gbps: float) -> pd.DataFrame:
    """Measured loopback Gbps per connection count and the link efficiency each implies,
    ``min(1, measured / nominal)`` (loopback can exceed a real line: then the host is not the limit)."""
    rows = results.get("transfer", {}).get("rows", [])
    return pd.DataFrame([{"connections": int(r["connections"]), "bytes": int(r["bytes"]), "seconds": float(r["seconds"]),
                          "measured_gbps": float(r["gbps"]), "nominal_gbps": float(nominal_gbps),
                          "link_efficiency": min(1.0, float(r["gbps"]) / nominal_gbps)} for r in rows])


@dataclass(frozen=True)
class _Rates:
    """Peak FLOP/s and memory bandwidth (B/s) of the entry being built, with where they came from."""

    peak_flops: float
    peak_source: str
    memory_bytes_per_s: float
    memory_efficiency: float
    memory_source: str


def _peak_flops(gemm: list[dict], base: GPU | None, statistic: str) -> tuple[float, str]:
    """Peak FLOP/s: the datasheet's (``base``), else the fastest GEMM measured; and its source."""
    achieved = [g["flops"] / case_seconds(g, statistic) for g in gemm]
    i = int(np.argmax(achieved))
    g = gemm[i]
    if base is not None:
        return base.peak_flops, (f"datasheet ({base.id}: {base.bf16_dense_tflops} TFLOP/s dense bf16); fastest measured "
                                 f"GEMM {max(achieved) / FLOPS_PER_TFLOP:.1f} TFLOP/s at {g['m']}x{g['k']}x{g['n']}")
    return achieved[i], (f"fastest measured GEMM: {achieved[i] / FLOPS_PER_TFLOP:.4f} TFLOP/s ({g['dtype']}) at "
                         f"{g['m']}x{g['k']}x{g['n']} ({statistic} of {g['repeats']})")


def _rates(results: dict, base: GPU | None, statistic: str) -> _Rates:
    """Peak FLOP/s (:func:`_peak_flops`) and memory bandwidth: the copy test on the largest
    buffer, as the bandwidth itself without a datasheet, else as the memory efficiency."""
    peak_flops, peak_source = _peak_flops(results["gemm"], base, statistic)
    big = max(results["memory"], key=lambda c: c["size_mib"])
    copy_bytes_per_s = big["bytes_moved"] / case_seconds(big, statistic)
    if base is None:
        return _Rates(peak_flops, peak_source, copy_bytes_per_s, MEMORY_STREAM_EFFICIENCY_MEASURED,
                      f"copy test: {copy_bytes_per_s / GB_BYTES:.2f} GB/s (read + write, {big['size_mib']} MiB)")
    memory_eff = min(1.0, copy_bytes_per_s / base.memory_bytes_per_s)
    return _Rates(peak_flops, peak_source, base.memory_bytes_per_s, memory_eff,
                  f"datasheet {base.memory_tb_per_s} TB/s; copy test {copy_bytes_per_s / TB_BYTES:.3f} TB/s "
                  f"(read + write, {big['size_mib']} MiB) -> memory efficiency {memory_eff:.3f}")


def _micro_efficiencies(results: dict, rates: _Rates, statistic: str) -> dict[str, float]:
    """Median achieved fraction of peak per microbenchmark kind (NaN for a kind not measured)."""
    def fraction(section: str) -> float:
        """Median achieved FLOP/s over peak of one section's records."""
        return _median([a["flops"] / case_seconds(a, statistic) / rates.peak_flops for a in results.get(section, [])])

    return {"gemm": fraction("gemm"), "attention": fraction("attention"), "swa": fraction("swa"),
            "linear_attention": fraction("linear_attention"), "memory": rates.memory_efficiency}


def _fit_start(micro: dict[str, float], base: GPU | None) -> Efficiency:
    """The fit's starting efficiency: the microbenchmarks' (clipped to ``[FIT_LOWER_START, 1]``,
    attention kinds not measured start at the GEMM's); comm and decode overhead from ``base``."""
    def clip(value: float) -> float:
        """A starting value in ``[FIT_LOWER_START, 1]`` (NaN: the GEMM's)."""
        return float(np.clip(np.nan_to_num(value, nan=micro["gemm"]), FIT_LOWER_START, 1.0))

    base_eff = base.efficiency if base is not None else None
    return Efficiency(
        gemm=clip(micro["gemm"]), attention=clip(micro["attention"]),
        linear_attention=clip(micro["linear_attention"]), memory=clip(micro["memory"]),
        comm=base_eff.comm if base_eff else DEFAULT_COMM_EFFICIENCY, prefill_overhead_s=0.0,
        decode_step_overhead_s=base_eff.decode_step_overhead_s if base_eff else DEFAULT_DECODE_STEP_OVERHEAD_S,
        provenance="microbenchmarks (fit start)")


@dataclass(frozen=True)
class _Options:
    """The choices of one calibration (see :func:`calibrate_results`)."""

    name: str
    results_path: str | Path | None
    nominal_gbps: float
    params: tuple[str, ...]
    statistic: str
    tdp_w: float | None
    price_usd_per_hour: float | None


def _start_entry(results: dict, base: GPU | None, rates: _Rates, start: Efficiency, opt: _Options) -> dict:
    """The hardware entry before the fit: ``base`` renamed, or one built from the measured rates
    (placeholder power and price), with a ``sources`` item naming the results file."""
    info = results["device"]
    if base is not None:
        entry = base.model_dump(mode="json")
        entry.update(id=opt.name, name=f"{base.name} (measured: {info.get('name', '')})", efficiency=start.model_dump())
        entry["sources"] = [*entry["sources"]]
    else:
        entry = {
            "id": opt.name, "name": f"{info.get('name', 'CPU')} ({info.get('threads')} threads, torch "
                                    f"{info.get('torch')}, {results['settings']['dtype']})",
            "bf16_dense_tflops": rates.peak_flops / FLOPS_PER_TFLOP,
            "memory_gib": info.get("memory_bytes", 0) / GIB_BYTES or 1.0,
            "memory_tb_per_s": rates.memory_bytes_per_s / TB_BYTES, "scaleup_gb_per_s": rates.memory_bytes_per_s / GB_BYTES,
            "nic_gbps": opt.nominal_gbps, "tdp_w": float(opt.tdp_w or CPU_PLACEHOLDER_TDP_W),
            "price_usd_per_gpu_hour": float(opt.price_usd_per_hour or CPU_PLACEHOLDER_PRICE_USD_PER_HOUR),
            "price_date": _dt.date.today().strftime("%Y-%m"), "efficiency": start.model_dump(), "sources": []}
    sha = _file_sha256(opt.results_path)
    entry["sources"].append({"url": MEASURED_SOURCE_URL,
                             "covers": ["efficiency"] + ([] if base is not None else ["bf16_dense_tflops", "memory_tb_per_s"]),
                             "note": f"measured by prfaas-plan bench run on {results.get('created_utc', '?')}; results "
                                     f"{opt.results_path or '(in memory)'} sha256 {sha[:SHA_SHORT_CHARS]}"})
    return entry


def _fit(calib: list[dict], gpu_start: GPU, start: Efficiency, opt: _Options) -> tuple[Efficiency, pd.DataFrame]:
    """Fit ``opt.params`` to the calibration cases; the fitted efficiency and the residuals table
    (measured and predicted ms, error %)."""
    obs = [PrefillObservation(ModelSpec.model_validate(c["spec"]), gpu_start, 1, int(c["tokens"]),
                              case_seconds(c, opt.statistic), c["case"]) for c in calib]
    fitted, rel = fit_prefill(obs, start, tuple(opt.params))
    residuals = pd.DataFrame([{"case": o.label, "tokens": o.tokens, "measured_ms": o.prefill_s * MS_PER_S,
                               "predicted_ms": o.prefill_s * (1 + e) * MS_PER_S, "error_pct": 100 * e}
                              for o, e in zip(obs, rel)])
    return fitted, residuals


def _best_link(link: pd.DataFrame) -> tuple[float | None, int | None]:
    """The best link efficiency of the transfer rows and its connection count (None, None without rows)."""
    if not len(link):
        return None, None
    return float(link["link_efficiency"].max()), int(link.loc[link["link_efficiency"].idxmax(), "connections"])


def _provenance(results: dict, calib: list[dict], rates: _Rates, opt: _Options) -> str:
    """The fitted efficiency's provenance: what was fitted to which cases, peak and memory sources."""
    cal_models = sorted({c["source_model"] for c in calib})
    cal_lengths = sorted({int(c["tokens"]) for c in calib})
    sha = _file_sha256(opt.results_path)
    return (f"bench calibrate: {', '.join(opt.params)} fitted (fit_prefill, log least squares) to {len(calib)} "
            f"calibration prefills of scaled-down {', '.join(cal_models)} at {', '.join(map(str, cal_lengths))} "
            f"tokens, {opt.statistic} of {results['settings']['repeats']} repeats, results sha256 "
            f"{sha[:SHA_SHORT_CHARS]}; peak: {rates.peak_source}; memory: {rates.memory_source}")


def _notes(results: dict, base: GPU | None, link: pd.DataFrame, nominal_gbps: float) -> str:
    """The entry's ``notes``: device and versions, what a CPU entry's fields mean, the transfer test."""
    info = results["device"]
    notes = [f"Measured with prfaas-plan bench ({results.get('profile', {}).get('name', '?')}) on {info.get('name')}; "
             f"torch {info.get('torch')}, python {info.get('python')}, {info.get('threads')} threads."]
    if base is None:
        notes.append("bf16_dense_tflops holds the peak of the dtype the harness ran in "
                     f"({results['settings']['dtype']}); scaleup_gb_per_s is the copy bandwidth (no scale-up fabric); "
                     f"nic_gbps is the nominal line rate the transfer test was compared with; tdp_w and price are "
                     f"placeholders unless given on the command line.")
    link_eff, link_conn = _best_link(link)
    if link_eff is not None:
        notes.append("Loopback KV transfer: " + ", ".join(f"{r.connections} conn {r.measured_gbps:.1f} Gbps"
                                                          for r in link.itertuples())
                     + f"; link efficiency vs {nominal_gbps:g} Gbps nominal = {link_eff:.3f} at {link_conn} connections "
                       f"(use as scenario link.efficiency / --link-efficiency).")
    return " ".join(notes)


def _header(results: dict, calib: list[dict], rates: _Rates, micro: dict[str, float], residuals: pd.DataFrame,
            link: pd.DataFrame, opt: _Options) -> tuple[str, ...]:
    """The comment lines above the YAML: results file and its SHA-256, device, sources, fit, residuals, link."""
    info = results["device"]
    cal_models = sorted({c["source_model"] for c in calib})
    cal_lengths = sorted({int(c["tokens"]) for c in calib})
    res_txt = ", ".join(f"{r.case} {r.error_pct:+.0f}%" for r in residuals.itertuples())
    header = [f"{opt.name}: hardware entry measured by `prfaas-plan bench calibrate`.",
              f"results: {opt.results_path or '(in memory)'} (sha256 {_file_sha256(opt.results_path)}), "
              f"created {results.get('created_utc')}",
              f"device: {info.get('name')} ({info.get('kind')}), torch {info.get('torch')}, "
              f"dtype {results['settings']['dtype']}",
              f"peak: {rates.peak_source}", f"memory: {rates.memory_source}",
              "microbenchmark efficiencies (fit start): " + ", ".join(f"{k} {v:.3f}" for k, v in micro.items()),
              f"fitted ({', '.join(opt.params)}) on calibration cases {', '.join(cal_models)} x {cal_lengths} tokens:",
              f"  residuals: {res_txt}"]
    link_eff, link_conn = _best_link(link)
    if link_eff is not None:
        header.append(f"link efficiency: {link_eff:.3f} (best of {len(link)} connection counts, {link_conn} "
                      f"connections, nominal {opt.nominal_gbps:g} Gbps)")
    return tuple(header)


def _options(results: dict, name: str, results_path: str | Path | None, base: GPU | None, nominal_gbps: float | None,
             params: tuple[str, ...], statistic: str, tdp_w: float | None,
             price_usd_per_hour: float | None) -> _Options:
    """Check the name, the statistic, the nominal line rate and that the file has what a fit needs."""
    if not re_id(name):
        raise InvalidInput(f"--name: {name!r} must be a short id of letters, digits, '-', '_' or '.'")
    if not results.get("gemm") or not results.get("memory") or not _calibration_cases(results):
        raise InvalidInput("calibrate: the results file lacks GEMM, copy or calibration model cases; rerun bench run")
    case_seconds(results["gemm"][0], statistic)  # the statistic is known
    nominal = float(nominal_gbps or (base.nic_gbps if base is not None else DEFAULT_NOMINAL_LINE_GBPS))
    if nominal <= 0:
        raise InvalidInput("--nominal-gbps: the nominal line rate must be positive")
    return _Options(name, results_path, nominal, tuple(params), statistic, tdp_w, price_usd_per_hour)


def _calibration_cases(results: dict) -> list[dict]:
    """The model cases of a results file the fit may use."""
    return [c for c in results.get("models", []) if c["role"] == "calibration"]


def calibrate_results(results: dict, name: str, results_path: str | Path | None = None, base: GPU | None = None,
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
    :data:`DEFAULT_NOMINAL_LINE_GBPS`). Power (W) and price (USD per device-hour) of a CPU entry:
    ``tdp_w`` and ``price_usd_per_hour``, else placeholders.
    """
    if base is None and results["device"]["kind"] == "cuda":
        base = match_datasheet_gpu(results["device"].get("name", ""))
    opt = _options(results, name, results_path, base, nominal_gbps, params, statistic, tdp_w, price_usd_per_hour)
    calib = _calibration_cases(results)
    rates = _rates(results, base, statistic)
    micro = _micro_efficiencies(results, rates, statistic)
    start = _fit_start(micro, base)
    entry = _start_entry(results, base, rates, start, opt)
    fitted, residuals = _fit(calib, GPU.model_validate(entry), start, opt)
    link = link_table(results, opt.nominal_gbps)
    link_eff, link_conn = _best_link(link)
    fitted = fitted.model_copy(update={"provenance": _provenance(results, calib, rates, opt)})
    gpu = GPU.model_validate({**entry, "efficiency": fitted.model_dump(), "notes": _notes(results, base, link, opt.nominal_gbps)})
    return Calibration(gpu, rates.peak_source, rates.memory_source, micro, residuals, link, link_eff, link_conn,
                       opt.nominal_gbps, _header(results, calib, rates, micro, residuals, link, opt), opt.params)


def re_id(name: str) -> bool:
    """Whether ``name`` is a valid hardware id (letters, digits, '-', '_', '.')."""
    return bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", name or ""))


def calibrate_observations(path: str | Path, gpu_ref: str,
                           params: tuple[str, ...] = OBSERVATION_FIT_PARAMS) -> ObservationFit:
    """Fit ``params`` to an observations YAML (``calibration.load_observations`` format) for the
    GPU ``gpu_ref``, starting from that entry's efficiency."""
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
    return ObservationFit(gpu.model_copy(update={"efficiency": fitted}), table, tuple(params), str(path))


# --------------------------------------------------------------------------------------------
# Validation (no torch)
# --------------------------------------------------------------------------------------------


def validate_results(results: dict, gpu: GPU, statistic: str = DEFAULT_STATISTIC,
                     roles: tuple[str, ...] = ("validation",)) -> pd.DataFrame:
    """Predicted (``perf.analytic_prefill`` on ``gpu``, one device) vs measured prefill for every
    held-out model case. Returns a DataFrame (case, layer mix, what is held out, tokens,
    predicted/measured ms, error %, spread %, bound)."""
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


def median_abs_error_pct(table: pd.DataFrame) -> float:
    """Median of |error %| over a validation table (NaN for an empty one)."""
    errors = np.abs(table["error_pct"].to_numpy())
    return float(np.median(errors)) if errors.size else float("nan")
