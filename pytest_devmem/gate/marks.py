"""The `devmem` marker: parse and validate its arguments into a MarkSpec, and pure verdict functions.

Nothing here raises into a hook: `parse_mark` returns either a spec or an error message, which the
plugin raises in that test's setup, so one bad marker errors one test, not the session.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ..errors import DevmemError
from ..model.framework_rules import MARKER_NAMES
from ..model.pool.policy import Mode, parse_fraction, parse_mode
from ..model.regime import GPU_ONLY_MODES, Regime
from ..units import format_size, parse_size, shown_value
from .tolerance import parse_tolerance

MARK_NAME = "devmem"
MARK_KEYS = ("mode", "fraction", "limit", "tolerance", "frameworks", "max_compiles", "max_leak", "max_fragmentation")
MARK_ARGUMENTS = {
    "mode": "the test's regime: prealloc, fraction, ondemand (alias platform), growth or compact; a regime other than the session's runs the test in a child process started with it",
    "fraction": "a fraction in (0, 1]: what `fraction` preallocates, or the limit of another mode; given alone it means mode='fraction'",
    "limit": "fail the test when its peak in use is above this size (e.g. '2GiB'); overrides --devmem-limit",
    "tolerance": "this test's allowed change against its baseline (e.g. '5%', 'peak_bytes_in_use:5%,fragmentation:0.05'); overrides --devmem-tolerance",
    "frameworks": "the frameworks the test uses together, e.g. ('jax', 'tf'): checked for valid names",
    "max_compiles": "fail the test when one of its own jitted functions needs more than N executables (each distinct one it ran, compiled during it or found in a cache: a function compiled again for new shapes, dtypes or static arguments), naming the function and its shapes; JAX's eager helpers (jnp.zeros, jax.random.normal), compiled once per shape, do not count. A dict bounds the functions it names, e.g. max_compiles={'step': 1}",
    "max_leak": "fail the test when, after it and a garbage collection, the frameworks still hold more than this size of the memory it allocated; overrides --devmem-max-leak",
    "max_fragmentation": "fail the test when its pools' fragmentation (0 to 1, XLA's measure) goes above this at any moment; overrides --devmem-max-fragmentation",
}
"""Each argument of `@pytest.mark.devmem`, for people: the marker reference in the documentation is
generated from this table (a test holds it to MARK_KEYS)."""
MARKER_HELP = (
    "devmem(mode=None, fraction=None, limit=None, tolerance=None, frameworks=(), max_compiles=None, max_leak=None, max_fragmentation=None): measure this test's "
    "device memory, under the given regime (a child process when it differs from the session's); "
    "fail it above `limit` bytes (e.g. '2GiB'), when one of its jitted functions needs more than `max_compiles` executables, "
    "when the frameworks still hold more than `max_leak` of its memory after it (e.g. '1MiB'), "
    "or when its pools' fragmentation goes above `max_fragmentation` (0 to 1)."
)


@dataclass(frozen=True)
class MarkSpec:
    """What a test's `devmem` marker asks for."""

    mode: Mode | None = None
    fraction: float | None = None
    limit: int | None = None
    tolerance: str | None = None
    frameworks: tuple[str, ...] = ()
    max_compiles: int | dict[str, int] | None = None
    max_leak: int | None = None
    max_fragmentation: float | None = None
    max_fragmentation_off: bool = False  # max_fragmentation=None given: the session's bound does not apply

    def regime(self, session: Regime | None) -> Regime | None:
        """The regime this test runs under: the marker's where it names one, else the session's.

        A fraction alone keeps the session's mode (or means mode 'fraction' if the session has none).
        """
        if self.mode is None and self.fraction is None:
            return session
        mode = self.mode or (session.mode if session is not None else Mode.FRACTION)
        return Regime.of(mode, self.fraction)

    def on_tpu(self, target: str) -> tuple[MarkSpec, dict[str, str]]:
        """This spec as a TPU preset runs it, and why each key it left out does not apply.

        A GPU regime (mode, fraction) has no meaning on a TPU, so one suite gates both targets.
        """
        gpu_mode = self.mode in GPU_ONLY_MODES
        left = {"mode": gpu_mode, "fraction": self.fraction is not None and (gpu_mode or self.fraction != 1.0)}
        why = (
            f"a GPU regime, and {target} runs the TPU runtime's (HBM on demand, defragmented: compact); "
            "JAX does not preallocate on a TPU"
        )
        kept = replace(self, mode=None if gpu_mode else self.mode, fraction=None if left["fraction"] else self.fraction)
        return kept, {key: why for key, out in left.items() if out}


