"""dyck-1 and dyck-2: is this bracket prefix balanced?

Sequences over one pair "( )" (dyck-1) or two pairs "( ) [ ]" (dyck-2) plus a neutral
symbol "x". The target labels every prefix:
    T  balanced so far (every bracket closed, in order)
    P  not balanced, but could still be completed (open brackets are waiting)
    F  broken: a bracket was closed that was not open; once broken, always broken

Sequences are drawn by a random walk that mostly makes legal moves (open, close the
innermost open bracket, or x) and sometimes emits a random symbol, so that all three
labels occur often rather than almost every random string breaking at once.
"""

from __future__ import annotations

from tinytf.lazy import torch
from tinytf.tasks.base import Pairs, SymbolTask
from tinytf.tasks.vocab import PAD_ID, Vocabulary
from tinytf.tensors import positions_below

OPENS, CLOSES, NEUTRAL = ("(", "["), (")", "]"), "x"
LABELS = ("T", "P", "F")


class Dyck1(SymbolTask):
    name = "dyck-1"
    description = "label each prefix of ( ) x as balanced T, pending P or broken F: (x)) -> PPTF"
    config_keys = ("min_len", "max_len", "bos")  # the symbols are fixed: no vocab_size
    n_pairs = 1
    noise = 0.2  # chance that a step emits a uniformly random symbol instead of a legal move

    def build_vocab(self) -> Vocabulary:
        return Vocabulary([*self.symbols(), *LABELS], split="char")  # type "(x))" or "( x ) )"

    def symbols(self) -> list[str]:
        return [*OPENS[: self.n_pairs], *CLOSES[: self.n_pairs], NEUTRAL]

    def output_tokens(self) -> list[str]:
        return list(LABELS)

    def space_size(self) -> int:
        n_symbols = 2 * self.n_pairs + 1
        return sum(n_symbols**length for length in range(self.config.min_len, self.config.max_len + 1))

    def draw(self, n: int, generator: torch.Generator) -> Pairs:
        # Symbol codes: 0..P-1 open bracket type k, P..2P-1 close type k-P, 2P neutral.
        pairs, width = self.n_pairs, self.config.max_len
        lengths = torch.randint(self.config.min_len, width + 1, (n,), generator=generator)
        # Every random choice drawn up front, (N, S) each; the loop below only follows them.
        move = torch.rand(n, width, generator=generator)
        open_type = torch.randint(0, pairs, (n, width), generator=generator)
        noisy = torch.rand(n, width, generator=generator) < self.noise
        random_code = torch.randint(0, 2 * pairs + 1, (n, width), generator=generator)

        codes = torch.empty(n, width, dtype=torch.long)
        depth_after = torch.empty(n, width, dtype=torch.long)  # open brackets after each prefix
        bad_close = torch.empty(n, width, dtype=torch.bool)  # closed a bracket that was not open
        stack = torch.zeros(n, width + 1, dtype=torch.long)  # open bracket types, bottom first
        depth = torch.zeros(n, dtype=torch.long)
        rows = torch.arange(n)
        for t in range(width):
            deep = depth > 0
            top = stack[rows, (depth - 1).clamp(min=0)]  # innermost open type (N,)
            # A legal move: at depth 0, open (70%) or x; deeper, open 35%, close 55%, x 10%.
            opens = move[:, t] < 0.70 - 0.35 * deep
            closes = deep & (move[:, t] < 0.90)
            legal = torch.where(opens, open_type[:, t], torch.where(closes, pairs + top, 2 * pairs))
            code = torch.where(noisy[:, t], random_code[:, t], legal)
            is_open, is_close = code < pairs, (code >= pairs) & (code < 2 * pairs)
            matches = is_close & deep & (top == code - pairs)
            stack[rows, depth] = code  # only read back if it was an open bracket (depth grows)
            depth = depth + is_open.long() - matches.long()
            codes[:, t], depth_after[:, t], bad_close[:, t] = code, depth, is_close & ~matches

        broken = bad_close.cummax(dim=1).values  # once broken, always broken
        labels = torch.where(broken, 2, (depth_after > 0).long())  # index into LABELS: T 0, P 1, F 2
        valid = positions_below(lengths, width)
        symbol_id, label_id = self.token_ids(self.symbols()), self.token_ids(list(LABELS))
        source = torch.where(valid, symbol_id[codes], PAD_ID)
        target = torch.where(valid, label_id[labels], PAD_ID)
        return Pairs(source, lengths, target, lengths)


class Dyck2(Dyck1):
    name = "dyck-2"
    description = "label each prefix of ( ) [ ] x as balanced T, pending P or broken F: ([) -> PPF"
    n_pairs = 2
    noise = 0.1  # a random symbol breaks dyck-2 more often: two kinds of closing bracket
