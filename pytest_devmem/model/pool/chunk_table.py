"""The BFC pool's chunk table: its regions, every chunk in them, its free chunks in XLA's best-fit
order and the ids to reuse. One type, read and written by the pool (`bfc.py`), its inspector
(`inspect_bfc.py`) and the machine's fast loops, which run the pool's rules inline on these lists.

Chunks are numbered (ids reused once a chunk is merged away) and kept in lists indexed by id, the
columns `size`, `address`, `prev`, `next` (neighbours in the region; id 0 stands for none) and
`asked` (the bytes asked for; 0: free; -1, `NO_CHUNK`: no chunk), as XLA keeps chunks in a vector
indexed by ChunkHandle (xla/tsl/framework/bfc_allocator.h). List indexing is much cheaper than dicts
keyed by addresses, which, all multiples of 256, hash poorly.

XLA's bins hold free chunks ordered by (size, address), and the bins themselves are ordered by size,
so searching them from the request's bin up finds the smallest free chunk at least as large as the
request, the lowest address among equals: the first in one list of all free chunks ordered the same
way. `free` holds each free chunk as one int, its key: size << SIZE_SHIFT | address << CHUNK_BITS | id
(an int compares in C, a tuple does not), so best fit is one bisect and the largest free chunk is
the last key. Insertion into a sorted list moves memory, but pools rarely hold more than a few
thousand free chunks and the move runs in C; it measured faster here than per-bin lists or heaps.

A loop that runs the table inline may bind its lists to local names; where the pool replaces the
table (a compacting pool moving its buffers), the loop reads `pool.table` again.
"""

from __future__ import annotations

from bisect import bisect_left, insort

from ...errors import DeviceError

MIN_ALLOCATION_BITS = 8
MIN_ALLOCATION_SIZE = 1 << MIN_ALLOCATION_BITS  # 256 bytes
NUM_BINS = 21
ADDRESS_BITS = 64
ADDRESS_MASK = (1 << ADDRESS_BITS) - 1
CHUNK_BITS = 32
CHUNK_MASK = (1 << CHUNK_BITS) - 1
SIZE_SHIFT = ADDRESS_BITS + CHUNK_BITS
"""A free chunk's key is size << SIZE_SHIFT | address << CHUNK_BITS | id: ordered by size, then address."""
NO_CHUNK = -1
"""The bytes asked for of chunk id 0 (the neighbour of a region's ends) and of ids not in use."""
CHUNK_BATCH = 64
"""Chunk ids the table grows by at once, so that a new chunk nearly always reuses a spare id."""


def bin_for_size(size: int) -> int:
    """The bin a chunk of `size` bytes belongs to: bin b holds [256*2^b, 256*2^(b+1)), bin 20 the rest."""
    b = (size >> MIN_ALLOCATION_BITS).bit_length() - 1
    return b if b < NUM_BINS - 1 else NUM_BINS - 1


def bin_lower_bound(b: int) -> int:
    """Smallest chunk size bin `b` holds."""
    return MIN_ALLOCATION_SIZE << b


