"""What training looks at in the model as it goes, beside the loss. At every evaluation: a
few held-out predictions, the whole training set's metrics (a task with a fixed training
set) and the Fourier spectrum of the embedding of its numbers (fourier.py); every
`log.attention_every` steps: the attention maps of a few fixed inputs and (log.head_scores)
every head's pattern scores. Each observer takes (step, model, framing, data), runs on rank
0 in eval mode, without gradients or random draws (training goes on unchanged), and
reports to the loggers; the loggers only write.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tinytf.inspect.attend import attention_report
from tinytf.inspect.evaluate import evaluate
from tinytf.inspect.fourier import frequency_norms
from tinytf.inspect.heads import head_scores
from tinytf.training.constants import EVAL_BATCH, N_HEAD_SCORE_INPUTS
from tinytf.training.loggers import Logger

if TYPE_CHECKING:
    from torch import nn

    from tinytf.config import LogConfig, TrainConfig
    from tinytf.data.base import Framing
    from tinytf.data.heldout import TaskData

N_ATTENTION_SAMPLES = 2  # inputs whose attention maps are logged (the task's showcase first)
N_TEXT_SAMPLES = 4  # held-out examples whose predictions are logged as text

Look = Callable[[int, "nn.Module", "Framing", "TaskData", Sequence[Logger]], None]


@dataclass(frozen=True)
class Observer:
    """`look` every `every` steps and at the last one (every 0: never); `at_evaluation`: with
    each held-out evaluation, before its best checkpoint is kept."""

    every: int
    look: Look
    at_evaluation: bool = False

    def due(self, step: int, finishing: bool) -> bool:
        return bool(self.every) and (step % self.every == 0 or finishing)


def observers_for(settings: TrainConfig, log: LogConfig) -> list[Observer]:
    """What a run looks at, as its settings say, in the order it reports."""
    attention_every = log.attention_every or 0
    return [
        Observer(settings.eval_every, predictions, at_evaluation=True),
        Observer(settings.eval_every, train_set_metrics, at_evaluation=True),
        Observer(settings.eval_every, fourier_spectrum, at_evaluation=True),
        Observer(attention_every, attention_maps),
        Observer(attention_every if log.head_scores else 0, head_pattern_scores),
    ]


def predictions(step: int, model: nn.Module, framing: Framing, data: TaskData, loggers: Sequence[Logger]) -> None:
    """A table of held-out inputs, targets and the model's answers (none for a language model)."""
    if not framing.answers_questions:
        return
    examples = data.held_out[: min(N_TEXT_SAMPLES, len(data.held_out))]
    render = framing.task.render
    rows = ["| input | target | prediction |", "|---|---|---|"]
    for i, answer in enumerate(framing.answers(model, examples)):
        source, target = examples.example(i)
        mark = "" if answer == target else " ✗"
        rows.append(f"| {render(source)} | {render(target)} | {render(answer)}{mark} |")
    for logger in loggers:
        logger.text(step, "predictions", "\n".join(rows))


def train_set_metrics(step: int, model: nn.Module, framing: Framing, data: TaskData, loggers: Sequence[Logger]) -> None:
    """The whole training set's metrics (split "train_set", beside the held-out "val")."""
    if data.train_set is None:
        return
    on_train_set = evaluate(model, framing, data.train_set, EVAL_BATCH)
    for logger in loggers:
        logger.metrics(step, "train_set", on_train_set)


def fourier_spectrum(step: int, model: nn.Module, framing: Framing, data: TaskData, loggers: Sequence[Logger]) -> None:
    """The norm of the embedding of the task's numbers at each frequency (modular-add)."""
    residues = framing.task.residue_ids()
    if residues is None:
        return
    embedding = model.token_embedding.weight
    norms = frequency_norms(embedding[residues.to(embedding.device)])
    for logger in loggers:
        logger.fourier(step, norms.tolist())


def attention_maps(step: int, model: nn.Module, framing: Framing, data: TaskData, loggers: Sequence[Logger]) -> None:
    """The attention maps of the fixed samples (`attention_samples`)."""
    for sample, text, target in attention_samples(framing, data):
        report = attention_report(model, framing, text, target)
        for logger in loggers:
            logger.attention(step, sample, report)


def head_pattern_scores(
    step: int, model: nn.Module, framing: Framing, data: TaskData, loggers: Sequence[Logger]
) -> None:
    """Every head's pattern scores on the first N_HEAD_SCORE_INPUTS held-out examples."""
    scores = head_scores(model, framing, data.held_out[:N_HEAD_SCORE_INPUTS])
    for logger in loggers:
        logger.heads(step, scores)


def attention_samples(framing: Framing, data: TaskData) -> Iterator[tuple[str, str, str | None]]:
    """(tag, input text, target text or None) of the fixed inputs whose attention maps are logged."""
    showcase = framing.task.showcase
    if showcase is not None:
        yield "showcase", showcase, None
    for i in range(min(N_ATTENTION_SAMPLES - (showcase is not None), len(data.held_out))):
        yield f"sample{i}", *framing.typed_example(data.held_out, i)
