"""Import NVIDIA's per-kernel measurements from the ``aiconfigurator-core`` wheel into our tables.

The wheel (``pip install 'prfaas-plan[kernels]'``, Apache-2.0, https://pypi.org/project/aiconfigurator-core/)
ships parquet tables under ``aiconfigurator_core/systems/data/<gpu>/<family>/<engine>/<version>/``
with latencies in **milliseconds** (``latency``) or **microseconds** (DeepEP ``*_us``). For each
GPU, engine (SGLang; vLLM too for H200) and collected engine version (every version for
:data:`ALL_VERSION_GPUS`, else the newest of each source) we take, per dtype, the kernel that
engine runs by default, keep the shape grid the lookup interpolates on (GEMM m at powers of two;
MoE at each routing of :data:`prfaas_plan.vocab.MOE_ROUTINGS`), and store per row the shape,
``latency_s`` and ``efficiency = roofline_s / latency_s`` (the FLOP and byte counts of
:mod:`prfaas_plan.perf.kernels`, this repository's GPU peaks) as
``<gpu>/<engine>-<version>/<family>.npz`` plus a ``provenance.yaml`` naming every source
file. SGLang's WideEP MLA tables (0.5.6.post2, 0.5.10) time the whole MLA module; only the
attention part is stored (:func:`reduce_mla_module`). Column meanings (from the wheel's SDK and collectors):

* gemm: ``m, n, k`` of [m x k] @ [k x n]; ``gemm_dtype`` bfloat16 / fp8 (per-tensor) / fp8_block.
* moe: ``num_tokens`` entering the layer, ``hidden_size``, ``inter_size``, ``topk``, ``num_experts``,
  ``moe_tp_size``, ``moe_ep_size``; latency per rank; ``distribution`` balanced and power_law_1.01
  kept (the ``routing`` code; power_law_1.2 left out, the 7 MB budget of committed tables).
* attention: ``batch_size``, ``isl`` (context) or ``step`` (generation: tokens already cached, so
  the step attends over ``step + 1``), per-rank ``num_heads`` / ``num_key_value_heads``,
  ``head_dim``, ``window_size`` (0 = full), ``kv_cache_dtype``.
* mla: per-rank ``num_heads`` (``tp_size`` = 128 / heads), DeepSeek-V3 dims (kv_lora 512, rope 64,
  nope 128, v 128).
* dsa: DeepGEMM's ``fp8_mqa_logits`` (a DSA indexer's prefill scores), kernel-level rows beside
  SGLang 0.5.14's sparse-attention tables: ``batch_size``, ``isl``, ``step`` (cached prefix, 0
  kept), at GLM-5's indexer shape; and SGLang's DSA attention module in prefill and in a decode
  step (the whole layer's ``self_attn``, per-rank ``num_heads`` at ``tp_size``; decode rows at
  ``isl`` 1 and ``step`` cached tokens), of which the core is kept (:func:`reduce_dsa`).
* linear attention (GDN, KDA): per kernel rows (conv + recurrence) summed per shape; ``seq_len``
  tokens per sequence; per-rank ``num_k_heads`` / ``num_v_heads``.
* comm: custom all-reduce ``message_size`` in **elements** of bf16 (the SDK factors it as an element
  count); DeepEP ``num_token`` per rank, one node of 8 GPUs (``node_num`` 1).
"""

from __future__ import annotations

import importlib.util
import io
import re
import zipfile
from pathlib import Path

import numpy as np
import yaml

from prfaas_plan.data import staged_files
from prfaas_plan.errors import InvalidInput
from prfaas_plan.hardware import GPU, load_gpu
from prfaas_plan.perf import kernels as K
from prfaas_plan.vocab import MOE_ROUTINGS

PACKAGE = "aiconfigurator-core"
INSTALL_HINT = "pip install 'prfaas-plan[kernels]'"
GPU_DIRS = {"h200": "h200_sxm", "h100": "h100_sxm", "a100-80g": "a100_sxm", "l40s": "l40s", "b200": "b200_sxm"}
"""Our hardware_db ids -> the wheel's system folders."""
ENGINES = ("sglang", "vllm")
"""Kernel engines imported: SGLang for every GPU, vLLM where :data:`VLLM_GPUS` (its tables stand in
for the families vLLM has none of: MLA, DeepEP all-to-all)."""
VLLM_GPUS: dict[str, tuple[str, ...] | None] = {"h200": None, "h100": ("moe",)}
"""GPUs whose vLLM tables are imported, and which families (None: all). The 7 MB budget of committed
tables holds one whole vLLM set (H200's); H100 keeps vLLM's fused-MoE table, as the only SGLang
table of gpt-oss's MXFP4 experts times a Triton kernel vLLM does not run for them, 2-3x slower at
decode sizes (H100, 8 tokens, one GPU: 0.58 ms against vLLM's triton_kernels 0.20 ms)."""
DSA_GPUS = ("h200", "b200")
"""GPUs whose DSA tables are imported: the systems of NVIDIA's GLM-5 runs. H100 reads H200's
through the transfer method (Hopper to Hopper, 1-8% off per family when left out), which keeps the
committed tables inside their 7 MB budget."""
ALL_VERSION_GPUS = ("h200",)
"""GPUs whose tables of every collected engine version are kept (the others: the newest of each
source), for engine profiles that name an older version (:func:`prfaas_plan.perf.kernels.pick_table`)."""
DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8_block", "int4_wo": "int4_w4a16",
          "w4a16_mxfp4": "mxfp4_w4a16", "w4a8_mxfp4_mxfp8": "mxfp4_w4a8", "nvfp4": "nvfp4"}
