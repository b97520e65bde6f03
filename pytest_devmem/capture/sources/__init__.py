"""Measurement sources behind one small interface. Each imports its library lazily, only when used.

A source is started before a test and stopped after it; `stop()` returns a Reading that says whether
the source could measure anything here and, if it could, the test's figures. A source that cannot
run says why in `note` and reports no numbers: a missing figure is None, never 0.
"""

from __future__ import annotations

from .base import Reading, Source
from .sampler import Sampler

__all__ = ["Reading", "Sampler", "Source"]
