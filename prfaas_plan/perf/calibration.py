"""Fitting to measured prefill latencies: the roofline's named efficiency factors, and an engine
profile's request overhead on top of the kernel model.

Least squares on ``log(predicted / measured)`` (scipy), so every observation weighs the same
in relative terms whatever its length. The fitted values are written back with their
provenance (which observations, the residuals) by ``prfaas-plan bench calibrate``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from prfaas_plan.data import read_yaml
from prfaas_plan.engine import EngineProfile
from prfaas_plan.errors import InvalidInput
from prfaas_plan.hardware import GPU, Efficiency, Instance, load_gpu
from prfaas_plan.kvcache import kv_bytes
from prfaas_plan.model import ModelSpec, load_model
from prfaas_plan.perf.latency import prefill_latency
from prfaas_plan.perf.roofline import analytic_prefill, layer_costs
from prfaas_plan.units import BITS_PER_BYTE, GBPS_BITS_PER_S

FITTABLE = ("gemm", "attention", "linear_attention", "prefill_overhead_s")


@dataclass(frozen=True)
class PrefillObservation:
    """One measured prefill: ``prefill_s`` seconds for ``tokens`` tokens of ``model`` on an
    instance of ``gpus`` GPUs of type ``gpu``."""

    model: ModelSpec
    gpu: GPU
    gpus: int
    tokens: int
    prefill_s: float
    label: str = ""


def predict(obs: list[PrefillObservation], eff: Efficiency) -> np.ndarray:
    """Predicted prefill seconds for every observation under efficiency ``eff``."""
    out = []
    for o in obs:
        gpu = o.gpu.model_copy(update={"efficiency": eff})
        out.append(float(analytic_prefill(o.model, Instance(gpu, o.gpus), o.tokens, layer_costs(o.model)).total_s))
    return np.asarray(out)


def fit_prefill(obs: list[PrefillObservation], start: Efficiency, params: tuple[str, ...] = FITTABLE,
                provenance: str = "") -> tuple[Efficiency, np.ndarray]:
    """Fit ``params`` of ``start`` to the observations; returns the new efficiency and the
    relative errors ``predicted / measured - 1`` per observation."""
    if not obs:
        raise InvalidInput("calibration: no observations to fit")
    unknown = sorted(set(params) - set(FITTABLE))
    if unknown:
        raise InvalidInput(f"calibration: cannot fit {', '.join(unknown)}; fittable: {', '.join(FITTABLE)}")
    measured = np.array([o.prefill_s for o in obs])
    x0 = np.array([getattr(start, p) for p in params])
    lower = np.array([0.0 if p.endswith("_s") else 0.01 for p in params])
    upper = np.array([10.0 if p.endswith("_s") else 1.0 for p in params])

    def residual(x: np.ndarray) -> np.ndarray:
        eff = start.model_copy(update=dict(zip(params, x)))
        return np.log(predict(obs, eff) / measured)

    sol = least_squares(residual, np.clip(x0, lower + 1e-6, upper - 1e-6), bounds=(lower, upper))
    fitted = start.model_copy(update={**{p: float(v) for p, v in zip(params, sol.x)},
                                      "provenance": provenance or start.provenance})
    return fitted, predict(obs, fitted) / measured - 1.0


def load_observations(path: str | Path) -> list[PrefillObservation]:
    """Read a YAML file of measured prefill latencies::

        source: https://...
        observations:
          - {model: minimax-m2.5, gpu: h200, gpus: 8, tokens: 32768, prefill_s: 1.11, label: ...}
          - {model: mimo-v2-flash, gpu: h200, gpus: 8, tokens: 32768, phi_kv_gbps: 4.66}

    An observation may give ``phi_kv_gbps`` (Eq. 1) instead of ``prefill_s``.
    """
    data = read_yaml(Path(path))
    rows = data.get("observations")
    if not isinstance(rows, list) or not rows:
        raise InvalidInput(f"{path}: field observations: give a list of measured prefill latencies")
    obs = []
    for i, r in enumerate(rows):
        try:
            model, tokens = load_model(r["model"]), int(r["tokens"])
            if "prefill_s" in r:
                prefill_s = float(r["prefill_s"])
            else:  # Eq. 1 inverted: a published Phi_kv implies T = S_kv / Phi
                prefill_s = kv_bytes(model, tokens) * BITS_PER_BYTE / (float(r["phi_kv_gbps"]) * GBPS_BITS_PER_S)
            obs.append(PrefillObservation(model, load_gpu(r["gpu"]), int(r["gpus"]), tokens, prefill_s,
                                          str(r.get("label", ""))))
        except KeyError as exc:
            raise InvalidInput(f"{path}: field observations.{i}.{exc.args[0]}: missing required field") from None
    return obs


def fit_request_overhead(obs: list[PrefillObservation], engine: EngineProfile) -> tuple[float, np.ndarray]:
    """The one constant an engine profile may take from end-to-end measurements: its request
    overhead, fitted AFTER the kernel model (the kernels alone, from the tables, plus a constant
    per request), least squares in ``log(predicted / measured)`` over ``obs``. Returns the
    overhead in seconds and the relative errors ``predicted / measured - 1`` per observation."""
    from scipy.optimize import minimize_scalar

    if not obs:
        raise InvalidInput("calibration: no observations to fit the request overhead to")
    bare = engine.model_copy(update={"request_overhead_s": 0.0})
    kernels_s = np.array([float(prefill_latency(o.model, Instance(o.gpu, o.gpus, engine=bare), o.tokens).total_s)
                          for o in obs])
    measured = np.array([o.prefill_s for o in obs])
    if np.any(measured <= 0):
        raise InvalidInput("calibration: measured prefill times must be positive")
    sol = minimize_scalar(lambda r: float(np.sum(np.log((kernels_s + r) / measured) ** 2)),
                          bounds=(0.0, float(measured.max())), method="bounded", options={"xatol": 1e-6})
    return float(sol.x), (kernels_s + sol.x) / measured - 1.0
