"""Checker (runs in its own interpreter): load each ds_config with DeepSpeed's own DeepSpeedConfig.

DeepSpeedConfig asks torch.distributed for the world size; outside a launched job it falls back to 1.
The batch triangle counts data-parallel ranks only, so get_world_size is patched to return the plan's dp
(shared/reference/launchers.md sec. 2). Everything else is DeepSpeed's code.
usage: check_deepspeed.py requests.json results.json; request: {"id", "config": {...}, "dp": int}
"""

import json
import sys
import traceback
from unittest import mock


def main(req_path: str, out_path: str) -> None:
    import deepspeed.runtime.config as dsc
    from deepspeed.runtime.config import DeepSpeedConfig

    results = {}
    for r in json.load(open(req_path)):
        try:
            with mock.patch.object(dsc.dist, "get_world_size", return_value=r["dp"]), \
                    mock.patch.object(dsc.dist, "get_rank", return_value=0):
                c = DeepSpeedConfig(r["config"])
        except Exception as e:  # the consumer's own rejection
            results[r["id"]] = {"ok": False, "error": f"{type(e).__name__}: {e}",
                                "trace": traceback.format_exc(limit=3)}
            continue
        off = c.zero_config.offload_optimizer
        results[r["id"]] = {
            "ok": True, "error": "",
            "train_batch_size": c.train_batch_size,
            "micro_batch": c.train_micro_batch_size_per_gpu,
            "grad_accum": c.gradient_accumulation_steps,
            "world_size": c.world_size,
            "zero_stage": c.zero_optimization_stage,
            "offload_optimizer": str(off.device) if off is not None else None,
            "fp16": bool(c.float16_config.enabled),
            "bf16": bool(c.bfloat16_config.enabled),
        }
    json.dump(results, open(out_path, "w"))


if __name__ == "__main__":
    main(*sys.argv[1:3])
