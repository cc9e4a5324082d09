"""Every --json document validates against the schema shipped in the package, errors included, and
the shared names are the same in every command."""

from __future__ import annotations

import json

import jsonschema
import pytest
from support import run_cli

from planner.ui.jsondoc import SCHEMA_PATH, SCHEMA_VERSION, load_schema


@pytest.fixture(scope="module")
def validator():
    schema = load_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def valid_doc(validator, args, code=0):
    r = run_cli(*args)
    assert r.exit_code == code, (r.exit_code, r.stderr)
    doc = json.loads(r.stdout)
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, [(list(e.path), e.message[:200]) for e in errors[:5]]
    assert doc["schema_version"] == SCHEMA_VERSION
    return doc, r


def test_schema_ships_inside_the_package():
    assert SCHEMA_PATH.parent.parent.name == "ui" and SCHEMA_PATH.is_file()
    from pathlib import Path

    import tomllib
    py = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert "planner" in py["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    assert any(d.startswith("jsonschema") for d in py["project"]["optional-dependencies"]["test"])


def test_plan_document(validator):
    doc, _ = valid_doc(validator, ["--model", "llama-8b", "--cluster", "h100x8", "--tokens", "1T",
                                   "--price-per-device-hour", "2.5", "--currency", "USD", "--json"])
    assert doc["command"] == "plan"
    # contract fields where they always were
    assert doc["model"]["params_total"] > 7e9 and doc["model"]["params_active"] == doc["model"]["params_total"]
    p = doc["plans"][0]
    assert p["memory"]["peak_gib"] <= p["memory"]["usable_gib"] < p["memory"]["capacity_gib"]
    assert doc["cluster"]["hbm_capacity_gib"] == p["memory"]["capacity_gib"]
    est = doc["training_estimate"]
    assert est["currency"] == "USD" and est["cost"] == pytest.approx(est["device_hours"] * 2.5)


def test_explain_document_shares_names(validator):
    doc, _ = valid_doc(validator, ["explain", "--model", "llama-8b", "--cluster", "h100x8", "--json"])
    plan, _ = valid_doc(validator, ["--model", "llama-8b", "--cluster", "h100x8", "--json", "--top", "1"])
    assert doc["command"] == "explain" and doc["why_not"] and doc["derivation"]
    assert doc["model"] == plan["model"] and doc["cluster"] == plan["cluster"]
    assert doc["plans"][0]["plan"] == plan["plans"][0]["plan"]


def test_compare_document_shares_names(validator):
    doc, _ = valid_doc(validator, ["compare", "--model", "llama-8b", "--cluster", "h100x8", "--cluster", "a100x16",
                                   "--tokens", "1T", "--json"])
    plan, _ = valid_doc(validator, ["--model", "llama-8b", "--cluster", "a100x16", "--json", "--top", "1"])
    assert doc["model"] == plan["model"]  # an object, as in `plan`
    row = doc["rows"][1]
    assert row["cluster"] == plan["cluster"]
    assert row["memory"]["peak_gib"] == plan["plans"][0]["memory"]["peak_gib"]
    assert row["step_time_s"] == plan["plans"][0]["step_time_s"]
    assert row["training_estimate"]["cost"] is None  # no price


def test_hardware_bias_validates_in_plan_and_compare_documents(validator, monkeypatch):
    """A hardware whose published runs land on one side (planner.analysis.bands.hardware_bias; none of the shipped
    residuals does: GB300's replaced by one-sided ones)."""
    from support import patch_one_sided

    patch_one_sided(monkeypatch, "gb300-nvl72")
    doc, _ = valid_doc(validator, ["--model", "qwen3-30b-a3b", "--cluster", "gb300x8", "--json", "--top", "1"])
    assert doc["hardware_bias"]["hardware"] == "gb300-nvl72"
    cmp_doc, _ = valid_doc(validator, ["compare", "--model", "qwen3-30b-a3b", "--cluster", "gb300x8", "--cluster",
                                       "h100x8", "--json"])
    assert cmp_doc["rows"][0]["hardware_bias"] == doc["hardware_bias"] and "hardware_bias" not in cmp_doc["rows"][1]


def test_validate_document(validator):
    doc, _ = valid_doc(validator, ["validate", "--json"])
    assert doc["summary"]["runs"] == len(doc["runs"]) > 10
    for r in doc["runs"]:
        assert r["peak_memory_gib"] == r["memory"]["peak_gib"]  # contract name and shared name agree


def test_min_devices_document(validator):
    doc, _ = valid_doc(validator, ["--model", "llama-8b", "--cluster", "h100x64", "--min-devices", "--json"])
    assert doc["min_devices"]["devices"] == doc["cluster"]["count"] <= 64


def test_catalog_documents(validator):
    models, _ = valid_doc(validator, ["models", "--json"])
    clusters, _ = valid_doc(validator, ["--json", "clusters"])  # --json before the subcommand works too
    assert any(m["name"] == "llama-3.1-70b" and "llama-70b" in m["aliases"] for m in models["models"])
    assert any(c["hardware"] == "h100-sxm-80gb" and c["hbm_capacity_gib"] > 79 for c in clusters["clusters"])


@pytest.mark.parametrize("args,code", [
    (["--model", "nosuchmodel", "--cluster", "a100x8", "--json"], 2),
    (["--model", "llama-405b", "--cluster", "a100x8", "--tp", "8", "--zero", "1", "--no-offload", "--json"], 3),
    (["--model", "llama-8b", "--cluster", "h100x8", "--price-per-device-hour", "2", "--json"], 2),
    (["compare", "--model", "llama-8b", "--cluster", "nosuch", "--json"], 2),
    (["explain", "--model", "llama-8b", "--json"], 2),
    (["validate", "--runs", "/nonexistent/runs.yaml", "--json"], 2),
    (["--json", "explain", "--model", "nosuchmodel", "--cluster", "a100x8"], 2),
])
def test_error_documents(validator, args, code):
    doc, r = valid_doc(validator, args, code)
    assert doc["error"]["code"] == code
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1 and line == f"error: {doc['error']['message']}"


def test_usage_error_document_for_the_group_hook(validator):
    from planner.ui.jsondoc import usage_error_document

    assert usage_error_document(["--model", "x", "--dtype", "fp64"], "bad") is None
    doc = json.loads(usage_error_document(["compare", "--json", "--dtype", "fp64"], "Invalid value for '--dtype'\n"))
    assert not list(validator.iter_errors(doc))
    assert doc["command"] == "compare" and doc["error"] == {"code": 2, "message": "Invalid value for '--dtype'"}
