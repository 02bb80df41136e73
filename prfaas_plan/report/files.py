"""The files a page writes: the page itself and its chart images, atomically.

* :func:`export_figures` -- each chart as PNG (2x scale) and SVG, rendered by vl_convert;
* ``_write`` -- a page (and its images) written with :func:`prfaas_plan.data.atomic_write`: a
  failure leaves no partial file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from prfaas_plan.data import atomic_write
from prfaas_plan.errors import InvalidInput
from prfaas_plan.report.bundle import vl_version

if TYPE_CHECKING:
    from prfaas_plan.report.page import Report


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

    vl = vl_version()
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
