"""Score independent pieces of a search in forked processes: the search's layouts share nothing but the context's
caches, whose values never depend on what was computed before (tests/search/test_search_memo.py), so each piece can
be scored in a copy of the process and the answers merged in the order a single process would have produced them.

Forking copies the loaded model, cluster and caches without pickling them; only the answers travel back. Used only
where the platform forks safely (Linux) and the search is large enough to pay for the processes
(planner.search.engine.scan_workers); PLANNER_SEARCH_WORKERS=N sets the number of processes (1: none).
"""

from __future__ import annotations

import atexit
import os
import pickle
import selectors
import signal
import struct
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
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


def _reap_finished() -> None:
    """Reap the forked processes a Deferred left running to their exit (os.waitpid without waiting): a process ends
    after its last answer, and the parent does not wait for the end of it (an exit unmaps the copied heap)."""
    for pid in list(_UNREAPED):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            _UNREAPED.remove(pid)


_UNREAPED: list[int] = []


@atexit.register
def _reap_at_exit() -> None:
    """Wait for the forked processes still ending when this one ends, so that their CPU time is counted as this
    process's children's (resource.RUSAGE_CHILDREN, benchmarks/search_speed.py); they end at once (their last answer
    sent), so this waits for an exit or two in progress."""
    while _UNREAPED:
        try:
            os.waitpid(_UNREAPED.pop(), 0)
        except ChildProcessError:
            pass


def fork_map(task: Callable[[int], Any], n: int, workers: int, here: bool = False) -> list[Any]:
    """[task(0), ..., task(n - 1)], computed in `workers` forked processes (piece i in process i mod workers, so each
    gets a spread of the pieces); every answer must pickle. With `here`, this process is the first of the `workers`:
    it computes its pieces while the others run (one process fewer, and those answers are neither pickled nor copied).
    Plain os.fork and one pipe per process, no pool: a child runs only `task`, restores the default signal handlers
    (the CLI's SIGTERM handler raises SystemExit, which would run the parent's clean-ups in the child) and leaves with
    os._exit, so nothing of the parent's runs twice. An exception in a child is raised here (a piece computed here
    raises first); a child that dies without an answer is a RuntimeError."""
    _reap_finished()
    chunks = _dealt(n, workers)
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
            _kill(pid)
        raise
    finally:
        for pid, r in children:
            os.close(r)
            os.waitpid(pid, 0)
    for (pid, _), payload in zip(children, payloads, strict=True):
        for i, v in _unpacked(pid, payload):
            out[i] = v
    return out


def _dealt(n: int, workers: int) -> list[list[int]]:
    """Pieces 0..n-1 dealt to `workers` processes, piece i to process i mod workers (each gets a spread of them)."""
    return [list(range(w, n, workers)) for w in range(workers)]


