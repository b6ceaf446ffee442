"""The config system: defaults, overrides, and one clear line for every mistake."""

import os
import subprocess
import sys
from pathlib import Path

import pydantic
import pytest
from conftest import CONFIGS, assert_user_error, deny_entry, invoke, tiny_data, unblocked_after, write_config

import tinytf
from tinytf import files
from tinytf.config import (
    MAX_CONFIG_BYTES,
    Config,
    ModelConfig,
    TaskConfig,
    config_from_dict,
    parse_config,
    read_config,
)
from tinytf.data.framing import FRAMINGS
from tinytf.data.heldout import TaskData
from tinytf.errors import ConfigError
from tinytf.run.setup import Setup, load_config, save_config
from tinytf.tasks import get_task

try:
    import resource
except ImportError:  # not on Windows
    resource = None


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
    save_config(Setup.of(config), tmp_path / "saved.yaml")
    assert load_config(tmp_path / "saved.yaml") == config


def test_configs_are_immutable():
    config = Config()
    with pytest.raises(pydantic.ValidationError, match="frozen"):  # pydantic's own refusal
        config.model.d_model = 3


# Each case: YAML text, overrides, and fragments the one-line message must contain. A value
# pydantic refuses is named by the file's line (or the --set), the dotted key and pydantic's message.
ERROR_CASES = {
    "unknown key with suggestion": ("model:\n  d_modle: 64\n", [], ["line 2: model.d_modle: unknown key", "'d_model'"]),
    "unknown section": ("trian:\n  lr: 0.1\n", [], ["line 1: trian: unknown key (did you mean 'train'?)"]),
    "unknown key, no close match": ("model:\n  zzz: 1\n", [], ["line 2: model.zzz", "allowed: arch, d_model"]),
    "wrong type": ("model:\n  d_model: abc\n", [], ["line 2: model.d_model: Input should be a valid integer"]),
    "float where int is needed": ("model:\n  n_layers: 2.5\n", [], ["line 2: model.n_layers: Input should be a valid"]),
    "bool where int is needed": ("model:\n  d_model: true\n", [], ["model.d_model: Input should be a valid integer"]),
    "not positive": ("train:\n  steps: 0\n", [], ["line 2: train.steps: Input should be greater than 0"]),
    "dropout out of range": ("model:\n  dropout: 1.0\n", [], ["line 2: model.dropout: Input should be less than 1"]),
    "unknown enum value": (
        "model:\n  arch: gpt\n",
        [],
        ["line 2: model.arch: Input should be 'encoder', 'decoder' or 'encoder-decoder'"],
    ),
    "heads do not divide width": (
        "seed: 1\nmodel:\n  d_model: 10\n  n_heads: 4\n",
        [],
        ["line 2: model: d_model=10 must be divisible by n_heads=4"],
    ),
    "odd head width with rope": (
        "model:\n  d_model: 12\n  n_heads: 4\n  positional: rope\n",
        [],
        ["model:", "even head width", "3"],
    ),
    "stack depth on a single-stack arch": (
        "model:\n  arch: decoder\n  n_encoder_layers: 2\n",
        [],
        ["line 3: model.n_encoder_layers: arch=decoder does not use it", "only arch=encoder-decoder"],
    ),
    "section is not a mapping": ("model: 5\n", [], ["line 1: model: Input should be a valid dictionary"]),
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
        ["line 5: model.max_len=32 is too short", "up to 41 tokens"],
    ),
    "text task without a file": ("task:\n  name: text\n", [], ["line 2: task.path", "needs the file"]),
    "text file that does not exist": (
        "task:\n  name: text\n  path: /no/such.txt\n",
        [],
        ["line 3: task.path: /no/such.txt: cannot read: text file not found"],
    ),
    "min_len above max_len": ("task:\n  min_len: 9\n  max_len: 3\n", [], ["task.min_len=9", "task.max_len=3"]),
    "a key the task does not use": (
        "task:\n  name: sort\n  digits: 4\n",
        [],
        ["line 3: task.digits: sort does not use it", "its keys: name, vocab_size, min_len, max_len, bos, eval_size"],
    ),
    "an unused task key from an override": ("", ["task.path=x.txt"], ["--set task.path=x.txt", "sort does not use"]),
    "a task check failing through an override": ("", ["task.min_len=20"], ["--set task.min_len=20", "task.min_len=20"]),
    "bad override key": ("", ["model.d_modle=3"], ["--set model.d_modle=3", "'d_model'"]),
    "bad override value": (
        "",
        ["model.n_heads=many"],
        ["--set model.n_heads=many: model.n_heads: Input should be a valid integer"],
    ),
    "override without '='": ("", ["model.d_model"], ["--set model.d_model", "KEY=VALUE"]),
    "override below a value": ("", ["seed.x=1"], ["--set seed.x=1", "seed is a value"]),
    "beta out of range": ("train:\n  betas: [0.9, 1.5]\n", [], ["line 2: train.betas.1: Input should be less than 1"]),
    "beta on its own line": ("train:\n  betas:\n  - 0.9\n  - 1.5\n", [], ["line 4: train.betas.1: Input should"]),
    "bad beta from an override": ("", ["train.betas=[0.9,1.0]"], ["--set train.betas=[0.9,1.0]", "train.betas.1"]),
    "one beta": ("", ["train.betas=0.9"], ["--set train.betas=0.9: train.betas: Input should be a valid tuple"]),
    # A key or section given twice: YAML would keep the last and drop the first silently.
    "duplicate section": (
        "model:\n  d_model: 64\ntrain:\n  lr: 0.1\nmodel:\n  n_heads: 2\n",
        [],
        ["line 5: duplicate key 'model' (first at line 1)"],
    ),
    "duplicate key": ("model:\n  d_model: 64\n  n_heads: 2\n  d_model: 32\n", [], ["line 4: duplicate key 'd_model'"]),
    "duplicate key in a flow mapping": ("seed: 1\nlog: {every: 5, every: 6}\n", [], ["line 2: duplicate key 'every'"]),
    "duplicate key in an override": ("", ["log={every: 5, every: 6}"], ["--set log={every: 5", "duplicate key"]),
    "too deep an override": ("", ["train.betas=" + "[" * 40 + "]" * 40], ["--set train.betas=[[", "deeper than 32"]),
    "an alias in an override": ("", ["model.d_ff=*width"], ["--set model.d_ff=*width: line 1: YAML anchors and"]),
    # Sizes beyond their bound name the key and the bound. A number YAML reads as a string
    # ("1e12") or a float is not an integer, whatever its size.
    "seed beyond 64 bits": (
        "seed: 99999999999999999999999\n",
        [],
        ["line 1: seed: Input should be less than or equal to 9223372036854775807"],
    ),
    "negative seed": ("seed: -1\n", [], ["line 1: seed: Input should be greater than or equal to 0"]),
    "batch size 1e12": (
        "",
        ["train.batch_size=1e12"],
        ["--set train.batch_size=1e12: train.batch_size: Input should be a valid integer, or all"],
    ),
    "vocab size 1e9": ("task:\n  vocab_size: 1e9\n", [], ["line 2: task.vocab_size: Input should be a valid integer"]),
    "model max_len 1e8": (
        "",
        ["model.max_len=100000000"],
        ["--set model.max_len=100000000: model.max_len: Input should be less than or equal to 65536"],
    ),
    "d_model 1e6": ("", ["model.d_model=1e6"], ["--set model.d_model=1e6: model.d_model: Input should be a valid"]),
    "eval size 10**9": (
        "task:\n  eval_size: 1000000000\n",
        [],
        ["line 2: task.eval_size: Input should be less than or equal to 1000000"],
    ),
    "task max_len beyond the hash table": ("task:\n  max_len: 4095\n", [], ["task.max_len: Input", "or equal to 4094"]),
    "a fraction where an int is needed": (
        "",
        ["model.n_layers=2.5"],
        ["--set model.n_layers=2.5: model.n_layers: Input should be a valid integer"],
    ),
    # A cross-field check of a section that an override made fail names the override.
    "section check failing through an override": (
        "model:\n  d_model: 64\n",
        ["model.dropout=0.1", "model.n_heads=3"],
        ["--set model.n_heads=3: model: d_model=64 must be divisible by n_heads=3"],
    ),
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