MarkArguments = tuple[tuple[object, ...], Mapping[str, object]]
"""One marker's positional and keyword arguments."""

COMBINING_RULE = "markers combine key by key from module to class to function (a parametrized case's marks= last), the closest level wins"


def combine_marks(
    levels: Sequence[tuple[str, Sequence[MarkArguments]]],
) -> tuple[tuple[object, ...], dict[str, object]] | str:
    """The arguments a test's `devmem` markers give together, or the text of what is wrong: `levels`
    are (what the level is, its markers), from the farthest (a module's `pytestmark`) to the closest
    (the function's own decorators, then a parametrized case's `marks=`). Keys combine one by one,
    the closest level's value winning (`limit=None` there takes a farther limit away); two markers
    of one level that give one key two different values are an error, since which was meant cannot
    be told (the order decorators stack in is no intent)."""
    combined: dict[str, object] = {}
    positional: tuple[object, ...] = ()
    for where, markers in levels:
        level: dict[str, object] = {}
        for args, kwargs in markers:
            positional = positional or tuple(args)  # refused by parse_mark, naming them
            for key, value in kwargs.items():
                if key in level and not _same(level[key], value):
                    return (
                        f"@pytest.mark.devmem: two values for {key} on {where}, {shown_value(level[key])} and "
                        f"{shown_value(value)}: give one ({COMBINING_RULE})"
                    )
                level[key] = value
        combined.update(level)
    return positional, combined


def _same(first: object, second: object) -> bool:
    """Whether two marker values are one (any value: its == may raise or give no bool)."""
    try:
        return type(first) is type(second) and bool(first == second)
    except Exception:
        return first is second


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
        max_leak = parse_size(kwargs["max_leak"]) if kwargs.get("max_leak") is not None else None  # type: ignore[arg-type]
        if max_leak is not None and max_leak < 0:
            return f"@pytest.mark.devmem max_leak={kwargs['max_leak']!r}: must be 0 bytes or more, e.g. max_leak='1MiB'"
        max_compiles = kwargs.get("max_compiles")
        if max_compiles is not None and not _valid_max_compiles(max_compiles):
            return (
                f"@pytest.mark.devmem max_compiles={shown_value(max_compiles)}: must be a whole number, 0 or more "
                "(e.g. max_compiles=1), or a dict from function names to such numbers (e.g. max_compiles={'step': 1})"
            )
        max_fragmentation = kwargs.get("max_fragmentation")
        if max_fragmentation is not None:
            max_fragmentation = parse_max_fragmentation(max_fragmentation)
    except (DevmemError, ValueError, TypeError, OverflowError) as exc:  # whatever the value's type or size
        return f"@pytest.mark.devmem: {exc}"
    off = "max_fragmentation" in kwargs and kwargs["max_fragmentation"] is None
    return MarkSpec(mode, fraction, limit, tolerance, frameworks, max_compiles, max_leak, max_fragmentation, off)  # type: ignore[arg-type]


def _valid_max_compiles(value: object) -> bool:
    def count(bound: object) -> bool:
        return isinstance(bound, int) and not isinstance(bound, bool) and bound >= 0

    if isinstance(value, dict):
        return bool(value) and all(isinstance(name, str) and name and count(bound) for name, bound in value.items())
    return count(value)


