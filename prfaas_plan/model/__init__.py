"""The model layer: architectures (:mod:`.arch`), their layer kinds (:mod:`.kinds`), per-request
cache bytes (:mod:`.cache`) and the Hugging Face import (:mod:`.hf_config`).

:func:`load_model` is the one loader: a ``model_db`` id, a YAML path or a ``config.json`` path.
"""

from __future__ import annotations

from pathlib import Path

from prfaas_plan.data import find_entry
from prfaas_plan.model.arch import ModelSpec, list_model_specs, load_model_yaml
from prfaas_plan.model.hf_config import load_hf_config


def load_model(ref: str | Path, extra_dirs: tuple[Path, ...] = ()) -> ModelSpec:
    """Load a model by ``model_db`` id, a YAML path, or a Hugging Face ``config.json`` path."""
    path = find_entry(ref, "prfaas_plan.data.model_db", "model", tuple(Path(d) for d in extra_dirs))
    return load_hf_config(path) if path.suffix == ".json" else load_model_yaml(path)


__all__ = ["ModelSpec", "list_model_specs", "load_hf_config", "load_model"]
