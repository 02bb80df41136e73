"""The ``size`` command: what to buy, where, and which line to lease for a target rate within the SLOs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from prfaas_plan.cli.output import FormatOpt, ScenarioArg, check_count, check_positive, emit
from prfaas_plan.errors import InvalidInput

if TYPE_CHECKING:
    from prfaas_plan.sizing import SizingResult

PARETO_RATE_SPAN = (0.25, 4.0)
"""``--pareto``: the rate frontier spans these multiples of the target rate (geometric)."""
PARETO_TTFT_SPAN = (0.5, 2.0)
"""``--pareto``: the TTFT frontier spans these multiples of the TTFT SLO (geometric; only with one)."""
MAX_PARETO_POINTS = 200
TABLE_COLUMNS = {"label": "candidate", "usd_per_hour": "$/hour", "margin_vs_winner": "vs winner",
                 "usd_per_million_tokens": "$/M tokens", "gpus": "GPUs", "n_prfaas": "PrfaaS", "n_pd_p": "PD-P",
                 "n_pd_d": "PD-D", "n_colocated": "colocated", "link": "link", "threshold_tokens": "t (tokens)",
                 "lambda_max_rps": "Lambda_max (req/s)", "ttft_quantile_s": "TTFT quantile (s)", "binding": "binding"}
"""The human table's columns (JSON and CSV carry every column of :meth:`SizingResult.table`)."""


def _names(text: Optional[str], flag: str) -> tuple[str, ...] | None:
    """A comma-separated flag (``h200,h20``) as names; None when not given."""
    if text is None:
        return None
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    if not names:
        raise InvalidInput(f"{flag}: give at least one name, comma-separated (e.g. h200,h20)")
    return names


def _document(res: SizingResult, frontiers: dict) -> dict:
    """The sizing as one JSON document: target, SLOs, winner, candidates, equal-cost rates, the
    loop's stopping rule, skipped instance types, and any frontiers (numbers as pandas writes them)."""
    import json
    from dataclasses import asdict

    table = res.table()
    candidates = json.loads(table.to_json(orient="records"))
    doc = {"target_rps": res.target_rps, "slo": asdict(res.slo), "winner": next(r for r in candidates if r["winner"]),
           "candidates": candidates,
           "equal_cost": json.loads(res.equal_cost_rps().to_json(orient="records")),
           "iterations": res.iterations, "stopping_rule": res.stopping_rule, "skipped": list(res.skipped)}
    doc["frontiers"] = {k: json.loads(df.to_json(orient="records")) for k, df in frontiers.items()}
    return doc


def _frontiers(sc, res: SizingResult, points: int, executor: str, size_kwargs: dict) -> dict:
    """``--pareto N``: $/hour vs target rate (N rates around the target) and, with a TTFT SLO,
    $/hour vs TTFT SLO (N SLOs around it)."""
    import numpy as np

    from prfaas_plan.sizing.pareto import frontier_cost_vs_rate, frontier_cost_vs_ttft

    rates = list(res.target_rps * np.geomspace(*PARETO_RATE_SPAN, points))
    out = {"rate": frontier_cost_vs_rate(sc, rates, res.slo, executor=executor, **size_kwargs)}
    if res.slo.ttft_s is not None:
        slos = list(res.slo.ttft_s * np.geomspace(*PARETO_TTFT_SPAN, points))
        out["ttft"] = frontier_cost_vs_ttft(sc, res.target_rps, slos, ttft_quantile=res.slo.ttft_quantile,
                                            tpot_s=res.slo.tpot_s, executor=executor, **size_kwargs)
    return out


def _print(res: SizingResult) -> None:
    """The winner in one line, the candidates table, the equal-cost table."""
    w = res.winner
    t = f", t = {w.threshold_tokens:,.0f} tokens" if w.threshold_tokens is not None else ""
    typer.echo(f"Cheapest for {res.target_rps:g} req/s: {w.label}, ${w.usd_per_hour:,.2f}/hour "
               f"(${w.usd_per_million_tokens:,.3f}/M tokens; GPUs ${w.gpu_usd_per_hour:,.2f} + link "
               f"${w.link_usd_per_hour:,.2f} + energy ${w.energy_usd_per_hour:,.2f}); buys {w.bill_of_materials()}"
               f"{t}; binds on {w.binding}")
    df = res.table()
    df.loc[~df["feasible"], ["usd_per_hour", "usd_per_million_tokens"]] = float("nan")  # shown as "-", not inf
    emit(df[list(TABLE_COLUMNS)].rename(columns=TABLE_COLUMNS), "table", "Candidates, cheapest first",
         floats="{:,.3f}", col_floats={"t (tokens)": "{:,.0f}", "$/hour": "{:,.2f}", "vs winner": "{:+.1%}"})
    eq = res.equal_cost_rps()
    emit(eq[["label", "rps_at_equal_cost", "vs_winner"]].rename(columns={
        "label": "candidate", "rps_at_equal_cost": "req/s at the winner's $/hour", "vs_winner": "vs winner (x)"}),
        "table", f"Throughput at equal cost (${w.usd_per_hour:,.2f}/hour)", floats="{:,.3f}")
    for c in res.candidates:
        if not c.feasible:
            typer.echo(f"{c.label}: infeasible: {c.reason}", err=True)
    for note in res.skipped:
        typer.echo(f"skipped {note}", err=True)