"""Wheel dtype names -> ours (int4_wo: int4 weights, 16-bit activations, i.e. W4A16 Marlin;
w4a16_mxfp4: MXFP4 weights, 16-bit activations, gpt-oss's experts on Hopper; w4a8_mxfp4_mxfp8: the
same weights with MXFP8 activations, Blackwell's FlashInfer TRT-LLM MoE; nvfp4: W4A4 NVFP4, Blackwell's)."""
KERNEL_PREFERENCE = {
    ("sglang", "gemm"): ("sglang_torch_linear", "sglang_sgl_kernel_fp8_scaled_mm", "sglang_deepgemm_gemm_nt_f8f8bf16",
                         "sglang_flashinfer_cutedsl_nvfp4", "sglang"),
    ("sglang", "moe"): ("sglang_fused_moe_triton", "sglang_marlin_moe", "sglang_flashinfer_trtllm_moe"),
    ("sglang", "attention"): ("fa3", "flash_attention", "trtllm_mha", "flashinfer", "triton"),
    ("vllm", "gemm"): ("torch.nn.functional.linear", "CutlassFP8ScaledMMLinearKernel", "DeepGemmFp8BlockScaledMMKernel",
                       "CutlassFp8BlockScaledMMKernel"),
    ("vllm", "moe"): ("vllm_unquantizedfusedmoe_triton_tritonexperts", "vllm_fp8moe_triton_tritonexperts",
                      "vllm_modeloptfp8moe_flashinfer_cutlass_flashinferexperts",
                      "vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts",
                      "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic", "vllm_mxfp4_moe"),
    ("vllm", "attention"): ("vllm_flash_attn_fa3", "vllm_flash_attn_fa4"),
}
"""Per engine and family, the kernels the engine runs by default (first present wins per dtype or
shape). SGLang: torch linear for bf16, sgl-kernel fp8_scaled_mm for per-tensor FP8, DeepGEMM for
FP8 block, FlashInfer's CuTe-DSL GEMM for NVFP4; the Triton fused MoE (Marlin for int4, FlashInfer's
TRT-LLM MoE where Blackwell's collection timed it); FA3 attention on Hopper, TRT-LLM's on Blackwell
(FlashAttention-2 on A100, FlashInfer on L40S): SGLang's ``_get_default_attn_backend`` returns
"fa3" on Hopper and "trtllm_mha" on SM100 for MHA models (FlashInfer or Triton elsewhere); B200's
collection times FlashInfer (head dim 128) and Triton (192, 256) beside it. vLLM: torch linear,
CUTLASS scaled_mm, DeepGEMM; Triton experts
(FlashInfer CUTLASS for per-tensor FP8, Marlin for int4, OpenAI's triton_kernels for gpt-oss's
MXFP4 on Hopper: vLLM's Mxfp4MoEMethod picks them unless ``VLLM_MXFP4_USE_MARLIN=1``); FA3."""
EAGER_TIMED = {("vllm", "gemm"): ("fp8_block",)}
"""Dtypes whose rows an engine's collection timed outside CUDA graphs, left out so that the lookup
reads a graph-timed table of the same GPU instead (SGLang's, whose DeepGEMM FP8-block GEMM is the
kernel vLLM's DeepGemmFp8BlockScaledMMKernel runs). aiconfigurator's vLLM GEMM collector times
FP8 block ``use_cuda_graph=gemm_type != "fp8_block"``, one layer per timed loop
(https://github.com/ai-dynamo/aiconfigurator/blob/00e9bded20f42721cbff68c8bf4540f946579ea4/collector/vllm/collect_gemm.py):
the host's launch gaps are in those latencies. The 0.24.0 H200 rows show it: 57-90 us at every m
from 1 to 4,096 for n = 1,024, k = 3,072, where the graph-timed bf16 and per-tensor FP8 rows of
the same shape take 6.5-7.5 us; NVIDIA's own A/B (https://github.com/ai-dynamo/aisimulate/pull/219,
B200, vLLM 0.25.1) measured 148.55 us eager against 12.32 us in a one-op graph at (1, 768, 7168).
Engines run decode steps in CUDA graphs, and an eager prefill's launches overlap the GPU's work
(the engine profile's ``layer_launch_s`` counts what they cost)."""
EP_UNPROJECTED = {("sglang", "moe"): ("0.5.10",)}
"""Collected versions whose MoE table timed an expert-parallel rank with ``moe_ep`` times its share
of the work. Where the GPU has another collection of the family, the table is left out whole (a
lookup reads one version per table: the next collection stands in, H200's 0.5.14); where it is the
only one (A100), its ``moe_ep > 1`` rows are left out and its TP rows kept (:func:`_plan`).
aiconfigurator's SGLang MoE collector before its rank-0 projection fixes
(https://github.com/ai-dynamo/aiconfigurator/pull/753, /pull/837, April 2026; collector/sglang/collect_moe.py
at c7ddbd307) timed a rank with the tokens routing a slot to rank 0, each routed to ``topk`` of the
rank's ``experts / moe_ep`` local experts, not to the slots that rank serves. The 0.5.10 H200 table
shows it: at 16,384 tokens of MiniMax-M2.5's shape (3,072 / 1,536, 256 experts top-8, FP8 block)
moe_ep 8 takes 6.49 ms, moe_ep 1 6.77 ms and moe_tp 8 (the same work per GPU) 1.62 ms; the 0.5.14
collection times moe_ep 8 at 1.65 ms, and every other shape of the two tables alike."""
NOT_SERVED = {("vllm", "moe"): ("vllm_marlin_int4_moe",)}
"""Kernel sources left out because the engine does not serve a checkpoint with them. vLLM's legacy
``int4_wo`` MoE rows (0.19.0) time its ``fused_experts`` helper called with an ``int4_w4a16`` quant
config at group size 128 (aiconfigurator collector/vllm/collect_moe.py): the Triton WNA16 kernel of
vllm/model_executor/layers/fused_moe/fused_moe.py, whatever the label says. vLLM serves an int4
(W4A16) MoE checkpoint in compressed-tensors format, Kimi-K2's, by CompressedTensorsWNA16MarlinMoEMethod
(vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe.py: fused_marlin_moe),
which the 0.24.0 collection times under that name. At Kimi-K2's shape (384 experts, moe_tp 8) the two
differ 2x (8 tokens: 230 vs 110 us)."""
MLA_DIMS = {"kv_lora_rank": 512, "qk_rope_dim": 64, "qk_nope_dim": 128, "v_dim": 128}  # DeepSeek-V3
LINEAR_KERNELS = {
    ("sglang", "gdn", "context"): (("causal_conv1d_fn",), ("chunk_gated_delta_rule",)),
    ("sglang", "gdn", "generation"): (("causal_conv1d_update",), ("fused_recurrent_gated_delta_rule_packed_decode",
                                                                  "fused_recurrent_gated_delta_rule")),
    ("sglang", "kda", "context"): (("causal_conv1d_fn_qkv3",), ("chunk_kda",)),
    ("sglang", "kda", "generation"): (("causal_conv1d_update",), ("fused_recurrent_kda_packed_decode",)),
    ("vllm", "gdn", "context"): (("causal_conv1d_fn",), ("chunk_gated_delta_rule_flashinfer", "chunk_gated_delta_rule")),
    ("vllm", "gdn", "generation"): (("causal_conv1d_update",), ("fused_recurrent_gated_delta_rule_packed_decode",)),
    ("vllm", "kda", "context"): (("causal_conv1d_fn_qkv3",), ("flashkda_fwd",)),
    ("vllm", "kda", "generation"): (("fused_kda_decode",),),
}
"""The kernels one linear-attention layer runs per phase (the wheel SDK's model builders): the conv,
then the delta rule (vLLM decodes KDA in one fused kernel); per slot the first kernel the wheel
measured; a phase missing a slot is not imported."""
DEEPEP_SMS = 20  # DeepEP normal-mode default SM count (deep_ep.Buffer.num_sms)
GPUS_PER_NODE = 8
MS, US = 1e-3, 1e-6


