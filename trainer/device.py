"""Where a model runs and in which precision: one place for the device pick and the autocast set-up."""

from __future__ import annotations

import contextlib
from typing import Literal

import torch

Precision = Literal["auto", "fp32", "bf16"]


def pick_device(name: str | None = None) -> torch.device:
    """``name`` when given, else CUDA when present, else the CPU."""
    return torch.device(name or ("cuda" if torch.cuda.is_available() else "cpu"))


def uses_bf16(device: torch.device, precision: Precision = "auto") -> bool:
    """``auto``: bf16 on CUDA; fp32 on the CPU."""
    if precision == "auto":
        return device.type == "cuda"
    return precision == "bf16"


def autocast(device: torch.device, precision: Precision = "auto") -> contextlib.AbstractContextManager:
    """bf16 autocast where ``uses_bf16`` says so (weights and optimizer stay fp32), else full fp32."""
    if uses_bf16(device, precision):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
