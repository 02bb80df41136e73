"""The validation command: predicted against measured TTFT and TPOT of serving runs (``validate``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, Optional

import typer

from prfaas_plan.cli.output import FormatOpt, emit
from prfaas_plan.errors import InvalidInput
from prfaas_plan.vocab import MoeRouting

if TYPE_CHECKING:
    import pandas as pd

Source = Literal["silicon", "runs"]


def validate(
    source: Annotated[Source, typer.Argument(help="silicon (aiconfigurator-core's measured runs) or runs (vllm bench serve result JSON files)")] = "silicon",
    path: Annotated[Optional[Path], typer.Argument(help="with runs: a result JSON or a folder of them")] = None,
    csv: Annotated[Optional[Path], typer.Option("--csv", help="with silicon: this silicon_sample.csv instead of the installed aiconfigurator-core's")] = None,
    system: Annotated[Optional[list[str]], typer.Option("--system", help="only this system (h200 or h200_sxm; repeatable)")] = None,
    rows: Annotated[bool, typer.Option("--rows", help="print every row instead of the summary")] = False,
    html: Annotated[Optional[Path], typer.Option("--html", help="also write an offline HTML page: scatter plots and the worst rows")] = None,
    moe_routing: Annotated[MoeRouting, typer.Option("--moe-routing", help="with silicon: token routing the MoE kernel tables are read at (balanced, power_law_1.01: AIConfigurator's default)")] = "balanced",
    fmt: FormatOpt = "table",
) -> None:
    """How far the performance model lands from measured serving runs it was never fitted to:
    per system and model (and per serving engine), n and the median and max |error| of TTFT and TPOT,
    and rows per status."""
    from prfaas_plan.validate import status_counts, summary, system_names, validate_runs, validate_silicon

    if source == "runs" and path is None:
        raise InvalidInput("runs: give the result JSON file or folder: prfaas-plan validate runs PATH")
    if source == "silicon" and path is not None:
        raise InvalidInput("silicon: takes no PATH; give the CSV with --csv PATH")
    if source == "runs" and csv is not None:
        raise InvalidInput("--csv: only with silicon")
    if html is not None and html.exists() and html.is_dir():
        raise InvalidInput(f"--html: {html} is a folder; give a file name such as validate.html")
    df = validate_silicon(csv, system, moe_routing) if source == "silicon" else validate_runs(path)
    if source == "runs" and system:
        df = df[df["system"].isin(system_names(system))]
    if html is not None:
        from prfaas_plan.report.validate_page import validate_report

        validate_report(df, html)
        typer.echo(f"wrote {html}", err=True)
    if rows:
        emit(df, fmt)
        return
    summ = summary(df)
    if fmt != "table":
        emit(summ, fmt)
        return
    short = {c: c.replace("_median_abs_error_pct", " median").replace("_max_abs_error_pct", " max")
                 .replace("_median_signed_error_pct", " bias").replace("_rows_beyond_2x", " >2x")
                 .replace("ttft", "TTFT").replace("tpot", "TPOT") for c in summ.columns}
    emit(summ.rename(columns=short), fmt, title="|error|, % of the measured value, predicted runs, each once (bias: median signed error, below 0 "
               "predicted faster than measured; >2x: rows more than 2x off, either way)",
         floats="{:,.1f}")
    engines = summary(df, by="engine")
    emit(engines.rename(columns=short), fmt, title="the same per serving engine", floats="{:,.1f}")
    emit(status_counts(df), fmt, title="rows per status")
    _echo_mapping(df)
    _echo_prompt_compute(df)


RECIPE_LINES = (
    ("recipe_budget", "at their launch script's token budget per step"),
    ("recipe_kv_dtype", "at their launch script's KV-cache dtype"),
    ("recipe_scheduler", "at their launch script's running-request cap or scheduler polling"),
    ("recipe_memory", "at their launch script's static memory share"),
    ("recipe_experts_dtype", "at their launch script's experts dtype"),
    ("recipe_moe_kernel", "with their launch script's experts kernel"),
    ("recipe_experts_tp", "with their launch script's experts tensor-parallel (the row names expert ranks)"),
    ("generator_launch", "as AIConfigurator's generator launched SGLang (mixed chunks, --max-prefill-tokens ISL + 1500)"),
)
"""The launch-script settings a validation frame counts (its ``attrs``, validate._frame), as the table's lines say them."""


def _echo_mapping(df: pd.DataFrame) -> None:
    """How the frame's rows were mapped (its ``attrs``): run protocols, launch-script settings,
    disaggregated recipes, relabelling rules; lines with a count of 0 are left out."""
    protocols = df.attrs.get("protocols")
    if protocols:  # which rows were predicted as finite benchmark runs (validate.PROTOCOLS)
        typer.echo("rows mapped per run protocol: " + ", ".join(f"{name} {n:,}" for name, n in protocols.items() if n))
    for attr, what in RECIPE_LINES:  # InferenceX runs at their launch script's settings (inferencex.RECIPES)
        if df.attrs.get(attr):
            typer.echo(f"rows run {what}: {df.attrs[attr]:,}")
    if df.attrs.get("recipe_workers"):  # disaggregated runs at their recipe's workers (inferencex.DISAGG_RECIPES)
        typer.echo(f"disaggregated rows at their recipe's worker counts: {df.attrs['recipe_workers']:,} "
                   f"({df.attrs.get('recipe_dp_attention', 0):,} with its DP attention)")
    remapped = {name: n for name, n in df.attrs.get("remapped", {}).items() if n}
    if remapped:  # rows predicted otherwise than their labels say (validate.REMAPS)
        typer.echo("rows predicted otherwise than labelled: " + ", ".join(f"{name} {n:,}" for name, n in remapped.items()))


def _echo_prompt_compute(df: pd.DataFrame) -> None:
    """The predicted run whose prompts alone needed the largest share of its GPUs' peak at its
    measured request rate (validate.prompt_peak_share), and how many needed more than all of it."""
    from prfaas_plan.validate import errors_pct, prompt_peak_share

    ok = errors_pct(df)
    share = prompt_peak_share(ok).dropna()
    if share.empty:
        return
    top = ok.loc[share.idxmax()]
    version = top["engine_version"] if isinstance(top["engine_version"], str) else ""  # a run may not name it
    typer.echo(f"prompt compute at the measured request rate: at most {share.max():.1%} of the GPUs' fastest dense "
               f"peak ({top['model']} on {top['system']}, {' '.join(filter(None, (top['engine'], version)))}, "
               f"{top['isl']:.0f}/{top['osl']:.0f} tokens, {top['concurrency']:.0f} clients); "
               f"runs above 100%, which cannot have prefilled every prompt: {int((share > 1).sum())}")
