"""Megatron's --recompute-modules as a plan knob (ParallelPlan.recompute_modules): the one rule the cost model and
the launch files read (planner.costmodel.memory.recompute_modules), what each priced module costs and frees, and the
rules megatron-core enforces (core_v0.19.0 transformer/transformer_config.py __post_init__)."""

from __future__ import annotations

import json

import pytest
from support import run_cli

from planner.catalog.hardware import parse_cluster
from planner.catalog.models import get_model
from planner.costmodel import Context
from planner.costmodel.compute import layer_compute, mla_up_proj_s, selective_recompute_s
from planner.costmodel.evaluate import screen_memory
from planner.costmodel.memory import activation_elems_per_token, recompute_modules
from planner.costmodel.moe import expert_load
from planner.specs import ParallelPlan, TrainingSpec
from planner.specs.dims import plan_errors

DSV3_PLAN = dict(tp=8, pp=4, dp=8, ep=8, recompute="selective", sequence_parallel=True, first_stage_layers=16,
                 last_stage_layers=13)


def _layer(model: str, cluster: str, plan: ParallelPlan, moe: bool, **train):
    ctx = Context(get_model(model), parse_cluster(cluster), TrainingSpec(seq_len=4096, global_batch=256, **train))
    shape = screen_memory(ctx, plan).shape
    k = next(k for k in ctx.kinds if k.moe == moe)
    return ctx, shape, k, layer_compute(ctx, shape, k)


def test_default_set_and_fp8_delayed_rule():
    dsv3, mixtral, llama = get_model("deepseek-v3"), get_model("mixtral-8x7b"), get_model("llama-3.1-8b")
    sel = ParallelPlan(recompute="selective")
    bf16 = TrainingSpec(seq_len=4096, global_batch=256)
    assert recompute_modules(dsv3, bf16, sel) == ("layernorm", "moe_act", "mla_up_proj")
    assert recompute_modules(llama, bf16, sel) == ("core_attn",)
    # megatron-core: "Delayed scaling does not support moe_act and layernorm recompute for fp8"
    delayed = TrainingSpec(seq_len=4096, global_batch=256, dtype="fp8", fp8_recipe="delayed")
    assert recompute_modules(dsv3, delayed, sel) == ("mla_up_proj",)
    assert recompute_modules(mixtral, delayed, sel) == ("core_attn",)  # none left: megatron-core's default
    tensorwise = TrainingSpec(seq_len=4096, global_batch=256, dtype="fp8")
    assert recompute_modules(mixtral, tensorwise, sel) == ("layernorm", "moe_act")
    # a pinned set is the plan's own
    assert recompute_modules(dsv3, bf16, ParallelPlan(recompute="selective", recompute_modules=("core_attn",))) \
        == ("core_attn",)


def test_each_priced_module_costs_its_forward():
    # core_attn re-runs the attention core, mla_up_proj the MLA up-projections, mlp a dense layer's MLP (GEMMs) and
    # its fused norm and activation (memory-bound passes, recomputed_passes_s)
    for mods, moe, expect in ((("core_attn",), True, "attention"), (("mla_up_proj",), True, "mla"),
                              (("mlp",), False, "mlp")):
        plan = ParallelPlan(**DSV3_PLAN, recompute_modules=mods)
        ctx, shape, k, c = _layer("deepseek-v3", "h100x256", plan, moe)
        want = {"attention": c.attention, "mla": mla_up_proj_s(ctx, shape, k), "mlp": c.mlp}[expect]
        assert want > 1e-5
        passes = selective_recompute_s(ctx, shape, k, c) - want
        if expect == "mlp":  # one norm (2 x h / tp under SP) + the SwiGLU (3 x ffn / tp), 2 B each, at HBM bandwidth
            m = ctx.model
            assert passes == pytest.approx(4096 * (2 * m.hidden_size / 8 + 3 * m.ffn_hidden_size / 8) * 2 / 3.35e12)
        else:
            assert passes == 0.0
    # "mlp" names dense MLPs: an MoE layer's experts and shared experts are megatron-core's "moe"
    plan = ParallelPlan(**DSV3_PLAN, recompute_modules=("mlp",))
    ctx, shape, k, c = _layer("deepseek-v3", "h100x256", plan, True)
    assert c.mlp > 0 and selective_recompute_s(ctx, shape, k, c) == 0.0


