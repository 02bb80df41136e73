"""The defaults: every value the tool assumes when the user does not say, in one place.

Each is imported from here by the library, the CLI and the reports, so that the API and the command
line give the same answer for the same (omitted) input. Token counts are plain tokens (K = 1024 only
where a comment says so).
"""

from __future__ import annotations

# The paper's case-study workload: ln(input tokens) ~ Normal(9.90, 1.00^2), truncated to
# [128, 131072] tokens (128K with K = 1024), and 1,024 output tokens per request.
PAPER_MU_LOG_TOKENS = 9.90
PAPER_SIGMA_LOG_TOKENS = 1.00
PAPER_MIN_TOKENS = 128
PAPER_MAX_TOKENS = 131072
PAPER_OUTPUT_TOKENS = 1024

DEFAULT_LINK_EFFICIENCY = 0.9
"""Fraction of a link's line rate that KV transfers achieve (the paper's planning assumption)."""

DEFAULT_BUCKETS = 128
"""Length buckets of the exact (MILP) planner."""

DEFAULT_SIM_DURATION_S = 600.0
"""Simulated time of ``simulate`` and of a report's simulation, seconds."""

DEFAULT_CLUSTER_GPUS = 512
"""GPUs of the prefill cluster whose egress (Eq. 2) ``bandwidth`` and ``compare`` chart."""

DEFAULT_CONTEXT_TOKENS = 32768
"""Context length (32K, K = 1024) at which ``compare`` sizes per-request cache bytes."""

PREFIX_BLOCK_TOKENS = 512
"""Tokens per prefix-cache block (Mooncake's ``hash_ids`` granularity)."""

DEFAULT_COMPARE_MODELS: tuple[str, ...] = (
    "minimax-m2.5", "qwen3-235b-a22b", "qwen3.5-397b-a17b", "mimo-v2-flash", "ring-2.5-1t", "kimi-linear-1t",
)
"""The paper's models: dense-attention MiniMax-M2.5 and Qwen3-235B beside the hybrids."""

DEFAULT_INSTANCE_GPUS = 8
"""GPUs per serving instance (one 8-GPU node), of scenario pools and of ``bandwidth``/``compare``."""

DEFAULT_LINK_GBPS = 100.0
"""Inter-DC line rate, Gbps (the paper's 100 Gbps VPC), of ``bandwidth`` and a quick ``plan``."""

DEFAULT_ENGINE_PROFILE = "vllm"
"""The serving-engine profile (``data/engine_db``) an instance or scenario runs when it names none."""
