"""What a fixture shared by several tests started, keeps and needed, carried to every test that uses it.

A module- or session-scoped fixture is set up by whichever test first needs it, and what it allocates
belongs to none of them (session.py pauses the recorder around it). The allocator its framework
started there does not go away with that, nor do the buffers it keeps: TensorFlow's allocator, which
takes most of a GPU with its first allocation, holds it through every later test, and a module's
parameters stay in JAX's pool. Each test is replayed as if it ran alone, so its trace starts with
the allocators the shared fixtures it used started, each holding what the fixture keeps there
(`start` events, in the order its fixtures were ready, each fixture's in the order they first
allocated), whichever test set them up: the same trace in every selection and order. So too the
target compiler's entries for the programs such a fixture ran: every test that uses it names them,
so `--devmem-update` keeps them beside the baselines and a fresh clone compiles none of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from ..capture.fixture_notes import Started


@dataclass
class _Fixture:
    started: Started = field(default_factory=list)
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)  # compiler entries, by cache key


class SharedFixtures:
    """What each shared fixture definition started and needed, as the windows that set them up noted it."""

    def __init__(self) -> None:
        self._by_fixture: dict[Any, _Fixture] = {}

    def learn(self, started_by: dict[object, Started], needed_by: dict[object, dict[str, dict[str, Any]]]) -> None:
        """Add what the fixtures set up in one window started and needed (`Captured.started_by`,
        `needed_by`): a fixture set up again (a module-scoped one, per module) adds what is new."""
        for fixture, started in started_by.items():
            known = self._by_fixture.setdefault(fixture, _Fixture()).started
            seen = {(source, device) for source, device, _ in known}
            known.extend(entry for entry in started if (entry[0], entry[1]) not in seen)
        for fixture, entries in needed_by.items():
            self._by_fixture.setdefault(fixture, _Fixture()).entries.update(entries)

    def started(self, item: pytest.Item) -> Started:
        """The allocators started before `item` by the shared fixtures it used, each once, holding
        nothing of theirs (0 bytes): the bytes a fixture keeps are not carried yet. Measured wrong
        as first carried: one start per allocator summed no more than its first fixture's bytes, a
        parametrized or re-made fixture kept its first setup's, some arrays (`jax.random.normal`'s)
        were not found alive, and one chunk for all of a fixture's buffers left a small pool no
        room it has (docs/known-issues.md)."""
        started: Started = []
        seen: set[tuple[str, str]] = set()
        for fixture in self._used(item):
            for source, device, _ in fixture.started:
                if (source, device) not in seen:
                    seen.add((source, device))
                    started.append((source, device, 0))
        return started

    def entries(self, item: pytest.Item) -> dict[str, dict[str, Any]]:
        """The compiler entries the shared fixtures `item` used needed."""
        return {key: entry for fixture in self._used(item) for key, entry in fixture.entries.items()}

    def _used(self, item: pytest.Item) -> list[_Fixture]:
        """What is known of the shared fixtures `item` used, in the order they were ready (pytest's
        request keeps them so, `_fixture_defs`: those it names and those it asked for with
        `request.getfixturevalue`); read after its call."""
        if not self._by_fixture:
            return []
        used = getattr(getattr(item, "_request", None), "_fixture_defs", None) or {}  # a Function's
        return [self._by_fixture[fixture] for fixture in list(used.values()) if fixture in self._by_fixture]
