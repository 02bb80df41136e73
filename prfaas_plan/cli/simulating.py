"""The simulation command: a scenario's plan run through the discrete-event simulator (``simulate``)."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from prfaas_plan.cli.output import FormatOpt, ModelDbOpt, ScenarioArg, check_positive, db_dirs, emit
from prfaas_plan.defaults import DEFAULT_SIM_DURATION_S, PREFIX_BLOCK_TOKENS
from prfaas_plan.errors import InvalidInput
from prfaas_plan.vocab import Policy

if TYPE_CHECKING:
    from prfaas_plan.planner import PlanResult
    from prfaas_plan.scenario import Scenario
    from prfaas_plan.sim import SimResult


def _link_events(duration_s: Optional[float], rate_scale: float, load: Optional[float], trace: Optional[Path],
                 prefix_cache_blocks: Optional[int], link_drop: Optional[str], link_trace: Optional[Path],
                 out: Optional[Path]) -> list:
    """The flags checked before seconds of planning, and the link's rate changes they give."""
    from prfaas_plan.sim import check_out_dir, parse_link_drop, read_link_trace

    if link_drop is not None and link_trace is not None:
        raise InvalidInput("--link-drop/--link-trace: give one of them, not both")
    if duration_s is not None and not duration_s > 0:
        raise InvalidInput("--duration: give a positive number of seconds")
    check_positive(rate_scale, "--rate-scale", "times the arrival rate")
    if load is not None:
        check_positive(load, "--load", "times Lambda_max")
    if trace is not None and load is not None:
        raise InvalidInput("--load: a trace brings its own arrivals; scale them with --rate-scale")
    if prefix_cache_blocks is not None and (trace is None or prefix_cache_blocks < 0):
        raise InvalidInput("--prefix-cache-blocks: only with --trace, and at least 0")
    if out is not None:
        check_out_dir(out)
    events = parse_link_drop(link_drop) if link_drop else read_link_trace(link_trace) if link_trace else []
    horizon_s = duration_s if duration_s is not None else DEFAULT_SIM_DURATION_S
    late = [ev for ev in events if trace is None and ev[0] >= horizon_s]
    if late and link_drop:
        raise InvalidInput(f"--link-drop: the window {late[0][0]:g}-{late[0][1]:g} s starts after the {horizon_s:g} s of "
                           f"simulated arrivals; give --duration above {late[0][1]:g} or an earlier window")
    return events


@contextmanager
def _collector_spared() -> Iterator[Callable[[], None]]:
    """Keep the cyclic garbage collector off what the command sets up and keeps to its end.

    The set-up (the library's imports, the trace and the plan: over 0.1 million
    tracked objects, nearly all of them kept to the end) runs with the collector paused (its
    collections scanned them 0.1-0.2 s per run); the function this
    yields, called when the set-up is done, freezes what it made (``gc.freeze``) and lets the
    collector run again, so that the collections during the simulation scan only the
    simulation's own objects. When the command ends, also on an error, the collector is as it
    was and nothing is frozen (tests call the command in a process that goes on). Timing only:
    nothing that is computed depends on when garbage is collected."""
    enabled = gc.isenabled()

    def set_up_done() -> None:
        gc.freeze()
        if enabled:
            gc.enable()

    gc.disable()
    try:
        yield set_up_done
    finally:
        gc.unfreeze()
        if enabled:
            gc.enable()


