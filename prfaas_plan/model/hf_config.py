"""Import a Hugging Face ``config.json`` as a :class:`~prfaas_plan.model.arch.ModelSpec` (no network).

:func:`load_hf_config` maps the fields of the supported ``model_type`` values to our schema:
attention kinds and head shapes, which layer uses which kind (from ``layer_types``,
``full_attention_interval``, ``linear_attn_config.full_attn_layers`` (1-based),
``hybrid_layer_pattern``, ``attn_type_list`` or ``layer_group_size``), the FFN / MoE sizes,
hidden size, vocabulary, context length and the GEMM dtype of each class (from
``quantization_config``: the ``fp8`` method with ``weight_block_size``, compressed-tensors int4
groups or fp8, and their ``ignore`` / ``modules_to_not_convert`` lists).

Both schemas are read: configs as published on the hub and as transformers 5 writes them
(``to_dict`` / ``save_pretrained``), which renames some fields (``num_local_experts``,
``layer_types`` for Kimi Linear's ``linear_attn_config``, ``mlp_layer_types`` for
``first_k_dense_replace``, MiMo's ``sliding_window`` = window + 1) and moves RoPE scaling from
``rope_scaling`` to ``rope_parameters``. A YaRN scaling raises ``max_context_tokens`` to
``factor * original_max_position_embeddings`` and is recorded as ``context_extension``.

Conventions and assumptions:

* Multi-token-prediction (MTP / nextn) layers become the ``mtp`` block
  (:class:`~prfaas_plan.model.arch.MTP`), outside the main stack's counts: an optional
  speculative-decoding add-on. Read from ``num_nextn_predict_layers`` (DeepSeek-V3 / Kimi-K2:
  MLA layers; DeepSeek-V3.2 / GLM-5: DSA layers), ``mtp_num_hidden_layers`` (Qwen3-Next /
  Qwen3.5: full-attention layers) and ``num_mtp_modules`` x ``mtp_transformer_layers`` when
  ``use_mtp`` (MiniMax-M2: full-attention layers); 0 or absent: none.
* Multimodal configs (``qwen3_5_moe``; ``kimi_k25``, Kimi-K2.5's, whose ``text_config`` is Kimi-K2's
  DeepSeek-V3 shapes) are read from their ``text_config``; the vision tower is ignored.
* A config rarely states its parameter counts, so :func:`count_params` computes them from the
  architecture (the layer kinds' weight shapes; norms, MTP layers and vision towers left out; the
  output gate of Qwen3-Next / Qwen3.5 gated attention too: the schema has no field for it).
* The model id is the file's parent folder when the file is called ``config.json``, else the
  file name without suffix (``tests/fixtures/hf/deepseek-v3.json`` -> ``deepseek-v3``).
* The one :class:`~prfaas_plan.model.arch.Source` points at the Hugging Face copy of the file
  (``_name_or_path`` when it names a hub repository, else the model id), because the schema
  wants an http(s) URL; the local path is kept in its note.

Every problem (unreadable or malformed JSON, unsupported ``model_type``, a missing field) is a
one-line :class:`~prfaas_plan.errors.PlanError` naming the file and the field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prfaas_plan.data import read_text, validate
from prfaas_plan.errors import InvalidInput, PlanError
from prfaas_plan.model.arch import ModelSpec
from prfaas_plan.vocab import GEMM_CLASSES

_STATE_DTYPES = {"float32": "fp32", "bfloat16": "bf16"}
_HUB_REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def count_params(model: ModelSpec) -> tuple[float, float]:
    """``(total, active per token)`` parameters (count) of ``model``: its
    :meth:`~prfaas_plan.model.arch.ModelSpec.param_counts`, the one count the performance model
    and the benchmark harness use too (embeddings and LM head in the total only; norms and MTP
    layers left out; see :class:`~prfaas_plan.model.arch.ParamCounts`)."""
    counts = model.param_counts()
    return float(counts.total), float(counts.active)


# --------------------------------------------------------------------------- reading the file

class _Config:
    """The fields of one config.json, with one-line errors that name the file and the field."""

    def __init__(self, raw: dict, path: Path):
        text = raw.get("text_config")
        self.raw = {**raw, **text} if isinstance(text, dict) else raw
        self.path = path
        self.model_type = raw.get("model_type")

    def req(self, name: str) -> Any:
        value = self.raw.get(name)
        if value is None:
            raise InvalidInput(f"{self.path}: field {name}: missing required Hugging Face config field "
                            f"for model_type {self.model_type!r}")
        return value

    def opt(self, name: str, default: Any = None) -> Any:
        value = self.raw.get(name)
        return default if value is None else value

    def first(self, *names: str) -> Any:
        """A required field that hub-published and transformers-saved configs spell differently
        (``num_experts`` / ``num_local_experts``): the first of ``names`` the config states."""
        for name in names:
            if self.raw.get(name) is not None:
                return self.raw[name]
        raise InvalidInput(f"{self.path}: field {names[0]}: missing required Hugging Face config field for "
                        f"model_type {self.model_type!r} (also accepted: {', '.join(names[1:])})")

    def count(self, name: str) -> int:
        """A required whole number >= 1 (a head count, a width, a layer interval): the fields the
        import divides by, checked here so that a 0 or a string is a one-line error."""
        value = self.req(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.fail(name, f"{value!r} must be a whole number >= 1")
        return value

    def fail(self, name: str, problem: str) -> PlanError:
        return InvalidInput(f"{self.path}: field {name}: {problem}")


def _gqa(c: _Config, kind: str = "gqa", prefix: str = "") -> dict:
    heads = c.count(prefix + "num_attention_heads")
    head_dim = c.opt(prefix + "head_dim") or c.count("hidden_size") // heads
    return {"kind": kind, "num_heads": heads,
            "num_kv_heads": c.opt(prefix + "num_key_value_heads", heads),
            "head_dim_k": head_dim, "head_dim_v": c.opt(prefix + "v_head_dim", head_dim)}


def _mla(c: _Config) -> dict:
    return {"kind": "mla", "num_heads": c.req("num_attention_heads"),
            "kv_lora_rank": c.req("kv_lora_rank"), "q_lora_rank": c.opt("q_lora_rank"),
            "qk_nope_head_dim": c.req("qk_nope_head_dim"), "qk_rope_head_dim": c.req("qk_rope_head_dim"),
            "v_head_dim": c.req("v_head_dim")}


def _dsa(c: _Config) -> dict:
    """DeepSeek sparse attention: MLA plus the lightning indexer's heads, dim and top-k."""
    return {**_mla(c), "kind": "dsa", "index_n_heads": c.count("index_n_heads"),
            "index_head_dim": c.count("index_head_dim"), "index_topk": c.count("index_topk")}


