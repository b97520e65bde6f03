"""Every user setting, defined once: its name, help, allowed values, default and parser. The pytest
plugin (`plugin/settings.py`) registers each as `--devmem-NAME`, a `devmem_NAME` ini key and a
`DEVMEM_NAME` environment variable; the `devmem` command (`cli/`) builds the flags it shares with the
plugin (`--mode`, `--fraction`, `--device`, `--tolerance`, `--baselines`) from the same entries through
`add_option`, as pytest-benchmark's plugin and CLI share their option helpers, so the two cannot drift.
Imports neither pytest nor the plugin: the command runs without them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .gate.tolerance import DEFAULT_TOLERANCE, TOLERANCE_HELP, parse_tolerance
from .model.device import DEFAULT_SIM_CAPACITY, DEVICE_SPEC_HELP
from .model.gpu_targets import GPU_SPECS
from .model.pool.policy import ALLOWED_MODES, parse_fraction, parse_mode
from .model.tpu_targets import TPU_SPECS
from .present.report import REPORT_FORMATS
from .units import format_size

COMPILE_TARGET_CHOICES = ("auto", "cpu", *GPU_SPECS, *TPU_SPECS)
COMPILE_TARGET_HELP = (
    "Whose compile sizes each JAX executable's buffers: auto (default: a sim: GPU or TPU preset is sized as "
    "that device; sim:SIZE, which names no GPU, and a real GPU keep their own compile's), cpu, or a GPU or TPU to size "
    f"them for ({', '.join([*GPU_SPECS, *TPU_SPECS])}). A GPU or TPU needs its deviceless compiler: "
    "devmem compilers install."
)


def parse_compile_target(value: str) -> str:
    """`auto`, `cpu` or a GPU or TPU preset's name (any case); ValueError naming the value and the choices."""
    names = {name.lower(): name for name in COMPILE_TARGET_CHOICES}
    found = names.get(str(value).strip().lower())
    if found is None:
        raise ValueError(f"invalid devmem compile target {value!r}: allowed are {', '.join(COMPILE_TARGET_CHOICES)}")
    return found


@dataclass(frozen=True)
class Option:
    """One user setting: its command-line option, ini key and environment variable."""

    name: str
    help: str  # the plugin's help, which names the allowed values and the default
    metavar: str = ""
    flag: bool = False
    values: str = ""  # what is allowed, for another help (the devmem command's) to say the same
    default: str | None = None  # the value in effect where the user gives none
    parse: Callable[[str], object] | None = None  # the check both the plugin and the command run on a value

    def parsed(self, value: str) -> object:
        """`value` checked and converted by the setting's parser (a DevmemError or ValueError naming the
        value and what is allowed); as given where the setting has none."""
        return value if self.parse is None else self.parse(value)

    @property
    def option(self) -> str:
        return f"--devmem-{self.name}"

    @property
    def dest(self) -> str:
        return f"devmem_{self.name.replace('-', '_')}"

    @property
    def ini(self) -> str:
        return self.dest

    @property
    def env(self) -> str:
        return f"DEVMEM_{self.name.replace('-', '_').upper()}"


