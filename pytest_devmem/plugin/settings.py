"""Session settings: each read once, from the command line, then the environment, then the ini file,
then the default. A bad value stops the run with a pytest.UsageError naming the value, where it came
from and what is allowed."""

from __future__ import annotations

import argparse
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ..compile_store import git_revision
from ..errors import DevmemError
from ..gate.baseline import BaselineStore
from ..gate.marks import normalize_frameworks, parse_max_fragmentation
from ..gate.tolerance import Tolerance, parse_tolerance
from ..model.device import Device
from ..model.pool.base import Pool
from ..model.regime import GPU_ONLY_MODES, TPU_RUNTIME, Regime, on_tpu
from ..model.targets import parse_targets
from ..model.tpu_targets import TpuSpec, tpu_min_fraction_refusal, tpu_regime_refusal, tpu_spec
from ..options import OPTION, OPTIONS, Option, add_option
from ..present.report import REPORT_FORMATS
from ..units import format_size, parse_size
from .compile_target import CompileTarget
from .items import DEFAULT_REGIME
from .workers import WorkerPlan, gpu_count, plan_workers, worker_index

T = TypeVar("T")

PLUGIN_NAME = "devmem-manager"
"""The name the session object is registered under (`config.pluginmanager.get_plugin(PLUGIN_NAME)`)."""


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("devmem", "device memory (pytest-devmem)")
    for option in OPTIONS:
        add_option(group.addoption, option)
        # a switch is declared a "bool", as pytest's own are: `pytest --help` says (bool), and pytest reads
        # true/false, yes/no, on/off, 1/0 (and a TOML boolean under [tool.pytest])
        text = f"{option.help} (ini form of {option.option})"
        if option.flag:
            parser.addini(option.ini, text, type="bool", default=None)
        else:
            parser.addini(option.ini, text, default=None)
    # internal: how a parent hands tests to a child process (isolation.py); hidden from --help
    group.addoption("--devmem-child-output", default=None, help=argparse.SUPPRESS)
    group.addoption("--devmem-child-nodes", default=None, help=argparse.SUPPRESS)


def raw_value(config: pytest.Config, option: Option) -> tuple[str | None, str]:
    """The setting's raw value and where it came from: command line, environment, ini, or unset."""
    value = config.getoption(option.dest, default=None)
    if value is None:  # before option parsing ends (pytest_load_initial_conftests) only these are known
        value = getattr(getattr(config, "known_args_namespace", None), option.dest, None)
    if value is not None:
        return str(value), option.option
    value = os.environ.get(option.env)
    if value:
        return value, f"environment variable {option.env}"
    try:
        value = config.getini(option.ini)
    except (pytest.UsageError, ValueError) as exc:  # a "bool" key pytest could not read: say which key
        raise pytest.UsageError(f"{exc} (from ini key {option.ini}): use true/false, yes/no, on/off or 1/0") from None
    if isinstance(value, bool):
        return ("true" if value else None), (f"ini key {option.ini}" if value else "default")
    if value:
        return str(value), f"ini key {option.ini}"
    return None, "default"


def _setting_text(config: pytest.Config, option: Option, value: object) -> str:
    """How the user wrote a setting that is in effect: `--devmem-x=V`, `DEVMEM_X=V` or `devmem_x = V`
    (in the ini file); "" when it is unset."""
    if value is None:
        return ""
    _, where = raw_value(config, option)
    if where == option.option:
        return f"{option.option}={value}"
    if where.startswith("environment variable "):
        return f"{option.env}={value}"
    if where.startswith("ini key "):
        return f"{option.ini} = {value} (ini)"
    return ""


MEASURING_OUTPUTS = (
    *("update", "report", "strict", "targets", "benchmark-json", "autosave"),
    *("traces", "artifacts", "what-if", "find-min-fraction"),
)
"""Settings that ask for what only a measuring session gives: refused with --devmem-disable, as
pytest-benchmark refuses --benchmark-disable with --benchmark-only (a CI that asked for its
benchmark JSON fails, rather than pass with its history lost)."""


def _given(config: pytest.Config, option: Option) -> str | None:
    """Where a setting that asks for something was given (a switch turned on, a value), or None."""
    value, where = raw_value(config, option)
    if value is None or (option.flag and not _flag(config, option.name)):
        return None
    return where if where == option.option else f"{option.option} ({where})"


