"""The text of an out-of-memory result, from a record's plain data (JSON): what was asked, where, of what kind,
who held what on the device, each allocator's story, and the fixes a replay proved. The same lines
in the pytest failure, the report and `devmem replay`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..units import format_short_of, format_size
from .framework_rules import display_name
from .machine import KIND_TEXT, TPU_RUNTIME_NAME


def allocator_name(name: str) -> str:
    """`jax` -> `JAX`, `tensorflow (process 1)` -> `TensorFlow (process 1)`."""
    source, _, rest = name.partition(" ")
    return display_name(source) + (f" {rest}" if rest else "")


def _size(value: object) -> str:
    return format_size(value) if isinstance(value, (int, float)) else "n/a"


def _free(value: object, oom: Mapping[str, object]) -> str:
    """Free bytes beside the bytes the allocation needs (`rounded`): the gap in bytes where rounding
    to two decimals would show them equal."""
    needed = oom.get("rounded", oom.get("requested"))
    if isinstance(value, int) and isinstance(needed, int):
        return format_short_of(value, needed)
    return _size(value)


def oom_lines(
    oom: Mapping[str, object], devices: Sequence[Mapping[str, object]] | None, regime: str, machine: str
) -> list[str]:
    """The out-of-memory result as lines, headline first."""
    if oom.get("compile_time"):  # the target's compiler refused the program: it never runs there
        return [
            f"out of device memory at compile time on {machine}: the {oom.get('device')} compiler refused {oom.get('label')} -- "
            "capacity: the program needs more HBM than the chip has, so it never runs there",
            f"  it needs {_size(oom.get('requested'))} of HBM, {_size(oom.get('capacity'))} is available (the compiler's figures)",
            f"  the compiler said: {oom.get('error')}",
        ]
    if "kind" not in oom and oom.get("host"):  # the CPU that stands for the device could not run the test
        return [
            f"out of host memory, not {machine}'s: the CPU that runs the test could not allocate what it asked: {oom.get('error')}",
            f"  {machine} is simulated on this host: the model of it fit what ran"
            + (
                f", and the {oom['sized_for']} compiler accepted {oom['label']} (it refuses a program the chip cannot hold)"
                if oom.get("label")
                else ""
            ),
            "  fix: smaller shapes in the test, or a runner with more memory",
        ]
    if "kind" not in oom:  # only a real error, the model fitted (or nothing was traced)
        return [
            f"out of device memory for real under regime {regime} on {machine}: {oom.get('error', 'the test raised an out-of-memory error')}"
        ]
    who = allocator_name(str(oom.get("allocator", "")))
    label = f" for {oom['label']}" if oom.get("label") else ""
    kind = str(oom.get("kind"))
    device = next((d for d in devices or [] if d.get("device") == oom.get("device")), None)
    allocators = device.get("allocators") if device is not None else None
    pool = who
    if (
        isinstance(allocators, list)
        and not who.startswith("TensorFlow")  # its own allocator: the runtime serves JAX and the pool
        and any(isinstance(a, dict) and a.get("allocator") == TPU_RUNTIME_NAME for a in allocators)
    ):  # the chip's one allocator, which every source of the process allocates from
        pool = f"the {TPU_RUNTIME_NAME} (all of the chip's sources)"
    lines = [
        f"out of device memory under regime {regime} on {machine}: {who} could not allocate {_size(oom.get('requested'))} "
        f"({oom.get('requested')} bytes){label} on {oom.get('device')} -- {KIND_TEXT.get(kind, kind)}",
        f"  {pool}: {_size(oom.get('in_use'))} in chunks, {_size(oom.get('pool_bytes'))} held of a {_size(oom.get('limit'))} limit, "
        f"{_free(int(oom.get('pool_bytes', 0)) - int(oom.get('in_use', 0)), oom)} of it free, largest free block {_free(oom.get('largest_free_block'), oom)}"  # type: ignore[call-overload]
        + (
            f", fragmentation {float(oom['fragmentation']):.2f}"  # type: ignore[arg-type]
            if isinstance(oom.get("fragmentation"), (int, float)) and oom.get("fragmentation")
            else ""
        ),
    ]
    others = oom.get("held_by_others")
    held = (
        ", ".join(f"{allocator_name(str(name))} {_size(size)}" for name, size in others.items())
        if isinstance(others, dict) and others
        else "nothing else"
    )
    lines.append(
        f"  {oom.get('device')} ({_size(oom.get('capacity'))}): {_size(oom.get('device_in_use'))} of live data"
        + (
            f" and {_size(kept)} a shared fixture keeps"
            if isinstance(kept := oom.get("kept_before"), int) and kept
            else ""
        )
        + f", {_size(oom.get('device_free'))} free; also held: {held}"
    )
    pinning = oom.get("pinning")
    if isinstance(pinning, list):
        lines += [f"  {line}" for line in pinning if isinstance(line, str)]
    if isinstance(allocators, list) and len(allocators) > 1:
        lines.append(
            "  started in this order: "
            + ", then ".join(allocator_name(str(a.get("allocator"))) for a in allocators if isinstance(a, dict))
        )
        for a in allocators:
            if isinstance(a, dict):
                lines.append("  " + allocator_story(a))
    fixes = oom.get("fixes")
    if isinstance(fixes, list) and fixes:
        lines.append("  fix (each replayed on this trace): " + ", or ".join(str(f) for f in fixes))
    elif oom.get("why_none"):
        lines.append(f"  fix: none found: {oom['why_none']}")
    return lines


def allocator_story(allocator: Mapping[str, object]) -> str:
    """`JAX (preallocate, ...): limit 11.25 GiB, took 1021.01 MiB at its first allocation (asked 11.25 GiB, backed off...), ...`."""
    took, asked = allocator.get("took") or 0, allocator.get("asked") or 0
    taken = f"took {_size(took)} at its first allocation" if took else "took nothing"
    if isinstance(took, int) and isinstance(asked, int) and asked > took:
        taken += f" (asked {_size(asked)}, backed off: the device had no more)"
    return (
        f"{allocator_name(str(allocator.get('allocator')))} ({allocator.get('setup')}): limit {_size(allocator.get('limit'))}, {taken}, "
        f"peak in use {_size(allocator.get('peak_bytes_in_use'))}, held at most {_size(allocator.get('peak_bytes_reserved'))}"
    )


def oom_message(
    oom: Mapping[str, object], devices: Sequence[Mapping[str, object]] | None, regime: str, machine: str
) -> str:
    return "\n".join(oom_lines(oom, devices, regime, machine))


def oom_summary(oom: Mapping[str, object] | None) -> str:
    """A table cell: `no`, or the kind (`tenant`, `fragmentation 0.67` with the fragmentation at the
    failure...), or `real` for an error the test raised."""
    if not oom:
        return "no"
    kind = str(oom.get("kind") or ("host" if oom.get("host") else "real" if oom.get("real") else "yes"))
    fragmentation = oom.get("fragmentation")
    if kind == "fragmentation" and isinstance(fragmentation, (int, float)):
        kind += f" {fragmentation:.2f}"
    return kind
