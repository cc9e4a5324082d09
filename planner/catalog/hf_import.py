"""Import a Hugging Face `config.json` (as a dict) into a `ModelSpec`.

Each family reads its own transformers config field names (including the `attribute_map` aliases, e.g.
GPT-2 `n_embd` or `hidden_size`) and falls back to that config class's default for an absent optional
field, so the spec describes exactly the module tree `AutoModelForCausalLM.from_config` builds
(tests/costmodel/test_transformers_counts.py checks the parameter count against transformers itself).

The architecture sizes that have no meaningful default (width, depth, heads, and the FFN width where
it is not derived from the width) are required. Everything wrong with the input raises
`planner.errors.InputError` with one line naming the field and what to do.

Family notes (what is modelled beyond the plain Llama layout):

* qwen2: q/k/v biases (hard-coded in HF). qwen3/qwen3_moe: per-head q/k RMSNorm; `head_dim` may make
  q/o non-square. qwen2_moe/qwen3_moe: MoE on layers with `(i+1) % decoder_sparse_step == 0` minus
  `mlp_only_layers`; qwen2_moe adds a shared expert and its h->1 gate.
* mixtral: every layer MoE, experts of width `intermediate_size`.
* deepseek_v2/v3: MLA; MoE on layers `i >= first_k_dense_replace and i % moe_layer_freq == 0` (the
  DeepSeek reference code; transformers ignores `moe_layer_freq`, all published configs use 1); the
  shared experts are one MLP of width `n_shared_experts*moe_intermediate_size`; `n_routed_experts: null`
  means a dense model. DeepSeek-V3's `e_score_correction_bias` is a buffer in transformers (not a
  trainable parameter) and is not counted. The MTP module (`num_nextn_predict_layers`) is not
  instantiated by transformers and is excluded, as in DeepSeek's "671B". `head_dim` is set to
  `qk_nope_head_dim + qk_rope_head_dim` (the q/k width).
* gpt2: fused c_attn with biases, learned positions (`n_positions`), `n_inner` None -> 4*n_embd, tied head.
* bloom: ALiBi, LayerNorm after the embedding, biases everywhere, FFN 4h, tied head.
* falcon: `new_decoder_architecture` (GQA with `num_kv_heads`, 2 LayerNorms ln_attn/ln_mlp),
  `multi_query` (one kv head), else MHA; `parallel_attn` with one LayerNorm; `bias` on all linears
  (LayerNorms always have a bias); `ffn_hidden_size` None -> 4h; `alibi`; tied head by default.
* gemma: GeGLU, head_dim 256 default, tied. gemma2: adds pre/post norms (4 per layer), alternating
  sliding/global layers (`layer_types`). gemma3_text: gemma2's layout plus per-head q/k RMSNorm; every
  `sliding_window_pattern`-th layer (default 6) attends globally, the rest use the sliding window (HF
  Gemma3TextConfig: `layer_types[i]` is sliding iff `(i + 1) % sliding_window_pattern`).
* maxtext_default_2023: MaxText's default decoder of 2023 (shared/reference/known_runs_notes.md), not
  an HF architecture: parallel attention+MLP block behind ONE pre-norm (RMS), non-gated MLP of
  `ffn_matrices` (2) matrices with `hidden_act` (relu), explicit `head_dim` (heads x head_dim may differ
  from hidden), tied embedding, no biases; `position` text says T5-style relative position bias ("relative
  ... (N buckets)") or RoPE, and whether q/k are normed ("QK" / "q,k"); explicit
  `relative_attention_num_buckets` / `qk_norm` fields take precedence.
* nemotron: squared-ReLU MLP (2 matrices), LayerNorm1P (weight + bias), `head_dim`, untied.
* gpt_oss: attention biases and one sink per head, router bias, expert biases, `layer_types`.
* gpt_neox: fused qkv (`attention_bias`), MLP biases always, 2 LayerNorms, untied `embed_out`.
* mpt: `d_model`/`n_heads`/`n_layers`; FFN `expansion_ratio*d_model`; `no_bias` removes the linear
  AND LayerNorm biases (MosaicML llm-foundry semantics; transformers' port hard-codes ratio 4 and
  no bias, which equals every published MPT); ALiBi (`attn_config.alibi`) else learned positions.
* phi3: fused qkv and gate_up projections (same counts as Llama).
* glm4_moe (GLM-4.5 / 4.6 / 4.5-Air): GQA with q/k/v biases (`attention_bias`) and optional q/k RMSNorm
  (`use_qk_norm`), RoPE on `partial_rotary_factor` of each head; DeepSeek-V3's MoE (sigmoid router with the
  e_score_correction_bias buffer, shared experts) after `first_k_dense_replace` dense layers; MTP modules.
* llama4_text (and llama4, whose `text_config` is read: the vision encoder is not costed): dense layers of width
  `intermediate_size_mlp`, MoE layers (`interleave_moe_layer_step` / `moe_layers`) of experts and one shared
  expert of width `intermediate_size`, sigmoid top-k router applied to the expert input; chunked attention on the
  RoPE layers, NoPE layers (`no_rope_layers`), weightless L2 q/k norm and attention temperature tuning.
"""

from __future__ import annotations

import builtins
import functools
import math
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from planner.errors import InputError
from planner.names import did_you_mean
from planner.specs import MLASpec, ModelSpec, MoESpec, RopeScaling
from planner.specs.model import MAX_LAYERS  # the ModelSpec.num_layers bound, enforced before any per-layer loop

_REQUIRED = object()

# config.json `architectures` class name -> model_type (used when `model_type` is absent)
_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "MixtralForCausalLM": "mixtral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "GPT2LMHeadModel": "gpt2",
    "BloomForCausalLM": "bloom",
    "FalconForCausalLM": "falcon",
    "GemmaForCausalLM": "gemma",
    "Gemma2ForCausalLM": "gemma2",
    "NemotronForCausalLM": "nemotron",
    "GptOssForCausalLM": "gpt_oss",
    "Glm4MoeForCausalLM": "glm4_moe",
    "GPTNeoXForCausalLM": "gpt_neox",
    "MptForCausalLM": "mpt",
    "Phi3ForCausalLM": "phi3",
    "Llama4ForCausalLM": "llama4_text",
    "Llama4ForConditionalGeneration": "llama4",
}

_ACTIVATIONS = {
    "silu": "silu",
    "swish": "silu",
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_python": "gelu",
    "relu2": "relu2",
    "relu": "relu",
}


