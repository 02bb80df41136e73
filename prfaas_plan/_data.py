"""Reading validated YAML data files (models, hardware, scenarios) with one-line errors."""

from __future__ import annotations

import os
import tempfile
from importlib import resources
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from .errors import PlanError, did_you_mean

T = TypeVar("T", bound=BaseModel)


def read_yaml(path: Path) -> dict:
    """Parse one YAML mapping; a syntax error or a non-mapping is a one-line PlanError."""
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise PlanError(f"{path}: file not found") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise PlanError(f"{path}:{where}: malformed YAML ({problem}); fix the syntax") from None
    if not isinstance(data, dict):
        raise PlanError(f"{path}: expected a YAML mapping of fields at the top level")
    return data


def validation_message(origin: str, exc: ValidationError) -> str:
    """The first pydantic error as 'origin: field a.b: message'."""
    err = exc.errors()[0]
    loc = ".".join(str(part) for part in err["loc"])
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = "unknown field; remove it or check the spelling"
    elif err["type"] == "missing":
        msg = "missing required field"
    extra = f" ({len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{origin}: field {loc or '(top level)'}: {msg}{extra}"


def validate(schema: type[T], data: dict, origin: str) -> T:
    """Validate ``data`` against ``schema``; errors become a one-line PlanError naming the field."""
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        raise PlanError(validation_message(origin, exc)) from None


def builtin_dir(package: str) -> Path:
    """Folder of a shipped data package (``prfaas_plan.model_db`` and friends)."""
    return Path(str(resources.files(package)))


def find_entry(ref: str | Path, package: str, what: str, extra_dirs: tuple[Path, ...] = ()) -> Path:
    """Resolve an id (built-in or in ``extra_dirs``) or a path to a YAML file."""
    path = Path(ref)
    if path.suffix in {".yaml", ".yml", ".json"} or path.is_file():
        if not path.is_file():
            raise PlanError(f"{what} file {str(ref)!r} not found")
        return path
    dirs = (*extra_dirs, builtin_dir(package))
    for folder in dirs:
        candidate = Path(folder) / f"{ref}.yaml"
        if candidate.is_file():
            return candidate
    known = sorted({p.stem for folder in dirs for p in Path(folder).glob("*.yaml")})
    raise PlanError(
        f"unknown {what} {str(ref)!r}{did_you_mean(str(ref), known)}; "
        f"known: {', '.join(known)} (or give a path to a YAML file)"
    )


def list_entries(package: str, extra_dirs: tuple[Path, ...] = ()) -> list[Path]:
    """All YAML entries, user folders first so that they can shadow built-ins by id."""
    seen: dict[str, Path] = {}
    for folder in (*extra_dirs, builtin_dir(package)):
        for path in sorted(Path(folder).glob("*.yaml")):
            seen.setdefault(path.stem, path)
    return [seen[key] for key in sorted(seen)]


def check_output_path(path: str | Path, flag: str = "-o") -> Path:
    """Fail early (before any work) when ``path`` cannot be written as a file."""
    path = Path(path)
    if path.is_dir():
        raise PlanError(f"{flag}: {path} is a folder; give a file name")
    parent = path.parent
    if not parent.is_dir():
        raise PlanError(f"{flag}: folder {parent} does not exist; create it or choose another path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PlanError(f"{flag}: cannot write to folder {parent} (permission denied)")
    return path


def atomic_write(path: str | Path, data: bytes | str) -> Path:
    """Write ``data`` to a temporary file beside ``path``, then rename it over ``path``: readers
    and failures never see a half-written file. OS errors become a one-line PlanError."""
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    except OSError as exc:
        raise PlanError(f"{path}: cannot write ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise PlanError(f"{path}: cannot write ({exc.strerror or exc})") from None
        raise
    return path