def test_a_task_key_that_only_other_architectures_read_names_them(tmp_path, monkeypatch):
    """No task has such a key (every framing with a source reads task.bos); the rule
    stands for the next one. Here the decoder framing stops reading task.bos."""
    monkeypatch.setattr(FRAMINGS["decoder"], "task_keys", ())
    path = tmp_path / "bad.yaml"
    path.write_text("task:\n  name: sort\n  bos: true\nmodel:\n  arch: decoder\n")
    with pytest.raises(
        ConfigError, match=r"task.bos: arch=decoder does not use it \(only arch=encoder, arch=encoder-decoder"
    ):
        load_config(path)


def test_missing_file_and_folder(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.yaml: cannot read: config file not found"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="cannot read: is a folder; config file must be a regular file"):
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


# --------------------------------------------------------------------------- bounds

# Every integer key's largest value (the reasons are in tinytf/config/__init__.py).
UPPER_BOUNDS = {
    "seed": 2**63 - 1,
    "task.vocab_size": 10_000,
    "task.min_len": 4094,
    "task.max_len": 4094,
    "task.digits": 18,
    "task.modulus": 1000,
    "task.eval_size": 1_000_000,
    "model.d_model": 8192,
    "model.n_heads": 8192,
    "model.n_layers": 64,
    "model.n_encoder_layers": 64,
    "model.n_decoder_layers": 64,
    "model.d_ff": 32768,
    "model.max_len": 65536,
    "train.steps": 10_000_000,
    "train.batch_size": 65536,
    "train.warmup_steps": 10_000_000,
    "train.decay_steps": 10_000_000,
    "train.eval_every": 10_000_000,
    "train.checkpoint_every": 10_000_000,
    "log.every": 10_000_000,
    "log.attention_every": 10_000_000,
}


def test_every_integer_key_has_an_upper_bound():
    defaults = Config().to_dict()
    ints = {
        f"{section}.{key}"
        for section, keys in defaults.items()
        if isinstance(keys, dict)
        for key, value in keys.items()
        if isinstance(value, int) and not isinstance(value, bool)
    }
    unset = {"seed", "task.eval_size", "train.decay_steps", "model.n_encoder_layers", "model.n_decoder_layers"}
    assert ints | unset == set(UPPER_BOUNDS)


@pytest.mark.parametrize("key", sorted(UPPER_BOUNDS))
def test_a_size_beyond_its_bound_names_the_key_and_the_bound(key):
    bound = UPPER_BOUNDS[key]
    # What the key at its bound needs: a stack depth, an encoder-decoder; 8192 heads, as wide a model.
    extra = {
        "model.n_encoder_layers": ["model.arch=encoder-decoder"],
        "model.n_decoder_layers": ["model.arch=encoder-decoder"],
        "model.n_heads": ["model.d_model=8192"],
    }.get(key, [])
    # Anything up to the bound passes the schema (the task checks may still refuse it).
    config_from_dict({}, [*extra, f"{key}={bound}"])
    expected = {
        bound + 1: f"Input should be less than or equal to {bound}",
        10**30: f"Input should be less than or equal to {bound}",
        f"{float(bound + 1):e}": "Input should be a valid integer",  # a float to YAML, whatever its size
    }
    if key == "train.batch_size":  # a number, or all
        expected[f"{float(bound + 1):e}"] += ", or all"
    for value, message in expected.items():
        with pytest.raises(ConfigError) as caught:
            config_from_dict({}, [*extra, f"{key}={value}"], source="c.yaml")
        assert str(caught.value) == f"--set {key}={value}: {key}: {message}"


def test_the_longest_task_fits_the_data_code():
    """data.py fingerprints examples with a 4096-entry table: the widest example, a
    sentence of task.max_len words between <bos> and <eos>, must fit it."""
    task = get_task(TaskConfig(name="sentences", min_len=3, max_len=UPPER_BOUNDS["task.max_len"]))
    assert task.max_target_len == 4096
    assert len(TaskData(task, seed=UPPER_BOUNDS["seed"], eval_size=10).train_pairs(4)) == 4


# --------------------------------------------------------------------------- overrides and sections


def test_a_section_check_names_the_overrides_it_mentions(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  d_model: 64\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, ["model.dropout=0.1", "model.d_model=10", "train.lr=0.1", "model.n_heads=4"])
    assert str(caught.value).startswith("--set model.d_model=10 --set model.n_heads=4: model: d_model=10 ")
    path.write_text("model:\n  d_model: 10\n")  # the file's own mistake: an unrelated override is not blamed
    with pytest.raises(ConfigError) as caught:
        load_config(path, ["model.dropout=0.1"])
    assert str(caught.value).startswith(f"{path}: line 1: model: d_model=10 must be divisible")
    path.write_text("model:\n  d_model: 12\n  n_heads: 4\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, ["model.dropout=0.1", "model.positional=rope"])
    assert str(caught.value).startswith("--set model.positional=rope: model: positional=rope needs an even")


# --------------------------------------------------------------------------- YAML that explodes, files that never end

BILLION_LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n" for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
)  # 9**9 strings from 578 bytes
MAPPING_BOMB = "seed: 1\na: &a {x: 1, y: 1, z: 1, w: 1}\n" + "".join(
    f"{name}: &{name} {{{', '.join(f'{key}: *{prev}' for key in 'xyzwv')}}}\n"
    for prev, name in zip("abcdefghijkl", "bcdefghijklm", strict=True)
)  # 5**12 mappings
ANCHORS_REFUSED = "YAML anchors and aliases are not supported in a config (write the value out)"
# Each case: the text, and what the one line says after the file's name. Aliases are refused
# at the first anchor, before anything is built: no bomb is ever expanded.
EXPLOSIVE_YAML = {
    "billion laughs": (BILLION_LAUGHS, f"line 1: {ANCHORS_REFUSED}"),
    "mapping bomb": (MAPPING_BOMB, f"line 2: {ANCHORS_REFUSED}"),
    "long string bomb": (
        "x: &x " + "y" * 9000 + "\nz: [*x, *x, *x, *x, *x, *x, *x, *x, *x, *x]\n",
        f"line 1: {ANCHORS_REFUSED}",
    ),
    "5,000-deep lists": (
        "seed: " + "[" * 5000 + "]" * 5000 + "\n",
        "line 1: nested deeper than 32 levels (a config needs 3)",
    ),
    "5,000-deep mappings": (
        "model: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n",
        "line 1: nested deeper than 32 levels (a config needs 3)",
    ),
    "deep block nesting": (
        "".join("  " * depth + f"k{depth}:\n" for depth in range(50)),
        "line 33: nested deeper than 32 levels (a config needs 3)",
    ),
    "self-referencing mapping": ("model: &m\n  d_model: 64\n  n_heads: *m\n", f"line 1: {ANCHORS_REFUSED}"),
    "self-referencing list": ("seed: 1\nlog: &s [1, [2, *s]]\n", f"line 2: {ANCHORS_REFUSED}"),
    "too big a file": (
        "#" * MAX_CONFIG_BYTES + "\n",
        f"cannot read: {MAX_CONFIG_BYTES + 1:,} bytes; config file takes at most {MAX_CONFIG_BYTES:,} bytes",
    ),
}


def read_in_a_subprocess(path, seconds=20):
    """`read_config(path)`'s one-line error, read by a fresh process with limited time and
    memory: a config that explodes must fail the test, not hang it or take the machine's memory."""
    program = (
        "import sys\nfrom tinytf.config import read_config\nfrom tinytf.errors import ConfigError\n"
        "try:\n    read_config(sys.argv[1])\nexcept ConfigError as err:\n"
        "    print(err)\n"
    )

    def limit_memory():
        resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))

    result = subprocess.run(
        [sys.executable, "-c", program, str(path)],
        capture_output=True,
        text=True,
        timeout=seconds,
        preexec_fn=limit_memory if resource else None,
    )
    assert result.returncode == 0 and result.stdout.count("\n") == 1, result.stderr[-2000:]
    return result.stdout.strip()


