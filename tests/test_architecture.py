"""The package's architecture, held by tests: layers, no cycles, one idea per module, short functions.

The layers follow the data flow (docs/design.md section 2): model and hardware -> cache bytes ->
latency -> link -> workload -> scenario -> queueing -> plan -> simulate -> sweep -> analysis ->
report / bench -> CLI. A module may import from its own layer or a lower one, at module level or
inside a function; the import graph (function-level imports included) has no cycle.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "prfaas_plan"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "units", "vocab", "defaults", "display", "extensions", "quiet", "tabular"),
    ("data",),
    ("model", "hardware", "layout", "engine"),
    ("kvcache",),
    ("perf",),
    ("bandwidth", "catalog", "energy"),
    ("workload",),
    ("scenario",),
    ("queueing", "serving", "handoff"),
    ("planner",),
    ("sim",),
    ("sweeps", "sizing"),
    ("analysis", "validate", "inferencex"),
    ("report", "bench"),
    ("cli",),
)
"""Top-level parts of ``prfaas_plan``, low to high."""

LAYER_OF = {part: rank for rank, parts in enumerate(LAYERS) for part in parts}

MAX_FUNCTION_LINES = 80
REPORT_LAYOUT = ("report",)
"""Parts whose functions lay out pages: long, flat sequences of sections, exempt from the limit."""


@dataclass(frozen=True)
class Import:
    """One import statement of a package module: who imports what, where."""

    importer: str
    imported: str
    line: int


def module_name(path: Path) -> str:
    """``prfaas_plan.x.y`` of a file under the package (a package's ``__init__`` is the package)."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """Every import of another package module in ``path``, function-level ones included.

    Imports under ``if TYPE_CHECKING:`` are left out: they name types for annotations and never
    run, which is how a lower module types a field whose class lives higher up."""
    found = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.If) and _is_type_checking(node.test)
                   for stmt in node.body for inner in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert node.level == 0, f"{name}:{node.lineno}: relative import"
            # ``from pkg import mod`` imports the module; ``from pkg import name``, the package
            targets = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module
                       for alias in node.names]
        for target in targets:
            if target in modules and target != name:
                found.append(Import(name, target, node.lineno))
    return found


def _is_type_checking(test: ast.expr) -> bool:
    """``TYPE_CHECKING`` or ``typing.TYPE_CHECKING``."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def part_of(name: str) -> str:
    """The top-level part (``planner`` of ``prfaas_plan.planner.milp``); '' for the package itself."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


@pytest.fixture(scope="module")
def graph() -> tuple[dict[str, Path], list[Import]]:
    modules = package_modules()
    return modules, [imp for name, path in modules.items() for imp in imports_of(name, path, modules)]


def test_every_part_is_in_a_layer(graph):
    modules, _ = graph
    unplaced = sorted({part_of(name) for name in modules} - set(LAYER_OF) - {"", "__main__"})
    assert not unplaced, f"add these parts of prfaas_plan to LAYERS: {unplaced}"


def test_no_import_reaches_a_higher_layer(graph):
    _, edges = graph
    upward = sorted({f"{e.importer}:{e.line} imports {e.imported}" for e in edges
              if part_of(e.importer) in LAYER_OF and part_of(e.imported) in LAYER_OF
              and LAYER_OF[part_of(e.imported)] > LAYER_OF[part_of(e.importer)]})
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_no_import_cycle_even_through_function_level_imports(graph):
    modules, edges = graph
    g = nx.DiGraph()
    g.add_nodes_from(modules)
    g.add_edges_from((e.importer, e.imported) for e in edges)
    cycles = list(nx.simple_cycles(g))
    assert not cycles, f"import cycles: {cycles[:5]}"


def test_the_lazy_api_names_only_modules_that_exist():
    import prfaas_plan

    modules = package_modules()
    missing = {name: mod for name, mod in prfaas_plan._EXPORTS.items() if f"prfaas_plan.{mod}" not in modules}
    assert not missing


def test_every_module_names_its_one_idea_in_its_first_docstring_line():
    missing = [name for name, path in package_modules().items()
               if not (doc := ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))) or not doc.split("\n")[0].strip()]
    assert not missing, f"modules without a first docstring line: {missing}"


def test_no_function_is_longer_than_80_lines_outside_report_layout():
    long = []
    for name, path in package_modules().items():
        if part_of(name) in REPORT_LAYOUT:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{name}.{node.name}: {lines} lines")
    assert not long, "split these functions:\n" + "\n".join(long)


def test_the_contract_catches_an_upward_import(tmp_path):
    # the checker itself: a planner module importing the simulator is reported
    fake = tmp_path / "prfaas_plan" / "planner" / "x.py"
    fake.parent.mkdir(parents=True)
    fake.write_text('"""x."""\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from prfaas_plan.report import Report\n'
                    'def f():\n    from prfaas_plan.sim import simulate\n')
    modules = {"prfaas_plan.planner.x": fake, "prfaas_plan.sim": fake, "prfaas_plan.report": fake}
    (edge,) = imports_of("prfaas_plan.planner.x", fake, modules)  # the annotation-only import is not one
    assert edge.imported == "prfaas_plan.sim" and edge.line == 6
    assert LAYER_OF[part_of(edge.imported)] > LAYER_OF[part_of(edge.importer)]


def test_every_folder_of_the_package_is_a_regular_package():
    # setuptools' packages.find ships only folders with an __init__.py: a namespace folder would
    # work in the editable checkout and be missing from a wheel
    folders = {p.parent for p in PACKAGE.rglob("*.py")} | {p.parent for p in PACKAGE.rglob("*.yaml")}
    kernels = PACKAGE / "data" / "hardware_db" / "kernels"  # data only, shipped by package-data globs
    assert not sorted(str(f.relative_to(PACKAGE)) for f in folders
                      if not (f / "__init__.py").exists() and f.name != "grids" and not f.is_relative_to(kernels))


def test_every_data_file_is_shipped_by_a_package_data_glob():
    # a data file no glob names works in the editable checkout and is missing from a wheel (as the
    # engine profiles were once)
    import tomllib

    globs = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    data = PACKAGE / "data"
    shipped = {p for pattern in globs["prfaas_plan.data"] for p in data.glob(pattern)}
    files = {p for p in data.rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc")}
    assert not sorted(str(p.relative_to(data)) for p in files - shipped)
