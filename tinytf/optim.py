"""The optimizer a run trains with (`train.optimizer`).

adamw: AdamW on every weight, with weight decay on the matrices only (not on biases,
    LayerNorm gains or position tables).
muon: Muon (Jordan et al., 2024) on the hidden matrices -- the attention projections
    (W_Q, W_K, W_V together, W_O) and the feed-forward layers -- and AdamW on the rest:
    the token embedding and the output layer (one matrix when tied), learned positions,
    biases, LayerNorm.
    Muon keeps a momentum of each matrix's gradient, as SGD does, and steps along that
    momentum orthogonalised: U S V^T -> U V^T, approximately (five Newton-Schulz
    iterations bring the strong directions' singular values to about 0.7-1.2; much
    weaker ones stay smaller), so that the matrix moves by about as much in each of its
    directions, not mostly along the few with the largest gradients. Its learning rate
    is scaled to AdamW's update size (Liu et al., 2025, "Muon is Scalable for LLM
    Training"), so both parts share `train.lr` and its schedule.
    tinytf's `Muon` is `torch.optim.Muon`'s algorithm (the same iteration, momentum and
    scaling) computed for small models: the matrices are orthogonalised together, as
    batches of matrix products. torch.optim.Muon takes them one at a time in bfloat16, and
    on a CPU each small bf16 product has a fixed cost of about 20 us. Here the dtype
    follows `train.precision`: bfloat16 when the training step runs in it, every matrix in
    one batch (zero-padded to the largest), which pays that cost once; float32 otherwise
    (where bf16 is slow or converted), one batch per shape. Side by side on the fourteen
    shipped configs that use Muon, all in float32, a step with torch.optim.Muon cost
    1.19x-1.59x one with AdamW, with this one 1.06x-1.26x.

`make_optimizer` returns one `torch.optim.Optimizer` either way: the learning-rate
schedule, the training loop and the checkpoints see one set of parameter groups and one
state dict.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn

from tinytf.config import TrainConfig

# Weights that map to or from tokens stay with AdamW under Muon, as in Muon's own recipe:
# the token embedding (also the output layer when tied) and an untied output layer.
TOKEN_MATRICES = ("token_embedding", "lm_head")


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


# The quintic that each Newton-Schulz iteration applies to every singular value s of the
# matrix: s -> a s + b s^3 + c s^5 (Jordan et al.'s coefficients, as torch.optim.Muon's).
# It climbs steeply from 0: iterated five times it sends every s from 0.003 to 1 into
# 0.68-1.20 (s = 0.001 only to 0.47: much weaker directions stay weaker).
NEWTON_SCHULZ = (3.4445, -4.7750, 2.0315)


def orthogonalise(matrices: torch.Tensor, steps: int = 5) -> torch.Tensor:
    """(G, m, n) matrices, m <= n, each U S V^T -> about U V^T, by `steps` Newton-Schulz
    iterations. With X = U S V^T, X X^T = U S^2 U^T, so (a + b XX^T + c (XX^T)^2) X =
    U (a S + b S^3 + c S^5) V^T: the polynomial acts on the singular values alone, and
    the singular vectors stay."""
    a, b, c = NEWTON_SCHULZ
    # Dividing by the Frobenius norm brings every singular value into [0, 1]
    x = matrices / matrices.norm(dim=(-2, -1), keepdim=True).clamp(min=1e-7)  # (G, m, n)
    for _ in range(steps):
        gram = x @ x.mT  # (G, m, m): X X^T, the smaller side's Gram matrix as m <= n
        cubic_and_quintic = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)  # (G, m, m): b XX^T + c (XX^T)^2
        x = torch.baddbmm(x, cubic_and_quintic, x, beta=a)  # (G, m, n): a X + (b XX^T + c (XX^T)^2) X
    return x


class Muon(torch.optim.Optimizer):
    """Muon for 2-D weights: Nesterov momentum, orthogonalised, with decoupled weight decay.

    Per weight W (m x n) and step, with gradient G and momentum buffer B:
        B <- momentum B + (1 - momentum) G
        O <- orthogonalise((1 - momentum) G + momentum B)      (Nesterov's look-ahead)
        W <- (1 - lr weight_decay) W - lr 0.2 sqrt(max(m, n)) O
    An orthogonalised m x n matrix has an RMS of 1 / sqrt(max(m, n)): the factor makes it
    0.2, about AdamW's, so Muon can share AdamW's learning rate (Liu et al., 2025). This is
    torch.optim.Muon with adjust_lr_fn="match_rms_adamw", but the weights are orthogonalised
    in batches, in `dtype`: see the module docstring."""

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        lr: float,
        weight_decay: float,
        momentum: float = 0.95,
        ns_steps: int = 5,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__(params, {"lr": lr, "weight_decay": weight_decay, "momentum": momentum, "ns_steps": ns_steps})
        if any(p.dim() != 2 for group in self.param_groups for p in group["params"]):
            raise ValueError("Muon steps matrices only")
        self.dtype = dtype  # of the orthogonalisation (not a hyperparameter: checkpoints leave it out)

    @torch.no_grad()
    def step(self, closure: None = None) -> None:
        if closure is not None:
            raise ValueError("Muon.step takes no closure")
        for group in self.param_groups:
            weights = [p for p in group["params"] if p.grad is not None]
            if not weights:
                continue
            for weight in weights:
                if "momentum_buffer" not in self.state[weight]:
                    self.state[weight]["momentum_buffer"] = torch.zeros_like(weight)
            grads = [weight.grad for weight in weights]
            buffers = [self.state[weight]["momentum_buffer"] for weight in weights]
            # torch's _foreach_ ops (those its own optimizers use) do one operation on every
            # weight in one call: much less per-tensor overhead on many small matrices. Each
            # stands for a loop, e.g. `for b, g in zip(buffers, grads): b.lerp_(g, 1 - momentum)`.
            momentum = group["momentum"]
            torch._foreach_lerp_(buffers, grads, 1 - momentum)  # B <- momentum B + (1 - momentum) G
            directions = torch._foreach_lerp(grads, buffers, momentum)  # (1 - momentum) G + momentum B
            torch._foreach_mul_(weights, 1 - group["lr"] * group["weight_decay"])

            # A tall matrix goes in transposed (m <= n keeps the Gram matrix the small one).
            wide = [d if d.size(0) <= d.size(1) else d.mT for d in directions]  # each (m, n), m <= n
            for indices in self._batches(wide):
                batch = stack_padded([wide[i] for i in indices], self.dtype)  # (G, m, n), the largest m and n
                orthogonal = orthogonalise(batch, group["ns_steps"])  # (G, m, n)
                # Each matrix's own block (the padding stays zero; see stack_padded), back to its
                # weight's shape, (n, m) for a tall one, and dtype.
                blocks = [o[: wide[i].size(0), : wide[i].size(1)] for i, o in zip(indices, orthogonal, strict=True)]
                updates = [
                    (block if block.shape == weights[i].shape else block.mT).to(weights[i].dtype)
                    for i, block in zip(indices, blocks, strict=True)
                ]
                # W <- W - lr 0.2 sqrt(max(m, n)) O, sqrt(max(m, n)) being each weight's own
                torch._foreach_mul_(updates, [-group["lr"] * 0.2 * math.sqrt(max(weights[i].shape)) for i in indices])
                torch._foreach_add_([weights[i] for i in indices], updates)

    def _batches(self, wide: list[torch.Tensor]) -> list[list[int]]:
        """Which matrices are orthogonalised together: in bfloat16 all of them, in one batch;
        in float32 those of one shape, e.g. every layer's W_O (padding would add work there)."""
        if self.dtype == torch.bfloat16:
            return [list(range(len(wide)))]
        by_shape: dict[tuple[int, int], list[int]] = {}
        for i, matrix in enumerate(wide):
            by_shape.setdefault(tuple(matrix.shape), []).append(i)
        return list(by_shape.values())


def stack_padded(matrices: list[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """(G, m, n): the matrices, each (m_i, n_i) with m_i <= n_i, in `dtype`, zero-padded to
    the largest m and n. orthogonalise then leaves the padding zero and each matrix's own
    block what it would be alone: zero columns add nothing to X X^T (nor to the norm), and
    zero rows give X X^T zero rows and columns, so every product keeps them zero."""
    if all(matrix.shape == matrices[0].shape for matrix in matrices):
        return torch.stack(matrices).to(dtype)  # (G, m, n)
    rows, columns = max(m.size(0) for m in matrices), max(m.size(1) for m in matrices)
    batch = matrices[0].new_zeros(len(matrices), rows, columns, dtype=dtype)  # (G, m, n)
    for slot, matrix in zip(batch, matrices, strict=True):
        slot[: matrix.size(0), : matrix.size(1)] = matrix
    return batch


class CombinedOptimizer(torch.optim.Optimizer):
    """Several optimizers over disjoint parameters, stepped as one.

    `param_groups` is every part's groups -- the same dicts, so a learning-rate scheduler
    that sets `group["lr"]` sets it for the part that uses it -- and the state dict holds
    each part's state dict, in order."""

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
