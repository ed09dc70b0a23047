"""The training loop: stream shards, accumulate to the global batch, step, log, checkpoint, evaluate.

One function, ``train``, reads top to bottom like nanoGPT's train.py. Under torchrun (``RANK`` and
``WORLD_SIZE`` set) it joins a process group (NCCL on GPU, gloo on CPU) and wraps the model in DDP;
each rank reads its own disjoint slice of every global batch (``trainer.data.ShardStream``).
Random state is a pure function of (seed, rank, optimizer step), so a resumed run is bit-identical
on CPU to one that never stopped. Without separate eval shards the last examples of the training
directory's manifest are held out (``data_split``) and evaluated at the end into eval.json.
"""
from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader
from tqdm import tqdm

from corpusforge.config import TrainConfig
from corpusforge.files import write_json_atomic
from corpusforge.shards.reader import ShardError, read_manifest
from corpusforge.shards.verify import verify
from corpusforge.trainer.checkpoint import checkpoint_dir, load_checkpoint, read_state, resolve_checkpoint, save_checkpoint, unwrap
from corpusforge.trainer.data import DataWaitTimer, ShardStream, holdout_split, to_model_inputs
from corpusforge.trainer.metrics import (
    MetricsLog,
    bert_counts,
    device_peak_flops,
    flops_per_token,
    gpt_counts,
    plot_curves,
)
from corpusforge.trainer.models import build_model, count_params, gpt_inputs, model_config
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
    name = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(f"cuda:{local_rank}" if name == "cuda" else name)
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
    """Interval means from summed [losses..., counters...] (see ``loss_keys``)."""
    values = sums.tolist()
    if task == "bert":
        loss, mlm_loss, nsp_loss, batches, mlm_hit, mlm_w, nsp_hit, nsp_n = values
        return {
            "loss": loss / batches,
            "mlm_loss": mlm_loss / batches,
            "nsp_loss": nsp_loss / batches,
            "mlm_accuracy": mlm_hit / max(mlm_w, 1.0),
            "nsp_accuracy": nsp_hit / max(nsp_n, 1.0),
        }
    loss, batches, hit, n = values
    return {"loss": loss / batches, "accuracy": hit / max(n, 1.0)}


def loss_keys(task: str) -> tuple[str, ...]:
    return ("loss", "mlm_loss", "nsp_loss") if task == "bert" else ("loss",)


