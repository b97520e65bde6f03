"""A best-fit-with-coalescing pool that follows the rules of XLA's BFC allocator.

The rules (xla/tsl/framework/bfc_allocator.cc), re-implemented here:
  * requests round up to 256 bytes; a chunk of size s lives in bin min(floor(log2(s / 256)), 20);
  * best fit: the smallest free chunk that is large enough, the lowest address among equals;
  * a chunk is split when it is at least twice the request or would waste at least
    `max_internal_fragmentation` bytes (128 MiB by default), else handed out whole;
  * a freed chunk merges at once with its next neighbour, then its previous one, within its region;
  * regions come from the device (`Extend`): the whole limit at once when preallocating, else
    2 MiB doubling; the region size persists (`curr_region_allocation_bytes_`): a request bigger
    than it doubles it until it fits, and that doubling sticks for later regions; a region that
    needed no doubling doubles the size of the next one; a region is capped by what the limit
    leaves and backs off by x0.9 (at least 256 bytes a step) while the device refuses;
  * with garbage collection on (TensorFlow's default, never XLA's), wholly free regions go back
    to the device before an allocation fails, and only when that can make room
    (`DeallocateFreeRegions`).
  * XLA's BFC allocator never sets `bytes_reserved` (it counts memory reserved outside the pool,
    as cudaMallocAsync does): it stays 0 here too, and `pool_bytes` is what the pool holds.

The pool's regions and chunks are a `ChunkTable` (`chunk_table.py`, which says their layout, chosen
for replay speed in pure Python): the pool runs XLA's rules over it, its inspector (`inspect_bfc.py`)
reads it, and the machine's fast loops run the same rules inline on its lists.
"""

from __future__ import annotations

from bisect import bisect_left

from ...errors import DeviceError, InvalidFreeError, InvalidSettingError, OutOfMemoryError
from ...units import round_up
from ..device import Device
from .base import PoolCounters, checked_size
from .chunk_table import (  # the table's layout, read here and by the loops
    ADDRESS_MASK,
    CHUNK_MASK,
    MIN_ALLOCATION_SIZE,
    SIZE_SHIFT,
    ChunkTable,
)
from .inspect_bfc import check_invariants, memory_map
from .policy import Policy

XLA_POOL_GRANULE = 2 * 2**20
"""XLA sizes JAX's BFC pool at fraction x total (xla/pjrt/gpu/gpu_helpers.cc, CreateBFCAllocator) rounded
up to a multiple of 2 MiB: measured on an H200 (JAX 0.11.2, CUDA 13; cuMemGetInfo total 150,109,880,320
bytes), `memory_stats()["bytes_limit"]` was 746 MiB at fraction 0.0052 (744.41 MiB before rounding),
748 at 0.005217 (746.84), 1,446 at 0.0101 (1,445.87) and 107,368 at 0.75 (107,366.95)."""


def xla_pool_bytes(capacity: int, fraction: float) -> int:
    """The bytes of JAX's pool on a device of `capacity`: fraction x capacity, rounded up to 2 MiB as
    XLA does (XLA_POOL_GRANULE), never past the device itself."""
    return min(capacity, round_up(int(capacity * fraction), XLA_POOL_GRANULE))


INITIAL_GROWTH_REGION = 2 * 2**20  # 2 MiB, as XLA with allow_growth
DEFAULT_MAX_INTERNAL_FRAGMENTATION = 128 * 2**20
BACKOFF_FACTOR = 0.9


def rounded_bytes(nbytes: int) -> int:
    """The chunk size a request of `nbytes` needs: the next multiple of 256."""
    return (nbytes + MIN_ALLOCATION_SIZE - 1) & ~(MIN_ALLOCATION_SIZE - 1)


