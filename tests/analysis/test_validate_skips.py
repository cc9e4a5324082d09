"""`plan validate` scores every run it can and lists the others one line each (id + reason)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from planner.analysis.validate import load_runs, validate_runs
from planner.catalog.data import data_dir
from planner.ui.cli import main

TPU_FILE = data_dir("runs") / "known_runs_tpu_dev.yaml"


def test_unsupported_records_are_listed_not_fatal():
    runs = load_runs(TPU_FILE)[:2]
    bad = dict(runs[1], id="x-unsupported", model=dict(runs[1]["model"], model_type="no_such_arch"))
    res = validate_runs([runs[0], bad])
    assert [r["id"] for r in res["runs"]] == [runs[0]["id"]]
    assert res["skipped"][0]["id"] == "x-unsupported"
    assert res["skipped"][0]["reason"].startswith("HF config: model_type 'no_such_arch' is not supported")
    assert res["summary"]["skipped"] == 1 and res["summary"]["step_time"]["n"] == 1


def test_control_characters_in_a_skipped_id_are_not_printed():
    run = dict(load_runs(TPU_FILE)[0], id="evil\x1b[2Jid", model={"model_type": "nope"})
    sk = validate_runs([run])["skipped"][0]
    assert "\x1b" not in sk["id"] and "\x1b" not in sk["reason"]


def test_the_tpu_runs_file_is_read_whole():
    out = CliRunner().invoke(main, ["validate", "--runs", str(TPU_FILE), "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert len(doc["runs"]) + len(doc["skipped"]) == len(load_runs(TPU_FILE)) == 37
    assert len(doc["runs"]) == 37  # every TPU record's architecture is modelled now
    assert all(r["step_time_s"] > 0 and "step_time_error" in r for r in doc["runs"])


def test_markdown_lists_skipped_runs():
    from planner.analysis.validate import markdown_table

    run = dict(load_runs(TPU_FILE)[0], id="skip-me", model={"model_type": "nope"})
    md = markdown_table(validate_runs([load_runs(TPU_FILE)[0], run]))
    assert "Not scored (1):" in md and "- skip-me: HF config: model_type 'nope'" in md


def test_unpublished_vpp_is_searched():
    # runs/known_runs_dev.yaml: vpp is null where the source does not publish it (SC21 Table 1 rows): validate
    # fixes only published knobs, so the search picks the virtual stages (here an interleaved schedule)
    from planner.analysis.validate import predict_run

    runs = load_runs(data_dir("runs") / "known_runs_dev.yaml")
    run = next(r for r in runs if r["id"] == "sc21-t1-gpt-145.6b-1536gpu")
    assert run["plan"]["vpp"] is None and run["plan"]["pp"] == 8
    row = predict_run(run)
    assert row["plan"]["pp"] == 8 and row["plan"]["vpp"] > 1 and row["plan"]["schedule"] == "interleaved"
