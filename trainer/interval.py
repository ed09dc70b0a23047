"""The training log line of an interval: means since the last line, learning rate, gradient norm, throughput, MFU."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from corpusforge.trainer.checkpoint import unwrap
from corpusforge.trainer.data import DataWaitTimer
from corpusforge.trainer.metrics import device_peak_flops, flops_per_token
from corpusforge.trainer.models import count_params
from corpusforge.trainer.objective import summarize
from corpusforge.trainer.prepare import Run


@dataclass
class Interval:
    """Sums and wall time since the last log line; training time only (evaluation is excluded)."""

    sums: torch.Tensor | None = None
    steps: int = 0
    seconds: float = 0.0
    total_steps: int = 0
    total_seconds: float = 0.0
    started: float = field(default_factory=time.perf_counter)

    def add(self, sums: torch.Tensor) -> None:
        self.sums = sums if self.sums is None else self.sums + sums
        self.steps += 1

    def pause(self) -> None:
        now = time.perf_counter()
        self.seconds += now - self.started
        self.started = now

    def resume(self) -> None:
        self.started = time.perf_counter()

    def reset(self) -> None:
        self.pause()
        self.total_steps += self.steps
        self.total_seconds += self.seconds
        self.sums, self.steps, self.seconds = None, 0, 0.0


def interval_record(run: Run, interval: Interval, grad_norm: float, lr: float, timer: DataWaitTimer) -> dict[str, Any]:
    """The log line of an interval: means, lr, gradient norm, throughput (and MFU, memory on a known GPU)."""
    world = run.world
    if world.size > 1:
        dist.all_reduce(interval.sums)
    interval.pause()
    record = summarize(run.task, interval.sums)
    tokens_per_s = tokens_per_step(run) * interval.steps / interval.seconds
    record.update(
        lr=lr, grad_norm=grad_norm, tokens_per_s=tokens_per_s, examples_per_s=tokens_per_s / run.seq_len, data_wait=timer.fraction()
    )
    peak = device_peak_flops(world.device)
    if peak is not None:
        flops_token = flops_per_token(count_params(unwrap(run.model)), run.mcfg.n_layer, run.mcfg.n_embd, run.seq_len)
        record["mfu"] = tokens_per_s * flops_token / (peak * world.size)
        record["gpu_memory_gb"] = torch.cuda.max_memory_allocated(world.device) / 1e9
    return record


def tokens_per_step(run: Run) -> int:
    return run.cfg.batch_size * run.accum * run.world.size * run.seq_len
