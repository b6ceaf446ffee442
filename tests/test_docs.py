"""The docs stay true to the tree: links resolve, the config reference lists exactly the
schema's keys, the README stays short, and config comments stay brief."""

import re
from pathlib import Path

import pytest
import tomllib
from pydantic import BaseModel

from tinytf.config import Config

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CONFIGS = sorted((ROOT / "configs").rglob("*.yaml"))
README_MAX_LINES = 250
CONFIG_MAX_COMMENT_LINES = 3

FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def prose(text: str) -> str:
    """The Markdown without fenced blocks and code spans: links in code are not links."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"[^\w\- ]", "", text.lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text())):
        base, n = slug(heading), 0
        while (anchor := base if n == 0 else f"{base}-{n}") in found:
            n += 1
        found.add(anchor)
    return found


def table_cells(line: str) -> list[str]:
    """A Markdown table row's cells (`\\|` is a pipe inside a cell); [] for other lines."""
    if not line.startswith("|"):
        return []
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip()[1:-1])]


def test_the_slugs_follow_github():
    assert slug("Looking inside") == "looking-inside"
    assert slug("What did my heads learn?") == "what-did-my-heads-learn"
    assert slug("`tinytf heads`: scores, labels") == "tinytf-heads-scores-labels"
    assert slug("Induction heads on a laptop") == "induction-heads-on-a-laptop"


def test_table_cells_keep_escaped_pipes():
    assert table_cells("| `model.norm` | `pre` \\| `post` | `pre` |") == ["`model.norm`", "`pre` \\| `post`", "`pre`"]
    assert table_cells("text | not a row") == []


def test_links_skip_code():
    text = "see [a](a.md) and `[b](b.md)`\n```\n[c](c.md)\n```\n![d](d.png)"
    assert LINK.findall(prose(text)) == ["a.md", "d.png"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_image_resolves(doc):
    broken = []
    for target in LINK.findall(prose(doc.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        path = (doc.parent / file_part).resolve() if file_part else doc
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: no heading #{anchor} in {path.relative_to(ROOT)}")
        elif anchor and path.suffix != ".md":
            broken.append(f"{target}: an anchor into a file that is not Markdown")
    assert not broken, f"{doc.relative_to(ROOT)}: {broken}"


def test_the_readme_links_every_doc():
    linked = {target.partition("#")[0] for target in LINK.findall(prose((ROOT / "README.md").read_text()))}
    missing = [doc.name for doc in DOCS[1:] if f"docs/{doc.name}" not in linked]
    assert not missing, f"README.md links no docs/{missing}"


def schema_keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Every leaf key of the config tree, dotted: task.name, ..., seed."""
    keys = set()
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys |= schema_keys(annotation, f"{prefix}{name}.")
        else:
            keys.add(f"{prefix}{name}")
    return keys


def documented_keys(text: str) -> list[str]:
    """The first cell of every row of the tables whose header starts with `| key |`."""
    keys, in_table = [], False
    for line in text.splitlines():
        cells = table_cells(line)
        if not cells:
            in_table = False
        elif cells[0] == "key":
            in_table = True
        elif in_table and not set(cells[0]) <= set("-: "):
            match = re.fullmatch(r"`([\w.]+)`", cells[0])
            assert match, f"docs/configs.md: a key cell that is not one `dotted.key`: {cells[0]!r}"
            keys.append(match.group(1))
    return keys


def test_the_config_reference_lists_exactly_the_schemas_keys():
    documented = documented_keys((ROOT / "docs/configs.md").read_text())
    assert len(documented) == len(set(documented)), "docs/configs.md lists a key twice"
    schema = schema_keys(Config)
    assert "train.betas" in schema and "seed" in schema and len(schema) > 40
    assert set(documented) == schema, (
        f"missing from docs/configs.md: {sorted(schema - set(documented))}; "
        f"not in the schema: {sorted(set(documented) - schema)}"
    )


def written_as(value: object) -> str:
    """A default as the reference writes it: YAML's spelling."""
    if isinstance(value, list):
        return f"[{', '.join(map(written_as, value))}]"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def test_the_config_reference_gives_each_keys_default():
    rows = {}
    for line in (ROOT / "docs/configs.md").read_text().splitlines():
        cells = table_cells(line)
        if line.startswith("| `") and len(cells) == 5:
            rows[cells[0].strip("`")] = cells[2]
    defaults = Config().to_dict()
    for key in schema_keys(Config):
        value = defaults
        for part in key.split("."):
            value = value[part]
        written = written_as(value)
        assert rows[key] == f"`{written}`", f"docs/configs.md: {key}'s default is {written}, not {rows[key]}"


def test_the_readme_is_short():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; at most {README_MAX_LINES}"


def comment_lines(text: str) -> int:
    """Lines holding a YAML comment: whole-line ones and trailing `  # ...` after a value."""
    return sum(1 for line in text.splitlines() if line.lstrip().startswith("#") or re.search(r"\s#", line))


def test_the_comment_count_sees_trailing_comments():
    assert comment_lines("# one\ntask:\n  name: sort  # two\n  path: a#b\n") == 2


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_configs_comment_is_at_most_three_lines(config):
    count = comment_lines(config.read_text())
    assert count <= CONFIG_MAX_COMMENT_LINES, f"{config.relative_to(ROOT)} has {count} comment lines"


def test_every_test_file_the_guarantees_name_exists():
    named = set(re.findall(r"`(test_\w+\.py)`", (ROOT / "docs" / "guarantees.md").read_text()))
    assert named, "docs/guarantees.md names no test file"
    assert sorted(name for name in named if not (ROOT / "tests" / name).is_file()) == []


MEASURED_TIME = re.compile(r"\b\d[\d,.]*(?:-\d[\d,.]*)? ?(?:s|seconds|minutes?)\b")
NOT_A_MEASURED_TIME = (
    "answered for 10 minutes",  # distributed.md: a timeout, a setting
    'take about 0.5 s, where `python -c "import torch"` alone takes about 2 s',  # architecture.md: start-up
)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_time_the_docs_give_names_its_thread_count(doc):
    # A time depends on the thread count: a section that gives one says which (results.md#reproducing-a-figure).
    unnamed = []
    for section in re.split(r"^#{1,6} .*$", doc.read_text(), flags=re.MULTILINE):
        if "thread" in section:
            continue
        text = " ".join(FENCE.sub("", section).split())
        for known in NOT_A_MEASURED_TIME:
            text = text.replace(known, "")
        unnamed += [match.group(0) for match in MEASURED_TIME.finditer(text)]
    assert not unnamed, f"{doc.relative_to(ROOT)}: times in a section that names no thread count: {unnamed}"


def test_the_torch_the_package_requires_is_the_torch_ci_tests():
    """The floor in pyproject.toml is the release the README's commands install (and so
    CI, which runs them): a promise of an older torch would be one no test keeps."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (floor,) = [spec.removeprefix("torch>=") for spec in project["dependencies"] if spec.startswith("torch")]
    installed = set(re.findall(r"torch==([\d.]+)", (ROOT / "README.md").read_text()))
    assert installed == {f"{floor}.0"}, (floor, installed)
    extras = [spec for specs in project["optional-dependencies"].values() for spec in specs]
    assert not [spec for spec in extras if spec.startswith("torch")]  # no extra asks for another one
