"""The training loop: stream shards, accumulate to the global batch, step, log, checkpoint, evaluate.

``train`` reads top to bottom: ``prepare`` (``trainer.prepare``: shards, split, model, optimizer,
resume), a header of what is about to train (``describe_start``), ``run_steps`` (the step loop:
``train_step``, interval logging, held-out evaluation every ``train.eval_every`` steps, printed and
logged, checkpoints) and the final evaluation (``trainer.evaluate``) into eval.json. Random state is a pure function of (seed, rank, optimizer step), so a resumed run is
bit-identical on CPU to one that never stopped. SIGINT/SIGTERM finish the current step, write a
checkpoint and raise KeyboardInterrupt (``trainer.signals``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader
from tqdm import tqdm

from corpusforge.core import storage
from corpusforge.core.config import TrainConfig
from corpusforge.trainer.checkpoint import checkpoint_dir, prune_checkpoints, save_checkpoint, unwrap
from corpusforge.trainer.data import Batch, DataWaitTimer, to_model_inputs
from corpusforge.trainer.device import autocast
from corpusforge.trainer.distributed import init_world
from corpusforge.trainer.evaluate import describe_eval, evaluate, figures
from corpusforge.trainer.interval import Interval, interval_record, tokens_per_step
from corpusforge.trainer.metrics import MetricsLog, plot_curves
from corpusforge.trainer.models import count_params
from corpusforge.trainer.objective import batch_sums, forward
from corpusforge.trainer.prepare import Run, prepare
from corpusforge.trainer.signals import StopRequest, stop_requested, stop_signals

logger = logging.getLogger(__name__)


def train(
    cfg: TrainConfig,
    shards: storage.PathLike,
    run_dir: storage.PathLike,
    *,
    eval_shards: storage.PathLike | None = None,
    resume: storage.PathLike | None = None,
    device: str | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Train ``cfg.model`` on ``shards`` for ``cfg.steps`` optimizer steps; returns the final evaluation.

    It runs on ``eval_shards`` when given, else on the examples ``data_split`` holds out of ``shards``
    (none: no evaluation, {} returned); eval.json and every checkpoint's state.json record the split.
    """
    world = init_world(device)
    run = prepare(cfg, os.fspath(shards), os.fspath(run_dir), eval_shards, resume, world, progress)
    if world.main:
        tqdm.write(describe_start(run))
    log = MetricsLog(run.run_dir, enabled=world.main)
    try:
        with stop_signals() as stop:
            summary = run_steps(run, log, stop, progress)
        results = final_evaluation(run, log)
        if world.main:
            if storage.is_file(log.path):
                plot_curves(log.path, storage.join(run.run_dir, "curves.png"))
            tqdm.write(describe_run(summary, results, checkpoint_dir(run.run_dir, cfg.steps)))
    finally:
        log.close()
    return results


def run_steps(run: Run, log: MetricsLog, stop: StopRequest, progress: bool) -> dict[str, Any]:
    """Steps ``run.start_step`` to ``cfg.steps``: train, log every ``log_every``, evaluate every ``eval_every``,
    checkpoint every ``checkpoint_every`` and at the end; a stop request checkpoints and raises KeyboardInterrupt.
    Returns the last training record with the run's mean throughput."""
    cfg, world = run.cfg, run.world
    loader = DataLoader(
        run.stream,
        batch_size=None,
        num_workers=cfg.num_workers,
        pin_memory=world.device.type == "cuda",
        generator=torch.Generator().manual_seed(cfg.seed),  # workers' seeds never draw from the step seeds
    )
    timer = DataWaitTimer()
    batches = timer.wrap(iter(loader))  # start the workers now, before the first step seeds dropout
    interval, record = Interval(), {}
    bar = tqdm(total=cfg.steps, initial=run.start_step, disable=not (progress and world.main), desc=f"train {cfg.model}")
    run.model.train()
    for step in range(run.start_step, cfg.steps):
        sums, grad_norm, lr = train_step(run, batches, step)
        interval.add(sums)
        bar.update(1)
        done = step + 1
        if done % cfg.log_every == 0 or done == cfg.steps:
            record = interval_record(run, interval, grad_norm, lr, timer)
            log.log(done, record)
            bar.set_postfix(loss=f"{record['loss']:.3f}", lr=f"{record['lr']:.2e}")
            interval.reset()
            timer.reset()
        if cfg.eval_every and done % cfg.eval_every == 0 and done != cfg.steps and run.held_out is not None:
            interval.pause()
            held_out = evaluate(unwrap(run.model), run.held_out, cfg, world, run.stream.manifest.vocab.sha256)
            log.log(done, held_out, prefix="held_out")
            if world.main:
                tqdm.write(f"step {done}  held-out {figures(held_out, '  ')}")
            interval.resume()
        interrupted = stop_requested(stop, world)
        if (cfg.checkpoint_every and done % cfg.checkpoint_every == 0) or done == cfg.steps or interrupted:
            save(run, done, (done - run.start_step) * run.accum)
        if interrupted:
            bar.close()
            raise KeyboardInterrupt(f"{stop.signal}: stopped after step {done}, checkpoint {checkpoint_dir(run.run_dir, done)}")
    bar.close()
    interval.reset()
    steps, seconds = interval.total_steps, interval.total_seconds
    return {**record, "run_tokens_per_s": tokens_per_step(run) * steps / seconds if seconds else 0.0}


