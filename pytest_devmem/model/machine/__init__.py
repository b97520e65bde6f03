"""The model of the machine: a test's trace replayed over its devices, each with its processes' CUDA
contexts and one allocator per framework (a TPU chip: one, its runtime's), as a real machine allocates (`replay.py` says how). Every
figure, timeline, contributor list and picture of a test comes from this one replay.

* `replay.py`: `Machine` starts each framework's allocators by its rules and runs the trace through the
  fastest loop that applies; `run_machine`, `maps_after`;
* `state.py`: the replay's state, which the loops, the maps and the result share (`Replay`), its
  devices and their allocators (`device_state.py`: `DeviceState`, `AllocatorState`, the copies a map
  is made from), and how the allocators start (`allocator_rules.py`);
* `loops/`: the per-event loops (the BFC rules compiled by numba, each pool through its methods, on-demand by column);
* `maps.py`: the pools' maps as plain data, and who held the memory;
* `results.py`: what a replay returns, as plain data, read by the plugin, the gate and the pictures.

No pytest, no frameworks here.
"""

from .device_state import TPU_RUNTIME_NAME, device_order
from .maps import contributor, holders, lines_at_peak
from .replay import Machine, maps_after, run_machine
from .results import (
    DEFAULT_SOURCE,
    FRAGMENTATION_STEP,
    KIND_TEXT,
    AllocatorFigures,
    DeviceFigures,
    MachineRun,
    MachineSpec,
    MapSnapshot,
    OutOfMemory,
    PoolMap,
    SourceFigures,
    Timeline,
    allocator_name,
)

__all__ = [
    "DEFAULT_SOURCE",
    "FRAGMENTATION_STEP",
    "KIND_TEXT",
    "AllocatorFigures",
    "DeviceFigures",
    "Machine",
    "MachineRun",
    "MachineSpec",
    "MapSnapshot",
    "OutOfMemory",
    "PoolMap",
    "TPU_RUNTIME_NAME",
    "SourceFigures",
    "Timeline",
    "allocator_name",
    "contributor",
    "device_order",
    "holders",
    "lines_at_peak",
    "maps_after",
    "run_machine",
]
