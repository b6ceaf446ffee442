"""The optimizers (tinytf/optim.py): which weights Muon takes, that the composite steps
exactly as its parts would alone, and that the schedule and checkpoints reach both parts."""

import copy

import pytest
import torch
from conftest import tiny_config

from tinytf.config import config_from_dict
from tinytf.distributed import OneProcess
from tinytf.model import build_model
from tinytf.optim import CombinedOptimizer, make_optimizer
from tinytf.training import _assemble


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


@pytest.mark.parametrize("tie_embeddings", [True, False])
def test_muon_takes_the_hidden_matrices_and_adamw_the_rest(tie_embeddings):
    config = muon_config(tie_embeddings=tie_embeddings)
    model = build_model(config)
    optimizer = make_optimizer(model, config.train, torch.device("cpu"))
    muon, adamw = optimizer.parts
    assert isinstance(muon, torch.optim.Muon) and isinstance(adamw, torch.optim.AdamW)
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
        torch.optim.Muon(hidden, lr=1e-2, weight_decay=0.1, adjust_lr_fn="match_rms_adamw"),
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
    return _assemble(config, None, (), OneProcess())


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
