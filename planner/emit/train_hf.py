"""The fixed training entry point of DeepSpeed's Hugging Face model path (written as `train_hf.py`).

It reads only the files written beside it: `hf_config.json` (the planned model), `ds_config.json` (ZeRO, batch,
precision, optimizer) and `deepspeed_args.json` (attention implementation, recompute, sequence length). Data,
step count and learning rate are the launch's arguments.
"""

TRAIN_HF_PY = '''\\
"""Train the planned model with DeepSpeed (written by planner; every setting comes from the files beside it).

usage (through launch_deepspeed.sh): train_hf.py --data TOKENS.bin --steps N [--lr LR] [--data-dtype uint32]
TOKENS.bin is a flat array of token ids (numpy.memmap of --data-dtype), read as samples of seq_len + 1 tokens.
"""
import argparse
import json
import os

import deepspeed
import numpy as np
import torch
import torch.distributed as dist
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.integrations.deepspeed import HfDeepSpeedConfig

HERE = os.path.dirname(os.path.abspath(__file__))


def load(name):
    with open(os.path.join(HERE, name), encoding="utf-8") as f:
        return json.load(f)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True, help="flat binary file of token ids")
    p.add_argument("--data-dtype", default="uint32")
    p.add_argument("--steps", type=int, required=True, help="optimizer steps")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default: ds_config.json's)")
    p.add_argument("--local_rank", type=int, default=-1)
    args = p.parse_args()
    ds, plan = load("ds_config.json"), load("deepspeed_args.json")
    if args.lr is not None:
        ds["optimizer"]["params"]["lr"] = args.lr
    deepspeed.init_distributed()
    keep = HfDeepSpeedConfig(ds)  # ZeRO-3: weights are partitioned while from_config builds them
    cfg = AutoConfig.for_model(**load("hf_config.json"))
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=plan["attn_implementation"],
                                             dtype=torch.bfloat16 if "bf16" in ds else torch.float16)
    if plan["gradient_checkpointing"]:
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
    seq, mbs, sp = plan["seq_len"], ds["train_micro_batch_size_per_gpu"], plan["sequence_parallel_size"]
    mpu = None
    if sp > 1:  # DeepSpeed-Ulysses for transformers models (ALST): attention all-to-alls over the sp ranks
        from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPAttentionHF
        mpu = UlyssesSPAttentionHF.register_with_transformers(
            model_name_or_path=model, core_attn_implementation=plan["attn_implementation"],
            sequence_parallel_size=sp, micro_batch_size=mbs, seq_length=seq, seq_length_is_variable=False)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds, mpu=mpu)
    tokens = np.memmap(args.data, dtype=args.data_dtype, mode="r")
    rank, world = dist.get_rank(), dist.get_world_size()
    group, shard = rank // sp, rank % sp  # sp consecutive ranks share each sample, one sequence shard each
    samples, part = len(tokens) // (seq + 1), seq // sp
    for micro in range(args.steps * ds["gradient_accumulation_steps"]):
        first = (micro * (world // sp) + group) * mbs
        rows = [tokens[((first + i) % samples) * (seq + 1):((first + i) % samples + 1) * (seq + 1)]
                for i in range(mbs)]
        x = torch.from_numpy(np.stack(rows).astype(np.int64)).to(engine.device)
        cut = slice(shard * part, (shard + 1) * part)
        pos = torch.arange(seq, device=x.device).expand(mbs, seq)
        # next-token targets shifted before sharding; each shard's loss is its share of the sample's mean, times
        # sp because the gradients are averaged over every rank of the sp group too
        out = engine(input_ids=x[:, :seq][:, cut], position_ids=pos[:, cut], shift_labels=x[:, 1:][:, cut],
                     num_items_in_batch=mbs * seq)
        loss = out.loss * sp
        engine.backward(loss)
        engine.step()
        if rank == 0 and engine.is_gradient_accumulation_boundary():
            print(f"step {engine.global_steps} loss {loss.item():.4f}", flush=True)
    del keep


if __name__ == "__main__":
    main()
'''
