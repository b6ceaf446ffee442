"""Checks on what a Python caller hands tinytf's public functions.

Misuse -- a wrong type, shape or range, or nothing where something is needed -- is a
`TypeError` or `ValueError` raised before any work is done, naming the argument and
what it accepts. (A mistake in what a user typed or wrote in a config is a `UserError`
instead: see errors.py.)
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from os import PathLike
from typing import Any

from tinytf.lazy import torch


def whole_number(value: Any, name: str, *, low: int = 0, high: int | None = None) -> int:
    """`value` as an int in [low, high]: an int, a NumPy integer or a one-element integer
    tensor; not a bool, a float or a string."""
    if isinstance(value, bool) or (isinstance(value, torch.Tensor) and value.dtype == torch.bool):
        raise TypeError(f"{name} must be a whole number, not {_kind(value)}")
    try:
        number = operator.index(value)
    except TypeError:  # a tensor of several elements, or of floats
        raise TypeError(f"{name} must be a whole number, not {_kind(value)}") from None
    if number < low or (high is not None and number > high):
        upper = f" to {high}" if high is not None else " or more"
        raise ValueError(f"{name} must be {low}{upper}, not {number}")
    return number


def optional_whole_number(value: Any, name: str, *, low: int = 0, high: int | None = None) -> int | None:
    return None if value is None else whole_number(value, name, low=low, high=high)


def token_id(value: Any, name: str, vocab_size: int) -> int:
    """A token id of a vocabulary of `vocab_size` tokens (negative ids are not read from the end)."""
    return whole_number(value, name, low=0, high=vocab_size - 1)


def instance(value: Any, name: str, kind: type | tuple[type, ...], what: str) -> Any:
    """`value`, if it is a `kind`; a TypeError saying `what` is expected otherwise."""
    if not isinstance(value, kind):
        raise TypeError(f"{name} must be {what}, not {_kind(value)}")
    return value


def not_a_path(value: Any, name: str, instead: str) -> None:
    """A TypeError for a file's path where a loaded object is expected, saying how to load it."""
    if isinstance(value, str | PathLike):
        raise TypeError(f"{name} must be {instead}, not a path ({str(value)!r})")


def sequence_of(value: Any, name: str, kind: type, what: str, *, empty: bool = False) -> list:
    """`value` as a list of `kind`s: a list or tuple (not a string, nor a single item)."""
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a list of {what}, not {_kind(value)}")
    items = list(value)
    for index, item in enumerate(items):
        if not isinstance(item, kind):
            raise TypeError(f"{name}[{index}] is {_kind(item)}: {name} must be a list of {what}")
    if not items and not empty:
        raise ValueError(f"{name} is empty: give at least one of {what}")
    return items


def id_tensor(value: Any, name: str, ndim: int) -> torch.Tensor:
    """`value` if it is a tensor of ids (int64 or int32) of `ndim` dimensions, none of them empty."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a tensor of token ids, not {_kind(value)}")
    if value.dtype not in (torch.long, torch.int):
        raise TypeError(f"{name} must hold token ids (torch.long or torch.int), not {value.dtype}")
    if value.dim() != ndim or 0 in value.shape:
        raise ValueError(f"{name} must have {ndim} non-empty dimension(s), not shape {tuple(value.shape)}")
    return value


def real_tensor(value: Any, name: str, ndim: int) -> torch.Tensor:
    """`value` if it is a floating-point tensor of `ndim` dimensions, none of them empty."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a floating-point tensor, not {_kind(value)}")
    if not value.dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating-point tensor, not {value.dtype}")
    if value.dim() != ndim or 0 in value.shape:
        raise ValueError(f"{name} must have {ndim} non-empty dimension(s), not shape {tuple(value.shape)}")
    return value


def torch_device(value: Any, name: str) -> torch.device:
    """`value` as a torch.device: a device, or a name torch reads ("cpu", "cuda:0"...)."""
    if isinstance(value, bool) or not isinstance(value, str | int | torch.device):
        raise TypeError(f"{name} must name a torch device ('cpu', 'cuda', 'cuda:0'...), not {_kind(value)}")
    try:
        return torch.device(value)
    except (RuntimeError, ValueError) as err:  # an unknown device type; bytes torch could not decode
        raise ValueError(f"{name} must name a torch device ('cpu', 'cuda', 'cuda:0'...), not {value!r}") from err


def _kind(value: Any) -> str:
    """How a value is named in an error: its type, with a tensor's shape and dtype."""
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return f"{type(value).__name__} {value!r}"[:80]
