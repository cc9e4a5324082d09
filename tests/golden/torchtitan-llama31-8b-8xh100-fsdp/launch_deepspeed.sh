#!/usr/bin/env bash
# DeepSpeed (Megatron-DeepSpeed) launch: 8 x h100-sxm-80gb (1 node(s) x 8), written by planner.
# tp=1 pp=1 dp=8 zero=3 micro_batch=2 global_batch=16 grad_accum=1
# PLACEHOLDERS to give at launch (appended to the arguments): --data-path DATA, --tokenizer-type/--tokenizer-model TOKENIZER
# (NullTokenizer with the planned vocabulary is the stand-in), --save/--load CHECKPOINTS, --train-iters, --lr.
# MEGATRON_DEEPSPEED is the Megatron-DeepSpeed checkout; HOSTFILE lists the nodes (DeepSpeed hostfile format).
set -euo pipefail
MEGATRON_DEEPSPEED="${MEGATRON_DEEPSPEED:-.}"
cd "$(dirname "$0")"  # ds_config.json sits beside this script
exec deepspeed \
  --num_nodes 1 --num_gpus 8 \
  --hostfile "${HOSTFILE:-/job/hostfile}" --master_port "${MASTER_PORT:-29500}" \
  "$MEGATRON_DEEPSPEED/pretrain_gpt.py" \
  --tensor-model-parallel-size 1 \
  --pipeline-model-parallel-size 1 \
  --no-pipeline-parallel \
  --num-layers 32 \
  --hidden-size 4096 \
  --ffn-hidden-size 14336 \
  --num-attention-heads 32 \
  --kv-channels 128 \
  --num-key-value-heads 8 \
  --swiglu \
  --normalization rmsnorm \
  --use-rotary-position-embeddings \
  --no-position-embedding \
  --rotary-position-embeddings-theta 500000 \
  --untie-embeddings-and-output-weights \
  --disable-bias-linear \
  --attention-dropout 0 \
  --hidden-dropout 0 \
  --tokenizer-type NullTokenizer \
  --vocab-size 128256 \
  --seq-length 8192 \
  --max-position-embeddings 131072 \
  --micro-batch-size 2 \
  --global-batch-size 16 \
  --bf16 \
  --zero-stage 3 \
  --recompute-granularity selective \
  --deepspeed \
  --deepspeed_config ds_config.json \
  "$@"
