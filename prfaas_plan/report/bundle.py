"""The Vega, Vega-Lite and vega-embed JavaScript every page inlines, built by vl_convert and cached on disk."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from prfaas_plan.data import atomic_write
from prfaas_plan.errors import PlanError


def vl_version() -> str | None:
    """The Vega-Lite version (major.minor) altair writes, when vl_convert has it."""
    import altair as alt
    import vl_convert as vlc

    want = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    return want if want in vlc.get_vegalite_versions() else None


def _cache_dir() -> Path:
    base = os.environ.get("PRFAAS_PLAN_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "prfaas-plan")
    return Path(base)


@lru_cache(maxsize=1)
def vega_bundle() -> str:
    """The Vega, Vega-Lite and vega-embed JavaScript as one string, with no external references
    (``vl_convert.javascript_bundle``, which defines ``window.vegaEmbed``). Building it takes a few
    seconds, so it is cached in ``$PRFAAS_PLAN_CACHE_DIR`` (default ``~/.cache/prfaas-plan``) under
    a name that includes the vl-convert and Vega-Lite versions; an unwritable cache is skipped."""
    from importlib.metadata import version

    import vl_convert as vlc

    vl = vl_version()
    path = _cache_dir() / f"vega-bundle-vlconvert{version('vl-convert-python')}-vl{vl or 'latest'}.js"
    try:
        text = path.read_text(encoding="utf-8")
        if "window.vegaEmbed" in text:
            return text
    except OSError:
        pass
    text = vlc.javascript_bundle(vl_version=vl) if vl else vlc.javascript_bundle()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, text.encode("utf-8"))
    except (OSError, PlanError):
        pass
    return text
