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
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from prfaas_plan.bench.kernels import LINEAR_LOG_DECAY_FLOOR, SWA_QUERY_BLOCK_FRACTION, _torch
from prfaas_plan.bench.micro import (
    TIMER_WARMUP_CALLS,
    bench_attention,
    bench_copy,
    bench_gemm,
    bench_linear_attention,
    clock_s,
    summarize,
)
from prfaas_plan.bench.model import ScaledModel, cache_nbytes
from prfaas_plan.bench.scale import Profile, layer_mix, profile_for, scale_model
from prfaas_plan.bench.transfer import LOOPBACK_HOST, deserialise_cache, loopback_transfer, serialise_cache
from prfaas_plan.data import atomic_write, read_text
from prfaas_plan.errors import InvalidInput
from prfaas_plan.kvcache import CacheSettings, kv_bytes
from prfaas_plan.model import ModelSpec, load_model
from prfaas_plan.perf.roofline import LINEAR_ATTN_CHUNK_TOKENS
from prfaas_plan.vocab import BENCH_DEVICES

RESULTS_SCHEMA = "prfaas-plan-bench/1"
"""Identifier written into every results file (bumped when the layout changes)."""

RESULTS_SECTIONS = {"device": dict, "settings": dict, "gemm": list, "attention": list, "swa": list,
                    "linear_attention": list, "memory": list, "models": list, "transfer": dict}
"""The top-level fields of a results file that calibrate and validate read, with their JSON types."""

LINEAR_FLAVOURS = ("gdn", "kda", "lightning")
"""The chunked linear-attention forwards the microbenchmarks time (see :func:`bench_linear_attention`)."""

TIMING_METHOD = (f"microbenchmarks: torch.utils.benchmark.Timer.timeit(number=1) per repeat ({TIMER_WARMUP_CALLS} "
                 "untimed calls before each, device synchronised); model prefills: one call per repeat on "
                 "torch.utils.benchmark.timer (device synchronised), cases round-robin")
"""How a results file's times were taken (written into its settings)."""


# --------------------------------------------------------------------------------------------
# The harness
# --------------------------------------------------------------------------------------------


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when torch sees a GPU, else 'cpu'; 'cuda' without a GPU is an error."""
    torch = _torch()
    if device not in BENCH_DEVICES:
        raise InvalidInput(f"--device: {device!r} is not one of {', '.join(BENCH_DEVICES)}")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise InvalidInput("--device cuda: torch sees no CUDA device; use --device cpu or auto")
    return device


def _cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one)."""
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


@dataclass(frozen=True)
class _Step:
    """One unit of work of the harness (the progress bar advances once per step)."""

    label: str
    run: Callable[[], None]


def model_case_name(model_id: str, tokens: int) -> str:
    """The name of a model case: ``model@tokens``."""
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
        return _run_profile(dev, quick, prof, progress, seed)
    finally:
        torch.set_num_threads(threads_before)


def _new_results(dev: str, quick: bool, prof: Profile, settings: CacheSettings, seed: int) -> dict[str, Any]:
    """The results dict before any measurement: schema, device, profile and settings, empty sections."""
    return {
        "schema": RESULTS_SCHEMA, "created_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "device": device_info(dev), "quick": quick, "profile": asdict(prof),
        "settings": {"dtype": prof.dtype, "warmup": prof.warmup, "repeats": prof.repeats, "seed": seed,
                     "cache_settings": settings.model_dump(), "linear_chunk_tokens": LINEAR_ATTN_CHUNK_TOKENS,
                     "linear_log_decay_floor": LINEAR_LOG_DECAY_FLOOR,
                     "swa_query_block_fraction": SWA_QUERY_BLOCK_FRACTION, "timing": TIMING_METHOD},
        "gemm": [], "attention": [], "swa": [], "linear_attention": [], "memory": [], "models": [], "transfer": {},
    }


def _micro_steps(results: dict, prof: Profile, dev: str) -> list[_Step]:
    """One step per microbenchmark, each appending its record to its section of ``results``."""
    dt, r, heads, head_dim = prof.dtype, prof.repeats, prof.attention_heads, prof.attention_head_dim

    def step(label: str, section: str, bench: Callable[[], dict]) -> _Step:
        """A step running ``bench`` and appending its record to ``results[section]``."""
        return _Step(label, lambda: results[section].append(bench()))

    steps = [step(f"gemm {m}x{k}x{n}", "gemm", partial(bench_gemm, m, k, n, dev, dt, r)) for m, k, n in prof.gemm_shapes]
    steps += [step(f"attention {l}", "attention", partial(bench_attention, l, heads, head_dim, dev, dt, r))
              for l in prof.attention_lengths_tokens]
    steps += [step(f"swa {l}", "swa", partial(bench_attention, l, heads, head_dim, dev, dt, r, prof.swa_window_tokens))
              for l in prof.swa_lengths_tokens]
    steps += [step(f"linear {f} {l}", "linear_attention", partial(bench_linear_attention, l, heads, head_dim, f, dev, dt, r))
              for l in prof.linear_lengths_tokens for f in LINEAR_FLAVOURS]
    steps += [step(f"copy {size} MiB", "memory", partial(bench_copy, size, dev, r)) for size in prof.copy_sizes_mib]
    return steps


