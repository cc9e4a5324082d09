"""Locate the catalog data folders, installed (inside the wheel) or in a source checkout."""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent.parent


def data_dir(name: str) -> Path:
    """`name` is `model_specs`, `hardware_profiles` or `runs` (the project copy of the dev runs)."""
    installed = _PKG / "_data" / name
    if installed.is_dir():
        return installed
    source = _PKG.parent / name
    if source.is_dir():
        return source
    raise FileNotFoundError(f"catalog folder {name!r} not found (looked in {installed} and {source})")
