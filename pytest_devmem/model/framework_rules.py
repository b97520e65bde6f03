"""One row per framework whose device memory the plugin measures: what a trace calls it, how messages
name it, the names the marker's `frameworks=` accepts, the module whose import starts its capture, the
environment variables its allocator reads (those a regime sets or clears), whether a value the user
set wins over the regime's, and the settings a what-if replay proposes for its allocator.

Everything that differs by framework reads it here: the marker (`gate/marks.py`), the regime
(`regime.py`), the allocators' setups (`frameworks.py`), the what-if fixes (`whatif.py`) and the
capture (`capture/measurement.py`, which installs one `capture.framework.FrameworkCapture` per row with
a module). Adding a framework is a row here, its allocator's setup in `frameworks.SETUPS`, its regime
variables in `regime.REGIME_VALUES`, and one capture package (docs/architecture.md walks through it).
The plugin's own pool (the `devmem` fixture) is a row too: it has no module and no variables.
No pytest, no frameworks here.
"""

from __future__ import annotations

from dataclasses import dataclass

FRACTION_VARIABLE = "XLA_CLIENT_MEM_FRACTION"
DEPRECATED_FRACTION_VARIABLE = "XLA_PYTHON_CLIENT_MEM_FRACTION"


@dataclass(frozen=True)
class FrameworkRules:
    """What the plugin knows of one framework's allocator, as data."""

    source: str
    """The trace's name for its events (`jax`)."""
    name: str
    """How messages name it (`JAX`)."""
    aliases: tuple[str, ...]
    """Names `devmem(frameworks=...)` accepts for it, lowercase."""
    module: str | None
    """The top-level module whose import starts its capture; None: the plugin's own, always there."""
    variables: tuple[str, ...]
    """The environment variables its allocator reads that a regime sets or clears."""
    user_wins: bool
    """A value the user set for one of `variables` is kept over the regime's (TensorFlow's regime
    comes from its own variables, so one framework at a fraction beside another growing can be tested)."""
    growth_fix: str
    """The setting that makes its allocator grow as needed, as a what-if fix names it."""
    ondemand_fix: str
    """The setting that makes it allocate each buffer on its own, as a what-if fix names it."""


def _regime_fix(mode: str) -> str:
    return f"run it under mode {mode!r} (marker devmem(mode={mode!r}) or --devmem-mode={mode})"


JAX = FrameworkRules(
    source="jax",
    name="JAX",
    aliases=("jax",),
    module="jax",
    # read by jaxlib when its backend starts (xla_client.generate_pjrt_gpu_plugin_options)
    variables=(
        "XLA_PYTHON_CLIENT_PREALLOCATE",
        DEPRECATED_FRACTION_VARIABLE,
        FRACTION_VARIABLE,
        "XLA_PYTHON_CLIENT_ALLOCATOR",
    ),
    user_wins=False,
    growth_fix="set XLA_PYTHON_CLIENT_PREALLOCATE=false",
    ondemand_fix="set XLA_PYTHON_CLIENT_ALLOCATOR=platform",
)
POOL = FrameworkRules(
    source="pool",
    name="the devmem pool",
    aliases=(),
    module=None,
    variables=(),
    user_wins=False,
    growth_fix=_regime_fix("growth"),
    ondemand_fix=_regime_fix("ondemand"),
)
TENSORFLOW = FrameworkRules(
    source="tensorflow",
    name="TensorFlow",
    aliases=("tf", "tensorflow"),
    module="tensorflow",
    # read when TensorFlow first touches a GPU (gpu_device.cc, gpu_bfc_allocator.cc)
    variables=("TF_FORCE_GPU_ALLOW_GROWTH", "TF_GPU_ALLOCATOR", "TF_ENABLE_GPU_GARBAGE_COLLECTION"),
    user_wins=True,
    growth_fix="set TF_FORCE_GPU_ALLOW_GROWTH=true",
    ondemand_fix="set TF_GPU_ALLOCATOR=cuda_malloc_async",
)

RULES: tuple[FrameworkRules, ...] = (JAX, POOL, TENSORFLOW)
"""Every framework, in the order the machine creates their allocators on a device."""

BY_SOURCE = {rules.source: rules for rules in RULES}
MARKER_NAMES = {alias: rules.source for rules in RULES for alias in rules.aliases}
"""`devmem(frameworks=...)`'s names: `tf` and `tensorflow` are one framework."""
FRAMEWORK_VARIABLES = tuple(variable for rules in RULES for variable in rules.variables)
"""Every variable a regime may set; those it does not set are removed so no stale setting leaks in."""


def display_name(source: str) -> str:
    """How messages name the allocator of a trace source (the source itself where unknown)."""
    rules = BY_SOURCE.get(source)
    return rules.name if rules is not None else source
