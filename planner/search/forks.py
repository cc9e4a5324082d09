"""Score independent pieces of a search in forked processes: the search's layouts share nothing but the context's
caches, whose values never depend on what was computed before (tests/search/test_search_memo.py), so each piece can
be scored in a copy of the process and the answers merged in the order a single process would have produced them.

Forking copies the loaded model, cluster and caches without pickling them; only the answers travel back. Used only
where the platform forks safely (Linux) and the search is large enough to pay for the processes
(planner.search.engine.scan_workers); PLANNER_SEARCH_WORKERS=N sets the number of processes (1: none).
"""

from __future__ import annotations

import os
import pickle
import selectors
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from planner.errors import InputError
from planner.names import safe_line

WORKERS_ENV = "PLANNER_SEARCH_WORKERS"
# A cap, not a measured optimum: each process recomputes the caches its layouts share and the parent unpickles every
# answer (on 2 cores, 2 processes gave 1.3x, not 2x: docs/performance.md); more than 2 was never measured here.
MAX_WORKERS = 8


def available_cores() -> int:
    """The cores this process may run on (its affinity where the platform reports it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def can_fork() -> bool:
    """Linux only: macOS and Windows start processes by spawning, which re-imports the package (slower than scoring
    the layouts here) and macOS's system libraries are not fork-safe."""
    return sys.platform.startswith("linux") and hasattr(os, "fork")


# Libraries whose native threads make a fork unsafe once they are loaded: JAX says so itself at every fork ("os.fork()
# is incompatible with multithreaded code, and JAX is multithreaded, so this will likely lead to a deadlock", seen in
# this project's test process once its JAX tests had run), and PyTorch's intra-op pools are the same kind. The CLI
# never imports them; a process that has (a notebook, the test run) scores in one process. NumPy's OpenBLAS pool is
# fork-safe (it shuts its threads down at a fork: pthread_atfork).
FORK_UNSAFE_MODULES = ("jax", "torch")


def fork_safe() -> bool:
    """No thread but this one that a fork could leave holding a lock in the child: no other Python thread, and none
    of FORK_UNSAFE_MODULES loaded."""
    return threading.active_count() == 1 and not any(m in sys.modules for m in FORK_UNSAFE_MODULES)


def requested_workers() -> int | None:
    """PLANNER_SEARCH_WORKERS as a positive count, None when unset."""
    raw = os.environ.get(WORKERS_ENV, "").strip()
    if not raw:
        return None
    if not (raw.isdigit() and int(raw) > 0):
        raise InputError(f"{WORKERS_ENV} must be a positive whole number of processes (got {safe_line(raw, 40)!r}); "
                         "unset it to let the search choose, or set 1 for none")
    return int(raw)


def fork_map(task: Callable[[int], Any], n: int, workers: int, here: bool = False) -> list[Any]:
    """[task(0), ..., task(n - 1)], computed in `workers` forked processes (piece i in process i mod workers, so each
    gets a spread of the pieces); every answer must pickle. With `here`, this process is the first of the `workers`:
    it computes its pieces while the others run (one process fewer, and those answers are neither pickled nor copied).
    Plain os.fork and one pipe per process, no pool: a child runs only `task`, restores the default signal handlers
    (the CLI's SIGTERM handler raises SystemExit, which would run the parent's clean-ups in the child) and leaves with
    os._exit, so nothing of the parent's runs twice. An exception in a child is raised here (a piece computed here
    raises first); a child that dies without an answer is a RuntimeError."""
    chunks = [list(range(w, n, workers)) for w in range(workers)]
    mine = chunks.pop(0) if here else []
    children: list[tuple[int, int]] = []  # (pid, read end of its pipe)
    out: list[Any] = [None] * n
    try:
        for idx in chunks:
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: never returns
                os.close(r)
                _child(task, idx, w)
            os.close(w)
            children.append((pid, r))
        for i in mine:
            out[i] = task(i)
        payloads = _read_all([r for _, r in children])
    except BaseException:
        for pid, _ in children:  # an interrupted merge leaves no process behind
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        raise
    finally:
        for pid, r in children:
            os.close(r)
            os.waitpid(pid, 0)
    for (pid, _), payload in zip(children, payloads, strict=True):
        if not payload:
            raise RuntimeError(f"search process {pid} ended without an answer")
        kind, value = pickle.loads(payload)
        if kind == "error":
            raise value
        for i, v in value:
            out[i] = v
    return out


def _child(task: Callable[[int], Any], idx: list[int], fd: int) -> None:
    code = 0
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        payload = pickle.dumps(("ok", [(i, task(i)) for i in idx]), protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException as e:  # noqa: BLE001  # handed to the parent, which raises it
        code = 1
        try:
            payload = pickle.dumps(("error", e), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001  # an exception that does not pickle travels as its text
            payload = pickle.dumps(("error", RuntimeError(f"{type(e).__name__}: {e}")))
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os._exit(code)


def _read_all(fds: list[int]) -> list[bytes]:
    """Everything written to each pipe until its writer closes it, read side by side (a child blocks on a full pipe
    until its reader drains it)."""
    bufs = {fd: bytearray() for fd in fds}
    with selectors.DefaultSelector() as sel:
        for fd in fds:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            for key, _ in sel.select():
                chunk = os.read(key.fd, 1 << 20)
                if chunk:
                    bufs[key.fd] += chunk
                else:
                    sel.unregister(key.fd)
    return [bytes(bufs[fd]) for fd in fds]
