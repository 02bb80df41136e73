"""Energy of a deployment: GPU power at load, facility overhead (PUE) and the price of electricity.

A GPU draws its TDP (``hardware_db`` ``tdp_w``) unless a measured :class:`PowerProfile` gives its
power as a function of utilisation (linear between the measured points). A site multiplies IT
power by its PUE (facility power / IT power) and pays ``usd_per_kwh``. The defaults per site
(``prfaas`` and ``local``) come from ``data/cost_db/sites.yaml``, each with its source.

Power is watts, energy kWh, prices US dollars, utilisation a fraction 0-1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from prfaas_plan.data import builtin_dir, read_yaml, validate
from prfaas_plan.errors import InvalidInput
from prfaas_plan.units import SECONDS_PER_HOUR, TOKENS_PER_MILLION

if TYPE_CHECKING:
    from prfaas_plan.hardware import GPU

WATTS_PER_KW = 1000.0


@dataclass(frozen=True)
class SiteEnergy:
    """A site's power usage effectiveness (facility / IT power, >= 1) and electricity price ($/kWh)."""

    pue: float
    usd_per_kwh: float

    def __post_init__(self) -> None:
        if not self.pue >= 1:
            raise InvalidInput(f"pue: {self.pue!r} is below 1 (facility power cannot be less than IT power)")
        if not self.usd_per_kwh >= 0:
            raise InvalidInput(f"usd_per_kwh: {self.usd_per_kwh!r} is negative; give a price >= 0")


@dataclass(frozen=True)
class PowerProfile:
    """A GPU's measured power (watts) at some utilisations (0-1, increasing); linear in between,
    constant beyond the ends."""

    utilisation: tuple[float, ...]
    power_w: tuple[float, ...]
    source: str = ""

    def __post_init__(self) -> None:
        u = np.asarray(self.utilisation, dtype=float)
        if len(u) < 2 or len(u) != len(self.power_w) or np.any(np.diff(u) <= 0) or u[0] < 0 or u[-1] > 1:
            raise InvalidInput("power profile: give at least two increasing utilisations in 0-1, one power each")
        if min(self.power_w) <= 0:
            raise InvalidInput("power profile: every power must be positive watts")


def gpu_power_w(gpu: GPU, utilisation: float, profile: PowerProfile | None = None) -> float:
    """One GPU's power (watts) at ``utilisation``: the measured profile when given, else its TDP."""
    if profile is None:
        return float(gpu.tdp_w)
    u = min(max(float(utilisation), 0.0), 1.0)
    return float(np.interp(u, profile.utilisation, profile.power_w))


def energy_usd_per_hour(gpu: GPU, gpus: int, utilisation: float, site: SiteEnergy,
                        profile: PowerProfile | None = None) -> float:
    """Dollars per hour of electricity for ``gpus`` GPUs at ``utilisation``, facility overhead included."""
    return facility_power_w(gpu, gpus, utilisation, site, profile) / WATTS_PER_KW * site.usd_per_kwh


def facility_power_w(gpu: GPU, gpus: int, utilisation: float, site: SiteEnergy,
                     profile: PowerProfile | None = None) -> float:
    """Facility power (watts) of ``gpus`` GPUs at ``utilisation``: GPU power times the site's PUE."""
    return gpus * gpu_power_w(gpu, utilisation, profile) * site.pue


def kwh_per_million_tokens(total_power_w: float, tokens_per_s: float) -> float:
    """kWh per million tokens served at ``tokens_per_s`` drawing ``total_power_w`` (inf at no tokens)."""
    if tokens_per_s <= 0:
        return float("inf")
    return total_power_w / WATTS_PER_KW / (tokens_per_s * SECONDS_PER_HOUR / TOKENS_PER_MILLION)


class _SiteSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    pue: float = Field(ge=1)
    usd_per_kwh: float = Field(ge=0)
    sources: list[dict] = Field(min_length=1)


class _SitesFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    read: str
    sites: dict[str, _SiteSpec]


@lru_cache(maxsize=1)
def default_sites() -> Mapping[str, SiteEnergy]:
    """The bundled energy defaults per site (``prfaas``, ``local``) from ``cost_db/sites.yaml``, read-only
    (every caller shares the one cached mapping)."""
    path = builtin_dir("prfaas_plan.data.cost_db") / "sites.yaml"
    spec = validate(_SitesFile, read_yaml(path), str(path))
    return MappingProxyType({name: SiteEnergy(s.pue, s.usd_per_kwh) for name, s in spec.sites.items()})


__all__ = ["PowerProfile", "SiteEnergy", "default_sites", "energy_usd_per_hour", "facility_power_w", "gpu_power_w",
           "kwh_per_million_tokens"]
