"""Checkpoints: written atomically, read without ever running code from the file.

A checkpoint is a plain dict of tensors, numbers and strings saved with `torch.save`,
written atomically (`files.atomic_writer`): a crash or kill at any moment leaves either
the old or the new checkpoint, never half of one. Loading uses `torch.load(weights_only=True)`, which
refuses any pickled object that is not such plain data, so a tampered file cannot
execute code. A SHA-256 of every tensor's bytes is saved with them and checked on
loading, so damaged weights are refused instead of silently used. A file that passes
both but holds the wrong shapes of data (`step: "abc"`, `model` a single tensor), or
weights that are NaN or infinite, is refused too, before any of it is used.

A checkpoint records the model and task settings it was trained with (`trained_with`):
a run folder whose config.yaml no longer says the same is refused (`config_mismatch`),
instead of loading weights that would mean something else.
"""

from __future__ import annotations

import hashlib
import io
import pickle
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel

from tinytf.errors import UserError, first_line
from tinytf.files import write_bytes_atomically

FORMAT = "tinytf-checkpoint-3"


class CheckpointError(UserError):
    """A checkpoint that is missing, damaged or not ours."""


def save_checkpoint(state: dict[str, Any], path: str | Path) -> None:
    """Atomically write `state` (plain data and tensors) to `path`, with its checksum.
    Serialised in memory first: a full disk is then an `OSError` naming `path`, never a
    failure inside torch's zip writer."""
    content = {key: value for key, value in state.items() if key not in ("format", "checksum")}
    buffer = io.BytesIO()
    torch.save({"format": FORMAT, **content, "checksum": tensor_checksum(content)}, buffer)
    write_bytes_atomically(path, buffer.getbuffer())


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by `save_checkpoint`; anything else is a `CheckpointError`."""
    path = Path(path)
    try:
        if not path.is_file():  # (raises, not False, in a folder the user may not enter)
            raise CheckpointError(f"{path}: checkpoint not found")
        with warnings.catch_warnings():  # torch warns about foreign pickles before refusing them
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location=map_location, weights_only=True)
    except PermissionError as err:
        raise CheckpointError(f"{path}: cannot read checkpoint: {err.strerror or err}") from None
    except pickle.UnpicklingError:
        # (torch's own message would suggest weights_only=False: that runs the file's code)
        raise CheckpointError(
            f"{path}: not a tinytf checkpoint: it holds Python objects, not just tensors and plain data; "
            "not loaded, and nothing in it was run"
        ) from None
    except CheckpointError:
        raise
    except Exception as err:  # a damaged zip can make torch.load fail in many ways (KeyError, IndexError...)
        raise CheckpointError(
            f"{path}: not a readable checkpoint, damaged or of another format; not loaded "
            f"({type(err).__name__}: {first_line(err)[:80]})"
        ) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        found = state.get("format") if isinstance(state, dict) else None
        if isinstance(found, str) and found.startswith("tinytf-checkpoint-"):
            raise CheckpointError(f"{path}: written by another version of tinytf ({found}; this one reads {FORMAT})")
        raise CheckpointError(f"{path}: not a tinytf checkpoint (expected format {FORMAT!r})")
    checksum = state.pop("checksum", None)
    content = {key: value for key, value in state.items() if key != "format"}
    if not isinstance(checksum, str) or checksum != tensor_checksum(content):
        raise CheckpointError(f"{path}: damaged: its content does not match the checksum saved with it; not loaded")
    problem = structure_problem(state)
    if problem is not None:
        raise CheckpointError(f"{path}: not a usable tinytf checkpoint: {problem}; not loaded")
    for name, weight in state["model"].items():  # training stops before a NaN reaches the weights
        if weight.is_floating_point() and not torch.isfinite(weight).all():
            raise CheckpointError(f"{path}: its weight {name!r} holds NaN or infinity; not loaded")
    return state


def structure_problem(state: dict[Any, Any]) -> str | None:
    """What is wrong with the shape of a checkpoint's data, in a few words; None if nothing.
    Every checkpoint has a `step` (a whole number >= 0), a `config` (see `trained_with`)
    and a `model` that maps parameter names to tensors; `optimizer`, `rng`, `best` and
    `window`, when there, are mappings. (What a resumed run needs
    inside them: `training_state_problem`.)"""
    if "step" not in state:
        return "it has no 'step'"
    step = state["step"]
    if type(step) is not int or step < 0:  # (not bool: True is an int to Python)
        return f"'step' is {describe(step)}, not a whole number >= 0"
    settings = state.get("config")
    if not isinstance(settings, dict) or not all(isinstance(key, str) for key in settings):
        return f"'config' is {describe(settings)}, not the model and task settings it was trained with"
    if "model" not in state:
        return "it has no 'model'"
    model = state["model"]
    if not isinstance(model, dict):
        return f"'model' is {describe(model)}, not a mapping of parameter names to tensors"
    for name, value in model.items():
        if not isinstance(name, str) or not isinstance(value, torch.Tensor):
            return f"'model' maps {describe(name)} to {describe(value)}, not a parameter name to a tensor"
    for key in ("optimizer", "rng", "best", "window"):
        if key in state and not isinstance(state[key], dict):
            return f"{key!r} is {describe(state[key])}, not a mapping"
    return None


def trained_with(model: BaseModel, task: BaseModel) -> dict[str, Any]:
    """What a checkpoint's weights mean something under: its model and task settings, as
    dotted keys ({"model.n_heads": 2, "task.name": "sort", ...}). Saved as its 'config'.
    Not task.path: where the text file lies (its content is checked by its SHA-256)."""
    sections = {"model": model.model_dump(mode="json"), "task": task.model_dump(mode="json", exclude={"path"})}
    return {f"{section}.{key}": value for section, values in sections.items() for key, value in values.items()}


def config_mismatch(state: dict[str, Any], model: BaseModel, task: BaseModel) -> str | None:
    """The first setting in which the model and task config `model`, `task` differ from
    what the checkpoint `state` was trained with, in a few words; None if none. A key the
    checkpoint does not record came to tinytf after it was trained: it had the default."""
    defaults = trained_with(type(model)(), type(task)())
    saved = defaults | state["config"]  # every key the config has, and any it no longer has
    current = trained_with(model, task)
    for key in sorted(saved):
        if key not in current:
            return f"it was trained with {key}={saved[key]!r}, a setting this version of tinytf does not have"
        if saved[key] != current[key]:
            return f"it was trained with {key}={saved[key]!r}, the config says {current[key]!r}"
    return None


def weights_mismatch(expected: dict[str, torch.Tensor], found: dict[str, torch.Tensor]) -> str | None:
    """The first parameter that a model's state dict `expected` and a checkpoint's weights
    `found` disagree on (missing, extra, or of another shape), in a few words; None if none."""
    for name in sorted(expected.keys() | found.keys()):
        if name not in found:
            return f"it has no weight {name!r}, which the config's model has"
        if name not in expected:
            return f"its weight {name!r} is not in the config's model"
        if found[name].shape != expected[name].shape:
            return (
                f"its weight {name!r} has shape {tuple(found[name].shape)}, "
                f"the config's model {tuple(expected[name].shape)}"
            )
    return None


TRAINING_STATE = ("step", "model", "optimizer", "rng", "best_score", "best", "window")


def training_state_problem(state: dict[Any, Any], fresh_optimizer: dict, optimizer_name: str) -> str | None:
    """What keeps `state` (a loaded checkpoint) from being resumed by a trainer whose new
    optimizer's state dict is `fresh_optimizer`, in a few words; None if nothing. Checked
    before anything is loaded: a tampered file is one error, not a failure mid-training."""
    if missing := [key for key in TRAINING_STATE if key not in state]:
        return f"it has no {', '.join(map(repr, missing))}: not a whole training state"
    if (found := structure_problem(state)) is not None:
        return found
    if state["optimizer"].keys() != fresh_optimizer.keys():
        return f"its 'optimizer' is the state of another optimizer than train.optimizer={optimizer_name}"
    if (found := kind_mismatch(fresh_optimizer, state["optimizer"], "'optimizer'")) is not None:
        return found
    rng, window = state["rng"], state["window"]
    if not all(isinstance(rng.get(key), torch.Tensor) for key in ("torch", "data")):
        return "'rng' should hold the tensors 'torch' and 'data'"
    by_rank = rng.get("torch_by_rank", [])
    if not isinstance(by_rank, list) or not all(isinstance(stream, torch.Tensor) for stream in by_rank):
        return "'rng'.'torch_by_rank' should be a list of tensors"
    # (a last.pt written before snapshots has no snapshot sums: nothing summed since one)
    numbers = [window.get("loss_sum"), window.get("snapshot_loss_sum", 0.0)]
    counts = [window.get("steps"), window.get("snapshot_steps", 0)]
    if not (all(isinstance(value, float) for value in numbers) and all(type(value) is int for value in counts)):
        return (
            "'window' should hold the numbers 'loss_sum' and 'snapshot_loss_sum' "
            "and the whole numbers 'steps' and 'snapshot_steps'"
        )
    return _best_problem(state["best"], state["best_score"])


def _best_problem(best: dict, best_score: Any) -> str | None:
    if best_score is not None and (not isinstance(best_score, list | tuple) or len(best_score) != 2):
        return "'best_score' should be None or two numbers"
    numbers = [*best.values(), *(best_score or [])]
    if not all(isinstance(value, int | float) and not isinstance(value, bool) for value in numbers):
        return "'best' and 'best_score' should hold numbers"
    if best and not {"step", "seq_acc", "token_acc", "loss"} <= best.keys():
        return "'best' should be empty or have step, seq_acc, token_acc and loss"
    return None


def load_optimizer_state(optimizer: torch.optim.Optimizer, saved: dict) -> None:
    """Load the optimizer's state (moments, step counts) from a checkpoint; its settings
    (betas, weight decay, Muon's) stay this run's config's, as in a new run: a tampered
    file cannot set them, and `--set train.betas=...` applies. A `ValueError` if a moment
    is not a tensor of its weight's shape."""
    configured = [{key: value for key, value in group.items() if key != "params"} for group in optimizer.param_groups]
    optimizer.load_state_dict(saved)
    for group, settings in zip(optimizer.param_groups, configured, strict=True):
        params = group["params"]
        group.clear()  # keys the file adds (e.g. another Muon's) do not stay either
        group.update(params=params, **settings)
    for parameter, moments in optimizer.state.items():  # AdamW's and Muon's: each weight's shape
        for name, moment in moments.items():
            if not isinstance(moment, torch.Tensor) or (name != "step" and moment.shape != parameter.shape):
                raise ValueError(f"{name} is {describe(moment)}, not a tensor of shape {tuple(parameter.shape)}")


def kind_mismatch(expected: Any, actual: Any, name: str) -> str | None:
    """Where `actual` holds another kind of value (number, string, tensor, mapping, list...)
    than `expected` does, in a few words ("'optimizer'.param_groups.0.lr is 'abc', not a
    number"); None if nowhere. Keys only one of them has and list items past the shorter
    list are not compared: another torch version may add or drop a few."""
    if _kind(actual) != _kind(expected):
        return f"{name} is {describe(actual)}, not {_kind(expected)}"
    if isinstance(expected, dict):
        items = [(key, expected[key], actual[key]) for key in expected if key in actual]
    elif isinstance(expected, list | tuple):
        items = list(zip(range(len(expected)), expected, actual, strict=False))
    else:
        return None
    for key, inner_expected, inner_actual in items:
        found = kind_mismatch(inner_expected, inner_actual, f"{name}.{key}")
        if found is not None:
            return found
    return None


def _kind(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "a boolean"
    kinds = {
        int: "a number",
        float: "a number",
        str: "a string",
        torch.Tensor: "a tensor",
        dict: "a mapping",
        list: "a list",
        tuple: "a list",
    }
    return next((kind for cls, kind in kinds.items() if isinstance(value, cls)), type(value).__name__)


def describe(value: Any) -> str:
    """A value for an error message: short, and on one line."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, dict | list | tuple):
        return f"a {type(value).__name__} of {len(value)}"
    text = repr(value)
    return " ".join(text.split()) if len(text) <= 40 else " ".join(text[:37].split()) + "..."


def tensor_checksum(state: Any) -> str:
    """SHA-256 over everything in `state`: each tensor's name, dtype, shape and bytes, and
    each other value's name and repr (the optimizer's settings, the step, the best score)."""
    digest = hashlib.sha256()
    for name, value in _leaves(state):
        if isinstance(value, torch.Tensor):
            digest.update(f"{name}:{value.dtype}:{tuple(value.shape)};".encode())
            digest.update(value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        else:
            digest.update(f"{name}={value!r};".encode())
    return digest.hexdigest()


def _leaves(value: Any, name: str = "") -> Iterator[tuple[str, Any]]:
    """Every value inside nested dicts, lists and tuples, with its path, in a fixed order."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{name}.{key!r}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _leaves(item, f"{name}.{index}")
    else:
        yield name, value
