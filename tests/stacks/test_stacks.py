"""Stacks as data (planner/stacks/): one module per stack owns its cost traits and its plan rules; nothing else in
the planner compares a framework's name, and the launcher-neutral rules accept what a stack's own table accepts."""

from __future__ import annotations

import ast
import re
from dataclasses import fields
from pathlib import Path
from typing import get_args

import pytest

from planner.catalog.hardware import parse_cluster
from planner.catalog.models import load_model
from planner.launchers import capabilities, launcher_errors
from planner.specs import ParallelPlan, TrainingSpec
from planner.specs.dims import plan_errors
from planner.specs.training import Framework
from planner.stacks import (
    ALL_FRAMEWORKS,
    DEFAULT_FRAMEWORK,
    FRAMEWORKS,
    STACKS,
    Stack,
    stack_of,
    stack_of_emitter,
    traits,
)
from planner.ui.jsondoc import load_schema

PLANNER = Path(__file__).resolve().parents[2] / "planner"
STACK_DIR = PLANNER / "stacks"
NAME_COMPARISON = re.compile(r"framework (==|!=|in)")  # the grep: framework ==, framework !=, framework in


def test_no_framework_name_comparison_outside_stacks():
    hits = [f"{p.relative_to(PLANNER)}:{i}: {line.strip()}"
            for p in sorted(PLANNER.rglob("*.py")) if STACK_DIR not in p.parents
            for i, line in enumerate(p.read_text().splitlines(), 1) if NAME_COMPARISON.search(line)]
    assert not hits, "\n".join(hits)


def _runtime_imports(path: Path) -> list[str]:
    """Modules imported by `path` outside `if TYPE_CHECKING:` blocks."""
    tree = ast.parse(path.read_text())
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
            for b in node.body for n in ast.walk(b)}
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names]
    return out


def test_stacks_layer_imports_no_other_planner_layer():
    """The specs read the stacks (TrainingSpec's stack switches, plan_errors), so the stacks import nothing of
    the planner but themselves at run time."""
    for path in STACK_DIR.glob("*.py"):
        bad = [m for m in _runtime_imports(path) if m.startswith("planner") and not m.startswith("planner.stacks")]
        assert not bad, (path.name, bad)


def test_one_stack_per_framework_and_launcher():
    assert ALL_FRAMEWORKS == get_args(Framework) == tuple(STACKS)
    # the plan document's framework is one the planner plans for: a stack with an emitter (--framework choices)
    assert list(load_schema()["$defs"]["training"]["properties"]["framework"]["enum"]) == list(FRAMEWORKS)
    for fw, stack in STACKS.items():
        assert stack.framework == fw and traits(fw) is stack
        if not stack.plannable:  # a costing stack: scored where a run names it, never planned for nor written
            assert stack.emitter == "" and fw not in FRAMEWORKS and stack_of_emitter(fw) is None
            continue
        assert fw in FRAMEWORKS
        assert capabilities(stack.emitter).framework == fw  # the emitter runs the stack the traits describe
    assert [fw for fw, s in STACKS.items() if not s.plannable] == ["automodel"]
    assert stack_of(TrainingSpec(global_batch=8, framework="fsdp")).emitter == "torchtitan"
    assert stack_of(TrainingSpec(global_batch=8)) is traits(DEFAULT_FRAMEWORK) is STACKS["megatron"]
    with pytest.raises(KeyError, match="unknown framework"):
        traits("nanotron")


def test_every_trait_is_set_with_its_source():
    """Each stack module sets every trait explicitly, with a comment on the line or just above it."""
    names = {f.name for f in fields(Stack)}
    for path in STACK_DIR.glob("*.py"):
        if path.name in ("__init__.py", "base.py", "rules.py"):
            continue
        lines = path.read_text().splitlines()
        set_here = {}
        for i, line in enumerate(lines):
            m = re.match(r"    (\w+)=", line)
            if m and m.group(1) in names:
                set_here[m.group(1)] = "#" in line or lines[i - 1].lstrip().startswith("#")
        assert set(set_here) == names, (path.name, names - set(set_here))
        uncited = sorted(k for k, ok in set_here.items() if not ok and k not in ("name", "framework", "emitter",
                                                                                  "covers"))
        assert not uncited, (path.name, uncited)


