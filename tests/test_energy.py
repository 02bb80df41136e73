"""Energy (prfaas_plan.energy): GPU power at load, PUE and $/kWh per site, kWh per million tokens,
checked against the closed forms from the hardware database's TDP and the bundled site file."""

from __future__ import annotations

import math

import pytest

import prfaas_plan as pp
from prfaas_plan.energy import (
    PowerProfile,
    SiteEnergy,
    default_sites,
    energy_usd_per_hour,
    facility_power_w,
    gpu_power_w,
    kwh_per_million_tokens,
)
from prfaas_plan.errors import InvalidInput


def test_tdp_by_default_at_any_load():
    h200 = pp.load_gpu("h200")
    assert gpu_power_w(h200, 0.1) == gpu_power_w(h200, 1.0) == h200.tdp_w == 700


def test_measured_profile_is_interpolated_and_clamped():
    h20 = pp.load_gpu("h20")
    prof = PowerProfile((0.0, 0.5, 1.0), (100.0, 300.0, 400.0), "made-up points")
    assert gpu_power_w(h20, 0.25, prof) == pytest.approx(200.0)
    assert gpu_power_w(h20, 0.75, prof) == pytest.approx(350.0)
    assert gpu_power_w(h20, 2.0, prof) == 400.0 and gpu_power_w(h20, -1.0, prof) == 100.0


def test_dollars_per_hour_closed_form():
    site = SiteEnergy(pue=1.5, usd_per_kwh=0.10)
    h200 = pp.load_gpu("h200")
    # 8 GPUs x 700 W x 1.5 = 8.4 kW; for an hour at $0.10/kWh = $0.84
    assert facility_power_w(h200, 8, 0.7, site) == pytest.approx(8400.0)
    assert energy_usd_per_hour(h200, 8, 0.7, site) == pytest.approx(0.84)


def test_kwh_per_million_tokens_closed_form():
    # 10 kW serving 1,000 tokens/s: 3.6 M tokens per hour for 10 kWh
    assert kwh_per_million_tokens(10_000.0, 1_000.0) == pytest.approx(10.0 / 3.6)
    assert math.isinf(kwh_per_million_tokens(10_000.0, 0.0))


def test_bundled_sites_have_sources():
    sites = default_sites()
    assert set(sites) == {"prfaas", "local"}
    for s in sites.values():
        assert 1.0 <= s.pue <= 2.5 and 0 < s.usd_per_kwh < 1


def test_bundled_sites_are_read_only():
    """Every caller shares the one cached mapping, so it cannot be changed under the others."""
    sites = default_sites()
    with pytest.raises(TypeError):
        sites["local"] = sites["prfaas"]  # type: ignore[index]
    assert default_sites() is sites


@pytest.mark.parametrize("kwargs, field", [({"pue": 0.9, "usd_per_kwh": 0.1}, "pue"),
                                           ({"pue": 1.2, "usd_per_kwh": -0.1}, "usd_per_kwh")])
def test_bad_site(kwargs, field):
    with pytest.raises(InvalidInput, match=field):
        SiteEnergy(**kwargs)


@pytest.mark.parametrize("u, w", [((0.5, 0.2), (1.0, 2.0)), ((0.0,), (1.0,)), ((0.0, 1.0), (1.0, 0.0))])
def test_bad_profile(u, w):
    with pytest.raises(InvalidInput, match="power profile"):
        PowerProfile(u, w)


def test_sizing_charges_energy_at_the_site_price():
    """A plan's energy line is its GPUs' TDP x PUE x $/kWh, the bundled sites' figures."""
    sc = pp.load_scenario("paper-case-study")
    res = pp.size(sc, 1.0, gpus=("h200", "h20"), n_buckets=16)
    sites = default_sites()
    for c in res.candidates:
        if not c.feasible:
            continue
        expected = sum(p.gpus * pp.load_gpu(p.gpu).tdp_w * sites[p.site].pue * sites[p.site].usd_per_kwh / 1000
                       for p in c.pools)
        assert c.energy_usd_per_hour == pytest.approx(expected)
        watts = sum(p.gpus * pp.load_gpu(p.gpu).tdp_w * sites[p.site].pue for p in c.pools)
        assert c.energy_kwh_per_million_tokens == pytest.approx(
            watts / 1000 / (1.0 * c.tokens_per_request * 3600 / 1e6))
