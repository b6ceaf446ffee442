"""The `tinytf` command line: a thin layer over the library.

Each command parses its options, loads its run, calls the work behind it (commands/,
one module per idea) and shows the report it gets back (`show`: the note on stderr, the
text or JSON on stdout or in --out). A `UserError` raised anywhere below, and a usage
error that click finds in the command line (an unknown option, a bad value), becomes one
`error: ` line on stderr and exit code 2 (errors.py). Modules that import torch are
imported inside the commands that need them, so `tinytf --help`, `tinytf COMMAND --help`
and `tinytf config show` start at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tinytf.cli.errors import EXIT_INTERRUPTED, OneLineUsageErrors, user_errors_exit_2
from tinytf.cli.options import (
    Ablation,
    AttendFormat,
    Checkpoint,
    CheckpointOption,
    CircuitsFormat,
    Device,
    ExportFormat,
    OutOption,
    OverridesOption,
    PatchBy,
    PatchFormat,
    PredictFormat,
    RunOption,
    RunsDirOption,
    TableFormat,
)
from tinytf.cli.output import check_out, input_lines, progress_bar, write_text
from tinytf.cli.runs import chosen_run
from tinytf.cli.sweep import sweep_app
from tinytf.errors import UserError
from tinytf.run.setup import describe_tasks, dump_checked_config, load_setup
from tinytf.tasks import CONSTRUCTIONS

if TYPE_CHECKING:
    from tinytf.cli.commands import Report


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


# --------------------------------------------------------------------------- attend


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
        Path | None,
        typer.Option(
            "--out",
            help="Write json, npz, png or html to this file. Default: json prints to the terminal; "
            "npz, png and html go to a new attention.npz, .png or .html (attention-2.*, ... if taken).",
        ),
    ] = None,
) -> None:
    """Show what every attention head of a trained model looks at for TEXT.

    --format html writes one self-contained page to explore every layer and head in a browser, offline.

    Example: tinytf attend "the cat sat on the mat" --format html
    """
    from tinytf.cli.commands.attend import ATTENTION_FILES, attend

    check_out(out, output_format.value, ATTENTION_FILES, f"attention.{output_format.value}")
    with chosen_run(run, runs_dir, checkpoint, heading=output_format is AttendFormat.table) as loaded:
        attended = attend(loaded, text, target, layer, head, checkpoint.value)
    if output_format is AttendFormat.table or (output_format is AttendFormat.json and out is None):
        show(attended, as_json=output_format is AttendFormat.json)
        return
    show_note(attended)
    path = attended.write(output_format.value, out)
    typer.echo(f"wrote {path}")
    if output_format is AttendFormat.html:
        typer.echo(f"open it in a browser (it needs no network): {path.resolve().as_uri()}")


# --------------------------------------------------------------------------- heads


@app.command()
@user_errors_exit_2
def heads(
    run: RunOption = None,
    runs_dir: RunsDirOption = Path("runs"),
    checkpoint: CheckpointOption = Checkpoint.best,
    n: Annotated[
        int | None, typer.Option("--n", min=1, help="Score the first N held-out inputs. Default: 200, or all if fewer.")
    ] = None,
    text: Annotated[
        str | None, typer.Option("--text", help="Score this one typed input instead (after the model's answer).")
    ] = None,
    ablate: Annotated[
        Ablation | None,
        typer.Option(
            "--ablate",
            help="Also remove each head in turn (its output set to zero, "
            "or to its mean) and report the loss and accuracies without it.",
        ),
    ] = None,
    output_format: Annotated[TableFormat, typer.Option("--format", help="A table, or JSON.")] = TableFormat.table,
    out: OutOption = None,
) -> None:
    """Score what every attention head does: how much of its attention follows each pattern
    (diagonal, previous token, first token, duplicate, induction, the task's own alignment),
    its entropy, and with --ablate whether the model needs it.

    Example: tinytf heads --ablate zero
    """
    from tinytf.cli.commands.heads import score_heads

    check_out(out, output_format.value, None, "heads.json" if output_format is TableFormat.json else "heads.txt")
    heading = output_format is TableFormat.table and out is None  # on the terminal: the table's first line
    with chosen_run(run, runs_dir, checkpoint, heading=heading) as loaded:
        scored = score_heads(loaded, checkpoint.value, n, text, None if ablate is None else ablate.value)
    show(scored, as_json=output_format is TableFormat.json, out=out)


# --------------------------------------------------------------------------- circuits


@app.command()
@user_errors_exit_2
def circuits(
    run: RunOption = None,
    runs_dir: RunsDirOption = Path("runs"),
    checkpoint: CheckpointOption = Checkpoint.best,
    output_format: Annotated[CircuitsFormat, typer.Option("--format", help="png: heatmaps.")] = CircuitsFormat.table,
    out: OutOption = None,
) -> None:
    """How the heads work together, from the weights alone: each head's Q-, K- and V-composition
    with every head of a later layer, against a random baseline, and how far it copies (OV).

    Example: tinytf circuits --run runs/induction-...
    """
    from tinytf.cli.commands.circuits import circuits as read_circuits

    table = output_format is CircuitsFormat.table
    if output_format is CircuitsFormat.png and out is not None and out.suffix.lower() not in ("", ".png"):
        raise UserError(f"--out {out}: a {out.suffix} name for --format png; name the file *.png")
    check_out(out, output_format.value, None, "circuits.txt" if table else f"circuits.{output_format.value}")
    with chosen_run(run, runs_dir, checkpoint, heading=table and out is None) as loaded:
        report = read_circuits(loaded, checkpoint.value, as_csv=output_format is CircuitsFormat.csv)
    if output_format is CircuitsFormat.png:
        typer.echo(f"wrote {report.write_png(out)}")
    else:
        show(report, as_json=output_format is CircuitsFormat.json, out=out)


# --------------------------------------------------------------------------- patch


# Each task's kinds of minimal pairs, for --construction's help
CONSTRUCTION_HELP = "; ".join(f"{', '.join(kinds)} ({name})" for name, kinds in CONSTRUCTIONS.items())


@app.command()
@user_errors_exit_2
def patch(
    run: RunOption = None,
    runs_dir: RunsDirOption = Path("runs"),
    checkpoint: CheckpointOption = Checkpoint.best,
    clean: Annotated[str | None, typer.Option("--clean", help="The clean prompt.")] = None,
    corrupt: Annotated[
        str | None, typer.Option("--corrupt", help="The same prompt, but for the deciding word.")
    ] = None,
    answer: Annotated[str | None, typer.Option("--answer", help="The clean prompt's next token.")] = None,
    wrong: Annotated[str | None, typer.Option("--wrong", help="The corrupted prompt's next token.")] = None,
    pairs: Annotated[
        int | None, typer.Option("--pairs", min=1, max=10_000, help="Draw N minimal pairs instead.")
    ] = None,
    construction: Annotated[
        str | None, typer.Option("--construction", help=f"Of these pairs: {CONSTRUCTION_HELP}.")
    ] = None,
    by: Annotated[
        PatchBy, typer.Option("--by", help="Patch each head, or each head or layer at each position.")
    ] = PatchBy.head,
    output_format: Annotated[PatchFormat, typer.Option("--format")] = PatchFormat.table,
    out: Annotated[Path | None, typer.Option("--out", help="File for png (default: a new patch.png).")] = None,
) -> None:
    """Which heads and layers carry the word that decides the answer: activation patching.

    Each component's activation is taken from the clean prompt into the corrupted one;
    restored = how much of the clean answer's logit difference comes back (1: all, 0: none).

    Example: tinytf patch --pairs 200 --construction subject
    """
    from tinytf.cli.commands.patch import PairDraw, patched

    check_out(out, output_format.value, ("png",), "patch.png")
    draw = PairDraw(clean, corrupt, answer, wrong, pairs, construction)
    with chosen_run(run, runs_dir, checkpoint, heading=output_format is PatchFormat.table) as loaded:
        report = patched(loaded, draw, by.value, checkpoint.value)
    if output_format is PatchFormat.png:
        show_note(report)
        typer.echo(f"wrote {report.write_png(out)}")
    else:
        show(report, as_json=output_format is PatchFormat.json)


@app.command("attribute")
@user_errors_exit_2
def attribute_command(
    text: Annotated[str, typer.Argument(help="A prompt, or a question; the model's next token is scored.")],
    answer: Annotated[str, typer.Option("--answer", help="The token whose logit is counted for.")],
    wrong: Annotated[str, typer.Option("--wrong", help="The token whose logit is counted against.")],
    run: RunOption = None,
    runs_dir: RunsDirOption = Path("runs"),
    checkpoint: CheckpointOption = Checkpoint.best,
    output_format: Annotated[TableFormat, typer.Option("--format")] = TableFormat.table,
) -> None:
    """Each head's, each MLP's, the embedding's and the biases' share of logit(answer) -
    logit(wrong) after TEXT, through the final LayerNorm: direct logit attribution.

    Example: tinytf attribute "the cat near the dogs" --answer sleeps --wrong sleep
    """
    from tinytf.cli.commands.patch import attributed

    with chosen_run(run, runs_dir, checkpoint, heading=output_format is TableFormat.table) as loaded:
        report = attributed(loaded, text, answer, wrong, checkpoint.value)
    show(report, as_json=output_format is TableFormat.json)


# --------------------------------------------------------------------------- predict / eval


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
    checkpoint: CheckpointOption = Checkpoint.best,
    n: Annotated[int | None, typer.Option("--n", min=1, help="Score the first N held-out examples.")] = None,
) -> None:
    """Loss, token accuracy and exact-match accuracy on the run's held-out examples,
    which training never saw.

    Example: tinytf eval --n 500
    """
    from tinytf.cli.commands.predict import evaluation

    with chosen_run(run, runs_dir, checkpoint, heading=True) as loaded:
        show(evaluation(loaded, checkpoint.value, n, progress_bar))


# --------------------------------------------------------------------------- export


@app.command()
@user_errors_exit_2
def export(
    to: Annotated[ExportFormat, typer.Option("--to", help="tinytf's weights, or TransformerLens's.")],
    out: Annotated[Path, typer.Option("--out", help="The file to write, *.safetensors.")],
    run: RunOption = None,
    runs_dir: RunsDirOption = Path("runs"),
    checkpoint: CheckpointOption = Checkpoint.best,
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


def show(report: Report, *, as_json: bool = False, out: Path | None = None) -> None:
    """Every command's output: its note on stderr, then its text or JSON on stdout, or in
    the file `out`."""
    show_note(report)
    content = (report.to_json() if as_json else report.to_text()) + "\n"
    if out is None:
        typer.echo(content, nl=False)
    else:
        write_text(out, content)
        typer.echo(f"wrote {out}")


def show_note(report: Report) -> None:
    if report.note is not None:
        typer.echo(f"note: {report.note}", err=True)


def main() -> None:
    app(prog_name="tinytf")