def _fmt(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


class _Reader:
    """Typed access to one config dict, with one-line errors naming the field."""

    def __init__(self, cfg: dict, family: str, where: str = ""):
        self.cfg = cfg
        self.family = family
        self.where = where or f"{family} config"
        self.defaulted: dict[str, Any] = {}  # integer fields absent from the config -> the HF default used

    def _err(self, key: str, what: str) -> InputError:
        return InputError(f"{self.where}: field '{key}' {what}")

    def _lookup(self, key: str, aliases: tuple[str, ...]) -> tuple[str, Any]:
        """(name found, value) among key and its aliases; conflicting duplicates are an error."""
        found = [(k, self.cfg[k]) for k in (key, *aliases) if self.cfg.get(k) is not None]
        if not found:
            return key, None
        k0, v0 = found[0]
        for k, v in found[1:]:
            if v != v0:
                raise self._err(k0, f"= {_fmt(v0)} conflicts with its alias '{k}' = {_fmt(v)}: keep one of them")
        return k0, v0

    def int(self, key: str, default: Any = _REQUIRED, *, aliases: tuple[str, ...] = (), minimum: int = 1,
            maximum: int | None = None, what: str = "", null: Any = _REQUIRED) -> Any:
        """Integer field. Absent -> `default` (the HF default; _REQUIRED: error). Present as null ->
        `null` (e.g. None: "no window" / "derive it"), or `default` when `null` is not given."""
        k, v = self._lookup(key, aliases)
        if v is None:
            if null is not _REQUIRED and any(a in self.cfg for a in (key, *aliases)):
                return null
            if default is _REQUIRED:
                hint = f" ({what})" if what else ""
                raise self._err(key, f"is missing: add it{hint} to the config")
            if default is not None:
                self.defaulted.setdefault(key, default)
            return default
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            raise self._err(k, f"must be an integer, got {type(v).__name__} {_fmt(v)}: fix the config")
        if v < minimum:
            raise self._err(k, f"must be >= {minimum}, got {v}: fix the config")
        if maximum is not None and v > maximum:
            raise self._err(k, f"must be <= {maximum}, got {v}: fix the config")
        return v

    def bool(self, key: str, default: bool) -> bool:
        v = self.cfg.get(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self._err(key, f"must be true or false, got {type(v).__name__} {_fmt(v)}: fix the config")
        return v

    def str(self, key: str, default: str | None) -> str | None:
        v = self.cfg.get(key)
        if v is None:
            return default
        if not isinstance(v, str):
            raise self._err(key, f"must be a string, got {type(v).__name__} {_fmt(v)}: fix the config")
        return v

    def list(self, key: builtins.str, item: type, default: builtins.list | None) -> builtins.list | None:
        v = self.cfg.get(key)
        if v is None:
            return default
        if not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, item) for x in v):
            raise self._err(key, f"must be a list of {item.__name__}, got {_fmt(v)}: fix the config")
        return v

    def dict(self, key: builtins.str) -> builtins.dict:
        v = self.cfg.get(key)
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise self._err(key, f"must be a mapping, got {type(v).__name__} {_fmt(v)}: fix the config")
        return v


# --------------------------------------------------------------------------------------------
# shared helpers


def _heads(r: _Reader, h: int, nh: int, nkv: int, head_dim: int | None, *, head_dim_key: str | None = "head_dim",
           heads_key: str = "num_attention_heads", kv_key: str = "num_key_value_heads") -> int:
    """Validate the head layout; return head_dim (hidden/heads when not given explicitly)."""
    if nh % nkv:
        raise r._err(kv_key, f"= {nkv} does not divide {heads_key} = {nh}: use a divisor of the head count")
    if head_dim is None:
        if h % nh:
            fix = f"set '{head_dim_key}' or use" if head_dim_key else "use"
            raise r._err(heads_key, f"= {nh} does not divide hidden size {h}: {fix} a head count that divides it")
        head_dim = h // nh
    return head_dim


def _activation(name: str | None, default: str) -> str:
    return _ACTIVATIONS.get(name or default, name or default)


def _window_all_layers(window: int | None, num_layers: int) -> dict:
    return {"sliding_window": window, "num_sliding_layers": num_layers if window else 0}


def _window_layer_types(r: _Reader, num_layers: int, window: int | None,
                        default: Callable[[int], bool]) -> dict:
    """Sliding-window layers from `layer_types` (HF) or the family's default pattern."""
    types = r.list("layer_types", str, None)
    if types is None:
        n = sum(default(i) for i in range(num_layers))
    else:
        if len(types) != num_layers:
            raise r._err("layer_types", f"has {len(types)} entries but the model has {num_layers} layers: "
                         "give one entry per layer")
        bad = sorted({t for t in types if t not in ("sliding_attention", "full_attention")})
        if bad:
            raise r._err("layer_types", f"has unknown entries {bad}: use 'sliding_attention' or 'full_attention'")
        n = types.count("sliding_attention")
    if window is None or n == 0:
        return {"sliding_window": None, "num_sliding_layers": 0}
    pattern = (tuple(int(default(i)) for i in range(num_layers)) if types is None
               else tuple(int(t == "sliding_attention") for t in types))
    return {"sliding_window": window, "num_sliding_layers": n,
            "sliding_layer_pattern": () if n == num_layers else pattern}


def _sparse_step_moe(r: _Reader, num_layers: int, num_experts: int, **moe: Any) -> MoESpec | None:
    """Qwen-MoE layer rule: MoE iff i not in mlp_only_layers and (i+1) % decoder_sparse_step == 0."""
    step = r.int("decoder_sparse_step", 1)
    only_list = r.list("mlp_only_layers", int, []) or []
    if num_experts == 0:
        return None
    only = set(only_list)  # membership in O(1): a list of 100,000 layers made this loop quadratic
    if step > num_layers or all(i in only for i in range(step - 1, num_layers, step)):
        return None  # no MoE layer at all: a dense model
    return MoESpec(num_experts=num_experts, first_k_dense=step - 1, layer_freq=step,
                   dense_layers=tuple(sorted(i for i in only if 0 <= i < num_layers)), **moe)


# --------------------------------------------------------------------------------------------
# families with the Llama layout (separate or fused q/k/v/o, gated or plain MLP, RMSNorm or LayerNorm1P)

# model_type -> HF config defaults for optional fields
_LLAMA_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": dict(vocab=32000, kv=None, head_dim=None, tie=False, max_pos=2048, act="silu"),
    "mistral": dict(vocab=32000, kv=8, head_dim=None, tie=False, max_pos=131072, act="silu", window=4096),
    "mixtral": dict(vocab=32000, kv=8, head_dim=None, tie=False, max_pos=131072, act="silu", window=None),
    "qwen2": dict(vocab=151936, kv=32, head_dim=None, tie=False, max_pos=32768, act="silu"),
    "qwen2_moe": dict(vocab=151936, kv=16, head_dim=None, tie=False, max_pos=32768, act="silu"),
    "qwen3": dict(vocab=151936, kv=32, head_dim=128, tie=False, max_pos=32768, act="silu"),
    "qwen3_moe": dict(vocab=151936, kv=4, head_dim=None, tie=False, max_pos=32768, act="silu"),
    "gemma": dict(vocab=256000, kv=16, head_dim=256, tie=True, max_pos=8192, act="gelu_pytorch_tanh"),
    "gemma2": dict(vocab=256000, kv=4, head_dim=256, tie=True, max_pos=8192, act="gelu_pytorch_tanh", window=4096),
    # transformers Gemma3TextConfig defaults
    "gemma3_text": dict(vocab=262208, kv=4, head_dim=256, tie=True, max_pos=131072, act="gelu_pytorch_tanh",
                        window=4096),
    "nemotron": dict(vocab=256000, kv=None, head_dim=None, tie=False, max_pos=4096, act="relu2"),
    "gpt_oss": dict(vocab=201088, kv=8, head_dim=64, tie=False, max_pos=131072, act="silu", window=128),
    "phi3": dict(vocab=32064, kv=None, head_dim=None, tie=False, max_pos=4096, act="silu", window=None),
    "deepseek_v2": dict(vocab=102400, kv=None, head_dim=None, tie=False, max_pos=2048, act="silu"),
    "deepseek_v3": dict(vocab=129280, kv=128, head_dim=None, tie=False, max_pos=4096, act="silu"),
    # transformers 5.24.0 Glm4MoeConfig defaults (GLM-4.5-Air's shape; head_dim: hidden / heads when absent)
    "glm4_moe": dict(vocab=151552, kv=8, head_dim=None, tie=False, max_pos=131072, act="silu"),
    # transformers 5.24.0 Llama4TextConfig defaults (the text model of Llama4Config, `text_config`)
    "llama4_text": dict(vocab=202048, kv=8, head_dim=128, tie=False, max_pos=131072, act="silu"),
}