class BFCPool(PoolCounters):
    """BFC sub-allocator over regions taken from a device, under a prealloc, fraction or growth policy.

    Not thread-safe: one pool serves one framework or test thread, as in XLA each device has its own.
    """

    def __init__(
        self,
        device: Device,
        policy: Policy,
        *,
        release_free_regions: bool = False,
        max_internal_fragmentation: int = DEFAULT_MAX_INTERNAL_FRAGMENTATION,
        dump_on_oom: bool = False,
        bytes_limit: int | None = None,
    ) -> None:
        """`bytes_limit`, when given, replaces fraction x capacity (TensorFlow states its limit in bytes)."""
        if max_internal_fragmentation <= 0:
            raise InvalidSettingError(
                f"invalid max_internal_fragmentation {max_internal_fragmentation}: must be a positive number of bytes"
            )
        if bytes_limit is None:
            bytes_limit = xla_pool_bytes(device.capacity, policy.fraction)
        limit = max(0, bytes_limit) & ~(MIN_ALLOCATION_SIZE - 1)
        super().__init__(device, policy, limit)
        self.release_free_regions = release_free_regions
        self.max_internal_fragmentation = max_internal_fragmentation
        self.dump_on_oom = dump_on_oom
        self._clear_chunks()

    def _clear_chunks(self) -> None:
        """Empty chunk structures, as at construction: no region held yet."""
        limit = self.bytes_limit
        self._next_region_size = limit if self.policy.preallocates else min(limit, INITIAL_GROWTH_REGION)
        self.table = ChunkTable(self.device.name)  # its regions and chunks, read by the inspector and the fast loops

    # -- public interface ------------------------------------------------------------------

    def alloc(self, nbytes: int) -> int:
        if type(nbytes) is not int or nbytes <= 0:
            nbytes = checked_size(nbytes)
        rounded = (nbytes + 255) & ~255
        address = self._find_chunk(rounded, nbytes)
        if address:
            return address
        if self._extend(rounded):
            return self._find_chunk(rounded, nbytes)
        if self.release_free_regions and self._release_free_regions(rounded) and self._extend(rounded):
            return self._find_chunk(rounded, nbytes)
        raise self._oom(nbytes, rounded)

    def free(self, handle: int) -> None:
        table = self.table
        try:
            chunk = table.in_use.pop(handle, 0)
        except TypeError:  # an unhashable handle ([1], {}): never one of ours
            chunk = 0
        if not chunk:
            raise self._invalid_free(handle)
        self.num_frees += 1
        self.bytes_in_use -= table.size[chunk]
        self.requested_bytes_in_use -= table.asked[chunk]
        self._release(chunk)

    def _release(self, chunk: int) -> None:
        """Free chunk `chunk`: merge it with the next chunk, then into the previous one, if free."""
        table = self.table
        asked = table.asked
        asked[chunk] = 0
        following = table.next[chunk]
        if not asked[following]:
            table.unlink_free(following)
            table.merge(chunk, following)
        previous = table.prev[chunk]
        if not asked[previous]:
            table.unlink_free(previous)
            table.merge(previous, chunk)
            chunk = previous
        table.link_free(chunk)

    def best_fit(self, rounded: int) -> int:
        """The size of the free chunk an allocation of `rounded` bytes would take now, without taking
        it; 0 when none is large enough (the pool would have to grow)."""
        free = self.table.free
        i = bisect_left(free, rounded << SIZE_SHIFT)
        return free[i] >> SIZE_SHIFT if i < len(free) else 0

    def handed_out(self, rounded: int, chunk: int) -> int:
        """What a chunk of `chunk` bytes gives an allocation of `rounded`: the request where the
        chunk is split, else the whole chunk (the split rule of `_find_chunk`)."""
        return rounded if chunk >= 2 * rounded or chunk - rounded >= self.max_internal_fragmentation else chunk

    def preallocate(self) -> int:
        """Reserve the policy's first region now (JAX preallocates at start-up); return pool bytes."""
        if not self.table.regions and self.policy.preallocates and self.bytes_limit >= MIN_ALLOCATION_SIZE:
            self._extend(MIN_ALLOCATION_SIZE)
        return self.pool_bytes

    def trim(self) -> int:
        """Return wholly free regions to the device; the number of bytes given back."""
        before = self.pool_bytes
        self._release_free_regions()
        return before - self.pool_bytes

    def close(self) -> None:
        """Give every region back to the device. The pool is empty and reusable afterwards."""
        for start in list(self.table.regions):
            self.device.free(start)
        self._clear_chunks()
        self.bytes_in_use = self.requested_bytes_in_use = 0
        self.pool_bytes = 0

    def regions(self) -> list[tuple[int, int]]:
        """(start address, size) of each region held, in the order they were taken."""
        return list(self.table.regions.items())

    def handle_at(self, address: int) -> int:
        """The handle of the chunk in use at `address` (here the address itself; a pool that moves
        buffers hands out other handles)."""
        return address

    def allocated_size(self, handle: int) -> int:
        """Bytes the chunk at `handle` takes in the pool (the request rounded, or more when not split)."""
        chunk = self.table.in_use.get(handle) if isinstance(handle, int) else None
        if chunk is None:
            raise self._invalid_free(handle)
        return self.table.size[chunk]

    def size_of(self, handle: int) -> int:
        """Bytes the caller asked for when `handle` was allocated."""
        chunk = self.table.in_use.get(handle) if isinstance(handle, int) else None
        if chunk is None:
            raise self._invalid_free(handle)
        return self.table.asked[chunk]

    def set_buffers(self, chunks_by_address: dict[int, int]) -> None:
        """Take the map of chunks in use (address -> chunk id) made outside: a loop that ran this pool's
        chunk table inline hands its buffers back, each buffer's handle its address."""
        self.table.in_use = chunks_by_address

    # -- allocation ------------------------------------------------------------------------

    def _find_chunk(self, rounded: int, requested: int) -> int:
        """Take the best-fitting free chunk for `rounded` bytes, split it if worth it; its address,
        or 0 if none.

        Free chunks are sorted by (size, address), XLA's order, so the first at or after
        (rounded, 0) is the best fit.
        """
        table = self.table
        free = table.free
        i = bisect_left(free, rounded << SIZE_SHIFT)
        if i == len(free):
            return 0
        key = free.pop(i)
        chunk, size = key & CHUNK_MASK, key >> SIZE_SHIFT
        if size >= 2 * rounded or size - rounded >= self.max_internal_fragmentation:
            self._split(chunk, rounded)
            size = rounded
        address = table.address[chunk]
        table.asked[chunk] = requested
        table.in_use[address] = chunk
        self.num_allocs += 1
        in_use = self.bytes_in_use + size
        self.bytes_in_use = in_use
        if in_use > self.peak_bytes_in_use:
            self.peak_bytes_in_use = in_use
            self.fragmentation_at_peak = self._fragmentation()
        asked = self.requested_bytes_in_use + requested
        self.requested_bytes_in_use = asked
        if asked > self.peak_requested_bytes_in_use:
            self.peak_requested_bytes_in_use = asked
        if size > self.largest_alloc_size:
            self.largest_alloc_size = size
        return address

    def _split(self, chunk: int, size: int) -> None:
        """Cut free chunk `chunk` (out of the free list) to `size` bytes; the rest becomes a free chunk after it."""
        table = self.table
        after = table.next[chunk]
        rest = table.new_chunk(table.size[chunk] - size, table.address[chunk] + size, chunk, after, 0)
        table.size[chunk] = size
        table.next[chunk] = rest
        if after:
            table.prev[after] = rest
        table.link_free(rest)

    def _extend(self, rounded: int) -> bool:
        """Take a new region from the device big enough for `rounded`; False if the limit or device refuses.

        XLA's `BFCAllocator::Extend` (xla/tsl/framework/bfc_allocator.cc): the region size doubles
        in place until the request fits, so the increase persists for later regions.
        """
        available = (self.bytes_limit - self.pool_bytes) & ~(MIN_ALLOCATION_SIZE - 1)
        if rounded > available:
            return False
        increased = False
        while rounded > self._next_region_size:
            self._next_region_size *= 2
            increased = True
        region_size = min(self._next_region_size, available)
        start = self.device.try_allocate(region_size)
        while start is None:
            smaller = rounded_bytes(int(region_size * BACKOFF_FACTOR))
            if smaller >= region_size:  # small sizes round back up: XLA forces a 256-byte step
                smaller = region_size - MIN_ALLOCATION_SIZE
            if smaller < rounded:
                return False
            region_size = smaller
            start = self.device.try_allocate(region_size)
        if not increased:
            self._next_region_size *= 2
        if start + region_size > ADDRESS_MASK:  # a free chunk's key holds its address in ADDRESS_BITS
            self.device.free(start)
            raise DeviceError(
                f"{self.device.name} handed out {start:#x}+{region_size}: beyond the 64-bit address space this pool orders chunks by"
            )
        table = self.table
        table.regions[start] = region_size
        chunk = table.first[start] = table.new_chunk(region_size, start, 0, 0, 0)
        table.link_free(chunk)
        self.pool_bytes += region_size
        if self.pool_bytes > self.peak_pool_bytes:
            self.peak_pool_bytes = self.pool_bytes
        return True

    def _release_free_regions(self, rounded: int | None = None) -> bool:
        """Give back every wholly free region; True if any was released.

        With `rounded` (an allocation about to fail), only when that can help: XLA's
        `DeallocateFreeRegions` releases nothing unless the freed regions plus what the limit
        still leaves could hold the request.
        """
        table = self.table
        free_regions = table.free_regions()
        total_free = sum(size for _, size in free_regions)
        if not total_free:
            return False
        if rounded is not None and rounded > self.bytes_limit - self.pool_bytes + total_free:
            return False
        for start, size in free_regions:
            chunk = table.first.pop(start)
            table.unlink_free(chunk)
            table.drop(chunk)
            del table.regions[start]
            self.device.free(start)
            self.pool_bytes -= size
        return True

    # -- errors and introspection ----------------------------------------------------------

    def _largest_free_block(self) -> int:
        free = self.table.free
        return free[-1] >> SIZE_SHIFT if free else 0

    def free_chunks(self) -> list[tuple[int, int]]:
        """(size, address) of every free chunk, in XLA's best-fit order."""
        return self.table.free_chunks()

    def _num_regions(self) -> int:
        return len(self.table.regions)

    def _oom(self, requested: int, rounded: int) -> OutOfMemoryError:
        return self._out_of_memory(requested, rounded, self.memory_map() if self.dump_on_oom else None)

    def _invalid_free(self, handle: object) -> InvalidFreeError:
        if isinstance(handle, int) and any(address == handle for _, address in self.free_chunks()):
            return InvalidFreeError(f"double free of {handle:#x}: that chunk is already free in this pool")
        if isinstance(handle, int) and any(
            start <= handle < start + size for start, size in self.table.regions.items()
        ):
            return InvalidFreeError(
                f"invalid free of {handle:#x}: it lies inside a chunk but is not the start of one in use"
            )
        shown = f"{handle:#x}" if isinstance(handle, int) else repr(handle)
        return InvalidFreeError(
            f"invalid free of {shown}: this pool never allocated it (foreign pointer or double free)"
        )

    def chunks(self) -> list[tuple[int, int, int, bool, int]]:
        """Every chunk as (region start, address, size, in use, requested bytes), by address within region."""
        return self.table.chunks()

    def memory_map(self, max_chunks_per_region: int = 200) -> str:
        """Bins with their free chunks, then each region's chunks in address order (XLA's DumpMemoryLog)."""
        return memory_map(self.table, self, max_chunks_per_region)

    def check_invariants(self) -> list[str]:
        """Every broken invariant, described; an empty list for a healthy pool (see `inspect_bfc`)."""
        return check_invariants(self.table, self)
