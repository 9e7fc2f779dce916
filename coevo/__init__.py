"""coevo: co-evolutionary RL of language models. The Python API (coevo/api.py) is re-exported here:
`coevo.train`, `coevo.evaluate`, `coevo.lineage`, imported on first use (a module `__getattr__`) so
that `import coevo` stays light (the CLI imports the package for every command). No submodule has
one of those names (the held-out evaluation is coevo/evaluation.py)."""

_API = ("train", "evaluate", "lineage")


def __getattr__(name: str):
    if name in _API:
        from coevo import api

        return getattr(api, name)
    raise AttributeError(f"module 'coevo' has no attribute {name!r}")


__all__ = list(_API)
