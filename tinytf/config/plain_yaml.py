"""Config YAML: `yaml.safe_load` kept to what a config needs, refused line by line.

`load_yaml(text)` runs no tags (a `yaml.SafeLoader`) and raises `RefusedYaml`, naming the
line, for an anchor or alias (no config needs one, and aliases can multiply a few bytes
into billions of values), for nesting deeper than `MAX_DEPTH` (PyYAML builds nested values
recursively: a few thousand levels overflow Python's stack), for a merge key (`<<`) and for
a key given twice in one mapping (YAML would silently keep the last one). It also returns the line of every key,
for error messages. Text that is not YAML raises `yaml.YAMLError`; `describe_yaml_error`
says why in one line. `parse_yaml_text` and `read_yaml_file` (configs, sweep files) turn
every such problem into one `ConfigError` naming the document.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tinytf.errors import ConfigError
from tinytf.files import read_regular_file

MAX_DEPTH = 32  # nesting of mappings and lists (a valid config nests 3 deep: train.betas)

Lines = dict[tuple[str, ...], int]  # a key's path in the document -> the line it is on


class RefusedYaml(Exception):
    """YAML that parses but that a config may not be: with an anchor or alias, too deep, or
    with a key given twice. The message says where."""


def load_yaml(text: str) -> tuple[Any, Lines]:
    """The document's data (None if empty) and the line of each key and list item in it."""
    _refuse_anchors_and_depth(text)  # first: composing a deep document would overflow the stack
    loader = _ConfigLoader(text)
    try:
        node = loader.get_single_node()
        return (None if node is None else loader.construct_document(node)), _key_lines(node)
    finally:
        loader.dispose()


def parse_yaml_text(text: str, source: str) -> tuple[Any, Lines]:
    """`load_yaml`, with a document it refuses or cannot parse a `ConfigError` naming `source` and the line."""
    try:
        return load_yaml(text)
    except RefusedYaml as err:
        raise ConfigError(f"{source}: {err}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{source}: {describe_yaml_error(err)}") from None


def read_yaml_file(path: str | Path, what: str, max_bytes: int) -> tuple[Any, Lines]:
    """`parse_yaml_text` of the file at `path`: a regular file (see `read_regular_file`; `what`
    names its role) of at most `max_bytes` of UTF-8 text, or a `ConfigError` naming it."""
    data = read_regular_file(path, max_bytes, what, ConfigError)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    return parse_yaml_text(text, str(path))


def describe_yaml_error(err: yaml.YAMLError) -> str:
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}invalid YAML: {problem}"


def _refuse_anchors_and_depth(text: str) -> None:
    """Walk the parse events (nothing is built) and refuse the first anchor (&x) or alias
    (*x, also in a merge `<<: *x`), and nesting deeper than MAX_DEPTH."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        line = event.start_mark.line + 1
        if isinstance(event, yaml.NodeEvent) and event.anchor is not None:  # an alias's anchor is the name it uses
            raise RefusedYaml(
                f"line {line}: YAML anchors and aliases are not supported in a config (write the value out)"
            )
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise RefusedYaml(f"line {line}: nested deeper than {MAX_DEPTH} levels (a config needs 3)")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _key_lines(root: yaml.Node | None) -> Lines:
    """The line of every mapping key and list item below `root`, by path: ("train", "betas", "1") -> 5."""
    lines: Lines = {}
    pending: list[tuple[tuple[str, ...], yaml.Node]] = [((), root)] if root is not None else []
    while pending:
        path, node = pending.pop()
        if isinstance(node, yaml.MappingNode):
            children = [(str(key.value), key, value) for key, value in node.value if isinstance(key, yaml.ScalarNode)]
        elif isinstance(node, yaml.SequenceNode):
            children = [(str(index), item, item) for index, item in enumerate(node.value)]
        else:
            continue
        for name, marked, child in children:
            lines.setdefault((*path, name), marked.start_mark.line + 1)
            pending.append(((*path, name), child))
    return lines


class _ConfigLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` (no tags run) that refuses merge keys and a key given twice in one mapping:
    YAML would keep the last one and silently drop the first (a second `model:` section
    would replace the first whole)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            first_lines: dict[Any, int] = {}
            for key_node, _ in node.value:
                line = key_node.start_mark.line + 1
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise RefusedYaml(f"line {line}: YAML merge keys (<<) are not supported in a config")
                key = self.construct_object(key_node, deep=True)
                try:
                    first = first_lines.get(key)
                except TypeError:  # an unhashable key: the base class explains
                    continue
                if first is not None:
                    raise RefusedYaml(f"line {line}: duplicate key {_short_repr(key)} (first at line {first})")
                first_lines[key] = line
        return super().construct_mapping(node, deep=deep)


def _short_repr(value: Any, limit: int = 100) -> str:
    """repr(value), cut to `limit` characters: a message stays one readable line."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."
