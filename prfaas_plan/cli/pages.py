"""The page commands: self-contained HTML files, a model comparison (``compare``) and a plan report (``report``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from prfaas_plan.cli.output import (
    PREFILL_GPU,
    EngineOpt,
    HardwareDbOpt,
    KvDtypeOpt,
    ModelDbOpt,
    ModeOpt,
    PrefixCacheOpt,
    ScenarioArg,
    TraceOpt,
    check_count,
    db_dirs,
)
from prfaas_plan.defaults import (
    DEFAULT_CLUSTER_GPUS,
    DEFAULT_COMPARE_MODELS,
    DEFAULT_CONTEXT_TOKENS,
    DEFAULT_INSTANCE_GPUS,
    DEFAULT_SIM_DURATION_S,
)
from prfaas_plan.errors import InvalidInput
from prfaas_plan.units import format_tokens

HtmlOutOpt = Annotated[Path, typer.Option("--output", "-o", help="HTML file to write (one self-contained file, works offline)")]
PngOpt = Annotated[Optional[Path], typer.Option("--png", help="also write every chart as PNG (2x) and SVG into this folder, for slides")]


def _wrote(path: Path, started_s: float, png: Optional[Path]) -> None:
    """The line on stderr that names the page written, its size and how long it took."""
    import time

    typer.echo(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - started_s:.1f} s"
               + (f"; charts as PNG and SVG in {png}" if png is not None else ""), err=True)


def compare(
    model: Annotated[Optional[list[str]], typer.Argument(help="model ids, YAML or HF config.json paths (default: "
                                                               f"{' '.join(DEFAULT_COMPARE_MODELS)})")] = None,
    output: HtmlOutOpt = ...,
    hardware: Annotated[str, typer.Option(help="prefill GPU (hardware_db id) for T_prefill and Phi_kv")] = PREFILL_GPU,
    gpus: Annotated[int, typer.Option(help="GPUs per prefill instance")] = DEFAULT_INSTANCE_GPUS,
    cluster_gpus: Annotated[int, typer.Option(help="GPUs of the prefill cluster whose egress is charted (Eq. 2)")] = DEFAULT_CLUSTER_GPUS,
    context: Annotated[str, typer.Option("--context", "-c", help="reference prompt length for the bars and the table (K = 1024)")] = format_tokens(DEFAULT_CONTEXT_TOKENS),
    kv_dtype: KvDtypeOpt = "bf16",
    engine: EngineOpt = "vllm",
    png: PngOpt = None,
    model_db: ModelDbOpt = None,
    hardware_db: HardwareDbOpt = None,
) -> None:
    """HTML page comparing models' KV traffic: bytes per token, fixed state, S_kv(l) and Phi_kv(l)
    over 1K-1M tokens, and the inter-DC link a prefill cluster needs against 10/100/400 Gbps lines."""
    import time

    from prfaas_plan.hardware import MAX_INSTANCE_GPUS, MAX_POOL_GPUS
    from prfaas_plan.kvcache import CacheSettings
    from prfaas_plan.report import write_compare
    from prfaas_plan.units import parse_tokens

    started_s = time.perf_counter()
    check_count(gpus, "--gpus", MAX_INSTANCE_GPUS, "GPUs per instance")
    check_count(cluster_gpus, "--cluster-gpus", MAX_POOL_GPUS, "GPUs in the cluster")
    path = write_compare(model or None, output, hardware=hardware, gpus=gpus, cluster_gpus=cluster_gpus, png_dir=png,
                         context_tokens=parse_tokens(context, "--context"),
                         settings=CacheSettings(kv_dtype=kv_dtype, engine=engine),
                         extra_model_dirs=db_dirs(model_db), extra_hardware_dirs=db_dirs(hardware_db))
    _wrote(path, started_s, png)


def report(
    scenario: ScenarioArg,
    output: HtmlOutOpt = ...,
    mode: ModeOpt = "exact",
    png: PngOpt = None,
    load: Annotated[Optional[float], typer.Option(help="fraction of Lambda_max for TTFT and the simulation")] = None,
    trace: TraceOpt = None,
    prefix_cache_blocks: PrefixCacheOpt = None,
    simulate: Annotated[Optional[bool], typer.Option("--simulate/--no-simulate", help="simulate for time series and a simulated TTFT (default: when the simulator is installed)")] = None,
    sim_duration: Annotated[float, typer.Option(help="simulated seconds of arrivals")] = DEFAULT_SIM_DURATION_S,
    seed: Annotated[int, typer.Option(help="simulation seed")] = 0,
    model_db: ModelDbOpt = None,
) -> None:
    """HTML report of a scenario's plan: inputs, recommended plan and binding constraint, baselines,
    Lambda_max against t and the P:D split, TTFT, egress and queues, cost, formulas, assumptions."""
    import time

    from prfaas_plan.report import write_report
    from prfaas_plan.scenario import load_scenario

    started_s = time.perf_counter()
    if not (0 < sim_duration < float("inf")):  # rejects NaN too
        raise InvalidInput("--sim-duration: give a positive number of seconds")
    if seed < 0:  # as simulate: numpy seeds are whole numbers >= 0
        raise InvalidInput(f"--seed: {seed} must be a whole number >= 0")
    sc = load_scenario(scenario, db_dirs(model_db))
    if trace is not None:
        sc = sc.with_trace(trace, prefix_cache_blocks)
    path = write_report(sc, output, mode=mode, png_dir=png, simulate=simulate, sim_duration_s=sim_duration,
                        seed=seed, load=load)
    _wrote(path, started_s, png)
