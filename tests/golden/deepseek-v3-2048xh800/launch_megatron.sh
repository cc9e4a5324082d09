#!/usr/bin/env bash
# Megatron-LM launch: deepseek-v3 on 2048 x h800-sxm-80gb (256 node(s) x 8), written by planner.
# tp=1 pp=16 vpp=1 cp=1 dp=128 ep=64 etp=1 micro_batch=1 global_batch=15360 grad_accum=120
# Run on every node with NODE_RANK and MASTER_ADDR set. Arguments given to this script are
# appended (data, tokenizer, checkpoints, --train-iters, learning rate...).
# MEGATRON_LM is the Megatron-LM checkout holding pretrain_gpt.py.
set -euo pipefail
MEGATRON_LM="${MEGATRON_LM:-.}"
exec torchrun \
  --nnodes 256 --nproc-per-node 8 \
  --node-rank "${NODE_RANK:-0}" --master-addr "${MASTER_ADDR:-localhost}" --master-port "${MASTER_PORT:-6000}" \
  "$MEGATRON_LM/pretrain_gpt.py" \
  --tensor-model-parallel-size 1 \
  --pipeline-model-parallel-size 16 \
  --decoder-first-pipeline-num-layers 3 \
  --decoder-last-pipeline-num-layers 2 \
  --num-layers 61 \
  --hidden-size 7168 \
  --ffn-hidden-size 18432 \
  --num-attention-heads 128 \
  --multi-latent-attention \
  --q-lora-rank 1536 \
  --kv-lora-rank 512 \
  --qk-head-dim 128 \
  --qk-pos-emb-head-dim 64 \
  --v-head-dim 128 \
  --attention-dropout 0 \
  --hidden-dropout 0 \
  --seq-length 4096 \
  --max-position-embeddings 163840 \
  --swiglu \
  --disable-bias-linear \
  --normalization RMSNorm \
  --norm-epsilon 1e-06 \
  --position-embedding-type rope \
  --rotary-base 10000 \
  --rope-type yarn \
  --rotary-scaling-factor 40.0 \
  --mscale 1.0 \
  --mscale-all-dim 1.0 \
  --untie-embeddings-and-output-weights \
  --mtp-num-layers 1 \
  --tokenizer-type NullTokenizer \
  --vocab-size 129280 \
  --num-experts 256 \
  --moe-router-topk 8 \
  --moe-ffn-hidden-size 2048 \
  --moe-layer-freq '([0]*3+[1]*58)' \
  --moe-shared-expert-intermediate-size 2048 \
  --moe-router-score-function sigmoid \
  --moe-router-enable-expert-bias \
  --moe-router-num-groups 8 \
  --moe-router-group-topk 4 \
  --moe-router-topk-scaling-factor 2.5 \
  --moe-router-load-balancing-type seq_aux_loss \
  --moe-aux-loss-coeff 0.0001 \
  --expert-model-parallel-size 64 \
  --expert-tensor-parallel-size 1 \
  --moe-token-dispatcher-type alltoall \
  --moe-permute-fusion \
  --moe-router-fusion \
  --moe-shared-expert-overlap \
  --moe-grouped-gemm \
  --micro-batch-size 1 \
  --global-batch-size 15360 \
  --bf16 \
  --fp8-format hybrid \
  --fp8-recipe tensorwise \
  --recompute-granularity selective \
  --recompute-modules layernorm moe_act mla_up_proj \
  --use-distributed-optimizer \
  --overlap-grad-reduce \
  --overlap-param-gather \
  "$@"
