"""The pool model held to TensorFlow's real BFC allocator: allocation sequences run on the allocator,
captured the way the plugin captures a test, and replayed through the model's pool.

With TF_CPU_ALLOCATOR_USE_BFC=true, TensorFlow's CPU allocator is tsl's BFCAllocator
(xla/tsl/framework/bfc_allocator.cc) with `allow_growth` on under TF_CPU_BFC_MEM_LIMIT_IN_MB
(tensorflow/core/common_runtime/process_state.cc, ProcessState::GetCPUAllocator), and
`tf.raw_ops.Empty(shape=[n], dtype=tf.int8)` asks it for exactly n bytes. The limit is read once,
when the allocator is created at TensorFlow's first op, so:

* one *server* process imports TensorFlow (once: seconds), and forks one child per *group* of
  sequences; the child sets the group's limit before its first op, so each group has a fresh
  allocator of its own;
* the child runs its group's sequences one after another, each in one profiler window of the
  plugin's own TensorFlow capture (`capture/tensorflow`: `ProfilerRun`, `read_profile`,
  `trace_events`), and frees every buffer of a sequence inside its window. Regions are never given
  back (no garbage collection on the CPU allocator), so region growth carries from one sequence
  to the next: the model's pool carries too, one pool per group;
* an allocation that fails is retried by TensorFlow for 10 s (`AllocatorRetry`, kMaxMillisToWait)
  before ResourceExhaustedError: a waiting child costs no CPU, so many children run at once;
* the regions the allocator takes are read from its own log (`Allocated memory at A to B`, VLOG(1)
  in `BFCAllocator::Extend`), which states them exactly; everything else from its profiler events
  (`AddTraceMe`: bytes in use, peak, fragmentation and chunk size after each call).

The comparison then runs here, without TensorFlow: each group's windows replay through one pool
made as the machine model makes TensorFlow's CPU allocator (`tensorflow_cpu_setup`), and the
figures must agree exactly after every event (see `compare_group`).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_devmem.model.device import SimulatedDevice

MiB = 2**20
Steps = Sequence[int]
"""One sequence: a positive step allocates that many bytes; a step -(k + 1) frees the k-th live
buffer (in allocation order, k taken modulo the number live). The sequence frees all it allocates."""

_REGION = re.compile(r"Allocated memory at (0x[0-9a-f]+) to (0x[0-9a-f]+)")
_DUMP = "BFCAllocator dump for"
_FREE_CHUNK = re.compile(r"Free\s+at\s+(?:0x)?[0-9a-f]+\s+of size\s+(\d+)")
RETRY_SECONDS = 10  # AllocatorRetry's wait before an allocation fails (bfc_allocator.cc, kMaxMillisToWait)


@dataclass
class Group:
    """Sequences run one after another on one fresh allocator under `limit_mb`."""

    limit_mb: int
    sequences: list[list[int]]


# -- sequences ---------------------------------------------------------------------------------

MAX_BYTES = 64 * MiB


def build_sequence(draw: Callable[[int, int], int], max_steps: int = 16) -> list[int]:
    """A random sequence from `draw(low, high)` (an integer in [low, high]: hypothesis's or a seeded
    generator's): allocations of 1 B to 64 MiB, small and large alike, freed in random order, and
    all freed by its end."""
    steps: list[int] = []
    live = 0
    for _ in range(draw(1, max_steps)):
        if live and draw(0, 2) == 0:
            steps.append(-draw(0, live - 1) - 1)
            live -= 1
            continue
        scale = draw(0, 3)
        if scale == 0:
            size = draw(1, 4096)
        elif scale == 1:
            size = draw(1, MiB)
        elif scale == 2:
            size = draw(1, MAX_BYTES)
        else:  # a round size: whole MiB, as tensors often are
            size = draw(1, MAX_BYTES // MiB) * MiB
        steps.append(size)
        live += 1
    while live:
        steps.append(-draw(0, live - 1) - 1)
        live -= 1
    return steps


def build_group(draw: Callable[[int, int], int], sequences: int) -> Group:
    """`sequences` random sequences under one random limit: mostly roomy (128 MiB to 2 GiB, where
    growth is often capped by it), one group in ten tight enough for most to fail (2 to 64 MiB).
    Failures are kept rare on purpose: each costs TensorFlow's 10-second retry."""
    limit_mb = draw(2, 64) if draw(0, 9) == 0 else draw(128, 2048)
    return Group(limit_mb, [build_sequence(draw) for _ in range(sequences)])


# -- the server: TensorFlow runs here ---------------------------------------------------------


def _environment(environ: dict[str, str]) -> None:
    environ["TF_CPU_ALLOCATOR_USE_BFC"] = "true"
    environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
    environ["TF_CPP_MIN_LOG_LEVEL"] = "0"  # the allocator's region log is an INFO line
    environ["TF_CPP_VMODULE"] = "bfc_allocator=1"
    environ.setdefault("CUDA_VISIBLE_DEVICES", "")


def serve(job_path: str, out_dir: str, parallel: int) -> int:
    """Run every group of the job (a JSON list of {limit_mb, sequences}), one forked child each,
    `parallel` at a time; each child writes `group-<i>.json` into `out_dir`."""
    groups = json.loads(Path(job_path).read_text())
    import tensorflow  # noqa: F401  (imported once, before the forks)

    running: dict[int, int] = {}
    pending = list(enumerate(groups))
    while pending or running:
        while pending and len(running) < parallel:
            index, group = pending.pop(0)
            pid = os.fork()
            if pid == 0:  # the child: never returns
                code = 1
                try:
                    _run_group(index, group, Path(out_dir))
                    code = 0
                finally:
                    os._exit(code)
            running[pid] = index
        pid, _ = os.wait()
        running.pop(pid, None)
    return 0


def _run_group(index: int, group: dict[str, Any], out_dir: Path) -> None:
    log_path = out_dir / f"group-{index}.log"
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 2)  # the allocator's log: its regions
    os.environ["TF_CPU_BFC_MEM_LIMIT_IN_MB"] = str(group["limit_mb"])
    import tensorflow as tf

    from pytest_devmem.capture.tensorflow.events import WindowClock, trace_events
    from pytest_devmem.capture.tensorflow.profiler import ProfilerRun
    from pytest_devmem.capture.tensorflow.xspace import read_profile

    profiler = ProfilerRun()
    windows = []
    for steps in group["sequences"]:
        profiler.start()
        clock = WindowClock(time.time_ns(), 0.0)
        live: list[Any] = []
        failure: tuple[int, int, int] | None = None  # (time in ns, bytes, step)
        for number, step in enumerate(steps):
            if step > 0:
                started = time.time_ns()
                try:
                    live.append(tf.raw_ops.Empty(shape=[step], dtype=tf.int8))
                except tf.errors.ResourceExhaustedError:
                    failure = (started, step, number)
                    break
            else:
                live.pop((-step - 1) % len(live))
        while live:  # after a failure: what is left, oldest first
            live.pop(0)
        profile = read_profile(profiler.stop(), start_ns=clock.wall_ns, with_stats=True)
        converted = trace_events(profile.events, clock, end=math.inf, tensorflow_has_gpu=False)
        trace = converted.events
        stats = [[*origin.stats, origin.address] if origin.stats else None for origin in converted.origins]
        position = None
        if failure is not None:  # before the failing call's first free: the shape it was given is freed after it
            times = [origin.time_ns for origin in converted.origins]
            position = next((i for i, t in enumerate(times) if t >= failure[0] and trace.actions[i] == 1), len(trace))
        windows.append(
            {
                "trace": trace.to_columns(),
                "stats": stats,
                "failure": None if failure is None else {"position": position, "bytes": failure[1], "step": failure[2]},
            }
        )
    profiler.close()
    text = log_path.read_text(errors="replace")
    regions = [(int(a, 16), int(b, 16) - int(a, 16)) for a, b in _REGION.findall(text)]
    # each failure dumps the allocator's chunks (DumpMemoryLog, after the retry gives up); the
    # dump's "LargestFreeBlock" is a stale counter (only GetStats sets it), its chunks are not
    largest = [max((int(size) for size in _FREE_CHUNK.findall(dump)), default=0) for dump in text.split(_DUMP)[1:]]
    result = {"limit_mb": group["limit_mb"], "windows": windows, "regions": regions, "largest_at_failures": largest}
    (out_dir / f"group-{index}.json").write_text(json.dumps(result))
    log_path.unlink()