def _checked(config: pytest.Config, name: str, parse: Callable[[str], T]) -> T | None:
    """The setting `name` as `parse` makes it (None where it is unset); a usage error naming where it came from."""
    value, where = raw_value(config, OPTION[name])
    if value is None:
        return None
    try:
        return parse(value)
    except (DevmemError, ValueError) as exc:
        raise pytest.UsageError(f"{exc} (from {where})") from None


def _parsed(config: pytest.Config, name: str) -> Any:
    """The setting checked by its own parser (`options.py`), the one the devmem command runs too."""
    return _checked(config, name, OPTION[name].parsed)


def _flag(config: pytest.Config, name: str) -> bool:
    return bool(_checked(config, name, parse_flag))


_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off", ""}


def parse_flag(value: str) -> bool:
    text = value.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"invalid switch value {value!r}: use true/false, yes/no, on/off or 1/0")


@dataclass(frozen=True)
class Settings:
    """Everything the session needs to know from the user, validated."""

    regime: Regime | None
    device_spec: str
    device_from: str  # where device_spec came from, for the message when the device cannot be opened
    report_path: Path | None
    baselines: Path
    update: bool
    tolerance: Tolerance
    strict: bool
    frameworks: tuple[str, ...] = ()
    find_min_fraction: bool = False
    what_if: int | None = None
    traces_dir: Path | None = None
    limit: int | None = None
    max_leak: int | None = None
    max_fragmentation: float | None = None
    compile_target: str | None = None  # auto, cpu or a GPU preset; None: auto
    compile_target_source: str = ""  # the setting as the user gave it (`DEVMEM_COMPILE_TARGET=cpu`), for messages
    benchmark_json: Path | None = None
    artifacts_dir: Path | None = None
    cache_dir: Path | None = None  # the user's own cache of deviceless compiles' sizes, beside the project's
    verify_entries: str | None = None  # the git revision whose stored compiler entries are believed (compile_store.py)
    compilers_dir: Path | None = None  # the deviceless compilers' folder; None: DEVMEM_COMPILERS's or the default
    cuda_context_bytes: int | None = None  # None: the model's default for the device's capacity
    fraction_chosen: bool = False
    worker_plan: WorkerPlan | None = None
    autosave: bool = False
    targets: tuple[str, ...] = ()  # other devices every measured test runs on (--devmem-targets), by name
    tpu: TpuSpec | None = None  # the TPU a sim: TPU preset stands for: its runtime's regime, no GPU variables

    @property
    def default_regime(self) -> Regime:
        """A measured test's regime where neither the session nor its marker names one: the
        frameworks' own defaults (prealloc) on a GPU, the TPU runtime's on a TPU."""
        return TPU_RUNTIME if self.tpu is not None else DEFAULT_REGIME

    @property
    def sets_framework_variables(self) -> bool:
        """Whether the regime's JAX and TensorFlow variables apply: XLA_PYTHON_CLIENT_* are GPU
        settings (JAX does not preallocate on a TPU)."""
        return self.tpu is None

    disable: bool = False
    only: bool = False

    @property
    def effective_regime(self) -> Regime | None:
        """What this process applies: the session's regime, or this xdist worker's share of it.
        Records keep the session regime's label, so baselines do not depend on -n."""
        return self.worker_plan.regime if self.worker_plan is not None else self.regime

    @property
    def traces_needed(self) -> bool:
        return self.find_min_fraction or self.what_if is not None


@dataclass(eq=False)
class SessionParts:
    """What a session decides once, before any test, and each of its parts reads: pytest's config,
    the settings, the device, the baseline store and the compile target (`DevmemSession` builds
    them; `Checks` and `SessionResults` are made of them)."""

    config: pytest.Config
    settings: Settings
    device: Device
    store: BaselineStore
    compile_target: CompileTarget


@dataclass
class DevmemFixture:
    """What the `devmem` fixture (`plugin/__init__.py`) gives a test: its regime, its pool on the
    session's device."""

    regime: Regime  # prealloc where neither --devmem-mode nor the marker names one
    pool: Pool
    device: Device