def package_root(wheel: Path | None, folder: Path | None, scratch: Path) -> Path:
    """The ``aiconfigurator_core`` package folder: unpacked from ``wheel`` (its data only), a given
    unpacked folder, or the installed package."""
    if wheel is not None:
        if not zipfile.is_zipfile(wheel):
            raise InvalidInput(f"--wheel: {wheel} is not a wheel (zip) file")
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(scratch, [n for n in zf.namelist() if "/systems/data/" in n or ".dist-info/" in n])
        return scratch / "aiconfigurator_core"
    if folder is not None:
        for candidate in (folder, folder / "aiconfigurator_core"):
            if (candidate / "systems" / "data").is_dir():
                return candidate
        raise InvalidInput(f"--dir: {folder} has no systems/data folder; give the unpacked aiconfigurator_core folder")
    installed = installed_package()
    if installed is None:
        raise InvalidInput(f"bench import-kernels: {PACKAGE} is not installed; {INSTALL_HINT} (or give --wheel / --dir)")
    return installed


def installed_package() -> Path | None:
    """Folder of the installed ``aiconfigurator_core`` package (found without importing it), or None."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def package_version(root: Path) -> str:
    """The wheel's version from its dist-info next to the package (``unknown`` when absent)."""
    for meta in sorted(root.parent.glob("aiconfigurator_core-*.dist-info/METADATA")):
        found = re.search(r"^Version: (\S+)", meta.read_text(), re.M)
        if found:
            return found.group(1)
    return "unknown"


def _versions(base: Path, folder: str, files: tuple[str, ...], engine: str) -> dict[str, list[Path | None]]:
    """Every collected version of ``<folder>/<engine>/<version>/`` that has one of ``files`` ->
    the path of each file there (None where that version lacks it)."""
    where = base / folder / engine
    out = {}
    for version in sorted(p.name for p in where.iterdir()) if where.is_dir() else ():
        paths = [where / version / f if (where / version / f).is_file() else None for f in files]
        if any(p is not None for p in paths):
            out[version] = paths
    return out


def _meta(path: Path) -> dict:
    meta = path.parent / "collection_meta.yaml"
    return yaml.safe_load(meta.read_text()) if meta.is_file() else {}


def _prefer(df, engine: str, family: str, by: list[str]):
    """Per group ``by``, the rows of the engine's most preferred kernel present (none of
    :data:`NOT_SERVED`)."""
    rank = {k: i for i, k in enumerate(KERNEL_PREFERENCE[(engine, family)])}
    df = df[~df["kernel_source"].isin(NOT_SERVED.get((engine, family), ()))]
    df = df.assign(_rank=df["kernel_source"].map(lambda k: rank.get(k, len(rank))))
    best = df.groupby(by)["_rank"].transform("min")
    return df[df["_rank"] == best].drop(columns="_rank")


def _cost(table: str, df) -> tuple:
    """FLOPs, bytes and peak dtype of each row (the runtime lookup's own formulas)."""
    c = {name: df[name].to_numpy() for name in df.columns if name not in ("kernel_source", "dtype", "kv_dtype")}
    if table == "gemm":
        return K.gemm_cost(c["m"], c["n"], c["k"], df["dtype"].iloc[0])
    if table == "moe":
        return K.moe_cost(c["tokens"], c["hidden"], c["inter"], c["topk"], c["experts"], c["moe_tp"], c["moe_ep"],
                          df["dtype"].iloc[0])
    if table in ("context_attention", "generation_attention"):
        fn = K.context_attention_cost if table == "context_attention" else K.generation_attention_cost
        length = c["isl"] if table == "context_attention" else c["context"]
        return fn(c["batch"], length, c["heads"], c["kv_heads"], c["head_dim"], c["window"], df["kv_dtype"].iloc[0])
    if table == "mla_context":
        d = MLA_DIMS
        return K.mla_context_cost(c["batch"], c["isl"], c["heads"], d["qk_nope_dim"], d["qk_rope_dim"], d["v_dim"],
                                  df["kv_dtype"].iloc[0])
    if table == "mla_generation":
        return K.mla_generation_cost(c["batch"], c["context"], c["heads"], MLA_DIMS["kv_lora_rank"],
                                     MLA_DIMS["qk_rope_dim"], df["kv_dtype"].iloc[0])
    if table.startswith("dsa_"):
        a = _dsa_attention()
        if table == "dsa_context":
            return K.mla_context_cost(c["batch"], c["isl"], c["heads"], c["qk_nope_dim"], a.qk_rope_head_dim, c["v_dim"],
                                      df["kv_dtype"].iloc[0], a.index_topk)
        if table == "dsa_generation":
            return K.mla_generation_cost(c["batch"], np.minimum(c["context"], a.index_topk), c["heads"],
                                         a.kv_lora_rank, a.qk_rope_head_dim, df["kv_dtype"].iloc[0])
        return K.dsa_indexer_cost("context", c["batch"], c["isl"], c["index_heads"], c["index_head_dim"],
                                  a.index_bytes_per_token)
    if table.startswith(("gdn_", "kda_")):
        phase = table.split("_", 1)[1]
        return K.linear_attention_cost(phase, c["batch"], c.get("tokens", 1.0), c["v_heads"], c["head_dim_k"],
                                       c["head_dim_v"])
    if table == "all_reduce":
        return K.all_reduce_cost(c["message_bytes"], c["gpus"])
    return K.all_to_all_cost(c["tokens"], c["hidden"], c["topk"], c["ep"])


def efficiency(gpu: GPU, table: str, df) -> np.ndarray:
    """roofline_s / latency_s per row, on ``gpu``; rows grouped by dtype (which sets the peak)."""
    out = np.empty(len(df))
    codes = [c for c in ("dtype", "kv_dtype") if c in df.columns]
    groups = df.groupby(codes).indices if codes else {None: np.arange(len(df))}
    for rows in groups.values():
        part = df.iloc[rows]
        flops, bytes_moved, pk = _cost(table, part)
        out[rows] = K.roofline_s(gpu, flops, bytes_moved, pk) / part["latency_s"].to_numpy()
    return out


def _read(path: Path):
    import pandas as pd

    return pd.read_parquet(path)


