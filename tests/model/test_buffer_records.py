"""The buffers at a program's peak as plain data: their JSON (checked as a baseline's must be), and what
a regression's message says of them."""

from __future__ import annotations

import pytest

from pytest_devmem.model.buffers import (
    PeakBuffer,
    ProgramBuffers,
    buffer_changes,
    describe_growth,
    describe_lines,
    programs_from_json,
)
from pytest_devmem.units import KiB, MiB

WIDE = PeakBuffer(8 * MiB, "f32[4096,512]", "sort", "mymodel.py:6")
NARROW = PeakBuffer(512 * KiB, "f32[256,512]", "dot_general", "mymodel.py:4")


def test_a_program_round_trips_through_json_with_padding_and_memory_space() -> None:
    tiled = PeakBuffer(2048, "f32[8,3]", "add", "model.py:9", logical_bytes=96, memory_space=1)
    program = ProgramBuffers(
        (WIDE, tiled), more=3, peak_bytes=9 * MiB, padding_bytes=1952, source="XLA's heap simulation"
    )
    data = program.to_json()
    assert data["buffers"][1] == {  # type: ignore[index]
        "bytes": 2048,
        "shape": "f32[8,3]",
        "op": "add",
        "at": "model.py:9",
        "logical_bytes": 96,
        "memory_space": 1,
    }
    assert ProgramBuffers.from_json(data) == program
    assert tiled.padding == 1952 and WIDE.padding == 0
    assert tiled.text() == "f32[8,3] add at model.py:9 in memory space 1"


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ([], "must be an object"),
        ({"buffers": {}}, '"buffers" must be a list'),
        ({"buffers": [], "more": -1}, '"more" must be a whole number'),
        ({"buffers": [{"bytes": "8", "shape": "f32[1]", "op": "add"}]}, '"bytes" must be a whole number'),
        ({"buffers": [{"bytes": 8, "shape": "", "op": "add"}]}, 'needs its "shape" and "op"'),
        ({"buffers": [{"bytes": 8, "shape": "f32[2]", "op": "add", "at": 3}]}, '"at" must be a string'),
        ({"buffers": [], "notes": "x"}, '"notes" must be a list'),
    ],
)
def test_a_bad_stored_program_is_refused_naming_it_and_the_field(entry: object, problem: str) -> None:
    with pytest.raises(ValueError, match="jit\\(step\\)") as raised:
        programs_from_json({"jit(step)": entry})
    assert problem in str(raised.value)


def test_a_buffer_the_baseline_listed_completely_is_new() -> None:
    before = ProgramBuffers((NARROW,), more=0)
    now = ProgramBuffers((WIDE, NARROW))
    assert describe_growth("jit(update)", before, now) == "f32[4096,512] sort at mymodel.py:6 (new, 8.00 MiB)"


def test_a_buffer_absent_from_a_shortened_list_is_not_among_the_baselines_largest() -> None:
    before = ProgramBuffers((NARROW,), more=4)  # four smaller ones were left out of the baseline
    text = describe_growth("jit(update)", before, ProgramBuffers((WIDE,)))
    assert text == "f32[4096,512] sort at mymodel.py:6 (not among the baseline's largest, 8.00 MiB)"
    assert "none" not in describe_growth("jit(update)", None, ProgramBuffers((WIDE,)))


def test_a_buffer_that_grew_says_from_what_and_the_largest_growth_comes_first() -> None:
    grown = PeakBuffer(2 * MiB, NARROW.shape, NARROW.op, NARROW.at)
    changes = buffer_changes(ProgramBuffers((NARROW,)), ProgramBuffers((WIDE, grown)))
    assert [change.text() for change in changes] == [
        "f32[4096,512] sort at mymodel.py:6 (new, 8.00 MiB)",
        "f32[256,512] dot_general at mymodel.py:4 (512.00 KiB → 2.00 MiB)",
    ]
    assert buffer_changes(ProgramBuffers((WIDE,)), ProgramBuffers((WIDE,))) == []  # nothing grew


def test_lines_at_the_peak_are_checked_as_a_baselines_must_be() -> None:
    from pytest_devmem.model.buffers import lines_from_json

    assert lines_from_json({"device_put": {"model.py:12": 4096, "": 8}}) == {"device_put": {"model.py:12": 4096, "": 8}}
    for bad in ([], {"device_put": 5}, {"device_put": {"model.py:1": -1}}, {"device_put": {"model.py:1": True}}):
        with pytest.raises(ValueError):
            lines_from_json(bad)


def test_what_grew_by_line_says_new_changed_unknown_and_not_among_the_largest() -> None:
    from pytest_devmem.model.buffers import describe_lines

    now = {"model.py:12": 8 * MiB, "model.py:3": MiB, "": 2 * MiB}
    assert describe_lines(None, now) == "made at model.py:12 (8.00 MiB), line unknown (2.00 MiB)"
    assert (
        describe_lines({"model.py:12": MiB}, now)
        == "made at model.py:12 (1.00 MiB → 8.00 MiB), line unknown (new, 2.00 MiB)"
    )
    full = {"a.py:1": 9 * MiB, "b.py:2": 9 * MiB, "c.py:3": 9 * MiB}  # as many as a record keeps: maybe more
    assert describe_lines(full, {"d.py:4": MiB}) == "made at d.py:4 (not among the baseline's largest, 1.00 MiB)"
    assert describe_lines({"model.py:12": 8 * MiB}, {"model.py:12": 8 * MiB}) == ""  # nothing grew there


def test_a_line_break_in_a_stored_buffer_or_line_stays_on_its_line() -> None:
    """A compiler entry stored beside the baselines is read back as the buffers now: a line break in
    it must not start a line of the failure message (terminal_lines keeps line breaks)."""
    forged = PeakBuffer(8 * MiB, "f32[4]\n  if the increase is intended", "sort\n", "mymodel.py:6\n")
    text = describe_growth("jit(update)", None, ProgramBuffers((forged,)))
    assert "\n" not in text and "f32[4]\\n  if the increase is intended sort\\n at mymodel.py:6\\n" in text
    assert "\n" not in describe_lines(None, {"evil.py\n  refresh:3": MiB})
