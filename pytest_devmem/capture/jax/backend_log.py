"""JAX's log of its backends' start, kept as text, not as frames.

JAX starts its backends at the first call that needs a device, inside whichever test makes it. Where
a plugin fails as it starts (the CUDA plugin installed on a machine without its libraries, say), JAX
logs the failure with its traceback (`logger.exception("Jax plugin configuration error: Exception
when calling %s.initialize()")`, `discover_pjrt_plugins` in jax/_src/xla_bridge.py). pytest keeps
each test's log records until the test's report is made, and a record with its exception keeps the
traceback, whose frames reach back to the test's call that started the backends and hold its locals:
the first `jnp.ones` of a process kept its 4-byte fill value past the window, so the test that
happened to start JAX had one allocation more than the same test run after another.

`KeptAsText` renders the exception as the record's text when the record is made, as a formatter
would have at its first use (`logging.Formatter.format` prints `exc_text` when it is set), and drops
the exception with its frames: what is printed is the same, and no test's memory outlives it.
"""

from __future__ import annotations

import logging


class KeptAsText(logging.Filter):
    """A record's exception as text: printed as before, its frames not held. Each capture adds its
    own to JAX's backend logger (`internals.BACKENDS_LOGGER`) while it is installed."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[0] is not None:
            if not record.exc_text:
                record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        return True
