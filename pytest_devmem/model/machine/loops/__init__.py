"""The machine's per-event loops, one module each (`replay.py` sets up the devices and lanes and
makes the result; `state.py` holds what they read and write):

* `replay_ondemand_columns`: every allocator on-demand: running sums over the columns (numpy);
* `replay_compiled`: every lane on a BFC pool (plain or compacting), no timeline: XLA's BFC rules
  compiled by numba (`compiled_kernel.run_lanes`; `compiled_bfc` moves the pools' state into its
  arrays and back), which hands every event it cannot decide alone back to the event loop;
* `replay_lanes`: any trace, each pool through its own methods (the event loop).

All give the same result; the tests replay random traces against the loop as first written
(docs/architecture.md lists these fast paths and what each saves). The pools of a machine replay
keep their chunks and the counters the model reads (`bytes_in_use`, `pool_bytes`); their other
statistics (`num_allocs`, their own peaks) are not kept here.
"""

from .any_lanes import replay_lanes
from .compiled_bfc import replay_compiled, suits
from .ondemand_columns import replay_ondemand_columns

__all__ = ["replay_compiled", "replay_lanes", "replay_ondemand_columns", "suits"]
