"""Tests that ran in different processes, replayed on one device at once: what pytest-xdist workers
sharing a GPU may meet. Each test keeps its own trace and processes; every test is at its own peak
at the same moment, the worst their schedules could reach. No pytest, no frameworks here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .frameworks import AllocatorSetup
from .machine import MachineRun, MachineSpec, run_machine
from .trace import ALLOCATE_CODE, FREE_CODE, Trace


def peak_moment(trace: Trace) -> float:
    """The time of the event at which `trace` first holds its most live bytes (as asked)."""
    live: dict[tuple[int, int, int, int], int] = {}
    current = peak = 0
    moment = trace.times[0] if len(trace) else 0.0
    for index, (action, pointer, size) in enumerate(zip(trace.actions, trace.pointers, trace.sizes)):
        lane = (trace.devices[index], trace.processes[index], trace.sources[index], pointer)
        if action == ALLOCATE_CODE:
            live[lane] = size
            current += size
            if current > peak:
                peak, moment = current, trace.times[index]
        elif action == FREE_CODE:
            current -= live.pop(lane, 0)
    return moment


def side_by_side(traces: list[Trace]) -> tuple[Trace, dict[int, int]]:
    """One trace of several tests running at once, each in processes of its own (as pytest-xdist
    workers are), every test at its own peak at the same moment: the worst moment their schedules
    could meet. Each test keeps its own pace; at equal times the earlier test's events come first.
    Also which test (its index in `traces`) each process of the result belongs to: the first
    test's processes are numbered from 1, the next test's after them. Each test's buffers are
    numbered apart from the others' (a pointer names a buffer within its own process only: two
    tests' recorders number theirs alike), so that no free is taken for another test's."""
    shifts = [peak_moment(trace) for trace in traces]
    moment = max(shifts, default=0.0)
    owner: dict[int, int] = {}
    renumber: list[dict[int, int]] = []
    order = []
    for number, trace in enumerate(traces):
        mapping = {}
        for process in sorted(set(trace.processes)):
            mapping[process] = len(owner) + 1
            owner[len(owner) + 1] = number
        renumber.append(mapping)
        shift = moment - shifts[number]
        clock = float("-inf")
        for index in range(len(trace)):  # a trace's own order stands: its clock never runs back (TensorFlow's
            clock = max(clock, trace.times[index] + shift)  # profiler stamps its events apart from JAX's)
            order.append((clock, number, index))
    order.sort()
    merged = Trace()
    buffers: dict[tuple[int, int], int] = {}  # (test, its pointer) -> the merged trace's
    for time, number, index in order:
        trace = traces[number]
        names = trace.names
        merged.add(
            trace.actions[index],
            buffers.setdefault((number, trace.pointers[index]), len(buffers) + 1),
            trace.sizes[index],
            time,
            trace.threads[index],
            trace.streams[index],
            names[trace.sources[index]],
            names[trace.labels[index]],
            names[trace.devices[index]],
            renumber[number][trace.processes[index]],
        )
    return merged, owner


@dataclass(frozen=True)
class SideBySide:
    """The suite's largest tests replayed side by side on one device, as workers sharing it may run them."""

    tests: list[str]  # largest first; test k runs in process k + 1
    run: MachineRun
    owner: dict[int, int]  # process -> index in `tests`
    regime: str  # each worker's share, as a regime label
    at_most: int | None = None  # when they do not fit: how many of the largest do

    @property
    def fits(self) -> bool:
        return self.run.oom is None


def check_side_by_side(
    tests: list[tuple[int, str, Trace]],
    sharing: int,
    setups_for: Callable[[int], tuple[str, dict[str, AllocatorSetup]]],
    spec: MachineSpec,
) -> SideBySide | None:
    """Replay the `sharing` largest of `tests` at once (`setups_for(k)`: each worker's regime label
    and allocators when k workers share the device); None when fewer than two tests can meet.
    When they do not fit, also how many of the largest would."""
    unique: dict[str, tuple[int, str, Trace]] = {}
    for item in sorted(tests, key=lambda item: (-item[0], item[1])):
        unique.setdefault(item[1], item)
    largest = list(unique.values())[:sharing]
    if len(largest) < 2:
        return None

    def replay(count: int) -> tuple[MachineRun, dict[int, int], str]:
        trace, owner = side_by_side([item[2] for item in largest[:count]])
        label, setups = setups_for(count)
        return run_machine(trace, setups, spec), owner, label

    run, owner, label = replay(len(largest))
    result = SideBySide([item[1] for item in largest], run, owner, label)
    if run.oom is None:
        return result
    at_most = next((count for count in range(len(largest) - 1, 1, -1) if replay(count)[0].oom is None), 1)
    return SideBySide(result.tests, run, owner, label, at_most)
