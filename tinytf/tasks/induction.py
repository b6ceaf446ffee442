"""induction: a random sequence, then the same sequence again (Olsson et al. 2022, "In-context
Learning and Induction Heads"). Each example is one decoder sequence

    <bos> x1 x2 .. xL x1 x2 .. xL          x: task.vocab_size symbols, L: task.min_len..task.max_len

predicted token by token and scored on the repeat only. The first copy is random: nothing
in it can be predicted, so it is given. So is the repeat's first token: nothing says where
the first copy ends, so it looks like one more random draw. From the second repeat token
on, every token is predictable by looking back: find where the current token occurred
before, and copy the token that followed it. There is no <eos>, for the same reason as
above: the model cannot know where the repeat ends.

An induction head does that look-up with two heads in two layers. A previous-token head
in layer 0 writes into each position "the token before me was A". In layer 1, at a
position holding A, a head whose query is the current token A matches the keys of the
positions whose previous token was A, i.e. the token right after the earlier A, and
copies that token into the prediction. One layer cannot do it: its keys hold only each
position's own token and place, never its predecessor, so a one-layer model is left
guessing among the tokens it has seen (about ln L nats a token) where two layers reach ~0
(configs/induction-decoder.yaml and its -1layer twin show both).

When a token occurs twice in the first copy, matching the current token alone finds two
candidates; to pick the right one the model must also match the token before it (or
more). Few symbols make that common, and slower to learn; a larger task.vocab_size, rare.
"""

from __future__ import annotations

from tinytf.config import MAX_EXAMPLE_TOKENS, ConfigProblem
from tinytf.lazy import torch
from tinytf.tasks.base import LanguageModelTask, Pairs
from tinytf.tasks.vocab import PAD_ID, SPECIALS, Vocabulary

SHOWCASE_SYMBOLS = (3, 1, 4, 1, 5)  # the showcase's first copy, modulo task.vocab_size


class Induction(LanguageModelTask):
    name = "induction"
    description = "a random sequence, then the same again: 3 1 4 1 5 3 1 4 1 5 (scored from the repeat's 2nd token)"
    config_keys = ("vocab_size", "min_len", "max_len")
    starts_with_bos = True

    def check(self) -> None:
        super().check()
        if self.config.min_len < 2:
            raise ConfigProblem(
                f"task.min_len={self.config.min_len}: induction needs sequences of at least 2 symbols "
                "(the repeat's first token is a guess; only the ones after it are scored)",
                "task.min_len",
            )
        if self.max_target_len > MAX_EXAMPLE_TOKENS:
            raise ConfigProblem(
                f"task.max_len={self.config.max_len} is too long for induction: an example is <bos> and two copies, "
                f"{self.max_target_len} tokens, and examples may have at most {MAX_EXAMPLE_TOKENS} "
                f"(task.max_len up to {(MAX_EXAMPLE_TOKENS - 1) // 2})",
                "task.max_len",
            )

    def build_vocab(self) -> Vocabulary:
        return Vocabulary([str(s) for s in range(self.config.vocab_size)], split="word")

    @property
    def max_target_len(self) -> int:
        return 2 * self.config.max_len + 1  # <bos> x1..xL x1..xL

    @property
    def showcase(self) -> str:
        """A short sequence and its repeat in this config's symbols, cut to the longest input
        training shows the model (its longest examples' last token is never read)."""
        length = min(max(len(SHOWCASE_SYMBOLS), self.config.min_len), self.config.max_len)
        first = [str(SHOWCASE_SYMBOLS[i % len(SHOWCASE_SYMBOLS)] % self.config.vocab_size) for i in range(length)]
        longest = self.trained_lengths[1]
        return " ".join([*first, *first][:longest])

    def space_size(self) -> int:
        return sum(self.config.vocab_size**length for length in range(self.config.min_len, self.config.max_len + 1))

    def draw(self, n: int, generator: torch.Generator) -> Pairs:
        longest = self.config.max_len
        lengths = torch.randint(self.config.min_len, longest + 1, (n,), generator=generator)  # (N,)
        symbols = torch.randint(0, self.config.vocab_size, (n, longest), generator=generator)  # (N, max_len)
        # Position j of the sequence (j >= 1) holds symbol j - 1 in the first copy, j - L - 1 in the repeat.
        position = torch.arange(self.max_target_len).unsqueeze(0)  # (1, T)
        length = lengths.unsqueeze(1)  # (N, 1)
        index = torch.where(position <= length, position - 1, position - length - 1)  # (N, T)
        tokens = symbols.gather(1, index.clamp(0, longest - 1)) + len(SPECIALS)  # symbol s: id 4 + s
        tokens[:, 0] = self.vocab.bos_id
        target_len = 2 * lengths + 1
        target = tokens.masked_fill(position >= target_len.unsqueeze(1), PAD_ID)  # (N, T)
        return Pairs.without_source(target, target_len)

    def given_lengths(self, pairs: Pairs) -> torch.Tensor:
        """<bos>, the first copy and the repeat's first token: L + 2 of the 2L + 1."""
        return (pairs.target_len - 1) // 2 + 2
