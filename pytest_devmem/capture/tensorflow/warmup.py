"""TensorFlow made to allocate in every test as it does once it has run before in the process.

The first time a process runs a `tf.function` that computes a gradient and updates a variable,
TensorFlow's kernels allocate differently from every later time (measured: a Keras training step
asks for a 256-byte copy in `AssignSubVariableOp` on each of its steps, and peaks 768 B higher, with
other ops named at the peak). So a test's figures would depend on whether a TensorFlow test ran
before it: in the full run, alone, in a shard or on an xdist worker. The capture runs one such small
step when TensorFlow arrives, before any test window traces it: every test is then measured as a
later one, in any order.

Its executor also runs a graph's independent ops on a pool of inter-op threads, so which buffers are
live together, hence the peak, changed from one run to the next (a few hundred bytes on a small
step). The plugin sets TF_NUM_INTEROP_THREADS=1 unless the user set it (TensorFlow reads it when it
creates its thread pools, `NumInterOpThreadsFromEnvironment` in common_runtime/process_util.cc):
ops then run one after another in the executor's order.

That order itself still moved from one run to the next: the executor numbers a graph's nodes in the
order the graph hands them out and takes the ready ones in the order their producers' edges are
walked, both "not stable with respect to ASLR" (common_runtime/propagator_state.h). Measured: in 2
processes of 10 a Keras training step applied its updates after the whole backward pass instead of
beside it, its peak 768 B higher. The plugin sets TF_DETERMINISTIC_ORDER=1 unless the user set it
(read once, `OpOrderDeterminismRequired` in core/util/determinism.cc): the executor then numbers the
nodes by name (common_runtime/graph_view.cc) and takes the ready ones lowest number first
(`OrderedPropagatorState`, chosen in `ExecutorImpl::RunAsyncInternal`, common_runtime/executor.cc),
the same order in every run; 10 processes of 10 gave the same trace, event for event.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from types import ModuleType

INTEROP_VARIABLE = "TF_NUM_INTEROP_THREADS"
ORDER_VARIABLE = "TF_DETERMINISTIC_ORDER"


def prepare_interop(environ: MutableMapping[str, str]) -> bool:
    """Set TF_NUM_INTEROP_THREADS=1 unless the user set it; whether it was set here."""
    return _set_unless_given(environ, INTEROP_VARIABLE)


def prepare_order(environ: MutableMapping[str, str]) -> bool:
    """Set TF_DETERMINISTIC_ORDER=1 unless the user set it; whether it was set here."""
    return _set_unless_given(environ, ORDER_VARIABLE)


def _set_unless_given(environ: MutableMapping[str, str], name: str) -> bool:
    if name in environ:
        return False
    environ[name] = "1"
    return True


def warm_up(tf: ModuleType) -> str | None:
    """Run one small gradient step with a variable update; the reason it could not, else None."""
    try:
        variable = tf.Variable(tf.ones((4, 4)))

        @tf.function
        def step(x: object) -> object:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(x, variable) - 1.0) ** 2)
            variable.assign_sub(0.1 * tape.gradient(loss, variable))
            return loss

        step(tf.ones((2, 4)))
        del step
        variable = None  # the step is gone: nothing holds the variable now
    except Exception as exc:  # an odd TensorFlow: measure as before, and say so
        return f"TensorFlow's warm-up step failed ({type(exc).__name__}: {exc}): its first test in a process may measure a little differently"
    return None
