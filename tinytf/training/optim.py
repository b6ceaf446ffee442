"""The optimizer a run trains with (`train.optimizer`).

adamw: AdamW on every weight, with weight decay on the matrices only (not on biases,
    LayerNorm gains or position tables).
muon: Muon (Jordan et al., 2024) on the hidden matrices -- the attention projections
    (W_Q, W_K, W_V together, W_O) and the feed-forward layers -- and AdamW on the rest:
    the token embedding and the output layer (one matrix when tied), learned positions,
    biases, LayerNorm.
    Muon keeps a momentum of each matrix's gradient, as SGD does, and steps along that
    momentum orthogonalised: U S V^T -> U V^T, approximately (five Newton-Schulz
    iterations), so that the matrix moves by about as much in each of its directions,
    not mostly along the few with the largest gradients. Its learning rate is scaled to
    AdamW's update size (Liu et al., 2025, "Muon is Scalable for LLM Training"), so both
    parts share `train.lr` and its schedule.

AdamW is PyTorch's own; Muon is muon.py's, `torch.optim.Muon`'s algorithm computed in
batches, which a CPU runs several times faster. `make_optimizer` returns one
`torch.optim.Optimizer` either way: the training loop and the checkpoints see
one set of parameter groups and one state dict. `learning_rate(step, settings)` is the
schedule, a function of the step alone: a resumed run needs nothing but its step.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from tinytf.config import TrainConfig
from tinytf.training.muon import Muon

# Weights that map to or from tokens stay with AdamW under Muon, as in Muon's own recipe:
# the token embedding (also the output layer when tied) and an untied output layer.
TOKEN_MATRICES = ("token_embedding", "lm_head")


def learning_rate(step: int, settings: TrainConfig) -> float:
    """train.lr at `step` (counted from 0): a linear warm-up over train.warmup_steps, then
    (train.schedule) either the constant lr or a cosine decay to a tenth at
    train.decay_steps (by default train.steps), then a tenth."""
    warmup, decay = settings.warmup_steps, settings.decay_steps or settings.steps
    if step < warmup:
        return settings.lr * (step + 1) / warmup
    if settings.schedule == "constant":
        return settings.lr
    progress = min((step - warmup) / max(decay - warmup, 1), 1.0)
    return settings.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def make_optimizer(
    model: nn.Module, settings: TrainConfig, device: torch.device, dtype: torch.dtype = torch.float32
) -> torch.optim.Optimizer:
    """The optimizer `settings.optimizer` names, for `model`'s parameters; `dtype` is the
    training step's (torch.bfloat16 under bf16 autocast), in which Muon orthogonalises."""
    hidden, decay, no_decay = [], [], []
    for name, parameter in model.named_parameters():
        if parameter.dim() < 2 or "positions" in name:
            no_decay.append(parameter)
        elif settings.optimizer == "muon" and not name.startswith(TOKEN_MATRICES):
            hidden.append(parameter)
        else:
            decay.append(parameter)
    groups = [{"params": decay, "weight_decay": settings.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # The fused kernel updates every tensor at once: several times faster than the default loop.
    adamw = torch.optim.AdamW(groups, lr=settings.lr, betas=settings.betas, fused=device.type in ("cpu", "cuda"))
    if settings.optimizer == "adamw":
        return adamw
    muon = Muon(hidden, lr=settings.lr, weight_decay=settings.weight_decay, dtype=dtype)
    return CombinedOptimizer(muon, adamw)


class CombinedOptimizer(torch.optim.Optimizer):
    """Several optimizers over disjoint parameters, stepped as one.

    `param_groups` is every part's groups -- the same dicts, so setting `group["lr"]` sets
    it for the part that uses it -- and the state dict holds each part's state dict, in order."""

    def __init__(self, *parts: torch.optim.Optimizer) -> None:
        self.parts = parts
        groups = [group for part in parts for group in part.param_groups]
        super().__init__(groups, defaults={})  # adds the same group dicts, fills no key
        self._merge_state()

    def _merge_state(self) -> None:
        # One view of every parameter's state (e.g. for checks after loading); the parts
        # keep their own and create entries at their first step.
        self.state = {p: s for part in self.parts for p, s in part.state.items()}

    def step(self, closure: None = None) -> None:
        if closure is not None:
            raise ValueError("CombinedOptimizer.step takes no closure: each part would re-evaluate the loss")
        for part in self.parts:
            part.step()
        self._merge_state()

    def state_dict(self) -> dict:
        return {"parts": [part.state_dict() for part in self.parts]}

    def load_state_dict(self, state_dict: dict) -> None:
        parts = state_dict["parts"]
        if len(parts) != len(self.parts):
            raise ValueError(f"it holds {len(parts)} optimizers' states, not {len(self.parts)}")
        for part, state in zip(self.parts, parts, strict=True):
            part.load_state_dict(state)
        # load_state_dict replaces each part's groups with new dicts: share them again
        self.param_groups = [group for part in self.parts for group in part.param_groups]
        self._merge_state()
