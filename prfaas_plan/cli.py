"""The ``prfaas-plan`` command line: a thin typer layer over the library.

Every command prints a human table by default and ``--format json|csv`` for machines. Bad input
raises :class:`~prfaas_plan.errors.PlanError`, which :func:`main` prints as one line on stderr
with exit code 2 (no traceback). Heavy modules are imported inside the commands that need them.
"""

from __future__ import annotations

import re
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from .errors import PlanError, shown

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Capacity planning for cross-datacenter prefill/decode-disaggregated LLM serving (PrfaaS). "
    "Token counts accept 32K, 32k or 32768 (K = 1024 tokens).",
)


class Format(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="table (human), json or csv")]
ModelDbOpt = Annotated[Optional[list[Path]], typer.Option("--model-db", help="extra folder of model YAML files")]
HardwareDbOpt = Annotated[Optional[list[Path]], typer.Option("--hardware-db", help="extra folder of hardware YAML files")]
ContextOpt = Annotated[str, typer.Option("--context", "-c", help="comma-separated token counts, K = 1024 (e.g. 1K,8K,32K,128K)")]


def _dirs(paths: Optional[list[Path]]) -> tuple[Path, ...]:
    from ._data import is_dir

    for p in paths or []:
        if not is_dir(p):
            raise PlanError(f"--model-db/--hardware-db: {shown(p)} is not a folder")
    return tuple(paths or ())


def _check_count(value: int, flag: str, most: int, what: str) -> int:
    """A count option within 1..``most`` (``what`` it counts, for the message)."""
    if not 1 <= value <= most:
        raise PlanError(f"{flag}: {value:,} {what} is out of range; give 1 to {most:,}")
    return value


def _check_positive(value: float, flag: str, unit: str) -> float:
    """A float option that must be positive and finite (``unit`` for the message)."""
    if not 0 < value < float("inf"):  # rejects NaN too
        raise PlanError(f"{flag}: {value!r} is not a positive, finite number of {unit}")
    return value


HEADERS: dict[str, str] = {
    "lambda_max_rps": "Lambda_max (req/s)", "threshold_tokens": "t (tokens)", "n_prfaas": "PrfaaS",
    "n_pd_p": "PD-P", "n_pd_d": "PD-D", "usd_per_million_tokens": "cost ($/M tokens)",
    "ttft_p90_s": "P90 TTFT (s)", "vs_homogeneous_pd": "vs homogeneous PD (x)", "decode_bs_max": "decode BS_max",
    "kv_bytes_measured": "KV measured (B)", "kv_bytes_model": "KV model (B)", "kv_match": "KV match",
}
"""Human table headers for machine column names (JSON and CSV keep the machine names)."""
_UNIT_SUFFIXES = {"s": "s", "ms": "ms", "pct": "%", "gbps": "Gbps", "rps": "req/s", "mib": "MiB", "gib": "GiB",
                  "bytes": "B", "tokens": "tokens", "usd": "$", "w": "W"}
TABLE_BORDER_CELLS = 3  # a column's padding (1 + 1) and the rule after it in rich's default box


def table_header(column: str) -> str:
    """The human header of a column: ``HEADERS``, else ``prefill_s`` -> ``prefill (s)``; names
    that are already human (no underscore) are kept."""
    if column in HEADERS:
        return HEADERS[column]
    if not re.fullmatch(r"[a-z0-9_]+", column):
        return column
    words = column.split("_")
    if len(words) > 1 and words[-1] in _UNIT_SUFFIXES:
        return f"{' '.join(words[:-1])} ({_UNIT_SUFFIXES[words[-1]]})"
    return " ".join(words)


