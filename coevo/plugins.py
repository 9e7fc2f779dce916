"""User code named in params as "module:function" (or "module:Class"): reward functions, tools and
environment classes, imported with a record of their source file and its sha256 for the lineage."""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
from collections.abc import Callable
from pathlib import Path

from coevo.errors import InputError
from coevo.io import hash_file


@functools.lru_cache(maxsize=None)
def load_plugin(spec: str) -> tuple[Callable, dict]:
    """The callable named by "module:function" and its source record; the working directory is searched first."""
    module_name, _, attribute = spec.partition(":")
    cwd = str(Path.cwd())
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    importlib.invalidate_caches()  # a module file written since the last import is seen
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise InputError(
            f"cannot import module {module_name!r} ({type(exc).__name__}: {exc}); it is looked up in the working "
            f"directory {cwd} first, then in the installed packages"
        ) from exc
    function = getattr(module, attribute, None)
    if function is None:
        raise InputError(
            f"module {module_name!r} ({getattr(module, '__file__', 'built in')}) has no attribute {attribute!r}"
        )
    if not callable(function):
        raise InputError(f"{spec} is not callable (it is a {type(function).__name__})")
    path = _source_file(function, module)
    return function, {"function": spec, "path": path, "sha256": hash_file(path) if path else None}


def _source_file(function: Callable, module) -> str | None:
    try:
        path = inspect.getsourcefile(function) or getattr(module, "__file__", None)
    except TypeError:  # a C function
        path = getattr(module, "__file__", None)
    return str(Path(path).resolve()) if path else None
