"""Skip markers for the tests that compile for a GPU or TPU without one: each needs its compiler's
extra installed (`gpu-compile`, `tpu-compile`), and says which problem keeps it from running."""

from __future__ import annotations

import pytest

from pytest_devmem.capture.jax.gpu_compile import cuda_compiler_problem
from pytest_devmem.capture.jax.tpu_compile import tpu_compiler_problem

GPU_COMPILER_PROBLEM = cuda_compiler_problem()
TPU_COMPILER_PROBLEM = tpu_compiler_problem()

needs_compiler = pytest.mark.skipif(
    GPU_COMPILER_PROBLEM is not None, reason=f"needs the gpu-compile extra: {GPU_COMPILER_PROBLEM}"
)
needs_libtpu = pytest.mark.skipif(
    TPU_COMPILER_PROBLEM is not None, reason=f"needs the tpu-compile extra: {TPU_COMPILER_PROBLEM}"
)
