"""The pytest plugin (entry point `pytest11: devmem`): the hooks that start a session (options, the
environment the frameworks read when they start, the session object), and the `devmem` fixture.
Module-level hooks only prepare and register; the session object's hooks (session.py) read as the
life of a test."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Generator

import pytest

from .. import hookspec, supported
from ..capture.jax import compilers
from ..errors import DevmemError
from ..gate.baseline import BaselineStore
from ..gate.baseline_files import BaselineFormatError
from ..gate.marks import MARKER_HELP
from ..hardware.devices import open_device
from ..model.device import Device
from ..present.text import terminal_lines
from .compile_target import CompileTarget
from .compile_target import resolve as resolve_compile_target
from .disabled import DisabledSession
from .environment import conflicts_key, early_env_key, prepare, prepare_late, restore_all, tensorflow_cpu_key
from .isolation import open_child_channel
from .session import DevmemSession
from .settings import PLUGIN_NAME, DevmemFixture, Settings, add_options, check_on_device, load_settings


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """The hooks a project may implement (pytest_devmem/hookspec.py)."""
    pluginmanager.add_hookspecs(hookspec)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """Set what JAX and TensorFlow read when they start, before any conftest can import them."""
    try:
        settings = load_settings(early_config)
    except pytest.UsageError:
        return  # pytest_configure reports it properly
    if settings.disable:
        return  # measuring nothing: the frameworks start as the user set them
    prepare(early_config, settings)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    try:
        settings = load_settings(config)
        if settings.disable:
            config.pluginmanager.register(DisabledSession(), PLUGIN_NAME)
            return
        refused = supported.problems()
        if refused:
            raise pytest.UsageError("; ".join(refused))
        if settings.regime is not None and settings.sets_framework_variables:
            conflicts = config.stash.get(conflicts_key, None)
            if conflicts is None:  # the plugin came too late for the early check: the environment is still the user's
                conflicts = settings.regime.conflicts(os.environ)
            if conflicts:
                raise pytest.UsageError("; ".join(conflicts))
        try:
            device = open_device(settings.device_spec)
        except DevmemError as exc:
            raise pytest.UsageError(f"{exc} (from {settings.device_from})") from None
        check_on_device(config, settings, device)
        target = compile_target(settings, device)
        mark_onednn(config, device)
        try:
            store = BaselineStore(settings.baselines, device.device_class).load()
        except BaselineFormatError as exc:
            raise pytest.UsageError(terminal_lines(f"corrupt or foreign baseline file: {exc}")) from None
        child = None
        if (
            config.getoption("devmem_child_output", default=None) is not None
            or config.getoption("devmem_child_nodes", default=None) is not None
        ):
            child = open_child_channel(config)
    except pytest.UsageError:
        restore_all(config, config.stash.get(early_env_key, None))  # undo what pytest_load_initial_conftests set
        raise
    prepare_late(config, settings)
    config.pluginmanager.register(DevmemSession(config, settings, device, store, target, child), PLUGIN_NAME)


@pytest.fixture
def devmem(request: pytest.FixtureRequest) -> Generator[DevmemFixture, None, None]:
    """The test's regime and a pool under it on the session's device; the pool is closed afterwards."""
    session = request.config.pluginmanager.get_plugin(PLUGIN_NAME)
    if not isinstance(session, (DevmemSession, DisabledSession)):
        raise pytest.UsageError(
            "the devmem fixture needs the pytest-devmem plugin, which is disabled here (-p no:devmem?)"
        )
    fixture = session.make_fixture(request.node)
    try:
        yield fixture
    finally:
        fixture.pool.close()


def compile_target(settings: Settings, device: Device) -> CompileTarget:
    """Whose compile sizes JAX's executables this session; the device class says so where the sizes
    are not the device's own (so a baseline of one compile's sizes is never compared with another's)."""
    target = resolve_compile_target(
        settings.compile_target,
        device,
        compilers.problem("gpu"),
        compilers.problem("tpu"),
        settings.compile_target_source,
    )
    if target.class_suffix and device.kind.simulated:
        device.class_suffix = target.class_suffix
    return target


def mark_onednn(config: pytest.Config, device: Device) -> None:
    """oneDNN on by the user's choice changes TensorFlow's CPU figures (its kernels' scratch is outside
    TensorFlow's allocator): a simulated device's class says so, so those baselines stay apart."""
    setting = config.stash.get(tensorflow_cpu_key, None)
    if setting is None or not setting.onednn_on or not device.kind.simulated:
        return
    if importlib.util.find_spec("tensorflow") is not None:  # without TensorFlow, oneDNN changes nothing here
        device.class_suffix += "-onednn"
