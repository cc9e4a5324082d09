"""docs/architecture.md's layer arrows are exactly the import-linter contract of pyproject.toml (which
`lint-imports` checks in .ci/run), and the application layer stays free of the UI."""

from __future__ import annotations

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).parents[2]


def _contract_layers() -> list[str]:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    (contract,) = [c for c in cfg["contracts"] if c["id"] == "layers"]
    return [" | ".join(m.strip().strip("()").removeprefix("planner.") for m in layer.split("|"))
            for layer in contract["layers"]]


def _doc_arrows() -> list[str]:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    (line,) = [ln.strip() for ln in text.splitlines() if re.fullmatch(r"\s{4}\w[\w |]*(?: -> [\w |]+)+", ln)]
    return [part.strip() for part in line.split("->")]


def test_architecture_arrows_are_the_contract():
    assert _doc_arrows() == _contract_layers()
    assert _contract_layers()[:2] == ["ui", "app"]


def test_every_package_is_in_a_layer():
    layered = {name for layer in _contract_layers() for name in layer.split(" | ")}
    packages = {p.name for p in (ROOT / "planner").iterdir() if (p / "__init__.py").exists()}
    assert packages <= layered, packages - layered


def test_the_app_layer_imports_no_ui():
    for path in (ROOT / "planner" / "app").glob("*.py"):
        imports = re.findall(r"^\s*(?:from|import) (planner\.ui\S*)", path.read_text(encoding="utf-8"), re.M)
        assert not imports, (path.name, imports)
