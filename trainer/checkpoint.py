"""Checkpoints that resume exactly and never unpickle: a directory written whole, then renamed.

Layout of ``step-00001000/``:
  model.safetensors   weights of the unwrapped model (no DDP / torch.compile prefixes)
  optimizer.pt        AdamW state dict (tensors and numbers only; loaded with weights_only=True)
  state.json          step, scheduler, reader state (batches consumed), configs, vocab, metrics so far

Random state needs no file: the trainer reseeds every optimizer step from (seed, rank, step), so the
step number alone restores dropout masks exactly, on any number of ranks.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

STATE_NAME = "state.json"
WEIGHTS_NAME = "model.safetensors"
OPTIMIZER_NAME = "optimizer.pt"
STEP_DIR = re.compile(r"step-\d{8}")  # never a half-written step-XXXXXXXX.tmp-<uuid>


def unwrap(model: nn.Module) -> nn.Module:
    """The plain module under DistributedDataParallel and torch.compile wrappers."""
    while True:
        if isinstance(model, nn.parallel.DistributedDataParallel):
            model = model.module
        elif hasattr(model, "_orig_mod"):
            model = model._orig_mod
        else:
            return model


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step-{step:08d}"


def save_checkpoint(
    directory: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    state: dict[str, Any],
) -> Path:
    """Write everything into ``<dir>.tmp-<uuid>`` and rename it into place, so a crash leaves no half checkpoint."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = directory.with_name(f"{directory.name}.tmp-{uuid.uuid4().hex}")
    tmp.mkdir()
    try:
        weights = {name: t.detach().contiguous().cpu() for name, t in unwrap(model).state_dict().items()}
        save_file(weights, str(tmp / WEIGHTS_NAME), metadata={"format": "pt"})
        torch.save(optimizer.state_dict(), tmp / OPTIMIZER_NAME)
        full_state = {**state, "scheduler": _json_safe(scheduler.state_dict())}
        (tmp / STATE_NAME).write_text(json.dumps(full_state, indent=2, default=str), encoding="utf-8")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if directory.exists():  # re-saving the same step: move the old one aside first (rename is atomic)
        old = directory.with_name(f"{directory.name}.old-{uuid.uuid4().hex}")
        os.replace(directory, old)
        os.replace(tmp, directory)
        shutil.rmtree(old)
    else:
        os.replace(tmp, directory)
    return directory


def _json_safe(scheduler_state: dict[str, Any]) -> dict[str, Any]:
    """LambdaLR keeps its lambdas as None entries; everything else is numbers."""
    return {k: v for k, v in scheduler_state.items() if k != "lr_lambdas"}


def resolve_checkpoint(path: Path) -> Path:
    """A checkpoint directory itself, or a run directory whose newest checkpoint is used."""
    path = Path(path)
    if (path / STATE_NAME).is_file():
        return path
    found = (path / "checkpoints").iterdir() if (path / "checkpoints").is_dir() else []
    candidates = sorted(c for c in found if STEP_DIR.fullmatch(c.name) and (c / STATE_NAME).is_file())
    if not candidates:
        raise FileNotFoundError(f"{path}: no checkpoint (expected {STATE_NAME} or checkpoints/step-*/)")
    return candidates[-1]


def read_state(directory: Path) -> dict[str, Any]:
    return json.loads((Path(directory) / STATE_NAME).read_text(encoding="utf-8"))


def load_weights(directory: Path, model: nn.Module) -> None:
    unwrap(model).load_state_dict(load_file(str(Path(directory) / WEIGHTS_NAME)), strict=True)


def load_checkpoint(
    directory: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    device: torch.device,
) -> dict[str, Any]:
    """Restore weights, optimizer and scheduler in place; returns state.json for the rest."""
    state = read_state(directory)
    load_weights(directory, model)
    optimizer.load_state_dict(torch.load(Path(directory) / OPTIMIZER_NAME, map_location=device, weights_only=True))
    scheduler.load_state_dict({**scheduler.state_dict(), **state["scheduler"]})
    return state
