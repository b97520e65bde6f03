"""A trace's Site column (the user's line that made each buffer): written in the CSV and the Arrow
file where any event has one, read back by every reader alike, carried between processes; a trace
without it (older files, RMM's logs) reads with no line for any event."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_devmem.model.trace import ALLOCATE_CODE, FREE_CODE, HEADER, SITE_HEADER, Trace
from pytest_devmem.model.trace import arrow_file as trace_ipc
from pytest_devmem.model.trace import csv_columns as trace_arrow


def with_sites() -> Trace:
    trace = Trace()
    trace.add(ALLOCATE_CODE, 1, 4096, 0.0, 0, 0, "jax", "device_put", "cpu:0", 0, "/work/model.py:12")
    trace.add(ALLOCATE_CODE, 2, 512, 0.1, 0, 0, "jax", "jit(step)", "cpu:0", 0, "=model.py:3")  # a formula-like text
    trace.add(ALLOCATE_CODE, 3, 256, 0.2, 0, 0, "tensorflow", "MatMul", "cpu:0", 0, "")  # no line known
    trace.add(FREE_CODE, 2, 512, 0.3, 0, 0, "jax", "jit(step)", "cpu:0", 0, "=model.py:3")
    return trace


def sites(trace: Trace) -> list[str]:
    return [event.site for event in trace]


def test_the_csv_carries_the_sites_and_both_readers_read_them_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = with_sites()
    path = tmp_path / "trace.csv"
    trace.write_csv(path)
    assert path.read_text().splitlines()[0] == ",".join(SITE_HEADER)
    assert Trace.read_csv(path) == trace  # by column where pyarrow is installed
    monkeypatch.setattr(trace_arrow, "available", lambda: False)
    assert sites(Trace.read_csv(path)) == sites(trace)  # the row reader


@pytest.mark.skipif(not trace_ipc.available(), reason="the Arrow file needs pyarrow and numpy")
def test_the_arrow_file_carries_the_sites(tmp_path: Path) -> None:
    trace = with_sites()
    path = tmp_path / "trace.arrow"
    trace.write_arrow(path)
    assert Trace.read(path) == trace


def test_a_trace_without_sites_writes_the_ten_columns_as_before_and_reads_with_none(tmp_path: Path) -> None:
    trace = Trace()
    trace.add(ALLOCATE_CODE, 1, 64, 0.0, 0, 0, "pool", "", "cpu:0")
    path = tmp_path / "old.csv"
    trace.write_csv(path)
    assert path.read_text().splitlines()[0] == ",".join(HEADER)
    again = Trace.read_csv(path)
    assert sites(again) == [""] and not again.has_sites()


def test_the_columns_between_processes_carry_the_sites_and_older_columns_have_none() -> None:
    trace = with_sites()
    assert Trace.from_columns(trace.to_columns()) == trace
    older = trace.to_columns()
    del older["sites"]
    assert sites(Trace.from_columns(older)) == [""] * len(trace)
    bad = trace.to_columns()
    bad["sites"] = [99] * len(trace)
    with pytest.raises(Exception, match="out of range"):
        Trace.from_columns(bad)
