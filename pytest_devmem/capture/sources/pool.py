"""The managed pool of the `devmem` fixture as a source: XLA-style statistics of what the test allocated."""

from __future__ import annotations

from ...model.pool.base import Pool
from .base import Reading, unavailable


class PoolSource:
    """Reads the statistics of the pool a test used through the `devmem` fixture.

    Its fragmentation is the pool's at the moment of peak use, when it matters most: by the end of
    a test most buffers are freed and the figure says little.
    """

    name = "pool"

    def __init__(self) -> None:
        self.pool: Pool | None = None
        self._start_in_use = 0

    def attach(self, pool: Pool) -> None:
        """Called when the fixture hands the test its pool; peaks restart from current usage."""
        self.pool = pool
        pool.reset_peak_stats()
        self._start_in_use = int(pool.stats()["bytes_in_use"])

    def start(self) -> None:
        self.pool = None

    def stop(self) -> Reading:
        if self.pool is None:
            return unavailable(self.name, "the test did not use the devmem fixture", unused=True)
        stats = self.pool.stats()
        self.pool = None
        return Reading(
            source=self.name,
            available=True,
            peak_bytes_in_use=int(stats["peak_bytes_in_use"]) - self._start_in_use,
            peak_bytes_reserved=int(stats["peak_bytes_reserved"]),
            fragmentation=float(stats["fragmentation_at_peak"]),
            figures=dict(stats),
        )

    def close(self) -> None:
        self.pool = None
