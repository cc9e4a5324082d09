"""Plans used by the emitter tests: the consumer validators and the golden files.

Model specs are written out here (numbers from the models' Hugging Face configs, as in
shared/reference/known_runs_dev.yaml) so that the golden files do not move when a catalog changes;
hardware comes from the project's cited `hardware_profiles/`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import yaml

from planner.catalog.data import data_dir
from planner.specs import (
    ClusterSpec,
    HardwareSpec,
    MLASpec,
    ModelSpec,
    MoESpec,
    ParallelPlan,
    RopeScaling,
    TrainingSpec,
)

# Llama 3.1 RoPE: base 500000 with llama3 scaling (meta-llama Llama-3.1 config.json; model_specs/llama-3.1-*.yaml)
LLAMA31_ROPE = dict(rope_theta=500000.0, rope_scaling=RopeScaling(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                                                   high_freq_factor=4.0,
                                                                   original_max_position_embeddings=8192))

LLAMA31_8B = ModelSpec(name="llama-3.1-8b", family="llama", num_layers=32, hidden_size=4096, num_heads=32,
                       num_kv_heads=8, head_dim=128, ffn_hidden_size=14336, vocab_size=128256,
                       max_position_embeddings=131072, **LLAMA31_ROPE)
LLAMA31_70B = ModelSpec(name="llama-3.1-70b", family="llama", num_layers=80, hidden_size=8192, num_heads=64,
                        num_kv_heads=8, head_dim=128, ffn_hidden_size=28672, vocab_size=128256,
                        max_position_embeddings=131072, **LLAMA31_ROPE)
LLAMA31_405B = ModelSpec(name="llama-3.1-405b", family="llama", num_layers=126, hidden_size=16384, num_heads=128,
                         num_kv_heads=8, head_dim=128, ffn_hidden_size=53248, vocab_size=128256,
                         max_position_embeddings=131072, **LLAMA31_ROPE)
LLAMA2_70B = ModelSpec(name="llama-2-70b", family="llama", num_layers=80, hidden_size=8192, num_heads=64,
                       num_kv_heads=8, head_dim=128, ffn_hidden_size=28672, vocab_size=32000,
                       max_position_embeddings=4096)
MIXTRAL_8X7B = ModelSpec(name="mixtral-8x7b", family="mixtral", num_layers=32, hidden_size=4096, num_heads=32,
                         num_kv_heads=8, head_dim=128, ffn_hidden_size=14336, vocab_size=32000,
                         max_position_embeddings=32768, rope_theta=1e6,
                         moe=MoESpec(num_experts=8, top_k=2, expert_ffn_hidden_size=14336))
DEEPSEEK_V3 = ModelSpec(name="deepseek-v3", family="deepseek_v3", num_layers=61, hidden_size=7168, num_heads=128,
                        num_kv_heads=128, head_dim=192, ffn_hidden_size=18432, vocab_size=129280,
                        max_position_embeddings=163840,
                        mla=MLASpec(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                                    v_head_dim=128),
                        norm_eps=1e-6, rope_theta=10000.0, mtp_layers=1,
                        rope_scaling=RopeScaling(rope_type="yarn", factor=40.0, original_max_position_embeddings=4096,
                                                 beta_fast=32.0, beta_slow=1.0, mscale=1.0, mscale_all_dim=1.0),
                        # the router of model_specs/deepseek-v3.yaml (DeepSeek-V3 config.json, report sec. 2.1.2)
                        moe=MoESpec(num_experts=256, top_k=8, expert_ffn_hidden_size=2048, num_shared_experts=1,
                                    shared_expert_ffn_hidden_size=2048, first_k_dense=3, score_function="sigmoid",
                                    expert_bias_balancing=True, route_groups=8, route_topk_groups=4,
                                    routed_scaling_factor=2.5, aux_loss_coeff=0.0001, aux_loss_per_sequence=True))


@lru_cache(maxsize=None)
def hardware(hw_id: str) -> HardwareSpec:
    with open(data_dir("hardware_profiles") / f"{hw_id}.yaml", encoding="utf-8") as f:
        return HardwareSpec(**yaml.safe_load(f))


def cluster(hw_id: str, count: int, **kw) -> ClusterSpec:
    return ClusterSpec(hardware=hardware(hw_id), count=count, **kw)


@dataclass(frozen=True)
class Case:
    name: str
    model: ModelSpec
    cluster: ClusterSpec
    train: TrainingSpec
    plan: ParallelPlan
    prediction: dict | None = None
    # launchers that must emit / must refuse (with a reason containing the given text)
    expect_emit: tuple[str, ...] = ()
    expect_skip: dict[str, str] = field(default_factory=dict)

    def emit(self, launchers=None):
        from planner.emit import emit_all
        return emit_all(self.model, self.cluster, self.train, self.plan, self.prediction, launchers)


_RUN_KNOBS = ("tp", "pp", "vpp", "dp", "cp", "ep", "etp", "zero_stage", "micro_batch", "recompute",
              "sequence_parallel", "schedule")


def _pred(plan: ParallelPlan, run_id: str, step_time_s: float) -> dict:
    """A fixed stand-in for the cost model's output (the runs schema's knobs and the measured step time),
    so the golden plan.json moves with neither the cost model nor new ParallelPlan fields."""
    knobs = plan.knobs()
    return {"plan": {k: knobs[k] for k in _RUN_KNOBS}, "step_time_s": step_time_s, "source_run": run_id}


# --------------------------------------------------------------------------- consumer-test plans
CONSUMER_CASES = [
    Case("llama70b-tp8pp4vpp5-sp-cp2-128xh100", LLAMA31_70B, cluster("h100-sxm-80gb", 128),
         TrainingSpec(seq_len=8192, global_batch=512),
         ParallelPlan(tp=8, pp=4, vpp=5, cp=2, dp=2, micro_batch=1, recompute="full", zero_stage=1,
                      sequence_parallel=True, schedule="interleaved"),
         expect_emit=("megatron", "maxtext", "jax", "torchtitan"),
         expect_skip={"deepspeed": "context parallelism"}),
    Case("llama8b-fsdp-zero3-dp8-8xh100", LLAMA31_8B, cluster("h100-sxm-80gb", 8),
         TrainingSpec(seq_len=8192, global_batch=16),
         ParallelPlan(dp=8, zero_stage=3, micro_batch=2, recompute="full"),
         expect_emit=("megatron", "deepspeed", "maxtext", "jax", "torchtitan")),
    Case("llama8b-zero1-offload-tp2-16xa100", LLAMA31_8B, cluster("a100-sxm-80gb", 16),
         TrainingSpec(seq_len=4096, global_batch=64, dtype="fp16"),
         ParallelPlan(tp=2, dp=8, zero_stage=1, micro_batch=2, offload_optimizer=True, recompute="full",
                      recompute_layers=8),
         expect_emit=("megatron", "jax"),
         # Llama 3.1's RoPE scaling has no Megatron-DeepSpeed flag: the transformers path, data parallel only; MaxText
         # recomputes every layer or none (launchers.maxtext rule whole-layer-remat)
         expect_skip={"torchtitan": "offload", "deepspeed": "tensor parallelism",
                      "maxtext": "remat policy applies to every layer"}),
    Case("llama2-70b-zero1-offload-tp8-16xa100", LLAMA2_70B, cluster("a100-sxm-80gb", 16),
         TrainingSpec(seq_len=4096, global_batch=64, dtype="fp16"),
         ParallelPlan(tp=8, dp=2, zero_stage=1, micro_batch=2, offload_optimizer=True, recompute="full"),
         expect_emit=("megatron", "deepspeed", "maxtext", "jax")),
    Case("mixtral-ep8-pp2-64xh100", MIXTRAL_8X7B, cluster("h100-sxm-80gb", 64),
         TrainingSpec(seq_len=4096, global_batch=256),
         ParallelPlan(pp=2, dp=32, ep=8, etp=1, micro_batch=1, zero_stage=1, recompute="selective"),
         expect_emit=("megatron", "maxtext", "jax", "torchtitan"),
         expect_skip={"deepspeed": "expert parallelism"}),
    # DualPipeV (two stages per rank in a V): torchtitan only
    Case("llama8b-tp2-pp4-dualpipev-fsdp-32xh100", LLAMA31_8B, cluster("h100-sxm-80gb", 32),
         TrainingSpec(seq_len=8192, global_batch=64, framework="fsdp"),
         ParallelPlan(tp=2, pp=4, vpp=2, dp=4, micro_batch=1, zero_stage=3, recompute="selective",
                      sequence_parallel=True, schedule="dualpipev"),
         expect_emit=("torchtitan",),
         expect_skip={"megatron": "DualPipeV", "deepspeed": "dualpipev", "maxtext": "dualpipev"}),
    Case("llama405b-tp8-pp4-dualpipev-embedding-loss-256xh100", LLAMA31_405B, cluster("h100-sxm-80gb", 256),
         TrainingSpec(seq_len=8192, global_batch=256, framework="fsdp"),
         ParallelPlan(tp=8, pp=4, vpp=2, dp=8, micro_batch=1, zero_stage=3, recompute="full",
                      sequence_parallel=True, schedule="dualpipev", account_embedding_loss=True),
         expect_emit=("torchtitan",),
         expect_skip={"megatron": "DualPipeV", "deepspeed": "dualpipev", "maxtext": "dualpipev"}),
    Case("mixtral-ep8-capacity1.25-64xh100", MIXTRAL_8X7B, cluster("h100-sxm-80gb", 64),
         TrainingSpec(seq_len=4096, global_batch=256, moe_capacity_factor=1.25),
         ParallelPlan(pp=2, dp=32, ep=8, etp=1, micro_batch=1, zero_stage=1, recompute="selective"),
         expect_emit=("megatron", "maxtext", "jax"),
         expect_skip={"deepspeed": "capacity factor", "torchtitan": "dropless"}),
    Case("llama70b-tp8-asynctp-compile-fsdp-64xh100", LLAMA31_70B, cluster("h100-sxm-80gb", 64),
         TrainingSpec(seq_len=8192, global_batch=128, framework="fsdp", torch_compile=True),
         ParallelPlan(tp=8, dp=8, zero_stage=3, micro_batch=1, recompute="full", sequence_parallel=True,
                      tp_comm_overlap=True),
         expect_emit=("megatron", "jax", "torchtitan"),
         expect_skip={"deepspeed": "no TP communication overlap", "maxtext": "XLA flags"}),
    Case("llama8b-fp8-blockwise-tp2-16xh100", LLAMA31_8B, cluster("h100-sxm-80gb", 16),
         TrainingSpec(seq_len=8192, global_batch=64, dtype="fp8", fp8_recipe="blockwise"),
         ParallelPlan(tp=2, dp=8, micro_batch=1, zero_stage=1, recompute="selective", sequence_parallel=True),
         expect_emit=("megatron", "jax"),
         expect_skip={"deepspeed": "FP8", "maxtext": "fp8-recipe", "torchtitan": "recipe"}),
    Case("llama8b-mxfp8-8xb200", LLAMA31_8B, cluster("b200-sxm-180gb", 8),
         TrainingSpec(seq_len=8192, global_batch=128, dtype="fp8", fp8_recipe="mxfp8"),
         ParallelPlan(dp=8, micro_batch=2, zero_stage=1, recompute="none"),
         expect_emit=("megatron", "jax"),
         expect_skip={"deepspeed": "FP8", "maxtext": "fp8-recipe", "torchtitan": "recipe"}),
    Case("deepseek-v3-ep16-pp4-uneven-64xh800", DEEPSEEK_V3, cluster("h800-sxm-80gb", 64),
         TrainingSpec(seq_len=4096, global_batch=256),
         ParallelPlan(pp=4, dp=16, ep=16, etp=1, micro_batch=1, zero_stage=1, recompute="selective",
                      first_stage_layers=13, last_stage_layers=16),
         expect_emit=("megatron",),
         expect_skip={"deepspeed": "multi-token prediction", "maxtext": "evenly", "jax": "stage",
                      "torchtitan": "load-balancing loss"}),
    # FP8 delayed scaling: megatron-core refuses moe_act and layernorm recompute there, so the MoE selective set drops
    # them (memory.selective_recompute_modules) and megatron-core's default, core_attn, is what runs and is costed
    Case("mixtral-fp8-delayed-selective-ep8-64xh100", MIXTRAL_8X7B, cluster("h100-sxm-80gb", 64),
         TrainingSpec(seq_len=4096, global_batch=256, dtype="fp8", fp8_recipe="delayed"),
         ParallelPlan(pp=2, dp=32, ep=8, etp=1, micro_batch=1, zero_stage=1, recompute="selective"),
         expect_emit=("megatron",),
         expect_skip={"deepspeed": "FP8", "maxtext": "fp8-recipe", "torchtitan": "recipe"}),
    # modules pinned by the plan (--recompute-modules), among them the dense layers' MLPs
    Case("deepseek-v3-pinned-recompute-modules-64xh800", DEEPSEEK_V3, cluster("h800-sxm-80gb", 64),
         TrainingSpec(seq_len=4096, global_batch=256),
         ParallelPlan(pp=4, dp=16, ep=16, etp=1, micro_batch=1, zero_stage=1, recompute="selective",
                      recompute_modules=("core_attn", "mla_up_proj", "mlp"), first_stage_layers=13,
                      last_stage_layers=16),
         expect_emit=("megatron",),
         expect_skip={"deepspeed": "multi-token prediction", "maxtext": "evenly", "jax": "stage",
                      "torchtitan": "load-balancing loss"}),
    # fine-grained activation offloading (--offload-modules): the expert GEMM inputs and activation inputs, the
    # attention core's tensors and its projection's input go to host memory (memory.offloaded_elems), beside selective
    # recompute
    Case("mixtral-offload-modules-ep8-64xh100", MIXTRAL_8X7B, cluster("h100-sxm-80gb", 64),
         TrainingSpec(seq_len=4096, global_batch=256),
         ParallelPlan(pp=2, dp=32, ep=8, etp=1, micro_batch=1, zero_stage=1, recompute="selective",
                      recompute_modules=("moe_act", "layernorm"),
                      offload_modules=("expert_fc1", "moe_act", "core_attn", "attn_proj")),
         expect_emit=("megatron",),
         expect_skip={"deepspeed": "offload", "maxtext": "offload", "torchtitan": "offload"}),
    Case("llama70b-bf16-grads-and-moments-tp8pp2-64xh100", LLAMA31_70B, cluster("h100-sxm-80gb", 64),
         TrainingSpec(seq_len=4096, global_batch=128, grad_dtype="bf16", optimizer_dtype="bf16"),
         ParallelPlan(tp=8, pp=2, dp=4, micro_batch=1, zero_stage=1, recompute="selective", sequence_parallel=True),
         expect_emit=("megatron",),
         expect_skip={"deepspeed": "megatron-lm only", "maxtext": "megatron-lm only", "jax": "megatron-lm only",
                      "torchtitan": "megatron-lm only"}),
    Case("llama8b-tp4-hsdp-2x32-tpu-v5p", LLAMA31_8B, cluster("tpu-v5p", 64, domain_size=32),
         TrainingSpec(seq_len=4096, global_batch=256),
         ParallelPlan(tp=4, dp=16, zero_stage=3, zero_shard_size=8, micro_batch=2, recompute="full"),
         expect_emit=("maxtext", "jax"),
         expect_skip={"megatron": "tpu", "deepspeed": "tpu", "torchtitan": "tpu"}),
    # MaxText's custom remat policy as the search tries it (Stack.searched_remat_offloads): the layer input offloaded
    Case("llama8b-fsdp64-layer-input-offload-tpu-v5p", LLAMA31_8B, cluster("tpu-v5p", 64),
         TrainingSpec(seq_len=8192, global_batch=256),
         ParallelPlan(tp=1, dp=64, zero_stage=3, micro_batch=1, recompute="selective",
                      remat_offloaded=("decoder_layer_input",)),
         expect_emit=("maxtext", "jax"),
         expect_skip={"megatron": "tpu", "deepspeed": "tpu", "torchtitan": "tpu"}),
    Case("llama8b-tp4-pp2-fsdp8-2x32-tpu-v5p", LLAMA31_8B, cluster("tpu-v5p", 64, domain_size=32),
         TrainingSpec(seq_len=4096, global_batch=64),
         ParallelPlan(tp=4, pp=2, dp=8, zero_stage=3, micro_batch=2, recompute="selective", schedule="1f1b"),
         expect_emit=("maxtext", "jax")),
]

# --------------------------------------------------------------------------- golden plans (published runs)
GOLDEN_CASES = [
    Case("nemo2407-llama2-70b-64gpu", LLAMA2_70B, cluster("h100-sxm-80gb", 64),
         TrainingSpec(seq_len=4096, global_batch=128, dtype="fp8"),
         ParallelPlan(tp=4, pp=4, vpp=20, dp=4, micro_batch=1, zero_stage=1, sequence_parallel=True,
                      schedule="interleaved")),
    Case("dgxc-llama31-405b-bf16-1152xh100", LLAMA31_405B, cluster("h100-sxm-80gb", 1152),
         TrainingSpec(seq_len=8192, global_batch=504),
         ParallelPlan(tp=8, pp=9, vpp=7, cp=2, dp=8, micro_batch=1, zero_stage=1, sequence_parallel=True,
                      schedule="interleaved")),
    Case("deepseek-v3-2048xh800", DEEPSEEK_V3, cluster("h800-sxm-80gb", 2048),
         TrainingSpec(seq_len=4096, global_batch=15360, dtype="fp8"),
         ParallelPlan(pp=16, dp=128, ep=64, micro_batch=1, zero_stage=1, recompute="selective",
                      first_stage_layers=3, last_stage_layers=2)),
    Case("torchtitan-llama31-8b-8xh100-fsdp", LLAMA31_8B, cluster("h100-sxm-80gb", 8),
         TrainingSpec(seq_len=8192, global_batch=16),
         ParallelPlan(dp=8, zero_stage=3, micro_batch=2, recompute="selective")),
]
_MEASURED = {"nemo2407-llama2-70b-64gpu": 4.7407407407407405, "dgxc-llama31-405b-bf16-1152xh100": 17.52,
             "deepseek-v3-2048xh800": 19.906687402799378, "torchtitan-llama31-8b-8xh100-fsdp": 2.8434571329399514}
GOLDEN_CASES = [Case(c.name, c.model, c.cluster, c.train, c.plan, _pred(c.plan, c.name, _MEASURED[c.name]))
                for c in GOLDEN_CASES]

ALL_CASES = {c.name: c for c in CONSUMER_CASES + GOLDEN_CASES}


# --------------------------------------------------------------------------- every catalog model
def catalog_cases(world: int = 64, hw: str = "h100x64") -> list[Case]:
    """One ordinary plan per model of the project's catalog (TP8, PP2 when the layers split, EP over DP),
    so the consumers see every architecture family the planner knows. Empty if the catalog is absent."""
    return list(_catalog_cases(world, hw))


@lru_cache(maxsize=None)
def _catalog_cases(world: int, hw: str) -> tuple[Case, ...]:
    try:
        from planner.catalog.hardware import parse_cluster
        from planner.catalog.models import list_models
    except ImportError:
        return ()
    cl = parse_cluster(hw)
    out = []
    for name, _aliases, m in list_models():
        tp = 8 if m.num_heads % 8 == 0 else 1
        pp = 2 if m.num_layers % 2 == 0 else 1
        dp = world // (tp * pp)
        ep = 1
        if m.moe is not None:
            ep = max(e for e in (1, 2, 4, 8) if m.moe.num_experts % e == 0 and dp % e == 0)
        plan = ParallelPlan(tp=tp, pp=pp, dp=dp, ep=ep, etp=1, micro_batch=1, zero_stage=1,
                            recompute="selective")
        out.append(Case(f"catalog-{name}", m, cl, TrainingSpec(seq_len=4096, global_batch=dp * 8), plan))
    return tuple(out)


# --------------------------------------------------------------------------- the search's own choices
SEARCH_INPUTS = [  # (model, cluster, seq_len, global_batch): the search picks every knob
    ("llama-3.1-405b", "h100x1024", 8192, 1024),
    ("deepseek-v3", "h800-sxm-80gbx256", 4096, 1024),
    ("llama-3.1-70b", "a100-sxm-80gbx64", 4096, 1024),
    ("mixtral-8x7b", "h100-sxm-80gbx64", 4096, 512),
]


def search_case_name(name: str, cl: str) -> str:
    return f"search-{name}-{cl}"


SEARCH_CASE_NAMES = [search_case_name(name, cl) for name, cl, _seq, _gbs in SEARCH_INPUTS]


@lru_cache(maxsize=None)
def search_cases() -> tuple[Case, ...]:
    """The best plan `plan` itself chooses for a few representative inputs, so the real consumers
    check what the search actually emits (uneven CP-SAT stage splits, interleaving, EP/ETP). Four full
    searches: call it inside a test or fixture (tests parametrize over SEARCH_CASE_NAMES)."""
    try:
        from planner.catalog.hardware import parse_cluster
        from planner.catalog.models import get_model
        from planner.costmodel import Context
        from planner.search.engine import SearchOptions, search
    except ImportError:
        return ()
    out = []
    for name, cl, seq, gbs in SEARCH_INPUTS:
        model, cluster = get_model(name), parse_cluster(cl)
        train = TrainingSpec(seq_len=seq, global_batch=gbs)
        best = search(Context(model, cluster, train), SearchOptions(top_k=1)).plans[0]
        out.append(Case(search_case_name(name, cl), model, cluster, train, best.plan))
    return tuple(out)
