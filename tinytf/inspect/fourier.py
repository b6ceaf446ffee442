"""The Fourier spectrum of an embedding of Z_p: how much of it each frequency holds.

A model that adds modulo p can embed each number x as waves cos(2πkx/p), sin(2πkx/p)
of a few "key frequencies" k, and add by the identity cos(a + b) = cos a cos b -
sin a sin b (Nanda et al., 2023). Projecting the embedding's rows, taken in the order
0, 1, ..., p - 1, onto the Fourier basis of Z_p shows it: a spectrum spread over every
frequency at initialisation, a handful of frequencies once the model generalises.

Shape legend: p numbers, D model width, K = p // 2 + 1 frequencies (0 is the constant).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from tinytf import arguments

TOP_FREQUENCIES = 5  # frequencies logged as scalars, and the share of the squared norm they hold


def fourier_basis(p: int) -> torch.Tensor:
    """(p, p) an orthonormal basis of functions on Z_p, one per row: the constant, then
    cos and sin of each frequency k = 1, 2, ... (for an even p, frequency p / 2 has its cos only)."""
    x = torch.arange(p, dtype=torch.float64)
    rows = [torch.ones(p, dtype=torch.float64)]
    for k in range(1, p // 2 + 1):
        rows.append(torch.cos(2 * math.pi * k * x / p))
        if 2 * k < p:
            rows.append(torch.sin(2 * math.pi * k * x / p))
    basis = torch.stack(rows)  # (p, p)
    return basis / basis.norm(dim=1, keepdim=True)


def frequency_of_rows(p: int) -> torch.Tensor:
    """(p,) the frequency k of each row of `fourier_basis(p)`."""
    return torch.tensor([0] + [k for k in range(1, p // 2 + 1) for _ in range(1 if 2 * k == p else 2)])


def frequency_norms(embedding: torch.Tensor) -> torch.Tensor:
    """(p, D) the embeddings of 0, 1, ..., p - 1 -> (K,) the norm of their projection onto
    each frequency k (cos and sin together). The squares sum to the embedding's own (Parseval)."""
    p = arguments.real_tensor(embedding, "embedding", 2).size(0)
    coefficients = fourier_basis(p) @ embedding.detach().double().cpu()  # (p, D): one row per basis function
    energy = coefficients.pow(2).sum(1)  # (p,)
    per_frequency = torch.zeros(p // 2 + 1, dtype=torch.float64).index_add_(0, frequency_of_rows(p), energy)
    return per_frequency.sqrt().float()


def top_share(norms: torch.Tensor | Sequence[float], k: int = TOP_FREQUENCIES) -> float:
    """The fraction of the embedding's squared norm that its k strongest frequencies hold."""
    k = arguments.whole_number(k, "k", low=1)
    if not isinstance(norms, torch.Tensor):
        arguments.sequence_of(norms, "norms", float | int, "numbers")
        norms = torch.tensor(norms, dtype=torch.float64)
    energy = arguments.real_tensor(norms, "norms", 1).double().pow(2)
    return float(energy.topk(min(k, len(energy))).values.sum() / energy.sum().clamp_min(1e-30))
