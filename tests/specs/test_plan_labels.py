"""One rule names a plan's recompute in every view (planner.specs.plan.recompute_label): the table, the report, the
launch notes and docs/validation.md."""

from planner.specs import ParallelPlan
from planner.specs.plan import recompute_label


def test_recompute_labels():
    label = lambda **k: recompute_label(ParallelPlan(**k).model_dump())  # noqa: E731
    assert label(recompute="selective") == "selective"
    assert label(recompute="full", recompute_layers=12) == "full(12/stage)"
    custom = dict(recompute="selective", remat_offloaded=("decoder_layer_input",), remat_device=("out_proj",))
    assert label(**custom) == "custom(decoder_layer_input:host, out_proj:hbm)"
    assert recompute_label(ParallelPlan(**custom).model_dump(), short=True) == "cust"
    # the names alone, without selective recompute, are no custom policy in effect (ParallelPlan.custom_remat)
    assert label(recompute="full", remat_offloaded=("decoder_layer_input",)) == "full"


def test_only_maxtext_names_are_accepted():
    import pytest

    with pytest.raises(ValueError, match="unknown remat tensor"):
        ParallelPlan(recompute="selective", remat_offloaded=("attention_scores",))