def _model_cases(prof: Profile) -> list[dict]:
    """The model cases of a profile, sorted by length per model: calibration lengths and held-out
    lengths of the calibration models, validation lengths of the held-out models."""
    cases: list[dict] = []
    for model_id in (*prof.calibration_models, *prof.validation_models):
        spec = scale_model(load_model(model_id), prof.scale, prof.dtype)
        calibration_model = model_id in prof.calibration_models
        if calibration_model:
            plan = [(l, "calibration") for l in prof.calibration_lengths_tokens] + \
                   [(l, "validation") for l in prof.holdout_lengths_tokens]
        else:
            plan = [(l, "validation") for l in prof.validation_lengths_tokens]
        for l, role in sorted(plan):
            held_out = "" if role == "calibration" else ("length" if calibration_model else "model")
            cases.append({"case": model_case_name(model_id, l), "source_model": model_id, "layer_mix": layer_mix(spec),
                          "held_out": held_out, "role": role, "tokens": l, "spec": spec.model_dump(mode="json"),
                          "_times": []})
    return cases


@dataclass
class _ModelBench:
    """The scaled-down models of one run and the steps that build, warm up and time them.

    ``transfer_cache``: the cache the transfer test sends (the first validation model at its
    longest validation length), kept by its warm-up.
    """

    prof: Profile
    dev: str
    settings: CacheSettings
    seed: int
    models: dict[str, ScaledModel] = field(default_factory=dict)
    transfer_cache: list[dict] | None = None

    def build(self, model_id: str, spec_dump: dict) -> None:
        """Build the torch model of ``model_id`` from its scaled spec."""
        self.models[model_id] = ScaledModel(ModelSpec.model_validate(spec_dump), self.dev, self.prof.dtype, self.seed)

    def warm_and_check(self, case: dict) -> None:
        """Warm-up prefills of one case (at least one), then its measured vs modelled KV bytes."""
        model = self.models[case["source_model"]]
        case["_ids"] = model.token_ids(case["tokens"], self.seed)
        for _ in range(max(1, self.prof.warmup)):
            _, cache = model.prefill(case["_ids"], self.settings)
        measured = cache_nbytes(cache)
        predicted = int(kv_bytes(model.spec, case["tokens"], self.settings))
        case.update(kv_bytes_measured=measured, kv_bytes_model=predicted, kv_match=measured == predicted,
                    gemm_params=model.gemm_params(), total_params=model.total_params())
        if case["source_model"] == self.prof.validation_models[0] and \
                case["tokens"] == max(self.prof.validation_lengths_tokens):
            self.transfer_cache = cache

    def timed_round(self, case: dict) -> None:
        """One timed prefill of one case (one repeat of one round), on torch's synchronising clock."""
        model = self.models[case["source_model"]]
        t0 = clock_s()
        model.prefill(case["_ids"], self.settings)
        case["_times"].append(clock_s() - t0)

    def steps(self, cases: list[dict]) -> list[_Step]:
        """Build every model, warm up every case, then ``repeats`` rounds over all cases."""
        steps = []
        for model_id in dict.fromkeys(c["source_model"] for c in cases):
            dump = next(c["spec"] for c in cases if c["source_model"] == model_id)
            steps.append(_Step(f"build {model_id}", partial(self.build, model_id, dump)))
        steps += [_Step(f"warm-up {c['case']}", partial(self.warm_and_check, c)) for c in cases]
        r = self.prof.repeats
        steps += [_Step(f"round {rep + 1}/{r} {c['case']}", partial(self.timed_round, c))
                  for rep in range(r) for c in cases]
        return steps


def _transfer(cache: list[dict], prof: Profile) -> dict:
    """The transfer test: serialise ``cache``, check one loopback round trip restores it exactly,
    then time every connection count of the profile."""
    torch = _torch()
    t0 = clock_s()
    payload = serialise_cache(cache)
    serialise_s = clock_s() - t0
    check = loopback_transfer(payload, 1, len(payload), keep_received=True)
    restored = deserialise_cache(check["received"][0])
    intact = check["received"][0] == payload and all(
        torch.equal(restored[i][n], cache[i][n].cpu()) for i in range(len(cache)) for n in cache[i])
    rows = [loopback_transfer(payload, c, prof.transfer_bytes_per_setting) for c in prof.transfer_connections]
    return {"host": LOOPBACK_HOST, "payload": f"KV cache of {prof.validation_models[0]} (scaled) at "
                                              f"{max(prof.validation_lengths_tokens)} tokens, serialised",
            "payload_bytes": len(payload), "cache_bytes": cache_nbytes(cache), "serialise_s": serialise_s,
            "integrity_ok": bool(intact), "bytes_per_setting": prof.transfer_bytes_per_setting, "rows": rows}


def _run_profile(dev: str, quick: bool, prof: Profile, progress: bool, seed: int) -> dict:
    """The body of :func:`run_harness` (threads already set): every step, then the model records."""
    settings = CacheSettings(**prof.kv_settings)
    results = _new_results(dev, quick, prof, settings, seed)
    cases = _model_cases(prof)
    models = _ModelBench(prof, dev, settings, seed)

    def transfer() -> None:
        """The transfer test, on the cache the warm-ups kept."""
        results["transfer"] = _transfer(models.transfer_cache, prof)

    steps = [*_micro_steps(results, prof, dev), *models.steps(cases), _Step("transfer", transfer)]
    t_start = time.perf_counter()
    _run_steps(steps, progress)
    for case in cases:
        case.pop("_ids", None)
        case.update(summarize(case.pop("_times"), prof.warmup))
        results["models"].append(case)
    results["elapsed_s"] = time.perf_counter() - t_start
    return results


def _run_steps(steps: list[_Step], progress: bool) -> None:
    """Run the steps, with a rich progress bar on stderr when ``progress``."""
    if not progress:
        for s in steps:
            s.run()
        return
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


def _json_default(obj: Any) -> int | float:
    """numpy scalars as Python numbers for ``json.dumps``; anything else is an error."""
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