def reduce_gemm(engine: str, df):
    """GEMM rows at m = 1, 2, 4 ... 32768 (the +-1 probe rows dropped), one kernel per dtype, none
    of the dtypes the engine's collection timed eagerly (:data:`EAGER_TIMED`)."""
    eager = EAGER_TIMED.get((engine, "gemm"), ())
    df = df[df["gemm_dtype"].isin(DTYPES) & ~df["gemm_dtype"].isin(eager) & (df["m"] & (df["m"] - 1) == 0)].copy()
    df["dtype"] = df["gemm_dtype"].map(DTYPES)
    df = _prefer(df, engine, "gemm", ["dtype"])
    df["latency_s"] = df["latency"] * MS
    return {"gemm": df[["dtype", "m", "n", "k", "kernel_source", "latency_s"]]}


MOE_SHAPE = ("hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size")
"""The wheel's columns of one fused-MoE shape, per which :func:`reduce_moe` takes the engine's most
preferred kernel measured at it."""


SWITCHED_MOE_KERNELS = {("vllm", "mxfp4_w4a16"): "marlin"}
"""Fused-MoE kernels an engine runs for a dtype behind a switch, imported beside the default as
``moe_kernel`` rows of that name (:data:`prfaas_plan.vocab.MOE_KERNELS`): vLLM's ``Mxfp4MoEMethod``
runs MXFP4 experts through Marlin's weight-only kernel (``fused_marlin_moe``, bf16 activations)
when ``VLLM_MXFP4_USE_MARLIN=1``, which InferenceX's H100 and H200 gpt-oss scripts set since
https://github.com/SemiAnalysisAI/InferenceX/commit/4e52ed4c6 (2026-01-02, "Fix H100/H200 perf
regression"); the wheel times that kernel on Hopper at one expert shape (3,584 x 3,072, 896 experts:
``vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts_situ_as_silu``), so a lookup of another
shape reads it as the nearest measured shape."""


def reduce_moe(engine: str, df):
    """Fused-MoE rows of every routing of :data:`MOE_ROUTINGS` (the wheel's ``distribution``), one
    kernel per dtype, routing and expert shape (:data:`MOE_SHAPE`) as ``moe_kernel`` "default", and
    the switched kernels' rows of :data:`SWITCHED_MOE_KERNELS` under their own name; the routings
    kept go to the provenance (``df.attrs``)."""
    import pandas as pd

    df = df[df["distribution"].isin(MOE_ROUTINGS) & df["moe_dtype"].isin(DTYPES)].copy()
    df["dtype"] = df["moe_dtype"].map(DTYPES)
    df["routing"] = df["distribution"]
    switched = [df[(df["dtype"] == dtype) & df["kernel_source"].str.contains(name)].assign(moe_kernel=name)
                for (eng, dtype), name in SWITCHED_MOE_KERNELS.items() if eng == engine]
    # per shape: a model whose shape the engine's first kernel was not measured at (DeepSeek's 7168
    # x 2048 x 256 experts on B200: FlashInfer TRT-LLM only) keeps the kernel measured there
    df = _prefer(df, engine, "moe", ["dtype", "routing", *MOE_SHAPE]).assign(moe_kernel="default")
    df = pd.concat([df, *switched], ignore_index=True).rename(columns={
        "num_tokens": "tokens", "hidden_size": "hidden", "inter_size": "inter", "num_experts": "experts",
        "moe_tp_size": "moe_tp", "moe_ep_size": "moe_ep"})
    df["latency_s"] = df["latency"] * MS
    out = df[["dtype", "routing", "moe_kernel", "tokens", "hidden", "inter", "topk", "experts", "moe_tp", "moe_ep",
              "kernel_source", "latency_s"]]
    out.attrs["distributions"] = [r for r in MOE_ROUTINGS if (out["routing"] == r).any()]
    return {"moe": out}


def _attention(engine: str, df, length: str, table: str):
    df = df[df["kv_cache_dtype"].isin(("bfloat16", "fp8")) & (df["attn_dtype"] == "bfloat16")].copy()
    df["kv_dtype"] = df["kv_cache_dtype"].map(DTYPES)
    df = df.rename(columns={"batch_size": "batch", "num_heads": "heads", "num_key_value_heads": "kv_heads",
                            "window_size": "window"})
    if length == "context":
        df["context"] = df["step"] + 1  # the step attends over the cached tokens and itself
    if "window" not in df.columns:  # older collections (A100) measured full attention only
        df["window"] = 0
    df["windowed"] = np.where(df["window"] > 0, "yes", "no")
    df = _prefer(df, engine, "attention", ["kv_dtype", "heads", "kv_heads", "head_dim", "window"])
    df["latency_s"] = df["latency"] * MS
    cols = ["kv_dtype", "windowed", "heads", "kv_heads", "head_dim", "window", "batch", length]
    return {table: df[[*cols, "kernel_source", "latency_s"]]}


def _mla(engine: str, df, length: str, table: str):
    df = df[df["mla_dtype"] == "bfloat16"].copy()
    df["kv_dtype"] = df["kv_cache_dtype"].map(DTYPES)
    df = df.rename(columns={"batch_size": "batch", "num_heads": "heads"})
    if length == "context":
        df["context"] = df["step"] + 1
    df["latency_s"] = df["latency"] * MS
    return {table: df[["kv_dtype", "heads", "batch", length, "kernel_source", "latency_s"]]}


def reduce_linear(engine: str, df, kind: str):
    """Per shape, the sum of the layer's kernels (conv + delta rule) per phase; rows of models that
    share head counts and differ only in d_model (which these kernels do not read) are averaged."""
    out = {}
    df = df.rename(columns={"batch_size": "batch", "seq_len": "tokens", "num_k_heads": "k_heads",
                            "num_v_heads": "v_heads", "head_k_dim": "head_dim_k", "head_v_dim": "head_dim_v"})
    for phase in ("context", "generation"):
        measured = set(df.loc[df["phase"] == phase, "kernel_source"])
        kernels = [next((k for k in slot if k in measured), None) for slot in LINEAR_KERNELS[(engine, kind, phase)]]
        if None in kernels:
            continue
        part = df[(df["phase"] == phase) & df["kernel_source"].isin(kernels)]
        shape = ["v_heads", "k_heads", "head_dim_k", "head_dim_v", "batch", *(["tokens"] if phase == "context" else [])]
        per_model = part.groupby([*shape, "d_model"])
        summed = per_model["latency"].sum()[per_model["kernel_source"].nunique() == len(kernels)]
        table = summed.groupby(shape).mean().reset_index()
        table["latency_s"] = table["latency"] * MS
        table["kernel_source"] = "+".join(kernels)
        out[f"{kind}_{phase}"] = table[[*shape, "kernel_source", "latency_s"]]
    return out


