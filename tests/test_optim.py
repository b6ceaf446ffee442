"""The optimizers (tinytf/training/optim.py, tinytf/training/muon.py): that Muon computes what it says and
what torch.optim.Muon computes, which weights it takes, that the composite steps exactly
as its parts would alone, and that the schedule and checkpoints reach both parts."""

import copy

import pytest
import torch
from conftest import tiny_config

from tinytf.config import config_from_dict
from tinytf.run.setup import Setup, build_model
from tinytf.training.distributed import OneProcess
from tinytf.training.muon import NEWTON_SCHULZ, Muon, orthogonalise, stack_padded
from tinytf.training.optim import CombinedOptimizer, make_optimizer
from tinytf.training.trainer import _assemble


def muon_config(train=None, **model):
    return config_from_dict(
        {
            "task": {"name": "reverse"},
            "model": {
                "arch": "encoder-decoder",
                "d_model": 16,
                "n_heads": 2,
                "n_layers": 1,
                "d_ff": 32,
                "positional": "learned",
                **model,
            },
            "train": {"optimizer": "muon", "lr": 1e-2, "weight_decay": 0.1, "betas": [0.8, 0.95], **(train or {})},
        }
    )


def names_of(model, parameters):
    ids = {id(p) for p in parameters}
    return {name for name, p in model.named_parameters() if id(p) in ids}


def test_orthogonalise_maps_each_singular_value_by_the_quintic_and_keeps_the_singular_vectors():
    """In float64 the iteration is exact algebra: U S V^T -> U p(p(...p(S / |X|))) V^T,
    p(s) = a s + b s^3 + c s^5, for wide matrices in a batch."""
    torch.manual_seed(0)
    matrices = torch.randn(3, 8, 20, dtype=torch.float64) * torch.tensor([1e-3, 1.0, 50.0]).view(3, 1, 1).double()
    left, singular, right = torch.linalg.svd(matrices, full_matrices=False)
    a, b, c = NEWTON_SCHULZ
    s = singular / matrices.norm(dim=(-2, -1), keepdim=True).squeeze(-1)
    for _ in range(5):
        s = a * s + b * s**3 + c * s**5
    expected = left @ torch.diag_embed(s) @ right
    assert torch.allclose(orthogonalise(matrices, steps=5), expected, atol=1e-12)
    assert s.min() > 0.6 and s.max() < 1.2  # the gradient's directions, each at about unit strength


def test_zero_padding_changes_no_matrix_orthogonalised_in_a_batch():
    """Matrices of different shapes padded into one batch come out as each alone, the
    padding still zero."""
    torch.manual_seed(0)
    matrices = [torch.randn(shape, dtype=torch.float64) for shape in [(8, 20), (8, 8), (5, 12), (8, 20)]]
    batch = stack_padded(matrices, torch.float64)
    assert batch.shape == (4, 8, 20)
    together = orthogonalise(batch)
    for matrix, out in zip(matrices, together, strict=True):
        rows, columns = matrix.shape
        assert torch.allclose(out[:rows, :columns], orthogonalise(matrix[None])[0], atol=1e-12)
        assert not out[rows:].any() and not out[:, columns:].any()


def random_matrices(shapes, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(*shape, generator=generator)) for shape in shapes]


def step_three_times(optimizer, weights, seed=1):
    generator = torch.Generator().manual_seed(seed)
    for _ in range(3):
        for weight in weights:
            weight.grad = torch.randn(weight.shape, generator=generator)
        optimizer.step()


def test_muon_steps_as_torch_optim_muon_does():
    """The same algorithm as torch.optim.Muon (adjust_lr_fn="match_rms_adamw"), matrices
    tall, wide and square, several of one shape: torch orthogonalises in bfloat16, so the
    two agree to about 1% of a step, not to float32's precision."""
    shapes = [(16, 48), (48, 16), (16, 16), (16, 48), (32, 16)]
    ours, theirs, initial = random_matrices(shapes), random_matrices(shapes), random_matrices(shapes)
    step_three_times(Muon(ours, lr=1e-2, weight_decay=0.1), ours)
    step_three_times(torch.optim.Muon(theirs, lr=1e-2, weight_decay=0.1, adjust_lr_fn="match_rms_adamw"), theirs)
    for mine, torchs, start in zip(ours, theirs, initial, strict=True):
        moved, expected = mine.detach() - start, torchs.detach() - start
        assert (moved - expected).norm() < 0.03 * expected.norm(), tuple(mine.shape)


def test_muon_in_bf16_steps_as_in_float32_to_bf16s_precision(monkeypatch):
    """dtype=torch.bfloat16 (the step's dtype under train.precision bf16) orthogonalises
    every matrix in one padded batch, in bfloat16; float32 one batch per shape. The steps
    agree to about 1%, as torch.optim.Muon's bfloat16 steps do (above)."""
    batches = []

    def orthogonalise_seen(matrices, steps):
        batches.append((matrices.dtype, tuple(matrices.shape)))
        return orthogonalise(matrices, steps)

    monkeypatch.setattr("tinytf.training.muon.orthogonalise", orthogonalise_seen)
    shapes = [(16, 48), (48, 16), (16, 16), (16, 48), (32, 16), (8, 24)]
    in_bf16, in_fp32, initial = random_matrices(shapes), random_matrices(shapes), random_matrices(shapes)
    step_three_times(Muon(in_bf16, lr=1e-2, weight_decay=0.1, dtype=torch.bfloat16), in_bf16)
    assert batches == [(torch.bfloat16, (6, 16, 48))] * 3
    batches.clear()
    step_three_times(Muon(in_fp32, lr=1e-2, weight_decay=0.1), in_fp32)
    by_shape = [(3, 16, 48), (1, 16, 16), (1, 16, 32), (1, 8, 24)]
    assert batches == [(torch.float32, shape) for shape in by_shape] * 3
    for mine, reference, start in zip(in_bf16, in_fp32, initial, strict=True):
        assert mine.dtype == torch.float32
        moved, expected = mine.detach() - start, reference.detach() - start
        assert (moved - expected).norm() < 0.03 * expected.norm(), tuple(mine.shape)


