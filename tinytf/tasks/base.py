"""What a task is: a seeded generator of (source, target) token sequences with its own
vocabulary. Framing them for an architecture is `tinytf/data/framing.py`'s job, not the task's.
A task describes itself (name, architectures, config keys, lengths) without torch, so
that checking a config never imports it (see `tinytf/lazy.py`).

Shape legend: N examples, S source length, T target length (both padded with PAD).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar, Literal, get_args

from tinytf import arguments
from tinytf.config import DEFAULT_EVAL_SIZE, MAX_SEED, Arch, ConfigProblem, TaskConfig
from tinytf.errors import NotApplicableError
from tinytf.lazy import torch
from tinytf.tasks.vocab import PAD_ID, SPECIALS, Vocabulary
from tinytf.tensors import positions_below

ALL_ARCHS: tuple[Arch, ...] = get_args(Arch)


@dataclass(frozen=True)
class MinimalPair:
    """Two prompts that differ only in the token that decides the next one (`tinytf patch`)."""

    clean: str  # e.g. "the cat near the dogs"
    corrupt: str  # "the cats near the dogs"
    answer: str  # the clean prompt's next token: "sleeps"
    wrong: str  # the corrupted prompt's: "sleep"


@dataclass(frozen=True)
class Pairs:
    """N examples as padded id tensors: example i is source[i, :source_len[i]] ->
    target[i, :target_len[i]]. Language-model tasks leave the source empty (S = 0)."""

    source: torch.Tensor  # (N, S) long
    source_len: torch.Tensor  # (N,) long
    target: torch.Tensor  # (N, T) long
    target_len: torch.Tensor  # (N,) long

    def __len__(self) -> int:
        return self.target.size(0)

    def __getitem__(self, index: slice | torch.Tensor) -> Pairs:
        return Pairs(self.source[index], self.source_len[index], self.target[index], self.target_len[index])

    def example(self, i: int) -> tuple[list[int], list[int]]:
        """Example i as (source ids, target ids), without padding."""
        return (
            self.source[i, : self.source_len[i]].tolist(),
            self.target[i, : self.target_len[i]].tolist(),
        )

    @staticmethod
    def without_source(target: torch.Tensor, target_len: torch.Tensor) -> Pairs:
        """Language-model examples: an empty source (S = 0) and the sequence as target."""
        n = target.size(0)
        return Pairs(torch.zeros(n, 0, dtype=torch.long), torch.zeros(n, dtype=torch.long), target, target_len)

    @staticmethod
    def concat(parts: list[Pairs]) -> Pairs:
        def stack(name: str) -> torch.Tensor:
            tensors = [getattr(p, name) for p in parts]
            width = max(t.size(1) for t in tensors)
            return torch.cat([torch.nn.functional.pad(t, (0, width - t.size(1)), value=PAD_ID) for t in tensors])

        return Pairs(
            stack("source"),
            torch.cat([p.source_len for p in parts]),
            stack("target"),
            torch.cat([p.target_len for p in parts]),
        )


class Task:
    """Base class of every task. A subclass sets the class attributes below and
    implements `draw` (what `sample` returns); registering it in `tinytf/tasks/__init__.py` makes it
    available as `task.name` in configs (and tested by the registry's tests). A task
    may also say, in `alignments`, which source tokens a correct algorithm reads for
    each answer token: patterns that `tinytf heads` scores attention heads against."""

    name: ClassVar[str]
    description: ClassVar[str]  # one line, shown by `tinytf tasks`
    archs: ClassVar[tuple[Arch, ...]] = ALL_ARCHS  # the architectures it makes sense for
    # The keys of the config's task section it reads, besides name and eval_size (which
    # every task has). Setting any other key is an error that lists these.
    config_keys: ClassVar[tuple[str, ...]] = ()
    # Language-model tasks have no source: the decoder predicts each next target token.
    language_model: ClassVar[bool] = False
    # Language models only: sequences begin with <bos> (typed text gets one prepended).
    starts_with_bos: ClassVar[bool] = False
    # An input whose attention maps are worth watching as training goes (logged to TensorBoard).
    showcase: ClassVar[str | None] = None
    # Names of the alignment patterns `alignments` returns (declared without torch, for docs/CLI).
    alignment_patterns: ClassVar[tuple[str, ...]] = ()
    # The kinds of minimal pairs `held_out_pairs` draws (`tinytf patch --pairs N --construction`).
    constructions: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: TaskConfig) -> None:
        """Cheap: nothing is generated or read until it is needed."""
        self.config = config

    @classmethod
    def example(cls) -> str:
        """One example as text, "source -> target", typed as the task's description types
        its own (for `tinytf tasks`)."""
        task = cls(TaskConfig(name=cls.name, min_len=4, max_len=6))
        source, target = task.sample(1, torch.Generator().manual_seed(0)).example(0)
        return task.render(target) if task.language_model else f"{task.render(source)} -> {task.render(target)}"

    def check(self) -> None:
        """Raise `ConfigProblem` for settings this task cannot work with. Cheap: called
        for every config loaded, it samples nothing and reads no file."""
        if {"min_len", "max_len"} <= set(self.config_keys) and self.config.min_len > self.config.max_len:
            raise ConfigProblem(
                f"task.min_len={self.config.min_len} is greater than task.max_len={self.config.max_len}",
                "task.min_len",
                "task.max_len",
            )

    @cached_property
    def vocab(self) -> Vocabulary:
        return self.build_vocab()

    def build_vocab(self) -> Vocabulary:
        raise NotImplementedError(f"{type(self).__name__} does not define build_vocab; every task must")

    def held_out(self, n: int, generator: torch.Generator) -> Pairs:
        """The evaluation examples. By default fresh samples, which the training stream
        then avoids (see data/heldout.py); a task may draw them from a region of its own."""
        return self.sample(n, generator)

    # True when held_out() can never produce a training example (so nothing need be avoided).
    held_out_is_disjoint: ClassVar[bool] = False

    def held_out_size(self) -> int:
        """How many held-out examples a run scores: task.eval_size, or DEFAULT_EVAL_SIZE."""
        return self.config.eval_size or DEFAULT_EVAL_SIZE

    def train_size(self) -> int | None:
        """How many examples the training set holds; None: training draws a fresh stream."""
        return None

    def fixed_split(self, generator: torch.Generator) -> tuple[Pairs, Pairs] | None:
        """(training set, held-out set) of a task with a fixed training set; None: the
        task samples its training stream (see data/heldout.py)."""
        return None

    def residue_ids(self) -> torch.Tensor | None:
        """(p,) the ids of tokens that stand for 0, 1, ..., p - 1 as elements of Z_p, in
        order; training then logs the Fourier spectrum of their embedding. None: no such tokens."""
        return None

    def sample(self, n: int, generator: torch.Generator) -> Pairs:
        """Draw n random examples; the same generator state gives the same examples."""
        n = arguments.whole_number(n, "n")
        arguments.instance(generator, "generator", torch.Generator, "a torch.Generator")
        return self.draw(n, generator)

    def draw(self, n: int, generator: torch.Generator) -> Pairs:
        """`sample` once its arguments are checked: each task's own way to draw n examples."""
        raise NotImplementedError(f"{type(self).__name__} does not define draw; every task must")

    def alignments(self, source: list[int], target: list[int]) -> dict[str, list[tuple[int, int]]]:
        """For each pattern in alignment_patterns: (j, i) pairs, "to write answer token j, a
        correct algorithm reads source token i" (several i per j where several positions qualify).
        Language-model tasks have no source: both index the sequence `target`, "to predict token j,
        read token i" (i < j). `source`/`target` are ids without padding, as Pairs.example(i) gives
        them (for a typed input, the model's own answer is the target). Default: {}.

        Only pairs with j < len(target) and i < len(source) (or len(target)) come back: an
        answer shorter or longer than the correct one gives pairs for the tokens it has.
        `Framing.alignments` places the pairs in the attention maps."""
        return {}

    def held_out_pairs(
        self, construction: str, n: int, seed: int = 0, held_out: Pairs | None = None
    ) -> list[MinimalPair]:
        """`n` minimal pairs of `construction` (one of `constructions`) that training never
        saw, drawn with `seed`; `held_out`, the run's held-out examples, for a task that
        draws them from there (see `TaskData`)."""
        if not self.constructions:
            raise NotApplicableError(
                f"task {self.name!r} draws no minimal pairs (it has no constructions); "
                "tinytf.tasks.CONSTRUCTIONS names the tasks that do"
            )
        if construction not in self.constructions:
            raise ValueError(f"construction {construction!r}: one of {', '.join(self.constructions)}")
        n = arguments.whole_number(n, "n", low=1)
        seed = arguments.whole_number(seed, "seed", high=MAX_SEED)
        if held_out is not None:
            arguments.instance(held_out, "held_out", Pairs, "the run's held-out examples (TaskData(...).held_out)")
        return self.draw_pairs(construction, n, seed, held_out)

    def draw_pairs(self, construction: str, n: int, seed: int, held_out: Pairs | None) -> list[MinimalPair]:
        """`held_out_pairs` once its arguments are checked: each task with constructions draws its own."""
        raise NotImplementedError(f"{type(self).__name__} has constructions but does not define draw_pairs")

    @property
    def max_source_len(self) -> int:
        """Longest source sequence the task produces."""
        raise NotImplementedError(f"{type(self).__name__} does not define max_source_len; every task must")

    @property
    def max_target_len(self) -> int:
        """Longest target sequence the task produces."""
        raise NotImplementedError(f"{type(self).__name__} does not define max_target_len; every task must")

    @property
    def trained_lengths(self) -> tuple[int, int]:
        """The shortest and longest inputs, in tokens as typed, that training shows the
        model: an answer to anything else is a guess (`Framing.length_note` says so)."""
        return 1, self.max_source_len

    def data_fingerprint(self) -> str | None:
        """A hash of the data the task reads from outside (a file), so that a run can tell
        when it changed; None for tasks that generate their examples."""
        return None

    def space_size(self) -> int | None:
        """How many distinct examples exist (None: too many to matter). A small space
        makes the held-out set and the training stream collide, which sampling avoids."""
        return None

    def render(self, ids: list[int]) -> str:
        """Ids -> text as a person would type it (special tokens left out)."""
        return self.vocab.join([token for token in self.vocab.decode(ids) if token not in SPECIALS])


class TableTask(Task):
    """A task whose every example fits in one table (`table()`). A run trains on a fixed
    part of it, `task.train_fraction` chosen at random from the run's seed, and holds out
    the rest (or `task.eval_size` of the rest): a finite training set that never meets the
    held-out one, as grokking studies train on, all of it at each step with
    `train.batch_size: all`."""

    held_out_is_disjoint = True

    def table(self) -> Pairs:
        """Every example of the task, in a fixed order."""
        raise NotImplementedError(f"{type(self).__name__} does not define table; every table task must")

    def table_size(self) -> int:
        """len(table()), without building it."""
        raise NotImplementedError(f"{type(self).__name__} does not define table_size; every table task must")

    def train_size(self) -> int:
        return max(1, round(self.config.train_fraction * self.table_size()))

    def held_out_size(self) -> int:
        rest = self.table_size() - self.train_size()
        return min(self.config.eval_size or rest, rest)

    def check(self) -> None:
        super().check()
        size, rest = self.table_size(), self.table_size() - self.train_size()
        if rest < 1:
            raise ConfigProblem(
                f"task.train_fraction={self.config.train_fraction:g} trains on all {size} examples "
                f"of the task and leaves none to hold out",
                "task.train_fraction",
            )
        if self.config.eval_size is not None and self.config.eval_size > rest:
            raise ConfigProblem(
                f"task.eval_size={self.config.eval_size}: training leaves only {rest} of the task's "
                f"{size} examples out (unset, task.eval_size takes them all)",
                "task.eval_size",
            )

    def fixed_split(self, generator: torch.Generator) -> tuple[Pairs, Pairs]:
        order = torch.randperm(self.table_size(), generator=generator)
        train = order[: self.train_size()]
        held_out = order[self.train_size() :][: self.held_out_size()]
        table = self.table()
        return table[train.sort().values], table[held_out]  # held out in random order: any first N are a fair sample

    def draw(self, n: int, generator: torch.Generator) -> Pairs:
        """n examples drawn from the whole table (training draws from its own part only)."""
        return self.table()[torch.randint(self.table_size(), (n,), generator=generator)]


def examples_per_step(task: Task, batch_size: int | Literal["all"]) -> int:
    """train.batch_size as a number of examples: `all` is the task's whole training set."""
    if batch_size != "all":
        return batch_size
    size = task.train_size()
    if size is None:
        raise ValueError(f"task {task.name!r} has no fixed training set")  # check_config refuses it first
    return size


class LanguageModelTask(Task):
    """Next-token prediction over sequences with no source; a decoder's job only."""

    archs = ("decoder",)
    language_model = True
    max_source_len = 0

    @property
    def trained_lengths(self) -> tuple[int, int]:
        """Prompts of any length up to the training window (each position is trained),
        which is max_target_len - 1 tokens read, <bos> included."""
        return 1, self.max_target_len - 1 - int(self.starts_with_bos)

    def given_lengths(self, pairs: Pairs) -> torch.Tensor | None:
        """(N,) how many leading tokens of each sequence are given rather than predicted:
        the framing scores only the predictions of the tokens after them. None (the
        default): every token but the first is scored."""
        return None


class SymbolTask(Task):
    """Tasks over random strings of `task.vocab_size` symbols "0", "1", ... with lengths
    drawn uniformly from [`task.min_len`, `task.max_len`]. Subclasses compute the
    target from the source in `targets`, vectorised over the batch. (`task.bos` is read
    by the framings, which put <bos> before the source.)"""

    config_keys = ("vocab_size", "min_len", "max_len", "bos")

    def build_vocab(self) -> Vocabulary:
        return Vocabulary([*self.symbols(), *self.output_tokens()], split="word")

    def symbols(self) -> list[str]:
        return [str(s) for s in range(self.config.vocab_size)]

    def output_tokens(self) -> list[str]:
        """Target tokens that are not symbols (e.g. counts)."""
        return []

    @property
    def first_symbol_id(self) -> int:
        return len(SPECIALS)  # symbol s has id first_symbol_id + s

    @property
    def max_source_len(self) -> int:
        return self.config.max_len

    @property
    def max_target_len(self) -> int:
        return self.config.max_len

    @property
    def trained_lengths(self) -> tuple[int, int]:
        return self.config.min_len, self.config.max_len

    def space_size(self) -> int:
        return sum(self.config.vocab_size**length for length in range(self.config.min_len, self.config.max_len + 1))

    def draw(self, n: int, generator: torch.Generator) -> Pairs:
        lengths = torch.randint(self.config.min_len, self.config.max_len + 1, (n,), generator=generator)
        symbols = torch.randint(0, self.config.vocab_size, (n, self.config.max_len), generator=generator)
        valid = positions_below(lengths, self.config.max_len)  # (N, S)
        target, target_len = self.targets(symbols, lengths, valid)
        source = torch.where(valid, symbols + self.first_symbol_id, PAD_ID)
        return Pairs(source, lengths, target, target_len)

    def targets(
        self, symbols: torch.Tensor, lengths: torch.Tensor, valid: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """symbols (N, S) in [0, vocab_size), garbage where not `valid` -> target ids (N, T), lengths (N,)."""
        raise NotImplementedError(f"{type(self).__name__} does not define targets; every symbol task must")

    def token_ids(self, tokens: list[str]) -> torch.Tensor:
        """A lookup table: value v -> id of the token tokens[v]."""
        return torch.tensor([self.vocab.ids[t] for t in tokens])
