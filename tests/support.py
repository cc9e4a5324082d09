"""What the tests share: where their fixtures live, the one way to run the CLI in-process, and the checks and
metrics over the planner's outputs that only tests use (formerly tests/support.py).

Everything a test reads is under tests/data/, so a clone in any folder runs the suite (no read of the
workspace's shared/reference; tests/data/reference/README.md says what was copied from it and from which
sources). Tests call the CLI through `run_cli` (or the `cli` fixture of tests/conftest.py, the same function),
never through their own CliRunner set-up."""

from __future__ import annotations

import itertools
import json
import os
import re
import resource
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from click.testing import CliRunner, Result

from planner.analysis.timeline import Event, busy_s, makespan_s, resolve_schedule
from planner.analysis.validate import load_runs, run_inputs
from planner.catalog.data import data_dir
from planner.catalog.hardware import list_hardware
from planner.costmodel.base import Context
from planner.costmodel.evaluate import Evaluation, evaluate
from planner.costmodel.stage_problem import StageProblem
from planner.search.engine import SearchOptions, search
from planner.specs import HardwareSpec

TESTS_DIR = Path(__file__).resolve().parent
ROOT = TESTS_DIR.parent  # the checkout whose `planner` package the subprocesses run
DATA_DIR = TESTS_DIR / "data"
REFERENCE_DIR = DATA_DIR / "reference"  # verbatim copies of shared/reference files, citations kept
HF_CONFIGS_DIR = REFERENCE_DIR / "hf_configs"
SOURCED_HF_CONFIGS_DIR = DATA_DIR / "hf_configs"  # configs written for the tests, each citing its `_source`
NCCL_TESTS_DIR = REFERENCE_DIR / "nccl_tests"
MODELS_YAML = REFERENCE_DIR / "models.yaml"

# the 19 Hugging Face config.json transcriptions of shared/reference/hf_configs (tests/data/reference/README.md)
HF_CONFIG_FILES = sorted(HF_CONFIGS_DIR.glob("*.json"))
N_HF_CONFIGS = 19


def run_cli(*args, env: dict[str, str] | None = None, input: str | bytes | None = None,
            catch_exceptions: bool = False) -> Result:
    """`plan ARGS...` in-process with stdout and stderr kept apart (`r.stdout`, `r.stderr`). An exception
    escapes unless `catch_exceptions` (a traceback is never an expected outcome). `env` adds variables for
    the call only."""
    from planner.ui.cli import main

    try:
        runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg]  # click < 8.2
    except TypeError:  # click >= 8.2 always separates stderr
        runner = CliRunner()
    return runner.invoke(main, [str(a) for a in args], env=env or {}, input=input,
                         catch_exceptions=catch_exceptions)


def plan_json(*args) -> tuple[dict, str]:
    """`plan ARGS... --json` that must succeed: (the parsed document, the raw stdout)."""
    r = run_cli(*args, "--json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout), r.stdout


def one_line_error(r: Result, code: int = 2, max_chars: int | None = None) -> str:
    """The product contract for bad input: exit `code`, no traceback, one line on stderr starting 'error: '
    (at most `max_chars` long when given)."""
    out = r.stdout + r.stderr
    assert r.exit_code == code, (r.exit_code, out[-2000:])
    assert "Traceback" not in out
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, lines[:5]
    assert lines[0].startswith("error: "), lines[0][:300]
    assert max_chars is None or len(lines[0]) <= max_chars, lines[0][:300]
    return lines[0]


PROCESS_LIMIT_BYTES = 500 * 2**20  # address space of a `cli_process` child


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (PROCESS_LIMIT_BYTES, PROCESS_LIMIT_BYTES))


def smallest_peak_gib(err: str) -> float:
    """The smallest peak an exit-3 message reports (planner.app.plan.nothing_fits_message)."""
    return float(re.search(r"smallest peak any plan reaches is ([0-9.]+) GiB", err).group(1))


