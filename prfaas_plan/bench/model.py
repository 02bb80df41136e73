"""The scaled-down models as runnable torch code: one layer class per attention kind (GQA/SWA,
MLA, Gated DeltaNet, KDA, Lightning), dense and MoE SwiGLU FFNs, :class:`ScaledModel` (whose
prefill returns real KV tensors and states) and :func:`cache_nbytes`. Plain classes holding
tensors; torch is imported only inside the functions, so this module imports without it.
"""

from __future__ import annotations

import math

from prfaas_plan.bench.kernels import (
    LINEAR_LOG_DECAY_FLOOR,
    _torch,
    causal_attention,
    chunked_linear_attention,
    masked_attention,
    sliding_window_attention,
    torch_dtype,
)
from prfaas_plan.kvcache import DEFAULT_SETTINGS, CacheSettings, recurrent_dtype
from prfaas_plan.model.arch import FFN, ModelSpec
from prfaas_plan.model.kinds import DSA, GDN, GQA, INDEX_SCALE_BLOCK, KDA, MLA, Attention, Lightning

ROPE_BASE = 10000.0
"""Rotary embedding base (the benchmark's layers use RoPE like the real models; the value only
changes the numbers, not the cost)."""

GATE_A_LOG_RANGE = (-1.0, 0.5)
"""Uniform range of the Gated DeltaNet / KDA ``A_log`` parameters (decay rate = exp(A_log))."""

GATE_DT_BIAS_RANGE = (-1.0, 1.0)
"""Uniform range of the decay gates' ``dt_bias``."""

LIGHTNING_SLOPE_EXPONENT = 8.0
"""Lightning's per-head decay slopes are ``2^(-8 (h + 1) / H)`` (ALiBi's geometric slopes)."""


# --------------------------------------------------------------------------------------------
# Torch layers of the scaled-down models (plain classes holding tensors: no nn.Module needed for
# an inference-only forward, and this module stays importable without torch)
# --------------------------------------------------------------------------------------------


class _Init:
    """Seeded random weights, drawn on the device itself (a GPU's generator is fast for the
    billion-parameter scaled models of the GPU profiles; the same seed on another device gives
    other numbers, which only the timing-irrelevant values see)."""

    def __init__(self, device: str, dtype, seed: int) -> None:
        torch = _torch()
        self.gen = torch.Generator(device=device).manual_seed(seed)
        self.device, self.dtype = device, dtype

    def weight(self, fan_in: int, *shape: int):
        """A GEMM weight of ``shape`` with std ``1 / sqrt(fan_in)``."""
        torch = _torch()
        w = torch.randn(*shape, generator=self.gen, device=self.device)
        return w.mul_(1.0 / math.sqrt(fan_in)).to(self.dtype)

    def uniform(self, low: float, high: float, *shape: int):
        torch = _torch()
        u = torch.rand(*shape, generator=self.gen, device=self.device)
        return (low + (high - low) * u).to(self.dtype)


def _rms(x):
    import torch.nn.functional as F

    return F.rms_norm(x, (x.shape[-1],))


def _rope(x, cos, sin):
    """Rotate-half RoPE on the last dim of ``x`` [..., T, d]; cos/sin [T, d/2]."""
    torch = _torch()
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class RopeTable:
    """cos/sin tables per rotary dim for one forward of ``tokens`` tokens."""

    def __init__(self, tokens: int, device: str, dtype) -> None:
        self.tokens, self.device, self.dtype = tokens, device, dtype
        self._tables: dict[int, tuple] = {}

    def get(self, dim: int):
        if dim not in self._tables:
            torch = _torch()
            inv = ROPE_BASE ** (-torch.arange(0, dim, 2, dtype=torch.float32) / dim)
            ang = torch.arange(self.tokens, dtype=torch.float32)[:, None] * inv[None]
            self._tables[dim] = (ang.cos().to(self.device, self.dtype), ang.sin().to(self.device, self.dtype))
        return self._tables[dim]