def test_norms_and_activations_rerun_at_hbm_bandwidth():
    # megatron-core's layernorm module re-runs the norms its TE layer spec builds as modules (MLA's input norm, an MoE
    # layer's pre-MLP norm), moe_act the experts' activation over every routed copy: read + write of each norm's
    # h / tp (SP) and the SwiGLU's 3 x top_k x moe_ffn / tp, 2 B per element, at H100's 3.35 TB/s; the routed copies
    # at the busiest expert's load (moe.expert_load: dropless routing's imbalance). DeepSeek-V3: h 7168, top-8 of
    # moe_ffn 2048, tp 8, 4096 tokens per micro-batch.
    bw, tokens, h, tp = 3.35e12, 4096, 7168, 8
    plan = ParallelPlan(**DSV3_PLAN, recompute_modules=("layernorm", "moe_act"))
    ctx, shape, k, c = _layer("deepseek-v3", "h100x256", plan, True)
    load = expert_load(ctx, shape)
    assert 1.0 < load < 1.1
    assert selective_recompute_s(ctx, shape, k, c) == pytest.approx(
        tokens * (2 * 2 * h / tp + 3 * 8 * 2048 * load / tp) * 2 / bw)
    ctx, shape, k, c = _layer("deepseek-v3", "h100x256", plan, False)  # a dense layer: its input norm alone
    assert selective_recompute_s(ctx, shape, k, c) == pytest.approx(tokens * 2 * h / tp * 2 / bw)
    # without MLA the input norm is fused into linear_qkv: Mixtral's MoE layer re-runs its pre-MLP norm (h 4096) and
    # the experts' SwiGLU (top-2 of 14336)
    mix = ParallelPlan(tp=8, dp=8, ep=8, recompute="selective", sequence_parallel=True,
                       recompute_modules=("layernorm", "moe_act"))
    ctx, shape, k, c = _layer("mixtral-8x7b", "h100x64", mix, True)
    load = expert_load(ctx, shape)
    assert selective_recompute_s(ctx, shape, k, c) == pytest.approx(
        tokens * (2 * 4096 / tp + 3 * 2 * 14336 * load / tp) * 2 / bw)
    # the whole MoE layer ("moe") re-runs the activation with its GEMMs, the norm outside it only with layernorm
    whole = mix.model_copy(update={"recompute_modules": ("moe",)})
    ctx, shape, k, c = _layer("mixtral-8x7b", "h100x64", whole, True)
    assert selective_recompute_s(ctx, shape, k, c) == pytest.approx(
        c.router + c.permute + c.experts + c.mlp + c.epilogue_fwd + c.host_fwd
        + tokens * 3 * 2 * 14336 * load / tp * 2 / bw)


def test_each_priced_module_frees_its_tensors():
    # elements per token a layer saves: llama-3.1-8b, tp 1, no SP, bf16 (h 4096, ffn 14336)
    m = get_model("llama-3.1-8b")
    args = dict(m=m, moe_layer=False, tp=1, sp=False, recompute="selective", framework="megatron")
    base = activation_elems_per_token(**args, selective_modules=("core_attn",))
    # mlp: the gated MLP's gate, up and fc2 input (3 x ffn) and the output of the norm fused into its linear_fc1 (h)
    assert base - activation_elems_per_token(**args, selective_modules=("core_attn", "mlp")) == 3 * 14336 + 4096
    # both of a dense layer's norms are fused into TE LayerNormLinears (linear_qkv, linear_fc1), which keep their
    # outputs: "layernorm" frees nothing there
    assert base == activation_elems_per_token(**args, selective_modules=("core_attn", "layernorm"))
    # it frees the output of each norm megatron-core builds as a module: an MoE layer's pre-MLP norm (Mixtral, h 4096),
    # and with MLA the input norm too (DeepSeek-V3, h 7168)
    for model, h, moe_layer, norms in (("mixtral-8x7b", 4096, True, 1), ("deepseek-v3", 7168, True, 2),
                                       ("deepseek-v3", 7168, False, 1)):
        a = dict(m=get_model(model), moe_layer=moe_layer, tp=1, sp=False, recompute="selective", framework="megatron")
        assert (activation_elems_per_token(**a, selective_modules=("core_attn",))
                - activation_elems_per_token(**a, selective_modules=("core_attn", "layernorm"))) == norms * h
    # unfused attention keeps the score matrices unless core_attn is recomputed
    train = dict(attention_impl="unfused")
    kept = ParallelPlan(tp=8, dp=8, recompute="selective", recompute_modules=("layernorm",), sequence_parallel=True)
    freed = kept.model_copy(update={"recompute_modules": ("core_attn", "layernorm")})
    ctx = Context(m, parse_cluster("h100x64"), TrainingSpec(seq_len=4096, global_batch=256, **train))
    peak = lambda p: screen_memory(ctx, p).peak_gib  # noqa: E731
    assert peak(kept) > peak(freed) + 1.0  # GiB: 32 layers of 5 a s^2 b / t score bytes


