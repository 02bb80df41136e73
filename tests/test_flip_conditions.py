"""scripts/flip_conditions.py: finds every if/elif condition and replaces exactly its text."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "flip_conditions.py"
spec = importlib.util.spec_from_file_location("flip_conditions", SCRIPT)
flip = importlib.util.module_from_spec(spec)
spec.loader.exec_module(flip)


def test_every_if_and_elif_is_found_in_source_order():
    src = "if a:\n    pass\nelif b:\n    if c: pass\nelse:\n    pass\nx = 1 if d else 2\n"
    assert [ast.unparse(c) for c in flip.conditions(src)] == ["a", "b", "c"]  # an if-expression is not a branch


def test_a_flip_replaces_exactly_the_condition_across_lines_and_after_non_ascii_text():
    src = "s = 'é'\nif (a and\n        b):  # ü\n    pass\nelif s == 'ü': pass\n"
    first, second = flip.conditions(src)
    assert flip.flipped(src, first, True) == "s = 'é'\nif ((True)):  # ü\n    pass\nelif s == 'ü': pass\n"
    assert flip.flipped(src, second, False) == "s = 'é'\nif (a and\n        b):  # ü\n    pass\nelif (False): pass\n"
