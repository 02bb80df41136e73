"""The cache model: bytes of KV cache and linear-attention state per token and per request.

Exact integer arithmetic from a model's architecture (docs/design.md section 3):

* full attention GQA/MHA: ``n_kv_heads * (d_k + d_v) * b`` bytes per token and layer;
* MLA: ``(kv_lora_rank + qk_rope_head_dim) * b``, independent of head count;
* sliding window W: like GQA per token, but only ``min(l, W)`` tokens are kept;
* Gated DeltaNet / KDA / Lightning: a fixed conv + recurrent state per request.

``b`` is the element size of the KV dtype; state dtypes follow the serving engine
(:class:`CacheSettings`), because vLLM and SGLang keep some recurrent states in fp32 (and
transformers, the ``hf`` convention, all of them, with one more conv column). A request
of ``l`` tokens holds ``sum(per_token * tokens_kept(l)) + fixed states``. The same formulas are
available as sympy expressions (:func:`kv_bytes_expr`) for reports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from prfaas_plan.errors import InvalidInput
from prfaas_plan.model.arch import GROWING_KINDS, ModelSpec
from prfaas_plan.units import DTYPE_BYTES

Engine = Literal["vllm", "sglang", "hf"]
ENGINES: tuple[str, ...] = ("vllm", "sglang", "hf")
KV_DTYPES: tuple[str, ...] = ("bf16", "fp8", "fp32")


@dataclass(frozen=True)
class CacheSettings:
    """How a serving engine stores the cache.

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

    kv_dtype: str = "bf16"
    engine: Engine = "vllm"
    state_dtype: str | None = None
    conv_dtype: str = "bf16"
    block_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.kv_dtype not in KV_DTYPES:
            raise InvalidInput(f"kv_dtype: {self.kv_dtype!r} is not supported; use one of {', '.join(KV_DTYPES)}")
        if self.engine not in ENGINES:
            raise InvalidInput(f"engine: {self.engine!r} is not supported; use one of {', '.join(ENGINES)}")
        for name in ("state_dtype", "conv_dtype"):
            value = getattr(self, name)
            if value is not None and value not in ("bf16", "fp32"):
                raise InvalidInput(f"{name}: {value!r} is not supported; use bf16 or fp32")
        if self.block_tokens is not None and self.block_tokens <= 0:
            raise InvalidInput("block_tokens: must be a positive number of tokens")


DEFAULT_SETTINGS = CacheSettings()


def recurrent_dtype(attn, settings: CacheSettings) -> str:
    """Element type of a linear-attention layer's recurrent state under ``settings``."""
    if settings.state_dtype is not None:
        return settings.state_dtype
    checkpoint = getattr(attn, "ssm_dtype", None)
    if settings.engine == "hf":
        return "fp32"
    if settings.engine == "sglang":
        return checkpoint or "fp32"
    return {"gdn": checkpoint or "bf16", "kda": "fp32", "lightning": "bf16"}[attn.kind]


def conv_state_elements(attn, settings: CacheSettings) -> int:
    """Elements of a linear-attention layer's short-convolution state (count): the last
    ``conv_kernel - 1`` inputs per channel in vLLM and SGLang, ``conv_kernel`` in transformers."""
    return attn.conv_elements + (attn.conv_channels if settings.engine == "hf" else 0)


def _kv_elem_bytes(settings: CacheSettings) -> float:
    return DTYPE_BYTES[settings.kv_dtype]


def per_layer_table(model: ModelSpec, settings: CacheSettings | None = None) -> list[dict]:
    """One row per named attention config: layer count, bytes per token per layer, window,
    and fixed state bytes per layer (conv and recurrent). The basis of every other function."""
    settings = settings or DEFAULT_SETTINGS
    rows = []
    counts = model.layer_counts()
    for name, attn in model.attention.items():
        row = {"name": name, "kind": attn.kind, "layers": counts[name], "bytes_per_token": 0,
               "window_tokens": None, "conv_bytes": 0, "recurrent_bytes": 0}
        if attn.kind in GROWING_KINDS:
            row["bytes_per_token"] = int(attn.kv_elements_per_token * _kv_elem_bytes(settings))
            row["window_tokens"] = getattr(attn, "window_tokens", None)
        else:
            row["conv_bytes"] = int(conv_state_elements(attn, settings) * DTYPE_BYTES[settings.conv_dtype])
            row["recurrent_bytes"] = int(attn.recurrent_elements * DTYPE_BYTES[recurrent_dtype(attn, settings)])
        rows.append(row)
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
    window = sum(r["layers"] * r["bytes_per_token"] * _window_cap_tokens(r["window_tokens"], settings.block_tokens)
                 for r in rows if r["window_tokens"])
    return window + linear_state_bytes(model, settings)


