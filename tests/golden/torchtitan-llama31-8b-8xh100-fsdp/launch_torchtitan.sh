#!/usr/bin/env bash
# torchtitan 0.3.0 launch: llama-3.1-8b on 8 x h100-sxm-80gb (1 node(s) x 8), written by planner.
# tp=1 pp=1 vpp=1 cp=1 dp=8 ep=1 micro_batch=2 global_batch=16
# Run on every node with NODE_RANK and MASTER_ADDR set. Arguments given to this script are appended.
# INHERITED from the --config registry function unless given here (torchtitan_args.json 'inherited'):
#   --training.steps, --dataloader.dataset(_path) DATA, --hf_assets_path TOKENIZER, --optimizer.*,
#   --lr_scheduler.*, --checkpoint.* (CHECKPOINTS).
set -euo pipefail
cd "$(dirname "$0")"
exec torchrun \
  --nnodes 1 --nproc-per-node 8 \
  --node-rank "${NODE_RANK:-0}" --master-addr "${MASTER_ADDR:-localhost}" --master-port "${MASTER_PORT:-29500}" \
  -m torchtitan.train \
  --module llama3 \
  --config llama3_8b \
  --parallelism.data_parallel_replicate_degree 1 \
  --parallelism.data_parallel_shard_degree 8 \
  --parallelism.tensor_parallel_degree 1 \
  --parallelism.pipeline_parallel_degree 1 \
  --parallelism.context_parallel_degree 1 \
  --training.local_batch_size 2 \
  --training.global_batch_size 16 \
  --training.seq_len 8192 \
  --training.mixed_precision_param bfloat16 \
  --loss.num_chunks 1 \
  --compile.no-enable \
  --compile.no-enable_async_tensor_parallel activation-checkpoint:selective \
  "$@"
