"""The `tinytf` command line: a thin layer over the library.

Each command parses its options, calls one library function and formats the result.
A `UserError` raised anywhere below becomes one line on stderr and exit code 2.
Modules that import torch are imported inside the commands that need them, so
`tinytf --help`, `tinytf COMMAND --help` and `tinytf config show` start at once.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from enum import Enum
from importlib import resources
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from tinytf.errors import UserError
from tinytf.experiment import describe_tasks, dump_checked_config, load_config, load_run_config

app = typer.Typer(
    help="Build, train and look inside tiny Transformers.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
config_app = typer.Typer(help="Inspect and validate config files.", no_args_is_help=True)
app.add_typer(config_app, name="config")

Command = TypeVar("Command", bound=Callable[..., object])

QUICKSTART = "quickstart.yaml"  # packaged inside tinytf, so `tinytf train` works from any folder
EXIT_INTERRUPTED = 130  # the shell's convention for "stopped by Ctrl-C"

OverridesOption = Annotated[
    list[str] | None,
    typer.Option("--set", metavar="KEY=VALUE", help="Override a config value, e.g. --set model.d_model=64."),
]
RunOption = Annotated[
    Path | None, typer.Option("--run", help="A run folder. Default: the newest run under --runs-dir.")
]
RunsDirOption = Annotated[Path, typer.Option("--runs-dir", help="Where runs are kept.")]


class Checkpoint(str, Enum):
    best = "best"
    last = "last"


CheckpointOption = Annotated[
    Checkpoint, typer.Option("--checkpoint", help="best: best validation score; last: latest step.")
]


def user_errors_exit_2(command: Command) -> Command:
    """Turn a `UserError` into `error: <message>` on stderr and exit code 2, and Ctrl-C
    into exit code 130; never a traceback for either."""

    @functools.wraps(command)
    def wrapper(*args: object, **kwargs: object) -> object:
        try:
            return command(*args, **kwargs)
        except UserError as err:
            typer.echo(f"error: {err}", err=True)
            raise typer.Exit(code=2) from None
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
            raise typer.Exit(code=EXIT_INTERRUPTED) from None

    return wrapper  # type: ignore[return-value]


# --------------------------------------------------------------------------- train


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"
    mps = "mps"


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
    """
    from tinytf.loggers import ProgressBarLogger
    from tinytf.runs import CONFIG_FILE, checkpoint_path, resolve_run
    from tinytf.training import train as run_training

    overrides = list(overrides or [])
    if device is not None:
        overrides.append(f"train.device={device.value}")
    if resume is not None:
        if config is not None:
            raise UserError("--resume continues a run with its own config: drop CONFIG (use --set to change it)")
        resume = resolve_run(resume)
        resolved = load_run_config(resume / CONFIG_FILE, overrides)
    elif config is None:
        with resources.as_file(resources.files("tinytf") / QUICKSTART) as path:
            resolved = load_config(path, overrides)
        name = name or Path(QUICKSTART).stem
    else:
        resolved = load_config(config, overrides)
        name = name or config.stem

    result = run_training(resolved, runs_dir=runs_dir, name=name or "run", resume=resume,
                          loggers=[ProgressBarLogger(resolved.train.steps)])  # fmt: skip
    if result.interrupted:
        if checkpoint_path(result.run_dir, "last").exists():
            typer.echo(f"interrupted at step {result.step}; checkpoint saved in {result.run_dir}", err=True)
            typer.echo(f"resume with: tinytf train --resume {result.run_dir}", err=True)
        else:
            typer.echo(f"interrupted before the first checkpoint; nothing to resume in {result.run_dir}", err=True)
        raise typer.Exit(code=EXIT_INTERRUPTED)
    best = result.best
    typer.echo(f"run: {result.run_dir}")
    if best:
        typer.echo(f"best validation (step {best['step']}): seq_acc {best['seq_acc']:.3f}, "
                   f"token_acc {best['token_acc']:.3f}, loss {best['loss']:.4f}")  # fmt: skip
    typer.echo(f'next: tinytf attend "..." --run {result.run_dir}   |   tensorboard --logdir {runs_dir}')


# --------------------------------------------------------------------------- attend


class AttendFormat(str, Enum):
    table = "table"
    json = "json"
    npz = "npz"
    png = "png"