def load_settings(config: pytest.Config) -> Settings:
    """Read and validate every setting; pytest.UsageError on the first bad one."""
    disable, only = _disable_and_only(config)
    regime, fraction, device_spec, device_from, tpu = _regime_and_device(config)
    compile_target = _parsed(config, "compile-target")
    return Settings(
        regime=regime,
        device_spec=device_spec,
        device_from=device_from,
        report_path=_path_setting(config, "report", "report file", directory=False, suffixes=REPORT_FORMATS),
        baselines=_path_setting(
            config,
            "baselines",
            "baselines directory",
            directory=True,
            default=config.rootpath / str(OPTION["baselines"].default),
        ),  # type: ignore[arg-type]  # it has a default
        tolerance=_parsed(config, "tolerance") or parse_tolerance(str(OPTION["tolerance"].default)),
        frameworks=_checked(config, "frameworks", parse_frameworks) or (),
        what_if=_checked(config, "what-if", _positive_size),
        cuda_context_bytes=_checked(config, "cuda-context", _size_or_zero),
        limit=_checked(config, "limit", _positive_size),
        max_leak=_checked(config, "max-leak", _size_or_zero),
        max_fragmentation=_checked(config, "max-fragmentation", parse_max_fragmentation),
        compile_target=compile_target,
        compile_target_source=_setting_text(config, OPTION["compile-target"], compile_target),
        artifacts_dir=_path_setting(config, "artifacts", "artifacts directory", directory=True),
        cache_dir=_path_setting(config, "cache-dir", "cache directory", directory=True),
        verify_entries=_checked(config, "verify-entries", lambda text: git_revision(text) if text else None),
        compilers_dir=_path_setting(config, "compilers", "compilers directory", directory=True),
        benchmark_json=_path_setting(config, "benchmark-json", "benchmark JSON file", directory=False),
        traces_dir=_path_setting(config, "traces", "traces directory", directory=True),
        worker_plan=_worker_plan(config, regime, fraction is not None, device_spec, tpu),
        update=_flag(config, "update"),
        strict=_flag(config, "strict"),
        find_min_fraction=_flag(config, "find-min-fraction"),
        autosave=_flag(config, "autosave"),
        targets=_checked(config, "targets", parse_targets) or (),
        fraction_chosen=fraction is not None,
        tpu=tpu,
        disable=disable,
        only=only,
    )


def check_on_device(config: pytest.Config, settings: Settings, device: Device) -> None:
    """What can only be checked against the session's device: a CUDA context takes part of the
    device, at most all of it (where nothing is left, every allocation fails for capacity)."""
    context = settings.cuda_context_bytes
    if context is not None and context > device.capacity:
        raise pytest.UsageError(
            f"{_setting_text(config, OPTION['cuda-context'], format_size(context))} is more than the device "
            f"{device.name} holds ({format_size(device.capacity)}): a CUDA context takes part of a device, at most all of it"
        )


def _disable_and_only(config: pytest.Config) -> tuple[bool, bool]:
    """--devmem-disable and --devmem-only; a usage error where they contradict each other, or where
    --devmem-disable comes with an output that measures."""
    disable, only = _flag(config, "disable"), _flag(config, "only")
    if disable and only:
        raise pytest.UsageError(
            f"{OPTION['disable'].option} and {OPTION['only'].option} contradict each other: one measures nothing, the other runs only what is measured (as pytest-benchmark's --benchmark-disable and --benchmark-only)"
        )
    if disable:
        refused = [where for name in MEASURING_OUTPUTS if (where := _given(config, OPTION[name])) is not None]
        if refused:
            raise pytest.UsageError(
                f"{OPTION['disable'].option} measures nothing, so {' and '.join(refused)} would have nothing to "
                "write, check or run: drop one or the other (as --devmem-disable with --devmem-only)"
            )
    return disable, only


