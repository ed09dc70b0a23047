"""Python's cyclic garbage collector, run less often in the processes that run the build's steps, and the
freed heap handed back to the system between steps that would otherwise stack on each other's high-water mark.

The steps make millions of short-lived containers (word lists, sentences, rows, tuples) and few reference
cycles. At Python's default thresholds a young collection runs every 700 net allocations, and each full one
walks every long-lived object (tokenizer tables, word caches): on 100 MB of Wikipedia-shaped text the collector
took about a tenth of the BERT stage's CPU. The example stages' workers are relaxed for good in their DoFns'
``setup`` (Beam and Dask workers run nothing else); the launcher only while it builds (``relaxed``). The
documents job's workers keep Python's thresholds: there the gain was inside the machine's noise.

A worker runs one step after another in one process. What a step frees stays with the process: glibc keeps
freed heap pages, and Arrow's allocator (mimalloc) its freed segments, so a step that allocates through
the other one adds its peak on top (``release_freed_memory``).
"""

from __future__ import annotations

import ctypes
import gc
import importlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pyarrow as pa

THRESHOLDS = (50_000, 10, 10)  # young collections 70x rarer; the older generations keep Python's ratios


def relax() -> None:
    """Fewer collections for the rest of this process (a worker's); a higher threshold set by its owner stays."""
    if gc.get_threshold()[0] < THRESHOLDS[0]:
        gc.set_threshold(*THRESHOLDS)


@contextmanager
def relaxed() -> Iterator[None]:
    """Fewer collections inside the block; the process's own thresholds afterwards."""
    before = gc.get_threshold()
    relax()
    try:
        yield
    finally:
        gc.set_threshold(*before)


@contextmanager
def paused() -> Iterator[None]:
    """No collection inside the block: for imports, which make hundreds of thousands of lasting objects and next
    to no garbage, yet trigger collections that walk them over and over (importing Beam, the Dask runner and our
    steps: 2.5 CPU-s with the collector running, 2.0-2.1 with it paused)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def import_for_good(modules: Sequence[str]) -> None:
    """Import ``modules`` with the collector paused, then freeze all the process holds: in a process that keeps them
    to its end (a forkserver, a Dask worker), no full collection walks them again, nor does its exit."""
    with paused():
        for name in modules:
            importlib.import_module(name)
    gc.freeze()


def release_freed_memory() -> None:
    """Hand back to the system what this process has freed: unreachable cycles, glibc's free heap, Arrow's
    unused pool memory."""
    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass
    pa.default_memory_pool().release_unused()
