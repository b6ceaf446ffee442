"""What each head attends to, for one input: the data behind `tinytf attend`, the
TensorBoard attention images and the notebooks. Pure: it computes, the CLI formats.

    report = attention_report(run.model, run.framing, "3 1 2")
    for m in report.maps:            # one per stack, layer and kind
        m.name, m.weights.shape      # "decoder.0.self", (H, T_q, T_k)
    report.note                      # None, or why the answer may be a guess (a length never trained on)

The weights are exactly those of `model(..., return_attention=True)` for the input.
(Which sequence an attention's queries and keys read, and whether it is causal, its name
says: `attention_sides` and `is_causal` in model/names.py.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
from torch import nn

from tinytf.data.framing import Framing
from tinytf.device import eval_mode, model_device
from tinytf.errors import UserError
from tinytf.inspect.notebook import notebook_frame
from tinytf.inspect.viewer import attention_page
from tinytf.model.names import ActName, act_name, attention_sides


@dataclass
class AttentionMap:
    stack: str  # "encoder" or "decoder"
    layer: int
    kind: str  # "self" or "cross"
    query_tokens: list[str]
    key_tokens: list[str]
    weights: np.ndarray  # (H, T_q, T_k), each row sums to 1
    first_head: int = 0  # the model's index of weights[0] (not 0 once a head is selected)

    @property
    def name(self) -> str:
        return act_name(self.stack, self.layer, self.kind)

    @property
    def n_heads(self) -> int:
        return self.weights.shape[0]


@dataclass
class AttentionReport:
    tokens: list[str]  # what the model read (the decoder's tokens, for an encoder-decoder)
    source_tokens: list[str] | None  # the encoder's input, encoder-decoder only
    answer: list[str] | None  # the answer shown (generated unless a target was given)
    maps: list[AttentionMap]
    note: str | None = None  # set when the input's length is outside what the model was trained on

    def select(self, layer: int | None = None, head: int | None = None) -> AttentionReport:
        """Only layer `layer` and/or head `head`; out of range is a `UserError`."""
        maps = self.maps
        if layer is not None:
            n_layers = max(m.layer for m in maps) + 1
            if not 0 <= layer < n_layers:
                raise UserError(f"--layer {layer} is out of range: the model has layers 0..{n_layers - 1}")
            maps = [m for m in maps if m.layer == layer]
        if head is not None:
            n_heads = maps[0].n_heads
            if not 0 <= head < n_heads:
                raise UserError(f"--head {head} is out of range: the model has heads 0..{n_heads - 1}")
            maps = [
                AttentionMap(
                    m.stack, m.layer, m.kind, m.query_tokens, m.key_tokens, m.weights[head : head + 1], first_head=head
                )
                for m in maps
            ]
        return AttentionReport(self.tokens, self.source_tokens, self.answer, maps, self.note)

    def to_json(self) -> str:
        return json.dumps(
            {
                "tokens": self.tokens,
                "source_tokens": self.source_tokens,
                "answer": self.answer,
                "attention": [
                    {
                        "stack": m.stack,
                        "layer": m.layer,
                        "kind": m.kind,
                        "query_tokens": m.query_tokens,
                        "key_tokens": m.key_tokens,
                        "heads": list(range(m.first_head, m.first_head + m.n_heads)),  # the model's index of each
                        "weights": m.weights.tolist(),
                    }
                    for m in self.maps
                ],
            },
            ensure_ascii=False,
        )

    def _repr_html_(self) -> str:
        """In a notebook: the attention viewer (`tinytf attend --format html`), offline."""
        return notebook_frame(attention_page(self, title=f"Attention: {' '.join(self.tokens)}"))

    def save_npz(self, file: BinaryIO) -> None:
        """One (heads, query, key) array per map, named like "decoder.0.self", plus the tokens,
        written to the open `file` (given a name, numpy would add ".npz" to it)."""
        arrays = {m.name: m.weights for m in self.maps}
        arrays["tokens"] = np.array(self.tokens)
        if self.source_tokens is not None:
            arrays["source_tokens"] = np.array(self.source_tokens)
        np.savez(file, **arrays)


def attention_report(model: nn.Module, framing: Framing, text: str, target: str | None = None) -> AttentionReport:
    """Run `model` on typed `text` (and `target`, else its own greedy answer) and collect
    every attention map, labelled with its tokens."""
    vocab = framing.vocab
    batch, answer = framing.typed_batch(model, text, target)
    device = model_device(model)
    with eval_mode(model):
        _, weights = model(**batch.to(device).model_inputs(), return_attention=True)

    tokens = vocab.decode(batch.tokens[0].tolist())
    source_tokens = vocab.decode(batch.source[0].tolist()) if batch.source is not None else None
    maps = []
    for name, w in weights.items():
        parsed = ActName.parse(name)
        queries, keys = attention_sides(name, tokens, source_tokens)
        maps.append(AttentionMap(parsed.stack, parsed.layer, parsed.kind, queries, keys, w[0].float().cpu().numpy()))
    note = framing.length_note(framing.typed_input(text, model.config.max_len))
    return AttentionReport(tokens, source_tokens, None if answer is None else vocab.decode(answer), maps, note)
