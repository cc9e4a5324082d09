"""`plan validate`: hold the cost model against measured, published runs.

For each run (the runs schema: docs/runs-schema.md, planner.analysis.runschema) every published knob is
fixed, the planner picks the unpublished ones (null) itself as a user tuning the run would, and the
prediction is compared with the measured step time and peak memory.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any, Callable

from pydantic import ValidationError

from planner.analysis.runschema import (  # noqa: F401  (PLAN_FIELDS: the run-file plan keys, read by tests)
    PEAK_MEMORY_OF,
    PLAN_FIELDS,
    RunStack,
    stack_problem,
    stated_stack,
    train_problem,
    unknown_section_key,
    unknown_top_key,
)
from planner.catalog.files import read_structured_file, read_text_file
from planner.catalog.hf_import import _validation_message
from planner.costmodel import Context, evaluate
from planner.errors import InputError
from planner.launchers import stack_launcher
from planner.names import safe_line
from planner.search.engine import SearchOptions, search
from planner.specs import ClusterSpec, ModelSpec, TrainingSpec
from planner.specs.plan import NAME_LIST_KNOBS, recompute_label
from planner.stacks import traits
from planner.stacks.megatron import (
    OFFLOAD_MODULES,
    RECOMPUTE_MODULES,
    unknown_offload_modules,
    unknown_recompute_modules,
)


def runs_on_tpu(run: dict) -> bool:
    """The run's accelerator is a TPU (HardwareSpec.is_tpu of the catalog entry its `hardware` names, alias or id);
    an unknown accelerator is not (plan validate reports it when it builds the run)."""
    from planner.catalog.hardware import get_hardware
    from planner.errors import PlannerError

    try:
        return get_hardware(str(run.get("hardware", ""))).is_tpu
    except PlannerError:
        return False


def infer_framework(run: dict) -> str:
    """Whose memory and overlap behaviour the run had, from the source it cites, for a record without
    stack.framework (shared/reference's files have none): NeMo AutoModel's performance summary is its own stack
    (FSDP2 over Transformer Engine and DeepEP: planner/stacks/automodel.py); torchtitan / llm-foundry are FSDP2/FSDP;
    MaxText is JAX FSDP; DeepSpeed ZeRO; everything else here (Megatron-LM, NeMo, Megatron-Bridge, DGX Cloud NeMo
    recipes) is Megatron."""
    text = f"{run.get('id', '')} {run.get('source', '')}".lower()
    if "nemo automodel" in text:
        return "automodel"
    if "torchtitan" in text or _cites_llm_foundry(run):
        return "fsdp"
    if "maxtext" in text or runs_on_tpu(run):
        return "maxtext"  # TPUs train with JAX/XLA (MaxText and its kin) in every source here
    if "deepspeed" in text or "zero3" in str(run.get("id", "")).lower():
        return "deepspeed"
    return "megatron"


def stack_date(run: dict) -> tuple[int, int] | None:
    """(year, month) of the software the run used, from its citation: the newest arXiv id (yymm), else
    the newest year named (as December of it); None when the citation names neither."""
    import re

    text = f"{run.get('id', '')} {run.get('source', '')}"
    ids = re.findall(r"arxiv\.org/abs/(\d{4})\.\d{4,5}", text)
    if ids:
        yymm = max(int(a) for a in ids)
        return 2000 + yymm // 100, yymm % 100
    years = [int(y) for y in re.findall(r"\b(20[12]\d)\b", text)]
    return (max(years), 12) if years else None


def pre_flash_stack(run: dict) -> bool:
    """Whether the run's stack predates FlashAttention (May 2022, arXiv 2205.14135): published before it, or MT-NLG
    (arXiv 2201.11990, trained in 2021)."""
    date = stack_date(run)
    return (date is not None and date < (2022, 5)) or "mtnlg" in f"{run.get('id', '')} {run.get('source', '')}".lower()


def infer_attention_impl(run: dict) -> str:
    """Runs of a stack before FlashAttention (pre_flash_stack) materialised the attention scores."""
    return "unfused" if pre_flash_stack(run) else "flash"


def infer_attention_dropout(run: dict) -> bool:
    """train.attention_dropout > 0 where the record states it, else whether the stack predates FlashAttention
    (pre_flash_stack): Megatron-LM ran --attention-dropout 0.1 by default (v2.5, 2021-08, arguments.py;
    its examples/pretrain_gpt3_175B.sh sets none), as Megatron-DeepSpeed did; later recipes train without it."""
    stated = (run.get("train") or {}).get("attention_dropout")
    return float(stated) > 0.0 if stated is not None else pre_flash_stack(run)


def infer_legacy_deepspeed_zero3(run: dict, framework: str) -> bool:
    """DeepSpeed ZeRO-3 runs published before its overlapped stage-3 rewrite (DeepSpeed PR #1453, merged
    for v0.5.x in late 2021) had blocking parameter gathers (TrainingSpec.legacy_deepspeed_zero3)."""
    date = stack_date(run)
    return traits(framework).legacy_zero3_option and date is not None and date < (2021, 11)


# torchtitan's Dec 2024 H100 benchmark (benchmarks/llama3_h100_202412_torchtitan.md) states torch.compile in the
# titles of Tables 2, 4, 5 and 6 (Tables 1 and 3 list it per row: the run id carries "compile") and AsyncTP in the
# titles of Tables 5 and 6 (Table 4 per row: "asynctp" in the id).
TORCHTITAN_H100_DOC = "llama3_h100_202412_torchtitan"
COMPILED_TABLES = (2, 4, 5, 6)
ASYNC_TP_TABLES = (5, 6)


def _cites_torchtitan_table(run: dict, tables: tuple[int, ...]) -> bool:
    src = str(run.get("source", "")).lower()
    return TORCHTITAN_H100_DOC in src and any(f"table {t} " in src for t in tables)


def infer_torch_compile(run: dict, framework: str) -> bool:
    """Whether a PyTorch-native run used torch.compile, from its id or the cited table's title."""
    rid = str(run.get("id", "")).lower()
    compiled = "compile" in rid or _cites_torchtitan_table(run, COMPILED_TABLES)
    return traits(framework).eager_unless_compiled and compiled


def _cites_llm_foundry(run: dict) -> bool:
    """A MosaicML llm-foundry (MPT) run, from its id or citation."""
    text = f"{run.get('id', '')} {run.get('source', '')}".lower()
    return "foundry" in text or "mpt" in text


# torchtitan compiles its loss function with --training.compile since April 2025 (pytorch/torchtitan PR #1033,
# merged 2025-04-01: "compiling the loss fn if job_config.training.compile is set"; 0.3.0's BaseLoss._maybe_compile)
TORCHTITAN_COMPILED_LOSS_SINCE = (2025, 4)


def infer_fused_cross_entropy(run: dict, framework: str) -> bool:
    """llm-foundry's MPT runs compute the loss with flash-attn's fused CrossEntropyLoss (llm-foundry
    ComposerMPTCausalLM: loss_fn defaults to 'fused_crossentropy'); torchtitan uses torch's cross entropy."""
    return traits(framework).fused_loss_option and _cites_llm_foundry(run)


# torchao's docs/source/workflows/training.md H100 table (torchtitan 0.0.2), as the runs cite it
TORCHAO_H100_TABLE = "nvidia h100 table"


def infer_compiled_loss(run: dict, framework: str, compiled: bool) -> bool:
    """torchtitan compiles its cross entropy with --compile since PR #1033 (April 2025) into one fused kernel that
    keeps the bf16 logits and writes a bf16 gradient (the fused-loss accounting): a compiled run whose torchtitan is
    that recent, by the citation's date, or torchao's 2025 float8/MX training docs (torch 2.7 to 2.9)."""
    if not (compiled and traits(framework).compile_fuses_loss):
        return False
    src = str(run.get("source", "")).lower()
    if "pytorch/ao/" in src or "torchao" in src:
        # the tables' own stated stack: H100 "torchtitan version 0.0.2" with torchao 890e0ac8 (2025-02-28), added to
        # the docs by ao PR #1793 (2025-03-12), before torchtitan PR #1033 (2025-04-02) compiled the loss: the fp32
        # loss ran eagerly; B200 commit 6fc499f and MI300X commit 2c8b594 (August 2025: components/loss.py compiles it)
        return TORCHAO_H100_TABLE not in src
    # only a run that cites torchtitan ran its loss; another FSDP2 stack (NeMo AutoModel, a user's) is not inferred
    date = stack_date(run)
    cites_titan = "torchtitan" in f"{run.get('id', '')} {src}".lower()
    return cites_titan and date is not None and date >= TORCHTITAN_COMPILED_LOSS_SINCE


# TP communication overlap in the cited stack (a record without stack.tp_comm_overlap): NVIDIA's benchmark recipes
# (NeMo performance summary, DGX Cloud, Megatron-Bridge) run Transformer Engine userbuffers overlap with TP > 1
# (dgxc-benchmarking nemo_megatron/gpt3_175b_hydra.yaml: ub_tp_comm_overlap: true; Megatron-Bridge performance
# recipes: CommOverlapConfig(tp_comm_overlap=True) with the userbuffers_*_tp* presets); torchtitan's Dec 2024
# benchmark runs AsyncTP where its id or table title says so (ASYNC_TP_TABLES).
NVIDIA_RECIPE_SOURCES = ("nemo performance summary", "dgx cloud benchmarking", "megatron-bridge performance summary")


def infer_tp_comm_overlap(run: dict, framework: str) -> bool:
    """Whether the run's stack overlapped TP communication with its GEMMs (TP > 1 only matters)."""
    rid, src = str(run.get("id", "")).lower(), str(run.get("source", "")).lower()
    evidence = traits(framework).tp_overlap_evidence  # where the stack's runs overlap TP (planner/stacks/)
    if evidence == "nvidia_recipes":
        return any(k in src for k in NVIDIA_RECIPE_SOURCES)
    if evidence == "async_tp":
        return "asynctp" in rid or _cites_torchtitan_table(run, ASYNC_TP_TABLES)
    # MaxText's TPU scripts and tpu-recipes launch with XLA's async collective fusion, which overlaps the TP
    # collectives with the matmuls (LIBTPU_INIT_ARGS --xla_tpu_enable_async_collective_fusion=true
    # --xla_tpu_overlap_compute_collective_tc=true; MaxText/configs/v5p/512b.sh @5431d43)
    return evidence == "xla_tpu" and runs_on_tpu(run)


def infer_fp8_recipe(run: dict) -> str | None:
    """The FP8 scaling recipe of an fp8 run, where its id or citation says: Megatron-Bridge's FP8-CS / FP8-MX rows
    (current per-tensor scaling / MXFP8); NeMo 24.07 and DGX Cloud's NeMo recipes (fp8_hybrid with an amax history:
    delayed on H100; dgxc-benchmarking nemo_megatron/gpt3_175b_hydra.yaml fp8_amax_history_len 1024); DeepSeek-V3's own
    fine-grained 1x128 / 128x128 scaling (report sec. 3.3.2: blockwise). Else None (the launcher's default)."""
    if str((run.get("train") or {}).get("dtype", "")).lower() != "fp8":
        return None
    rid, src = str(run.get("id", "")).lower(), str(run.get("source", "")).lower()
    if "fp8-mx" in rid:
        return "mxfp8"
    if "fp8-cs" in rid:
        return "tensorwise"
    if _deepseek_own_stack(run):
        return "blockwise"
    hopper = str(run.get("hardware", "")).lower().startswith(("h100", "h800"))
    nvidia = traits(infer_framework(run)).tp_overlap_evidence == "nvidia_recipes"  # the stack of NVIDIA's recipes
    if hopper and nvidia and any(k in src for k in ("nemo performance summary", "dgx cloud benchmarking")):
        return "delayed"
    return None


# Megatron-Bridge's Kimi K2 performance recipes train with Muon (kimi_llm_pretrain.py optimizer_type "muon", the
# tables' note "Muon optimizer was used for pre-training Kimi-K2"), and with MXFP8 turn FP8 primary weights off:
# scripts/performance/configs/kimi/kimi_llm_pretrain.py set_kimi_k2_common_configs l.38-45 (v0.3.1 through v0.5.1: "WAR:
# MXFP8's fp8_param_gather ... incompatible with Muon's LayerWiseDistributedOptimizer", fp8_param_gather = False).
# Kimi K2: model_type deepseek_v3, hidden 7168, 384 routed experts (moonshotai/Kimi-K2-Instruct config.json).
KIMI_K2_ROUTED_EXPERTS = 384


def _mbridge_kimi_k2_muon_mxfp8(run: dict) -> bool:
    model = run.get("model") or {}
    recipe = stated_stack(run).get("fp8_recipe") or infer_fp8_recipe(run)
    return ("megatron-bridge performance summary" in str(run.get("source", "")).lower()
            and model.get("hidden_size") == 7168 and model.get("n_routed_experts") == KIMI_K2_ROUTED_EXPERTS
            and recipe == "mxfp8")


def infer_fp8_param_gather(run: dict, framework: str) -> bool:
    """FP8 primary weights, for an fp8 record without stack.fp8_param_gather: NVIDIA's Megatron recipes keep them
    (Megatron-Bridge v0.2.0 training/mixed_precision.py: fp8_param_gather = True in the delayed, current-scaling and
    MXFP8 recipes, which scripts/performance/utils/helpers.py get_precision_config runs for fp8_cs / fp8_mx; NeMo 2
    llm/recipes/precision/mixed_precision.py bf16_with_fp8_mixed: fp8_params = True), but Megatron-Bridge's Kimi K2
    MXFP8 recipes (Muon: KIMI_K2_ROUTED_EXPERTS' note). Else False (torchtitan's FSDP float8 all-gather is stated in the
    record's stack block, not inferred)."""
    if str((run.get("train") or {}).get("dtype", "")).lower() != "fp8" or _mbridge_kimi_k2_muon_mxfp8(run):
        return False
    src = str(run.get("source", "")).lower()
    nvidia = traits(framework).tp_overlap_evidence == "nvidia_recipes"  # the stack of NVIDIA's recipes
    return nvidia and any(k in src for k in ("megatron-bridge performance summary", "nemo performance summary",
                                             "dgx cloud benchmarking"))


# MoE dispatcher of the cited recipe, for a record without stack.moe_dispatcher: Megatron-Bridge's performance
# configs run DeepSeek-V3 with the flex dispatcher (DeepEP / HybridEP) and Qwen3 where its preset sets a backend
# (NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/deepseek/deepseek_workload_base_configs.py and
# qwen/qwen3_workload_base_configs.py moe_flex_dispatcher_backend: QWEN3_FLEX_FROM); DeepSeek's own framework
# dispatches with DeepEP (DeepSeek-V3 report sec. 3.2.2; deepseek-ai/DeepEP). Every other MoE run: its stack's default
# (planner/stacks: Stack.moe_dispatcher).
FLEX_RECIPE_MODELS = ("deepseek_v3", "qwen3_moe", "gpt_oss")
# gpt-oss-120b presets with the flex dispatcher: Megatron-Bridge v0.4.0 / v0.4.1
# GPT_OSS_120B_PRETRAIN_CONFIG_{GB200,B200}_BF16_V2 moe_flex_dispatcher_backend="hybridep" (the 26.04 release); v0.3.x
# and v0.4.2 set none (alltoall). The 26.04.01 table is not mapped to one of v0.4.1 / v0.4.2 with certainty (its
# DeepSeek-V3 B200 row has v0.4.2's layout), so it keeps the stack's default. From v0.5.0 the GB200 FP8-MX preset runs
# HybridEP with its full-iteration CUDA graph (GPT_OSS_120B_PRETRAIN_CONFIG_GB200_FP8_MX_V2), as the other models'.
# B300 (GPT_OSS_120B_PRETRAIN_CONFIG_B300_BF16_V2, which the FP8-MX V2 preset aliases from v0.5.0): hybridep in v0.4.0,
# v0.4.2 and v0.5.0 (26.04, 26.04.01, 26.06; gpt_oss_workload_base_configs.py l.114, l.113, l.185), none in v0.3.x; the
# GB300 BF16 V2 preset sets none through v0.4.2 (its FP8-MX V2 preset of v0.5.0 on is a full-iteration one).
# (release tag in the citation, hardware prefixes)
GPT_OSS_FLEX_PRESETS = (("26.04", ("gb200", "b200", "b300")), ("26.04.01", ("b300",)), ("26.06", ("b300",)))


def infer_moe_dispatcher(run: dict) -> str | None:
    src = str(run.get("source", "")).lower()
    model_type = str((run.get("model") or {}).get("model_type", "")).lower()
    if infer_moe_capacity_factor(run):
        # Megatron-Bridge's token drop asserts the alltoall dispatcher (training/utils/moe_token_drop.py)
        return None
    if "megatron-bridge performance summary" in src and model_type in FLEX_RECIPE_MODELS:
        # DeepSeek-V3 on every system (H100 presets: enable_deepep / hybridep), Qwen3 where its preset sets a backend
        gpt_oss_flex = any(_cites_preset(run, rel, "gpt_oss", 2880, hws) for rel, hws in GPT_OSS_FLEX_PRESETS)
        # (the full-iteration CUDA-graph presets run HybridEP: FULL_ITERATION_CG_RECIPES)
        if model_type == "deepseek_v3" or (model_type == "qwen3_moe" and _qwen3_flex(run)) or gpt_oss_flex \
                or _full_iteration_recipe(run):
            return "flex"
    return "flex" if _deepseek_own_stack(run) else None


# Qwen3 presets with the flex dispatcher outside GB200 / GB300 (whose presets set moe_flex_dispatcher_backend
# "hybridep" in every release), by (hidden size, hardware prefix): the first performance-summary release whose preset
# sets a flex backend. Megatron-Bridge v0.2.0-v0.2.2 (25.09, 25.11) set none on B200 / H100; v0.3.0 (26.02) adds
# "deepep" to QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_*; v0.3.1 on (26.02.01+) "hybridep" to the Qwen3-30B-A3B H100 and
# B200 BF16 presets (the FP8 presets inherit the B200 one); the Qwen3-235B-A22B B200 / H100 presets never do.
# Qwen3-30B-A3B has hidden size 2048, Qwen3-235B-A22B 4096. Caveat for 26.02 on H100: Megatron-Bridge's known issues
# (docs/releases/known-issues.md at v0.3.0) say "DeepEP is not supported in the current NeMo framework 26.02
# container"; the preset's dispatcher is kept, and the 26.02 H100 FP8-CS row's prediction hardly depends on it (+9%
# with flex, +14% with alltoall).
# B300 (DGX-B300 rows from 26.02): Qwen3-30B-A3B from v0.3.0 (QWEN3_30B_A3B_PRETRAIN_CONFIG_B300_FP8_CS_V1 "hybridep",
# passed to the recipe's apply_flex_dispatcher_backend, which accepts HybridEP on compute capability 10);
# Qwen3-235B-A22B from v0.4.2 (26.04.01: QWEN3_235B_A22B_PRETRAIN_CONFIG_B300_FP8_CS_V1 "hybridep",
# qwen3_llm_pretrain.py qwen3_235b_a22b_pretrain_config_b300 sets moe_token_dispatcher_type "flex"): v0.3.0 and v0.4.0
# set no backend, and v0.3.1's "deepep" (BASE_QWEN3_235B_A22B_CONFIG) is overridden by that function's
# moe_token_dispatcher_type "alltoall".
QWEN3_FLEX_FROM = {(2048, "h100"): (26, 2, 0), (2048, "b200"): (26, 2, 1), (2048, "b300"): (26, 2, 0),
                   (4096, "b300"): (26, 4, 1)}


def _qwen3_flex(run: dict) -> bool:
    """Whether the cited Megatron-Bridge release runs this Qwen3 preset with the flex dispatcher (QWEN3_FLEX_FROM)."""
    hw = str(run.get("hardware", "")).lower()
    if hw.startswith(("gb200", "gb300")):
        return True
    hidden = int((run.get("model") or {}).get("hidden_size") or 0)
    first = next((rel for (h, prefix), rel in QWEN3_FLEX_FROM.items() if h == hidden and hw.startswith(prefix)), None)
    release = _cited_release(run)
    return first is not None and release is not None and release >= first


def _cited_release(run: dict) -> tuple[int, int, int] | None:
    """The performance-summary release a run cites ("26.02.01 NeMo container" -> (26, 2, 1)), else None."""
    import re

    m = re.search(r"(\d{2})\.(\d{2})(?:\.(\d{2}))? nemo container", str(run.get("source", "")).lower())
    return None if m is None else (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))


