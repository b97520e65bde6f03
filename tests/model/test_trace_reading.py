"""The two ways a trace's CSV is read give one trace: by column (pyarrow, trace/csv_columns.py) and row by
row (trace/csv_file.py, which also names the line of a bad value). Traces written here, RMM's logs and
hand-made files with odd cells are read both ways and compared, columns and names alike."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_devmem.model.trace import BY_COLUMN_FROM, HEADER, RMM_HEADER, SOURCE_HEADER, Trace, TraceFormatError
from pytest_devmem.model.trace import csv_columns as trace_arrow

pytest.importorskip("pyarrow.csv", reason="the column reader needs pyarrow (the fast-traces extra)")


def read_both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[object, object, bool]:
    """(what the column reader gave, what the row reader gave, whether the column reader took
    the file): a Trace's columns, or the error message."""
    taken: list[bool] = []
    read_columns = trace_arrow.read_columns

    def spy(*args: object) -> bool:
        taken.append(read_columns(*args))  # type: ignore[arg-type]
        return taken[-1]

    def outcome() -> object:
        try:
            return Trace.read_csv(path).to_columns()
        except TraceFormatError as exc:
            return str(exc)

    with monkeypatch.context() as patched:
        patched.setattr(trace_arrow, "read_columns", spy)
        by_column = outcome()
    with monkeypatch.context() as patched:
        patched.setattr(trace_arrow, "available", lambda: False)
        by_row = outcome()
    return by_column, by_row, bool(taken and taken[-1])


texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
events = st.tuples(
    st.sampled_from([0, 0, 1, 2]),
    st.integers(0, 2**64 - 1) | st.integers(0, 300),
    st.integers(0, 2**63 - 1) | st.integers(1, 5000),
    st.floats(0, 1e9, allow_nan=False),
    st.integers(0, 2**64 - 1) | st.just(0),
    st.integers(0, 2**64 - 1) | st.just(0),
    st.sampled_from(["", "jax", "tensorflow", "pool"]) | texts,
    texts,
    st.sampled_from(["", "cpu:0", "gpu:1", "tpu:12"]),
    st.integers(0, 2**32 - 1) | st.just(0),
)


@settings(max_examples=25, deadline=None)
@given(st.lists(events, max_size=40))
def test_a_written_trace_reads_the_same_by_column_and_by_row(
    tmp_path_factory: pytest.TempPathFactory, rows: list[tuple]
) -> None:  # type: ignore[type-arg]
    trace = Trace()
    for row in rows:
        trace.add(*row)
    path = tmp_path_factory.mktemp("trace") / "trace.csv"
    trace.write_csv(path)
    with pytest.MonkeyPatch.context() as monkeypatch:
        by_column, by_row, _ = read_both(path, monkeypatch)
    assert by_column == by_row


