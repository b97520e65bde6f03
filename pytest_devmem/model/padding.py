"""The bytes a TPU's tiled layouts add at a test's peak: each array held then takes its tiled size (an
f32[8,3] takes a whole (8, 128) tile: 4,096 bytes for its 96), and each program whose temp was live
then holds buffers padded the same way (their own figures, model/buffers.py).

An allocation in the trace holds only its bytes; which of them are padding comes from the sizes the TPU
compiler gave each shard (`padded`: tiled size -> the dense sizes of the shards given it). A tiled size
given to shards of one dense size alone says its padding exactly; one given to shards of several dense
sizes (an f32[8,3] and an f32[8,4] both take 4,096 bytes) cannot say which an allocation held: its bytes
are counted apart, as unknown, never guessed. No framework here.
"""

from __future__ import annotations

from collections.abc import Mapping

from .buffers import ProgramBuffers
from .executables import TEMP_SUFFIX
from .machine.results import MapSnapshot
from .trace import Trace

__all__ = ["padding_at_peak"]


def padding_at_peak(
    snapshot: MapSnapshot | None,
    trace: Trace,
    padded: Mapping[int, set[int]],
    programs: Mapping[str, ProgramBuffers],
) -> dict[str, object] | None:
    """What the record of a test on a TPU says of padding at its peak: `bytes` (arrays' and the live
    temps' buffers'), `arrays`, `buffers`, `unknown_bytes` (allocations whose padding cannot be told),
    `largest` (who wastes most: a label, or a program's buffer). None without a snapshot of the peak."""
    if snapshot is None:
        return None
    names = trace.names
    arrays = unknown = 0
    by_label: dict[str, int] = {}
    temps: set[str] = set()
    for pool in snapshot.pools:
        for _, _, _, index in pool.chunks:
            if index < 0:
                continue
            label, size = names[trace.labels[index]], trace.sizes[index]
            if label.endswith(TEMP_SUFFIX):
                temps.add(label[: -len(TEMP_SUFFIX)])
                continue
            dense = padded.get(size)
            if not dense:
                continue  # a size the compiler gave no array shard: not an array's tiles
            if len(dense) > 1:
                unknown += size
                continue
            waste = size - next(iter(dense))
            arrays += waste
            by_label[label] = by_label.get(label, 0) + waste
    wasted = [(f"{label} (arrays)", waste) for label, waste in by_label.items() if waste]
    buffers = 0
    for name in sorted(temps):
        program = programs.get(name)
        if program is not None:
            buffers += program.padding_bytes
            wasted += [
                (f"{name}: {buffer.text()}", buffer.padding)
                for buffer in program.buffers
                if buffer.padding and not buffer.memory_space
            ]
    wasted.sort(key=lambda item: (-item[1], item[0]))
    return {
        "bytes": arrays + buffers,
        "arrays": arrays,
        "buffers": buffers,
        "unknown_bytes": unknown,
        "largest": [{"name": name, "bytes": waste} for name, waste in wasted[:3]],
    }
