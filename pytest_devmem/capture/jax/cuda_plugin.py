"""XLA:GPU's compiler on a machine without a GPU: what the environment needs before JAX starts so that
its CUDA plugin (compilers.py says which is importable) registers, its deviceless topology
(`jax.experimental.topologies.get_topology_desc(platform="cuda", target_config=...)`: compile-only
devices of the GPU that the target config describes, `model.gpu_targets`, on which the GPU sizer
compiles), and its refusals in words a user can act on. Imports no framework.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from typing import Any

from . import compilers
from .sizes import SizerError, first_line

__all__ = ["cuda_topology", "environment_for_deviceless_compile", "explain"]


def environment_for_deviceless_compile(environ: Mapping[str, str], gpu_present: bool) -> dict[str, str]:
    """Settings to put in the environment before JAX starts, so that the CUDA plugin registers its
    compiler on a machine without a GPU while JAX runs on the CPU.

    Without them, the plugin's start-up check of the CUDA libraries fails (no driver, no runtime)
    and JAX prints that failure's traceback; with JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1 the plugin
    registers, its backend fails to start without a driver, and JAX runs on the CPU as before.
    Nothing is set where a GPU is present, where the user chose JAX's platforms, or where the
    plugin cannot be imported (neither installed nor loaded from the compilers' folder: JAX will not
    find it).
    """
    if gpu_present or compilers.installed_cuda_major() is None:
        return {}
    if "JAX_PLATFORMS" in environ or "JAX_SKIP_CUDA_CONSTRAINTS_CHECK" in environ:
        return {}
    return {"JAX_SKIP_CUDA_CONSTRAINTS_CHECK": "1"}


def cuda_topology(topologies: Any, config: str, count: int) -> Any:
    """The target's topology; where the CUDA plugin did not register (its start-up check of the CUDA
    libraries fails without a GPU, unless JAX_SKIP_CUDA_CONSTRAINTS_CHECK or JAX_PLATFORMS was set),
    it is registered again with that check skipped: JAX keeps running on the CPU."""
    try:
        return topologies.get_topology_desc(platform="cuda", target_config=config, topology=f"1x1x{count}")
    except NotImplementedError:
        pass
    except Exception as exc:
        raise SizerError(f"XLA refused the GPU target: {first_line(exc)}") from None
    _register_cuda_plugin()
    try:
        return topologies.get_topology_desc(platform="cuda", target_config=config, topology=f"1x1x{count}")
    except Exception as exc:
        raise SizerError(
            f"the CUDA plugin is installed but gives no GPU topology ({first_line(exc)}); "
            "set JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1 before JAX starts"
        ) from None


def _register_cuda_plugin() -> None:
    try:
        major = compilers.installed_cuda_major() or compilers.CUDA_MAJORS[-1]
        plugin = importlib.import_module(compilers.plugin_modules(major)[0][1])
    except ImportError:
        return
    before = os.environ.get("JAX_SKIP_CUDA_CONSTRAINTS_CHECK")
    os.environ["JAX_SKIP_CUDA_CONSTRAINTS_CHECK"] = "1"
    try:
        plugin.initialize()
    except Exception:
        pass
    finally:
        if before is None:
            os.environ.pop("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", None)
        else:
            os.environ["JAX_SKIP_CUDA_CONSTRAINTS_CHECK"] = before


_EXPLANATIONS: tuple[tuple[str, str], ...] = (
    (
        "Unknown backend: 'gpu'",
        "it calls back to Python (jax.debug.print, pure_callback, io_callback), which XLA:GPU compiles only where a GPU backend runs",
    ),
    ("No FFI handler registered for", "it calls a custom kernel that has no CUDA implementation registered here"),
    (
        "No registered implementation for custom call",
        "it calls a custom kernel that has no CUDA implementation registered here",
    ),
    (
        "No PTX compilation provider",
        f"XLA found no ptxas to compile GPU kernels (nvidia-cuda-nvcc-cu12, which `{compilers.COMMAND}` installs)",
    ),
    ("ptxas too old", "the ptxas XLA found does not support this GPU's compute capability"),
    ("utotun", "XLA needed to autotune on a real GPU"),
)


def explain(exc: BaseException) -> str:
    """Why XLA:GPU refused a program: a reason a user can act on, then XLA's or JAX's own first line."""
    text = str(exc)
    for marker, explanation in _EXPLANATIONS:
        if marker in text:
            if "custom kernel" in explanation and compilers.loaded_after_jax("gpu"):
                explanation += (
                    " (JAX was imported before the CUDA compiler's folder was loaded, so its kernels' handlers were "
                    "not registered: something imported JAX before pytest-devmem's first hook)"
                )
            return f"{explanation} ({first_line(exc)})"
    return f"XLA:GPU could not compile it without a GPU ({first_line(exc)})"
