"""The harness behind ``prfaas-plan bench run``: device detection and description, every
microbenchmark, the scaled-down model prefills (timed round-robin) and the transfer test in one
:func:`run_harness`, and the results file (:func:`write_results`, :func:`load_results`).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from prfaas_plan.bench.kernels import LINEAR_LOG_DECAY_FLOOR, SWA_QUERY_BLOCK_FRACTION, _torch
from prfaas_plan.bench.micro import _sync, bench_attention, bench_copy, bench_gemm, bench_linear_attention, summarize
from prfaas_plan.bench.model import ScaledModel, cache_nbytes
from prfaas_plan.bench.scale import Profile, layer_mix, profile_for, scale_model
from prfaas_plan.bench.transfer import LOOPBACK_HOST, deserialise_cache, loopback_transfer, serialise_cache
from prfaas_plan.data import atomic_write, read_text
from prfaas_plan.errors import InvalidInput
from prfaas_plan.kvcache import CacheSettings, kv_bytes
from prfaas_plan.model.arch import ModelSpec, load_model
from prfaas_plan.perf.roofline import LINEAR_ATTN_CHUNK_TOKENS

RESULTS_SCHEMA = "prfaas-plan-bench/1"
RESULTS_SECTIONS = {"device": dict, "settings": dict, "gemm": list, "attention": list, "swa": list,
                    "linear_attention": list, "memory": list, "models": list, "transfer": dict}
"""The top-level fields of a results file that calibrate and validate read, with their JSON types."""
"""Identifier written into every results file (bumped when the layout changes)."""


# --------------------------------------------------------------------------------------------
# The harness
# --------------------------------------------------------------------------------------------


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when torch sees a GPU, else 'cpu'; 'cuda' without a GPU is an error."""
    torch = _torch()
    if device not in ("auto", "cpu", "cuda"):
        raise InvalidInput(f"--device: {device!r} is not one of auto, cpu, cuda")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise InvalidInput("--device cuda: torch sees no CUDA device; use --device cpu or auto")
    return device


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_info(device: str) -> dict:
    """Name, memory and software versions of the device a run measures."""
    torch = _torch()
    info = {"kind": device, "torch": torch.__version__, "python": platform.python_version(),
            "platform": platform.platform(), "threads": torch.get_num_threads(), "cpu": _cpu_name(),
            "cpu_count": os.cpu_count()}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        info.update(name=props.name, memory_bytes=int(props.total_memory), cuda=torch.version.cuda,
                    capability=f"{props.major}.{props.minor}", multiprocessors=props.multi_processor_count)
    else:
        try:
            memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
            memory = 0
        info.update(name=info["cpu"], memory_bytes=int(memory))
    return info


@dataclass
class _Step:
    """One unit of work of the harness (the progress bar advances once per step)."""

    label: str
    run: Callable[[], None]


def model_case_name(model_id: str, tokens: int) -> str:
    return f"{model_id}@{tokens}"


def run_harness(device: str = "auto", quick: bool = False, threads: int | None = None, progress: bool = True,
                profile: Profile | None = None, seed: int = 0) -> dict:
    """Run every microbenchmark, the scaled-down model prefills and the transfer test; return the
    results (JSON-serialisable). Model cases are timed round-robin (one repeat of every case per
    round) so that a transient slowdown of the machine spreads over all cases instead of biasing one."""
    torch = _torch()
    dev = resolve_device(device)
    prof = profile or profile_for(dev, quick)
    threads = prof.threads if threads is None else threads
    if threads is not None and threads < 1:
        raise InvalidInput("--threads: give at least 1 thread")
    threads_before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(int(threads))
    try:
        return _run_profile(torch, dev, quick, prof, progress, seed)
    finally:
        torch.set_num_threads(threads_before)


