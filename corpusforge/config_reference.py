"""Every configuration key with its value and meaning: ``config show``, docs/config.md and ``--set`` errors.

The meanings are the pydantic ``Field`` descriptions in core/config.py, so the reference cannot
drift from the code (a test compares docs/config.md with ``reference_markdown()``).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from pydantic import BaseModel, ValidationError

from corpusforge.core.config import Config

# pydantic error types a person understands without knowing pydantic
PLAIN_ERRORS = {
    "int_parsing": "expects a whole number",
    "int_from_float": "expects a whole number",
    "float_parsing": "expects a number",
    "bool_parsing": "expects true or false",
    "string_type": "expects a string (quote it: --set key='\"text\"')",
    "list_type": 'expects a list, e.g. ["a", "b"]',
    "path_type": "expects a path string",
    "greater_than_equal": "is below its minimum",
}


@dataclass(frozen=True)
class Key:
    name: str  # dotted, e.g. clean.min_words
    value: Any
    meaning: str


def keys(cfg: Config) -> list[Key]:
    """Every leaf key of ``cfg`` in declaration order, with its value."""
    return list(_walk(cfg, ""))


def _walk(model: BaseModel, prefix: str) -> Iterator[Key]:
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            yield from _walk(value, f"{prefix}{name}.")
        else:
            yield Key(f"{prefix}{name}", value, info.description or "")


def format_value(value: Any) -> str:
    """A value as it would be written in TOML or after ``--set`` (unset for None, which TOML cannot say)."""
    if value is None:
        return "unset"
    if isinstance(value, Path):
        return json.dumps(str(value))
    if isinstance(value, list):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, str) else str(value)


def reference_markdown() -> str:
    """docs/config.md: every key, its default and its meaning, one table per section."""
    lines = [
        "# Configuration reference",
        "",
        "Generated from the field descriptions in `core/config.py` by `corpusforge config reference > docs/config.md`;",
        "a test fails when this file is out of date. Set a key in a TOML file (`[section]` then `key = value`)",
        "or on the command line with `--set section.key=value`; `corpusforge config show CONFIG` prints the resolved values.",
        "Relative paths in a configuration file are resolved against the file's directory.",
    ]
    section = None
    for key in keys(Config()):
        head = key.name.rsplit(".", 1)[0]
        if head != section:
            section = head
            lines += ["", f"## `[{section}]`", "", "| key | default | meaning |", "| --- | --- | --- |"]
        leaf = key.name.rsplit(".", 1)[1]
        meaning = key.meaning.replace("|", r"\|")
        lines.append(f"| `{leaf}` | `{format_value(key.value)}` | {meaning} |")
    return "\n".join(lines) + "\n"


def closest_key(name: str) -> str | None:
    known = [key.name for key in keys(Config())]
    sections = sorted({k.rsplit(".", 1)[0] for k in known})
    match = difflib.get_close_matches(name, known + sections, n=1, cutoff=0.6)
    return match[0] if match else None


def explain_error(error: ValidationError, overrides: list[str], config_path: Path | None) -> str:
    """One line per problem naming the ``--set`` flag (or the file) that caused it, without pydantic's words."""
    flags = {item.split("=", 1)[0].strip(): item for item in overrides if "=" in item}
    problems = []
    for detail in error.errors():
        key = ".".join(str(part) for part in detail["loc"])
        where = f"--set {flags[key]}" if key in flags else str(config_path) if config_path else "configuration"
        if detail["type"] == "extra_forbidden":
            guess = closest_key(key)
            problems.append(f"{where}: no key {key!r}" + (f"; did you mean {guess!r}?" if guess else "; see `corpusforge config show`"))
        elif detail["type"] == "literal_error":
            problems.append(f"{where}: {key} {detail['msg'].replace('Input should be', 'must be')}")
        else:
            plain = PLAIN_ERRORS.get(detail["type"], detail["msg"].removeprefix("Value error, "))
            problems.append(f"{where}: {key} {plain}")
    return "; ".join(problems)
