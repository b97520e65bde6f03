"""The user's line of each JAX call, looked up once per call site: a loop of a thousand runs on one
line computes its line once, whether the run is a jitted step (called straight from the user's code),
an eager op (called through JAX's own frames) or a put; frames of JAX, the standard library, pytest
and this plugin are never the line."""

from __future__ import annotations

import contextlib
import os
import sys
from collections import Counter

import pytest

from pytest_devmem.capture.call_sites import CallSites, is_user_file
from pytest_devmem.model.trace import ALLOCATE_CODE

HERE = os.path.abspath(__file__)


def _line_of(marker: str) -> str:
    with open(HERE) as handle:
        number = next(n for n, line in enumerate(handle, 1) if marker in line and "_line_of" not in line)
    return f"{HERE}:{number}"


def test_frameworks_the_standard_library_pytest_and_the_plugin_are_not_the_users(jax_loaded: object) -> None:
    import jax

    import pytest_devmem

    assert not is_user_file(jax.__file__)
    assert not is_user_file(contextlib.__file__)
    assert not is_user_file(pytest.__file__)
    assert not is_user_file(pytest_devmem.__file__)
    assert not is_user_file("<frozen importlib._bootstrap>")
    assert is_user_file(HERE)


def test_a_line_is_computed_once_per_call_site() -> None:
    sites = CallSites()

    def called() -> str:
        return sites.site_of(sys._getframe(1))

    found = {called() for _ in range(1000)}  # site: loop
    assert found == {_line_of("# site: loop")} and sites.lookups == 1
    assert called() != next(iter(found)) and sites.lookups == 2  # another call site: its own line


def test_a_thousand_runs_per_line_look_each_line_up_once(capture: tuple) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    recorder, jax_capture = capture

    @jax.jit
    def step(x: jax.Array) -> jax.Array:
        return x * 2.0

    x = jnp.ones((8, 8))
    jax.block_until_ready((step(x), jnp.sin(x), jax.device_put(np.ones(3))))  # compiled before the window
    recorder.begin()
    jax_capture.begin()
    sites = jax_capture.call_sites
    lookups, walks = sites.lookups, sites.walks
    y = x
    for _ in range(1000):
        y = step(y)  # site: jitted
    step_walks = sites.walks - walks
    for _ in range(1000):
        z = jnp.sin(x)  # site: eager
    for _ in range(1000):
        w = jax.device_put(np.ones(3))  # site: put
    jax.block_until_ready((y, z, w))
    trace = recorder.end()
    assert not jax_capture.window.failure
    assert sites.lookups - lookups == 3  # one per call site, not one per run
    assert step_walks == 1  # called from the user's own line: its first run walks, the other 999 ask nothing
    made = Counter(
        (trace.names[trace.labels[i]], trace.names[trace.sites[i]])
        for i in range(len(trace))
        if trace.actions[i] == ALLOCATE_CODE
    )
    assert made[("jit(step)", _line_of("# site: jitted"))] == 1000
    assert made[("jit(sin)", _line_of("# site: eager"))] == 1000
    assert made[("device_put", _line_of("# site: put"))] == 1000


def test_two_lines_calling_one_step_alternately_each_keep_their_line(capture: tuple) -> None:
    import jax
    import jax.numpy as jnp

    recorder, jax_capture = capture

    @jax.jit
    def step(x: jax.Array) -> jax.Array:
        return x + 1.0

    x = jnp.ones((4,))
    jax.block_until_ready(step(x))
    recorder.begin()
    jax_capture.begin()
    kept = []
    for _ in range(50):
        kept.append(step(x))  # site: first
        kept.append(step(x))  # site: second
    trace = recorder.end()
    made = Counter(trace.names[trace.sites[i]] for i in range(len(trace)) if trace.actions[i] == ALLOCATE_CODE)
    assert made == {_line_of("# site: first"): 50, _line_of("# site: second"): 50}
