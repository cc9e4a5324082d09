#!/usr/bin/env bash
# torchtitan 0.3.0 launch: llama-3.1-405b on 1152 x h100-sxm-80gb (144 node(s) x 8), written by planner.
# tp=8 pp=9 vpp=7 cp=2 dp=8 ep=1 micro_batch=1 global_batch=504
# Run on every node with NODE_RANK and MASTER_ADDR set. Arguments given to this script are appended.
# INHERITED from the --config registry function unless given here (torchtitan_args.json 'inherited'):
#   --training.steps, --dataloader.dataset(_path) DATA, --hf_assets_path TOKENIZER, --optimizer.*,
#   --lr_scheduler.*, --checkpoint.* (CHECKPOINTS).
set -euo pipefail
cd "$(dirname "$0")"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # torchtitan_model.py, the planned model
exec torchrun \
  --nnodes 144 --nproc-per-node 8 \
  --node-rank "${NODE_RANK:-0}" --master-addr "${MASTER_ADDR:-localhost}" --master-port "${MASTER_PORT:-29500}" \
  -m torchtitan.train \
  --module torchtitan_model \
  --config planner_model \
  --parallelism.data_parallel_replicate_degree 1 \
  --parallelism.data_parallel_shard_degree 8 \
  --parallelism.fsdp_reshard_after_forward never \
  --parallelism.tensor_parallel_degree 8 \
  --parallelism.enable_sequence_parallel \
  --parallelism.pipeline_parallel_degree 9 \
  --parallelism.pipeline_parallel_schedule Interleaved1F1B \
  --parallelism.pipeline_parallel_layers_per_stage 2 \
  --parallelism.pipeline_parallel_first_stage_less_layers 0 \
  --parallelism.pipeline_parallel_last_stage_less_layers 0 \
  --parallelism.pipeline_parallel_microbatch_size 1 \
  --parallelism.context_parallel_degree 2 \
  --training.local_batch_size 63 \
  --training.global_batch_size 504 \
  --training.seq_len 8192 \
  --training.mixed_precision_param bfloat16 \
  --loss.num_chunks 1 \
  --compile.no-enable \
  --compile.no-enable_async_tensor_parallel \
  --training.disable_cuda_graphs activation-checkpoint:none \
  "$@"
