"""Property-based tests (Hypothesis) of the CLI's contract: whatever a user types or writes,
a command ends with exit code 0, or with exit code 2 and ONE `error: ` line on stderr;
never a traceback, and never a hang (`hard_limit`).

Random YAML documents, raw text and bytes go to `tinytf config show FILE`; random
`--set KEY=VALUE`s to `config show configs/quickstart.yaml`; random typed inputs to
`predict` and `attend` on a tiny trained run. The examples are derandomized: CI tests the
same ones every time, and a failure names its (shrunk) example.
"""

import contextlib
import signal
import traceback
import typing

import pytest
import yaml
from conftest import ROOT, invoke, train_tiny_run
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from tinytf.config import Config
from tinytf.tasks import TASKS

QUICKSTART = ROOT / "configs" / "quickstart.yaml"


# Reproducible (derandomize), no example database written into the repository, and a time
# bound on every example. Slow-but-bounded examples are the point here, not a health problem.
CONTRACT = settings(
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@contextlib.contextmanager
def hard_limit(seconds=20):
    """A command that hangs is stopped by a TimeoutError raised inside it, which
    `assert_contract` reports as a crash."""

    def expire(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_cli(*args):
    """`invoke`, stopped if it hangs."""
    with hard_limit():
        return invoke(*args)


def assert_contract(result, what):
    """Exit 0, or exit 2 with one `error: ` line on stderr; no traceback either way."""
    crashed = result.exception is not None and not isinstance(result.exception, SystemExit)
    trace = "".join(traceback.format_exception(result.exception)) if crashed else ""
    assert not crashed, f"{what}: {type(result.exception).__name__} (exit {result.exit_code})\n{trace}"
    assert "Traceback (most recent call last)" not in result.output, f"{what}:\n{result.output}"
    if result.exit_code == 0:
        return
    assert result.exit_code == 2, f"{what}: exit {result.exit_code}\n{result.output}"
    assert result.stderr.startswith("error: "), f"{what}: {result.stderr!r}"
    assert result.stderr.count("\n") == 1 and result.stderr.endswith("\n"), f"{what}: {result.stderr!r}"


# ---- the schema's real keys and values, mixed with junk


def schema_keys() -> dict[str, typing.Any]:
    """Every dotted key of the config ("model.d_model", "seed") -> its type annotation."""
    keys = {}
    for section, field in Config.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys |= {f"{section}.{key}": inner.annotation for key, inner in annotation.model_fields.items()}
        else:
            keys[section] = annotation
    return keys


KEYS = schema_keys()
SECTIONS = sorted({key.split(".")[0] for key in KEYS})


def literals(annotation) -> list:
    """The values a `Literal[...]` (also inside `X | None`) allows."""
    if typing.get_origin(annotation) is typing.Literal:
        return list(typing.get_args(annotation))
    return [value for arg in typing.get_args(annotation) for value in literals(arg)]


junk_text = st.text(max_size=30)
numbers = st.one_of(
    st.integers(-3, 300),
    st.integers(),  # any size: 10**30 is a valid YAML integer
    st.sampled_from([0, 1, 2, 16, 64, 4094, 4095, 65_536, 2**63 - 1, 2**63, 2**64, -(2**63), 10**400]),
    st.floats(),  # nan and inf included
    st.sampled_from(["3e-4", "1e309", "-0.0", ".inf", "0x10", "1_000", "0o17"]),
)
hostile_paths = st.sampled_from(["/dev/zero", "/dev/null", "/", "/etc", "", ".", "nonexistent.txt", "\x00", "a" * 5000])
scalars = st.one_of(numbers, st.booleans(), st.none(), junk_text, hostile_paths)


def value_for(key: str) -> st.SearchStrategy:
    """A value for `key`: often one the schema allows, often anything at all."""
    allowed = literals(KEYS[key])
    if key == "task.name":
        allowed = list(TASKS)
    good = st.sampled_from(allowed) if allowed else numbers
    return st.one_of(good, good, scalars, st.lists(scalars, max_size=3))


def nested(leaves: st.SearchStrategy) -> st.SearchStrategy:
    """Leaves, or lists and mappings of them, a few levels deep."""

    def containers(inner):
        return st.lists(inner, max_size=4) | st.dictionaries(junk_text | numbers, inner, max_size=4)

    return st.recursive(leaves, containers, max_leaves=12)


@st.composite
def config_data(draw):
    """A mapping shaped like a config: real sections and keys with real or junk values,
    junk keys, junk sections, sections that are not mappings."""
    data = {}
    for section in draw(st.lists(st.sampled_from(SECTIONS) | junk_text, max_size=6, unique=True)):
        if section in SECTIONS and section in KEYS:  # a top-level value (seed)
            data[section] = draw(value_for(section))
            continue
        keys = [key.split(".", 1)[1] for key in KEYS if key.startswith(f"{section}.")]
        if draw(st.integers(0, 9)) == 0:  # a section that is a scalar, a list...
            data[section] = draw(nested(scalars))
            continue
        chosen = draw(st.lists(st.sampled_from(keys) | junk_text if keys else junk_text, max_size=8, unique=True))
        data[section] = {key: draw(value_for(f"{section}.{key}") if key in keys else nested(scalars)) for key in chosen}
    return data


def anchor_line(lines: list[str], i: int, draw) -> None:
    """Give line i's value an anchor, and refer to it (an alias, a merge, a self-alias) elsewhere."""
    key, sep, value = lines[i].partition(":")
    if not sep:
        return
    lines[i] = f"{key}: &a {value.strip()}" if value.strip() else f"{key}: &a"
    indent = " " * (len(key) - len(key.lstrip()))
    reference = draw(
        st.sampled_from([f"{indent}again: *a", f"{indent}<<: *a", f"{indent}- *a", "*a", f"{indent}x: [*a, *a, *a]"])
    )
    lines.insert(draw(st.integers(0, len(lines))), reference)


@st.composite
def yaml_documents(draw):
    """Config-like data dumped as YAML in a random style, then edited as text: lines
    re-indented, duplicated (duplicate keys), deleted, swapped for junk; anchors and aliases."""
    data = draw(config_data())
    style = {
        "indent": draw(st.integers(2, 9)),
        "allow_unicode": draw(st.booleans()),
        "default_flow_style": draw(st.sampled_from([False, None, True])),
        "width": draw(st.sampled_from([80, 20, 10**6])),
    }
    text = yaml.safe_dump(data, sort_keys=False, **style)
    lines = text.splitlines() or [""]
    for _ in range(draw(st.integers(0, 4))):
        i = draw(st.integers(0, len(lines) - 1))
        edit = draw(st.sampled_from(["indent", "duplicate", "delete", "junk", "anchor", "tab"]))
        if edit == "indent":
            lines[i] = " " * draw(st.integers(0, 12)) + lines[i].lstrip()
        elif edit == "duplicate":
            lines.insert(draw(st.integers(0, len(lines))), lines[i])
        elif edit == "delete" and len(lines) > 1:
            del lines[i]
        elif edit == "junk":
            lines.insert(i, draw(st.text(max_size=40).filter(lambda line: "\n" not in line)))
        elif edit == "anchor":
            anchor_line(lines, i, draw)
        elif edit == "tab":
            lines[i] = "\t" + lines[i]
    return "\n".join(lines) + draw(st.sampled_from(["\n", "", "\n...\n", "\n---\n"]))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("properties")


@settings(CONTRACT, max_examples=40)
@given(text=yaml_documents())
@example(text="a: &a [*a]")  # a recursive alias
@example(text="a: &a [x, x]\nb: &b [*a, *a]\nc: &c [*b, *b]\nd: [*c, *c, *c]")  # aliases that multiply
@example(text="base: &b {d_model: 64}\nmodel:\n  <<: *b\n")  # a merge of an anchored mapping
@example(text="model:\n  d_model: 64\nmodel:\n  d_model: 32\n")  # a section given twice
@example(text="task:\n  name: text\n  path: /dev/zero\n")  # a data file that never ends
@example(text="seed: 100000000000000000000000000000000000000\n")
@example(text="? [a, b]\n: c\n")  # a key that is a list
# A key with a line break in it, quoted raw in the error, would make it two lines:
# 'error: FILE: \n: unknown key (allowed: ...)'.
@example(text='"\\n": 0\n')
# A NUL in task.path makes Path.stat() raise ValueError("embedded null byte"), not an OSError.
@example(text='task:\n  name: text\n  path: "a\\0b"\n')
def test_any_yaml_document_is_a_config_or_one_error_line(folder, text):
    path = folder / "random.yaml"
    path.write_text(text, encoding="utf-8")
    assert_contract(run_cli("config", "show", path), f"config show of {text!r}")


@settings(CONTRACT, max_examples=50)
@given(text=st.text())
def test_any_text_as_a_config_file_is_a_config_or_one_error_line(folder, text):
    path = folder / "text.yaml"
    path.write_text(text, encoding="utf-8")
    assert_contract(run_cli("config", "show", path), f"config show of {text!r}")


@settings(CONTRACT, max_examples=50)
@given(data=st.binary(max_size=200))
@example(data=b"\xff\xfe\x00m\x00o")  # UTF-16
@example(data=b"model:\n  arch: \xe9\n")  # Latin-1
def test_any_bytes_as_a_config_file_are_a_config_or_one_error_line(folder, data):
    path = folder / "bytes.yaml"
    path.write_bytes(data)
    assert_contract(run_cli("config", "show", path), f"config show of {data!r}")


# ---- random --set KEY=VALUE


def dotted_keys() -> st.SearchStrategy:
    real = st.sampled_from(sorted(KEYS))
    return st.one_of(
        real,
        real,
        real.map(lambda key: key + ".deeper"),  # a value used as a section
        real.map(lambda key: key.upper()),
        st.sampled_from(SECTIONS),  # a whole section
        st.lists(junk_text, min_size=1, max_size=3).map(".".join),  # junk, empty parts included
    )


def as_yaml_value(value) -> str:
    """A value as `--set` takes it: YAML on one line."""
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).removesuffix("\n...\n").strip()


ODD_VALUES = [
    "[1, 2]",
    "{a: 1}",
    "&a [*a]",
    "!!python/object:os.system",
    "'unterminated",
    "a: b",
    "- x",
    "{",
    "*alias",
    "null",
    "~",
    "",
    " ",
    "yes",
    "0.9,0.98",
    "[0.9, 0.98]",
    "=",
    "a=b",
]


@st.composite
def overrides(draw):
    key = draw(dotted_keys())
    real = value_for(key).map(as_yaml_value) if key in KEYS else st.nothing()
    value = draw(st.one_of(real, junk_text, numbers.map(str), st.sampled_from(ODD_VALUES)))
    return draw(st.sampled_from([f"{key}={value}", f"{key} = {value}", f"{key}{value}", value]))


@settings(CONTRACT, max_examples=40)
@given(sets=st.lists(overrides(), min_size=1, max_size=3))
@example(sets=["model.d_model=&a [*a]"])
@example(sets=["train.betas=[0.9, 0.98, 0.5]"])
@example(sets=["seed=99999999999999999999999999"])
@example(sets=["task.path=/dev/zero", "task.name=text"])
# The --set text, quoted raw in the error, would make a value with a line break two lines:
# 'error: --set model.d_model=64\nx: ...'.
@example(sets=["model.d_model=64\nx"])
@example(sets=["task.name=text", "task.path=a\x00b"])  # the NUL in task.path above
def test_any_set_is_a_config_or_one_error_line(sets):
    args = [arg for value in sets for arg in ("--set", value)]
    assert_contract(run_cli("config", "show", QUICKSTART, *args), f"config show --set {sets!r}")


# ---- random typed inputs to a trained model


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny finished run (sort on "0".."4", a 1-layer decoder), trained once."""
    return train_tiny_run(tmp_path_factory.mktemp("typed"))


symbols = st.sampled_from("01234")  # the run's input tokens
tokens = st.one_of(
    symbols,
    st.sampled_from(["<pad>", "<bos>", "<sep>", "<eos>", "<unk>", "5", "-1", "00", "٣", "０"]),
    st.text(max_size=5),
)
gaps = st.sampled_from([" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u2028", ""])
typed_texts = st.one_of(
    st.lists(symbols, min_size=1, max_size=8).map(" ".join),  # what the model was trained for
    st.lists(symbols, min_size=1, max_size=8).map(" ".join),
    st.lists(symbols, min_size=120, max_size=300).map(" ".join),  # near model.max_len=256, with the answer
    st.tuples(st.lists(tokens, max_size=12), gaps).map(lambda parts: parts[1].join(parts[0])),
    st.text(),
    st.integers(300, 5000).map(lambda n: " ".join("01234"[i % 5] for i in range(n))),  # far past model.max_len
    st.sampled_from(["", " ", "-", "--", "--help", "-x", "0 1 --run", "\x00", "0\x001"]),
)


@settings(CONTRACT, max_examples=30)
@given(text=typed_texts)
@example(text="")
@example(text="3 1 2")
@example(text="<pad> <pad>")
@example(text="<sep> 1")
@example(text=" ".join("0" * 300))
def test_predict_any_text_is_an_answer_or_one_error_line(run, text):
    assert_contract(run_cli("predict", "--run", run, "--", text), f"predict {text!r}")


@settings(CONTRACT, max_examples=30)
@given(text=typed_texts, target=st.none() | st.none() | typed_texts)
@example(text="1 2", target="<eos>")
@example(text="1 2", target=" ".join("0" * 300))
def test_attend_any_text_is_a_table_or_one_error_line(run, text, target):
    extra = [] if target is None else ["--target", target]
    result = run_cli("attend", "--run", run, *extra, "--", text)  # after "--": even "-x" is TEXT
    assert_contract(result, f"attend {text!r} --target {target!r}")
