"""The microbenchmark harness: measure a device, calibrate the performance model, validate it.

``prfaas-plan bench run`` times, with torch (CUDA when present, else the CPU):

* **GEMMs** over shapes (bf16 on GPUs, fp32 on CPUs), in FLOP/s;
* **causal attention prefill** (``torch.nn.functional.scaled_dot_product_attention``) over
  lengths, and **sliding-window attention** (blocked, see :func:`sliding_window_attention`);
* a **chunked linear-attention forward** in plain torch (chunk 64 tokens; Gated DeltaNet, KDA and
  Lightning flavours, :func:`chunked_linear_attention`);
* **memory-copy bandwidth** (bytes read plus bytes written per second);
* **scaled-down models** built from a ``model_db`` entry's real layer pattern (fewer layers, a
  smaller hidden size, the same attention kinds in the same ratios, :func:`scale_model`). The
  scaled model is an ordinary :class:`~prfaas_plan.model.arch.ModelSpec`, so the *same*
  :func:`prfaas_plan.perf.analytic_prefill` predicts it; its prefill forward
  (:class:`ScaledModel`) is timed end to end and returns real KV tensors and states, whose bytes
  must equal :func:`prfaas_plan.kvcache.kv_bytes` exactly;
* **KV transfer**: that cache serialised and sent over loopback TCP (127.0.0.1 only) with 1..N
  parallel connections, in Gbps.

``prfaas-plan bench calibrate`` turns a results file into a hardware YAML entry (peak FLOP/s
from the fastest GEMM or the datasheet, memory bandwidth from the copy test, efficiency factors
fitted with :func:`prfaas_plan.perf.calibration.fit_prefill` on the *calibration* cases only, a link
efficiency from the transfer test); ``prfaas-plan bench validate`` compares the model's
predictions with every *held-out* case.

Torch is imported only inside the functions that run on a device: this package imports without
it, so that calibration and validation work on any machine. Units: seconds, bytes, FLOP, tokens,
Gbps = 1e9 bit/s, GB = 1e9 bytes, MiB = 2**20 bytes; names carry their unit.

The package, one idea per module (every public name is re-exported here, so ``bench.X`` works):

* :mod:`.scale`: :class:`ScaleSpec`, :class:`Profile` and :data:`PROFILES`, :func:`scale_model`
  and :func:`layer_mix` (pure Python);
* :mod:`.kernels`: the lazy torch import, :func:`torch_dtype`, causal / sliding-window / chunked
  and recurrent linear attention, and their FLOP counts;
* :mod:`.model`: the torch layers, :class:`ScaledModel` and :func:`cache_nbytes`;
* :mod:`.transfer`: :func:`serialise_cache` / :func:`deserialise_cache` and :func:`loopback_transfer`;
* :mod:`.micro`: timing on torch's ``Timer`` (:func:`time_call`, :func:`clock_s`, :func:`summarize`)
  and the microbenchmarks;
* :mod:`.harness`: device info, :func:`run_harness`, :func:`write_results` / :func:`load_results`;
* :mod:`.calibrate`: :func:`calibrate_results`, :func:`calibrate_observations`,
  :func:`validate_results`, :func:`median_abs_error_pct` and their result types, which write
  their own YAML (no torch);
* :mod:`.tables`: what ``bench run`` prints (:func:`micro_table`, :func:`model_case_table`,
  :func:`transfer_table`; no torch).
"""

from __future__ import annotations

