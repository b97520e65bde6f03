"""Remembers how JAX lowered each `jit` executable, so that it can be lowered again for other devices.

JAX lowers a `jit` computation in `pxla.lower_sharding_computation(closed_jaxpr, api_name, fun_name,
in_shardings, out_shardings, ...)` and compiles it in `pxla.MeshComputation.compile`; a run of the
result is a `pxla.ExecuteReplicated` call, which is what the trace capture sees. Two hooks keep, per
`ExecuteReplicated`, the arguments of that lowering and the executable's device assignment.
`lower_for` runs the same lowering again with each device replaced by one of another platform (the
i-th device of the assignment by the i-th new device), in the shardings, meshes and jaxpr (sharding
constraints, shard_map meshes, nested jits), so a sharded executable is lowered for as many devices,
meshes and partition specs kept. The lowering is then JAX's own for the new platform.

These are JAX internals: the hooks check them before they go in (tested with JAX 0.10). JAX is
imported lazily.
"""

from __future__ import annotations

import dataclasses
import inspect
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ...supported import SUPPORTED_JAX
from ..framework import Patches
from . import internals

_state = threading.local()


def compiling_for_target() -> bool:
    """True while this thread lowers or compiles for another target: JAX's compile events then are
    not the test's (a capture counting compiles skips them)."""
    return bool(getattr(_state, "compiling", False))


@contextmanager
def retargeting() -> Iterator[None]:
    """Marks this thread's lowering and compiling as retargeting: the hooks record none of it."""
    before = compiling_for_target()
    _state.compiling = True
    try:
        yield
    finally:
        _state.compiling = before


@dataclass
class Recipe:
    """The arguments of one `lower_sharding_computation` call, by parameter name, and the devices
    the executable was compiled for (its device assignment, in order)."""

    arguments: dict[str, Any]
    devices: tuple[Any, ...] = ()
    source: str = ""  # the module JAX lowered for its own devices, as text: with the jaxpr, names the program


class LoweringHooks:
    """Hooks JAX's lowering and compile once per process, for all their users (counted)."""

    def __init__(self) -> None:
        self._patches = Patches()
        self._users = 0
        self._lock = threading.Lock()
        self.lower: Callable[..., Any] | None = None  # JAX's own lower_sharding_computation
        self._signature: inspect.Signature | None = None
        self._by_computation: weakref.WeakKeyDictionary[Any, Recipe] = weakref.WeakKeyDictionary()
        self.by_executable: weakref.WeakKeyDictionary[Any, Recipe] = weakref.WeakKeyDictionary()
        self.note = ""
        self.on_lowered: list[Callable[[Recipe], None]] = []
        """Called with each recipe whose devices and module are known, before JAX compiles it for its
        own devices: a sizer may start the target's compile then, beside JAX's."""

    def install(self) -> bool:
        """Hook JAX (imported already); False, with `note` saying why, where this JAX offers no hook."""
        with self._lock:
            if self._users:
                self._users += 1
                return True
            try:
                hooked = internals.lowering()
            except ImportError as exc:
                self.note = f"JAX's lowering internals could not be imported ({exc})"
                return False
            pxla = hooked.pxla
            missing = [
                name
                for name, present in (
                    ("pxla.lower_sharding_computation", callable(getattr(pxla, "lower_sharding_computation", None))),
                    (
                        "pxla.MeshComputation.compile",
                        callable(getattr(getattr(pxla, "MeshComputation", None), "compile", None)),
                    ),
                    ("pxla.ExecuteReplicated", isinstance(getattr(pxla, "ExecuteReplicated", None), type)),
                )
                if not present
            ]
            if missing:
                self.note = f"this JAX lacks {', '.join(missing)} (tested with JAX {SUPPORTED_JAX})"
                return False
            self.lower = pxla.lower_sharding_computation
            self._signature = inspect.signature(self.lower)
            if "closed_jaxpr" not in self._signature.parameters:
                self.note = (
                    f"this JAX's lower_sharding_computation takes no closed_jaxpr (tested with JAX {SUPPORTED_JAX})"
                )
                return False
            self._patches.replace(pxla, "lower_sharding_computation", self._wrap_lower)
            self._patches.replace(pxla.MeshComputation, "compile", self._wrap_compile)
            compiler: Any = hooked.compiler
            if callable(getattr(compiler, "_get_cache_key", None)):
                self._patches.replace(compiler, "_get_cache_key", _no_persistent_cache_when_retargeting)
            mlir: Any = hooked.mlir
            if getattr(mlir, "warnings", None) is warnings:
                self._patches.replace(mlir, "warnings", WarningsUnlessRetargeting)
            self._users = 1
            return True

    def uninstall(self) -> None:
        with self._lock:
            if self._users == 0:
                return
            self._users -= 1
            if self._users == 0:
                self._patches.restore()

    def _wrap_lower(self, original: Callable[..., Any]) -> Callable[..., Any]:
        hooks = self

        def lower_sharding_computation(*args: Any, **kwargs: Any) -> Any:
            computation = original(*args, **kwargs)
            if not compiling_for_target():
                try:
                    assert hooks._signature is not None
                    bound = hooks._signature.bind(*args, **kwargs)
                    hooks._by_computation[computation] = Recipe(dict(bound.arguments))
                except (TypeError, AssertionError):  # an unexpected call: that executable stays unsized
                    pass
            return computation

        return lower_sharding_computation

    def _wrap_compile(self, original: Callable[..., Any]) -> Callable[..., Any]:
        hooks = self

        def compile(computation: Any, *args: Any, **kwargs: Any) -> Any:
            if hooks.on_lowered and not compiling_for_target():
                early = hooks._by_computation.get(computation)
                if early is not None and not early.devices:
                    hooks._describe(early, computation)
                    if early.devices:
                        for listener in list(hooks.on_lowered):
                            listener(early)
            executable = original(computation, *args, **kwargs)
            # once attached, the executable holds the recipe (compile() returns that same executable again)
            recipe = hooks._by_computation.pop(computation, None) if not compiling_for_target() else None
            if recipe is not None:
                hooks._attach(executable, recipe, computation)
            return executable

        return compile

    def _attach(self, executable: Any, recipe: Recipe, computation: Any) -> None:
        """Link the `ExecuteReplicated` that `executable` (a MeshExecutable) builds, lazily, to `recipe`."""
        if not recipe.devices:
            self._describe(recipe, computation, executable)
        built = getattr(executable, "_unsafe_call", None)
        if built is not None:
            self._remember(built, recipe)
            return
        build = getattr(executable, "build_unsafe_call", None)
        if build is None or getattr(build, "_devmem_recipe", None) is not None:
            return
        hooks = self

        def build_unsafe_call() -> Any:
            call = build()
            hooks._remember(call, recipe)
            return call

        build_unsafe_call._devmem_recipe = recipe  # type: ignore[attr-defined]
        try:
            executable.build_unsafe_call = build_unsafe_call
        except AttributeError:
            pass

    def _describe(self, recipe: Recipe, computation: Any, executable: Any = None) -> None:
        """The recipe's devices (its device assignment, in order) and module text; no devices where
        neither the computation nor the executable names them yet."""
        device_list = getattr(computation, "_device_list", None)
        if device_list is None and executable is not None:
            device_list = devices_of(getattr(executable, "xla_executable", None))
        recipe.devices = tuple(device_list or ())
        if recipe.source:
            return
        try:
            recipe.source = internals.module_text(computation)
        except Exception:  # unnamed: a sizer lowers it again to name it
            recipe.source = ""

    def _remember(self, call: Any, recipe: Recipe) -> None:
        try:
            self.by_executable[call] = recipe
        except TypeError:  # not weak-referenceable: left unsized
            pass