def test_named_keeps_policies_name_what_they_keep():
    """A "named_keeps" selective policy (Stack.selective_recomputes) is priced from the names it keeps, so exactly
    those stacks name some (Stack.selective_keeps), and only names the planner sizes (MaxText's remat tensors)."""
    from planner.stacks.maxtext import REMAT_TENSORS

    for fw, stack in STACKS.items():
        assert (stack.selective_recomputes == "named_keeps") == bool(stack.selective_keeps), fw
        assert set(stack.selective_keeps) <= set(REMAT_TENSORS), fw
    assert STACKS["maxtext"].selective_recomputes == "named_keeps"


def test_every_trait_is_read():
    """Nothing declared that nothing reads: each cost or search trait is read outside planner/stacks (a trait whose
    last reader goes is removed with it; a per-stack table elsewhere moves into the Stack instead)."""
    text = "\n".join(p.read_text() for p in PLANNER.rglob("*.py") if STACK_DIR not in p.parents)
    unread = [f.name for f in fields(Stack) if f.name not in ("name", "covers", "plan_rules")
              and not re.search(rf"\.{f.name}\b", text)]
    assert not unread, unread


def _six_microbatch_plan() -> tuple:
    model, cluster = load_model("llama-3.1-8b"), parse_cluster("h100x4")
    plan = ParallelPlan(pp=4, vpp=2, schedule="interleaved", micro_batch=1)
    return model, cluster, plan


def test_torchtitan_plan_with_six_microbatches_is_torchtitans_to_refuse():
    """6 micro-batches over PP 4 with 2 virtual stages: torch's interleaved 1F1B only needs n % (n // pp) == 0
    (torch 2.13 pipelining), Megatron needs n % pp == 0 (megatron-core schedules.py). The neutral rules accept
    it; the Megatron stack refuses it; each agrees with its own launcher's table."""
    model, cluster, plan = _six_microbatch_plan()
    titan = TrainingSpec(global_batch=6, framework="fsdp")
    megatron = TrainingSpec(global_batch=6, framework="megatron")
    assert plan_errors(model, titan, 4, plan) == []
    assert launcher_errors(plan, model, titan, "torchtitan", cluster) == []
    errs = plan_errors(model, megatron, 4, plan)
    assert errs == ["the interleaved schedule needs the micro-batch count (6) divisible by pp=4 (Megatron rule)"]
    assert any("divisible by pp" in e for e in launcher_errors(plan, model, megatron, "megatron", cluster))
    ok = TrainingSpec(global_batch=8, framework="megatron")
    assert plan_errors(model, ok, 4, plan) == []


def test_megatron_partial_recompute_comes_per_virtual_stage():
    """Megatron's --recompute-method block recomputes the first N layers of each model chunk (megatron-core
    recompute.py), so under interleaving a rank recomputes N x vpp: k = 27 of a 40-layer rank with vpp 2 is refused
    with the two runnable neighbours and k = 28 is taken (written as block 14); without virtual stages any k is."""
    model = load_model("llama-3.1-70b")
    train = TrainingSpec(global_batch=64, framework="megatron")
    plan = ParallelPlan(tp=8, pp=2, vpp=2, dp=4, recompute="full", recompute_layers=27, schedule="interleaved")
    errs = plan_errors(model, train, 64, plan)
    assert len(errs) == 1 and "multiple of vpp=2 (26 or 28)" in errs[0] and "Megatron" in errs[0], errs
    assert plan_errors(model, train, 64, plan.model_copy(update={"recompute_layers": 28})) == []
    assert plan_errors(model, train, 64, plan.model_copy(update={"vpp": 1, "schedule": "1f1b"})) == []
    one = plan_errors(model, train, 64, plan.model_copy(update={"recompute_layers": 1}))
    assert len(one) == 1 and "multiple of vpp=2 (2)" in one[0], one


