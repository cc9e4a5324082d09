#!/usr/bin/env bash
# Megatron-LM launch: llama-3.1-405b on 1152 x h100-sxm-80gb (144 node(s) x 8), written by planner.
# tp=8 pp=9 vpp=7 cp=2 dp=8 ep=1 etp=1 micro_batch=1 global_batch=504 grad_accum=63
# Run on every node with NODE_RANK and MASTER_ADDR set. Arguments given to this script are
# appended (data, tokenizer, checkpoints, --train-iters, learning rate...).
# MEGATRON_LM is the Megatron-LM checkout holding pretrain_gpt.py.
set -euo pipefail
export CUDA_DEVICE_MAX_CONNECTIONS=1
MEGATRON_LM="${MEGATRON_LM:-.}"
exec torchrun \
  --nnodes 144 --nproc-per-node 8 \
  --node-rank "${NODE_RANK:-0}" --master-addr "${MASTER_ADDR:-localhost}" --master-port "${MASTER_PORT:-6000}" \
  "$MEGATRON_LM/pretrain_gpt.py" \
  --tensor-model-parallel-size 8 \
  --pipeline-model-parallel-size 9 \
  --num-layers-per-virtual-pipeline-stage 2 \
  --sequence-parallel \
  --context-parallel-size 2 \
  --cp-comm-type p2p \
  --num-layers 126 \
  --hidden-size 16384 \
  --ffn-hidden-size 53248 \
  --num-attention-heads 128 \
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
  --micro-batch-size 1 \
  --global-batch-size 504 \
  --bf16 \
  --use-distributed-optimizer \
  --overlap-grad-reduce \
  --overlap-param-gather \
  "$@"