_BIASED_ATTENTION = ("llama", "gemma", "gemma2", "gemma3_text", "qwen3", "qwen3_moe", "nemotron", "gpt_oss",
                     "deepseek_v2", "deepseek_v3", "llama4_text")


def _llama_like(r: _Reader, mt: str) -> dict:
    d = _LLAMA_DEFAULTS[mt]
    kw = _llama_shape(r, mt, d)
    L, nh, ffn = kw["num_layers"], kw["num_heads"], kw["ffn_hidden_size"]
    kw.update(_llama_biases(r, mt))
    kw.update(_llama_windows(r, mt, d, L))
    # norms and MLP shape
    if mt in ("gemma2", "gemma3_text"):
        kw["norms_per_layer"] = 4
    if mt in ("gemma", "gemma2", "gemma3_text"):
        kw["scale_embeddings"] = True  # HF Gemma*TextScaledWordEmbedding / normalizer = hidden_size**0.5
        kw.update(_softcaps(r, mt))
    if mt == "nemotron":
        kw.update(norm_type="layernorm", mlp_type="plain")
    if mt == "llama4_text":
        kw.update(_llama4(r, L, ffn))
    else:
        kw.update(_llama_moe(r, mt, L, nh, ffn))
    return kw


def _llama4(r: _Reader, L: int, expert_ffn: int) -> dict[str, Any]:
    """Llama 4's text model (transformers 5.24.0 Llama4TextConfig / modeling_llama4): `intermediate_size` is the
    width of a routed expert and of the one shared expert, `intermediate_size_mlp` the dense layers' FFN; MoE on
    `moe_layers`, by default every `interleave_moe_layer_step`-th layer from step - 1; the router (h -> experts, no
    bias) takes the top-k logits through a sigmoid, unnormalised, and the weights scale the token before the experts
    (Llama4TextMoe); no balance loss in the model. Attention: the RoPE layers (`no_rope_layers` 1; by default all
    but every `no_rope_layer_interval`-th) attend inside blocks of `attention_chunk_size` tokens (`layer_types`
    chunked_attention) and, with `use_qk_norm`, L2-normalise q and k; the NoPE layers attend globally and, with
    `attn_temperature_tuning`, scale q by their position (`floor_scale`, `attn_scale`)."""
    kw: dict[str, Any] = {"ffn_hidden_size": r.int("intermediate_size_mlp", 16384)}
    E = r.int("num_local_experts", 16)
    step = r.int("interleave_moe_layer_step", 1)
    moe_layers = r.list("moe_layers", int, None)
    if moe_layers is None:
        layout = {"first_k_dense": step - 1, "layer_freq": step}
    else:
        chosen = {i for i in moe_layers if 0 <= i < L}
        layout = {"dense_layers": tuple(i for i in range(L) if i not in chosen)}
    kw["moe"] = MoESpec(num_experts=E, top_k=r.int("num_experts_per_tok", 1), expert_ffn_hidden_size=expert_ffn,
                        num_shared_experts=1, shared_expert_ffn_hidden_size=expert_ffn, score_function="sigmoid",
                        norm_topk_prob=False, probs_on_input=True, **layout)
    rope = r.list("no_rope_layers", int, None)
    if rope is None or not rope:  # HF: an empty or absent list takes the interval's default
        interval = r.int("no_rope_layer_interval", 4)
        rope = [int((i + 1) % interval != 0) for i in range(L)]
    if len(rope) != L or set(rope) - {0, 1}:
        raise r._err("no_rope_layers", f"needs one 0/1 entry per layer ({L}): fix the config")
    types = r.list("layer_types", str, None)
    chunk = r.int("attention_chunk_size", 8192, null=None)
    if types is None:
        chunked = [int(bool(x) and chunk is not None) for x in rope]
    else:
        if len(types) != L or set(types) - {"chunked_attention", "full_attention"}:
            raise r._err("layer_types", f"needs one entry per layer ({L}), each chunked_attention or "
                         "full_attention: fix the config")
        chunked = [int(t == "chunked_attention") for t in types]
    if any(chunked) and chunk is None:
        raise r._err("attention_chunk_size", "is null but layer_types names chunked layers: give the chunk size")
    if any(chunked):
        kw.update(attention_chunk_size=chunk, chunked_layer_pattern=tuple(chunked))
    nope = tuple(1 - x for x in rope)
    if any(nope):
        kw["nope_layer_pattern"] = nope
    kw["qk_l2_norm"] = r.bool("use_qk_norm", True) and not all(nope)
    if r.bool("attn_temperature_tuning", True) and any(nope):
        floor = _number(r, r.cfg, "floor_scale", "") or 8192.0
        scale = _number(r, r.cfg, "attn_scale", "") or 0.1
        kw["attn_temperature_tuning"] = (floor, scale)
    return kw


def _softcaps(r: _Reader, mt: str) -> dict[str, Any]:
    """Gemma 2's tanh logit soft caps (HF Gemma2Config defaults 50 and 30; Gemma3TextConfig: None)."""
    attn_d, final_d = (50.0, 30.0) if mt == "gemma2" else (None, None)
    out: dict[str, Any] = {}
    for key, field, default in (("attn_logit_softcapping", "attn_logit_softcap", attn_d),
                                ("final_logit_softcapping", "final_logit_softcap", final_d)):
        v = _number(r, r.cfg, key, "") if r.cfg.get(key) is not None else (None if key in r.cfg else default)
        out[field] = v
    return out