@pytest.mark.parametrize("case", sorted(EXPLOSIVE_YAML))
def test_yaml_that_explodes_is_one_line(case, tmp_path):
    text, fragment = EXPLOSIVE_YAML[case]
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    assert read_in_a_subprocess(path) == f"{path}: {fragment}"


# Harmless anchors and aliases are refused too, at the line of the first one.
ANCHORED = {
    "an anchor and its alias": ("model:\n  d_model: &width 64\n  d_ff: *width\n", 2),
    "an anchor alone": ("seed: 1\nmodel: &m {d_model: 64}\n", 2),
    "an alias without its anchor": ("model:\n  d_model: 64\n  d_ff: *width\n", 3),
    "a merge of an anchored mapping": ("base: &b {n_heads: 8}\nmodel:\n  <<: *b\n", 1),
    "an anchored key": ("model:\n  &k d_model: 64\n", 2),
}


def test_a_merge_key_is_one_line(tmp_path):
    config = tmp_path / "merged.yaml"
    config.write_text("model:\n  d_model: 64\n  <<: {n_heads: 8}\n")
    assert_user_error(invoke("config", "show", config), f"{config}: line 3: YAML merge keys (<<) are not supported")


@pytest.mark.parametrize("case", sorted(ANCHORED))
@pytest.mark.parametrize("command", [["config", "show"], ["train"]])
def test_a_config_with_an_anchor_or_alias_is_one_line_and_changes_nothing(case, command, tmp_path):
    text, line = ANCHORED[case]
    config = tmp_path / "anchored.yaml"
    config.write_text(text)
    result = invoke(*command, config, *(["--runs-dir", tmp_path / "runs"] if command == ["train"] else []))
    assert_user_error(result, f"{config}: line {line}: {ANCHORS_REFUSED}")
    assert result.stdout == "" and sorted(tmp_path.iterdir()) == [config]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_not_a_config_file(tmp_path):
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    message = read_in_a_subprocess(fifo, seconds=10)  # opening it for reading would block
    assert message == f"{fifo}: cannot read: not a regular file (a FIFO); config file must be a regular file"


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero here")
def test_a_device_is_not_a_config_file():
    message = read_in_a_subprocess("/dev/zero", seconds=10)  # it never ends
    assert (
        message == "/dev/zero: cannot read: not a regular file (a character device); config file must be a regular file"
    )


