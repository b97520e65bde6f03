"""From one test's captured window to its record: the trace run once through the model of the
machine (the session's device as every device the frameworks see, the regime's allocators), the
fixes an out-of-memory result gets (each replayed), and what the capture noted. No hooks here."""

from __future__ import annotations

import math
import os
import re
from array import array
from pathlib import Path
from typing import TYPE_CHECKING

from ..capture.jax.hlo_proto import PRIMITIVE_TYPES
from ..capture.measurement import Captured, Measurement
from ..files import frames_from
from ..gate.changes import buffers_of
from ..gate.record import KEPT_CPU_SIZES, TestRecord, TraceFacts
from ..json_fields import mappings, whole
from ..model.device import Device, DeviceKind
from ..model.executables import executable_summary
from ..model.fragmentation import pinning_buffers
from ..model.frameworks import AllocatorSetup, setups_for
from ..model.machine import MachineSpec, run_machine
from ..model.padding import padding_at_peak
from ..model.pool import Policy
from ..model.profile import in_use_profile
from ..model.regime import jax_fraction_variable
from ..model.tpu_devices import as_tpu_chips
from ..model.whatif import proven_fixes
from ..units import format_size

if TYPE_CHECKING:
    from ..model.machine import MachineRun
    from ..model.trace import Trace


def machine_spec(device: Device, context_bytes: int | None) -> MachineSpec:
    """The machine the session's device stands for: each device the frameworks see has its capacity
    (a GPU session's devices are GPUs; elsewhere JAX's and TensorFlow's CPU devices stand in)."""
    return MachineSpec.of_device(
        device.capacity,
        device.name,
        device.compute_capability[0],
        platform=device.kind.platform,
        context_bytes=context_bytes,
        environ=os.environ,
    )


def allocator_setups(policy: Policy, device: Device) -> dict[str, AllocatorSetup]:
    """Each framework's allocator under `policy`, with TensorFlow's own variables as this process has them."""
    return setups_for(policy, device.capacity, os.environ, tpu=device.tpu is not None)


def make_record(
    measurement: Measurement,
    captured: Captured,
    test_id: str,
    regime: str,
    policy: Policy,
    device: Device,
    *,
    context_bytes: int | None,
    outcome: str,
    real_oom: str | None,
    limit_bytes: int | None,
    duration_s: float,
    timeline: bool = False,
    compile_target: str | None = None,
    root: Path | None = None,
) -> TestRecord:
    """The test's record: its trace replayed once on the machine under `policy`. `root`: the
    project's folder, from which the buffers' source files are named."""
    trace, notes, traced_nothing = measurement.trace_of(captured)
    if root is not None:  # every file:line named from the project, in the trace as in the record
        sites = {code: trace.name_code(frames_from(root, trace.names[code])) for code in set(trace.sites)}
        if any(code != named for code, named in sites.items()):
            trace.sites = array(trace.sites.typecode, map(sites.__getitem__, trace.sites))
    if device.tpu is not None:  # each CPU device stands for a chip: named as one
        trace = as_tpu_chips(trace)
    spec = machine_spec(device, context_bytes)
    setups = allocator_setups(policy, device)
    run = None if traced_nothing else run_machine(trace, setups, spec, timeline=timeline)
    record = TestRecord.from_run(
        test_id,
        regime,
        device.name,
        device.device_class,
        run,
        captured.readings,
        notes=notes,
        outcome=outcome,
        real_oom=real_oom,
        limit_bytes=limit_bytes,
        duration_s=duration_s,
    )
    record.trace_events = trace  # kept in memory for --devmem-traces and trace analyses
    if real_oom and record.oom is not None and "kind" not in record.oom and device.kind is not DeviceKind.CUDA:
        # the model fit it and a simulated device's CPU ran it: the host ran out, not the device
        record.oom["host"] = True
        failed = next((name for name, runs in captured.runs.items() if not runs), "")  # the call it ran out in
        if str(captured.sizes.get(failed, {}).get("sized_for", "cpu")) != "cpu":  # the target's compiler took it
            record.oom.update(label=failed, sized_for=captured.sizes[failed]["sized_for"])
    if run is not None and record.trace is not None and record.peak_device is not None:
        record.trace.profile = in_use_profile(trace, record.peak_device, spec.default_device)  # kept in its baseline
    if run is not None:
        add_pins(record, run, trace)
    if run is not None and run.oom is not None and record.oom is not None:
        add_fixes(record, trace, setups, spec)
    if captured.kept is not None:
        record.leaked_bytes = sum(captured.kept.values())
        if record.trace is not None:
            record.trace.kept = captured.kept
    record.compile_target = compile_target
    record.compiler_entries = sorted(captured.compiler_entries)
    if record.trace is not None:
        add_executables(record.trace, captured, trace, notes, root)
    tpu = device.tpu
    if tpu is not None:
        describe_tpu(record, tpu.description, captured, trace, notes)
        if run is not None and record.tpu is not None and record.peak_device is not None:
            padding = padding_at_peak(
                run.snapshots.get(record.peak_device), trace, captured.padded_sizes, buffers_of(record)
            )
            if padding is not None:
                record.tpu["padding_at_peak"] = padding
    if captured.compiled is not None and (captured.compiled or captured.needed):
        # what the test needs, the same in any order (none: no figure, whether or not JAX was loaded
        # before it); the compiles that happened in this process beside it
        record.compiles = sum(captured.needed.values()) if captured.needed else len(captured.compiled)
        if record.trace is not None:
            record.trace.compiled = captured.compiled
            if captured.needed:
                record.trace.needed = captured.needed
            if captured.functions:
                record.trace.functions = captured.functions
    return record


