"""Answers from a recorded trace by replaying it on the machine with other settings: the smallest
fraction a test needs, how a device of another size fares, and the fixes that make an out-of-memory
test fit. Every answer is a replay, never a guess. No pytest, no frameworks here."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from ..units import format_size
from .explain import allocator_name
from .fragmentation import Defragmentation, Pin, defragment, long_lived_first, pinning_buffers
from .framework_rules import BY_SOURCE, FRACTION_VARIABLE, TENSORFLOW, display_name
from .frameworks import AllocatorSetup, tensorflow_fraction_limit
from .machine import KIND_TEXT, MachineRun, MachineSpec, run_machine
from .trace import Trace

Setups = Mapping[str, AllocatorSetup]
MIN_FRACTION_FLOOR = 0.01
"""Where the search for the smallest fraction stops: answers are in hundredths of the device, so an
answer of 0.01 means "0.01 or less" (the trace may fit in less; that was not tried)."""


def fits(trace: Trace, setups: Setups, spec: MachineSpec) -> bool:
    """Whether `trace` replays on the machine without running out of memory."""
    return run_machine(trace, setups, spec).fits


def _with_fraction(
    setups: Setups, kinds: tuple[str, ...], fraction: float, mode: str | None = None
) -> dict[str, AllocatorSetup]:
    return {
        kind: replace(setup, fraction=fraction, mode=mode or setup.mode) if kind in kinds else setup
        for kind, setup in setups.items()
    }


def _search(passes: Callable[[int], bool], low: int, high: int, smallest: bool) -> int | None:
    """The smallest (or largest) number of hundredths in [low, high] for which `passes` holds.
    A BFC pool's success is not strictly monotonic in its size (a region under twice a request is
    handed out whole), so a bisection is followed by a walk that verifies the answer's neighbour."""
    if low > high:
        return None
    lo, hi = low, high
    found: int | None = None
    while lo <= hi:
        middle = (lo + hi) // 2
        if passes(middle):
            found = middle
            if smallest:
                hi = middle - 1
            else:
                lo = middle + 1
        elif smallest:
            lo = middle + 1
        else:
            hi = middle - 1
    if found is None:
        return None
    step = -1 if smallest else 1
    while low <= found + step <= high and passes(found + step):
        found += step
    return found


def find_min_fraction(trace: Trace, setups: Setups, spec: MachineSpec) -> float | None:
    """The smallest preallocated fraction (in hundredths) of JAX and the pool at which `trace`
    fits, or None if even the whole device is too small. MIN_FRACTION_FLOOR is the floor tried."""
    kinds = ("jax", "pool")
    peak = trace.peak_live_bytes()
    if peak == 0:
        return MIN_FRACTION_FLOOR
    start = max(1, math.floor(peak / spec.capacity * 100))
    found = _search(
        lambda h: fits(trace, _with_fraction(setups, kinds, h / 100, "prealloc"), spec), start, 100, smallest=True
    )
    return None if found is None else found / 100


def min_fraction_text(value: float | None) -> str:
    """An answer of find_min_fraction for people: `0.37`, `0.01 or less (the search stops at 0.01)`,
    or that it does not fit at all."""
    if value is None:
        return "does not fit even at 1.00"
    if value <= MIN_FRACTION_FLOOR:
        return f"{MIN_FRACTION_FLOOR:.2f} or less (the search stops at {MIN_FRACTION_FLOOR:.2f})"
    return f"{value:.2f}"


@dataclass(frozen=True)
class WhatIf:
    """How a trace fares on a device of another size."""

    capacity: int
    ok: bool
    message: str = ""


def what_if(trace: Trace, setups: Setups, spec: MachineSpec) -> WhatIf:
    """Replay `trace` on a machine whose devices have `spec.capacity` bytes."""
    run = run_machine(trace, setups, spec)
    if run.oom is None:
        return WhatIf(spec.capacity, True)
    oom = run.oom
    return WhatIf(
        spec.capacity,
        False,
        f"event {oom.event}: {oom.allocator} could not allocate {format_size(oom.requested)} on {oom.device} ({KIND_TEXT[oom.kind]})",
    )


