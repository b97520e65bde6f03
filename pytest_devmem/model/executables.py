"""What each JAX executable a test ran took, summed from the trace: its runs, its outputs, its temp
buffers and the arguments its runs copied onto devices. The capture labels an executable's
allocations `NAME` (its outputs), `NAME temp` and `NAME argument`; these suffixes are the one
form of that naming. No frameworks here."""

from __future__ import annotations

from .trace import ALLOCATE_CODE, Trace

TEMP_SUFFIX = " temp"
"""The label of an executable's temp buffer: `jit(step) temp`."""
ARGUMENT_SUFFIX = " argument"
"""The label of an argument an executable's run copied onto a device: `jit(step) argument`."""


def executable_summary(trace: Trace, runs: dict[str, int]) -> dict[str, dict[str, int]]:
    """Per JAX executable that ran: its runs, and the bytes of its outputs, temp buffers and
    transferred arguments over the test (from the trace's labels): these three are **sums** over
    its runs and over the devices it ran on. `argument_bytes` is only what its runs copied onto
    devices for their arguments (host values transferred in, device arrays copied to a device they
    were not on): 0 for a step fed arrays already on its devices, never XLA's
    `argument_size_in_bytes`. `temp_bytes_per_device` is XLA's own figure (`temp_size_in_bytes`:
    one run's temp on one device, the largest where they differ) and `devices` how many devices
    its buffers were on."""
    summary = {
        name: {
            "runs": count,
            "output_bytes": 0,
            "temp_bytes": 0,
            "argument_bytes": 0,
            "temp_bytes_per_device": 0,
            "devices": 0,
        }
        for name, count in runs.items()
    }
    names = trace.names
    if "jax" not in names:
        return dict(sorted(summary.items()))
    jax_code = names.index("jax")
    kinds: dict[int, tuple[str, str] | None] = {}  # label code -> (executable, figure), read once per label
    devices: dict[str, set[int]] = {}
    for action, source, label, size, device in zip(
        trace.actions, trace.sources, trace.labels, trace.sizes, trace.devices
    ):
        if action != ALLOCATE_CODE or source != jax_code or not label:
            continue
        if label not in kinds:
            kinds[label] = _executable_figure(names[label], summary)
        kind = kinds[label]
        if kind is not None:
            figures = summary[kind[0]]
            figures[kind[1]] += size
            if kind[1] == "temp_bytes" and size > figures["temp_bytes_per_device"]:
                figures["temp_bytes_per_device"] = size
            devices.setdefault(kind[0], set()).add(device)
    for name, used in devices.items():
        summary[name]["devices"] = len(used)
    return dict(sorted(summary.items()))


def _executable_figure(label: str, summary: dict[str, dict[str, int]]) -> tuple[str, str] | None:
    """(executable, figure) an allocation's label adds to: its temp, its arguments, or its outputs."""
    name, key = label, "output_bytes"
    for suffix, what in ((TEMP_SUFFIX, "temp_bytes"), (ARGUMENT_SUFFIX, "argument_bytes")):
        if name.endswith(suffix):
            name, key = name[: -len(suffix)], what
            break
    return (name, key) if name in summary else None