def add_executables(facts: TraceFacts, captured: Captured, trace: Trace, notes: list[str], root: Path | None) -> None:
    """What the test's executables allocated per run, as sized (a note for those kept at the CPU's
    sizes), the buffers each held at its peak, and the lines that made what the test held at its
    peak, into the record's trace facts."""
    if captured.runs:
        executables = executable_summary(trace, captured.runs)
        for name, sized in captured.sizes.items():
            executables.get(name, {}).update(sized)  # type: ignore[arg-type]
        facts.executables = executables
        kept = {name: str(sized["note"]) for name, sized in captured.sizes.items() if sized.get("note")}
        if kept:
            notes.append(
                f"{len(kept)} executable(s) {KEPT_CPU_SIZES}: "
                + "; ".join(f"{name} ({why})" for name, why in sorted(kept.items()))
            )
    if captured.buffers:
        facts.buffers = {name: with_files_from(root, found) for name, found in sorted(captured.buffers.items())}


def describe_tpu(record: TestRecord, description: str, captured: Captured, trace: Trace, notes: list[str]) -> None:
    """What a record on a TPU preset says besides the pools' figures: which compile sized it, the
    bytes the TPU runtime's defragmentation moved, a program the TPU compiler refused (an
    out-of-memory result of kind capacity, with the compiler's figures), and TensorFlow's figures
    for what they are."""
    allocators = [a for d in record.devices or [] for a in mappings(d, "allocators") or []]
    moved = sum(whole(a, "moved_bytes") or 0 for a in allocators)
    compactions = sum(whole(a, "compactions") or 0 for a in allocators)
    sized = record.compile_target if record.compile_target not in (None, "cpu") else None
    record.tpu = {
        "target": description,
        "sized_for": sized or "cpu",
        "compaction_moved_bytes": moved,
        "compactions": compactions,
    }
    if sized is None and "jax" in trace.names:
        notes.append(
            f"JAX's figures are the CPU compile's, not a {description}'s (the TPU compiler was not used: see the session's compile target)"
        )
    if "tensorflow" in trace.names:
        notes.append(
            f"TensorFlow's figures are its CPU allocator's, not a {description}'s: no TPU compile sizes TensorFlow's tensors, "
            "so they stay on the CPU device they were measured on (cpu:0), never counted in a chip's HBM"
        )
        record.tpu["tensorflow"] = "CPU allocator's figures, not sized for the TPU"
    refusals = [
        (name, sized_by)
        for name, sized_by in sorted(captured.sizes.items())
        if isinstance(sized_by.get("refused"), dict)
    ]
    if refusals and (record.oom is None or "kind" not in record.oom):
        # the refusal the test's call raised (a TPU raises it at the call, and the program never ran
        # here) is the compile's out-of-memory result, with its figures, never a framework's error
        name, sized_by = refusals[0]
        refusal: dict[str, object] = sized_by["refused"]  # type: ignore[assignment]
        oom = {
            "kind": "capacity",
            "compile_time": True,
            "label": name,
            "device": description,
            "allocator": "jax",
            "requested": exact_outputs(refusal.get("needed"), captured.functions.get(name, {}).get("signatures")),
            "capacity": refusal.get("available"),
            "error": refusal.get("message"),
        }
        record.oom = {key: value for key, value in oom.items() if value is not None}


ELEMENT_BYTES = dict(PRIMITIVE_TYPES.values())
"""Bytes per element by the name XLA prints (0: not whole bytes, so no exact figure)."""


def exact_outputs(needed: object, signatures: object) -> object:
    """The refused program's outputs' bytes where the compiler's figure (two decimals, as libtpu
    prints sizes: 19.53G for 20,971,520,000 B) is theirs rounded; its figure otherwise."""
    for signature in signatures if isinstance(signatures, list) else ():
        shapes = re.findall(r"(\w+)\[([\d,]*)\]", str(signature).rpartition(")->")[2])
        sizes = [
            ELEMENT_BYTES.get(name, 0) * math.prod(map(int, filter(None, dims.split(",")))) for name, dims in shapes
        ]
        exact = sum(sizes) if all(sizes) else 0
        if isinstance(needed, int) and exact and format_size(exact) == format_size(needed):
            return exact
    return needed


def with_files_from(root: Path | None, found: dict[str, object]) -> dict[str, object]:
    """A program's buffers with each `file:line` named from `root` where the file lies below it (a
    baseline reads the same on every checkout)."""
    listed = found.get("buffers")
    if root is None or not isinstance(listed, list):
        return found
    shown = []
    for buffer in listed:
        at = buffer.get("at") if isinstance(buffer, dict) else None
        shown.append({**buffer, "at": frames_from(root, at)} if isinstance(at, str) and at else buffer)
    return {**found, "buffers": shown}


def add_pins(record: TestRecord, run: MachineRun, trace: Trace) -> None:
    """Per device, the buffers that pinned the holes of its pools at their most fragmented."""
    for device in record.devices or []:
        snapshot = run.fragmented.get(str(device.get("device")))
        pins = pinning_buffers(snapshot, trace)
        if snapshot is not None and pins:
            device["pinning"] = [pin.text() for pin in pins]
            device["pinning_event"] = snapshot.event


def add_fixes(record: TestRecord, trace: Trace, setups: dict[str, AllocatorSetup], spec: MachineSpec) -> None:
    """The settings that make the test fit, each proven by replaying its trace with it, or why none does."""
    assert record.run is not None and record.oom is not None
    proven_fixes(trace, setups, spec, record.run, jax_fraction_variable()).record(record.oom)