# ---- files that cannot be read or never end


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan", "1e309"])
def test_non_finite_numbers_are_config_errors(tmp_path, value):
    path = tmp_path / "c.yaml"
    path.write_text(f"train:\n  lr: {value}\n")
    with pytest.raises(ConfigError, match=r"train\.lr"):
        load_config(path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_text_task_refuses_a_file_that_never_ends(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for path, kind in ((fifo, "a FIFO"), ("/dev/zero", "a character device")):
        config = write_config(tmp_path, {"task": {"name": "text", "path": str(path)}})
        assert_user_error(
            invoke("config", "show", config),
            f"line 3: task.path: {path}: cannot read: not a regular file ({kind}); text file must be",
        )


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_that_takes_a_file_s_place_after_the_check_is_refused(tmp_path, monkeypatch):
    """The check before opening passes a regular file; should a FIFO replace it before the
    open, the opened descriptor is checked again (and opening did not block)."""
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    monkeypatch.setattr(files, "check_regular_file", lambda *args: None)  # the file was regular when checked
    with unblocked_after(20, lambda: open(fifo, "wb").close()), pytest.raises(ConfigError) as caught:
        read_config(fifo)
    assert str(caught.value) == f"{fifo}: cannot read: not a regular file (a FIFO); config file must be a regular file"


@pytest.fixture
def locked(tmp_path, monkeypatch):
    """A config inside `locked/`, a folder the user cannot enter."""
    folder = tmp_path / "locked"
    folder.mkdir()
    config = write_config(folder, tiny_data())
    deny_entry(monkeypatch, folder)
    return config


@pytest.mark.parametrize("command", [["config", "show"], ["train"]])
def test_a_config_in_a_folder_the_user_cannot_enter_is_one_line(locked, command, tmp_path):
    extra = ["--runs-dir", tmp_path / "runs"] if command == ["train"] else []
    result = invoke(*command, locked, *extra)
    assert_user_error(result, f"{locked}: cannot read: Permission denied")
    assert not (tmp_path / "runs").exists()


def test_a_config_the_user_cannot_open_is_one_line(tmp_path, monkeypatch):
    config = write_config(tmp_path, tiny_data())
    real_open = os.open

    def open_(path, *args, **kwargs):  # stat() works (the folder is open), reading does not
        if str(path) == str(config):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    assert_user_error(invoke("config", "show", config), f"{config}: cannot read: Permission denied")