# The flex dispatcher's backend in the cited recipe, for a record without stack.moe_flex_backend (its
# moe_flex_dispatcher_backend; container -> Megatron-Bridge release as Megatron-Bridge docs/versions1.json maps them:
# 25.09 = 0.1.0rc3, 25.11 = v0.2.0, 26.02 / 26.02.01 = v0.3.0 / v0.3.1, 26.04 / 26.04.01 = v0.4.0 / v0.4.2, 26.06 /
# 26.06.01 = v0.5.0 / v0.5.1, 26.08 = v0.6.0): the GB200 / GB300 presets run HybridEP in every release
# (scripts/performance/configs/*/*workload_base_configs.py, v0.6.0 perf_recipes/*/gb200); DeepSeek-V3's presets from
# v0.3.0 on every system (DEEPSEEK_V3_PRETRAIN_CONFIG_*_V1 "hybridep") but 26.04.01's B200 one (v0.4.2
# DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2: "deepep"), DeepEP before (0.1.0rc3 run_script.py enable_deepep on H100);
# the Qwen3-30B-A3B H100 / B200 presets from v0.3.1 (26.02's H100 one: "deepep"); gpt-oss-120b's v0.4.0 presets.
# Everything else, DeepSeek's own training stack too: the stack's (DeepEP). runs/*.yaml state it per row with the
# line that sets it; tests/analysis/test_flex_backend.py holds this rule to them.
# B300 (DGX-B300 rows 26.02-26.06): every preset that runs the flex dispatcher sets "hybridep" (DeepSeek-V3
# DEEPSEEK_V3_PRETRAIN_CONFIG_B300_V1, Qwen3 and gpt-oss as QWEN3_FLEX_FROM / GPT_OSS_FLEX_PRESETS say), so B300 joins
# the NVL72 systems here (HYBRIDEP_SYSTEMS). DeepEP could not have run on it before v0.4.0 in any case:
# src/megatron/bridge/training/flex_dispatcher_backend.py at v0.3.x accepts DeepEP only for device names equal to
# "NVIDIA B200" / "NVIDIA B300" (startswith from v0.4.0), while the part reports "NVIDIA B300 SXM6 AC"
# (hardware_profiles/b300-sxm-288gb.yaml).
HYBRIDEP_SYSTEMS = ("gb200", "gb300", "b300")
HYBRIDEP_FROM = {"deepseek_v3": (26, 2, 0), "qwen3_moe": (26, 2, 1)}  # first release off HYBRIDEP_SYSTEMS
HYBRIDEP_RELEASES = {"gpt_oss": ((26, 4, 0),)}
DEEPEP_PRESETS = (((26, 4, 1), "deepseek_v3", "b200"),)


def infer_moe_flex_backend(run: dict) -> str | None:
    if "megatron-bridge performance summary" not in str(run.get("source", "")).lower():
        return None
    hw = str(run.get("hardware", "")).lower()
    model_type = str((run.get("model") or {}).get("model_type", "")).lower()
    release = _cited_release(run)
    if release is None:
        return None
    if any(release == rel and model_type == mt and hw.startswith(prefix) for rel, mt, prefix in DEEPEP_PRESETS):
        return "deepep"
    if hw.startswith(HYBRIDEP_SYSTEMS) or release in HYBRIDEP_RELEASES.get(model_type, ()):
        return "hybridep"
    first = HYBRIDEP_FROM.get(model_type)
    if model_type == "qwen3_moe" and int((run.get("model") or {}).get("hidden_size") or 0) != 2048:
        first = None  # the Qwen3-235B-A22B B200 / H100 presets never set a flex backend
    return "hybridep" if first is not None and release >= first else "deepep"


