"""What every framework's capture offers the measurement: the seam a new framework plugs into; and
the replacing of a framework's functions, and putting them back, that every capture's hooks share
(`Patches`).

One capture per row of `model/framework_rules.RULES` that has a module: it is installed once the
module is imported (`install`: its hooks in place; False, with `note` saying why, where it cannot
trace), opens each test's window after the recorder's (`begin`), and takes its hooks out at the
end of the session (`uninstall`, safe to call twice). What a window yields differs by framework
(JAX's executables, TensorFlow's profile), so the measurement reads each capture's window by its
own type; the lifecycle is this one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class FrameworkCapture(Protocol):
    """One framework's allocation capture, as the measurement drives it."""

    installed: bool
    note: str

    def install(self) -> bool: ...

    def begin(self) -> None: ...

    def uninstall(self) -> None: ...


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
