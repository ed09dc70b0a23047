"""Checkpoints that resume exactly and never unpickle: a directory written whole, then renamed.

Layout of ``step-00001000/``:
  model.safetensors   weights of the unwrapped model (no DDP / torch.compile prefixes)
  optimizer.pt        AdamW state dict (tensors and numbers only; loaded with weights_only=True)
  state.json          step, scheduler, reader state (batches consumed), configs, vocab, metrics so far,
                      and "files": the sha256 of model.safetensors and optimizer.pt

A checkpoint is verified before it is used: a missing, truncated or bit-flipped file is named in the
error, and a run directory falls back to its newest intact checkpoint with a warning. Only the newest
``keep`` step directories of a run are kept (``prune_checkpoints``).

Random state needs no file: the trainer reseeds every optimizer step from (seed, rank, step), so the
step number alone restores dropout masks exactly, on any number of ranks.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer
from torch import nn

from corpusforge.core.files import atomic_path, sha256_file

logger = logging.getLogger(__name__)

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


class CheckpointError(ValueError):
    """A checkpoint file that is missing, unreadable or not what state.json recorded; the message names it."""


def save_checkpoint(
    directory: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    state: dict[str, Any],
) -> Path:
    """Write the checkpoint into a temporary directory and rename it into place, so a crash leaves no half checkpoint."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    old = None
    with atomic_path(directory) as tmp:
        tmp.mkdir()
        weights = {name: t.detach().contiguous().cpu() for name, t in unwrap(model).state_dict().items()}
        save_file(weights, str(tmp / WEIGHTS_NAME), metadata={"format": "pt"})
        torch.save(optimizer.state_dict(), tmp / OPTIMIZER_NAME)
        files = {name: sha256_file(tmp / name) for name in (WEIGHTS_NAME, OPTIMIZER_NAME)}
        full_state = {**state, "scheduler": _json_safe(scheduler.state_dict()), "files": files}
        (tmp / STATE_NAME).write_text(json.dumps(full_state, indent=2, default=str), encoding="utf-8")
        if directory.exists():  # re-saving the same step: move the old one aside first (rename is atomic)
            old = directory.with_name(f"{directory.name}.old-{uuid.uuid4().hex}")
            os.replace(directory, old)
    if old is not None:
        shutil.rmtree(old)
    return directory


def prune_checkpoints(run_dir: Path, keep: int) -> list[Path]:
    """Remove all but the newest ``keep`` step directories of ``run_dir`` (0 keeps all); returns the removed ones."""
    if keep <= 0:
        return []
    removed = step_dirs(run_dir)[:-keep]
    for directory in removed:
        shutil.rmtree(directory)
    return removed


def _json_safe(scheduler_state: dict[str, Any]) -> dict[str, Any]:
    """LambdaLR keeps its lambdas as None entries; everything else is numbers."""
    return {k: v for k, v in scheduler_state.items() if k != "lr_lambdas"}


def step_dirs(run_dir: Path) -> list[Path]:
    """The run's checkpoint directories with a state.json, oldest first (never a half-written ``.tmp-`` one)."""
    parent = Path(run_dir) / "checkpoints"
    found = parent.iterdir() if parent.is_dir() else []
    return sorted(c for c in found if STEP_DIR.fullmatch(c.name) and (c / STATE_NAME).is_file())


def verify_checkpoint(directory: Path) -> dict[str, Any]:
    """state.json, after checking every file it records against its sha256; raises CheckpointError naming the file."""
    directory = Path(directory)
    state = read_state(directory)
    expected = state.get("files") or {WEIGHTS_NAME: None}  # checkpoints before checksums: presence only
    for name, digest in expected.items():
        path = directory / name
        if not path.is_file():
            raise CheckpointError(f"{path}: missing from the checkpoint")
        if digest is not None and sha256_file(path) != digest:
            raise CheckpointError(f"{path}: sha256 differs from the one recorded in {STATE_NAME} (damaged file)")
    return state


def resolve_checkpoint(path: Path) -> Path:
    """A checkpoint directory itself (verified), or a run directory's newest intact checkpoint.

    A damaged checkpoint named directly is an error; in a run directory it is skipped with a warning
    that names the damaged file, and the next older one is tried.
    """
    path = Path(path)
    if (path / STATE_NAME).is_file():
        verify_checkpoint(path)
        return path
    candidates = step_dirs(path)
    if not candidates:
        raise FileNotFoundError(f"{path}: no checkpoint (expected {STATE_NAME} or checkpoints/step-*/)")
    for candidate in reversed(candidates):
        try:
            verify_checkpoint(candidate)
            return candidate
        except CheckpointError as error:
            logger.warning("%s; falling back to an older checkpoint", error)
    raise CheckpointError(f"{path}: none of its {len(candidates)} checkpoints is intact")


def read_state(directory: Path) -> dict[str, Any]:
    path = Path(directory) / STATE_NAME
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path}: unreadable ({error})") from None


def load_weights(directory: Path, model: nn.Module) -> None:
    path = Path(directory) / WEIGHTS_NAME
    try:
        weights = load_file(str(path))
    except (OSError, SafetensorError) as error:
        raise CheckpointError(f"{path}: unreadable ({error})") from None
    unwrap(model).load_state_dict(weights, strict=True)


def run_tokenizer(vocab: dict[str, Any]) -> Tokenizer:
    """The training shards' tokenizer, from the vocab entry a checkpoint records (a folder or a tokenizer.json)."""
    path = Path(vocab["path"])
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: tokenizer file of the training shards not found")
    return Tokenizer.from_file(str(path))


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
    path = Path(directory) / OPTIMIZER_NAME
    try:
        optimizer.load_state_dict(torch.load(path, map_location=device, weights_only=True))
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as error:
        raise CheckpointError(f"{path}: unreadable ({error})") from None
    scheduler.load_state_dict({**scheduler.state_dict(), **state["scheduler"]})
    return state
