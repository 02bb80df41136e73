"""The ``prfaas-plan`` command line: a thin typer layer over the library.

Every command prints a human table by default and ``--format json|csv`` for machines. Bad input
raises :class:`~prfaas_plan.errors.PlanError`, which :func:`main` prints as one line on stderr
with exit code 2 (no traceback). Heavy modules are imported inside the commands that need them.
"""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from prfaas_plan.cli.bench import bench_app
from prfaas_plan.cli.output import (
    ContextOpt,
    Format,
    FormatOpt,
    HardwareDbOpt,
    ModelDbOpt,
    _check_count,
    _check_positive,
    _dirs,
    emit,
)
from prfaas_plan.errors import InvalidInput, PlanError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Capacity planning for cross-datacenter prefill/decode-disaggregated LLM serving (PrfaaS). "
    "Token counts accept 32K, 32k or 32768 (K = 1024 tokens).",
)
app.add_typer(bench_app, name="bench")


@app.command()
def models(fmt: FormatOpt = Format.table, model_db: ModelDbOpt = None) -> None:
    """List the models in the database with their layer mix and cache bytes (bf16 KV, vLLM)."""
    from prfaas_plan.catalog import list_models

    df = list_models(_dirs(model_db))
    if fmt is Format.table:
        from prfaas_plan.units import MIB_BYTES

        df = df[["id", "layer_mix", "total_params_b", "active_params_b", "max_context_tokens",
                 "kv_bytes_per_token", "fixed_state_bytes"]].assign(fixed_state_bytes=df.fixed_state_bytes / MIB_BYTES)
        df = df.rename(columns={"layer_mix": "layers", "total_params_b": "params (bn)",
                                "active_params_b": "active params (bn)", "max_context_tokens": "max context (tokens)",
                                "kv_bytes_per_token": "KV (B/token)", "fixed_state_bytes": "fixed state (MiB)"})
    emit(df, fmt, "Models (cache bytes: bf16 KV, vLLM state dtypes; MiB = 2^20 B)", floats="{:,.1f}")


@app.command()
def hardware(fmt: FormatOpt = Format.table, hardware_db: HardwareDbOpt = None) -> None:
    """List the accelerators: dense TFLOP/s, memory, bandwidths, power and price."""
    from prfaas_plan.catalog import list_hardware

    df = list_hardware(_dirs(hardware_db))
    if fmt is Format.table:
        df = df.drop(columns=["name", "efficiency_provenance"]).rename(columns={
            "bf16_dense_tflops": "BF16 (TFLOP/s)", "fp8_dense_tflops": "FP8 (TFLOP/s)", "memory_gib": "HBM (GiB)",
            "memory_tb_per_s": "HBM (TB/s)", "scaleup_gb_per_s": "NVLink (GB/s/dir)", "nic_gbps": "NIC (Gbps)",
            "tdp_w": "TDP (W)", "price_usd_per_gpu_hour": "price ($/GPU-hour)", "price_date": "price date"})
        df["price date"] = df["price date"].str.slice(0, 7)
    emit(df, fmt, "Accelerators (dense TFLOP/s; GiB = 2^30 B; GB = 1e9 B; TB/s = 1e12 B/s)", floats="{:,.2f}")


class KvDtype(str, Enum):
    bf16 = "bf16"
    fp8 = "fp8"


class EngineName(str, Enum):
    vllm = "vllm"
    sglang = "sglang"
    hf = "hf"  # what a transformers cache holds (fp32 recurrent states, K conv columns)


