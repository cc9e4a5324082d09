"""User-facing errors: one clear line, a documented exit code, never a traceback."""

from __future__ import annotations

EXIT_USAGE = 2  # bad input: unknown name, malformed file, inconsistent spec or flags
EXIT_NO_FEASIBLE = 3  # the input is valid but no plan fits


class PlannerError(Exception):
    """An error caused by the user's input; the CLI prints `str(self)` and exits `exit_code`."""

    exit_code = EXIT_USAGE


class InputError(PlannerError):
    """Malformed or inconsistent input (model, cluster, run file, flags)."""


class NoFeasiblePlan(PlannerError):
    """The search space is valid but no candidate fits in memory."""

    exit_code = EXIT_NO_FEASIBLE
