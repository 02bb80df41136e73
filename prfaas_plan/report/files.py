"""The files around a page: the Vega JavaScript bundle, chart images, and writing a page.

* :func:`vega_bundle` -- the Vega, Vega-Lite and vega-embed JavaScript every page inlines, built by
  vl_convert and cached on disk;
* :func:`export_figures` -- each chart as PNG (2x scale) and SVG, rendered by vl_convert;
* ``_write`` -- a page (and its images) written atomically: a failure leaves no partial file.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from prfaas_plan.data import atomic_write
from prfaas_plan.errors import InvalidInput, PlanError

if TYPE_CHECKING:
    from prfaas_plan.report.page import Report


# ----------------------------------------------------------------------------- JavaScript bundle
def _vl_version() -> str | None:
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

    vl = _vl_version()
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


# ----------------------------------------------------------------------------- files
def _check_png_dir(png_dir) -> Path | None:
    if png_dir is None:
        return None
    d = Path(png_dir)
    if d.exists() and not d.is_dir():
        raise InvalidInput(f"--png: {d} exists and is not a folder")
    if not d.exists():
        parent = d.parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            raise InvalidInput(f"--png: cannot create folder {d} (parent {parent} is not writable)")
    elif not os.access(d, os.W_OK | os.X_OK):
        raise InvalidInput(f"--png: cannot write to folder {d} (permission denied)")
    return d


def _render_images(report: Report, specs: dict) -> dict[str, bytes]:
    """PNG (2x) and SVG of every chart, rendered by vl_convert, keyed by file name."""
    import vl_convert as vlc

    vl = _vl_version()
    kw = {"vl_version": vl} if vl else {}
    out = {}
    for name, spec in specs.items():
        out[f"{name}.png"] = vlc.vegalite_to_png(spec, scale=2, **kw)
        out[f"{name}.svg"] = vlc.vegalite_to_svg(spec, **kw).encode("utf-8")
    return out


def export_figures(report: Report, png_dir) -> list[Path]:
    """Write each chart of ``report`` as ``NAME.png`` (2x scale) and ``NAME.svg`` into ``png_dir``."""
    d = _check_png_dir(png_dir)
    images = _render_images(report, report.specs())
    return _write_images(d, images)


def _write_images(d: Path, images: dict[str, bytes]) -> list[Path]:
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidInput(f"--png: cannot create folder {d} ({exc.strerror or exc})") from None
    paths = []
    for name, data in images.items():
        atomic_write(d / name, data)
        paths.append(d / name)
    return paths


def _write(report: Report, path: Path, png_dir: Path | None) -> Path:
    specs = report.specs()
    page = report.to_html(specs=specs).encode("utf-8")
    if png_dir is not None:  # images first: if their folder fails, no page is left behind either
        _write_images(png_dir, _render_images(report, specs))
    atomic_write(path, page)
    return path
