"""The process environment a session sets before any framework starts, and puts back after it: the
session regime's JAX and TensorFlow variables, TensorFlow's CPU allocator, the deviceless GPU
compile's setting, and an xdist worker's GPU. Frameworks read these once, when they start, which is
why this runs in pytest_load_initial_conftests, before any conftest can import them. TensorFlow's GPUs
also take the regime through tf.config once it is imported (`configure_tensorflow_gpus`)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Mapping, MutableMapping

import pytest

from ..capture.jax import compilers  # imports no framework
from ..capture.jax.cuda_plugin import environment_for_deviceless_compile
from ..capture.jax.tpu_plugin import environment_for_libtpu

# None of these imports a framework: JAX and TensorFlow must start after this module has set their variables.
from ..capture.tensorflow.cpu_allocator import ONEDNN_VARIABLE, CpuAllocatorSetting, prepare_cpu_allocator
from ..capture.tensorflow.cpu_allocator import VARIABLE as TF_CPU_BFC
from ..capture.tensorflow.warmup import INTEROP_VARIABLE, ORDER_VARIABLE, prepare_interop, prepare_order
from ..model.framework_rules import FRAMEWORK_VARIABLES
from ..model.pool.policy import Mode
from ..model.regime import Regime
from .compile_target import compilers_needed
from .settings import Settings
from .workers import gpu_count

early_env_key = pytest.StashKey["dict[str, str | None]"]()  # framework variables before this session's regime
conflicts_key = pytest.StashKey["list[str]"]()  # the user's JAX variables that contradict the session regime
gpu_env_key = pytest.StashKey["str | None"]()  # CUDA_VISIBLE_DEVICES before this worker's GPU was chosen
deviceless_env_key = pytest.StashKey["Mapping[str, str | None]"]()  # what the deviceless GPU compile's setting replaced
tensorflow_cpu_key = pytest.StashKey[CpuAllocatorSetting]()  # TF_CPU_ALLOCATOR_USE_BFC, as this session left it
interop_key = pytest.StashKey[bool]()  # TF_NUM_INTEROP_THREADS was set by this session
session_environment_key = pytest.StashKey["dict[str, str]"]()
"""The environment once the session has collected its tests, before any runs: what a child process
starts from, whatever a test set in os.environ meanwhile (`JAX_PLATFORMS=cuda` in one test must not
reach the next test's child)."""
order_key = pytest.StashKey[bool]()  # TF_DETERMINISTIC_ORDER was set by this session
user_env_key = pytest.StashKey["Mapping[str, str | None]"]()  # what recording the user's variables replaced


USER_ENVIRONMENT = "DEVMEM_USER_ENVIRONMENT"
"""The framework variables as the user set them (JSON, name -> value or null), written by the first
session that applies a regime: an xdist worker, or a child a marker's regime starts, inherits its
controller's regime variables in its environment, and would take them for the user's (a
`growth`-marked test in a `prealloc` session's worker kept `TF_FORCE_GPU_ALLOW_GROWTH=false`)."""


def users_environment(environ: MutableMapping[str, str]) -> dict[str, str | None]:
    """Put back in `environ` the user's framework variables a controlling session recorded
    (`USER_ENVIRONMENT`), or record them there where none did; what this process set, to undo."""
    recorded = environ.get(USER_ENVIRONMENT)
    if recorded is not None:
        try:
            values = json.loads(recorded)
        except ValueError:
            values = None
        if isinstance(values, dict) and all(
            name in FRAMEWORK_VARIABLES and (value is None or isinstance(value, str)) for name, value in values.items()
        ):
            restore(values, environ)
            return {}
    environ[USER_ENVIRONMENT] = json.dumps({name: environ.get(name) for name in FRAMEWORK_VARIABLES})
    return {USER_ENVIRONMENT: recorded}


def prepare(config: pytest.Config, settings: Settings) -> None:
    """Everything the frameworks read at start-up, set before they start; what it replaced is kept
    on the config for `restore_all`. Contradicting JAX variables are kept for pytest_configure to
    refuse (with the regime left unapplied)."""
    if settings.regime is not None and settings.sets_framework_variables:
        config.stash[user_env_key] = users_environment(os.environ)
        conflicts = settings.regime.conflicts(os.environ)
        config.stash[conflicts_key] = conflicts
        if conflicts:
            return
    if settings.effective_regime is not None and settings.sets_framework_variables:
        config.stash[early_env_key] = settings.effective_regime.apply()
    config.stash[tensorflow_cpu_key] = prepare_cpu_allocator(os.environ)  # before TensorFlow creates its CPU device
    config.stash[interop_key] = prepare_interop(os.environ)  # before TensorFlow creates its thread pools
    config.stash[order_key] = prepare_order(os.environ)  # before TensorFlow's executor first runs a graph
    load_compilers(settings)  # on sys.path before JAX imports its CUDA kernels' handlers and finds its plugins
    config.stash[deviceless_env_key] = prepare_deviceless_compile()  # before JAX starts its backends
    apply_worker_gpu(config, settings)


def prepare_late(config: pytest.Config, settings: Settings) -> None:
    """What `prepare` would have set, where the plugin came too late for the early hook."""
    if tensorflow_cpu_key not in config.stash:
        config.stash[tensorflow_cpu_key] = prepare_cpu_allocator(os.environ)
    load_compilers(settings)
    apply_worker_gpu(config, settings)


def load_compilers(settings: Settings) -> None:
    """The deviceless compilers this session sizes with, loaded from their folder (the
    `--devmem-compilers` setting's, DEVMEM_COMPILERS's or the default) onto this process's
    sys.path, and no others: a session on the CPU, `sim:SIZE` or a real GPU loads none. JAX imported
    after this finds them as if installed (its `jax_plugins` discovery, `import libtpu`;
    capture/jax/compilers.py). Where one cannot be loaded, its problem is kept for the compile
    target's note (pytest_configure), which names the command that installs it."""
    for platform in compilers_needed(settings.device_spec, settings.compile_target):
        compilers.load(platform, settings.compilers_dir)


def prepare_deviceless_compile() -> dict[str, str | None]:
    """Where XLA:GPU's compiler can be imported (installed, or loaded from the compilers' folder) on
    a machine without a GPU: the setting that lets it register while JAX runs on the CPU, without a
    traceback at JAX's start (capture/jax/cuda_plugin.py); where libtpu can be, on a machine without
    a TPU: what keeps its start quiet and off the real TPU's lock (capture/jax/tpu_plugin.py). The
    previous values, to put back."""
    wanted = environment_for_libtpu(os.environ)
    if compilers.installed_cuda_major() is not None:
        wanted.update(environment_for_deviceless_compile(os.environ, gpu_count() > 0))
    previous = {name: os.environ.get(name) for name in wanted}
    os.environ.update(wanted)
    return previous


def apply_worker_gpu(config: pytest.Config, settings: Settings) -> None:
    """Give this xdist worker its own GPU, before any framework initialises CUDA."""
    plan = settings.worker_plan
    if plan is None or plan.cuda_visible_devices is None or gpu_env_key in config.stash:
        return
    config.stash[gpu_env_key] = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = plan.cuda_visible_devices


def restore_frameworks(config: pytest.Config) -> None:
    """Put back what `prepare` set for the frameworks (not the regime: `restore_all` does that)."""
    setting = config.stash.get(tensorflow_cpu_key, None)
    if setting is not None and setting.set_here:
        restore({TF_CPU_BFC: None})
    if setting is not None and setting.onednn_set_here:
        restore({ONEDNN_VARIABLE: None})
    if config.stash.get(interop_key, False):
        restore({INTEROP_VARIABLE: None})
    if config.stash.get(order_key, False):
        restore({ORDER_VARIABLE: None})
    if deviceless_env_key in config.stash:
        restore(config.stash[deviceless_env_key])
    if user_env_key in config.stash:
        restore(config.stash[user_env_key])


def restore_all(config: pytest.Config, regime_env: Mapping[str, str | None] | None) -> None:
    """Put back everything the session set: the regime's variables, the frameworks', the worker's GPU."""
    if regime_env is not None:
        restore(regime_env)
    if gpu_env_key in config.stash:
        restore({"CUDA_VISIBLE_DEVICES": config.stash[gpu_env_key]})
    restore_frameworks(config)


def tensorflow_installed() -> bool:
    if "tensorflow" in sys.modules:
        return True
    try:
        return importlib.util.find_spec("tensorflow") is not None
    except (ImportError, ValueError):
        return False


def restore(previous: Mapping[str, str | None], environ: MutableMapping[str, str] | None = None) -> None:
    """Put back the variables `Regime.apply` replaced."""
    target = os.environ if environ is None else environ
    for name, value in previous.items():
        if value is None:
            target.pop(name, None)
        else:
            target[name] = value


def configure_tensorflow_gpus(regime: Regime, capacity: int) -> str | None:
    """Apply the regime to TensorFlow's GPUs through tf.config, if TensorFlow is imported and has GPUs.

    `capacity` is the GPU's total memory (TensorFlow cannot tell it before initialising).
    Returns a warning when TensorFlow had already initialised its GPUs (the settings then cannot change).
    Does nothing, and imports nothing, when TensorFlow is not loaded.
    """
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return None
    gpus = tf.config.list_physical_devices("GPU")
    try:
        for gpu in gpus:
            if regime.mode is Mode.GROWTH:
                tf.config.experimental.set_memory_growth(gpu, True)
            elif regime.mode is Mode.FRACTION:
                limit = regime.tensorflow_memory_limit(capacity)
                if limit:
                    tf.config.set_logical_device_configuration(
                        gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=limit // 2**20)]
                    )
    except RuntimeError as exc:  # "Physical devices cannot be modified after being initialized"
        return (
            f"TensorFlow had already initialised its GPUs, so regime {regime.label} could not be applied to it: {exc}"
        )
    return None