def _cell(v, ffmt: str) -> str:
    if isinstance(v, float) and v != v:
        return "-"  # NaN: not applicable
    if isinstance(v, float):
        return ffmt.format(v) if abs(v) < 1e15 else f"{v:.3g}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def _column_blocks(widths: list[int], room: int) -> list[list[int]]:
    """Split columns (their narrowest widths, in cells) into blocks that each fit ``room`` cells;
    every block repeats column 0, the row's name (as pandas wraps a wide frame)."""
    blocks, block, used = [], [0], 1 + widths[0] + TABLE_BORDER_CELLS
    for i, w in enumerate(widths[1:], start=1):
        if used + w + TABLE_BORDER_CELLS > room and len(block) > 1:
            blocks.append(block)
            block, used = [0], 1 + widths[0] + TABLE_BORDER_CELLS
        block.append(i)
        used += w + TABLE_BORDER_CELLS
    return [*blocks, block]


def _fit_widths(narrowest: list[int], wanted: list[list[int]], room: int) -> list[int]:
    """Column widths that fill at most ``room`` cells: each column its narrowest width, then, for
    each tier of ``wanted`` widths in turn (values unwrapped, then headers unwrapped), the columns
    that need least first grow while room is left; a column too wide on its own shrinks (folds)."""
    widths = list(narrowest)
    spare = room - 1 - sum(w + TABLE_BORDER_CELLS for w in widths)
    if spare < 0:
        i = widths.index(max(widths))
        widths[i] = max(1, widths[i] + spare)
    for target in wanted:
        for i in sorted(range(len(widths)), key=lambda i: target[i] - widths[i]):
            grow = max(0, min(target[i] - widths[i], spare))
            widths[i] += grow
            spare -= grow
    return widths


