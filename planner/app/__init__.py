"""The application layer: what every front end (the `plan` CLI and its subcommands, the HTML report,
compare, validate, calibrate, tests) calls. It takes a typed PlanRequest, builds the specs, refuses requests
that can never give a plan, runs the search and assembles the result documents; it never prints.
Layering (checked by import-linter, docs/architecture.md): below planner.ui, above search, analysis and emit."""

from planner.app.documents import cluster_object, model_object, require_finite
from planner.app.inputs import (
    build_inputs,
    check_launcher_hardware,
    check_launcher_model,
    check_request,
    cluster_overrides,
    pinned_knobs,
    training_overrides,
)
from planner.app.launch import emit_set, other_launchers, write_launch_files
from planner.app.plan import (
    Progress,
    explain_search,
    min_devices_cluster,
    nothing_fits_message,
    quiet,
    ranking_doc,
    run_search,
    scored_candidates,
    search_doc,
    usable_capacity_gib,
)
from planner.app.request import KNOB_FLAGS, PlanRequest, resolve_target
from planner.app.runs import (
    Calibration,
    calibrate_file,
    default_runs_file,
    previous_validation_doc,
    validate_file,
    validation_markdown,
)

__all__ = [
    "Calibration", "KNOB_FLAGS", "PlanRequest", "Progress", "build_inputs", "calibrate_file",
    "check_launcher_hardware", "check_launcher_model", "check_request", "cluster_object", "cluster_overrides",
    "default_runs_file", "emit_set", "explain_search", "min_devices_cluster", "model_object", "nothing_fits_message",
    "other_launchers", "pinned_knobs", "previous_validation_doc", "quiet", "ranking_doc", "require_finite",
    "resolve_target", "run_search", "scored_candidates", "search_doc", "training_overrides", "usable_capacity_gib",
    "validate_file", "validation_markdown", "write_launch_files",
]
