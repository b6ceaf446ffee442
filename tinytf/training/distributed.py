"""Data-parallel training over the processes of a `torchrun` job; nothing at all without torchrun.

    torchrun --nproc-per-node 2 -m tinytf train CONFIG

starts two processes, each with RANK, WORLD_SIZE and LOCAL_RANK in its environment.
`join_job()` sees them and returns a `TorchrunJob`; without them, a `OneProcess`, whose
every method is the identity, so the training loop reads the same either way.

The job trains one model as one process would, `train.batch_size` being the global batch:

- every process draws the same global batch from the same seeded stream (the held-out
  set is never drawn, as in one process) and trains on its own block of rows;
- a process's loss is its rows' share of the batch's mean loss: their summed
  cross-entropy over the scored tokens of the *whole* batch (the rows of a block score
  different numbers of tokens, so averaging the blocks' means would weigh them wrongly);
- DistributedDataParallel sums the gradients over the processes (`_sum_gradients`;
  its own hook averages them), so every process holds the gradient a single process
  computes for the whole batch, clips it alike and takes the same AdamW step;
- rank 0 alone writes the run folder and scores the held-out set; it tells the others
  what it decided (stop early, a new best checkpoint), and all agree at every step on
  whether Ctrl-C or SIGTERM was received, so no process waits for one that has left.

Collectives go through gloo, on the CPU; on CUDA the gradients go through NCCL. A process
that crashes closes its connections, so the others' next collective fails at once:
they raise `JobFailed`, and torchrun stops whatever is left.

Each process takes OMP_NUM_THREADS threads when the variable is set (torchrun sets 1 for
each of several processes per machine unless the user set it), else the machine's cores
shared out among its processes.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib
import os
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from tinytf.data.batch import IGNORE, Batch
from tinytf.device import machine_cores, select_device, threads_asked
from tinytf.errors import ConfigError, UserError
from tinytf.inspect.evaluate import Correct, scored_loss

# How long a collective may wait for the other processes. Rank 0 scores the held-out set,
# draws attention maps and writes checkpoints while the others wait, which takes seconds;
# a crashed process is noticed at once (its connections close), so this bounds only a
# process that hangs.
COLLECTIVE_TIMEOUT = dt.timedelta(minutes=10)

TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK")

T = TypeVar("T")


class JobFailed(Exception):
    """Another process of the torchrun job stopped (an error, a crash, a kill): this one
    cannot go on without it."""


@dataclass(frozen=True)
class Launch:
    """What torchrun tells a process about its place in the job."""

    rank: int  # 0 .. world_size - 1, over all machines
    world_size: int  # processes in the job
    local_rank: int  # 0 .. local_world_size - 1 on this machine
    local_world_size: int  # processes on this machine

    @classmethod
    def from_environment(cls) -> Launch | None:
        """This process's place in a torchrun job, or None when torchrun did not start it.
        Left-over variables that torchrun did not set (not numbers, no MASTER_ADDR) are a
        `UserError`, not a failure deep inside torch.distributed."""
        if not all(name in os.environ for name in TORCHRUN_VARIABLES):
            return None
        try:
            rank, world_size, local_rank = (int(os.environ[name]) for name in TORCHRUN_VARIABLES)
            local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
        except ValueError:
            raise UserError(
                f"{', '.join(TORCHRUN_VARIABLES)} are set but not whole numbers: start tinytf with "
                "torchrun, or unset them"
            ) from None
        if missing := [name for name in ("MASTER_ADDR", "MASTER_PORT") if name not in os.environ]:
            raise UserError(
                f"{', '.join(TORCHRUN_VARIABLES)} are set but {' and '.join(missing)} not: start "
                "tinytf with torchrun, or unset them"
            )
        return cls(rank, world_size, local_rank, local_world_size)

    def check_batch_size(self, batch_size: int, whole_training_set: bool = False) -> None:
        """A `ConfigError` unless the global batch shares out equally over the job's processes
        (`whole_training_set`: train.batch_size is `all`, and `batch_size` the training set's size)."""
        if batch_size % self.world_size:
            given, fix = f"train.batch_size={batch_size}", f"use a multiple of {self.world_size}"
            if whole_training_set:
                given = f"train.batch_size: all, the training set's {batch_size} examples"
                fix = "change task.train_fraction or the number of processes"
            raise ConfigError(
                f"{given}: the global batch, shared equally by the {self.world_size} processes "
                f"of this torchrun job; {fix}"
            )


class OneProcess:
    """Training in this process alone, as without torchrun: every method is the identity."""

    rank, world_size, local_rank = 0, 1, 0
    is_main = True
    device: torch.device | None = None  # train.device decides
    stop_signals = (signal.SIGINT,)  # Ctrl-C

    def own_random_stream(self, seed: int) -> None:
        pass

    def wrap(self, model: nn.Module) -> nn.Module:
        return model

    def shard(self, batch: Batch) -> Batch:
        return batch

    def share_of_loss(self, logits: torch.Tensor, labels: torch.Tensor, batch_labels: torch.Tensor) -> torch.Tensor:
        return scored_loss(logits, labels)  # the whole batch's mean loss

    def sum(self, value: torch.Tensor) -> torch.Tensor:
        return value

    def total(self, correct: Correct) -> Correct:
        return correct

    def any(self, flag: bool) -> bool:
        return flag

    def from_main(self, value: T) -> T:
        return value

    def on_main(self, make: Callable[[], T]) -> T:
        return make()

    def gather(self, value: T) -> list[T]:
        return [value]

    def noticing_failures(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()


class TorchrunJob:
    """This process's part in a torchrun job that trains one model data-parallel (see the
    module docstring). Made by `join_job`, which also ends it."""

    stop_signals = (signal.SIGINT, signal.SIGTERM)  # torchrun forwards the signal it gets to every process

    def __init__(self, launch: Launch, requested_device: str) -> None:
        self.rank, self.world_size, self.local_rank = launch.rank, launch.world_size, launch.local_rank
        self.is_main = self.rank == 0
        self.collective_failed = False  # see `_marking_failures`
        self.device = self._agree_on_device(requested_device)
        # Gradients: NCCL between GPUs; everything else (and everything on CPUs): the default gloo group.
        self.gradient_group = None
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
            self.gradient_group = dist.new_group(backend="nccl", timeout=COLLECTIVE_TIMEOUT)

    def _agree_on_device(self, requested: str) -> torch.device:
        """train.device for this process (cuda:LOCAL_RANK or cpu), the same kind on every
        process: `auto` trains on GPUs only if every process has one."""
        problem = None
        try:
            device = select_device(requested, self.local_rank)
        except UserError as err:
            device, problem = torch.device("cpu"), str(err)
        kinds = self.gather((device.type, problem))
        problems = [(rank, problem) for rank, (_, problem) in enumerate(kinds) if problem]
        if problems:  # rank 0's own, as is; else the first other process's, naming it
            rank, problem = problems[0]
            raise UserError(problem if rank == 0 else f"process {rank}: {problem}")
        if any(kind != device.type for kind, _ in kinds):
            return torch.device("cpu")  # auto, and some process has no GPU: gloo on CPUs for all
        return device

    def close(self) -> None:
        if self.gradient_group is not None:
            dist.destroy_process_group(self.gradient_group)

    def own_random_stream(self, seed: int) -> None:
        """Dropout masks: rank 0 draws the stream one process would; every other process its own."""
        if self.rank > 0:
            torch.manual_seed((seed + 1_000_003 * self.rank) % 2**63)

    def wrap(self, model: nn.Module) -> nn.Module:
        """`model` in DistributedDataParallel, gradients summed over the processes. (Its
        weights are already alike everywhere, from the same seed; DDP checks it.)"""
        wrapped = nn.parallel.DistributedDataParallel(
            model,
            device_ids=[self.device] if self.device.type == "cuda" else None,
            process_group=self.gradient_group,
            forward_sync_buffers=False,  # the model has no buffers that change
        )
        wrapped.register_comm_hook(self, _sum_gradients)
        return wrapped

    def shard(self, batch: Batch) -> Batch:
        """This process's block of the global batch's rows (padded to the global width, so
        every row is framed exactly as in one process)."""
        size = batch.tokens.size(0) // self.world_size
        rows = slice(self.rank * size, (self.rank + 1) * size)
        return Batch(
            **{
                field.name: None if (value := getattr(batch, field.name)) is None else value[rows]
                for field in fields(batch)
            }
        )

    def share_of_loss(self, logits: torch.Tensor, labels: torch.Tensor, batch_labels: torch.Tensor) -> torch.Tensor:
        """This block's share of the global batch's mean loss: its summed cross-entropy over
        the scored tokens of the whole batch (`batch_labels`). Summed over the processes:
        the batch's loss, and (through `_sum_gradients`) its gradient."""
        scored = int((batch_labels != IGNORE).sum())
        return scored_loss(logits, labels, reduction="sum") / max(scored, 1)

    def sum(self, value: torch.Tensor) -> torch.Tensor:
        """`value` summed over the processes (the same on every process)."""
        total = value.detach().to("cpu", copy=True)  # gloo reduces on the CPU
        with self._collective():
            dist.all_reduce(total)
        return total.to(value.device)

    def total(self, correct: Correct) -> Correct:
        counts = torch.tensor([correct.tokens, correct.scored, correct.sequences, correct.rows])
        with self._collective():
            dist.all_reduce(counts)
        return Correct(*counts.tolist())

    def any(self, flag: bool) -> bool:
        """True on every process if `flag` is True on any."""
        raised = torch.tensor([int(flag)])
        with self._collective():
            dist.all_reduce(raised, op=dist.ReduceOp.MAX)
        return bool(raised.item())

    def from_main(self, value: T) -> T:
        """Rank 0's `value`, on every process."""
        box = [value if self.is_main else None]
        with self._collective():
            dist.broadcast_object_list(box, src=0)
        return box[0]

    def on_main(self, make: Callable[[], T]) -> T:
        """`make()` run by rank 0 alone, its result on every process; a `UserError` (or
        `OSError`) it raises is raised by every process (rank 0's with its traceback)."""
        outcome: tuple[bool, Any] = (True, None)
        if self.is_main:
            try:
                outcome = (True, make())
            except (UserError, OSError) as err:
                outcome = (False, err)
        succeeded, value = self.from_main(outcome)
        if not succeeded:
            raise value
        return value

    def gather(self, value: T) -> list[T]:
        """Every process's `value`, in rank order, on every process."""
        values: list[Any] = [None] * self.world_size
        with self._collective():
            dist.all_gather_object(values, value)
        return values

    @contextlib.contextmanager
    def noticing_failures(self) -> Iterator[None]:
        """Within the block, an error that a collective raised because another process is gone
        (or hangs) becomes `JobFailed`: a `DistError` (NCCL's), or any `RuntimeError` once a
        collective of this job has failed (gloo's). From then on this process ignores SIGTERM:
        torchrun sends it while it tears the job down, and it would cut short the error
        message on the way out."""
        try:
            yield
        except RuntimeError as err:
            if not (isinstance(err, dist.DistError) or self.collective_failed):
                raise
            with contextlib.suppress(ValueError):  # (only the main thread may set handlers)
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            minutes = int(COLLECTIVE_TIMEOUT.total_seconds() // 60)
            raise JobFailed(
                f"process {self.rank} of {self.world_size} stops: another process of this torchrun job "
                f"stopped, or has not answered for {minutes} minutes; its own error, if any, is above"
            ) from None

    @contextlib.contextmanager
    def _collective(self) -> Iterator[None]:
        """Around one of our collectives: its failure is a `JobFailed` (`noticing_failures`)."""
        with self.noticing_failures(), self._marking_failures():
            yield

    @contextlib.contextmanager
    def _marking_failures(self) -> Iterator[None]:
        """An error raised by a collective is the job's, not this process's own. gloo reports a
        closed connection or a timeout as a plain `RuntimeError` (as any tensor error is), so
        the failure is known by where it rose: this marks the job broken."""
        try:
            yield
        except RuntimeError:  # DistError too: it is one
            self.collective_failed = True
            raise

    def _summed(self, future: torch.futures.Future) -> torch.Tensor:
        """The all-reduced bucket of `_sum_gradients` (run by the backend's thread)."""
        with self._marking_failures():
            return future.value()[0]


Job = OneProcess | TorchrunJob


def _sum_gradients(job, bucket):  # (TorchrunJob, dist.GradBucket) -> Future[Tensor]
    """DDP's communication hook: a bucket of gradients summed over the processes (DDP's
    default hook averages them, which would divide the batch's gradient by their number).
    Unannotated: DDP compares the annotations with the real classes, and this module's
    are strings (`from __future__ import annotations`)."""
    with job._marking_failures():  # (raised in DDP's backward, where run()'s noticing_failures sees it)
        work = dist.all_reduce(bucket.buffer(), group=job.gradient_group, async_op=True)
    return work.get_future().then(job._summed)


@contextlib.contextmanager
def join_job(requested_device: str, batch_size: int, whole_training_set: bool = False) -> Iterator[Job]:
    """This process's part in the torchrun job that started it, for the duration of the
    block: threads set, the process group joined (and left at the end), the device agreed.
    `OneProcess()` when torchrun did not start it: nothing changes."""
    launch = Launch.from_environment()
    if launch is None:
        yield OneProcess()
        return
    # every process reads the same config: each refuses it alone, at once
    launch.check_batch_size(batch_size, whole_training_set)
    torch.set_num_threads(threads_per_process(launch.local_world_size))
    owned = not dist.is_initialized()  # a program that joined a group itself keeps it
    if owned:
        # torch._dynamo (imported by DistributedDataParallel) keeps references to a process
        # group that exists when it is first imported: the group then outlives
        # destroy_process_group, and so do gloo's threads, which may still be releasing a
        # collective's tensors while the interpreter shuts down (an abort at exit: "terminate
        # called without an active exception"). Imported first, it holds none, and leaving
        # the group joins those threads. tests/test_distributed.py checks that none is left.
        # The private module itself: no public API imports it without doing work of its own.
        importlib.import_module("torch._dynamo")
        dist.init_process_group("gloo", timeout=COLLECTIVE_TIMEOUT)  # torchrun's MASTER_ADDR and MASTER_PORT
    job = None
    try:
        job = TorchrunJob(launch, requested_device)
        yield job
        # Leave together. A process that tore its group down while another still held its
        # connections aborted now and then in C++ ("terminate called without an active
        # exception"): 3 of 22 two-process jobs here, 0 of 50 with this barrier.
        with job._collective():
            dist.barrier()
    finally:
        if job is not None:
            job.close()
        if owned:
            dist.destroy_process_group()


def threads_per_process(local_world_size: int) -> int:
    """Intra-op threads of each of the `local_world_size` processes on this machine:
    OMP_NUM_THREADS when it is set (by the user; torchrun sets 1 when it starts several
    processes on a machine), else the machine's cores shared out evenly."""
    asked = threads_asked()
    return asked if asked is not None else max(1, machine_cores() // local_world_size)
