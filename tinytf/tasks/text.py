"""text: language modelling on your own UTF-8 text file (`task.path`).

`task.tokenizer: char` makes every character a token (spaces and newlines included);
`word` splits on whitespace. The vocabulary is every token of the file. Training
windows of `task.max_len` + 1 tokens are cut at random from the first 90% of the
file; the held-out windows come from the last 10%, so they never overlap.
"""

from __future__ import annotations

import hashlib
from functools import cached_property

from tinytf.config import ConfigProblem
from tinytf.errors import ConfigError
from tinytf.files import check_regular_file, read_regular_file
from tinytf.lazy import torch
from tinytf.tasks.base import LanguageModelTask, Pairs
from tinytf.tasks.vocab import Vocabulary

HELD_OUT_FRACTION = 0.1
MAX_TEXT_BYTES = 50_000_000  # the file's tokens are held as a Python list and a tensor
FILE_ROLE = "text file"  # how a refusal names it


class Text(LanguageModelTask):
    name = "text"
    description = "next-token prediction on a text file of yours (task.path; task.tokenizer: char | word)"
    config_keys = ("path", "tokenizer", "max_len")  # max_len: the training window, in tokens
    held_out_is_disjoint = True

    @classmethod
    def example(cls) -> str:
        return "task.path: my.txt -> windows of the file, each predicting its next token"

    def check(self) -> None:
        """The file must be named and be a regular file within MAX_TEXT_BYTES; reading and
        decoding it waits for training."""
        super().check()
        if not self.config.path:
            raise ConfigProblem("task.path: the text task needs the file to model", "task.path", "task.name")
        try:
            check_regular_file(self.config.path, MAX_TEXT_BYTES, FILE_ROLE, ConfigError)  # never opens it
        except ConfigError as err:
            raise ConfigProblem(f"task.path: {err}", "task.path") from None

    def read_file(self) -> bytes:
        """The file's bytes, checked again as they are read: it may have changed since `check`."""
        try:
            return read_regular_file(self.config.path or "", MAX_TEXT_BYTES, FILE_ROLE, ConfigError)
        except ConfigError as err:
            raise ConfigError(f"task.path: {err}") from None

    @cached_property
    def tokens(self) -> list[str]:
        data = self.read_file()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ConfigError(
                f"task.path: {self.config.path} is not UTF-8 text ({err.reason} at byte {err.start})"
            ) from None
        return text.split() if self.config.tokenizer == "word" else list(text)

    def build_vocab(self) -> Vocabulary:
        return Vocabulary(sorted(set(self.tokens)), split=self.config.tokenizer)

    def data_fingerprint(self) -> str:
        """SHA-256 of the file's bytes."""
        return hashlib.sha256(self.read_file()).hexdigest()

    @cached_property
    def stream(self) -> torch.Tensor:
        """The whole file as ids (L,)."""
        window = self.max_target_len
        needed = int(2 * window / HELD_OUT_FRACTION)
        if len(self.tokens) < needed:
            raise ConfigError(
                f"task.path: {self.config.path} has {len(self.tokens)} {self.config.tokenizer} tokens; "
                f"windows of task.max_len={self.config.max_len} need at least {needed}"
            )
        return torch.tensor(self.vocab.encode(self.tokens))

    @property
    def max_target_len(self) -> int:
        return self.config.max_len + 1  # inputs are tokens[:-1], labels tokens[1:]

    def windows(self, region: torch.Tensor, n: int, generator: torch.Generator) -> Pairs:
        window = self.max_target_len
        starts = torch.randint(0, len(region) - window + 1, (n,), generator=generator)  # (N,)
        target = region[starts.unsqueeze(1) + torch.arange(window)]  # (N, window)
        return Pairs.without_source(target, torch.full((n,), window))

    @property
    def split_point(self) -> int:
        return int(len(self.stream) * (1 - HELD_OUT_FRACTION))

    def draw(self, n: int, generator: torch.Generator) -> Pairs:
        return self.windows(self.stream[: self.split_point], n, generator)

    def held_out(self, n: int, generator: torch.Generator) -> Pairs:
        return self.windows(self.stream[self.split_point :], n, generator)