# Megatron-Bridge performance recipes that set moe_a2a_overlap=True (batch-level EP overlap), by release of the
# performance summary: 25.11 = Megatron-Bridge v0.2.1 scripts/performance/configs/*/workload_base_configs.py
# (DEEPSEEK_V3_H100, QWEN3_235B_A22B_{B200,H100}_*, QWEN3_30B_A3B_H100_*), 26.02 = v0.3.0
# (QWEN3_235B_A22B_PRETRAIN_CONFIG_{B300,H100}_*, QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_*), 26.02.01 / 26.04 / 26.04.01 =
# v0.3.1 / v0.4.0 / v0.4.1 (QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_* V1, V2 and FP8_CS_LARGE_SCALE set it; the
# Qwen3-30B-A3B H100 presets no longer do from v0.3.1, which moves them to HybridEP). 25.09 (v0.2.0rc6): its YAML
# perf_matrix sets none, but scripts/performance/run_script.py sets overlap_moe_expert_parallel_comm and
# delay_wgrad_compute for DeepSeek-V3 on H100 (A2A_1F1B = gpu in ["h100"]). 26.04.01's DeepSeek-V3 B200 row (MXFP8,
# GBS 4096, PP 8, VP 2, EP 32) is the layout of v0.4.2's DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2 (DeepEP,
# moe_a2a_overlap=True; v0.4.0 / v0.4.1 had PP 16 EP 8 there). (release tag in the citation,
# model_type, hidden_size, hardware prefixes): Qwen3-235B-A22B has hidden size 4096, Qwen3-30B-A3B 2048.
# gpt-oss-120b (hidden 2880) on GB200: GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V2 (the FP8-MX V2 aliases it) sets
# moe_a2a_overlap=True from v0.4.0 through v0.4.2 (with the hybridep backend in v0.4.0 / v0.4.1: GPT_OSS_FLEX_PRESETS);
# v0.3.0 / v0.3.1 (26.02, 26.02.01) set neither.
# The Qwen3-30B-A3B H100 FP8-CS rows run with the overlap (25.11, 26.02: PP 2, EP 8, 16 local experts) take 32.4 and
# 16.7 ms per layer per micro-batch at 8192 and 4096 tokens (24.85 s over 32 x 24, 51.27 s over 128 x 24 as the
# released 26.02 table gives it: 5113 tokens/s/GPU; its pre-release draft's 2557 read as a host-bound floor here
# before), the same time per token, while moe.moe_forward charges the merged schedule's host launches (13.2 ms) on top
# of the GPU time: the rows are predicted -21% (mbs 2) and +9% (mbs 1). Without that charge the H100 Qwen3-235B-A22B
# rows run with the overlap are predicted 35-40% fast, with it within 10%.
A2A_OVERLAP_RECIPES = (
    ("25.09", "deepseek_v3", 7168, ("h100",)),
    ("25.11", "deepseek_v3", 7168, ("h100",)), ("25.11", "qwen3_moe", 4096, ("h100", "b200")),
    ("25.11", "qwen3_moe", 2048, ("h100",)),
    ("26.02", "qwen3_moe", 4096, ("h100", "b300")), ("26.02", "qwen3_moe", 2048, ("h100",)),
    ("26.02.01", "qwen3_moe", 4096, ("h100",)), ("26.04", "qwen3_moe", 4096, ("h100",)),
    ("26.04.01", "qwen3_moe", 4096, ("h100",)), ("26.04.01", "deepseek_v3", 7168, ("b200",)),
    ("26.04", "gpt_oss", 2880, ("gb200",)), ("26.04.01", "gpt_oss", 2880, ("gb200",)),
)

# Megatron-Bridge performance presets that capture the whole forward-backward as one CUDA graph (cuda_graph_impl
# "full_iteration", with HybridEP's per-rank token budget moe_expert_rank_capacity_factor 1.5 and the paged stash)
# and set the batch-level EP overlap (moe_a2a_overlap / overlap_moe_expert_parallel_comm): the GB200 MXFP8 presets of
# DeepSeek-V3, gpt-oss-120b, Qwen3-235B-A22B and Qwen3-30B-A3B from the 26.06 container on. Megatron-Bridge v0.5.0
# (2026-06-16, the 26.06 release; v0.5.1 for 26.06.01) scripts/performance/configs/
# deepseek/deepseek_workload_base_configs.py DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V1,
# gpt_oss/gpt_oss_workload_base_configs.py GPT_OSS_120B_PRETRAIN_CONFIG_GB200_FP8_MX_V2,
# qwen/qwen3_workload_base_configs.py QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2 and
# QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1 (commits 55443cbf, afb5dd47, 5f98743d, June 2026); v0.6.0
# (2026-08-19, 26.08) src/megatron/bridge/perf_recipes/{deepseek,gpt_oss,qwen}/gb200/*.py *_gb200_fp8mx_config
# (_enable_deepseek_full_iteration_mxfp8, _apply_gpt_oss_120b_full_iter_fp8mx_configs,
# _enable_hybridep_full_iteration_mxfp8). The 26.04.x MoE presets (v0.4.x) capture no full iteration
# (per-layer transformer_engine graphs of the attention, router and preprocess where any: not priced).
# GB300: the same four models' GB300 MXFP8 presets from the same releases: v0.5.0 / v0.5.1
# DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_MX_V1 (cuda_graph_impl "full_iteration", moe_a2a_overlap True, l.71-72; its V2
# and GBS15360 variants inherit it), GPT_OSS_120B_PRETRAIN_CONFIG_GB300_FP8_MX_V2,
# QWEN3_235B_A22B_PRETRAIN_CONFIG_GB300_FP8_MX_V2 and QWEN3_30B_A3B_PRETRAIN_CONFIG_GB300_FP8_MX_V1; v0.6.0
# perf_recipes/{deepseek,gpt_oss,qwen}/gb300/*.py *_gb300_fp8mx_config (the same helpers as GB200). B300: only
# Qwen3-30B-A3B among the rows' presets, v0.5.0 QWEN3_30B_A3B_PRETRAIN_CONFIG_B300_FP8_MX_V1 (26.06); the 26.06 B300
# DeepSeek-V3 and gpt-oss presets capture per-layer transformer_engine graphs only.
# (release tags in the citation, model_type, hidden_size, hardware prefix, fp8 recipe): DeepSeek-V3 hidden 7168,
# gpt-oss-120b 2880, Qwen3-235B-A22B 4096, Qwen3-30B-A3B 2048.
FULL_ITERATION_CG_RELEASES = ("26.06", "26.06.01", "26.08")
FULL_ITERATION_CG_RECIPES = tuple(
    (rel, mt, h, hw, "mxfp8") for rel in FULL_ITERATION_CG_RELEASES for hw in ("gb200", "gb300")
    for mt, h in (("deepseek_v3", 7168), ("gpt_oss", 2880), ("qwen3_moe", 4096), ("qwen3_moe", 2048))) + (
    ("26.06", "qwen3_moe", 2048, "b300", "mxfp8"),)


# Kimi K2 shares DeepSeek-V3's model_type and hidden size (7168) but has 384 routed experts to DeepSeek-V3's 256, and
# Megatron-Bridge runs it with presets of its own (scripts/performance/configs/kimi/kimi_workload_base_configs.py): the
# DeepSeek-V3 entries of the tables here are held to 256 routed experts.
DSV3_ROUTED_EXPERTS = 256


def _cites_preset(run: dict, release: str, model_type: str, hidden: int, hw_prefixes: str | tuple[str, ...]) -> bool:
    """The run cites this Megatron-Bridge performance-summary release ("<release> NeMo container") for this model
    (model_type and hidden size; DeepSeek-V3: DSV3_ROUTED_EXPERTS) on hardware named with one of these prefixes."""
    src = str(run.get("source", "")).lower()
    model = run.get("model") or {}
    experts = model.get("n_routed_experts", DSV3_ROUTED_EXPERTS)
    return ("megatron-bridge performance summary" in src and f"{release} nemo container" in src
            and str(model.get("model_type", "")).lower() == model_type and model.get("hidden_size") == hidden
            and (model_type != "deepseek_v3" or experts == DSV3_ROUTED_EXPERTS)
            and str(run.get("hardware", "")).lower().startswith(hw_prefixes))


def _full_iteration_recipe(run: dict) -> bool:
    """Whether the cited Megatron-Bridge preset captures a full-iteration CUDA graph (FULL_ITERATION_CG_RECIPES)."""
    recipe = stated_stack(run).get("fp8_recipe") or infer_fp8_recipe(run)
    return any(_cites_preset(run, rel, mt, h, prefix) and recipe == fp8
               for rel, mt, h, prefix, fp8 in FULL_ITERATION_CG_RECIPES)


def infer_cuda_graph_impl(run: dict) -> str | None:
    """Megatron's cuda_graph_impl of the cited recipe where the planner prices it: full_iteration
    (FULL_ITERATION_CG_RECIPES), else None (no graph priced)."""
    return "full_iteration" if _full_iteration_recipe(run) else None


# Megatron-Bridge performance presets that run the attention core in FP8 (fp8_dot_product_attention True:
# MixedPrecisionConfig -> TransformerConfig -> Transformer Engine's fp8_dpa; with the MXFP8 recipe TE 2.16.0 / 2.17.1,
# the versions v0.5.0 / v0.6.0 pin in pyproject.toml, quantize it MXFP8). Read at each release tag the rows cite (none
# before v0.5.0: v0.2.0-v0.4.2 leave MixedPrecisionConfig.fp8_dot_product_attention at its default False and no
# workload config sets it):
# 26.06 (v0.5.0) scripts/performance/configs/: deepseek/deepseek_workload_base_configs.py:74
#   DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_MX_V1 (its V2 l.193 and GBS15360 l.323 variants replace() from it; the GB200
#   ones do not set it), gpt_oss/gpt_oss_workload_base_configs.py:209 GPT_OSS_120B_..._GB300_FP8_MX_V2 and :219
#   ..._GB200_FP8_MX_V2, qwen/qwen3_workload_base_configs.py:209 QWEN3_235B_A22B_..._GB300_FP8_MX_V2, :236
#   ..._GB200_..., :364 QWEN3_30B_A3B_..._GB300_FP8_MX_V1, :397 ..._GB200_..., :438 ..._B300_FP8_MX_V1 (applied by
#   scripts/performance/utils/overrides.py:244-245);
# 26.06.01 (v0.5.1): the same lines (deepseek :74, gpt_oss :209 / :219, qwen :209 / :236 / :381 / :414), plus B300 and
#   B200 presets that no row cites;
# 26.08 (v0.6.0) src/megatron/bridge/perf_recipes/: deepseek/gb300/deepseek_v3.py:157
#   (_enable_deepseek_full_iteration_mxfp8(cfg, fp8_dot_product_attention=True, ...), deepseek/common.py:75; the GB200
#   preset, gb200/deepseek_v3.py:160, leaves it False), gpt_oss/common.py:44 (gb200/gpt_oss.py:239,
#   gb300/gpt_oss.py:231), qwen/common.py:55 (gb200/qwen3_moe.py:328 / :488, gb300/qwen3_moe.py:327 / :487).
# (release, model_type, hidden_size, hardware prefix, fp8 recipe); DeepSeek-V3 held to DSV3_ROUTED_EXPERTS (Kimi K2's
# presets do not set it).
FP8_DPA_RELEASES = ("26.06", "26.06.01", "26.08")
FP8_DPA_RECIPES = tuple(
    (rel, mt, h, hw, "mxfp8") for rel in FP8_DPA_RELEASES
    for mt, h, hw in (("deepseek_v3", 7168, "gb300"), ("gpt_oss", 2880, "gb200"), ("gpt_oss", 2880, "gb300"),
                      ("qwen3_moe", 4096, "gb200"), ("qwen3_moe", 4096, "gb300"), ("qwen3_moe", 2048, "gb200"),
                      ("qwen3_moe", 2048, "gb300"))) + (
    ("26.06", "qwen3_moe", 2048, "b300", "mxfp8"),)


