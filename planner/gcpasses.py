"""Fewer passes of Python's cyclic garbage collector where a run keeps nearly everything it allocates: the search, and
the whole `plan` command around it (planner.ui.cli). Plain data and the standard library only, so the CLI can use it
before it imports anything heavy."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

# Allocations between two young-generation collections of Python's cyclic garbage collector during a search (CPython's
# default 700). A search keeps most of what it allocates (every scored plan, its figures and its memory screen) until
# it ranks them, so each young collection finds little garbage and promotes the survivors, and the full collections
# that follow walk the whole growing heap: 15% of the single-process CPU time of DeepSeek-V2 on tpu-v5px256 and 8% of
# DeepSeek-V3 on h100x1024 went to the collector (gc.callbacks, 2026-11-27). At 50,000 the whole `plan` process of
# DeepSeek-V2 on tpu-v5px256 took 3.49 s of CPU against 3.99 s (least of 7 alternating runs, 2 cores), DeepSeek-V3 on
# h100x1024 the same within the machine's noise; the answers never depend on it (byte-identical JSON) and the peak
# memory did not move (ru_maxrss). The previous thresholds are restored when the block ends. The `plan` command holds
# it for its whole run as well (2026-11-28): after a large search the heap holds every scored plan, and the catalog
# and error-band files read after it (planner.analysis.bands) set off collections that walk it (one full collection
# there: 0.13 s after DeepSeek-V2 on tpu-v5px256's search); whole-process medians of 7 alternating runs, DeepSeek-V3
# on h100x1024 0.98 -> 0.93 s, DeepSeek-V2 on tpu-v5px256 1.67 -> 1.64 s, the same bytes.
SEARCH_GC_YOUNG_THRESHOLD = 50_000


@contextmanager
def fewer_gc_passes() -> Iterator[None]:
    """The cyclic collector's young threshold raised to SEARCH_GC_YOUNG_THRESHOLD for the block (never lowered)."""
    before = gc.get_threshold()
    gc.set_threshold(max(before[0], SEARCH_GC_YOUNG_THRESHOLD), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
