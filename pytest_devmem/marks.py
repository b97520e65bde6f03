"""The `devmem` marker: parse and validate its arguments into a MarkSpec, and pure verdict functions.

Nothing here raises into a hook: `parse_mark` returns either a spec or an error message, which the
plugin raises in that test's setup, so one bad marker errors one test, not the session.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import DevmemError
from .pool.policy import Mode, parse_fraction, parse_mode
from .regime import Regime
from .tolerance import parse_tolerance
from .units import format_size, parse_size

MARK_NAME = "devmem"
MARK_KEYS = ("mode", "fraction", "limit", "tolerance", "frameworks")
FRAMEWORKS = {"jax": "jax", "tf": "tensorflow", "tensorflow": "tensorflow"}
MARKER_HELP = (
    "devmem(mode=None, fraction=None, limit=None, tolerance=None, frameworks=()): measure this test's "
    "device memory, under the given regime (a child process when it differs from the session's); "
    "fail it above `limit` bytes (e.g. '2GiB')."
)


@dataclass(frozen=True)
class MarkSpec:
    """What a test's `devmem` marker asks for."""

    mode: Mode | None = None
    fraction: float | None = None
    limit: int | None = None
    tolerance: str | None = None
    frameworks: tuple[str, ...] = ()

    def regime(self, session: Regime | None) -> Regime | None:
        """The regime this test runs under: the marker's where it names one, else the session's.

        A fraction alone keeps the session's mode (or means mode 'fraction' if the session has none).
        """
        if self.mode is None and self.fraction is None:
            return session
        mode = self.mode or (session.mode if session is not None else Mode.FRACTION)
        return Regime.of(mode, self.fraction)


def parse_mark(args: tuple[object, ...], kwargs: dict[str, object]) -> MarkSpec | str:
    """A MarkSpec, or the text of what is wrong with the marker's arguments."""
    if args:
        return f"@pytest.mark.devmem takes keyword arguments only ({', '.join(MARK_KEYS)}), got positional {args!r}"
    unknown = sorted(set(kwargs) - set(MARK_KEYS))
    if unknown:
        return f"@pytest.mark.devmem got unknown argument(s) {', '.join(unknown)}; allowed: {', '.join(MARK_KEYS)}"
    try:
        mode = parse_mode(kwargs["mode"]) if kwargs.get("mode") is not None else None  # type: ignore[arg-type]
        fraction = parse_fraction(kwargs["fraction"]) if kwargs.get("fraction") is not None else None
        if mode is Mode.FRACTION and fraction is None:
            return "@pytest.mark.devmem(mode='fraction') needs a fraction in (0, 1], e.g. fraction=0.5"
        limit = None
        if kwargs.get("limit") is not None:
            limit = parse_size(kwargs["limit"])  # type: ignore[arg-type]
            if limit <= 0:
                return f"@pytest.mark.devmem limit={kwargs['limit']!r}: must be more than 0 bytes, e.g. limit='2GiB'"
        tolerance = kwargs.get("tolerance")
        if tolerance is not None and not isinstance(tolerance, str):
            return f"@pytest.mark.devmem tolerance={tolerance!r}: must be a string such as '5%' or '64MiB'"
        if tolerance is not None:
            parse_tolerance(tolerance)
        frameworks = normalize_frameworks(kwargs.get("frameworks", ()))
    except (DevmemError, ValueError) as exc:
        return f"@pytest.mark.devmem: {exc}"
    return MarkSpec(mode, fraction, limit, tolerance, frameworks)


def normalize_frameworks(value: object) -> tuple[str, ...]:
    """('jax', 'tf') -> ('jax', 'tensorflow'); ValueError naming an unknown framework."""
    names = (value,) if isinstance(value, str) else value
    if not isinstance(names, (tuple, list)):
        raise ValueError(f"frameworks={value!r}: must be a tuple of names from {', '.join(FRAMEWORKS)}")
    result = []
    for name in names:
        if not isinstance(name, str) or name.lower() not in FRAMEWORKS:
            raise ValueError(f"unknown framework {name!r} in frameworks={value!r}; allowed: {', '.join(FRAMEWORKS)}")
        result.append(FRAMEWORKS[name.lower()])
    return tuple(dict.fromkeys(result))


def limit_verdict(peak_bytes: int | None, limit: int | None) -> str | None:
    """The failure message when a test's peak exceeds its limit, else None."""
    if limit is None or peak_bytes is None or peak_bytes <= limit:
        return None
    over = peak_bytes - limit
    return (
        f"device memory limit exceeded: peak {format_size(peak_bytes)} ({peak_bytes} bytes) > "
        f"limit {format_size(limit)} ({limit} bytes), over by {format_size(over)} ({over / limit:.1%})"
    )
