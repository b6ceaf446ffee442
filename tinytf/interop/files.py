"""A trained model in one file that leaves tinytf: safetensors, with what reads it.

Both formats are safetensors files (any safetensors reader opens them; no pickle), whose
header metadata carries the run's config, vocabulary and step:

    tinytf             tinytf's own weights (`tinytf.load_exported` rebuilds the model)
    transformer-lens   the weights under TransformerLens's names (transformer_lens.py),
                       and `transformer_lens_config`, the keyword arguments of its config

    metadata: format, tinytf_config (the run's config.yaml), vocab (its vocab.json), step
"""

from __future__ import annotations

import json
from os import PathLike
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save

from tinytf import arguments
from tinytf.config import parse_config
from tinytf.errors import ConfigError, UserError, first_line
from tinytf.files import check_regular_file, naming_errors, write_bytes_atomically
from tinytf.interop.transformer_lens import load_tl_state_dict, tl_config, tl_state_dict
from tinytf.run.load import LoadedRun
from tinytf.run.setup import Setup, dump_checked_config
from tinytf.tasks.vocab import Vocabulary

FORMATS = ("safetensors", "transformer-lens")
MAX_EXPORT_BYTES = 8 * 2**30  # a tiny Transformer's file is kilobytes to megabytes


def export(run: LoadedRun, to: str, out: str | Path) -> None:
    """Write `run`'s model to `out` in format `to` (one of FORMATS); atomically: a kill
    or a full disk leaves the old file whole, or none. A ValueError for a model the
    format cannot hold (`transformer_lens.unsupported`)."""
    arguments.instance(run, "run", LoadedRun, "a loaded run (tinytf.load_run or tinytf.load_exported)")
    if to not in FORMATS:
        raise ValueError(f"to must be one of {', '.join(FORMATS)}, not {to!r}")
    arguments.instance(out, "out", str | PathLike, "a file's path")
    metadata = {
        "format": "tinytf" if to == "safetensors" else to,
        "tinytf_config": dump_checked_config(Setup.of(run.config, data=False)),  # the run's config.yaml
        "vocab": run.vocab.to_json(),
        "step": str(run.step),
    }
    if to == "transformer-lens":
        tensors = tl_state_dict(run.model)  # a ValueError for a model TransformerLens cannot hold
        metadata["transformer_lens_config"] = json.dumps(tl_config(run.config.model, run.model.vocab_size))
    else:
        tensors = {name: value.detach().contiguous() for name, value in run.model.state_dict().items()}
        if run.config.model.tie_embeddings:
            del tensors["lm_head.weight"]  # the token embedding itself (safetensors keeps no shared tensors)
    with naming_errors(out):
        write_bytes_atomically(out, save({name: value.cpu() for name, value in tensors.items()}, metadata))


def load_exported(path: str | Path, device: str | torch.device = "cpu") -> LoadedRun:
    """A model that `export` wrote, in either format, with its task, framing and
    vocabulary, in eval mode: what `tinytf.load_run` gives for a run folder (`run_dir` is the file)."""
    path = Path(arguments.instance(path, "path", str | PathLike, "the path of a file tinytf export wrote"))
    device = arguments.torch_device(device, "device")
    check_regular_file(path, MAX_EXPORT_BYTES, "exported model")
    try:
        with safe_open(path, framework="pt") as file:
            metadata = file.metadata() or {}
            tensors = {name: file.get_tensor(name) for name in file.keys()}  # noqa: SIM118 (not a dict)
    except (SafetensorError, OSError) as err:
        raise UserError(f"{path}: not a safetensors file ({first_line(err)})") from None
    if metadata.get("format") not in ("tinytf", "transformer-lens") or not {"tinytf_config", "vocab"} <= set(metadata):
        raise UserError(f"{path}: a safetensors file that tinytf export did not write (no tinytf_config in its header)")
    try:
        config = parse_config(metadata["tinytf_config"], source=f"{path}: tinytf_config")
        setup = Setup.of(config, data=False).with_vocab(Vocabulary.from_json(metadata["vocab"]))
    except (ConfigError, ValueError) as err:
        raise UserError(f"{path}: its header does not describe a tinytf model ({err})") from None
    model = setup.build_model()
    try:
        if metadata["format"] == "transformer-lens":
            load_tl_state_dict(model, tensors)
        else:
            if config.model.tie_embeddings:
                tensors["lm_head.weight"] = tensors["token_embedding.weight"]
            model.load_state_dict(tensors)
    except (KeyError, RuntimeError, ValueError) as err:
        raise UserError(f"{path}: its weights do not fit its config ({first_line(err)})") from None
    step = metadata.get("step", "0")
    if not (step.isascii() and step.isdigit()):
        raise UserError(f"{path}: its header's step is {step!r}, not a step number")
    return LoadedRun(path, setup.config, setup.task, setup.framing, model.to(device).eval(), int(step))