def test_a_recorded_trace_is_read_by_column(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = Trace()
    for step in range(2000):
        trace.add(
            0,
            0x7F0000000000 + step * 256,
            4096 + step,
            step / 1000,
            140000000000 + step % 3,
            0,
            "jax",
            f"jit(step_{step % 7})",
            f"gpu:{step % 4}",
            step % 2,
        )
        trace.add(1, 0x7F0000000000 + step * 256, 4096 + step, step / 1000, 1, 0x10, "tensorflow", "", "", 0)
    path = tmp_path / "trace.csv"
    trace.write_csv(path)
    by_column, by_row, taken = read_both(path, monkeypatch)
    assert taken, "the column reader handed a well-formed trace to the row reader"
    assert by_column == by_row
    assert Trace.from_columns(by_column) == trace  # type: ignore[arg-type]


ROW = "1,0.5,allocate,0x10,5,0x0"
TAIL = ",jax,jit(f),gpu:0,0"


@pytest.mark.parametrize(
    ("header", "rows", "taken"),
    [
        (RMM_HEADER, [ROW, "1,0.6,deallocate,0x10,5,0x0"], True),  # RMM's six columns, its spelling of free
        (SOURCE_HEADER, [ROW + ",jax,jit(f)"], True),  # the eight columns of older traces
        (HEADER, [ROW + TAIL, "", "2,0.7,free,16,5,0" + TAIL], True),  # a blank line, decimal pointer and stream
        (HEADER, [ROW + ',jax,"a, b ""c""",,'], True),  # a quoted label; no device, no process
        (HEADER, [ROW + ",jax,f,gpu:0,7", ROW + ",jax,f,gpu:0,", ROW + ",jax,f,gpu:0,9"], True),  # one process empty
        (HEADER, ["1,0.5,allocate failure,0x0,5,0x0" + TAIL], True),
        (HEADER, [ROW + ", jax , label ,gpu:0,0"], True),  # texts are stripped as the row reader strips them
        (HEADER, ["1,13:39:51:124000,allocate,0x10,5,0x0" + TAIL], False),  # RMM's older clock
        (HEADER, ["1,0.5, allocate ,0x10,5,0x0" + TAIL], True),
        (HEADER, ["1,0.5,allocate, 0x10 ,5,0x0" + TAIL], False),  # spaces around numbers: the rows decide
        (HEADER, ["1,0.5,allocate,0x10,1_0,0x0" + TAIL], False),  # Python reads 1_0 as 10
        (HEADER, ["1,0.5,allocate,0X1f,5,0o7" + TAIL], False),
        (HEADER, ["1,0.5,allocate,0x0000000000000000010,5,0x0" + TAIL], False),  # 17 digits, leading zeros
        (HEADER, ["1,0.5,allocate,0xffffffffffffffff,9223372036854775807,0x0" + TAIL], True),  # the largest values
        # bad values: the column reader hands the file over, the row reader names the line
        (HEADER, [ROW + TAIL, "1,0.5,grab,0x10,5,0x0" + TAIL], False),
        (HEADER, ["1,0.5,allocate,01,5,0x0" + TAIL], False),  # Python refuses a leading zero in base 0
        (HEADER, ["1,0.5,allocate,0x,5,0x0" + TAIL], False),
        (HEADER, ["1,0.5,allocate,-1,5,0x0" + TAIL], False),
        (HEADER, ["1,0.5,allocate,0x1g,5,0x0" + TAIL], False),
        (HEADER, ["1,0.5,allocate,0x10000000000000000,5,0x0" + TAIL], False),  # 2**64
        (HEADER, ["1,0.5,allocate,0x10,-5,0x0" + TAIL], False),
        (HEADER, ["1,0.5,allocate,0x10,0,0x0" + TAIL], False),  # a size of 0: the row reader says what it means
        (HEADER, ["1,0.5,allocate,0x10,,0x0" + TAIL], False),
        (HEADER, ["1,nan,allocate,0x10,5,0x0" + TAIL], False),
        (HEADER, ["1,inf,allocate,0x10,5,0x0" + TAIL], False),
        (HEADER, ["-1,0.5,allocate,0x10,5,0x0" + TAIL], False),
        (HEADER, [ROW + ",jax,jit(f),GPU:0,0"], False),
        (HEADER, [ROW + ",jax,jit(f),gpu:0,-1"], False),
        (HEADER, [ROW + ",jax,jit(f),gpu:0,4294967296"], False),
        (HEADER, [ROW + ",jax,jit(f),gpu:0"], False),  # a column short
        (HEADER, [ROW + ',jax,"a\nb",gpu:0,0'], True),  # a line break inside a quoted label
    ],
)
def test_odd_cells_read_alike_both_ways(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, header: tuple[str, ...], rows: list[str], taken: bool
) -> None:
    path = tmp_path / "trace.csv"
    path.write_bytes(("\r\n" if "deallocate" in rows[-1] else "\n").join([",".join(header), *rows, ""]).encode())
    by_column, by_row, took = read_both(path, monkeypatch)
    assert by_column == by_row
    assert took == taken


def test_a_byte_order_mark_is_refused_as_the_row_reader_refuses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "trace.csv"
    path.write_bytes(b"\xef\xbb\xbf" + (",".join(HEADER) + "\n" + ROW + TAIL + "\n").encode())
    by_column, by_row, taken = read_both(path, monkeypatch)
    assert not taken and by_column == by_row
    assert isinstance(by_row, str) and "trace.csv:1: not a memory-event log" in by_row


def test_a_bad_value_deep_in_a_large_trace_is_named_by_its_line(tmp_path: Path) -> None:
    lines = [",".join(HEADER)] + [f"1,0.5,allocate,{0x10 + 256 * i:#x},5,0x0" + TAIL for i in range(50_000)]
    lines[40_001] = lines[40_001].replace(",5,", ",five,")
    path = tmp_path / "trace.csv"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceFormatError, match=r"trace\.csv:40002: Size 'five' is not a whole number"):
        Trace.read_csv(path)


