"""The Python line of a TensorFlow op that allocated, where TensorFlow itself records it.

TensorFlow's profiler names the op that asked for each allocation (`tf_op`) and, through the step it
ran in, the function (`xspace.py`), never a Python line. The runtime keeps one for each node of a
`tf.function`'s graph: the stack where the node was made, as TensorFlow shows it in its own error
messages (`GraphDebugInfo`, `context.get_graph_debug_info(name)`, which an `AtomicFunction`'s
`graph_debug_info` returns; `frames_by_id`, outermost first). Its user's line is the innermost frame
of the user's code (`call_sites.is_user_file`). A nested function TensorFlow inlined into its caller
runs as nodes named `<call node>/<node in the callee>` (`InlineFunctionBody`,
tensorflow/core/common_runtime/inline_function_utils.cc), so such a name is looked up in the function
the call node calls (its `f` in the caller's FunctionDef).

A function is read when a window's events are converted, or, where the runtime removes it during the
window (a `tf.function` local to the test, collected), just before (the capture wraps
`AtomicFunction.__del__`); once per window, forgotten after it. Reading one takes about 10 to 20 ms for
a small Keras training step (69 nodes, measured on a loaded 2-core machine): the cost is per function
a window ran, never per op or per step.

Nothing else is guessed: an eager op (no graph: TensorFlow records no Python line for it), a node
the debug info does not list, or a name made by a lowering pass (a `while` body's) has no line:
"line unknown".
"""

from __future__ import annotations

from typing import Any

from ..call_sites import is_user_file

__all__ = ["OpLines"]

CALL_OPS = ("PartitionedCall", "StatefulPartitionedCall")
"""The ops that call a function by its `f` attribute, which TensorFlow inlines into their caller."""


class OpLines:
    """The user's line of each node of the tf.functions asked about, read once per function."""

    def __init__(self, context: Any = None) -> None:
        """`context`: TensorFlow's eager context (`tensorflow.python.eager.context.context()`),
        found on first use where not given."""
        self._context = context
        self._functions: dict[str, tuple[dict[str, str], dict[str, str]] | None] = {}

    def site(self, function: str, op: str, depth: int = 0) -> str:
        """`file:line` of node `op` of the runtime function `function` (`__inference_step_73`); ""
        where TensorFlow does not say."""
        read = self._read(function) if function else None
        if read is None or depth > 16:
            return ""
        nodes, calls = read
        found = nodes.get(op)
        if found is not None:
            return found
        for position, character in enumerate(op):  # an inlined callee's node: "<call node>/<its node>"
            if character == "/" and op[:position] in calls:
                return self.site(calls[op[:position]], op[position + 1 :], depth + 1)
        return ""

    def forget(self) -> None:
        """Drop what was read (a window's functions: read again when another window asks)."""
        self._functions.clear()

    def read(self, function: str) -> None:
        """Read `function`'s lines now, while the runtime still holds it."""
        self._read(function)

    def _read(self, function: str) -> tuple[dict[str, str], dict[str, str]] | None:
        if function in self._functions:
            return self._functions[function]
        read = None
        try:
            context = self._context
            if context is None:
                from tensorflow.python.eager import context as eager

                context = self._context = eager.context()
            name = function.encode()
            read = (_node_lines(context.get_graph_debug_info(name)), _calls(context.get_function_def(name)))
        except Exception:  # the runtime no longer holds it, or this TensorFlow has no such record
            read = None
        self._functions[function] = read
        return read


def _node_lines(info: Any) -> dict[str, str]:
    """Each node's user line from a GraphDebugInfo: the innermost frame of its stack in the user's code."""
    lines = {}
    for node, trace_id in info.name_to_trace_id.items():
        if "@" in node:  # a node of another function of the library (`name@function`)
            continue
        trace = info.traces_by_id[trace_id]
        frames = [info.frames_by_id[frame] for frame in trace.frame_id if frame in info.frames_by_id]
        frames += list(trace.file_line_cols)  # the older form, frames kept in the trace itself
        for frame in reversed(frames):
            file = info.files[frame.file_index] if 0 <= frame.file_index < len(info.files) else ""
            if file and is_user_file(file):
                lines[node] = f"{file}:{frame.line}"
                break
    return lines


def _calls(definition: Any) -> dict[str, str]:
    """The function each call node of a FunctionDef calls, by node name."""
    return {
        node.name: node.attr["f"].func.name
        for node in definition.node_def
        if node.op in CALL_OPS and "f" in node.attr and node.attr["f"].func.name
    }