@app.command()
def kv(
    model: Annotated[list[str], typer.Argument(help="model ids, YAML paths or HF config.json paths")],
    context: ContextOpt = "1K,8K,32K,128K",
    kv_dtype: Annotated[KvDtype, typer.Option(help="element type of the KV cache")] = KvDtype.bf16,
    engine: Annotated[EngineName, typer.Option(help="whose state-dtype rules to use")] = EngineName.vllm,
    tp: Annotated[int, typer.Option(help="tensor-parallel degree for the per-GPU column: it must divide the "
                                        "query heads, and divide the KV heads or be a multiple of them "
                                        "(then each KV head is replicated), as vLLM requires")] = 1,
    block_tokens: Annotated[Optional[int], typer.Option(help="round to pages of this many tokens")] = None,
    fmt: FormatOpt = Format.table,
    model_db: ModelDbOpt = None,
) -> None:
    """KV-cache bytes per token, fixed per-request state, and one request's bytes at each context."""
    import pandas as pd

    from prfaas_plan.kvcache import (
        CacheSettings,
        check_tp,
        fixed_state_bytes,
        kv_bytes,
        kv_bytes_per_token,
        per_gpu_kv_bytes,
    )
    from prfaas_plan.model.arch import load_model
    from prfaas_plan.units import MIB_BYTES, format_tokens, parse_token_list

    contexts = parse_token_list(context, "--context")
    if tp < 1:
        raise InvalidInput("--tp: tensor-parallel degree must be at least 1")
    settings = CacheSettings(kv_dtype=kv_dtype.value, engine=engine.value, block_tokens=block_tokens)
    rows = []
    for ref in model:
        m = load_model(ref, _dirs(model_db))
        check_tp(m, tp, "--tp")
        for l in contexts:
            if l > m.max_context_tokens:
                raise InvalidInput(f"--context: {format_tokens(l)} exceeds {m.id}'s maximum of {m.max_context_tokens} tokens")
            total = kv_bytes(m, l, settings)
            row = {"model": m.id, "context": format_tokens(l), "context_tokens": l,
                   "kv_bytes_per_token": kv_bytes_per_token(m, settings),
                   "fixed_state_bytes": fixed_state_bytes(m, settings),
                   "request_bytes": total, "request_mib": total / MIB_BYTES,
                   "context_extension": m.context_note(l)}
            if tp > 1:
                row[f"per_gpu_mib_tp{tp}"] = per_gpu_kv_bytes(m, l, tp, settings) / MIB_BYTES
            rows.append(row)
    df = pd.DataFrame(rows)
    notes = df.dropna(subset=["context_extension"]).groupby(["model", "context_extension"], sort=False)["context"]
    if fmt is Format.table:
        df = df.drop(columns=["context_tokens", "request_bytes", "context_extension"])
        df["fixed_state_bytes"] = df["fixed_state_bytes"] / MIB_BYTES
        df = df.rename(columns={"kv_bytes_per_token": "KV (B/token)", "fixed_state_bytes": "fixed state (MiB)",
                                "request_mib": "request (MiB)", f"per_gpu_mib_tp{tp}": f"per GPU (MiB, TP{tp})"})
    emit(df, fmt, f"KV cache per request ({settings.kv_dtype} KV, {settings.engine} state dtypes; MiB = 2^20 B)",
         floats="{:,.1f}")
    if fmt is Format.table:  # json / csv carry the note in their context_extension field
        from rich.console import Console

        for (model_id, note), at in notes:  # wrapped to the terminal like the table
            Console().print(f"note: {model_id} at {', '.join(at)} relies on {note}", markup=False, highlight=False)