@pytest.mark.parametrize("model,mods,train,needle", [
    ("deepseek-v3", ("shared_experts",), {}, "not priced by the planner"),
    ("llama-3.1-8b", ("moe_act",), {}, "moe_act needs an MoE model"),
    ("llama-3.1-8b", ("moe",), {}, "moe needs an MoE model"),
    ("mixtral-8x7b", ("moe",), {"moe_a2a_overlap": True}, "no 'moe' recompute module"),
    ("mixtral-8x7b", ("mla_up_proj",), {}, "needs multi-latent attention"),
    ("mixtral-8x7b", ("moe_act",), {"dtype": "fp8", "fp8_recipe": "delayed"}, "delayed scaling does not run"),
    ("llama-3.1-8b", ("core_attn",), {"framework": "fsdp"}, "are Megatron's"),
])
def test_rules(model, mods, train, needle):
    m = get_model(model)
    t = TrainingSpec(seq_len=4096, global_batch=256, **train)
    p = ParallelPlan(tp=1, pp=1, dp=64, ep=8 if m.is_moe else 1, recompute="selective", recompute_modules=mods)
    assert any(needle in e for e in plan_errors(m, t, 64, p)), plan_errors(m, t, 64, p)
    assert not plan_errors(m, t.model_copy(update={"framework": "megatron", "dtype": "bf16", "fp8_recipe": None}),
                           64, p.model_copy(update={"recompute_modules": ()}))
    full = p.model_copy(update={"recompute": "full"})
    assert any("go with selective recompute" in e for e in plan_errors(m, TrainingSpec(seq_len=4096, global_batch=256),
                                                                         64, full))
    with pytest.raises(ValueError, match="unknown recompute module"):
        ParallelPlan(recompute="selective", recompute_modules=("attn",))


def test_cli_pins_emits_and_reports(tmp_path):
    r = run_cli("--model", "deepseek-v3", "--cluster", "h100x1024", "--recompute-modules", "core_attn,mla_up_proj",
                "--launcher", "megatron", "--json", "--out", tmp_path)
    assert r.exit_code == 0, r.stderr
    top = json.loads(r.stdout)["plans"][0]
    assert top["plan"]["recompute"] == "selective" and top["plan"]["recompute_modules"] == ["core_attn", "mla_up_proj"]
    args = json.loads((tmp_path / "megatron_args.json").read_text())
    flat = args["args"] if isinstance(args, dict) else args
    i = flat.index("--recompute-modules")
    assert flat[i + 1:i + 3] == ["core_attn", "mla_up_proj"]
    for value, needle in (("gdn_norm_out", "not priced by the planner"), ("bogus", "unknown recompute module(s) bogus"),
                          ("", "give comma-separated module names")):
        r = run_cli("--model", "deepseek-v3", "--cluster", "h100x1024", "--recompute-modules", value)
        assert r.exit_code == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_fp8_delayed_launch_file_recomputes_what_megatron_runs(tmp_path):
    # the MoE selective set megatron-core accepts under delayed scaling: its default, core_attn (not written)
    r = run_cli("--model", "qwen3-30b-a3b", "--cluster", "h100x64", "--dtype", "fp8", "--fp8-recipe", "delayed",
                "--recompute", "selective", "--launcher", "megatron", "--out", tmp_path)
    assert r.exit_code == 0, r.stderr
    script = (tmp_path / "launch_megatron.sh").read_text()
    assert "--recompute-granularity selective" in script and "--recompute-modules" not in script


def test_attention_core_stacks_keep_the_norm_and_expert_tensors():
    # Megatron-DeepSpeed's and NeMo AutoModel's selective recompute is the attention core alone: an MoE layer there
    # keeps its norm outputs and expert activations, which Megatron's MoE set (layernorm, moe_act) recomputes
    from planner.costmodel.memory import act_elems
    m = get_model("mixtral-8x7b")
    plan = ParallelPlan(dp=64, recompute="selective")
    kept = {}
    for fw in ("megatron", "deepspeed", "automodel"):
        ctx = Context(m, parse_cluster("h100x64"), TrainingSpec(seq_len=4096, global_batch=256, framework=fw))
        shape = screen_memory(ctx, plan).shape
        kept[fw] = act_elems(ctx, shape, next(k for k in ctx.kinds if k.moe), "selective")
    e = m.require_moe()
    # the pre-MLP norm's output (h: the input norm is fused into linear_qkv, whose LayerNormLinear keeps its output in
    # both) and top_k expert activations (top_k x expert ffn), in elements per token
    assert kept["deepspeed"] - kept["megatron"] == pytest.approx(m.hidden_size + e.top_k * e.expert_ffn_hidden_size)
    assert kept["automodel"] > kept["megatron"]