DSA_MODULE_MODEL = ("zai-org/GLM-5-FP8", "glm-5")
"""The module rows reduced (their ``model`` column) and our model_db entry whose shapes they ran:
GLM-5's FP8 release, the one DSA model whose indexer the ``fp8_mqa_logits`` rows measured at its
own shape (the ``glm5_mqa_logits`` rows' ``num_heads`` column, 64, is its attention's)."""


def _dsa_attention():
    """The DSA layer of :data:`DSA_MODULE_MODEL` (its indexer and attention shapes)."""
    from prfaas_plan.model import load_model

    return load_model(DSA_MODULE_MODEL[1]).attention["dsa"]


def reduce_dsa_indexer(engine: str, df):
    """DeepGEMM ``fp8_mqa_logits`` rows (kernel-level, collected beside SGLang 0.5.14): the indexer's
    scores of a prefill of ``isl`` tokens per sequence with no cached prefix (``step`` 0), per
    ``batch``, at GLM-5's indexer shape (:func:`_dsa_attention`: 32 heads of 128)."""
    a = _dsa_attention()
    df = df[(df["step"] == 0) & (df["kernel_source"] == "deep_gemm.fp8_mqa_logits")]
    df = df.rename(columns={"batch_size": "batch"}).assign(index_heads=a.index_n_heads, index_head_dim=a.index_head_dim)
    df["latency_s"] = df["latency"] * MS
    return {"dsa_indexer_context": df[["index_heads", "index_head_dim", "batch", "isl", "kernel_source", "latency_s"]]}


def reduce_dsa(engine: str, mqa, context, generation, kt: K.KernelTables):
    """The indexer's prefill scores (:func:`reduce_dsa_indexer`) and, from SGLang's DSA attention
    module rows (the whole ``self_attn`` forward of one layer: projections, indexer, top-k, the
    attention), what remains of each after its projection GEMMs
    (:func:`prfaas_plan.perf.ops.attention_gemms` at the row's TP, timed by ``kt``, this GPU's GEMM
    table) and its indexer: ``dsa_context`` (prefill, eager, no cached prefix; the indexer's
    measured scores at the same batch and length subtracted; up to 2,048 tokens the module runs
    dense attention) and ``dsa_generation`` (one decode step of ``batch`` sequences over ``isl +
    step`` tokens; the indexer as the lookup prices it, the roofline at the named fallback), each
    floored at :data:`MODULE_FLOOR_FRACTION` of its row. GLM-5-FP8's rows (:data:`DSA_MODULE_MODEL`)."""
    from prfaas_plan.model import load_model

    out = reduce_dsa_indexer(engine, mqa) if mqa is not None else {}
    model = load_model(DSA_MODULE_MODEL[1])
    a = _dsa_attention()
    index = (a.index_n_heads, a.index_head_dim, a.index_bytes_per_token)
    if context is not None and "dsa_indexer_context" in out:
        scores = out["dsa_indexer_context"].set_index(["batch", "isl"])["latency_s"]
        df = _dsa_rows(context, "dsa_context_module", "isl")
        df = df[(df["step"] == 0) & df.set_index(["batch", "isl"]).index.isin(scores.index)].copy()
        index_s = scores.loc[list(zip(df["batch"], df["isl"]))].to_numpy()
        out["dsa_context"] = _dsa_rest(df, "isl", (df["batch"] * df["isl"]).to_numpy(dtype=float), index_s, model, kt)
    if generation is not None:
        df = _dsa_rows(generation, "dsa_generation_module", "context")
        index_s = np.asarray(kt.dsa_indexer("generation", df["batch"].to_numpy(dtype=float),
                                            df["context"].to_numpy(dtype=float), *index).latency_s)
        out["dsa_generation"] = _dsa_rest(df, "context", df["batch"].to_numpy(dtype=float), index_s, model, kt)
    return out


def _dsa_rows(df, op_name: str, length: str):
    """GLM-5-FP8's rows of one module op, our column names (decode: ``context = isl + step``, at
    cached lengths that are powers of two: the grid the other tables keep, without the probes
    beside it)."""
    df = df[(df["model"] == DSA_MODULE_MODEL[0]) & (df["op_name"] == op_name)]
    df = df.rename(columns={"batch_size": "batch", "num_heads": "heads"}).copy()
    if length == "context":
        df = df[(df["step"] & (df["step"] - 1)) == 0].copy()
        df["context"] = df["isl"] + df["step"]
    df["kv_dtype"] = df["kv_cache_dtype"].map(DTYPES)
    return df


def _dsa_rest(df, length: str, tokens: np.ndarray, index_s: np.ndarray, model, kt: K.KernelTables):
    """Module rows less their projection GEMMs at ``tokens`` per row and the indexer's ``index_s``."""
    from prfaas_plan.perf.ops import attention_gemms

    module_s = df["latency"].to_numpy() * MS
    gemm_s, sources = np.zeros(len(df)), set()
    tps = df["tp_size"].to_numpy()
    for tp in np.unique(tps):
        rows = tps == tp
        for g in attention_gemms(model, "dsa", int(tp)):
            t = kt.gemm(tokens[rows], g.n, g.k, g.dtype)
            gemm_s[rows] += t.latency_s
            sources.add(t.source.split(";")[0])
    rest = module_s - gemm_s - index_s
    df = df.assign(latency_s=np.maximum(rest, MODULE_FLOOR_FRACTION * module_s),
                   qk_nope_dim=model.attention["dsa"].qk_nope_head_dim, v_dim=model.attention["dsa"].v_head_dim)
    table = df[["kv_dtype", "heads", "qk_nope_dim", "v_dim", "batch", length, "kernel_source", "latency_s"]]
    table.attrs.update(gemm_sources=sorted(sources), gemm_dtype=model.gemm_dtype("attention"),
                       floored_rows=int((rest < MODULE_FLOOR_FRACTION * module_s).sum()),
                       measures="module minus projection GEMMs and the indexer", note=DSA_MODULE_NOTE)
    return table


def reduce_all_reduce(engine: str, df):
    """The engine's custom all-reduce under CUDA graphs (what decode runs); bf16 elements -> bytes."""
    df = df[df["backend"] == f"{engine}_graph"] if "backend" in df.columns else df[df["op_name"] == "all_reduce"]
    df = df.rename(columns={"num_gpus": "gpus"}).copy()
    df["message_bytes"] = df["message_size"] * 2
    df["latency_s"] = df["latency"] * MS
    return {"all_reduce": df[["gpus", "message_bytes", "kernel_source", "latency_s"]]}


