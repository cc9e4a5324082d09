"""Multi-token prediction (DeepSeek-V3 report, arXiv 2412.19437, sec. 2.2): the MTP modules a model trains beside its
decoder (ModelSpec.mtp_layers; the Megatron and MaxText launch files write them: --mtp-num-layers, mtp_num_layers),
on the rank that holds the LM head and the loss (pipeline.head_stage), where megatron-core builds them
(multi_token_prediction.py mtp_on_this_rank: the last pipeline stage, its last virtual stage with a layout).

Per module, as megatron-core builds it (multi_token_prediction.py MultiTokenPredictionLayer; the report's Figure 3):
RMSNorms of the previous depth's hidden state and of the shifted tokens' embedding (enorm, hnorm), `eh_proj`, a
column-parallel linear 2h -> h without bias over their concatenation, one transformer layer built from the decoder's
last layer spec (get_mtp_layer_spec; DeepSeek-V3's is an MoE layer), a final norm, then the shared output layer and
a second loss. The rank also holds the word embedding the modules read (gpt_model.py builds LanguageModelEmbedding
where pre_process or mtp_process). Under full recompute megatron-core checkpoints the MTP layer too
(MultiTokenPredictionLayer.forward: recompute_granularity == 'full'). This module owns what the modules are; their
time is summed with the stage's (planner.costmodel.layers.stage_times), their memory with the stage's
(planner.costmodel.memory), and their FLOPs with the model's (flops.mtp_module_flops_per_token).
"""

from __future__ import annotations

from collections import Counter

from planner.costmodel.base import ACT_ELEM_BYTES, Context, Shape
from planner.costmodel.flops import layer_fwd_flops_per_token, mtp_module_flops_per_token
from planner.costmodel.params import norm_params
from planner.costmodel.trace import formula
from planner.specs import ModelSpec

MTP = formula(
    "mtp.modules", "per MTP module on the head rank: one more layer of the decoder's last kind (its compute and "
    "collectives, recomputed under full recompute) + eh_proj 2h -> h / tp + the LM head and its loss again; weights: "
    "that layer, eh_proj, 3 norms, and the word embedding where the head rank is not the first",
    "DeepSeek-V3 report (arXiv 2412.19437) sec. 2.2; megatron-core transformer/multi_token_prediction.py "
    "MultiTokenPredictionLayer, models/gpt/gpt_model.py",
)
# Norms of one module: enorm, hnorm and the final layernorm (MultiTokenPredictionLayer.__init__).
NORMS_PER_MODULE = 3


def mtp_kind(ctx: Context) -> int | None:
    """The layer kind of an MTP module's transformer layer (the decoder's last layer spec), None without MTP."""
    return ctx.kind_of_layer[-1] if ctx.model.mtp_layers and ctx.kind_of_layer else None


def mtp_layer_units(m: ModelSpec, seq_len: int) -> int:
    """The MTP modules' forward FLOPs in layers of the decoder's last kind, rounded (0 without MTP): how many fewer
    layers the last pipeline stage takes (partition.mtp_split) and its last virtual stage (the Megatron layout,
    planner.emit.megatron.pipeline_layout), as Megatron's account_for_loss counts the loss as a layer. DeepSeek-V3 at
    4096 tokens: 3 (one MoE layer, eh_proj and the LM head again, 3.40 GFLOP per token, against 1.34 for its MoE
    layer), the count Megatron-Bridge's DeepSeek-V3 layouts leave for the MTP and loss."""
    if not m.mtp_layers or not m.num_layers:
        return 0
    layer = layer_fwd_flops_per_token(m, m.num_layers - 1, seq_len)
    return round(m.mtp_layers * mtp_module_flops_per_token(m, seq_len) / layer)


def eh_proj_params(ctx: Context) -> int:
    """eh_proj's weights: 2h x h, no bias."""
    return 2 * ctx.model.hidden_size * ctx.model.hidden_size


def eh_proj_fwd_s(ctx: Context, shape: Shape) -> float:
    """eh_proj's forward GEMM over the micro-batch's tokens, its output split by TP (column parallel)."""
    h, tp, tokens = ctx.model.hidden_size, shape.plan.tp, shape.tokens
    return tokens * 2.0 * eh_proj_params(ctx) / tp / (ctx.peak * ctx.gemm_eff(tokens, 2 * h, h / tp))


def mtp_layer_counts(ctx: Context) -> Counter:
    """{layer kind: count} of the MTP modules' transformer layers, which the head rank holds beside its own (their
    parameters are counted as the decoder's layers are: planner.costmodel.memory.stage_params)."""
    kid = mtp_kind(ctx)
    return Counter() if kid is None else Counter({kid: ctx.model.mtp_layers})


def mtp_extra_params(ctx: Context, head_rank: int, schedule: str) -> tuple[float, float]:
    """(parameters, of which FP8-able linears) of the MTP modules beyond their layers, unsplit by TP: eh_proj and 3
    norms per module, and the word embedding where the head rank (`head_rank`, its pipeline index) does not hold it
    already: not on rank 0, and not under DualPipe, whose ranks hold the first and the last stage together and share
    the embedding with the MTP modules (DeepSeek-V3 report sec. 2.2 and 3.2.1)."""
    n = ctx.model.mtp_layers
    if not n:
        return 0.0, 0.0
    own = n * (eh_proj_params(ctx) + NORMS_PER_MODULE * norm_params(ctx.model))
    embedding = ctx.params.embedding if head_rank != 0 and schedule != "dualpipe" else 0
    return float(own + embedding), float(n * eh_proj_params(ctx))


def mtp_input_bytes_per_token(ctx: Context, shape: Shape) -> float:
    """What a module saves beyond its layer, per token of the micro-batch: the two normed inputs and their
    concatenation (2h + 2h) and eh_proj's output (h), 16-bit, split along the sequence by TP under sequence
    parallelism."""
    return 5 * ctx.model.hidden_size * ACT_ELEM_BYTES / (shape.plan.tp if shape.sp else 1)