def _llama_shape(r: _Reader, mt: str, d: dict[str, Any]) -> dict[str, Any]:
    """Layers, widths, heads, vocabulary, positions, embeddings tie and activation."""
    L = r.int("num_hidden_layers", maximum=MAX_LAYERS, what="number of decoder layers")
    h = r.int("hidden_size", what="model width")
    nh = r.int("num_attention_heads", what="attention heads per layer")
    ffn = r.int("intermediate_size", what="FFN width per matrix")
    nkv = r.int("num_key_value_heads", d["kv"], null=None)
    if nkv is None and "num_key_value_heads" not in r.cfg:
        r.defaulted.setdefault("num_key_value_heads", nh)  # HF LlamaConfig: None -> num_attention_heads (MHA)
    nkv = nh if nkv is None else nkv
    vocab = r.int("vocab_size", d["vocab"])
    act_key = "hidden_activation" if mt in ("gemma2", "gemma3_text") else "hidden_act"
    kw: dict[str, Any] = dict(
        family=mt,
        num_layers=L,
        hidden_size=h,
        num_heads=nh,
        num_kv_heads=nkv,
        ffn_hidden_size=ffn,
        vocab_size=vocab,
        max_position_embeddings=r.int("max_position_embeddings", d["max_pos"]),
        tied_embeddings=r.bool("tie_word_embeddings", d["tie"]),
        activation=_activation(r.str(act_key, None) or r.str("hidden_act", None), d["act"]),
        position_embedding="rope",
    )
    if mt.startswith("deepseek"):
        # MLA: kv_b_proj expands the latent to full keys/values for every head, so num_key_value_heads
        # is nominal (no weight depends on it); head_dim is set from the MLA dims below
        kw["num_kv_heads"] = nh
    else:
        kw["head_dim"] = _heads(r, h, nh, nkv, r.int("head_dim", d["head_dim"], null=None))
    return kw


def _llama_biases(r: _Reader, mt: str) -> dict[str, Any]:
    """Attention/MLP biases and q/k norms."""
    kw: dict[str, Any] = {}
    if mt in _BIASED_ATTENTION:
        bias = r.bool("attention_bias", mt == "gpt_oss")
        kw.update(qkv_bias=bias, attn_out_bias=bias)
    if mt in ("llama", "nemotron"):
        kw["mlp_bias"] = r.bool("mlp_bias", False)
    if mt == "qwen2":
        kw["qkv_bias"] = True  # hard-coded in HF Qwen2Attention (o_proj has none)
    if mt == "qwen2_moe":
        kw["qkv_bias"] = r.bool("qkv_bias", True)
    if mt in ("qwen3", "qwen3_moe", "gemma3_text"):
        kw["qk_norm"] = True
    if mt == "glm4_moe":  # HF Glm4MoeAttention: q/k/v biases with attention_bias (o_proj none), use_qk_norm
        kw.update(qkv_bias=r.bool("attention_bias", False), qk_norm=r.bool("use_qk_norm", False))
    return kw


def _llama_windows(r: _Reader, mt: str, d: dict[str, Any], L: int) -> dict:
    """Sliding windows: on every layer, or on the layers `layer_types` or the family's pattern gives."""
    if mt in ("mistral", "mixtral", "phi3"):
        return _window_all_layers(r.int("sliding_window", d["window"], null=None), L)
    if mt in ("qwen2", "qwen2_moe", "qwen3"):
        window = r.int("sliding_window", 4096, null=None) if r.bool("use_sliding_window", False) else None
        mwl = r.int("max_window_layers", 28, minimum=0)
        return _window_layer_types(r, L, window, lambda i: i >= mwl)
    if mt == "qwen3_moe":
        window = r.int("sliding_window", 4096, null=None) if r.bool("use_sliding_window", False) else None
        return _window_all_layers(window, L)
    if mt in ("gemma2", "gpt_oss"):
        return _window_layer_types(r, L, r.int("sliding_window", d["window"], null=None), lambda i: i % 2 == 0)
    if mt == "gemma3_text":
        pattern = r.int("sliding_window_pattern", 6)
        return _window_layer_types(r, L, r.int("sliding_window", d["window"], null=None),
                                   lambda i: bool((i + 1) % pattern))
    return {}


def _llama_moe(r: _Reader, mt: str, L: int, nh: int, ffn: int) -> dict[str, Any]:
    """The MoE layers (Mixtral, gpt-oss, Qwen-MoE) and DeepSeek's MLA + MoE."""
    kw: dict[str, Any] = {}
    if mt == "mixtral":
        E = r.int("num_local_experts", 8, aliases=("num_experts",))
        kw["moe"] = MoESpec(num_experts=E, top_k=r.int("num_experts_per_tok", 2), expert_ffn_hidden_size=ffn,
                            **_aux_loss(r))
    elif mt == "gpt_oss":
        E = r.int("num_local_experts", 128, aliases=("num_experts",))
        kw["moe"] = MoESpec(num_experts=E, top_k=r.int("num_experts_per_tok", 4), expert_ffn_hidden_size=ffn,
                            router_bias=True, expert_bias=True, **_aux_loss(r))
        kw["attention_sinks"] = True
        # x*sigmoid(1.702x) * (y + 1), gate and up clamped at swiglu_limit 7 (HF GptOssExperts._apply_gate)
        limit = _number(r, r.cfg, "swiglu_limit", "") or 7.0
        if limit != 7.0:
            raise r._err("swiglu_limit", f"= {limit:g} is not supported (gpt-oss uses 7)")
        kw["activation"] = "gpt_oss_glu"
    elif mt == "qwen3_moe":
        E = r.int("num_experts", 128, aliases=("num_local_experts",), minimum=0)
        kw["moe"] = _sparse_step_moe(r, L, E, top_k=r.int("num_experts_per_tok", 8),
                                     expert_ffn_hidden_size=r.int("moe_intermediate_size", 768),
                                     norm_topk_prob=r.bool("norm_topk_prob", False), **_aux_loss(r))
    elif mt == "qwen2_moe":
        E = r.int("num_experts", 60, minimum=0)
        kw["moe"] = _sparse_step_moe(
            r, L, E, top_k=r.int("num_experts_per_tok", 4),
            expert_ffn_hidden_size=r.int("moe_intermediate_size", 1408),
            num_shared_experts=1,
            shared_expert_ffn_hidden_size=r.int("shared_expert_intermediate_size", 5632),
            shared_expert_gate=True,
            norm_topk_prob=r.bool("norm_topk_prob", False), **_aux_loss(r),
        )
    elif mt.startswith("deepseek"):
        kw.update(_deepseek(r, mt, L, nh))
    elif mt == "glm4_moe":
        kw.update(_glm4_moe(r, L))
    return kw


def _glm4_moe(r: _Reader, L: int) -> dict:
    """GLM-4.5's MoE layers (transformers 5.24.0 Glm4MoeConfig / modeling_glm4_moe): DeepSeek-V3's router and
    experts (Glm4MoeTopkRouter: sigmoid scores, the e_score_correction_bias buffer for selection, group-limited top-k,
    renormalised weights scaled by routed_scaling_factor; n_shared_experts shared experts of moe_intermediate_size
    each) after first_k_dense_replace dense layers of intermediate_size, and num_nextn_predict_layers MTP modules
    (not instantiated by transformers). The config states no balance loss; Megatron-Bridge trains GLM-4.5 with a
    per-sequence one of weight 0.001 (src/megatron/bridge/models/glm/glm45_bridge.py at 067f987: seq_aux_loss,
    moe_aux_loss_coeff 0.001, expert bias on)."""
    E = r.int("n_routed_experts", 128, null=None)
    out: dict[str, Any] = {"mtp_layers": r.int("num_nextn_predict_layers", 1, minimum=0)}
    first = r.int("first_k_dense_replace", 1, minimum=0)
    if E is None or first >= L:
        return out
    score = r.str("scoring_func", "sigmoid")
    if score != "sigmoid":
        raise r._err("scoring_func", f"= {score!r} is not supported: GLM-4.5's router scores are sigmoid")
    out["moe"] = MoESpec(
        num_experts=E,
        top_k=r.int("num_experts_per_tok", 8),
        expert_ffn_hidden_size=r.int("moe_intermediate_size", 1408),
        num_shared_experts=r.int("n_shared_experts", 1, minimum=0),
        first_k_dense=first,
        score_function="sigmoid",
        expert_bias_balancing=True,
        routed_scaling_factor=_number(r, r.cfg, "routed_scaling_factor", "") or 1.0,
        norm_topk_prob=r.bool("norm_topk_prob", True),
        aux_loss_coeff=0.001,
        aux_loss_per_sequence=True,
        **_group_routing(r, E),
    )
    return out


