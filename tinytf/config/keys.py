"""Dotted keys over a tree of pydantic sections (the config): `--set KEY=VALUE` overrides,
and the one-line error that names the key, and the `--set` or the file line that gave it.

`KeyTree(root)` reads the sections from the tree's root model (`tinytf.config.Config`):
this module knows no section of its own.
"""

from __future__ import annotations

import difflib
from typing import Any

import yaml
from pydantic import BaseModel

from tinytf.config.plain_yaml import Lines, RefusedYaml, load_yaml
from tinytf.errors import ConfigError

Sources = dict[tuple[str, ...], str]  # a key path an override set -> "--set KEY=VALUE", in the order given


def parse_override(text: str) -> tuple[tuple[str, ...], Any]:
    """``"model.d_model=64"`` -> ``(("model", "d_model"), 64)``; values are YAML scalars."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"--set {text}: expected KEY=VALUE with a dotted key, e.g. --set model.d_model=64")
    try:
        value = load_yaml(raw)[0] if raw.strip() else None
    except RefusedYaml as err:
        raise ConfigError(f"--set {text}: {err}") from None
    except yaml.YAMLError:
        value = raw  # not YAML: keep the string and let validation judge it
    return tuple(key.split(".")), value


def kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string"}.get(type(value), type(value).__name__)


class KeyTree:
    """The dotted keys of a tree of pydantic sections whose root model is `root`."""

    def __init__(self, root: type[BaseModel]) -> None:
        self.root = root

    def set_dotted(self, data: dict[str, Any], key_path: tuple[str, ...], value: Any, text: str) -> None:
        """data[a][b][c] = value for key_path (a, b, c), checking each key against the schema."""
        node = data
        for depth, part in enumerate(key_path):
            section_loc = key_path[:depth]
            if part not in self.allowed_keys(section_loc):
                dotted = ".".join(key_path[: depth + 1])
                raise ConfigError(f"--set {text}: {dotted}: {self.unknown_key_message(section_loc, part)}")
            if depth == len(key_path) - 1:
                node[part] = value
            elif self.section_model(key_path[: depth + 1]) is None:
                raise ConfigError(f"--set {text}: {'.'.join(key_path[: depth + 1])} is a value, not a section")
            else:
                node = node.setdefault(part, {})
                if not isinstance(node, dict):
                    dotted = ".".join(key_path[: depth + 1])
                    raise ConfigError(
                        f"--set {text}: {dotted} should be a section, but the config gives it {kind(node)}"
                    )

    def describe_error(self, error: Any, source: str, lines: Lines, override_sources: Sources) -> str:
        """One pydantic error: where, the dotted key, and pydantic's own message; or ours for an
        unknown key (with the allowed keys) and for a section's cross-field check."""
        loc = tuple(str(part) for part in error["loc"])
        named: tuple[str, ...] = ()
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = self.unknown_key_message(loc[:-1], loc[-1])
        elif error["type"] == "value_error":  # raised by a model_validator of ours
            problem = error["ctx"]["error"]
            message, named = str(problem), getattr(problem, "keys", ())
        return f"{self.where([loc], named, source, lines, override_sources)}: {'.'.join(loc) or 'config'}: {message}"

    def where(
        self, locs: list[tuple[str, ...]], named: tuple[str, ...], source: str, lines: Lines, override_sources: Sources
    ) -> str:
        """Who gave the keys at `locs`: the `--set`(s) at fault (see `blame`), else `source`
        and the line of the deepest of them (or of a section above it) that the file has."""
        blamed = next((who for who in (self.blame(loc, named, override_sources) for loc in locs) if who), None)
        if blamed:
            return blamed
        found = max(
            (loc[:n] for loc in locs for n in range(len(loc), 0, -1) if loc[:n] in lines), key=len, default=None
        )
        return source if found is None else f"{source}: line {lines[found]}"

    def blame(self, loc: tuple[str, ...], named: tuple[str, ...], override_sources: Sources) -> str | None:
        """The override(s) at fault for an error at `loc` ("--set ..."), or None for the config file.

        The override that set the key at `loc` or one above it (train.betas for train.betas.1).
        Failing that, when `loc` is a section (a cross-field check of the whole section, such
        as model: d_model % n_heads), the overrides of the keys the check `named`; if it named
        none, the first override inside the section.
        """
        exact = next((override_sources[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in override_sources), None)
        if exact is not None or not loc or self.section_model(loc) is None:
            return exact
        inside = [key for key in override_sources if len(key) > len(loc) and key[: len(loc)] == loc]
        if not named:
            return override_sources[inside[0]] if inside else None
        return " ".join(dict.fromkeys(override_sources[key] for key in inside if key[len(loc)] in named)) or None

    def unknown_key_message(self, section_loc: tuple[str, ...], key: str) -> str:
        """`unknown key (did you mean 'd_model'?)`, or the allowed keys when none is near. At
        the top, a section's own key is suggested by its dotted path: `lr` -> 'train.lr'."""
        allowed = self.allowed_keys(section_loc)
        named = {name: [name] for name in allowed}  # a name that may be meant -> its dotted path(s)
        if not section_loc:
            for section in allowed:
                for leaf in self.allowed_keys((section,)):
                    named.setdefault(leaf, []).append(f"{section}.{leaf}")
        suggestion = difflib.get_close_matches(key, named, n=1, cutoff=0.6)
        if suggestion:
            hint = f"did you mean {' or '.join(repr(path) for path in named[suggestion[0]])}?"
        else:
            hint = f"allowed: {', '.join(allowed)}"
        return f"unknown key ({hint})"

    def section_model(self, loc: tuple[str, ...]) -> type[BaseModel] | None:
        """The section class at `loc` (() is the root), or None if `loc` is a value (or no key)."""
        model: type[BaseModel] = self.root
        for part in loc:
            field = model.model_fields.get(part)
            annotation = field.annotation if field is not None else None
            if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
                return None
            model = annotation
        return model

    def allowed_keys(self, section_loc: tuple[str, ...]) -> list[str]:
        """The keys that the section at `section_loc` accepts."""
        model = self.section_model(section_loc)
        return list(model.model_fields) if model is not None else []
