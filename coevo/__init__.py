"""coevo: co-evolutionary RL of language models. The Python API (coevo/api.py) is re-exported here:
`coevo.train`, `coevo.evaluate`, `coevo.lineage`, imported on first use so that `import coevo`
stays light (the CLI imports the package for every command).

`coevo.evaluate` is also the name of a submodule (the held-out evaluation); importing it would set
the package attribute to the module, so the three names are properties of the package's module
class: they always give the API functions, and the submodules stay reachable as
`from coevo.evaluate import ...` (sys.modules)."""

import sys
import types

_API = ("train", "evaluate", "lineage")


def _api_property(name: str) -> property:
    def get(module):
        from coevo import api

        return getattr(api, name)

    def set_(module, value):  # the import system setting a submodule of that name: kept in sys.modules only
        if not isinstance(value, types.ModuleType):
            raise AttributeError(f"coevo.{name} is the Python API's function; it cannot be replaced")

    return property(get, set_)


class _Package(types.ModuleType):
    train = _api_property("train")
    evaluate = _api_property("evaluate")
    lineage = _api_property("lineage")


sys.modules[__name__].__class__ = _Package

__all__ = list(_API)
