"""Whether JAX has started its backends in this process, read from `sys.modules` without importing JAX: after
that, its memory settings no longer change, and a capture may ask it for its devices without starting it."""

from __future__ import annotations

import sys


def jax_backend_started() -> bool:
    """True once JAX has created a backend here, after which its memory settings no longer change."""
    if "jax" not in sys.modules:
        return False
    bridge = sys.modules.get("jax._src.xla_bridge")
    return bool(getattr(bridge, "_backends", None))