OPTIONS = (
    Option(
        "mode",
        f"Measure every test under this allocation regime: {ALLOWED_MODES}.",
        "MODE",
        values=ALLOWED_MODES,
        parse=parse_mode,
    ),
    Option(
        "fraction",
        "Fraction of device memory for the 'fraction' regime (or the limit of another), in (0, 1]. Implies --devmem-mode=fraction when no mode is given.",
        "F",
        values="in (0, 1]",
        parse=parse_fraction,
    ),
    Option(
        "device",
        f"Device to measure on: {DEVICE_SPEC_HELP}. Default: auto (GPU 0 when one is present, else a simulated {format_size(DEFAULT_SIM_CAPACITY)} device).",
        "SPEC",
        values=DEVICE_SPEC_HELP,
        default="auto",
    ),
    Option(
        "report",
        f"Write the per-test records to FILE; the format follows the extension: {', '.join(REPORT_FORMATS)}.",
        "FILE",
    ),
    Option(
        "baselines", "Directory of stored baselines. Default: baselines/ at the rootdir.", "DIR", default="baselines"
    ),
    Option(
        "update",
        "Write or refresh the baselines of the tests that ran (and only those), and remove those of tests the collected suite no longer has; no test fails for a change.",
        flag=True,
    ),
    Option(
        "tolerance",
        f"How far a metric may move from its baseline: {TOLERANCE_HELP}. Default: {DEFAULT_TOLERANCE} on peak_bytes_in_use.",
        "SPEC",
        values=TOLERANCE_HELP,
        default=DEFAULT_TOLERANCE,
        parse=parse_tolerance,
    ),
    Option(
        "strict",
        "Fail tests that have no baseline, and the session when baselines exist for tests that no longer exist.",
        flag=True,
    ),
    Option(
        "frameworks",
        "Frameworks the suite runs together, e.g. jax,tf. Every measured test's frameworks share its devices in the model of the machine anyway; this says which to expect.",
        "LIST",
    ),
    Option(
        "artifacts",
        "For each test that fails pytest-devmem's checks, leave its trace (.csv) and a self-contained picture of it (.html) in DIR; the failure says where.",
        "DIR",
    ),
    Option(
        "cache-dir",
        "Also keep the deviceless GPU and TPU compiles' sizes in DIR, a cache of your own shared by every project (as JAX_COMPILATION_CACHE_DIR is JAX's): read after pytest's cache directory, and what it holds is copied there. Default: none, nothing is kept outside the project.",
        "DIR",
    ),
    Option(
        "verify-entries",
        "Distrust the compiler entries beside the baselines that git REF does not hold as they are (those a pull request adds or edits; REF e.g. origin/main): compile their programs again, and fail each test whose entry the compiler contradicts. Empty: off (as a workflow sets it on pushes).",
        "REF",
    ),
    Option(
        "compilers",
        "The folder that holds the deviceless GPU and TPU compilers (devmem compilers install --dir DIR), loaded by a session that sizes for a GPU or TPU preset and by no other program. Default: the user's cache, one folder per jaxlib version (~/.cache/pytest-devmem/compilers/jaxlib-VERSION-pyX.Y-MACHINE).",
        "DIR",
    ),
    Option(
        "benchmark-json",
        "Write each measured test's peak as github-action-benchmark's customSmallerIsBetter JSON to FILE.",
        "FILE",
    ),
    Option(
        "max-leak",
        "Fail every measured test after which the frameworks still hold more than SIZE of the memory it allocated (e.g. 1MiB); the marker's max_leak= overrides it.",
        "SIZE",
    ),
    Option(
        "max-fragmentation",
        "Fail every measured test whose pools' fragmentation goes above F (0 to 1, XLA's measure) at any moment; the marker's max_fragmentation= overrides it.",
        "F",
    ),
    Option(
        "limit",
        "Fail every measured test whose peak device memory is above SIZE (e.g. 2GiB); the marker's limit= overrides it for one test.",
        "SIZE",
    ),
    Option(
        "cuda-context",
        "Device memory one process's CUDA context holds on each device in the model of the machine. Default: 512MiB, at most an eighth of the device.",
        "SIZE",
    ),
    Option(
        "find-min-fraction",
        "Report for each measured test the smallest fraction at which it passes under prealloc (replaying its trace).",
        flag=True,
    ),
    Option("compile-target", COMPILE_TARGET_HELP, "TARGET", default="auto", parse=parse_compile_target),
    Option(
        "traces",
        "Write each measured test's device-allocation trace to DIR, one RMM-style CSV per test and regime (columns Thread,Time,Action,Pointer,Size,Stream,Source,Label,Device,Process); a trace of 20,000 events or more also gets its Arrow IPC file (.arrow) beside it where pyarrow is installed.",
        "DIR",
    ),
    Option(
        "what-if",
        "Report which measured tests would run out of memory on a device of SIZE (e.g. 16GiB), replaying their traces.",
        "SIZE",
    ),
    Option(
        "targets",
        "Also run every measured test on each of these simulated devices (comma-separated sim:SIZE or sim:PRESET, e.g. sim:H100-80GB,sim:T4,sim:16GiB) and report per test and target its peak, the target's capacity, whether it fits and which compile sized it: a table in the summary and the report, and a picture (devmem plot REPORT --targets). This reruns the measured tests once per target (one child process per target and regime, after the session's tests): the run costs about one more run of them per target. A what-if view: the targets' figures are never compared with baselines nor stored as ones. A TPU target runs under its runtime's regime (compact), every other under the test's.",
        "LIST",
    ),
    Option(
        "disable",
        "Measure nothing: the tests run as without the plugin, its markers stay valid and the devmem fixture still gives a pool (unmeasured); nothing is compared or written (with --devmem-update, -report, -strict, -targets, -benchmark-json, -autosave, -traces, -artifacts, -what-if or -find-min-fraction: a usage error). As pytest-benchmark's --benchmark-disable.",
        flag=True,
    ),
    Option(
        "only",
        "Run only the tests pytest-devmem measures (with --devmem-mode, every test; without it, those with the devmem marker) and deselect the rest. As pytest-benchmark's --benchmark-only.",
        flag=True,
    ),
    Option(
        "autosave",
        "Keep this run's JSON report as .devmem/<machine id>/NNNN_<commit>_<time>[_dirty].json at the rootdir, as pytest-benchmark's --benchmark-autosave does; devmem history reads that folder.",
        flag=True,
    ),
)


OPTION = {option.name: option for option in OPTIONS}
"""Each setting by its name (`OPTION["mode"]`)."""


def add_option(
    add: Callable[..., object],
    option: Option,
    *,
    prefix: str = "devmem-",
    help: str | None = None,
    default: object = None,
    **more: object,
) -> None:
    """Register `option` as `--{prefix}{name}` through `add`: pytest's `group.addoption` for the
    plugin (prefix `devmem-`, default None so that the environment and the ini file still apply), or
    an argparse parser's `add_argument` for the devmem command (no prefix, its own help sentence
    around `option.values`, and its default; `more`, such as `type=Path`, goes to `add` as it is).
    The flag's kind and metavar come from `option`."""
    text = (help if help is not None else option.help).replace("%", "%%")  # argparse formats help strings with %
    flag = f"--{prefix}{option.name}"
    dest = f"{prefix}{option.name}".replace("-", "_")
    if option.flag:
        add(flag, action="store_true", default=default, dest=dest, help=text, **more)
    else:
        add(flag, default=default, dest=dest, metavar=option.metavar, help=text, **more)
