"""The work behind the `tinytf` commands, apart from Typer: each function takes a command's
options as plain values, calls the library, and returns the text the command prints (or
writes the file it was asked for). cli.py parses the options and echoes the results; it
imports this module inside its commands, as this module loads torch.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import stat
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from importlib import resources
from pathlib import Path
from typing import BinaryIO

from tinytf.data.batch import Progress
from tinytf.data.heldout import TaskData
from tinytf.errors import UserError, did_you_mean
from tinytf.files import atomic_writer, check_run_name
from tinytf.inspect.attend import AttentionReport
from tinytf.inspect.evaluate import evaluate, predict
from tinytf.inspect.heads import HeadReport, head_scores, render_text
from tinytf.inspect.heatmaps import patch_figure
from tinytf.inspect.patching import Attribution, PatchReport, attribute, check_next_token, patch, prompts_of
from tinytf.inspect.viewer import attention_page
from tinytf.inspect.viz import report_figure, save_png, terminal_report
from tinytf.run.folder import RunFolder, resolve_run
from tinytf.run.load import LoadedRun
from tinytf.run.setup import load_run_setup, load_setup
from tinytf.tasks import CONSTRUCTIONS
from tinytf.tasks.base import MinimalPair, Pairs
from tinytf.training import trainer as training
from tinytf.training.distributed import Launch
from tinytf.training.loggers import ProgressBarLogger
from tinytf.training.trainer import TrainResult

QUICKSTART = "quickstart.yaml"  # packaged inside tinytf, so `tinytf train` works from any folder
ATTENTION_FILES = ("json", "npz", "png", "html")  # the `attend` formats written to a file
HEAD_SCORE_INPUTS = 200  # `heads`' default number of held-out inputs

# How many things a command works through, and their unit -> a progress callback or None (cli.progress_bar).
ProgressBar = Callable[[int, str], AbstractContextManager[Progress | None]]


# ---- train


def start_training(
    config: Path | None,
    overrides: list[str] | None,
    runs_dir: Path,
    name: str | None,
    device: str | None,
    resume: Path | None,
) -> TrainResult:
    """`train`'s options -> the resolved config -> `tinytf.training.trainer.train`."""
    if name is not None:  # checked before the config is loaded: a wrong name fails at once
        check_run_name(name, runs_dir)
    overrides = list(overrides or [])
    if device is not None:
        overrides.append(f"train.device={device}")
    if resume is not None:
        if config is not None:
            raise UserError("--resume continues a run with its own config: drop CONFIG (use --set to change it)")
        resume = resolve_run(resume)
        resolved = load_run_setup(RunFolder(resume).config, overrides)
    elif config is None:
        with resources.as_file(resources.files("tinytf") / QUICKSTART) as path:
            resolved = load_setup(path, overrides)
        name = name or Path(QUICKSTART).stem
    else:
        resolved = load_setup(config, overrides)
        name = name or config.stem
    loggers = [ProgressBarLogger(resolved.config.train.steps, resolved.config.train.stop_at_accuracy)]
    # training.train looked up at the call, so that a wrapper put there (a test's) is the one run
    return training.train(resolved, runs_dir=runs_dir, name=name or "run", resume=resume, loggers=loggers)


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


# ---- a trained run


def run_heading(loaded: LoadedRun, checkpoint: str) -> str:
    return f"run {loaded.run_dir} ({checkpoint} checkpoint, step {loaded.step})"


def first_held_out(loaded: LoadedRun, n: int | None) -> Pairs:
    """The run's first `n` held-out examples (all of them for None): a `UserError` if the
    task's data file changed since training, or if there are fewer than `n`."""
    RunFolder(loaded.run_dir).check_data(loaded.task)
    held_out = TaskData(loaded.task, loaded.config.seed).held_out
    if n is not None and n > len(held_out):
        raise UserError(f"--n {n}: the run's held-out set has {len(held_out)} examples (task.eval_size)")
    return held_out if n is None else held_out[:n]


# ---- attend


def attention_text(loaded: LoadedRun, report: AttentionReport, checkpoint: str) -> str:
    """`attend --format table`: the run, the tokens and the answer, then a heatmap per head."""
    answer = None if report.answer is None else loaded.vocab.join(report.answer)
    return terminal_report(report, run_heading(loaded, checkpoint), answer)


