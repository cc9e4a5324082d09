"""Same-job pairs: do predictions order two runs of the same job the way the measurements do?

A same-job group is the runs with the same model (architecture fields), accelerator, device count,
sequence length and global batch: they differ only in plan or software stack (FP8 recipe, framework
version, overlap options). Every pair in a group whose measured steps differ is ordered correctly when
the predicted steps differ in the same direction.
"""

from __future__ import annotations

import itertools

_ARCH_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
              "n_embd", "n_layer", "n_head", "d_model", "n_layers", "n_heads")


def job_key(run: dict) -> tuple:
    m, t = run["model"], run["train"]
    return (tuple(m.get(k) for k in _ARCH_KEYS), run["hardware"], run["devices"], t.get("seq_len"), t["global_batch"])


def same_job_pairs(runs: list[dict], predicted: dict[str, float]) -> list[dict]:
    """One entry per pair of scored runs of the same job: ids, measured and predicted steps, whether ordered."""
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        if r["id"] in predicted and (r.get("measured") or {}).get("step_time_s"):
            groups.setdefault(job_key(r), []).append(r)
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
