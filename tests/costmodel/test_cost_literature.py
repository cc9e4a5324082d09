"""The cost model's building blocks against the literature's own numbers."""


import pytest

from planner.costmodel.collectives import Link, collective_time
from planner.costmodel.memory import activation_elems_per_token, state_bytes_per_param
from planner.costmodel.partition import stage_layer_counts
from planner.costmodel.pipeline import inflight_microbatches, pipeline_step_time
from planner.specs import TrainingSpec


def _train(framework: str, **kw) -> TrainingSpec:
    return TrainingSpec(global_batch=8, framework=framework, **kw)


@pytest.mark.parametrize("stage,expected_gb", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_paper_figure1(stage, expected_gb):
    # ZeRO (Rajbhandari et al. 2020) Fig. 1: 7.5B params, N_d = 64, K = 12 -> 120 / 31.4 / 16.6 / 1.9 GB
    psi, nd = 7.5e9, 64
    st = state_bytes_per_param(_train("deepspeed"), stage, offload_optimizer=False)
    per_param = (st.weights / (nd if st.weights_sharded else 1) + st.grads / (nd if st.grads_sharded else 1)
                 + st.optimizer / (nd if st.optimizer_sharded else 1))
    assert psi * per_param / 1e9 == pytest.approx(expected_gb, abs=0.06)


def test_megatron_keeps_fp32_main_grads_and_fsdp_fp32_shards():
    assert state_bytes_per_param(_train("megatron"), 1, False).grads == 4.0
    fs = state_bytes_per_param(_train("fsdp"), 3, False)
    assert (fs.weights, fs.grads, fs.optimizer) == (4.0, 4.0, 8.0)
    assert state_bytes_per_param(_train("megatron"), 1, True).optimizer == 0.0


def test_bf16_grads_and_moments_follow_the_stated_dtypes():
    # Megatron --grad-reduce-in-bf16: a 2-byte grad buffer; precision-aware optimizer with bf16
    # exp_avg/exp_avg_sq: fp32 master 4 + 2 + 2 = 8 bytes instead of K = 12
    st = state_bytes_per_param(_train("megatron", grad_dtype="bf16", optimizer_dtype="bf16"), 1, False)
    assert (st.weights, st.grads, st.optimizer) == (2.0, 2.0, 8.0)
    assert state_bytes_per_param(_train("deepspeed", grad_dtype="fp32"), 0, False).grads == 4.0
    fs = state_bytes_per_param(_train("fsdp", optimizer_dtype="bf16"), 3, False)
    assert (fs.weights, fs.grads, fs.optimizer) == (4.0, 4.0, 4.0)


def test_activations_of_a_gpt3_layer_follow_korthikanti():
    # GPT-3 175B layer, TP 8 with sequence parallelism (Korthikanti et al. 2022, arXiv 2205.05198, eq. 4):
    # 34 sbh / t bytes per layer, of which two 1-byte dropout masks (attention output, MLP output); the
    # planner models dropout-free pretraining with FlashAttention, which saves one fp32 log-sum-exp per
    # head instead of the 5as^2b score tensors: (34 - 2) h / t + 4 a / t bytes per token
    from planner.catalog.models import load_model

    m = load_model("gpt3-175b")
    h, a, t = m.hidden_size, m.num_heads, 8
    assert (h, a, m.ffn_hidden_size, m.mlp_type) == (12288, 96, 4 * 12288, "plain")
    none = 2.0 * activation_elems_per_token(m, False, t, True, "none", "megatron")
    assert none == pytest.approx(32 * h / t + 4 * a / t, rel=1e-12)
    # full recompute keeps the layer input only: 2 sbh / t (sec. 5)
    assert 2.0 * activation_elems_per_token(m, False, t, True, "full", "megatron") == pytest.approx(2 * h / t)
    # without SP the norm and dropout regions are replicated: 10 sbh + 24 sbh / t (eq. 2), minus the masks
    no_sp = 2.0 * activation_elems_per_token(m, False, t, False, "none", "megatron")
    assert no_sp == pytest.approx((10 - 2) * h + 24 * h / t + 4 * a / t, rel=1e-12)


@pytest.mark.parametrize("p,m,v", [(4, 8, 1), (8, 32, 1), (8, 32, 4), (16, 64, 2)])
def test_bubble_fractions(p, m, v):
    # Narayanan et al. SC21 sec. 2.2: (p-1)/m for 1F1B and GPipe, (p-1)/(v m) interleaved; the makespan of
    # uniform stages, (m + p - 1) t, reproduces them
    t = 0.25
    step = pipeline_step_time([t] * p, m, "1f1b")
    assert step == pytest.approx((m + p - 1) * t)
    assert (step - m * t) / (m * t) == pytest.approx((p - 1) / m)
    step_i = pipeline_step_time([t] * p, m, "interleaved", v)
    assert (step_i - m * t) / (m * t) == pytest.approx((p - 1) / (v * m))
    assert pipeline_step_time([t] * p, m, "gpipe") == pytest.approx(step)
    # ZB-H1 (Qi et al. 2023 sec. 3): bubble (p-1)(T_F + T_B - T_W); T_F = 0.1, backward 0.15 = B 0.075 + W 0.075
    f = 0.1
    assert pipeline_step_time([t] * p, m, "zb", fwd_s=[f] * p) - m * t == pytest.approx((p - 1) * f)
    # the paper's T_F = T_B = T_W: a third of 1F1B's bubble
    assert pipeline_step_time([t] * p, m, "zb", fwd_s=[t / 3] * p) - m * t == pytest.approx((step - m * t) / 3)


@pytest.mark.parametrize("ranks,m", [(2, 8), (4, 16), (8, 64)])
def test_dualpipev_bubble_follows_the_dualpipe_readme(ranks, m):
    # deepseek-ai/DualPipe README: DualPipeV's bubble is (PP/2 - 1)(F&B + B - 3W) over PP = 2 x ranks stages, with
    # F, B, W the times of one stage's forward, full backward and weight backward; torch's ScheduleDualPipeV runs
    # F&B as F then B. A rank runs two stages: per micro-batch 2F + 2B; with B = 2F and W = B / 2 the bubble is
    # (ranks - 1) x 2F, a third of 1F1B's (ranks - 1)(2F + 2B) on the same ranks
    F = 0.01
    B, W = 2 * F, F
    rank_s, rank_fwd_s = 2 * F + 2 * B, 2 * F
    bubble = pipeline_step_time([rank_s] * ranks, m, "dualpipev", 2, fwd_s=[rank_fwd_s] * ranks) - m * rank_s
    assert bubble == pytest.approx((2 * ranks / 2 - 1) * ((F + B) + B - 3 * W))
    one_f_one_b = pipeline_step_time([rank_s] * ranks, m, "1f1b") - m * rank_s
    assert bubble == pytest.approx(one_f_one_b / 3)
    # activations: PP + 1 stage-activations per rank (the README's table), i.e. ranks + 1/2 of the rank's two stages
    assert inflight_microbatches("dualpipev", ranks, 0, m, 2) == pytest.approx((2 * ranks + 1) / 2)


def test_inflight_microbatches():
    assert inflight_microbatches("1f1b", 8, 0, 64) == 8  # first stage holds p (SC21 sec. 2.2.1)
    assert inflight_microbatches("1f1b", 8, 7, 64) == 1
    assert inflight_microbatches("gpipe", 8, 0, 64) == 64
    # Megatron interleaved warm-up: (p-1)*2 + (v-1)*p + 1 chunks of 1/v stage each
    assert inflight_microbatches("interleaved", 4, 0, 64, 2) == pytest.approx(((4 - 1) * 2 + (2 - 1) * 4 + 1) / 2)


def test_maxtext_pipeline_holds_every_micro_batch():
    """MaxText's pipeline is one lax.scan over m x repeats + p - 1 iterations whose backward keeps every iteration's
    saved activations (maxtext 0.2.5 layers/pipeline.py): its stages hold all m micro-batches, GPipe's memory, whatever
    schedule the plan names (Stack.pipeline_memory_schedule); Megatron's 1F1B first stage holds p of them."""
    from planner.catalog.hardware import parse_cluster
    from planner.catalog.models import load_model
    from planner.costmodel import Context, evaluate
    from planner.costmodel.balance import stage_problem
    from planner.specs import ParallelPlan

    model = load_model("llama-3.1-8b")
    plan = ParallelPlan(pp=2, dp=8, micro_batch=1, zero_stage=1, schedule="1f1b")
    m = 64 // 8  # micro-batches per rank: global batch 64 over dp 8 at micro-batch 1
    for fw, hw, held in (("maxtext", "tpu-v5px16", (m, m)), ("megatron", "h100x16", (2, 1))):
        ctx = Context(model, parse_cluster(hw), TrainingSpec(global_batch=64, framework=fw))
        assert stage_problem(ctx, plan, 1e6).inflight == held
    ctx = Context(model, parse_cluster("tpu-v5px16"), TrainingSpec(global_batch=64, framework="maxtext"))
    gpipe = evaluate(ctx, plan.model_copy(update={"schedule": "gpipe"})).memory
    assert evaluate(ctx, plan).memory == gpipe
    circular = ParallelPlan(pp=2, vpp=2, dp=8, micro_batch=1, zero_stage=1, schedule="interleaved")
    assert stage_problem(ctx, circular, 1e6).inflight == (m, m)


def test_ring_allreduce_volume():
    # a ring all-reduce sends 2(n-1)/n of the buffer per rank (Patarasuk & Yuan 2009); all-gather (n-1)/n
    link = Link(busbw=100e9, alpha=0.0, crosses_domain=False, ranks_per_domain=8)
    nbytes = 1e9
    assert collective_time("all_reduce", nbytes, 8, link) == pytest.approx(2 * 7 / 8 * nbytes / 100e9)
    assert collective_time("all_gather", nbytes, 8, link) == pytest.approx(7 / 8 * nbytes / 100e9)
    assert collective_time("all_reduce", nbytes, 1, link) == 0.0
    lat = Link(busbw=1e30, alpha=5e-6, crosses_domain=False, ranks_per_domain=8)
    assert collective_time("all_reduce", 1.0, 8, lat) == pytest.approx(2 * 7 * 5e-6, rel=1e-6)


def test_stage_layer_counts():
    assert stage_layer_counts(80, 4) == [20, 20, 20, 20]
    c = stage_layer_counts(126, 16)
    assert sum(c) == 126 and max(c) == 8 and c[0] == 7 and c[-1] == 7
    assert stage_layer_counts(80, 4, first=18, last=18) == [18, 22, 22, 18]
    with pytest.raises(ValueError):
        stage_layer_counts(80, 4, first=50, last=50)


def test_split_collectives_pay_latency_per_collective():
    link = Link(busbw=100e9, alpha=4e-6, crosses_domain=True, ranks_per_domain=8)
    one = collective_time("all_gather", 1e9, 64, link)
    split = collective_time("all_gather", 1e9, 64, link, count=100)
    assert split - one == pytest.approx(99 * 63 * 4e-6)  # bandwidth term once, latency per collective


def test_deepspeed_zero3_gathers_each_parameter_tensor():
    # ZeRO-Infinity sec. 6.1: every parameter is partitioned and all-gathered on its own. A GPT-2 layer
    # in Megatron's fused layout holds 12 tensors: QKV and proj weights+biases, 2 LayerNorms (w, b),
    # fc1 and fc2 weights+biases.
    from planner.catalog.hf_import import from_hf_config
    from planner.costmodel.data import param_tensors_per_layer

    gpt = from_hf_config({"model_type": "gpt2", "n_layer": 2, "n_embd": 256, "n_head": 4, "n_inner": 1024,
                          "vocab_size": 1000, "n_positions": 128}, name="t")
    assert param_tensors_per_layer(gpt, False) == 12


def test_mla_layer_tensor_count():
    # MLA (DeepSeek-V3 layout): q_a, q_a_norm, q_b, kv_a, kv_a_norm, kv_b, o = 7 attention tensors; without a
    # query LoRA rank (DeepSeek-V2-Lite) q replaces q_a/q_a_norm/q_b: 5. Plus 2 RMSNorms and a gated MLP (2).
    from planner.costmodel.data import param_tensors_per_layer
    from planner.specs import MLASpec, ModelSpec

    def spec(q_lora):
        return ModelSpec(name="mla", family="deepseek_v3", num_layers=2, hidden_size=256, num_heads=4,
                         num_kv_heads=4, head_dim=64, ffn_hidden_size=512, vocab_size=1000,
                         max_position_embeddings=128,
                         mla=MLASpec(q_lora_rank=q_lora, kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16,
                                     v_head_dim=32))
    assert param_tensors_per_layer(spec(96), False) == 7 + 2 + 2
    assert param_tensors_per_layer(spec(None), False) == 5 + 2 + 2


def test_deepspeed_recompute_regathers_beyond_the_reuse_window():
    # GPT-3 175B layer: 12 h^2 + 13 h = 1.812e9 parameters (h = 12288). DeepSpeed keeps a gathered
    # parameter only when reused within stage3_max_reuse_distance = 1e9 parameters; evenly spread, the
    # share beyond it is 1 - 1e9 / (2 * 1.812e9) = 0.724. A Llama-3.1-8B layer (0.218e9) stays resident,
    # and FSDP2 unshards a block once before its recompute.
    from planner.catalog.hardware import parse_cluster
    from planner.catalog.models import get_model
    from planner.costmodel import Context
    from planner.costmodel.data import zero3_regather_fraction
    from planner.specs import ParallelPlan

    def frac(model, framework, recompute="full"):
        ctx = Context(get_model(model), parse_cluster("a100x64"), _train(framework, seq_len=2048))
        plan = ParallelPlan(dp=64, zero_stage=3, recompute=recompute)
        return zero3_regather_fraction(ctx, plan, ctx.stage_kind_counts(1, None, None, None)[0])

    h = 12288
    assert frac("gpt3-175b", "deepspeed") == pytest.approx(1 - 1e9 / (2 * (12 * h * h + 13 * h)), rel=1e-6)
    assert frac("gpt3-175b", "deepspeed") == pytest.approx(0.724, abs=1e-3)
    assert frac("llama-3.1-8b", "deepspeed") == 0.0
    assert frac("gpt3-175b", "fsdp") == 0.0 and frac("gpt3-175b", "deepspeed", "none") == 0.0


def test_legacy_deepspeed_zero3_exposes_every_gather_and_all_reduces_gradients():
    # DeepSpeed ZeRO-3 before v0.5.x: blocking all-gathers (PR #1188) and all-reduced gradients (issue
    # #1173). Per micro-batch everything is exposed: the forward gather, 1 + f backward gathers and a ring
    # all-reduce of the fp16 gradients, (2 + f + 2) (n-1)/n * 2 P / busbw, plus ring latency (n-1) alpha per
    # step for each of the 12 tensors of each of the 96 layers (twice the steps for the all-reduce).
    from planner.catalog.hardware import parse_cluster
    from planner.catalog.models import get_model
    from planner.costmodel import Context, evaluate
    from planner.costmodel.collectives import group_link
    from planner.costmodel.data import zero3_regather_fraction
    from planner.specs import ParallelPlan

    cl = parse_cluster("a100x384")
    plan = ParallelPlan(dp=384, zero_stage=3, recompute="full", micro_batch=4)
    train = _train("deepspeed", seq_len=2048, dtype="fp16", legacy_deepspeed_zero3=True)
    legacy = Context(get_model("gpt3-175b"), cl, train.model_copy(update={"global_batch": 1536}))
    modern = Context(legacy.model, cl, legacy.train.model_copy(update={"legacy_deepspeed_zero3": False}))
    old, new = evaluate(legacy, plan), evaluate(modern, plan)
    f = zero3_regather_fraction(legacy, plan, legacy.stage_kind_counts(1, None, None, None)[0])
    p_bytes = legacy.params.total * 2.0
    link = group_link(cl, 384, 1, legacy.calibration, "all_gather")
    assert not link.crosses_domain or link.busbw == pytest.approx(8 * 25e9 * 0.86)  # 8 HDR NICs per node
    floor = (2 + f + 2) * (383 / 384) * p_bytes / link.busbw
    latency = (2 + f + 2) * 96 * 12 * 383 * link.alpha
    assert old.time_breakdown["dp_comm_s"] == pytest.approx(floor + latency, rel=1e-3)
    # the same compute either way; with prefetch most of the traffic hides under it
    assert old.step_time_s - new.step_time_s == pytest.approx(
        old.time_breakdown["dp_comm_s"] - new.time_breakdown["dp_comm_s"], rel=1e-9)
    assert new.time_breakdown["dp_comm_s"] < 0.25 * floor


def test_adam_step_bytes_follow_the_stated_dtypes():
    # read + write the fp32 master (8) and m, v (2 x their bytes), read the stored gradient, write the
    # 2-byte compute copy (ZeRO SC20 sec. 3.1 states): 30 B with fp32 moments and grads
    from planner.costmodel.optimizer import adam_bytes_per_param

    assert adam_bytes_per_param(state_bytes_per_param(_train("megatron"), 1, False)) == 30.0
    assert adam_bytes_per_param(state_bytes_per_param(_train("fsdp"), 3, False)) == 30.0  # fp32 params are the master
    assert adam_bytes_per_param(state_bytes_per_param(_train("megatron", optimizer_dtype="bf16"), 1, False)) == 22.0
    assert adam_bytes_per_param(state_bytes_per_param(_train("deepspeed"), 1, False)) == 28.0  # bf16 gradients


@pytest.mark.parametrize("cluster,gbps", [("a100x8", 31.0), ("h100x8", 63.0), ("mi300xx8", 63.0),
                                          ("tpu-v5px8", 15.0), ("unstated-x8", 31.0)])
def test_offload_crosses_the_profiles_host_link(cluster, gbps):
    # hardware_profiles/*.yaml host_link_unidir_GBps (PCIe Gen4 / Gen5 x16, hardware.yaml links; TPU v5p ~1.5e10 B/s
    # per chip, jax-ml/scaling-book tpus.md), the slowest listed x16 rate where a profile states none (a user's file)
    from planner.catalog.hardware import parse_cluster
    from planner.catalog.models import load_model
    from planner.costmodel import Context, evaluate
    from planner.specs import ParallelPlan

    if cluster.startswith("unstated"):
        c = parse_cluster("h100x8")
        c = c.model_copy(update={"hardware": c.hardware.model_copy(update={"host_link_unidir_GBps": None})})
    else:
        c = parse_cluster(cluster)
    ctx = Context(load_model("llama-3.1-8b"), c, TrainingSpec(global_batch=8, framework="megatron"))
    ev = evaluate(ctx, ParallelPlan(tp=1, dp=8, zero_stage=1, offload_optimizer=True))
    term = next(t for t in ev.trace.time if t.name == "optimizer_s")
    assert term.inputs["bandwidth_GBps"] == gbps
    link_s = term.inputs["local_params"] * (4 + 2) / (gbps * 1e9)  # fp32 grads + bf16 params
    assert term.inputs["host_link_s"] == pytest.approx(link_s)
    # + CPU-Adam on the host's shared CPUs (issue 12): the GPUs of a host update their shards on its cores
    cpu_s = term.inputs["local_params"] * term.inputs["gpus_per_host"] / term.inputs["cpu_adam_params_per_s"]
    assert term.value == pytest.approx(link_s + cpu_s)


# NVIDIA's published "Model TFLOP/s/GPU" divided by its tokens/s/GPU is the model FLOPs per token of Megatron's
# num_floating_point_operations (causal attention: half the score matrix). Megatron-Bridge 25.11 performance
# summary (docs/performance-summary.md, DGX-H100 table): Llama 3 8B 744 / 14451, Llama 3 70B 719 / 1602,
# Llama 3.1 405B 737 / 292, all at sequence 8192.
@pytest.mark.parametrize("model,tflops,tokens_per_s", [("llama-3.1-8b", 744, 14451), ("llama-3.1-70b", 719, 1602),
                                                        ("llama-3.1-405b", 737, 292)])
def test_mfu_flops_match_nvidias_published_model_tflops(model, tflops, tokens_per_s):
    from planner.catalog.models import get_model
    from planner.costmodel.flops import model_flops_per_token
    # the table rounds TFLOP/s to 3 digits and tokens/s to 4-5: agreement to 0.5% is what the rounding allows
    assert model_flops_per_token(get_model(model), 8192) == pytest.approx(tflops * 1e12 / tokens_per_s, rel=5e-3)


def test_noncausal_flops_match_the_dgx_cloud_readme():
    # NVIDIA dgxc-benchmarking llama3.1/README_8b.md (Notes): Llama 3.1 8B at sequence 8192 costs 4.74E+14 model
    # FLOPs per sequence counted the SC21 / PaLM way (attention 12 l h^2 (1 + g/a + s/h), the whole score matrix)
    from planner.catalog.models import get_model
    from planner.costmodel.flops import model_flops_per_token, noncausal_model_flops_per_token
    m = get_model("llama-3.1-8b")
    assert noncausal_model_flops_per_token(m, 8192) * 8192 == pytest.approx(4.74e14, rel=2e-3)
    # the causal count keeps (s + 1) / 2 of the s keys per query: it drops 3 (fwd + bwd) x 2 GEMMs (QK^T, AV) x
    # 2 FLOPs x (s - 1) / 2 keys x heads x head_dim per layer
    half_core = 3 * 2 * 2 * (8192 - 1) / 2 * m.num_heads * m.head_dim * m.num_layers
    assert noncausal_model_flops_per_token(m, 8192) - model_flops_per_token(m, 8192) == pytest.approx(half_core)