def check_attention_out(out: Path, output_format: str) -> None:
    """A `UserError` unless --out can be written as exactly that file, in that format."""
    if output_format not in ATTENTION_FILES:
        raise UserError(
            f"--out {out}: --format {output_format} prints to the terminal; --out is for html, json, npz or png"
        )
    wanted = f".{output_format}"
    if out.suffix and out.suffix.lower() != wanted:
        raise UserError(
            f"--out {out}: a {out.suffix} name for --format {output_format}; "
            f"name the file *{wanted} (or give no suffix)"
        )
    check_writable_file(out, f"attention{wanted}")


def write_attention(
    loaded: LoadedRun,
    report: AttentionReport,
    output_format: str,
    out: Path | None,
    *,
    text: str,
    target: str | None,
    checkpoint: str,
) -> Path:
    """Write `report` as json, npz, png or html to `out`, or to a new attention.<format>
    (never over an existing file); the path written."""
    page = attention_page_for(loaded, report, text, target, checkpoint) if output_format == "html" else None
    path = out or fresh_path(Path(f"attention.{output_format}"))
    with writing(path) as file:
        if page is not None:
            file.write(page.encode("utf-8"))
        elif output_format == "json":
            file.write(report.to_json().encode("utf-8"))
        elif output_format == "npz":
            report.save_npz(file)
        else:
            save_png(report_figure(report), file)
    return path


def attention_page_for(
    loaded: LoadedRun, report: AttentionReport, text: str, target: str | None, checkpoint: str
) -> str:
    """The html page for `attend`: the report, the heads' pattern scores on the same input
    (unless --target imposes an answer the scores would not follow), and where it comes from."""
    facts = {"input": text}
    if report.answer is not None:
        facts["answer" if target is None else "target (--target)"] = loaded.vocab.join(report.answer)
    facts |= {"run": str(loaded.run_dir), "checkpoint": f"{checkpoint} (step {loaded.step})"}
    if target is None:
        scores = head_scores(loaded.model, loaded.framing, text=text)
        note = "Head scores: this input, after the model's own answer (as tinytf heads --text)."
    else:
        scores = None
        note = "No head scores: they follow the model's own answer, and --target imposes another."
    shown = text if len(text) <= 60 else text[:59] + "…"
    return attention_page(report, scores, title=f"Attention: {shown}", facts=facts, heads_note=note)


# ---- heads


def score_heads(loaded: LoadedRun, checkpoint: str, n: int | None, text: str | None, ablate: str | None) -> HeadReport:
    """`heads`: the scores on the first `n` held-out inputs, or on the typed `text`, with
    where they come from in `meta`."""
    pairs = None
    if text is None:  # by default the first HEAD_SCORE_INPUTS, or all if there are fewer
        pairs = first_held_out(loaded, n)[: n or HEAD_SCORE_INPUTS]
    report = head_scores(loaded.model, loaded.framing, pairs, text=text, ablate=ablate)
    report.meta = {"run": str(loaded.run_dir), "checkpoint": checkpoint, "step": loaded.step, "text": text}
    return report


def heads_output(loaded: LoadedRun, report: HeadReport, checkpoint: str, as_json: bool) -> str:
    """`heads`' output: the report as JSON, or a line saying what was scored and the table."""
    if as_json:
        return report.to_json() + "\n"
    text = report.meta.get("text")
    scored = f"the input {text!r}" if text is not None else f"{report.inputs} held-out inputs"
    return f"{run_heading(loaded, checkpoint)}, {scored}\n{render_text(report)}\n"


# ---- predict / eval


def predict_output(
    loaded: LoadedRun, lines: list[str], file: Path | None, as_json: bool, progress_bar: ProgressBar
) -> tuple[str, str | None]:
    """`predict`'s output, one line per input line, and a note for stderr (None, or the
    first input of a length never trained on, and how many more). In a --file, a line
    without tokens (blank) gets an empty answer without the model, so that the output
    lines up with the file; errors name file lines."""
    numbered = list(enumerate(lines, start=1))
    labels = None
    if file is not None:
        numbered = [(number, line) for number, line in numbered if loaded.vocab.tokenize(line)]
        if not numbered:
            raise UserError(f"{file}: no inputs (one per line)")
        labels = [f"{file}: line {number}" for number, _ in numbered]
    with progress_bar(len(numbered), "input") as progress:
        answered = predict(loaded.model, loaded.framing, [line for _, line in numbered], labels, progress)
    answers = dict(zip([number for number, _ in numbered], answered, strict=True))
    shown = [answers.get(number, ([], [])) for number in range(1, len(lines) + 1)]
    if as_json:
        output = [json.dumps({"input": source, "output": answer}, ensure_ascii=False) for source, answer in shown]
    else:
        output = [loaded.vocab.join(answer) for _, answer in shown]  # a character model's: no spaces
    return "\n".join(output), _length_note(loaded, answers, file)


