"""The training loop. `Trainer` is given its parts -- a built model, the task's data and
framing, the optimizer settings and a list of loggers -- and knows nothing of how they
were made; `train(config, ...)` assembles them from a config and a run folder.

    result = train(load_config("configs/quickstart.yaml"), runs_dir="runs")
    result.run_dir, result.best

One step: a batch from the task's stream -> forward -> cross-entropy on the answer ->
backward -> gradient clipping -> AdamW (or Muon) at the step's learning rate (optim.py:
linear warm-up, then cosine decay to a tenth of `train.lr` at `train.decay_steps`, by
default `train.steps`). Every `train.eval_every` steps the held-out set is scored; the
best score so far is kept as checkpoints/best.pt, the latest state as checkpoints/last.pt
every `train.checkpoint_every` steps and at the end; with `train.snapshot_every: N` the
weights alone at steps 0, N, 2N, ... and the last (`_snapshot`). Predictions, attention
maps and head scores (heads.py) are logged in eval mode, without gradients, on held-out
inputs: logging never changes the training run.

Ctrl-C (SIGINT) asks the loop to stop at the end of the current step; it saves
last.pt and returns with `interrupted=True`. A second Ctrl-C stops at once. `train`
listens from before it makes the run folder, so a first Ctrl-C while the run is being set
up saves it at its first step boundary too (a second one stops at once, as ever).
`train(config, resume=run_dir)` continues exactly where last.pt left off: same weights,
optimizer moments, random streams and step (the schedule follows from the step). The
optimizer's settings (train.lr, betas, weight decay) are the resumed config's.

Under torchrun (`torchrun --nproc-per-node N -m tinytf train CONFIG`) every process runs
this loop on its share of each global batch; the Trainer's `job` (tinytf/training/distributed.py)
splits the batch, sums the gradients and losses, and makes the processes agree on every
decision, while rank 0 alone evaluates and writes. Without torchrun the job is one
process and each of its methods the identity.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path

import torch
from torch import nn

from tinytf import arguments
from tinytf.config import Config, LogConfig, TrainConfig
from tinytf.data.framing import Framing
from tinytf.data.heldout import TaskData
from tinytf.device import select_device, step_autocast, step_precision
from tinytf.errors import UserError, first_line
from tinytf.inspect.evaluate import Correct, TrainingWindow, evaluate
from tinytf.run.checkpoint import (
    CheckpointError,
    config_mismatch,
    load_optimizer_state,
    save_checkpoint,
    trained_with,
    training_state_problem,
    weights_mismatch,
)
from tinytf.run.folder import RunFolder
from tinytf.run.load import open_for_resume
from tinytf.run.setup import Setup
from tinytf.tasks.base import examples_per_step
from tinytf.training.constants import EVAL_BATCH
from tinytf.training.distributed import Job, OneProcess, join_job
from tinytf.training.loggers import Logger, MetricsFileLogger, TensorBoardLogger
from tinytf.training.memory import check_memory
from tinytf.training.observers import Observer, observers_for
from tinytf.training.optim import learning_rate, make_optimizer, set_learning_rate
from tinytf.training.stopping import stop_on_signals


@dataclass
class TrainResult:
    run_dir: Path | None  # None when the Trainer was given no run folder
    step: int
    interrupted: bool
    final: dict[str, float]  # the last validation metrics
    best: dict[str, float]  # the validation metrics of the best checkpoint


def train(
    config: Config | Setup,
    *,
    runs_dir: str | Path = "runs",
    name: str = "run",
    resume: Path | None = None,
    loggers: Sequence[Logger] = (),
) -> TrainResult:
    """Train `config` in a new run folder under `runs_dir` (or continue the run `resume`).

    config: a `Config` (checked here) or a `Setup` (`tinytf.run.setup.load_setup`: checked).
    The run folder gets config.yaml, vocab.json, checkpoints, metrics.jsonl and
    TensorBoard events; `loggers` receive the same reports (e.g. a progress bar).
    Under torchrun every process of the job trains; rank 0 alone reads and writes the
    run folder and reports to `loggers`.
    """
    _check_train_arguments(config, runs_dir, name, resume, loggers)
    setup = config if isinstance(config, Setup) else Setup.of(config)
    check_memory(setup)  # refuse, before anything is allocated, a config this machine cannot hold
    resume = Path(resume) if resume is not None else None
    setup = setup if resume is not None else setup.with_task_path_resolved()  # a new run works from any folder
    train_settings = setup.config.train
    with (
        join_job(train_settings.device, setup.examples_per_step, train_settings.batch_size == "all") as job,
        stop_on_signals(job.stop_signals) as stop_requested,  # Ctrl-C from here on: saved at a step boundary
        contextlib.ExitStack() as held,  # rank 0's lock on the run folder
    ):
        state = None
        if resume is not None:  # rank 0 locks and checks the run and reads its state; its error is every process's
            folder = job.on_main(lambda: held.enter_context(RunFolder(resume).resuming()))
            state, vocab = job.on_main(lambda: open_for_resume(folder, setup))
            setup = setup.with_vocab(vocab)
        trainer = _assemble(setup, loggers if job.is_main else (), job)
        if state is not None:
            trainer.load_state_dict(state)
        else:  # made only now that the config and the task's data have proven usable
            folder = job.on_main(lambda: held.enter_context(RunFolder.create(runs_dir, name).locked()))
        redone = job.on_main(lambda: folder.make_ready(setup, trainer.step, resumed=state is not None))
        trainer.keep_in(folder, setup.config, resumed=state is not None, redone=redone)
        try:
            return trainer.run(stop_requested)
        except OSError as err:  # a full disk, most likely: every file written so far is whole
            where = err.filename or trainer.run_dir
            raise WriteFailed(f"{where}: {err.strerror or err}; {trainer.what_is_saved()}") from None


def _check_train_arguments(config: object, runs_dir: object, name: object, resume: object, loggers: object) -> None:
    """`train`'s arguments, each a TypeError naming it when it has the wrong type."""
    arguments.not_a_path(config, "config", "a Config: call tinytf.load_config(path) first")
    arguments.instance(config, "config", Config | Setup, "a Config (tinytf.load_config) or a Setup")
    arguments.instance(runs_dir, "runs_dir", str | PathLike, "a folder's path")
    arguments.instance(name, "name", str, "a run name (a string)")
    if resume is not None:
        arguments.instance(resume, "resume", str | PathLike, "a run folder's path, or None")
    arguments.sequence_of(
        loggers, "loggers", Logger, "loggers (objects with the Logger protocol's methods)", empty=True
    )