def _round_up(tokens: np.ndarray, block: int | None) -> np.ndarray:
    return tokens if block is None else np.ceil(tokens / block) * block


def _window_cap_tokens(window: int, block: int | None) -> int:
    """Most tokens a sliding-window layer holds: W, or with paging the blocks that overlap the
    window, ceil((W - 1) / block) + 1 whole blocks (an approximation of vLLM's rule)."""
    return window if block is None else (math.ceil((window - 1) / block) + 1) * block


def _window_tokens_kept(tokens: np.ndarray, window: int, block: int | None) -> np.ndarray:
    """Tokens a sliding-window layer holds for a request of ``tokens`` tokens."""
    if block is None:
        return np.minimum(tokens, window)
    return np.minimum(np.ceil(tokens / block) * block, _window_cap_tokens(window, block))


def kv_bytes(model: ModelSpec, tokens, settings: CacheSettings | None = None):
    """Cache bytes of one request of ``tokens`` tokens (scalar or numpy array, float result
    for arrays). Full/MLA layers hold every token, SWA layers ``min(l, W)``, linear layers
    their fixed state."""
    settings = settings or DEFAULT_SETTINGS
    l = np.asarray(tokens, dtype=float)
    total = np.zeros_like(l)
    for r in per_layer_table(model, settings):
        if r["window_tokens"] is not None:
            total += r["layers"] * r["bytes_per_token"] * _window_tokens_kept(l, r["window_tokens"], settings.block_tokens)
        elif r["bytes_per_token"]:
            total += r["layers"] * r["bytes_per_token"] * _round_up(l, settings.block_tokens)
        total += r["layers"] * (r["conv_bytes"] + r["recurrent_bytes"])
    return int(total) if total.ndim == 0 else total


def _shard(count: int, tp: int) -> int:
    """Heads per rank: heads split evenly, but never below one whole head per rank."""
    return max(1, math.ceil(count / tp))


def _tp_problem(model: ModelSpec, tp: int) -> str | None:
    """Why ``tp`` cannot shard ``model``'s attention the way vLLM does, or None: query heads must
    divide evenly, and KV heads must divide evenly or divide ``tp`` (then each is replicated)."""
    for name, attn in model.attention.items():
        kv = getattr(attn, "num_kv_heads", None) if attn.kind in ("gqa", "swa") else None
        if kv and kv % tp and tp % kv:
            return f"{name} attention has {kv} KV heads: {tp} neither divides them nor is a multiple of them"
        if attn.kind in ("gqa", "swa", "mla") and attn.num_heads % tp:
            return f"{name} attention has {attn.num_heads} query heads, not divisible by {tp}"
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
    latent has no head axis and is replicated on every rank; linear states shard by heads.
    A ``tp`` that vLLM could not run (:func:`check_tp`) is a PlanError.
    """
    tp = check_tp(model, tp)
    settings = settings or DEFAULT_SETTINGS
    b = _kv_elem_bytes(settings)
    counts = model.layer_counts()
    total = 0.0
    for name, attn in model.attention.items():
        n = counts[name]
        if attn.kind in ("gqa", "swa"):
            per_tok = _shard(attn.num_kv_heads, tp) * (attn.head_dim_k + attn.head_dim_v) * b
            window = getattr(attn, "window_tokens", None)
            kept = _window_tokens_kept(np.asarray(float(tokens)), window, settings.block_tokens) if window \
                else _round_up(np.asarray(float(tokens)), settings.block_tokens)
            total += n * per_tok * float(kept)
        elif attn.kind == "mla":
            total += n * attn.kv_elements_per_token * b * float(_round_up(np.asarray(float(tokens)), settings.block_tokens))
        else:
            heads = attn.num_v_heads if attn.kind == "gdn" else attn.num_heads
            frac = _shard(heads, tp) / heads
            conv = conv_state_elements(attn, settings) * DTYPE_BYTES[settings.conv_dtype]
            rec = attn.recurrent_elements * DTYPE_BYTES[recurrent_dtype(attn, settings)]
            total += n * (conv + rec) * frac
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
    "CacheSettings", "DEFAULT_SETTINGS", "ENGINES", "KV_DTYPES", "check_tp", "conv_state_elements",
    "fixed_state_bytes",
    "kv_bytes", "kv_bytes_expr", "kv_bytes_per_token", "linear_state_bytes", "per_gpu_kv_bytes",
    "per_layer_table", "recurrent_dtype",
]
