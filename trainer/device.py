"""Where a model runs and in which precision: one place for the device pick and the autocast set-up."""

from __future__ import annotations

import contextlib

import torch


def pick_device(name: str | None = None) -> torch.device:
    """``name`` when given, else CUDA when present, else the CPU."""
    return torch.device(name or ("cuda" if torch.cuda.is_available() else "cpu"))


def autocast(device: torch.device) -> contextlib.AbstractContextManager:
    """bf16 autocast on CUDA (weights and optimizer stay fp32); full fp32 on the CPU."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()
