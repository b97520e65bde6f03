"""The machine's per-event loops, one module each (`replay.py` sets up the devices and lanes and
makes the result; `state.py` holds what they read and write).

They run once for every event of every test, so they are written for speed in plain Python:

* `replay_one_bfc_lane`: a single lane (one allocator on one device, the common case) on a BFC
  pool; its counters live in local variables;
* `replay_bfc_lanes`: several lanes, all on BFC pools; counters on the device and allocator objects;
* `replay_ondemand_columns`: every allocator on-demand: running sums over the columns (numpy);
* `replay_lanes`: any trace (on-demand and compacting pools, sizes that are not positive), each
  pool through its own methods.

The first two run XLA's BFC rules inline (best fit, split, merge: exactly `BFCPool.alloc` and
`BFCPool.free`, which they call only to grow the pool or fail). Where numba is installed, both
hand long traces to the one compiled kernel (`compiled_kernel.run_lanes`, one lane or several;
`compiled_bfc` moves the pools' state into its arrays and back): it decides the events a pool
serves from its free chunks and hands every other event back to the Python loop. All give the
same result; the tests replay random traces against the loop as first written, which runs each
pool through its own methods (docs/architecture.md lists these fast paths and what each saves).

The pools of a machine replay keep their chunks and the counters the model reads (`bytes_in_use`,
`pool_bytes`); their other statistics (`num_allocs`, their own peaks) are not kept here.
"""

from .any_lanes import replay_lanes
from .bfc_lanes import replay_bfc_lanes
from .ondemand_columns import replay_ondemand_columns
from .one_bfc_lane import replay_one_bfc_lane

__all__ = ["replay_bfc_lanes", "replay_lanes", "replay_ondemand_columns", "replay_one_bfc_lane"]
