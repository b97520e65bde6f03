"""A NumPy array made a TensorFlow tensor the same way in every run: copied into TensorFlow's allocator.

`tf.constant(array)`, and all that goes through it (`tf.convert_to_tensor`, a `tf.function`'s NumPy
arguments, `tf.data`'s tensors from NumPy, the axes `np.arange(rank)` a reduction over all axes makes
in `math_ops._ReductionDims`), copies the array (`constant_op.convert_to_eager_tensor`: `value.copy()`)
and gives the copy to TensorFlow. TensorFlow keeps a buffer aligned to `EIGEN_MAX_ALIGN_BYTES` as the
tensor's own memory and copies any other into its CPU allocator (`TF_NewTensor`,
tensorflow/c/tf_tensor.cc: "copy only if ... `data % EIGEN_MAX_ALIGN_BYTES != 0`"; 64 bytes on x86-64
with AVX-512). NumPy takes a small array's memory from malloc, 16-byte aligned, so where that copy
landed decided whether TensorFlow allocated 256 bytes: `tf.reduce_sum(x)` allocated its 8-byte axes
in one run and not in the next, and not after some tests (measured: 2 runs in 10 of a test doing one
`tf.reduce_sum` peaked 256 B lower).

The capture makes that copy itself, 16 bytes past a multiple of 64: aligned for every NumPy type,
never for TensorFlow's 32 or 64 bytes, so TensorFlow copies it into its allocator every time, as it
always does for an array large enough for malloc to map on its own (16 bytes past a page) and as a
GPU always does. A NumPy array given straight to an eager op (`tf.matmul(array, w)`) is converted in
TensorFlow's C++ without this copy and keeps its own alignment: see docs/order-independence.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..framework import Patches

ALIGNMENT = 64  # the largest EIGEN_MAX_ALIGN_BYTES (AVX-512); 16 past it is 16-aligned, not 32- or 64-aligned
OFFSET = 16
KINDS = frozenset("biufc")  # bool, integers, floats, complex: TensorFlow keeps these as raw bytes


def off_aligned_copy(array: Any) -> Any:
    """A C-ordered copy of the NumPy `array` whose data starts OFFSET bytes past a multiple of ALIGNMENT."""
    import numpy as np  # TensorFlow's own dependency: here only once TensorFlow is imported

    buffer = np.empty(array.nbytes + ALIGNMENT, np.uint8)
    start = (OFFSET - buffer.ctypes.data) % ALIGNMENT
    copy = buffer[start : start + array.nbytes].view(array.dtype).reshape(array.shape)
    copy[...] = array
    return copy


def copy_arrays_off_aligned(patches: Patches) -> bool:
    """Have TensorFlow's NumPy conversions copy each array off-aligned (undone by `patches.restore()`);
    False where this TensorFlow has no `convert_to_eager_tensor` to wrap."""
    try:
        import numpy as np
        from tensorflow.python.framework import constant_op
    except ImportError:
        return False
    if not callable(getattr(constant_op, "convert_to_eager_tensor", None)):
        return False

    class CopiedOffAligned(np.ndarray):  # type: ignore[type-arg,unused-ignore]
        """The array TensorFlow is given: the copy `convert_to_eager_tensor` makes of it is off-aligned."""

        def copy(self, order: Any = "C") -> Any:
            return off_aligned_copy(self.view(np.ndarray))

    def converting(original: Callable[..., Any]) -> Callable[..., Any]:
        def convert_to_eager_tensor(value: Any, ctx: Any, dtype: Any = None) -> Any:
            if type(value) is np.ndarray and value.dtype.kind in KINDS and value.nbytes:
                value = value.view(CopiedOffAligned)
            return original(value, ctx, dtype)

        return convert_to_eager_tensor

    patches.replace(constant_op, "convert_to_eager_tensor", converting)
    return True