@pytest.mark.parametrize("seed", range(3))
def test_peak_live_bytes_by_column_matches_the_count_by_event(seed: int) -> None:
    import random

    rng = random.Random(seed)
    trace = Trace()
    for _ in range(BY_COLUMN_FROM):  # pointers reused, freed twice, never allocated, allocated twice
        trace.add(rng.choice([0, 0, 1, 1, 2]), rng.randrange(1, 40), rng.randrange(0, 10_000))
    from pytest_devmem.model.trace.by_column import peak_live_bytes

    assert (
        peak_live_bytes(trace.actions, trace.pointers, trace.sizes)
        == trace.peak_live_bytes()
        == trace._peak_live_bytes_by_event()
    )


def test_devmem_replay_says_how_to_read_a_large_trace_faster_where_pyarrow_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_devmem import cli
    from pytest_devmem.cli import common

    path = tmp_path / "trace.csv"
    path.write_text(",".join(HEADER) + "\n" + ROW + TAIL + "\n")
    monkeypatch.setattr(common, "SLOW_READ_BYTES", 10)
    assert cli.main(["replay", str(path), "--mode", "prealloc"]) == 0
    assert "note" not in capsys.readouterr().err  # pyarrow is here: nothing to say
    monkeypatch.setattr(trace_arrow, "available", lambda: False)
    assert cli.main(["replay", str(path), "--mode", "prealloc"]) == 0
    assert "pip install 'pytest-devmem[fast-traces]'" in capsys.readouterr().err


def csv_row_by_row(trace: Trace) -> str:
    """The CSV as csv.writer writes it row by row (how write_csv wrote it before it went by column)."""
    import csv
    import io

    from pytest_devmem.model.trace import ACTIONS
    from pytest_devmem.spreadsheet import csv_cell, csv_writer

    out = io.StringIO()
    names = trace.names
    writer = csv_writer(out) if any("\r" in name for name in names) else csv.writer(out, lineterminator="\n")
    writer.writerow(HEADER)
    for thread, time, action, pointer, size, stream, source, label, device, process in zip(
        trace.threads, trace.times, trace.actions, trace.pointers, trace.sizes, trace.streams,
        trace.sources, trace.labels, trace.devices, trace.processes,
    ):  # fmt: skip
        writer.writerow((thread, f"{time:.6f}", ACTIONS[action], f"{pointer:#x}", size, f"{stream:#x}",
                         csv_cell(names[source]), csv_cell(names[label]), names[device], process))  # fmt: skip
    return out.getvalue()


odd_texts = st.text(st.sampled_from(list(",\"\r\n =+-@'x1. \té")), max_size=8) | texts


@settings(max_examples=60, deadline=None)
@given(st.lists(events, max_size=30), st.lists(st.tuples(odd_texts, odd_texts, odd_texts), max_size=6))
def test_the_csv_is_written_by_column_as_csv_writer_writes_it_row_by_row(
    rows: list[tuple],  # type: ignore[type-arg]
    names: list[tuple[str, str, str]],
) -> None:
    trace = Trace()
    for row in rows:
        trace.add(*row)
    for source, label, device in names:  # any text, a CR, a quote, a formula, a line break
        trace.add(0, 1, 1, 0.5, 0, 0, source, label, device, 0)
    assert trace.csv_text() == csv_row_by_row(trace)