def size(
    scenario: ScenarioArg,
    target_rps: Annotated[float, typer.Option("--target-rps", help="requests/s the deployment must serve")],
    ttft_p90_s: Annotated[Optional[float], typer.Option("--ttft-p90-s", help="P90 TTFT SLO, seconds "
                                                        "(default: the scenario's TTFT SLO, if any)")] = None,
    tpot_ms: Annotated[Optional[float], typer.Option("--tpot-ms", help="TPOT SLO, ms per output token "
                                                     "(default: the scenario's)")] = None,
    gpus: Annotated[Optional[str], typer.Option(help="candidate GPU types, comma-separated (default: the "
                                                "scenario's two), e.g. h200,h20,h100,b200")] = None,
    layouts: Annotated[Optional[str], typer.Option(help="candidate parallel layouts, comma-separated (default: "
                                                   "each pool's own), e.g. tp8,tp8-ep8,tp16")] = None,
    link_tiers: Annotated[Optional[Path], typer.Option("--link-tiers", help="link tiers YAML (default: the "
                                                       "bundled cost_db/link_tiers.yaml)")] = None,
    max_instances: Annotated[int, typer.Option(help="most instances per role")] = 64,
    pareto: Annotated[Optional[int], typer.Option(help="also size N points of $/hour vs target rate (and vs "
                                                  "TTFT SLO, with one) around this sizing")] = None,
    executor: Annotated[str, typer.Option(help="with --pareto: serial (this process) or dask "
                                          "(a dask.distributed LocalCluster)")] = "serial",
    html: Annotated[Optional[Path], typer.Option(help="also write an offline HTML page of the sizing")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="also write the sizing as JSON")] = None,
    fmt: FormatOpt = "table",
) -> None:
    """Size a deployment: the cheapest GPUs per site and role, instances, layouts, link tier and
    routing that serve --target-rps within the TTFT and TPOT SLOs, against homogeneous PD,
    colocated and naive heterogeneous serving on each GPU type."""
    from prfaas_plan.data import atomic_write, check_output_path
    from prfaas_plan.scenario import load_scenario
    from prfaas_plan.sizing import MAX_INSTANCES_LIMIT, SizingSLO, load_link_tiers
    from prfaas_plan.sizing import size as run_size

    check_positive(target_rps, "--target-rps", "requests/s")
    for value, flag, unit in ((ttft_p90_s, "--ttft-p90-s", "seconds"), (tpot_ms, "--tpot-ms", "milliseconds")):
        if value is not None:
            check_positive(value, flag, unit)
    check_count(max_instances, "--max-instances", MAX_INSTANCES_LIMIT, "instances")
    if pareto is not None:
        check_count(pareto, "--pareto", MAX_PARETO_POINTS, "points")
    if executor not in ("serial", "dask"):
        raise InvalidInput(f"--executor: {executor!r} is not an executor; use serial or dask")
    if executor != "serial" and pareto is None:
        raise InvalidInput("--executor: only with --pareto N")
    for path, flag in ((out, "--out"), (html, "--html")):
        if path is not None:
            check_output_path(path, flag)
    tiers = load_link_tiers(link_tiers) if link_tiers is not None else None
    sc = load_scenario(scenario)
    slo = SizingSLO.of_scenario(sc)
    if ttft_p90_s is not None:
        slo = replace(slo, ttft_s=ttft_p90_s, ttft_quantile=0.9)
    if tpot_ms is not None:
        slo = replace(slo, tpot_s=tpot_ms / 1e3)
    kwargs = dict(gpus=_names(gpus, "--gpus"), link_tiers=tiers, layouts=_names(layouts, "--layouts"),
                  max_instances_per_role=max_instances)
    res = run_size(sc, target_rps, slo, **kwargs)
    frontiers = _frontiers(sc, res, pareto, executor, kwargs) if pareto is not None else {}
    if out is not None:
        import json

        atomic_write(out, json.dumps(_document(res, frontiers), indent=2))
        typer.echo(f"wrote {out}", err=True)
    if html is not None:
        from prfaas_plan.report.sizing_page import sizing_page

        typer.echo(f"wrote {sizing_page(res, frontiers, html)}", err=True)
    if fmt == "table":
        _print(res)
    else:
        emit(res.table(), fmt)