def test_muon_steps_each_matrix_as_it_would_alone():
    """Batching by shape, and transposing tall matrices, changes no weight's step."""
    shapes = [(16, 48), (48, 16), (16, 48), (16, 16)]
    together = random_matrices(shapes)
    step_three_times(Muon(together, lr=1e-2, weight_decay=0.1), together)
    for i, shape in enumerate(shapes):
        alone = random_matrices(shapes)[i : i + 1]
        generator = torch.Generator().manual_seed(1)
        optimizer = Muon(alone, lr=1e-2, weight_decay=0.1)
        for _ in range(3):
            grads = [torch.randn(s, generator=generator) for s in shapes]  # the same draws as step_three_times
            alone[0].grad = grads[i]
            optimizer.step()
        assert torch.allclose(alone[0], together[i], atol=1e-6), shape


@pytest.mark.parametrize("tie_embeddings", [True, False])
def test_muon_takes_the_hidden_matrices_and_adamw_the_rest(tie_embeddings):
    config = muon_config(tie_embeddings=tie_embeddings)
    model = build_model(config)
    optimizer = make_optimizer(model, config.train, torch.device("cpu"))
    muon, adamw = optimizer.parts
    assert isinstance(muon, Muon) and isinstance(adamw, torch.optim.AdamW)
    in_muon = names_of(model, [p for group in muon.param_groups for p in group["params"]])
    in_adamw = names_of(model, [p for group in adamw.param_groups for p in group["params"]])
    every = {name for name, _ in model.named_parameters()}
    assert in_muon | in_adamw == every and not in_muon & in_adamw  # each weight once
    hidden = {
        name
        for name, p in model.named_parameters()
        if p.dim() == 2 and name.endswith(("proj.weight", "up.weight", "down.weight"))
    }
    assert in_muon == hidden and len(hidden) == 10  # encoder: qkv, out, up, down; decoder: 6 with cross-attention
    assert "token_embedding.weight" in in_adamw and ("lm_head.weight" in in_adamw) == (not tie_embeddings)
    decayed, not_decayed = adamw.param_groups
    assert decayed["weight_decay"] == muon.param_groups[0]["weight_decay"] == 0.1 and not_decayed["weight_decay"] == 0
    assert decayed["betas"] == (0.8, 0.95)
    assert all(
        "positions" in name or p.dim() == 1
        for name, p in model.named_parameters()
        if any(p is q for q in not_decayed["params"])
    )


def test_adamw_alone_by_default():
    config = tiny_config()
    assert config.train.optimizer == "adamw"
    assert type(make_optimizer(build_model(config), config.train, torch.device("cpu"))) is torch.optim.AdamW


def test_the_composite_steps_exactly_as_its_parts_alone():
    """Muon's update and AdamW's, as each computes it alone, reach the weights unchanged."""
    config = muon_config()
    torch.manual_seed(0)
    model = build_model(config)
    twin, initial = copy.deepcopy(model), copy.deepcopy(model)
    optimizer = make_optimizer(model, config.train, torch.device("cpu"))
    in_muon = names_of(model, optimizer.parts[0].param_groups[0]["params"])
    hidden = [p for name, p in twin.named_parameters() if name in in_muon]
    rest = [p for p in twin.parameters() if all(p is not q for q in hidden)]
    alone = [
        Muon(hidden, lr=1e-2, weight_decay=0.1),
        torch.optim.AdamW(rest, lr=1e-2, betas=(0.8, 0.95), weight_decay=0.0, fused=True),
    ]
    # (AdamW's decay differs between its two groups; the test compares without decay there)
    for group in optimizer.parts[1].param_groups:
        group["weight_decay"] = 0.0
    tokens = torch.randint(3, 10, (4, 6))
    for _ in range(3):
        for m, opts in ((model, [optimizer]), (twin, alone)):
            logits = m(tokens, source=tokens)
            logits.square().mean().backward()
            for o in opts:
                o.step()
                o.zero_grad()
    for (name, p), q in zip(model.named_parameters(), twin.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-6), name
    for name in in_muon:  # and they did move
        assert not torch.equal(model.get_parameter(name), initial.get_parameter(name)), name


def trainer(config):
    return _assemble(Setup.of(config), (), OneProcess())


def test_the_schedule_reaches_both_parts_also_after_a_resume():
    config = muon_config(train={"warmup_steps": 4})
    first = trainer(config)
    for _ in range(2):
        first._train_step(first.model, first.window)
        first.step += 1
    assert len(first.optimizer.param_groups) == 3  # Muon's one, AdamW's two
    assert [group["lr"] for group in first.optimizer.param_groups] == pytest.approx([1e-2 * 2 / 4] * 3)  # step 2 of 4

    second = trainer(config)
    second.load_state_dict(first.state_dict())
    assert isinstance(second.optimizer, CombinedOptimizer)
    for part in second.optimizer.parts:  # loading replaced the groups: the composite shares the new ones
        assert all(any(group is mine for mine in second.optimizer.param_groups) for group in part.param_groups)
    second._train_step(second.model, second.window)  # the third step of the warm-up
    assert [group["lr"] for group in second.optimizer.param_groups] == pytest.approx([1e-2 * 3 / 4] * 3)
    assert set(second.optimizer.state) == set(second.model.parameters())  # every weight's moments
