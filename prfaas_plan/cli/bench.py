"""``prfaas-plan bench``: the microbenchmark commands (run, calibrate, validate)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from prfaas_plan.cli.output import FormatOpt, emit
from prfaas_plan.errors import InvalidInput
from prfaas_plan.vocab import BenchDevice, BenchStatistic

bench_app = typer.Typer(
    no_args_is_help=True,
    help="Microbenchmarks (torch): measure this device, calibrate the performance model's efficiency "
    "factors, validate its prefill predictions on held-out cases.",
)

StatisticOpt = Annotated[BenchStatistic, typer.Option(
    "--statistic", help="per-case time used: min (least-disturbed repeat) or median of the repeats")]


@bench_app.command("run")
def bench_run(
    output: Annotated[Path, typer.Option("--output", "-o", help="results JSON to write")],
    device: Annotated[BenchDevice, typer.Option(help="auto (CUDA when torch sees one), cpu or cuda")] = "auto",
    quick: Annotated[bool, typer.Option("--quick", help="fewer shapes, lengths and repeats")] = False,
    threads: Annotated[Optional[int], typer.Option(help="torch intra-op threads (CPU profiles default to 1)")] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="rich progress bar on stderr")] = True,
    fmt: FormatOpt = "table",
) -> None:
    """Measure this device and write a results JSON.

    Times GEMMs, causal, sliding-window and linear attention, memory copies, scaled-down model
    prefills (their KV bytes checked against the cache model) and loopback KV transfer."""
    import time

    from prfaas_plan import bench
    from prfaas_plan.data import check_output_path

    check_output_path(output, "-o")  # before minutes of measuring
    started = time.perf_counter()
    res = bench.run_harness(device, quick=quick, threads=threads, progress=progress)
    bench.write_results(res, output)
    cases = bench.model_case_table(res)
    if fmt != "table":
        emit(cases, fmt)
        return
    dev, tr = res["device"], res["transfer"]
    emit(bench.micro_table(res), fmt, f"Microbenchmarks on {dev['name']} ({dev['kind']}, torch {dev['torch']}, "
                                      f"{dev['threads']} threads; rate from the fastest repeat)", floats="{:,.4f}")
    emit(cases, fmt, "Scaled-down model prefills (KV bytes: measured tensors vs kvcache.kv_bytes)", floats="{:,.1f}")
    emit(bench.transfer_table(res), fmt, f"Loopback KV transfer ({tr['payload_bytes']:,} B payload, "
                                         f"integrity {'ok' if tr['integrity_ok'] else 'FAILED'})", floats="{:,.3f}")
    typer.echo(f"wrote {output} in {time.perf_counter() - started:.1f} s")


def _fit_params(params: Optional[str]) -> tuple[str, ...] | None:
    """``--params`` as a tuple of fittable factor names (None when not given)."""
    from prfaas_plan.perf.calibration import FITTABLE

    if not params:
        return None
    fit = tuple(p.strip() for p in params.split(",") if p.strip())
    unknown = sorted(set(fit) - set(FITTABLE))
    if unknown or not fit:
        raise InvalidInput(f"--params: cannot fit {', '.join(unknown) or '(nothing)'}; fittable: {', '.join(FITTABLE)}")
    return fit


def _write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (missing folders made) and say so."""
    from prfaas_plan.data import atomic_write

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, text)
    typer.echo(f"wrote {path}")


def _calibrate_observations(source: Path, gpu: Optional[str], fit: tuple[str, ...] | None, output: Optional[Path],
                            name: Optional[str], fmt: str) -> None:
    """``bench calibrate`` of an observations YAML: print the fitted factors, write the entry."""
    from prfaas_plan import bench

    if gpu is None:
        raise InvalidInput("--gpu: give the GPU id the observations are fitted for, e.g. --gpu h200")
    result = bench.calibrate_observations(source, gpu, fit or bench.OBSERVATION_FIT_PARAMS)
    emit(result.parameter_table(), fmt, f"Efficiency of {result.gpu.id} fitted to {source}", floats="{:,.4f}")
    if fmt == "table":
        emit(result.residuals, fmt, "Residuals (predicted / measured - 1)", floats="{:,.3f}")
    if output:
        _write(output, result.yaml_text(name or output.stem))


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
    statistic: StatisticOpt = "min",
    tdp_w: Annotated[Optional[float], typer.Option(help="power to write for a CPU entry (else a placeholder)")] = None,
    price_usd_per_hour: Annotated[Optional[float], typer.Option(help="price per device-hour for a CPU entry")] = None,
    link_yaml: Annotated[Optional[Path], typer.Option(help="also write the scenario link block (gbps, efficiency)")] = None,
    fmt: FormatOpt = "table",
) -> None:
    """Fit efficiency factors and overheads; write a hardware YAML.

    From a results file: a complete hardware entry (peak FLOP/s, memory bandwidth, fitted factors,
    link efficiency, provenance). From an observations YAML: the fitted values for --gpu."""
    from prfaas_plan import bench
    from prfaas_plan.data import check_output_path
    from prfaas_plan.hardware import load_gpu

    for path, flag in ((output, "-o"), (link_yaml, "--link-yaml")):
        if path is not None:
            check_output_path(path, flag, create_parents=True)  # before any fitting
    fit = _fit_params(params)
    if source.suffix.lower() in (".yaml", ".yml"):
        _calibrate_observations(source, gpu, fit, output, name, fmt)
        return
    results = bench.load_results(source)
    entry_name = name or (output.stem if output else f"measured-{results['device']['kind']}")
    cal = bench.calibrate_results(results, entry_name, source, base=load_gpu(gpu) if gpu else None,
                                  nominal_gbps=nominal_gbps, params=fit or bench.RESULTS_FIT_PARAMS,
                                  statistic=statistic, tdp_w=tdp_w, price_usd_per_hour=price_usd_per_hour)
    emit(cal.parameter_table(), fmt, f"{entry_name}: fitted on {len(cal.residuals)} calibration cases "
                                     f"({statistic} of repeats)", floats="{:,.4f}")
    if fmt == "table":
        emit(cal.residuals, fmt, "Calibration residuals (predicted / measured - 1)", floats="{:,.1f}")
        if len(cal.link):
            emit(cal.link, fmt, f"Link efficiency = measured loopback Gbps / nominal {cal.nominal_gbps:g} Gbps "
                                f"(capped at 1)", floats="{:,.3f}")
    if output:
        _write(output, cal.yaml_text())
    link_text = cal.link_yaml_text(source)
    if link_yaml and link_text is not None:
        _write(link_yaml, link_text)


