"""`plan models` and `plan clusters`: the catalogs as JSON documents and as text."""

from __future__ import annotations

import re

from planner.names import normalise
from planner.ui.jsondoc import hardware_object, model_object


def models_doc() -> dict:
    from planner.catalog.models import list_models
    from planner.costmodel.params import count_params

    return {"models": [model_object(spec, count_params(spec)) | {"aliases": list(aliases)}
                       for _, aliases, spec in list_models()]}


def clusters_doc() -> dict:
    from planner.catalog.hardware import list_hardware

    return {"clusters": [hardware_object(hw) for hw in list_hardware()]}


def _version(name: str) -> str | None:
    """'3.1' of llama-3.1-70b, '2' of llama-2-7b, '3' of gpt3-175b; None when the name has none."""
    parts = name.split("-")
    if len(parts) > 1 and re.fullmatch(r"[0-9]+(\.[0-9]+)?", parts[1]):
        return parts[1]
    m = re.fullmatch(r"[a-z]+([0-9]+(\.[0-9]+)?)", parts[0])
    return m.group(1) if m else None


def unversioned_aliases(models: list[dict]) -> list[tuple[str, str]]:
    """(alias, canonical name) for short aliases that drop the model's version: llama-70b -> llama-3.1-70b."""
    out = []
    for m in models:
        v = _version(m["name"])
        if v is None:
            continue
        out += [(a, m["name"]) for a in m["aliases"] if "/" not in a and normalise(v) not in normalise(a)]
    return sorted(out)


def models_text(doc: dict) -> list[str]:
    lines = []
    for r in doc["models"]:
        act = f" ({r['params_active'] / 1e9:.1f}B active)" if r["moe"] else ""
        al = f"  aliases: {', '.join(r['aliases'])}" if r["aliases"] else ""
        lines.append(f"{r['name']:<22} {r['params_total'] / 1e9:8.1f}B{act:<16} L={r['num_layers']:<4} "
                     f"h={r['hidden_size']:<6}{al}")
    short = unversioned_aliases(doc["models"])
    lines.append("")
    lines.append("Names match without case or punctuation (llama2-70b = llama-2-70b, llama3.1-8b = llama-3.1-8b).")
    if short:
        from planner.ui.table import columns_for_text, wrapped
        lines.append(wrapped("Aliases without a version mean: " + "; ".join(f"{a} = {n}" for a, n in short)
                             + ". Give the versioned name to be explicit.", columns_for_text()))
    return lines


def clusters_text(doc: dict) -> list[str]:
    lines = []
    for r in doc["clusters"]:
        fp8 = f"{r['peak_tflops_fp8']:g}" if r["peak_tflops_fp8"] else "-"
        up = r["scale_up"]
        # a TPU7x chip's two devices share its ICI links: the rate is the chip's
        per = f" per chip of {r['devices_per_chip']} devices" if r.get("devices_per_chip", 1) > 1 else ""
        lines.append(f"{r['hardware']:<16} bf16 {r['peak_tflops_bf16']:7g} TF  fp8 {fp8:>6} TF  "
                     f"HBM {r['hbm_capacity_gib']:6.1f} GiB  {up['kind']} {up['domain_size']} x {up['unidir_GBps']:g} "
                     f"GB/s/dir{per}  NIC {r['scale_out']['unidir_GBps_per_device']:g} GB/s  "
                     f"aliases: {', '.join(r['aliases'])}")
    return lines
