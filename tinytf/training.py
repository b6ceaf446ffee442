"""The training loop. It knows nothing about how a model is built or a task made: it
asks `build_model` and the task registry, and reports only through `Logger`s.

    result = train(load_config("configs/quickstart.yaml"), runs_dir="runs")
    result.run_dir, result.best

One step: a batch from the task's stream -> forward -> cross-entropy on the answer ->
backward -> gradient clipping -> AdamW -> learning-rate schedule (linear warm-up, then
cosine decay to a tenth of `train.lr`). Every `train.eval_every` steps the held-out set
is scored; the best score so far is kept as checkpoints/best.pt, the latest state as
checkpoints/last.pt every `train.checkpoint_every` steps and at the end.

Ctrl-C (SIGINT) asks the loop to stop at the end of the current step; it saves
last.pt and returns with `interrupted=True`. A second Ctrl-C stops at once.
`train(config, resume=run_dir)` continues exactly where last.pt left off: same
weights, optimizer moments, schedule, random streams and step.
"""

from __future__ import annotations

import contextlib
import math
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from tinytf.attend import attention_report
from tinytf.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from tinytf.config import Config, save_config
from tinytf.data import IGNORE, TaskData, frame
from tinytf.errors import UserError, first_line
from tinytf.evaluate import evaluate, greedy_answers, scored_loss
from tinytf.loggers import Logger, MetricsFileLogger, TensorBoardLogger
from tinytf.model import build_model
from tinytf.runs import CONFIG_FILE, METRICS_FILE, VOCAB_FILE, checkpoint_path, create_run_dir
from tinytf.tasks import Task, get_task
from tinytf.tasks.vocab import Vocabulary

N_ATTENTION_SAMPLES = 2  # inputs whose attention maps are logged (the task's showcase first)
N_TEXT_SAMPLES = 4  # held-out examples whose predictions are logged as text


@dataclass
class TrainResult:
    run_dir: Path
    step: int
    interrupted: bool
    final: dict[str, float]  # the last validation metrics
    best: dict[str, float]  # the validation metrics of checkpoints/best.pt


