"""Everything a training run needs before its first step: checked shards, the split, model, optimizer, resume point.

Without separate eval shards the last examples of the training directory's manifest are held out
(``data_split``); a resumed run keeps its checkpoint's split. Under several ranks the model is
wrapped in DDP and each rank reads its own disjoint slice of every global batch
(``trainer.data.ShardStream``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from corpusforge.core import storage
from corpusforge.core.config import TrainConfig
from corpusforge.shards.cache import default_cache
from corpusforge.shards.reader import ShardError, read_manifest
from corpusforge.shards.verify import verify
from corpusforge.trainer.checkpoint import load_checkpoint, read_state, resolve_checkpoint
from corpusforge.trainer.data import ShardStream, holdout_split
from corpusforge.trainer.distributed import World
from corpusforge.trainer.evaluate import HeldOut, held_out_set
from corpusforge.trainer.models import ModelConfig, build_model, model_config
from corpusforge.trainer.optim import make_optimizer, make_scheduler, recipe


def check_shards(directories: list[storage.PathLike], world: World, progress: bool, vocab: storage.PathLike | None = None) -> None:
    """Rank 0 reads every shard once (size, sha256, schema) so a bad file fails now, by name, not hours in.

    A URI's shards are downloaded into the shard cache on the way, so the training that follows reads them locally.
    """
    if world.main:
        cache = default_cache()
        problems = [line for directory in directories for line in verify(directory, progress=progress, vocab=vocab, cache=cache)]
        if problems:
            raise ShardError("; ".join(problems))
    if world.size > 1:
        dist.barrier()


def data_split(
    cfg: TrainConfig, shards: storage.PathLike, eval_shards: storage.PathLike | None, checkpoint: storage.PathLike | None
) -> dict[str, Any]:
    """Which examples of ``shards`` train and which are held out (``trainer.data.holdout_split``).

    A resumed run keeps its checkpoint's split whatever the configuration says now, so it neither
    trains on what it held out nor evaluates on what it trained on. Separate eval shards hold nothing out.
    """
    examples = read_manifest(shards).examples
    if checkpoint is None:
        return holdout_split(examples, 0 if eval_shards is not None else cfg.holdout_examples)
    split = read_state(checkpoint).get("split") or holdout_split(examples, 0)  # older checkpoints trained on all
    if split["examples"] != examples:
        raise ValueError(f"{checkpoint}: trained on {split['examples']} examples, {shards} holds {examples}")
    return split


def make_stream(cfg: TrainConfig, shards: storage.PathLike, world: World, split: dict[str, Any] | None = None) -> ShardStream:
    """This rank's endless stream of micro-batches over the split's training range (the one ``train`` consumes)."""
    split = split or data_split(cfg, shards, None, None)
    return ShardStream(
        shards, cfg.batch_size, rank=world.rank, world_size=world.size, seed=cfg.seed, epochs=None, example_range=tuple(split["train"])
    )


def accumulation_steps(cfg: TrainConfig, world: World) -> int:
    per_step = cfg.batch_size * world.size
    target = cfg.global_batch_size or per_step
    if target % per_step:
        raise ValueError(f"global batch {target} is not a multiple of batch {cfg.batch_size} x {world.size} ranks")
    return target // per_step


def sequence_length(manifest: Any) -> int:
    """Tokens the model sees per example: L for BERT, T - 1 = seq_len for GPT."""
    info = manifest.shard_schema
    return info.max_seq_length if manifest.task == "bert" else info.seq_len


@dataclass
class Run:
    """What ``prepare`` builds once and the step loop uses: data, model, optimizer and where to resume."""

    cfg: TrainConfig
    world: World
    run_dir: str
    shards: str
    split: dict[str, Any]
    held_out: HeldOut | None
    stream: ShardStream
    mcfg: ModelConfig
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    accum: int
    start_step: int

    @property
    def task(self) -> str:
        return self.stream.task

    @property
    def seq_len(self) -> int:
        return sequence_length(self.stream.manifest)


def prepare(
    cfg: TrainConfig,
    shards: str,
    run_dir: str,
    eval_shards: storage.PathLike | None,
    resume: storage.PathLike | None,
    world: World,
    progress: bool,
) -> Run:
    """Check the shards, cut the split, build model and optimizer, restore a checkpoint when resuming."""
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    if cfg.verify_shards:
        check_shards([shards] + ([eval_shards] if eval_shards is not None else []), world, progress, cfg.vocab)
    ckpt = resolve_checkpoint(resume) if resume is not None else None
    split = data_split(cfg, shards, eval_shards, ckpt)
    stream = make_stream(cfg, shards, world, split)
    manifest = stream.manifest
    mcfg = model_config(cfg.model, manifest.vocab.size, cfg.dropout, cfg.pre_ln)
    if mcfg.family != manifest.task:
        raise ValueError(f"model {cfg.model} is a {mcfg.family} model but {shards} holds {manifest.task} examples")
    if sequence_length(manifest) > mcfg.max_positions:
        raise ValueError(f"{shards}: sequences of {sequence_length(manifest)} tokens exceed {cfg.model}'s {mcfg.max_positions} positions")

    torch.manual_seed(cfg.seed)  # identical initial weights on every rank
    model = build_model(mcfg).to(world.device)
    r = recipe(manifest.task, cfg.steps, cfg.lr, cfg.warmup_steps, cfg.weight_decay)
    optimizer = make_optimizer(model, r, world.device)
    scheduler = make_scheduler(optimizer, cfg.steps, r)
    start_step = 0
    if ckpt is not None:
        state = load_checkpoint(ckpt, model, optimizer, scheduler, world.device)
        if state["model_config"] != mcfg.to_dict():
            raise ValueError(f"{ckpt}: checkpoint model {state['model_config']} differs from {mcfg.to_dict()}")
        stream.load_state_dict(state["reader"])
        start_step = state["step"]
    if cfg.compile and world.device.type == "cuda":
        model = torch.compile(model)
    if world.size > 1:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[world.local_rank] if world.device.type == "cuda" else None)
    held_out = held_out_set(split, shards, eval_shards)
    return Run(
        cfg, world, run_dir, shards, split, held_out, stream, mcfg, model, optimizer, scheduler, accumulation_steps(cfg, world), start_step
    )
