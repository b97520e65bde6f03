"""A naive first-fit allocator: the yardstick the BFC pool is measured against in the same run."""

from __future__ import annotations

from bisect import bisect_left

from pytest_devmem.model.pool.bfc import rounded_bytes


class FirstFitPool:
    """One region of `capacity` bytes; a sorted free list scanned from the lowest address; merges on free.

    Its footprint is the highest address ever handed out (what a bump region would have to hold).
    """

    def __init__(self, capacity: int) -> None:
        self._free: list[list[int]] = [[0, capacity]]  # [offset, size], sorted by offset
        self._sizes: dict[int, int] = {}
        self._live = 0
        self.peak_end = 0
        self.peak_live = 0

    def alloc(self, nbytes: int) -> int:
        size = rounded_bytes(nbytes)
        for index, (offset, free) in enumerate(self._free):
            if free >= size:
                if free == size:
                    del self._free[index]
                else:
                    self._free[index] = [offset + size, free - size]
                self._sizes[offset] = size
                self._live += size
                self.peak_live = max(self.peak_live, self._live)
                self.peak_end = max(self.peak_end, offset + size)
                return offset + 1  # never 0, like a real pointer
        raise MemoryError(f"first-fit: no block of {size} bytes")

    def free(self, handle: int) -> None:
        offset = handle - 1
        size = self._sizes.pop(offset)
        self._live -= size
        index = bisect_left(self._free, [offset, 0])
        if index < len(self._free) and self._free[index][0] == offset + size:
            size += self._free.pop(index)[1]
        if index > 0 and sum(self._free[index - 1]) == offset:
            self._free[index - 1][1] += size
        else:
            self._free.insert(index, [offset, size])

    def stats(self) -> dict[str, int | float]:
        return {
            "peak_bytes_reserved": self.peak_end,
            "peak_pool_bytes": self.peak_end,
            "peak_bytes_in_use": self.peak_live,
        }