def _layers(count: int, default: str, special: str, indices: list[int]) -> dict:
    at = {special: sorted(indices)} if indices else {}
    return {"count": count, "default": default, "at": at}


def _from_layer_types(c: _Config, names: dict[str, str], default: str) -> tuple[int, list[int]]:
    """0-based indices of the non-default layers, from ``layer_types`` or ``full_attention_interval``."""
    count = c.req("num_hidden_layers")
    types = c.opt("layer_types")
    if types is not None:
        if len(types) != count:
            raise c.fail("layer_types", f"has {len(types)} entries for {count} layers")
        unknown = sorted(set(types) - set(names))
        if unknown:
            raise c.fail("layer_types", f"unknown layer type {unknown[0]!r}; expected one of {sorted(names)}")
        return count, [i for i, t in enumerate(types) if names[t] != default]
    interval = c.count("full_attention_interval")
    return count, [i for i in range(count) if (i + 1) % interval == 0]


def _first_dense_from_list(c: _Config, field: str, values: list, dense_value) -> int:
    """Number of leading dense layers from a per-layer list; dense layers elsewhere are not supported."""
    dense = [i for i, v in enumerate(values) if v == dense_value]
    if dense != list(range(len(dense))):
        raise c.fail(field, f"dense layers {dense} are not a leading block; only first-k dense layers are supported")
    return len(dense)


