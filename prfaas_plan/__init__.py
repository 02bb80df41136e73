"""prfaas-plan: capacity planning and cost model for Prefill-as-a-Service; the public names, imported lazily.

The data flow, one part each: ``model`` / ``hardware`` (model and GPU databases) ->
``kvcache`` (cache bytes) -> ``perf`` (prefill and decode latency) -> ``bandwidth`` (Phi_kv,
egress, ratios) -> ``workload`` (lengths, traces, prefix caches) -> ``scenario`` -> ``queueing``
(TTFT) -> ``planner`` (paper and exact modes, baselines, cost) -> ``sim`` (the simulator) ->
``sweeps`` and ``sizing`` (the cheapest deployment for a target rate) -> ``report`` -> ``cli``.

Each name of :data:`_EXPORTS` is imported from its module on first use, so that ``import
prfaas_plan`` loads nothing heavy and the CLI starts fast.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "PlanError": "errors",
    "load_model": "model",
    "ModelSpec": "model",
    "list_models": "catalog",
    "list_hardware": "catalog",
    "load_gpu": "hardware",
    "instance": "hardware",
    "Instance": "hardware",
    "CacheSettings": "kvcache",
    "kv_bytes": "kvcache",
    "kv_bytes_per_token": "kvcache",
    "fixed_state_bytes": "kvcache",
    "per_gpu_kv_bytes": "kvcache",
    "kv_bytes_expr": "kvcache",
    "prefill_time_s": "perf.latency",
    "prefill_latency": "perf.latency",
    "decode_step_s": "perf.latency",
    "decode_capacity": "perf.latency",
    "kernel_tables": "perf.kernels",
    "EngineProfile": "engine",
    "load_engine": "engine",
    "Layout": "layout",
    "colocated_closed_loop": "serving",
    "colocated_open_loop": "serving",
    "SpecDecode": "serving",
    "speedup_curve": "serving",
    "max_sustainable_rate": "serving",
    "kv_throughput_gbps": "bandwidth",
    "MeasuredProfile": "perf.roofline",
    "parse_tokens": "units",
    "cluster_egress_gbps": "bandwidth",
    "max_prefill_gpus": "bandwidth",
    "pd_balance": "bandwidth",
    "load_scenario": "scenario",
    "Scenario": "scenario",
    "plan": "planner",
    "PlanResult": "planner",
    "load_trace": "workload",
    "Workload": "workload",
    "write_report": "report",
    "write_compare": "report",
    "sweep": "sweeps",
    "sweep_report": "report",
    "simulate": "sim",
    "simulate_colocated": "sim",
    "SimResult": "sim",
    "Policy": "sim",
    "Bursty": "sim",
    "validate_silicon": "validate",
    "validate_runs": "validate",
    "size": "sizing",
    "SizingResult": "sizing",
    "SizingSLO": "sizing",
    "LinkTier": "sizing",
    "frontier_cost_vs_ttft": "sizing.pareto",
    "frontier_cost_vs_rate": "sizing.pareto",
}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'prfaas_plan' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = sorted(_EXPORTS)
