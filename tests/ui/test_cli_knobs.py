"""`plan --help` documents every plan knob from ParallelPlan's own field (type, range, choices, text)."""

from __future__ import annotations

import typing

import click
from click.testing import CliRunner

from planner.app import KNOB_FLAGS
from planner.specs import ParallelPlan
from planner.ui.cli import main


def _options() -> dict[str, click.Option]:
    return {p.name: p for p in main.params if isinstance(p, click.Option)}


def test_every_knob_option_carries_its_field_description():
    opts = _options()
    for flag, knob in KNOB_FLAGS.items():
        desc = ParallelPlan.model_fields[knob].description
        assert desc and opts[flag].help and opts[flag].help.startswith(desc), flag


def test_choices_and_ranges_come_from_the_fields():
    opts = _options()
    schedules = typing.get_args(ParallelPlan.model_fields["schedule"].annotation)
    assert list(opts["schedule"].type.choices) == list(schedules)
    assert list(opts["cp_comm"].type.choices) == ["ring", "a2a"]
    assert (opts["zero"].type.min, opts["zero"].type.max) == (0, 3)  # ParallelPlan.zero_stage: ge=0, le=3
    assert opts["sp"].secondary_opts == ["--no-sp"]


def test_help_shows_text_for_every_knob():
    out = " ".join(CliRunner().invoke(main, ["--help"]).output.split())  # rewrapped text, one space apart
    for flag, knob in KNOB_FLAGS.items():
        at = out.index(f"--{flag.replace('_', '-')} ")
        words = " ".join(ParallelPlan.model_fields[knob].description.split()[:3])
        assert words in out[at:at + 120], (flag, out[at:at + 120])


def test_a_knob_out_of_range_is_refused_with_exit_2():
    r = CliRunner().invoke(main, ["--model", "llama-8b", "--cluster", "a100x8", "--tp", "0"])
    assert r.exit_code == 2 and "positive integer" in r.output
    r = CliRunner().invoke(main, ["--model", "llama-8b", "--cluster", "a100x8", "--zero", "4"])
    assert r.exit_code == 2
