"""Vocabulary: token strings <-> integer ids, and the text a person types -> tokens.

Every vocabulary starts with the same special tokens, so PAD is always id 0:

    <pad>  fills sequences up to the batch's longest; masked in attention, never scored
    <bos>  begins a sequence (decoder inputs, and the optional encoder BOS position)
    <sep>  separates source from target when both share one decoder sequence
    <eos>  ends an answer; generation stops there

Two ways to split typed text:
    word   split on whitespace: "3 1 2" -> ["3", "1", "2"]; "the cat" -> ["the", "cat"]
    char   one token per character: "12+34" -> ["1", "2", "+", "3", "4"]; whitespace is
           kept only when it is itself in the vocabulary (as in a character-level text
           model), so "12 + 34" reads the same as "12+34" for addition.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

from tinytf.errors import UserError
from tinytf.files import write_text_atomically

PAD, BOS, SEP, EOS = "<pad>", "<bos>", "<sep>", "<eos>"
SPECIALS = (PAD, BOS, SEP, EOS)
PAD_ID = 0
Split = Literal["word", "char"]


class UnknownTokenError(UserError):
    """Typed text holds tokens the model has never seen."""


class Vocabulary:
    def __init__(self, tokens: Iterable[str], split: Split = "word") -> None:
        """tokens: the task's own tokens, in order; specials are put first, duplicates dropped."""
        self.tokens: list[str] = list(dict.fromkeys([*SPECIALS, *tokens]))
        self.ids = {token: index for index, token in enumerate(self.tokens)}
        self.split = split
        self.pad_id, self.bos_id, self.sep_id, self.eos_id = (self.ids[s] for s in SPECIALS)
        assert self.pad_id == PAD_ID

    def __len__(self) -> int:
        return len(self.tokens)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and (self.tokens, self.split) == (other.tokens, other.split)

    def __repr__(self) -> str:
        return f"Vocabulary({len(self)} tokens, split={self.split!r})"

    # ---- typed text <-> tokens <-> ids

    def tokenize(self, text: str) -> list[str]:
        """What a person types -> token strings (not yet checked against the vocabulary)."""
        if self.split == "word":
            return text.split()
        return [char for char in text if not char.isspace() or char in self.ids]

    def encode(self, text_or_tokens: str | Sequence[str]) -> list[int]:
        """Typed text (or a list of token strings) -> ids; unknown tokens are a `UserError`."""
        tokens = self.tokenize(text_or_tokens) if isinstance(text_or_tokens, str) else list(text_or_tokens)
        unknown = [token for token in dict.fromkeys(tokens) if token not in self.ids]
        if unknown:
            raise UnknownTokenError(
                f"unknown token{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
                f"the vocabulary has {len(self) - len(SPECIALS)} tokens besides its specials: {self.describe()}"
            )
        return [self.ids[token] for token in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.tokens[int(index)] for index in ids]

    def join(self, tokens: Sequence[str]) -> str:
        """Tokens -> the text a person would type for them."""
        return " ".join(tokens) if self.split == "word" else "".join(tokens)

    def describe(self, limit: int = 40) -> str:
        """The non-special tokens, shortened to `limit` for error messages."""
        shown = [repr(t) if self.split == "char" else t for t in self.tokens[len(SPECIALS) :]]
        more = f" ... (+{len(shown) - limit} more)" if len(shown) > limit else ""
        return " ".join(shown[:limit]) + more

    # ---- persistence: plain JSON, saved next to checkpoints

    def to_json(self) -> str:
        return json.dumps({"split": self.split, "tokens": self.tokens}, ensure_ascii=False, indent=1)

    @classmethod
    def from_json(cls, text: str) -> Vocabulary:
        data = json.loads(text)
        if (
            not isinstance(data, dict)
            or data.get("split") not in ("word", "char")
            or not isinstance(data.get("tokens"), list)
        ):
            raise ValueError("not a tinytf vocabulary: expected {'split': 'word'|'char', 'tokens': [...]}")
        if tuple(data["tokens"][: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"not a tinytf vocabulary: the first tokens must be {SPECIALS}")
        return cls(data["tokens"][len(SPECIALS) :], data["split"])

    def save(self, path: str | Path) -> None:
        """Written atomically: a kill or a full disk leaves the old file whole, or none."""
        write_text_atomically(path, self.to_json())

    @classmethod
    def load(cls, path: str | Path) -> Vocabulary:
        try:
            return cls.from_json(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UserError(f"{path}: vocabulary file not found") from None
        except (ValueError, OSError) as err:
            raise UserError(f"{path}: cannot read vocabulary: {err}") from None