def _deepseek(r: _Reader, mt: str, L: int, nh: int) -> dict:
    v3 = mt == "deepseek_v3"
    q_lora = r.int("q_lora_rank", 1536, null=None)  # null: full-rank q_proj (DeepSeek-V2-Lite)
    mla = MLASpec(
        q_lora_rank=q_lora,
        kv_lora_rank=r.int("kv_lora_rank", 512),
        qk_nope_head_dim=r.int("qk_nope_head_dim", 128),
        qk_rope_head_dim=r.int("qk_rope_head_dim", 64, minimum=0),
        v_head_dim=r.int("v_head_dim", 128),
    )
    out: dict[str, Any] = {"mla": mla, "head_dim": mla.qk_nope_head_dim + mla.qk_rope_head_dim}
    if not v3:
        out["mlp_bias"] = r.bool("mlp_bias", False)  # dense MLP and shared experts (HF DeepseekV2MLP)
    E = r.int("n_routed_experts", 256 if v3 else 64, aliases=("num_local_experts" if v3 else "num_experts",),
              null=None)
    if E is None:
        return out  # DeepSeek reference code: no routed experts -> every layer dense
    top_k = r.int("num_experts_per_tok", 8 if v3 else _REQUIRED, what="routed experts per token")
    k = r.int("first_k_dense_replace", 3 if v3 else 0, minimum=0)
    freq = r.int("moe_layer_freq", 1)
    first = math.ceil(k / freq) * freq  # first layer with i >= k and i % freq == 0
    if first >= L:
        return out  # no MoE layer at all
    n_shared = r.int("n_shared_experts", 1 if v3 else 2, minimum=0)
    out["moe"] = MoESpec(
        num_experts=E,
        top_k=top_k,
        expert_ffn_hidden_size=r.int("moe_intermediate_size", 2048 if v3 else 1407),
        num_shared_experts=n_shared,
        first_k_dense=first,
        layer_freq=freq,
        **_group_routing(r, E),
        **_deepseek_router(r, v3),
    )
    if v3:
        out["mtp_layers"] = r.int("num_nextn_predict_layers", 1, minimum=0)  # HF DeepseekV3Config default 1
    return out


def _aux_loss(r: _Reader) -> dict:
    """The load-balancing loss weight (HF `router_aux_loss_coef`; transformers 5.24.0 Mixtral/Qwen-MoE/GptOss
    config default 0.001)."""
    v = r.cfg.get("router_aux_loss_coef")
    if v is None:
        return {"aux_loss_coeff": 0.001}
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf"):
        raise r._err("router_aux_loss_coef", f"must be a number >= 0, got {_fmt(v)}: fix the config")
    return {"aux_loss_coeff": float(v)}


def _deepseek_router(r: _Reader, v3: bool) -> dict:
    """DeepSeek's router (reference code inference/model.py Gate; HF DeepseekV2/V3Config defaults).
    V3: sigmoid scores, top-k weights renormalised and scaled by routed_scaling_factor (2.5), the
    auxiliary-loss-free bias for selection (`noaux_tc`) and a sequence-wise balance loss with alpha 0.0001
    (report arXiv 2412.19437 sec. 4.2 'Hyper-Parameters'). V2: softmax, scale 1 (HF default), per-expert
    balance loss alpha1 = 0.003 (V2 report arXiv 2405.04434 sec. 3.1.2) unless `aux_loss_alpha` says."""
    score = r.str("scoring_func", "sigmoid" if v3 else "softmax")
    if score not in ("softmax", "sigmoid"):
        raise r._err("scoring_func", f"= {score!r} is not supported: use softmax or sigmoid")
    alpha = r.cfg.get("aux_loss_alpha")
    return {
        "score_function": score,
        "expert_bias_balancing": v3 and str(r.cfg.get("topk_method", "noaux_tc")) == "noaux_tc",
        "routed_scaling_factor": _number(r, r.cfg, "routed_scaling_factor", "") or (2.5 if v3 else 1.0),
        "norm_topk_prob": r.bool("norm_topk_prob", v3),
        "aux_loss_coeff": (0.0001 if v3 else 0.003) if alpha is None else _number(r, r.cfg, "aux_loss_alpha", ""),
        "aux_loss_per_sequence": r.bool("seq_aux", True),
    }


def _group_routing(r: _Reader, num_experts: int) -> dict:
    """Group-limited routing of DeepSeek-V2 (`group_limited_greedy`, M devices) and V3 (`noaux_tc`, M nodes):
    the experts split into `n_group` groups and each token chooses among `topk_group` of them (DeepSeek-V2
    report arXiv 2405.04434 sec. 2.2.2; DeepSeek-V3 report arXiv 2412.19437 sec. 2.1.2). Greedy routing
    (V2-Lite) or a single group: unlimited."""
    groups = r.int("n_group", 1, null=1)
    if groups <= 1 or str(r.cfg.get("topk_method", "")) == "greedy":
        return {}
    # HF DeepseekV3TopkRouter views the scores as (tokens, n_group, experts / n_group) and takes topk(topk_group) of
    # the groups: a config that breaks either fails in transformers itself
    if num_experts % groups:
        raise r._err("n_group", f"= {groups} does not divide the {num_experts} routed experts (group-limited routing "
                     "splits them into equal groups): fix the config")
    top = r.int("topk_group", groups, null=groups)
    if top > groups:
        raise r._err("topk_group", f"= {top} exceeds n_group = {groups} (each token picks its experts from at most "
                     "n_group groups): fix the config")
    return {"route_groups": groups, "route_topk_groups": top}


# --------------------------------------------------------------------------------------------
# GPT-2 / BLOOM / Falcon / GPT-NeoX / MPT


def _gpt2(r: _Reader) -> dict:
    h = r.int("n_embd", aliases=("hidden_size",), what="model width")
    L = r.int("n_layer", aliases=("num_hidden_layers",), maximum=MAX_LAYERS, what="number of layers")
    nh = r.int("n_head", aliases=("num_attention_heads",), what="attention heads")
    if r.bool("add_cross_attention", False):
        raise r._err("add_cross_attention", "= true (encoder-decoder cross-attention) is not supported: "
                     "remove it for a decoder-only model")
    return dict(
        family="gpt2", num_layers=L, hidden_size=h, num_heads=nh, num_kv_heads=nh,
        head_dim=_heads(r, h, nh, nh, None, head_dim_key=None, heads_key="n_head"),
        ffn_hidden_size=r.int("n_inner", 4 * h, null=4 * h), vocab_size=r.int("vocab_size", 50257),
        max_position_embeddings=r.int("n_positions", 1024, aliases=("max_position_embeddings",)),
        mlp_type="plain", activation=_activation(r.str("activation_function", None), "gelu_new"),
        norm_type="layernorm", qkv_bias=True, attn_out_bias=True, mlp_bias=True,
        tied_embeddings=r.bool("tie_word_embeddings", True), position_embedding="learned",
    )