@app.command()
@user_errors_exit_2
def attend(
    text: Annotated[str, typer.Argument(help='The input, as you would type it: "3 1 2", "the cat sat on the mat".')],
    run: RunOption = None,
    runs_dir: RunsDirOption = Path("runs"),
    checkpoint: CheckpointOption = Checkpoint.best,
    target: Annotated[
        str | None, typer.Option("--target", help="Answer to attend with (default: the model's own).")
    ] = None,
    layer: Annotated[int | None, typer.Option("--layer", help="Only this layer.")] = None,
    head: Annotated[int | None, typer.Option("--head", help="Only this head.")] = None,
    output_format: Annotated[
        AttendFormat, typer.Option("--format", help="How to show the weights.")
    ] = AttendFormat.table,
    out: Annotated[
        Path | None, typer.Option("--out", help="File for json/npz/png (default: a new attention.*).")
    ] = None,
) -> None:
    """Show what every attention head of a trained model looks at for TEXT.

    Example: tinytf attend "the cat sat on the mat" --format png
    """
    from tinytf.attend import attention_report
    from tinytf.runs import load_run, resolve_run

    loaded = load_run(resolve_run(run, runs_dir), checkpoint.value)
    report = attention_report(loaded.model, loaded.framing, text, target).select(layer, head)

    if output_format is AttendFormat.table:
        from tinytf.viz import terminal_heatmap

        typer.echo(f"run {loaded.run_dir} ({checkpoint.value} checkpoint, step {loaded.step})")
        if report.source_tokens is not None:
            typer.echo(f"source: {' '.join(report.source_tokens)}")
        typer.echo(f"tokens: {' '.join(report.tokens)}")
        if report.answer is not None:
            typer.echo(f"answer: {loaded.vocab.join(report.answer)}")
        for attention_map in report.maps:
            for h in range(attention_map.n_heads):
                typer.echo("")
                typer.echo(terminal_heatmap(attention_map, h))
        return
    if output_format is AttendFormat.json and out is None:
        typer.echo(report.to_json())
        return
    path = out or _fresh_path(Path(f"attention.{output_format.value}"))
    try:
        if output_format is AttendFormat.json:
            path.write_text(report.to_json(), encoding="utf-8")
        elif output_format is AttendFormat.npz:
            report.save_npz(path)
        else:
            from tinytf.viz import report_figure, save_figure

            save_figure(report_figure(report), path)
    except OSError as err:
        raise UserError(f"{path}: cannot write ({err.strerror or err})") from None
    typer.echo(f"wrote {path}")


def _fresh_path(path: Path) -> Path:
    """`path`, or `stem-2.ext`, `stem-3.ext`... whichever does not exist yet: never overwrite."""
    candidate, number = path, 1
    while candidate.exists():
        number += 1
        candidate = path.with_name(f"{path.stem}-{number}{path.suffix}")
    return candidate


# --------------------------------------------------------------------------- predict / eval


class PredictFormat(str, Enum):
    text = "text"
    json = "json"


@app.command()
@user_errors_exit_2
def predict(
    text: Annotated[str | None, typer.Argument(help='An input, e.g. "3 1 2".')] = None,
    run: RunOption = None,
    runs_dir: RunsDirOption = Path("runs"),
    checkpoint: CheckpointOption = Checkpoint.best,
    file: Annotated[Path | None, typer.Option("--file", help="A file with one input per line.")] = None,
    output_format: Annotated[PredictFormat, typer.Option("--format", help="text or json lines.")] = PredictFormat.text,
) -> None:
    """Print a trained model's answer for TEXT, or for every line of --file.

    Example: tinytf predict "3 1 2"   (a sort model prints: 1 2 3)
    """
    from tinytf.evaluate import predict as predict_answers
    from tinytf.runs import load_run, resolve_run

    if (text is None) == (file is None):
        raise UserError("give either TEXT or --file FILE")
    if file is not None:
        try:
            inputs = [line for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
        except (OSError, UnicodeDecodeError) as err:
            raise UserError(f"{file}: cannot read: {err}") from None
        if not inputs:
            raise UserError(f"{file}: no inputs (one per line)")
    else:
        inputs = [text]
    loaded = load_run(resolve_run(run, runs_dir), checkpoint.value)
    for source, answer in predict_answers(loaded.model, loaded.framing, inputs):
        if output_format is PredictFormat.json:
            typer.echo(json.dumps({"input": source, "output": answer}, ensure_ascii=False))
        else:
            typer.echo(" ".join(answer))


@app.command("eval")
@user_errors_exit_2
def evaluate_run(
    run: RunOption = None,
    runs_dir: RunsDirOption = Path("runs"),
    checkpoint: CheckpointOption = Checkpoint.best,
    n: Annotated[int | None, typer.Option("--n", min=1, help="Score the first N held-out examples.")] = None,
) -> None:
    """Loss, token accuracy and exact-match accuracy on the run's held-out examples,
    which training never saw.

    Example: tinytf eval --n 500
    """
    from tinytf.data import TaskData
    from tinytf.evaluate import evaluate
    from tinytf.runs import load_run, resolve_run

    loaded = load_run(resolve_run(run, runs_dir), checkpoint.value)
    held_out = TaskData(loaded.task, loaded.config.seed, loaded.config.task.eval_size).held_out
    if n is not None and n > len(held_out):
        raise UserError(f"--n {n}: the run's held-out set has {len(held_out)} examples (task.eval_size)")
    held_out = held_out if n is None else held_out[:n]
    metrics = evaluate(loaded.model, loaded.framing, held_out)
    typer.echo(f"run {loaded.run_dir} ({checkpoint.value} checkpoint, step {loaded.step}), "
               f"{len(held_out)} held-out examples")  # fmt: skip
    for key, value in metrics.items():
        typer.echo(f"{key:>10}: {value:.4f}")


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
    typer.echo(dump_checked_config(load_config(config, overrides or ())), nl=False)


def main() -> None:
    app(prog_name="tinytf")
