"""What the fixtures shared by several tests allocated while the recorder was paused for them: per
fixture (the pause's owner), each framework's allocator that allocated inside and each buffer it
still holds of that, in the order they were allocated; and the target compiler's entries the
fixture needed. The recorder keeps one (`TraceRecorder.fixtures`) and opens and closes an owner
around each such pause; the captures note what they see (live, or read after the window from its
time); the plugin carries it to every test that uses the fixture (plugin/shared_fixtures.py). No
pytest here."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any

Started = list[tuple[str, str, int]]
"""(source, device, bytes) in the order allocated: a buffer a fixture keeps (the bytes it holds), or
where none is kept, the allocator it started (0 bytes), once."""


class FixtureNotes:
    """One window's notes, by owner; `now` is the window's clock (seconds since it opened)."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._lock = threading.Lock()
        self.noting = False  # an owner's pause is open in an open window: `note` what allocates
        self._owners: list[tuple[object, float]] = []  # the owners open now, innermost last, with when they opened
        self._owned: list[tuple[float, float, object]] = []  # (from, to, owner) of each owner's pause
        # (when, owner, source, device, bytes, still held: a weak reference to the value that holds
        # them while its owner's pause is open, then whether it lived when it closed; or whether
        # nothing freed them inside a pause)
        self._noted: list[tuple[float, object, str, str, int, Any]] = []
        # (id of the owner, id of a value) -> (the value's weak reference: noted already, where it still
        # names that value; the holders of what it holds)
        self._noted_values: dict[tuple[int, int], tuple[Any, Any]] = {}
        # owner -> the compiler entries it needed, in order: a program's key, or an array shard's (shape, dtype)
        self._entries: dict[object, dict[Any, None]] = {}

    def clear(self) -> None:
        """A new window: nothing noted."""
        with self._lock:
            self._owners, self._owned, self._noted, self._noted_values, self._entries = [], [], [], {}, {}
            self.noting = False

    def open(self, owner: object, when: float) -> None:
        with self._lock:
            self._owners.append((owner, when))
            self.noting = True

    def close(self, owner: object, when: float) -> None:
        """`owner`'s pause ended at `when` (the innermost open one, or nothing happens): what it
        keeps is what lives now, whatever a test does with it later (donates it, deletes it)."""
        with self._lock:
            if self._owners and self._owners[-1][0] is owner:
                self._owned.append((self._owners.pop()[1], when, owner))
                self.noting = bool(self._owners)
                self._noted = [
                    (*noted[:5], noted[5]()) if noted[1] is owner and callable(noted[5]) else noted
                    for noted in self._noted
                ]

    def end(self, when: float) -> None:
        """The window closed at `when`: the pauses still open lasted to it."""
        with self._lock:
            self._owned.extend((began, when, owner) for owner, began in self._owners)
            self._owners, self.noting = [], False

    def note(
        self, source: str, value: Any, shards: Iterable[tuple[str, int]], deleted: Callable[[Any], bool] | None = None
    ) -> None:
        """`source` allocated `value`'s `shards` (device, bytes) inside the innermost owner's pause
        open now: its allocator on each of those devices started there, and holds the bytes where
        `value` still lives when the pause ends (a weak reference to it is kept until then), and is
        not `deleted` (its buffers given to another: a donated JAX array). A value noted again adds
        nothing; a new value at the address of one that died is another value
        (`jax.random.normal(key, shape) * 0.02` frees the first array before the second is made)."""
        with self._lock:
            if not self._owners:
                return
            owner = self._owners[-1][0]
            if self._seen(owner, value) is not None:
                return
            alive: Any = True  # no weak reference to it: held while the window lasts
            try:
                reference: Any = weakref.ref(value)
                alive = _Holders(reference, deleted)
            except TypeError:
                reference = True
            self._noted_values[id(owner), id(value)] = (reference, alive)
            now = self._now()
            self._noted.extend((now, owner, source, device, size, alive) for device, size in shards)

    def share(self, value: Any, holder: Any) -> bool:
        """`value` holds buffers `holder` held (a donated run's aliased output, a put that kept a shard
        in place): where `holder` was noted inside the innermost owner's pause open now, they are kept
        while either lives; False where it was not (they are whoever made them's, or no fixture's)."""
        with self._lock:
            if not self._owners:
                return False
            owner = self._owners[-1][0]
            holders = self._seen(owner, holder)
            if holders is None:
                return False
            if isinstance(holders, _Holders):
                try:
                    reference = weakref.ref(value)
                except TypeError:
                    return True
                holders.references.append(reference)
                self._noted_values[id(owner), id(value)] = (reference, holders)
            return True

    def _seen(self, owner: object, value: Any) -> Any:
        """The holders of what `value` holds, where `owner`'s pause noted it; None where it did not
        (a new value at the address of one that died is another value)."""
        seen = self._noted_values.get((id(owner), id(value)))
        if seen is None or not (seen[0] is True or seen[0]() is value):
            return None
        return seen[1]

    def note_at(self, time: float, source: str, device: str, size: int, kept: bool) -> None:
        """`note`, for an allocation of `size` bytes at `time` (on the window's clock) read after the
        window, `kept` where nothing freed it inside a pause: the owner is that of the innermost
        owner's pause that spans it."""
        with self._lock:
            spans = [span for span in self._owned if span[0] <= time <= span[1]]
            if spans:
                self._noted.append((time, max(spans, key=lambda span: span[0])[2], source, device, size, kept))

    def note_entry(self, key: Any) -> None:
        """The innermost owner's pause open now needed the target compiler's entry `key` (a program
        it ran, by its cache key, or an array shard it sized, by (shape, dtype))."""
        with self._lock:
            if self._owners:
                self._entries.setdefault(self._owners[-1][0], {})[key] = None

    def started_by(self) -> dict[object, Started]:
        """Per owner, in the order allocated inside its pause: each buffer still held of what was
        allocated there (its own entry: a pool serves each as its own chunk), and each allocator
        whose first allocation there is not held (0 bytes, where it started)."""
        with self._lock:
            started: dict[object, Started] = {}
            for _, owner, source, device, size, alive in sorted(self._noted, key=lambda noted: noted[0]):
                entries = started.setdefault(owner, [])
                if alive if isinstance(alive, bool) else alive():
                    entries.append((source, device, size))
                elif all((source, device) != (s, d) for s, d, _ in entries):
                    entries.append((source, device, 0))
            return started

    def entries_by(self) -> dict[object, list[Any]]:
        """Per owner: the compiler entries `note_entry` noted, in order."""
        with self._lock:
            return {owner: list(keys) for owner, keys in self._entries.items()}


class _Holders:
    """The values that hold what a note holds: kept while any of them lives and is not `deleted`."""

    __slots__ = ("deleted", "references")

    def __init__(self, reference: Any, deleted: Callable[[Any], bool] | None) -> None:
        self.references, self.deleted = [reference], deleted

    def __call__(self) -> bool:
        deleted = self.deleted
        return any((held := r()) is not None and not (deleted and deleted(held)) for r in self.references)