def _bloom(r: _Reader) -> dict:
    h = r.int("hidden_size", aliases=("n_embed",), what="model width")
    L = r.int("n_layer", aliases=("num_hidden_layers",), maximum=MAX_LAYERS, what="number of layers")
    nh = r.int("n_head", aliases=("num_attention_heads",), what="attention heads")
    return dict(
        family="bloom", num_layers=L, hidden_size=h, num_heads=nh, num_kv_heads=nh,
        head_dim=_heads(r, h, nh, nh, None, head_dim_key=None, heads_key="n_head"),
        ffn_hidden_size=4 * h, vocab_size=r.int("vocab_size", 250880),
        max_position_embeddings=r.int("seq_length", 2048),
        mlp_type="plain", activation="gelu_tanh", norm_type="layernorm",
        qkv_bias=True, attn_out_bias=True, mlp_bias=True, embedding_norm=True,
        tied_embeddings=r.bool("tie_word_embeddings", True), position_embedding="alibi",
    )


def _falcon(r: _Reader) -> dict:
    h = r.int("hidden_size", aliases=("n_embed",), what="model width")
    L = r.int("num_hidden_layers", aliases=("n_layer",), maximum=MAX_LAYERS, what="number of layers")
    nh = r.int("num_attention_heads", aliases=("n_head",), what="attention heads")
    new_arch = r.bool("new_decoder_architecture", False)
    mqa = r.bool("multi_query", True)
    parallel = r.bool("parallel_attn", True)
    nkv_cfg = r.int("num_kv_heads", nh, null=nh)
    nkv = nkv_cfg if new_arch else (1 if mqa else nh)
    head_dim = _heads(r, h, nh, nkv, None, head_dim_key=None, kv_key="num_kv_heads")
    if not parallel:
        norms = 2
    else:
        n_ln = r.int("num_ln_in_parallel_attn", 2 if new_arch else None, null=2 if new_arch else None)
        norms = 2 if n_ln == 2 else 1
    bias = r.bool("bias", False)
    return dict(
        family="falcon", num_layers=L, hidden_size=h, num_heads=nh, num_kv_heads=nkv, head_dim=head_dim,
        ffn_hidden_size=r.int("ffn_hidden_size", 4 * h, null=4 * h), vocab_size=r.int("vocab_size", 65024),
        max_position_embeddings=r.int("max_position_embeddings", 2048),
        mlp_type="plain", activation="gelu", norm_type="layernorm", norms_per_layer=norms,
        qkv_bias=bias, attn_out_bias=bias, mlp_bias=bias, parallel_attn_mlp=parallel,
        tied_embeddings=r.bool("tie_word_embeddings", True),
        position_embedding="alibi" if r.bool("alibi", False) else "rope",
    )


def _gpt_neox(r: _Reader) -> dict:
    h = r.int("hidden_size", what="model width")
    L = r.int("num_hidden_layers", maximum=MAX_LAYERS, what="number of layers")
    nh = r.int("num_attention_heads", what="attention heads")
    bias = r.bool("attention_bias", True)
    return dict(
        family="gpt_neox", num_layers=L, hidden_size=h, num_heads=nh, num_kv_heads=nh,
        head_dim=_heads(r, h, nh, nh, None, head_dim_key=None),
        ffn_hidden_size=r.int("intermediate_size", what="FFN width"), vocab_size=r.int("vocab_size", 50432),
        max_position_embeddings=r.int("max_position_embeddings", 2048),
        mlp_type="plain", activation=_activation(r.str("hidden_act", None), "gelu"), norm_type="layernorm",
        qkv_bias=bias, attn_out_bias=bias, mlp_bias=True,
        parallel_attn_mlp=r.bool("use_parallel_residual", True),
        tied_embeddings=r.bool("tie_word_embeddings", False), position_embedding="rope",
    )


def _mpt(r: _Reader) -> dict:
    h = r.int("d_model", aliases=("hidden_size",), what="model width")
    L = r.int("n_layers", aliases=("num_hidden_layers",), maximum=MAX_LAYERS, what="number of layers")
    nh = r.int("n_heads", aliases=("num_attention_heads",), what="attention heads")
    attn = _Reader(r.dict("attn_config"), "mpt", "mpt config attn_config")
    kind = attn.str("attn_type", "multihead_attention")
    if kind == "multihead_attention":
        nkv = nh
    elif kind == "multiquery_attention":
        nkv = 1
    elif kind == "grouped_query_attention":
        nkv = attn.int("kv_n_heads", 1)
    else:
        raise attn._err("attn_type", f"= {kind!r} is not supported: use multihead_attention, "
                        "multiquery_attention or grouped_query_attention")
    if attn.bool("qk_ln", False):
        raise attn._err("qk_ln", "= true (LayerNorm on q and k) is not supported: remove it")
    ffn_cfg = _Reader(r.dict("ffn_config"), "mpt", "mpt config ffn_config")
    if ffn_cfg.str("ffn_type", "mptmlp") != "mptmlp":
        raise ffn_cfg._err("ffn_type", "is not supported (only 'mptmlp'): remove it")
    ratio = r.int("expansion_ratio", 4)
    bias = not r.bool("no_bias", True)
    alibi = attn.bool("alibi", True)
    learned = not alibi and r.bool("learned_pos_emb", True)
    return dict(
        family="mpt", num_layers=L, hidden_size=h, num_heads=nh, num_kv_heads=nkv,
        head_dim=_heads(r, h, nh, nkv, None, head_dim_key=None, heads_key="n_heads", kv_key="attn_config.kv_n_heads"),
        ffn_hidden_size=ffn_cfg.int("ffn_hidden_size", ratio * h), vocab_size=r.int("vocab_size", 50368),
        max_position_embeddings=r.int("max_seq_len", 2048),
        mlp_type="plain", activation="gelu", norm_type="layernorm", norm_bias=bias,
        qkv_bias=bias, attn_out_bias=bias, mlp_bias=bias,
        tied_embeddings=r.bool("tie_word_embeddings", True),
        position_embedding="learned" if learned else ("alibi" if alibi else "none"),
    )