@dataclass(frozen=True)
class Fixes:
    """The settings that make a failing trace fit, each proven by a replay, or why none does; for a
    fragmentation failure, the buffers that pin the holes and what defragmentation would do."""

    settings: list[str]
    why_none: str = ""
    pins: list[Pin] = field(default_factory=list)
    defragmentation: Defragmentation | None = None

    def record(self, oom: dict[str, object]) -> None:
        """Write these into a record's `oom`."""
        oom["fixes"] = self.settings
        if self.why_none:
            oom["why_none"] = self.why_none
        if self.pins:
            oom["pinning"] = [pin.text() for pin in self.pins]
            oom["pins"] = [pin.to_json() for pin in self.pins]
        if self.defragmentation is not None:
            oom["defragmentation"] = self.defragmentation.to_json()

    def text(self) -> str:
        if self.settings:
            return ", or ".join(self.settings)
        return "none found: " + self.why_none


def proven_fixes(
    trace: Trace, setups: Setups, spec: MachineSpec, run: MachineRun, fraction_variable: str = FRACTION_VARIABLE
) -> Fixes:
    """Each setting a user could change for the allocators this trace uses, replayed; those that fit."""
    oom = run.oom
    if oom is None:
        return Fixes([])
    sources = {name for name in trace.names if name} & set(setups) or {"pool"}
    present = {name: setups[name] for name in sorted(sources) if name in setups}
    tried: list[str] = []
    found: list[str] = []

    def attempt(description: str, candidate: Setups, candidate_trace: Trace = trace) -> bool:
        tried.append(description)
        if run_machine(candidate_trace, candidate, spec).fits:
            found.append(description)
            return True
        return False

    for kind, setup in present.items():
        if kind == "tensorflow":
            continue
        name = display_name(kind)
        current = round(setup.fraction * 100)
        if setup.mode in ("prealloc", "compact"):  # a pool of a fixed fraction: a fraction fix may help
            passes = lambda h, k=kind: fits(trace, _with_fraction(setups, (k,), h / 100), spec)  # noqa: E731
            if oom.source == kind and oom.kind == "limit":
                higher = _search(passes, current + 1, 100, smallest=True)
                tried.append(f"raise {name}'s fraction")
                if higher is not None:
                    found.append(_fraction_fix(kind, higher / 100, fraction_variable, setup.mode))
            elif oom.source != kind or oom.kind == "tenant":
                lower = _search(passes, 1, current - 1, smallest=False)
                tried.append(f"lower {name}'s fraction")
                if lower is not None:
                    found.append(_fraction_fix(kind, lower / 100, fraction_variable, setup.mode))
        if setup.mode != "growth":
            attempt(_mode_fix(kind, "growth"), {**setups, kind: replace(setup, mode="growth")})
        if setup.mode != "ondemand":
            attempt(_mode_fix(kind, "ondemand"), {**setups, kind: replace(setup, mode="ondemand")})
    pins: list[Pin] = []
    defragmentation = None
    if oom.kind == "fragmentation":
        pins = pinning_buffers(run.failure, trace)
        attempt(
            "allocate the long-lived buffers first (those still live when it failed)",
            setups,
            long_lived_first(trace, run),
        )
        if present.get(oom.source) is not None and present[oom.source].mode == "prealloc":
            defragmentation = defragment(trace, setups, spec, (oom.source,))
            tried.append("defragment the pool when an allocation does not fit (regime compact)")
            if defragmentation.fits:
                found.append(f"{defragmentation.text()}, as TPU runtimes defragment (JAX on GPUs does not)")
    tensorflow = present.get("tensorflow")
    if tensorflow is not None:
        if tensorflow.mode in ("default", "limit"):  # growing up to the same limit (frameworks.py)
            attempt(TENSORFLOW.growth_fix, {**setups, "tensorflow": replace(tensorflow, mode="growth")})
        if tensorflow.limit is not None and not tensorflow.host and oom.source == "tensorflow" and oom.kind == "limit":
            # the regime's fraction is TensorFlow's memory limit, growing or not (and JAX's fraction): the smallest that fits
            def limit_fits(hundredths: int) -> bool:
                candidate = _with_fraction(setups, ("jax", "pool"), hundredths / 100)
                candidate["tensorflow"] = replace(
                    tensorflow, limit=tensorflow_fraction_limit(spec.capacity, hundredths / 100)
                )
                return fits(trace, candidate, spec)

            higher = _search(limit_fits, (tensorflow.limit or 0) * 100 // spec.capacity + 1, 100, smallest=True)
            tried.append("raise the regime's fraction")
            if higher is not None:
                found.append(_fraction_fix("tensorflow", higher / 100, fraction_variable))
        if len(present) > 1:
            attempt(
                'hide the GPU from TensorFlow (tf.config.set_visible_devices([], "GPU"))',
                setups,
                _without_source(trace, "tensorflow"),
            )
    if found:
        return Fixes(found, pins=pins, defragmentation=defragmentation)
    return Fixes([], _why_none(oom.kind, run, spec, tried), pins, defragmentation)


def _fraction_fix(kind: str, fraction: float, fraction_variable: str, mode: str = "prealloc") -> str:
    if kind == "jax":
        return f"set {fraction_variable}={fraction:.2f}"
    if mode == "compact":  # the fraction alone would mean mode 'fraction', which does not defragment
        return f"run it under mode 'compact' with fraction {fraction:.2f} (marker devmem(mode='compact', fraction={fraction:.2f}) or --devmem-mode=compact --devmem-fraction={fraction:.2f})"
    return f"run it under fraction {fraction:.2f} (marker devmem(fraction={fraction:.2f}) or --devmem-fraction={fraction:.2f})"


def _mode_fix(kind: str, mode: str) -> str:
    rules = BY_SOURCE[kind]
    return rules.growth_fix if mode == "growth" else rules.ondemand_fix


def _why_none(kind: str, run: MachineRun, spec: MachineSpec, tried: list[str]) -> str:
    """Why no setting fits, in words that follow "none found: " (`oom_lines`): each variant a
    sentence or two, what was replayed named as the fixes are."""
    oom = run.oom
    assert oom is not None
    if kind == "capacity":
        contexts = {k: v for k, v in oom.held_by_others.items() if k.startswith("CUDA context")}
        with_contexts = "".join(f" and the {k} {format_size(v)}" for k, v in contexts.items() if v)
        return (
            f"on {oom.device} the live data would be {format_size(oom.device_in_use + oom.kept_before + oom.rounded)}{with_contexts}, "
            f"more than the device's {format_size(spec.capacity)} under any setting; "
            "use a larger device, smaller batches, or free buffers earlier."
        )
    held = _and(f"{allocator_name(name)} {format_size(size)}" for name, size in oom.held_by_others.items())
    when = (
        f"When it failed, {oom.device} also held {held}."
        if held
        else f"When it failed, nothing else was held on {oom.device}."
    )
    if not tried:
        return (
            f"no setting applies to {allocator_name(oom.source)} under this regime, so nothing was replayed; "
            f"use a larger device, smaller batches, or free buffers earlier. {when}"
        )
    return f"each setting that applies was replayed on this trace and none fits: {'; '.join(tried)}. {when}"


def _and(items: Iterable[str]) -> str:
    """`a`, `a and b`, `a, b and c`; empty for none."""
    *rest, last = list(items) or [""]
    return f"{', '.join(rest)} and {last}" if rest else last


def _without_source(trace: Trace, source: str) -> Trace:
    """The trace less one source's events (that framework kept off the device)."""
    kept = Trace()
    for event in trace:
        if event.source != source:
            kept.append(event)
    return kept


def process_shares(spec: MachineSpec, setup: AllocatorSetup, count: int) -> list[int]:
    """What each of `count` processes with the same setup holds once all have started, in start
    order (the worst case for the last): the later ones back off to what the earlier ones left."""
    trace = Trace()
    for process in range(count):
        trace.add(0, process + 1, 256, float(process), source=setup.kind, device=spec.default_device, process=process)
    run = run_machine(trace, {setup.kind: setup}, spec, stop_on_oom=False)
    device = run.devices[0]
    return [allocator.took for allocator in device.allocators]
