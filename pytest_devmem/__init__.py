"""pytest-devmem: device-memory regimes, measurement and regression gates for JAX and TensorFlow tests."""

from __future__ import annotations

from .version import package_version


def __getattr__(name: str) -> str:
    """`__version__`, looked up on first use: reading distribution metadata costs milliseconds."""
    if name == "__version__":
        return package_version()
    raise AttributeError(f"module 'pytest_devmem' has no attribute {name!r}")
