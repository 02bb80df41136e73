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


def test_tests_that_pass_fail_or_hang_past_the_timeout(tmp_path):
    """A passing file passes; a failing one does not; one that sleeps past the timeout is killed
    (with the process it started) and counts as not passing, i.e. the flip as decided."""
    import os
    import time

    (tmp_path / "test_ok.py").write_text("def test_ok():\n    assert 1 + 1 == 2\n")
    (tmp_path / "test_no.py").write_text("def test_no():\n    assert 1 + 1 == 3\n")
    pid_file = tmp_path / "child.pid"
    (tmp_path / "test_hang.py").write_text(
        "import subprocess, sys, time\n"
        "def test_hang():\n"
        "    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"    open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "    time.sleep(60)\n")
    env = {**os.environ}
    assert flip.tests_pass(["test_ok.py"], tmp_path, env, 60.0)
    assert not flip.tests_pass(["test_no.py"], tmp_path, env, 60.0)
    start_s = time.monotonic()
    assert not flip.tests_pass(["test_hang.py"], tmp_path, env, 3.0)
    assert time.monotonic() - start_s < 30
    child = int(pid_file.read_text())
    time.sleep(0.2)
    try:  # gone, or a zombie nobody has reaped yet
        state = Path(f"/proc/{child}/stat").read_text().split()[2]
    except (FileNotFoundError, ProcessLookupError):
        state = "gone"
    assert state in ("gone", "Z")
