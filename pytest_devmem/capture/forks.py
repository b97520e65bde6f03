"""Processes a test forks: what a forked child allocates is in no capture of this process.

The captures hook JAX, TensorFlow and the `devmem` fixture's pool in this process; a child made by
`os.fork` (or multiprocessing's `fork` start method) runs on with copies of those hooks, writing
into its own copy of the recorder, which is never read. Its memory is not measured, and a window
that saw a fork says so rather than recording the child's work as nothing. Counted by
`os.register_at_fork` (CPython calls `before` in the parent ahead of every `os.fork`); a process
started by `subprocess` or multiprocessing's `spawn` is a new program, not a fork, and is not counted.
"""

from __future__ import annotations

import os

_forks = 0


def _before_fork() -> None:
    global _forks
    _forks += 1


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(before=_before_fork)


def forks() -> int:
    """How many times this process has forked so far."""
    return _forks


def fork_note(count: int) -> str:
    """What a window that saw `count` forks says of them."""
    return (
        f"the test forked {count} child process(es) (os.fork, or multiprocessing's 'fork' start method): "
        "what they allocated is not captured; only this process's memory is in the trace"
    )
