"""The four allocation regimes JAX and TensorFlow document, as pool policies, and `compact`: the
defragmenting allocator TPU runtimes have, as a what-if."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from ...errors import InvalidSettingError
from ...units import shown_value


class Mode(str, enum.Enum):
    """How the pool draws memory from the device."""

    PREALLOC = "prealloc"
    """One region of 75% of capacity on first use, sub-allocated best-fit, never given back."""
    FRACTION = "fraction"
    """As PREALLOC with a chosen fraction."""
    ONDEMAND = "ondemand"
    """Every request goes to the device exactly and is freed at once (JAX's `platform` allocator)."""
    GROWTH = "growth"
    """Regions reserved as needed, 2 MiB then doubling, and kept (TensorFlow's allow_growth; JAX
    without preallocation), capped at the fraction x capacity (0.75 by default)."""
    COMPACT = "compact"
    """As PREALLOC, with an allocator that moves live buffers together when an allocation would
    otherwise fail for fragmentation, as TPU runtimes defragment (JAX on GPUs does not: a what-if)."""


MODE_ALIASES = {"platform": Mode.ONDEMAND}
ALLOWED_MODES = ", ".join(
    [m.value for m in Mode] + [f"{alias} (= {mode.value})" for alias, mode in MODE_ALIASES.items()]
)

DEFAULT_PREALLOC_FRACTION = 0.75
"""JAX's default XLA_PYTHON_CLIENT_MEM_FRACTION."""

_DEFAULT_FRACTION = {
    Mode.PREALLOC: DEFAULT_PREALLOC_FRACTION,
    # XLA sizes its allocator as total memory x fraction whether it preallocates or grows
    # (xla/pjrt/gpu/gpu_helpers.cc: allocator_memory = total_memory * memory_fraction)
    Mode.GROWTH: DEFAULT_PREALLOC_FRACTION,
    Mode.ONDEMAND: 1.0,  # the platform allocator has no cap of its own
    Mode.COMPACT: DEFAULT_PREALLOC_FRACTION,
}


def parse_mode(value: str) -> Mode:
    """The Mode a user's string names (case-insensitive, aliases allowed)."""
    if isinstance(value, Mode):
        return value
    text = str(value).strip().lower()
    if text in MODE_ALIASES:
        return MODE_ALIASES[text]
    try:
        return Mode(text)
    except ValueError:
        raise InvalidSettingError(f"unknown devmem mode {value!r}: allowed are {ALLOWED_MODES}") from None


def parse_fraction(value: object) -> float:
    """A fraction of device memory in (0, 1]; strings such as '.5' are accepted."""
    try:
        fraction = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):  # an int beyond any float (10**400) overflows
        raise InvalidSettingError(
            f"invalid devmem fraction {shown_value(value)}: must be a number in (0, 1], e.g. 0.5"
        ) from None
    if isinstance(value, bool) or not math.isfinite(fraction) or not 0.0 < fraction <= 1.0:
        raise InvalidSettingError(f"invalid devmem fraction {shown_value(value)}: must be in (0, 1], e.g. 0.5")
    return fraction


@dataclass(frozen=True)
class Policy:
    """A mode and the share of device capacity the pool may hold (its `bytes_limit`)."""

    mode: Mode
    fraction: float

    @classmethod
    def of(cls, mode: str | Mode, fraction: object = None) -> Policy:
        """Validate and complete a mode and optional fraction.

        `fraction` mode needs a fraction; the others take their documented default when none is given
        (prealloc and growth .75, ondemand the whole device) and use a given one as their limit.
        `prealloc` with a fraction other than .75 is the `fraction` mode, so the two compare equal.
        """
        parsed = parse_mode(mode)
        if fraction is None:
            if parsed is Mode.FRACTION:
                raise InvalidSettingError("devmem mode 'fraction' needs a fraction in (0, 1], e.g. fraction=0.5")
            return cls(parsed, _DEFAULT_FRACTION[parsed])
        value = parse_fraction(fraction)
        if parsed is Mode.PREALLOC and value != DEFAULT_PREALLOC_FRACTION:
            parsed = Mode.FRACTION  # preallocating another fraction is what 'fraction' means
        return cls(parsed, value)

    @property
    def preallocates(self) -> bool:
        """True where the whole limit is reserved as one region on first use."""
        return self.mode in (Mode.PREALLOC, Mode.FRACTION, Mode.COMPACT)

    @property
    def label(self) -> str:
        """Short text for reports: `prealloc`, `fraction=0.5`, `growth`, `growth(fraction=0.5)`, `ondemand`."""
        if self.mode is Mode.FRACTION:
            return f"fraction={self.fraction:g}"  # also prealloc with a non-default fraction
        if self.fraction != _DEFAULT_FRACTION[self.mode]:
            return f"{self.mode.value}(fraction={self.fraction:g})"
        return self.mode.value

    def __str__(self) -> str:
        return self.label

    @classmethod
    def from_label(cls, label: str) -> Policy:
        """The policy a `label` names (`prealloc`, `fraction=0.5`, `growth(fraction=0.5)`,
        `ondemand`; an older record's `default` is prealloc, see `canonical_label`)."""
        text = canonical_label(label.strip())
        if text.startswith("fraction="):
            return cls.of("fraction", text.split("=", 1)[1])
        if text.endswith(")") and "(fraction=" in text:
            mode, fraction = text[:-1].split("(fraction=", 1)
            return cls.of(mode, fraction)
        return cls.of(text)


LEGACY_LABELS = {"default": "prealloc"}
"""Labels older reports and baselines wrote: `default` was a marked test measured without a session
regime, which has always run and been replayed under prealloc."""


def canonical_label(label: str) -> str:
    """A regime label as records write it now: an older `default` reads as `prealloc`."""
    return LEGACY_LABELS.get(label, label)