def cli_process(*args, cwd=None, timeout: float = 10.0) -> subprocess.CompletedProcess:
    """The CLI of this checkout in a subprocess under 500 MB and `timeout` seconds (text stdout/stderr), for
    what an in-process run cannot show: memory and time bounds, signals, special files, exit on a broken pipe."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONHASHSEED="0")
    return subprocess.run([sys.executable, "-m", "planner.ui.cli", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, preexec_fn=_limits)


def one_line_error_proc(p: subprocess.CompletedProcess, code: int = 2) -> str:
    """`one_line_error` for a `cli_process` result: no traceback, no MemoryError, one short 'error: ' line."""
    assert p.returncode == code, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr + p.stdout and "MemoryError" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and len(lines[0]) <= 700, lines[:3]
    return lines[0]


# ==== helpers only the tests use: checks and metrics over the planner's outputs that no command of the
# product runs (they left the package, issue 25 item 7; a helper a command starts to use moves back beside
# its caller) ====
# ---- hardware catalog ---------------------------------------------------------------------------------------


def hardware_catalog() -> dict[str, HardwareSpec]:
    """Every hardware profile of the catalog, keyed by id (planner.catalog.hardware.list_hardware)."""
    return {h.id: h for h in list_hardware()}


# ---- pipeline stage assignment -------------------------------------------------------------------------------


def uniform_stage_problem(num_layers: int, pp: int, *, layer_time_s: float, layer_recompute_s: float,
                          layer_act_bytes: float, layer_act_bytes_recompute: float, layer_state_bytes: float,
                          capacity_bytes: float, first_extra_time_s: float = 0.0, last_extra_time_s: float = 0.0,
                          first_extra_bytes: float = 0.0, last_extra_bytes: float = 0.0,
                          inflight: Sequence[float] | None = None, **kw) -> StageProblem:
    """A StageProblem of identical layers; inflight defaults to 1F1B's pp - s."""
    def rep(x: float) -> tuple[float, ...]:
        return (float(x),) * num_layers

    return StageProblem(num_layers, pp, rep(layer_time_s), rep(layer_recompute_s), rep(layer_act_bytes),
                        rep(layer_act_bytes_recompute), rep(layer_state_bytes), first_extra_time_s, last_extra_time_s,
                        first_extra_bytes, last_extra_bytes,
                        tuple(float(x) for x in (inflight if inflight is not None else range(pp, 0, -1))),
                        capacity_bytes, **kw)


# ---- ranking -------------------------------------------------------------------------------------------------


