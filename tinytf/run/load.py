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
from tinytf.device import model_device
from tinytf.errors import ConfigError, UserError
from tinytf.model import Transformer
from tinytf.run.checkpoint import CheckpointError, config_mismatch, load_checkpoint, weights_mismatch
from tinytf.run.folder import SNAPSHOT, VOCAB_FILE, RunFolder, is_checkpoint_name, resolve_run, run_with, snapshot_name
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
    train_loss: float | None = None  # a snapshot's: the mean training loss since the one before

    @property
    def vocab(self) -> Vocabulary:
        return self.task.vocab

    def at(self, which: str) -> LoadedRun:
        """The same run with the weights of its checkpoint `which` ("best", "last", "step-<k>")."""
        folder = RunFolder(self.run_dir)
        state = _checked_state(folder, self.config, which)
        model = _model_with(state, Setup(self.config, self.task, self.framing), folder.checkpoint(which), folder)
        device = model_device(self.model)
        return LoadedRun(self.run_dir, self.config, self.task, self.framing, model.to(device).eval(), *_step(state))


def load_run(run_dir: str | Path | None = None, which: str = "best", device: str | torch.device = "cpu") -> LoadedRun:
    """A trained model from its run folder (None: the newest under ./runs with the `which`
    checkpoint, as the commands pick without --run), with its task, framing and saved vocabulary.
    which: "best", "last", or a snapshot "step-<k>" (train.snapshot_every)."""
    if run_dir is not None:
        arguments.instance(run_dir, "run_dir", str | PathLike, "a run folder's path, or None for the newest")
    if not is_checkpoint_name(which):
        raise ValueError(f"which must be 'best', 'last' or a snapshot's 'step-<k>', not {which!r}")
    device = arguments.torch_device(device, "device")
    folder = RunFolder(resolve_run(run_dir, which=run_with(which)))
    setup = load_run_setup(folder.config, data=False)  # the saved vocabulary is all it needs
    setup = setup.with_vocab(Vocabulary.load(folder.vocab))
    state = _checked_state(folder, setup.config, which)
    model = _model_with(state, setup, folder.checkpoint(which), folder)
    return LoadedRun(folder.path, setup.config, setup.task, setup.framing, model.to(device).eval(), *_step(state))


def _checked_state(folder: RunFolder, config: Config, which: str) -> dict:
    """The checkpoint `which` of `folder`, read and checked to belong with `config`."""
    path = folder.checkpoint(which)
    if not path.exists():
        raise UserError(f"{folder.path}: {missing_checkpoint(folder, which)}")
    state = load_checkpoint(path)
    check_belongs(path, state, config, folder)
    return state


def missing_checkpoint(folder: RunFolder, which: str) -> str:
    """Why `folder` has no checkpoint `which`, and what it has instead, in a few words."""
    if not SNAPSHOT.fullmatch(which):
        return f"no {which} checkpoint yet (checkpoints/{which}.pt); train longer or wait"
    steps = [step for step, _ in folder.snapshots()]
    if not steps:
        return f"no snapshot {which}: the run keeps none (train with train.snapshot_every: N to keep them)"
    shown = [snapshot_name(step) for step in steps]
    shown = ", ".join(shown if len(shown) <= 4 else [*shown[:3], "...", shown[-1]])
    return f"no snapshot {which}; the run has {shown}"


def _model_with(state: dict, setup: Setup, path: Path, folder: RunFolder) -> Transformer:
    model = setup.build_model()
    if (found := weights_mismatch(model.state_dict(), state["model"])) is not None:
        raise CheckpointError(f"{path} does not fit {folder.config} and {VOCAB_FILE}: {found}")
    model.load_state_dict(state["model"])
    return model


def _step(state: dict) -> tuple[int, float | None]:
    """A checkpoint's step, and a snapshot's training loss (None for best and last)."""
    loss = state.get("train_loss")
    return int(state["step"]), loss if isinstance(loss, float) else None


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
