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

from .errors import PlanError

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
    for p in paths or []:
        if not p.is_dir():
            raise PlanError(f"--model-db/--hardware-db: {p} is not a folder")
    return tuple(paths or ())


def emit(df, fmt: Format, title: str = "", floats: str = "{:,.3f}") -> None:
    """Print a DataFrame as a rich table, JSON records or CSV."""
    if fmt is Format.json:
        typer.echo(df.to_json(orient="records", indent=2))
        return
    if fmt is Format.csv:
        typer.echo(df.to_csv(index=False), nl=False)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title or None, header_style="bold", title_justify="left")
    for col in df.columns:
        table.add_column(str(col), justify="right" if df[col].dtype.kind in "iuf" else "left")
    for row in df.itertuples(index=False):
        cells = []
        for v in row:
            if isinstance(v, float):
                cells.append(floats.format(v) if abs(v) < 1e15 else f"{v:.3g}")
            elif isinstance(v, int) and not isinstance(v, bool):
                cells.append(f"{v:,}")
            else:
                cells.append(str(v))
        table.add_row(*cells)
    Console(width=max(140, Console().width)).print(table)


@app.command()
def models(fmt: FormatOpt = Format.table, model_db: ModelDbOpt = None) -> None:
    """List the models in the database with their layer mix and cache bytes (bf16 KV, vLLM)."""
    from .catalog import list_models

    df = list_models(_dirs(model_db))
    if fmt is Format.table:
        df = df[["id", "layer_mix", "total_params_b", "active_params_b", "max_context_tokens",
                 "kv_bytes_per_token", "fixed_state_bytes"]]
    emit(df, fmt, "Models (cache bytes: bf16 KV, vLLM state dtypes)", floats="{:,.1f}")


@app.command()
def hardware(fmt: FormatOpt = Format.table, hardware_db: HardwareDbOpt = None) -> None:
    """List the accelerators: dense TFLOP/s, memory, bandwidths, power and price."""
    from .catalog import list_hardware

    df = list_hardware(_dirs(hardware_db))
    if fmt is Format.table:
        df = df.drop(columns=["name", "efficiency_provenance"])
    emit(df, fmt, "Accelerators (dense TFLOP/s; GB = 1e9 B; TB/s = 1e12 B/s)", floats="{:,.1f}")


class KvDtype(str, Enum):
    bf16 = "bf16"
    fp8 = "fp8"


class EngineName(str, Enum):
    vllm = "vllm"
    sglang = "sglang"


@app.command()
def kv(
    model: Annotated[list[str], typer.Argument(help="model ids, YAML paths or HF config.json paths")],
    context: ContextOpt = "1K,8K,32K,128K",
    kv_dtype: Annotated[KvDtype, typer.Option(help="element type of the KV cache")] = KvDtype.bf16,
    engine: Annotated[EngineName, typer.Option(help="whose state-dtype rules to use")] = EngineName.vllm,
    tp: Annotated[int, typer.Option(help="tensor-parallel degree for the per-GPU column")] = 1,
    block_tokens: Annotated[Optional[int], typer.Option(help="round to pages of this many tokens")] = None,
    fmt: FormatOpt = Format.table,
    model_db: ModelDbOpt = None,
) -> None:
    """KV-cache bytes per token, fixed per-request state, and one request's bytes at each context."""
    import pandas as pd

    from .arch import load_model
    from .kvcache import CacheSettings, fixed_state_bytes, kv_bytes, kv_bytes_per_token, per_gpu_kv_bytes
    from .units import MIB_BYTES, format_tokens, parse_token_list

    contexts = parse_token_list(context, "--context")
    if tp < 1:
        raise PlanError("--tp: tensor-parallel degree must be at least 1")
    settings = CacheSettings(kv_dtype=kv_dtype.value, engine=engine.value, block_tokens=block_tokens)
    rows = []
    for ref in model:
        m = load_model(ref, _dirs(model_db))
        for l in contexts:
            if l > m.max_context_tokens:
                raise PlanError(f"--context: {format_tokens(l)} exceeds {m.id}'s maximum of {m.max_context_tokens} tokens")
            total = kv_bytes(m, l, settings)
            row = {"model": m.id, "context": format_tokens(l), "context_tokens": l,
                   "kv_bytes_per_token": kv_bytes_per_token(m, settings),
                   "fixed_state_bytes": fixed_state_bytes(m, settings),
                   "request_bytes": total, "request_mib": total / MIB_BYTES}
            if tp > 1:
                row[f"per_gpu_mib_tp{tp}"] = per_gpu_kv_bytes(m, l, tp, settings) / MIB_BYTES
            rows.append(row)
    df = pd.DataFrame(rows)
    if fmt is Format.table:
        df = df.drop(columns=["context_tokens", "request_bytes"])
        df["fixed_state_bytes"] = df["fixed_state_bytes"] / MIB_BYTES
        df = df.rename(columns={"kv_bytes_per_token": "KV B/token", "fixed_state_bytes": "fixed state MiB",
                                "request_mib": "request MiB"})
    emit(df, fmt, f"KV cache per request ({settings.kv_dtype} KV, {settings.engine} state dtypes; MiB = 2^20 B)",
         floats="{:,.1f}")