def dominated_by_later(rows: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of (step_s, peak_gib) rows that a LATER row beats on both (strictly faster and strictly
    smaller): empty for any list planner.search.ranking.rank produced."""
    out = []
    for i, (t, m) in enumerate(rows):
        for t2, m2 in rows[i + 1:]:
            if t2 < t and m2 < m:
                out.append(i)
                break
    return out


# ---- pipeline timelines --------------------------------------------------------------------------------------


def bubble_fraction(events: Sequence[Event]) -> float:
    """Idle time over compute time, summed over stages (Narayanan et al. 2021's t_pb / t_id).

    For uniform stages this is the familiar (pp-1)/m for GPipe and 1F1B, (pp-1)/(vpp*m) for
    interleaved 1F1B.
    """
    busy = busy_s(events)
    total_busy = sum(busy)
    if total_busy <= 0:
        return 0.0
    span = makespan_s(events)
    return (span * len(busy) - total_busy) / total_busy


def analytic_bubble_fraction(pp: int, vpp: int, num_microbatches: int, schedule: str, *,
                             w_fraction: float = 0.5, fwd_bwd_ratio: float = 0.5) -> float:
    """Closed-form bubble fraction for uniform stages, to check the simulation against.

    gpipe / 1f1b: (p-1)/m and interleaved: (p-1)/(v m) (Narayanan et al. 2021, sec. 2.2);
    zb (ZB-H1): (p-1)(F+B-W) / (m (F+B+W)) (Qi et al. 2023, sec. 3), with F = fwd_bwd_ratio * bwd.
    """
    m = num_microbatches
    if resolve_schedule(pp, vpp, m, schedule) == "zb":
        f, b, w = fwd_bwd_ratio, 1.0 - w_fraction, w_fraction
        return (pp - 1) * (f + b - w) / (m * (f + b + w))
    return (pp - 1) / (vpp * m)


# ---- same-job pairs of the published runs (docs/validation.md "Same-job pairs") -------------------------------
# A job is a model (architecture fields), a device count and a global batch: runs of one job differ in plan,
# software stack (framework, container release, FP8 recipe, overlap options) and sometimes in accelerator or
# sequence length, and a planner that orders them wrongly would recommend the slower one. The strict grouping
# (`strict_job_key`) also fixes the accelerator and the sequence length: the pairs that differ only in plan or
# stack. Every pair in a group whose measured steps differ is ordered correctly when the predicted steps differ in
# the same direction.

_ARCH_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
              "n_embd", "n_layer", "n_head", "d_model", "n_layers", "n_heads")


def _arch(run: dict) -> tuple:
    return tuple(run["model"].get(k) for k in _ARCH_KEYS)


def job_key(run: dict) -> tuple:
    """A job: same model, device count and global batch."""
    return (_arch(run), run["devices"], run["train"]["global_batch"])


def strict_job_key(run: dict) -> tuple:
    """Same model, accelerator, device count, sequence length and global batch: only plan or stack differ."""
    t = run["train"]
    return (_arch(run), run["hardware"], run["devices"], t.get("seq_len"), t["global_batch"])


def same_job_pairs(runs: list[dict], predicted: dict[str, float], key: Callable[[dict], tuple] = job_key
                   ) -> list[dict]:
    """One entry per pair of scored runs of the same job: ids, measured and predicted steps, whether ordered."""
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        if r["id"] in predicted and (r.get("measured") or {}).get("step_time_s"):
            groups.setdefault(key(r), []).append(r)
    out = []
    for members in groups.values():
        for a, b in itertools.combinations(members, 2):
            ma, mb = a["measured"]["step_time_s"], b["measured"]["step_time_s"]
            if ma == mb:
                continue
            pa, pb = predicted[a["id"]], predicted[b["id"]]
            out.append({"a": a["id"], "b": b["id"], "measured": (ma, mb), "predicted": (pa, pb),
                        "ordered": (ma - mb) * (pa - pb) > 0})
    return out


def ordering_rate(pairs: list[dict]) -> float:
    return sum(p["ordered"] for p in pairs) / len(pairs) if pairs else float("nan")


def scored_plan(ctx: Context, fixed: dict) -> Evaluation | None:
    """The plan `plan validate` scores for a run's inputs (planner.analysis.validate.predict_run): the best with the
    published knobs pinned, else the one closest to fitting; None when no plan can run them."""
    res = search(ctx, SearchOptions(fixed=fixed, top_k=1))
    if res.plans:
        return res.plans[0]
    return evaluate(ctx, res.smallest_peak_plan) if res.smallest_peak_plan is not None else None


def scored_runs(file_name: str) -> list[tuple[dict, Context, dict, Evaluation]]:
    """(run, context, pinned knobs, scored plan) of every run of runs/`file_name` with a measured step that plan
    validate scores (it skips the others too)."""
    out = []
    for run in load_runs(data_dir("runs") / file_name):
        if not (run.get("measured") or {}).get("step_time_s"):
            continue
        ctx, fixed = run_inputs(run)
        ev = scored_plan(ctx, fixed)
        if ev is not None:
            out.append((run, ctx, fixed, ev))
    return out


# one-sided residuals (11 of 12 predicted too slow): how GB300's 38 published rows landed while its profile priced GEMMs
# at GB200's efficiency (tests/analysis/test_bands.py); no shipped hardware's runs are one-sided any more
ONE_SIDED_ERRORS = (0.15, 0.2, 0.12, 0.3, 0.18, 0.11, 0.25, 0.16, -0.05, 0.14, 0.22, 0.13)


def one_sided_residuals(hw: str, errors: Sequence[float] = ONE_SIDED_ERRORS) -> tuple:
    from planner.analysis.bands import Residual

    return tuple(Residual(f"{hw}-{i}", "src", "blackwell", True, "megatron", e, e, True, False, hw)
                 for i, e in enumerate(errors))


def patch_one_sided(monkeypatch, hw: str = "gb300-nvl72") -> None:
    """The shipped residuals with `hw`'s replaced by one_sided_residuals (what planner.analysis.bands reads)."""
    import planner.analysis.bands as bands

    shipped = tuple(r for r in bands.load_residuals() if r.hardware != hw)
    monkeypatch.setattr(bands, "load_residuals", lambda path=None: shipped + one_sided_residuals(hw))
