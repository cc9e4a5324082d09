#!/usr/bin/env bash
# Megatron-LM launch: llama-3.1-8b on 8 x h100-sxm-80gb (1 node(s) x 8), written by planner.
# tp=1 pp=1 vpp=1 cp=1 dp=8 ep=1 etp=1 micro_batch=2 global_batch=16 grad_accum=1
# Run on every node with NODE_RANK and MASTER_ADDR set. Arguments given to this script are
# appended (data, tokenizer, checkpoints, --train-iters, learning rate...).
# MEGATRON_LM is the Megatron-LM checkout holding pretrain_gpt.py.
set -euo pipefail
MEGATRON_LM="${MEGATRON_LM:-.}"
exec torchrun \
  --nnodes 1 --nproc-per-node 8 \
  --node-rank "${NODE_RANK:-0}" --master-addr "${MASTER_ADDR:-localhost}" --master-port "${MASTER_PORT:-6000}" \
  "$MEGATRON_LM/pretrain_gpt.py" \
  --tensor-model-parallel-size 1 \
  --pipeline-model-parallel-size 1 \
  --num-layers 32 \
  --hidden-size 4096 \
  --ffn-hidden-size 14336 \
  --num-attention-heads 32 \
  --kv-channels 128 \
  --group-query-attention \
  --num-query-groups 8 \
  --attention-dropout 0 \
  --hidden-dropout 0 \
  --seq-length 8192 \
  --max-position-embeddings 131072 \
  --swiglu \
  --disable-bias-linear \
  --normalization RMSNorm \
  --position-embedding-type rope \
  --rotary-base 500000 \
  --use-rope-scaling \
  --rope-scaling-factor 8.0 \
  --untie-embeddings-and-output-weights \
  --tokenizer-type NullTokenizer \
  --vocab-size 128256 \
  --micro-batch-size 2 \
  --global-batch-size 16 \
  --bf16 \
  --recompute-granularity selective \
  --use-megatron-fsdp \
  --data-parallel-sharding-strategy optim_grads_params \
  --ckpt-format fsdp_dtensor \
  --use-distributed-optimizer \
  --overlap-grad-reduce \
  --overlap-param-gather \
  "$@"