@app.command()
def bandwidth(
    model: Annotated[list[str], typer.Argument(help="model ids, YAML paths or HF config.json paths")],
    hardware: Annotated[str, typer.Option(help="prefill GPU (hardware id or YAML path)")] = "h200",
    gpus: Annotated[int, typer.Option(help="GPUs per prefill instance")] = 8,
    context: ContextOpt = "1K,8K,32K,128K",
    cluster_gpus: Annotated[int, typer.Option(help="GPUs in the prefill cluster, for Eq. 2 egress")] = 512,
    link_gbps: Annotated[float, typer.Option(help="inter-DC line rate, Gbps (1e9 bit/s)")] = 100.0,
    link_efficiency: Annotated[Optional[float], typer.Option(help="usable fraction of the line rate (default: the toolkit's 0.9)")] = None,
    kv_dtype: Annotated[KvDtype, typer.Option(help="element type of the KV cache")] = KvDtype.bf16,
    fmt: FormatOpt = Format.table,
    model_db: ModelDbOpt = None,
    hardware_db: HardwareDbOpt = None,
) -> None:
    """KV throughput Phi_kv = S_kv / T_prefill per instance (Eq. 1), cluster egress (Eq. 2), and
    the largest prefill cluster the link can feed."""
    from prfaas_plan.bandwidth import bandwidth_table
    from prfaas_plan.defaults import DEFAULT_LINK_EFFICIENCY
    from prfaas_plan.hardware import MAX_INSTANCE_GPUS, MAX_POOL_GPUS, instance
    from prfaas_plan.kvcache import CacheSettings
    from prfaas_plan.model.arch import load_model
    from prfaas_plan.units import parse_token_list

    contexts = parse_token_list(context, "--context")
    link_efficiency = DEFAULT_LINK_EFFICIENCY if link_efficiency is None else link_efficiency
    _check_count(gpus, "--gpus", MAX_INSTANCE_GPUS, "GPUs per instance")
    _check_count(cluster_gpus, "--cluster-gpus", MAX_POOL_GPUS, "GPUs in the cluster")
    if not (0 < link_gbps < float("inf")) or not 0 < link_efficiency <= 1:  # rejects NaN too
        raise InvalidInput("--link-gbps must be positive and --link-efficiency in (0, 1]")
    inst = instance(hardware, gpus, _dirs(hardware_db))
    models = [load_model(m, _dirs(model_db)) for m in model]
    df = bandwidth_table(models, inst, contexts, cluster_gpus, link_gbps, link_efficiency,
                         CacheSettings(kv_dtype=kv_dtype.value))
    if fmt is Format.table:
        df = df.drop(columns=["context_tokens"]).rename(columns={
            "kv_mib": "S_kv (MiB)", "prefill_s": "T_prefill (s)", "phi_kv_gbps": "Phi_kv (Gbps)",
            "cluster_egress_gbps": f"egress of {cluster_gpus:,} GPUs (Gbps)",
            "max_prefill_gpus_on_link": f"max GPUs on {link_gbps:g} Gbps"})
    emit(df, fmt, f"KV throughput on {inst.name} ({kv_dtype.value} KV; {inst.gpu.efficiency.provenance})",
         floats="{:,.2f}")


@app.command()
def profile(
    model: Annotated[str, typer.Argument(help="model id or path")],
    hardware: Annotated[list[str], typer.Option(help="GPU ids to compare")] = ["h200", "h20"],
    gpus: Annotated[int, typer.Option(help="GPUs per instance")] = 8,
    context: ContextOpt = "1K,8K,32K,128K",
    tpot_ms: Annotated[float, typer.Option(help="decode SLO, ms per output token")] = 25.0,
    fmt: FormatOpt = Format.table,
    model_db: ModelDbOpt = None,
    hardware_db: HardwareDbOpt = None,
) -> None:
    """Predicted prefill latency (with its bound) and decode BS_max per GPU type, beside the
    measured profile of the built-in paper case study when it is the same model and instance
    (kimi-linear-1t on 8xH200: the PrfaaS paper's Table 5)."""
    import pandas as pd

    from prfaas_plan.hardware import MAX_INSTANCE_GPUS, instance
    from prfaas_plan.model.arch import load_model
    from prfaas_plan.perf.roofline import analytic_prefill, decode_capacity
    from prfaas_plan.scenario import load_scenario
    from prfaas_plan.units import format_tokens, parse_token_list

    _check_positive(tpot_ms, "--tpot-ms", "milliseconds per output token")
    _check_count(gpus, "--gpus", MAX_INSTANCE_GPUS, "GPUs per instance")
    paper = load_scenario("paper-case-study")
    contexts = parse_token_list(context, "--context")
    m = load_model(model, _dirs(model_db))
    rows = []
    for hw in hardware:
        inst = instance(hw, gpus, _dirs(hardware_db))
        lat = analytic_prefill(m, inst, contexts)
        for i, l in enumerate(contexts):
            cap = decode_capacity(m, inst, l, tpot_ms / 1e3)
            prof = paper.prfaas_profile if (m.id == paper.spec.model and inst.name == paper.prfaas_instance.name) else None
            measured = prof.prefill_s[prof.tokens.index(l)] if prof is not None and l in prof.tokens else None
            rows.append({"instance": inst.name, "context": format_tokens(l),
                         "prefill_s": float(lat.total_s[i]), "bound": str(lat.bound[i]),
                         "measured_s": measured if measured is not None else float("nan"),
                         "error_pct": (float(lat.total_s[i]) / measured - 1) * 100 if measured else float("nan"),
                         "decode_bs_max": cap.batch_max, "decode_step_ms": cap.step_s * 1e3,
                         "decode_binding": cap.binding})
    emit(pd.DataFrame(rows), fmt, f"{m.id}: prefill latency and decode capacity at {1e3 / tpot_ms:.0f} tokens/s",
         floats="{:,.2f}")