def reduce_deepep(engine: str, normal, low_latency):
    """DeepEP dispatch + combine per rank (microseconds in the wheel): normal mode at its default
    SM count for context, low-latency mode for generation; one node of 8 GPUs."""
    out = {}
    for table, df, cols in (("all_to_all_context", normal, ("dispatch_transmit_us", "dispatch_notify_us",
                                                            "combine_transmit_us", "combine_notify_us")),
                            ("all_to_all_generation", low_latency, ("dispatch_avg_t_us", "combine_avg_t_us"))):
        if df is None:
            continue
        if "dispatch_sms" in df.columns:
            sms = DEEPEP_SMS if (df["dispatch_sms"] == DEEPEP_SMS).any() else df["dispatch_sms"].max()
            df = df[(df["dispatch_sms"] == sms) & (df["combine_sms"] == sms)]
        df = df.rename(columns={"num_token": "tokens", "hidden_size": "hidden", "num_topk": "topk",
                                "num_experts": "experts"}).copy()
        df["ep"] = df["node_num"] * GPUS_PER_NODE
        df["latency_s"] = df[list(cols)].sum(axis=1) * US
        df["kernel_source"] = f"deepep_{'normal' if table.endswith('context') else 'low_latency'}"
        out[table] = df[["hidden", "topk", "experts", "ep", "tokens", "kernel_source", "latency_s"]]
    return out


SOURCES = {
    "gemm": [("gemm", ("gemm_perf.parquet",), reduce_gemm)],
    "moe": [("moe", ("moe_perf.parquet",), reduce_moe)],
    "attention": [("attention", ("context_attention_perf.parquet",),
                   lambda e, d: _attention(e, d, "isl", "context_attention")),
                  ("attention", ("generation_attention_perf.parquet",),
                   lambda e, d: _attention(e, d, "context", "generation_attention"))],
    "mla": [("mla", ("context_mla_perf.parquet",), lambda e, d: _mla(e, d, "isl", "mla_context")),
            ("mla", ("generation_mla_perf.parquet",), lambda e, d: _mla(e, d, "context", "mla_generation"))],
    "linear_attention": [("linear_attention", ("gdn_perf.parquet",), lambda e, d: reduce_linear(e, d, "gdn")),
                         ("kda", ("kda_perf.parquet",), lambda e, d: reduce_linear(e, d, "kda"))],
    "comm": [("comm", ("custom_allreduce_perf.parquet",), reduce_all_reduce),
             ("comm", ("wideep_deepep_normal_perf.parquet", "wideep_deepep_ll_perf.parquet"), reduce_deepep)],
}
"""Per family of ours: (wheel family folder, parquet files read together, reducer(engine, *frames) ->
{table: rows}); vLLM's MLA and all-to-all tables use other schemas (module-level timings, per-phase
rows) and are not read."""
MODULE_SOURCES = {
    "mla": [("mla", ("wideep_context_mla_perf.parquet",), lambda e, d, kt: reduce_mla_module(e, d, kt, "mla_context")),
            ("mla", ("wideep_generation_mla_perf.parquet",),
             lambda e, d, kt: reduce_mla_module(e, d, kt, "mla_generation"))],
    "dsa": [("sparse_attention", ("glm5_mqa_logits_module_perf.parquet", "dsa_context_module_perf.parquet",
                                  "dsa_generation_module_perf.parquet"), reduce_dsa)],
}
"""Module-level tables read for a family only where a version has none of its :data:`SOURCES`
files (SGLang's WideEP MLA at 0.5.6.post2 and 0.5.10 on H200, where 0.5.14 has the plain kernel
tables; DSA, which has none); their reducers also take the GPU's GEMM lookup
(:func:`reduce_mla_module`, :func:`reduce_dsa`)."""
MLA_MODULE_DIMS = {"q_lora_rank": 1536, "hidden": 7168}  # DeepSeek-V3, the tables' model column
MODULE_BACKENDS = ("flashinfer", "fa3")  # SGLang WideEP MLA's default backend first (sdk/models/deepseek.py)
MODULE_FLOOR_FRACTION = 0.05
"""Least share of a module row left to the attention after subtracting the projection GEMMs (a
guard against a GEMM lookup above the module time; the provenance counts the rows it caught)."""


def module_projections(table: str, heads: int) -> list[tuple[str, int, int]]:
    """(name, n, k) of the GEMMs a WideEP MLA module row times besides the attention, per rank at
    ``heads``: prefill q_b, kv_b (latent -> per-head K_nope and V) and o; decode (absorbed, no
    kv_b GEMM) q_b and o. The fused q_a/kv_a projection is outside the module (the SDK prices it
    as its own GEMM)."""
    d, m = MLA_DIMS, MLA_MODULE_DIMS
    q_b = ("q_b", heads * (d["qk_nope_dim"] + d["qk_rope_dim"]), m["q_lora_rank"])
    o = ("o", m["hidden"], heads * d["v_dim"])
    if table == "mla_generation":
        return [q_b, o]
    return [q_b, ("kv_b", heads * (d["qk_nope_dim"] + d["v_dim"]), d["kv_lora_rank"]), o]


def reduce_mla_module(engine: str, df, kt: K.KernelTables, table: str):
    """WideEP MLA module rows -> the attention part: module latency minus its projection GEMMs
    (:func:`module_projections`) timed by ``kt`` (this GPU's GEMM table at the nearest version),
    floored at :data:`MODULE_FLOOR_FRACTION` of the row. Returns {table: rows} with the GEMM
    source, the subtracted seconds and the floored count in ``df.attrs``."""
    backend = next(b for b in (*MODULE_BACKENDS, *sorted(set(df["kernel_source"]))) if (df["kernel_source"] == b).any())
    df = df[df["kernel_source"] == backend].copy()
    df["kv_dtype"] = df["kv_cache_dtype"].map(DTYPES)
    df = df.rename(columns={"batch_size": "batch", "num_heads": "heads"})
    length = "isl" if table == "mla_context" else "context"
    if length == "context":
        df["context"] = df["isl"] + df["step"]  # WideEP decode rows: isl = cached tokens, step 0
    tokens = (df["batch"] * df["isl"] if table == "mla_context" else df["batch"]).to_numpy(dtype=float)
    module_s = df["latency"].to_numpy() * MS
    gemm_s, sources = np.zeros(len(df)), set()
    dtype = DTYPES[str(df["gemm_type"].iloc[0])] if "gemm_type" in df.columns else "fp8_block"
    heads = df["heads"].to_numpy()
    for h in np.unique(heads):
        rows = heads == h
        for _, n, k in module_projections(table, int(h)):
            t = kt.gemm(tokens[rows], n, k, dtype)
            gemm_s[rows] += t.latency_s
            sources.add(t.source.split(";")[0])
    attention_s = np.maximum(module_s - gemm_s, MODULE_FLOOR_FRACTION * module_s)
    df["latency_s"] = attention_s
    names = "+".join(p[0] for p in module_projections(table, 1))
    df["kernel_source"] = f"{backend} (module - {names} GEMMs)"
    out = df[["kv_dtype", "heads", "batch", length, "kernel_source", "latency_s"]]
    out.attrs.update(gemm_sources=sorted(sources), gemm_dtype=dtype,
                     floored_rows=int((module_s - gemm_s < MODULE_FLOOR_FRACTION * module_s).sum()))
    return {table: out}


