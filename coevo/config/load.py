"""Reading params.yaml (and `--set` overrides) into a `Config`, with errors that name the file, line
and key (`ConfigError`)."""

from __future__ import annotations

from difflib import get_close_matches
from pathlib import Path
from typing import get_args

import yaml
from pydantic import (
    BaseModel,
    ValidationError,
)

from coevo.config.tree import Config


class ConfigError(ValueError):
    """params.yaml could not be read or did not validate; the message names the file and the key."""


def parse_overrides(pairs: list[str] | None) -> dict:
    """`section.key=value` pairs (YAML values), as `--set` gives them, as a nested overrides dict."""
    tree: dict = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects section.key=value, got {pair!r}")
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(value)
    return tree


def read_yaml(path: Path) -> object:
    """The YAML document in `path`; ConfigError naming the file, line and column of a syntax error."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        context, opened = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        if context and opened is not None:
            context = f"{context} (line {opened.line + 1}, column {opened.column + 1})"
        what = " ".join(filter(None, [context, getattr(exc, "problem", None)])) or str(exc)
        raise ConfigError(f"{where}: cannot read: not valid YAML: {what}") from exc


def load_config(
    path: str | Path = "params.yaml", overrides: dict | None = None, overrides_label: str | None = "--set"
) -> Config:
    """Read params.yaml (plus optional nested overrides: `--set`'s, or the Python API's, which take
    what `--set` takes) into a validated Config. An error in a key the overrides set names
    `overrides_label` instead of the file (None: the file, for overrides that stand for its own keys)."""
    path = Path(path)
    raw = read_yaml(path) or {}
    if overrides:
        raw = deep_merge(raw, overrides)
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(error_lines(path, exc, overrides if overrides_label else None, overrides_label)) from exc


def _sets(overrides: dict | None, loc: tuple) -> bool:
    """Whether the nested `overrides` set the key at `loc` (or a key above it)."""
    node = overrides
    for part in loc:
        if not isinstance(node, dict) or str(part) not in node:
            return False
        node = node[str(part)]
    return bool(loc)


def _model_at(loc: tuple) -> type[BaseModel] | None:
    """The config section (a model class) that holds the key at `loc`, or None."""
    model: type[BaseModel] = Config
    for part in loc[:-1]:
        if isinstance(part, int):  # an item of a list of sections (coevolver, rewards)
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        found = [t for t in (field.annotation, *get_args(field.annotation)) if isinstance(t, type)]
        found = [t for t in found if issubclass(t, BaseModel)]
        if not found:
            return None
        model = found[0]
    return model


def _unknown_key(loc: tuple) -> str:
    """The message of a key no section has, with the closest known key of its section."""
    model = _model_at(loc)
    close = get_close_matches(str(loc[-1]), list(model.model_fields), n=1, cutoff=0.6) if model else []
    parent = ".".join(str(part) for part in loc[:-1] if not isinstance(part, int))
    hint = f"; did you mean {'.'.join(filter(None, [parent, close[0]]))}?" if close else ""
    return f"unknown setting (Extra inputs are not permitted){hint}"


def error_lines(path: str | Path, exc: ValidationError, overrides: dict | None = None, label: str = "--set") -> str:
    """A validation error as `file: key.path: message` lines (`file: message` for a whole-file check;
    our validators' messages without pydantic's "Value error, " before them). A key `overrides` set is
    blamed on `label` (`--set`), not the file; an unknown key names the closest known one."""
    lines = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        dotted = ".".join(str(part) for part in loc)
        msg = _unknown_key(loc) if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
        where = label if _sets(overrides, loc) else path
        lines.append(f"{where}: {dotted}: {msg}" if dotted else f"{where}: {msg}")
    return "\n".join(lines)


def deep_merge(base: dict, extra: dict) -> dict:
    """`base` with `extra` laid over it, nested dicts merged key by key (neither is modified)."""
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