def parse_max_fragmentation(value: object) -> float:
    """A fragmentation bound in [0, 1]; ValueError naming the value and the rule."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(
            f"max_fragmentation={shown_value(value)}: must be a number from 0 to 1, e.g. max_fragmentation=0.3"
        )
    try:
        bound = float(value)
    except (ValueError, OverflowError):  # an int beyond any float (10**400) overflows
        raise ValueError(
            f"max_fragmentation={shown_value(value)}: must be a number from 0 to 1, e.g. max_fragmentation=0.3"
        ) from None
    if not 0.0 <= bound <= 1.0:  # also NaN
        raise ValueError(
            f"max_fragmentation={shown_value(value)}: must be from 0 to 1 (XLA's measure: free bytes outside the largest free block, over free bytes)"
        )
    return bound


def fragmentation_verdict(devices: list[dict[str, object]] | None, max_fragmentation: float | None) -> str | None:
    """The failure when a device's pools were more fragmented at any moment than `max_fragmentation`
    allows, naming the moment and the buffers that pinned the holes then."""
    if max_fragmentation is None or not devices:
        return None
    worst = max(devices, key=lambda d: d.get("worst_fragmentation") or 0.0)  # type: ignore[arg-type, return-value]
    value = worst.get("worst_fragmentation")
    if not isinstance(value, (int, float)) or value <= max_fragmentation:
        return None
    lines = [
        f"device memory fragmented: fragmentation reached {value:.3f} on {worst.get('device')} after event {worst.get('worst_fragmentation_event')}, "
        f"above max_fragmentation {max_fragmentation:g} (XLA's measure: free bytes outside the largest free block, over free bytes)"
    ]
    pins = worst.get("pinning")
    if isinstance(pins, list) and pins:
        lines.append("  the holes were pinned by:")
        lines += [f"  - {pin}" for pin in pins]
    return "\n".join(lines)


def normalize_frameworks(value: object) -> tuple[str, ...]:
    """('jax', 'tf') -> ('jax', 'tensorflow'); ValueError naming an unknown framework."""
    names = (value,) if isinstance(value, str) else value
    if not isinstance(names, (tuple, list)):
        raise ValueError(f"frameworks={value!r}: must be a tuple of names from {', '.join(MARKER_NAMES)}")
    result = []
    for name in names:
        if not isinstance(name, str) or name.lower() not in MARKER_NAMES:
            raise ValueError(f"unknown framework {name!r} in frameworks={value!r}; allowed: {', '.join(MARKER_NAMES)}")
        result.append(MARKER_NAMES[name.lower()])
    return tuple(dict.fromkeys(result))


def compiles_verdict(
    needed: dict[str, int] | None,
    max_compiles: int | dict[str, int] | None,
    functions: dict[str, dict[str, object]] | None = None,
    aliases: Mapping[str, str] | None = None,
) -> str | None:
    """The failure when the test needs more executables of one jitted function than its marker
    allows: a function compiled again for new shapes, dtypes or static arguments. Counted as what the
    test *needs* (`needed`: each distinct executable it ran, compiled during it or found in a cache),
    not as what happened to compile during it, which depends on what ran before in the process.

    `max_compiles=N` bounds each of the test's own functions: JAX's eager helpers (`functions`'
    `by_jax`: `jnp.zeros`' `broadcast_in_dim`, `jax.random.normal`'s `_normal`), which JAX compiles
    once per shape, do not count. `max_compiles={"step": 1}` bounds the functions it names (by
    name, `step`, as JAX names the executable, `jit(step)`, or by the name the user bound it to,
    `train_step = jax.jit(_step)`: `aliases` maps those to the function's), JAX's own included, and
    fails where the test ran no function of that name. The message names each function, the shapes
    of its first executable and what differs in each next one."""
    if max_compiles is None or needed is None:
        return None
    functions = functions or {}
    if isinstance(max_compiles, dict):
        bounds: dict[str, int] = {}
        missing = []
        for key, limit in max_compiles.items():
            names = (key, (aliases or {}).get(key))
            matched = [name for name in needed if name in names or _function_name(name) in names]
            if not matched:
                missing.append(key)
            bounds.update(dict.fromkeys(matched, limit))
        if missing:
            ran = ", ".join(needed) or "none"
            usable = sorted(
                {*map(_function_name, needed), *(k for k, v in (aliases or {}).items() if f"jit({v})" in needed)}
            )
            return (
                f"max_compiles names {', '.join(map(repr, missing))}, which the test did not run (it ran: {ran}; "
                f"names that match: {', '.join(usable) or 'none'})"
            )
    else:
        bounds = {name: max_compiles for name in needed if not functions.get(name, {}).get("by_jax")}
    over = sorted(
        ((name, needed[name], bound) for name, bound in bounds.items() if needed[name] > bound),
        key=lambda item: (-item[1], item[0]),
    )
    if not over:
        return None
    lines = [
        "the test compiled a function more often than max_compiles allows (each distinct executable it needed, compiled here or found in a cache):"
    ]
    for name, count, bound in over:
        where = functions.get(name, {}).get("defined_in")
        lines.append(f"  {name}{f' ({where})' if where else ''}: {count} executables, max_compiles={bound}")
        signatures, arguments = functions.get(name, {}).get("signatures"), functions.get(name, {}).get("arguments")
        if isinstance(signatures, list) and signatures:
            shown = signatures[:MAX_SIGNATURES_SHOWN]
            lines.append(f"    {_cut(shown[0])}")
            lines += [f"    then {_differences(a, b, arguments)}" for a, b in zip(shown, shown[1:])]
            if len(signatures) > MAX_SIGNATURES_SHOWN:
                lines.append(f"    ... and {len(signatures) - MAX_SIGNATURES_SHOWN} more")
    lines.append(
        "  a new shape, dtype or static argument compiles it again (pad or bucket shapes; mark arguments static only where they take few values)"
    )
    return "\n".join(lines)


MAX_SIGNATURES_SHOWN = 8
"""Executables of one function whose parameters a max_compiles failure lists."""


def _cut(signature: str, characters: int = 200) -> str:
    return signature if len(signature) <= characters else signature[:characters] + "..."


def _differences(before: str, after: str, arguments: object) -> str:
    """What differs between two executables' signatures: each parameter that changed, by its path
    (or position) and its two shapes; or that a static argument or closed-over value did."""
    names = arguments if isinstance(arguments, list) else []
    (before, _, was), (after, _, static) = before.partition(" with "), after.partition(" with ")
    old, new = _parameters(before), _parameters(after)
    changed = [
        f"{names[i] if i < len(names) and names[i] else f'parameter {i}'} {a or 'none'} → {b or 'none'}"
        for i, (a, b) in enumerate(itertools.zip_longest(old, new))
        if a != b
    ]
    changed += [f"static {was or 'none'} → {static or 'none'}"] if was != static else []
    if changed:
        return ", ".join(changed)
    return "the same parameters: a static argument's value, or a value the function closes over, differs"


def _parameters(signature: str) -> list[str]:
    """The parameters of "(f32[4,3], (s32[], f32[2]))->f32[4]", split at the commas between them."""
    text, depth, parts, start = signature.split(")->")[0].removeprefix("("), 0, [], 0
    for index, character in enumerate(text):
        if character in "([":
            depth += 1
        elif character in ")]":
            depth -= 1
        elif character == "," and depth == 0:
            parts.append(text[start:index].strip())
            start = index + 1
    return [*parts, text[start:].strip()] if text.strip() else parts


def _function_name(executable: str) -> str:
    """ "step" of "jit(step)" (JAX's name for a jitted function's executable); the name itself otherwise."""
    head, _, rest = executable.partition("(")
    return rest[:-1] if head and rest.endswith(")") else executable


def leak_verdict(kept: dict[str, int] | None, max_leak: int | None) -> str | None:
    """The failure when the frameworks still hold more of the test's own memory than `max_leak`
    after it (and after a garbage collection), naming who allocated what is kept."""
    if max_leak is None or kept is None:
        return None
    leaked = sum(kept.values())
    if leaked <= max_leak:
        return None
    held = ", ".join(
        f"{name} {format_size(size)}" for name, size in sorted(kept.items(), key=lambda item: (-item[1], item[0]))
    )
    return (
        f"device memory leaked: {format_size(leaked)} ({leaked} bytes) that the test allocated is still held after it, "
        f"more than max_leak {format_size(max_leak)}: {held} (kept in a global, a cache or a closure?)"
    )


def limit_verdict(peak_bytes: int | None, limit: int | None, held: str = "") -> str | None:
    """The failure message when a test's peak exceeds its limit, else None; `held` names who held the peak."""
    if limit is None or peak_bytes is None or peak_bytes <= limit:
        return None
    over = peak_bytes - limit
    return (
        f"device memory limit exceeded: peak {format_size(peak_bytes)} ({peak_bytes} bytes) > "
        f"limit {format_size(limit)} ({limit} bytes), over by {format_size(over)} ({over / limit:.1%}){held}"
    )