class ChunkTable:
    """A BFC pool's regions and chunks (see the module's docstring for the layout).

    `regions`: start address -> size, in the order they were taken; `first`: region start -> id of
    its first chunk; the columns by chunk id; `spare`: ids of no chunk, the next new chunk's last;
    `free`: the free chunks' keys, sorted (the pool's bins, in one list); `in_use`: the address of each chunk in use (its handle in
    a plain BFC pool) -> its id.
    """

    __slots__ = ("name", "regions", "first", "size", "address", "prev", "next", "asked", "spare", "free", "in_use")

    def __init__(self, name: str, regions: dict[int, int] | None = None) -> None:
        """An empty table over `regions` (none by default): no chunk yet, not even a region's first.
        `name`: the device's, for errors."""
        self.name = name
        self.regions: dict[int, int] = {} if regions is None else regions
        self.first: dict[int, int] = {}
        self.size: list[int] = [0]  # id 0 is no chunk
        self.address: list[int] = [0]
        self.prev: list[int] = [0]
        self.next: list[int] = [0]
        self.asked: list[int] = [NO_CHUNK]
        self.spare: list[int] = []
        self.free: list[int] = []
        self.in_use: dict[int, int] = {}

    def copy(self) -> ChunkTable:
        """A table that shares nothing mutable with this one."""
        twin = object.__new__(ChunkTable)  # taken every so many events of a replay: no empty lists made first
        twin.name, twin.regions, twin.first = self.name, self.regions.copy(), self.first.copy()
        twin.size, twin.address, twin.prev = self.size.copy(), self.address.copy(), self.prev.copy()
        twin.next, twin.asked, twin.spare = self.next.copy(), self.asked.copy(), self.spare.copy()
        twin.free, twin.in_use = self.free.copy(), self.in_use.copy()
        return twin

    def columns(self) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
        """The columns by chunk id: sizes, addresses, previous and next ids, bytes asked."""
        return self.size, self.address, self.prev, self.next, self.asked

    def set_columns(self, columns: list[list[int]], spare: list[int], free: list[int]) -> None:
        """Take columns, spare ids and free keys made outside (as `columns`, `spare` and `free` give
        them): a loop that ran the pool's rules elsewhere hands its chunks back. The regions and the
        chunks in use by address (`in_use`) stay as they are."""
        self.size, self.address, self.prev, self.next, self.asked = columns
        self.spare = spare
        self.free = free

    # -- chunks ----------------------------------------------------------------------------

    def new_chunk(self, size: int, address: int, previous: int, following: int, asked: int) -> int:
        """A new chunk's id: one merged away, or one of a batch the table grows by when none is."""
        spare = self.spare
        if not spare:
            first = len(self.size)
            if first + CHUNK_BATCH - 1 > CHUNK_MASK:  # a free chunk's key holds its id in CHUNK_BITS
                raise DeviceError(f"{self.name}: more than {CHUNK_MASK} chunks in one pool")
            for column in (self.size, self.address, self.prev, self.next):
                column.extend([0] * CHUNK_BATCH)
            self.asked.extend([NO_CHUNK] * CHUNK_BATCH)
            spare.extend(range(first + CHUNK_BATCH - 1, first - 1, -1))  # the lowest id first
        chunk = spare.pop()
        self.size[chunk], self.address[chunk], self.prev[chunk], self.next[chunk], self.asked[chunk] = (
            size,
            address,
            previous,
            following,
            asked,
        )
        return chunk

    def drop(self, chunk: int) -> None:
        """Forget chunk `chunk` (merged into a neighbour, or its region gone); its id is reused."""
        self.asked[chunk] = NO_CHUNK
        self.spare.append(chunk)

    def merge(self, keep: int, gone: int) -> None:
        """Chunk `gone` merged into `keep`, the chunk right before it (both out of the free list);
        `gone`'s id is reused."""
        self.size[keep] += self.size[gone]
        after = self.next[keep] = self.next[gone]
        if after:
            self.prev[after] = keep
        self.asked[gone] = NO_CHUNK
        self.spare.append(gone)

    def link_free(self, chunk: int) -> None:
        """Put a free chunk into the free list, in order."""
        insort(self.free, self.size[chunk] << SIZE_SHIFT | self.address[chunk] << CHUNK_BITS | chunk)

    def unlink_free(self, chunk: int) -> None:
        """Take a free chunk out of the free list."""
        free = self.free
        del free[bisect_left(free, self.size[chunk] << SIZE_SHIFT | self.address[chunk] << CHUNK_BITS | chunk)]

    # -- reading it ------------------------------------------------------------------------

    def largest_free_block(self) -> int:
        """The size of the largest free chunk; 0 when none is free."""
        free = self.free
        return free[-1] >> SIZE_SHIFT if free else 0

    def free_chunks(self) -> list[tuple[int, int]]:
        """(size, address) of every free chunk, in XLA's best-fit order."""
        return [(key >> SIZE_SHIFT, key >> CHUNK_BITS & ADDRESS_MASK) for key in self.free]

    def chunks(self) -> list[tuple[int, int, int, bool, int]]:
        """Every chunk as (region start, address, size, in use, requested bytes), by address within region."""
        result = []
        size_of, address_of, next_of, asked, first = self.size, self.address, self.next, self.asked, self.first
        for start in self.regions:
            chunk = first[start]
            while chunk:
                requested = asked[chunk]
                result.append((start, address_of[chunk], size_of[chunk], requested > 0, max(requested, 0)))
                chunk = next_of[chunk]
        return result

    def free_regions(self) -> list[tuple[int, int]]:
        """(start, size) of every region that is one free chunk."""
        first, size_of, asked = self.first, self.size, self.asked
        return [
            (start, size)
            for start, size in self.regions.items()
            if not asked[first[start]] and size_of[first[start]] == size
        ]
