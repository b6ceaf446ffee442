"""The names of a model's activations, built and read here alone, as TransformerLens's
`utils.get_act_name` builds its hook names (hooks.py lists every name and its shape):

    embed, source_embed                  the embeddings
    <stack>.<layer>.<kind>               an attention: its weights in `return_attention`
    <stack>.<layer>.<kind>.<value>       an attention's q, k, v, pattern or z
    <stack>.<layer>.<value>              a layer's resid_pre, attn_out, ..., resid_post

stack is "encoder" or "decoder", layer its index, kind "self" or "cross".

    act_name("decoder", 1, "self", "z")           # "decoder.1.self.z"
    act_name("decoder", 1, value="resid_post")    # "decoder.1.resid_post"
    ActName.parse("decoder.1.self.z").attention   # "decoder.1.self"
    child("decoder.1", "resid_pre")               # a module's name, then one of its own
    head_name("decoder.1.self", 2)                # a head, in reports: "decoder.1.self.2"
    attention_sides("decoder.1.cross", t, s)      # what its queries and keys read: (t, s)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TypeVar

ATTENTION_KINDS = ("self", "cross")
Tokens = TypeVar("Tokens")  # token strings, a tensor of ids, or a label for them (attention_sides)


def child(parent: str, part: str | int) -> str:
    """The name of `part` inside the module or attention named `parent`: "decoder" and 1
    give "decoder.1", "decoder.1.self" and "z" give "decoder.1.self.z"."""
    return f"{parent}.{part}"


def head_name(attention: str, head: int) -> str:
    """A head's name in reports: "decoder.0.self.2" is head 2 of the attention "decoder.0.self"."""
    return child(attention, head)


def act_name(stack: str, layer: int, kind: str | None = None, value: str | None = None) -> str:
    """The name of an attention (`kind`), of its `value`, or of a layer's `value`."""
    return str(ActName(stack, layer, kind, value))


@dataclass(frozen=True)
class ActName:
    """A name below a stack's layer, read into its parts (embed and source_embed are not)."""

    stack: str  # "encoder" or "decoder"
    layer: int
    kind: str | None = None  # "self" or "cross" for an attention or its values; None for a layer's
    value: str | None = None  # "z", "pattern", "resid_post", ...; None for an attention itself

    @classmethod
    def parse(cls, name: str) -> ActName:
        stack, layer, *rest = name.split(".")
        kind = rest[0] if rest and rest[0] in ATTENTION_KINDS else None
        value = rest[-1] if rest and rest[-1] not in ATTENTION_KINDS else None
        return cls(stack, int(layer), kind, value)

    def __str__(self) -> str:
        return ".".join(str(part) for part in (self.stack, self.layer, self.kind, self.value) if part is not None)

    @property
    def attention(self) -> str:
        """The attention this name belongs to: "decoder.1.self" for "decoder.1.self.z"."""
        return str(replace(self, value=None))

    def of(self, value: str) -> str:
        """The same attention's (or layer's) `value`: ActName("decoder", 1, "self").of("z") == "decoder.1.self.z"."""
        return str(replace(self, value=value))


def is_value(name: str, *values: str) -> bool:
    """Whether `name` is an attention's or a layer's value, one of `values` ("decoder.1.self.z" is "z")."""
    return "." in name and name.rpartition(".")[2] in values


def attention_sides(name: str, tokens: Tokens, source: Tokens | None) -> tuple[Tokens, Tokens | None]:
    """What the queries and the keys of the attention `name` ("encoder.0.self",
    "decoder.1.cross") read, given the model's `tokens` and an encoder-decoder's `source`
    (None for the other architectures): its encoder reads the source on both sides, its
    cross-attention asks from the tokens into the source; every other attention reads the tokens."""
    attention = ActName.parse(name)
    if source is not None and attention.stack == "encoder":
        return source, source
    if attention.kind == "cross":
        return tokens, source
    return tokens, tokens


def is_causal(name: str) -> bool:
    """Whether query i of the attention `name` sees only keys 0..i: a decoder's self-attention."""
    attention = ActName.parse(name)
    return attention.stack == "decoder" and attention.kind == "self"
