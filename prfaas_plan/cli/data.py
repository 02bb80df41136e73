"""The database commands: the models and accelerators, and one model's cache bytes, KV throughput and latency.

``models``, ``hardware``, ``kv``, ``bandwidth`` and ``profile``. ``kv`` and ``profile`` build their
tables as records, so that their human tables print without importing pandas.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from prfaas_plan.cli.output import (
    CONTEXTS,
    PREFILL_GPU,
    ContextOpt,
    EngineOpt,
    EngineProfileOpt,
    FormatOpt,
    HardwareDbOpt,
    KvDtypeOpt,
    ModelDbOpt,
    Records,
    check_count,
    check_positive,
    db_dirs,
    emit,
)
from prfaas_plan.defaults import (
    DEFAULT_CLUSTER_GPUS,
    DEFAULT_ENGINE_PROFILE,
    DEFAULT_INSTANCE_GPUS,
    DEFAULT_LINK_EFFICIENCY,
    DEFAULT_LINK_GBPS,
)
from prfaas_plan.errors import InvalidInput

if TYPE_CHECKING:
    from prfaas_plan.hardware import Instance
    from prfaas_plan.kvcache import CacheSettings
    from prfaas_plan.model import ModelSpec
    from prfaas_plan.perf.roofline import MeasuredProfile

ModelsArg = Annotated[list[str], typer.Argument(help="model ids, YAML paths or HF config.json paths")]


def models(fmt: FormatOpt = "table", model_db: ModelDbOpt = None) -> None:
    """List the models in the database with their layer mix and cache bytes (bf16 KV, vLLM)."""
    from prfaas_plan.catalog import list_models
    from prfaas_plan.units import MIB_BYTES

    df = list_models(db_dirs(model_db))
    if fmt == "table":
        df = df[["id", "layer_mix", "total_params_b", "active_params_b", "max_context_tokens",
                 "kv_bytes_per_token", "fixed_state_bytes"]].assign(fixed_state_bytes=df.fixed_state_bytes / MIB_BYTES)
        df = df.rename(columns={"layer_mix": "layers", "total_params_b": "params (bn)",
                                "active_params_b": "active params (bn)", "max_context_tokens": "max context (tokens)",
                                "kv_bytes_per_token": "KV (B/token)", "fixed_state_bytes": "fixed state (MiB)"})
    emit(df, fmt, "Models (cache bytes: bf16 KV, vLLM state dtypes; MiB = 2^20 B)", floats="{:,.1f}")


def hardware(fmt: FormatOpt = "table", hardware_db: HardwareDbOpt = None) -> None:
    """List the accelerators: dense TFLOP/s, memory, bandwidths, power and price."""
    from prfaas_plan.catalog import list_hardware

    df = list_hardware(db_dirs(hardware_db))
    if fmt == "table":
        df = df.drop(columns=["name", "efficiency_provenance"]).rename(columns={
            "bf16_dense_tflops": "BF16 (TFLOP/s)", "fp8_dense_tflops": "FP8 (TFLOP/s)",
            "fp4_dense_tflops": "FP4 (TFLOP/s)", "memory_gib": "HBM (GiB)",
            "memory_tb_per_s": "HBM (TB/s)", "scaleup_gb_per_s": "NVLink (GB/s/dir)", "nic_gbps": "NIC (Gbps)",
            "tdp_w": "TDP (W)", "price_usd_per_gpu_hour": "price ($/GPU-hour)", "price_date": "price date"})
        df["price date"] = df["price date"].str.slice(0, 7)
    emit(df, fmt, "Accelerators (dense TFLOP/s; GiB = 2^30 B; GB = 1e9 B; TB/s = 1e12 B/s)", floats="{:,.2f}")


def _kv_records(refs: list[str], contexts: list[int], tp: int, settings: CacheSettings,
                model_dirs: tuple[Path, ...]) -> Records:
    """One row per model and context: cache bytes per token, fixed state, the request's bytes
    (and one tensor-parallel rank's share when ``tp`` > 1), and the context extension relied on."""
    from prfaas_plan.kvcache import check_tp, fixed_state_bytes, kv_bytes, kv_bytes_per_token, per_gpu_kv_bytes
    from prfaas_plan.model import load_model
    from prfaas_plan.units import MIB_BYTES, format_tokens

    rows = []
    for ref in refs:
        m = load_model(ref, model_dirs)
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
    return rows


def kv(
    model: ModelsArg,
    context: ContextOpt = CONTEXTS,
    kv_dtype: KvDtypeOpt = "bf16",
    engine: EngineOpt = "vllm",
    tp: Annotated[int, typer.Option(help="tensor-parallel degree for the per-GPU column: it must divide the "
                                        "query heads, and divide the KV heads or be a multiple of them "
                                        "(then each KV head is replicated), as vLLM requires")] = 1,
    block_tokens: Annotated[Optional[int], typer.Option(help="round to pages of this many tokens")] = None,
    fmt: FormatOpt = "table",
    model_db: ModelDbOpt = None,
) -> None:
    """KV-cache bytes per token, fixed per-request state, and one request's bytes at each context."""
    from prfaas_plan.kvcache import CacheSettings
    from prfaas_plan.units import MIB_BYTES, parse_token_list

    contexts = parse_token_list(context, "--context")
    if tp < 1:
        raise InvalidInput("--tp: tensor-parallel degree must be at least 1")
    if block_tokens is not None and block_tokens < 1:
        raise InvalidInput("--block-tokens: must be a positive number of tokens")
    settings = CacheSettings(kv_dtype=kv_dtype, engine=engine, block_tokens=block_tokens)
    rows = _kv_records(model, contexts, tp, settings, db_dirs(model_db))
    title = f"KV cache per request ({settings.kv_dtype} KV, {settings.engine} state dtypes; MiB = 2^20 B)"
    if fmt != "table":  # json / csv carry the note in their context_extension field
        emit(rows, fmt, title)
        return
    names = {"kv_bytes_per_token": "KV (B/token)", "fixed_state_bytes": "fixed state (MiB)",
             "request_mib": "request (MiB)", f"per_gpu_mib_tp{tp}": f"per GPU (MiB, TP{tp})"}
    table = [{names.get(k, k): v / MIB_BYTES if k == "fixed_state_bytes" else v for k, v in row.items()
              if k not in ("context_tokens", "request_bytes", "context_extension")} for row in rows]
    emit(table, fmt, title, floats="{:,.1f}")
    notes: dict[tuple[str, str], list[str]] = {}
    for row in rows:
        if row["context_extension"] is not None:
            notes.setdefault((row["model"], row["context_extension"]), []).append(row["context"])
    if notes:
        from rich.console import Console

        for (model_id, note), at in notes.items():  # wrapped to the terminal like the table
            Console().print(f"note: {model_id} at {', '.join(at)} relies on {note}", markup=False, highlight=False)


def bandwidth(
    model: ModelsArg,
    hardware: Annotated[str, typer.Option(help="prefill GPU (hardware id or YAML path)")] = PREFILL_GPU,
    gpus: Annotated[int, typer.Option(help="GPUs per prefill instance")] = DEFAULT_INSTANCE_GPUS,
    context: ContextOpt = CONTEXTS,
    cluster_gpus: Annotated[int, typer.Option(help="GPUs in the prefill cluster, for Eq. 2 egress")] = DEFAULT_CLUSTER_GPUS,
    link_gbps: Annotated[float, typer.Option(help="inter-DC line rate, Gbps (1e9 bit/s)")] = DEFAULT_LINK_GBPS,
    link_efficiency: Annotated[float, typer.Option(help="usable fraction of the line rate")] = DEFAULT_LINK_EFFICIENCY,
    kv_dtype: KvDtypeOpt = "bf16",
    engine_profile: EngineProfileOpt = DEFAULT_ENGINE_PROFILE,
    fmt: FormatOpt = "table",
    model_db: ModelDbOpt = None,
    hardware_db: HardwareDbOpt = None,
) -> None:
    """KV throughput Phi_kv = S_kv / T_prefill per instance (Eq. 1), cluster egress (Eq. 2), and
    the largest prefill cluster the link can feed."""
    from prfaas_plan.bandwidth import bandwidth_table
    from prfaas_plan.hardware import MAX_INSTANCE_GPUS, MAX_POOL_GPUS, instance
    from prfaas_plan.kvcache import CacheSettings
    from prfaas_plan.model import load_model
    from prfaas_plan.units import parse_token_list

    contexts = parse_token_list(context, "--context")
    check_count(gpus, "--gpus", MAX_INSTANCE_GPUS, "GPUs per instance")
    check_count(cluster_gpus, "--cluster-gpus", MAX_POOL_GPUS, "GPUs in the cluster")
    if not (0 < link_gbps < float("inf")) or not 0 < link_efficiency <= 1:  # rejects NaN too
        raise InvalidInput("--link-gbps must be positive and --link-efficiency in (0, 1]")
    inst = instance(hardware, gpus, db_dirs(hardware_db), engine=engine_profile)
    specs = [load_model(m, db_dirs(model_db)) for m in model]
    df = bandwidth_table(specs, inst, contexts, cluster_gpus, link_gbps, link_efficiency,
                         CacheSettings(kv_dtype=kv_dtype))
    if fmt == "table":
        df = df.drop(columns=["context_tokens"]).rename(columns={
            "kv_mib": "S_kv (MiB)", "prefill_s": "T_prefill (s)", "phi_kv_gbps": "Phi_kv (Gbps)",
            "cluster_egress_gbps": f"egress of {cluster_gpus:,} GPUs (Gbps)",
            "max_prefill_gpus_on_link": f"max GPUs on {link_gbps:g} Gbps"})
    from prfaas_plan.perf.latency import latency_source

    emit(df, fmt, f"KV throughput on {inst.name} ({kv_dtype} KV; {latency_source(inst)})", floats="{:,.2f}")


def _profile_records(m: ModelSpec, inst: Instance, contexts: list[int], tpot_s: float,
                     measured: MeasuredProfile | None) -> Records:
    """One row per context on ``inst``: predicted prefill latency and its bound, the ``measured``
    latency (and the error) where it has the context, and decode capacity at ``tpot_s`` seconds
    per output token."""
    from prfaas_plan.perf.latency import decode_capacity, prefill_latency
    from prfaas_plan.units import format_tokens

    lat = prefill_latency(m, inst, contexts)
    rows = []
    for i, l in enumerate(contexts):
        cap = decode_capacity(m, inst, l, tpot_s)
        at = measured.prefill_s[measured.tokens.index(l)] if measured is not None and l in measured.tokens else None
        rows.append({"instance": inst.name, "context": format_tokens(l),
                     "prefill_s": float(lat.total_s[i]), "bound": str(lat.bound[i]),
                     "measured_s": at if at is not None else float("nan"),
                     "error_pct": (float(lat.total_s[i]) / at - 1) * 100 if at else float("nan"),
                     "decode_bs_max": cap.batch_max, "decode_step_ms": cap.step_s * 1e3,
                     "decode_binding": cap.binding})
    return rows


def profile(
    model: Annotated[str, typer.Argument(help="model id or path")],
    hardware: Annotated[list[str], typer.Option(help="GPU ids to compare")] = ("h200", "h20"),
    gpus: Annotated[int, typer.Option(help="GPUs per instance")] = DEFAULT_INSTANCE_GPUS,
    context: ContextOpt = CONTEXTS,
    tpot_ms: Annotated[float, typer.Option(help="decode SLO, ms per output token")] = 25.0,
    engine_profile: EngineProfileOpt = DEFAULT_ENGINE_PROFILE,
    fmt: FormatOpt = "table",
    model_db: ModelDbOpt = None,
    hardware_db: HardwareDbOpt = None,
) -> None:
    """Predicted prefill latency (with its bound) and decode BS_max per GPU type, beside the
    measured profile of the built-in paper case study when it is the same model and instance
    (kimi-linear-1t on 8xH200: the PrfaaS paper's Table 5). A GPU type whose instance cannot hold
    the weights is left out with a line on stderr saying why (an error when none can)."""
    from prfaas_plan.errors import PlanError
    from prfaas_plan.hardware import MAX_INSTANCE_GPUS, instance
    from prfaas_plan.model import load_model
    from prfaas_plan.perf.latency import free_cache_bytes_per_gpu
    from prfaas_plan.scenario import load_scenario
    from prfaas_plan.units import parse_token_list

    check_positive(tpot_ms, "--tpot-ms", "milliseconds per output token")
    check_count(gpus, "--gpus", MAX_INSTANCE_GPUS, "GPUs per instance")
    paper = load_scenario("paper-case-study")
    contexts = parse_token_list(context, "--context")
    m = load_model(model, db_dirs(model_db))
    rows, unfit = [], []
    for hw in hardware:
        inst = instance(hw, gpus, db_dirs(hardware_db), engine=engine_profile)
        try:
            free_cache_bytes_per_gpu(m, inst)
        except PlanError as exc:  # this GPU type cannot hold the weights: the others still answer
            unfit.append(exc)
            continue
        same = m.id == paper.spec.model and inst.name == paper.prfaas_instance.name
        rows += _profile_records(m, inst, contexts, tpot_ms / 1e3, paper.prfaas_profile if same else None)
    if not rows:
        raise unfit[0]
    emit(rows, fmt, f"{m.id}: prefill latency and decode capacity at {1e3 / tpot_ms:.0f} tokens/s",
         floats="{:,.2f}")
    for exc in unfit:
        typer.echo(f"left out: {exc}", err=True)
