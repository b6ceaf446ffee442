"""`tinytf train`: the options -> a checked setup -> `tinytf.training.train`, and what the
command says when it ends: where the run is and what to type next, or how to resume it."""

from __future__ import annotations

import shlex
from importlib import resources
from pathlib import Path

from tinytf.errors import UserError
from tinytf.files import check_run_name
from tinytf.run.folder import RunFolder, resolve_run
from tinytf.run.setup import load_run_setup, load_setup
from tinytf.training import trainer as training
from tinytf.training.distributed import Launch
from tinytf.training.loggers import ProgressBarLogger
from tinytf.training.trainer import TrainResult

QUICKSTART = "quickstart.yaml"  # packaged inside tinytf, so `tinytf train` works from any folder


def start_training(
    config: Path | None,
    overrides: list[str] | None,
    runs_dir: Path,
    name: str | None,
    device: str | None,
    resume: Path | None,
) -> TrainResult:
    """`train`'s options -> the resolved setup -> `tinytf.training.trainer.train`."""
    if name is not None:  # checked before the config is loaded: a wrong name fails at once
        check_run_name(name, runs_dir)
    overrides = list(overrides or [])
    if device is not None:
        overrides.append(f"train.device={device}")
    if resume is not None:
        if config is not None:
            raise UserError("--resume continues a run with its own config: drop CONFIG (use --set to change it)")
        resume = resolve_run(resume)
        setup = load_run_setup(RunFolder(resume).config, overrides)
    elif config is None:
        with resources.as_file(resources.files("tinytf") / QUICKSTART) as path:
            setup = load_setup(path, overrides)
        name = name or Path(QUICKSTART).stem
    else:
        setup = load_setup(config, overrides)
        name = name or config.stem
    loggers = [ProgressBarLogger(setup.config.train.steps, setup.config.train.stop_at_accuracy)]
    # training.train looked up at the call, so that a wrapper put there (a test's) is the one run
    return training.train(setup, runs_dir=runs_dir, name=name or "run", resume=resume, loggers=loggers)


def training_summary(result: TrainResult) -> str:
    """The run folder, its best validation scores and what to do next (commands to paste)."""
    lines = [f"run {result.run_dir}"]
    if best := result.best:
        lines.append(
            f"best validation (step {best['step']}): seq_acc {best['seq_acc']:.3f}, "
            f"token_acc {best['token_acc']:.3f}, loss {best['loss']:.4f}"
        )
    run, runs = (shlex.quote(str(path)) for path in (result.run_dir, result.run_dir.parent))
    lines.append(f'next: tinytf attend "..." --run {run}   |   tensorboard --logdir {runs}')
    return "\n".join(lines)


def interruption_note(result: TrainResult, launch: Launch | None) -> str:
    """What Ctrl-C left behind: where the run can resume from, and the command that does it."""
    if not RunFolder(result.run_dir).checkpoint("last").exists():
        return f"interrupted before the first checkpoint; nothing to resume in {result.run_dir}"
    return (
        f"interrupted at step {result.step}; checkpoint saved in {result.run_dir}\n"
        f"resume with: {launch_command(launch)} train --resume {shlex.quote(str(result.run_dir))}"
    )


def launch_command(launch: Launch | None) -> str:
    """How this process was started, to say how to resume: `tinytf`, or torchrun's line."""
    if launch is None:
        return "tinytf"
    if launch.local_world_size != launch.world_size:  # several machines
        return "torchrun <the same options, on every machine> -m tinytf"
    return f"torchrun --nproc-per-node {launch.world_size} -m tinytf"
