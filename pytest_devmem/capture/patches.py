"""Replacing a framework's functions and putting them back: what every capture's hooks share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Patches:
    """The attributes a capture replaced, so that `restore()` puts back exactly the originals, last first."""

    def __init__(self) -> None:
        self._originals: list[tuple[Any, str, Any]] = []

    def replace(self, owner: Any, attribute: str, make: Callable[[Any], Any]) -> None:
        """Set `owner.attribute` to `make(original)`."""
        original = getattr(owner, attribute)
        setattr(owner, attribute, make(original))
        self._originals.append((owner, attribute, original))

    def restore(self) -> None:
        while self._originals:
            owner, attribute, original = self._originals.pop()
            setattr(owner, attribute, original)
