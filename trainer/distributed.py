"""The process group: which rank this process is, on which device, under torchrun or alone.

Under torchrun (``RANK`` and ``WORLD_SIZE`` set) a process joins the group (NCCL on GPU, gloo on CPU)
and takes ``cuda:<LOCAL_RANK>``; alone it is rank 0 of a world of one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from corpusforge.trainer.device import pick_device


@dataclass(frozen=True)
class World:
    rank: int
    size: int
    local_rank: int
    device: torch.device

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_world(device: str | None = None) -> World:
    """Join the torchrun process group when there is one; pick cuda:<local rank> or cpu."""
    rank, size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    dev = pick_device(device)
    dev = torch.device(f"cuda:{local_rank}") if dev.type == "cuda" and dev.index is None else dev
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if size > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", rank=rank, world_size=size)
    return World(rank, size, local_rank, dev)
