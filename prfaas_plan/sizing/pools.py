"""The instance types a sizing may buy: one :class:`PoolProfile` per GPU type and parallel layout,
with the planner's own coefficients (prefill seconds per length bucket, decode requests/s per
instance at the TPOT SLO) and its price.

Each profile is :func:`prfaas_plan.planner.plan_inputs` of a variant of the scenario whose two
pools are that instance type (one instance each): so prefill times are the kernel model's, or the
scenario's measured profile where the GPU, GPUs per instance and layout are the pool's it was
measured on, and decode capacity is :func:`~prfaas_plan.perf.latency.decode_capacity` at the
scenario's TPOT SLO (or its measured decode constants, on the local pool's own hardware). A GPU
type the model cannot run on (weights that do not fit, no kernel data, a TPOT it cannot meet) is
kept with the reason, so that the sizing can say why it was skipped.

Layout labels: ``tp8`` (attention and experts tensor parallel over 8 GPUs), ``tp8-ep8`` (experts
expert-parallel), ``dp8-ep8`` (data-parallel attention), ``dp8-atp2-ep8`` (data-parallel attention
over TP groups of 2 GPUs), ``tp8-dcp8`` (decode context parallel); the number is the GPUs per
instance. Times are seconds, rates requests/s, prices $/hour.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from prfaas_plan.errors import InvalidInput, PlanError
from prfaas_plan.layout import Layout, default_layout

if TYPE_CHECKING:
    from prfaas_plan.handoff import Staging
    from prfaas_plan.hardware import GPU
    from prfaas_plan.model.arch import ModelSpec
    from prfaas_plan.scenario import PoolSpec, Scenario

_LABEL = re.compile(r"^(tp|dp)(\d+)(?:-atp(\d+))?(?:-(ep)(\d+))?(?:-dcp(\d+))?$")


def parse_layout(label: str) -> Layout:
    """The :class:`Layout` of a label (``tp8``, ``tp8-ep8``, ``dp8-ep8``, ``dp8-atp2-ep8``,
    ``tp8-dcp8``); a label that is not one is a one-line InvalidInput naming ``--layouts``."""
    m = _LABEL.match(label.strip().lower())
    if m is None or (m.group(5) and m.group(5) != m.group(2)) or (m.group(3) and m.group(1) != "dp"):
        raise InvalidInput(f"--layouts: {label!r} is not a layout; use e.g. tp8, tp8-ep8, dp8-ep8, dp8-atp2-ep8, "
                           "tp16 or tp8-dcp8 (attention tp|dp and GPUs per instance, then -atp<GPUs per attention "
                           "replica> under dp, then -ep<same GPUs>, then -dcp<degree>)")
    gpus = int(m.group(2))
    if gpus < 1:
        raise InvalidInput(f"--layouts: {label!r} has no GPUs; give at least 1 (e.g. tp8)")
    try:
        return Layout(gpus, m.group(1), "ep" if m.group(4) else "tp", int(m.group(6) or 1),
                      int(m.group(3)) if m.group(3) else None)
    except InvalidInput as exc:
        raise InvalidInput(f"--layouts: {label!r}: {exc}") from None


def layout_label(layout: Layout) -> str:
    """The short label of a layout (the inverse of :func:`parse_layout`)."""
    g = layout.gpus
    return f"{layout.attention}{g}" + (f"-atp{layout.attention_tp}" if layout.attention_tp is not None else "") + \
        (f"-ep{g}" if layout.experts == "ep" else "") + (f"-dcp{layout.dcp}" if layout.dcp > 1 else "")


def pool_layout(pool: PoolSpec, model: ModelSpec) -> Layout:
    """A scenario pool's layout over its GPUs per instance (its attention TP group included) for
    ``model`` (the default where the pool names none: :func:`prfaas_plan.layout.default_layout`)."""
    return pool.layout.to_layout(pool.gpus_per_instance, model) or default_layout(model, pool.gpus_per_instance)


@dataclass(frozen=True)
class PoolProfile:
    """One instance type: ``gpus_per_instance`` GPUs of ``gpu`` in ``layout``; prefill seconds per
    length bucket (None when it cannot prefill: ``problem`` says why), decode requests/s per
    instance at the TPOT SLO with the batch and step behind it (None when it cannot decode:
    ``decode_problem``), rental price of the whole instance, and its decode
    side's staging memory (``decode.staging_memory``; None when off or it cannot decode)."""

    gpu: GPU
    layout: Layout
    prefill_s: np.ndarray | None
    decode_rps: float | None
    decode_batch_max: int
    decode_step_s: float
    usd_per_hour: float
    problem: str = ""
    decode_problem: str = ""
    staging: Staging | None = None

    @property
    def gpus_per_instance(self) -> int:
        return self.layout.gpus

    @property
    def label(self) -> str:
        return layout_label(self.layout)

    @property
    def name(self) -> str:
        return f"{self.layout.gpus}x{self.gpu.id} {self.label}"