def _child(task: Callable[[int], Any], idx: list[int], fd: int) -> None:
    code = 0
    try:
        _default_signals()
        payload = pickle.dumps(("ok", [(i, task(i)) for i in idx]), protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException as e:  # noqa: BLE001  # handed to the parent, which raises it
        code, payload = 1, _error_payload(e)
    try:
        _write_all(fd, payload)
    finally:
        os._exit(code)


def _default_signals() -> None:
    """A child's SIGTERM and SIGINT as the platform's defaults: the CLI's handler raises SystemExit, which would run
    the parent's clean-ups in the child."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _error_payload(e: BaseException) -> bytes:
    """An exception for the parent to raise; one that does not pickle travels as its text."""
    try:
        return pickle.dumps(("error", e), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001
        return pickle.dumps(("error", RuntimeError(f"{type(e).__name__}: {e}")))


def _write_all(fd: int, payload: bytes) -> None:
    view = memoryview(payload)
    while view:
        view = view[os.write(fd, view):]


# ---- deferred answers: a brief first, the full answer only where the parent asks for it

_LENGTH = struct.Struct("!Q")  # the byte count that frames each message of a Deferred's pipes


def _send(fd: int, payload: bytes) -> None:
    _write_all(fd, _LENGTH.pack(len(payload)) + payload)


def _receive(fd: int) -> bytes | None:
    """One framed message, None where the writer closed the pipe first."""
    head = _read_exactly(fd, _LENGTH.size)
    return None if head is None else _read_exactly(fd, _LENGTH.unpack(head)[0])


def _read_exactly(fd: int, size: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < size:
        chunk = os.read(fd, min(size - len(buf), 1 << 20))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


class Deferred:
    """fork_deferred's answers. `answers[i]`: task(i) for the pieces this process computed, brief(task(i)) for the
    forked ones; fetch(pieces) brings the full answers of forked pieces, one round trip. Every forked process holds
    its answers until the parent says which it wants (fetch, once; leaving the block without it wants none), sends
    those and exits; the parent does not wait for their exits (_reap_finished reaps them later). A block left by an
    exception kills them."""

    def __init__(self, answers: list[Any], children: list[tuple[int, int, int, list[int]]]):
        self.answers = answers
        self._children = children  # (pid, read end of its answers, write end of its commands, its pieces)
        self._asked = False
        self._open = {fd for _, r, w, _ in children for fd in (r, w)}

    def fetch(self, pieces: Iterable[int]) -> dict[int, Any]:
        """The full answers of these forked pieces (a piece computed here: its answer as it is)."""
        if self._asked:
            raise RuntimeError("a Deferred's forked answers are fetched once")
        wanted = set(pieces)
        out = {i: self.answers[i] for i in wanted if not any(i in c[3] for c in self._children)}
        self._asked = True
        for pid, r, w, idx in self._children:
            mine = sorted(wanted & set(idx))
            try:
                _send(w, pickle.dumps(mine, protocol=pickle.HIGHEST_PROTOCOL))
            except BrokenPipeError:  # the process is gone: an error below where its answers were wanted
                pass
            self._close(w)
            if mine:
                out.update(_unpacked(pid, _receive(r)))
        return out

    def __enter__(self) -> Deferred:
        return self

    @contextmanager
    def ending_on_error(self) -> Iterator[None]:
        """A block whose exception ends the forked processes (as leaving the Deferred's own block with it does),
        for the code between fork_deferred and that block."""
        try:
            yield
        except BaseException as e:
            self.__exit__(type(e), e, e.__traceback__)
            raise

    def _close(self, fd: int) -> None:
        if fd in self._open:
            self._open.discard(fd)
            os.close(fd)

    def __exit__(self, kind, value, tb) -> None:
        for pid, r, w, _ in self._children:
            if kind is not None:
                _kill(pid)
            self._close(w)  # end of the commands: a process not asked wants nothing and exits
            self._close(r)
            _UNREAPED.append(pid)
        _reap_finished()


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _unpacked(pid: int, payload: bytes | None) -> list[tuple[int, Any]]:
    """A forked process's (piece, answer) pairs; its exception raised here."""
    if not payload:
        raise RuntimeError(f"search process {pid} ended without an answer")
    kind, value = pickle.loads(payload)
    if kind == "error":
        raise value
    return value


def fork_deferred(task: Callable[[int], Any], brief: Callable[[Any], Any], n: int, workers: int,
                  pack: Callable[[Any], Any] | None = None) -> Deferred:
    """fork_map(task, n, workers, here=True) whose forked processes send brief(answer) first and keep the answers
    until the parent asks for the ones it wants (Deferred.fetch), which they send as pack(answer) (the answer itself
    without `pack`; either must pickle): where the parent needs the full answer of few pieces (the search kept among
    several, planner.search.dispatchers), the others are neither packed, pickled, sent nor unpickled. Use it as a
    context manager: leaving the block ends the forked processes."""
    _reap_finished()
    chunks = _dealt(n, workers)
    mine = chunks.pop(0)
    children: list[tuple[int, int, int, list[int]]] = []
    answers: list[Any] = [None] * n
    try:
        for idx in chunks:
            r_out, w_out = os.pipe()
            r_cmd, w_cmd = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: never returns
                # the parent's ends of this and the earlier processes' pipes: held here, an earlier process would not
                # see its commands end when the parent closes them
                for fd in (r_out, w_cmd, *(fd for _, r, w, _ in children for fd in (r, w))):
                    os.close(fd)
                _deferred_child(task, brief, pack or _same, idx, w_out, r_cmd)
            os.close(w_out)
            os.close(r_cmd)
            children.append((pid, r_out, w_cmd, idx))
        for i in mine:
            answers[i] = task(i)
        for pid, r, _, _ in children:
            for i, v in _unpacked(pid, _receive(r)):
                answers[i] = v
    except BaseException:
        for pid, r, w, _ in children:
            _kill(pid)
            os.close(r)
            os.close(w)
            _UNREAPED.append(pid)
        raise
    return Deferred(answers, children)


def _same(answer: Any) -> Any:
    return answer


def _deferred_child(task: Callable[[int], Any], brief: Callable[[Any], Any], pack: Callable[[Any], Any],
                    idx: list[int], out_fd: int, cmd_fd: int) -> None:
    code = 0
    try:
        _default_signals()
        done = {i: task(i) for i in idx}
        _send(out_fd, pickle.dumps(("ok", [(i, brief(done[i])) for i in idx]), protocol=pickle.HIGHEST_PROTOCOL))
        asked = _receive(cmd_fd)
        wanted = pickle.loads(asked) if asked else []
        if wanted:
            _send(out_fd, pickle.dumps(("ok", [(i, pack(done[i])) for i in wanted]), protocol=pickle.HIGHEST_PROTOCOL))
    except BaseException as e:  # noqa: BLE001  # handed to the parent, which raises it
        code = 1
        try:
            _send(out_fd, _error_payload(e))
        except OSError:  # the parent is gone
            pass
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
