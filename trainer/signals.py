"""Stop on SIGINT/SIGTERM at a step boundary: the loop finishes its step, checkpoints, then stops.

A first signal only sets a flag the step loop reads after every step (on every rank at once, so
all ranks save the same step); a second one interrupts at once.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from corpusforge.trainer.distributed import World

logger = logging.getLogger(__name__)


@dataclass
class StopRequest:
    """Set by SIGINT/SIGTERM; the step loop checks it after every step."""

    signal: str | None = None


@contextlib.contextmanager
def stop_signals() -> Iterator[StopRequest]:
    """A first SIGINT/SIGTERM asks the loop to checkpoint and stop; a second one interrupts at once."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request  # signal handlers can only be installed from the main thread
        return

    def handler(signum: int, frame: Any) -> None:
        if request.signal is not None:
            raise KeyboardInterrupt
        request.signal = signal.Signals(signum).name
        logger.warning("%s: finishing this step and writing a checkpoint (again to stop at once)", request.signal)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield request
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def stop_requested(request: StopRequest, world: World) -> bool:
    """True on every rank as soon as one rank was signalled, so all ranks save the same step."""
    flag = request.signal is not None
    if world.size > 1:
        tensor = torch.tensor([float(flag)], device=world.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        flag = bool(tensor.item())
    return flag
