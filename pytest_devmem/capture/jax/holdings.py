"""Which JAX arrays hold which traced allocations, known from the Python objects alone.

An array holds the allocations of its buffers (one per shard) from the moment the capture sees it
made; a weak reference to it frees them when the last array holding them is collected, and
`Array.delete` frees them at once (for every array sharing them: their buffers are deleted too). Two arrays hold the same allocations where JAX put one onto the
placement it already had (the buffers are reused, not copied); a donated array hands its
allocations to the output XLA aliased its buffers to. Where JAX kept some of an array's shards in
place and copied the others (replicating a one-device array: its own device keeps its buffer), the
new array holds those shards' allocations beside its own, each counted once more in `shared`, and
a shared allocation is freed when the last of its holders is gone.

No lock of its own: each step is one set operation or works on an array the caller holds (its
weak reference cannot fire meanwhile), and the recorder locks its own state. Weak-reference
callbacks may run in the middle of any of this, from the garbage collector.

An array's owner is found among its weak references (`weakref.getweakrefs`, CPython's list of
them), so the step every run takes adds an owner to one set and its callback takes it out, with
no look-up by array on the way.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from threading import get_ident
from typing import Any

from ..recorder import FREE_MARK, TraceRecorder

getweakrefs = weakref.getweakrefs


class Held:
    """The allocations behind one set of device buffers, and how many live arrays hold them."""

    __slots__ = ("ids", "holders")
    ids: list[int] | tuple[int, ...]
    holders: int


def new_held(ids: list[int] | tuple[int, ...], holders: int = 0) -> Held:
    """A Held (made without an `__init__` call: a run's output makes one, so it is half the cost)."""
    held = Held()
    held.ids, held.holders = ids, holders
    return held


class Owner(weakref.ref):
    """A weak reference from one array to the allocations it holds; hashed by identity (a weak
    reference's own hash is its array's, and JAX arrays have none), so a set keeps it alive."""

    __slots__ = ("held",)
    held: Held | int | None  # an int: the one id of a run's output, not shared yet (a Held made when needed)
    __hash__ = object.__hash__
    __eq__ = object.__eq__


def held_of(owner: Owner) -> Held | None:
    """What the owner's array holds, as a Held (made now where a run's output kept its id alone)."""
    held = owner.held
    if type(held) is int:
        held = owner.held = new_held((held,), 1)
    return held  # type: ignore[return-value]


class Holdings:
    """The live arrays the capture saw made, each with what it holds."""

    def __init__(self, recorder: TraceRecorder, on_error: Callable[[Exception], None]) -> None:
        self._recorder = recorder
        self._on_error = on_error
        self.owners: set[Owner] = set()  # the owners of live arrays: held here, so their callbacks run
        self.shared: dict[int, int] = {}  # an allocation in several Helds: how many beside the first
        self.collected_callback = self._collected_callback()  # one function for every weak reference

    def owner_of(self, array: Any) -> Owner | None:
        """The owner this capture gave `array`, found among its weak references; None if none."""
        callback = self.collected_callback
        for reference in getweakrefs(array):
            if type(reference) is Owner and reference.__callback__ is callback and reference.held is not None:
                return reference
        return None

    def held_by(self, array: Any) -> Held | None:
        """What `array` holds; None if the capture never saw it made (or it is gone)."""
        owner = self.owner_of(array)
        return held_of(owner) if owner is not None else None

    def hold(self, array: Any, held: Held) -> None:
        """`array` now holds `held` (new allocations, or allocations it shares or took over)."""
        owner = Owner(array, self.collected_callback)
        owner.held = held
        held.holders += 1
        self.owners.add(owner)

    def hold_new(self, array: Any, ids: list[int]) -> None:
        """`array` holds allocations just made for it."""
        owner = Owner(array, self.collected_callback)
        owner.held = new_held(ids, 1)
        self.owners.add(owner)

    def hold_sharing(self, array: Any, shared: list[int], ids: list[int]) -> None:
        """`array` holds allocations just made for it (`ids`) and allocations another array holds
        too (`shared`: shards JAX kept in place)."""
        for buffer_id in shared:
            self.shared[buffer_id] = self.shared.get(buffer_id, 0) + 1
        self.hold_new(array, [*shared, *ids])

    def hand_over(self, donor: Any) -> Held | None:
        """A donated array's allocations, taken from it for the output that reuses its buffers."""
        owner = self.owner_of(donor)
        if owner is None:
            return None
        self.owners.discard(owner)
        held, owner.held = held_of(owner), None
        assert held is not None
        held.holders -= 1
        return held

    def release(self, array: Any) -> None:
        """`array` holds nothing any more (deleted, or donated to no output): free what only it held."""
        owner = self.owner_of(array)
        if owner is not None:
            self._drop(owner)

    def delete(self, array: Any) -> None:
        """`array` was deleted: its buffers are gone, for every array that shared them."""
        owner = self.owner_of(array)
        if owner is None:
            return
        held = held_of(owner)
        assert held is not None
        self._drop(owner)
        ids, held.ids = held.ids, []
        free = self._recorder.free_later
        for buffer_id in ids:
            free(buffer_id)  # already freed where `array` was their last holder: ignored

    def _collected_callback(self) -> Callable[[Owner], None]:
        """What runs when an array is gone: the `_drop` every run's output makes, inlined, its free
        added as the recorder's compact record, with everything bound here. It records in or out of a
        window: the recorder drops what no window recorded when the next one opens."""
        discard, recorder, on_error, shared = self.owners.discard, self._recorder, self._on_error, self.shared
        extend, clock = recorder.pending_extend, recorder.clock

        def collected(owner: Owner) -> None:
            try:
                discard(owner)
                held = owner.held
                if type(held) is int:  # a run's output, its id its own: the common case
                    extend((FREE_MARK, held, clock(), get_ident()))
                elif isinstance(held, Held):
                    owner.held = None
                    held.holders -= 1
                    if held.holders <= 0:
                        now, ident = clock(), get_ident()
                        for buffer_id in held.ids:
                            if not shared or not _still_held(shared, buffer_id):
                                extend((FREE_MARK, buffer_id, now, ident))
            except Exception as exc:  # runs inside the garbage collector: never raise there
                on_error(exc)

        return collected

    def _drop(self, owner: Owner) -> None:
        self.owners.discard(owner)
        held, owner.held = held_of(owner), None
        if held is None:
            return
        held.holders -= 1
        if held.holders <= 0:
            free, shared = self._recorder.free_later, self.shared
            for buffer_id in held.ids:
                if not shared or not _still_held(shared, buffer_id):
                    free(buffer_id)


def _still_held(shared: dict[int, int], buffer_id: int) -> bool:
    """Whether another Held still holds the allocation one Held let go of (one fewer does now)."""
    others = shared.pop(buffer_id, 0)  # one step each: the garbage collector may run this meanwhile
    if others > 1:
        shared[buffer_id] = others - 1
    return others > 0
