"""Units and token-count parsing.

Conventions used everywhere in the package:

* ``K`` in a token count is 1024 (``32K`` = 32,768 tokens), as in the PrfaaS paper's Table 5.
* MiB = 2**20 bytes, GiB = 2**30 bytes; GB = 1e9 bytes, TB = 1e12 bytes.
* Gbps = 1e9 bit/s; a byte is 8 bits.
"""

from __future__ import annotations

import re

from prfaas_plan.errors import InvalidInput, shown

MIB_BYTES = 2**20
GIB_BYTES = 2**30
GB_BYTES = 10**9
TB_BYTES = 10**12
BITS_PER_BYTE = 8
GBPS_BITS_PER_S = 1e9
TOKENS_PER_K = 1024
TOKENS_PER_M = 1024 * 1024
MAX_TOKENS = 2**40  # a token count above this (1T tokens) is a typo, not a context length
SECONDS_PER_HOUR = 3600.0
MS_PER_S = 1000.0
TOKENS_PER_MILLION = 1e6  # prices per "million tokens" are decimal, unlike the K/M of context lengths


def usd_per_million_tokens(usd_per_hour: float, rate_rps: float, tokens_per_request: float) -> float:
    """Dollars per million tokens (decimal) at ``rate_rps`` requests/s of ``tokens_per_request``
    tokens each, costing ``usd_per_hour``; inf when nothing is served."""
    tokens_per_hour = rate_rps * SECONDS_PER_HOUR * tokens_per_request
    return usd_per_hour / tokens_per_hour * TOKENS_PER_MILLION if tokens_per_hour > 0 else float("inf")

DTYPE_BYTES: dict[str, float] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5}

_TOKENS_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*$")


def parse_tokens(text: str | int, field: str = "context") -> int:
    """Parse a token count such as ``32K``, ``32k``, ``1M`` or ``32768`` (K = 1024, M = 1024**2).

    Raises :class:`PlanError` naming ``field`` for anything that is not a positive whole count
    (``1.5`` tokens is an error; ``1.5K`` is 1,536 tokens).
    """
    if isinstance(text, int):
        value = text
    else:
        match = _TOKENS_RE.match(str(text))
        if not match:
            raise InvalidInput(
                f"{field}: {shown(repr(text))} is not a token count; use e.g. 32K, 32k or 32768 (K = 1024)"
            )
        number, suffix = float(match.group(1)), match.group(2).upper()
        exact = number * {"": 1, "K": TOKENS_PER_K, "M": TOKENS_PER_M}[suffix]
        if exact > MAX_TOKENS:  # also a number too long for a float (inf)
            raise InvalidInput(f"{field}: {shown(repr(text))} is more than {MAX_TOKENS:,} tokens; give a context length")
        value = round(exact)
        if exact != value:
            raise InvalidInput(f"{field}: {text!r} is {exact:,g} tokens, not a whole number; give e.g. {max(value, 1)}")
    if value <= 0:
        raise InvalidInput(f"{field}: {text!r} must be a positive number of tokens")
    return int(value)


def parse_token_list(text: str, field: str = "context") -> list[int]:
    """Parse a comma-separated list of token counts (``1K,8K,32K``)."""
    items = [part for part in str(text).split(",") if part.strip()]
    if not items:
        raise InvalidInput(f"{field}: give at least one token count, e.g. 1K,8K,32K")
    return [parse_tokens(part, field) for part in items]


def format_tokens(tokens: int) -> str:
    """``32768`` -> ``32K``; counts that are not whole K are printed as they are."""
    if tokens >= TOKENS_PER_M and tokens % TOKENS_PER_M == 0:
        return f"{tokens // TOKENS_PER_M}M"
    if tokens >= TOKENS_PER_K and tokens % TOKENS_PER_K == 0:
        return f"{tokens // TOKENS_PER_K}K"
    return str(tokens)


def bytes_per_s_to_gbps(bytes_per_s: float) -> float:
    """Bytes per second to Gbps (1e9 bit/s)."""
    return bytes_per_s * BITS_PER_BYTE / GBPS_BITS_PER_S