def _leading_dense_layers(c: _Config) -> int:
    """Leading dense-FFN layers: ``first_k_dense_replace`` (hub configs), else the ``"dense"``
    entries of ``mlp_layer_types`` (configs saved by transformers), else none."""
    first = c.opt("first_k_dense_replace")
    if first is not None or c.opt("mlp_layer_types") is None:
        return first or 0
    return _first_dense_from_list(c, "mlp_layer_types", list(c.req("mlp_layer_types")), "dense")


def _qwen_moe_ffn(c: _Config) -> dict:
    if c.opt("decoder_sparse_step", 1) != 1:
        raise c.fail("decoder_sparse_step", "only 1 (every layer MoE) is supported")
    first_dense = _first_dense_from_list(c, "mlp_only_layers", [
        0 if i in c.opt("mlp_only_layers", []) else 1 for i in range(c.req("num_hidden_layers"))], 0)
    shared = c.opt("shared_expert_intermediate_size", 0)
    return _moe_ffn(c, c.first("num_experts", "num_local_experts"), 1 if shared else 0, first_dense,
                    shared_width="shared_expert_intermediate_size")


def _moe_ffn(c: _Config, num_experts: int, shared_experts: int, first_dense: int, top_k: str = "num_experts_per_tok",
             shared_width: str = "moe_intermediate_size") -> dict:
    """The ``ffn`` block of a MoE model: ``top_k`` routed experts of ``moe_intermediate_size``, the
    shared experts (``shared_width`` wide, when there are any) and the leading dense layers' width."""
    ffn = {"num_experts": num_experts, "experts_per_token": c.req(top_k),
           "expert_intermediate": c.req("moe_intermediate_size"), "num_shared_experts": shared_experts,
           "shared_intermediate": c.req(shared_width) if shared_experts else 0, "first_dense_layers": first_dense}
    if first_dense:
        ffn["dense_intermediate"] = c.req("intermediate_size")
    return ffn


def _deepseek_ffn(c: _Config, experts: str, top_k: str, shared: str) -> dict:
    if c.opt("moe_layer_freq", 1) != 1:
        raise c.fail("moe_layer_freq", "only 1 (every layer after the first dense ones is MoE) is supported")
    first_dense = _leading_dense_layers(c)
    return _moe_ffn(c, c.req(experts), c.opt(shared, 0), first_dense, top_k=top_k)


def _dense(c: _Config) -> dict:
    full = _gqa(c)
    return {"attention": {"full": full}, "layers": {"count": c.req("num_hidden_layers"), "default": "full"},
            "ffn": {"dense_intermediate": c.req("intermediate_size")}}


def _qwen3_moe(c: _Config) -> dict:
    return {"attention": {"full": _gqa(c)}, "layers": {"count": c.req("num_hidden_layers"), "default": "full"},
            "ffn": _qwen_moe_ffn(c)}


def _minimax_m2(c: _Config) -> dict:
    count = c.req("num_hidden_layers")
    types = c.opt("attn_type_list", [1] * count)
    if len(types) != count or any(t != 1 for t in types):
        raise c.fail("attn_type_list", "only all-full-attention stacks (every entry 1) are supported for minimax_m2")
    shared = c.opt("shared_intermediate_size", 0)
    ffn = {"num_experts": c.req("num_local_experts"), "experts_per_token": c.req("num_experts_per_tok"),
           "expert_intermediate": c.req("intermediate_size"),
           "num_shared_experts": 1 if shared else 0, "shared_intermediate": shared}
    return {"attention": {"full": _gqa(c)}, "layers": {"count": count, "default": "full"}, "ffn": ffn}


