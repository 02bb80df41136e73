"""Inter-datacenter link tiers a sizing chooses between: leased lines at a fixed monthly price, or
metered egress at a price per GB, read from a validated YAML file (default ``cost_db/link_tiers.yaml``).

Gbps = 1e9 bit/s; GB = 1e9 bytes; a month is :data:`HOURS_PER_MONTH` hours; prices US dollars.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat, model_validator

from prfaas_plan.data import builtin_dir, read_yaml, validate
from prfaas_plan.errors import InvalidInput
from prfaas_plan.units import BITS_PER_BYTE, GB_BYTES, GBPS_BITS_PER_S, SECONDS_PER_HOUR

HOURS_PER_MONTH = 730.0
"""Hours in a billing month (8,760 h / 12), as cloud price lists convert port-hours to months."""
GB_PER_HOUR_PER_GBPS = SECONDS_PER_HOUR * GBPS_BITS_PER_S / BITS_PER_BYTE / GB_BYTES
"""GB (1e9 bytes) shipped in an hour at 1 Gbps (1e9 bit/s)."""


@dataclass(frozen=True)
class LinkTier:
    """One way to buy the inter-DC link: nominal ``gbps``, a fixed ``usd_per_month``, a metered
    ``usd_per_gb`` (either or both), and the ``source`` URL of the price."""

    id: str
    gbps: float
    usd_per_month: float = 0.0
    usd_per_gb: float = 0.0
    source: str = ""

    @property
    def fixed_usd_per_hour(self) -> float:
        """The fixed part of the price, dollars per hour."""
        return self.usd_per_month / HOURS_PER_MONTH

    def usd_per_hour(self, egress_gbps: float) -> float:
        """Dollars per hour carrying a mean ``egress_gbps``: fixed part plus metered bytes."""
        return self.fixed_usd_per_hour + self.usd_per_gb * GB_PER_HOUR_PER_GBPS * egress_gbps


class _TierSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    id: str = Field(min_length=1)
    gbps: PositiveFloat
    usd_per_month: NonNegativeFloat = 0.0
    usd_per_gb: NonNegativeFloat = 0.0
    source: str = Field(pattern=r"^https?://", description="URL of the price")
    note: str | None = None


class _TiersFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    read: str
    tiers: list[_TierSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> _TiersFile:
        ids = [t.id for t in self.tiers]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"tier ids must be unique; repeated: {', '.join(dup)}")
        return self


def default_tiers_path() -> Path:
    """The bundled link-tier file."""
    return builtin_dir("prfaas_plan.data.cost_db") / "link_tiers.yaml"


def load_link_tiers(path: Path | str | None = None) -> tuple[LinkTier, ...]:
    """The link tiers of a YAML file (``read:`` date, ``tiers:`` list of id, gbps, usd_per_month,
    usd_per_gb, source); the bundled file when ``path`` is None. A missing or malformed file is a
    one-line InvalidInput naming ``--link-tiers``."""
    path = default_tiers_path() if path is None else Path(path)
    try:
        spec = validate(_TiersFile, read_yaml(path), str(path))
    except InvalidInput as exc:
        raise InvalidInput(f"--link-tiers: {exc}") from None
    return tuple(LinkTier(t.id, t.gbps, t.usd_per_month, t.usd_per_gb, t.source) for t in spec.tiers)


__all__ = ["GB_PER_HOUR_PER_GBPS", "HOURS_PER_MONTH", "LinkTier", "default_tiers_path", "load_link_tiers"]