def run_on_tensorflow(groups: Sequence[Group], *, parallel: int = 16, timeout: float = 3600) -> list[dict[str, Any]]:
    """Each group run on TensorFlow's real allocator (in a server process); their results, in order."""
    with tempfile.TemporaryDirectory(prefix="devmem-oracle-") as folder:
        job = Path(folder) / "job.json"
        job.write_text(
            json.dumps([{"limit_mb": g.limit_mb, "sequences": [list(s) for s in g.sequences]} for g in groups])
        )
        environ = dict(os.environ)
        _environment(environ)
        root = str(Path(__file__).resolve().parent.parent)
        environ["PYTHONPATH"] = root + (os.pathsep + environ["PYTHONPATH"] if environ.get("PYTHONPATH") else "")
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.bfc_oracle", job.as_posix(), folder, str(parallel)],
            cwd=root,
            env=environ,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        results = []
        for index in range(len(groups)):
            path = Path(folder) / f"group-{index}.json"
            if not path.exists():
                raise RuntimeError(
                    f"group {index} did not finish on TensorFlow (server exit {done.returncode}): {done.stderr[-2000:]}"
                )
            results.append(json.loads(path.read_text()))
        return results


# -- the comparison: the model runs here ------------------------------------------------------


@dataclass
class Disagreement:
    """One figure where the model and the allocator differ."""

    sequence: int  # within the group
    event: int  # within the sequence's trace (-1: the sequence as a whole)
    figure: str
    allocator: object
    model: object

    def __str__(self) -> str:
        return f"sequence {self.sequence}, event {self.event}: {self.figure}: allocator {self.allocator}, model {self.model}"


