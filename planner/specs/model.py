"""Model architecture spec: everything the cost model needs, nothing it does not.

Field names are the planner's own (normalised); `planner.catalog.hf_import` maps Hugging Face
`config.json` fields onto them. Every knob is documented where it is declared.
"""

from __future__ import annotations

from functools import cached_property
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from planner.names import check_name

# The deepest published decoder stacks have a few hundred layers; the search's per-layer work (stage
# solver, cost) makes 100,000 layers take minutes, so deeper specs are refused as input errors.
MAX_LAYERS = 2_048


def _admits_bool(annotation) -> bool:
    """Whether a field's type takes true/false (bool itself, or a union or literal holding it)."""
    import typing

    if annotation is bool:
        return True
    return any(_admits_bool(a) or a is True or a is False for a in typing.get_args(annotation))


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_as_number(cls, v, info):
        """`num_layers: true` is not one layer: true/false are refused where a number is expected (pydantic's
        lax mode would read them as 1 and 0)."""
        if isinstance(v, bool) and info.field_name and not _admits_bool(cls.model_fields[info.field_name].annotation):
            raise ValueError(f"must be a number, got {str(v).lower()}")
        return v


class MLASpec(_Frozen):
    """Multi-head latent attention (DeepSeek-V2 paper, arXiv 2405.04434, sec. 2.1)."""

    q_lora_rank: int | None = Field(None, ge=1, le=1_000_000,
                                    description="low-rank query compression; None = full q_proj")
    kv_lora_rank: int = Field(..., ge=1, le=1_000_000, description="latent KV dimension d_c")
    qk_nope_head_dim: int = Field(..., ge=1, le=100_000, description="per-head non-rotary q/k dimension")
    qk_rope_head_dim: int = Field(..., ge=0, le=100_000, description="decoupled rotary q/k dimension (shared k_rope)")
    v_head_dim: int = Field(..., ge=1, le=100_000, description="per-head value dimension")


