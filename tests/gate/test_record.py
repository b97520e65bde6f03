"""A record's trace facts and analysis: typed in memory, written and read back in one JSON form, key for key."""

from __future__ import annotations

import json

from pytest_devmem.gate.record import Analysis, MinFraction, TestRecord, TraceFacts
from pytest_devmem.model.whatif import WhatIf


def _record() -> TestRecord:
    return TestRecord("t.py::test_a", "prealloc", "sim:16GiB", "sim-16GiB", 1024, 2048, 0.0, None, "passed")


def test_trace_facts_are_written_in_their_order_and_only_where_known() -> None:
    facts = TraceFacts(notes=["no hooks"], file="traces/t.csv")
    facts.at_peak, facts.events, facts.order = {}, 7, ["jax"]
    assert json.dumps(facts.to_json()) == (
        '{"events": 7, "order": ["jax"], "at_peak": {}, "notes": ["no hooks"], "file": "traces/t.csv"}'
    )  # an empty figure is a figure; an absent one is not written
    assert TraceFacts().to_json() == {"events": None, "notes": []}  # nothing traced: said so, never 0


def test_a_report_record_reads_back_to_the_same_bytes() -> None:
    record = _record()
    record.trace = TraceFacts(
        3,
        {"jax": {"allocations": 1, "peak_live_bytes": 512}},
        ["jax"],
        {"jit(f) temp": 512},
        {"jit(f) temp": {"m.py:3": 512}},
        ["a note"],
        kept={"jax": 0},
        compiled=["jit(f)"],
        needed={"f": 1},
    )
    record.analysis = Analysis(3, 512, MinFraction(0.25, False), WhatIf(2**30, False, "event 1: too big"))
    text = json.dumps(record.to_json())
    again = TestRecord.from_json(json.loads(text))
    assert again.trace == record.trace and again.analysis == record.analysis
    assert json.dumps(again.to_json()) == text
    assert json.loads(text)["analysis"] == {
        "trace_events": 3,
        "peak_live_bytes": 512,
        "min_fraction": 0.25,
        "min_fraction_at_floor": False,
        "what_if": {"capacity": 2**30, "ok": False, "message": "event 1: too big"},
    }


def test_an_older_report_loads_and_keeps_what_it_held() -> None:
    """A report from before the floor flag and with trace keys no longer written: read, and written back as held;
    a value of the wrong type is not believed (None), never taken for a figure."""
    data = _record().to_json()
    data["analysis"] = {"trace_events": 3, "peak_live_bytes": 512, "min_fraction": None}
    data["trace"] = {"events": "many", "at_peak": {"x": 5, "y": "big"}, "notes": [], "peak_bytes": 9}
    record = TestRecord.from_json(data)
    assert record.analysis == Analysis(3, 512, MinFraction(None, None))  # asked, and nothing fits
    assert record.trace is not None and record.trace.events is None and record.trace.at_peak == {"x": 5}
    assert record.trace.earlier == {"peak_bytes": 9}
    assert record.to_json()["analysis"] == data["analysis"]
    assert record.to_json()["trace"] == {"events": None, "at_peak": {"x": 5}, "notes": [], "peak_bytes": 9}