def simulate(
    scenario: ScenarioArg,
    trace: Annotated[Optional[Path], typer.Option(help="replay this trace (Mooncake JSONL, Azure CSV); the plan is made for it")] = None,
    duration: Annotated[Optional[float], typer.Option(help=f"simulated seconds of arrivals (default {DEFAULT_SIM_DURATION_S:g}; with --trace the whole trace)")] = None,
    rate_scale: Annotated[float, typer.Option(help="multiply the arrival rate (trace timestamps are divided by it)")] = 1.0,
    load: Annotated[Optional[float], typer.Option(help="Poisson arrivals at this fraction of Lambda_max (above 1: overload; default: the scenario's load)")] = None,
    policy: Annotated[Policy, typer.Option(help="fixed (the plan), short (short-term threshold rule), dual (plus P:D rebalancing)")] = "fixed",
    link_drop: Annotated[Optional[str], typer.Option(help="link degradation FROM:TO@START-END in Gbps and seconds, e.g. 100:20@600-1200")] = None,
    link_trace: Annotated[Optional[Path], typer.Option(help="CSV time_s,gbps: the link's nominal rate over time")] = None,
    prefix_cache_blocks: Annotated[Optional[int], typer.Option(help=f"with --trace: LRU prefix cache per cluster in {PREFIX_BLOCK_TOKENS}-token blocks (0 = off; omit = unlimited)")] = None,
    seed: Annotated[int, typer.Option(help="random seed (arrivals, lengths, routing)")] = 0,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="folder (created if missing) to stream requests.parquet and timeseries.parquet into, with summary.json and manifest.json; other files there are left alone, a previous run's are replaced together")] = None,
    fmt: FormatOpt = "table",
    model_db: ModelDbOpt = None,
) -> None:
    """Discrete-event simulation of the scenario's plan: TTFT, TPOT, throughput, egress, queues and
    hit rates, under Poisson arrivals or a trace, a scheduling policy and link degradations.

    Over a million requests, a run keeps running totals and t-digest percentiles (flat memory); --out keeps every record."""
    with _collector_spared() as set_up_done:  # the summary inside too: the set-up stays frozen until the end
        sc, res, sim = _planned_and_simulated(scenario, trace, duration, rate_scale, load, policy, link_drop,
                                              link_trace, prefix_cache_blocks, seed, out, model_db, set_up_done)
        _print_summary(sc, res, sim, policy, seed, out, fmt)


def _print_summary(sc: Scenario, res: PlanResult, sim: SimResult, policy: Policy, seed: int, out: Optional[Path],
                   fmt: str) -> None:
    """The simulation's summary: a table under a line naming the plan, or one JSON/CSV row."""
    if out is not None:
        typer.echo(f"wrote {out}", err=True)
    summary = sim.summary()
    if fmt != "table":
        emit([summary], fmt)
        return
    typer.echo(f"{sc.spec.name}\n{policy} policy, {sim.duration_s:,.0f} s of arrivals, seed {seed}; plan: "
               f"{res.plan.routing_text()}, PrfaaS {res.instances['prfaas']} + PD-P "
               f"{res.instances['pd_p']} + PD-D {res.instances['pd_d']}, Lambda_max = {res.lambda_max_rps:.3f} req/s")
    rows = [{"metric": k, "value": f"{v:,}" if isinstance(v, int) else f"{v:,.3f}"} for k, v in summary.items()]
    emit(rows, fmt, "Simulation summary")


def _planned_and_simulated(scenario: str, trace: Optional[Path], duration: Optional[float], rate_scale: float,
                           load: Optional[float], policy: Policy, link_drop: Optional[str], link_trace: Optional[Path],
                           prefix_cache_blocks: Optional[int], seed: int, out: Optional[Path],
                           model_db: Optional[list[Path]],
                           set_up_done: Callable[[], None]) -> tuple[Scenario, PlanResult, SimResult]:
    """The scenario, its plan and the simulation of it; ``set_up_done`` is called between the
    plan and the simulation (see :func:`_collector_spared`)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from prfaas_plan.planner import plan as run_plan
    from prfaas_plan.scenario import load_scenario
    from prfaas_plan.sim import simulate as run_simulation

    events = _link_events(duration, rate_scale, load, trace, prefix_cache_blocks, link_drop, link_trace, out)
    sc = load_scenario(scenario, db_dirs(model_db))
    if trace is not None:
        sc = sc.with_trace(trace, prefix_cache_blocks)
    res = run_plan(sc)
    set_up_done()
    duration_s = duration if duration is not None or trace is not None else DEFAULT_SIM_DURATION_S  # None: the trace's
    with Progress(TextColumn("simulating"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("simulate", total=1.0)
        sim = run_simulation(sc, res, load=load, duration_s=duration_s, rate_scale=rate_scale,
                             policy=policy, link_events=events, seed=seed,
                             progress=lambda done: bar.update(task, completed=done), out_dir=out)
    return sc, res, sim
