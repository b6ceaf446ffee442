"""The `tinytf` command line: a thin layer over the library.

Each command parses its options, calls one library function and formats the result.
A `UserError` raised anywhere below, and a usage error that click finds in the command
line (an unknown option, a bad value), becomes one `error: ` line on stderr and exit code 2.
Modules that import torch are imported inside the commands that need them, so
`tinytf --help`, `tinytf COMMAND --help` and `tinytf config show` start at once.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import stat
import sys
from collections.abc import Callable, Iterator
from enum import Enum
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
from typer.core import TyperGroup

try:  # typer >= 0.2x carries its own copy of click
    from typer._click.exceptions import BadParameter, ClickException, MissingParameter, NoArgsIsHelpError
except ImportError:  # older typer runs on click itself
    from click.exceptions import BadParameter, ClickException, MissingParameter, NoArgsIsHelpError

from tinytf.errors import UserError
from tinytf.experiment import describe_tasks, dump_checked_config, load_config, load_run_config

if TYPE_CHECKING:
    from tinytf.attend import AttentionReport
    from tinytf.distributed import Launch
    from tinytf.framing import Progress
    from tinytf.runs import LoadedRun
    from tinytf.tasks.base import Pairs


class OneLineUsageErrors(TyperGroup):
    """The command group: a usage error (unknown option or command, bad value, missing
    argument) is one `error: ` line on stderr and exit code 2, like a `UserError`,
    instead of click's usage text and boxed panel."""

    def main(self, *args: object, standalone_mode: bool = True, **kwargs: object) -> object:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except NoArgsIsHelpError as err:  # `tinytf` alone: the help (rich prints it while the error is made)
            if err.format_message().strip():
                err.show()
            sys.exit(err.exit_code)
        except ClickException as err:
            typer.echo(f"error: {usage_error_line(err)}", err=True)
            sys.exit(2)
        except typer.Abort:
            typer.echo("aborted", err=True)
            sys.exit(1)
        # Without standalone mode, click returns the exit code of a `typer.Exit` (and of
        # --help), or the command's return value: None, for every tinytf command.
        sys.exit(code if isinstance(code, int) else 0)


def usage_error_line(err: ClickException) -> str:
    """click's message for a usage error, on one line: `--format: 'bogus' is not one of
    table, json, npz, png, html` rather than `Invalid value for '--format': Value error, ...`."""
    if isinstance(err, BadParameter) and not isinstance(err, MissingParameter) and err.param is not None:
        names = getattr(err.param, "opts", None) or [err.param.human_readable_name]
        message = err.message.removeprefix("Value error, ")
        choices = re.fullmatch(r"(.* is not one of )('[^']*'(?:, '[^']*')*)\.?", message)
        if choices:
            message = choices[1] + ", ".join(re.findall(r"'([^']*)'", choices[2]))
        message = f"{max(names, key=len)}: {message}"
    else:
        message = err.format_message()
    message = " ".join(message.split()).removesuffix(".")
    if message[:2].istitle():  # "Missing argument" -> "missing argument", as tinytf's own errors
        message = message[0].lower() + message[1:]
    return message


