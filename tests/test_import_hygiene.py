"""The pool and devices import nothing heavy: no pytest, JAX, TensorFlow or NVML bindings."""

from __future__ import annotations

import subprocess
import sys


def test_pool_imports_no_framework_or_pytest() -> None:
    code = (
        "import sys; import pytest_devmem.model.pool, pytest_devmem.model.device, pytest_devmem.units; "
        "heavy = {'pytest', '_pytest', 'jax', 'tensorflow', 'pynvml', 'pandas', 'numpy'} & set(sys.modules); "
        "print(sorted(heavy))"
    )
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert output.strip() == "[]"