def _assemble(setup: Setup, loggers: Sequence[Logger], job: Job) -> Trainer:
    """A Trainer for `setup`: its data, framing and freshly initialised model."""
    config = setup.config
    # A torchrun job has agreed on its processes' devices; one process picks as train.device says.
    device = job.device if job.device is not None else select_device(config.train.device)
    torch.manual_seed(config.seed)  # the model's initial weights: the same in every process
    data = TaskData(setup.task, config.seed)
    model = setup.build_model().to(device)
    job.own_random_stream(config.seed)
    return Trainer(model, setup.framing, data, config.train, config.log, loggers, device=device, job=job)


class Trainer:
    """Trains `model` on `data`, framed by `framing`, reporting to `loggers`.

    settings: the optimisation (steps, batch size, learning rate and schedule, AdamW,
        clipping, evaluation and checkpoint intervals, early stopping, compile).
    log: how often to log metrics and attention maps.
    run_dir: where checkpoints go (checkpoints/last.pt and best.pt); None keeps none.
    job: the processes training together (`tinytf.training.distributed.join_job`); default: this one alone.
    """

    def __init__(
        self,
        model: nn.Module,
        framing: Framing,
        data: TaskData,
        settings: TrainConfig,
        log: LogConfig,
        loggers: Sequence[Logger] = (),
        *,
        device: torch.device | str = "cpu",
        run_dir: Path | None = None,
        job: Job | None = None,
    ) -> None:
        self.job = job if job is not None else OneProcess()
        self.model, self.framing, self.data = model, framing, data
        self.settings, self.log, self.loggers = settings, log, list(loggers)
        self.device, self.run_dir = torch.device(device), run_dir
        # "bf16" or "fp32". A torchrun job agrees: bf16 only if every process's machine chose
        # it, so that every process steps its weights the same way (Muon orthogonalises in it).
        precision = step_precision(self.device, settings.precision)
        self.precision = "fp32" if self.job.any(precision == "fp32") else precision
        step_dtype = torch.bfloat16 if self.precision == "bf16" else torch.float32
        self.optimizer = make_optimizer(model, settings, self.device, step_dtype)
        self.batch_size = examples_per_step(framing.task, settings.batch_size)  # a number, `all` resolved
        self.step = 0
        self.saved_steps: dict[str, int] = {}  # "last"/"best" -> the step of the checkpoint written (or resumed)
        self.best_score: list[float] | None = None  # (seq_acc, -loss) of checkpoints/best.pt
        self.best: dict[str, float] = {}
        self.final: dict[str, float] = {}
        self.window = TrainingWindow(self.device)  # the training loss since the last log
        self.observers = observers_for(settings, log)  # what it looks at beside the loss (observers.py)

    def keep_in(self, folder: RunFolder, config: Config, *, resumed: bool, redone: int | None) -> None:
        """Keep checkpoints in `folder`, and (rank 0) report to its metrics file and TensorBoard
        events first; a resumed run tells every logger where it resumes (`Logger.resumed`)."""
        self.run_dir = folder.path
        if not self.job.is_main:
            return
        self.loggers = [
            MetricsFileLogger(folder.metrics),
            TensorBoardLogger(folder.path, config, folder),
            *self.loggers,
        ]
        if resumed:
            for logger in self.loggers:
                logger.resumed(self.step, redone)

    def run(self, stop_requested: Callable[[], bool] | None = None) -> TrainResult:
        """Train (see the module docstring). `stop_requested`: the flag of a `stop_on_signals`
        the caller entered (`train` does, before the run folder exists); None: the run's own."""
        if stop_requested is None:
            with stop_on_signals(self.job.stop_signals) as own:
                return self.run(own)
        start_step = self.step
        for logger in self.loggers:
            logger.start(self.run_dir, start_step)
        window = self.window
        interrupted, diverged = False, None
        self.model.train()
        try:
            with self.job.noticing_failures():  # under torchrun: another process gone is a JobFailed
                if self._snapshot_due(self.step >= self.settings.steps):  # step 0, or one a kill left unwritten
                    self._snapshot()
                step_model = self.job.wrap(self.model)  # under torchrun: DistributedDataParallel
                if self.settings.compile:
                    step_model = torch.compile(step_model)
                self._loop(step_model, window, stop_requested)
        except _Interrupted:
            interrupted = True
        except KeyboardInterrupt:  # a second Ctrl-C: stop now; last.pt keeps the last whole state
            interrupted = True
            self.step = self.saved_steps.get("last", 0)
        except TrainingDiverged as err:  # the weights are still finite: no update was applied
            diverged = err
        except Exception:  # e.g. the disk is full: close the loggers quietly, then say so
            for logger in self.loggers:
                with contextlib.suppress(Exception):
                    logger.finish(self.step, {})
            raise

        if self.step == start_step and not interrupted:  # resumed a run that had already finished
            self.final = {k: v for k, v in self.best.items() if k != "step"}
        summary = {f"final_{key}": value for key, value in self.final.items()}
        for logger in self.loggers:
            logger.finish(self.step, {**summary, "best_seq_acc": self.best.get("seq_acc", 0.0)})
        if diverged is not None:
            raise diverged
        return TrainResult(self.run_dir, self.step, interrupted, self.final, self.best)

    def _loop(self, step_model: nn.Module, window: TrainingWindow, stop_requested: Callable[[], bool]) -> None:
        """Train until settings.steps, an early stop, or Ctrl-C (raises _Interrupted once saved)."""
        settings, log = self.settings, self.log
        while self.step < settings.steps:
            if self.job.any(stop_requested()):  # Ctrl-C (in any process): save at this step boundary, leave
                self._checkpoint("last")
                raise _Interrupted
            logits, labels, grad_norm = self._train_step(step_model, window)
            self.step += 1
            step = self.step
            finishing = step == settings.steps
            if step % log.every == 0 or finishing:
                correct = self.job.total(Correct.count(logits, labels))  # over every process's rows
                values = window.summary(correct, grad_norm, self._lr(), self.model)
                for logger in self.loggers:
                    logger.metrics(step, "train", values)
            if step % settings.eval_every == 0 or finishing:
                finishing |= self._validate(window.tokens_per_s)
            self._observe([o for o in self.observers if not o.at_evaluation and o.due(step, finishing)])
            snapshot = self._snapshot_due(finishing)
            if step % settings.checkpoint_every == 0 or finishing or snapshot:
                self._checkpoint("last")
            if snapshot:  # after last.pt: a run resumed from here has every snapshot up to its step
                self._snapshot()
            for logger in self.loggers:
                logger.step(step)
            if finishing:
                return

    def _train_step(self, step_model: nn.Module, window: TrainingWindow):
        """One optimisation step; returns its logits, labels and gradient norm (for logging)."""
        batch = self.framing.frame(self.data.train_pairs(self.batch_size))  # every process draws it
        window.count_tokens(batch.n_tokens)  # all processes' tokens
        rows = self.job.shard(batch).to(self.device)  # this process's share (all of it in one process)
        with step_autocast(self.device, self.precision):
            logits = step_model(**rows.model_inputs())
            loss = self.job.share_of_loss(logits.float(), rows.labels, batch.labels)
        loss.backward()  # under torchrun, DDP sums the gradients: every process holds the batch's
        loss = self.job.sum(loss.detach())  # the batch's loss, in every process
        # The gradient norm, clipped to train.grad_clip when set; measured either way, so that
        # a non-finite gradient is caught before it reaches the weights.
        max_norm = self.settings.grad_clip if self.settings.grad_clip is not None else float("inf")
        grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        self._stop_if_diverged(loss, grad_norm)
        set_learning_rate(self.optimizer, self._lr())
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        window.add_loss(loss)
        return logits.detach(), rows.labels, grad_norm

    def _stop_if_diverged(self, loss: torch.Tensor, grad_norm: torch.Tensor | None) -> None:
        """Raise `TrainingDiverged` before a non-finite loss or gradient reaches the weights."""
        loss = loss.detach()
        finite = torch.isfinite(loss) if grad_norm is None else torch.isfinite(loss) & torch.isfinite(grad_norm)
        if not bool(finite):
            kept = self.what_is_saved()
            raise TrainingDiverged(
                f"training diverged at step {self.step + 1}: the loss is {loss.item()}"
                + (f" and the gradient norm {grad_norm.item()}" if grad_norm is not None else "")
                + f"; {kept}; try a lower train.lr (it is {self.settings.lr:g})"
            )

    def _validate(self, tokens_per_s: float) -> bool:
        """Score the held-out set, keep the best checkpoint; True if training should stop.
        (Under torchrun rank 0 scores it, and tells the other processes what it decided.)"""
        improved = stop = False
        if self.job.is_main:
            self.final = evaluate(self.model, self.framing, self.data.held_out, EVAL_BATCH)
            values = {**self.final, "lr": self._lr(), "tokens_per_s": tokens_per_s}
            for logger in self.loggers:
                logger.metrics(self.step, "val", values)
            self._observe([observer for observer in self.observers if observer.at_evaluation])
            score = [self.final["seq_acc"], -self.final["loss"]]
            improved = self.best_score is None or score > self.best_score
            if improved:
                self.best_score, self.best = score, {**self.final, "step": self.step}
            stop_at = self.settings.stop_at_accuracy
            stop = stop_at is not None and self.final["seq_acc"] >= stop_at
        improved, stop = self.job.from_main((improved, stop))
        if improved:
            self._checkpoint("best")
        return stop

    def _observe(self, observers: list[Observer]) -> None:
        """`observers` look at the model and report (rank 0's work; eval mode, no gradients,
        no random draws: training goes on unchanged)."""
        if not (self.job.is_main and self.loggers):
            return
        for observer in observers:
            observer.look(self.step, self.model, self.framing, self.data, self.loggers)

    def _lr(self) -> float:
        return learning_rate(self.step, self.settings)  # the rate of step `self.step`, the next to run

    def state_dict(self) -> dict:
        """Everything a resumed run needs to continue exactly: weights, optimizer moments,
        random streams, step and best score. Under torchrun every process must
        call it (it gathers their dropout streams, kept as rng["torch_by_rank"])."""
        streams = self.job.gather(torch.get_rng_state())  # [this process's] without torchrun
        rng = {"torch": streams[0], "data": self.data.state_dict()["generator"]}
        if len(streams) > 1:
            rng["torch_by_rank"] = streams
        return {
            "step": self.step,
            "config": trained_with(self.model.config, self.framing.task.config),
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "best_score": self.best_score,
            "best": self.best,
            "rng": rng,
            # the loss summed since the last log, so a resumed run logs the same averages
            "window": self.window.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue from `state_dict()`. A `CheckpointError` if `state` is not a whole
        training state of this run's shapes and kinds (checked before anything is loaded)
        or if it does not fit this model."""
        found = (
            training_state_problem(state, self.optimizer.state_dict(), self.settings.optimizer)
            or config_mismatch(state, self.model.config, self.framing.task.config)
            or weights_mismatch(self.model.state_dict(), state["model"])
        )
        if found is not None:
            raise CheckpointError(f"the run's last checkpoint cannot be resumed: {found}")
        parts = {
            "model": lambda: self.model.load_state_dict(state["model"]),
            "optimizer": lambda: load_optimizer_state(self.optimizer, state["optimizer"]),
            "rng": lambda: (
                self._load_dropout_stream(state["rng"]),
                self.data.load_state_dict({"generator": state["rng"]["data"]}),
            ),
        }
        for part, load in parts.items():
            try:
                load()
            except (RuntimeError, ValueError, KeyError, TypeError, AttributeError, IndexError) as err:
                hint = " (did --set change the model?)" if part in ("model", "optimizer") else ""
                raise CheckpointError(
                    f"the run's last checkpoint: its {part!r} does not fit this run{hint}: {first_line(err)}"
                ) from None
        self.step, self.best_score, self.best = state["step"], state["best_score"], dict(state["best"])
        self.saved_steps["last"] = self.step
        self.window.load_state_dict(state["window"])

    def _load_dropout_stream(self, rng: dict) -> None:
        """This process's stream of random numbers (dropout masks), as saved. A process of
        a torchrun job bigger than the one that saved it keeps its fresh stream."""
        streams = rng.get("torch_by_rank") or [rng["torch"]]
        if self.job.rank < len(streams):
            torch.set_rng_state(streams[self.job.rank])

    def _checkpoint(self, which: str) -> None:
        """Write checkpoints/<which>.pt (rank 0; under torchrun every process takes part)."""
        if self.run_dir is None:
            return
        state = self.state_dict()
        path = RunFolder(self.run_dir).checkpoint(which)
        self.job.on_main(lambda: save_checkpoint(state, path))  # rank 0's error, on every process
        self.saved_steps[which] = self.step

    def _snapshot_due(self, finishing: bool) -> bool:
        every = self.settings.snapshot_every
        return self.run_dir is not None and every is not None and (self.step % every == 0 or finishing)

    def _snapshot(self) -> None:
        """checkpoints/step-<k>.pt: the weights and the mean training loss since the last
        snapshot; one already there (a resumed run's) is kept, never written twice."""
        state = {
            "step": self.step,
            "config": trained_with(self.model.config, self.framing.task.config),
            "model": self.model.state_dict(),
            "train_loss": self.window.loss_since_snapshot(),  # every process: each keeps a window
        }
        path = RunFolder(self.run_dir).snapshot(self.step)
        self.job.on_main(lambda: path.is_file() or save_checkpoint(state, path))

    def what_is_saved(self) -> str:
        """What the run folder's checkpoints hold, in words (after a failure to write)."""
        if not self.saved_steps:
            return "the run has no checkpoint yet"
        saved = self.saved_steps
        held = [f"checkpoints/{which}.pt of step {saved[which]}" for which in ("last", "best") if which in saved]
        return f"the run keeps {' and '.join(held)}"


class WriteFailed(UserError):
    """A file of the run could not be written (a full disk, most likely); every file written
    before is whole, and the message says which checkpoints the run keeps."""


class TrainingDiverged(UserError):
    """The loss or the gradient stopped being a finite number; training stopped before
    the weights were touched, and no checkpoint holds non-finite weights."""


class _Interrupted(Exception):
    """Ctrl-C was pressed and the state saved: unwind the loop."""