app = typer.Typer(
    cls=OneLineUsageErrors,
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
    into exit code 130; never a traceback for either. A file or folder the user may not
    read or write (a full disk) is one such line too, wherever the library met it."""

    @functools.wraps(command)
    def wrapper(*args: object, **kwargs: object) -> object:
        try:
            return command(*args, **kwargs)
        except (UserError, OSError) as err:
            if isinstance(err, OSError):  # a folder the user may not read, a full disk...
                err = UserError(f"{err.filename or 'a file'}: {err.strerror or err}")
            # One line even when the message quotes what the user typed, line breaks and all.
            typer.echo("error: " + str(err).replace("\r", "\\r").replace("\n", "\\n"), err=True)
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

    On N processes: torchrun --nproc-per-node N -m tinytf train CONFIG (the same run, data-parallel)
    """
    from tinytf.distributed import JobFailed, Launch
    from tinytf.runs import checkpoint_path

    launch = Launch.from_environment()  # None without torchrun
    rank = 0 if launch is None else launch.rank
    try:
        result = start_training(config, overrides, runs_dir, name, device, resume)
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
        if checkpoint_path(result.run_dir, "last").exists():
            typer.echo(f"interrupted at step {result.step}; checkpoint saved in {result.run_dir}", err=True)
            typer.echo(f"resume with: {launch_command(launch)} train --resume {result.run_dir}", err=True)
        else:
            typer.echo(f"interrupted before the first checkpoint; nothing to resume in {result.run_dir}", err=True)
        raise typer.Exit(code=EXIT_INTERRUPTED)
    best = result.best
    typer.echo(f"run: {result.run_dir}")
    if best:
        typer.echo(
            f"best validation (step {best['step']}): seq_acc {best['seq_acc']:.3f}, "
            f"token_acc {best['token_acc']:.3f}, loss {best['loss']:.4f}"
        )
    typer.echo(f'next: tinytf attend "..." --run {result.run_dir}   |   tensorboard --logdir {runs_dir}')


def start_training(
    config: Path | None,
    overrides: list[str] | None,
    runs_dir: Path,
    name: str | None,
    device: Device | None,
    resume: Path | None,
):
    """`train`'s options -> the resolved config -> `tinytf.training.train`; its TrainResult."""
    from tinytf.loggers import ProgressBarLogger
    from tinytf.runs import CONFIG_FILE, resolve_run
    from tinytf.training import train as run_training

    if name is not None:
        check_run_name(name, runs_dir)
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
    return run_training(
        resolved,
        runs_dir=runs_dir,
        name=name or "run",
        resume=resume,
        loggers=[ProgressBarLogger(resolved.train.steps)],
    )


def launch_command(launch: Launch | None) -> str:
    """How this process was started, to say how to resume: `tinytf`, or torchrun's line."""
    if launch is None:
        return "tinytf"
    if launch.local_world_size != launch.world_size:  # several machines
        return "torchrun <the same options, on every machine> -m tinytf"
    return f"torchrun --nproc-per-node {launch.world_size} -m tinytf"


def check_run_name(name: str, runs_dir: Path) -> None:
    """A `UserError` unless `name` is one plain folder name, so the run stays inside `runs_dir`."""
    if not name or name.startswith(".") or any(char in name for char in "/\\\0"):
        raise UserError(
            f"--name {name!r}: a run name is one folder name, without '/', '\\' or a leading '.' "
            f"(the run goes inside {runs_dir})"
        )


def load_chosen_run(run: Path | None, runs_dir: Path, checkpoint: Checkpoint):
    """`--run`, or the newest run under `--runs-dir` that has a checkpoint; says which
    newer runs it passed over (crashed or stopped before their first checkpoint)."""
    from tinytf.runs import load_run, resolve_run, skipped_runs

    if run is None:
        for skipped in skipped_runs(runs_dir):
            typer.echo(f"note: skipping {skipped} (no checkpoint yet)", err=True)
    return load_run(resolve_run(run, runs_dir), checkpoint.value)


# --------------------------------------------------------------------------- attend


class AttendFormat(str, Enum):
    table = "table"
    json = "json"
    npz = "npz"
    png = "png"
    html = "html"


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
        Path | None, typer.Option("--out", help="File for json/npz/png/html (default: a new attention.*).")
    ] = None,
) -> None:
    """Show what every attention head of a trained model looks at for TEXT.

    --format html writes one self-contained page to explore every layer and head in a browser, offline.

    Example: tinytf attend "the cat sat on the mat" --format html
    """
    from tinytf.attend import attention_report

    if out is not None:
        check_out(out, output_format)
    loaded = load_chosen_run(run, runs_dir, checkpoint)
    report = attention_report(loaded.model, loaded.framing, text, target).select(layer, head)
    if report.note is not None:
        typer.echo(f"note: {report.note}", err=True)

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
    page = None
    if output_format is AttendFormat.html:
        page = attention_page_for(loaded, report, text, target, checkpoint)
    path = out or _fresh_path(Path(f"attention.{output_format.value}"))
    try:
        if page is not None:
            from tinytf.files import write_text_atomically

            write_text_atomically(path, page)
        elif output_format is AttendFormat.json:
            path.write_text(report.to_json(), encoding="utf-8")
        elif output_format is AttendFormat.npz:
            report.save_npz(path)
        else:
            from matplotlib import rc_context

            from tinytf.viz import report_figure, save_figure

            figure = report_figure(report)
            # A file object, and PNG said outright: matplotlib neither reads the format from
            # the name nor adds ".png" to a name without one. The file is the one named.
            with open(path, "wb") as file, rc_context({"savefig.format": "png"}):
                save_figure(figure, file)
    except OSError as err:
        raise UserError(f"{path}: cannot write ({err.strerror or err})") from None
    typer.echo(f"wrote {path}")
    if page is not None:
        typer.echo(f"open it in a browser (it needs no network): {path.resolve().as_uri()}")


