"""The model catalog (`model_specs/*.yaml`) and `load_model`, the one entry point for a model argument.

A catalog entry (and a user's catalog-style file) is a mapping:

    name: llama-3.1-70b            # canonical id
    aliases: [llama-70b, ...]      # short names users type (matched after `planner.names.normalise`)
    source: "..."                  # citation for the numbers
    official_params: "..."         # the owner's stated parameter count, verbatim
    notes: "..."                   # optional
    hf_config: {model_type: llama, ...}   # a Hugging Face config.json, imported by `from_hf_config`

`load_model(arg)` accepts a catalog name or alias, or the path of a JSON/YAML file holding a HF
config.json, a catalog-style entry, or a native `ModelSpec` mapping.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import ValidationError

from planner.catalog.data import data_dir
from planner.catalog.files import read_structured_file
from planner.catalog.hf_import import _validation_message, from_hf_config
from planner.errors import InputError
from planner.names import did_you_mean, normalise
from planner.specs import ModelSpec

MAX_FILE_BYTES = 1 << 20  # 1 MiB
_ENTRY_KEYS = {"name", "aliases", "source", "official_params", "notes", "hf_config"}


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    aliases: tuple[str, ...]
    source: str
    official_params: str
    notes: str
    hf_config: dict
    spec: ModelSpec
    path: Path | None = None


@dataclass(frozen=True)
class ModelCatalog:
    entries: dict[str, CatalogEntry]  # canonical name -> entry
    index: dict[str, str]  # normalised name or alias -> canonical name

    def resolve(self, name: str) -> CatalogEntry | None:
        key = self.index.get(normalise(name))
        return self.entries[key] if key is not None else None

    def choices(self) -> list[str]:
        """Every name and alias, for did-you-mean."""
        out = []
        for e in self.entries.values():
            out.append(e.name)
            out.extend(e.aliases)
        return out


def _entry_from_mapping(data: Any, where: str, path: Path | None = None) -> CatalogEntry:
    if not isinstance(data, dict):
        raise InputError(f"{where}: a model entry must be a mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - _ENTRY_KEYS)
    if unknown:
        raise InputError(f"{where}: unknown field '{unknown[0]}' in model entry: "
                         f"allowed fields are {', '.join(sorted(_ENTRY_KEYS))}")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"{where}: field 'name' must be a non-empty string (the canonical model id)")
    aliases = data.get("aliases") or []
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a.strip() for a in aliases):
        raise InputError(f"{where}: field 'aliases' must be a list of non-empty strings")
    texts = {}
    for key in ("source", "official_params", "notes"):
        v = data.get(key) or ""
        if not isinstance(v, str):
            raise InputError(f"{where}: field '{key}' must be a string")
        texts[key] = v
    if "hf_config" not in data:
        raise InputError(f"{where}: field 'hf_config' is missing: add the model's Hugging Face config.json mapping")
    hf = data["hf_config"]
    if not isinstance(hf, dict):
        raise InputError(f"{where}: field 'hf_config' must be a mapping (a HF config.json), got {type(hf).__name__}")
    try:
        spec = from_hf_config(hf, name=name)
    except InputError as e:
        raise InputError(f"{where}: {e}") from None
    if texts["source"]:
        spec = spec.model_copy(update={"source": texts["source"]})
    return CatalogEntry(name, tuple(aliases), texts["source"], texts["official_params"], texts["notes"],
                        hf, spec, path)


@functools.lru_cache(maxsize=1)
def load_model_catalog() -> ModelCatalog:
    """Every `model_specs/*.yaml` (cached). Raises InputError on a malformed entry or a name clash."""
    entries: dict[str, CatalogEntry] = {}
    index: dict[str, str] = {}
    for path in sorted(data_dir("model_specs").glob("*.yaml")):
        entry = _entry_from_mapping(_read_mapping(path, packaged=True), f"model catalog {path.name}", path)
        if entry.name in entries:
            raise InputError(f"model catalog {path.name}: duplicate model name {entry.name!r}")
        entries[entry.name] = entry
        for n in (entry.name, *entry.aliases):
            key = normalise(n)
            other = index.setdefault(key, entry.name)
            if other != entry.name:
                raise InputError(f"model catalog {path.name}: name/alias {n!r} also names {other!r}: make it unique")
    return ModelCatalog(entries, index)


class ModelListing(NamedTuple):
    name: str
    aliases: tuple[str, ...]
    spec: ModelSpec


def list_models() -> list[ModelListing]:
    """Every catalog model as (canonical name, aliases, spec), sorted by name."""
    cat = load_model_catalog()
    return [ModelListing(n, cat.entries[n].aliases, cat.entries[n].spec) for n in sorted(cat.entries)]


def get_catalog_entry(name: str) -> CatalogEntry:
    cat = load_model_catalog()
    entry = cat.resolve(name) if isinstance(name, str) else None
    if entry is None:
        raise InputError(f"unknown model {name!r}{did_you_mean(str(name), cat.choices())}; "
                         "`plan models` lists them; or pass the path of a config.json/YAML file")
    return entry


def get_model(name: str) -> ModelSpec:
    """Catalog model by canonical name or alias (case/punctuation-insensitive)."""
    return get_catalog_entry(name).spec


# ---------------------------------------------------------------------------------------------- files


def _read_mapping(path: Path, packaged: bool = False) -> Any:
    """Parse a JSON or YAML model file (<= 1 MiB) with the project's one safe reader (`packaged`: the catalog's)."""
    return read_structured_file(path, what="model file", max_bytes=MAX_FILE_BYTES,
                                hint="a HF config.json, a catalog entry or a ModelSpec mapping (JSON or YAML)",
                                packaged=packaged)


def _file_model_name(path: Path, data: dict) -> str:
    """The name of a model read from a HF config file without `_name_or_path`: the file's stem unless it is
    the generic `config`, then the Hugging Face cache's repo id (models--org--name/snapshots/<commit>/), else
    the folder holding it, else the model_type."""
    if path.stem.lower() != "config":
        return path.stem
    folder = path.resolve().parent
    repo = folder.parent.parent.name
    if folder.parent.name == "snapshots" and repo.startswith("models--") and len(repo) > len("models--"):
        return repo[len("models--"):].replace("--", "/")
    if folder.name and folder != folder.parent:
        return folder.name
    mt = data.get("model_type")
    return f"hf-{mt}" if isinstance(mt, str) and mt.strip() else "hf-model"


def model_file_defaults(arg: object) -> dict:
    """For a `--model` naming a Hugging Face config file: the integer fields it does not give and the
    defaults used for them (planner.catalog.hf_import.defaulted_fields); {} for anything else."""
    try:
        path = Path(str(arg))
        if not path.is_file():
            return {}
        data = _read_mapping(path)
    except (InputError, OSError, ValueError):
        return {}
    if not isinstance(data, dict) or "hf_config" in data or not ("model_type" in data or "architectures" in data):
        return {}
    from planner.catalog.hf_import import defaulted_fields

    return defaulted_fields(data)


def load_model_file(path: str | Path) -> ModelSpec:
    """A model from a file: HF config.json (has model_type/architectures), catalog entry (has hf_config)
    or native ModelSpec mapping."""
    path = Path(path)
    where = f"model file {str(path)!r}"
    data = _read_mapping(path)
    if not isinstance(data, dict):
        raise InputError(f"{where} must hold a mapping (a HF config.json, a catalog entry or a ModelSpec), "
                         f"got {type(data).__name__}")
    if "hf_config" in data:
        return _entry_from_mapping(data, where, path).spec
    if "model_type" in data or "architectures" in data:
        try:
            nm = data.get("_name_or_path")
            return from_hf_config(data, name=nm if isinstance(nm, str) and nm.strip() else _file_model_name(path, data))
        except InputError as e:
            raise InputError(f"{where}: {e}") from None
    try:
        return ModelSpec(**data)
    except ValidationError as e:
        raise InputError(_validation_message(e, f"{where} (ModelSpec)")) from None
    except TypeError as e:  # non-string keys
        raise InputError(f"{where}: invalid ModelSpec mapping ({e})") from None


def load_model(arg: str) -> ModelSpec:
    """`arg` is a path to an existing file (see `load_model_file`), a catalog name/alias, or a Hugging
    Face repo id found in the local cache (planner.catalog.hf_cache; never the network)."""
    if not isinstance(arg, str) or not arg.strip():
        raise InputError(f"model must be a catalog name or a file path, got {arg!r}")
    path = os.path.expanduser(arg)  # '~/x.yaml' as --cluster takes it ('~nosuchuser/x' stays as written)
    try:
        exists = os.path.lexists(path)
    except (OSError, ValueError):
        exists = False
    if exists:
        return load_model_file(path)
    if load_model_catalog().resolve(arg) is not None:
        return get_model(arg)
    return _model_not_in_catalog(arg.strip())


def _model_not_in_catalog(arg: str) -> ModelSpec:
    """A cached Hugging Face repo id, or the error that says what was looked for."""
    from planner.catalog.hf_cache import cached_config, hub_dir, looks_like_repo_id

    if looks_like_repo_id(arg):
        cfg = cached_config(arg)
        if cfg is not None:
            data = _read_mapping(cfg)
            if not isinstance(data, dict):
                raise InputError(f"cached config {str(cfg)!r} of {arg} is not a mapping: re-download it")
            try:
                return from_hf_config(data, name=arg)
            except InputError as e:
                raise InputError(f"cached config of {arg}: {e}") from None
        raise InputError(f"model {arg!r} is neither in the catalog nor in the local Hugging Face cache "
                         f"({hub_dir()}): download its config.json (huggingface-cli download {arg} config.json) "
                         "or pass the file's path; `plan models` lists the catalog")
    if "/" in arg or "\\" in arg or arg.lower().endswith((".json", ".yaml", ".yml")) or arg.startswith((".", "~")):
        raise InputError(f"model file {arg!r} not found: check the path, or give a catalog name (`plan models`)")
    return get_model(arg)