COLUMN_UNITS = {
    "latency_s": "seconds (wheel: latency in ms; DeepEP *_us in microseconds)",
    "efficiency": "roofline_s / latency_s on the measuring GPU (perf.kernels *_cost formulas)",
    "m, n, k": "GEMM [m x k] @ [k x n]", "tokens": "tokens (MoE: entering the layer; DeepEP: per rank; "
    "linear attention: per sequence)", "batch": "sequences", "isl": "tokens per sequence",
    "context": "KV tokens a decode step attends over (wheel step + 1)", "message_bytes": "bytes of bf16",
    "heads, kv_heads, v_heads, k_heads": "per rank", "window": "tokens (0: full attention)",
    "dtype, kv_dtype, windowed, routing, moe_kernel": "codes: index into perf.kernels.CODES (routing: the wheel's "
    "MoE distribution; moe_kernel: the engine's default kernel or one it runs behind a switch)",
    "kernel": "index into <table>.kernel_names",
}


def _dedupe(table: str, df):
    """One row per shape (the median where a shape was measured twice)."""
    spec = K.TABLES[table]
    keys = [*spec.exact, *spec.nearest, *spec.axes]
    return df.groupby(keys, as_index=False).agg(latency_s=("latency_s", "median"), kernel_source=("kernel_source", "first"))


def _arrays(table: str, df, gpu: GPU, engine: str) -> dict[str, np.ndarray]:
    spec = K.TABLES[table]
    df = _dedupe(table, df)
    eff = efficiency(gpu, table, df)
    kernels = sorted(df["kernel_source"].unique())
    out = {f"{table}.{c}": np.array([K.CODES[c].index(v) for v in df[c]], dtype=np.int8) for c in spec.exact}
    out.update({f"{table}.{c}": df[c].to_numpy(dtype=np.int64) for c in (*spec.nearest, *spec.axes)})
    out[f"{table}.latency_s"] = df["latency_s"].to_numpy(dtype=np.float32)
    out[f"{table}.efficiency"] = eff.astype(np.float32)
    out[f"{table}.kernel"] = np.array([kernels.index(k) for k in df["kernel_source"]], dtype=np.int8)
    out[f"{table}.kernel_names"] = np.array(kernels)
    out[f"{table}.engine"] = np.array(engine)
    if table.startswith("mla_"):
        out.update({f"{table}.{name}": np.array(v) for name, v in MLA_DIMS.items()})
    return out


def _kernels_by_dtype(df) -> dict:
    code = next((c for c in ("dtype", "kv_dtype") if c in df.columns), None)
    if code is None:
        return {"all": sorted(df["kernel_source"].unique())}
    return {str(k): sorted(v.unique()) for k, v in df.groupby(code)["kernel_source"]}


DSA_MODULE_NOTE = ("latency_s is what remains of SGLang's DSA attention module (aiconfigurator collector "
                   "collect_mla_module.py: the whole self_attn forward, eager in prefill) after the projection GEMMs "
                   "(q_a, kv_a, the indexer's wk and weights_proj, q_b, kv_b, the indexer's wq_b, o: perf.ops."
                   "attention_gemms at the row's TP, timed from this GPU's gemm table) and the indexer (prefill: its "
                   "fp8_mqa_logits scores, the dsa_indexer_context rows at the same batch and length; decode: the "
                   "roofline at the named fallback efficiency, as the lookup prices it): the top-k selection, the "
                   "attention (dense MHA up to 2,048 tokens, FlashMLA sparse beyond), norms, RoPE, cache writes and, "
                   "in prefill, the launches of an eager module. GLM-5-FP8's rows.")
MODULE_NOTE = ("latency_s is the attention part of SGLang's WideEP MLA module: the module rows time q_b/kv_b/o "
               "projections + attention (aiconfigurator sdk/models/deepseek.py: 'q_b/kv_b/o projections live inside "
               "the WideEP MLA module rows'); those GEMMs (decode: q_b and o; the absorbed w_kc/w_vc BMMs stay in), "
               "timed from this GPU's gemm table, are subtracted. Heads "
               "grid 16..128 at tp 1: a query below 16 heads per rank takes the 16-head efficiency with its own "
               "roofline, i.e. scales linearly in heads.")


def import_family(root: Path, gpu: GPU, family: str, engine: str, version: str, entries, kt=None) -> tuple[dict, dict]:
    """(npz arrays, provenance) of one family at one engine version from ``entries`` ((wheel folder,
    files, reducer, paths) each); ``kt`` is the GEMM lookup module reducers take."""
    arrays, provenance = {}, {}
    for _, _, reducer, paths in entries:
        frames = [_read(p) if p is not None else None for p in paths]
        try:
            tables = reducer(engine, *frames, kt) if kt is not None else reducer(engine, *frames)
        except KeyError as exc:  # a column the reducer reads is not in the file
            files = ", ".join(str(p) for p in paths if p is not None)
            missing = str(exc.args[0]).replace(" not in index", "")
            raise InvalidInput(f"{files}: missing column {missing}; the kernel table is not the "
                               "aiconfigurator-core 0.12.0 layout, re-download the wheel or give another --dir") from None
        for table, df in tables.items():
            if df.empty:
                continue
            attrs = dict(df.attrs)
            arrays.update(_arrays(table, df, gpu, f"{engine}-{version}"))
            provenance[table] = {
                "source_files": [str(p.relative_to(root.parent)) for p in paths if p is not None],
                "engine": engine, "engine_version": version,
                "kernel_source": _kernels_by_dtype(df), "rows": int(arrays[f"{table}.latency_s"].size),
                "collection_meta": {str(p.relative_to(root.parent)): _meta(p) for p in paths if p is not None},
            }
            if "gemm_sources" in attrs:  # a module table: what was subtracted, and why
                provenance[table].update({"measures": "module minus projection GEMMs", "note": MODULE_NOTE, **attrs})
            else:
                provenance[table].update(attrs)  # MoE: the wheel distributions kept
    if provenance:
        provenance = {"package": PACKAGE, "package_version": package_version(root), "tables": provenance}
    return arrays, provenance


def _tp_rows_only(reducer):
    """``reducer`` over the rows of an MoE table with ``moe_ep_size == 1`` (:data:`EP_UNPROJECTED`)."""
    def reduce(engine: str, df):
        return reducer(engine, df[df["moe_ep_size"] == 1])
    return reduce