class Mode(str, Enum):
    exact = "exact"
    paper = "paper"


def _quick_scenario(model: str, prfaas: str, local: str, link_gbps: float, trace: Optional[Path],
                    prefix_cache_blocks: Optional[int]):
    """A scenario from command-line flags (``--prfaas h200:32 --local h20:64``)."""
    from prfaas_plan.data import validate
    from prfaas_plan.scenario import Scenario, ScenarioSpec

    def pool(text: str, flag: str) -> dict:
        gpu, _, count = text.partition(":")
        if not gpu or not count.isdigit():
            raise InvalidInput(f"{flag}: {text!r} is not GPU:COUNT, e.g. h200:32")
        return {"gpu": gpu, "gpus": int(count)}

    data = {"id": "quick", "name": f"{model} quick plan", "model": model, "prfaas": pool(prfaas, "--prfaas"),
            "local": pool(local, "--local"), "link": {"gbps": link_gbps}}
    sc = Scenario(validate(ScenarioSpec, data, "command-line flags"), "command-line flags")
    return sc.with_trace(trace, prefix_cache_blocks) if trace is not None else sc


def _write_plan_json(res, path: Path) -> None:
    """The plan as JSON, written atomically (never half-written)."""
    import json

    from prfaas_plan.data import atomic_write

    doc = {
        "scenario": res.scenario.spec.model_dump(), "mode": res.mode,
        "plans": json.loads(res.to_frame().to_json(orient="records")),
        "ttft": json.loads(res.ttft.to_json(orient="records")),
        "decode": {"batch_max": res.inputs.decode_batch_max, "step_s": res.inputs.decode_step_s,
                   "source": res.inputs.decode_source},
        "ratios": {k: res.ratio(k) for k in res.baselines},
    }
    atomic_write(path, json.dumps(doc, indent=2))
    typer.echo(f"wrote {path}", err=True)