def _gpt_oss(c: _Config) -> dict:
    count, full = _from_layer_types(c, {"full_attention": "full", "sliding_attention": "swa"}, "swa")
    swa = {**_gqa(c, "swa"), "window_tokens": c.count("sliding_window")}
    ffn = {"num_experts": c.req("num_local_experts"), "experts_per_token": c.req("num_experts_per_tok"),
           "expert_intermediate": c.req("intermediate_size"), "num_shared_experts": 0}
    return {"attention": {"full": _gqa(c), "swa": swa}, "layers": _layers(count, "swa", "full", full), "ffn": ffn}


def _deepseek(c: _Config) -> dict:
    return {"attention": {"mla": _mla(c)}, "layers": {"count": c.req("num_hidden_layers"), "default": "mla"},
            "ffn": _deepseek_ffn(c, "n_routed_experts", "num_experts_per_tok", "n_shared_experts")}


def _deepseek_dsa(c: _Config) -> dict:
    return {**_deepseek(c), "attention": {"dsa": _dsa(c)},
            "layers": {"count": c.req("num_hidden_layers"), "default": "dsa"}}


def _qwen_next(c: _Config) -> dict:
    count, full = _from_layer_types(c, {"full_attention": "full", "linear_attention": "gdn"}, "gdn")
    ssm = c.opt("mamba_ssm_dtype")
    if ssm is not None and ssm not in _STATE_DTYPES:
        raise c.fail("mamba_ssm_dtype", f"{ssm!r} is not supported; use float32 or bfloat16")
    gdn = {"kind": "gdn", "num_qk_heads": c.req("linear_num_key_heads"),
           "num_v_heads": c.req("linear_num_value_heads"), "head_dim_k": c.req("linear_key_head_dim"),
           "head_dim_v": c.req("linear_value_head_dim"), "conv_kernel": c.req("linear_conv_kernel_dim"),
           "ssm_dtype": _STATE_DTYPES.get(ssm)}
    # the full-attention output is gated (transformers' Qwen3-Next always; Qwen3.5 unless attn_output_gate is false)
    attention = {**_gqa(c), "output_gate": bool(c.opt("attn_output_gate", True))}
    return {"attention": {"full": attention, "gdn": gdn}, "layers": _layers(count, "gdn", "full", full),
            "ffn": _qwen_moe_ffn(c)}


def _kimi_linear(c: _Config) -> dict:
    """Kimi Linear: hub configs nest the KDA fields in ``linear_attn_config`` (1-based
    ``full_attn_layers``); configs saved by transformers give ``layer_types`` and ``linear_*``."""
    if c.opt("linear_attn_config") is None and c.opt("layer_types") is not None:
        count, full = _from_layer_types(c, {"full_attention": "mla", "linear_attention": "kda"}, "kda")
        kda = {"kind": "kda", "num_heads": c.count("linear_num_heads"), "head_dim": c.count("linear_head_dim"),
               "conv_kernel": c.count("linear_conv_kernel_dim")}
        return {"attention": {"mla": _mla(c), "kda": kda}, "layers": _layers(count, "kda", "mla", full),
                "ffn": _deepseek_ffn(c, "num_experts", "num_experts_per_token", "num_shared_experts")}
    count = c.req("num_hidden_layers")
    linear = c.req("linear_attn_config")
    full_1based = linear.get("full_attn_layers")
    if full_1based is None:
        raise c.fail("linear_attn_config.full_attn_layers", "missing required Hugging Face config field")
    if any(not 1 <= i <= count for i in full_1based):
        raise c.fail("linear_attn_config.full_attn_layers", f"1-based indices must lie in 1..{count}")
    kda = {"kind": "kda", "num_heads": linear.get("num_heads"), "head_dim": linear.get("head_dim"),
           "conv_kernel": linear.get("short_conv_kernel_size")}
    for key, value in (("num_heads", kda["num_heads"]), ("head_dim", kda["head_dim"]),
                       ("short_conv_kernel_size", kda["conv_kernel"])):
        if value is None:
            raise c.fail(f"linear_attn_config.{key}", "missing required Hugging Face config field")
    return {"attention": {"mla": _mla(c), "kda": kda},
            "layers": _layers(count, "kda", "mla", [i - 1 for i in full_1based]),
            "ffn": _deepseek_ffn(c, "num_experts", "num_experts_per_token", "num_shared_experts")}


