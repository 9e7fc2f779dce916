"""coevo: co-evolutionary RL of language models. The Python API (coevo/api.py) is re-exported here:
`coevo.train`, `coevo.evaluate`, `coevo.lineage`, imported on first use so that
`import coevo` stays light (the CLI imports the package for every command)."""

_API = ("train", "evaluate", "lineage")  # `coevo.config` is the config module; the API's config() is coevo.api.config


def __getattr__(name: str):
    if name in _API:
        from coevo import api

        return getattr(api, name)
    raise AttributeError(f"module 'coevo' has no attribute {name!r}")


__all__ = list(_API)