def attention_page_for(
    loaded: LoadedRun, report: AttentionReport, text: str, target: str | None, checkpoint: Checkpoint
) -> str:
    """The html page for `attend`: the report, the heads' pattern scores on the same input
    (unless --target imposes an answer the scores would not follow), and where it comes from."""
    from tinytf.heads import head_scores
    from tinytf.viewer import attention_page

    facts = {"input": text}
    if report.answer is not None:
        facts["answer" if target is None else "target (--target)"] = loaded.vocab.join(report.answer)
    facts |= {"run": str(loaded.run_dir), "checkpoint": f"{checkpoint.value} (step {loaded.step})"}
    if target is None:
        scores = head_scores(loaded.model, loaded.framing, text=text)
        note = "Head scores: this input, after the model's own answer (as tinytf heads --text)."
    else:
        scores = None
        note = "No head scores: they follow the model's own answer, and --target imposes another."
    shown = text if len(text) <= 60 else text[:59] + "…"
    return attention_page(report, scores, title=f"Attention: {shown}", facts=facts, heads_note=note)


def check_out(out: Path, output_format: AttendFormat) -> None:
    """A `UserError` unless --out can be written as exactly that file, in that format."""
    if output_format is AttendFormat.table:
        raise UserError(f"--out {out}: --format table prints to the terminal; --out is for html, json, npz or png")
    wanted = f".{output_format.value}"
    if out.suffix and out.suffix.lower() != wanted:
        raise UserError(
            f"--out {out}: a {out.suffix} name for --format {output_format.value}; "
            f"name the file *{wanted} (or give no suffix)"
        )
    check_writable_file(out, f"attention{wanted}")


def check_writable_file(out: Path, example: str) -> None:
    """A `UserError` unless --out is a new file or a regular one (not a folder, pipe or device)."""
    try:
        mode = out.stat().st_mode
    except FileNotFoundError:
        return  # a new file: the normal case
    except OSError as err:
        raise UserError(f"--out {out}: cannot write ({err.strerror or err})") from None
    if stat.S_ISDIR(mode):
        raise UserError(f"--out {out}: is a folder; name a file, e.g. {out / example}")
    if not stat.S_ISREG(mode):
        raise UserError(f"--out {out}: not a regular file (a pipe or device); name a file")


def _fresh_path(path: Path) -> Path:
    """`path`, or `stem-2.ext`, `stem-3.ext`... whichever does not exist yet: never overwrite."""
    candidate, number = path, 1
    while candidate.exists():
        number += 1
        candidate = path.with_name(f"{path.stem}-{number}{path.suffix}")
    return candidate


# --------------------------------------------------------------------------- heads


class HeadsFormat(str, Enum):
    table = "table"
    json = "json"


class Ablation(str, Enum):
    zero = "zero"
    mean = "mean"


