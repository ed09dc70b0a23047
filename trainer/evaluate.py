"""Held-out evaluation: which examples are held out, and their loss, accuracy and perplexity.

Every evaluation covers every held-out example (the partial last batch included) unless
``train.eval_batches`` caps it; each rank scores its own share and the sums are all-reduced.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from corpusforge.core import storage
from corpusforge.core.config import TrainConfig
from corpusforge.shards.reader import read_manifest
from corpusforge.trainer.data import Batch, ShardStream, to_model_inputs
from corpusforge.trainer.device import autocast
from corpusforge.trainer.distributed import World
from corpusforge.trainer.objective import batch_sums, forward, loss_keys, summarize


@dataclass(frozen=True)
class HeldOut:
    """Examples [lo, hi) of a shard directory that are evaluated and never trained on."""

    shards: str
    example_range: tuple[int, int]


def held_out_set(split: dict[str, Any], shards: storage.PathLike, eval_shards: storage.PathLike | None) -> HeldOut | None:
    """Separate eval shards whole, else the split's held-out tail of the training shards, else nothing."""
    if eval_shards is not None:
        return HeldOut(os.fspath(eval_shards), (0, read_manifest(eval_shards).examples))
    if split["held_out"] is not None:
        return HeldOut(os.fspath(shards), tuple(split["held_out"]))
    return None


def held_out_batches(held_out: HeldOut, batch_size: int, world: World, max_batches: int | None) -> Iterator[Batch]:
    """This rank's share of every held-out example in file order: whole global batches, then the rest split evenly.

    ``max_batches`` caps the whole global batches (the rest is then skipped): a figure on a sample.
    """
    lo, hi = held_out.example_range
    per_global = batch_size * world.size
    full = (hi - lo) // per_global
    if max_batches is not None and full >= max_batches:
        full, hi = max_batches, lo + max_batches * per_global
    full_end = lo + full * per_global
    if full:
        stream = ShardStream(
            held_out.shards, batch_size, rank=world.rank, world_size=world.size, shuffle=False, epochs=1, example_range=(lo, full_end)
        )
        yield from stream
    rest = hi - full_end
    first, end = full_end + rest * world.rank // world.size, full_end + rest * (world.rank + 1) // world.size
    if end > first:
        yield from ShardStream(held_out.shards, end - first, shuffle=False, epochs=1, example_range=(first, end))


@torch.no_grad()
def evaluate(model: nn.Module, held_out: HeldOut, cfg: TrainConfig, world: World, vocab_sha256: str) -> dict[str, Any]:
    """Held-out loss and accuracy (perplexity = exp of the token-level loss), means over examples."""
    manifest = read_manifest(held_out.shards)
    if manifest.vocab.sha256 != vocab_sha256:
        raise ValueError(f"{held_out.shards}: held-out shards use another vocabulary than the training shards")
    task = manifest.task
    sums = torch.zeros(len(loss_keys(task)) + (5 if task == "bert" else 3), device=world.device)
    model.eval()
    for raw in held_out_batches(held_out, cfg.batch_size, world, cfg.eval_batches):
        batch = to_model_inputs(raw, world.device, task)
        with autocast(world.device, cfg.precision):
            out, counts = forward(model, task, batch)
        sums += batch_sums(task, out, counts, batch["input_ids"].shape[0])
    model.train()
    if world.size > 1:
        dist.all_reduce(sums)
    results = summarize(task, sums)
    results["perplexity"] = float(np.exp(results["mlm_loss" if task == "bert" else "loss"]))
    results["examples"] = int(sums[len(loss_keys(task))].item())
    results.update(shards=storage.resolve(held_out.shards), example_range=list(held_out.example_range))
    return results


def figures(results: dict[str, Any], separator: str = ", ") -> str:
    """The held-out figures as ``loss 5.12, mlm_accuracy 0.05, ...`` (the keys eval.json and metrics.jsonl use)."""
    return separator.join(f"{key} {value:.4g}" for key, value in results.items() if isinstance(value, float))


def describe_eval(results: dict[str, Any]) -> str:
    """One line for the console: the figures, then which examples they come from."""
    lo, hi = results["example_range"]
    return f"eval: {figures(results)} on {results['examples']} examples of [{lo}, {hi}) in {results['shards']}"
