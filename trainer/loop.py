"""The training loop: stream shards, accumulate to the global batch, step, log, checkpoint, evaluate.

``train`` reads top to bottom in named parts: ``prepare`` (shards, split, model, optimizer, resume),
``run_steps`` (the step loop: ``train_step``, interval logging, held-out evaluation every
``train.eval_every`` steps, checkpoints) and the final evaluation. Under torchrun (``RANK`` and
``WORLD_SIZE`` set) it joins a process group (NCCL on GPU, gloo on CPU) and wraps the model in DDP;
each rank reads its own disjoint slice of every global batch (``trainer.data.ShardStream``).
Random state is a pure function of (seed, rank, optimizer step), so a resumed run is bit-identical
on CPU to one that never stopped. Without separate eval shards the last examples of the training
directory's manifest are held out (``data_split``) and evaluated at the end into eval.json.
Every evaluation covers every held-out example (the partial last batch included) unless
``train.eval_batches`` caps it. SIGINT/SIGTERM finish the current step, write a checkpoint and
raise KeyboardInterrupt; a second signal interrupts at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader
from tqdm import tqdm

from corpusforge.core.config import TrainConfig
from corpusforge.core.files import write_json_atomic
from corpusforge.shards.reader import ShardError, read_manifest
from corpusforge.shards.verify import verify
from corpusforge.trainer.checkpoint import (
    checkpoint_dir,
    load_checkpoint,
    prune_checkpoints,
    read_state,
    resolve_checkpoint,
    save_checkpoint,
    unwrap,
)
from corpusforge.trainer.data import Batch, DataWaitTimer, ShardStream, holdout_split, to_model_inputs
from corpusforge.trainer.device import autocast, pick_device
from corpusforge.trainer.metrics import (
    MetricsLog,
    bert_counts,
    device_peak_flops,
    flops_per_token,
    gpt_counts,
    plot_curves,
)
from corpusforge.trainer.models import ModelConfig, build_model, count_params, gpt_inputs, model_config
from corpusforge.trainer.optim import make_optimizer, make_scheduler, recipe

logger = logging.getLogger(__name__)


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


def step_seed(seed: int, rank: int, step: int) -> int:
    """Seed of one optimizer step: dropout depends on (seed, rank, step), never on history."""
    return int(np.random.SeedSequence([seed, rank, step]).generate_state(1)[0])


def check_shards(directories: list[Path], world: World, progress: bool, vocab: Path | None = None) -> None:
    """Rank 0 reads every shard once (size, sha256, schema) so a bad file fails now, by name, not hours in."""
    if world.main:
        problems = [line for directory in directories for line in verify(directory, progress=progress, vocab=vocab)]
        if problems:
            raise ShardError("; ".join(problems))
    if world.size > 1:
        dist.barrier()


def data_split(cfg: TrainConfig, shards: Path, eval_shards: Path | None, checkpoint: Path | None) -> dict[str, Any]:
    """Which examples of ``shards`` train and which are held out (``trainer.data.holdout_split``).

    A resumed run keeps its checkpoint's split whatever the configuration says now, so it neither
    trains on what it held out nor evaluates on what it trained on. Separate eval shards hold nothing out.
    """
    examples = read_manifest(Path(shards)).examples
    if checkpoint is None:
        return holdout_split(examples, 0 if eval_shards is not None else cfg.holdout_examples)
    split = read_state(checkpoint).get("split") or holdout_split(examples, 0)  # older checkpoints trained on all
    if split["examples"] != examples:
        raise ValueError(f"{checkpoint}: trained on {split['examples']} examples, {shards} holds {examples}")
    return split


def make_stream(cfg: TrainConfig, shards: Path, world: World, split: dict[str, Any] | None = None) -> ShardStream:
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


def forward(model: nn.Module, task: str, batch: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Loss outputs and the accuracy counters of one micro-batch."""
    if task == "bert":
        out = model(**batch)
        return out, bert_counts(out, batch)
    xy = gpt_inputs(batch["input_ids"], batch["length"])
    out = model(**xy)
    return out, gpt_counts(out, xy["targets"])


def summarize(task: str, sums: torch.Tensor) -> dict[str, float]:
    """Means per example from summed [losses x examples..., examples, counters...] (see ``batch_sums``)."""
    values = sums.tolist()
    if task == "bert":
        loss, mlm_loss, nsp_loss, examples, mlm_hit, mlm_w, nsp_hit, nsp_n = values
        return {
            "loss": loss / examples,
            "mlm_loss": mlm_loss / examples,
            "nsp_loss": nsp_loss / examples,
            "mlm_accuracy": mlm_hit / max(mlm_w, 1.0),
            "nsp_accuracy": nsp_hit / max(nsp_n, 1.0),
        }
    loss, examples, hit, n = values
    return {"loss": loss / examples, "accuracy": hit / max(n, 1.0)}


def loss_keys(task: str) -> tuple[str, ...]:
    return ("loss", "mlm_loss", "nsp_loss") if task == "bert" else ("loss",)


def batch_sums(task: str, out: dict[str, torch.Tensor], counts: torch.Tensor, examples: int) -> torch.Tensor:
    """[batch-mean losses x examples..., examples, counters...]: summed over batches of any size, then ``summarize``d."""
    losses = torch.stack([out[k].detach().float() for k in loss_keys(task)]) * examples
    return torch.cat([losses, torch.full((1,), float(examples), device=counts.device), counts])


@dataclass(frozen=True)
class HeldOut:
    """Examples [lo, hi) of a shard directory that are evaluated and never trained on."""

    shards: Path
    example_range: tuple[int, int]


