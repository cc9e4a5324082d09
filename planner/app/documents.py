"""The parts of the result documents every command shares (the model and cluster objects, the finiteness
check); planner.ui.jsondoc serialises them."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any


def _non_finite_path(obj, path: str = "") -> str | None:
    """The key path of the first NaN/infinite number in a JSON-able document (None: all finite)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return path or "(top)"
    items: Iterable[tuple[Any, Any]]
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    else:
        return None
    for k, v in items:
        found = _non_finite_path(v, f"{path}.{k}" if path else str(k))
        if found:
            return found
    return None


def require_finite(doc) -> None:
    """A non-finite number in a result (NaN/Infinity are not JSON) is an input error naming its field."""
    from planner.errors import InputError

    bad = _non_finite_path(doc)
    if bad:
        raise InputError(f"the result has a non-finite number at {bad}: an input value is out of range "
                         "(check the model, hardware and option figures)")


def model_object(spec, params) -> dict:
    """A model as every document names it (`params` from planner.costmodel.params.count_params)."""
    return {"name": spec.name, "family": spec.family, "params_total": params.total, "params_active": params.active,
            "params_embedding": params.embedding, "num_layers": spec.num_layers, "hidden_size": spec.hidden_size,
            "num_heads": spec.num_heads, "num_kv_heads": spec.num_kv_heads, "moe": spec.moe is not None}


def cluster_object(cluster) -> dict:
    """A cluster as `plan`, `explain` and `compare` name it."""
    hw = cluster.hardware
    return {"name": cluster.name or f"{hw.id}x{cluster.count}", "hardware": hw.id, "count": cluster.count,
            "devices_per_node": cluster.node_size, "scale_up_domain": cluster.scale_up_size,
            "hbm_capacity_gib": hw.hbm_capacity_gib, "peak_tflops_bf16": hw.peak_tflops.bf16,
            "scale_up_GBps": hw.scale_up.unidir_GBps, "nic_GBps": hw.scale_out.unidir_GBps_per_device} | (
        {} if hw.host_memory_gib is None else {"host_memory_gib": hw.host_memory_gib}) | (
        {} if cluster.price_per_device_hour is None else {"price_per_device_hour": cluster.price_per_device_hour})
