"""One background thread that polls sources while a test runs, so peaks shorter than a test are seen."""

from __future__ import annotations

import threading
from collections.abc import Callable

DEFAULT_INTERVAL = 0.002
"""Seconds between samples: NVML answers in tens of microseconds, so 2 ms costs little."""


class Sampler:
    """Calls each registered probe every `interval` seconds between `resume()` and `pause()`.

    The thread is started on first use and lives for the session; pausing costs nothing per test.
    A probe that raises is dropped, so a broken source cannot disturb the test it measures.
    """

    def __init__(self, interval: float = DEFAULT_INTERVAL) -> None:
        self.interval = interval
        self._probes: list[Callable[[], None]] = []
        self._running = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def add(self, probe: Callable[[], None]) -> None:
        with self._lock:
            self._probes.append(probe)

    def remove(self, probe: Callable[[], None]) -> None:
        with self._lock:
            if probe in self._probes:
                self._probes.remove(probe)

    def resume(self) -> None:
        if not self._probes:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="devmem-sampler", daemon=True)
            self._thread.start()
        self._running.set()

    def pause(self) -> None:
        """Stop sampling; returns after any sample in progress has finished."""
        self._running.clear()
        with self._lock:  # a sample holds the lock, so this waits for it
            pass

    def close(self) -> None:
        self._stopped.set()
        self._running.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    def _loop(self) -> None:
        while not self._stopped.is_set():
            self._running.wait()
            if self._stopped.is_set():
                return
            with self._lock:
                if self._running.is_set():
                    for probe in list(self._probes):
                        try:
                            probe()
                        except Exception:
                            self._probes.remove(probe)
            self._stopped.wait(self.interval)