from prfaas_plan.bench.calibrate import (
                    CPU_PLACEHOLDER_PRICE_USD_PER_HOUR,
                    CPU_PLACEHOLDER_TDP_W,
                    DEFAULT_COMM_EFFICIENCY,
                    DEFAULT_DECODE_STEP_OVERHEAD_S,
                    DEFAULT_NOMINAL_LINE_GBPS,
                    DEFAULT_STATISTIC,
                    FIT_LOWER_START,
                    MEASURED_SOURCE_URL,
                    MEMORY_STREAM_EFFICIENCY_MEASURED,
                    OBSERVATION_FIT_PARAMS,
                    RESULTS_FIT_PARAMS,
                    SHA_SHORT_CHARS,
                    STATISTICS,
                    TABLE_FACTORS,
                    YAML_SIGNIFICANT_DIGITS,
                    YAML_WIDTH_CHARS,
                    Calibration,
                    ObservationFit,
                    calibrate_observations,
                    calibrate_results,
                    case_seconds,
                    link_table,
                    match_datasheet_gpu,
                    median_abs_error_pct,
                    re_id,
                    validate_results,
)
from prfaas_plan.bench.harness import (
                    LINEAR_FLAVOURS,
                    RESULTS_SCHEMA,
                    RESULTS_SECTIONS,
                    TIMING_METHOD,
                    device_info,
                    load_results,
                    model_case_name,
                    resolve_device,
                    run_harness,
                    write_results,
)
from prfaas_plan.bench.kernels import (
                    LINEAR_LOG_DECAY_FLOOR,
                    SWA_QUERY_BLOCK_FRACTION,
                    TORCH_DTYPES,
                    attention_pair_flops,
                    causal_attention,
                    chunked_linear_attention,
                    linear_attention_flops_per_token,
                    recurrent_linear_attention,
                    sliding_window_attention,
                    torch_dtype,
)
from prfaas_plan.bench.micro import (
                    FLOPS_PER_TFLOP,
                    MICRO_LOG_DECAY_MAX,
                    TIMER_WARMUP_CALLS,
                    bench_attention,
                    bench_copy,
                    bench_gemm,
                    bench_linear_attention,
                    clock_s,
                    summarize,
                    time_call,
)
from prfaas_plan.bench.model import (
                    ATTENTION_LAYERS,
                    GATE_A_LOG_RANGE,
                    GATE_DT_BIAS_RANGE,
                    LIGHTNING_SLOPE_EXPONENT,
                    ROPE_BASE,
                    DenseFFN,
                    GDNLayer,
                    GQALayer,
                    KDALayer,
                    LightningLayer,
                    MLALayer,
                    MoEFFN,
                    RopeTable,
                    ScaledModel,
                    cache_nbytes,
)
from prfaas_plan.bench.scale import (
                    CALIBRATION_MODELS,
                    CPU_DEFAULT_THREADS,
                    DIM_ALIGN,
                    PROFILES,
                    VALIDATION_MODELS,
                    Profile,
                    ScaleSpec,
                    extra_params,
                    layer_mix,
                    profile_for,
                    scale_model,
                    scaled_layer_counts,
)
from prfaas_plan.bench.tables import micro_table, model_case_table, transfer_table
from prfaas_plan.bench.transfer import (
                    LOOPBACK_HOST,
                    TRANSFER_BUFFER_BYTES,
                    TRANSFER_HEADER,
                    TRANSFER_TIMEOUT_S,
                    deserialise_cache,
                    loopback_transfer,
                    serialise_cache,
)
from prfaas_plan.units import MS_PER_S

__all__ = [
    "RESULTS_SCHEMA", "LOOPBACK_HOST", "DIM_ALIGN", "LINEAR_LOG_DECAY_FLOOR",
    "SWA_QUERY_BLOCK_FRACTION", "ROPE_BASE",
    "MEMORY_STREAM_EFFICIENCY_MEASURED", "DEFAULT_COMM_EFFICIENCY", "DEFAULT_DECODE_STEP_OVERHEAD_S",
    "DEFAULT_NOMINAL_LINE_GBPS", "CPU_PLACEHOLDER_TDP_W", "CPU_PLACEHOLDER_PRICE_USD_PER_HOUR",
    "MEASURED_SOURCE_URL", "TRANSFER_BUFFER_BYTES", "TRANSFER_TIMEOUT_S", "TRANSFER_HEADER",
    "OBSERVATION_FIT_PARAMS", "RESULTS_FIT_PARAMS", "STATISTICS", "DEFAULT_STATISTIC",
    "CPU_DEFAULT_THREADS", "FIT_LOWER_START", "FLOPS_PER_TFLOP", "MS_PER_S", "GATE_A_LOG_RANGE",
    "GATE_DT_BIAS_RANGE", "LIGHTNING_SLOPE_EXPONENT", "MICRO_LOG_DECAY_MAX", "YAML_SIGNIFICANT_DIGITS",
    "SHA_SHORT_CHARS", "ScaleSpec", "Profile", "CALIBRATION_MODELS", "VALIDATION_MODELS", "PROFILES",
    "profile_for", "scaled_layer_counts", "extra_params", "scale_model", "layer_mix", "summarize",
    "TORCH_DTYPES", "torch_dtype", "time_call", "causal_attention", "sliding_window_attention",
    "chunked_linear_attention", "recurrent_linear_attention", "RopeTable", "GQALayer", "MLALayer",
    "GDNLayer", "KDALayer", "LightningLayer", "ATTENTION_LAYERS", "DenseFFN", "MoEFFN", "ScaledModel",
    "cache_nbytes", "serialise_cache", "deserialise_cache", "loopback_transfer", "bench_gemm",
    "attention_pair_flops", "bench_attention", "linear_attention_flops_per_token",
    "bench_linear_attention", "bench_copy", "resolve_device", "device_info", "model_case_name",
    "run_harness", "write_results", "load_results", "case_seconds", "Calibration",
    "match_datasheet_gpu", "link_table", "calibrate_results", "re_id", "calibrate_observations",
    "validate_results", "median_abs_error_pct", "TABLE_FACTORS", "YAML_WIDTH_CHARS", "ObservationFit",
    "LINEAR_FLAVOURS", "RESULTS_SECTIONS", "TIMING_METHOD", "TIMER_WARMUP_CALLS", "clock_s", "micro_table",
    "model_case_table", "transfer_table",
]
