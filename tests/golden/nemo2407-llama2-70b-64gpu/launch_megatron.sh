#!/usr/bin/env bash
# Megatron-LM launch: llama-2-70b on 64 x h100-sxm-80gb (8 node(s) x 8), written by planner.
# tp=4 pp=4 vpp=20 cp=1 dp=4 ep=1 etp=1 micro_batch=1 global_batch=128 grad_accum=32
# Run on every node with NODE_RANK and MASTER_ADDR set. Arguments given to this script are
# appended (data, tokenizer, checkpoints, --train-iters, learning rate...).
# MEGATRON_LM is the Megatron-LM checkout holding pretrain_gpt.py.
set -euo pipefail
export CUDA_DEVICE_MAX_CONNECTIONS=1
MEGATRON_LM="${MEGATRON_LM:-.}"
exec torchrun \
  --nnodes 8 --nproc-per-node 8 \
  --node-rank "${NODE_RANK:-0}" --master-addr "${MASTER_ADDR:-localhost}" --master-port "${MASTER_PORT:-6000}" \
  "$MEGATRON_LM/pretrain_gpt.py" \
  --tensor-model-parallel-size 4 \
  --pipeline-model-parallel-size 4 \
  --num-layers-per-virtual-pipeline-stage 1 \
  --sequence-parallel \
  --num-layers 80 \
  --hidden-size 8192 \
  --ffn-hidden-size 28672 \
  --num-attention-heads 64 \
  --kv-channels 128 \
  --group-query-attention \
  --num-query-groups 8 \
  --attention-dropout 0 \
  --hidden-dropout 0 \
  --seq-length 4096 \
  --max-position-embeddings 4096 \
  --swiglu \
  --disable-bias-linear \
  --normalization RMSNorm \
  --position-embedding-type rope \
  --rotary-base 10000 \
  --untie-embeddings-and-output-weights \
  --tokenizer-type NullTokenizer \
  --vocab-size 32000 \
  --micro-batch-size 1 \
  --global-batch-size 128 \
  --bf16 \
  --fp8-format hybrid \
  --fp8-recipe tensorwise \
  --use-distributed-optimizer \
  --overlap-grad-reduce \
  --overlap-param-gather \
  "$@"
