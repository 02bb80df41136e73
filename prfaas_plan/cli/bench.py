"""``prfaas-plan bench``: the microbenchmark commands (run, calibrate, validate)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from prfaas_plan.cli.output import Format, FormatOpt, emit
from prfaas_plan.errors import InvalidInput

bench_app = typer.Typer(
    no_args_is_help=True,
    help="Microbenchmarks (torch): measure this device, calibrate the performance model's efficiency "
    "factors, validate its prefill predictions on held-out cases.",
)


class BenchDevice(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class BenchStatistic(str, Enum):
    min = "min"
    median = "median"


StatisticOpt = Annotated[BenchStatistic, typer.Option(
    "--statistic", help="per-case time used: min (least-disturbed repeat) or median of the repeats")]


@bench_app.command("run")
def bench_run(
    output: Annotated[Path, typer.Option("--output", "-o", help="results JSON to write")],
    device: Annotated[BenchDevice, typer.Option(help="auto (CUDA when torch sees one), cpu or cuda")] = BenchDevice.auto,
    quick: Annotated[bool, typer.Option("--quick", help="fewer shapes, lengths and repeats")] = False,
    threads: Annotated[Optional[int], typer.Option(help="torch intra-op threads (CPU profiles default to 1)")] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="rich progress bar on stderr")] = True,
    fmt: FormatOpt = Format.table,
) -> None:
    """Measure this device and write a results JSON.

    Times GEMMs, causal, sliding-window and linear attention, memory copies, scaled-down model
    prefills (their KV bytes checked against the cache model) and loopback KV transfer."""
    import time

    import pandas as pd

    from prfaas_plan import bench
    from prfaas_plan.data import check_output_path
    from prfaas_plan.units import GB_BYTES

    check_output_path(output, "-o")  # before minutes of measuring
    started = time.perf_counter()
    res = bench.run_harness(device.value, quick=quick, threads=threads, progress=progress)
    bench.write_results(res, output)
    cases = pd.DataFrame([{"case": c["case"], "role": c["role"], "layer_mix": c["layer_mix"], "tokens": c["tokens"],
                           "median_ms": c["median_s"] * bench.MS_PER_S, "min_ms": c["min_s"] * bench.MS_PER_S, "spread_pct": c["spread_pct"],
                           "kv_bytes_measured": c["kv_bytes_measured"], "kv_bytes_model": c["kv_bytes_model"],
                           "kv_match": c["kv_match"]} for c in res["models"]])
    if fmt is not Format.table:
        emit(cases, fmt)
        return
    dev = res["device"]
    micro = [{"test": f"gemm {g['m']}x{g['k']}x{g['n']} {g['dtype']}", "median_ms": g["median_s"] * bench.MS_PER_S,
              "min_ms": g["min_s"] * bench.MS_PER_S, "spread_pct": g["spread_pct"], "rate": g["flops"] / g["min_s"] / bench.FLOPS_PER_TFLOP,
              "unit": "TFLOP/s"} for g in res["gemm"]]
    for key, label in (("attention", "attention"), ("swa", "swa"), ("linear_attention", "linear")):
        for a in res[key]:
            extra = f" {a['flavour']}" if key == "linear_attention" else ""
            micro.append({"test": f"{label}{extra} {a['tokens']} tok", "median_ms": a["median_s"] * bench.MS_PER_S,
                          "min_ms": a["min_s"] * bench.MS_PER_S, "spread_pct": a["spread_pct"],
                          "rate": a["flops"] / a["min_s"] / bench.FLOPS_PER_TFLOP, "unit": "TFLOP/s"})
    for m in res["memory"]:
        micro.append({"test": f"copy {m['size_mib']} MiB", "median_ms": m["median_s"] * bench.MS_PER_S, "min_ms": m["min_s"] * bench.MS_PER_S,
                      "spread_pct": m["spread_pct"], "rate": m["bytes_moved"] / m["min_s"] / GB_BYTES, "unit": "GB/s"})
    emit(pd.DataFrame(micro), fmt, f"Microbenchmarks on {dev['name']} ({dev['kind']}, torch {dev['torch']}, "
                                   f"{dev['threads']} threads; rate from the fastest repeat)", floats="{:,.4f}")
    emit(cases, fmt, "Scaled-down model prefills (KV bytes: measured tensors vs kvcache.kv_bytes)", floats="{:,.1f}")
    tr = res["transfer"]
    emit(pd.DataFrame(tr["rows"]), fmt, f"Loopback KV transfer ({tr['payload_bytes']:,} B payload, "
                                        f"integrity {'ok' if tr['integrity_ok'] else 'FAILED'})", floats="{:,.3f}")
    typer.echo(f"wrote {output} in {time.perf_counter() - started:.1f} s")


@bench_app.command("calibrate")
def bench_calibrate(
    source: Annotated[Path, typer.Argument(help="bench results JSON, or an observations YAML (with --gpu)")],
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="hardware YAML to write")] = None,
    gpu: Annotated[Optional[str], typer.Option(help="GPU id: the entry an observations YAML is fitted for; "
                                                    "for a results file, the datasheet entry to start from")] = None,
    name: Annotated[Optional[str], typer.Option(help="id of the written entry (default: the output file's stem)")] = None,
    nominal_gbps: Annotated[Optional[float], typer.Option(help="nominal line rate the transfer Gbps is compared "
                                                               "with (default: the base entry's NIC, else 100)")] = None,
    params: Annotated[Optional[str], typer.Option(help="comma-separated efficiency factors to fit")] = None,
    statistic: StatisticOpt = BenchStatistic.min,
    tdp_w: Annotated[Optional[float], typer.Option(help="power to write for a CPU entry (else a placeholder)")] = None,
    price_usd_per_hour: Annotated[Optional[float], typer.Option(help="price per device-hour for a CPU entry")] = None,
    link_yaml: Annotated[Optional[Path], typer.Option(help="also write the scenario link block (gbps, efficiency)")] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Fit efficiency factors and overheads; write a hardware YAML.

    From a results file: a complete hardware entry (peak FLOP/s, memory bandwidth, fitted factors,
    link efficiency, provenance). From an observations YAML: the fitted values for --gpu."""
    import pandas as pd
    import yaml

    from prfaas_plan import bench
    from prfaas_plan.data import atomic_write, check_output_path
    from prfaas_plan.hardware import load_gpu
    from prfaas_plan.perf.calibration import FITTABLE
    from prfaas_plan.units import GB_BYTES, TB_BYTES

    for path, flag in ((output, "-o"), (link_yaml, "--link-yaml")):
        if path is not None:
            check_output_path(path, flag, create_parents=True)  # before any fitting
    fit = tuple(p.strip() for p in params.split(",") if p.strip()) if params else None
    if fit is not None:
        unknown = sorted(set(fit) - set(FITTABLE))
        if unknown or not fit:
            raise InvalidInput(f"--params: cannot fit {', '.join(unknown) or '(nothing)'}; fittable: {', '.join(FITTABLE)}")
    if source.suffix.lower() in (".yaml", ".yml"):
        if gpu is None:
            raise InvalidInput("--gpu: give the GPU id the observations are fitted for, e.g. --gpu h200")
        fitted, table = bench.calibrate_observations(source, gpu, fit or bench.OBSERVATION_FIT_PARAMS)
        eff = fitted.efficiency
        rows = [{"parameter": k, "value": getattr(eff, k),
                 "fitted": k in (fit or bench.OBSERVATION_FIT_PARAMS)} for k in FITTABLE + ("memory", "comm")]
        emit(pd.DataFrame(rows), fmt, f"Efficiency of {fitted.id} fitted to {source}", floats="{:,.4f}")
        if fmt is Format.table:
            emit(table, fmt, "Residuals (predicted / measured - 1)", floats="{:,.3f}")
        if output:
            entry = fitted.model_copy(update={"id": name or output.stem})
            output.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(output, f"# {entry.id}: {fitted.id} with efficiency fitted by `prfaas-plan bench calibrate "
                              f"{source}`\n" + yaml.safe_dump(entry.model_dump(mode="json", exclude_none=True),
                                                              sort_keys=False, width=110))
            typer.echo(f"wrote {output}")
        return
    results = bench.load_results(source)
    entry_name = name or (output.stem if output else f"measured-{results['device']['kind']}")
    base = load_gpu(gpu) if gpu else None
    cal = bench.calibrate_results(results, entry_name, source, base=base, nominal_gbps=nominal_gbps,
                                  params=fit or bench.RESULTS_FIT_PARAMS, statistic=statistic.value, tdp_w=tdp_w,
                                  price_usd_per_hour=price_usd_per_hour)
    eff = cal.gpu.efficiency
    rows = [{"parameter": k, "value": float(getattr(eff, k)),
             "microbenchmark": float(cal.micro[k]) if k in cal.micro else float("nan"),
             "fitted": k in (fit or bench.RESULTS_FIT_PARAMS)} for k in FITTABLE + ("memory", "comm")]
    rows += [{"parameter": "peak_tflops_per_s", "value": cal.gpu.bf16_dense_tflops, "microbenchmark": float("nan"),
              "fitted": False},
             {"parameter": "memory_gb_per_s", "value": cal.gpu.memory_tb_per_s * TB_BYTES / GB_BYTES, "microbenchmark": float("nan"),
              "fitted": False}]
    emit(pd.DataFrame(rows), fmt, f"{entry_name}: fitted on {len(cal.residuals)} calibration cases "
                                  f"({statistic.value} of repeats)", floats="{:,.4f}")
    if fmt is Format.table:
        emit(cal.residuals, fmt, "Calibration residuals (predicted / measured - 1)", floats="{:,.1f}")
        if len(cal.link):
            emit(cal.link, fmt, f"Link efficiency = measured loopback Gbps / nominal {cal.nominal_gbps:g} Gbps "
                                f"(capped at 1)", floats="{:,.3f}")
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(output, cal.yaml_text())
        typer.echo(f"wrote {output}")
    if link_yaml and cal.link_efficiency is not None:
        link_yaml.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(link_yaml, f"# measured by prfaas-plan bench ({source}): best of "
                             f"{len(cal.link)} connection counts, {cal.link_connections} connections\n"
                             + yaml.safe_dump({"link": {"gbps": cal.nominal_gbps,
                                                        "efficiency": round(cal.link_efficiency, 4)}}, sort_keys=False))
        typer.echo(f"wrote {link_yaml}")


