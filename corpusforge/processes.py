"""The processes a build starts on the launching machine: a stage's fresh process, and their allocator's settings."""

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
# thread can hold at most ~34 MB more (1,024 chunks of each size up to 1 KB). Read when a process starts, so it is
# set for the processes the build starts (Beam's forkserver and its workers, the vocabulary's process, Dask's).
MALLOC_TUNABLES = "glibc.malloc.tcache_count=1024"


def in_fresh_process(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a spawned process: the trainers' memory goes back to the system when it exits,
    and the launcher's heap (Beam's runner state from the documents job) is not added to theirs."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


@contextmanager
def tuned_allocator() -> Iterator[None]:
    """Processes started inside get ``MALLOC_TUNABLES`` (after the user's own ``GLIBC_TUNABLES``, which win); other
    C libraries ignore the variable. The launcher's environment is as it was afterwards."""
    before = os.environ.get("GLIBC_TUNABLES")
    os.environ["GLIBC_TUNABLES"] = f"{MALLOC_TUNABLES}:{before}" if before else MALLOC_TUNABLES
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("GLIBC_TUNABLES", None)
        else:
            os.environ["GLIBC_TUNABLES"] = before