def _plan(root: Path, gpu_id: str, engine: str, sources: dict) -> dict[str, dict[str, list]]:
    """engine version -> family -> [(wheel folder, files, reducer, paths)]: every collected version
    for :data:`ALL_VERSION_GPUS`, else the newest of each source."""
    base = root / "systems" / "data" / GPU_DIRS[gpu_id]
    plan: dict[str, dict[str, list]] = {}
    for family, entries in sources.items():
        for folder, files, reducer in entries:
            found = _versions(base, folder, files, engine)
            unprojected = EP_UNPROJECTED.get((engine, folder), ())
            if any(v not in unprojected for v in found):  # a sound collection stands in for the others
                found = {v: p for v, p in found.items() if v not in unprojected}
            if gpu_id not in ALL_VERSION_GPUS and found:
                found = {v: p for v, p in found.items() if v == K.nearest_version(found, None)}
            for version, paths in found.items():
                use = _tp_rows_only(reducer) if version in unprojected else reducer
                plan.setdefault(version, {}).setdefault(family, []).append((folder, files, use, paths))
    return plan


def import_gpu(root: Path, gpu_id: str, engine: str, out: Path, echo) -> dict[str, dict[str, int]]:
    """Write ``out/<gpu_id>/<engine>-<version>/<family>.npz`` and ``provenance.yaml`` per collected
    engine version, each folder all or none; returns the bytes of each file per folder name."""
    gpu = load_gpu(gpu_id)
    kept = VLLM_GPUS.get(gpu_id) if engine == "vllm" else None
    sources, module_sources = ({k: v for k, v in src.items() if (kept is None or k in kept)
                                and (k != "dsa" or gpu_id in DSA_GPUS)} for src in (SOURCES, MODULE_SOURCES))
    plan, modules = _plan(root, gpu_id, engine, sources), _plan(root, gpu_id, engine, module_sources)
    sizes: dict[str, dict[str, int]] = {}
    for version in sorted(plan, key=K.version_key, reverse=True):
        sizes[f"{engine}-{version}"] = _write_version(root, gpu, engine, version, plan[version], out, echo, {})
    K.clear_caches()  # the module reducers look up the GEMM tables just written
    for version, families in sorted(modules.items()):
        missing = {f: e for f, e in families.items() if f not in plan.get(version, {})}
        if missing:
            kt = K.kernel_tables(gpu, engine, version, root=out)
            done = {f: plan.get(version, {}).get(f) for f in plan.get(version, {})}
            sizes[f"{engine}-{version}"] = _write_version(root, gpu, engine, version, {**done, **missing}, out, echo,
                                                          {f: kt for f in missing})
    K.clear_caches()
    return sizes


def _write_version(root: Path, gpu: GPU, engine: str, version: str, families: dict, out: Path, echo,
                   lookups: dict) -> dict[str, int]:
    folder = out / gpu.id / f"{engine}-{version}"
    folder.mkdir(parents=True, exist_ok=True)
    provenance = {"gpu": gpu.id, "engine": engine, "engine_version": version, "wheel_system": GPU_DIRS[gpu.id],
                  "source_url": "https://pypi.org/project/aiconfigurator-core/",
                  "peaks_used": {"bf16_dense_tflops": gpu.bf16_dense_tflops, "fp8_dense_tflops": gpu.fp8_dense_tflops,
                                 "memory_tb_per_s": gpu.memory_tb_per_s, "scaleup_gb_per_s": gpu.scaleup_gb_per_s},
                  "column_units": COLUMN_UNITS, "families": {}}
    sizes = {}
    with staged_files(folder, f"kernel tables {folder}") as stage:
        for family, entries in families.items():
            arrays, prov = import_family(root, gpu, family, engine, version, entries, lookups.get(family))
            if not arrays:
                continue
            buffer = io.BytesIO()
            np.savez_compressed(buffer, **arrays)
            stage(f"{family}.npz").write_bytes(buffer.getvalue())
            sizes[f"{family}.npz"] = buffer.tell()
            provenance["families"][family] = prov
            rows = ", ".join(f"{t} {p['rows']:,}" for t, p in prov["tables"].items())
            echo(f"{gpu.id}/{engine}-{version}/{family}: {rows} rows, {buffer.tell():,} bytes")
        stage("provenance.yaml").write_text(yaml.safe_dump(provenance, sort_keys=False, width=120))
    return sizes


def import_kernels(gpus: list[str], out: Path, wheel: Path | None = None, folder: Path | None = None,
                   echo=print) -> dict[str, dict[str, int]]:
    """Import every GPU of ``gpus`` (SGLang tables; vLLM too for :data:`VLLM_GPUS`) from the wheel
    (or unpacked folder, or installed package) into ``out``; returns bytes per file per
    ``<gpu>/<engine>-<version>`` folder."""
    import tempfile

    unknown = [g for g in gpus if g not in GPU_DIRS]
    if unknown:
        raise InvalidInput(f"--gpus: no wheel data mapped for {', '.join(unknown)}; use some of {', '.join(GPU_DIRS)}")
    try:  # before unpacking 80 MB: the tables folder must be one we can write
        out.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=out).close()
    except OSError as exc:
        raise InvalidInput(f"--out: cannot write kernel tables to {out} ({exc.strerror or exc}); choose another folder") from None
    with tempfile.TemporaryDirectory() as scratch, tempfile.TemporaryDirectory() as fresh:
        root = package_root(wheel, folder, Path(scratch))
        # into a scratch tree first (a version folder is written in two passes, the module reducers
        # reading the first's GEMM tables), then each folder into ``out`` all or none: an import
        # stopped half-way leaves the committed tables as they were
        sizes = {f"{g}/{name}": files for g in gpus for e in ENGINES if e == "sglang" or g in VLLM_GPUS
                 for name, files in import_gpu(root, g, e, Path(fresh), echo).items()}
        for name in sizes:
            _publish(Path(fresh) / name, out / name)
    K.clear_caches()
    return sizes


def _publish(src: Path, dst: Path) -> None:
    """Make folder ``dst`` hold exactly ``src``'s files: copied in all or none
    (:func:`~prfaas_plan.data.staged_files`), then the ``.npz`` files ``src`` lacks removed."""
    import shutil

    dst.mkdir(parents=True, exist_ok=True)
    with staged_files(dst, f"kernel tables {dst}") as stage:
        for f in sorted(src.iterdir()):
            shutil.copyfile(f, stage(f.name))
    for stale in dst.glob("*.npz"):  # a family an earlier import wrote and this one leaves out
        if not (src / stale.name).is_file():
            stale.unlink()
