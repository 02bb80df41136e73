"""Compiled modules of a package loaded on their own, without running the package's ``__init__``.

scipy's packages import much more than the one extension a command needs (``scipy.special``'s
array-API layer, ``scipy.optimize``'s linalg and fft: 0.4-0.7 s of start-up); the extension
itself loads in milliseconds. Callers fall back to the package import when this returns None.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_extension(folder: Path, stem: str, name: str) -> ModuleType | None:
    """The compiled module ``folder/stem.*`` loaded as ``name`` (the one already imported under
    that name, if any), or None when there is none or it does not load on its own."""
    if name in sys.modules:
        return sys.modules[name]
    for path in sorted(Path(folder).glob(f"{stem}.*")):
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            continue
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except ImportError:
            return None
        return module
    return None
