"""Reading validated YAML data files (models, hardware, scenarios) with one-line errors."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from prfaas_plan.errors import InvalidInput, did_you_mean, shown

T = TypeVar("T", bound=BaseModel)


def read_text(path: str | Path) -> str:
    """The text of a UTF-8 file; a missing, unreadable, binary or folder path is a one-line PlanError."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInput(f"{shown(path)}: file not found") from None
    except IsADirectoryError:
        raise InvalidInput(f"{shown(path)}: is a folder; give a file") from None
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{shown(path)}: not a text file (byte {exc.start} is not UTF-8); give a YAML, JSON "
                        "or CSV text file") from None
    except OSError as exc:  # permission denied, a name too long, an I/O error
        raise InvalidInput(f"{shown(path)}: cannot read ({exc.strerror or exc})") from None


def is_file(path: str | Path) -> bool:
    """``Path.is_file``, but False (not OSError) for a path the OS cannot even look up (too long)."""
    try:
        return Path(path).is_file()
    except OSError:
        return False


def is_dir(path: str | Path) -> bool:
    """``Path.is_dir``, but False (not OSError) for a path the OS cannot even look up (too long)."""
    try:
        return Path(path).is_dir()
    except OSError:
        return False


def _parse_yaml(text: str) -> object:
    """``yaml.safe_load`` through libyaml's C parser where PyYAML was built with it (the same
    values, ~10x faster); a document it rejects is parsed again by the pure-Python parser, whose
    error message (and line) is the one reported."""
    loader = getattr(yaml, "CSafeLoader", None)
    if loader is not None:
        try:
            return yaml.load(text, Loader=loader)  # noqa: S506 (CSafeLoader is the safe loader)
        except yaml.YAMLError:
            pass
    return yaml.safe_load(text)


def read_yaml(path: Path) -> dict:
    """Parse one YAML mapping; a syntax error or a non-mapping is a one-line PlanError."""
    try:
        data = _parse_yaml(read_text(path))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise InvalidInput(f"{path}:{where}: malformed YAML ({problem}); fix the syntax") from None
    if not isinstance(data, dict):
        raise InvalidInput(f"{path}: expected a YAML mapping of fields at the top level")
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
        raise InvalidInput(validation_message(origin, exc)) from None


def builtin_dir(package: str) -> Path:
    """Folder of a shipped data package (``prfaas_plan.data.model_db`` and friends)."""
    return Path(str(resources.files(package)))


def find_entry(ref: str | Path, package: str, what: str, extra_dirs: tuple[Path, ...] = ()) -> Path:
    """Resolve an id (built-in or in ``extra_dirs``) or a path to a YAML file."""
    path = Path(ref)
    if path.suffix in {".yaml", ".yml", ".json"} or is_file(path):
        if is_dir(path):
            raise InvalidInput(f"{what} file {shown(ref)!r} is a folder; give a YAML file")
        if not is_file(path):
            raise InvalidInput(f"{what} file {shown(ref)!r} not found")
        return path
    dirs = (*extra_dirs, builtin_dir(package))
    for folder in dirs:
        candidate = Path(folder) / f"{ref}.yaml"
        if is_file(candidate):
            return candidate
    known = sorted({p.stem for folder in dirs for p in Path(folder).glob("*.yaml")})
    raise InvalidInput(
        f"unknown {what} {shown(ref)!r}{did_you_mean(str(ref), known)}; "
        f"known: {', '.join(known)} (or give a path to a YAML file)"
    )


def list_entries(package: str, extra_dirs: tuple[Path, ...] = ()) -> list[Path]:
    """All YAML entries, user folders first so that they can shadow built-ins by id."""
    seen: dict[str, Path] = {}
    for folder in (*extra_dirs, builtin_dir(package)):
        for path in sorted(Path(folder).glob("*.yaml")):
            seen.setdefault(path.stem, path)
    return [seen[key] for key in sorted(seen)]


def check_output_path(path: str | Path, flag: str = "-o", create_parents: bool = False) -> Path:
    """Fail early (before any work) when ``path`` cannot be written as a file (with
    ``create_parents``: once its missing folders are made; nothing is created here)."""
    path = Path(path)
    try:
        given_a_folder = path.is_dir()
    except OSError as exc:  # e.g. a file name longer than the OS allows
        raise InvalidInput(f"{flag}: cannot use {shown(path)} ({exc.strerror or exc}); choose another path") from None
    if given_a_folder:
        raise InvalidInput(f"{flag}: {path} is a folder; give a file name")
    parent = path.parent
    blocking = next((p for p in (parent, *parent.parents) if is_file(p)), None)
    if blocking is not None:
        raise InvalidInput(f"{flag}: {blocking} is a file, not a folder; choose another path for {path.name}")
    folder = parent
    while create_parents and not folder.is_dir() and folder != folder.parent:
        folder = folder.parent  # the nearest folder that exists; "/" always does
    if not folder.is_dir():
        raise InvalidInput(f"{flag}: folder {parent} does not exist; create it or choose another path")
    try:  # a real probe: root passes os.access checks, /proc and read-only mounts do not take files
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as exc:
        raise InvalidInput(f"{flag}: cannot write to folder {folder} ({exc.strerror or exc})") from None
    return path


@contextmanager
def staged_files(folder: str | Path, what: str | None = None) -> Iterator[Callable[[str], Path]]:
    """Write several files of ``folder`` all or none: ``stage(name)`` gives a temporary path beside
    ``folder/name`` (``.NAME.<random>.part``) to write; when the block ends without error every staged
    file is renamed over its final name in staging order (each rename is atomic, so readers never see
    a half-written file), else every staged file is removed and nothing else is touched. OS errors
    become a one-line PlanError naming ``what`` (default: the folder)."""
    folder = Path(folder)
    staged: dict[str, Path] = {}

    def stage(name: str) -> Path:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=folder)
        os.close(fd)
        staged[name] = Path(tmp)
        return staged[name]

    try:
        yield stage
        for name, tmp in staged.items():
            os.chmod(tmp, 0o644)
            os.replace(tmp, folder / name)
    except BaseException as exc:
        for tmp in staged.values():
            tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise InvalidInput(f"{what or folder}: cannot write ({exc.strerror or exc})") from None
        raise


def atomic_write(path: str | Path, data: bytes | str) -> Path:
    """Write ``data`` to a temporary file beside ``path``, then rename it over ``path``: readers
    and failures never see a half-written file. OS errors become a one-line PlanError."""
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    with staged_files(path.parent, what=str(path)) as stage:
        stage(path.name).write_bytes(payload)
    return path