@app.command()
@user_errors_exit_2
def heads(
    run: RunOption = None,
    runs_dir: RunsDirOption = Path("runs"),
    checkpoint: CheckpointOption = Checkpoint.best,
    n: Annotated[int, typer.Option("--n", min=1, help="Score the first N held-out inputs.")] = 200,
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
    output_format: Annotated[HeadsFormat, typer.Option("--format", help="A table, or JSON.")] = HeadsFormat.table,
    out: Annotated[Path | None, typer.Option("--out", help="Write to this file instead of the terminal.")] = None,
) -> None:
    """Score what every attention head does: how much of its attention follows each pattern
    (diagonal, previous token, first token, duplicate, induction, the task's own alignment),
    its entropy, and with --ablate whether the model needs it.

    Example: tinytf heads --ablate zero
    """
    from tinytf.heads import head_scores, render_table

    if out is not None:
        check_writable_file(out, "heads.json" if output_format is HeadsFormat.json else "heads.txt")
    if text is not None and ablate is not None:
        raise UserError("--ablate measures the loss on held-out examples with their answers; drop --text to ablate")
    loaded = load_chosen_run(run, runs_dir, checkpoint)
    if text is None:
        held_out = first_held_out(loaded, n)
        report = head_scores(loaded.model, loaded.framing, held_out, ablate=None if ablate is None else ablate.value)
    else:
        report = head_scores(loaded.model, loaded.framing, text=text)
        if note := loaded.framing.length_note(loaded.framing.typed_input(text, loaded.model.config.max_len)):
            typer.echo(f"note: {note}", err=True)
    source = f"run {loaded.run_dir} ({checkpoint.value} checkpoint, step {loaded.step})"
    scored = f"the input {text!r}" if text is not None else f"{report.inputs} held-out inputs"
    report.meta = {"run": str(loaded.run_dir), "checkpoint": checkpoint.value, "step": loaded.step, "text": text}
    if output_format is HeadsFormat.json:
        content = report.to_json() + "\n"
    else:
        intact = ""
        if report.intact is not None:
            intact = (
                f"intact: loss {report.intact['loss']:.3f}, token_acc {report.intact['token_acc']:.3f}, "
                f"seq_acc {report.intact['seq_acc']:.3f}; each head {ablate.value}-ablated in turn, "
                "the most harmful first\n"
            )
        content = f"{source}, {scored}\n{intact}{render_table(report)}\n"
    if out is None:
        typer.echo(content, nl=False)
        return
    from tinytf.files import write_text_atomically

    try:
        write_text_atomically(out, content)
    except OSError as err:
        raise UserError(f"{out}: cannot write ({err.strerror or err})") from None
    typer.echo(f"wrote {out}")


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

    if (text is None) == (file is None):
        raise UserError("give either TEXT or --file FILE")
    lines = [text] if file is None else input_lines(file)
    loaded = load_chosen_run(run, runs_dir, checkpoint)
    numbered = list(enumerate(lines, start=1))
    labels = None
    if file is not None:
        # A line without tokens (blank) gets an empty answer, without the model: one output
        # line per input line, so the output lines up with the file; errors name file lines.
        numbered = [(number, line) for number, line in numbered if loaded.vocab.tokenize(line)]
        if not numbered:
            raise UserError(f"{file}: no inputs (one per line)")
        labels = [f"{file}: line {number}" for number, _ in numbered]
    with progress_bar(len(numbered), "input") as progress:
        answered = predict_answers(loaded.model, loaded.framing, [line for _, line in numbered], labels, progress)
    notes = [
        (number, note)
        for (number, _), (source, _) in zip(numbered, answered, strict=True)
        if (note := loaded.framing.length_note(loaded.vocab.encode(source)))
    ]
    if notes:  # one line, however many inputs: the first, and how many more
        number, note = notes[0]
        where = f"{file}: line {number}: " if file is not None else ""
        others = len(notes) - 1
        more = f" (and {others} more line{'s' * (others > 1)})" if others else ""
        typer.echo(f"note: {where}{note}{more}", err=True)
    answers = dict(zip([number for number, _ in numbered], answered, strict=True))
    output = []
    for number in range(1, len(lines) + 1):
        source, answer = answers.get(number, ([], []))
        if output_format is PredictFormat.json:
            output.append(json.dumps({"input": source, "output": answer}, ensure_ascii=False))
        else:
            output.append(" ".join(answer))
    typer.echo("\n".join(output))  # at once: 100,000 separate writes took longer than the answers


