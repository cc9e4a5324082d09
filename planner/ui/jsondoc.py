"""The one `--json` document format: versioned, one name per quantity across commands, shipped as a
JSON Schema (planner/ui/schema/plan.schema.json, documented field by field in docs/json.md)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from planner.app.documents import _non_finite_path, cluster_object, model_object, require_finite  # noqa: F401

SCHEMA_VERSION = "1.0"  # major bumps only when a listed field is removed or changes meaning
SCHEMA_PATH = Path(__file__).parent / "schema" / "plan.schema.json"


def versioned(command: str, doc: dict) -> dict:
    """`doc` with the two header fields every document carries."""
    return {"schema_version": SCHEMA_VERSION, "command": command, **doc}


def error_doc(command: str, code: int, message: str) -> dict:
    """What `--json` prints on stdout when a command fails (the same line goes to stderr)."""
    return versioned(command, {"error": {"code": int(code), "message": message}})


def dumps(doc: dict) -> str:
    """The one place JSON reaches stdout: sorted keys, two-space indent (the same input gives the same bytes),
    checked finite and written with allow_nan=False (NaN/Infinity are not JSON)."""
    require_finite(doc)
    return json.dumps(_valid_unicode(doc), indent=2, sort_keys=True, default=float, allow_nan=False)


def _valid_unicode(obj):
    """Strings with lone surrogates (a non-UTF-8 path decoded with surrogateescape) as valid text: the bytes that
    are not UTF-8 become U+FFFD, never a '\\udcff' escape no JSON reader can turn into Unicode."""
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
            return obj
        except UnicodeEncodeError:
            return obj.encode("utf-8", "surrogateescape").decode("utf-8", "replace").encode(
                "utf-8", "replace").decode("utf-8")
    if isinstance(obj, dict):
        return {_valid_unicode(k): _valid_unicode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_valid_unicode(v) for v in obj]
    return obj


@lru_cache(maxsize=1)
def load_schema() -> dict:
    from planner.catalog.files import read_structured_file

    return read_structured_file(SCHEMA_PATH, what="JSON schema", max_bytes=1 << 20)  # the shipped one: ~30 KiB


def hardware_object(hw) -> dict:
    """A hardware profile as `plan clusters --json` lists it."""
    return {"hardware": hw.id, "aliases": list(hw.aliases), "hbm_capacity_gib": hw.hbm_capacity_gib,
            "peak_tflops_bf16": hw.peak_tflops.bf16, "peak_tflops_fp8": hw.peak_tflops.fp8,
            "host_memory_gib": hw.host_memory_gib, "devices_per_node": hw.devices_per_node,
            "devices_per_chip": hw.torus.cores_per_chip if hw.torus else 1,
            "scale_up": {"kind": hw.scale_up.kind, "domain_size": hw.scale_up.domain_size,
                         "unidir_GBps": hw.scale_up.unidir_GBps},
            "scale_out": {"kind": hw.scale_out.kind, "unidir_GBps_per_device": hw.scale_out.unidir_GBps_per_device}}


def usage_error_document(argv: list[str], message: str) -> str | None:
    """For a click usage error (bad option value, unknown option) caught by the group's entry point:
    the JSON error document to print on stdout when `--json` is among the arguments, else None."""
    if "--json" not in argv:
        return None
    sub = next((a for a in argv if a in ("explain", "compare", "validate", "models", "clusters", "report",
                                         "calibrate")), "plan")
    return dumps(error_doc("plan" if sub == "report" else sub, 2, " ".join(message.split())))
