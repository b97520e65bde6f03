"""What the tests that compile for a GPU or TPU without one share: their skip markers (each needs its
compiler, installed by `devmem compilers install` and loaded by conftest.py, and says which problem
keeps it from running), and the executable a jitted call runs, as the capture sees it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pytest_devmem.capture.framework import Patches
from pytest_devmem.capture.jax import compilers

GPU_COMPILER_PROBLEM = compilers.problem("gpu")
TPU_COMPILER_PROBLEM = compilers.problem("tpu")

needs_compiler = pytest.mark.skipif(
    GPU_COMPILER_PROBLEM is not None, reason=f"needs XLA:GPU's compiler: {GPU_COMPILER_PROBLEM}"
)
needs_libtpu = pytest.mark.skipif(TPU_COMPILER_PROBLEM is not None, reason=f"needs libtpu: {TPU_COMPILER_PROBLEM}")


def executable_of(function: Callable[..., Any], *args: Any) -> Any:
    """The executable JAX compiles and runs for `jax.jit(function)(*args)`, as the trace capture sees
    it (a fresh function each time, so JAX's C++ fast path cannot answer instead)."""
    import jax
    from jax._src.interpreters import pxla

    runs: list[Any] = []

    def recording(original: Callable[..., Any]) -> Callable[..., Any]:
        def call(executable: Any, *call_args: Any) -> Any:
            runs.append(executable)
            return original(executable, *call_args)

        return call

    patches = Patches()
    patches.replace(pxla.ExecuteReplicated, "__call__", recording)
    try:
        jax.block_until_ready(jax.jit(lambda *a: function(*a))(*args))
    finally:
        patches.restore()
    assert runs, "JAX ran no executable through Python dispatch"
    return runs[-1]