def select_device(requested: str) -> torch.device:
    """ "auto" -> cuda, then mps, then cpu; anything else must be available."""
    if requested == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    available = {"cpu": True, "cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available()}
    if not available[requested]:
        raise UserError(f"train.device={requested}: no {requested} device here; use auto or cpu")
    return torch.device(requested)


def learning_rate_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """Multiplier of train.lr at `step`: linear warm-up to 1, then cosine decay to 0.1."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(total_steps - warmup_steps, 1)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


def make_optimizer(model: nn.Module, config: Config, device: torch.device) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices only (not on biases, LayerNorm gains or position tables)."""
    decay, no_decay = [], []
    for name, parameter in model.named_parameters():
        (decay if parameter.dim() >= 2 and "positions" not in name else no_decay).append(parameter)
    groups = [{"params": decay, "weight_decay": config.train.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # The fused kernel updates every tensor at once: several times faster than the default loop.
    return torch.optim.AdamW(groups, lr=config.train.lr, betas=config.train.betas, fused=device.type in ("cpu", "cuda"))


def train(
    config: Config,
    *,
    runs_dir: str | Path = "runs",
    name: str = "run",
    resume: Path | None = None,
    loggers: Sequence[Logger] = (),
) -> TrainResult:
    """Train `config` in a new run folder under `runs_dir` (or continue the run `resume`)."""
    return Trainer(config, runs_dir, name, resume, loggers).run()


class Trainer:
    """The state of one training run and the loop over it (see the module docstring)."""

    def __init__(
        self, config: Config, runs_dir: str | Path, name: str, resume: Path | None, loggers: Sequence[Logger]
    ) -> None:
        self.config = config
        self.device = select_device(config.train.device)
        torch.manual_seed(config.seed)  # the model's initial weights
        self.task = get_task(config.task)
        state = None
        if resume is not None:
            self.task.vocab = Vocabulary.load(resume / VOCAB_FILE)
            state = load_checkpoint(checkpoint_path(resume, "last"))
        self.data = TaskData(self.task, config.seed, config.task.eval_size)
        self.model = build_model(config, vocab_size=len(self.task.vocab)).to(self.device)
        self.optimizer = make_optimizer(self.model, config, self.device)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: learning_rate_factor(step, config.train.warmup_steps, config.train.steps)
        )
        self.step = 0
        self.saved_step = 0  # the step of checkpoints/last.pt
        self.best_score: list[float] | None = None  # (seq_acc, -loss) of checkpoints/best.pt
        self.best: dict[str, float] = {}
        self.final: dict[str, float] = {}
        if state is not None:
            self._restore(state)
            self.run_dir = resume
        else:  # only now, once the config and the task's data have proven usable
            self.run_dir = create_run_dir(runs_dir, name)
            self.task.vocab.save(self.run_dir / VOCAB_FILE)
        save_config(config, self.run_dir / CONFIG_FILE)  # after a resume: the config it continues with
        self.loggers = [MetricsFileLogger(self.run_dir / METRICS_FILE), TensorBoardLogger(self.run_dir), *loggers]

    def run(self) -> TrainResult:
        config, start_step = self.config, self.step
        self._report("start", self.run_dir, config, start_step)
        step_model = torch.compile(self.model) if config.train.compile else self.model
        window = _ThroughputWindow(self.device)
        interrupted = False
        self.model.train()
        try:
            self._loop(step_model, window)
        except _Interrupted:
            interrupted = True
        except KeyboardInterrupt:  # a second Ctrl-C: stop now; last.pt keeps the last whole state
            interrupted = True
            self.step = self.saved_step

        if self.step == start_step and not interrupted:  # resumed a run that had already finished
            self.final = {k: v for k, v in self.best.items() if k != "step"}
        summary = {f"final_{key}": value for key, value in self.final.items()}
        self._report("finish", self.step, config, {**summary, "best_seq_acc": self.best.get("seq_acc", 0.0)})
        return TrainResult(self.run_dir, self.step, interrupted, self.final, self.best)

    def _loop(self, step_model: nn.Module, window: _ThroughputWindow) -> None:
        """Train until train.steps, an early stop, or Ctrl-C (raises _Interrupted once saved)."""
        config = self.config
        with _stop_on_sigint() as stop_requested:
            while self.step < config.train.steps:
                logits, labels, grad_norm = self._train_step(step_model, window)
                self.step += 1
                step = self.step
                finishing = step == config.train.steps
                if step % config.log.every == 0 or finishing:
                    self._report("metrics", step, "train", window.summary(logits, labels, grad_norm, self._lr()))
                if step % config.train.eval_every == 0 or finishing:
                    finishing |= self._validate(window.tokens_per_s)
                if step % config.log.attention_every == 0 or finishing:
                    self._log_attention()
                if step % config.train.checkpoint_every == 0 or finishing:
                    self._checkpoint("last")
                self._report("step", step)
                if finishing:
                    return
                if stop_requested():  # Ctrl-C: save at this step boundary and leave
                    self._checkpoint("last")
                    raise _Interrupted

    def _train_step(self, step_model: nn.Module, window: _ThroughputWindow):
        """One optimisation step; returns its logits, labels and gradient norm (for logging)."""
        batch = frame(self.data.train_pairs(self.config.train.batch_size), self.task, self.config.model.arch)
        window.count_tokens(batch.n_tokens)
        batch = batch.to(self.device)
        with _autocast(self.device):
            logits = step_model(**batch.model_inputs())
            loss = scored_loss(logits.float(), batch.labels)
        loss.backward()
        grad_norm = None
        if self.config.train.grad_clip is not None:
            grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(), self.config.train.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        window.add_loss(loss.detach())
        return logits.detach(), batch.labels, grad_norm

    def _validate(self, tokens_per_s: float) -> bool:
        """Score the held-out set, keep the best checkpoint; True if training should stop."""
        self.final = evaluate(self.model, self.task, self.data.held_out)
        self._report("metrics", self.step, "val", {**self.final, "lr": self._lr(), "tokens_per_s": tokens_per_s})
        predictions = _predictions_markdown(self.model, self.task, self.data)
        if predictions:
            self._report("text", self.step, "predictions", predictions)
        score = [self.final["seq_acc"], -self.final["loss"]]
        if self.best_score is None or score > self.best_score:
            self.best_score, self.best = score, {**self.final, "step": self.step}
            self._checkpoint("best")
        stop_at = self.config.train.stop_at_accuracy
        return stop_at is not None and self.final["seq_acc"] >= stop_at

    def _log_attention(self) -> None:
        for sample, text, target in _attention_samples(self.task, self.data):
            self._report("attention", self.step, sample, attention_report(self.model, self.task, text, target))
        self.model.train()

    def _lr(self) -> float:
        return self.scheduler.get_last_lr()[0]

    def _checkpoint(self, which: str) -> None:
        save_checkpoint({
            "step": self.step, "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(), "best_score": self.best_score, "best": self.best,
            "rng": {"torch": torch.get_rng_state(), "data": self.data.state_dict()["generator"]},
        }, checkpoint_path(self.run_dir, which))  # fmt: skip
        if which == "last":
            self.saved_step = self.step

    def _restore(self, state: dict) -> None:
        try:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
            torch.set_rng_state(state["rng"]["torch"])
            self.data.load_state_dict({"generator": state["rng"]["data"]})
            self.step, self.best_score, self.best = state["step"], state["best_score"], state["best"]
        except (RuntimeError, ValueError, KeyError, TypeError) as err:
            raise CheckpointError(
                f"the run's last checkpoint does not fit this config (did --set change the model?): {first_line(err)}"
            ) from None
        self.saved_step = self.step

    def _report(self, method: str, *args) -> None:
        for logger in self.loggers:
            getattr(logger, method)(*args)


class _Interrupted(Exception):
    """Ctrl-C was pressed and the state saved: unwind the loop."""


class _ThroughputWindow:
    """Training metrics averaged over the steps since the last log. The loss sum stays on
    the device until it is logged, so a step never waits for it."""

    def __init__(self, device: torch.device) -> None:
        self.loss_sum = torch.zeros((), device=device)
        self.steps, self.tokens, self.start = 0, 0, time.perf_counter()
        self.tokens_per_s = 0.0  # of the latest closed window

    def count_tokens(self, n: int) -> None:
        self.tokens += n

    def add_loss(self, loss: torch.Tensor) -> None:
        self.loss_sum += loss
        self.steps += 1

    def summary(self, logits, labels, grad_norm, lr: float) -> dict[str, float]:
        """The window's metrics (token/seq accuracy from its last batch); starts a new window."""
        self.tokens_per_s = self.tokens / max(time.perf_counter() - self.start, 1e-9)
        values = {"loss": float(self.loss_sum) / max(self.steps, 1), **_batch_accuracy(logits, labels), "lr": lr,
                  "tokens_per_s": self.tokens_per_s}  # fmt: skip
        if grad_norm is not None:
            values["grad_norm"] = float(grad_norm)
        self.loss_sum.zero_()
        self.steps, self.tokens, self.start = 0, 0, time.perf_counter()
        return values


def _autocast(device: torch.device):
    """bf16 matmuls on CUDA (same exponent range as fp32: no loss scaling needed); fp32 elsewhere."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _batch_accuracy(logits: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """Teacher-forced token and sequence accuracy of one training batch."""
    scored = labels != IGNORE
    right = (logits.argmax(-1) == labels) & scored
    return {
        "token_acc": float(right.sum()) / max(int(scored.sum()), 1),
        "seq_acc": float((right == scored).all(1).float().mean()),
    }


def _attention_samples(task: Task, data: TaskData) -> Iterator[tuple[str, str, str | None]]:
    """(tag, input text, target text) of the fixed inputs whose attention maps are logged."""
    if task.showcase is not None:
        yield "showcase", task.showcase, None
    for i in range(min(N_ATTENTION_SAMPLES - (task.showcase is not None), len(data.held_out))):
        source, target = data.held_out.example(i)
        if task.language_model:
            yield f"sample{i}", task.render(target), None
        else:
            yield f"sample{i}", task.render(source), task.render(target)


def _predictions_markdown(model: nn.Module, task: Task, data: TaskData) -> str:
    if task.language_model:
        return ""
    examples = data.held_out[: min(N_TEXT_SAMPLES, len(data.held_out))]
    answers = greedy_answers(model, task, examples)
    rows = ["| input | target | prediction |", "|---|---|---|"]
    for i, answer in enumerate(answers):
        source, target = examples.example(i)
        mark = "" if answer == target else " ✗"
        rows.append(f"| {task.render(source)} | {task.render(target)} | {task.render(answer)}{mark} |")
    return "\n".join(rows)


@contextlib.contextmanager
def _stop_on_sigint() -> Iterator:
    """While active, the first Ctrl-C only raises a flag (the loop stops at the end of its
    step); a second one interrupts at once. Yields a function that reads the flag."""
    requested = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield requested.is_set
        return

    def on_sigint(signum, frame):
        if requested.is_set():
            raise KeyboardInterrupt
        requested.set()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield requested.is_set
    finally:
        signal.signal(signal.SIGINT, previous)