def _cache_tokens(x, settings: CacheSettings, keep: int | None = None, as_stored: bool = False):
    """A length-growing cache tensor [T, ...] as stored: the last ``keep`` tokens (windows), cast to
    the KV dtype (kept as it is when ``as_stored``: bytes a kind stores in its own format),
    zero-padded to whole pages when ``settings.block_tokens`` is set. Paged windows keep the most
    recent ``min(ceil(T/B), ceil((W-1)/B) + 1)`` pages (kvcache's rule)."""
    torch = _torch()
    tokens = x.shape[0]
    block = settings.block_tokens
    dtype = x.dtype if as_stored else torch_dtype(settings.kv_dtype)
    if block is None:
        kept = x if keep is None else x[max(0, tokens - keep):]
        return kept.to(dtype).contiguous()
    pages = -(-tokens // block)
    if keep is not None:
        pages = min(pages, -(-(keep - 1) // block) + 1)
    first_page = -(-tokens // block) - pages
    body = x[first_page * block:]
    out = torch.zeros(pages * block, *x.shape[1:], dtype=dtype, device=x.device)
    out[: body.shape[0]] = body.to(out.dtype)
    return out


def _conv_state(x, kernel: int, settings: CacheSettings):
    """The short convolution's state: the last ``kernel - 1`` inputs [kernel - 1, channels]
    (zero rows in front when fewer tokens were seen), in the conv dtype."""
    torch = _torch()
    rows = kernel - 1
    tail = x[-rows:] if rows else x[:0]
    out = torch.zeros(rows, x.shape[-1], dtype=torch_dtype(settings.conv_dtype), device=x.device)
    if tail.shape[0]:
        out[rows - tail.shape[0]:] = tail.to(out.dtype)
    return out


def _short_conv(x, weight):
    """Depthwise causal conv1d over tokens with SiLU: x [T, C], weight [C, K] -> [T, C]; tap j
    multiplies the input ``K - 1 - j`` tokens back (``F.conv1d``'s convention), as K fused
    multiply-adds (much faster on CPUs than a grouped convolution with C groups)."""
    torch = _torch()
    import torch.nn.functional as F

    kernel, tokens = weight.shape[-1], x.shape[0]
    xp = F.pad(x, (0, 0, kernel - 1, 0))
    y = xp[kernel - 1:] * weight[:, kernel - 1]
    for j in range(kernel - 1):
        y = torch.addcmul(y, xp[j: j + tokens], weight[:, j])
    return F.silu(y)


def _l2norm(x, factor: float = 1.0):
    """``factor * x / ||x||`` over the last dim, via the fused RMS norm (``||x|| = sqrt(d) rms(x)``)."""
    return _rms(x) * (factor / math.sqrt(x.shape[-1]))


_VECTOR_INIT = {"a_log": GATE_A_LOG_RANGE, "dt_bias": GATE_DT_BIAS_RANGE}


class _Layer:
    """Base of the benchmark layers: ``gemm`` holds the GEMM weights, ``extra`` the other
    parameters (what the roofline counts, :meth:`ModelSpec.param_counts`)."""

    gemm: dict
    extra: dict

    def _build(self, attn: Attention, hidden: int, init: _Init) -> None:
        """Weights of the kind's own shapes (:meth:`~prfaas_plan.model.kinds.GQA.gemm_shapes` and
        ``vector_shapes``): GEMMs with std ``1 / sqrt(fan_in)``, conv filters likewise over their
        taps, decay parameters uniform in their ranges."""
        self.attn = attn
        self.gemm = {n: init.weight(shape[0], *shape) for n, shape in attn.gemm_shapes(hidden).items()}
        self.extra = {n: init.uniform(*_VECTOR_INIT[n], *shape) if n in _VECTOR_INIT else init.weight(shape[-1], *shape)
                      for n, shape in attn.vector_shapes(hidden).items()}

    def parameters(self) -> list:
        return [*self.gemm.values(), *self.extra.values()]

    def gemm_params(self) -> int:
        return sum(int(w.numel()) for w in self.gemm.values())


class GQALayer(_Layer):
    """Full causal (or sliding-window, for an SWA spec) attention with RoPE; caches K and V."""

    def __init__(self, attn: GQA, hidden: int, init: _Init) -> None:
        self._build(attn, hidden, init)

    def forward(self, x, rope: RopeTable, settings: CacheSettings):
        a, t = self.attn, x.shape[0]
        q = (x @ self.gemm["wq"]).view(t, a.num_heads, a.head_dim_k).transpose(0, 1)
        k = (x @ self.gemm["wk"]).view(t, a.num_kv_heads, a.head_dim_k).transpose(0, 1)
        v = (x @ self.gemm["wv"]).view(t, a.num_kv_heads, a.head_dim_v).transpose(0, 1)
        cos, sin = rope.get(a.head_dim_k)
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        scale = 1.0 / math.sqrt(a.head_dim_k)
        window = getattr(a, "window_tokens", None)
        o = causal_attention(q, k, v, scale) if window is None else sliding_window_attention(q, k, v, window, scale)
        o = o.transpose(0, 1).reshape(t, a.num_heads * a.head_dim_v)
        if a.output_gate:
            o = o * _torch().sigmoid(x @ self.gemm["wg"])
        y = o @ self.gemm["wo"]
        cache = {"k": _cache_tokens(k.transpose(0, 1), settings, window),
                 "v": _cache_tokens(v.transpose(0, 1), settings, window)}
        return y, cache


class MLALayer(_Layer):
    """Multi-head latent attention, prefill form (latent decompressed into per-head K and V);
    caches the normalised latent and the roped shared key, ``kv_lora_rank + qk_rope_head_dim``
    elements per token."""

    def __init__(self, attn: MLA, hidden: int, init: _Init) -> None:
        self._build(attn, hidden, init)

    def forward(self, x, rope: RopeTable, settings: CacheSettings):
        return self._attend(x, self._query_input(x), rope, settings)

    def _query_input(self, x):
        """What the query projection reads: the normalised query latent, or ``x`` without one."""
        return _rms(x @ self.gemm["wq_a"]) if self.attn.q_lora_rank else x

    def _attend(self, x, q_in, rope: RopeTable, settings: CacheSettings, allowed=None):
        """The attention of ``x`` (queries from ``q_in``), causal or over the keys ``allowed`` marks."""
        torch = _torch()
        a, t = self.attn, x.shape[0]
        nope, rdim, qk = a.qk_nope_head_dim, a.qk_rope_head_dim, a.qk_nope_head_dim + a.qk_rope_head_dim
        q = (q_in @ self.gemm["wq_b" if a.q_lora_rank else "wq"]).view(t, a.num_heads, qk).transpose(0, 1)
        kv_a = x @ self.gemm["wkv_a"]
        latent, k_rope = _rms(kv_a[:, : a.kv_lora_rank]), kv_a[:, a.kv_lora_rank:]
        cos, sin = rope.get(rdim)
        k_rope = _rope(k_rope, cos, sin)  # [T, rope], shared by all heads
        q = torch.cat((q[..., :nope], _rope(q[..., nope:], cos, sin)), dim=-1)
        kv = (latent @ self.gemm["wkv_b"]).view(t, a.num_heads, nope + a.v_head_dim).transpose(0, 1)
        k = torch.cat((kv[..., :nope], k_rope[None].expand(a.num_heads, t, rdim)), dim=-1)
        scale = 1.0 / math.sqrt(qk)
        o = causal_attention(q, k, kv[..., nope:], scale) if allowed is None else \
            masked_attention(q, k, kv[..., nope:], allowed, scale)
        y = o.transpose(0, 1).reshape(t, a.num_heads * a.v_head_dim) @ self.gemm["wo"]
        return y, {"latent": _cache_tokens(latent, settings), "k_rope": _cache_tokens(k_rope, settings)}


class DSALayer(MLALayer):
    """DeepSeek sparse attention: a lightning indexer scores every earlier key per query
    (``sum_h w_h relu(q_h . k)``, its heads from the query latent, one key and the head weights
    from ``x``), and MLA attends to the ``index_topk`` best (every earlier key while there are no
    more). Caches MLA's latent and RoPE key plus the indexer's keys as stored: fp8 with one fp32
    scale per :data:`~prfaas_plan.model.kinds.INDEX_SCALE_BLOCK` channels, bytes whatever the KV
    dtype. The scores are one [T, T] matrix per call (memory quadratic in the tokens)."""

    attn: DSA

    def forward(self, x, rope: RopeTable, settings: CacheSettings):
        torch = _torch()
        a, t = self.attn, x.shape[0]
        q_in = self._query_input(x)
        q_idx = (q_in @ self.gemm["idx_wq_b"]).view(t, a.index_n_heads, a.index_head_dim)
        k_idx, weights = x @ self.gemm["idx_wk"], x @ self.gemm["idx_weights"]
        scores = torch.zeros(t, t, dtype=x.dtype, device=x.device)
        for h in range(a.index_n_heads):  # one head at a time: [T, T] memory, not [T, H, T]
            scores += weights[:, h, None] * (q_idx[:, h] @ k_idx.T).relu()
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        best = scores.masked_fill(~causal, float("-inf")).topk(min(a.index_topk, t), dim=-1).indices
        allowed = torch.zeros_like(causal).scatter_(1, best, True) & causal
        y, cache = self._attend(x, q_in, rope, settings, allowed)
        return y, {**cache, "index_k": _index_keys(k_idx, settings)}


def _index_keys(k, settings: CacheSettings):
    """A DSA indexer's key cache [T, d + 4 ceil(d / 128)] bytes: fp8 keys, then one fp32 scale per
    block of 128 channels (its amax over e4m3's largest value, 448), paged like the other caches."""
    torch = _torch()
    tokens, d = k.shape
    blocks = -(-d // INDEX_SCALE_BLOCK)
    padded = torch.nn.functional.pad(k.float(), (0, blocks * INDEX_SCALE_BLOCK - d)).view(tokens, blocks, -1)
    scale = padded.abs().amax(-1, keepdim=True).clamp(min=1e-12) / torch.finfo(torch.float8_e4m3fn).max
    fp8 = (padded / scale).to(torch.float8_e4m3fn).view(tokens, -1)[:, :d]
    stored = torch.cat((fp8.view(torch.uint8), scale.view(tokens, blocks).view(torch.uint8)), dim=-1)
    return _cache_tokens(stored, settings, as_stored=True)


def _bounded_log_decay(raw):
    """Log decay <= 0 from a gate pre-activation, floored at :data:`LINEAR_LOG_DECAY_FLOOR`."""
    import torch.nn.functional as F

    return (-F.softplus(raw)).clamp(min=LINEAR_LOG_DECAY_FLOOR)


class GDNLayer(_Layer):
    """Gated DeltaNet: q/k/v short convs, L2-normalised q/k, scalar decay and beta per v-head,
    gated RMS-normed output; caches the conv state and the ``num_v_heads x dk x dv`` state."""

    def __init__(self, attn: GDN, hidden: int, init: _Init) -> None:
        self._build(attn, hidden, init)
        self.channels = attn.conv_channels

    def forward(self, x, rope: RopeTable, settings: CacheSettings):
        torch = _torch()
        import torch.nn.functional as F

        a, t = self.attn, x.shape[0]
        qk_w, v_w = a.num_qk_heads * a.head_dim_k, a.num_v_heads * a.head_dim_v
        proj = x @ self.gemm["w_qkvz"]
        mixed, z = proj[:, : self.channels], proj[:, self.channels:]
        conv_state = _conv_state(mixed, a.conv_kernel, settings)
        mixed = _short_conv(mixed, self.extra["conv"])
        rep = a.num_v_heads // a.num_qk_heads
        q = _l2norm(mixed[:, :qk_w].view(t, a.num_qk_heads, a.head_dim_k), 1.0 / math.sqrt(a.head_dim_k))
        k = _l2norm(mixed[:, qk_w: 2 * qk_w].view(t, a.num_qk_heads, a.head_dim_k))
        q = q.transpose(0, 1).repeat_interleave(rep, dim=0)
        k = k.transpose(0, 1).repeat_interleave(rep, dim=0)
        v = mixed[:, 2 * qk_w:].view(t, a.num_v_heads, a.head_dim_v).transpose(0, 1)
        ba = x @ self.gemm["w_ba"]
        beta = torch.sigmoid(ba[:, : a.num_v_heads]).t()  # [H, T]
        g = _bounded_log_decay(ba[:, a.num_v_heads:] + self.extra["dt_bias"]) * self.extra["a_log"].exp()
        g = g.clamp(min=LINEAR_LOG_DECAY_FLOOR).t()[..., None]  # [H, T, 1]
        o, state = chunked_linear_attention(q, k, v, g, beta)
        o = _rms(o.transpose(0, 1)).reshape(t, v_w) * F.silu(z)
        cache = {"conv": conv_state, "recurrent": state.to(torch_dtype(recurrent_dtype(a, settings))).contiguous()}
        return o @ self.gemm["wo"], cache


class KDALayer(_Layer):
    """Kimi Delta Attention: like Gated DeltaNet with a per-channel decay from a low-rank gate,
    separate q/k/v convs, low-rank sigmoid output gate; caches conv states and ``H x d x d`` states."""

    def __init__(self, attn: KDA, hidden: int, init: _Init) -> None:
        self._build(attn, hidden, init)

    def forward(self, x, rope: RopeTable, settings: CacheSettings):
        torch = _torch()

        a, t = self.attn, x.shape[0]
        inner, d, nh = a.num_heads * a.head_dim, a.head_dim, a.num_heads
        mixed = x @ self.gemm["w_qkv"]
        conv_state = _conv_state(mixed, a.conv_kernel, settings)
        mixed = _short_conv(mixed, self.extra["conv"])
        q = _l2norm(mixed[:, :inner].view(t, nh, d), 1.0 / math.sqrt(d)).transpose(0, 1)
        k = _l2norm(mixed[:, inner: 2 * inner].view(t, nh, d)).transpose(0, 1)
        v = mixed[:, 2 * inner:].view(t, nh, d).transpose(0, 1)
        f = (x @ self.gemm["w_f_a"]) @ self.gemm["w_f_b"] + self.extra["dt_bias"]
        g = (_bounded_log_decay(f).view(t, nh, d) * self.extra["a_log"].exp()[:, None]).clamp(min=LINEAR_LOG_DECAY_FLOOR)
        beta = torch.sigmoid(x @ self.gemm["w_beta"]).t()
        o, state = chunked_linear_attention(q, k, v, g.transpose(0, 1), beta)
        gate = (x @ self.gemm["w_g_a"]) @ self.gemm["w_g_b"]  # low-rank, as in the checkpoint
        o = _rms(o.transpose(0, 1)).reshape(t, inner) * torch.sigmoid(gate)
        cache = {"conv": conv_state, "recurrent": state.to(torch_dtype(recurrent_dtype(a, settings))).contiguous()}
        return o @ self.gemm["wo"], cache


class LightningLayer(_Layer):
    """Lightning attention: linear attention with a fixed per-head decay (ALiBi-style slopes),
    no delta rule and no conv; caches the ``H x d x d`` state."""

    def __init__(self, attn: Lightning, hidden: int, init: _Init) -> None:
        self._build(attn, hidden, init)

    def forward(self, x, rope: RopeTable, settings: CacheSettings):
        torch = _torch()
        import torch.nn.functional as F

        a, t = self.attn, x.shape[0]
        inner, d, nh = a.num_heads * a.head_dim, a.head_dim, a.num_heads
        qkv = F.silu(x @ self.gemm["w_qkv"])
        q = qkv[:, :inner].view(t, nh, d).transpose(0, 1) / math.sqrt(d)
        k = qkv[:, inner: 2 * inner].view(t, nh, d).transpose(0, 1)
        v = qkv[:, 2 * inner:].view(t, nh, d).transpose(0, 1)
        slopes = torch.tensor([2.0 ** (-LIGHTNING_SLOPE_EXPONENT * (i + 1) / nh) for i in range(nh)], device=x.device, dtype=x.dtype)
        g = (-slopes)[:, None, None].expand(nh, t, 1)
        o, state = chunked_linear_attention(q, k, v, g, None)
        o = _rms(o.transpose(0, 1)).reshape(t, inner) * torch.sigmoid(x @ self.gemm["w_g"])
        cache = {"recurrent": state.to(torch_dtype(recurrent_dtype(a, settings))).contiguous()}
        return o @ self.gemm["wo"], cache


ATTENTION_LAYERS = {"gqa": GQALayer, "swa": GQALayer, "mla": MLALayer, "dsa": DSALayer, "gdn": GDNLayer,
                    "kda": KDALayer, "lightning": LightningLayer}


def _swiglu(x, w_gate_up, w_down):
    import torch.nn.functional as F

    gate, up = (x @ w_gate_up).chunk(2, dim=-1)
    return (F.silu(gate) * up) @ w_down


class DenseFFN(_Layer):
    """SwiGLU FFN of ``intermediate`` width (gate and up fused)."""

    def __init__(self, hidden: int, intermediate: int, init: _Init) -> None:
        self.gemm = {"w_gate_up": init.weight(hidden, hidden, 2 * intermediate),
                     "w_down": init.weight(intermediate, intermediate, hidden)}
        self.extra = {}

    def forward(self, x):
        return _swiglu(x, self.gemm["w_gate_up"], self.gemm["w_down"])


class MoEFFN(_Layer):
    """Routed SwiGLU experts (softmax over the top-k router logits), tokens grouped per expert,
    plus shared experts (fused into one SwiGLU of ``num_shared * shared_intermediate``)."""

    def __init__(self, hidden: int, ffn: FFN, init: _Init) -> None:
        e, i = ffn.num_experts, ffn.expert_intermediate
        self.top_k = ffn.experts_per_token
        self.gemm = {"router": init.weight(hidden, hidden, e), "w_gate_up": init.weight(hidden, e, hidden, 2 * i),
                     "w_down": init.weight(i, e, i, hidden)}
        if ffn.num_shared_experts:
            s = ffn.num_shared_experts * ffn.shared_intermediate
            self.gemm.update({"shared_gate_up": init.weight(hidden, hidden, 2 * s), "shared_down": init.weight(s, s, hidden)})
        self.extra = {}

    def forward(self, x):
        torch = _torch()
        t, e = x.shape[0], self.gemm["router"].shape[1]
        weights, experts = (x @ self.gemm["router"]).topk(self.top_k, dim=-1)
        weights = torch.softmax(weights.float(), dim=-1).to(x.dtype)
        flat = experts.reshape(-1)
        order = flat.argsort()
        counts = torch.bincount(flat, minlength=e).tolist()
        token = order // self.top_k
        xs = x[token]  # tokens grouped by expert
        ys = torch.empty_like(xs)
        start = 0
        for j, n in enumerate(counts):
            if n:
                ys[start: start + n] = _swiglu(xs[start: start + n], self.gemm["w_gate_up"][j], self.gemm["w_down"][j])
            start += n
        ys.mul_(weights.reshape(-1)[order, None])
        out = torch.zeros_like(x).index_add_(0, token, ys)
        if "shared_gate_up" in self.gemm:
            out = out + _swiglu(x, self.gemm["shared_gate_up"], self.gemm["shared_down"])
        del t
        return out


class ScaledModel:
    """A runnable model for a (scaled-down) :class:`ModelSpec`: embeddings, one attention layer of
    the spec's kind per layer, dense or MoE SwiGLU FFNs, pre-norms, an LM head on the last token.

    Its weights are built from the layer kinds' own shapes, so they are exactly what
    :meth:`ModelSpec.param_counts` and the roofline count (tested): the roofline's FLOPs are this model's FLOPs; elementwise work (norms, RoPE, gates) is what the
    fitted efficiency factors absorb.
    """

    def __init__(self, spec: ModelSpec, device: str = "cpu", dtype: str | None = None, seed: int = 0) -> None:
        self.spec, self.device = spec, device
        self.dtype = torch_dtype(dtype or spec.gemm_dtypes.attention)  # scale_model's drafts are one dtype
        init = _Init(device, self.dtype, seed)
        h = spec.hidden_size
        self.embed = init.weight(1, spec.vocab_size, h)
        self.lm_head = init.weight(h, h, spec.vocab_size)
        self.layers = []
        for i, name in enumerate(spec.layer_kinds):
            attn = ATTENTION_LAYERS[spec.attention[name].kind](spec.attention[name], h, init)
            ffn = MoEFFN(h, spec.ffn, init) if spec.is_moe_layer(i) else DenseFFN(h, spec.ffn.dense_intermediate, init)
            self.layers.append((attn, ffn))

    def gemm_params(self) -> int:
        """GEMM weights (embedding and LM head included): what the roofline's weight bytes count."""
        return int(self.embed.numel() + self.lm_head.numel()) + sum(a.gemm_params() + f.gemm_params() for a, f in self.layers)

    def total_params(self) -> int:
        return int(self.embed.numel() + self.lm_head.numel()) + sum(
            sum(int(p.numel()) for p in (*a.parameters(), *f.parameters())) for a, f in self.layers)

    def prefill(self, token_ids, settings: CacheSettings | None = None):
        """One request's prefill: returns (last-token logits [vocab], cache), the cache one dict of
        tensors per layer, stored as ``settings`` says (KV dtype, state dtypes, pages)."""
        torch = _torch()
        settings = settings or DEFAULT_SETTINGS
        with torch.inference_mode():
            x = self.embed[token_ids]
            rope = RopeTable(x.shape[0], self.device, self.dtype)
            cache = []
            for attn, ffn in self.layers:
                y, c = attn.forward(_rms(x), rope, settings)
                x = x + y
                x = x + ffn.forward(_rms(x))
                cache.append(c)
            logits = _rms(x[-1:]) @ self.lm_head
        return logits[0], cache

    def token_ids(self, tokens: int, seed: int = 0):
        torch = _torch()
        gen = torch.Generator().manual_seed(seed)
        return torch.randint(0, self.spec.vocab_size, (tokens,), generator=gen).to(self.device)


def cache_nbytes(cache: list[dict]) -> int:
    """Bytes of a cache as returned by :meth:`ScaledModel.prefill` (sum of ``tensor.nbytes``)."""
    return sum(int(t.nbytes) for layer in cache for t in layer.values())
