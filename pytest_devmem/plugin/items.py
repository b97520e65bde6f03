"""What the plugin keeps on each test item (its marker, regime, whether it is measured, what its
window captured) and how a test is named in records and baselines."""

from __future__ import annotations

import os
from typing import Any

import pytest

from ..capture.measurement import Captured
from ..errors import DevmemError, OutOfMemoryError
from ..gate.marks import MARK_NAME, MarkArguments, MarkSpec, combine_marks, parse_mark
from ..model.regime import Regime, on_tpu
from ..model.tpu_targets import TpuSpec

DEFAULT_REGIME = Regime.of("prealloc")
"""A measured test's regime when neither --devmem-mode nor its marker names one: JAX's and
TensorFlow's own defaults, which prealloc models (records and baselines say `prealloc`)."""

mark_key = pytest.StashKey["MarkSpec | str | None"]()  # the marker's spec, or what is wrong with it
regime_key = pytest.StashKey["Regime | None"]()
measured_key = pytest.StashKey[bool]()
captured_key = pytest.StashKey[Captured]()
oom_key = pytest.StashKey["str | None"]()
not_applied_key = pytest.StashKey[
    dict[str, str]
]()  # the marker's keys the target has no use for, and why  # the out-of-memory error the test raised, as text


def prepare_item(item: pytest.Item, session_regime: Regime | None, tpu: TpuSpec | None = None) -> Regime | None:
    """Read the item's marker once: its spec (or the error to raise in its setup), whether it is
    measured, its regime. On a TPU preset a marker's GPU regime is left out, with why."""
    levels = mark_levels(item)
    combined = combine_marks(levels) if levels else None
    spec = parse_mark(*combined) if isinstance(combined, tuple) else combined
    if tpu is not None and isinstance(spec, MarkSpec):
        spec, item.stash[not_applied_key] = spec.on_tpu(f"sim:{tpu.preset}")
    item.stash[mark_key] = spec
    item.stash[measured_key] = session_regime is not None or bool(levels)
    try:
        regime = spec.regime(session_regime) if isinstance(spec, MarkSpec) else session_regime
    except (
        DevmemError,
        ValueError,
        TypeError,
        OverflowError,
    ) as exc:  # the marker's regime with the session's: this test's error
        item.stash[mark_key] = f"@pytest.mark.devmem: {exc}"
        regime = session_regime
    if tpu is not None and regime is not session_regime and regime is not None:
        regime = on_tpu(regime)
    item.stash[regime_key] = regime
    return regime


def mark_levels(item: pytest.Item) -> list[tuple[str, list[MarkArguments]]]:
    """The item's `devmem` markers by level, from the farthest (a module's, a package's) to the
    closest: the function's own, then a parametrized case's `marks=` (pytest keeps both on the
    function, the case's after its decorators: `_pytest/python.py`, Function.__init__)."""
    by_node: dict[int, tuple[str, list[MarkArguments]]] = {}
    case = [mark for mark in getattr(getattr(item, "callspec", None), "marks", ()) if mark.name == MARK_NAME]
    case_marks: list[MarkArguments] = []
    for node, mark in item.iter_markers_with_node(MARK_NAME):  # the closest first
        if node is item and any(mark is own for own in case):
            case_marks.append((mark.args, mark.kwargs))
            continue
        where = f"{type(node).__name__.lower()} {node.name}" if node is not item else f"function {item.name}"
        by_node.setdefault(id(node), (where, []))[1].append((mark.args, mark.kwargs))
    levels = list(reversed(by_node.values()))
    if case_marks:
        levels.append((f"the case {item.name}", case_marks))
    return levels


def marked(item: pytest.Item) -> MarkSpec | None:
    spec = item.stash.get(mark_key, None)
    return spec if isinstance(spec, MarkSpec) else None


def measured(item: pytest.Item) -> bool:
    return item.stash.get(measured_key, False)


def regime_of(item: pytest.Item, default: Regime = DEFAULT_REGIME) -> Regime:
    """The regime the item runs under: its own, or the default where none is named."""
    return item.stash.get(regime_key, None) or default


def id_of_test(nodeid: str, path: str) -> str:
    """The id records and baselines know a test by: its node id; for a test outside the rootdir,
    which pytest names `::test` without its file, the file's path from the rootdir (`path`, the
    item's location) in front, so two such tests never share an id or a baseline file."""
    if not nodeid.startswith("::"):
        return nodeid
    return path.replace(os.sep, "/") + nodeid


def skip_text(report: pytest.TestReport) -> str:
    """`skipped: REASON` for a skipped test's report, its reason as pytest's skip gave it."""
    longrepr = report.longrepr
    reason = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else "skipped"
    return f"skipped: {reason.removeprefix('Skipped: ')}"


def out_of_memory_text(exc: BaseException) -> str | None:
    """The first line of our pool's OOM, or of a framework's (XLA's RESOURCE_EXHAUSTED, TensorFlow's
    ResourceExhaustedError); None for any other error."""
    text = f"{type(exc).__name__}: {exc}"
    if (
        isinstance(exc, (OutOfMemoryError, MemoryError))
        or "RESOURCE_EXHAUSTED" in text
        or "ResourceExhausted" in text
        or "out of memory" in text.lower()
    ):
        return text.splitlines()[0][:500]
    return None


def refusal_raised_at(
    item: pytest.Item, oom: object, excinfo: pytest.ExceptionInfo[BaseException] | None
) -> str | None:
    """Where the test's own code called a program the target's compiler refused, when that refusal
    (raised at the call, as on the target) is what failed the test: `path:line` of the test's last
    frame, or the test's name. None where the test failed otherwise."""
    if not isinstance(oom, dict) or not oom.get("compile_time") or excinfo is None:
        return None
    error = str(oom.get("error", ""))
    if not error or " ".join(str(excinfo.value).split())[: len(error)] != error:
        return None
    path = str(getattr(item, "path", ""))
    frames = [entry for entry in excinfo.traceback if str(entry.path) == path]
    if not frames:
        return item.nodeid
    return f"{item.location[0]}:{frames[-1].lineno + 1}"


LIBRARY_TEST_CASES = ("unittest.", "absl.testing.")
"""Modules whose TestCase classes' own setUpClass and tearDownClass make nothing of a test's."""


def library_class_fixture(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> bool:
    """Whether this is the class fixture pytest makes for a unittest class (`_pytest/unittest.py`,
    `_register_unittest_setup_class_fixture`) whose class setup and teardown are all a testing
    library's (unittest's, absltest's): it left nothing of its own to collect."""
    if not fixturedef.argname.startswith("_unittest_setUpClass_fixture_"):
        return False
    cls = getattr(request.node, "cls", None) or getattr(request, "cls", None)
    if cls is None:
        return False
    for name in ("setUpClass", "tearDownClass", "doClassCleanups"):
        function = getattr(getattr(cls, name, None), "__func__", None)
        if function is None or not str(getattr(function, "__module__", "")).startswith(LIBRARY_TEST_CASES):
            return False
    return True