def _length_note(loaded: LoadedRun, answers: dict[int, tuple[list[str], list[str]]], file: Path | None) -> str | None:
    """One note however many inputs have a length never trained on: the first, and how many more."""
    notes = [
        (number, note)
        for number, (source, _) in answers.items()
        if (note := loaded.framing.length_note(loaded.vocab.encode(source)))
    ]
    if not notes:
        return None
    number, note = notes[0]
    where = f"{file}: line {number}: " if file is not None else ""
    others = len(notes) - 1
    more = f" (and {others} more line{'s' * (others > 1)})" if others else ""
    return f"{where}{note}{more}"


def evaluation_text(loaded: LoadedRun, checkpoint: str, n: int | None, progress_bar: ProgressBar) -> str:
    """`eval`: loss and accuracies on the first `n` held-out examples, one metric a line."""
    held_out = first_held_out(loaded, n)
    with progress_bar(len(held_out), "example") as progress:
        metrics = evaluate(loaded.model, loaded.framing, held_out, progress=progress)
    lines = [f"{run_heading(loaded, checkpoint)}, {len(held_out)} held-out examples"]
    return "\n".join([*lines, *(f"{key:>10}: {value:.4f}" for key, value in metrics.items())])


# ---- output files


def check_png_out(out: Path | None, png: bool, example: str) -> None:
    """--out of a command whose one file output is `--format png` (`png`: chosen): refused
    with another format, else checked as `check_writable_file` does."""
    if out is None:
        return
    if not png:
        raise UserError(f"--out {out}: --out is for --format png")
    check_writable_file(out, example)


def check_writable_file(out: Path, example: str) -> None:
    """A `UserError` unless --out can become a file: a new one in an existing folder, or a
    regular file (replaced), not a folder, pipe or device. Checked before the model runs."""
    try:
        mode = out.stat().st_mode
    except FileNotFoundError:
        if not out.resolve().parent.is_dir():
            raise UserError(f"--out {out}: no folder {out.resolve().parent}; create it first") from None
        return  # a new file: the normal case
    except OSError as err:
        raise UserError(f"--out {out}: cannot write ({err.strerror or err})") from None
    if stat.S_ISDIR(mode):
        raise UserError(f"--out {out}: is a folder; name a file, e.g. {out / example}")
    if not stat.S_ISREG(mode):
        raise UserError(f"--out {out}: not a regular file (a pipe or device); name a file")


@contextlib.contextmanager
def writing(path: Path) -> Iterator[BinaryIO]:
    """A file to write `path`'s new content to, atomically (`files.atomic_writer`), through
    a symbolic link to the file it names, whatever the format. An OSError is a one-line
    `UserError` naming `path`."""
    try:
        with atomic_writer(path.resolve()) as file:
            yield file
    except OSError as err:
        raise UserError(f"{path}: cannot write ({err.strerror or err})") from None


def write_output(path: Path, content: str) -> None:
    with writing(path) as file:
        file.write(content.encode("utf-8"))


def fresh_path(path: Path) -> Path:
    """`path`, or `stem-2.ext`, `stem-3.ext`... whichever does not exist yet: never overwrite."""
    candidate, number = path, 1
    while candidate.exists():
        number += 1
        candidate = path.with_name(f"{path.stem}-{number}{path.suffix}")
    return candidate


# ---- patch


def patch_pairs(
    loaded: LoadedRun, one: tuple[str | None, ...], n: int | None, construction: str | None, by: str
) -> tuple[PatchReport, list[str] | None, str | None]:
    """`patch`: one pair (`one` = clean, corrupt, answer, wrong) or `n` drawn pairs of
    `construction`, each head's or layer's activation patched from clean into corrupted;
    for one pair its tokens (to label positions: drawn pairs' words differ from pair to
    pair) and a note when its length is one the model never trained on."""
    if n is None:
        if any(value is None for value in one):
            raise UserError(
                "give --clean, --corrupt, --answer and --wrong (one pair), or --pairs N --construction NAME"
            )
        if construction is not None:
            raise UserError("--construction chooses the pairs --pairs draws: drop it for a pair of your own")
        pairs = [MinimalPair(*one)]
    else:
        if any(value is not None for value in one):
            raise UserError("--pairs draws its pairs: drop --clean, --corrupt, --answer and --wrong")
        check_next_token(loaded.framing)  # before drawing pairs it could not patch
        pairs = _drawn_pairs(loaded, n, construction)
    groups = prompts_of(loaded.framing, pairs, loaded.config.model.max_len)
    report = patch(loaded.model, groups, by)
    if n is not None:
        return report, None, None
    # The pair's tokens, "clean/corrupted" where the prompts differ
    clean, corrupt = (loaded.vocab.decode(ids[0].tolist()) for ids in (groups[0].clean, groups[0].corrupt))
    tokens = [word if word == other else f"{word}/{other}" for word, other in zip(clean, corrupt, strict=True)]
    return report, tokens, typed_length_note(loaded, one[0])


