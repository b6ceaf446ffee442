"""The config system: defaults, overrides, and one clear line for every mistake."""

import pytest
from conftest import CONFIGS

import tinytf
from tinytf.config import Config, ModelConfig, config_from_dict, parse_config
from tinytf.errors import ConfigError
from tinytf.experiment import load_config, save_config
from tinytf.tasks import get_task


def test_configs_folder_is_not_empty():
    assert len(CONFIGS) >= 3


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_loads_and_builds(path):
    config = load_config(path)
    model = tinytf.build_model(config)  # the vocabulary comes from the config's task
    assert model.config == config.model
    assert model.vocab_size == len(get_task(config.task).vocab)


def test_an_empty_file_means_all_defaults(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert load_config(path) == Config()


def test_a_file_only_states_what_differs(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  d_model: 64\n")
    config = load_config(path)
    assert config.model.d_model == 64
    assert config.model.n_heads == ModelConfig().n_heads
    assert config.train == Config().train


def test_overrides_are_parsed_to_the_field_type(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  d_model: 64\n")
    config = load_config(
        path, ["model.d_model=32", "train.lr=3e-4", "model.tie_embeddings=false", "model.arch=encoder", "seed=7"]
    )
    assert config.model.d_model == 32
    assert config.train.lr == pytest.approx(3e-4) and isinstance(config.train.lr, float)
    assert config.model.tie_embeddings is False
    assert config.model.arch == "encoder"
    assert config.seed == 7
    assert load_config(path, ["train.betas=[0.9, 0.98]"]).train.betas == (0.9, 0.98)


def test_scientific_notation_in_yaml_is_a_float():
    assert parse_config("train:\n  lr: 3e-4\n").train.lr == pytest.approx(3e-4)


def test_saved_config_round_trips(tmp_path):
    config = config_from_dict({"model": {"arch": "encoder-decoder", "n_encoder_layers": 3}, "train": {"lr": 0.01}})
    save_config(config, tmp_path / "saved.yaml")
    assert load_config(tmp_path / "saved.yaml") == config


def test_configs_are_immutable():
    config = Config()
    with pytest.raises(Exception, match="frozen"):
        config.model.d_model = 3


# Each case: YAML text, overrides, and fragments the one-line message must contain.
ERROR_CASES = {
    "unknown key with suggestion": ("model:\n  d_modle: 64\n", [], ["model.d_modle", "unknown key", "'d_model'"]),
    "unknown section": ("trian:\n  lr: 0.1\n", [], ["trian", "unknown key", "'train'"]),
    "unknown key, no close match": ("model:\n  zzz: 1\n", [], ["model.zzz", "allowed: arch, d_model"]),
    "wrong type": ("model:\n  d_model: abc\n", [], ["model.d_model = 'abc'", "integer"]),
    "float where int is needed": ("model:\n  n_layers: 2.5\n", [], ["model.n_layers = 2.5", "integer"]),
    "bool where int is needed": ("model:\n  d_model: true\n", [], ["model.d_model = True"]),
    "not positive": ("train:\n  steps: 0\n", [], ["train.steps = 0", "greater than 0"]),
    "dropout out of range": ("model:\n  dropout: 1.0\n", [], ["model.dropout = 1.0", "less than 1"]),
    "unknown enum value": (
        "model:\n  arch: gpt\n",
        [],
        ["model.arch = 'gpt'", "'encoder', 'decoder' or 'encoder-decoder'"],
    ),
    "heads do not divide width": ("model:\n  d_model: 10\n  n_heads: 4\n", [], ["model:", "d_model=10", "n_heads=4"]),
    "odd head width with rope": (
        "model:\n  d_model: 12\n  n_heads: 4\n  positional: rope\n",
        [],
        ["model:", "even head width", "3"],
    ),
    "stack depth on a single-stack arch": (
        "model:\n  arch: decoder\n  n_encoder_layers: 2\n",
        [],
        ["model.n_encoder_layers: arch=decoder does not use it", "only arch=encoder-decoder"],
    ),
    "section is not a mapping": ("model: 5\n", [], ["model", "expected a section"]),
    "top level is not a mapping": ("- 1\n- 2\n", [], ["expected a mapping of sections", "a list"]),
    "malformed YAML": ("model:\n  d_model: 64\n   n_heads: 4\n", [], ["line 3", "invalid YAML"]),
    "unknown task": ("task:\n  name: sortt\n", [], ["task.name: 'sortt' is not a task", "did you mean 'sort'?"]),
    "task and arch do not fit": (
        "task:\n  name: add\nmodel:\n  arch: encoder\n",
        [],
        ["task 'add' does not work with model.arch=encoder", "it works with: decoder, encoder-decoder"],
    ),
    "model too short for the task": (
        "task:\n  name: sort\n  max_len: 20\nmodel:\n  max_len: 32\n",
        [],
        ["model.max_len=32 is too short", "up to 41 tokens"],
    ),
    "text task without a file": ("task:\n  name: text\n", [], ["task.path", "needs the file"]),
    "text file that does not exist": ("task:\n  name: text\n  path: /no/such.txt\n", [], ["task.path", "not found"]),
    "min_len above max_len": ("task:\n  min_len: 9\n  max_len: 3\n", [], ["task.min_len=9", "task.max_len=3"]),
    "a key the task does not use": (
        "task:\n  name: sort\n  digits: 4\n",
        [],
        ["task.digits: sort does not use it", "its keys: name, vocab_size, min_len, max_len, eval_size"],
    ),
    "a key only another architecture uses": (
        "task:\n  name: sort\n  bos: true\nmodel:\n  arch: decoder\n",
        [],
        ["task.bos: arch=decoder does not use it", "only arch=encoder"],
    ),
    "an unused task key from an override": ("", ["task.path=x.txt"], ["--set task.path=x.txt", "sort does not use"]),
    "a task check failing through an override": ("", ["task.min_len=20"], ["--set task.min_len=20", "task.min_len=20"]),
    "bad override key": ("", ["model.d_modle=3"], ["--set model.d_modle=3", "'d_model'"]),
    "bad override value": ("", ["model.n_heads=many"], ["--set model.n_heads=many", "model.n_heads = 'many'"]),
    "override without '='": ("", ["model.d_model"], ["--set model.d_model", "KEY=VALUE"]),
    "override below a value": ("", ["seed.x=1"], ["--set seed.x=1", "seed is a value"]),
    "beta out of range": ("train:\n  betas: [0.9, 1.5]\n", [], ["train.betas.1 = 1.5", "less than 1"]),
    "bad beta from an override": ("", ["train.betas=[0.9,1.0]"], ["--set train.betas=[0.9,1.0]", "train.betas.1"]),
    "one beta": ("", ["train.betas=0.9"], ["--set train.betas=0.9", "train.betas = 0.9"]),
}


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_config_errors_are_one_clear_line(case, tmp_path):
    text, overrides, fragments = ERROR_CASES[case]
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, overrides)
    message = str(caught.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message
    if not overrides:
        assert message.startswith(str(path))


def test_missing_file_and_folder(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="is a folder"):
        load_config(tmp_path)


def test_several_errors_are_all_named_on_one_line():
    with pytest.raises(ConfigError) as caught:
        parse_config("model:\n  d_model: x\n  n_heads: -1\n", source="c.yaml")
    message = str(caught.value)
    assert "model.d_model" in message and "model.n_heads" in message and "\n" not in message


def test_loading_never_executes_yaml_tags(tmp_path):
    path = tmp_path / "evil.yaml"
    marker = tmp_path / "pwned"
    path.write_text(f"seed: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(path)
    assert not marker.exists()