@dataclass
class GroupResult:
    """What one group's comparison found."""

    sequences: int
    disagreements: list[Disagreement] = field(default_factory=list)
    checks: dict[str, int] = field(default_factory=dict)  # figure -> how many times it was compared
    failures: int = 0  # allocations that failed on the allocator (and in the model)

    @property
    def agreeing_sequences(self) -> int:
        return self.sequences - len({d.sequence for d in self.disagreements})


def six_digits(value: float) -> float:
    """A fraction as TensorFlow's profiler keeps it: written with six significant digits (absl's
    StrCat of a double, in TraceMeEncode) and read back."""
    return float(f"{value:.6g}")


def largest_free_visible(free: int, fragmentation: float) -> int | None:
    """The largest free chunk the allocator's fragmentation implies, when its six digits leave only
    one multiple of 256 possible; else None."""
    if free <= 0 or math.isnan(fragmentation):
        return None
    digits = max(0, 5 - math.floor(math.log10(abs(fragmentation)))) if fragmentation else 6
    half = 0.5 * 10.0**-digits
    low, high = free * (1 - fragmentation - half), free * (1 - fragmentation + half)
    first, last = math.ceil(low / 256), math.floor(high / 256)
    return first * 256 if first == last else None


HOST_CAPACITY = 64 * 2**30
"""The machine's capacity when it replays a sequence: more than any limit drawn, so that
TensorFlow's own limit (TF_CPU_BFC_MEM_LIMIT_IN_MB) is what bounds it, as on the host."""


