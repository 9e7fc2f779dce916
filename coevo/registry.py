"""Named variants (objectives, co-evolvers, skill writers) chosen from config by name.

Variants are registry entries, never `if name == ...` chains (verl's `register_policy_loss`). A name
can be registered once; looking up an unknown name is an error that lists the known ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Registry:
    def __init__(self, what: str, name_attribute: str | None = None):
        """`what` names the variants in errors; registered classes get their name set on `name_attribute`."""
        self.what = what
        self.name_attribute = name_attribute
        self._entries: dict[str, Any] = {}

    def add(self, name: str, entry: Any) -> Any:
        if name in self._entries:
            raise ValueError(
                f"{self.what} {name!r} is already registered (by "
                f"{getattr(self._entries[name], '__qualname__', self._entries[name])})"
            )
        if self.name_attribute:
            setattr(entry, self.name_attribute, name)
        self._entries[name] = entry
        return entry

    def register(self, name: str) -> Callable[[type], type]:
        """Class decorator: `@REGISTRY.register("name")`."""
        return lambda cls: self.add(name, cls)

    def __getitem__(self, name: str) -> Any:
        try:
            return self._entries[name]
        except KeyError:
            raise ValueError(f"unknown {self.what} {name!r}; known: {self.names()}") from None

    def names(self) -> list[str]:
        return sorted(self._entries)
