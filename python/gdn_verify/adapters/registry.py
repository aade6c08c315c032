"""The adapters by --adapter name, after FLA's `BackendRegistry`: classes registered once, looked up
without importing any library, instantiated only when their library is installed."""

from __future__ import annotations

from collections.abc import Iterable

from gdn_verify.adapters.base import Adapter, AdapterError


class Registry:
    """Adapter classes in registration order (the order --adapter's help and errors list them)."""

    def __init__(self, classes: Iterable[type[Adapter]] = ()) -> None:
        self._classes: dict[str, type[Adapter]] = {}
        for cls in classes:
            self.register(cls)

    def register(self, cls: type[Adapter]) -> None:
        if cls.name in self._classes:
            raise ValueError(f"adapter name '{cls.name}' is registered twice: give each adapter class its own name")
        self._classes[cls.name] = cls

    def names(self) -> list[str]:
        return list(self._classes)

    def classes(self) -> list[type[Adapter]]:
        return list(self._classes.values())

    def __contains__(self, name: object) -> bool:
        return name in self._classes

    def get(self, name: str) -> type[Adapter]:
        """The class registered as `name`; AdapterError naming the known ones."""
        if name not in self._classes:
            raise AdapterError(f"unknown --adapter '{name}': use {', '.join(self._classes)}")
        return self._classes[name]

    def load(self, name: str) -> Adapter:
        """An instance of the adapter `name`; AdapterError naming the pip package when its library is missing."""
        cls = self.get(name)
        cls.check_available()
        return cls()
