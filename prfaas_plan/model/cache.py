"""Bytes one request caches: the layer kinds' cache elements in a serving engine's dtypes.

Exact integer arithmetic from a model's architecture (docs/design.md section 3):

* full attention GQA/MHA: ``n_kv_heads * (d_k + d_v) * b`` bytes per token and layer;
* MLA: ``(kv_lora_rank + qk_rope_head_dim) * b``, independent of head count;
* DSA (DeepSeek-V3.2, GLM-5): MLA plus the indexer's keys, ``index_head_dim`` fp8 bytes and one
  fp32 scale per 128 channels (132 bytes), whatever the KV dtype;
* sliding window W: like GQA per token, but only ``min(l, W)`` tokens are kept;
* Gated DeltaNet / KDA / Lightning: a fixed conv + recurrent state per request.

The element counts come from the kinds (:mod:`prfaas_plan.model.kinds`); ``b`` is the element size
of the KV dtype; state dtypes follow the serving engine (:class:`CacheSettings`), because vLLM and
SGLang keep some recurrent states in fp32 (and transformers, the ``hf`` convention, all of them,
with one more conv column). A request of ``l`` tokens holds
``sum(per_token * tokens_kept(l)) + fixed states``. Sharding over tensor-parallel ranks and the
sympy form of these formulas are in :mod:`prfaas_plan.kvcache`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from prfaas_plan.units import DTYPE_BYTES
from prfaas_plan.vocab import Engine, KvDtype, StateDtype

if TYPE_CHECKING:
    import numpy as np

    from prfaas_plan.model.arch import ModelSpec
    from prfaas_plan.model.kinds import Attention


class CacheSettings(BaseModel):
    """How a serving engine stores the cache (also a scenario's ``cache:`` block).

    kv_dtype: element type of KV caches (bf16, fp8 or fp32).
    engine: whose state-dtype rules to follow. vLLM: conv and Lightning states in the model
        dtype (bf16), Gated DeltaNet recurrent state in the checkpoint's ``mamba_ssm_dtype``
        (else bf16), KDA recurrent state always fp32. SGLang: conv bf16, every recurrent
        state fp32 unless the checkpoint states ``mamba_ssm_dtype``. hf (what a transformers
        5 cache holds): every recurrent state fp32 (its reference kernels compute the state in
        float32 and ignore ``mamba_ssm_dtype``), conv states with ``conv_kernel`` columns,
        the newest input included, where the engines keep ``conv_kernel - 1``.
    state_dtype: override of every recurrent-state dtype (None = the engine's rule).
    conv_dtype: element type of short-convolution states.
    block_tokens: round cached token counts up to whole pages of this many tokens (None = exact).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kv_dtype: KvDtype = "bf16"
    engine: Engine = "vllm"
    state_dtype: StateDtype | None = None
    conv_dtype: StateDtype = "bf16"
    block_tokens: int | None = Field(default=None, gt=0, description="tokens per cache page (None = exact)")


DEFAULT_SETTINGS = CacheSettings()


def recurrent_dtype(attn: Attention, settings: CacheSettings) -> StateDtype:
    """Element type of a linear-attention layer's recurrent state under ``settings``."""
    if settings.state_dtype is not None:
        return settings.state_dtype
    if settings.engine == "hf":
        return "fp32"
    if settings.engine == "sglang":
        return attn.checkpoint_state_dtype or "fp32"
    return attn.vllm_state_dtype


def conv_state_elements(attn: Attention, settings: CacheSettings) -> int:
    """Elements of a linear-attention layer's short-convolution state (count): the last
    ``conv_kernel - 1`` inputs per channel in vLLM and SGLang, ``conv_kernel`` in transformers."""
    return attn.conv_elements + (attn.conv_channels if settings.engine == "hf" else 0)


def state_bytes(attn: Attention, settings: CacheSettings) -> tuple[int, int]:
    """(conv, recurrent) state bytes of one layer per request (0, 0 for softmax attention)."""
    conv = int(conv_state_elements(attn, settings) * DTYPE_BYTES[settings.conv_dtype])
    rec = int(attn.recurrent_elements * DTYPE_BYTES[recurrent_dtype(attn, settings)]) if attn.recurrent_elements else 0
    return conv, rec


def token_bytes(attn: Attention, settings: CacheSettings, tp: int = 1) -> float:
    """Bytes per token of one layer's growing cache on one of ``tp`` ranks: its KV elements in the
    KV dtype plus what it keeps in its own dtype (a DSA indexer's fp8 keys and scales)."""
    return attn.rank_kv_elements_per_token(tp) * DTYPE_BYTES[settings.kv_dtype] + attn.index_bytes_per_token


def per_layer_table(model: ModelSpec, settings: CacheSettings | None = None) -> list[dict]:
    """One row per named attention config: layer count, bytes per token per layer, window,
    and fixed state bytes per layer (conv and recurrent). The basis of every other function."""
    settings = settings or DEFAULT_SETTINGS
    counts = model.layer_counts()
    rows = []
    for name, attn in model.attention.items():
        conv, rec = state_bytes(attn, settings)
        rows.append({"name": name, "kind": attn.kind, "layers": counts[name],
                     "bytes_per_token": int(token_bytes(attn, settings)),
                     "window_tokens": attn.window, "conv_bytes": conv, "recurrent_bytes": rec})
    return rows


def kv_bytes_per_token(model: ModelSpec, settings: CacheSettings | None = None) -> int:
    """Bytes per token of cache that grows without bound (full attention and MLA, all layers)."""
    return sum(r["layers"] * r["bytes_per_token"] for r in per_layer_table(model, settings)
               if r["window_tokens"] is None)


def linear_state_bytes(model: ModelSpec, settings: CacheSettings | None = None) -> int:
    """Bytes of linear-attention states (conv + recurrent) per request, all layers."""
    return sum(r["layers"] * (r["conv_bytes"] + r["recurrent_bytes"]) for r in per_layer_table(model, settings))


def fixed_state_bytes(model: ModelSpec, settings: CacheSettings | None = None) -> int:
    """Per-request bytes that stop growing with length: linear states plus full sliding windows
    (what every request of at least W tokens holds)."""
    settings = settings or DEFAULT_SETTINGS
    rows = per_layer_table(model, settings)
    window = sum(r["layers"] * r["bytes_per_token"] * window_cap_tokens(r["window_tokens"], settings.block_tokens)
                 for r in rows if r["window_tokens"])
    return window + linear_state_bytes(model, settings)


def _ceil(x: float | np.ndarray) -> float | np.ndarray:
    """Ceiling of a Python float (in math, so scalar calls need no numpy) or of an array."""
    if isinstance(x, float):
        return float(math.ceil(x))
    import numpy as np

    return np.ceil(x)


def _minimum(x: float | np.ndarray, cap: int) -> float | np.ndarray:
    """``min(x, cap)`` of a Python float, or elementwise of an array."""
    if isinstance(x, float):
        return min(x, float(cap))
    import numpy as np

    return np.minimum(x, cap)


def paged_tokens(tokens: float | np.ndarray, block: int | None) -> float | np.ndarray:
    """Tokens a growing cache holds: ``tokens`` rounded up to whole pages of ``block`` tokens."""
    return tokens if block is None else _ceil(tokens / block) * block


def window_cap_tokens(window: int, block: int | None) -> int:
    """Most tokens a sliding-window layer holds: W, or with paging the blocks that overlap the
    window, ceil((W - 1) / block) + 1 whole blocks (an approximation of vLLM's rule)."""
    return window if block is None else (math.ceil((window - 1) / block) + 1) * block


def tokens_kept(tokens: float | np.ndarray, window: int | None, block: int | None) -> float | np.ndarray:
    """Tokens a layer's growing cache holds for a request of ``tokens`` tokens (window capped);
    a Python float gives a float, an array an array."""
    if window is None:
        return paged_tokens(tokens, block)
    return _minimum(paged_tokens(tokens, block), window_cap_tokens(window, block))


def kv_bytes(model: ModelSpec, tokens, settings: CacheSettings | None = None):
    """Cache bytes of one request of ``tokens`` tokens (scalar or numpy array, float result
    for arrays). Full/MLA layers hold every token, SWA layers ``min(l, W)``, linear layers
    their fixed state. A Python number is computed in plain floats (the same IEEE operations
    in the same order as the array path), so the ``kv`` command never imports numpy."""
    settings = settings or DEFAULT_SETTINGS
    if isinstance(tokens, int | float):
        l, total = float(tokens), 0.0
    else:
        import numpy as np

        l = np.asarray(tokens, dtype=float)
        total = np.zeros_like(l)
    for r in per_layer_table(model, settings):
        if r["bytes_per_token"]:
            total += r["layers"] * r["bytes_per_token"] * tokens_kept(l, r["window_tokens"], settings.block_tokens)
        total += r["layers"] * (r["conv_bytes"] + r["recurrent_bytes"])
    return int(total) if isinstance(total, float) or total.ndim == 0 else total


__all__ = [
    "CacheSettings", "DEFAULT_SETTINGS", "conv_state_elements", "fixed_state_bytes", "kv_bytes",
    "kv_bytes_per_token", "linear_state_bytes", "paged_tokens", "per_layer_table", "recurrent_dtype",
    "state_bytes", "token_bytes", "tokens_kept", "window_cap_tokens",
]
