"""An interactive attention viewer in one self-contained HTML file: `tinytf attend TEXT --format html`.

    page = attention_page(report, head_report, facts={"input": "the cat sat", "run": "runs/quickstart-..."})
    write_text_atomically("attention.html", page)

The page holds everything it needs — markup, style, script and data — and asks the
network for nothing: its Content-Security-Policy allows only its own inline style and
script (by their SHA-256), so it works opened from disk with the network off, mailed or
archived. It has two views, drawn as SVG by a small hand-written script
(tinytf/inspect/viewer_page/viewer.js):

    head view   the tokens in two columns, queries left and keys right, a line from each
                query to each key whose opacity is the weight, one colour per head; an
                attention selector, a checkbox per head, hover a token for its lines only
    model view  a small heatmap per attention (row) and head (column); a click opens it
                large, with token labels and the weight under the pointer

The data is one JSON element. Each weight is stored as an integer per mille (the weight
rounded to 3 digits, times WEIGHT_SCALE), and each query row stops at its last non-zero
weight (a causal row ends in zeros): the quickstart model's page for a 256-token input
(its max_len) stays under a megabyte. Tokens are user text: the JSON escapes `<`, `>` and
`&`, so a token such as `</script>` cannot end the element, and the script only ever puts
them into `textContent`.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Protocol

import numpy as np

from tinytf.model.names import attention_sides


# What the page reads of an attention report (attend.py) and a head report (heads.py):
# described here, not imported, so that the reports can show themselves with this page.
class AttentionMap(Protocol):
    name: str
    stack: str
    layer: int
    kind: str
    query_tokens: list[str]
    key_tokens: list[str]
    weights: np.ndarray  # (H, T_q, T_k)
    first_head: int
    n_heads: int


class AttentionReport(Protocol):
    tokens: list[str]
    source_tokens: list[str] | None
    answer: list[str] | None
    maps: Sequence[AttentionMap]
    note: str | None


class HeadScore(Protocol):
    name: str
    label: str
    scores: Mapping[str, float | None]
    entropy: float


class HeadReport(Protocol):
    patterns: list[str]
    heads: Sequence[HeadScore]


WEIGHT_SCALE = 1000  # weights are stored as round(weight * WEIGHT_SCALE): 3 digits
MIN_LINE = 10  # the head view draws no line under 10 / WEIGHT_SCALE (1%): it would be invisible
ASSETS = "viewer_page"  # the package folder that holds page.html, viewer.css and viewer.js


def attention_page(
    report: AttentionReport,
    head_report: HeadReport | None = None,
    *,
    title: str = "tinytf attention",
    facts: Mapping[str, object] | None = None,
    heads_note: str | None = None,
) -> str:
    """The viewer page for `report`, as one HTML string. `head_report` (scores on the same
    input, e.g. `head_scores(model, framing, text=...)`) adds each head's pattern scores and
    label; `facts` are shown at the top in order (input, run, checkpoint...); `heads_note`
    says where the scores come from, or why there are none."""
    data = page_data(report, head_report, title=title, facts=facts, heads_note=heads_note)
    assets = resources.files("tinytf.inspect") / ASSETS
    style = (assets / "viewer.css").read_text(encoding="utf-8")
    script = (assets / "viewer.js").read_text(encoding="utf-8")
    csp = "; ".join(
        [
            "default-src 'none'",  # no fetch, image, font, frame or connection of any kind
            f"style-src {_source_hash(style)}",
            f"script-src {_source_hash(script)}",  # only this script: an injected one would not run
            "base-uri 'none'",
            "form-action 'none'",
        ]
    )
    fields = {
        "csp": csp,
        "title": html.escape(title),
        "style": style,
        "data": _script_safe_json(data),
        "script": script,
    }
    template = (assets / "page.html").read_text(encoding="utf-8")
    # One pass over the template: what is put in is never searched for fields itself.
    return re.sub(r"\{\{(\w+)\}\}", lambda match: fields[match[1]], template)


def page_data(
    report: AttentionReport,
    head_report: HeadReport | None = None,
    *,
    title: str = "tinytf attention",
    facts: Mapping[str, object] | None = None,
    heads_note: str | None = None,
) -> dict:
    """What the page's script reads (see the module docstring for the weights' encoding)."""
    shown = {f"{m.name}.{m.first_head + h}" for m in report.maps for h in range(m.n_heads)}
    heads = {}
    for head in head_report.heads if head_report is not None else []:
        if head.name in shown:
            heads[head.name] = {
                "label": head.label,
                "scores": {p: None if s is None else round(s, 3) for p, s in head.scores.items()},
                "entropy": round(head.entropy, 3),
            }
    return {
        "title": title,
        "facts": [[str(key), str(value)] for key, value in (facts or {}).items()],
        "note": report.note,
        "heads_note": heads_note,
        "tokens": report.tokens,
        "source_tokens": report.source_tokens,
        "answer": report.answer,
        "patterns": head_report.patterns if head_report is not None else [],
        "weights_scale": WEIGHT_SCALE,
        "min_line": MIN_LINE,
        "attention": [_map_data(m, report.source_tokens is not None) for m in report.maps],
        "heads": heads,
    }


def stored_weights(weights: np.ndarray) -> list[list[list[int]]]:
    """(H, T_q, T_k) weights -> per-mille integers, each row without its trailing zeros."""
    weights = np.asarray(weights, dtype=np.float64)
    if weights.ndim != 3 or not np.isfinite(weights).all():
        raise ValueError(f"attention weights must be finite and (heads, queries, keys), not shape {weights.shape}")
    per_mille = np.rint(weights * WEIGHT_SCALE).astype(np.int64)  # (H, T_q, T_k)
    nonzero = per_mille != 0
    # Each row's length: one past its last non-zero weight (0 for a row of zeros).
    lengths = np.where(nonzero.any(axis=2), weights.shape[2] - np.argmax(nonzero[:, :, ::-1], axis=2), 0)  # (H, T_q)
    return [
        [row[:n] for row, n in zip(head, head_lengths, strict=True)]
        for head, head_lengths in zip(per_mille.tolist(), lengths.tolist(), strict=True)
    ]


def _map_data(m: AttentionMap, has_source: bool) -> dict:
    # The page's names for the sequences each side reads: an encoder-decoder's tokens are its target.
    tokens, source = ("target", "source") if has_source else ("tokens", None)
    query_side, key_side = attention_sides(m.name, tokens, source)
    return {
        "name": m.name,
        "stack": m.stack,
        "layer": m.layer,
        "kind": m.kind,
        "query_side": query_side,
        "key_side": key_side,
        "query_tokens": m.query_tokens,
        "key_tokens": m.key_tokens,
        "first_head": m.first_head,
        "weights": stored_weights(m.weights),
    }


def _script_safe_json(data: dict) -> str:
    """JSON that can sit inside a <script> element whatever its strings hold: `<`, `>` and
    `&` become \\u escapes, which JSON.parse reads back as the same characters."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _source_hash(source: str) -> str:
    """A CSP source expression that allows exactly this inline element's content."""
    digest = hashlib.sha256(source.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"
