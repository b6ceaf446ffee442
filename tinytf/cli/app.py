"""The `tinytf` command line: a thin layer over the library.

Each command parses its options, loads its run, calls the work behind it (commands/,
one module per idea) and shows the report it gets back (`show`: the note on stderr, the
text or JSON on stdout or in --out); the commands that look inside a run are in
looking.py. A `UserError` raised anywhere below, and a usage error that click finds in
the command line (an unknown option, a bad value), becomes one `error: ` line on stderr
and exit code 2 (errors.py). Modules that import torch are imported inside the commands
that need them, so `tinytf --help`, `tinytf COMMAND --help` and `tinytf config show`
start at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tinytf.cli import looking
from tinytf.cli.errors import EXIT_INTERRUPTED, OneLineUsageErrors, user_errors_exit_2
from tinytf.cli.options import (
    CheckpointOption,
    Device,
    ExportFormat,
    OverridesOption,
    PredictFormat,
    RunOption,
    RunsDirOption,
)
from tinytf.cli.output import check_out, input_lines, progress_bar, show
from tinytf.cli.runs import chosen_run
from tinytf.cli.sweep import sweep_app
from tinytf.errors import UserError
from tinytf.run.setup import describe_tasks, dump_checked_config, load_setup

app = typer.Typer(
    cls=OneLineUsageErrors,
    help="Build, train and look inside tiny Transformers.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
config_app = typer.Typer(cls=OneLineUsageErrors, help="Inspect and validate config files.", no_args_is_help=True)
app.add_typer(config_app, name="config")
app.add_typer(sweep_app, name="sweep")


# --------------------------------------------------------------------------- train


@app.command()
@user_errors_exit_2
def train(
    config: Annotated[Path | None, typer.Argument(help="A YAML config. Default: the built-in quickstart.")] = None,
    overrides: OverridesOption = None,
    runs_dir: RunsDirOption = Path("runs"),
    name: Annotated[str | None, typer.Option("--name", help="Run name prefix. Default: the config's name.")] = None,
    device: Annotated[Device | None, typer.Option("--device", help="Overrides train.device.")] = None,
    resume: Annotated[Path | None, typer.Option("--resume", help="Continue this run from its last checkpoint.")] = None,
) -> None:
    """Train a model; the run folder gets the config, checkpoints, metrics and TensorBoard logs.

    Example: tinytf train configs/quickstart.yaml --set train.steps=500

    On N processes: torchrun --nproc-per-node N -m tinytf train CONFIG (the same run, data-parallel)
    """
    from tinytf.cli.commands.train import interruption_note, start_training, training_summary
    from tinytf.training.distributed import JobFailed, Launch

    launch = Launch.from_environment()  # None without torchrun
    rank = 0 if launch is None else launch.rank
    try:
        result = start_training(config, overrides, runs_dir, name, None if device is None else device.value, resume)
    except (UserError, OSError):
        if rank:  # under torchrun, rank 0 says what went wrong: the others stopped on the same error
            raise typer.Exit(code=2) from None
        raise
    except JobFailed as err:  # another process of the torchrun job crashed or was killed
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(code=1) from None
    if rank:  # only rank 0 reports
        raise typer.Exit(code=EXIT_INTERRUPTED if result.interrupted else 0)
    if result.interrupted:
        typer.echo(interruption_note(result, launch), err=True)
        raise typer.Exit(code=EXIT_INTERRUPTED)
    typer.echo(training_summary(result))


# --------------------------------------------------------------------------- looking inside: looking.py

for command in (
    looking.attend,
    looking.heads,
    looking.circuits,
    looking.patch,
    looking.attribute,
    looking.compare,
    looking.checkpoints,
):
    app.command()(command)


# --------------------------------------------------------------------------- predict / eval


@app.command()
@user_errors_exit_2
def predict(
    text: Annotated[str | None, typer.Argument(help='An input, e.g. "3 1 2".')] = None,
    run: RunOption = None,
    runs_dir: RunsDirOption = Path("runs"),
    checkpoint: CheckpointOption = "best",
    file: Annotated[Path | None, typer.Option("--file", help="A file with one input per line.")] = None,
    output_format: Annotated[PredictFormat, typer.Option("--format", help="text or json lines.")] = PredictFormat.text,
) -> None:
    """Print a trained model's answer for TEXT, or for every line of --file.

    Example: tinytf predict "3 1 2"   (a sort model prints: 1 2 3)
    """
    from tinytf.cli.commands.predict import predictions

    if (text is None) == (file is None):
        raise UserError("give either TEXT or --file FILE")
    lines = [text] if file is None else input_lines(file)
    with chosen_run(run, runs_dir, checkpoint, heading=False) as loaded:  # stdout: the answers alone
        answers = predictions(loaded, lines, file, progress_bar)
    show(answers, as_json=output_format is PredictFormat.json)  # in one write: a write per line can be slower


@app.command("eval")
@user_errors_exit_2
def evaluate_run(
    run: RunOption = None,
    runs_dir: RunsDirOption = Path("runs"),
    checkpoint: CheckpointOption = "best",
    n: Annotated[int | None, typer.Option("--n", min=1, help="Score the first N held-out examples.")] = None,
) -> None:
    """Loss, token accuracy and exact-match accuracy on the run's held-out examples,
    which training never saw.

    Example: tinytf eval --n 500
    """
    from tinytf.cli.commands.predict import evaluation

    with chosen_run(run, runs_dir, checkpoint, heading=True) as loaded:
        show(evaluation(loaded, checkpoint, n, progress_bar))


# --------------------------------------------------------------------------- export


@app.command()
@user_errors_exit_2
def export(
    to: Annotated[ExportFormat, typer.Option("--to", help="tinytf's weights, or TransformerLens's.")],
    out: Annotated[Path, typer.Option("--out", help="The file to write, *.safetensors.")],
    run: RunOption = None,
    runs_dir: RunsDirOption = Path("runs"),
    checkpoint: CheckpointOption = "best",
) -> None:
    """Write a trained model, its config and vocabulary to one safetensors file, for
    TransformerLens (--to transformer-lens) or to load back (tinytf.load_exported).

    Example: tinytf export --to transformer-lens --out model.safetensors
    """
    from tinytf.interop.files import export as export_model
    from tinytf.interop.transformer_lens import unsupported

    if out.suffix != ".safetensors":
        raise UserError(f"--out {out}: both formats are safetensors files; name it *.safetensors")
    check_out(out, "safetensors", None, "model.safetensors")
    with chosen_run(run, runs_dir, checkpoint, heading=False) as loaded:
        if to is ExportFormat.transformer_lens and (reason := unsupported(loaded.config.model)) is not None:
            raise UserError(f"--to transformer-lens: {reason}")
        export_model(loaded, to.value, out)
    typer.echo(f"wrote {out}")


# --------------------------------------------------------------------------- tasks / board / config


@app.command("tasks")
@user_errors_exit_2
def tasks() -> None:
    """List every task: what it asks, the architectures it works with, an example.

    Example: tinytf tasks
    """
    for line in describe_tasks():
        typer.echo(line)


@app.command()
@user_errors_exit_2
def board(
    runs_dir: RunsDirOption = Path("runs"),
    port: Annotated[int, typer.Option("--port", help="Port to serve on.")] = 6006,
) -> None:
    """Start TensorBoard on the runs folder and print its URL (Ctrl-C stops it).

    One input's attention without a server: tinytf attend TEXT --format html, then open the page.

    Example: tinytf board --runs-dir runs
    """
    import time

    from tensorboard import program

    if not runs_dir.is_dir():
        raise UserError(f"{runs_dir}: no such folder; train a model first: tinytf train")
    tensorboard = program.TensorBoard()
    tensorboard.configure(argv=[None, "--logdir", str(runs_dir), "--port", str(port)])
    try:
        url = tensorboard.launch()
    except Exception as err:  # TensorBoard reports a busy port with its own exception types
        raise UserError(f"cannot start TensorBoard on port {port}: {err}") from None
    typer.echo(f"TensorBoard at {url} (Ctrl-C to stop)")
    typer.echo('one input\'s attention, offline: tinytf attend "..." --format html, then open the page it names')
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


@config_app.command("show")
@user_errors_exit_2
def config_show(
    config: Annotated[Path, typer.Argument(help="A YAML config file.")],
    overrides: OverridesOption = None,
) -> None:
    """Validate CONFIG and print it fully resolved, defaults included.

    Example: tinytf config show configs/quickstart.yaml --set model.d_model=64
    """
    typer.echo(dump_checked_config(load_setup(config, overrides or ())), nl=False)


def main() -> None:
    app(prog_name="tinytf")