@dataclass
class Run:
    """What ``prepare`` builds once and the step loop uses: data, model, optimizer and where to resume."""

    cfg: TrainConfig
    world: World
    run_dir: Path
    shards: Path
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


def held_out_set(split: dict[str, Any], shards: Path, eval_shards: Path | None) -> HeldOut | None:
    """Separate eval shards whole, else the split's held-out tail of the training shards, else nothing."""
    if eval_shards is not None:
        return HeldOut(Path(eval_shards), (0, read_manifest(Path(eval_shards)).examples))
    if split["held_out"] is not None:
        return HeldOut(Path(shards), tuple(split["held_out"]))
    return None


def prepare(
    cfg: TrainConfig, shards: Path, run_dir: Path, eval_shards: Path | None, resume: Path | None, world: World, progress: bool
) -> Run:
    """Check the shards, cut the split, build model and optimizer, restore a checkpoint when resuming."""
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    if cfg.verify_shards:
        check_shards([shards] + ([Path(eval_shards)] if eval_shards is not None else []), world, progress, cfg.vocab)
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


def train(
    cfg: TrainConfig,
    shards: Path,
    run_dir: Path,
    *,
    eval_shards: Path | None = None,
    resume: Path | None = None,
    device: str | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Train ``cfg.model`` on ``shards`` for ``cfg.steps`` optimizer steps; returns the final evaluation.

    It runs on ``eval_shards`` when given, else on the examples ``data_split`` holds out of ``shards``
    (none: no evaluation, {} returned); eval.json and every checkpoint's state.json record the split.
    """
    world = init_world(device)
    run = prepare(cfg, Path(shards), Path(run_dir), eval_shards, resume, world, progress)
    log = MetricsLog(run.run_dir, enabled=world.main)
    try:
        with stop_signals() as stop:
            summary = run_steps(run, log, stop, progress)
        results = final_evaluation(run, log)
        if world.main:
            if (run.run_dir / "metrics.jsonl").is_file():
                plot_curves(run.run_dir / "metrics.jsonl", run.run_dir / "curves.png")
            tqdm.write(describe_run(summary, results, checkpoint_dir(run.run_dir, cfg.steps)))
    finally:
        log.close()
    return results


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


def train_step(run: Run, batches: Iterator[Batch], step: int) -> tuple[torch.Tensor, float, float]:
    """One optimizer step over ``run.accum`` micro-batches: (summed loss/accuracy counters, grad norm, lr used)."""
    world, task = run.world, run.task
    torch.manual_seed(step_seed(run.cfg.seed, world.rank, step))
    sums = None
    for micro in range(run.accum):
        batch = to_model_inputs(next(batches), world.device, task)
        sync = micro == run.accum - 1 or world.size == 1
        with contextlib.nullcontext() if sync else run.model.no_sync(), autocast(world.device):
            out, counts = forward(run.model, task, batch)
        (out["loss"] / run.accum).backward()
        step_sums = batch_sums(task, out, counts, batch["input_ids"].shape[0])
        sums = step_sums if sums is None else sums + step_sums
    grad_norm = nn.utils.clip_grad_norm_(run.model.parameters(), run.cfg.grad_clip)
    lr = run.optimizer.param_groups[0]["lr"]  # the rate this step used (the scheduler moves on below)
    run.optimizer.step()
    run.scheduler.step()
    run.optimizer.zero_grad(set_to_none=True)
    return sums, float(grad_norm), lr


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
        "shards": str(run.shards.resolve()),
        "vocab": {**manifest.vocab.model_dump(), "path": str((run.cfg.vocab or manifest.vocab_path()).resolve())},
        "world_size": world.size,
    }
    if world.main:
        save_checkpoint(checkpoint_dir(run.run_dir, step), run.model, run.optimizer, run.scheduler, state)
        prune_checkpoints(run.run_dir, run.cfg.keep_checkpoints)
    if world.size > 1:
        dist.barrier()


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
            log.log(done, evaluate(unwrap(run.model), run.held_out, cfg, world, run.stream.manifest.vocab.sha256), prefix="held_out")
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
        write_json_atomic(results, run.run_dir / "eval.json")
    return results


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
        with autocast(world.device):
            out, counts = forward(model, task, batch)
        sums += batch_sums(task, out, counts, batch["input_ids"].shape[0])
    model.train()
    if world.size > 1:
        dist.all_reduce(sums)
    results = summarize(task, sums)
    results["perplexity"] = float(np.exp(results["mlm_loss" if task == "bert" else "loss"]))
    results["examples"] = int(sums[len(loss_keys(task))].item())
    results.update(shards=str(held_out.shards.resolve()), example_range=list(held_out.example_range))
    return results


def describe_eval(results: dict[str, Any]) -> str:
    """One line for the console: the figures, then which examples they come from."""
    figures = ", ".join(f"{key} {value:.4g}" for key, value in results.items() if isinstance(value, float))
    lo, hi = results["example_range"]
    return f"eval: {figures} on {results['examples']} examples of [{lo}, {hi}) in {results['shards']}"


def describe_run(summary: dict[str, Any], results: dict[str, Any], checkpoint: Path) -> str:
    """The closing line: final train and held-out loss, mean throughput of this run, the last checkpoint."""
    train_loss = f"{summary['loss']:.4f}" if "loss" in summary else "n/a"
    held_out = f"{results['loss']:.4f}" if results else "n/a (nothing held out)"
    return f"done: train loss {train_loss}, held-out loss {held_out}, {summary['run_tokens_per_s']:,.0f} tokens/s, checkpoint {checkpoint}"
