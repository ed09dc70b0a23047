"""AdamW with the published recipes' hyper-parameters and their learning-rate schedules.

BERT (Devlin et al.): lr 1e-4, betas (0.9, 0.999), eps 1e-6, weight decay 0.01, linear warmup over
10k of 1M steps (1%) then linear decay to 0. GPT (nanoGPT's GPT-2 recipe): lr 6e-4, betas (0.9, 0.95),
weight decay 0.1, linear warmup then cosine decay to lr/10. Warmup defaults to 1% of the run so a short
run keeps the papers' shape. Weight decay skips every 1-D tensor (biases, LayerNorm gains and shifts,
including the embeddings' LayerNorm), as both reference implementations do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn


@dataclass(frozen=True)
class Recipe:
    lr: float
    warmup_steps: int
    weight_decay: float
    betas: tuple[float, float]
    eps: float
    schedule: Literal["linear", "cosine"]


def recipe(
    task: Literal["bert", "gpt"],
    steps: int,
    lr: float | None = None,
    warmup_steps: int | None = None,
    weight_decay: float | None = None,
) -> Recipe:
    """The family's published recipe, with any explicitly given value taking precedence."""
    warmup = warmup_steps if warmup_steps is not None else max(1, round(0.01 * steps))
    if task == "bert":
        return Recipe(lr or 1e-4, warmup, 0.01 if weight_decay is None else weight_decay, (0.9, 0.999), 1e-6, "linear")
    return Recipe(lr or 6e-4, warmup, 0.1 if weight_decay is None else weight_decay, (0.9, 0.95), 1e-8, "cosine")


def make_optimizer(model: nn.Module, r: Recipe, device: torch.device) -> torch.optim.AdamW:
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": r.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=r.lr, betas=r.betas, eps=r.eps, fused=device.type == "cuda")


def lr_factor(step: int, total: int, r: Recipe) -> float:
    """Multiplier of the peak lr at optimizer step ``step`` (0-based)."""
    if step < r.warmup_steps:
        return (step + 1) / r.warmup_steps
    progress = min(1.0, (step - r.warmup_steps) / max(1, total - r.warmup_steps))
    if r.schedule == "linear":
        return 1.0 - progress
    return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))


def make_scheduler(optimizer: torch.optim.Optimizer, total: int, r: Recipe) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, total, r))
