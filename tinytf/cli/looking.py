"""The commands that look inside a trained run: attend, heads, circuits, patch, attribute,
and checkpoints (what a run holds to look at). app.py registers them; each parses its
options, loads its run and shows the report that the work behind it (commands/) returns.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tinytf.cli.errors import user_errors_exit_2
from tinytf.cli.options import (
    Ablation,
    AttendFormat,
    CheckpointOption,
    FigureFormat,
    OutOption,
    OverTrainingOption,
    PatchAt,
    PatchBy,
    PatchFormat,
    RunOption,
    RunsDirOption,
    TableFormat,
)
from tinytf.cli.output import check_figure_out, check_out, progress_bar, show, show_figure, show_note
from tinytf.cli.runs import chosen_run
from tinytf.errors import UserError
from tinytf.tasks import CONSTRUCTIONS

# --------------------------------------------------------------------------- attend


@user_errors_exit_2
def attend(
    text: Annotated[str, typer.Argument(help='The input, as you would type it: "3 1 2", "the cat sat on the mat".')],
    run: RunOption = None,
    runs_dir: RunsDirOption = Path("runs"),
    checkpoint: CheckpointOption = "best",
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
        attended = attend(loaded, text, target, layer, head, checkpoint)
    if output_format is AttendFormat.table or (output_format is AttendFormat.json and out is None):
        show(attended, as_json=output_format is AttendFormat.json)
        return
    show_note(attended)
    path = attended.write(output_format.value, out)
    typer.echo(f"wrote {path}")
    if output_format is AttendFormat.html:
        typer.echo(f"open it in a browser (it needs no network): {path.resolve().as_uri()}")


# --------------------------------------------------------------------------- heads


@user_errors_exit_2
def heads(
    run: RunOption = None,
    runs_dir: RunsDirOption = Path("runs"),
    checkpoint: CheckpointOption = "best",
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
    output_format: Annotated[
        FigureFormat, typer.Option("--format", help="png: the score grid (curves over training).")
    ] = FigureFormat.table,
    out: OutOption = None,
    over_training: OverTrainingOption = False,
) -> None:
    """Score what every attention head does: how much of its attention follows each pattern
    (diagonal, previous token, first token, duplicate, induction, the task's own alignment),
    its entropy, and with --ablate whether the model needs it.

    Example: tinytf heads --ablate zero
    """
    from tinytf.cli.commands.heads import score_heads
    from tinytf.cli.commands.over_training import scores_over_training

    check_figure_out(out, output_format.value, "heads")
    if ablate is not None and output_format in (FigureFormat.csv, FigureFormat.png):
        raise UserError(
            f"--ablate with --format {output_format.value}: what ablation costs shows in the table and JSON"
        )
    if over_training:
        check_over_training(checkpoint, ablate=ablate is not None)
    table = output_format is FigureFormat.table and out is None  # on the terminal: the table's first line
    with chosen_run(run, runs_dir, "last" if over_training else checkpoint, heading=table or over_training) as loaded:
        if over_training:
            report = scores_over_training(loaded, n, text, progress_bar)
        else:
            report = score_heads(loaded, checkpoint, n, text, None if ablate is None else ablate.value)
    if over_training and run is None and not table:  # (its table names the run in its first line)
        typer.echo(f"run {loaded.run_dir} (every snapshot)", err=True)
    show_figure(report, output_format.value, out, "heads")


# --------------------------------------------------------------------------- circuits


@user_errors_exit_2
def circuits(
    run: RunOption = None,
    runs_dir: RunsDirOption = Path("runs"),
    checkpoint: CheckpointOption = "best",
    output_format: Annotated[
        FigureFormat, typer.Option("--format", help="png: heatmaps (curves over training).")
    ] = FigureFormat.table,
    out: OutOption = None,
    over_training: OverTrainingOption = False,
) -> None:
    """How the heads work together, from the weights alone: each head's Q-, K- and V-composition
    with every head that reads what it writes (cross-attention too), against a random
    baseline; how far each copies (OV); whether its keys are picked by position (QK).

    Example: tinytf circuits --run runs/induction-...
    """
    from tinytf.cli.commands.circuits import circuits as read_circuits
    from tinytf.cli.commands.over_training import circuits_over_training

    check_figure_out(out, output_format.value, "circuits")
    if over_training:
        check_over_training(checkpoint, ablate=False)
    table = output_format is FigureFormat.table and out is None
    with chosen_run(run, runs_dir, "last" if over_training else checkpoint, heading=table or over_training) as loaded:
        report = circuits_over_training(loaded, progress_bar) if over_training else read_circuits(loaded, checkpoint)
    if over_training and run is None and not table:
        typer.echo(f"run {loaded.run_dir} (every snapshot)", err=True)
    show_figure(report, output_format.value, out, "circuits")


# --------------------------------------------------------------------------- patch


# Each task's kinds of minimal pairs, for --construction's help
CONSTRUCTION_HELP = "; ".join(f"{', '.join(kinds)} ({name})" for name, kinds in CONSTRUCTIONS.items())


@user_errors_exit_2
def patch(
    run: RunOption = None,
    runs_dir: RunsDirOption = Path("runs"),
    checkpoint: CheckpointOption = "best",
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
    at: Annotated[
        PatchAt,
        typer.Option("--at", help="With --by head: patch each head at every position, the last, or the deciding word."),
    ] = PatchAt.all,
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
    if at is not PatchAt.all and by is not PatchBy.head:
        raise UserError(
            f"--at {at.value} picks where each head is patched: it goes with --by head, not --by {by.value}"
        )
    draw = PairDraw(clean, corrupt, answer, wrong, pairs, construction)
    with chosen_run(run, runs_dir, checkpoint, heading=output_format is PatchFormat.table) as loaded:
        report = patched(loaded, draw, by.value, checkpoint, at.value)
    if output_format is PatchFormat.png:
        show_note(report)
        typer.echo(f"wrote {report.write_png(out)}")
    else:
        show(report, as_json=output_format is PatchFormat.json)


@user_errors_exit_2
def attribute(
    text: Annotated[str, typer.Argument(help="A prompt, or a question; the model's next token is scored.")],
    answer: Annotated[str, typer.Option("--answer", help="The token whose logit is counted for.")],
    wrong: Annotated[str, typer.Option("--wrong", help="The token whose logit is counted against.")],
    run: RunOption = None,
    runs_dir: RunsDirOption = Path("runs"),
    checkpoint: CheckpointOption = "best",
    output_format: Annotated[TableFormat, typer.Option("--format")] = TableFormat.table,
) -> None:
    """Each head's, each MLP's, the embedding's and the biases' share of logit(answer) -
    logit(wrong) after TEXT, through the final LayerNorm: direct logit attribution.

    Example: tinytf attribute "the cat near the dogs" --answer sleeps --wrong sleep
    """
    from tinytf.cli.commands.patch import attributed

    with chosen_run(run, runs_dir, checkpoint, heading=output_format is TableFormat.table) as loaded:
        report = attributed(loaded, text, answer, wrong, checkpoint)
    show(report, as_json=output_format is TableFormat.json)


@user_errors_exit_2
def compare(
    construction: Annotated[str, typer.Option("--construction", help=f"Of these pairs: {CONSTRUCTION_HELP}.")],
    run: RunOption = None,
    runs_dir: RunsDirOption = Path("runs"),
    checkpoint: CheckpointOption = "best",
    pairs: Annotated[int, typer.Option("--pairs", min=2, max=10_000, help="Minimal pairs to patch.")] = 200,
    n: Annotated[
        int | None, typer.Option("--n", min=1, help="Held-out inputs to score. Default: 200, or all if fewer.")
    ] = None,
    output_format: Annotated[FigureFormat, typer.Option("--format", help="png: a scatter per place.")] = (
        FigureFormat.table
    ),
    out: OutOption = None,
) -> None:
    """Where each head looks beside what it causes: its attention score for the construction's
    pattern against the share of the answer it restores when patched at every position, at
    the last one and at the deciding word, with Spearman's rank correlation across heads.

    Example: tinytf compare --construction coreference
    """
    from tinytf.cli.commands.compare import compared

    check_figure_out(out, output_format.value, "compare")
    table = output_format is FigureFormat.table and out is None
    with chosen_run(run, runs_dir, checkpoint, heading=table) as loaded:
        report = compared(loaded, checkpoint, construction, pairs, n)
    show_figure(report, output_format.value, out, "compare")


# --------------------------------------------------------------------------- checkpoints


@user_errors_exit_2
def checkpoints(
    run: RunOption = None,
    runs_dir: RunsDirOption = Path("runs"),
    output_format: Annotated[TableFormat, typer.Option("--format", help="A table, or JSON.")] = TableFormat.table,
) -> None:
    """List the checkpoints a run holds, each a name for --checkpoint: best, last, and the
    snapshots step-K that train.snapshot_every keeps, with their step and size.

    Example: tinytf checkpoints --run runs/induction-...
    """
    from tinytf.cli.commands.checkpoints import list_checkpoints
    from tinytf.run.folder import resolve_run

    show(list_checkpoints(resolve_run(run, runs_dir)), as_json=output_format is TableFormat.json)


def check_over_training(checkpoint: str, *, ablate: bool) -> None:
    """--over-training reads every snapshot: a `UserError` for options that pick or ask more."""
    if checkpoint != "best":
        raise UserError(f"--checkpoint {checkpoint} with --over-training, which reads every snapshot; leave one out")
    if ablate:
        raise UserError("--ablate with --over-training: ablate one snapshot at a time (--checkpoint step-K)")
