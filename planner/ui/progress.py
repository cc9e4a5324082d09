"""A spinner on stderr for work that takes more than about a second (search, --min-devices, report,
validate). It never writes to stdout, is off under --json and when stderr is not a terminal, and is
erased when the work ends, so neither stdout's bytes nor anything else printed depends on timing."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

from rich.console import Console
from rich.markup import escape

SHOW_AFTER_S = 1.0  # work shorter than this shows nothing


@contextmanager
def progress(message: str, enabled: bool = True, console: Console | None = None,
             show_after_s: float = SHOW_AFTER_S) -> Iterator[None]:
    """Show `message` with a spinner on stderr while the block runs, starting after `show_after_s`."""
    con = console or Console(stderr=True)
    if not enabled or not con.is_terminal:
        yield
        return
    shown = "".join(ch if ch.isprintable() else "?" for ch in message)[:200]  # names are data, not markup
    status = con.status(escape(shown), spinner="dots")
    lock = threading.Lock()
    state = {"done": False}

    def start() -> None:
        with lock:
            if not state["done"]:
                status.start()

    timer = threading.Timer(show_after_s, start)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        with lock:
            state["done"] = True
            status.stop()