def infer_fp8_dot_product_attention(run: dict) -> bool:
    """Whether the cited Megatron-Bridge preset runs the attention core in FP8 (FP8_DPA_RECIPES)."""
    recipe = stated_stack(run).get("fp8_recipe") or infer_fp8_recipe(run)
    return any(_cites_preset(run, rel, mt, h, prefix) and recipe == fp8
               for rel, mt, h, prefix, fp8 in FP8_DPA_RECIPES)


def infer_moe_a2a_overlap(run: dict) -> bool:
    """Whether the cited recipe runs Megatron's batch-level EP all-to-all overlap (A2A_OVERLAP_RECIPES, and the
    full-iteration CUDA-graph presets, which set it too)."""
    return _full_iteration_recipe(run) or any(_cites_preset(run, rel, mt, h, prefixes)
                                              for rel, mt, h, prefixes in A2A_OVERLAP_RECIPES)


# Precision of gradients and optimizer states that a cited recipe's own config file sets, for a record
# without train.grad_dtype / train.optimizer_dtype: (citation substrings that must all appear, model config
# fields that must match (the recipe is per model), TrainingSpec fields, config).
NEMOTRON4_340B = {"model_type": "nemotron", "hidden_size": 18432, "num_hidden_layers": 96}
# DGX Cloud's NeMo 24.x hydra recipes (v24.11.1 35a9aec, 143b90d) whose optimizer is distributed_fused_adam with
# grad_sync_dtype bf16: (the README a row cites, the config file that sets it). Apex's DistributedFusedAdam allocates
# its contiguous gradient buffer in grad_sync_dtype (apex/contrib/optimizers/distributed_fused_adam.py
# init_grad_buffer), so the full-size buffer is 2 bytes per parameter, not fp32's 4.
DGXC_HYDRA_BF16_GRADS = (("nemo_megatron/readme_175b", "nemo_megatron/gpt3_175b_hydra.yaml"),
                         ("llama3.1/readme_405b", "llama3.1/llama3.1_405b.yaml"),
                         ("llama3.1/readme_70b", "llama3.1/llama3.1_70b.yaml"),
                         ("llama3.1/readme_8b", "llama3.1/llama3.1_8b.yaml"),
                         ("nemotron/readme_15b", "nemotron/nemotron4-15b-synth.yaml"))
RECIPE_PRECISION: tuple[tuple[tuple[str, ...], dict[str, Any], dict[str, Any], str], ...] = (
    *((("dgxc-benchmarking", readme), {}, {"grad_dtype": "bf16"},
       f"NVIDIA/dgxc-benchmarking {config}: optim distributed_fused_adam, grad_sync_dtype bf16")
      for readme, config in DGXC_HYDRA_BF16_GRADS),
    (("dgxc-benchmarking", "68eaf7e", "llama3.1/readme.md"), {}, {"grad_dtype": "bf16"},
     "NVIDIA/dgxc-benchmarking 68eaf7e llama3.1/launch.sh runs NeMo 7a8f1cc scripts/performance/llm/"
     "pretrain_llama31_405b.py: pretrain_recipe(performance_mode=True), whose pretrain_performance_optimizations "
     "(nemo/collections/llm/recipes/llama31_405b.py) sets recipe.trainer.plugins.grad_reduce_in_fp32 = False, which "
     "the strategy applies to its DDP config (nemo/lightning/pytorch/strategies/megatron_strategy.py connect: "
     "update_config_with_dtype_overrides)"),
    (("dgxc-benchmarking", "nemotron/readme_340b"), {}, {"grad_dtype": "bf16", "optimizer_dtype": "bf16"},
     "NVIDIA/dgxc-benchmarking nemotron/nemotron4-340b-synth.yaml: optim distributed_fused_adam, grad_sync_dtype bf16, "
     "dtype bf16 (NeMo-Framework-Launcher conf/training/nemotron/nemotron_340b.yaml sets the same)"),
    (("nemo performance summary",), NEMOTRON4_340B, {"grad_dtype": "bf16", "optimizer_dtype": "bf16"},
     "NeMo's performance summary runs NeMo-Framework-Launcher's recipes: conf/training/nemotron/nemotron_340b.yaml "
     "optim mcore_distributed_optim, grad_sync_dtype bf16, dtype bf16"),
    (("nemo automodel performance summary",), {}, {"param_dtype": "bf16", "grad_dtype": "bf16",
                                                    "optimizer_dtype": "bf16"},
     "NVIDIA-NeMo/Automodel@8d9bfb9 examples/benchmark/configs/*_te_deepep.yaml: the MoE model is built in the HF "
     "config's torch_dtype, bfloat16 (components/models/*/model.py get_dtype(config.torch_dtype, torch.bfloat16), "
     "self.to(dtype)), so FSDP2 shards bf16 parameters, their gradients and torch.optim.Adam's exp_avg / exp_avg_sq "
     "(zeros_like the parameter) are bf16"),
    (("megatron-bridge performance summary",), {}, {"grad_dtype": "bf16"},
     "Megatron-Bridge's performance scripts, every release of the summaries, set ddp.grad_reduce_in_fp32 False (a bf16 "
     "main-grad buffer, reduced in bf16) for the summaries' models: v0.1.0rc4 scripts/performance/configs/*/"
     "*_llm_pretrain.yaml 'grad_reduce_in_fp32: false' (DeepSeek-V3, Llama 3 / 3.1, Qwen3); v0.2.0-v0.5.0 "
     "scripts/performance/configs/{deepseek,gpt_oss,llama*,qwen*}/*_llm_pretrain.py 'cfg.ddp.grad_reduce_in_fp32 = "
     "False'; v0.6.0 src/megatron/bridge/perf_recipes/_common.py _benchmark_common (Kimi K2 and GLM-5 set it back to "
     "True there: no summary row of either is in runs/)"),
    (("deepseek-v3 technical report",), {}, {"optimizer_dtype": "bf16", "fp8_moe_act_cache": True,
                                              "fp8_moe_dispatch": True, "fp8_weight_cache": False},
     "DeepSeek-V3 report (arXiv 2412.19437) sec. 3.3.2: AdamW moments tracked in BF16; the MoE SwiGLU inputs cached "
     "in FP8 with the SwiGLU output recomputed in backward, the activations quantized to FP8 before the MoE dispatch "
     "(the combine kept in BF16) (FP8 runs only); its own framework (HAI-LLM), not "
     "Transformer Engine: the report states no FP8 weight copy kept across micro-batches, so TE's is not counted"),
)


def infer_maxtext_memory(run: dict, framework: str) -> dict[str, Any]:
    """MaxText training settings a TPU recipe's notes state (the runs schema has no field for them):
    weight_dtype=bfloat16 (bf16 master parameters; the Adam moments inherit it, MT:configs/base.yml mu_dtype),
    num_vocab_tiling=N (the loss over N slices)."""
    import re

    if not traits(framework).custom_remat_option:
        return {}
    notes = str(run.get("notes", ""))
    out: dict[str, Any] = {}
    if re.search(r"weight_dtype\s*=\s*bfloat16", notes):
        out |= {"param_dtype": "bf16", "optimizer_dtype": "bf16"}
    tiles = re.search(r"num_vocab_tiling\s*=\s*(\d+)", notes)
    if tiles and int(tiles.group(1)) > 1:
        out["loss_chunks"] = int(tiles.group(1))
    return out


# MaxText custom remat policies that a cited recipe's own launch script sets, for a record whose notes state none:
# (citation substrings that must all appear, the run's dtype, the tensors kept in HBM; the rest rematerialised).
# DGX Cloud's MaxText Llama 2 70B (NVIDIA/dgxc-benchmarking 35a9aec maxtext/configure.sh): CONFIG_OVERRIDES appends
# remat_policy=custom with the q / k / v / qkv / out projections =device (FP8), and mlpwo too (BF16), after
# BASE_CONFIG's named remat_policy (save_dot_except_mlp / save_dot_except_mlpwi, the same tensors), so it is in effect.
RECIPE_REMAT: tuple[tuple[tuple[str, ...], str, tuple[str, ...]], ...] = (
    (("dgxc-benchmarking", "maxtext/readme_70b"), "fp8",
     ("query_proj", "key_proj", "value_proj", "qkv_proj", "out_proj")),
    (("dgxc-benchmarking", "maxtext/readme_70b"), "bf16",
     ("query_proj", "key_proj", "value_proj", "qkv_proj", "out_proj", "mlpwo")),
)


def infer_maxtext_remat(run: dict, framework: str) -> dict[str, Any]:
    """The plan's MaxText custom remat policy a recipe states (the runs schema's plan.remat_offloaded / remat_device
    win over it): its launch script's (RECIPE_REMAT), else the one a TPU recipe's notes state, remat_policy=custom with
    named tensors = offload / device (MT:configs/base.yml), as plan knobs; none pinned where neither states one (the
    search would otherwise try the stack's own, Stack.searched_remat_offloads)."""
    import re

    if not traits(framework).custom_remat_option:
        return {}
    src = str(run.get("source", "")).lower()
    dtype = str((run.get("train") or {}).get("dtype", "bf16")).lower()
    for keys, recipe_dtype, device in RECIPE_REMAT:
        if all(k in src for k in keys) and dtype == recipe_dtype:
            return {"remat_offloaded": (), "remat_device": device}
    custom = re.search(r"remat_policy\s*=\s*custom(.*?)(?:\.\s|$)", str(run.get("notes", "")), re.S)
    if not custom:
        return {"remat_offloaded": (), "remat_device": ()}
    named: dict[str, list[str]] = {"offload": [], "device": []}
    for names, where in re.findall(r"((?:[a-z_0-9]+\s*[,/]\s*)*[a-z_0-9]+)\s*=\s*(offload|device|remat)",
                                   custom.group(1)):
        if where in named:
            named[where] += [n.strip() for n in re.split(r"[,/]", names)]
    return {"remat_offloaded": tuple(named["offload"]), "remat_device": tuple(named["device"])}


def infer_precision(run: dict) -> dict[str, Any]:
    """Gradient / optimizer-state dtypes (and FP8 activation storage) of the recipe the run cites, where its
    config or paper states them."""
    src = str(run.get("source", "")).lower()
    model: dict = run["model"] if isinstance(run.get("model"), dict) else {}
    fp8 = str((run.get("train") or {}).get("dtype", "")).lower() == "fp8"
    for keys, arch, fields, _config in RECIPE_PRECISION:
        if all(k in src for k in keys) and all(model.get(k) == v for k, v in arch.items()):
            return {k: v for k, v in fields.items() if fp8 or not k.startswith("fp8_")}
    return {}


def run_stack(run: dict) -> RunStack:
    """The run's stack: its `stack:` block first (docs/runs-schema.md); what the block leaves out, or a legacy
    record without one, is inferred from the citation (infer_framework and the other infer_* above)."""
    given = stated_stack(run)
    fw = given["framework"] if "framework" in given else infer_framework(run)

    def pick(key: str, infer: Callable[[], Any]) -> Any:
        return given[key] if key in given else infer()

    dispatcher = pick("moe_dispatcher", lambda: infer_moe_dispatcher(run))
    return RunStack(framework=fw, torch_compile=pick("torch_compile", lambda: infer_torch_compile(run, fw)),
                    tp_comm_overlap=pick("tp_comm_overlap", lambda: infer_tp_comm_overlap(run, fw)),
                    fp8_recipe=pick("fp8_recipe", lambda: infer_fp8_recipe(run)),
                    attention=pick("attention", lambda: infer_attention_impl(run)),
                    fused_loss=pick("fused_loss", lambda: infer_fused_cross_entropy(run, fw))
                    or infer_compiled_loss(run, fw, pick("torch_compile", lambda: infer_torch_compile(run, fw))),
                    moe_dispatcher=dispatcher,
                    moe_a2a_overlap=pick("moe_a2a_overlap", lambda: infer_moe_a2a_overlap(run)),
                    cuda_graphs=given.get("cuda_graphs"),
                    activation_offload=given.get("activation_offload"),
                    expandable_segments=bool(given.get("expandable_segments", False)),
                    fp8_param_gather=pick("fp8_param_gather", lambda: infer_fp8_param_gather(run, fw)),
                    cuda_graph_impl=pick("cuda_graph_impl", lambda: infer_cuda_graph_impl(run)),
                    fp8_dot_product_attention=pick("fp8_dot_product_attention",
                                                   lambda: infer_fp8_dot_product_attention(run)),
                    # the backend is inferred for a flex run only (a stated one is checked by TrainingSpec)
                    moe_flex_backend=pick("moe_flex_backend", lambda: infer_moe_flex_backend(run)
                                          if dispatcher == "flex" else None),
                    stated=tuple(sorted(given)))


