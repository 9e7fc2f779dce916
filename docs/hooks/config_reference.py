"""mkdocs hook: the configuration reference, generated from `coevo/config/` at build time.

`coevo.config.Config` is the strict pydantic tree that params.yaml is loaded into; every field has a
description. This hook walks the tree from `Config` (through nested models, lists of models and
optional models) and writes one table per section (key, type, default, description) as the generated
page `configuration-reference.md`, so the reference cannot drift from the code. The derived values
(the properties of `Config`) follow with their docstrings.
"""

from __future__ import annotations

import enum
import inspect
import json
import sys
import types
import typing
from pathlib import Path, PurePath

from mkdocs.structure.files import File, Files
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

PAGE = "configuration-reference.md"


def _models_in(annotation) -> list[type[BaseModel]]:
    """The pydantic model classes an annotation holds (X, list[X], X | None, ...)."""
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return [annotation]
    found = []
    for arg in typing.get_args(annotation):
        for model in _models_in(arg):
            if model not in found:
                found.append(model)
    return found


def _type_name(annotation) -> str:
    if annotation is type(None):
        return "null"
    if inspect.isclass(annotation) and issubclass(annotation, PurePath):
        return "path"
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " or ".join(json.dumps(v) for v in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(annotation))
    if origin in (list, tuple, set, frozenset, dict):
        args = ", ".join(_type_name(a) for a in typing.get_args(annotation))
        return f"{origin.__name__}[{args}]" if args else origin.__name__
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return "section"
    if inspect.isclass(annotation):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _only_in_lists(annotation) -> bool:
    """Whether a field takes its model only as list entries (`rewards[]`), not also as one mapping
    (`coevolver`, a mapping or a list of them): the former's section is titled `key[]`."""
    name = _type_name(annotation)
    return "list[section]" in name and "section" not in name.replace("list[section]", "")


def _plain(value):
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _default(field) -> str:
    if field.default_factory is not None:
        if inspect.isclass(field.default_factory) and issubclass(field.default_factory, BaseModel):
            return "(its keys below)"
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    return "`" + json.dumps(_plain(value), ensure_ascii=False).replace("|", "\\|") + "`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _sections(model: type[BaseModel], path: str, first: dict):
    """(path, model, first_path) for `model` and every model below it, depth first. A model class
    already listed under another path is
    listed once more with the path where its keys are, not expanded again."""
    if model in first:
        yield path, model, first[model]
        return
    first[model] = path
    yield path, model, None
    for name, field in model.model_fields.items():
        for sub in _models_in(field.annotation):
            sub_path = f"{path}.{name}" if path else name
            if _only_in_lists(field.annotation):
                sub_path += "[]"
            yield from _sections(sub, sub_path, first)


def _bounds(field) -> str:
    marks = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<", "min_length": "length >=", "max_length": "length <="}
    out = []
    for meta in field.metadata:
        for attr, sign in marks.items():
            value = getattr(meta, attr, None)
            if value is not None:
                out.append(f"{sign} {value}")
    return ", ".join(out)


def _anchor(path: str) -> str:
    return "#" + "".join(ch for ch in path.lower() if ch.isalnum() or ch in "-_")


def render() -> str:
    from coevo import config as config_module

    root = config_module.Config
    lines = [
        "# Configuration reference",
        "",
        "Every key of `params.yaml`, generated from the pydantic tree in `coevo/config/` when the site is",
        "built (`docs/hooks/config_reference.py`), so it always matches the code. An unknown or misspelt key",
        "is an error naming the file and the key; `--set section.key=value` overrides any key for one run.",
        "Sections that are lists (`rewards[]`) take a list of entries with these keys; `coevolver` takes one entry "
        "(a mapping) or a list of them.",
        "",
    ]
    for path, model, first_path in _sections(root, "", {}):
        title = f"`{path}`" if path else "Top level"
        lines += [f"## {title}", ""]
        if first_path is not None:
            lines += [f"Each entry has the keys of [`{first_path}`]({_anchor(first_path)}).", ""]
            continue
        doc = inspect.getdoc(model)
        if doc and model.__doc__ and model is not root and doc != inspect.getdoc(BaseModel):
            lines += [doc, ""]
        lines += ["| key | type | default | description |", "|---|---|---|---|"]
        for name, field in model.model_fields.items():
            key = f"{path}.{name}" if path else name
            kind = _type_name(field.annotation)
            if kind == "section" or "[section]" in kind:
                kind = kind.replace("section", f"[section]({_anchor(key)})", 1)
            bounds = _bounds(field)
            kind = _cell(kind) + (f" ({_cell(bounds)})" if bounds else "")
            lines.append(f"| `{key}` | {kind} | {_default(field)} | {_cell(field.description or '')} |")
        lines.append("")
    derived = [(name, member) for name, member in vars(root).items() if isinstance(member, property)]
    if derived:
        lines += [
            "## Derived values",
            "",
            "Computed from several keys, in `Config` only (not settable):",
            "",
            "| name | description |",
            "|---|---|",
        ]
        for name, prop in derived:
            lines.append(f"| `{name}` | {_cell(inspect.getdoc(prop) or '')} |")
        lines.append("")
    return "\n".join(lines)


def on_files(files: Files, config) -> Files:
    root = str(Path(config.config_file_path).parent)
    if root not in sys.path:  # coevo imported from this checkout even when it is not installed
        sys.path.insert(0, root)
    files.append(File.generated(config, PAGE, content=render()))
    return files
