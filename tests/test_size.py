"""The model's size from its config alone (tinytf/model/size.py): the parameter count equals
the built model's for every architecture and every option that changes it, without torch."""

import itertools
import subprocess
import sys

import pytest
from conftest import ROOT

from tinytf.config import config_from_dict
from tinytf.model import Transformer
from tinytf.model.positional import POSITIONAL_ENCODINGS
from tinytf.model.size import POSITION_TABLES, parameter_count, stack_depths

VOCAB = 11
# Every option that changes the count: (arch, encoder and decoder depths), then the rest.
SHAPES = [
    ("encoder", {}),
    ("decoder", {}),
    ("encoder-decoder", {}),
    ("encoder-decoder", {"n_encoder_layers": 1, "n_decoder_layers": 3}),
]
OPTIONS = list(
    itertools.product(
        [1, 2],  # n_layers
        [0, 24],  # d_ff: 0 is attention-only
        ["pre", "post", "none"],  # norm
        sorted(POSITIONAL_ENCODINGS),
        [True, False],  # tie_embeddings
    )
)


def model_config(arch, depths, n_layers, d_ff, norm, positional, tie_embeddings):
    keys = {"arch": arch, "d_model": 8, "n_heads": 2, "n_layers": n_layers, "d_ff": d_ff, "max_len": 16}
    keys |= depths | {"norm": norm, "positional": positional, "tie_embeddings": tie_embeddings}
    return config_from_dict({"model": keys}).model


@pytest.mark.parametrize(("arch", "depths"), SHAPES, ids=["encoder", "decoder", "encoder-decoder", "1+3-layers"])
def test_the_parameter_count_is_the_built_models(arch, depths):
    for options in OPTIONS:
        config = model_config(arch, depths, *options)
        model = Transformer(config, VOCAB)
        built = sum(p.numel() for p in model.parameters())  # tied weights are one parameter
        assert parameter_count(config, VOCAB) == built, options
        counted = stack_depths(config)
        assert counted.encoder == (len(model.encoder.layers) if model.encoder is not None else 0)
        assert counted.decoder == (len(model.decoder.layers) if model.decoder is not None else 0)
        assert counted.cross_attention == (model.decoder is not None and model.decoder.layers[0].cross_attn is not None)


def test_every_positional_encoding_is_counted():
    assert set(POSITION_TABLES) == set(POSITIONAL_ENCODINGS)


def test_the_size_and_the_memory_estimate_load_without_torch():
    program = "import sys, tinytf.model.size, tinytf.training.memory\nassert 'torch' not in sys.modules"
    result = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
