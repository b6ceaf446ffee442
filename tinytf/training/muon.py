"""Muon for small models on a CPU: `torch.optim.Muon`'s algorithm (the same Newton-Schulz
iteration, Nesterov momentum and AdamW-matched learning rate), computed in batches.

torch.optim.Muon orthogonalises each matrix alone, in bfloat16. On a CPU that is slow
twice over: every small product has a fixed cost, and a CPU without bf16 instructions
emulates bfloat16. Here the matrices are orthogonalised together, as batched products,
in the training step's dtype: float32 unless the step runs in bf16 (docs/performance.md
says what that buys). tests/test_optim.py holds its steps to torch's.
It stays: on a CPU torch.optim.Muon steps the shipped configs 10-13x slower (docs/performance.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

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
            # torch's _foreach_ ops (private, but those its own optimizers use: no public op takes a
            # list of tensors) do one operation on every weight in one call: on a GPU a few kernel
            # launches, not one per weight (on a CPU about a loop's speed). Each stands for a loop,
            # e.g. `for b, g in zip(buffers, grads): b.lerp_(g, 1 - momentum)`.
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
