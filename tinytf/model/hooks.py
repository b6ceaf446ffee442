"""Named activations: read them (`run_with_cache`) or replace them (`run_with_hooks`).

Every value worth looking at has a stable name, in the scheme the attention weights use
("<stack>.<layer>.<kind>"). Shapes: B batch, H heads, T_q/T_k query/key length, D model
width, D_h head width.

    embed                           tokens' embedding, positions added      (B, T, D)
    source_embed                    the same for the source (encoder-decoder only)
    <stack>.<layer>.resid_pre       the residual stream entering the layer  (B, T, D)
    <stack>.<layer>.<kind>.q/.k/.v  queries, keys, values per head          (B, H, T, D_h)
                                    (after the rotation, with positional=rope)
    <stack>.<layer>.<kind>.pattern  attention weights, softmax(QK^T/sqrt(d_k) + mask)  (B, H, T_q, T_k)
    <stack>.<layer>.<kind>.z        each head's output pattern @ V, before W_O  (B, H, T_q, D_h)
    <stack>.<layer>.attn_out        self-attention's output, after W_O     (B, T, D)
    <stack>.<layer>.resid_mid       the stream after self-attention's residual
    <stack>.<layer>.cross_attn_out  cross-attention's output (decoder of an encoder-decoder)
    <stack>.<layer>.resid_mid_cross the stream after cross-attention's residual
    <stack>.<layer>.mlp_out         the feed-forward sublayer's output (absent with d_ff: 0)
    <stack>.<layer>.resid_post      the stream leaving the layer (before the stack's final norm)

stack is "encoder" or "decoder", kind "self" or "cross". `model.hook_names()` lists the
names of one model. With post-norm the stream values are after each residual's LayerNorm,
the values the next sublayer reads.

The model calls `probe(name, value)` at each of these points when a `Probe` is passed in,
and does nothing at all otherwise (plain forward passes and training never make one). The
attention weights are computed only when a pattern is asked for or hooked: otherwise the
fused kernel runs, as in a plain forward pass (see attention.py).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

import torch

from tinytf.errors import did_you_mean

# A hook gets the value at its name and returns the value to use instead, a tensor of the
# same shape and dtype (None: keep it).
Hook = Callable[[torch.Tensor], torch.Tensor | None]
Names = Collection[str] | Callable[[str], bool] | None


class Probe:
    """What one `run_with_cache` / `run_with_hooks` call asks of the model: which named
    values to keep (`names`: a collection of names, a predicate, or None for all) and
    which to replace (`hooks`: {name: hook}). Unknown names are a ValueError that
    suggests the nearest valid one, so a typo cannot silently record nothing."""

    def __init__(self, valid_names: list[str], names: Names = None, hooks: Mapping[str, Hook] | None = None) -> None:
        hooks = dict(hooks or {})
        if isinstance(names, str):
            raise TypeError(f"names must be a list of names or a predicate, not the string {names!r}")
        for asked in ([] if names is None or callable(names) else names, hooks):
            for name in asked:
                if name not in valid_names:
                    raise ValueError(_unknown(name, valid_names))
        for name, hook in hooks.items():
            if not callable(hook):
                raise TypeError(f"the hook at {name!r} must be a function tensor -> tensor, not {type(hook).__name__}")
        if names is None:
            self.keep: Callable[[str], bool] = lambda name: True
        elif callable(names):
            self.keep = names
        else:
            kept = frozenset(names)
            self.keep = kept.__contains__
        self.hooks = hooks
        self.cache: dict[str, torch.Tensor] = {}

    def wants(self, name: str) -> bool:
        """Whether anything is asked of the value at `name` (used to skip computing it)."""
        return name in self.hooks or self.keep(name)

    def __call__(self, name: str, value: torch.Tensor) -> torch.Tensor:
        hook = self.hooks.get(name)
        if hook is not None:
            replaced = hook(value)
            if replaced is not None:
                _check_replacement(name, value, replaced)
                value = replaced
        if self.keep(name):
            self.cache[name] = value
        return value


def probe_at(probe: Probe | None, name: str, value: torch.Tensor) -> torch.Tensor:
    """`probe(name, value)`, or `value` untouched when there is no probe."""
    return value if probe is None else probe(name, value)


def _check_replacement(name: str, value: torch.Tensor, replaced: object) -> None:
    """A clear error unless a hook's `replaced` can stand in for `value`: a tensor of the same
    shape and dtype (torch would fail later, far from the hook, or mix precisions)."""
    expected = f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype} (or None to keep the value)"
    if not isinstance(replaced, torch.Tensor):
        raise TypeError(f"the hook at {name!r} must return {expected}, not {type(replaced).__name__}")
    if replaced.shape != value.shape:
        raise ValueError(f"the hook at {name!r} must return {expected}, not shape {tuple(replaced.shape)}")
    if replaced.dtype != value.dtype:
        raise TypeError(f"the hook at {name!r} must return {expected}, not dtype {replaced.dtype}")


def _unknown(name: str, valid_names: list[str]) -> str:
    hint = did_you_mean(name, valid_names) or f"; this model has {', '.join(valid_names[:6])}, ..."
    return f"no activation is named {name!r}{hint} (model.hook_names() lists them all)"
