"""A sweep grid and its cells: the grid file's model, and every cell built and validated before anything runs.

A grid (a YAML file or a dict, :class:`GridSpec`) names a base scenario and the axes to vary;
:func:`expand_grid` builds every cell's scenario with :meth:`Scenario.with_updates` (its model and
GPUs resolved), so a bad axis name or value is an :class:`~prfaas_plan.errors.InvalidInput` naming
the field. A cell's id hashes everything that determines its result (see :class:`Cell`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, ValidationError

from prfaas_plan import __version__
from prfaas_plan.data import is_dir, is_file, read_yaml, validate, validation_message
from prfaas_plan.defaults import DEFAULT_BUCKETS
from prfaas_plan.errors import InvalidInput, PlanError, did_you_mean, shown
from prfaas_plan.scenario import Scenario, load_scenario
from prfaas_plan.vocab import PlanMode, Policy, SweepRun

SCHEMA = 1
"""Version of the cell record layout; part of every cell's hash."""
RUN_AXES = ("mode", "n_buckets", "duration_s", "policy")
"""Axes that vary how a cell runs rather than its scenario."""
HASH_EXCLUDED = ("id", "name", "description", "assumptions")
"""Scenario fields that do not change any result, left out of the cell hash."""


class GridSpec(BaseModel):
    """A sweep grid file."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str | None = None
    description: str | None = None
    scenario: str
    run: SweepRun = "plan"
    mode: PlanMode = "exact"
    n_buckets: PositiveInt = DEFAULT_BUCKETS
    load: float | None = Field(default=None, gt=0, lt=1, description="sets the scenario's load in every cell")
    seeds: PositiveInt | list[int] | None = Field(default=None, description="simulate: K (seeds 0..K-1) or a list")
    duration_s: PositiveFloat | None = Field(default=None, description="simulate: simulated seconds per run")
    policy: Policy | None = Field(default=None, description="simulate: scheduler policy")
    fixed: dict[str, Any] = {}
    axes: dict[str, list[Any]] = {}


class _RunOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    mode: PlanMode
    n_buckets: PositiveInt
    duration_s: PositiveFloat | None = None
    policy: Policy | None = None


@dataclass(frozen=True)
class Cell:
    """One unit of work: a resolved scenario (as a dict) and how to run it.

    ``cell_id`` hashes everything that determines the result (the full resolved scenario except
    :data:`HASH_EXCLUDED`; the run kind, planner mode and buckets, simulation seed, duration and
    policy; the package version); ``plan_key`` the part that determines the plan (the same for all
    seeds of a simulated cell).
    """

    index: int
    cell_id: str
    plan_key: str
    inputs: dict
    run: str
    mode: str
    n_buckets: int
    duration_s: float | None
    policy: str | None
    seed: int | None
    spec: dict
    origin: str
    model_dirs: tuple[str, ...]


def _flat_fields(data: dict, prefix: str = "") -> list[str]:
    out = []
    for key, value in data.items():
        name = f"{prefix}{key}"
        out.append(name)
        if isinstance(value, dict):
            out.extend(_flat_fields(value, f"{name}."))
    return out


def _digest(payload: dict) -> str:
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _jsonable(value: Any) -> Any:
    """A table cell for an axis value: scalars as they are, lists/dicts as JSON text."""
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True)
    return value


def _load_grid(grid: GridSpec | dict | str | Path) -> tuple[GridSpec, str, Path | None]:
    if isinstance(grid, GridSpec):
        return grid, grid.name or "grid", None
    if isinstance(grid, dict):
        return validate(GridSpec, grid, "grid"), "grid", None
    path = Path(grid)
    if not is_file(path):
        raise InvalidInput(f"grid file {shown(grid)!r} {'is a folder' if is_dir(path) else 'not found'}")
    spec = validate(GridSpec, read_yaml(path), str(path))
    if spec.name is None:
        spec = spec.model_copy(update={"name": path.stem})
    return spec, str(path), path.parent


def grid_axes(grid: dict | str | Path) -> list[str]:
    """The axis names of a grid (validates the grid file's shape only)."""
    return list(_load_grid(grid)[0].axes)


def _base_scenario(ref: str, origin: str, folder: Path | None) -> Scenario:
    """The grid's base scenario: a path relative to the grid file, else as given (id or path)."""
    if folder is not None and not Path(ref).is_absolute():
        beside = folder / ref
        if beside.is_file():
            return load_scenario(beside)
    try:
        return load_scenario(ref)
    except PlanError as exc:
        raise InvalidInput(f"{origin}: scenario: {exc}") from None


def _resolve(sc: Scenario, seen: set) -> None:
    """Resolve a cell's model and GPUs once per distinct value (load_scenario does this for files)."""
    s = sc.spec
    for key, attr in ((("model", s.model), "model"), (("prfaas", s.prfaas.gpu, s.prfaas.gpus_per_instance), "prfaas_instance"),
                      (("local", s.local.gpu, s.local.gpus_per_instance), "local_instance")):
        if key not in seen:
            getattr(sc, attr)
            seen.add(key)


def _describe(assign: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in assign.items())


def _seeds(g: GridSpec, origin: str) -> list[int | None]:
    """The seeds of every cell: one None for a plan grid."""
    simulate = g.run == "simulate"
    if not simulate and (g.seeds is not None or g.duration_s is not None or g.policy is not None):
        raise InvalidInput(f"{origin}: seeds/duration_s/policy: only for run: simulate")
    for name in ("duration_s", "policy"):
        if not simulate and name in g.axes:
            raise InvalidInput(f"{origin}: axes.{name}: only for run: simulate")
    if not simulate:
        return [None]
    if isinstance(g.seeds, list):
        if not g.seeds or len(set(g.seeds)) != len(g.seeds):
            raise InvalidInput(f"{origin}: seeds: give a positive count or a list of distinct integers")
        return list(g.seeds)
    return list(range(g.seeds or 1))


def _fixed(g: GridSpec, origin: str, fields: list[str]) -> dict[str, Any]:
    """The overrides every cell gets (``fixed`` plus the top-level ``load``), the axes checked against them."""
    fixed = dict(g.fixed)
    if g.load is not None:
        if "load" in fixed or "load" in g.axes:
            raise InvalidInput(f"{origin}: load: given twice (top level and in fixed/axes); keep one")
        fixed["load"] = g.load
    for name, values in g.axes.items():
        if name in fixed:
            raise InvalidInput(f"{origin}: axes.{name}: also set in fixed; keep one")
        if not values:
            raise InvalidInput(f"{origin}: axes.{name}: give at least one value")
        if len({json.dumps(v, sort_keys=True, default=str) for v in values}) != len(values):
            raise InvalidInput(f"{origin}: axes.{name}: repeated values {values}")
    for name in [*fixed, *g.axes]:
        if name not in RUN_AXES and name not in fields:
            raise InvalidInput(f"{origin}: axes/fixed: {name!r} is not a scenario field"
                               f"{did_you_mean(name, [*fields, *RUN_AXES])}; use dotted names such as link.gbps")
    if any(name in fixed for name in RUN_AXES):
        raise InvalidInput(f"{origin}: fixed: set {', '.join(RUN_AXES)} at the top level of the grid")
    return fixed


def _checked_base(g: GridSpec, base: Scenario, fixed: dict, origin: str, seen: set) -> Scenario:
    """The base scenario with ``fixed`` applied, and each axis value alone tried on it (so that an
    error names the one value at fault)."""
    try:
        base = base.with_updates(**fixed) if fixed else base
        _resolve(base, seen)
    except PlanError as exc:
        raise InvalidInput(f"{origin}: fixed: {exc}") from None
    for name, values in g.axes.items():
        if name in RUN_AXES:
            continue
        for v in values:
            try:
                _resolve(base.with_updates(**{name: v}), seen)
            except PlanError as exc:
                raise InvalidInput(f"{origin}: axes.{name} = {v!r}: {exc}") from None
    return base


def _cells_of(g: GridSpec, base: Scenario, assign: dict, seeds: list, origin: str, seen: set, first: int) -> list[Cell]:
    """The cells (one per seed) of one combination ``assign`` of axis values."""
    try:
        opts = _RunOptions.model_validate({"mode": assign.get("mode", g.mode),
                                           "n_buckets": assign.get("n_buckets", g.n_buckets),
                                           "duration_s": assign.get("duration_s", g.duration_s),
                                           "policy": assign.get("policy", g.policy)})
    except ValidationError as exc:
        raise InvalidInput(validation_message(f"{origin}: axes ({_describe(assign)})", exc)) from None
    updates = {k: v for k, v in assign.items() if k not in RUN_AXES}
    try:
        sc = base.with_updates(**updates) if updates else base
        _resolve(sc, seen)
    except PlanError as exc:
        raise InvalidInput(f"{origin}: cell {_describe(assign)}: {exc}") from None
    version = {"sweep": SCHEMA, "version": __version__}
    spec = sc.spec.model_dump(mode="json")
    hashed = {k: v for k, v in spec.items() if k not in HASH_EXCLUDED}
    plan_key = _digest({**version, "scenario": hashed, "mode": opts.mode, "n_buckets": opts.n_buckets})
    inputs = {k: _jsonable(v) for k, v in assign.items()}
    dirs = tuple(str(d) for d in base.extra_model_dirs)
    cells = []
    for seed in seeds:
        cid = _digest({**version, "plan": plan_key, "run": g.run, "seed": seed,
                       "duration_s": opts.duration_s, "policy": opts.policy})
        cells.append(Cell(first + len(cells), cid, plan_key, inputs, g.run, opts.mode, opts.n_buckets,
                          opts.duration_s, opts.policy, seed, spec, sc.origin, dirs))
    return cells


def expand_grid(grid: GridSpec | dict | str | Path) -> tuple[GridSpec, Scenario, list[Cell]]:
    """Validate a grid and build every cell; any bad axis name or value raises PlanError
    (naming it) before anything runs."""
    g, origin, folder = _load_grid(grid)
    base = _base_scenario(g.scenario, origin, folder)
    seeds = _seeds(g, origin)
    fixed = _fixed(g, origin, _flat_fields(base.spec.model_dump()))
    seen: set = set()
    base = _checked_base(g, base, fixed, origin, seen)
    names = list(g.axes)
    cells: list[Cell] = []
    for combo in itertools.product(*(g.axes[n] for n in names)):
        cells += _cells_of(g, base, dict(zip(names, combo)), seeds, origin, seen, len(cells))
    return g, base, cells