@app.command()
def bandwidth(
    model: Annotated[list[str], typer.Argument(help="model ids, YAML paths or HF config.json paths")],
    hardware: Annotated[str, typer.Option(help="prefill GPU (hardware id or YAML path)")] = "h200",
    gpus: Annotated[int, typer.Option(help="GPUs per prefill instance")] = 8,
    context: ContextOpt = "1K,8K,32K,128K",
    cluster_gpus: Annotated[int, typer.Option(help="GPUs in the prefill cluster, for Eq. 2 egress")] = 512,
    link_gbps: Annotated[float, typer.Option(help="inter-DC line rate, Gbps (1e9 bit/s)")] = 100.0,
    link_efficiency: Annotated[float, typer.Option(help="usable fraction of the line rate")] = 0.9,
    kv_dtype: Annotated[KvDtype, typer.Option(help="element type of the KV cache")] = KvDtype.bf16,
    fmt: FormatOpt = Format.table,
    model_db: ModelDbOpt = None,
    hardware_db: HardwareDbOpt = None,
) -> None:
    """KV throughput Phi_kv = S_kv / T_prefill per instance (Eq. 1), cluster egress (Eq. 2), and
    the largest prefill cluster the link can feed."""
    from .arch import load_model
    from .bandwidth import bandwidth_table
    from .hardware import instance
    from .kvcache import CacheSettings
    from .units import parse_token_list

    contexts = parse_token_list(context, "--context")
    if gpus < 1:
        raise PlanError("--gpus: an instance needs at least 1 GPU")
    if cluster_gpus < 1:
        raise PlanError("--cluster-gpus: a cluster needs at least 1 GPU")
    if link_gbps <= 0 or not 0 < link_efficiency <= 1:
        raise PlanError("--link-gbps must be positive and --link-efficiency in (0, 1]")
    inst = instance(hardware, gpus, _dirs(hardware_db))
    models = [load_model(m, _dirs(model_db)) for m in model]
    df = bandwidth_table(models, inst, contexts, cluster_gpus, link_gbps, link_efficiency,
                         CacheSettings(kv_dtype=kv_dtype.value))
    if fmt is Format.table:
        df = df.drop(columns=["context_tokens"]).rename(columns={
            "kv_mib": "S_kv MiB", "prefill_s": "T_prefill s", "phi_kv_gbps": "Phi_kv Gbps",
            "cluster_egress_gbps": f"egress of {cluster_gpus} GPUs Gbps",
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
    """Predicted prefill latency (with its bound) and decode BS_max per GPU type; for
    kimi-linear-1t the PrfaaS paper's Table 5 measurements on 8xH200 are shown beside."""
    import pandas as pd

    from .arch import load_model
    from .hardware import instance
    from .perf import analytic_prefill, decode_capacity
    from .units import format_tokens, parse_token_list

    table5_s = {1024: 0.44, 8192: 0.72, 32768: 1.84, 131072: 7.40}  # PrfaaS paper, 8xH200
    contexts = parse_token_list(context, "--context")
    m = load_model(model, _dirs(model_db))
    rows = []
    for hw in hardware:
        inst = instance(hw, gpus, _dirs(hardware_db))
        lat = analytic_prefill(m, inst, contexts)
        for i, l in enumerate(contexts):
            cap = decode_capacity(m, inst, l, tpot_ms / 1e3)
            measured = table5_s.get(l) if (m.id == "kimi-linear-1t" and inst.name == "8xh200") else None
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
    if trace is not None:
        data["workload"] = {"kind": "trace", "trace": str(trace), "output_tokens": None,
                            "prefix_cache_blocks": prefix_cache_blocks}
    return Scenario(validate(ScenarioSpec, data, "command-line flags"), "command-line flags")


def _write_plan_json(res, path: Path) -> None:
    """The plan as JSON, written to a temporary file and renamed (never half-written)."""
    import json
    import os
    import tempfile

    doc = {
        "scenario": res.scenario.spec.model_dump(), "mode": res.mode,
        "plans": json.loads(res.to_frame().to_json(orient="records")),
        "ttft": json.loads(res.ttft.to_json(orient="records")),
        "decode": {"batch_max": res.inputs.decode_batch_max, "step_s": res.inputs.decode_step_s,
                   "source": res.inputs.decode_source},
        "ratios": {k: res.ratio(k) for k in res.baselines},
    }
    folder = path.resolve().parent
    if not folder.is_dir():
        raise PlanError(f"--out: folder {folder} does not exist")
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(doc, fh, indent=2)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    typer.echo(f"wrote {path}", err=True)


@app.command()
def plan(
    scenario: Annotated[Optional[str], typer.Argument(help="scenario id (paper-case-study) or YAML path")] = None,
    mode: Annotated[Mode, typer.Option(help="exact (MILP over length buckets) or paper (Eqs. 3-8, grid search)")] = Mode.exact,
    load: Annotated[Optional[float], typer.Option(help="fraction of Lambda_max at which TTFT is reported")] = None,
    model: Annotated[Optional[str], typer.Option(help="quick form: model id")] = None,
    prfaas: Annotated[str, typer.Option(help="quick form: PrfaaS pool GPU:COUNT")] = "h200:32",
    local: Annotated[str, typer.Option(help="quick form: local PD pool GPU:COUNT")] = "h20:64",
    link_gbps: Annotated[Optional[float], typer.Option(help="inter-DC link, Gbps (overrides the scenario)")] = None,
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
    if out is not None and not out.resolve().parent.is_dir():
        raise PlanError(f"--out: folder {out.resolve().parent} does not exist")
    if scenario is None:
        if model is None:
            raise PlanError("give a SCENARIO (e.g. paper-case-study) or --model with --prfaas/--local")
        sc = _quick_scenario(model, prfaas, local, link_gbps if link_gbps is not None else 100.0, trace, cache_blocks)
    else:
        sc = load_scenario(scenario)
        changes = {}
        if link_gbps is not None:
            changes["link.gbps"] = link_gbps
        if trace is not None:
            changes.update({"workload.kind": "trace", "workload.trace": str(trace),
                            "workload.prefix_cache_blocks": cache_blocks})
        if changes:
            sc = sc.with_updates(**changes)
    res = run_plan(sc, mode=mode.value, load=load)
    df = res.to_frame()
    if out is not None:
        _write_plan_json(res, out)
    if fmt is not Format.table:
        emit(df, fmt)
        return
    p = res.plan
    q = round(sc.spec.slo.ttft_quantile * 100)
    head = (f"{sc.spec.name}\n{mode.value} mode: t = {p.threshold_tokens or 0:,.0f} tokens (offload "
            f"{p.offload_fraction:.0%}), PrfaaS {p.instances['prfaas']} + PD-P {p.instances['pd_p']} + PD-D "
            f"{p.instances['pd_d']} instances, Lambda_max = {p.lambda_max_rps:.3f} req/s, egress "
            f"{p.egress_gbps:.1f} Gbps ({p.link_utilisation:.0%} of {p.link_gbps:g}), binding: {p.binding}; "
            f"decode BS_max {res.inputs.decode_batch_max} at {res.inputs.decode_step_s * 1e3:.1f} ms/step "
            f"({res.inputs.decode_source})")
    typer.echo(head)
    cols = {"plan": "plan", "threshold_tokens": "t tokens", "n_prfaas": "PrfaaS", "n_pd_p": "PD-P",
            "n_pd_d": "PD-D", "lambda_max_rps": "Lambda req/s", "throughput_vs_this": "PrfaaS-PD x",
            "egress_gbps": "egress Gbps", "usd_per_million_tokens": "$/M tokens",
            f"p{q}_ttft_s_common_rate": f"P{q} TTFT s", "binding": "binding"}
    emit(df[[c for c in cols if c in df.columns]].rename(columns=cols), fmt,
         f"Plans (P{q} TTFT at a common rate of {res.ttft[res.ttft.basis == 'common rate'].rate_rps.iloc[0]:.2f} req/s)",
         floats="{:,.3f}")


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app; user errors become one line on stderr and exit code 2."""
    try:
        app(args=argv, prog_name="prfaas-plan")  # click handles usage errors itself (exit 2)
    except PlanError as exc:
        typer.echo(f"prfaas-plan: error: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
