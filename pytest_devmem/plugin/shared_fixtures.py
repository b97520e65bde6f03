"""What a fixture shared by several tests started, keeps and needed, carried to every test that uses it.

A module- or session-scoped fixture is set up by whichever test first needs it, and what it
allocates belongs to none of them (session.py pauses the recorder around it). The allocator its
framework started there does not go away with that, nor do the buffers it keeps: TensorFlow's
allocator, which takes most of a GPU with its first allocation, holds it through every later test,
and a module's parameters stay in JAX's pool. Each test is replayed as if it ran alone, so its trace
starts with what the shared fixtures it used started and keep (`start` events, in the order its
fixtures were ready, each fixture's in the order it allocated them: a buffer each, where a pool
serves each as its own chunk), whichever test set them up, measured or not: the same trace in every
selection and order. A fixture is known per definition and parameter, as pytest reuses one (`test_step[large]`
keeps the large one's buffers, under `-k large` as in the whole run, as does a test given that
parameter indirectly); set up again (a module-scoped one, per module), its latest setup is the one
the test used; one that overrides another and asks for it by its own name keeps both's. So too the
target compiler's entries for the programs such a fixture ran and the arrays it sized: every test
that uses it names them, so `--devmem-update` keeps them beside the baselines and a fresh clone
compiles none of them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from ..capture.fixture_notes import Started


class FixtureSetup:
    """A shared fixture as its setup's pause's owner: its definition and its cache key (its
    parameter, None where it has none), equal where pytest would reuse one for the other
    (`FixtureDef.execute`: keys compared with ==, or `is` where == cannot say)."""

    __slots__ = ("fixturedef", "key")

    def __init__(self, fixturedef: pytest.FixtureDef[Any], key: object) -> None:
        self.fixturedef, self.key = fixturedef, key

    @classmethod
    def of(cls, fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> FixtureSetup:
        """The setup of `fixturedef` for `request` (a SubRequest in `pytest_fixture_setup`)."""
        return cls(fixturedef, fixturedef.cache_key(request))  # type: ignore[arg-type]

    @classmethod
    def current(cls, fixturedef: pytest.FixtureDef[Any]) -> FixtureSetup | None:
        """The setup of `fixturedef` that is ready now, None where none is."""
        cached = fixturedef.cached_result
        return None if cached is None else cls(fixturedef, cached[1])

    def __hash__(self) -> int:
        return id(self.fixturedef)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FixtureSetup) or other.fixturedef is not self.fixturedef:
            return False
        try:
            return bool(self.key == other.key)
        except (ValueError, RuntimeError):  # an array's ==, as pytest's own comparison falls back
            return self.key is other.key


@dataclass
class _Fixture:
    name: str
    started: Started = field(default_factory=list)
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)  # compiler entries, by cache key


class SharedFixtures:
    """What each shared fixture (definition and parameter) started, keeps and needed, as the latest
    window that set it up noted it."""

    def __init__(self) -> None:
        self._by_fixture: dict[FixtureSetup, _Fixture] = {}

    def learn(self, started_by: dict[object, Started], needed_by: dict[object, dict[str, dict[str, Any]]]) -> None:
        """What the fixtures set up in one window started, keep and needed (`Captured.started_by`,
        `needed_by`), in place of what an earlier setup of the same noted."""
        for owner in {*started_by, *needed_by}:
            if isinstance(owner, FixtureSetup):  # the recorder's other pauses have no owner
                started, needed = list(started_by.get(owner, [])), dict(needed_by.get(owner, {}))
                self._by_fixture[owner] = _Fixture(owner.fixturedef.argname, started, needed)

    def started(self, item: pytest.Item) -> list[tuple[str, str, int, str]]:
        """(source, device, bytes, fixture) of what the shared fixtures `item` used started and keep,
        in the order they were ready: each buffer a fixture keeps, and each allocator started with
        nothing kept of it, once."""
        started: list[tuple[str, str, int, str]] = []
        seen: set[tuple[str, str]] = set()
        for fixture in self._used(item):
            for source, device, size in fixture.started:
                if size or (source, device) not in seen:
                    seen.add((source, device))
                    started.append((source, device, size, fixture.name))
        return started

    def entries(self, item: pytest.Item) -> dict[str, dict[str, Any]]:
        """The compiler entries the shared fixtures `item` used needed."""
        return {key: entry for fixture in self._used(item) for key, entry in fixture.entries.items()}

    def _used(self, item: pytest.Item) -> list[_Fixture]:
        """What is known of the shared fixtures `item` used, in the order they were ready (pytest's
        request keeps them so, `_fixture_defs`: those it names and those it asked for with
        `request.getfixturevalue`), each as it is set up now (read after the call, before teardown:
        the parameter the test has)."""
        if not self._by_fixture or not isinstance(item, pytest.Function):
            return []
        setups = (FixtureSetup.current(fixture) for fixture in _definitions_used(item))
        return [self._by_fixture[setup] for setup in setups if setup is not None and setup in self._by_fixture]


def _definitions_used(item: pytest.Function) -> Iterator[pytest.FixtureDef[Any]]:
    """The fixture definitions `item` used, in the order they were ready: for a name, the definition
    closest to it, after those it overrides and asks for by its own name (`def params(params)`,
    which pytest gives the next one out: `FixtureRequest._get_active_fixturedef`)."""
    request = item._request
    for name, closest in request._fixture_defs.items():
        definitions = list(request._arg2fixturedefs.get(name) or ())
        chain = [closest]
        position = next((i for i, fixture in enumerate(definitions) if fixture is closest), 0)
        while position > 0 and name in chain[0].argnames:
            position -= 1
            chain.insert(0, definitions[position])
        yield from chain