def emit(df, fmt: Format, title: str = "", floats: str = "{:,.3f}", col_floats: dict[str, str] | None = None) -> None:
    """Print a DataFrame as a rich table, JSON records or CSV (``col_floats``: a float format per
    column of the table, e.g. whole tokens). The table fits the terminal: headers wrap at spaces,
    values are never cut, and columns that do not fit go to a further block."""
    if fmt is Format.json:
        typer.echo(df.to_json(orient="records", indent=2))
        return
    if fmt is Format.csv:
        typer.echo(df.to_csv(index=False), nl=False)
        return
    from rich.cells import cell_len
    from rich.console import Console
    from rich.table import Table

    console = Console()
    headers = [table_header(str(c)) for c in df.columns]
    col_fmts = [(col_floats or {}).get(str(c), floats) for c in df.columns]
    rows = [[_cell(v, ffmt) for v, ffmt in zip(row, col_fmts)] for row in df.itertuples(index=False)]
    texts = [(h, *(r[i] for r in rows)) for i, h in enumerate(headers)]
    narrowest = [max(cell_len(word) for text in column for word in text.split() or [""]) for column in texts]
    values = [max([cell_len(text) for text in column[1:]] or [0]) for column in texts]
    if texts:  # the row names (column 0, repeated in every block) stay on one line
        narrowest[0] = max(narrowest[0], min(values[0], console.width // 3))
    whole = [max(v, cell_len(h)) for v, h in zip(values, headers)]
    for n, block in enumerate(_column_blocks(narrowest, console.width) if headers else [[]]):
        widths = _fit_widths([narrowest[i] for i in block], [[max(values[i], narrowest[i]) for i in block],
                                                             [whole[i] for i in block]], console.width)
        table = Table(title=(title if n == 0 else "(continued)") or None, header_style="bold", title_justify="left")
        for i, w in zip(block, widths):
            table.add_column(headers[i], justify="right" if df.dtypes.iloc[i].kind in "iuf" else "left",
                             width=w, overflow="fold")
        for r in rows:
            table.add_row(*(r[i] for i in block))
        console.print(table)


@app.command()
def models(fmt: FormatOpt = Format.table, model_db: ModelDbOpt = None) -> None:
    """List the models in the database with their layer mix and cache bytes (bf16 KV, vLLM)."""
    from .catalog import list_models

    df = list_models(_dirs(model_db))
    if fmt is Format.table:
        from .units import MIB_BYTES

        df = df[["id", "layer_mix", "total_params_b", "active_params_b", "max_context_tokens",
                 "kv_bytes_per_token", "fixed_state_bytes"]].assign(fixed_state_bytes=df.fixed_state_bytes / MIB_BYTES)
        df = df.rename(columns={"layer_mix": "layers", "total_params_b": "params (bn)",
                                "active_params_b": "active params (bn)", "max_context_tokens": "max context (tokens)",
                                "kv_bytes_per_token": "KV (B/token)", "fixed_state_bytes": "fixed state (MiB)"})
    emit(df, fmt, "Models (cache bytes: bf16 KV, vLLM state dtypes; MiB = 2^20 B)", floats="{:,.1f}")


@app.command()
def hardware(fmt: FormatOpt = Format.table, hardware_db: HardwareDbOpt = None) -> None:
    """List the accelerators: dense TFLOP/s, memory, bandwidths, power and price."""
    from .catalog import list_hardware

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

    from .arch import load_model
    from .kvcache import CacheSettings, check_tp, fixed_state_bytes, kv_bytes, kv_bytes_per_token, per_gpu_kv_bytes
    from .units import MIB_BYTES, format_tokens, parse_token_list

    contexts = parse_token_list(context, "--context")
    if tp < 1:
        raise PlanError("--tp: tensor-parallel degree must be at least 1")
    settings = CacheSettings(kv_dtype=kv_dtype.value, engine=engine.value, block_tokens=block_tokens)
    rows = []
    for ref in model:
        m = load_model(ref, _dirs(model_db))
        check_tp(m, tp, "--tp")
        for l in contexts:
            if l > m.max_context_tokens:
                raise PlanError(f"--context: {format_tokens(l)} exceeds {m.id}'s maximum of {m.max_context_tokens} tokens")
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
    from .arch import load_model
    from .bandwidth import DEFAULT_LINK_EFFICIENCY, bandwidth_table
    from .hardware import MAX_INSTANCE_GPUS, MAX_POOL_GPUS, instance
    from .kvcache import CacheSettings
    from .units import parse_token_list

    contexts = parse_token_list(context, "--context")
    link_efficiency = DEFAULT_LINK_EFFICIENCY if link_efficiency is None else link_efficiency
    _check_count(gpus, "--gpus", MAX_INSTANCE_GPUS, "GPUs per instance")
    _check_count(cluster_gpus, "--cluster-gpus", MAX_POOL_GPUS, "GPUs in the cluster")
    if not (0 < link_gbps < float("inf")) or not 0 < link_efficiency <= 1:  # rejects NaN too
        raise PlanError("--link-gbps must be positive and --link-efficiency in (0, 1]")
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

    from .arch import load_model
    from .hardware import MAX_INSTANCE_GPUS, instance
    from .perf import analytic_prefill, decode_capacity
    from .scenario import load_scenario
    from .units import format_tokens, parse_token_list

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
    from .scenario import Scenario, ScenarioSpec
    from ._data import validate

    def pool(text: str, flag: str) -> dict:
        gpu, _, count = text.partition(":")
        if not gpu or not count.isdigit():
            raise PlanError(f"{flag}: {text!r} is not GPU:COUNT, e.g. h200:32")
        return {"gpu": gpu, "gpus": int(count)}

    data = {"id": "quick", "name": f"{model} quick plan", "model": model, "prfaas": pool(prfaas, "--prfaas"),
            "local": pool(local, "--local"), "link": {"gbps": link_gbps}}
    sc = Scenario(validate(ScenarioSpec, data, "command-line flags"), "command-line flags")
    return sc.with_trace(trace, prefix_cache_blocks) if trace is not None else sc


def _write_plan_json(res, path: Path) -> None:
    """The plan as JSON, written atomically (never half-written)."""
    import json

    from ._data import atomic_write

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
    from .planner import plan as run_plan
    from .scenario import load_scenario

    cache_blocks = 0 if no_prefix_cache else prefix_cache_blocks
    if (prefix_cache_blocks is not None or no_prefix_cache) and trace is None:
        raise PlanError("--prefix-cache-blocks/--no-prefix-cache: only with --trace")
    if out is not None:
        from ._data import check_output_path

        check_output_path(out, "--out")
    if scenario is None:
        if model is None:
            raise PlanError("give a SCENARIO (e.g. paper-case-study) or --model with --prfaas/--local")
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
    from ._data import check_output_path
    from .sweeps import sweep as run_sweep, sweep_report

    if (x or y) and html is None:
        raise PlanError("--x/--y: only with --html FILE")
    check_output_path(output, "-o")  # OUTPUT and OUTPUT.cells/ go in its folder
    if html is not None:  # the page's path and its heatmap axes, before running anything
        check_output_path(html, "--html")
        from .sweeps import grid_axes

        axes = grid_axes(grid)
        for flag, a in (("--x", x), ("--y", y)):
            if a is not None and a not in axes:
                raise PlanError(f"{flag}: {a!r} is not an axis of {grid}; axes: {', '.join(axes) or 'none'}")
        if not axes:
            raise PlanError(f"--html: {grid} has no axes to draw")
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

    from .hardware import MAX_INSTANCE_GPUS, MAX_POOL_GPUS
    from .kvcache import CacheSettings
    from .report import write_compare
    from .units import parse_tokens

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

    from .report import write_report
    from .scenario import load_scenario

    started = time.perf_counter()
    if not (0 < sim_duration < float("inf")):  # rejects NaN too
        raise PlanError("--sim-duration: give a positive number of seconds")
    if seed < 0:  # as simulate: numpy seeds are whole numbers >= 0
        raise PlanError(f"--seed: {seed} must be a whole number >= 0")
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

    from .planner import plan as run_plan
    from .scenario import load_scenario
    from .sim import DEFAULT_SIM_DURATION_S, check_out_dir, parse_link_drop, read_link_trace, simulate as run_simulation

    if link_drop is not None and link_trace is not None:
        raise PlanError("--link-drop/--link-trace: give one of them, not both")
    if duration is not None and not duration > 0:
        raise PlanError("--duration: give a positive number of seconds")
    _check_positive(rate_scale, "--rate-scale", "times the arrival rate")  # before seconds of planning
    if load is not None:
        _check_positive(load, "--load", "times Lambda_max")
    if trace is not None and load is not None:
        raise PlanError("--load: a trace brings its own arrivals; scale them with --rate-scale")
    if prefix_cache_blocks is not None and (trace is None or prefix_cache_blocks < 0):
        raise PlanError("--prefix-cache-blocks: only with --trace, and at least 0")
    if out is not None:
        check_out_dir(out)
    events = parse_link_drop(link_drop) if link_drop else read_link_trace(link_trace) if link_trace else []
    horizon_s = duration if duration is not None else DEFAULT_SIM_DURATION_S
    late = [ev for ev in events if trace is None and ev[0] >= horizon_s]
    if late and link_drop:
        raise PlanError(f"--link-drop: the window {late[0][0]:g}-{late[0][1]:g} s starts after the {horizon_s:g} s of "
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


bench_app = typer.Typer(
    no_args_is_help=True,
    help="Microbenchmarks (torch): measure this device, calibrate the performance model's efficiency "
    "factors, validate its prefill predictions on held-out cases.",
)
app.add_typer(bench_app, name="bench")


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

    from . import bench
    from .units import GB_BYTES

    from ._data import check_output_path

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

    from . import bench
    from ._data import atomic_write, check_output_path
    from .calibration import FITTABLE
    from .hardware import load_gpu
    from .units import GB_BYTES, TB_BYTES

    for path, flag in ((output, "-o"), (link_yaml, "--link-yaml")):
        if path is not None:
            check_output_path(path, flag, create_parents=True)  # before any fitting
    fit = tuple(p.strip() for p in params.split(",") if p.strip()) if params else None
    if fit is not None:
        unknown = sorted(set(fit) - set(FITTABLE))
        if unknown or not fit:
            raise PlanError(f"--params: cannot fit {', '.join(unknown) or '(nothing)'}; fittable: {', '.join(FITTABLE)}")
    if source.suffix.lower() in (".yaml", ".yml"):
        if gpu is None:
            raise PlanError("--gpu: give the GPU id the observations are fitted for, e.g. --gpu h200")
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
    from . import bench
    from .hardware import load_gpu

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


if __name__ == "__main__":
    main()
