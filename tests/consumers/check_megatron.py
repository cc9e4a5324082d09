"""Checker (own interpreter): Megatron-LM 0.19.2's own argument parser and validation on emitted args.

For each request: sys.argv = pretrain_gpt.py + args, WORLD_SIZE = world, the emitted env only;
`megatron.training.arguments.parse_args()` + `validate_args()`, then the TransformerConfig that
pretrain_gpt builds (`core_transformer_config_from_args`, whose __post_init__ checks the model-parallel
layout), then the process groups of `megatron.core.parallel_state.RankGenerator` for the world size.
Shims (shared/reference/launchers.md sec. 1): typing.override for Python 3.11; the GPU arch that
validate_args reads from CUDA is the target's (9 Hopper, 10 Blackwell); torch.cuda.get_device_capability
likewise for --moe-grouped-gemm; Transformer Engine's version (2.14, for TransformerConfig's version gates)
and the presence of its fused RoPE kernel.
usage: check_megatron.py requests.json results.json
request: {"id", "args": [...], "env": {...}, "world": int, "arch": int}
"""

import contextlib
import io
import json
import os
import sys
import traceback
import typing

typing.override = getattr(typing, "override", lambda f: f)  # megatron.training needs Python >= 3.12's override

ENV_KEYS = ("CUDA_DEVICE_MAX_CONNECTIONS",)


def groups(rg, name):
    return [list(g) for g in rg.get_ranks(name)]


def model_fields(args, cfg) -> dict:
    """The architecture as Megatron parsed it: TransformerConfig fields plus the GPTModel arguments
    pretrain_gpt passes from args (vocabulary, position embedding, rotary base and scaling, tying)."""
    names = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups", "kv_channels",
             "gated_linear_unit", "normalization", "add_bias_linear", "add_qkv_bias", "qk_layernorm",
             "attention_dropout", "hidden_dropout", "num_moe_experts", "moe_router_topk", "moe_ffn_hidden_size",
             "moe_shared_expert_intermediate_size", "moe_shared_expert_gate", "moe_router_enable_expert_bias",
             "multi_latent_attention", "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim",
             "v_head_dim", "bias_activation_fusion", "glu_linear_offset", "activation_func_clamp_value",
             "layernorm_epsilon", "softmax_type", "moe_router_score_function", "moe_router_num_groups",
             "moe_router_group_topk", "moe_router_topk_scaling_factor", "moe_router_pre_softmax",
             "moe_router_load_balancing_type", "moe_aux_loss_coeff", "moe_z_loss_coeff", "moe_expert_capacity_factor",
             "mtp_num_layers", "moe_token_dispatcher_type", "moe_flex_dispatcher_backend", "rope_type",
             "rotary_scaling_factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale",
             "mscale_all_dim", "yarn_rotary_scaling_factor", "yarn_original_max_position_embeddings",
             "yarn_beta_fast", "yarn_beta_slow", "yarn_mscale", "yarn_mscale_all_dim")
    out = {n: getattr(cfg, n, None) for n in names}
    freq = cfg.moe_layer_freq
    out["moe_layer_freq"] = freq if isinstance(freq, int) else list(freq)
    out["window_size"] = list(cfg.window_size) if cfg.window_size is not None else None
    skip = cfg.window_attn_skip_freq
    out["window_attn_skip_freq"] = skip if skip is None or isinstance(skip, int) else list(skip)
    out["attention_backend"] = str(getattr(args, "attention_backend", ""))
    for k, v in list(out.items()):
        if not isinstance(v, (int, float, str, bool, list, type(None))):
            out[k] = str(v)
    out["activation"] = getattr(cfg.activation_func, "__name__", str(cfg.activation_func))
    out.update(vocab_size=args.vocab_size, max_position_embeddings=args.max_position_embeddings,
               position_embedding_type=args.position_embedding_type, rotary_base=args.rotary_base,
               rotary_percent=args.rotary_percent,
               use_rope_scaling=bool(args.use_rope_scaling), rope_scaling_factor=args.rope_scaling_factor,
               untie_embeddings_and_output_weights=bool(args.untie_embeddings_and_output_weights))
    return out


def stand_in_transformer_engine() -> None:
    """Transformer Engine is on the target GPU nodes, not here: report TE 2.14 to the config and argument checks
    (version gates only) and stand-ins for TE's fused RoPE and MoE permutation kernels (--moe-permute-fusion), which
    TransformerConfig only tests for None."""
    import megatron.core.models.common.embeddings.rope_utils as rope_utils
    import megatron.core.transformer.moe.moe_utils as moe_utils
    import megatron.core.transformer.transformer_config as tc
    import megatron.training.arguments as arguments
    from packaging.version import Version

    tc.is_te_min_version = lambda v, check_equality=True: Version("2.14.0") >= Version(str(v))
    tc.get_te_version = lambda: Version("2.14.0")
    # validate_args' own gates too (megatron/training/arguments.py imports it from megatron.core.utils): e.g. the
    # batch-level EP overlap's --delay-wgrad-compute beside --overlap-grad-reduce needs TE >= 2.8
    arguments.is_te_min_version = tc.is_te_min_version
    if rope_utils.fused_apply_rotary_pos_emb is None:
        rope_utils.fused_apply_rotary_pos_emb = lambda *a, **k: None
    for name in ("fused_permute", "fused_permute_with_probs", "fused_sort_chunks_by_index",
                 "fused_sort_chunks_by_index_with_probs", "fused_unpermute"):
        if getattr(moe_utils, name, None) is None:
            setattr(moe_utils, name, lambda *a, **k: None)