@bench_app.command("validate")
def bench_validate(
    results: Annotated[Path, typer.Argument(help="bench results JSON")],
    hardware: Annotated[Optional[Path], typer.Option(help="hardware YAML from bench calibrate (default: calibrate "
                                                          "on the file's calibration cases now)")] = None,
    statistic: StatisticOpt = BenchStatistic.min,
    max_error_pct: Annotated[Optional[float], typer.Option(help="exit 1 when the median |error| exceeds this")] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Compare predicted and measured prefill on every held-out case.

    Held out: other lengths of the calibration models, and whole layer mixes never fitted;
    prints error % per case and the median absolute error."""
    from prfaas_plan import bench
    from prfaas_plan.hardware import load_gpu

    res = bench.load_results(results)
    if hardware is not None:
        gpu, origin = load_gpu(hardware), str(hardware)
    else:
        gpu = bench.calibrate_results(res, "in-memory", results, statistic=statistic.value).gpu
        origin = "calibrated now on the file's calibration cases"
    table = bench.validate_results(res, gpu, statistic.value)
    med = bench.median_abs_error_pct(table)
    emit(table, fmt, f"Held-out prefill: predicted vs measured ({gpu.id}: {origin})", floats="{:,.1f}")
    if fmt is Format.table:
        typer.echo(f"median |error| = {med:.1f}% over {len(table)} held-out cases "
                   f"(held-out models: {bench.median_abs_error_pct(table[table.held_out == 'model']):.1f}%, "
                   f"held-out lengths: {bench.median_abs_error_pct(table[table.held_out == 'length']):.1f}%)")
    if max_error_pct is not None and med > max_error_pct:
        typer.echo(f"prfaas-plan: median |error| {med:.1f}% exceeds --max-error-pct {max_error_pct:g}", err=True)
        raise typer.Exit(1)
