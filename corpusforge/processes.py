"""Where a stage's heavy work runs on the launching machine: a fresh process, whose memory goes back when it ends."""

from __future__ import annotations

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