def _pool_update(sc: Scenario, gpu: str, layout: Layout) -> dict:
    """The pool fields of a variant whose pool is one instance of ``gpu`` in ``layout``, with the
    measured prefill profile of whichever scenario pool has exactly that hardware (else none)."""
    profile = None
    for pool in (sc.spec.prfaas, sc.spec.local):
        if pool.gpu == gpu and pool_layout(pool, sc.model) == layout and pool.profile is not None:
            profile = pool.profile.model_dump()
            break
    spec = {"attention": layout.attention, "experts": layout.experts, "dcp": layout.dcp}
    if layout.attention_tp is not None:
        spec["attention_tp"] = layout.attention_tp
    return {"gpu": gpu, "gpus": layout.gpus, "gpus_per_instance": layout.gpus, "profile": profile, "layout": spec}


def pool_profile(sc: Scenario, gpu: str, layout: Layout, tokens: np.ndarray) -> PoolProfile:
    """The profile of ``gpu`` in ``layout`` for scenario ``sc`` at the bucket lengths ``tokens``."""
    from prfaas_plan.hardware import load_gpu
    from prfaas_plan.planner import plan_inputs

    spec = load_gpu(gpu)
    pool = _pool_update(sc, gpu, layout)
    local = sc.spec.local
    own_decode = local.gpu == gpu and pool_layout(local, sc.model) == layout
    decode = sc.spec.decode.model_dump() | ({} if own_decode else {"batch_max": None, "step_s": None, "source": None})
    price = layout.gpus * spec.price_usd_per_gpu_hour
    none = dict(gpu=spec, layout=layout, decode_batch_max=0, decode_step_s=float("nan"), usd_per_hour=price)
    try:
        variant = sc.with_updates(prfaas=pool, local=pool, decode=decode, baseline_gpus=None)
        _ = variant.prfaas_instance  # the layout and the GPU, checked
    except PlanError as exc:
        return PoolProfile(prefill_s=None, decode_rps=None, problem=str(exc), decode_problem=str(exc), **none)
    try:
        inp = plan_inputs(variant)
    except PlanError as exc:  # cannot decode here; it may still prefill
        prefill, problem = _try_prefill(variant, tokens)
        return PoolProfile(prefill_s=prefill, decode_rps=None, decode_problem=str(exc), problem=problem, **none)
    try:
        prefill = np.asarray(inp.t_remote(tokens), dtype=float)
    except PlanError as exc:
        return PoolProfile(prefill_s=None, decode_rps=inp.decode_rps_per_instance, problem=str(exc), staging=inp.staging,
                           **(none | {"decode_batch_max": inp.decode_batch_max, "decode_step_s": inp.decode_step_s}))
    return PoolProfile(prefill_s=prefill, decode_rps=inp.decode_rps_per_instance, staging=inp.staging,
                       **(none | {"decode_batch_max": inp.decode_batch_max, "decode_step_s": inp.decode_step_s}))


def _prefill_seconds(variant: Scenario, tokens: np.ndarray) -> np.ndarray:
    """Prefill seconds on the variant's pool (its measured profile, else the kernel model), as
    :func:`prfaas_plan.planner.plan_inputs` times them; raises the model's PlanError."""
    from prfaas_plan.perf.latency import free_cache_bytes_per_gpu, prefill_time_s

    inst = variant.prfaas_instance
    free_cache_bytes_per_gpu(variant.model, inst, variant.spec.decode.reserve_gib_per_gpu)  # the weights fit
    prof = variant.prfaas_profile
    if prof is not None:
        return np.asarray(prof.prefill_time_s(np.asarray(tokens, dtype=float)), dtype=float)
    return np.asarray(prefill_time_s(variant.model, inst, np.asarray(tokens, dtype=float), settings=variant.cache),
                      dtype=float)


def _try_prefill(variant: Scenario, tokens: np.ndarray) -> tuple[np.ndarray | None, str]:
    """:func:`_prefill_seconds`, or None and the reason it cannot run."""
    try:
        return _prefill_seconds(variant, tokens), ""
    except PlanError as exc:
        return None, str(exc)


__all__ = ["PoolProfile", "layout_label", "parse_layout", "pool_layout", "pool_profile"]
