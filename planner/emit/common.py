"""Shared helpers of the launch-config emitters: JSON text, launch-script lines, names (the Job they read and
its plan checks: planner.launchers.job)."""

from __future__ import annotations

import json
import shlex

from planner.launchers.job import Job
from planner.specs import ClusterSpec, ModelSpec


def dumps(obj) -> str:
    """Stable JSON text: 2-space indent, keys in insertion order, trailing newline; NaN/Infinity refused
    (they are not JSON: a launcher's parser would reject the file)."""
    return json.dumps(obj, indent=2, default=float, allow_nan=False) + "\n"


def torchrun_tail(job: Job, master_port: int, entry: str, args: list[str]) -> list[str]:
    """The end of a launch script: torchrun over the job's nodes (NODE_RANK / MASTER_ADDR / MASTER_PORT from the
    environment), `entry` (a script or `-m module`), the planned arguments, then those given to the script."""
    out = ["exec torchrun \\",
           f"  --nnodes {job.nodes} --nproc-per-node {job.procs_per_node} \\",
           '  --node-rank "${NODE_RANK:-0}" --master-addr "${MASTER_ADDR:-localhost}" '
           f'--master-port "${{MASTER_PORT:-{master_port}}}" \\',
           f"  {entry} \\"]
    return out + [f"  {line} \\" for line in arg_lines(args)] + ['  "$@"']


def arg_lines(args: list[str]) -> list[str]:
    """Group argv into one shell-quoted `--flag [value...]` per line (for launch scripts)."""
    lines: list[list[str]] = []
    for tok in args:
        if tok.startswith("--") or not lines:
            lines.append([tok])
        else:
            lines[-1].append(tok)
    return [" ".join(shlex.quote(x) for x in line) for line in lines]


def cluster_name(cluster: ClusterSpec) -> str:
    return cluster.name or f"{cluster.hardware.id}x{cluster.count}"


def moe_layer_pattern(model: ModelSpec) -> list[int]:
    """1 for an MoE layer, 0 for a dense one, per layer (HF first_k_dense/layer_freq rule)."""
    return [1 if model.is_moe_layer(i) else 0 for i in range(model.num_layers)]


def run_length_expr(bits: list[int]) -> str:
    """Megatron's `--moe-layer-freq` list expression, e.g. `([0]*3+[1]*58)`."""
    runs: list[tuple[int, int]] = []
    for b in bits:
        if runs and runs[-1][0] == b:
            runs[-1] = (b, runs[-1][1] + 1)
        else:
            runs.append((b, 1))
    return "(" + "+".join(f"[{b}]*{n}" for b, n in runs) + ")"