def _mimo_swa(c: _Config, hub: bool) -> dict:
    """MiMo's sliding-window layers. Hub configs give them their own ``swa_*`` heads and
    ``sliding_window_size``, the tokens attended before the query (the tokens cached). Configs
    saved by transformers have neither: its MiMo gives them ``2 * num_key_value_heads`` KV heads and
    sets ``sliding_window`` to that size + 1 (the query included), so its cache holds
    ``sliding_window - 1`` tokens."""
    if c.opt("swa_num_attention_heads") is not None:
        swa = _gqa(c, "swa", prefix="swa_")
    else:
        swa = {**_gqa(c, "swa"), "num_kv_heads": 2 * c.count("num_key_value_heads")}
    window = c.opt("sliding_window_size") or c.count("sliding_window") - (0 if hub else 1)
    return {**swa, "window_tokens": window}


def _mimo_v2_flash(c: _Config) -> dict:
    count = c.req("num_hidden_layers")
    pattern = c.opt("hybrid_layer_pattern")  # 0 = full (global) attention, 1 = sliding window
    hub = pattern is not None
    if not hub:
        names = {"full_attention": 0, "sliding_attention": 1, "sliding_window_attention": 1}
        pattern = [names.get(t, -1) for t in c.req("layer_types")]
    if len(pattern) != count or set(pattern) - {0, 1}:
        field, kinds = ("hybrid_layer_pattern", "0 (full) or 1 (sliding window)") if hub else \
            ("layer_types", "full_attention or sliding_attention")
        raise c.fail(field, f"expected {count} entries of {kinds}")
    swa = _mimo_swa(c, hub)
    freq = c.opt("moe_layer_freq")
    if freq is None:
        freq = [0 if t == "dense" else 1 for t in c.req("mlp_layer_types")]
    first_dense = _first_dense_from_list(c, "moe_layer_freq", list(freq), 0)
    ffn = _moe_ffn(c, c.req("n_routed_experts"), c.opt("n_shared_experts", 0), first_dense)
    return {"attention": {"full": _gqa(c), "swa": swa},
            "layers": _layers(count, "swa", "full", [i for i, p in enumerate(pattern) if p == 0]),
            "ffn": ffn}