def _run_profile(torch, dev: str, quick: bool, prof: Profile, progress: bool, seed: int) -> dict:
    """The body of :func:`run_harness` (threads already set)."""
    dtype = prof.dtype
    settings = CacheSettings(**prof.kv_settings)
    results: dict[str, Any] = {
        "schema": RESULTS_SCHEMA, "created_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "device": device_info(dev), "quick": quick, "profile": asdict(prof),
        "settings": {"dtype": dtype, "warmup": prof.warmup, "repeats": prof.repeats, "seed": seed,
                     "cache_settings": asdict(settings), "linear_chunk_tokens": LINEAR_ATTN_CHUNK_TOKENS,
                     "linear_log_decay_floor": LINEAR_LOG_DECAY_FLOOR,
                     "swa_query_block_fraction": SWA_QUERY_BLOCK_FRACTION,
                     "timing": "wall clock around each call, device synchronised; model cases round-robin"},
        "gemm": [], "attention": [], "swa": [], "linear_attention": [], "memory": [], "models": [], "transfer": {},
    }
    w, r = prof.warmup, prof.repeats
    steps: list[_Step] = []
    for m, k, n in prof.gemm_shapes:
        steps.append(_Step(f"gemm {m}x{k}x{n}", lambda m=m, k=k, n=n: results["gemm"].append(
            bench_gemm(m, k, n, dev, dtype, w, r))))
    for l in prof.attention_lengths_tokens:
        steps.append(_Step(f"attention {l}", lambda l=l: results["attention"].append(
            bench_attention(l, prof.attention_heads, prof.attention_head_dim, dev, dtype, w, r))))
    for l in prof.swa_lengths_tokens:
        steps.append(_Step(f"swa {l}", lambda l=l: results["swa"].append(
            bench_attention(l, prof.attention_heads, prof.attention_head_dim, dev, dtype, w, r, prof.swa_window_tokens))))
    for l in prof.linear_lengths_tokens:
        for flavour in ("gdn", "kda", "lightning"):
            steps.append(_Step(f"linear {flavour} {l}", lambda l=l, f=flavour: results["linear_attention"].append(
                bench_linear_attention(l, prof.attention_heads, prof.attention_head_dim, f, dev, dtype, w, r))))
    for size in prof.copy_sizes_mib:
        steps.append(_Step(f"copy {size} MiB", lambda s=size: results["memory"].append(bench_copy(s, dev, w, r))))

    # scaled-down models: build once, warm up, then time round-robin
    cases: list[dict] = []
    models: dict[str, ScaledModel] = {}
    for model_id in (*prof.calibration_models, *prof.validation_models):
        spec = scale_model(load_model(model_id), prof.scale, dtype)
        calibration_model = model_id in prof.calibration_models
        if calibration_model:
            plan = [(l, "calibration") for l in prof.calibration_lengths_tokens] + \
                   [(l, "validation") for l in prof.holdout_lengths_tokens]
        else:
            plan = [(l, "validation") for l in prof.validation_lengths_tokens]
        for l, role in sorted(plan):
            cases.append({"case": model_case_name(model_id, l), "source_model": model_id, "layer_mix": layer_mix(spec),
                          "held_out": "length" if (calibration_model and role == "validation") else
                          ("model" if role == "validation" else ""),
                          "role": role, "tokens": l, "spec": spec.model_dump(mode="json"), "_times": []})

    def build(model_id: str, spec_dump: dict) -> None:
        spec = ModelSpec.model_validate(spec_dump)
        models[model_id] = ScaledModel(spec, dev, dtype, seed)

    def warm_and_check(case: dict) -> None:
        model = models[case["source_model"]]
        ids = model.token_ids(case["tokens"], seed)
        case["_ids"] = ids
        for _ in range(w):
            _, cache = model.prefill(ids, settings)
        if not w:
            _, cache = model.prefill(ids, settings)
        measured = cache_nbytes(cache)
        predicted = int(kv_bytes(model.spec, case["tokens"], settings))
        case.update(kv_bytes_measured=measured, kv_bytes_model=predicted, kv_match=measured == predicted,
                    gemm_params=model.gemm_params(), total_params=model.total_params())
        if case["source_model"] == prof.validation_models[0] and case["tokens"] == max(prof.validation_lengths_tokens):
            results["_transfer_cache"] = cache

    sync = _sync(dev)

    def timed_round(case: dict) -> None:
        model = models[case["source_model"]]
        sync()
        t0 = time.perf_counter()
        model.prefill(case["_ids"], settings)
        sync()
        case["_times"].append(time.perf_counter() - t0)

    for model_id in dict.fromkeys(c["source_model"] for c in cases):
        dump = next(c["spec"] for c in cases if c["source_model"] == model_id)
        steps.append(_Step(f"build {model_id}", lambda m=model_id, d=dump: build(m, d)))
    for case in cases:
        steps.append(_Step(f"warm-up {case['case']}", lambda c=case: warm_and_check(c)))
    for rep in range(r):
        for case in cases:
            steps.append(_Step(f"round {rep + 1}/{r} {case['case']}", lambda c=case: timed_round(c)))

    def transfer() -> None:
        cache = results.pop("_transfer_cache")
        t0 = time.perf_counter()
        payload = serialise_cache(cache)
        serialise_s = time.perf_counter() - t0
        check = loopback_transfer(payload, 1, len(payload), keep_received=True)
        intact = check["received"][0] == payload
        restored = deserialise_cache(check["received"][0])
        intact = intact and all(torch.equal(restored[i][n], cache[i][n].cpu()) for i in range(len(cache)) for n in cache[i])
        rows = [loopback_transfer(payload, c, prof.transfer_bytes_per_setting) for c in prof.transfer_connections]
        results["transfer"] = {
            "host": LOOPBACK_HOST, "payload": f"KV cache of {prof.validation_models[0]} (scaled) at "
                                              f"{max(prof.validation_lengths_tokens)} tokens, serialised",
            "payload_bytes": len(payload), "cache_bytes": cache_nbytes(cache), "serialise_s": serialise_s,
            "integrity_ok": bool(intact), "bytes_per_setting": prof.transfer_bytes_per_setting, "rows": rows}

    steps.append(_Step("transfer", transfer))
    t_start = time.perf_counter()
    _run_steps(steps, progress)
    for case in cases:
        case.pop("_ids", None)
        case.update(summarize(case.pop("_times"), w))
        results["models"].append(case)
    results["elapsed_s"] = time.perf_counter() - t_start
    return results