MAX_RUNS = 1_000  # ~20 ms a run: 1,000 runs are ~20 s of work (the 8 MiB file limit admits ~26,000: ~10 min)


def load_runs(path: str | Path) -> list[dict]:
    return check_runs(read_structured_file(path, what="runs file"), path)


def check_runs(data: Any, path: str | Path) -> list[dict]:
    """The runs of a runs file's content, every record checked against the runs schema (one InputError line
    naming the run otherwise)."""
    if not isinstance(data, list) or not data:
        raise InputError(f"{path}: a runs file is a YAML list of runs (see the runs schema); got {type(data).__name__}")
    if len(data) > MAX_RUNS:  # refused up front (issue 26 item 9): split the file
        raise InputError(f"{path}: {len(data):,} runs, over the {MAX_RUNS:,} a runs file may hold: split it into "
                         "files of at most that many runs")
    seen = set()
    for i, run in enumerate(data):
        where = f"{path}: run #{i + 1}"
        if not isinstance(run, dict):
            raise InputError(f"{where} is not a mapping")
        unknown = unknown_top_key(run)
        if unknown:
            raise InputError(f"{where}: {unknown}")
        for key in ("id", "model", "hardware", "devices", "train"):
            if run.get(key) in (None, ""):
                raise InputError(f"{where} is missing required field '{key}'")
        if not isinstance(run["id"], str):
            raise InputError(f"{where}: 'id' must be a string, got {type(run['id']).__name__}")
        if run["id"] in seen:
            raise InputError(f"{where}: duplicate id {run['id']!r}")
        seen.add(run["id"])
        if not isinstance(run["model"], dict):
            raise InputError(f"{where} ({run['id']}): 'model' must be a Hugging Face config mapping")
        if not isinstance(run.get("train"), dict):
            raise InputError(f"{where} ({run['id']}): 'train' must be a mapping with seq_len, global_batch, dtype")
        if run.get("plan") is not None and not isinstance(run["plan"], dict):
            raise InputError(f"{where} ({run['id']}): 'plan' must be a mapping or null")
        problem = unknown_section_key(run) or run_record_problem(run)
        if problem:
            raise InputError(f"{where} ({safe_line(run['id'])}): {problem}")
    return data


_INT_KNOBS = ("tp", "pp", "vpp", "dp", "cp", "ep", "etp", "micro_batch", "first_stage_layers", "last_stage_layers")
SCHEDULE_NAMES = {"1f1b": "1f1b", "interleaved": "interleaved", "gpipe": "gpipe", "zb": "zb", "dualpipe": "dualpipe",
                  "dualpipev": "dualpipev", "zero_bubble": "zb", "zbv": "zb",
                  "interleaved_1f1b": "interleaved"}  # run-file spellings


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _positive_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def run_record_problem(run: dict) -> str | None:
    """What is wrong with one run record's types and values (None = nothing): the runs schema, checked
    before any prediction so every nonsense value gets a one-line reason instead of a crash or a number."""
    return (_run_header_problem(run) or _run_measured_problem(run) or _run_plan_problem(run) or stack_problem(run)
            or train_problem(run))


def _run_header_problem(run: dict) -> str | None:
    """id, hardware, device counts and the free-text fields."""
    if not isinstance(run["id"], str):
        return f"'id' must be a string, got {type(run['id']).__name__}"
    if not isinstance(run["hardware"], str):
        return f"'hardware' must be a hardware id or alias string, got {type(run['hardware']).__name__}"
    for key in ("devices", "devices_per_node"):
        if run.get(key) is not None and (not _is_int(run[key]) or run[key] < 1):
            return f"'{key}' must be a whole number >= 1, got {safe_line(repr(run[key]))}"
    if run.get("aligned_allocation") is not None and not isinstance(run["aligned_allocation"], bool):
        return f"'aligned_allocation' must be true or false, got {safe_line(repr(run['aligned_allocation']))}"
    for key in ("source", "notes", "reliability"):
        if run.get(key) is not None and not isinstance(run[key], str):
            return f"'{key}' must be a string, got {type(run[key]).__name__}"
    return None


def _run_measured_problem(run: dict) -> str | None:
    """The `measured` mapping: positive finite step time and peak memory, or null."""
    meas = run.get("measured")
    if meas is not None and not isinstance(meas, dict):
        return f"'measured' must be a mapping (step_time_s, peak_memory_gib, ...), got {type(meas).__name__}"
    for key in ("step_time_s", "peak_memory_gib"):
        v = (meas or {}).get(key)
        if v is not None and not _positive_number(v):
            return (f"measured.{key} must be a positive finite number (null when not published), "
                    f"got {safe_line(repr(v))}")
    of = (meas or {}).get("peak_memory_of")
    if of is not None and of not in PEAK_MEMORY_OF:
        return f"measured.peak_memory_of must be one of {', '.join(PEAK_MEMORY_OF)}, got {safe_line(repr(of))}"
    return None


def _run_plan_problem(run: dict) -> str | None:
    """The published plan's knobs, each null or a value the planner knows."""
    for key, v in (run.get("plan") or {}).items():
        problem = None if v is None else _plan_knob_problem(key, v)
        if problem is not None:
            return problem
    return None


def _plan_knob_problem(key: str, v: Any) -> str | None:
    if key in _INT_KNOBS and (not _is_int(v) or v < 1):
        return f"plan.{key} must be a whole number >= 1 or null, got {safe_line(repr(v))}"
    if key == "zero_stage" and (not _is_int(v) or not 0 <= v <= 3):
        return f"plan.zero_stage must be 0, 1, 2 or 3 or null, got {safe_line(repr(v))}"
    if key == "recompute" and v not in ("none", "selective", "full"):
        return f"plan.recompute must be none, selective or full or null, got {safe_line(repr(v))}"
    if key == "sequence_parallel" and not isinstance(v, bool):
        return f"plan.sequence_parallel must be true, false or null, got {safe_line(repr(v))}"
    if key == "schedule" and str(v).lower() not in SCHEDULE_NAMES:
        return f"plan.schedule must be one of {', '.join(SCHEDULE_NAMES)} or null, got {safe_line(repr(v))}"
    if key in NAME_LIST_KNOBS and (not isinstance(v, list) or not all(isinstance(n, str) for n in v)):
        what = {"recompute_modules": "Megatron recompute module", "offload_modules": "Megatron offload module"}.get(
            key, "MaxText remat tensor")
        return f"plan.{key} must be a list of {what} names or null, got {safe_line(repr(v))}"
    megatron_names = {"recompute_modules": ("module", unknown_recompute_modules, RECOMPUTE_MODULES),
                      "offload_modules": ("offload module", unknown_offload_modules, OFFLOAD_MODULES)}
    if key in megatron_names:
        what, unknown, known = megatron_names[key]
        bad = unknown(v)
        if bad:
            return (f"plan.{key} names {safe_line(', '.join(bad))}, not a megatron-core {what}: choose from "
                    f"{', '.join(known)}")
    return None


class UnscorableRun(InputError):
    """A well-formed run the planner cannot score (an architecture or accelerator it does not model, no
    valid plan with the published knobs): plan validate lists it and scores the others. Nonsense values
    (negative steps, seq_len 0, ...) stay plain InputErrors that refuse the file (docs/runs-schema.md)."""


def run_inputs(run: dict) -> tuple[Context, dict[str, Any]]:
    """(model, cluster, training) context and the fixed knobs of one run."""
    model, cluster, train = run_specs(run)
    return Context(model, cluster, train), run_fixed_knobs(run, model, cluster, train)


def run_specs(run: dict) -> tuple[ModelSpec, ClusterSpec, TrainingSpec]:
    """The run's model, cluster and training settings; UnscorableRun for what the planner does not
    model, InputError (one line) for nonsense."""
    from planner.catalog.hardware import get_hardware
    from planner.catalog.hf_import import from_hf_config

    rid = run["id"]
    try:
        model = from_hf_config(run["model"], name=rid)
        hw = get_hardware(str(run["hardware"]))
    except InputError as e:
        raise UnscorableRun(f"run {rid}: {_one_line(e)}") from None
    try:
        dev = run["devices"]
        if not isinstance(dev, int) or isinstance(dev, bool):
            raise InputError(f"devices must be an integer, got {dev!r}")
        cluster = run_cluster(run, hw, dev)
        t = run["train"]
        st = run_stack(run)
        fw = st.framework
        precision = (infer_precision(run) | infer_maxtext_memory(run, fw)
                     | {k: t[k] for k in ("grad_dtype", "optimizer_dtype") if t.get(k)})
        settings: dict[str, Any] = dict(seq_len=t.get("seq_len", 4096), global_batch=t["global_batch"],
                                        dtype=t.get("dtype", "bf16"), framework=fw, attention_impl=st.attention,
                                        legacy_deepspeed_zero3=infer_legacy_deepspeed_zero3(run, fw),
                                        attention_dropout=infer_attention_dropout(run),
                                        torch_compile=st.torch_compile, fused_cross_entropy=st.fused_loss,
                                        expandable_segments=st.expandable_segments,
                                        fp8_param_gather=st.fp8_param_gather,
                                        fp8_recipe=st.fp8_recipe, moe_dispatcher=st.moe_dispatcher,
                                        moe_flex_backend=st.moe_flex_backend,
                                        moe_a2a_overlap=st.moe_a2a_overlap,
                                        cuda_graph_full_iteration=st.cuda_graph_impl == "full_iteration",
                                        # every full-iteration preset (FULL_ITERATION_CG_RECIPES) also runs the TE op
                                        # fuser's grouped MLP: v0.5.0 workload base configs cutedsl_fused_grouped_mlp
                                        # (scripts/performance/utils/overrides.py: use_transformer_engine_op_fuser),
                                        # v0.6.0 perf_recipes/*/common.py use_transformer_engine_op_fuser = True
                                        moe_fused_grouped_mlp=st.cuda_graph_impl == "full_iteration",
                                        fp8_attention=st.fp8_dot_product_attention,
                                        moe_force_balanced=bool(t.get("moe_force_balanced", False)),
                                        moe_load_imbalance=t.get("moe_load_imbalance"),
                                        pp_schedule_microbatches=t.get("pp_schedule_microbatches"),
                                        moe_capacity_factor=infer_moe_capacity_factor(run), **precision)
        train = TrainingSpec(**settings)
    except InputError as e:
        raise InputError(f"run {rid}: {e}") from None
    except ValidationError as e:  # pydantic's own text carries a URL and several lines
        raise InputError(_validation_message(e, f"run {rid}")) from None
    except KeyError as e:  # a required field is missing: say which, not just its name in quotes
        where = "train." if e.args and e.args[0] in ("global_batch", "seq_len", "dtype") else ""
        raise InputError(f"run {rid}: no {where}{_printable(str(e.args[0] if e.args else e))} given: add it "
                         "(see the runs schema)") from None
    except (ValueError, TypeError) as e:
        raise InputError(f"run {rid}: {_one_line(e)}") from None
    return model, cluster, train


