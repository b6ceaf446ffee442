"""The data a training run draws from: a task's fixed held-out set and a seeded
training stream that never repeats a held-out example. (How examples become model
input is `tinytf/data/framing.py`'s job.)
"""

from __future__ import annotations

import math

import torch

from tinytf import arguments
from tinytf.config import MAX_EXAMPLE_TOKENS, MAX_SEED
from tinytf.errors import UserError
from tinytf.tasks.base import Pairs, Task


class TaskData:
    """A task's fixed held-out set and its seeded training stream, kept disjoint.

    The held-out examples come from their own seed. Training batches are drawn from
    the training seed, and any example that equals a held-out one is redrawn, so the
    held-out score always measures generalisation, even for tasks with few examples.
    A task with a fixed training set (a `TableTask`) splits its table once, by the seed
    too, and training batches come from `train_set` alone.

    eval_size: how many held-out examples; None: the task's own (`Task.held_out_size`).
    """

    def __init__(self, task: Task, seed: int, eval_size: int | None = None) -> None:
        arguments.instance(task, "task", Task, "a Task (tinytf.tasks.get_task(config.task))")
        seed = arguments.whole_number(seed, "seed", high=MAX_SEED)
        eval_size = arguments.optional_whole_number(eval_size, "eval_size", low=1)
        self.task = task
        self.generator = torch.Generator().manual_seed(seed)
        split_generator = torch.Generator().manual_seed(_held_out_seed(seed))
        self.train_set: Pairs | None = None  # the whole training set, where the task has a fixed one
        self._held_out_hashes, self._held_out_share = None, 0.0  # nothing to avoid in a fixed split
        split = task.fixed_split(split_generator)
        if split is not None:
            self.train_set, self.held_out = split[0], split[1][:eval_size]
            return
        held_out = task.held_out(eval_size or task.held_out_size(), split_generator)
        if not task.held_out_is_disjoint:
            # Distinct examples only: in a small task, repeats would weigh some examples twice.
            hashes = example_hashes(held_out)
            self._held_out_hashes, first = _first_occurrences(hashes)
            held_out = held_out[first]
        self.held_out = held_out
        space = task.space_size()
        if self._held_out_hashes is not None and space is not None and len(self._held_out_hashes) > space // 2:
            raise UserError(
                f"task {task.name!r} has only {space} distinct examples and the held-out set takes "
                f"{len(self._held_out_hashes)} of them; lower task.eval_size or make the task bigger "
                f"(task.vocab_size, task.max_len)"
            )
        self._held_out_share = self._estimate_held_out_share(seed)

    def _estimate_held_out_share(self, seed: int) -> float:
        """The fraction of training draws that land in the held-out set, from a probe sample."""
        if self._held_out_hashes is None:
            return 0.0
        probe = self.task.sample(PROBE_SIZE, torch.Generator().manual_seed(_held_out_seed(seed + 1)))
        return float(torch.isin(example_hashes(probe), self._held_out_hashes).float().mean())

    def _draws_for(self, n: int) -> int:
        """How many to draw so that n are left once held-out ones are dropped: the expected
        loss plus three standard deviations. Tasks with few distinct short inputs (Dyck: a
        quarter of all draws are held out) then rarely need a second round; tasks where
        under 1% are held out draw n and redraw in the rare batch that falls short."""
        share = self._held_out_share
        if share < 0.01:
            return n
        return math.ceil((n + 3 * math.sqrt(n * share)) / (1 - share))

    def train_pairs(self, n: int) -> Pairs:
        """n training examples, none of them in the held-out set. From a fixed training set:
        n distinct ones, at random, or the whole set when n is its size."""
        n = arguments.whole_number(n, "n", low=1)
        if self.train_set is not None:
            if n >= len(self.train_set):
                return self.train_set
            return self.train_set[torch.randperm(len(self.train_set), generator=self.generator)[:n]]
        pairs = self.task.sample(self._draws_for(n), self.generator)
        if self._held_out_hashes is None:
            return pairs
        kept = pairs[~torch.isin(example_hashes(pairs), self._held_out_hashes)]
        for _ in range(100):
            if len(kept) >= n:
                return kept[:n]
            # Redraw a full batch rather than only the missing few: a batch costs about
            # the same to make whatever its size, and one more round usually suffices.
            extra = self.task.sample(n, self.generator)
            kept = Pairs.concat([kept, extra[~torch.isin(example_hashes(extra), self._held_out_hashes)]])
        raise UserError(f"task {self.task.name!r}: cannot draw training examples outside the held-out set")

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.generator.set_state(state["generator"])


PROBE_SIZE = 2048  # examples drawn once to estimate how often a draw is held out


def _first_occurrences(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(N,) -> the distinct values, and the index of each one's first occurrence, in order."""
    distinct, inverse = values.unique(return_inverse=True)
    first = torch.full((len(distinct),), len(values)).scatter_reduce_(0, inverse, torch.arange(len(values)), "amin")
    return distinct, first.sort().values


def _held_out_seed(seed: int) -> int:
    return (seed * 1_000_003 + 0x5EED) % 2**63  # a different stream for every training seed


_HASH_WEIGHTS = torch.randint(-(2**62), 2**62, (MAX_EXAMPLE_TOKENS,), generator=torch.Generator().manual_seed(7))


def example_hashes(pairs: Pairs) -> torch.Tensor:
    """(N,) int64 fingerprints of each example's input (the source, or a language
    model's whole sequence): equal inputs, equal hashes."""
    ids = pairs.source if pairs.source.size(1) > 0 else pairs.target  # (N, L), PAD after the end
    return (ids * _HASH_WEIGHTS[: ids.size(1)]).sum(1)  # int64 arithmetic wraps: a fine hash
