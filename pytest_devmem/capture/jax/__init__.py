"""JAX's device memory as trace events.

JAX allocates per run of a compiled executable: its outputs, one temp buffer per device, and the inputs
it transfers; donation hands an input's buffer to an output. The capture hooks JAX's dispatch and its
C++ fast path's post-hook (`capture`, `post_hook`), reads each executable's sizes and aliases once
(`executables`), places each array's shards on their devices (`shards`) and frees an allocation when
the last array holding it goes (`holdings`). For a GPU or TPU target, each executable is lowered again
(`lowering`) and compiled deviceless for that target (`gpu_compile`, `tpu_compile`), so its sizes are
that compiler's. Nothing here imports JAX until it is imported by the tests.
"""

from __future__ import annotations

import sys

from . import internals
from .capture import SOURCE, JaxCapture
from .window import JaxWindow

__all__ = ["SOURCE", "JaxCapture", "JaxWindow", "jax_backend_started"]


def jax_backend_started() -> bool:
    """True once JAX has created a backend in this process, read from `sys.modules` without importing
    JAX: after that, its memory settings no longer change, and a capture may ask it for its devices
    without starting it."""
    return "jax" in sys.modules and internals.backend_started()
