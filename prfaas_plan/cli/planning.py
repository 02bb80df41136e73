"""The planning commands: one scenario's plan against its baselines (``plan``), a grid of them (``sweep``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from prfaas_plan.cli.output import FormatOpt, ModeOpt, PrefixCacheOpt, TraceOpt, emit
from prfaas_plan.defaults import DEFAULT_LINK_GBPS
from prfaas_plan.errors import InvalidInput
from prfaas_plan.vocab import PlanMode, SweepExecutor

if TYPE_CHECKING:
    from prfaas_plan.planner import PlanResult
    from prfaas_plan.scenario import Scenario

def _pool(text: str, flag: str) -> tuple[str, int]:
    """A pool flag ``GPU:COUNT`` (``h200:32``) as (GPU id, GPU count)."""
    gpu, _, count = text.partition(":")
    if not gpu or not count.isdigit():
        raise InvalidInput(f"{flag}: {text!r} is not GPU:COUNT, e.g. h200:32")
    return gpu, int(count)


def _write_plan_json(res: PlanResult, path: Path) -> None:
    """The plan as JSON (:meth:`PlanResult.json_dict`), written atomically (never half-written)."""
    import json

    from prfaas_plan.data import atomic_write

    atomic_write(path, json.dumps(res.json_dict(), indent=2))
    typer.echo(f"wrote {path}", err=True)


def _print_plan(sc: Scenario, res: PlanResult, mode: PlanMode) -> None:
    """The plan for humans: a line on the recommended plan, then the table of it and its baselines."""
    p = res.plan
    q = round(sc.spec.slo.ttft_quantile * 100)
    typer.echo(f"{sc.spec.name}\n{mode} mode: {p.routing_text()}; PrfaaS {p.instances['prfaas']} + PD-P "
               f"{p.instances['pd_p']} + PD-D {p.instances['pd_d']} instances, Lambda_max = {p.lambda_max_rps:.3f} "
               f"req/s, egress {p.egress_gbps:.1f} Gbps ({p.link_utilisation:.0%} of {p.link_gbps:g}), binding: "
               f"{p.binding}; decode BS_max {res.inputs.decode_batch_max} at {res.inputs.decode_step_s * 1e3:.1f} "
               f"ms/step ({res.inputs.decode_source}); output length L_out {res.inputs.output_tokens:,.0f} tokens "
               f"({sc.output_tokens_source})")
    rows = res.display_records()  # no single t for per-bucket routing: the line above says how it routes
    cols = {"plan": "plan", "threshold_tokens": "t (tokens)", "n_prfaas": "PrfaaS", "n_pd_p": "PD-P",
            "n_pd_d": "PD-D", "lambda_max_rps": "Lambda_max (req/s)", "throughput_vs_this": "PrfaaS-PD / this (x)",
            "egress_gbps": "egress (Gbps)", "usd_per_million_tokens": "cost ($/M tokens)",
            f"p{q}_ttft_s_common_rate": f"P{q} TTFT (s)", "binding": "binding"}
    shown = [c for c in cols if any(c in r for r in rows)]
    emit([{cols[c]: r.get(c, float("nan")) for c in shown} for r in rows], "table",
         f"Plans (P{q} TTFT at a common rate of {res.common_rate_rps:.2f} req/s)",
         floats="{:,.3f}", col_floats={"t (tokens)": "{:,.0f}"})


def plan(
    scenario: Annotated[Optional[str], typer.Argument(help="scenario id (paper-case-study) or YAML path")] = None,
    mode: ModeOpt = "exact",
    load: Annotated[Optional[float], typer.Option(help="fraction of Lambda_max at which TTFT is reported")] = None,
    model: Annotated[Optional[str], typer.Option(help="quick form: model id")] = None,
    prfaas: Annotated[str, typer.Option(help="quick form: PrfaaS pool GPU:COUNT")] = "h200:32",
    local: Annotated[str, typer.Option(help="quick form: local PD pool GPU:COUNT")] = "h20:64",
    link_gbps: Annotated[Optional[float], typer.Option(help="inter-DC link, Gbps (overrides the scenario; 0 = no link: "
                                                            "every request is prefilled locally)")] = None,
    trace: TraceOpt = None,
    prefix_cache_blocks: PrefixCacheOpt = None,
    no_prefix_cache: Annotated[bool, typer.Option(help="with --trace: no prefix caching")] = False,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="also write the plans, TTFT and inputs as JSON")] = None,
    fmt: FormatOpt = "table",
) -> None:
    """Plan PrfaaS-PD: threshold t, instance split, Lambda_max, egress, cost and TTFT, against the
    homogeneous-PD and naive-heterogeneous baselines."""
    from prfaas_plan.planner import plan as run_plan
    from prfaas_plan.scenario import Scenario, load_scenario

    cache_blocks = 0 if no_prefix_cache else prefix_cache_blocks
    if (prefix_cache_blocks is not None or no_prefix_cache) and trace is None:
        raise InvalidInput("--prefix-cache-blocks/--no-prefix-cache: only with --trace")
    if out is not None:
        from prfaas_plan.data import check_output_path

        check_output_path(out, "--out")
    if scenario is None:
        if model is None:
            raise InvalidInput("give a SCENARIO (e.g. paper-case-study) or --model with --prfaas/--local")
        sc = Scenario.quick(model, _pool(prfaas, "--prfaas"), _pool(local, "--local"),
                            DEFAULT_LINK_GBPS if link_gbps is None else link_gbps, trace, cache_blocks)
    else:
        sc = load_scenario(scenario)
        if link_gbps is not None:
            sc = sc.with_updates(**{"link.gbps": link_gbps})
        if trace is not None:
            sc = sc.with_trace(trace, cache_blocks)
    res = run_plan(sc, mode=mode, load=load)
    if out is not None:
        _write_plan_json(res, out)
    if fmt == "table":
        _print_plan(sc, res, mode)
    else:
        emit(res.to_frame(), fmt)


def _check_sweep_flags(grid: Path, output: Path, html: Optional[Path], x: Optional[str], y: Optional[str]) -> None:
    """The output paths and the heatmap axes, checked before any cell runs."""
    from prfaas_plan.data import check_output_path

    if (x or y) and html is None:
        raise InvalidInput("--x/--y: only with --html FILE")
    check_output_path(output, "-o")  # OUTPUT and OUTPUT.cells/ go in its folder
    if html is not None:  # the page's path and its heatmap axes, before running anything
        check_output_path(html, "--html")
        from prfaas_plan.sweeps import grid_axes

        axes = grid_axes(grid)
        for flag, a in (("--x", x), ("--y", y)):
            if a is not None and a not in axes:
                raise InvalidInput(f"{flag}: {a!r} is not an axis of {grid}; axes: {', '.join(axes) or 'none'}")
        if not axes:
            raise InvalidInput(f"--html: {grid} has no axes to draw")


def sweep(
    grid: Annotated[Path, typer.Argument(help="grid YAML: base scenario, axes to vary, what to run per cell")],
    output: Annotated[Path, typer.Option("--output", "-o", help="results parquet; finished cells are kept in OUTPUT.cells/ so a rerun resumes")],
    executor: Annotated[SweepExecutor, typer.Option(help="local process pool, dask.distributed cluster, or serial (this process)")] = "local",
    scheduler: Annotated[Optional[str], typer.Option(help="with --executor dask: scheduler address (tcp://host:8786); default a LocalCluster")] = None,
    workers: Annotated[Optional[int], typer.Option(help="parallel workers (default: one per CPU)")] = None,
    html: Annotated[Optional[Path], typer.Option(help="also write an offline HTML page of heatmaps")] = None,
    x: Annotated[Optional[str], typer.Option("--x", help="with --html: axis across (default: the first axis)")] = None,
    y: Annotated[Optional[str], typer.Option("--y", help="with --html: axis down (default: the second axis)")] = None,
    retry_failed: Annotated[bool, typer.Option(help="rerun cells saved with an error")] = False,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="progress bar on stderr")] = True,
    fmt: FormatOpt = "table",
) -> None:
    """Plan (or simulate) every cell of a grid of scenario variants in parallel; resumable; parquet out."""
    from prfaas_plan.report import sweep_report
    from prfaas_plan.sweeps import sweep as run_sweep

    _check_sweep_flags(grid, output, html, x, y)
    try:
        df = run_sweep(grid, executor=executor, workers=workers, scheduler=scheduler, out=output,
                       progress=progress, retry_failed=retry_failed)
    except KeyboardInterrupt:
        typer.echo(f"interrupted: finished cells are saved in {output}.cells/; rerun the same command to resume",
                   err=True)
        raise typer.Exit(130) from None
    a = df.attrs
    typer.echo(f"{len(df)} rows ({a['computed']} computed, {a['reused']} reused, {a['infeasible']} infeasible, "
               f"{a['failed']} failed) -> {output}", err=True)
    if html is not None:
        typer.echo(f"wrote {sweep_report(df, html, x, y)}", err=True)
    if fmt != "table":
        emit(df, fmt)
        return
    keep = [*a["axes"], *(["seed"] if "seed" in df.columns else []), "lambda_max_rps", "threshold_tokens",
            "n_pd_p", "n_pd_d", "egress_gbps", "usd_per_million_tokens", "ttft_p90_s", "vs_homogeneous_pd", "status"]
    table = df[[c for c in dict.fromkeys(keep) if c in df.columns]]
    emit(table.head(60), fmt, f"Sweep {a['grid']} ({len(df)} rows{', first 60' if len(df) > 60 else ''}; "
         f"all columns in {output})", floats="{:,.3f}", col_floats={"threshold_tokens": "{:,.0f}"})
    for err, n in df["error"].dropna().value_counts().head(5).items():
        typer.echo(f"{n} cell(s) without a plan: {err}", err=True)