def _regime_and_device(config: pytest.Config) -> tuple[Regime | None, float | None, str, str, TpuSpec | None]:
    """The session's regime (None: each test's own, or the default), the fraction given, the device
    (and where it was given) and the TPU it stands for; on a TPU preset the TPU runtime's regime, or a
    usage error for a regime or a search that only a GPU has."""
    mode = _parsed(config, "mode")
    fraction = _parsed(config, "fraction")
    regime = None
    if mode is not None or fraction is not None:
        try:
            regime = Regime.of(mode or "fraction", fraction)
        except DevmemError as exc:
            raise pytest.UsageError(f"{exc} (from {OPTION['mode'].option} and {OPTION['fraction'].option})") from None
    device_spec, device_from = raw_value(config, OPTION["device"])
    device_spec = device_spec or str(OPTION["device"].default)
    tpu = tpu_spec(device_spec)
    if tpu is not None and regime is not None:
        if (
            fraction is not None and fraction != 1.0
        ) or regime.mode in GPU_ONLY_MODES:  # (1: all usable HBM, as a child is told)
            asked = (
                f"--devmem-fraction={fraction:g}"
                if fraction is not None and mode is None
                else f"--devmem-mode={regime.label}"
            )
            raise pytest.UsageError(
                f"{tpu_regime_refusal(tpu, asked)} (from {OPTION['mode'].option} and {OPTION['fraction'].option}, device {device_spec})"
            )
        regime = on_tpu(regime)
    if tpu is not None and _flag(config, "find-min-fraction"):
        raise pytest.UsageError(f"{tpu_min_fraction_refusal(tpu)} (device {device_spec})")
    return regime, fraction, device_spec, device_from, tpu


def _worker_plan(
    config: pytest.Config, regime: Regime | None, fraction_chosen: bool, device_spec: str, tpu: TpuSpec | None
) -> WorkerPlan | None:
    """How an xdist worker shares its device with the others (None outside a worker, and in a child)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker or config.getoption("devmem_child_output", default=None):
        return None
    count_text = os.environ.get("PYTEST_XDIST_WORKER_COUNT") or "0"
    try:
        count = int(count_text)
    except ValueError:
        raise pytest.UsageError(
            f"invalid PYTEST_XDIST_WORKER_COUNT={count_text!r}: pytest-xdist sets it to the number of workers, a whole number"
        ) from None
    if tpu is not None:  # a TPU's chips belong to one process: workers never share one, each keeps the runtime's regime
        return WorkerPlan(
            regime, note=f"{count} workers, each measured as the only process on its {tpu.description} chips"
        )
    uses_gpu = not device_spec.startswith("sim")
    return plan_workers(regime, fraction_chosen, worker_index(worker), count, gpu_count() if uses_gpu else 0, uses_gpu)


def parse_frameworks(value: str) -> tuple[str, ...]:
    return normalize_frameworks(tuple(name.strip() for name in value.split(",") if name.strip()))


def _path_setting(
    config: pytest.Config,
    name: str,
    what: str,
    *,
    directory: bool,
    default: Path | None = None,
    suffixes: tuple[str, ...] = (),
) -> Path | None:
    """A file or directory setting, made absolute against where pytest was started (`default` when
    unset). A usage error, naming the value and where it came from, when it has the wrong
    extension, is a directory where a file is written (or the reverse), or is a path the OS refuses."""
    text, where = raw_value(config, OPTION[name])
    if not text:
        if default is None:
            return None
        text, path = str(default), default
    else:
        path = Path(text)
    if suffixes and path.suffix.lower() not in suffixes:
        raise pytest.UsageError(
            f"invalid devmem {what} {text!r} (from {where}): the extension must be one of {', '.join(suffixes)}"
        )
    if not path.is_absolute():
        path = config.invocation_params.dir / path
    kind = _kind_of(path, what, where)
    if directory and kind == "other":
        raise pytest.UsageError(f"invalid devmem {what} {text!r} (from {where}): it exists and is not a directory")
    if not directory and kind == "directory":
        raise pytest.UsageError(f"invalid devmem {what} {text!r} (from {where}): it is a directory")
    return path


def _kind_of(path: Path, what: str, where: str) -> str:
    """ "directory", "other" (a file, say) or "missing"; a path the OS refuses (a name too long, a
    component that is a file) is a usage error naming it."""
    try:
        return "directory" if stat.S_ISDIR(os.stat(path).st_mode) else "other"
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        shown = str(path) if len(str(path)) <= 120 else str(path)[:100] + f"... ({len(str(path))} characters)"
        raise pytest.UsageError(f"invalid devmem {what} {shown!r} (from {where}): {exc.strerror or exc}") from None


def _size_or_zero(value: str) -> int:
    size = parse_size(value)
    if size < 0:
        raise ValueError(f"invalid size {value!r}: must be 0 bytes or more")
    return size


def _positive_size(value: str) -> int:
    size = parse_size(value)
    if size <= 0:
        raise ValueError(f"invalid size {value!r}: must be more than 0 bytes")
    return size