hooks = LoweringHooks()


class WarningsUnlessRetargeting:
    """The `warnings` module as JAX's lowering (jax/_src/interpreters/mlir.py) calls it: a warning it
    gives while a program is lowered again for another target is the user's own lowering's warning
    again ("Some donated buffers were not usable", said once already as JAX lowered it for the CPU),
    and a test that counts its warnings would count it twice: dropped. Every other call, as before,
    attributed to the same line of JAX's."""

    def __init__(self, module: Any) -> None:
        self._module = module

    def warn(self, *args: Any, stacklevel: int = 1, **kwargs: Any) -> None:
        if not compiling_for_target():
            self._module.warn(*args, stacklevel=stacklevel + 1, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


def _no_persistent_cache_when_retargeting(original: Callable[..., Any]) -> Callable[..., Any]:
    """JAX's persistent compilation cache (when the user enabled it) keeps retargeted executables
    out: compile-only executables stored there fail to load on the next run, with a warning."""

    def get_cache_key(*args: Any, **kwargs: Any) -> Any:
        return None if compiling_for_target() else original(*args, **kwargs)

    return get_cache_key


def devices_of(xla_executable: Any) -> tuple[Any, ...]:
    try:
        return tuple(xla_executable.local_devices())
    except Exception:
        return ()


class NotMappable(Exception):
    """Something in the computation names a device that is not in its device assignment."""


class DeviceMap:
    """Rewrites shardings, meshes, devices and jaxprs from one set of devices to another."""

    def __init__(self, mapping: dict[Any, Any]) -> None:
        from jax.sharding import Mesh, NamedSharding, Sharding, SingleDeviceSharding  # JAX: only where it runs

        types = internals.sharding_types()
        self.mapping = mapping
        self._closed_jaxpr, self._jaxpr = internals.jaxpr_types()
        self._device_type = types.device
        self._mesh, self._named, self._single, self._gspmd = Mesh, NamedSharding, SingleDeviceSharding, types.gspmd
        self._sharding_base = Sharding
        self._seen: dict[int, Any] = {}

    def device(self, device: Any) -> Any:
        try:
            return self.mapping[device]
        except KeyError:
            raise NotMappable(f"the computation names {device}, which is not in its device assignment") from None

    def value(self, value: Any) -> Any:
        """`value` with every device replaced; the same object where nothing changed."""
        if isinstance(value, (str, bytes, int, float, bool, type(None))):
            return value
        key = id(value)
        if key in self._seen:
            return self._seen[key]
        result = self._value(value)
        self._seen[key] = result
        return result

    def _value(self, value: Any) -> Any:
        if isinstance(value, self._device_type):
            return self.device(value)
        if isinstance(value, self._single):
            return self._single(self.device(value._device), memory_kind=value.memory_kind)
        if isinstance(value, self._named):
            mesh = self.value(value.mesh)
            if mesh is value.mesh:
                return value
            return self._named(
                mesh,
                value.spec,
                memory_kind=value.memory_kind,
                _logical_device_ids=getattr(value, "_logical_device_ids", None),
            )
        if isinstance(value, self._gspmd):
            return self._gspmd(
                tuple(self.device(d) for d in value._devices), value._hlo_sharding, memory_kind=value.memory_kind
            )
        if isinstance(value, self._mesh):
            if value.empty:
                return value
            import numpy as np  # numpy: JAX's own dependency, here only where JAX runs

            devices = np.vectorize(self.device, otypes=[object])(value.devices)
            return self._mesh(devices, value.axis_names, axis_types=value.axis_types)
        if isinstance(value, self._sharding_base):
            raise NotMappable(f"the computation holds a {type(value).__name__}, which cannot be moved to other devices")
        closed = self._closed_jaxpr
        if closed is not None and isinstance(value, closed) and value.jaxpr is not value:
            # JAX 0.11 made ClosedJaxpr and Jaxpr one class, whose `.jaxpr` is itself: the Jaxpr branch below
            jaxpr = self.value(value.jaxpr)
            return value if jaxpr is value.jaxpr else closed(jaxpr, value.consts)
        if isinstance(value, self._jaxpr):
            eqns = [self._equation(eqn) for eqn in value.eqns]
            if all(new is old for new, old in zip(eqns, value.eqns)):
                return value
            return value.replace(eqns=eqns)
        if type(value) in (tuple, list):
            items = [self.value(item) for item in value]
            if all(new is old for new, old in zip(items, value)):
                return value
            return type(value)(items)
        return value

    def _equation(self, eqn: Any) -> Any:
        params = {name: self.value(param) for name, param in eqn.params.items()}
        if all(params[name] is eqn.params[name] for name in params):
            return eqn
        return eqn.replace(params=params)


def lower_for(recipe: Recipe, devices: list[Any]) -> Any:
    """JAX's lowering of the recipe's jaxpr again, with `devices` (of another platform) where its own
    devices were: the i-th device of its assignment becomes `devices[i]`. Returns JAX's
    MeshComputation; raises NotMappable where something inside names a device it cannot move."""
    from jax.sharding import SingleDeviceSharding  # JAX: imported only where it runs

    UnspecifiedValue = internals.sharding_types().unspecified

    if len(devices) != len(recipe.devices):
        raise NotMappable(f"the executable runs on {len(recipe.devices)} device(s), not {len(devices)}")
    device_map = DeviceMap(dict(zip(recipe.devices, devices)))
    arguments = {name: device_map.value(value) for name, value in recipe.arguments.items()}
    if len(devices) == 1 and not _names_a_device(arguments):
        # nothing said where to run: JAX would take its default backend (the CPU); name the device
        only = SingleDeviceSharding(devices[0])
        for name in ("in_shardings", "out_shardings"):
            arguments[name] = tuple(only if isinstance(s, UnspecifiedValue) else s for s in arguments[name])
    if "pgle_profiler" in arguments:
        arguments["pgle_profiler"] = None
    parameters = arguments.get("lowering_parameters")
    if dataclasses.is_dataclass(parameters) and hasattr(parameters, "hoist_constants_as_args"):
        # constants stay in the module: hoisted, they would carry the CPU arrays' shardings
        arguments["lowering_parameters"] = dataclasses.replace(parameters, hoist_constants_as_args=False)  # type: ignore[type-var]
    if hooks.lower is None:
        raise NotMappable("JAX's lowering is not hooked")
    with retargeting():
        return hooks.lower(**arguments)


def _names_a_device(arguments: dict[str, Any]) -> bool:
    from jax.sharding import Mesh, NamedSharding, SingleDeviceSharding  # JAX: imported only where it runs

    shardings = (*arguments.get("in_shardings", ()), *arguments.get("out_shardings", ()))
    return any(
        isinstance(s, SingleDeviceSharding)
        or (isinstance(s, NamedSharding) and isinstance(s.mesh, Mesh) and not s.mesh.empty)
        for s in shardings
    )
