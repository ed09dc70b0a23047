"""Where a stage's heavy work runs on the launching machine: a fresh process, and memory handed back."""

from __future__ import annotations

import ctypes
import gc
import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def in_fresh_process(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a spawned process: the trainers' memory goes back to the system when it exits,
    and the launcher's heap (Beam's runner state from the documents job) is not added to theirs."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def release_freed_memory() -> None:
    """Hand the heap the in-process runner freed back to the system (glibc keeps it otherwise), so the
    later stages do not stack on the runner's high-water mark."""
    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass
