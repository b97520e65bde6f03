"""The capture tests' own fixture: a recorder with JAX's capture installed into it, for one test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_devmem.capture import TraceRecorder
    from pytest_devmem.capture.jax import JaxCapture


@pytest.fixture
def capture(jax_loaded: object) -> Iterator[tuple[TraceRecorder, JaxCapture]]:
    """A recorder and JAX's capture installed into it, for the test alone; uninstalled afterwards.

    JAX's backends are started first, outside the test: where a backend logs an error as it starts
    (the CUDA plugin of the compilers' folder, on a machine without a GPU), the log record pytest keeps
    holds the traceback's frames, and with them the arrays of the test's first call, until the test
    ends; a test that started them would see those arrays freed late, one that runs after would not."""
    import jax

    from pytest_devmem.capture import TraceRecorder
    from pytest_devmem.capture.jax import JaxCapture

    jax.devices()
    recorder = TraceRecorder()
    jax_capture = JaxCapture(recorder)
    assert jax_capture.install(), jax_capture.note
    try:
        yield recorder, jax_capture
    finally:
        jax_capture.uninstall()
