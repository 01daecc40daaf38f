"""The one strict YAML reader for everything a user writes (search spaces, configs, `--set`).

PyYAML's safe loader lets a later duplicate key silently win, reads ``5e-1`` as a string (its
YAML 1.1 floats need a dot and a signed exponent), accepts keys that are numbers or lists, and
builds self-containing structures from recursive anchors, which every later walk of the value
loops on, and ends a value nested thousands deep in a RecursionError. Here each of those is a
`ConfigError` naming the file (or field), the line and the column where known, or, for
scientific notation, the float the user meant.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from .validation import ConfigError

# 5e-1, 1.0e5, -2E+3, .5e2: floats in YAML 1.2 and in every user's mind, strings in YAML 1.1.
_SCIENTIFIC = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")


class StrictLoader(yaml.SafeLoader):
    """SafeLoader refusing duplicate and non-text keys, reading scientific notation as floats."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                raise _error(key_node, f"the key {key!r} is not allowed; keys must be text")
            if key in seen:
                first = seen[key].start_mark.line + 1
                raise _error(key_node, f"the key {key!r} repeats the one on line {first}")
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float", _SCIENTIFIC, list("-+0123456789."))


def _error(node: yaml.Node, message: str) -> yaml.MarkedYAMLError:
    return yaml.constructor.ConstructorError(None, None, message, node.start_mark)


def load_text(text: str, source: str) -> Any:
    """The value of one YAML document; any mistake is a one-line `ConfigError` on `source`."""
    try:
        value = yaml.load(text, Loader=StrictLoader)  # a SafeLoader
        _refuse_cycles(value, source)
    except yaml.MarkedYAMLError as error:
        raise ConfigError(source, _describe(error)) from None
    except yaml.YAMLError as error:
        raise ConfigError(source, f"not valid YAML: {' '.join(str(error).split())}") from None
    except RecursionError:  # PyYAML composes and constructs nested values by recursion
        raise ConfigError(source, "not allowed: values nested too deeply to read") from None
    return value


def load_file(path: str | Path, what: str = "YAML file") -> Any:
    """Read `path` as UTF-8 YAML; a missing, unreadable, non-UTF-8 or invalid file is one line."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(str(path), f"no such {what}")
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise ConfigError(str(path), f"cannot be read: {error.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(
            str(path), f"not UTF-8 text (byte 0x{raw[error.start]:02x} at offset {error.start})"
        ) from None
    return load_text(text, str(path))


def _describe(error: yaml.MarkedYAMLError) -> str:
    mark = error.problem_mark or error.context_mark
    where = "" if mark is None else f"line {mark.line + 1}, column {mark.column + 1}: "
    problem = " ".join(str(error.problem or error.context or "invalid").split())
    return f"not valid YAML: {where}{problem}"


def _refuse_cycles(value: Any, source: str, inside: frozenset[int] = frozenset()) -> None:
    """An alias inside its own anchor makes a value that contains itself: refused."""
    if not isinstance(value, (dict, list)):
        return
    if id(value) in inside:
        raise ConfigError(source, "not allowed: an alias (*name) refers to its own anchor (&name)")
    children = value.values() if isinstance(value, dict) else value
    for child in children:
        _refuse_cycles(child, source, inside | {id(value)})