def _maxtext_default_2023(r: _Reader) -> dict:
    """MaxText's 2023 default decoder (fields as in shared/reference/known_runs_tpu_dev.yaml)."""
    import re

    L = r.int("num_hidden_layers", maximum=MAX_LAYERS, what="number of decoder layers")
    h = r.int("hidden_size", what="model width (emb_dim)")
    nh = r.int("num_attention_heads", what="attention heads (num_heads)")
    nkv = r.int("num_key_value_heads", nh)
    matrices = r.int("ffn_matrices", 2)
    if matrices not in (2, 3):
        raise r._err("ffn_matrices", f"must be 2 (non-gated MLP) or 3 (gated), got {matrices}")
    position = (r.str("position", "") or "").lower()
    relative = "relative" in position
    buckets = re.search(r"(\d+)\s*buckets", position)
    num_buckets = r.int("relative_attention_num_buckets", int(buckets.group(1)) if buckets else 32, minimum=0)
    qk = "qk" in position.replace(" ", "").replace("-", "") or "q,k" in position.replace(" ", "")
    bias = r.bool("attention_bias", False)
    return dict(
        family="maxtext_default_2023", num_layers=L, hidden_size=h, num_heads=nh, num_kv_heads=nkv,
        head_dim=_heads(r, h, nh, nkv, r.int("head_dim", None, null=None)),
        ffn_hidden_size=r.int("intermediate_size", what="MLP width (mlp_dim)"),
        vocab_size=r.int("vocab_size", 32768), max_position_embeddings=r.int("max_position_embeddings", 2048),
        mlp_type="plain" if matrices == 2 else "gated", activation=_activation(r.str("hidden_act", None), "relu"),
        norm_type="rmsnorm", parallel_attn_mlp=r.bool("parallel_residual", True),
        norms_per_layer=1 if r.bool("parallel_residual", True) else 2,
        qkv_bias=bias, attn_out_bias=bias, mlp_bias=r.bool("mlp_bias", False), qk_norm=r.bool("qk_norm", qk),
        tied_embeddings=r.bool("tie_word_embeddings", True),
        position_embedding="relative" if relative else "rope",
        relative_attention_num_buckets=num_buckets if relative else 0,
    )


def _number(r: _Reader, cfg: dict, key: str, where: str) -> float | None:
    v = cfg.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or v == float("inf"):
        raise r._err(f"{where}{key}", f"must be a positive number, got {_fmt(v)}: fix the config")
    return float(v)


def _yarn_fields(r: _Reader, sc: dict, where: str = "rope_scaling") -> dict[str, float | None]:
    """beta_fast, beta_slow, mscale (positive) and mscale_all_dim (0 allowed) of a yarn rope_scaling."""
    out = {k: _number(r, sc, k, f"{where}.") for k in ("beta_fast", "beta_slow", "mscale")}
    v = sc.get("mscale_all_dim")
    if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf")):
        raise r._err(f"{where}.mscale_all_dim", f"must be a number >= 0, got {_fmt(v)}: fix the config")
    out["mscale_all_dim"] = None if v is None else float(v)
    return out


# transformers 5 writes a model's RoPE as one `rope_parameters` mapping (rope_theta, rope_type and the scaling's
# fields), per layer type where the layer types differ (Gemma 3: full_attention / sliding_attention), in place of the
# top-level rope_theta / rope_scaling / rope_local_base_freq of earlier releases (transformers 5.24.0
# modeling_rope_utils.py RotaryEmbeddingConfigMixin; a config saved by it carries only rope_parameters)
_ROPE_LAYER_TYPES = ("full_attention", "sliding_attention")
# the RoPE base of a config that states none, where its config class's default is not ModelSpec's 10000
# (transformers 5.24.0 MixtralConfig 1e6, Llama4TextConfig 5e5, GptOssConfig 150000, Gemma3TextConfig 1e6: the global
# layers')
_ROPE_THETA_DEFAULT = {"mixtral": 1_000_000.0, "llama4_text": 500_000.0, "gpt_oss": 150_000.0,
                       "gemma3_text": 1_000_000.0}
# the share of each head RoPE rotates where the family reads one (partial_rotary_factor; GPT-NeoX rotary_pct) and the
# config states none: its config class's default (transformers 5.24.0 NemotronConfig 0.5, GPTNeoXConfig 0.25,
# Phi3Config 1.0); the other families rotate whole heads
_ROTARY_FRACTION_DEFAULT = {"nemotron": 0.5, "gpt_neox": 0.25, "phi3": 1.0, "glm4_moe": 0.5}


def _rope_parameters(r: _Reader) -> tuple[dict, dict]:
    """(the global layers' rope_parameters, the sliding-window layers') of a transformers 5 config; empty mappings for
    an earlier config."""
    rp = r.dict("rope_parameters")
    if not any(k in rp for k in _ROPE_LAYER_TYPES):
        return rp, {}
    per = [rp.get(k) or {} for k in _ROPE_LAYER_TYPES]
    for k, v in zip(_ROPE_LAYER_TYPES, per, strict=True):
        if not isinstance(v, dict):
            raise r._err(f"rope_parameters.{k}", f"must be a mapping, got {type(v).__name__} {_fmt(v)}: fix the config")
    return per[0], per[1]


def _rope(r: _Reader, kw: dict) -> dict:
    """rope_theta (GPT-NeoX: rotary_emb_base) and rope_scaling of a rotary model (HF config fields: the top-level
    ones, else transformers 5's rope_parameters)."""
    if kw.get("position_embedding", "rope") != "rope":
        return {}
    out: dict[str, Any] = {}
    params, local = _rope_parameters(r)
    theta = (_number(r, r.cfg, "rope_theta", "") or _number(r, r.cfg, "rotary_emb_base", "")
             or _number(r, params, "rope_theta", "rope_parameters."))
    if theta is None:
        theta = _ROPE_THETA_DEFAULT.get(r.family)
    if theta is not None:
        out["rope_theta"] = theta
    sc, where = r.dict("rope_scaling"), "rope_scaling"
    if not sc and params.get("rope_type", "default") != "default":
        sc, where = params, "rope_parameters"
    if sc:
        kind = sc.get("rope_type", sc.get("type"))
        factor = _number(r, sc, "factor", f"{where}.")
        if not isinstance(kind, str) or not kind or factor is None:
            raise r._err(where, "needs a string rope_type (or type) and a positive factor: fix the config")
        orig = sc.get("original_max_position_embeddings")
        if orig is not None and (isinstance(orig, bool) or not isinstance(orig, int) or orig < 1):
            raise r._err(f"{where}.original_max_position_embeddings",
                         f"must be a positive integer, got {_fmt(orig)}")
        out["rope_scaling"] = RopeScaling(rope_type=kind, factor=factor, original_max_position_embeddings=orig,
                                          low_freq_factor=_number(r, sc, "low_freq_factor", f"{where}."),
                                          high_freq_factor=_number(r, sc, "high_freq_factor", f"{where}."),
                                          **_yarn_fields(r, sc, where))
    elif r.family == "gpt_oss" and not params:
        # transformers 5.24.0 GptOssConfig default rope_parameters (openai/gpt-oss gpt_oss/torch/model.py
        # ModelConfig: rope_theta 150000, rope_scaling_factor 32, ntk alpha 1 / beta 32, initial context 4096)
        out["rope_scaling"] = RopeScaling(rope_type="yarn", factor=32.0, original_max_position_embeddings=4096,
                                          beta_fast=32.0, beta_slow=1.0)
    fraction = (_number(r, r.cfg, "partial_rotary_factor", "") or _number(r, r.cfg, "rotary_pct", "")
                or _number(r, params, "partial_rotary_factor", "rope_parameters.")
                or _ROTARY_FRACTION_DEFAULT.get(r.family))
    if fraction is not None:
        if fraction > 1:
            raise r._err("partial_rotary_factor", f"= {fraction:g} is more than 1 (the share of each head RoPE "
                         "rotates): fix the config")
        out["rotary_fraction"] = fraction
    if r.family == "gemma3_text":
        # transformers Gemma3TextConfig: rope_local_base_freq 10000 (sliding layers)
        out["rope_local_theta"] = (_number(r, r.cfg, "rope_local_base_freq", "")
                                   or _number(r, local, "rope_theta", "rope_parameters.sliding_attention.")
                                   or 10_000.0)
    return out


