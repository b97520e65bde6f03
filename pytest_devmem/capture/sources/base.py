"""The interface every measurement source implements, and the reading it returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ...json_fields import mapping, number, whole


@dataclass
class Reading:
    """What one source saw during one test.

    `peak_bytes_in_use` is the test's own peak: the highest bytes in use during the test above what
    was in use when it started (so a test's figure does not depend on which tests ran before it).
    """

    source: str
    available: bool
    note: str = ""
    unused: bool = False  # not available because this test did not use it (not a limitation of the machine)
    peak_bytes_in_use: int | None = None
    peak_bytes_reserved: int | None = None
    fragmentation: float | None = None
    figures: dict[str, int | float | str] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {"available": self.available}
        if self.unused:
            data["unused"] = True
        if self.note:
            data["note"] = self.note
        for key in ("peak_bytes_in_use", "peak_bytes_reserved", "fragmentation"):
            value = getattr(self, key)
            if value is not None:
                data[key] = value
        if self.figures:
            data["figures"] = dict(sorted(self.figures.items()))
        return data

    @classmethod
    def from_json(cls, source: str, data: dict[str, object]) -> Reading:
        return cls(
            source=source,
            available=bool(data.get("available")),
            note=str(data.get("note", "")),
            unused=bool(data.get("unused", False)),
            peak_bytes_in_use=whole(data, "peak_bytes_in_use"),
            peak_bytes_reserved=whole(data, "peak_bytes_reserved"),
            fragmentation=number(data, "fragmentation"),
            figures={
                name: value
                for name, value in (mapping(data, "figures") or {}).items()
                if isinstance(value, (int, float, str))  # a reading's figures: numbers and words
            },
        )


class Source(Protocol):
    """A measurement source. `start` and `stop` bracket one test and must be cheap."""

    name: str

    def start(self) -> None: ...

    def stop(self) -> Reading: ...

    def close(self) -> None: ...


def unavailable(source: str, note: str, *, unused: bool = False) -> Reading:
    """A reading from a source that did not measure, with the reason; `unused` when the test did not need it."""
    return Reading(source=source, available=False, note=note, unused=unused)