def main(req_path: str, out_path: str) -> None:
    import torch

    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    import megatron.training.arguments as A
    from megatron.core.parallel_state import RankGenerator
    from megatron.core.transformer.enums import LayerType
    from megatron.training.argument_utils import core_transformer_config_from_args
    stand_in_transformer_engine()

    arch = {"v": 9}
    A.get_device_arch_version = lambda: arch["v"]
    torch.cuda.get_device_capability = lambda *a, **k: (arch["v"], 0)

    results = {}
    for r in json.load(open(req_path)):
        arch["v"] = r.get("arch", 9)
        os.environ["WORLD_SIZE"] = str(r["world"])
        for k in ENV_KEYS:
            os.environ.pop(k, None)
        os.environ.update(r.get("env", {}))
        sys.argv = ["pretrain_gpt.py"] + r["args"]
        log = io.StringIO()
        try:
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                args = A.parse_args()
                A.validate_args(args)
                cfg = core_transformer_config_from_args(args)
        except SystemExit as e:  # argparse: unknown flag / bad choice
            err = [line for line in log.getvalue().splitlines() if "error" in line.lower()]
            results[r["id"]] = {"ok": False, "error": f"argparse exit {e.code}: {' '.join(err[-2:])}"}
            continue
        except Exception as e:
            results[r["id"]] = {"ok": False, "error": f"{type(e).__name__}: {e}",
                                "trace": traceback.format_exc(limit=4)}
            continue
        tp, pp, cp = args.tensor_model_parallel_size, args.pipeline_model_parallel_size, args.context_parallel_size
        ep, etp, dp = args.expert_model_parallel_size, args.expert_tensor_parallel_size, args.data_parallel_size
        out = {"ok": True, "error": "", "tp": tp, "pp": pp, "cp": cp, "dp": dp, "ep": ep, "etp": etp,
               "vpp": args.virtual_pipeline_model_parallel_size,
               "num_microbatches": args.global_batch_size // (args.micro_batch_size * dp),
               "sequence_parallel": bool(args.sequence_parallel),
               "config_class": type(cfg).__name__,
               "recompute": [cfg.recompute_granularity, cfg.recompute_method, cfg.recompute_num_layers],
               "recompute_modules": list(cfg.recompute_modules or []),
               "offload": [bool(getattr(cfg, "fine_grained_activation_offloading", False)),
                           list(getattr(cfg, "offload_modules", None) or [])],
               "moe_layer_freq": cfg.moe_layer_freq if isinstance(cfg.moe_layer_freq, int)
               else list(cfg.moe_layer_freq),
               "first_last": [cfg.num_layers_in_first_pipeline_stage, cfg.num_layers_in_last_pipeline_stage],
               "distributed_optimizer": bool(args.use_distributed_optimizer),
               "megatron_fsdp": bool(getattr(args, "use_megatron_fsdp", False)),
               "fp8": [args.fp8, args.fp8_recipe] if args.fp8 else None,
               "fp8_param_gather": bool(getattr(args, "fp8_param_gather", False)),
               "reuse_grad_buf_for_mxfp8_param_ag": bool(getattr(args, "reuse_grad_buf_for_mxfp8_param_ag", False)),
               "grad_reduce_in_fp32": bool(args.accumulate_allreduce_grads_in_fp32),
               "precision_aware_optimizer": bool(getattr(args, "use_precision_aware_optimizer", False)),
               "exp_avg_dtype": str(getattr(args, "exp_avg_dtype", None)),
               "exp_avg_sq_dtype": str(getattr(args, "exp_avg_sq_dtype", None))}
        layout = cfg.pipeline_model_parallel_layout  # a PipelineParallelLayerLayout when the args state one
        # decoder layers and MTP modules per pipeline rank and virtual stage, as Megatron builds them
        out["layout"] = None if layout is None else [
            [[chunk.count(LayerType.decoder), chunk.count(LayerType.mtp)] for chunk in rank] for rank in layout.layout]
        out["model"] = model_fields(args, cfg)
        # process groups for the whole world, as parallel_state.initialize_model_parallel builds them
        try:
            rg = RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=cp, order="tp-cp-ep-dp-pp")
            erg = RankGenerator(tp=etp, ep=ep, dp=(tp * cp * dp) // (etp * ep), pp=pp, cp=1, order="tp-ep-dp-pp")
            out["groups"] = {name: groups(rg, name) for name in ("tp", "pp", "dp", "cp", "tp-pp")}
            out["groups"].update({"ep": groups(erg, "ep"), "etp": groups(erg, "tp"), "edp": groups(erg, "dp")})
        except Exception as e:
            out.update(ok=False, error=f"RankGenerator: {type(e).__name__}: {e}")
        results[r["id"]] = out
    json.dump(results, open(out_path, "w"))


if __name__ == "__main__":
    main(*sys.argv[1:3])
