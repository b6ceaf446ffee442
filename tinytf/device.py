"""Where training runs and in what precision: the device `train.device` asks for (under
torchrun, this process's own GPU), what `train.precision` means there, the bf16 autocast
of the training step, and the device a model lives on.

torch is imported on first use (tinytf.lazy): the framings ask a model's device, and the
command line loads them before it needs torch.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from tinytf.errors import UserError
from tinytf.lazy import torch

if TYPE_CHECKING:
    from torch import nn


def select_device(requested: str, local_rank: int | None = None) -> torch.device:
    """The device train.device asks for. One process (`local_rank` None): auto -> cuda,
    then mps, then cpu; cpu, cuda and mps must be there. The process LOCAL_RANK of a
    torchrun job's machine: cuda:LOCAL_RANK or cpu (auto: cpu where it has no GPU of its own)."""
    if local_rank is not None:
        return _torchrun_device(requested, local_rank)
    if requested == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    available = {"cpu": True, "cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available()}
    if not available[requested]:
        raise UserError(f"train.device={requested}: no {requested} device here; use auto or cpu")
    return torch.device(requested)


def _torchrun_device(requested: str, local_rank: int) -> torch.device:
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if requested == "mps":
        raise UserError("train.device=mps: training with torchrun runs on cpu or cuda")
    if requested == "cpu" or (requested == "auto" and local_rank >= gpus):
        return torch.device("cpu")
    if local_rank >= gpus:
        raise UserError(
            f"train.device=cuda: process {local_rank} of this machine has no GPU of its own ({gpus} "
            f"here); start at most {gpus} processes per machine, or use train.device=cpu"
        )
    return torch.device("cuda", local_rank)


def step_precision(device: torch.device, requested: str) -> str:
    """What train.precision means on `device`: "bf16" or "fp32" (see config.TrainConfig).
    auto: bf16 on a CUDA GPU with bf16 tensor cores (compute capability 8.0, Ampere, and
    later; older GPUs emulate bf16), float32 on CPUs and MPS."""
    if requested == "auto":
        native = device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 0)
        return "bf16" if native else "fp32"
    if requested == "bf16" and device.type not in ("cpu", "cuda"):
        raise UserError(f"train.precision=bf16 runs on cpu or cuda, not {device.type}; use auto or fp32")
    return requested


def step_autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """The training step's forward pass under bf16 autocast (same exponent range as fp32: no
    loss scaling needed) when `precision` is "bf16"; as it is otherwise."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Run `model` as at inference: no dropout, no gradients; its mode is restored after.
    (In train mode, dropout would add noise and draw from the global random stream.)"""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def model_device(model: nn.Module) -> torch.device:
    """The device `model` lives on: its first parameter's (a tinytf model keeps all of them on one)."""
    parameter = next(iter(model.parameters()), None)
    if parameter is None:
        raise ValueError("model_device: `model` has no parameters, so it lives on no device")
    return parameter.device


def machine_cores() -> int:
    """The cores this process may run on (its affinity, where the OS tells it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def threads_asked() -> int | None:
    """OMP_NUM_THREADS, the intra-op threads the user (or torchrun) chose; None when unset
    or not a whole number of at least 1. The one place that reads it."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() and int(value) >= 1 else None