def run_fixed_knobs(run: dict, model: ModelSpec, cluster: ClusterSpec, train: TrainingSpec) -> dict[str, Any]:
    """The published plan's knobs as search pins, with what the run's stack implies (schedule, embedding
    and loss accounting, full-shard ZeRO-3, DualPipe for DeepSeek-V3's own runs, stack constraints)."""
    fixed: dict[str, Any] = {}
    for k, v in (run.get("plan") or {}).items():
        if v is not None:
            fixed[PLAN_FIELDS[k]] = tuple(v) if isinstance(v, list) else v
    if fixed.get("schedule") is not None:
        fixed["schedule"] = SCHEDULE_NAMES.get(str(fixed["schedule"]).lower())  # checked by run_record_problem
    if fixed.get("vpp", 1) > 1:
        fixed.setdefault("schedule", "interleaved")
    L, pp_pub = model.num_layers, fixed.get("pp") or 1
    if pp_pub > 1 and L % pp_pub and (L + 2) % pp_pub == 0 and ((L + 2) // pp_pub) % (fixed.get("vpp") or 1) == 0:
        fixed["account_embedding_loss"] = True  # the only even-ish split Megatron/NeMo state for these
    if fixed.get("zero_stage") == 3:
        fixed["zero_shard_size"] = None  # the schema: zero_stage 3 is FSDP *full* sharding, not hybrid
        fixed.update(multislice_hsdp(run, cluster, fixed))
    if fixed.get("recompute") == "selective" and "selective-layer" in str(run.get("id", "")).lower():
        # torchtitan's layer-level selective AC of 2024 (activation_checkpoint.selective_ac_option = N, default "2")
        # checkpoints every N-th transformer block whole: full recompute of half the blocks ("selective layer" in
        # torchtitan docs/performance.md, beside the op-level "selective op")
        fixed |= {"recompute": "full", "recompute_layers": model.num_layers // 2 // pp_pub}
    if pp_pub > 1 and TORCHTITAN_H100_DOC in str(run.get("source", "")).lower() and fixed.get("dp"):
        # torchtitan 9dec370, the Dec 2024 benchmark's commit, splits each data-parallel rank's batch into
        # experimental.pipeline_parallel_microbatches micro-batches, default the pipeline degree
        # (parallelisms/pipelining_utils.py build_pipeline_schedule; config_manager.py): the tables give the local
        # batch only, so the micro-batch is local batch / pp (Table 5: 32 / 8 = 4; Table 6: 1), whatever a row assumed
        fixed["micro_batch"] = max(1, train.global_batch // (fixed["dp"] * pp_pub))
    if _deepseek_own_stack(run) and (fixed.get("pp") or 1) > 1:
        fixed.setdefault("schedule", "dualpipe")  # the report's own runs used DualPipe (sec. 3.2.1)
    fixed.update(preset_knobs(run))
    if fixed.get("recompute") is None and not fixed.get("recompute_modules"):
        fixed.update(preset_recompute(run))
    fixed = infer_maxtext_remat(run, train.framework) | fixed  # the plan's own names win over its notes
    if model.is_moe and fixed.get("ep") is None and traits(train.framework).ep_unset_is_one:
        fixed["ep"] = 1  # no expert parallelism unless the configuration names it (Stack.ep_unset_is_one)
    if model.is_moe and fixed.get("etp") is None and (fixed.get("tp") or 1) > 1:
        etp = infer_etp(run, train, fixed["tp"])
        if etp is not None:
            fixed["etp"] = etp
    for k, v in stack_constraints(run, train).items():
        fixed.setdefault(k, v)
    return fixed


# Knobs a Megatron-Bridge performance table states for a row whose release preset runs otherwise, with the timing
# evidence that the preset's layout is what ran: (release tag in the citation, model_type, hidden_size, hardware
# prefixes, the preset's knobs, evidence). The row keeps its published knobs in the file; `plan validate` scores the
# preset's.
# - 25.11 gpt-oss-120b on DGX-B200: the table gives EP 8; the release's preset (Megatron-Bridge v0.2.0-v0.2.2
#   scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py GPT_OSS_120B_B200_BF16_BASE_CONFIG:
#   expert_model_parallel_size=64, micro_batch_size=4, recompute_modules ["layernorm", "moe_act"]) runs EP 64 across the
#   eight nodes, and the later tables show what each layout costs on B200: 26.02 (EP 64) 10.18 s per 1280 samples =
#   7.95 ms per sample, 26.02.01 (EP 8) 5.97 s = 4.66 ms; the 25.11 row's 3.99 s per 512 samples = 7.79 ms per sample
#   is the EP-64 layout's.
# - 26.02.01 Qwen3-30B-A3B on DGX-H100 (FP8 current scaling): the table repeats the 26.02 row's layout columns (PP 2,
#   VP 12, EP 8: Megatron-Bridge v0.3.0 QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1); the release's preset (v0.3.1,
#   scripts/performance/configs/qwen/qwen3_workload_base_configs.py l.408-415, the same preset's hybridep backend the
#   row's stack block already cites) runs EP 16 without pipeline parallelism (DP 16), no EP overlap, and the tables
#   show what each layout runs at on 16 H100s: 26.02 (PP 2, VP 12, EP 8) 5113 tokens/s/GPU, 26.04-26.06 (EP 16, no PP)
#   8826-8960; the 26.02.01 row's 9058 is the EP-16 layout's.
PRESET_KNOBS: tuple[tuple[str, str, int, tuple[str, ...], dict[str, Any], str], ...] = (
    ("25.11", "gpt_oss", 2880, ("b200",), {"ep": 64, "recompute": "selective"},
     "Megatron-Bridge v0.2.x GPT_OSS_120B_B200_BF16_BASE_CONFIG: EP 64, recompute_modules layernorm + moe_act"),
    ("26.02.01", "qwen3_moe", 2048, ("h100",), {"pp": 1, "vpp": 1, "dp": 16, "ep": 16, "schedule": "1f1b"},
     "Megatron-Bridge v0.3.1 QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1: EP 16, no pipeline parallelism"),
)


# The modules Megatron-Bridge's DeepSeek-V3 performance presets recompute, by release of the performance summary and
# system, for a row whose record states no recompute (the tables give none): every preset runs selective recompute
# (recompute_granularity "selective": the 0.1.0rc3 deepseek_v3_llm_pretrain.yaml, later
# scripts/performance/configs/deepseek/deepseek_llm_pretrain.py set_deepseek_v3_common_configs and v0.6.0
# perf_recipes/deepseek/common.py) with the modules below (container -> release as HYBRIDEP_FROM's note maps them):
# - 25.09 = 0.1.0rc3 scripts/performance/run_script.py l.88-91: H100 mla_up_proj + mlp, GB200 mla_up_proj + mlp +
#   moe_act, B200 none named, so megatron-core's default core_attn (transformer_config.py __post_init__: "if
#   self.recompute_modules is None: self.recompute_modules = ['core_attn']");
# - 25.11 = v0.2.0 scripts/performance/configs/deepseek/workload_base_configs.py DEEPSEEK_V3_{B200,GB200}_BASE_CONFIG
#   mla_up_proj, DEEPSEEK_V3_H100_BASE_CONFIG mla_up_proj + mlp;
# - 26.02 / 26.02.01 = v0.3.0 / v0.3.1 deepseek_workload_base_configs.py DEEPSEEK_V3_PRETRAIN_CONFIG_{B200,GB200}_V1
#   and _V2 mla_up_proj, H100 mla_up_proj + mlp;
# - 26.04 / 26.04.01 = v0.4.0 / v0.4.2: GB200 (V1, V2) mlp; B200 mla_up_proj, but v0.4.2's
#   DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2 (the 26.04.01 row's PP 8 VP 2 EP 32 layout: A2A_OVERLAP_RECIPES)
#   mla_up_proj + mlp;
# - 26.06 / 26.06.01 = v0.5.0 / v0.5.1 DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V1 / _V2 mla_up_proj;
# - 26.08 = v0.6.0 src/megatron/bridge/perf_recipes/deepseek/gb200/deepseek_v3.py deepseek_v3_pretrain_256gpu_gb200_
#   fp8mx_config mla_up_proj.
# GB300 / B300 (the rows' presets, resolved through their replace() chains):
# - 25.11 = v0.2.0 workload_base_configs.py DEEPSEEK_V3_GB300_BASE_CONFIG moe_act (its BF16 and FP8-MX aliases);
# - 26.02-26.04.01 = v0.3.0-v0.4.2 DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_V1 mla_up_proj (FP8-MX V2 inherits it), and
#   DEEPSEEK_V3_PRETRAIN_CONFIG_B300_V1 mla_up_proj (v0.4.2's B300_V2 restates it);
# - 26.06 / 26.06.01 = v0.5.0 / v0.5.1 DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_MX_V1 recompute_modules=[] (selective with
#   no module: nothing recomputed; scripts/performance/utils/overrides.py _set_recompute_overrides), B300_V2
#   mla_up_proj;
# - 26.08 = v0.6.0 perf_recipes/deepseek/gb300/deepseek_v3.py deepseek_v3_pretrain_256gpu_gb300_fp8mx_config
#   recompute_modules = [] (l.148).
# {release tag in the citation: {hardware prefix: modules}}; DeepSeek-V3 is model_type deepseek_v3, hidden size 7168;
# no module = no recompute.
_UP, _UP_MLP = ("mla_up_proj",), ("mla_up_proj", "mlp")
DSV3_RECOMPUTE_PRESETS: dict[str, dict[str, tuple[str, ...]]] = {
    "25.09": {"h100": _UP_MLP, "gb200": ("mla_up_proj", "mlp", "moe_act"), "b200": ("core_attn",)},
    "25.11": {"h100": _UP_MLP, "gb200": _UP, "b200": _UP, "gb300": ("moe_act",)},
    "26.02": {"h100": _UP_MLP, "gb200": _UP, "b200": _UP, "gb300": _UP, "b300": _UP},
    "26.02.01": {"h100": _UP_MLP, "gb200": _UP, "b200": _UP, "gb300": _UP, "b300": _UP},
    "26.04": {"h100": _UP_MLP, "gb200": ("mlp",), "b200": _UP, "gb300": _UP, "b300": _UP},
    "26.04.01": {"h100": _UP_MLP, "gb200": ("mlp",), "b200": _UP_MLP, "gb300": _UP, "b300": _UP},
    "26.06": {"gb200": _UP, "gb300": (), "b300": _UP}, "26.06.01": {"gb200": _UP, "gb300": ()},
    "26.08": {"gb200": _UP, "gb300": ()},
}


def preset_recompute(run: dict) -> dict[str, Any]:
    """Selective recompute with the cited DeepSeek-V3 preset's modules (DSV3_RECOMPUTE_PRESETS), none where the preset
    names no module, else {}."""
    for rel, by_hw in DSV3_RECOMPUTE_PRESETS.items():
        for prefix, mods in by_hw.items():
            if _cites_preset(run, rel, "deepseek_v3", 7168, (prefix,)):
                return {"recompute": "selective", "recompute_modules": mods} if mods else {"recompute": "none"}
    return {}


def preset_knobs(run: dict) -> dict[str, Any]:
    """The cited release preset's knobs where they supersede the table's (PRESET_KNOBS), else {}."""
    for rel, mt, hidden, prefixes, knobs, _evidence in PRESET_KNOBS:
        if _cites_preset(run, rel, mt, hidden, prefixes):
            return dict(knobs)
    return {}


def infer_etp(run: dict, train: TrainingSpec, tp: int) -> int | None:
    """The expert tensor-parallel degree of an MoE run whose record leaves plan.etp null: 1 for a Megatron-Bridge
    performance-summary row (every MoE preset's base config sets expert_tensor_parallel_size=1: Megatron-Bridge
    scripts/performance/configs/{deepseek,qwen,gpt_oss}/*_workload_base_configs.py BASE_*_CONFIG), else the stack's
    default (Stack.etp_default: Megatron's is the TP degree, which the NeMo-Framework-Launcher recipes that set no
    expert_tensor_parallel_size ran, e.g. dgxc-benchmarking grok1/grok1_314b.yaml); None = the planner's default."""
    if "megatron-bridge performance summary" in str(run.get("source", "")).lower():
        return 1
    return tp if traits(train.framework).etp_default == "tp" else None


# Meta's Grand Teton H100s, on which torchtitan ran its published H100 benchmarks, carry 96 GB of HBM2e per GPU
# (torchtitan benchmarks/llama3_h100_202412_torchtitan.md and asyncTP_llama3_h100_2025-06_torchtitan.md, "Hardware":
# "Each H100 GPU is equipped with 96GB HBM2e"), where the runs schema names them h100-sxm-80gb: their measured peaks
# (up to 84.9 GiB) exceed the 80 GB part. Capacity = 96 x the 80 GB part's driver-visible share (79.65 GiB of 80,
# hardware_profiles/h100-sxm-80gb.yaml): a derived figure, no driver reading of the 96 GB part is published.
GRAND_TETON_H100_HBM_GIB = 96 * 79.65 / 80
GRAND_TETON_DOCS = ("llama3_h100_202412_torchtitan", "asyncTP_llama3_h100_2025-06_torchtitan".lower())


def run_hardware(run: dict, hw):
    """The run's accelerator profile, with the HBM of the part the source states when the schema's id differs."""
    src = str(run.get("source", "")).lower()
    if hw.id == "h100-sxm-80gb" and any(d in src for d in GRAND_TETON_DOCS):
        return hw.model_copy(update={"hbm_capacity_gib": GRAND_TETON_H100_HBM_GIB})
    return hw


# How NVIDIA's DGX Cloud recipes (dgxc-benchmarking) had their GB200 / GB300 nodes allocated before release v26.02 is
# inferred from their measured rows, not read from their launch: llmb-run 1.10.2 (cli/llmb-run/CHANGELOG.md,
# 2026-02-23: "now sets SBATCH_SEGMENT_SIZE automatically for gb200/gb300 jobs ... within the 18-node NVLink domain";
# first shipped in v26.02) is the first launcher of the repository that sets a segment itself, but the NeMo-2-era
# workloads before it (v25.05: grok1, deepseek_v3/pretraining, llama4 and llama3.1 setup.sh pin NVIDIA/NeMo 7a8f1cc)
# submit through NeMo's scripts/performance/utils.py slurm_executor, which for 4-GPU nodes beyond 18 nodes already asks
# for `--segment` (the largest divisor of the node count up to 18: 16 for 32-128 nodes; l.114-119 at 7a8f1cc), written
# as `#SBATCH --segment` by the NeMo-Run each pins (bc412ee, 78f54ee, 0d271a9: SlurmExecutor.segment). Slurm honours
# --segment only under its topology/block plugin, and whether DGX Cloud's GB200 cluster ran it in 2025 is not
# published. The measured v25.05 GB200 rows take sides: DeepSeek-V3 (known_runs_dev.yaml, EP 32 / 64: -9% to -16%
# unaligned, about -60% aligned), Llama 4 Maverick (runs/moe_runs_added.yaml, EP 64: +4% to -2% unaligned, -8% to -21%
# aligned) and Llama 3.1 405B (known_runs_dev.yaml, CP 2 across trays: +3% / +4% unaligned, -11% / -14% aligned) agree
# with an unaligned allocation; Grok-1 (EP 8 x ETP 4: +25% to +36% unaligned, -1% to -10% aligned) alone with an
# aligned one. The rule keeps what three workloads of four agree with; it is an inference about the cluster, and a
# missing mechanism common to those three (the 25.11 Megatron-Bridge DeepSeek-V3 row runs 3.3x the v25.05 tokens per
# GPU on GB200) would explain them as well.
# Checked against Grok's own launch: dgxc-benchmarking v25.05 (68eaf7e) grok1/launch.sh defaults ET=8 on GB200 where
# its README table says ETP 4 (v25.05.01, 60d6fd3, sets ET=4; the published figures are the same in both), and scored
# with ETP 8 the BF16 512-GPU row moves from +27% to +33%; nodes filled from a domain boundary (the first offset
# only, not the worst) leave Grok at +21% to +29% and move DeepSeek-V3 v25.05 from -7% to -11%. Neither settles it.
DGXC_SEGMENTED_FROM = (26, 2)


def dgxc_release(run: dict) -> tuple[int, int] | None:
    """(yy, mm) of the dgxc-benchmarking release a run cites (`(v25.05)` in its source), else None."""
    import re

    src = str(run.get("source", ""))
    m = re.search(r"\(v(\d{2})\.(\d{2})", src) if "dgxc-benchmarking" in src else None
    return (int(m.group(1)), int(m.group(2))) if m else None


# DGX Cloud's DeepSeek-V3 recipes of the NeMo 2 era (dgxc-benchmarking releases before v25.08 launch NeMo's
# scripts/performance/llm/pretrain_deepseek_v3.py): `USE_TOKEN_DROP = True`, the MegatronTokenDropCallback with
# moe_expert_capacity_factor 1.0 and inputs padded to capacity, alltoall dispatcher (NVIDIA/NeMo at 7a8f1cc).
DGXC_TOKEN_DROP_BEFORE = (25, 8)
DGXC_TOKEN_DROP_MODELS = ("deepseek_v3",)


def infer_moe_capacity_factor(run: dict) -> float | None:
    """train.moe_capacity_factor, else 1.0 for a NeMo-2-era DGX Cloud DeepSeek-V3 recipe (DGXC_TOKEN_DROP_*), else
    None (dropless)."""
    import re

    stated = (run.get("train") or {}).get("moe_capacity_factor")
    if stated is not None:
        return stated
    # a MaxText recipe's notes state its base.yml override (capacity_factor: -1 = dropless, > 0 drops to capacity;
    # the runs schema has no field for it), e.g. tpu-recipes' mixtral_8x7b_dropped: capacity_factor=1.25
    cf = re.search(r"capacity_factor\s*=\s*([0-9.]+)", str(run.get("notes", "")))
    if cf and traits(infer_framework(run)).custom_remat_option and float(cf.group(1)) > 0:
        return float(cf.group(1))
    rel = dgxc_release(run)
    model_type = str((run.get("model") or {}).get("model_type", "")).lower()
    return 1.0 if rel is not None and rel < DGXC_TOKEN_DROP_BEFORE and model_type in DGXC_TOKEN_DROP_MODELS else None


def infer_aligned_allocation(run: dict) -> bool:
    """Whether the run's nodes came in whole segments of the scale-up domains (ClusterSpec.aligned_allocation):
    the record's `aligned_allocation`, else false for a dgxc-benchmarking release before DGXC_SEGMENTED_FROM,
    else true (the planner's default: block scheduling as NVIDIA recommends)."""
    stated = run.get("aligned_allocation")
    if isinstance(stated, bool):
        return stated
    rel = dgxc_release(run)
    return rel is None or rel >= DGXC_SEGMENTED_FROM


def run_cluster(run: dict, hw, dev: int) -> ClusterSpec:
    """The run's cluster; on TPUs one ICI domain per slice (no slice is larger than the profile's
    torus.max_slice_devices), slices joined by DCN; infer_aligned_allocation says how its nodes were allocated."""
    hw = run_hardware(run, hw)
    slices = 1
    if hw.is_tpu and hw.torus is not None:  # a TPU always has torus rules (HardwareSpec validator)
        slices = max(tpu_slices(run), -(-dev // hw.torus.max_slice_devices))
    return ClusterSpec(name=f"{hw.id}x{dev}", hardware=hw, count=dev,
                       devices_per_node=run.get("devices_per_node") or None,
                       domain_size=dev // slices if slices > 1 and dev % slices == 0 else None,
                       aligned_allocation=infer_aligned_allocation(run))


def tpu_slices(run: dict) -> int:
    """TPU slices a MaxText run spans (the runs schema has no field for it): `dcn_data_parallelism=K` in
    its notes (MaxText's multislice axis), else a `<K>x-<slice>` / `<K>xv4-128` prefix in its id; 1 if neither.
    Slices talk over DCN, chips within a slice over ICI (known_runs_notes.md, TPU runs)."""
    import re

    m = re.search(r"dcn_data_parallelism\s*=\s*(\d+)", str(run.get("notes", "")))
    if m is None:
        m = re.search(r"-(\d+)x-?v\d", str(run.get("id", "")))
    return max(1, int(m.group(1))) if m else 1


def multislice_hsdp(run: dict, cluster: ClusterSpec, fixed: dict[str, Any]) -> dict[str, Any]:
    """MaxText across K slices shards FSDP within a slice (ici_fsdp_parallelism) and replicates across
    slices (dcn_data_parallelism): hybrid sharding with shard groups of dp*cp / K."""
    if "dcn_fsdp_parallelism" in str(run.get("notes", "")):
        return {}  # FSDP spans the slices too (MaxText dcn_fsdp_parallelism): full sharding, not HSDP
    slices = cluster.count // cluster.scale_up_size if cluster.hardware.is_tpu else 1
    dp_cp = (fixed.get("dp") or 0) * (fixed.get("cp") or 1)
    if slices > 1 and dp_cp and dp_cp % slices == 0:
        return {"zero_shard_size": dp_cp // slices}
    return {}


def _deepseek_own_stack(run: dict) -> bool:
    """A run cited from the DeepSeek-V3 technical report: trained on DeepSeek's own framework (HAI-LLM)."""
    return "deepseek-v3 technical report" in str(run.get("source", "")).lower()


def stack_constraints(run: dict, train: TrainingSpec) -> dict[str, Any]:
    """What the run's software stack could do at all, independent of the plan chosen: applied to the
    published plan and to the unconstrained search it is compared with."""
    env: dict[str, Any] = {"offload_optimizer": False}  # no offload field in the schema; none of the runs offloads
    if run_stack(run).tp_comm_overlap:
        env["tp_comm_overlap"] = True
    if _deepseek_own_stack(run):
        # DeepSeek's own framework runs DualPipe (DeepSeek-V3 report sec. 3.2.1) besides the usual schedules
        env["schedule"] = ("1f1b", "interleaved", "dualpipe")
    if train.attention_impl == "unfused":
        # stacks before mid-2022 had neither sequence parallelism nor Megatron's distributed optimizer
        # (both arrived with Korthikanti et al. 2022, arXiv 2205.05198, and Megatron-LM after it)
        env["sequence_parallel"] = False
        if traits(train.framework).zero_is_distributed_optimizer:
            env["zero_stage"] = 0
        # nor selective recompute or recompute of only some layers (`--recompute-granularity`,
        # `--recompute-method block` arrived with the same work): activation checkpointing then meant
        # every transformer layer (Megatron-LM `--checkpoint-activations`, DeepSpeed checkpointing)
        env["recompute"] = ("none", "full")
        env["recompute_layers"] = None
    return env


def _printable(text: str) -> str:
    """Input-derived text for a terminal or markdown: control characters replaced."""
    return "".join(c if c.isprintable() else "?" for c in text)


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())


def stack_search(ctx: Context, fixed: dict[str, Any], require_fit: bool = True, gated: bool = True):
    """search() of a run's knobs, what it leaves out searched among the layouts its stack lays out: gated by the plan
    rules of the launcher that stands for the run's stack (launchers.stack_launcher), as `plan` gates a search without
    --launcher (planner.app.plan.modelled_launcher), so a knob the source does not publish is not one the stack
    cannot run (MaxText's partial full recompute, say). Ungated (`gated` False, or where those rules refuse every
    candidate: a run whose published knobs that launcher cannot lay out, DeepSeek-V3's DualPipe costed with Megatron's
    stack, or a release with other limits; a costing stack no launcher writes, NeMo AutoModel). Returns (result,
    whether the rules gated it)."""
    gate = stack_launcher(ctx.train, ctx.cluster) if gated else None
    if gate is not None:
        res = search(ctx, SearchOptions(fixed=fixed, top_k=1, require_fit=require_fit, launcher=gate,
                                        launcher_plan_rules_only=True))
        if res.plans or res.smallest_peak_plan is not None:
            return res, True
    return search(ctx, SearchOptions(fixed=fixed, top_k=1, require_fit=require_fit)), False


def predict_run(run: dict) -> dict:
    ctx, fixed = run_inputs(run)
    res, _ = stack_search(ctx, fixed)
    if res.plans:
        ev = res.plans[0]
    elif res.smallest_peak_plan is not None:
        # nothing fits our capacity model, yet the run ran: score the plan closest to fitting (the
        # memory-saving choices its authors must have made), flagged as not fitting
        ev = evaluate(ctx, res.smallest_peak_plan)
    else:
        why = f": {safe_line('; '.join(res.refused_for), 400)}" if res.refused_for else ""
        raise UnscorableRun(f"run {run['id']}: no valid plan with the published knobs {fixed}{why}")
    meas = run.get("measured") or {}
    out = {
        "id": run["id"],
        "reliability": run.get("reliability"),
        "framework": ctx.train.framework,
        "step_time_s": ev.step_time_s,
        "peak_memory_gib": ev.memory["peak_gib"],
        "measured_step_time_s": meas.get("step_time_s"),
        "measured_peak_memory_gib": meas.get("peak_memory_gib"),
        "plan": ev.plan.knobs(),
        "fits": ev.fits,
        "attention_extrapolated": ev.attention_extrapolated,
        "mfu": ev.mfu,
        "time_breakdown": ev.time_breakdown,
        "memory": ev.memory,
    }
    not_modelled = run_stack(run).not_modelled()
    if not_modelled:  # stated in the run's stack block, not priced: the prediction is for the default
        out["stack_not_modelled"] = not_modelled
    if meas.get("step_time_s"):
        out["step_time_error"] = ev.step_time_s / meas["step_time_s"] - 1.0
    if meas.get("peak_memory_gib"):
        of = meas.get("peak_memory_of") or "device"
        predicted = compared_peak_gib(ctx, ev, of)
        if of != "device":  # the figure compared with the measured one, beside the device peak
            out["peak_memory_compared"] = {"of": of, "predicted_gib": predicted}
        out["peak_memory_error"] = predicted / meas["peak_memory_gib"] - 1.0
    return out


def compared_peak_gib(ctx: Context, ev, of: str) -> float:
    """The predicted figure a measured peak of kind `of` (runschema.PEAK_MEMORY_OF) is held against: the device peak
    (the peak stage's, with the allocator's fragmentation and the framework's own memory), or what PyTorch allocated
    on the job's last rank: the last pipeline stage's weights, gradients, optimizer states, activations and buffers
    (Megatron's rank order puts pp outermost, so the last rank holds the last stage), without the reserve the
    allocator keeps beyond its allocations or the CUDA context and communication buffers outside it."""
    if of == "device":
        return ev.memory["peak_gib"]
    from planner.costmodel.evaluate import screen_memory
    from planner.costmodel.memory import stage_memories

    screened = screen_memory(ctx, ev.plan)
    return stage_memories(ctx, screened.shape, screened.split, screened.params)[ev.plan.pp - 1].allocated_gib


def _pctl(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[int(q * (len(xs) - 1))] if xs else float("nan")


def summarise(rows: list[dict], skipped: int = 0) -> dict:
    st = [abs(r["step_time_error"]) for r in rows if "step_time_error" in r]
    mem = [abs(r["peak_memory_error"]) for r in rows if "peak_memory_error" in r]
    worst = sorted((r for r in rows if "step_time_error" in r), key=lambda r: -abs(r["step_time_error"]))[:5]
    return {
        "runs": len(rows),
        "step_time": {"n": len(st), "median_abs_error": statistics.median(st) if st else None,
                      "p90_abs_error": _pctl(st, 0.9) if st else None},
        "peak_memory": {"n": len(mem), "median_abs_error": statistics.median(mem) if mem else None,
                        "p90_abs_error": _pctl(mem, 0.9) if mem else None},
        "worst": [{"id": r["id"], "step_time_error": r["step_time_error"]} for r in worst],
        "skipped": skipped,
    }


def validate_runs(runs: list[dict]) -> dict:
    """Score every run that can be scored; the others are listed in `skipped` (id + one-line reason)
    instead of refusing the whole file at its first unsupported record."""
    rows, skipped = [], []
    for run in runs:
        try:
            rows.append(predict_run(run))
        except UnscorableRun as e:
            skipped.append(skip_record(run, e))
    return {"runs": rows, "skipped": skipped, "summary": summarise(rows, len(skipped))}


def skip_record(run: dict, err: Exception) -> dict:
    """One line saying why a run was not scored (the `run <id>: ` prefix of the error is dropped)."""
    rid = _printable(str(run.get("id")))
    reason = _printable(_one_line(err))
    prefix = f"run {rid}: "
    return {"id": rid, "reason": reason[len(prefix):] if reason.startswith(prefix) else reason}


def _percent_or_na(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}%"


def markdown_table(result: dict) -> str:
    s = result["summary"]
    lines = [
        "| run | rel | fw | plan (tp/pp/vpp/cp/dp/ep, mbs, zero, recompute) | measured s | predicted s | error | "
        "measured GiB | predicted GiB | error |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["runs"]:
        p = r["plan"]
        knobs = (f"{p['tp']}/{p['pp']}/{p['vpp']}/{p['cp']}/{p['dp']}/{p['ep']}, {p['micro_batch']}, "
                 f"z{p['zero_stage']}, {recompute_label(p)}")
        ms = r.get("measured_step_time_s")
        mm = r.get("measured_peak_memory_gib")
        lines.append(
            f"| {r['id']} | {r.get('reliability') or ''} | {r['framework']} | {knobs} | "
            f"{ms:.2f} | {r['step_time_s']:.2f} | {100 * r['step_time_error']:+.1f}% | " if ms else
            f"| {r['id']} | {r.get('reliability') or ''} | {r['framework']} | {knobs} | - | "
            f"{r['step_time_s']:.2f} | - | "
        )
        shown = (r.get("peak_memory_compared") or {}).get("predicted_gib", r["peak_memory_gib"])
        lines[-1] += (f"{mm:.1f} | {shown:.1f} | {100 * r['peak_memory_error']:+.1f}% |" if mm
                      else f"- | {r['peak_memory_gib']:.1f} | - |")
    st, mem = s["step_time"], s["peak_memory"]
    fmt = _percent_or_na
    kinds = sorted({r["peak_memory_compared"]["of"] for r in result["runs"] if r.get("peak_memory_compared")})
    if kinds:
        lines += ["", f"predicted GiB of the runs measured as {', '.join(kinds)} (measured.peak_memory_of): the "
                      "last pipeline stage's allocated memory (weights, gradients, optimizer states, activations, "
                      "buffers), not the device peak; docs/runs-schema.md."]
    if result.get("skipped"):
        lines += ["", f"Not scored ({len(result['skipped'])}):"]
        lines += [f"- {sk['id']}: {sk['reason']}" for sk in result["skipped"]]
    lines += ["", f"Step time: median |error| {fmt(st['median_abs_error'])}, p90 {fmt(st['p90_abs_error'])} "
                  f"over {st['n']} runs. Peak memory: median |error| {fmt(mem['median_abs_error'])}, "
                  f"p90 {fmt(mem['p90_abs_error'])} over {mem['n']} runs."]
    return "\n".join(lines) + "\n"


def search_quality(run: dict) -> dict | None:
    """For a run whose layout (tp, pp, dp) is published: score the published plan, search the whole space
    with only the training settings fixed, and report the published plan's rank among feasible plans and
    how much faster the search's best claims to be. None when the layout is not fully published."""
    plan = run.get("plan") or {}
    if any(plan.get(k) is None for k in ("tp", "pp", "dp")):
        return None
    ctx, fixed = run_inputs(run)
    pub, gated = stack_search(ctx, fixed)
    pub_fits = bool(pub.plans)
    if not pub_fits:
        pub, gated = stack_search(ctx, fixed, require_fit=False)
    published = pub.plans[0]
    # the same gate as the published plan's: a run whose published knobs the launcher cannot lay out ran on a stack
    # whose limits are not that launcher's
    free, _ = stack_search(ctx, stack_constraints(run, ctx.train), gated=gated)
    # the fastest feasible plan the search scored (its top-ranked plan may be a simpler one within the tie band)
    best = min(free.ranked, key=lambda e: e.step_time_s) if free.ranked else None
    rank = 1 + sum(1 for t, _ in free.frontier if t < published.step_time_s - 1e-12) if pub_fits else None
    return {
        "id": run["id"],
        "published_step_s": published.step_time_s,
        "published_fits": pub_fits,
        "best_step_s": best.step_time_s if best else None,
        "best_plan": best.plan.knobs() if best else None,
        "speedup_claimed": (published.step_time_s / best.step_time_s - 1.0) if best else None,
        "published_rank": rank,
        "feasible_plans": free.feasible,
    }


def search_quality_table(rows: list[dict]) -> str:
    from planner.specs.plan import plan_label

    lines = ["| run | published s (ours) | fits | search best s | claimed speed-up | best layout | "
             "published rank / feasible |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        bp = r["best_plan"]
        best = f"{plan_label(bp)}, mbs {bp['micro_batch']}, {recompute_label(bp)}" if bp else "-"
        lines.append(f"| {r['id']} | {r['published_step_s']:.2f} | {'yes' if r['published_fits'] else 'no'} | "
                     f"{r['best_step_s']:.2f} | {100 * r['speedup_claimed']:+.1f}% | "
                     f"{best} | "
                     f"{r['published_rank'] if r['published_rank'] else '-'} / {r['feasible_plans']} |")
    return "\n".join(lines) + "\n"


DOC_TITLE = "# Validation against published runs\n\n"
DOC_COMMAND = "Generated by `plan validate --write-docs docs/validation.md --search-quality`.\n\n"
HAND_WRITTEN_MARK = "<!-- hand-written below this line: kept as it is by `plan validate --write-docs` -->"
# docs/validation.md LEADS with the out-of-sample (leave-one-source-out) headline, written by hand from
# `python -m planner.analysis.devfit`; everything between the title and this mark is kept too
LEAD_MARK = "<!-- hand-written above this line: kept as it is by `plan validate --write-docs` -->\n"


VALIDATE_LEGEND = ("\nrel: how reliable the published figure is (A primary source; B one transcription or a loose "
                   "figure; C inconsistent sources). fw: the framework modelled. plan: tp/pp/vpp/cp/dp/ep, "
                   "micro-batch, ZeRO stage (z), recompute. error: predicted / measured - 1.\n")


DOC_MAX_BYTES = 4 << 20  # docs/validation.md is ~30 KiB; a file 100x that is not the one to keep prose from


def previous_doc(path: str) -> str:
    """The text of the file `--write-docs` replaces, to keep its lead and hand-written part: '' when it does
    not exist or is not a regular file (a FIFO or device is written in place, never read); a file that is
    too large or not UTF-8 is refused (planner.catalog.files)."""
    import os
    import stat

    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return ""
    except OSError:
        return ""
    where = f"--write-docs {safe_line(path, 200)!r}"
    return read_text_file(path, where, DOC_MAX_BYTES, "a markdown file (or a new path)")


def validation_doc(result: dict, quality: list[dict] | None, previous: str = "") -> str:
    """The text `plan validate --write-docs` writes: the previous file's lead (title to LEAD_MARK), the
    generated tables, then whatever follows HAND_WRITTEN_MARK in the previous file (the prose about the
    residuals), unchanged."""
    lead = ""
    if previous.startswith(DOC_TITLE) and LEAD_MARK in previous:
        lead = previous[len(DOC_TITLE):previous.index(LEAD_MARK) + len(LEAD_MARK)]
    text = DOC_TITLE + lead + DOC_COMMAND + markdown_table(result) + VALIDATE_LEGEND
    if quality is not None:
        text += ("\n## Search quality: published plans vs the unconstrained search\n\n"
                 "Each fully published layout, scored by this model, against the best plan the search finds "
                 "with only the training settings fixed; rank = position of the published plan among all "
                 "feasible plans the search scored.\n\n" + search_quality_table(quality))
    if HAND_WRITTEN_MARK in previous:
        text += "\n" + previous[previous.index(HAND_WRITTEN_MARK):]
    return text
