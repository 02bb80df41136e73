"""The cache model's API: a request's cache bytes, what each tensor-parallel rank holds of them, and
``S_kv(l)`` as a sympy expression.

Per-request bytes (:func:`kv_bytes`, :func:`kv_bytes_per_token`, :func:`fixed_state_bytes`, the
engine rules of :class:`CacheSettings`) are computed in :mod:`prfaas_plan.model.cache` from the
layer kinds' element counts and re-exported here. This module adds the deployment view: which
tensor-parallel degrees can shard a model (:func:`check_tp`) and the bytes one rank holds
(:func:`per_gpu_kv_bytes`), and the same formulas as sympy expressions (:func:`kv_bytes_expr`)
for reports.
"""

from __future__ import annotations

import numpy as np

from prfaas_plan.errors import InvalidInput
from prfaas_plan.model.arch import ModelSpec
from prfaas_plan.model.cache import (
    DEFAULT_SETTINGS,
    CacheSettings,
    conv_state_elements,
    fixed_state_bytes,
    kv_bytes,
    kv_bytes_per_token,
    linear_state_bytes,
    per_layer_table,
    recurrent_dtype,
    state_bytes,
    tokens_kept,
)
from prfaas_plan.units import DTYPE_BYTES


def _tp_problem(model: ModelSpec, tp: int) -> str | None:
    """Why ``tp`` cannot shard ``model``'s attention the way vLLM does, or None (each kind's rule:
    :meth:`prfaas_plan.model.kinds.GQA.tp_problem`)."""
    for name, attn in model.attention.items():
        problem = attn.tp_problem(tp)
        if problem:
            return f"{name} attention {problem}"
    return None


def check_tp(model: ModelSpec, tp: int, field: str = "tp") -> int:
    """``tp`` when it is a tensor-parallel degree that can shard ``model`` (see :func:`_tp_problem`),
    else a one-line PlanError naming ``field`` and the valid degrees up to 64. Linear-attention
    states shard by heads too, but unevenly split heads are allowed: the busiest rank is counted."""
    if isinstance(tp, bool) or int(tp) != tp or tp < 1:
        raise InvalidInput(f"{field}: tensor-parallel degree must be a whole number >= 1, got {tp!r}")
    problem = _tp_problem(model, int(tp))
    if problem:
        valid = ", ".join(str(t) for t in range(1, 65) if _tp_problem(model, t) is None)
        raise InvalidInput(f"{field}: {model.id} cannot be split over {tp} GPUs ({problem}); valid degrees: {valid}")
    return int(tp)


def per_gpu_kv_bytes(model: ModelSpec, tokens: float, tp: int, settings: CacheSettings | None = None) -> int:
    """Cache bytes one tensor-parallel rank holds for a request of ``tokens`` tokens.

    GQA/SWA KV heads shard across ranks down to one head per rank (then replicate); the MLA
    latent has no head axis and is replicated on every rank; linear states shard by heads
    (each kind's ``rank_kv_elements_per_token`` and ``rank_state_fraction``).
    A ``tp`` that vLLM could not run (:func:`check_tp`) is a PlanError.
    """
    tp = check_tp(model, tp)
    settings = settings or DEFAULT_SETTINGS
    b = DTYPE_BYTES[settings.kv_dtype]
    counts = model.layer_counts()
    total = 0.0
    for name, attn in model.attention.items():
        per_token = attn.rank_kv_elements_per_token(tp) * b
        if per_token:
            total += counts[name] * per_token * float(tokens_kept(np.asarray(float(tokens)), attn.window,
                                                                  settings.block_tokens))
        conv, rec = state_bytes(attn, settings)
        total += counts[name] * (conv + rec) * attn.rank_state_fraction(tp)
    return int(round(total))


def kv_bytes_expr(model: ModelSpec, settings: CacheSettings | None = None):
    """``S_kv(l)`` as a sympy expression in the symbol ``l`` (tokens), exact, without paging:
    full/MLA layers contribute ``bytes * l``, SWA layers ``bytes * Piecewise((l, l <= W), (W, True))``,
    linear layers a constant. sympy is imported here, not at module load, to keep the CLI fast."""
    import sympy

    if settings is not None and settings.block_tokens is not None:
        raise InvalidInput("kv_bytes_expr: block_tokens is not supported; the expression has no paging")
    l = sympy.Symbol("l", positive=True, integer=True)
    expr = sympy.Integer(0)
    for r in per_layer_table(model, settings):
        per = sympy.Integer(r["layers"] * r["bytes_per_token"])
        if r["window_tokens"] is not None:
            w = sympy.Integer(r["window_tokens"])
            expr += per * sympy.Piecewise((l, l <= w), (w, True))
        else:
            expr += per * l
        expr += sympy.Integer(r["layers"] * (r["conv_bytes"] + r["recurrent_bytes"]))
    return expr


__all__ = [
    "CacheSettings", "DEFAULT_SETTINGS", "check_tp", "conv_state_elements", "fixed_state_bytes",
    "kv_bytes", "kv_bytes_expr", "kv_bytes_per_token", "linear_state_bytes", "per_gpu_kv_bytes",
    "per_layer_table", "recurrent_dtype",
]
