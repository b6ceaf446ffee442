"""Checkpoints: written atomically, read without ever running code from the file.

A checkpoint is a plain dict of tensors, numbers and strings saved with `torch.save`,
written atomically (`files.atomic_writer`): a crash or kill at any moment leaves either
the old or the new checkpoint, never half of one. Loading uses `torch.load(weights_only=True)`, which
refuses any pickled object that is not such plain data, so a tampered file cannot
execute code. A SHA-256 of every tensor's bytes is saved with them and checked on
loading, so damaged weights are refused instead of silently used.
"""

from __future__ import annotations

import hashlib
import pickle
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from tinytf.errors import UserError, first_line
from tinytf.files import atomic_writer

FORMAT = "tinytf-checkpoint-1"


class CheckpointError(UserError):
    """A checkpoint that is missing, damaged or not ours."""


def save_checkpoint(state: dict[str, Any], path: str | Path) -> None:
    """Atomically write `state` (plain data and tensors) to `path`, with its checksum."""
    with atomic_writer(path) as file:
        torch.save({"format": FORMAT, **state, "checksum": tensor_checksum(state)}, file)


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by `save_checkpoint`; anything else is a `CheckpointError`."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found")
    try:
        with warnings.catch_warnings():  # torch warns about foreign pickles before refusing them
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError:
        # (torch's own message would suggest weights_only=False: that runs the file's code)
        raise CheckpointError(
            f"{path}: not a tinytf checkpoint: it holds Python objects, not just tensors and plain data; "
            "not loaded, and nothing in it was run"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError) as err:
        raise CheckpointError(f"{path}: not a readable checkpoint, damaged or of another format; not loaded "
                              f"({first_line(err)[:80]})") from None  # fmt: skip
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a tinytf checkpoint (expected format {FORMAT!r})")
    checksum = state.pop("checksum", None)  # checkpoints written before checksums have none
    content = {key: value for key, value in state.items() if key != "format"}
    if checksum is not None and checksum != tensor_checksum(content):
        raise CheckpointError(f"{path}: damaged: its tensors do not match the checksum saved with them; not loaded")
    return state


def tensor_checksum(state: Any) -> str:
    """SHA-256 over the names, dtypes, shapes and bytes of every tensor in `state`."""
    digest = hashlib.sha256()
    for name, tensor in _tensors(state):
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _tensors(value: Any, name: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor inside nested dicts, lists and tuples, with its path, in a fixed order."""
    if isinstance(value, torch.Tensor):
        yield name, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _tensors(item, f"{name}.{key}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _tensors(item, f"{name}.{index}")
