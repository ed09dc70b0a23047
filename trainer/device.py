"""Where a model runs and in which precision: one place for the device pick and the autocast set-up."""

from __future__ import annotations

import contextlib
import functools

import torch

from corpusforge.core.config import Precision


def pick_device(name: str | None = None) -> torch.device:
    """``name`` when given, else CUDA when present, else the CPU."""
    return torch.device(name or ("cuda" if torch.cuda.is_available() else "cpu"))


@functools.cache
def has_amx() -> bool:
    """Whether this CPU has AMX tiles (torch's own probe, private: a torch without it counts as no AMX)."""
    return bool(getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)())


def autocast(device: torch.device, precision: Precision = "auto") -> contextlib.AbstractContextManager:
    """bf16 autocast (weights and optimizer stay fp32) or full fp32. ``auto``: bf16 on CUDA and on a CPU with AMX
    tiles (bf16 matrix units: 5x fp32's matmul rate on the 2-core machine the bench runs on), fp32 on other CPUs,
    where bf16 is emulated and slower."""
    if precision == "bf16" or (precision == "auto" and (device.type == "cuda" or (device.type == "cpu" and has_amx()))):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