def _stack_layer(model: str, cluster: str, framework: str, plan: ParallelPlan):
    ctx = Context(get_model(model), parse_cluster(cluster),
                  TrainingSpec(seq_len=4096, global_batch=256, framework=framework))
    shape = screen_memory(ctx, plan).shape
    k = next(k for k in ctx.kinds if k.moe == ctx.model.is_moe)
    return ctx, shape, k, layer_compute(ctx, shape, k)


def test_mla_down_projection_flops_from_the_config():
    # DeepSeek-V3's config: hidden 7168, q_lora_rank 1536, kv_lora_rank 512, qk_rope_head_dim 64; the down-projections
    # (wq_a, wkv_a) run 2 x 7168 x (1536 + 512 + 64) = 30,277,632 FLOPs per token
    from planner.costmodel.compute import mla_down_proj_s
    ctx, shape, k, _ = _stack_layer("deepseek-v3", "tpu-v5px256", "maxtext",
                                    ParallelPlan(dp=256, ep=1, recompute="selective"))
    width = 1536 + 512 + 64
    rate = ctx.peak * ctx.gemm_eff(shape.tokens, 7168, width)
    assert mla_down_proj_s(ctx, shape, k) * rate / shape.tokens == pytest.approx(30_277_632)
    assert mla_down_proj_s(ctx, shape, k) < mla_up_proj_s(ctx, shape, k)


def test_maxtext_minimal_reruns_the_core_and_the_mla_down_projections():
    # remat_policy "minimal" keeps query_proj / key_proj / value_proj (the up-projections' outputs) but not the normed
    # latents the up-projections' backward reads: the attention core and the MLA down-projections re-run, not the
    # up-projections (MT:layers/decoders.py minimal_policy, layers/attention_mla.py at 3eb77db)
    from planner.costmodel.compute import mla_down_proj_s
    ctx, shape, k, c = _stack_layer("deepseek-v3", "tpu-v5px256", "maxtext",
                                    ParallelPlan(dp=256, ep=1, recompute="selective"))
    assert selective_recompute_s(ctx, shape, k, c) == pytest.approx(c.attention + mla_down_proj_s(ctx, shape, k))
    # without MLA the core alone, as before
    ctx, shape, k, c = _stack_layer("llama-3.1-8b", "tpu-v5px256", "maxtext",
                                    ParallelPlan(dp=256, recompute="selective"))
    assert selective_recompute_s(ctx, shape, k, c) == c.attention > 0
    # a custom policy that keeps q / k / v re-runs the down-projections too; one that does not re-runs every
    # projection but the output projection, whatever the model
    keep = ("query_proj", "key_proj", "value_proj", "out_proj", "mlpwi_0", "mlpwi_1", "mlpwo")
    for kept, extra in ((keep, "down"), (("out_proj", "mlpwi_0", "mlpwi_1", "mlpwo"), "qkv")):
        ctx, shape, k, c = _stack_layer("deepseek-v3", "tpu-v5px256", "maxtext",
                                        ParallelPlan(dp=256, ep=1, recompute="selective", remat_device=kept))
        o_share = 2.0 * 128 * 128 * 7168 / k.flops.attn_proj  # wo: heads x v_head_dim x hidden
        want = c.attention + (mla_down_proj_s(ctx, shape, k) if extra == "down" else (1 - o_share) * c.proj)
        assert selective_recompute_s(ctx, shape, k, c) == pytest.approx(want)


@pytest.mark.parametrize("framework", ["deepspeed", "automodel"])
def test_attention_core_stacks_rerun_the_core_alone(framework):
    # Megatron-DeepSpeed checkpoints its CoreAttention; AutoModel's searched selective is costed as the same: the
    # time re-runs what memory.selective_modules says is not saved, the core, and no MLA projection
    from planner.costmodel.memory import selective_modules
    ctx, shape, k, c = _stack_layer("deepseek-v3", "h100x256", framework,
                                    ParallelPlan(dp=256, ep=8, recompute="selective"))
    assert selective_modules(ctx, shape.plan) == ("core_attn",)
    assert selective_recompute_s(ctx, shape, k, c) == c.attention > 0


