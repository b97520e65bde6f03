"""pytest-devmem: device-memory regimes, measurement and regression gates for JAX and TensorFlow tests."""

from __future__ import annotations


def __getattr__(name: str) -> str:
    """`__version__`, looked up on first use: reading distribution metadata costs milliseconds."""
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("pytest-devmem")
        except PackageNotFoundError:  # a source tree that was never installed
            return "0.0.0+unknown"
    raise AttributeError(f"module 'pytest_devmem' has no attribute {name!r}")
