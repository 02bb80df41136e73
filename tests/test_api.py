"""The package's public names: each is the function or class it names, however often used."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
import types

import prfaas_plan as pp


def test_exported_names_stay_callables_after_every_submodule_is_imported():
    # importing a submodule binds it as a package attribute; no export may share a module's name
    for info in pkgutil.walk_packages(pp.__path__, "prfaas_plan."):
        if not info.name.startswith("prfaas_plan.bench"):  # bench imports torch lazily anyway
            importlib.import_module(info.name)
    for name in pp.__all__:
        value = getattr(pp, name)
        assert not isinstance(value, types.ModuleType), f"pp.{name} is a module"


def test_simulate_and_sweep_callable_twice_in_one_session():
    # a notebook calls pp.simulate twice; the second call used to hit the submodule
    code = (
        "import prfaas_plan as pp\n"
        "f1 = pp.simulate; s1 = pp.sweep\n"
        "import prfaas_plan.sim, prfaas_plan.sweeps\n"
        "assert callable(pp.simulate) and pp.simulate is f1, pp.simulate\n"
        "assert callable(pp.sweep) and pp.sweep is s1, pp.sweep\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
