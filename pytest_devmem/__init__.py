"""pytest-devmem: device-memory regimes, measurement and regression gates for JAX and TensorFlow tests."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pytest-devmem")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
