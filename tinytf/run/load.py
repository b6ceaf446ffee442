"""A trained run read back: its model from a checkpoint (`load_run`), or its last state to
continue training (`open_for_resume`), each checked to belong with the run's config."""

from __future__ import annotations

from dataclasses import dataclass
from os import PathLike
from pathlib import Path

import torch

from tinytf import arguments
from tinytf.config import Config
from tinytf.data.base import Framing
from tinytf.errors import ConfigError, UserError
from tinytf.model import Transformer
from tinytf.run.checkpoint import CheckpointError, config_mismatch, load_checkpoint, weights_mismatch
from tinytf.run.folder import VOCAB_FILE, RunFolder, resolve_run
from tinytf.run.setup import Setup, check_unchanged, load_run_setup, read_saved_config
from tinytf.tasks import Task
from tinytf.tasks.vocab import Vocabulary


@dataclass
class LoadedRun:
    run_dir: Path
    config: Config
    task: Task
    framing: Framing
    model: Transformer  # in eval mode
    step: int  # the training step the checkpoint was saved at

    @property
    def vocab(self) -> Vocabulary:
        return self.task.vocab


def load_run(run_dir: str | Path | None = None, which: str = "best", device: str | torch.device = "cpu") -> LoadedRun:
    """A trained model from its run folder (None: the newest under ./runs with the `which`
    checkpoint, as the commands pick without --run), with its task, framing and saved vocabulary."""
    if run_dir is not None:
        arguments.instance(run_dir, "run_dir", str | PathLike, "a run folder's path, or None for the newest")
    if which not in ("best", "last"):
        raise ValueError(f"which must be 'best' or 'last', not {which!r}")
    device = arguments.torch_device(device, "device")
    folder = RunFolder(resolve_run(run_dir, which=which))
    setup = load_run_setup(folder.config, data=False)  # the saved vocabulary is all it needs
    setup = setup.with_vocab(Vocabulary.load(folder.vocab))
    path = folder.checkpoint(which)
    if not path.exists():
        raise UserError(
            f"{folder.path}: no {which} checkpoint yet ({path.relative_to(folder.path)}); train longer or wait"
        )
    state = load_checkpoint(path)
    check_belongs(path, state, setup.config, folder)
    model = setup.build_model()
    if (found := weights_mismatch(model.state_dict(), state["model"])) is not None:
        raise CheckpointError(f"{path} does not fit {folder.config} and {VOCAB_FILE}: {found}")
    model.load_state_dict(state["model"])
    step = int(state.get("step", 0))
    return LoadedRun(folder.path, setup.config, setup.task, setup.framing, model.to(device).eval(), step)


def open_for_resume(folder: RunFolder, setup: Setup) -> tuple[dict, Vocabulary]:
    """The run's last state and vocabulary, once `setup` is known to continue it. Call it
    holding the run's lock (`folder.locked()`), so that no other trainer writes meanwhile;
    everything is checked before anything is written: a refused resume changes nothing."""
    config = setup.config
    check_unchanged(read_saved_config(folder.config), config)
    folder.check_data(setup.task)
    state = load_checkpoint(folder.checkpoint("last"))
    check_belongs(folder.checkpoint("last"), state, config, folder)
    if config.train.steps < state["step"]:
        raise ConfigError(
            f"train.steps={config.train.steps}: this run has trained {state['step']} steps "
            f"already; resume with train.steps of at least {state['step']}"
        )
    return state, Vocabulary.load(folder.vocab)


def check_belongs(path: Path, state: dict, config: Config, folder: RunFolder) -> None:
    """A `CheckpointError` unless the checkpoint `state` (read from `path`) was trained with
    the model and task settings of `config` (the run's config.yaml, with any overrides)."""
    if (found := config_mismatch(state, config.model, config.task)) is not None:
        raise CheckpointError(
            f"{path} does not belong with {folder.config}: {found}; was config.yaml edited, "
            "or the checkpoint copied from another run?"
        )