@bench_app.command("validate")
def bench_validate(
    results: Annotated[Path, typer.Argument(help="bench results JSON")],
    hardware: Annotated[Optional[Path], typer.Option(help="hardware YAML from bench calibrate (default: calibrate "
                                                          "on the file's calibration cases now)")] = None,
    statistic: StatisticOpt = "min",
    max_error_pct: Annotated[Optional[float], typer.Option(help="exit 1 when the median |error| exceeds this")] = None,
    fmt: FormatOpt = "table",
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
        gpu = bench.calibrate_results(res, "in-memory", results, statistic=statistic).gpu
        origin = "calibrated now on the file's calibration cases"
    table = bench.validate_results(res, gpu, statistic)
    med = bench.median_abs_error_pct(table)
    emit(table, fmt, f"Held-out prefill: predicted vs measured ({gpu.id}: {origin})", floats="{:,.1f}")
    if fmt == "table":
        typer.echo(f"median |error| = {med:.1f}% over {len(table)} held-out cases "
                   f"(held-out models: {bench.median_abs_error_pct(table[table.held_out == 'model']):.1f}%, "
                   f"held-out lengths: {bench.median_abs_error_pct(table[table.held_out == 'length']):.1f}%)")
    if max_error_pct is not None and med > max_error_pct:
        typer.echo(f"prfaas-plan: median |error| {med:.1f}% exceeds --max-error-pct {max_error_pct:g}", err=True)
        raise typer.Exit(1)


@bench_app.command("import-kernels")
def bench_import_kernels(
    wheel: Annotated[Optional[Path], typer.Option("--wheel", help="aiconfigurator-core .whl file to read")] = None,
    folder: Annotated[Optional[Path], typer.Option("--dir", help="unpacked aiconfigurator_core folder to read")] = None,
    gpus: Annotated[str, typer.Option(help="comma-separated hardware_db ids")] = "h200,h100,a100-80g,l40s,b200",
    out: Annotated[Optional[Path], typer.Option(help="tables folder (default: the bundled hardware_db/kernels)")] = None,
) -> None:
    """Reduce NVIDIA's per-kernel measurements (aiconfigurator-core wheel) to our kernel tables.

    Default source: the installed aiconfigurator_core package (pip install 'prfaas-plan[kernels]').
    Writes <out>/<gpu>/<engine>-<version>/<family>.npz and a provenance.yaml per version folder, all or none."""
    from prfaas_plan.bench.kernels_import import import_kernels
    from prfaas_plan.perf.kernels import kernels_dir

    if wheel is not None and folder is not None:
        raise InvalidInput("--wheel / --dir: give one source, not both")
    ids = [g.strip() for g in gpus.split(",") if g.strip()]
    if not ids:
        raise InvalidInput("--gpus: give at least one GPU id, e.g. --gpus h200")
    sizes = import_kernels(ids, out if out is not None else kernels_dir(), wheel, folder, echo=typer.echo)
    total = sum(sum(per_gpu.values()) for per_gpu in sizes.values())
    typer.echo(f"wrote kernel tables for {', '.join(sizes)} ({total:,} bytes)")


@bench_app.command("calibrate-engine")
def bench_calibrate_engine(
    source: Annotated[Path, typer.Argument(help="observations YAML of measured prefill latencies "
                                           "(as bench_results/prfaas-paper-h200.yaml)")],
    engine: Annotated[str, typer.Option(help="engine profile (engine_db id or YAML) whose request overhead is fitted")],
    label: Annotated[Optional[str], typer.Option(help="fit only observations whose label starts with this")] = None,
    fmt: FormatOpt = "table",
) -> None:
    """Fit an engine profile's request overhead on top of the kernel model; print it and the residuals.

    The kernels come from the measured tables; only the one per-request constant is fitted
    (least squares in log space). Paste the value into the profile's request_overhead_s."""
    from prfaas_plan.engine import load_engine
    from prfaas_plan.perf.calibration import fit_request_overhead, load_observations

    obs = [o for o in load_observations(source) if label is None or o.label.startswith(label)]
    if not obs:
        raise InvalidInput(f"--label: no observation of {source} has a label starting with {label!r}")
    profile = load_engine(engine)
    overhead_s, errors = fit_request_overhead(obs, profile)
    rows = [{"label": o.label, "model": o.model.id, "tokens": o.tokens,
             "measured_s": o.prefill_s, "predicted_s": o.prefill_s * (1 + e), "error_pct": 100 * e}
            for o, e in zip(obs, errors)]
    emit(rows, fmt, f"{profile.id}: request_overhead_s = {overhead_s:.3f} s fitted to {len(obs)} observations",
         floats="{:,.3f}")