def test_the_moe_module_reruns_the_whole_moe_layer_with_its_collectives():
    """megatron-core's "moe" module checkpoints the MoE layer whole (moe_layer.py MoELayer.forward under
    moe_layer_recompute): its router, permutes, routed and shared experts and its dispatch and combine re-run; it
    keeps only the layer's input."""
    from planner.costmodel.compute import moe_layer_fwd_s
    from planner.costmodel.layers import layer_times
    from planner.costmodel.memory import _moe_inner_elems

    plan = ParallelPlan(**DSV3_PLAN, recompute_modules=("moe",))
    ctx, shape, k, c = _layer("deepseek-v3", "h100x256", plan, True)
    # its GEMMs, permutes, epilogue and host launches, and the routed experts' SwiGLU pass (3 x top-8 x 2048 / tp 8
    # elements per token at the busiest expert's load, 2 B each, at 3.35 TB/s)
    act = 4096 * 3 * 8 * 2048 * expert_load(ctx, shape) / 8 * 2 / 3.35e12
    assert moe_layer_fwd_s(c) == c.router + c.permute + c.experts + c.mlp + c.epilogue_fwd + c.host_fwd
    want = moe_layer_fwd_s(c) + act
    assert selective_recompute_s(ctx, shape, k, c) == pytest.approx(want)
    assert c.experts > 0 and c.mlp > 0  # routed and shared experts both re-run
    t = layer_times(ctx, shape, k)
    assert t.ep > 0 and t.selective == pytest.approx(want + t.ep)  # the dispatch and combine again
    # a dense layer of the same plan re-runs nothing for "moe"
    ctx, shape, kd, cd = _layer("deepseek-v3", "h100x256", plan, False)
    assert selective_recompute_s(ctx, shape, kd, cd) == 0.0
    # memory: nothing inside the MoE layer is kept (moe_act's share among it, not counted twice)
    m = get_model("deepseek-v3")
    args = dict(m=m, moe_layer=True, tp=8, sp=True, recompute="selective", framework="megatron")
    none = activation_elems_per_token(**args, selective_modules=())
    inner = _moe_inner_elems(m, 8, 1.0, 1, False, 1.0)
    assert none - activation_elems_per_token(**args, selective_modules=("moe",)) == pytest.approx(inner)
    assert activation_elems_per_token(**args, selective_modules=("moe", "moe_act")) == \
        activation_elems_per_token(**args, selective_modules=("moe",))
    # DeepSeek-V3, tp 8: 8 routed copies of (h + 3 x 2048 / 1) / 8 + the shared expert's 3 x 2048 / 8 + 256 / 8
    assert inner == pytest.approx(8 * (7168 + 3 * 2048) / 8 + 3 * 2048 / 8 + 256 / 8)


def test_a_recomputed_moe_layer_exists_again_while_its_backward_runs():
    """With the whole MoE layer recomputed, the stage's peak holds every micro-batch's saved tensors plus one MoE
    layer's dropped ones, rematerialised for that layer's backward (memory.stage_activations)."""
    from planner.costmodel.base import ACT_ELEM_BYTES
    from planner.costmodel.memory import _layer_activations, act_elems, stage_activations

    plan = ParallelPlan(**DSV3_PLAN, recompute_modules=("moe",))
    ctx, shape, k, _ = _layer("deepseek-v3", "h100x256", plan, True)
    split = ctx.stage_kind_counts(plan.pp, plan.first_stage_layers, plan.last_stage_layers, None)
    per_mb, _ = _layer_activations(ctx, shape, split[1])
    dropped = act_elems(ctx, shape, k, "none") - act_elems(ctx, shape, k, "selective")
    one_layer = dropped * shape.tokens * ACT_ELEM_BYTES
    assert one_layer > 0.5 * per_mb / split[1][0]  # the MoE layer's inside: about what a layer keeps
    assert stage_activations(ctx, shape, split, 1, 3.0) == pytest.approx(3.0 * per_mb + one_layer)
    # a plan keeping the MoE layer's tensors has no such transient
    keep = ParallelPlan(**DSV3_PLAN, recompute_modules=("mla_up_proj",))
    ctx, shape, _, _ = _layer("deepseek-v3", "h100x256", keep, True)
    per_mb, _ = _layer_activations(ctx, shape, split[1])
    assert stage_activations(ctx, shape, split, 1, 3.0) == pytest.approx(3.0 * per_mb)