def _run_steps(steps: list[_Step], progress: bool) -> None:
    """Run the steps, with a rich progress bar on stderr when ``progress``."""
    if not progress:
        for s in steps:
            s.run()
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("[bold]bench[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=Console(stderr=True)) as bar:
        task = bar.add_task("", total=len(steps))
        for s in steps:
            bar.update(task, description=s.label)
            s.run()
            bar.advance(task)


def write_results(results: dict, path: str | Path) -> Path:
    """Write a results dict as JSON, atomically (see :func:`_data.atomic_write`)."""
    return atomic_write(path, json.dumps(results, indent=1, default=_json_default))


def _json_default(obj):
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")


def load_results(path: str | Path) -> dict:
    """Read a results file written by ``bench run`` (one-line PlanError when it is not one)."""
    p = Path(path)
    try:
        data = json.loads(read_text(p))
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{p}: not a JSON results file ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict) or data.get("schema") != RESULTS_SCHEMA:
        raise InvalidInput(f"{p}: not a bench results file (expected schema {RESULTS_SCHEMA}); run prfaas-plan bench run")
    for key, kind in RESULTS_SECTIONS.items():
        if not isinstance(data.get(key), kind):
            raise InvalidInput(f"{p}: field {key}: missing or not a {kind.__name__}; the file is not a complete "
                            "bench results file (rerun prfaas-plan bench run)")
    return data