def test_stack_switches_are_read_from_the_traits():
    """TrainingSpec's stack-specific switches follow the traits, not names."""
    for fw, stack in STACKS.items():
        for switch, allowed in (("torch_compile", stack.eager_unless_compiled),
                                ("fused_cross_entropy", stack.fused_loss_option),
                                ("legacy_deepspeed_zero3", stack.legacy_zero3_option)):
            if allowed:
                assert getattr(TrainingSpec(global_batch=8, framework=fw, **{switch: True}), switch)
            else:
                with pytest.raises(ValueError):
                    TrainingSpec(global_batch=8, framework=fw, **{switch: True})


def test_a_costed_moe_dispatcher_the_launcher_cannot_select_is_refused():
    """--moe-dispatcher flex is costed as DeepEP; only Megatron's files select it (Stack.moe_dispatchers)."""
    from planner.catalog.models import get_model
    from planner.launchers.contract import missing_features
    from planner.specs import TrainingSpec

    m = get_model("mixtral-8x7b")
    # costed in Megatron's stack, which runs DeepEP, then handed to each launcher's files
    flex = TrainingSpec(seq_len=4096, global_batch=256, framework="megatron", moe_dispatcher="flex")
    for launcher, framework in (("megatron", "megatron"), ("deepspeed", "deepspeed"), ("maxtext", "maxtext")):
        assert ("the flex MoE dispatcher" in missing_features(m, flex, launcher)) == (launcher != "megatron")
        plain = TrainingSpec(seq_len=4096, global_batch=256, framework=framework, moe_dispatcher="alltoall")
        assert "the alltoall MoE dispatcher" not in missing_features(m, plain, launcher)


def test_a_dispatcher_the_stack_has_no_code_for_is_refused_before_it_is_costed():
    """--moe-dispatcher flex on a TPU (MaxText) was priced as DeepEP and shown as a plan: a dispatcher outside
    Stack.moe_dispatchers is an input error of the training settings (exit 2), whatever the launcher."""
    from planner.specs import TrainingSpec
    from planner.stacks import traits

    for framework in ("megatron", "deepspeed", "maxtext", "fsdp"):
        offered = traits(framework).moe_dispatchers
        for kind in ("alltoall", "allgather", "flex"):
            if kind in offered:
                assert TrainingSpec(global_batch=8, framework=framework, moe_dispatcher=kind).dispatcher == kind
            else:
                with pytest.raises(ValueError, match=f"the {kind} MoE dispatcher .* not one {framework} runs"):
                    TrainingSpec(global_batch=8, framework=framework, moe_dispatcher=kind)
    assert traits("maxtext").moe_dispatchers == ("alltoall",) and "flex" in traits("megatron").moe_dispatchers


def test_deepep_cannot_pad_to_capacity():
    """A capacity factor is run with --moe-pad-expert-input-to-capacity (planner/emit/megatron.py), which megatron-core
    refuses under the flex dispatcher's DeepEP backend (TransformerConfig: "Flex token dispatcher with deepep backend
    does not support moe_pad_expert_input_to_capacity"); the launch files of such a plan would not start. HybridEP
    pads, and alltoall is the token-drop recipes' dispatcher."""
    from planner.specs import TrainingSpec

    with pytest.raises(ValueError, match="DeepEP kernels refuse"):
        TrainingSpec(global_batch=8, moe_dispatcher="flex", moe_capacity_factor=1.0)
    with pytest.raises(ValueError, match="DeepEP kernels refuse"):
        TrainingSpec(global_batch=8, moe_dispatcher="flex", moe_flex_backend="deepep", moe_capacity_factor=1.25)
    assert TrainingSpec(global_batch=8, moe_dispatcher="flex", moe_flex_backend="hybridep",
                        moe_capacity_factor=1.0).flex_backend == "hybridep"
    assert TrainingSpec(global_batch=8, moe_dispatcher="alltoall", moe_capacity_factor=1.0).dispatcher == "alltoall"