def compare_group(result: dict[str, Any]) -> GroupResult:
    """Replay one group's captured traces through the model's pool made as TensorFlow's CPU
    allocator (`tensorflow_cpu_setup` under the group's limit), and compare after every event: bytes
    in use, peak, bytes reserved (regions taken), fragmentation, the chunk's size and its place (its
    region and offset), the largest free chunk where the fragmentation shows it, and which
    allocation fails. The pool carries from one sequence to the next, as the allocator does."""
    from pytest_devmem.errors import OutOfMemoryError
    from pytest_devmem.model.frameworks import tensorflow_cpu_setup, tensorflow_growth_pool
    from pytest_devmem.model.machine import MachineSpec, run_machine
    from pytest_devmem.model.trace import Trace

    setup = tensorflow_cpu_setup({"TF_CPU_BFC_MEM_LIMIT_IN_MB": str(result["limit_mb"])})
    assert setup.limit is not None
    regions = result["regions"]
    pool = tensorflow_growth_pool(setup, _RecordedAddresses(regions), setup.limit)
    starts = [start for start, _ in regions]
    reserved_upto = [sum(size for _, size in regions[: i + 1]) for i in range(len(regions))]
    seen = -1  # the last region the allocator has handed memory from
    outcome = GroupResult(len(result["windows"]))
    checks = outcome.checks
    largest_at_failures = list(result.get("largest_at_failures", []))

    def check(sequence: int, event: int, figure: str, real: object, model: object) -> None:
        checks[figure] = checks.get(figure, 0) + 1
        if real != model:
            outcome.disagreements.append(Disagreement(sequence, event, figure, real, model))

    for number, window in enumerate(result["windows"]):
        trace = Trace.from_columns(window["trace"])
        failure = window["failure"]
        handles: dict[int, int] = {}
        stopped = False
        for index in range(len(trace) + 1):
            if failure is not None and index == failure["position"]:
                try:
                    handle = pool.alloc(failure["bytes"])
                except OutOfMemoryError:
                    outcome.failures += 1
                    check(number, index, "first failing allocation", failure["step"], failure["step"])
                    if largest_at_failures:
                        check(
                            number,
                            index,
                            "largest free chunk (at the failure)",
                            largest_at_failures.pop(0),
                            pool._largest_free_block(),
                        )
                else:
                    pool.free(handle)
                    check(number, index, "first failing allocation", failure["step"], "none: it fits")
            if index == len(trace):
                break
            event, stats = trace.event(index), window["stats"][index]
            if event.action == "allocate":
                try:
                    handles[event.pointer] = handle = pool.alloc(event.size)
                except OutOfMemoryError:
                    check(number, index, "first failing allocation", "none: it fits", f"this one ({event.size} B)")
                    stopped = True
                    break
                if stats is not None:
                    address = stats[4]
                    region = _region_of(address, starts, regions)
                    if region is not None:
                        seen = max(seen, region)
                    check(number, index, "chunk address", hex(address), hex(handle))
            else:
                pool.free(handles.pop(event.pointer))
            if stats is None:
                continue
            in_use, peak, fragmentation, chunk_bytes, _ = stats
            check(number, index, "bytes in use", in_use, pool.bytes_in_use)
            check(number, index, "peak bytes in use", peak, pool.peak_bytes_in_use)
            if event.action == "allocate":
                check(number, index, "chunk bytes", chunk_bytes, pool.allocated_size(handles[event.pointer]))
            if seen >= 0:
                check(number, index, "bytes reserved", reserved_upto[seen], pool.pool_bytes)
            free = pool.pool_bytes - pool.bytes_in_use
            if free > 0:
                check(number, index, "fragmentation", fragmentation, six_digits(pool._fragmentation()))
                largest = largest_free_visible(free, fragmentation)
                if largest is not None:
                    check(
                        number,
                        index,
                        "largest free chunk (where the fragmentation shows it)",
                        largest,
                        pool._largest_free_block(),
                    )
            else:  # nothing free: the allocator divides 0 by 0
                check(
                    number,
                    index,
                    "fragmentation (nothing free)",
                    "nan",
                    "nan" if math.isnan(fragmentation) else fragmentation,
                )
        if stopped:
            break
        if number == 0 and failure is None and window["stats"] and window["stats"][-1] is not None:
            # the record's headline, from the whole machine's replay of the sequence (a fresh
            # allocator, as the first sequence's is): the allocator's own peak, to the byte
            headline = run_machine(trace, {"tensorflow": setup}, MachineSpec(capacity=HOST_CAPACITY)).headline
            check(
                number,
                len(trace),
                "the machine's headline peak in use",
                window["stats"][-1][1],
                headline.peak_bytes_in_use if headline is not None else None,
            )
    check(-1, -1, "regions taken", [tuple(region) for region in regions], pool.regions())
    return outcome


def _region_of(address: int, starts: list[int], regions: list[list[int]]) -> int | None:
    for i, (start, size) in enumerate(regions):
        if start <= address < start + size:
            return i
    return None