class TrainingDiverged(ValueError):
    """The loss or its gradient stopped being finite: every later step would train on NaN weights."""


def train_step(run: Run, batches: Iterator[Batch], step: int) -> tuple[torch.Tensor, float, float]:
    """One optimizer step over ``run.accum`` micro-batches: (summed loss/accuracy counters, grad norm, lr used)."""
    world, task = run.world, run.task
    torch.manual_seed(step_seed(run.cfg.seed, world.rank, step))
    sums = None
    for micro in range(run.accum):
        batch = to_model_inputs(next(batches), world.device, task)
        sync = micro == run.accum - 1 or world.size == 1
        with contextlib.nullcontext() if sync else run.model.no_sync(), autocast(world.device, run.cfg.precision):
            out, counts = forward(run.model, task, batch)
        (out["loss"] / run.accum).backward()
        step_sums = batch_sums(task, out, counts, batch["input_ids"].shape[0])
        sums = step_sums if sums is None else sums + step_sums
    grad_norm = nn.utils.clip_grad_norm_(run.model.parameters(), run.cfg.grad_clip)
    lr = run.optimizer.param_groups[0]["lr"]  # the rate this step used (the scheduler moves on below)
    if not math.isfinite(grad_norm):  # bf16 autocast has no loss scaler: a non-finite gradient is a divergence
        raise TrainingDiverged(
            f"training diverged at step {step + 1}: gradient norm {float(grad_norm)} at learning rate {lr:.2e}; "
            "no update was made with it and the newest checkpoint is from before; try a lower train.lr"
        )
    run.optimizer.step()
    run.scheduler.step()
    run.optimizer.zero_grad(set_to_none=True)
    return sums, float(grad_norm), lr


def step_seed(seed: int, rank: int, step: int) -> int:
    """Seed of one optimizer step: dropout depends on (seed, rank, step), never on history."""
    return int(np.random.SeedSequence([seed, rank, step]).generate_state(1)[0])


def save(run: Run, step: int, consumed: int) -> None:
    """Checkpoint ``step`` (rank 0 writes; every rank waits), then drop checkpoints beyond ``keep_checkpoints``."""
    world, manifest = run.world, run.stream.manifest
    state = {
        "step": step,
        "reader": run.stream.state_dict(consumed),
        "split": run.split,
        "model_config": run.mcfg.to_dict(),
        "train_config": run.cfg.model_dump(mode="json"),
        "task": run.task,
        "shards": storage.resolve(run.shards),
        "vocab": {**manifest.vocab.model_dump(), "path": storage.resolve(run.cfg.vocab or manifest.vocab_path())},
        "world_size": world.size,
    }
    if world.main:
        save_checkpoint(checkpoint_dir(run.run_dir, step), run.model, run.optimizer, run.scheduler, state)
        prune_checkpoints(run.run_dir, run.cfg.keep_checkpoints)
    if world.size > 1:
        dist.barrier()


def final_evaluation(run: Run, log: MetricsLog) -> dict[str, Any]:
    """Evaluate the held-out set after the last step; eval.json is the record, metrics.jsonl gets the point too."""
    if run.held_out is None:
        if run.world.main:
            logger.warning(
                "no held-out evaluation: train.holdout_examples is 0 (or the corpus has under 10 examples) and no eval shards were given"
            )
        return {}
    results = evaluate(unwrap(run.model), run.held_out, run.cfg, run.world, run.stream.manifest.vocab.sha256)
    if run.world.main:
        log.log(run.cfg.steps, results, prefix="held_out")
        tqdm.write(describe_eval(results))
        storage.write_json(storage.join(run.run_dir, "eval.json"), results)
    return results


def describe_start(run: Run) -> str:
    """The header printed before the first step: what trains, where, on how much data, for how long."""
    cfg, world = run.cfg, run.world
    train_lo, train_hi = run.split["train"]
    held_lo, held_hi = run.held_out.example_range if run.held_out is not None else (0, 0)
    examples_per_step = cfg.batch_size * run.accum * world.size
    epochs = cfg.steps * examples_per_step / max(train_hi - train_lo, 1)
    device = [str(world.device) + (f" ({torch.cuda.get_device_name(world.device)})" if world.device.type == "cuda" else "")]
    device += [f"torch threads {torch.get_num_threads()}"] + ([f"{world.size} processes"] if world.size > 1 else [])
    resuming = f", resuming after step {run.start_step}" if run.start_step else ""
    return "\n".join(
        [
            f"model     {cfg.model}, {count_params(unwrap(run.model), non_embedding=False):,} parameters",
            f"device    {', '.join(device)}",
            f"examples  {train_hi - train_lo:,} training, {held_hi - held_lo:,} held out",
            f"steps     {cfg.steps:,} x {tokens_per_step(run):,} tokens ({examples_per_step:,} examples x {run.seq_len} tokens), "
            f"{epochs:.2f} epochs{resuming}",
        ]
    )


def describe_run(summary: dict[str, Any], results: dict[str, Any], checkpoint: str) -> str:
    """The closing line: final train and held-out loss, mean throughput of this run, the last checkpoint."""
    train_loss = f"{summary['loss']:.4f}" if "loss" in summary else "n/a"
    held_out = f"{results['loss']:.4f}" if results else "n/a (nothing held out)"
    return f"done: train loss {train_loss}, held-out loss {held_out}, {summary['run_tokens_per_s']:,.0f} tokens/s, checkpoint {checkpoint}"
