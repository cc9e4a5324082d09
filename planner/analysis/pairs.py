"""Same-job pairs: do predictions order two runs of the same job the way the measurements do?

A job is a model (architecture fields), a device count and a global batch: runs of one
job differ in plan, software stack (framework, container release, FP8 recipe, overlap options) and sometimes in
accelerator or sequence length, and a planner that orders them wrongly would recommend the slower one. The
strict grouping (`strict_job_key`) also fixes the accelerator and the sequence length: the pairs that differ only
in plan or stack. Every pair in a group whose measured steps differ is ordered correctly when the predicted
steps differ in the same direction.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

_ARCH_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
              "n_embd", "n_layer", "n_head", "d_model", "n_layers", "n_heads")


def _arch(run: dict) -> tuple:
    return tuple(run["model"].get(k) for k in _ARCH_KEYS)


def job_key(run: dict) -> tuple:
    """A job: same model, device count and global batch."""
    return (_arch(run), run["devices"], run["train"]["global_batch"])


def strict_job_key(run: dict) -> tuple:
    """Same model, accelerator, device count, sequence length and global batch: only plan or stack differ."""
    t = run["train"]
    return (_arch(run), run["hardware"], run["devices"], t.get("seq_len"), t["global_batch"])


def same_job_pairs(runs: list[dict], predicted: dict[str, float], key: Callable[[dict], tuple] = job_key
                   ) -> list[dict]:
    """One entry per pair of scored runs of the same job: ids, measured and predicted steps, whether ordered."""
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        if r["id"] in predicted and (r.get("measured") or {}).get("step_time_s"):
            groups.setdefault(key(r), []).append(r)
    out = []
    for members in groups.values():
        for a, b in itertools.combinations(members, 2):
            ma, mb = a["measured"]["step_time_s"], b["measured"]["step_time_s"]
            if ma == mb:
                continue
            pa, pb = predicted[a["id"]], predicted[b["id"]]
            out.append({"a": a["id"], "b": b["id"], "measured": (ma, mb), "predicted": (pa, pb),
                        "ordered": (ma - mb) * (pa - pb) > 0})
    return out


def ordering_rate(pairs: list[dict]) -> float:
    return sum(p["ordered"] for p in pairs) / len(pairs) if pairs else float("nan")