PROGRESS_FROM = 2_000  # inputs or examples; fewer take about a second, without a bar


@contextlib.contextmanager
def progress_bar(total: int, unit: str) -> Iterator[Progress | None]:
    """A progress callback drawing a tqdm bar on stderr (stdout holds the answers) while
    `total` things are worked through, when there are many; None when there are few."""
    if total < PROGRESS_FROM:
        yield None
        return
    from tqdm import tqdm

    with tqdm(total=total, unit=unit, file=sys.stderr, dynamic_ncols=True, leave=False) as bar:
        yield bar.update


MAX_INPUT_FILE_BYTES = 10_000_000


def input_lines(file: Path) -> list[str]:
    """The lines of a --file: a regular file of at most MAX_INPUT_FILE_BYTES (a pipe or
    /dev/zero would never end), UTF-8, split at "\\n" or "\\r\\n" only, so that line N
    is the file's line N."""
    try:
        # O_NONBLOCK: opening a FIFO waits for a writer; this way it opens, and is refused.
        descriptor = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        raise UserError(f"{file}: cannot read: {err.strerror or err}") from None
    info = os.fstat(descriptor)
    limit = f"--file takes at most {MAX_INPUT_FILE_BYTES:,} bytes"
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_INPUT_FILE_BYTES:
        os.close(descriptor)
        if stat.S_ISDIR(info.st_mode):
            raise UserError(f"{file}: cannot read: is a folder")
        if not stat.S_ISREG(info.st_mode):
            raise UserError(f"{file}: cannot read: not a regular file (a pipe or device); give a file")
        raise UserError(f"{file}: {info.st_size:,} bytes; {limit}")
    with open(descriptor, "rb") as handle:
        try:
            data = handle.read(MAX_INPUT_FILE_BYTES + 1)  # bounded even if the file grows meanwhile
        except OSError as err:
            raise UserError(f"{file}: cannot read: {err.strerror or err}") from None
    if len(data) > MAX_INPUT_FILE_BYTES:
        raise UserError(f"{file}: more than {MAX_INPUT_FILE_BYTES:,} bytes; {limit}")
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise UserError(f"{file}: line {line}: not UTF-8 text ({err.reason})") from None
    lines = content.split("\n")  # not splitlines(): it also splits at \x0b, \x1c, \u2028...
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    return [line.removesuffix("\r") for line in lines]


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
    from tinytf.evaluate import evaluate

    loaded = load_chosen_run(run, runs_dir, checkpoint)
    held_out = first_held_out(loaded, n)
    with progress_bar(len(held_out), "example") as progress:
        metrics = evaluate(loaded.model, loaded.framing, held_out, progress=progress)
    typer.echo(
        f"run {loaded.run_dir} ({checkpoint.value} checkpoint, step {loaded.step}), {len(held_out)} held-out examples"
    )
    for key, value in metrics.items():
        typer.echo(f"{key:>10}: {value:.4f}")


def first_held_out(loaded: LoadedRun, n: int | None) -> Pairs:
    """The run's first `n` held-out examples (all of them for None): a `UserError` if the
    task's data file changed since training, or if there are fewer than `n`."""
    from tinytf.data import TaskData
    from tinytf.runs import check_data

    check_data(loaded.run_dir, loaded.task)
    held_out = TaskData(loaded.task, loaded.config.seed, loaded.config.task.eval_size).held_out
    if n is not None and n > len(held_out):
        raise UserError(f"--n {n}: the run's held-out set has {len(held_out)} examples (task.eval_size)")
    return held_out if n is None else held_out[:n]


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
    typer.echo(dump_checked_config(load_config(config, overrides or ())), nl=False)


def main() -> None:
    app(prog_name="tinytf")
