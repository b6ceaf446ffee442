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
from tinytf.checkpoint import load_checkpoint, save_checkpoint
from tinytf.config import Config, save_config
from tinytf.data import IGNORE, TaskData, frame
from tinytf.errors import UserError
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
    return torch.optim.AdamW(groups, lr=config.train.lr, fused=device.type in ("cpu", "cuda"))


def train(
    config: Config,
    *,
    runs_dir: str | Path = "runs",
    name: str = "run",
    resume: Path | None = None,
    loggers: Sequence[Logger] = (),
) -> TrainResult:
    """Train `config` in a new run folder (or continue the run `resume`)."""
    device = select_device(config.train.device)
    torch.manual_seed(config.seed)
    task = get_task(config.task)
    if resume is not None:
        run_dir = resume
        task.vocab = Vocabulary.load(run_dir / VOCAB_FILE)
        state = load_checkpoint(checkpoint_path(run_dir, "last"))
    else:
        state = None
    data = TaskData(task, config.seed, config.task.eval_size)
    model = build_model(config, vocab_size=len(task.vocab)).to(device)
    optimizer = make_optimizer(model, config, device)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: learning_rate_factor(step, config.train.warmup_steps, config.train.steps)
    )

    best_score, best, start_step = None, {}, 0
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"]["torch"])
        data.load_state_dict({"generator": state["rng"]["data"]})
        start_step, best_score, best = state["step"], state["best_score"], state["best"]
    else:
        run_dir = create_run_dir(runs_dir, name)
        task.vocab.save(run_dir / VOCAB_FILE)
    save_config(config, run_dir / CONFIG_FILE)  # after a resume: the config it continued with

    loggers = [MetricsFileLogger(run_dir / METRICS_FILE), TensorBoardLogger(run_dir), *loggers]
    for logger in loggers:
        logger.start(run_dir, config, start_step)

    def checkpoint(which: str, step: int) -> None:
        save_checkpoint({
            "step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(), "best_score": best_score, "best": best,
            "rng": {"torch": torch.get_rng_state(), "data": data.state_dict()["generator"]},
        }, checkpoint_path(run_dir, which))  # fmt: skip

    step_model = torch.compile(model) if config.train.compile else model
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()
    # Training metrics are averaged over a window of steps; the loss stays on the device
    # until it is logged, so a step does not wait for it.
    train_loss_sum = torch.zeros((), device=device)
    window_steps, window_tokens, window_start = 0, 0, time.perf_counter()
    tokens_per_s = 0.0  # of the latest training window; validation records repeat it
    final: dict[str, float] = {}
    step = start_step
    interrupted = False
    model.train()
    with _stop_on_sigint() as stop_requested:
        while step < config.train.steps:
            pairs = data.train_pairs(config.train.batch_size)
            batch = frame(pairs, task, config.model.arch)
            window_tokens += batch.n_tokens
            batch = batch.to(device)
            with autocast:
                logits = step_model(**batch.model_inputs())
                loss = scored_loss(logits.float(), batch.labels)
            loss.backward()
            grad_norm = (
                nn.utils.clip_grad_norm_(model.parameters(), config.train.grad_clip)
                if config.train.grad_clip is not None
                else None
            )
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            train_loss_sum += loss.detach()
            window_steps += 1
            step += 1

            if step % config.log.every == 0 or step == config.train.steps:
                tokens_per_s = window_tokens / max(time.perf_counter() - window_start, 1e-9)
                values = {
                    "loss": float(train_loss_sum) / window_steps,
                    **_batch_accuracy(logits.detach(), batch.labels),
                    "lr": scheduler.get_last_lr()[0],
                    "tokens_per_s": tokens_per_s,
                }
                if grad_norm is not None:
                    values["grad_norm"] = float(grad_norm)
                _report(loggers, "metrics", step, "train", values)
                train_loss_sum.zero_()
                window_steps, window_tokens, window_start = 0, 0, time.perf_counter()

            finishing = step == config.train.steps
            if step % config.train.eval_every == 0 or finishing:
                final = evaluate(model, task, data.held_out)
                val_record = {**final, "lr": scheduler.get_last_lr()[0], "tokens_per_s": tokens_per_s}
                _report(loggers, "metrics", step, "val", val_record)
                predictions = _predictions_markdown(model, task, data)
                if predictions:
                    _report(loggers, "text", step, "predictions", predictions)
                score = (final["seq_acc"], -final["loss"])
                if best_score is None or score > tuple(best_score):
                    best_score, best = list(score), {**final, "step": step}
                    checkpoint("best", step)
                stop_at = config.train.stop_at_accuracy
                finishing = finishing or (stop_at is not None and final["seq_acc"] >= stop_at)
            if step % config.log.attention_every == 0 or finishing:
                for sample, text, target in _attention_samples(task, data):
                    _report(loggers, "attention", step, sample, attention_report(model, task, text, target))
                model.train()
            if step % config.train.checkpoint_every == 0 or finishing:
                checkpoint("last", step)
            for logger in loggers:
                logger.step(step)
            if finishing:
                break
            if stop_requested():  # Ctrl-C: save at this step boundary and leave
                checkpoint("last", step)
                interrupted = True
                break

    if state is not None and step == start_step:  # resumed a finished run: nothing to do
        final = dict(best)
    summary = {**{f"final_{key}": value for key, value in final.items()}, "best_seq_acc": best.get("seq_acc", 0.0)}
    for logger in loggers:
        logger.finish(step, config, summary)
    return TrainResult(run_dir, step, interrupted, final, best)


def _report(loggers: Sequence[Logger], method: str, *args) -> None:
    for logger in loggers:
        getattr(logger, method)(*args)


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
