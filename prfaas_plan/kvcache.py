"""The cache model's API: a request's cache bytes, what each tensor-parallel rank holds of them, and
``S_kv(l)`` as a sympy expression.

Per-request bytes (:func:`kv_bytes`, :func:`kv_bytes_per_token`, :func:`fixed_state_bytes`, the
engine rules of :class:`CacheSettings`) are computed in :mod:`prfaas_plan.model.cache` from the
layer kinds' element counts and re-exported here. This module adds the deployment view: the bytes one rank holds
under a tensor-parallel degree or a :class:`~prfaas_plan.layout.Layout` (:func:`per_gpu_kv_bytes`;
which degrees can shard a model is :func:`prfaas_plan.layout.check_tp`, re-exported here), how
many requests an instance's free memory holds (:func:`requests_per_instance_memory`), and the
same formulas as sympy expressions (:func:`kv_bytes_expr`) for reports.
"""

from __future__ import annotations

import math

from prfaas_plan.errors import InvalidInput
from prfaas_plan.layout import Layout, check_layout, check_tp
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
    token_bytes,
    tokens_kept,
)


def per_gpu_kv_bytes(model: ModelSpec, tokens: float, tp_or_layout: int | Layout,
                     settings: CacheSettings | None = None) -> int:
    """Cache bytes of one request of ``tokens`` tokens on the busiest GPU that holds it.

    An int is a tensor-parallel degree: GQA/SWA KV heads shard across ranks down to one head per
    rank (then replicate); the MLA latent has no head axis and is on every rank; linear states
    shard by heads (each kind's ``rank_kv_elements_per_token`` and ``rank_state_fraction``).
    A :class:`~prfaas_plan.layout.Layout` places the cache on its ``ranks_per_request`` GPUs:
    the attention TP degree splits it as above (1 under DP attention: the rank holding the
    request holds all of it), and DCP token-shards the growing cache over ``dcp`` ranks (each
    holds ``ceil(tokens / dcp)`` tokens of the KV heads of ``attn_tp / dcp`` ranks); fixed
    states are request-indexed and not sharded by DCP. A degree or layout the model cannot take
    (:func:`~prfaas_plan.layout.check_layout`) is a PlanError.
    """
    if isinstance(tp_or_layout, Layout):
        layout = check_layout(model, tp_or_layout)
        tp, dcp = layout.attn_tp, layout.dcp
    else:
        tp, dcp = check_tp(model, tp_or_layout), 1
    settings = settings or DEFAULT_SETTINGS
    counts = model.layer_counts()
    total = 0.0
    for name, attn in model.attention.items():
        # DCP ranks of one group share the KV heads of tp / dcp ranks, each a token stripe
        per_token = token_bytes(attn, settings, tp // dcp)
        if per_token:
            kept = tokens_kept(float(tokens), attn.window, settings.block_tokens)
            total += counts[name] * per_token * (kept if dcp == 1 else math.ceil(kept / dcp))
        conv, rec = state_bytes(attn, settings)
        total += counts[name] * (conv + rec) * attn.rank_state_fraction(tp)
    return int(round(total))


def requests_per_instance_memory(model: ModelSpec, layout: int | Layout, tokens: float, free_bytes_per_gpu: float,
                                 settings: CacheSettings | None = None) -> int:
    """Requests of ``tokens`` tokens whose caches fit an instance with ``free_bytes_per_gpu``
    bytes left on every GPU: each attention DP rank fits ``floor(free / per-rank bytes)`` of its
    own (:func:`per_gpu_kv_bytes`), and there are ``attn_dp`` of them (one under TP: every rank
    holds a share of every request). An int ``layout`` is a TP degree."""
    dp = layout.attn_dp if isinstance(layout, Layout) else 1
    per_request = per_gpu_kv_bytes(model, tokens, layout, settings)
    if per_request <= 0:
        raise InvalidInput(f"tokens: a request of {tokens} tokens holds no cache; give a positive length")
    return dp * int(max(free_bytes_per_gpu, 0.0) // per_request)


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
    "per_layer_table", "recurrent_dtype", "requests_per_instance_memory",
]