@app.command()
def plan(
    scenario: Annotated[Optional[str], typer.Argument(help="scenario id (paper-case-study) or YAML path")] = None,
    mode: Annotated[Mode, typer.Option(help="exact (MILP over length buckets) or paper (Eqs. 3-8, grid search)")] = Mode.exact,
    load: Annotated[Optional[float], typer.Option(help="fraction of Lambda_max at which TTFT is reported")] = None,
    model: Annotated[Optional[str], typer.Option(help="quick form: model id")] = None,
    prfaas: Annotated[str, typer.Option(help="quick form: PrfaaS pool GPU:COUNT")] = "h200:32",
    local: Annotated[str, typer.Option(help="quick form: local PD pool GPU:COUNT")] = "h20:64",
    link_gbps: Annotated[Optional[float], typer.Option(help="inter-DC link, Gbps (overrides the scenario; 0 = no link: "
                                                            "every request is prefilled locally)")] = None,
    trace: Annotated[Optional[Path], typer.Option(help="workload from a trace (Mooncake JSONL, Azure CSV)")] = None,
    prefix_cache_blocks: Annotated[Optional[int], typer.Option(help="with --trace: LRU prefix cache in 512-token blocks (0 = off; omit = unlimited)")] = None,
    no_prefix_cache: Annotated[bool, typer.Option(help="with --trace: no prefix caching")] = False,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="also write the plans, TTFT and inputs as JSON")] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Plan PrfaaS-PD: threshold t, instance split, Lambda_max, egress, cost and TTFT, against the
    homogeneous-PD and naive-heterogeneous baselines."""
    from prfaas_plan.planner import plan as run_plan
    from prfaas_plan.scenario import load_scenario

    cache_blocks = 0 if no_prefix_cache else prefix_cache_blocks
    if (prefix_cache_blocks is not None or no_prefix_cache) and trace is None:
        raise InvalidInput("--prefix-cache-blocks/--no-prefix-cache: only with --trace")
    if out is not None:
        from prfaas_plan.data import check_output_path

        check_output_path(out, "--out")
    if scenario is None:
        if model is None:
            raise InvalidInput("give a SCENARIO (e.g. paper-case-study) or --model with --prfaas/--local")
        sc = _quick_scenario(model, prfaas, local, link_gbps if link_gbps is not None else 100.0, trace, cache_blocks)
    else:
        sc = load_scenario(scenario)
        changes = {}
        if link_gbps is not None:
            changes["link.gbps"] = link_gbps
        if changes:
            sc = sc.with_updates(**changes)
        if trace is not None:
            sc = sc.with_trace(trace, cache_blocks)
    res = run_plan(sc, mode=mode.value, load=load)
    if out is not None:
        _write_plan_json(res, out)
    if fmt is not Format.table:
        emit(res.to_frame(), fmt)
        return
    p = res.plan
    q = round(sc.spec.slo.ttft_quantile * 100)
    head = (f"{sc.spec.name}\n{mode.value} mode: {p.routing_text()}; PrfaaS {p.instances['prfaas']} + PD-P {p.instances['pd_p']} + PD-D "
            f"{p.instances['pd_d']} instances, Lambda_max = {p.lambda_max_rps:.3f} req/s, egress "
            f"{p.egress_gbps:.1f} Gbps ({p.link_utilisation:.0%} of {p.link_gbps:g}), binding: {p.binding}; "
            f"decode BS_max {res.inputs.decode_batch_max} at {res.inputs.decode_step_s * 1e3:.1f} ms/step "
            f"({res.inputs.decode_source}); output length L_out {res.inputs.output_tokens:,.0f} tokens "
            f"({sc.output_tokens_source})")
    typer.echo(head)
    df = res.display_frame()  # no single t for per-bucket routing: the line above says how it routes
    cols = {"plan": "plan", "threshold_tokens": "t (tokens)", "n_prfaas": "PrfaaS", "n_pd_p": "PD-P",
            "n_pd_d": "PD-D", "lambda_max_rps": "Lambda_max (req/s)", "throughput_vs_this": "PrfaaS-PD / this (x)",
            "egress_gbps": "egress (Gbps)", "usd_per_million_tokens": "cost ($/M tokens)",
            f"p{q}_ttft_s_common_rate": f"P{q} TTFT (s)", "binding": "binding"}
    emit(df[[c for c in cols if c in df.columns]].rename(columns=cols), fmt,
         f"Plans (P{q} TTFT at a common rate of {res.ttft[res.ttft.basis == 'common rate'].rate_rps.iloc[0]:.2f} req/s)",
         floats="{:,.3f}", col_floats={"t (tokens)": "{:,.0f}"})


class SweepExecutor(str, Enum):
    local = "local"
    dask = "dask"
    serial = "serial"


@app.command()
def sweep(
    grid: Annotated[Path, typer.Argument(help="grid YAML: base scenario, axes to vary, what to run per cell")],
    output: Annotated[Path, typer.Option("--output", "-o", help="results parquet; finished cells are kept in OUTPUT.cells/ so a rerun resumes")],
    executor: Annotated[SweepExecutor, typer.Option(help="local process pool, dask.distributed cluster, or serial (this process)")] = SweepExecutor.local,
    scheduler: Annotated[Optional[str], typer.Option(help="with --executor dask: scheduler address (tcp://host:8786); default a LocalCluster")] = None,
    workers: Annotated[Optional[int], typer.Option(help="parallel workers (default: one per CPU)")] = None,
    html: Annotated[Optional[Path], typer.Option(help="also write an offline HTML page of heatmaps")] = None,
    x: Annotated[Optional[str], typer.Option("--x", help="with --html: axis across (default: the first axis)")] = None,
    y: Annotated[Optional[str], typer.Option("--y", help="with --html: axis down (default: the second axis)")] = None,
    retry_failed: Annotated[bool, typer.Option(help="rerun cells saved with an error")] = False,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="progress bar on stderr")] = True,
    fmt: FormatOpt = Format.table,
) -> None:
    """Plan (or simulate) every cell of a grid of scenario variants in parallel; resumable; parquet out."""
    from prfaas_plan.data import check_output_path
    from prfaas_plan.sweeps import sweep as run_sweep
    from prfaas_plan.sweeps import sweep_report

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
    try:
        df = run_sweep(grid, executor=executor.value, workers=workers, scheduler=scheduler, out=output,
                       progress=progress, retry_failed=retry_failed)
    except KeyboardInterrupt:
        typer.echo(f"interrupted: finished cells are saved in {output}.cells/; rerun the same command to resume",
                   err=True)
        raise typer.Exit(130) from None
    a = df.attrs
    typer.echo(f"{len(df)} rows ({a['computed']} computed, {a['reused']} reused, {a['failed']} failed) -> {output}",
               err=True)
    if html is not None:
        typer.echo(f"wrote {sweep_report(df, html, x, y)}", err=True)
    if fmt is not Format.table:
        emit(df, fmt)
        return
    keep = [*a["axes"], *(["seed"] if "seed" in df.columns else []), "lambda_max_rps", "threshold_tokens",
            "n_pd_p", "n_pd_d", "egress_gbps", "usd_per_million_tokens", "ttft_p90_s", "vs_homogeneous_pd", "status"]
    table = df[[c for c in dict.fromkeys(keep) if c in df.columns]]
    emit(table.head(60), fmt, f"Sweep {a['grid']} ({len(df)} rows{', first 60' if len(df) > 60 else ''}; "
         f"all columns in {output})", floats="{:,.3f}", col_floats={"threshold_tokens": "{:,.0f}"})
    for err, n in df["error"].dropna().value_counts().head(5).items():
        typer.echo(f"{n} cell(s) failed: {err}", err=True)


HtmlOutOpt = Annotated[Path, typer.Option("--output", "-o", help="HTML file to write (one self-contained file, works offline)")]
PngOpt = Annotated[Optional[Path], typer.Option("--png", help="also write every chart as PNG (2x) and SVG into this folder, for slides")]


def _wrote(path: Path, started: float, png: Optional[Path]) -> None:
    import time

    typer.echo(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - started:.1f} s"
               + (f"; charts as PNG and SVG in {png}" if png is not None else ""), err=True)


@app.command()
def compare(
    model: Annotated[Optional[list[str]], typer.Argument(help="model ids, YAML or HF config.json paths (default: minimax-m2.5 qwen3-235b-a22b qwen3.5-397b-a17b mimo-v2-flash ring-2.5-1t kimi-linear-1t)")] = None,
    output: HtmlOutOpt = ...,
    hardware: Annotated[str, typer.Option(help="prefill GPU (hardware_db id) for T_prefill and Phi_kv")] = "h200",
    gpus: Annotated[int, typer.Option(help="GPUs per prefill instance")] = 8,
    cluster_gpus: Annotated[int, typer.Option(help="GPUs of the prefill cluster whose egress is charted (Eq. 2)")] = 512,
    context: Annotated[str, typer.Option("--context", "-c", help="reference prompt length for the bars and the table (K = 1024)")] = "32K",
    kv_dtype: Annotated[KvDtype, typer.Option(help="element type of the KV cache")] = KvDtype.bf16,
    engine: Annotated[EngineName, typer.Option(help="whose state-dtype rules to use")] = EngineName.vllm,
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

    started = time.perf_counter()
    _check_count(gpus, "--gpus", MAX_INSTANCE_GPUS, "GPUs per instance")
    _check_count(cluster_gpus, "--cluster-gpus", MAX_POOL_GPUS, "GPUs in the cluster")
    path = write_compare(model or None, output, hardware=hardware, gpus=gpus, cluster_gpus=cluster_gpus, png_dir=png,
                         context_tokens=parse_tokens(context, "--context"),
                         settings=CacheSettings(kv_dtype=kv_dtype.value, engine=engine.value),
                         extra_model_dirs=_dirs(model_db), extra_hardware_dirs=_dirs(hardware_db))
    _wrote(path, started, png)


@app.command()
def report(
    scenario: Annotated[str, typer.Argument(help="scenario id (paper-case-study) or YAML path")],
    output: HtmlOutOpt = ...,
    mode: Annotated[Mode, typer.Option(help="exact (MILP over length buckets) or paper (Eqs. 3-8, grid search)")] = Mode.exact,
    png: PngOpt = None,
    load: Annotated[Optional[float], typer.Option(help="fraction of Lambda_max for TTFT and the simulation")] = None,
    trace: Annotated[Optional[Path], typer.Option(help="workload from a trace (Mooncake JSONL, Azure CSV)")] = None,
    prefix_cache_blocks: Annotated[Optional[int], typer.Option(help="with --trace: LRU prefix cache in 512-token blocks (0 = off; omit = unlimited)")] = None,
    simulate: Annotated[Optional[bool], typer.Option("--simulate/--no-simulate", help="simulate for time series and a simulated TTFT (default: when the simulator is installed)")] = None,
    sim_duration: Annotated[float, typer.Option(help="simulated seconds of arrivals")] = 600.0,
    seed: Annotated[int, typer.Option(help="simulation seed")] = 0,
    model_db: ModelDbOpt = None,
) -> None:
    """HTML report of a scenario's plan: inputs, recommended plan and binding constraint, baselines,
    Lambda_max against t and the P:D split, TTFT, egress and queues, cost, formulas, assumptions."""
    import time

    from prfaas_plan.report import write_report
    from prfaas_plan.scenario import load_scenario

    started = time.perf_counter()
    if not (0 < sim_duration < float("inf")):  # rejects NaN too
        raise InvalidInput("--sim-duration: give a positive number of seconds")
    if seed < 0:  # as simulate: numpy seeds are whole numbers >= 0
        raise InvalidInput(f"--seed: {seed} must be a whole number >= 0")
    sc = load_scenario(scenario, _dirs(model_db))
    if trace is not None:
        sc = sc.with_trace(trace, prefix_cache_blocks)
    path = write_report(sc, output, mode=mode.value, png_dir=png, simulate=simulate, sim_duration_s=sim_duration,
                        seed=seed, load=load)
    _wrote(path, started, png)


class PolicyName(str, Enum):
    fixed = "fixed"
    short = "short"
    dual = "dual"


@app.command("simulate")
def simulate_cmd(
    scenario: Annotated[str, typer.Argument(help="scenario id (paper-case-study) or YAML path")],
    trace: Annotated[Optional[Path], typer.Option(help="replay this trace (Mooncake JSONL, Azure CSV); the plan is made for it")] = None,
    duration: Annotated[Optional[float], typer.Option(help="simulated seconds of arrivals (default 600; with --trace the whole trace)")] = None,
    rate_scale: Annotated[float, typer.Option(help="multiply the arrival rate (trace timestamps are divided by it)")] = 1.0,
    load: Annotated[Optional[float], typer.Option(help="Poisson arrivals at this fraction of Lambda_max (above 1: overload; default: the scenario's load)")] = None,
    policy: Annotated[PolicyName, typer.Option(help="fixed (the plan), short (short-term threshold rule), dual (plus P:D rebalancing)")] = PolicyName.fixed,
    link_drop: Annotated[Optional[str], typer.Option(help="link degradation FROM:TO@START-END in Gbps and seconds, e.g. 100:20@600-1200")] = None,
    link_trace: Annotated[Optional[Path], typer.Option(help="CSV time_s,gbps: the link's nominal rate over time")] = None,
    prefix_cache_blocks: Annotated[Optional[int], typer.Option(help="with --trace: LRU prefix cache per cluster in 512-token blocks (0 = off; omit = unlimited)")] = None,
    seed: Annotated[int, typer.Option(help="random seed (arrivals, lengths, routing)")] = 0,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="folder (created if missing) to stream requests.parquet and timeseries.parquet into, with summary.json and manifest.json; other files there are left alone, a previous run's are replaced together")] = None,
    fmt: FormatOpt = Format.table,
    model_db: ModelDbOpt = None,
) -> None:
    """Discrete-event simulation of the scenario's plan: TTFT, TPOT, throughput, egress, queues and
    hit rates, under Poisson arrivals or a trace, a scheduling policy and link degradations.

    Over a million requests, a run keeps running totals and t-digest percentiles (flat memory); --out keeps every record."""
    import pandas as pd
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from prfaas_plan.defaults import DEFAULT_SIM_DURATION_S
    from prfaas_plan.planner import plan as run_plan
    from prfaas_plan.scenario import load_scenario
    from prfaas_plan.sim import check_out_dir, parse_link_drop, read_link_trace
    from prfaas_plan.sim import simulate as run_simulation

    if link_drop is not None and link_trace is not None:
        raise InvalidInput("--link-drop/--link-trace: give one of them, not both")
    if duration is not None and not duration > 0:
        raise InvalidInput("--duration: give a positive number of seconds")
    _check_positive(rate_scale, "--rate-scale", "times the arrival rate")  # before seconds of planning
    if load is not None:
        _check_positive(load, "--load", "times Lambda_max")
    if trace is not None and load is not None:
        raise InvalidInput("--load: a trace brings its own arrivals; scale them with --rate-scale")
    if prefix_cache_blocks is not None and (trace is None or prefix_cache_blocks < 0):
        raise InvalidInput("--prefix-cache-blocks: only with --trace, and at least 0")
    if out is not None:
        check_out_dir(out)
    events = parse_link_drop(link_drop) if link_drop else read_link_trace(link_trace) if link_trace else []
    horizon_s = duration if duration is not None else DEFAULT_SIM_DURATION_S
    late = [ev for ev in events if trace is None and ev[0] >= horizon_s]
    if late and link_drop:
        raise InvalidInput(f"--link-drop: the window {late[0][0]:g}-{late[0][1]:g} s starts after the {horizon_s:g} s of "
                        f"simulated arrivals; give --duration above {late[0][1]:g} or an earlier window")
    sc = load_scenario(scenario, _dirs(model_db))
    if trace is not None:
        sc = sc.with_trace(trace, prefix_cache_blocks)
    res = run_plan(sc)
    with Progress(TextColumn("simulating"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("simulate", total=1.0)
        sim = run_simulation(sc, res, load=load, duration_s=duration if trace is not None else horizon_s,
                             trace=trace, rate_scale=rate_scale, policy=policy.value, link_events=events, seed=seed,
                             progress=lambda done: bar.update(task, completed=done), out_dir=out)
    if out is not None:
        typer.echo(f"wrote {out}", err=True)
    summary = sim.summary()
    if fmt is not Format.table:
        emit(pd.DataFrame([summary]), fmt)
        return
    typer.echo(f"{sc.spec.name}\n{policy.value} policy, {sim.duration_s:,.0f} s of arrivals, seed {seed}; plan: "
               f"{res.plan.routing_text()}, PrfaaS {res.instances['prfaas']} + PD-P "
               f"{res.instances['pd_p']} + PD-D {res.instances['pd_d']}, Lambda_max = {res.lambda_max_rps:.3f} req/s")
    rows = [(k, f"{v:,}" if isinstance(v, int) else f"{v:,.3f}") for k, v in summary.items()]
    emit(pd.DataFrame(rows, columns=["metric", "value"]), fmt, "Simulation summary")


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app; user errors become one line on stderr and exit code 2."""
    try:
        code = app(args=argv, prog_name="prfaas-plan", standalone_mode=False)
    except PlanError as exc:
        typer.echo(f"prfaas-plan: error: {exc}", err=True)
        sys.exit(2)
    except Exception as exc:
        # click's usage errors (typer vendors click, so match by shape, not by class)
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            if not exc.format_message() and getattr(exc, "ctx", None) is not None:  # no arguments: show help
                typer.echo(exc.ctx.get_help())
                sys.exit(0)
            typer.echo(f"prfaas-plan: error: {exc.format_message()} (see prfaas-plan --help)", err=True)
            sys.exit(exc.exit_code)
        raise
    sys.exit(code if isinstance(code, int) else 0)

