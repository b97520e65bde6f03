"""Where a JAX array's bytes live: one (device, bytes) pair per addressable shard, read from its
shape, dtype and sharding alone, so nothing waits for the device.

A sharding places one shard on each of its addressable devices (`addressable_devices_indices_map`);
a replicated sharding puts a full copy on each. A shard holds its slice of the global shape at the
dtype's item size: what XLA allocates for a dense array on CPU and GPU, the same figure as
`on_device_size_in_bytes()` without asking the device for it. A TPU lays arrays out in tiles, so
under a TPU target each shard's size is what the TPU compiler states for that shard's shape and
dtype (`ShardSizes(size_of=...)`, capture/jax/tpu_compile.py), never a padding rule written here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

ShardSize = Callable[[tuple[int, ...], Any], "int | None"]
"""(shard shape, dtype) -> the bytes a target's compiler lays that shard out in; None: unknown."""

Shards = tuple[tuple[str, int], ...]
"""(device, bytes) per addressable shard, in the sharding's device order."""
Asked = tuple[tuple[tuple[int, ...], str], ...]
"""(shard shape, dtype) of each shard a target's compiler sized."""

CACHE_LIMIT = 4096
"""Entries kept by identity before the cache starts again: an executable's outputs reuse their
aval and sharding objects run after run, while a transfer makes new ones."""


def device_label(device: Any) -> str:
    """A device as the trace names it: its platform and the id JAX gives it ("cpu:0", "gpu:1")."""
    return f"{device.platform}:{device.id}"


def shards_of(
    shape: tuple[int, ...], itemsize: int, sharding: Any, size_of: ShardSize | None = None, dtype: Any = None
) -> Shards:
    """(device, bytes) of each addressable shard of an array of `shape` placed by `sharding`; with
    `size_of`, each shard's bytes as it says (where it knows), else dense."""
    shape = tuple(shape)
    shards = []
    for device, index in sharding.addressable_devices_indices_map(shape).items():
        index = tuple(index or ())
        extents = tuple(_extent(part, size) for part, size in zip(index, shape)) + shape[len(index) :]
        sized = size_of(extents, dtype) if size_of is not None else None
        shards.append((device_label(device), sized if sized is not None else math.prod(extents) * itemsize))
    return tuple(shards)


def put_took_over(source: Any, copy: Any, donate: Any) -> bool:
    """Whether a put with `copy` semantics took `source`'s buffers over (`donate`, JAX's
    `ArrayCopySemantics.DONATE_INPUT`: JAX deleted it)."""
    return bool(source.is_deleted()) and copy is not None and copy == donate


def kept_by_put(source: Any, result: Any, copy: Any, donate: Any, always_copy: Any) -> frozenset[str]:
    """The devices on which a put of `source` (None: a host value) with `copy` semantics kept its
    shard as `result`'s (`kept_in_place`): none where it copies (`always_copy`), or where `source`
    was deleted and not `donate`d to it."""
    if source is None or not (put_took_over(source, copy, donate) or not source.is_deleted() and copy != always_copy):
        return frozenset()
    try:
        return kept_in_place(source, result)
    except Exception:  # a sharding this cannot read: every shard a copy, as the transfer it may be
        return frozenset()


def kept_in_place(source: Any, result: Any) -> frozenset[str]:
    """The devices where `result`'s shard is the slice of the logical array that `source` already
    holds on that device: JAX puts that buffer in place, not a copy (jax/_src/array.py: a fully
    replicated target of a one-device array gets the array itself as each shard,
    `shard_device_array`, which `batched_device_put` keeps on its own device; a resharded array takes
    "a candidate buffer already on the correct device" holding the same slice,
    `shard_sharded_device_array_slow_path`). The slices compared as JAX compares them
    (`hashed_index`: each slice's start, stop and step)."""
    shape = tuple(result.shape)
    held = {
        device_label(device): _slices(index)
        for device, index in source.sharding.addressable_devices_indices_map(shape).items()
    }
    return frozenset(
        label
        for device, index in result.sharding.addressable_devices_indices_map(shape).items()
        if held.get(label := device_label(device)) == _slices(index)
    )


def _slices(index: Any) -> tuple[Any, ...]:
    return tuple((part.start, part.stop, part.step) if isinstance(part, slice) else part for part in index or ())


def _extent(part: Any, size: int) -> int:
    if isinstance(part, slice):
        return len(range(*part.indices(size)))
    return 1  # an integer index takes one element of that dimension


class ShardSizes:
    """Shards of arrays, remembered by the identity of their aval and sharding objects; with
    `size_of`, sized as a target's compiler lays them out."""

    def __init__(self, size_of: ShardSize | None = None) -> None:
        self.size_of = size_of
        self._known: dict[tuple[int, int], tuple[Any, Any, Shards, Asked]] = {}
        self.asked: set[tuple[tuple[int, ...], str]] = set()
        """(shard shape, dtype) of every shard `size_of` sized since it was last cleared, whether it
        asked `size_of` then or an earlier array had: what a test's sizes came from."""

    def of(self, array: Any) -> Shards:
        """The shards of a JAX array (an ArrayImpl), from its aval and sharding."""
        aval, sharding = array.aval, array.sharding
        key = (id(aval), id(sharding))
        known = self._known.get(key)
        if known is not None and known[0] is aval and known[1] is sharding:
            if known[3]:
                self.asked.update(known[3])
            return known[2]
        asked: list[tuple[tuple[int, ...], str]] = []
        shards = shards_of(aval.shape, aval.dtype.itemsize, sharding, self._asking(asked), aval.dtype)
        if len(self._known) >= CACHE_LIMIT:
            self._known.clear()
        self._known[key] = (aval, sharding, shards, tuple(asked))  # held: the ids stay theirs while cached
        self.asked.update(asked)
        return shards

    def copied(self, value: Any, sharding: Any) -> Shards:
        """A value a run copies to devices under `sharding` (a NumPy array, or a JAX array not on
        them): each shard sized as a put of its shape and dtype is, in the target's layout.
        The dtype is JAX's for the value (`jax.dtypes.canonicalize_dtype`: float64 without x64 is
        float32), which is what the copy holds."""
        shape = tuple(getattr(value, "shape", ()))
        if not math.prod(shape):
            return ()
        from jax import dtypes  # JAX: imported only where it runs

        dtype = dtypes.canonicalize_dtype(value.dtype)
        asked: list[tuple[tuple[int, ...], str]] = []
        shards = shards_of(shape, dtype.itemsize, sharding, self._asking(asked), dtype)
        self.asked.update(asked)
        return shards

    def _asking(self, asked: list[tuple[tuple[int, ...], str]]) -> ShardSize | None:
        """`size_of`, noting each (shard shape, dtype) it is asked in `asked`."""
        target = self.size_of
        if target is None:
            return None

        def size_of(extents: tuple[int, ...], dtype: Any) -> int | None:
            asked.append((tuple(extents), str(dtype)))
            return target(extents, dtype)

        return size_of

    def asked_of(self, array: Any) -> Asked:
        """The (shard shape, dtype) pairs `size_of` sized for `array`'s shards (after `of`): what a
        later run with the same output asks again, though it is not read again (a step's)."""
        known = self._known.get((id(array.aval), id(array.sharding)))
        return known[3] if known is not None else ()
