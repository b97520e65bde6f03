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
    """A recorder and JAX's capture installed into it, for the test alone; uninstalled afterwards."""
    from pytest_devmem.capture import TraceRecorder
    from pytest_devmem.capture.jax import JaxCapture

    recorder = TraceRecorder()
    jax_capture = JaxCapture(recorder)
    assert jax_capture.install(), jax_capture.note
    try:
        yield recorder, jax_capture
    finally:
        jax_capture.uninstall()