class _RecordedAddresses(SimulatedDevice):
    """A device that hands out the regions the allocator got, at the addresses it got them (the
    system's allocator places each new region below the last, a simulated device above): best fit
    breaks ties by address, so the model's choices can only be compared on the same addresses. A
    region the allocator never took gets an address of the simulated device's own."""

    def __init__(self, regions: list[list[int]]) -> None:
        super().__init__(1 << 46, name="cpu:0")
        self._recorded = [tuple(region) for region in regions]

    def try_allocate(self, nbytes: int) -> int | None:
        if self._recorded and self._recorded[0][1] == nbytes:
            start, size = self._recorded.pop(0)
            self._ranges[start] = size
            self.used += size
            return start
        return super().try_allocate(nbytes)


def side_by_side(
    result: dict[str, Any], min_bytes: int = MiB
) -> list[tuple[str, int, int, int, float, float, int, int]]:
    """Each event of a group of at least `min_bytes` (TensorFlow's own small tensors left out):
    (what, allocator's bytes in use, model's, allocator's bytes reserved... see the columns) as
    (event, in use, model in use, reserved, fragmentation, model fragmentation, peak, model peak),
    and the failing allocation, if any, as its own row. For the docs' table."""
    from pytest_devmem.errors import OutOfMemoryError
    from pytest_devmem.model.frameworks import tensorflow_cpu_setup, tensorflow_growth_pool
    from pytest_devmem.model.trace import Trace

    setup = tensorflow_cpu_setup({"TF_CPU_BFC_MEM_LIMIT_IN_MB": str(result["limit_mb"])})
    assert setup.limit is not None
    pool = tensorflow_growth_pool(setup, _RecordedAddresses(result["regions"]), setup.limit)
    rows: list[tuple[str, int, int, int, float, float, int, int]] = []
    for window in result["windows"]:
        trace, handles, failure = Trace.from_columns(window["trace"]), {}, window["failure"]
        for index in range(len(trace) + 1):
            if failure is not None and index == failure["position"]:
                try:
                    pool.free(pool.alloc(failure["bytes"]))
                    verdict = "fits (model)"
                except OutOfMemoryError:
                    verdict = "fails on both"
                rows.append(
                    (
                        f"allocate {failure['bytes'] // MiB} MiB: {verdict}",
                        -1,
                        pool.bytes_in_use,
                        pool.pool_bytes,
                        math.nan,
                        pool._fragmentation(),
                        -1,
                        pool.peak_bytes_in_use,
                    )
                )
            if index == len(trace):
                break
            event, stats = trace.event(index), window["stats"][index]
            if event.action == "allocate":
                handles[event.pointer] = pool.alloc(event.size)
            else:
                pool.free(handles.pop(event.pointer))
            if event.size >= min_bytes and stats is not None:
                rows.append(
                    (
                        f"{'allocate' if event.action == 'allocate' else 'free'} {event.size / MiB:g} MiB",
                        stats[0],
                        pool.bytes_in_use,
                        pool.pool_bytes,
                        stats[2],
                        six_digits(pool._fragmentation()),
                        stats[1],
                        pool.peak_bytes_in_use,
                    )
                )
    return rows


def summarize(results: Sequence[GroupResult]) -> str:
    """How many sequences agree, and the first disagreements."""
    sequences = sum(r.sequences for r in results)
    agreeing = sum(r.agreeing_sequences for r in results)
    checks: dict[str, int] = {}
    for r in results:
        for name, count in r.checks.items():
            checks[name] = checks.get(name, 0) + count
    lines = [
        f"{agreeing} of {sequences} sequences agree with TensorFlow's BFC allocator ({sum(r.failures for r in results)} failing allocations)"
    ]
    lines += [f"  {count:>8} x {name}" for name, count in sorted(checks.items())]
    shown = 0
    for group, r in enumerate(results):
        for d in r.disagreements[:3]:
            if shown < 10:
                lines.append(f"  group {group}: {d}")
                shown += 1
    return "\n".join(lines)


if __name__ == "__main__":
    _environment(os.environ)  # also when started by hand
    raise SystemExit(serve(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 8))
