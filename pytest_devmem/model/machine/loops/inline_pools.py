"""What the inline BFC loops share: a pool run inline, and a compacting pool among them.

An inline loop keeps each buffer as (address, event, chunk id, size, rounded) and runs the pool's
chunk table itself; the pool's own maps of its buffers are left stale while it runs and made again
(`state.sync`, through the pool's `set_buffers`) before anything reads them: a map, a checkpoint, the end. A plain BFC pool's handle is
the buffer's address. A compacting pool (`CompactingPool`, the `compact` regime) moves buffers when
an allocation would otherwise fail for fragmentation and hands out handles of its own; here each
buffer's handle is its address as well (its maps are made so), and when the pool moved its buffers
every buffer's address and chunk id are read again (so no two buffers share a handle), and the loop
takes the pool's new chunk table.
"""

from __future__ import annotations

from typing import Any

from ....errors import OutOfMemoryError
from ...pool import BFCPool
from ...pool.compacting import CompactingPool
from ..state import sync

INLINE_POOLS = (BFCPool, CompactingPool)
"""The pools an inline loop can run (exactly these types, no other subclass)."""


class MovedThenFailed(Exception):
    """A compacting pool moved its buffers and still could not serve an allocation: the single-lane
    loop, whose device counters are its pool's, hands the trace to the event loop, afresh."""


def allocate(pool: Any, size: int, handles: dict[int, tuple[int, ...]]) -> tuple[int, int, bool]:
    """(address, chunk id, whether buffers moved) of an allocation through the pool's methods (it
    grows, moves buffers, or fails with OutOfMemoryError); after a move `handles` hold each buffer's
    new address and chunk id."""
    if type(pool) is not CompactingPool:
        address = pool.alloc(size)
        return address, pool.table.in_use[address], False
    try:
        address = BFCPool.alloc(pool, size)  # what CompactingPool.alloc tries first; it moves nothing
        return address, pool.table.in_use[address], False
    except OutOfMemoryError:
        pass
    sync(pool, handles)
    before = pool.compactions
    try:
        handle = pool.alloc(size)  # tries again (the same state, the same failure), then moves buffers
    finally:
        if pool.compactions != before:  # moved, whether it then served the allocation or not
            address_of, in_use = pool.address_of, pool.table.in_use
            for pointer, entry in handles.items():
                address = address_of(entry[0])
                handles[pointer] = (address, entry[1], in_use[address], entry[3], entry[4])
    address = pool.address_of(handle)
    return address, pool.table.in_use[address], pool.compactions != before


def compactions(pool: Any) -> int:
    """How often the pool moved its buffers so far (0 for a pool that never does)."""
    return getattr(pool, "compactions", 0)