# HF config key of the norm epsilon per family, and the config class default when the file omits it
# (transformers 5.24.0 config classes: LlamaConfig ... GPTNeoXConfig `rms_norm_eps` / `layer_norm_epsilon` etc.)
_NORM_EPS_KEYS = ("rms_norm_eps", "norm_eps", "layer_norm_eps", "layer_norm_epsilon", "layernorm_epsilon")
_NORM_EPS_DEFAULT = {"llama": 1e-6, "mistral": 1e-6, "mixtral": 1e-5, "qwen2": 1e-6, "qwen2_moe": 1e-6, "qwen3": 1e-6,
                     "qwen3_moe": 1e-6, "gemma": 1e-6, "gemma2": 1e-6, "gemma3_text": 1e-6, "nemotron": 1e-5,
                     "gpt_oss": 1e-5, "phi3": 1e-5, "deepseek_v2": 1e-6, "deepseek_v3": 1e-6, "gpt2": 1e-5,
                     "bloom": 1e-5, "falcon": 1e-5, "gpt_neox": 1e-5, "mpt": 1e-5, "llama4_text": 1e-5,
                     "glm4_moe": 1e-5}


def _norm_eps(r: _Reader, mt: str) -> dict:
    """The norm epsilon the config states, else its config class's default (None for a family without one)."""
    for key in _NORM_EPS_KEYS:
        v = _number(r, r.cfg, key, "")
        if v is not None:
            return {"norm_eps": v}
    return {"norm_eps": _NORM_EPS_DEFAULT[mt]} if mt in _NORM_EPS_DEFAULT else {}


_FAMILIES: dict[str, Callable[[_Reader], dict]] = {
    **{mt: functools.partial(_llama_like, mt=mt) for mt in _LLAMA_DEFAULTS},
    "gpt2": _gpt2,
    "bloom": _bloom,
    "falcon": _falcon,
    "gpt_neox": _gpt_neox,
    "mpt": _mpt,
    "maxtext_default_2023": _maxtext_default_2023,
}



# multimodal wrappers whose language model is a supported family: model_type -> the text model's
# (Kimi K2.5: transformers 5.24.0 Kimi_K25Config.text_config, a DeepseekV3Config, its own `kimi_k2` mapped to it)
_COMPOSITES = {"llama4": "llama4_text",  # transformers Llama4Config.text_config (Llama4TextConfig)
               "kimi_k25": "deepseek_v3"}

SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted((*_FAMILIES, *_COMPOSITES)))


def _text_model(cfg: dict, mt: str) -> tuple[dict, str]:
    """(the config, its family); for a multimodal wrapper the text model's (`text_config`): only the language model
    is costed, its vision encoder and projector are not."""
    if mt not in _COMPOSITES:
        return cfg, mt
    text = cfg.get("text_config")
    if not isinstance(text, dict):
        raise InputError(f"{mt} config: field 'text_config' must be a mapping (the language model's config): "
                         "fix the config")
    return {**text, "model_type": _COMPOSITES[mt]}, _COMPOSITES[mt]


def _validation_message(e: ValidationError, prefix: str) -> str:
    err = e.errors()[0]
    loc = ".".join(str(p) for p in err.get("loc", ()))
    msg = err.get("msg", "invalid").removeprefix("Value error, ")
    if err.get("type") == "extra_forbidden":
        msg = "is not a known field: remove it or fix its spelling"
    more = f" (+{len(e.errors()) - 1} more)" if len(e.errors()) > 1 else ""
    return f"{prefix}: field '{loc}': {msg}{more}" if loc else f"{prefix}: {msg}{more}"


def _architecture_family(cfg: dict) -> str | None:
    """The family of the first supported class in the config's `architectures`, None when there is none."""
    archs = cfg.get("architectures")
    if not isinstance(archs, list):
        return None
    return next((_ARCHITECTURES[a] for a in archs if isinstance(a, str) and a in _ARCHITECTURES), None)


def _family(cfg: dict) -> str:
    """The config's family: its `model_type` when supported; else, for a model that ships its own config class under
    a name of its own, the family of the class its `architectures` name (Kimi K2's config.json: model_type `kimi_k2`,
    architectures DeepseekV3ForCausalLM, its auto_map modeling_deepseek.py: DeepSeek-V3's layers); else, without a
    model_type, that class's family. Raises InputError when neither names a supported family."""
    mt = cfg.get("model_type")
    if mt is None:
        archs = cfg.get("architectures")
        if not (isinstance(archs, list) and archs and all(isinstance(a, str) for a in archs)):
            raise InputError("HF config: field 'model_type' is missing: add it "
                             f"(one of {', '.join(SUPPORTED_MODEL_TYPES)})")
        fam = _architecture_family(cfg)
        if fam is None:
            raise InputError(f"HF config: architectures {archs} not supported and no 'model_type': "
                             f"add model_type (one of {', '.join(SUPPORTED_MODEL_TYPES)})")
        return fam
    if not isinstance(mt, str):
        raise InputError(f"HF config: field 'model_type' must be a string, got {type(mt).__name__} {_fmt(mt)}")
    if mt in SUPPORTED_MODEL_TYPES:
        return mt
    fam = _architecture_family(cfg)
    if fam is None:
        raise InputError(f"HF config: model_type {mt!r} is not supported"
                         f"{did_you_mean(mt, list(SUPPORTED_MODEL_TYPES))}; "
                         f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
    return fam


def defaulted_fields(cfg: dict) -> dict[str, Any]:
    """The integer fields `from_hf_config` reads that `cfg` does not give, with the Hugging Face default it
    used for each (num_key_value_heads -> num_attention_heads, vocab_size -> the family's): {} when the
    config is not importable (its error comes from from_hf_config)."""
    try:
        cfg, mt = _text_model(cfg, _family(cfg))
        r = _Reader(cfg, mt)
        _FAMILIES[mt](r)
        return dict(r.defaulted)
    except (InputError, TypeError, ValueError, AttributeError):
        return {}


def from_hf_config(cfg: dict, name: str | None = None) -> ModelSpec:
    """Build a `ModelSpec` from a Hugging Face config.json mapping. Raises `InputError` on bad input."""
    if not isinstance(cfg, dict):
        raise InputError(f"HF config must be a mapping (the contents of config.json), got {type(cfg).__name__}")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise InputError(f"model name must be a non-empty string, got {_fmt(name)}")
    cfg, mt = _text_model(cfg, _family(cfg))
    r = _Reader(cfg, mt)
    try:
        kw = _FAMILIES[mt](r)
        kw.update(_rope(r, kw))
        kw.update(_norm_eps(r, mt))
        if name is None:
            path = cfg.get("_name_or_path")
            name = path if isinstance(path, str) and path.strip() else f"hf-{mt}"
        return ModelSpec(name=name, **kw)
    except ValidationError as e:
        raise InputError(_validation_message(e, f"{mt} config")) from None
