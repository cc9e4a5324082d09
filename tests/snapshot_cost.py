"""The cost-model snapshot (issue 14): about 50 varied plans evaluated by the cost model, every output
number stored in tests/data/snapshots/cost_snapshot.json, so a refactor that moves code can show it moved no number.

Regenerate only when a commit changes a term on purpose (the commit says which and why):
    PYTHONPATH=$PWD python tests/snapshot_cost.py
tests/costmodel/test_cost_snapshot.py re-evaluates the stored cases and compares every number.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SNAPSHOT = Path(__file__).parent / "data" / "snapshots" / "cost_snapshot.json"


def _c(model, cluster, plan, **train):
    train.setdefault("seq_len", 4096)
    train.setdefault("global_batch", 64)
    return {"model": model, "cluster": cluster, "train": train, "plan": plan}


# (model, cluster, plan knobs, training settings): dense/MoE/MLA, GPU/TPU/AMD, every schedule, ZeRO 0-3,
# FSDP/HSDP, CP ring/a2a, EP/ETP, recompute modes, offload, fp8, unfused attention, legacy DeepSpeed.
CASES = [
    # --- dense, Megatron ---
    _c("llama-3.1-8b", "h100x8", {"tp": 1, "dp": 8, "zero_stage": 0}),
    _c("llama-3.1-8b", "h100x8", {"tp": 2, "dp": 4, "zero_stage": 1, "micro_batch": 2}),
    _c("llama-3.1-8b", "h100x16", {"tp": 8, "dp": 2, "sequence_parallel": False}),
    _c("llama-3.1-8b", "h100x16", {"tp": 16, "dp": 1}),  # TP crosses the domain
    _c("llama-3.1-8b", "h100x16", {"tp": 2, "dp": 8, "zero_stage": 2, "recompute": "selective"}),
    _c("llama-3.1-8b", "h100x16", {"tp": 2, "dp": 8, "tp_comm_overlap": True, "recompute": "full"}),
    _c("llama-3.1-70b", "h100x64", {"tp": 8, "pp": 4, "dp": 2, "micro_batch": 1}, global_batch=128),
    _c("llama-3.1-70b", "h100x64", {"tp": 8, "pp": 4, "dp": 2, "vpp": 5, "schedule": "interleaved"}, global_batch=128),
    _c("llama-3.1-70b", "h100x64", {"tp": 4, "pp": 8, "dp": 2, "schedule": "gpipe", "recompute": "full"},
       global_batch=128),
    _c("llama-3.1-70b", "h100x64", {"tp": 4, "pp": 8, "dp": 2, "schedule": "zb"}, global_batch=128),
    _c("llama-3.1-70b", "h100x64", {"tp": 8, "pp": 4, "dp": 2, "recompute": "full", "recompute_layers": 6},
       global_batch=128),
    _c("llama-3.1-70b", "h100x64", {"tp": 8, "pp": 2, "dp": 2, "cp": 2, "cp_comm": "ring"},
       seq_len=32768, global_batch=32),
    _c("llama-3.1-70b", "h100x64", {"tp": 8, "pp": 2, "dp": 1, "cp": 4, "cp_comm": "a2a", "recompute": "full"},
       seq_len=65536, global_batch=16),
    _c("llama-3.1-405b", "h100x1024", {"tp": 8, "pp": 16, "dp": 8, "vpp": 2, "schedule": "interleaved",
                                         "first_stage_layers": 8, "last_stage_layers": 6}, global_batch=512),
    _c("llama-3.1-405b", "h100x1024", {"tp": 8, "pp": 16, "dp": 8, "account_embedding_loss": True},
       global_batch=512),
    _c("llama-3.1-405b", "h100x1024", {"tp": 8, "pp": 8, "dp": 8, "cp": 2}, seq_len=16384, global_batch=128,
       dtype="fp8"),
    _c("llama-2-70b", "a100x64", {"tp": 8, "pp": 2, "dp": 4, "zero_stage": 1}, global_batch=256),
    _c("llama-2-70b", "a100x64", {"tp": 4, "pp": 4, "dp": 4, "offload_optimizer": True}, global_batch=256),
    _c("llama-2-70b", "a100x64", {"tp": 8, "pp": 8, "dp": 1}, global_batch=128, grad_dtype="bf16",
       optimizer_dtype="bf16"),
    _c("llama-2-7b", "a100x8", {"tp": 1, "dp": 8, "zero_stage": 1}, attention_impl="unfused", seq_len=2048),
    _c("llama-2-7b", "a100-sxm-40gbx8", {"tp": 2, "dp": 4, "recompute": "selective"}, attention_impl="unfused",
       seq_len=2048),
    _c("gpt3-175b", "a100x1024", {"tp": 8, "pp": 16, "dp": 8}, seq_len=2048, global_batch=1536,
       attention_impl="unfused", dtype="fp16", attention_dropout=True),  # as SC21 ran it (Megatron's 2021 default)
    _c("qwen2.5-72b", "h200x32", {"tp": 4, "pp": 2, "dp": 4, "recompute": "selective"}, global_batch=64),
    _c("gemma-2-27b", "h100x16", {"tp": 4, "dp": 4, "zero_stage": 1}, seq_len=8192),
    _c("mistral-7b-v0.1", "h100x8", {"tp": 1, "dp": 8}, seq_len=32768, global_batch=16),
    _c("nemotron-4-340b", "h100x256", {"tp": 8, "pp": 8, "dp": 4, "vpp": 12, "schedule": "interleaved"},
       global_batch=256),
    # --- dense, FSDP / torchtitan ---
    _c("llama-3.1-8b", "h100x8", {"tp": 1, "dp": 8, "zero_stage": 3}, framework="fsdp", global_batch=32),
    _c("llama-3.1-8b", "h100x16", {"tp": 1, "dp": 16, "zero_stage": 3, "zero_shard_size": 8}, framework="fsdp"),
    _c("llama-3.1-8b", "h100x16", {"tp": 2, "cp": 4, "dp": 2, "zero_stage": 3, "zero_shard_size": 4},
       framework="fsdp", seq_len=32768),
    _c("llama-3.1-70b", "h100x64", {"tp": 8, "pp": 2, "dp": 4, "zero_stage": 3, "recompute": "full"},
       framework="fsdp", global_batch=64),
    _c("llama-3.1-70b", "h100x64", {"tp": 8, "dp": 8, "zero_stage": 3, "recompute": "selective"},
       framework="fsdp", seq_len=8192, global_batch=64, dtype="fp8"),
    _c("llama-2-13b", "a100x16", {"tp": 1, "dp": 16, "zero_stage": 2}, framework="fsdp"),
    # --- DeepSpeed ---
    _c("llama-2-13b", "a100x16", {"tp": 1, "dp": 16, "zero_stage": 3}, framework="deepspeed"),
    _c("llama-2-13b", "a100x16", {"tp": 1, "dp": 16, "zero_stage": 3, "recompute": "full"},
       framework="deepspeed", legacy_deepspeed_zero3=True, seq_len=2048),
    _c("llama-2-70b", "a100-sxm-40gbx64", {"tp": 1, "dp": 64, "zero_stage": 3, "recompute": "full"},
       framework="deepspeed", legacy_deepspeed_zero3=True, seq_len=2048, global_batch=512, dtype="fp16"),
    _c("llama-2-7b", "a100x16", {"tp": 1, "dp": 16, "zero_stage": 2, "offload_optimizer": True},
       framework="deepspeed"),
    _c("bloom-176b", "a100x384", {"tp": 4, "pp": 12, "dp": 8, "zero_stage": 1}, framework="deepspeed",
       seq_len=2048, global_batch=2048),
    # --- TPU / MaxText ---
    _c("llama-3.1-8b", "tpu-v5px64", {"tp": 1, "dp": 64, "zero_stage": 3}, framework="maxtext", global_batch=256),
    _c("llama-3.1-70b", "tpu-v5px256", {"tp": 4, "dp": 64, "zero_stage": 3, "recompute": "full"},
       framework="maxtext", global_batch=256),
    _c("llama-3.1-70b", "tpu-v6ex256", {"tp": 8, "pp": 2, "dp": 16, "zero_stage": 3}, framework="maxtext",
       global_batch=256),
    _c("qwen3-30b-a3b", "tpu-v5px128", {"tp": 1, "dp": 128, "ep": 8, "zero_stage": 3}, framework="maxtext",
       global_batch=256),
    # --- AMD, NVL72 ---
    _c("llama-3.1-70b", "mi300xx16", {"tp": 4, "dp": 4, "zero_stage": 1}, global_batch=32),
    _c("llama-3.1-70b", "mi300xx64", {"tp": 8, "dp": 8, "zero_stage": 3}, framework="fsdp"),
    _c("llama-3.1-405b", "gb200-nvl72x144", {"tp": 8, "pp": 2, "dp": 9}, global_batch=144),
    # --- MoE ---
    _c("mixtral-8x7b", "h100x64", {"tp": 2, "pp": 4, "dp": 8, "ep": 8}, global_batch=256),
    _c("mixtral-8x7b", "h100x64", {"tp": 4, "pp": 2, "dp": 8, "ep": 8, "etp": 2, "recompute": "selective"},
       global_batch=256),
    _c("mixtral-8x22b", "h100x128", {"tp": 4, "pp": 4, "dp": 8, "ep": 8, "vpp": 2, "schedule": "interleaved"},
       global_batch=256),
    _c("qwen3-235b-a22b", "h100x256", {"tp": 4, "pp": 8, "dp": 8, "ep": 16, "etp": 1, "recompute": "full"},
       global_batch=512),
    _c("qwen3-30b-a3b", "h100x16", {"tp": 1, "dp": 16, "ep": 16, "zero_stage": 3}, framework="fsdp"),
    _c("gpt-oss-120b", "h100x64", {"tp": 2, "pp": 2, "dp": 16, "ep": 32}, global_batch=256, seq_len=8192),
    _c("deepseek-v3", "h800x2048", {"tp": 1, "pp": 16, "dp": 128, "ep": 64, "schedule": "dualpipe"},
       global_batch=15360, dtype="fp8"),
    _c("deepseek-v3", "h100x1024", {"tp": 1, "pp": 8, "dp": 128, "ep": 64, "schedule": "1f1b", "recompute": "full",
                                    "first_stage_layers": 7, "last_stage_layers": 6}, global_batch=2048),
    _c("deepseek-v3", "h800x256", {"tp": 2, "pp": 8, "dp": 16, "ep": 32, "cp": 1, "schedule": "zb",
                                   "offload_optimizer": True}, global_batch=512),
    _c("deepseek-v2", "h100x128", {"tp": 2, "pp": 4, "dp": 16, "ep": 16, "cp": 1, "recompute": "selective",
                                   "zero_stage": 1}, global_batch=256),
    _c("deepseek-v2", "h100x128", {"tp": 2, "pp": 2, "dp": 16, "cp": 2, "ep": 8, "cp_comm": "ring"},
       seq_len=16384, global_batch=64),
]


def _evaluation_doc(ev) -> dict:
    d = ev.to_dict()
    d["peak_stage"] = ev.peak_stage
    return d


def _stage_problem_doc(ctx, plan) -> dict:
    from planner.costmodel.balance import stage_problem

    sp = stage_problem(ctx, plan, ctx.cluster.hardware.hbm_capacity_gib)
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(sp).items()}


def build_inputs(case: dict):
    from planner.catalog.hardware import parse_cluster
    from planner.catalog.models import load_model
    from planner.specs import ParallelPlan, TrainingSpec

    return (load_model(case["model"]), parse_cluster(case["cluster"]), TrainingSpec(**case["train"]),
            ParallelPlan(**case["plan"]))


def evaluate_case(case: dict, ctx_cache: dict | None = None) -> dict:
    """Every output number of the cost model for one case (fresh Context unless a cache is given)."""
    from planner.costmodel import Context, evaluate

    model, cluster, train, plan = build_inputs(case)
    key = json.dumps([case["model"], case["cluster"], case["train"]], sort_keys=True)
    ctx = ctx_cache.get(key) if ctx_cache is not None else None
    if ctx is None:
        ctx = Context(model, cluster, train)
        if ctx_cache is not None:
            ctx_cache[key] = ctx
    out = {"evaluation": _evaluation_doc(evaluate(ctx, plan))}
    if plan.pp > 1 and plan.schedule != "dualpipe":
        out["stage_problem"] = _stage_problem_doc(ctx, plan)
    return out


def main() -> int:
    from planner.search.space import plan_errors

    bad = []
    for case in CASES:
        model, cluster, train, plan = build_inputs(case)
        errs = plan_errors(model, train, cluster.count, plan)
        if errs:
            bad.append(f"invalid case {case}: {errs}")
    if bad:
        print("\n".join(bad), file=sys.stderr)
        return 1
    rows = [{"case": case, **evaluate_case(case)} for case in CASES]
    SNAPSHOT.write_text(json.dumps({"cases": rows}, indent=1, sort_keys=True) + "\n")
    print(f"{len(rows)} cases -> {SNAPSHOT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
