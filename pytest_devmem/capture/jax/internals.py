"""JAX's private internals: the only module that reaches `jax._src`.

The capture needs what JAX keeps private: its dispatch, to see each run; the C++ fast path's
post-hook; its lowering, to compile a program again for a GPU or TPU; a few types. Each is one
function here. A function raises ImportError or returns None where a release lacks it, and its
caller says so in a note. A new JAX release is this file to read.

Tested on JAX 0.9.2, 0.10.0, 0.10.2, 0.11.2 and 0.12.0.1 (docs/compatibility.md, scripts/compat.py).
Older releases are refused at session start (pytest_devmem/supported.py; the docs say why).
"""

from __future__ import annotations

import importlib.util
import reprlib
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

BACKENDS_LOGGER = "jax._src.xla_bridge"
"""The logger JAX's backend start writes to (`discover_pjrt_plugins`); 0.9 to 0.12."""


def dispatch() -> SimpleNamespace:
    """The dispatch modules the capture hooks, 0.9 to 0.12: `dispatch._batched_device_put_impl`,
    `pjit._get_fastpath_data`, `pxla.ExecuteReplicated`, `pxla.batched_device_put`,
    `_jax.PjitFunctionCache`, `xla_client.ArrayImpl`, the fast path's tree flattening.
    ImportError where a module is gone."""
    from jax._src import dispatch as dispatch_module
    from jax._src import pjit
    from jax._src.interpreters import pxla
    from jax._src.lib import _jax, xla_client
    from jax._src.tree_util import dispatch_registry

    return SimpleNamespace(
        dispatch=dispatch_module,
        pjit=pjit,
        pxla=pxla,
        lib=_jax,
        xla_client=xla_client,
        flatten=lambda tree: dispatch_registry.flatten(tree, None)[0],
    )


def post_hook_module() -> Any:
    """`jax._src.api`, which holds the fast path's `_post_hook_state` (a config state since JAX 0.8)."""
    from jax._src import api

    return api


def unset_marker() -> Any:
    """What a config state's `get_local()` gives where the thread set none (`config_ext.unset`)."""
    try:
        from jax._src import config
    except ImportError:
        return None
    return getattr(getattr(config, "config_ext", None), "unset", None)


def trace_context() -> object:
    """The thread's trace context (`config.trace_context()`); None where this JAX has none."""
    try:
        from jax._src import config

        return config.trace_context()
    except Exception:
        return None


def lowering() -> SimpleNamespace:
    """What the sizers hook to lower a program again: `pxla.lower_sharding_computation`,
    `pxla.MeshComputation.compile`, the persistent cache's key and MLIR's warnings (0.9 to 0.12)."""
    from jax._src.interpreters import pxla

    return SimpleNamespace(
        pxla=pxla,
        compiler=sys.modules.get("jax._src.compiler"),
        mlir=sys.modules.get("jax._src.interpreters.mlir"),
    )


def module_text(computation: Any) -> str:
    """A lowered computation's StableHLO text without debug info."""
    from jax._src.interpreters import mlir

    return str(mlir.module_to_string(computation.stablehlo(), enable_debug_info=False))


def jaxpr_types() -> tuple[Any, Any]:
    """`core.ClosedJaxpr` (None from 0.12 on: one class with `Jaxpr` since 0.11) and `core.Jaxpr`."""
    from jax._src import core

    return getattr(core, "ClosedJaxpr", None), core.Jaxpr


def sharding_types() -> SimpleNamespace:
    """The device type and the sharding types a lowering's arguments hold."""
    from jax._src.lib import xla_client
    from jax._src.sharding_impls import GSPMDSharding, UnspecifiedValue

    return SimpleNamespace(device=xla_client.Device, gspmd=GSPMDSharding, unspecified=UnspecifiedValue)


def function_source(executable: Any) -> str:
    """Where a `MeshExecutable`'s function is defined, "name at file:line" (`_all_args_info`)."""
    try:
        return str(executable._all_args_info.debug_info.func_src_info or "")
    except Exception:
        return ""


def argument_names(executable: Any) -> tuple[str, ...]:
    """A `MeshExecutable`'s kept parameters' paths, "params['w']" (`debug_info.arg_names`,
    `_kept_var_idx`); () where not known."""
    try:
        names = executable._all_args_info.debug_info.arg_names
        return tuple(str(names[index]) for index in sorted(executable._kept_var_idx))
    except Exception:
        return ()


def static_arguments(caller: Any) -> str:
    """`scale=2.0`: the static arguments of the jit call whose `cache_miss` frame (jax/_src/pjit.py)
    is `caller`, from its `jit_info`, `args` and `kwargs`; "" where none or not known."""
    try:
        scope = caller.f_locals
        info, args, kwargs = scope["jit_info"], scope["args"], scope["kwargs"]
        names = list(info.fun_signature.parameters) if info.fun_signature is not None else []
        found = [
            (names[i] if i < len(names) else f"argument {i}", args[i]) for i in info.static_argnums if i < len(args)
        ]
        found += [(name, kwargs[name]) for name in info.static_argnames if name in kwargs]
        return ", ".join(f"{name}={reprlib.repr(value)}" for name, value in found)
    except Exception:
        return ""


def excluded_paths() -> tuple[str, ...]:
    """The paths libraries registered for JAX's source lines to skip (`register_exclusion`)."""
    return tuple(getattr(sys.modules.get("jax._src.source_info_util"), "_exclude_paths", None) or ())


def canonical_print_options() -> Any:
    """XLA's canonical HLO print options: `jax._src.lib.hlo` from 0.10.2, `_jax` before it."""
    from jax._src import lib

    module = getattr(lib, "hlo", None) or lib._jax
    return module.HloPrintOptions.canonical()


def backend_started() -> bool:
    """Whether JAX has made a backend (`xla_bridge._backends`), read without importing JAX."""
    bridge = sys.modules.get("jax._src.xla_bridge")
    return bool(getattr(bridge, "_backends", None))


def jaxlib_loaded() -> bool:
    """Whether jaxlib has been imported into this process."""
    return "jax._src.lib" in sys.modules


def hardware_utils() -> ModuleType | None:
    """JAX's PCI scan (`jax/_src/hardware_utils.py`, standard library only), loaded from its file
    so that asking imports no JAX; None where it cannot be found."""
    module = sys.modules.get("jax._src.hardware_utils")
    if module is not None:
        return module
    spec = importlib.util.find_spec("jax")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    path = Path(locations[0]) / "_src" / "hardware_utils.py" if locations else None
    loaded = (
        importlib.util.spec_from_file_location("_devmem_jax_hardware_utils", path) if path and path.is_file() else None
    )
    if loaded is None or loaded.loader is None:
        return None
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    return module
