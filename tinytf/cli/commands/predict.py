"""`tinytf predict` and `tinytf eval`: a trained model's answers to typed inputs, and its
scores on the run's held-out examples."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tinytf.cli.commands import first_held_out, run_heading
from tinytf.cli.output import ProgressBar
from tinytf.errors import UserError
from tinytf.inspect.evaluate import evaluate, predict
from tinytf.run.load import LoadedRun


@dataclass
class Predictions:
    """One answer per input line (an empty one for a blank line of a --file), and a note:
    None, or the first input of a length never trained on, and how many more."""

    loaded: LoadedRun
    answers: list[tuple[list[str], list[str]]]  # (input tokens, answer tokens) per line
    note: str | None

    def to_text(self) -> str:
        return "\n".join(self.loaded.vocab.join(answer) for _, answer in self.answers)  # a character model's: no spaces

    def to_json(self) -> str:
        """JSON lines: {"input": tokens, "output": tokens} per input line."""
        lines = (json.dumps({"input": source, "output": answer}, ensure_ascii=False) for source, answer in self.answers)
        return "\n".join(lines)


def predictions(loaded: LoadedRun, lines: list[str], file: Path | None, progress_bar: ProgressBar) -> Predictions:
    """The model's answer to each line. In a --file, a line without tokens (blank) gets an
    empty answer without the model, so that the output lines up with the file; errors name
    file lines."""
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
    return Predictions(loaded, shown, _length_note(loaded, answers, file))


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


@dataclass
class Evaluation:
    """`eval`'s report: loss and accuracies on the first held-out examples."""

    loaded: LoadedRun
    checkpoint: str
    examples: int
    metrics: dict[str, float]
    note: str | None = None

    def to_text(self) -> str:
        """The run and how many examples, then one metric a line."""
        lines = [f"{run_heading(self.loaded, self.checkpoint)}, {self.examples} held-out examples"]
        return "\n".join([*lines, *(f"{key:>10}: {value:.4f}" for key, value in self.metrics.items())])

    def to_json(self) -> str:
        meta = {"run": str(self.loaded.run_dir), "checkpoint": self.checkpoint, "step": self.loaded.step}
        return json.dumps({**meta, "examples": self.examples, **self.metrics})


def evaluation(loaded: LoadedRun, checkpoint: str, n: int | None, progress_bar: ProgressBar) -> Evaluation:
    """Loss and accuracies on the first `n` held-out examples (all for None)."""
    held_out = first_held_out(loaded, n)
    with progress_bar(len(held_out), "example") as progress:
        metrics = evaluate(loaded.model, loaded.framing, held_out, progress=progress)
    return Evaluation(loaded, checkpoint, len(held_out), metrics)
