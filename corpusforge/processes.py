"""Where a stage's heavy work runs on the launching machine: a fresh process, whose memory goes back when it ends."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

# glibc caches at most 7 freed chunks of each small size per thread (its tcache); the rest go back through its bins
# (consolidation, unlinking). HF's trainers allocate and free a few small strings per word fed, a few hundred words
# at a time (``word_counts.FEED_CHARS``): with 1,024 chunks cached their feed takes about a third less CPU, and a
# thread holds at most ~34 MB more (1,024 chunks of each size up to 1 KB). glibc reads it when a process starts, so
# the vocabulary's process is started with it; Beam's workers are not (the BERT stage took 1.11x the CPU with it).
MALLOC_TUNABLES = "glibc.malloc.tcache_count=1024"


def in_fresh_process(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a spawned process started with ``MALLOC_TUNABLES``: the trainers' memory goes back to the
    system when it exits, and the launcher's heap (Beam's runner state from the documents job) is not added to theirs."""
    with _tuned_allocator(), ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


@contextmanager
def _tuned_allocator() -> Iterator[None]:
    """Processes started inside get ``MALLOC_TUNABLES`` (before the user's own ``GLIBC_TUNABLES``: theirs win); other
    C libraries ignore the variable. This process's environment is as it was afterwards."""
    before = os.environ.get("GLIBC_TUNABLES")
    os.environ["GLIBC_TUNABLES"] = f"{MALLOC_TUNABLES}:{before}" if before else MALLOC_TUNABLES
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("GLIBC_TUNABLES", None)
        else:
            os.environ["GLIBC_TUNABLES"] = before
