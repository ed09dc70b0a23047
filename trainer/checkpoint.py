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
import uuid
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load, load_file, save
from tokenizers import Tokenizer
from torch import nn

from corpusforge.core import storage

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


def checkpoint_dir(run_dir: storage.PathLike, step: int) -> str:
    return storage.join(run_dir, "checkpoints", f"step-{step:08d}")


class CheckpointError(ValueError):
    """A checkpoint file that is missing, unreadable or not what state.json recorded; the message names it."""


def save_checkpoint(
    directory: storage.PathLike,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    state: dict[str, Any],
) -> str:
    """Write the checkpoint into a local temporary directory and publish it whole, so a crash leaves no half checkpoint.

    Locally the directory is renamed into place; on an object store its files are uploaded under
    their final names (an interrupted upload fails ``verify_checkpoint``, so it is never resumed from).
    """
    directory = os.fspath(directory)
    old = None
    with storage.local_output(directory) as tmp:
        storage.makedirs(tmp)
        weights = {name: t.detach().contiguous().cpu() for name, t in unwrap(model).state_dict().items()}
        write_weights(os.path.join(tmp, WEIGHTS_NAME), weights)
        torch.save(optimizer.state_dict(), os.path.join(tmp, OPTIMIZER_NAME))
        files = {name: storage.sha256(os.path.join(tmp, name)) for name in (WEIGHTS_NAME, OPTIMIZER_NAME)}
        full_state = {**state, "scheduler": _json_safe(scheduler.state_dict()), "files": files}
        storage.write_text(os.path.join(tmp, STATE_NAME), json.dumps(full_state, indent=2, default=str))
        if storage.is_local(directory) and storage.exists(directory):  # re-saving the same step: move the old one aside (atomic)
            old = f"{directory}.old-{uuid.uuid4().hex}"
            storage.rename(directory, old)
    if old is not None:
        storage.remove_tree(old)
    return directory


def write_weights(path: storage.PathLike, tensors: dict[str, torch.Tensor]) -> None:
    """A safetensors file written through ``storage``, so it gets the usual umask mode (0644 under umask 022):
    safetensors' own ``save_file`` renames a temporary made 0600 into place, unreadable to colleagues."""
    storage.write_bytes(path, save(tensors, metadata={"format": "pt"}))


def prune_checkpoints(run_dir: storage.PathLike, keep: int) -> list[str]:
    """Remove all but the newest ``keep`` step directories of ``run_dir`` (0 keeps all); returns the removed ones."""
    if keep <= 0:
        return []
    removed = step_dirs(run_dir)[:-keep]
    for directory in removed:
        storage.remove_tree(directory)
    return removed


def _json_safe(scheduler_state: dict[str, Any]) -> dict[str, Any]:
    """LambdaLR keeps its lambdas as None entries; everything else is numbers."""
    return {k: v for k, v in scheduler_state.items() if k != "lr_lambdas"}


def step_dirs(run_dir: storage.PathLike) -> list[str]:
    """The run's checkpoint directories with a state.json, oldest first (never a half-written ``.tmp-`` one)."""
    parent = storage.join(run_dir, "checkpoints")
    found = [storage.join(parent, storage.name(path)) for path in storage.listdir(parent)]  # as the caller spelled the run
    return [c for c in found if STEP_DIR.fullmatch(storage.name(c)) and storage.is_file(storage.join(c, STATE_NAME))]


def verify_checkpoint(directory: storage.PathLike) -> dict[str, Any]:
    """state.json, after checking every file it records against its sha256; raises CheckpointError naming the file."""
    state = read_state(directory)
    expected = state.get("files") or {WEIGHTS_NAME: None}  # checkpoints before checksums: presence only
    for name, digest in expected.items():
        path = storage.join(directory, name)
        if not storage.is_file(path):
            raise CheckpointError(f"{path}: missing from the checkpoint")
        if digest is not None and storage.sha256(path) != digest:
            raise CheckpointError(f"{path}: sha256 differs from the one recorded in {STATE_NAME} (damaged file)")
    return state


def resolve_checkpoint(path: storage.PathLike) -> str:
    """A checkpoint directory itself (verified), or a run directory's newest intact checkpoint.

    A damaged checkpoint named directly is an error; in a run directory it is skipped with a warning
    that names the damaged file, and the next older one is tried.
    """
    path = os.fspath(path)
    if storage.is_file(storage.join(path, STATE_NAME)):
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


def read_state(directory: storage.PathLike) -> dict[str, Any]:
    path = storage.join(directory, STATE_NAME)
    try:
        return json.loads(storage.read_text(path))
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path}: unreadable ({error})") from None


def read_weights(path: storage.PathLike) -> dict[str, torch.Tensor]:
    """A safetensors file's tensors: memory-mapped locally, read whole from a URI."""
    return load_file(storage.resolve(path)) if storage.is_local(path) else load(storage.read_bytes(path))


def load_weights(directory: storage.PathLike, model: nn.Module) -> None:
    path = storage.join(directory, WEIGHTS_NAME)
    try:
        weights = read_weights(path)
    except (OSError, SafetensorError) as error:
        raise CheckpointError(f"{path}: unreadable ({error})") from None
    unwrap(model).load_state_dict(weights, strict=True)


def run_tokenizer(vocab: dict[str, Any]) -> Tokenizer:
    """The training shards' tokenizer, from the vocab entry a checkpoint records (a folder or a tokenizer.json)."""
    path = vocab["path"]
    if storage.is_dir(path):
        path = storage.join(path, "tokenizer.json")
    if not storage.is_file(path):
        raise FileNotFoundError(f"{path}: tokenizer file of the training shards not found")
    return Tokenizer.from_str(storage.read_text(path))


def load_checkpoint(
    directory: storage.PathLike,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    device: torch.device,
) -> dict[str, Any]:
    """Restore weights, optimizer and scheduler in place; returns state.json for the rest."""
    state = read_state(directory)
    load_weights(directory, model)
    path = storage.join(directory, OPTIMIZER_NAME)
    try:
        with storage.open_file(path, "rb") as handle:
            optimizer.load_state_dict(torch.load(handle, map_location=device, weights_only=True))
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as error:
        raise CheckpointError(f"{path}: unreadable ({error})") from None
    scheduler.load_state_dict({**scheduler.state_dict(), **state["scheduler"]})
    return state
