"""Torch kernels of the harness: causal, sliding-window and chunked linear attention.

Also the lazy torch import every torch-using module goes through (:func:`_torch`, a one-line
PlanError when torch is missing), our dtype names -> torch dtypes (:func:`torch_dtype`), the
token-by-token linear-attention reference used by the tests, and the FLOP counts the roofline
assigns to these kernels. Torch is imported only inside the functions.
"""

from __future__ import annotations

from prfaas_plan.errors import InvalidInput
from prfaas_plan.perf.roofline import LINEAR_ATTN_CHUNK_TOKENS

LINEAR_LOG_DECAY_FLOOR = -1.0
"""Most negative per-token log decay of the benchmark's linear-attention gates (decay >= e^-1
per token). Random weights would otherwise give arbitrary decays; bounding them keeps the
chunked form's exp(+-cumulative decay) within fp32/bf16 range over half a chunk (32 tokens)."""

SWA_QUERY_BLOCK_FRACTION = 0.5
"""Sliding-window attention runs in query blocks of ``window * fraction`` tokens, each attending
to ``window + block`` keys under a band mask: 1.5x the useful (query, key) pairs at 0.5."""


def _torch():
    """Import torch, or say how to install it (a PlanError, one line)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - depends on the environment
        raise InvalidInput("bench: this command needs torch; install it with pip install 'prfaas-plan[gpu]'") from None
    return torch


TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "fp8": "float8_e4m3fn"}
"""Our dtype names -> torch attribute names."""


def torch_dtype(name: str):
    """The torch dtype for one of our dtype names (fp32, bf16, fp16, fp8)."""
    return getattr(_torch(), TORCH_DTYPES[name])


# --------------------------------------------------------------------------------------------
# Torch kernels: attention and chunked linear attention
# --------------------------------------------------------------------------------------------


def _pad_to_common_width(q, k, v):
    """Zero-pad the narrower of the query/key and value head dims to the wider one (as vLLM pads
    MLA's V for FlashAttention); callers pass the softmax scale explicitly and cut the output
    back to the value width."""
    import torch.nn.functional as F

    dq, dv = q.shape[-1], v.shape[-1]
    width = max(dq, dv)
    if dq < width:
        q, k = F.pad(q, (0, width - dq)), F.pad(k, (0, width - dq))
    if dv < width:
        v = F.pad(v, (0, width - dv))
    return q, k, v


def causal_attention(q, k, v, scale: float):
    """Causal softmax attention with torch SDPA.

    q: [H, T, dq]; k: [Hkv, T, dq]; v: [Hkv, T, dv]; returns [H, T, dv]. Query head ``i`` reads KV
    head ``i // (H / Hkv)`` (GQA, SDPA's ``enable_gqa``). When ``dq != dv`` the narrower side is zero-padded to the wider one (as
    vLLM pads MLA's V for FlashAttention); ``scale`` is passed explicitly so padding does not
    change the scores.
    """
    _torch()
    import torch.nn.functional as F

    dv = v.shape[-1]
    q, k, v = _pad_to_common_width(q, k, v)
    o = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True, scale=scale,
                                       enable_gqa=k.shape[0] != q.shape[0])[0]
    return o[..., :dv]


def masked_attention(q, k, v, allowed, scale: float):
    """Softmax attention where query ``i`` reads key ``j`` only where ``allowed[i, j]`` (a [T, T]
    bool mask: a DSA indexer's top-k selection); q, k: [H, T, dq], v: [H, T, dv]."""
    _torch()
    import torch.nn.functional as F

    dv = v.shape[-1]
    q, k, v = _pad_to_common_width(q, k, v)
    o = F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=allowed, scale=scale)[0]
    return o[..., :dv]


def sliding_window_attention(q, k, v, window_tokens: int, scale: float):
    """Causal sliding-window attention: token ``i`` attends to tokens ``i - W + 1 .. i``.

    Queries run in blocks of ``B = W * SWA_QUERY_BLOCK_FRACTION`` tokens; block ``b`` attends to the
    ``W + B`` keys before its end under a band mask, all blocks in one SDPA call. Shapes as
    :func:`causal_attention` (KV heads repeated to the query heads here).
    """
    torch = _torch()
    import torch.nn.functional as F

    heads, tokens, kv_heads = q.shape[0], q.shape[1], k.shape[0]
    if kv_heads != heads:  # materialised: SDPA's masked (memory-efficient) kernels may lack enable_gqa
        k = k.repeat_interleave(heads // kv_heads, dim=0)
        v = v.repeat_interleave(heads // kv_heads, dim=0)
    dv = v.shape[-1]
    q, k, v = _pad_to_common_width(q, k, v)
    width = q.shape[-1]
    w = window_tokens
    block = max(1, int(w * SWA_QUERY_BLOCK_FRACTION))
    nblocks = -(-tokens // block)
    pad_end = nblocks * block - tokens
    qp = F.pad(q, (0, 0, 0, pad_end))
    kp = F.pad(k, (0, 0, w, pad_end))  # w zero keys in front: key index j <-> position j - w
    vp = F.pad(v, (0, 0, w, pad_end))
    span = w + block
    kb = kp.unfold(1, span, block).transpose(-1, -2)  # [H, nblocks, span, d]
    vb = vp.unfold(1, span, block).transpose(-1, -2)
    qb = qp.view(heads, nblocks, block, width)
    i = torch.arange(block, device=q.device)[:, None]
    j = torch.arange(span, device=q.device)[None, :]
    band = (j > i) & (j <= i + w)  # key position b*B - w + j within (pos - w, pos]
    start = torch.arange(nblocks, device=q.device)[:, None, None] * block
    mask = band[None] & ((start - w + j[None]) >= 0)  # no keys before position 0
    o = F.scaled_dot_product_attention(qb.transpose(0, 1), kb.transpose(0, 1), vb.transpose(0, 1),
                                       attn_mask=mask[:, None], scale=scale)
    o = o.transpose(0, 1).reshape(heads, nblocks * block, width)[:, :tokens]
    return o[..., :dv]


def chunked_linear_attention(q, k, v, log_decay, beta=None, chunk_tokens: int = LINEAR_ATTN_CHUNK_TOKENS,
                             initial_state=None):
    """Chunked (gated) linear attention, plain torch, the way chunked kernels compute it.

    Recurrence per head, state ``S`` [dk, dv], ``a_t = exp(log_decay_t)`` (per key channel, or one
    value per head broadcast over dk), ``o_t = S_t^T q_t``:

    * delta rule (``beta`` given; Gated DeltaNet, KDA):
      ``S_t = diag(a_t) S_{t-1} + beta_t k_t (v_t - (diag(a_t) S_{t-1})^T k_t)^T``;
    * plain decay (``beta`` None; Lightning): ``S_t = diag(a_t) S_{t-1} + k_t v_t^T``.

    Within a chunk of C tokens the delta rule's WY form ``W = (I + A)^-1 (beta V - beta (K*G) S0)``
    is solved for all chunks at once (one batched unit-lower-triangular solve, fp32); only the
    state is carried chunk to chunk. Decays are taken
    relative to the chunk's middle token so that exp() stays in range.

    q, k: [H, T, dk]; v: [H, T, dv]; log_decay: [H, T, dk] or [H, T, 1] (<= 0); beta: [H, T] or
    None; initial_state: [H, dk, dv] or None. Returns (o [H, T, dv], final state [H, dk, dv]),
    computed in q's dtype except the triangular solve (fp32).
    """
    torch = _torch()
    import torch.nn.functional as F

    heads, tokens, dk = q.shape
    dv = v.shape[-1]
    c = chunk_tokens
    n = -(-tokens // c)
    pad = n * c - tokens
    if pad:  # padded tokens: k = v = 0, beta = 0, no decay -> they change nothing
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        log_decay = F.pad(log_decay, (0, 0, 0, pad))
        beta = F.pad(beta, (0, pad)) if beta is not None else None
    q, k, v = (x.reshape(heads, n, c, x.shape[-1]) for x in (q, k, v))
    g = log_decay.reshape(heads, n, c, log_decay.shape[-1]).cumsum(dim=2)
    g_mid = g[:, :, c // 2: c // 2 + 1]
    rel = torch.exp(g - g_mid)  # Gamma_t / Gamma_mid: the one full-size exp
    k_rel = k / rel  # k_s * Gamma_mid / Gamma_s
    q_rel = q * rel  # q_t * Gamma_t / Gamma_mid
    incl = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()
    a_qk = (q_rel @ k_rel.transpose(-1, -2)).masked_fill(~incl, 0.0)  # [H, n, C, C]
    mid_from_start = torch.exp(g_mid)  # Gamma_mid
    q_abs = q_rel * mid_from_start  # q_t * Gamma_t: decay from the chunk start (inter-chunk term)
    k_end = k_rel * torch.exp(g[:, :, -1:] - g_mid)  # k_s * Gamma_C / Gamma_s: decay to the chunk end
    state_decay = torch.exp(g[:, :, -1:]).transpose(-1, -2)  # [H, n, dk or 1, 1]
    if beta is not None:
        b = beta.reshape(heads, n, c, 1)
        strict = torch.ones(c, c, dtype=torch.bool, device=q.device).tril(-1)
        k_fwd = b * k * rel  # beta_s k_s Gamma_s / Gamma_mid
        a_kk = (k_fwd @ k_rel.transpose(-1, -2)).masked_fill(~strict, 0.0)
        rhs = torch.cat((b * v, k_fwd * mid_from_start), dim=-1).float()  # [beta V, beta (K * Gamma)]
        # (I + A) [U, W_k] = rhs; the diagonal is 1 (unitriangular: A's diagonal is never read)
        sol = torch.linalg.solve_triangular(a_kk.float(), rhs, upper=False, unitriangular=True).to(q.dtype)
        u, w_k = sol[..., :dv], sol[..., dv:]  # [H, n, C, dv], [H, n, C, dk]
    else:
        u, w_k = v, None
    s = initial_state if initial_state is not None else torch.zeros(heads, dk, dv, dtype=q.dtype, device=q.device)
    s = s.to(q.dtype)
    out = torch.empty(heads, n, c, dv, dtype=q.dtype, device=q.device)
    for i in range(n):
        w = u[:, i] - w_k[:, i] @ s if w_k is not None else u[:, i]
        out[:, i] = q_abs[:, i] @ s + a_qk[:, i] @ w
        s = state_decay[:, i] * s + k_end[:, i].transpose(-1, -2) @ w
    return out.reshape(heads, n * c, dv)[:, :tokens], s


def recurrent_linear_attention(q, k, v, log_decay, beta=None, initial_state=None):
    """Token-by-token reference of :func:`chunked_linear_attention` (same arguments; slow, for tests)."""
    torch = _torch()
    heads, tokens, dk = q.shape
    dv = v.shape[-1]
    s = initial_state.clone() if initial_state is not None else torch.zeros(heads, dk, dv, dtype=q.dtype)
    out = torch.empty(heads, tokens, dv, dtype=q.dtype)
    for t in range(tokens):
        a = torch.exp(log_decay[:, t]).expand(heads, dk)
        s = a[..., None] * s
        if beta is not None:
            pred = torch.einsum("hkv,hk->hv", s, k[:, t])
            s = s + beta[:, t, None, None] * k[:, t, :, None] * (v[:, t] - pred)[:, None, :]
        else:
            s = s + k[:, t, :, None] * v[:, t, None, :]
        out[:, t] = torch.einsum("hkv,hk->hv", s, q[:, t])
    return out, s


def attention_pair_flops(heads: int, dk: int, dv: int) -> float:
    """FLOPs per (query, key) pair of softmax attention, as the roofline counts: 2 H (dk + dv)."""
    return 2.0 * heads * (dk + dv)


def linear_attention_flops_per_token(heads: int, dk: int, dv: int) -> float:
    """FLOPs per token of chunked linear attention as the roofline counts them (perf.layer_costs):
    ``H (4 dk dv + 2 C (dk + dv))``."""
    return heads * (4.0 * dk * dv + 2.0 * LINEAR_ATTN_CHUNK_TOKENS * (dk + dv))