def _bailing_hybrid(c: _Config) -> dict:
    count = c.req("num_hidden_layers")
    types = c.opt("layer_types")
    if types is not None:
        if len(types) != count:
            raise c.fail("layer_types", f"has {len(types)} entries for {count} layers")
        full = [i for i, t in enumerate(types) if t == "full_attention"]
    else:  # vLLM / transformers rule: MLA iff (i + 1) % layer_group_size == 0
        group = c.count("layer_group_size")
        full = [i for i in range(count) if (i + 1) % group == 0]
    hidden = c.count("hidden_size")
    lightning = {"kind": "lightning", "num_heads": c.req("num_kv_heads_for_linear_attn"),
                 "head_dim": hidden // c.count("num_attention_heads")}
    shared_count = c.opt("num_shared_experts", 0)
    first_dense = c.opt("first_k_dense_replace", 0)
    ffn = _moe_ffn(c, c.req("num_experts"), shared_count, first_dense,
                   shared_width="moe_shared_expert_intermediate_size")
    return {"attention": {"mla": _mla(c), "lightning": lightning},
            "layers": _layers(count, "lightning", "mla", full), "ffn": ffn}


_BUILDERS: dict[str, Callable[[_Config], dict]] = {
    "llama": _dense, "qwen3": _dense, "qwen3_moe": _qwen3_moe, "deepseek_v3": _deepseek,
    "kimi_k2": _deepseek, "kimi_k25": _deepseek, "qwen3_next": _qwen_next, "qwen3_5_moe": _qwen_next,
    "qwen3_5_moe_text": _qwen_next, "kimi_linear": _kimi_linear, "mimo_v2_flash": _mimo_v2_flash, "minimax_m2": _minimax_m2,
    "bailing_hybrid": _bailing_hybrid, "gpt_oss": _gpt_oss, "deepseek_v32": _deepseek_dsa,
    "glm_moe_dsa": _deepseek_dsa,
}

SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(_BUILDERS)
"""The ``model_type`` values :func:`load_hf_config` reads."""


def _quant_dtype(c: _Config, quant: dict) -> tuple[str, dict]:
    """(GEMM dtype, extra GemmDtypes fields) of the quantised Linear layers of a
    ``quantization_config``: the ``fp8`` method (``weight_block_size`` -> fp8_block) or
    compressed-tensors (int4 groups -> int4_w4a16; fp8 blocks -> fp8_block; other fp8 -> fp8),
    ``mxfp4`` (gpt-oss: OCP MXFP4 weights, bf16 activations on the GPUs we model -> mxfp4_w4a16), or
    ``modelopt`` with ``quant_algo: NVFP4`` (NVIDIA's FP4 releases -> nvfp4)."""
    method = quant.get("quant_method")
    if method == "mxfp4":
        return "mxfp4_w4a16", {}
    if method == "modelopt":
        if quant.get("quant_algo") == "NVFP4":
            return "nvfp4", {}
        raise c.fail("quantization_config.quant_algo", f"{quant.get('quant_algo')!r}: of ModelOpt's schemes only NVFP4 "
                     "is supported")
    if method == "fp8":
        block = quant.get("weight_block_size")
        if block is None:
            return "fp8", {}
        if not (isinstance(block, list) and len(block) == 2 and block[0] == block[1] and isinstance(block[0], int)):
            raise c.fail("quantization_config.weight_block_size", f"{block!r}: only square blocks [n, n] are supported")
        return "fp8_block", {"block": block[0]}
    if method == "compressed-tensors":
        groups = [g.get("weights") or {} for g in (quant.get("config_groups") or {}).values() if isinstance(g, dict)]
        if len(groups) != 1:
            raise c.fail("quantization_config.config_groups", f"{len(groups)} weight schemes; exactly one is supported")
        w = groups[0]
        if w.get("num_bits") == 4 and w.get("type") == "int" and w.get("strategy") == "group" and w.get("group_size"):
            return "int4_w4a16", {"group_size": int(w["group_size"])}
        if w.get("num_bits") == 8 and w.get("type") == "float":
            block = w.get("block_structure")
            if w.get("strategy") == "block" and block:
                if len(block) != 2 or block[0] != block[1]:
                    raise c.fail("quantization_config.config_groups", f"block_structure {block!r}: only square blocks")
                return "fp8_block", {"block": int(block[0])}
            return "fp8", {}
        raise c.fail("quantization_config.config_groups", f"weights {w!r}: supported are int4 groups (W4A16) and fp8")
    raise c.fail("quantization_config.quant_method", f"{method!r} is not supported; supported: fp8, compressed-tensors, "
                 "mxfp4, modelopt (NVFP4)")


_NOT_A_GEMM = re.compile(r"(norm|bias|indexers_proj|weights_proj)$")
"""Entries of a not-convert list that name no GEMM of a class: norms and biases, and a DSA
indexer's head-weight projection (GLM-5's ``indexers_proj``), which every engine keeps unquantised
(``weights_proj = ReplicatedLinear(..., quant_config=None)`` in vLLM and SGLang)."""


def _unconverted_classes(quant: dict) -> set[str]:
    """GEMM classes a ``quantization_config`` leaves unquantised (``ignore``,
    ``modules_to_not_convert``): a class any entry names, whole layers' lists included, stays in
    the torch dtype. Routers (``gate``, ``mlp.gate``) belong to no class and are bf16 anyway."""
    out = {"lm_head"}  # neither the fp8 method nor compressed-tensors quantise the LM head in vLLM / SGLang
    for entry in (*(quant.get("ignore") or ()), *(quant.get("modules_to_not_convert") or ())):
        e = str(entry).lower()
        if _NOT_A_GEMM.search(e):
            continue
        if "self_attn" in e or "linear_attn" in e or ".attention" in e:  # Bailing names it "attention"
            out.add("attention")
        if "shared_expert" in e or ("mlp" in e and "_proj" in e and "experts" not in e):
            out.add("dense_ffn")  # shared experts, and DeepSeek-style dense MLP layers (mlp.gate_proj ...)
        elif "experts" in e:
            out.add("experts")
    return out


def _gemm_dtypes(c: _Config) -> dict:
    """``gemm_dtypes`` from ``quantization_config``; a checkpoint without one is bf16 throughout
    (engines serve fp16 and fp32 checkpoints in 16 bits, at the bf16 size and rate)."""
    quant = c.raw.get("quantization_config")
    if not isinstance(quant, dict):
        return dict.fromkeys(GEMM_CLASSES, "bf16")
    dtype, extra = _quant_dtype(c, quant)
    unconverted = _unconverted_classes(quant)
    if dtype == "mxfp4_w4a16":  # the MXFP4 quantiser converts the routed-expert modules only (gpt-oss)
        unconverted |= set(GEMM_CLASSES) - {"experts"}
    out = {cls: "bf16" if cls in unconverted else dtype for cls in GEMM_CLASSES}
    if "group_size" in extra and "int4_w4a16" not in out.values():
        extra = {}
    return {**out, **extra}


def _yarn_entry(c: _Config) -> tuple[str, dict] | None:
    """(field, entry) of a YaRN RoPE scaling: ``rope_scaling`` (hub configs) or ``rope_parameters``
    (transformers 5; MiMo's nests one entry per layer type), or None."""
    for field in ("rope_scaling", "rope_parameters"):
        rope = c.opt(field)
        if not isinstance(rope, dict):
            continue
        for key, entry in (("", rope), *((f".{k}", v) for k, v in rope.items() if isinstance(v, dict))):
            if (entry.get("rope_type") or entry.get("type")) == "yarn":
                return field + key, entry
    return None


def _context(c: _Config) -> dict:
    """``max_context_tokens`` (and ``context_extension`` when YaRN reaches past the config's own
    context): ``factor * original_max_position_embeddings`` tokens, with transformers' defaults
    (original = ``max_position_embeddings``, factor = their ratio)."""
    native = c.opt("max_position_embeddings") or c.req("model_max_length")
    found = _yarn_entry(c)
    if found is None:
        return {"max_context_tokens": native}
    field, rope = found
    if isinstance(native, bool) or not isinstance(native, int) or native < 1:
        raise c.fail("max_position_embeddings", f"{native!r} must be a whole number of tokens >= 1")
    original = rope.get("original_max_position_embeddings")
    original = c.opt("original_max_position_embeddings", native) if original is None else original
    if isinstance(original, bool) or not isinstance(original, int) or original < 1:
        raise c.fail(f"{field}.original_max_position_embeddings", f"{original!r} must be a whole number >= 1")
    factor = native / original if rope.get("factor") is None else rope["factor"]
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor < float("inf"):
        raise c.fail(f"{field}.factor", f"{factor!r} must be a finite number > 0")
    extended = int(factor * original)
    if factor <= 1 or extended < native:  # YaRN does not reach past what the config states
        return {"max_context_tokens": native}
    return {"max_context_tokens": extended,
            "context_extension": {"method": "yarn", "factor": float(factor), "original_tokens": original}}


def _model_id(raw: dict, path: Path) -> tuple[str, str]:
    """(id, hub repository or None) for a config file; see the module docstring."""
    name = str(raw.get("_name_or_path") or "")
    repo = name if _HUB_REPO.match(name) else None
    stem = path.parent.name if path.name == "config.json" else path.stem
    return (stem or "hf-model").lower(), repo


_MTP_FIELDS: dict[str, tuple[str, str]] = {
    "deepseek_v3": ("num_nextn_predict_layers", "mla"), "kimi_k2": ("num_nextn_predict_layers", "mla"),
    "kimi_k25": ("num_nextn_predict_layers", "mla"), "deepseek_v32": ("num_nextn_predict_layers", "dsa"),
    "glm_moe_dsa": ("num_nextn_predict_layers", "dsa"),
    "qwen3_next": ("mtp_num_hidden_layers", "full"), "qwen3_5_moe": ("mtp_num_hidden_layers", "full"),
    "qwen3_5_moe_text": ("mtp_num_hidden_layers", "full"), "minimax_m2": ("num_mtp_modules", "full"),
}
"""model_type -> (the config field counting MTP modules, the attention config of each)."""


def _mtp(c: _Config) -> dict | None:
    """The ``mtp`` block (see the module docstring), or None when the config has no MTP layers."""
    if c.model_type not in _MTP_FIELDS:
        return None
    field, kind = _MTP_FIELDS[c.model_type]
    if c.model_type == "minimax_m2" and not c.opt("use_mtp", False):
        return None
    n = c.opt(field, 0)
    if c.model_type == "minimax_m2":
        n *= c.opt("mtp_transformer_layers", 1)
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise c.fail(field, f"{n!r} must be a whole number of MTP layers >= 0")
    return {"layers": n, "attention": kind} if n else None


def load_hf_config(path: str | Path) -> ModelSpec:
    """Read a Hugging Face ``config.json`` (local file, no network) into a :class:`ModelSpec`.

    Raises :class:`PlanError` for an unreadable or malformed file, an unsupported
    ``model_type`` (the message lists the supported ones) or a missing required field (the
    message names the field and the file). Parameter counts come from :func:`count_params`
    unless the file states ``total_params`` / ``active_params``.
    """
    path = Path(path)
    try:
        raw = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{path}: line {exc.lineno} column {exc.colno}: malformed JSON ({exc.msg}); "
                        "fix the syntax") from None
    if not isinstance(raw, dict):
        raise InvalidInput(f"{path}: expected a JSON object of config fields at the top level")
    model_type = raw.get("model_type")
    if model_type not in _BUILDERS:
        raise InvalidInput(f"{path}: field model_type: {model_type!r} is not supported; "
                        f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
    c = _Config(raw, path)
    model_id, repo = _model_id(raw, path)
    body = _BUILDERS[model_type](c)
    mtp = _mtp(c)
    if mtp is not None:
        body["mtp"] = mtp
    context = _context(c)
    data = {
        "id": model_id, "name": repo or model_id, "family": model_type,
        "total_params": 1.0, "active_params": 1.0,  # placeholders until counted below
        "gemm_dtypes": _gemm_dtypes(c), **context,
        "hidden_size": c.req("hidden_size"), "vocab_size": c.req("vocab_size"),
        **body,
        "sources": [{
            "url": f"https://huggingface.co/{repo or model_id}/blob/main/config.json",
            "covers": ["total_params", "active_params", "layers", "attention", "ffn", "hidden_size",
                       "vocab_size", *context, "gemm_dtypes", *(("mtp",) if mtp else ())],
            "note": f"imported from the local file {path}; parameter counts computed from the "
                    "architecture by prfaas_plan.model.hf_config.count_params",
        }],
    }
    spec = validate(ModelSpec, data, str(path))
    total, active = count_params(spec)
    data["total_params"] = float(c.opt("total_params", total))
    data["active_params"] = float(c.opt("active_params", active))
    return validate(ModelSpec, data, str(path))


__all__ = ["SUPPORTED_MODEL_TYPES", "count_params", "load_hf_config"]