class MoESpec(_Frozen):
    """Mixture-of-experts FFN (Switch/GShard style token routing)."""

    num_experts: int = Field(..., ge=1, le=1_000_000, description="routed experts per MoE layer")
    top_k: int = Field(..., ge=1, le=1_000_000, description="routed experts per token")
    expert_ffn_hidden_size: int = Field(..., ge=1, le=10_000_000, description="FFN width of one routed expert")
    num_shared_experts: int = Field(0, ge=0, description="always-on shared experts (DeepSeekMoE)")
    shared_expert_ffn_hidden_size: int | None = Field(
        None, ge=1, description="FFN width of one shared expert (default: expert_ffn_hidden_size)"
    )
    first_k_dense: int = Field(0, ge=0, description="leading layers with a dense FFN instead of MoE")
    layer_freq: int = Field(1, ge=1, description="every layer_freq-th layer (after first_k_dense) is MoE")
    router_bias: bool = Field(
        False,
        description="router has a trainable per-expert bias (gpt-oss). DeepSeek-V3's e_score_correction_bias is a "
        "non-trainable buffer in HF transformers (updated by the balancing rule, not the optimizer): not counted",
    )
    expert_bias: bool = Field(False, description="expert matrices carry biases (gpt-oss)")
    shared_expert_gate: bool = Field(False, description="sigmoid gate h->1 on the shared expert (Qwen2-MoE)")
    route_groups: int = Field(1, ge=1, description="group-limited routing: the experts split into this many "
                              "groups (HF DeepSeek `n_group`; DeepSeek-V3 places one group on each node, an EP "
                              "group over more nodes spreads each group over several)")
    route_topk_groups: int | None = Field(
        None, ge=1, description="each token picks its experts from at most this many groups (HF DeepSeek "
        "`topk_group`; DeepSeek-V3: 4 of 8, 'each token will be sent to at most 4 nodes', arXiv 2412.19437 sec. "
        "2.1.2); None = unlimited")
    score_function: Literal["softmax", "sigmoid"] = Field(
        "softmax", description="router score: softmax over the experts (Mixtral, Qwen-MoE, gpt-oss) or a per-expert "
        "sigmoid (DeepSeek-V3 `scoring_func`, arXiv 2412.19437 sec. 2.1.2)")
    expert_bias_balancing: bool = Field(
        False, description="auxiliary-loss-free balancing: a non-trainable per-expert bias added to the scores for "
        "top-k selection only, updated by the balancing rule (DeepSeek-V3 `noaux_tc`, arXiv 2412.19437 sec. 2.1.2)")
    routed_scaling_factor: float = Field(
        1.0, gt=0, description="routed experts' combined output is multiplied by this (HF `routed_scaling_factor`; "
        "DeepSeek-V3: 2.5)")
    norm_topk_prob: bool = Field(
        True, description="the top-k gate weights are renormalised to sum to 1 (HF `norm_topk_prob`; Mixtral's "
        "softmax over the top-k logits is the same thing)")
    aux_loss_coeff: float = Field(0.0, ge=0, description="load-balancing loss weight (HF `router_aux_loss_coef`, "
                                  "DeepSeek `aux_loss_alpha`); 0 = none")
    aux_loss_per_sequence: bool = Field(False, description="the balance loss is computed per sequence (DeepSeek "
                                        "`seq_aux`, arXiv 2412.19437 sec. 2.1.2 eq. 17-20)")
    z_loss_coeff: float = Field(0.0, ge=0, description="router z-loss weight (ST-MoE, arXiv 2202.08906 sec. 3.1); "
                                "0 = none")
    probs_on_input: bool = Field(False, description="the gate weights scale each routed token before the experts "
                                 "instead of their outputs (Llama 4: HF Llama4TextMoe; Megatron "
                                 "--moe-apply-probs-on-input)")
    dense_layers: tuple[int, ...] = Field(
        (),
        description="0-based layer indices forced to a dense FFN on top of first_k_dense/layer_freq "
        "(HF Qwen-MoE `mlp_only_layers`); indices >= num_layers are ignored, as in HF",
    )

    @field_validator("dense_layers")
    @classmethod
    def _dense_layers(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if any(i < 0 for i in v):
            raise ValueError("dense_layers indices must be >= 0")
        return tuple(sorted(set(v)))

    @cached_property
    def dense_layer_set(self) -> frozenset[int]:
        """`dense_layers` as a set: per-layer membership tests stay O(1) for 100,000-layer models."""
        return frozenset(self.dense_layers)

    @model_validator(mode="after")
    def _check(self) -> "MoESpec":
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k ({self.top_k}) exceeds num_experts ({self.num_experts})")
        if self.num_experts % self.route_groups:
            raise ValueError(f"{self.num_experts} experts do not split into route_groups={self.route_groups}")
        if self.route_topk_groups is not None and self.route_topk_groups > self.route_groups:
            raise ValueError(f"route_topk_groups ({self.route_topk_groups}) exceeds route_groups ({self.route_groups})")
        return self


class RopeScaling(_Frozen):
    """RoPE frequency scaling as in HF `rope_scaling` (llama3: Llama 3.1's `apply_scaling`; yarn: DeepSeek)."""

    rope_type: str = Field(..., min_length=1, description="llama3, yarn, linear, dynamic, ... (HF rope_type)")
    factor: float = Field(..., gt=0)
    low_freq_factor: float | None = Field(None, gt=0, description="llama3 only")
    high_freq_factor: float | None = Field(None, gt=0, description="llama3 only")
    original_max_position_embeddings: int | None = Field(None, ge=1)
    beta_fast: float | None = Field(None, gt=0, description="yarn only (HF default 32)")
    beta_slow: float | None = Field(None, gt=0, description="yarn only (HF default 1)")
    mscale: float | None = Field(None, gt=0, description="yarn only (DeepSeek; HF default 1)")
    mscale_all_dim: float | None = Field(None, ge=0, description="yarn only (DeepSeek; HF default 0)")


class ModelSpec(_Frozen):
    """A decoder-only transformer. Sizes are per layer unless the name says otherwise."""

    name: str = Field(..., min_length=1)
    family: str = Field("custom", description="architecture family (HF model_type where imported)")
    num_layers: int = Field(..., ge=1, le=MAX_LAYERS)
    hidden_size: int = Field(..., ge=1, le=1_000_000)
    num_heads: int = Field(..., ge=1, le=100_000)
    num_kv_heads: int = Field(..., ge=1, le=100_000, description="= num_heads for MHA, 1 for MQA, between for GQA")
    head_dim: int = Field(..., ge=1, le=100_000,
                          description="per-head q/k/v width (not hidden/heads for Qwen3, Gemma 2, gpt-oss)")
    ffn_hidden_size: int = Field(..., ge=1, le=10_000_000, description="dense FFN width (per matrix)")
    vocab_size: int = Field(..., ge=1, le=100_000_000)
    # int32 positions in every launcher (Megatron --max-position-embeddings, torchtitan max_seq_len); the
    # longest published context is 10M tokens (Llama 4 Scout)
    max_position_embeddings: int = Field(4096, ge=1, le=2**31 - 1)
    mlp_type: Literal["gated", "plain"] = Field(
        "gated", description="gated = 3 matrices (SwiGLU/GeGLU gate, up, down); plain = 2 (GELU/ReLU^2 up, down)"
    )
    activation: str = Field("silu", description="informational: silu, gelu, gelu_tanh, relu2, ...")
    norm_type: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    norm_bias: bool = Field(
        True, description="LayerNorm carries a bias (False: MPT's bias-free LayerNorm); ignored for RMSNorm"
    )
    norms_per_layer: int = Field(2, ge=0, description="2 for pre-norm; 4 for Gemma 2 (pre+post)")
    qkv_bias: bool = False
    attn_out_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = Field(False, description="per-head RMSNorm on q and k (Qwen3)")
    attention_sinks: bool = Field(False, description="one learned sink logit per head (gpt-oss)")
    tied_embeddings: bool = False
    position_embedding: Literal["rope", "learned", "alibi", "relative", "none"] = Field(
        "rope", description="relative = T5-style learned relative position bias added to the attention logits")
    relative_attention_num_buckets: int = Field(
        0, ge=0, le=100_000, description="T5-style relative position bias: buckets x heads logit biases, one table "
        "per model as in HF T5 (only with position_embedding 'relative')")
    # a base <= 1 has no rotation (5e-324 was written as Megatron --rotary-base 0); published bases 1e4 .. 1e7
    rope_theta: float = Field(10000.0, gt=1, le=1e12,
                              description="RoPE base (HF rope_theta; 10000 as in RoFormer/Llama 1)")
    rope_scaling: RopeScaling | None = Field(None, description="RoPE frequency scaling (HF rope_scaling)")
    rope_local_theta: float | None = Field(None, gt=0, description="RoPE base of the sliding-window layers when it "
                                           "differs (Gemma 3 `rope_local_base_freq`); None = rope_theta")
    rotary_fraction: float = Field(1.0, gt=0, le=1, description="share of each head's q/k dimensions RoPE rotates "
                                   "(HF `partial_rotary_factor`, GPT-NeoX `rotary_pct`; Megatron --rotary-percent): "
                                   "Nemotron-4 0.5, GPT-NeoX 0.25")
    embedding_norm: bool = Field(False, description="LayerNorm after the embedding (BLOOM)")
    parallel_attn_mlp: bool = Field(False, description="attention and MLP read the same input (GPT-J/Falcon/NeoX)")
    sliding_window: int | None = Field(None, ge=1, description="local attention window, tokens")
    num_sliding_layers: int = Field(0, ge=0, description="layers that use the sliding window (rest attend globally)")
    sliding_layer_pattern: tuple[int, ...] = Field(
        (), description="1 for a sliding-window layer, 0 for a global one, per layer (HF `layer_types`); empty: "
        "every layer when num_sliding_layers = num_layers, else not stated")
    attention_chunk_size: int | None = Field(
        None, ge=1, description="chunked local attention: a query attends causally only inside its own block of this "
        "many tokens (Llama 4 `attention_chunk_size`, HF Llama4TextAttention), on the layers chunked_layer_pattern "
        "marks; a model has sliding windows or chunks, not both")
    chunked_layer_pattern: tuple[int, ...] = Field(
        (), description="1 for a chunked-attention layer, 0 for a global one, per layer (HF Llama 4 `layer_types` "
        "chunked_attention: the RoPE layers); empty with attention_chunk_size: every layer")
    nope_layer_pattern: tuple[int, ...] = Field(
        (), description="1 for a layer that applies no rotary embedding (NoPE), 0 otherwise, per layer (Llama 4: the "
        "0 entries of HF `no_rope_layers`, every 4th layer); empty: every layer applies the model's positions")
    qk_l2_norm: bool = Field(False, description="weightless L2 norm of q and k per head on the RoPE layers (Llama 4 "
                             "`use_qk_norm`, HF Llama4TextL2Norm); no parameters")
    attn_temperature_tuning: tuple[float, float] | None = Field(
        None, description="(floor_scale, attn_scale): the NoPE layers scale q by log(floor((pos + 1) / floor_scale) "
        "+ 1) x attn_scale + 1 (Llama 4 `attn_temperature_tuning`, HF Llama4TextAttention); no parameters")
    norm_eps: float | None = Field(None, gt=0, description="epsilon of every norm (HF rms_norm_eps / "
                                   "layer_norm_epsilon); None = not stated")
    scale_embeddings: bool = Field(False, description="the embedding output is multiplied by sqrt(hidden_size) "
                                   "(Gemma: HF Gemma*Model `normalizer`)")
    attn_logit_softcap: float | None = Field(None, gt=0, description="tanh soft cap of the attention logits "
                                             "(Gemma 2 `attn_logit_softcapping`)")
    final_logit_softcap: float | None = Field(None, gt=0, description="tanh soft cap of the output logits "
                                              "(Gemma 2 `final_logit_softcapping`)")
    mtp_layers: int = Field(0, ge=0, le=MAX_LAYERS, description="multi-token-prediction modules trained beside the "
                            "model (DeepSeek-V3 `num_nextn_predict_layers`, arXiv 2412.19437 sec. 2.2); not counted "
                            "in the parameters, as DeepSeek's 671B, but costed on the LM head's rank "
                            "(planner.costmodel.mtp)")
    mla: MLASpec | None = None
    moe: MoESpec | None = None
    source: str = Field("", description="where the architecture numbers come from")

    @field_validator("name", "family", "activation")
    @classmethod
    def _one_line_name(cls, v: str, info) -> str:
        return check_name(v, info.field_name)  # names reach shell comments and YAML: no line breaks

    @model_validator(mode="after")
    def _check(self) -> "ModelSpec":
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) is not a multiple of num_kv_heads ({self.num_kv_heads})")
        if self.num_sliding_layers > self.num_layers:
            raise ValueError("num_sliding_layers exceeds num_layers")
        if self.num_sliding_layers and self.sliding_window is None:
            raise ValueError("num_sliding_layers > 0 needs sliding_window")
        pat = self.sliding_layer_pattern
        if pat and (len(pat) != self.num_layers or sum(pat) != self.num_sliding_layers or set(pat) - {0, 1}):
            raise ValueError("sliding_layer_pattern needs one 0/1 entry per layer, with num_sliding_layers ones")
        for name, pat_ in (("chunked_layer_pattern", self.chunked_layer_pattern),
                           ("nope_layer_pattern", self.nope_layer_pattern)):
            if pat_ and (len(pat_) != self.num_layers or set(pat_) - {0, 1}):
                raise ValueError(f"{name} needs one 0/1 entry per layer")
        if self.chunked_layer_pattern and self.attention_chunk_size is None:
            raise ValueError("chunked_layer_pattern needs attention_chunk_size")
        if self.attention_chunk_size is not None and self.num_sliding_layers:
            raise ValueError("a model has sliding-window layers or chunked-attention layers, not both")
        if self.relative_attention_num_buckets and self.position_embedding != "relative":
            raise ValueError("relative_attention_num_buckets needs position_embedding 'relative'")
        if self.moe is not None and self.moe.first_k_dense > self.num_layers:
            raise ValueError("moe.first_k_dense exceeds num_layers")
        return self

    # -- derived structure (pure functions of the fields) ---------------------------------
    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    def require_moe(self) -> MoESpec:
        """The MoE spec, for code reached only through an MoE layer."""
        if self.moe is None:
            raise ValueError(f"{self.name} is not a mixture-of-experts model")
        return self.moe

    def is_moe_layer(self, i: int) -> bool:
        """Layer i (0-based) has an MoE FFN (HF DeepSeek/Qwen-MoE rule)."""
        m = self.moe
        return (
            m is not None
            and i >= m.first_k_dense
            and (i - m.first_k_dense) % m.layer_freq == 0
            and i not in m.dense_layer_set
        )

    def sliding_pattern(self) -> tuple[int, ...] | None:
        """1 (sliding) or 0 (global) per layer; None when some layers slide but the spec does not say which."""
        if self.sliding_layer_pattern:
            return self.sliding_layer_pattern
        if self.num_sliding_layers in (0, self.num_layers):
            return (1 if self.num_sliding_layers else 0,) * self.num_layers
        return None

    def chunked_pattern(self) -> tuple[int, ...]:
        """1 (chunked attention) or 0 (global) per layer; all 0 without attention_chunk_size."""
        if self.attention_chunk_size is None:
            return (0,) * self.num_layers
        return self.chunked_layer_pattern or (1,) * self.num_layers

    @property
    def num_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.num_layers)) if self.moe else 0

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def ffn_matrices(self) -> int:
        return 3 if self.mlp_type == "gated" else 2