def _drawn_pairs(loaded: LoadedRun, n: int, construction: str | None) -> list[MinimalPair]:
    """`patch --pairs N --construction NAME`: the task's minimal pairs, unseen in training."""
    task = loaded.task
    if not task.constructions:
        drawing = " and ".join(CONSTRUCTIONS)
        raise UserError(f"--pairs draws minimal pairs of {drawing}, not of {task.name}: give one pair")
    if construction is None:
        raise UserError(f"--pairs {n} needs --construction ({', '.join(task.constructions)})")
    if construction not in task.constructions:
        kinds = ", ".join(task.constructions)
        hint = did_you_mean(construction, task.constructions)
        raise UserError(f"--construction {construction}: one of {kinds} for {task.name}{hint}")
    held_out = first_held_out(loaded, None) if task.train_size() is not None else None  # a fixed split's pairs
    return task.held_out_pairs(construction, n, seed=loaded.config.seed, held_out=held_out)


def patch_output(loaded: LoadedRun, report: PatchReport, checkpoint: str, as_json: bool) -> str:
    """`patch`'s output: JSON, or what was patched and a table, the largest effects first."""
    if as_json:
        return json.dumps(report.to_dict()) + "\n"
    lines = [
        f"{run_heading(loaded, checkpoint)}, {report.pairs} pair{'s' * (report.pairs > 1)}",
        f"logit difference: clean {report.ld_clean:.3f}, corrupted {report.ld_corrupt:.3f}; "
        f"answer above wrong in {report.clean_correct:.0%} of clean prompts",
        f"{'component':<10} {'layer':>5} {'head':>4} {'position':>8} {'restored':>8}",
    ]
    for result in sorted(report.results, key=lambda result: -abs(result.restored)):
        head = "-" if result.head is None else result.head
        position = "all" if result.position is None else result.position
        lines.append(f"{result.component:<10} {result.layer:>5} {head:>4} {position:>8} {result.restored:>8.3f}")
    return "\n".join(lines) + "\n"


# ---- attribute


def attribution(loaded: LoadedRun, text: str, answer: str, wrong: str) -> tuple[Attribution, str | None]:
    """`attribute`: each part's share of logit(answer) - logit(wrong) after `text`, and a
    note when `text` has a length the model never trained on."""
    (prompts,) = prompts_of(loaded.framing, [MinimalPair(text, text, answer, wrong)], loaded.config.model.max_len)
    report = attribute(loaded.model, prompts.clean, int(prompts.answer[0]), int(prompts.wrong[0]))
    return report, typed_length_note(loaded, text)


def typed_length_note(loaded: LoadedRun, text: str) -> str | None:
    """A note when typed `text` is shorter or longer than every input the model trained on."""
    framing = loaded.framing
    return framing.length_note(framing.typed_input(text, loaded.config.model.max_len))


def attribution_output(loaded: LoadedRun, report: Attribution, checkpoint: str, as_json: bool) -> str:
    """`attribute`'s output: JSON, or LD and a table, the largest contributions first."""
    if as_json:
        return json.dumps(report.to_dict()) + "\n"
    lines = [
        run_heading(loaded, checkpoint),
        f"logit difference {report.ld:.3f} = the sum of the contributions below",
        f"{'component':<10} {'layer':>5} {'head':>4} {'contribution':>12}",
    ]
    for part in sorted(report.components, key=lambda part: -abs(part.contribution)):
        layer, head = ("-" if value is None else value for value in (part.layer, part.head))
        lines.append(f"{part.component:<10} {layer:>5} {head:>4} {part.contribution:>12.3f}")
    return "\n".join(lines) + "\n"


def write_patch_png(report: PatchReport, tokens: list[str] | None, out: Path | None) -> Path:
    """`patch --format png`: the heatmaps to `out`, or to a new patch.png; the path written."""
    path = out or fresh_path(Path("patch.png"))
    with writing(path) as file:
        save_png(patch_figure(report, tokens), file)
    return path