def batch_sums(task: str, out: dict[str, torch.Tensor], counts: torch.Tensor) -> torch.Tensor:
    losses = torch.stack([out[k].detach().float() for k in loss_keys(task)])
    return torch.cat([losses, torch.ones(1, device=counts.device), counts])


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
    run_dir = Path(run_dir)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    if cfg.verify_shards:
        check_shards([Path(shards)] + ([Path(eval_shards)] if eval_shards is not None else []), world, progress, cfg.vocab)
    ckpt = resolve_checkpoint(resume) if resume is not None else None
    split = data_split(cfg, shards, eval_shards, ckpt)
    held_out = split["held_out"] if eval_shards is None else None
    if held_out is not None and held_out[1] - held_out[0] < world.size:
        raise ValueError(f"{shards}: {held_out[1] - held_out[0]} held-out examples for {world.size} ranks; raise train.holdout_examples or set it to 0")
    stream = make_stream(cfg, shards, world, split)
    manifest = stream.manifest
    task = manifest.task
    seq_len = sequence_length(manifest)
    mcfg = model_config(cfg.model, manifest.vocab.size, cfg.dropout, cfg.pre_ln)
    if mcfg.family != task:
        raise ValueError(f"model {cfg.model} is a {mcfg.family} model but {shards} holds {task} examples")
    if seq_len > mcfg.max_positions:
        raise ValueError(f"{shards}: sequences of {seq_len} tokens exceed {cfg.model}'s {mcfg.max_positions} positions")

    torch.manual_seed(cfg.seed)  # identical initial weights on every rank
    model = build_model(mcfg).to(world.device)
    accum = accumulation_steps(cfg, world)
    r = recipe(task, cfg.steps, cfg.lr, cfg.warmup_steps, cfg.weight_decay)
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
    autocast = (
        torch.autocast("cuda", dtype=torch.bfloat16) if world.device.type == "cuda" else contextlib.nullcontext()
    )

    loader = DataLoader(
        stream,
        batch_size=None,
        num_workers=cfg.num_workers,
        pin_memory=world.device.type == "cuda",
        generator=torch.Generator().manual_seed(cfg.seed),  # workers' seeds never draw from the step seeds
    )
    timer = DataWaitTimer()
    batches = timer.wrap(iter(loader))  # start the workers now, before the first step seeds dropout
    log = MetricsLog(run_dir, enabled=world.main)
    tokens_per_step = cfg.batch_size * accum * world.size * seq_len
    flops_token = flops_per_token(count_params(unwrap(model)), mcfg.n_layer, mcfg.n_embd, seq_len)
    peak = device_peak_flops(world.device)
    consumed = 0
    sums, interval_steps, interval_start = None, 0, time.perf_counter()
    bar = tqdm(total=cfg.steps, initial=start_step, disable=not (progress and world.main), desc=f"train {cfg.model}")

    def save(step: int) -> None:
        state = {
            "step": step,
            "reader": stream.state_dict(consumed),
            "split": split,
            "model_config": mcfg.to_dict(),
            "train_config": cfg.model_dump(mode="json"),
            "task": task,
            "shards": str(Path(shards).resolve()),
            "vocab": {**manifest.vocab.model_dump(), "path": str((cfg.vocab or manifest.vocab_path()).resolve())},
            "world_size": world.size,
        }
        if world.main:
            save_checkpoint(checkpoint_dir(run_dir, step), model, optimizer, scheduler, state)
        if world.size > 1:
            dist.barrier()

    model.train()
    for step in range(start_step, cfg.steps):
        torch.manual_seed(step_seed(cfg.seed, world.rank, step))
        for micro in range(accum):
            batch = to_model_inputs(next(batches), world.device, task)
            consumed += 1
            sync = micro == accum - 1 or world.size == 1
            with (contextlib.nullcontext() if sync else model.no_sync()), autocast:
                out, counts = forward(model, task, batch)
            (out["loss"] / accum).backward()
            step_sums = batch_sums(task, out, counts)
            sums = step_sums if sums is None else sums + step_sums
        grad_norm = nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        lr = optimizer.param_groups[0]["lr"]  # the rate this step used (the scheduler moves on below)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        interval_steps += 1
        bar.update(1)

        done = step + 1
        if done % cfg.log_every == 0 or done == cfg.steps:
            if world.size > 1:
                dist.all_reduce(sums)
            elapsed = time.perf_counter() - interval_start
            record = summarize(task, sums)
            tokens_per_s = tokens_per_step * interval_steps / elapsed
            record.update(
                lr=lr,
                grad_norm=float(grad_norm),
                tokens_per_s=tokens_per_s,
                examples_per_s=tokens_per_s / seq_len,
                data_wait=timer.fraction(),
            )
            if peak is not None:
                record["mfu"] = tokens_per_s * flops_token / (peak * world.size)
                record["gpu_memory_gb"] = torch.cuda.max_memory_allocated(world.device) / 1e9
            log.log(done, record)
            bar.set_postfix(loss=f"{record['loss']:.3f}", lr=f"{record['lr']:.2e}")
            sums, interval_steps, interval_start = None, 0, time.perf_counter()
            timer.reset()
        if (cfg.checkpoint_every and done % cfg.checkpoint_every == 0) or done == cfg.steps:
            save(done)
    bar.close()

    results: dict[str, Any] = {}
    if eval_shards is not None:
        results = evaluate(unwrap(model), eval_shards, cfg, world, manifest.vocab.sha256)
    elif held_out is not None:
        results = evaluate(unwrap(model), shards, cfg, world, manifest.vocab.sha256, tuple(held_out))
    elif world.main:
        logger.warning("no held-out evaluation: train.holdout_examples is 0 (or the corpus has under 10 examples) and no eval shards were given")
    if world.main:
        if results:  # eval.json is the record; metrics.jsonl keeps the training curve only
            tqdm.write(describe_eval(results))
            write_json_atomic(results, run_dir / "eval.json")
        if (run_dir / "metrics.jsonl").is_file():
            plot_curves(run_dir / "metrics.jsonl", run_dir / "curves.png")
    log.close()
    return results


@torch.no_grad()
def evaluate(
    model: nn.Module,
    shards: Path,
    cfg: TrainConfig,
    world: World,
    vocab_sha256: str,
    example_range: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Held-out loss and accuracy (perplexity = exp of the token-level loss) over ``example_range`` of
    a shard directory (default: all of it), in file order, at most ``cfg.eval_batches`` batches per rank."""
    held_out = read_manifest(Path(shards))
    if held_out.vocab.sha256 != vocab_sha256:
        raise ValueError(f"{shards}: held-out shards use another vocabulary than the training shards")
    lo, hi = example_range or (0, held_out.examples)
    batch_size = min(cfg.batch_size, (hi - lo) // world.size)
    stream = ShardStream(
        shards, batch_size, rank=world.rank, world_size=world.size, seed=cfg.seed, shuffle=False, epochs=1, example_range=(lo, hi)
    )
    task = stream.task
    autocast = (
        torch.autocast("cuda", dtype=torch.bfloat16) if world.device.type == "cuda" else contextlib.nullcontext()
    )
    sums = None
    model.eval()
    for index, raw in enumerate(stream):
        if index >= cfg.eval_batches:
            break
        batch = to_model_inputs(raw, world.device, task)
        with autocast:
            out, counts = forward(model, task, batch)
        step_sums = batch_sums(task, out, counts)
        sums = step_sums if sums is None else sums + step_sums
    model.train()
    if world.size > 1:
        dist.all_reduce(sums)
    results = summarize(task, sums)
    results["perplexity"] = float(np.exp(results["mlm_loss" if task == "bert" else "loss"]))
    results["examples"] = int(sums[len(loss_keys(task))].item()) * batch_size
    results.update(shards=str(Path(shards).resolve()), example_range=[lo, hi])
    return results


def describe_eval(results: dict[str, Any]) -> str:
    """One line for the console: the figures, then which examples they come from."""
    figures = ", ".join(f"{key} {value:.4g}" for key, value in results.items() if isinstance(value, float))
    lo, hi = results["example_range"]
    return f"eval: {figures} on {results['examples']} examples of [{lo}, {hi}) in {results['shards']}"
