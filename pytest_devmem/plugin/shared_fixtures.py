"""The allocators a fixture shared by several tests started, carried to every test that uses it.

A module- or session-scoped fixture is set up by whichever test first needs it, and what it allocates
belongs to none of them (session.py pauses the recorder around it). The allocator its framework
started there does not go away with that: TensorFlow's, which takes most of a GPU with its first
allocation, holds it through every later test, so a JAX step in a test that uses the fixture meets a
device TensorFlow already holds. Each test is replayed as if it ran alone, so it starts, before its
own events, the allocators that the shared fixtures it uses started (`start` events, in the order
pytest sets those fixtures up for it, each fixture's in the order they first allocated), whichever
test set them up: the same trace in every selection and order."""

from __future__ import annotations

from typing import Any

import pytest

Started = list[tuple[str, str, int]]
"""(source, device, bytes of its first allocation) of each allocator started, in order."""


class SharedFixtureStarts:
    """What each shared fixture definition started, as the windows that set them up noted it."""

    def __init__(self) -> None:
        self._by_fixture: dict[Any, Started] = {}

    def learn(self, started_by: dict[object, Started]) -> None:
        """Add what the fixtures set up in one window started (`Captured.started_by`): an allocator
        a fixture set up again (a module-scoped one, per module) started again is kept once."""
        for fixture, started in started_by.items():
            known = self._by_fixture.setdefault(fixture, [])
            seen = {(source, device) for source, device, _ in known}
            known.extend(entry for entry in started if (entry[0], entry[1]) not in seen)

    def of(self, item: pytest.Item) -> Started:
        """The allocators started before `item` by the shared fixtures it used, each kept once, in
        the order its fixtures were ready (pytest's request keeps them so, `_fixture_defs`: those
        it names and those it asked for with `request.getfixturevalue`); read after its call."""
        if not self._by_fixture:
            return []
        used = getattr(getattr(item, "_request", None), "_fixture_defs", None) or {}  # a Function's
        started: Started = []
        seen: set[tuple[str, str]] = set()
        for fixture in list(used.values()):
            for source, device, size in self._by_fixture.get(fixture, ()):
                if (source, device) not in seen:
                    seen.add((source, device))
                    started.append((source, device, size))
        return started
