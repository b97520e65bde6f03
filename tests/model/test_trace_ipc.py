"""A trace's Arrow IPC file (trace_ipc.py) reads back as the trace written, and as the CSV reader reads
the same trace's CSV; files made elsewhere (pandas) read too; a file that is not a trace's (truncated,
corrupt, another schema, bad values) is a TraceFormatError naming the file and what is allowed, and
`devmem replay` exits 2 on it, with no traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_devmem import cli
from pytest_devmem.model.trace import BY_COLUMN_FROM, Trace, TraceFormatError
from pytest_devmem.model.trace import arrow_file as trace_ipc

pa = pytest.importorskip("pyarrow", reason="the Arrow trace file needs pyarrow (the fast-traces extra)")
np = pytest.importorskip("numpy")
import pyarrow.ipc as ipc  # noqa: E402

COLUMNS = ("actions", "pointers", "sizes", "times", "threads", "streams", "sources", "labels", "devices", "processes")

texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12).filter(
    lambda text: text == text.strip()  # the CSV reader strips a cell's spaces; the Arrow file keeps them
)
events = st.tuples(
    st.sampled_from([0, 0, 1, 2]),
    st.integers(0, 2**64 - 1) | st.integers(0, 300),
    st.integers(1, 2**63 - 1) | st.integers(1, 5000),
    st.integers(0, 10**15).map(lambda micros: micros / 1e6),  # what the CSV's six decimals keep
    st.integers(0, 2**64 - 1) | st.just(0),
    st.integers(0, 2**64 - 1) | st.just(0),
    st.sampled_from(["", "jax", "tensorflow", "pool"]) | texts,
    texts,
    st.sampled_from(["", "cpu:0", "gpu:1", "tpu:12"]),
    st.integers(0, 2**32 - 1) | st.just(0),
)


def built(rows: list[tuple]) -> Trace:  # type: ignore[type-arg]
    trace = Trace()
    for row in rows:
        trace.add(*row)
    return trace


def same_columns(read: Trace, written: Trace) -> None:
    for name in COLUMNS:
        assert getattr(read, name) == getattr(written, name), name
    assert read.names == written.names


@settings(max_examples=40, deadline=None)
@given(st.lists(events, max_size=40))
def test_an_arrow_file_reads_back_as_the_trace_written_and_as_its_csv_reads(
    tmp_path_factory: pytest.TempPathFactory,
    rows: list[tuple],  # type: ignore[type-arg]
) -> None:
    trace = built(rows)
    folder = tmp_path_factory.mktemp("trace")
    trace.write_arrow(folder / "trace.arrow")
    trace.write_csv(folder / "trace.csv")
    from_arrow = Trace.read(folder / "trace.arrow")
    same_columns(from_arrow, trace)
    assert from_arrow == Trace.read(folder / "trace.csv")
    assert Trace.read_csv(folder / "trace.arrow") == from_arrow  # what `devmem replay` calls reads it too


def recorded(steps: int) -> Trace:
    trace = Trace()
    for step in range(steps):
        trace.add(0, 0x7F0000000000 + step * 256, 4096 + step, step / 1000, 1400 + step % 3, 0, "jax",
                  f"jit(step_{step % 7})", f"gpu:{step % 4}", step % 2)  # fmt: skip
        trace.add(1, 0x7F0000000000 + step * 256, 4096 + step, step / 1000, 1, 0x10, "jax", "", f"gpu:{step % 4}",
                  step % 2)  # fmt: skip
    trace.add(0, 0x10, 256, steps / 1000, 7, 0, "tensorflow", "", "", 0)
    return trace


@settings(max_examples=30, deadline=None)
@given(st.lists(events, min_size=1, max_size=30), st.data())
def test_a_file_made_elsewhere_with_other_column_types_reads_as_the_trace(
    tmp_path_factory: pytest.TempPathFactory,
    rows: list[tuple],  # type: ignore[type-arg]
    data: st.DataObject,
) -> None:
    trace = built(rows)

    def integers(name: str, values: list[int]) -> object:
        fitting = [kind for kind in (pa.int64(), pa.uint64(), pa.int32(), pa.uint32()) if _fits(kind, values)]
        kind = data.draw(st.sampled_from(fitting), label=name)
        if name in ("Pointer", "Stream") and data.draw(st.booleans(), label=f"{name} as text"):
            return pa.array([data.draw(st.sampled_from([f"{value:#x}", str(value)])) for value in values])
        return pa.array(values, kind)

    def texts(codes: list[int], names: list[str]) -> object:
        plain = pa.array([names[code] for code in codes], data.draw(st.sampled_from([pa.string(), pa.large_string()])))
        return plain.dictionary_encode() if data.draw(st.booleans(), label="dictionary") else plain

    columns = {
        "Thread": integers("Thread", list(trace.threads)),
        "Time": pa.array(list(trace.times)),
        "Action": texts(
            list(trace.actions), ["allocate", data.draw(st.sampled_from(["free", "deallocate"])), "allocate failure"]
        ),  # fmt: skip
        "Pointer": integers("Pointer", list(trace.pointers)),
        "Size": integers("Size", list(trace.sizes)),
        "Stream": integers("Stream", list(trace.streams)),
        "Source": texts(list(trace.sources), trace.names),
        "Label": texts(list(trace.labels), trace.names),
        "Device": texts(list(trace.devices), trace.names),
        "Process": integers("Process", list(trace.processes)),
    }
    order = data.draw(st.permutations(list(columns)), label="column order")
    path = write_table(tmp_path_factory.mktemp("foreign") / "trace.feather", {name: columns[name] for name in order})
    assert Trace.read(path) == trace


def _fits(kind: object, values: list[int]) -> bool:
    info = np.iinfo(kind.to_pandas_dtype())  # type: ignore[attr-defined]
    return all(info.min <= value <= info.max for value in values)


def test_a_trace_of_many_batches_reads_back_column_for_column(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace_ipc, "BATCH_ROWS", 1000)
    trace = recorded(BY_COLUMN_FROM // 2 + 7)
    path = tmp_path / "trace.arrow"
    trace.write_arrow(path)
    with pa.memory_map(str(path)) as source:
        assert ipc.open_file(source).num_record_batches > 10
    read = Trace.read(path)
    same_columns(read, trace)
    assert read.device_names() == trace.device_names() == ["gpu:0", "gpu:1", "gpu:2", "gpu:3", ""]
    assert read.peak_live_bytes() == trace.peak_live_bytes()


def test_pandas_reads_the_file_and_a_file_pandas_makes_of_the_csv_reads_as_the_csv(tmp_path: Path) -> None:
    pandas = pytest.importorskip("pandas")
    trace = recorded(300)
    trace.write_arrow(tmp_path / "trace.arrow")
    frame = pandas.read_feather(tmp_path / "trace.arrow")
    assert list(frame.columns) == ["Thread", "Time", "Action", "Pointer", "Size", "Stream", "Source", "Label",
                                   "Device", "Process"]  # fmt: skip
    assert frame["Action"].tolist()[:2] == ["allocate", "free"]
    assert frame["Size"].sum() == sum(trace.sizes)
    assert frame["Label"].iloc[2] == "jit(step_1)"
    trace.write_csv(tmp_path / "trace.csv")
    from_csv = pandas.read_csv(tmp_path / "trace.csv", keep_default_na=False)  # Pointer as text: 0x7f...
    from_csv.to_feather(tmp_path / "pandas.feather")
    assert Trace.read(tmp_path / "pandas.feather") == Trace.read(tmp_path / "trace.csv") == trace


def test_texts_the_column_parser_leaves_to_python_read_as_the_row_reader_reads_them(tmp_path: Path) -> None:
    columns = good_columns() | {"Pointer": pa.array(["10000000000000000000", "0X1F"])}  # 20 digits; 0X
    read = Trace.read(write_table(tmp_path / "t.arrow", columns))
    assert list(read.pointers) == [10**19, 31]


def test_a_count_too_large_for_the_file_is_not_trusted_and_a_compressed_file_reads(tmp_path: Path) -> None:
    path = write_table(tmp_path / "huge.arrow", good_columns(), {trace_ipc.ROWS_KEY: b"99999999999"})
    assert len(Trace.read(path)) == 2  # counted batch by batch, not 99,999,999,999 events allocated
    trace = recorded(2000)
    table = ipc.open_file(pa.py_buffer(trace_ipc.arrow_bytes(trace))).read_all()  # its metadata kept
    with ipc.new_file(
        str(tmp_path / "zstd.arrow"), table.schema, options=ipc.IpcWriteOptions(compression="zstd")
    ) as out:
        out.write_table(table)
    assert (tmp_path / "zstd.arrow").stat().st_size < len(trace) * trace_ipc.MIN_EVENT_BYTES  # so: counted
    same_columns(Trace.read(tmp_path / "zstd.arrow"), trace)


def test_devmem_replay_of_the_arrow_file_prints_what_it_prints_for_the_csv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = recorded(500)
    trace.write_csv(tmp_path / "t.csv")
    trace.write_arrow(tmp_path / "t.arrow")
    tables = []
    for name in ("t.csv", "t.arrow"):
        assert cli.main(["replay", str(tmp_path / name), "--mode", "prealloc"]) == 0
        tables.append(capsys.readouterr().out.replace(name, "TRACE"))
    assert tables[0] == tables[1]
    assert "peak_bytes_in_use" in tables[0]


def test_an_arrow_ipc_stream_named_arrow_reads_as_the_trace_and_replays_as_its_csv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An Arrow IPC stream (no footer: `pyarrow.ipc.new_stream`) holds the same columns as a file in
    another framing; it is read as the trace, never taken for CSV text that is not UTF-8."""
    trace = recorded(500)
    trace.write_csv(tmp_path / "t.csv")
    table = ipc.open_file(pa.py_buffer(trace_ipc.arrow_bytes(trace))).read_all()
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=97)  # several batches
    (tmp_path / "t.arrow").write_bytes(sink.getvalue().to_pybytes())
    same_columns(Trace.read(tmp_path / "t.arrow"), trace)
    tables = []
    for name in ("t.csv", "t.arrow"):
        assert cli.main(["replay", str(tmp_path / name), "--mode", "prealloc"]) == 0
        tables.append(capsys.readouterr().out.replace(name, "TRACE"))
    assert tables[0] == tables[1]
    (tmp_path / "cut.arrow").write_bytes(sink.getvalue().to_pybytes()[:-300])
    with pytest.raises(TraceFormatError, match="cut.arrow: not a readable Arrow IPC trace file"):
        Trace.read(tmp_path / "cut.arrow")


# -- bad files: a clear error naming the file and what is allowed -----------------------------------------------


def write_table(path: Path, columns: dict[str, object], metadata: dict[bytes, bytes] | None = None) -> Path:
    table = pa.table(columns)
    if metadata is not None:
        table = table.replace_schema_metadata(metadata)
    with ipc.new_file(str(path), table.schema) as writer:
        writer.write_table(table)
    return path


def good_columns() -> dict[str, object]:
    return {
        "Thread": pa.array([1, 1], pa.uint64()),
        "Time": pa.array([0.5, 0.75]),
        "Action": pa.array(["allocate", "free"]),
        "Pointer": pa.array([16, 16], pa.uint64()),
        "Size": pa.array([5, 5], pa.int64()),
        "Stream": pa.array([0, 0], pa.uint64()),
    }


def bad_file(tmp_path: Path, kind: str) -> tuple[Path, str]:
    """A file that is no trace's Arrow file, and a part of the message that must name what is wrong."""
    path = tmp_path / f"{kind}.arrow"
    good = recorded(3000)
    if kind == "truncated":
        data = trace_ipc.arrow_bytes(good).to_pybytes()
        path.write_bytes(data[: len(data) // 2])
        return path, "not a readable Arrow IPC trace file"
    if kind == "corrupt":
        data = bytearray(trace_ipc.arrow_bytes(good).to_pybytes())
        data[len(data) - 200 : len(data) - 10] = b"\xff" * 190  # the footer that says where each batch lies
        path.write_bytes(bytes(data))
        return path, "not a readable Arrow IPC trace file"
    if kind == "magic only":
        path.write_bytes(b"ARROW1\0\0")
        return path, "not a readable Arrow IPC trace file"
    columns = good_columns()
    metadata = None
    expected = {
        "missing column": "columns Thread, Time, Action, Pointer, Size: not a trace's",
        "size as text": "column Size is string",
        "time as text": "column Time is string",
        "null": "column Pointer has an empty value (null)",
        "unknown action": "unknown Action 'grab'",
        "size 0": "a Size of 0 or less at event 2",
        "negative thread": "column Thread has a value out of range",
        "not a device": "Device 'GPU0' is not a device",
        "nan time": "a Time that is not a finite number at event 1",
        "pointer text": "column Pointer has a text that is not a whole number",
        "negative pointer text": "column Pointer has a value out of range",
        "lying count": "its metadata says 3 events, its record batches hold 2",
        "short count": "its metadata says 1 events, its record batches hold more",
    }[kind]
    if kind == "missing column":
        del columns["Stream"]
    elif kind == "size as text":
        columns["Size"] = pa.array(["5", "5"])
    elif kind == "time as text":
        columns["Time"] = pa.array(["now", "later"])
    elif kind == "null":
        columns["Pointer"] = pa.array([16, None], pa.uint64())
    elif kind == "unknown action":
        columns["Action"] = pa.array(["allocate", "grab"]).dictionary_encode()
    elif kind == "size 0":
        columns["Size"] = pa.array([5, 0], pa.int64())
    elif kind == "negative thread":
        columns["Thread"] = pa.array([1, -1], pa.int64())
    elif kind == "not a device":
        columns |= {
            "Source": pa.array(["jax", "jax"]),
            "Label": pa.array(["", ""]),
            "Device": pa.array(["GPU0", "GPU0"]),
            "Process": pa.array([0, 0], pa.uint32()),
        }
    elif kind == "nan time":
        columns["Time"] = pa.array([float("nan"), 1.0])
    elif kind == "pointer text":
        columns["Pointer"] = pa.array(["0x10", "sixteen"])
    elif kind == "negative pointer text":
        columns["Pointer"] = pa.array(["0x10", "-1"])
    elif kind in ("lying count", "short count"):
        metadata = {trace_ipc.ROWS_KEY: b"3" if kind == "lying count" else b"1"}
    return write_table(path, columns, metadata), expected


BAD = ["truncated", "corrupt", "magic only", "missing column", "size as text", "time as text", "null",
       "unknown action", "size 0", "negative thread", "not a device", "nan time", "pointer text",
       "negative pointer text", "lying count", "short count"]  # fmt: skip


@pytest.mark.parametrize("kind", BAD)
def test_a_bad_arrow_file_is_an_error_naming_the_file_and_what_is_wrong(tmp_path: Path, kind: str) -> None:
    path, expected = bad_file(tmp_path, kind)
    with pytest.raises(TraceFormatError) as raised:
        Trace.read(path)
    message = str(raised.value)
    assert message.startswith(str(path)), message
    assert expected in message, message


@pytest.mark.parametrize("kind", ["truncated", "missing column", "unknown action"])
def test_devmem_replay_of_a_bad_arrow_file_exits_2_with_no_traceback(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path, expected = bad_file(tmp_path, kind)
    assert cli.main(["replay", str(path), "--mode", "prealloc"]) == 2
    error = capsys.readouterr().err
    assert expected in error and str(path) in error and "Traceback" not in error
    if kind == "truncated":
        assert "an Arrow IPC (Feather v2) trace file has the columns Thread, Time" in error  # what is allowed


def test_without_pyarrow_an_arrow_file_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "trace.arrow"
    recorded(10).write_arrow(path)
    monkeypatch.setitem(sys.modules, "pyarrow.ipc", None)  # import pyarrow.ipc now fails
    with pytest.raises(TraceFormatError, match=r"pip install 'pytest-devmem\[fast-traces\]', or give the trace's CSV"):
        Trace.read(path)


def test_without_pyarrow_devmem_convert_to_an_arrow_file_exits_2_saying_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    recorded(10).write_csv(tmp_path / "t.csv")
    monkeypatch.setitem(sys.modules, "pyarrow.ipc", None)  # import pyarrow.ipc now fails
    assert cli.main(["convert", str(tmp_path / "t.csv"), str(tmp_path / "t.arrow")]) == 2
    error = capsys.readouterr().err
    assert "t.arrow" in error and "pytest-devmem[fast-traces]" in error and "Traceback" not in error
    assert not (tmp_path / "t.arrow").exists()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=60), st.integers(1, 4))
def test_devices_found_by_column_appear_in_the_order_the_events_name_them(codes: list[int], repeat: int) -> None:
    from array import array

    from pytest_devmem.model.trace.by_column import first_appearances

    column = array("I", codes * repeat)
    assert first_appearances(column) == list(dict.fromkeys(column))
    assert first_appearances(column, most=1) in (None, [codes[0]])


LONG_AND_SHORT = """
def test_long(devmem):
    for _ in range(11_000):  # 22,000 events: at least ARROW_FROM
        devmem.pool.free(devmem.pool.alloc(4096))


def test_short(devmem):
    devmem.pool.alloc(4096)
"""


def test_the_plugin_writes_a_long_traces_arrow_file_beside_its_csv(pytester: pytest.Pytester) -> None:
    from pytest_devmem.plugin.checks import ARROW_FROM

    assert ARROW_FROM <= 22_000
    pytester.makepyfile(test_traces=LONG_AND_SHORT)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--devmem-mode=prealloc", "--devmem-traces=traces")
    result.assert_outcomes(passed=2)
    names = sorted(path.name for path in (pytester.path / "traces").iterdir())
    long_csv, long_arrow, short_csv = (
        next(name for name in names if "test_long" in name and name.endswith(".csv")),
        next(name for name in names if "test_long" in name and name.endswith(".arrow")),
        next(name for name in names if "test_short" in name and name.endswith(".csv")),
    )
    assert len(names) == 3 and short_csv  # a short trace gets its CSV only
    traces = pytester.path / "traces"
    from_arrow = Trace.read(traces / long_arrow)
    from_csv = Trace.read(traces / long_csv)
    assert len(from_arrow) == len(from_csv) == 22_000
    for name in COLUMNS:  # the Arrow file keeps each time exactly, the CSV to the microsecond
        if name != "times":
            assert getattr(from_arrow, name) == getattr(from_csv, name), name
    assert max(abs(a - b) for a, b in zip(from_arrow.times, from_csv.times)) <= 5e-7


def test_a_rerun_whose_trace_is_short_leaves_no_arrow_file_of_the_earlier_run(tmp_path: Path) -> None:
    from pytest_devmem.plugin.checks import ARROW_FROM, write_trace_files

    csv_path = tmp_path / "test_x.py__test_a[prealloc].csv"
    assert write_trace_files(recorded(ARROW_FROM), csv_path) == csv_path.with_suffix(".arrow")
    assert write_trace_files(recorded(10), csv_path) is None
    assert sorted(path.name for path in tmp_path.iterdir()) == [csv_path.name]  # the old .arrow is gone


def test_a_tests_trace_files_are_written_whole_without_a_sync_to_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plugin's trace files are outputs every run writes again: renamed into place whole (a
    reader sees the old file or the new one), with no fsync of the file or of its directory, which
    cost a suite of short tests seconds of wall time; what a user keeps (baselines, reports) is
    still synced."""
    import os

    from pytest_devmem import files
    from pytest_devmem.plugin.checks import ARROW_FROM, write_trace_files

    synced: list[int] = []
    monkeypatch.setattr(files.os, "fsync", lambda descriptor: synced.append(descriptor))
    csv_path = tmp_path / "test_x.py__test_a[prealloc].csv"
    long = recorded(ARROW_FROM)
    assert write_trace_files(long, csv_path) == csv_path.with_suffix(".arrow")
    assert write_trace_files(recorded(10), tmp_path / "short.csv") is None
    assert synced == []
    for path in (csv_path, csv_path.with_suffix(".arrow")):
        read = Trace.read(path)
        assert len(read) == len(long) and read.sizes == long.sizes and read.labels == long.labels, path
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        [csv_path.name, csv_path.with_suffix(".arrow").name, "short.csv"]
    )  # no temporary file left
    files.write_atomic(tmp_path / "kept.json", "{}")
    assert len(synced) == (1 if os.name == "nt" else 2)  # a durable write: the file, then its directory


def test_a_trace_converts_to_its_arrow_file_and_back(tmp_path: Path) -> None:
    from pytest_devmem.model.trace import convert_trace

    trace = recorded(400)
    trace.write_csv(tmp_path / "t.csv")
    assert (
        convert_trace(tmp_path / "t.csv", tmp_path / "t.arrow")
        == f"wrote {tmp_path / 't.arrow'} (801 events, Arrow IPC file)"
    )
    assert Trace.read(tmp_path / "t.arrow") == Trace.read(tmp_path / "t.csv")
    convert_trace(tmp_path / "t.arrow", tmp_path / "back.csv")
    assert (tmp_path / "back.csv").read_bytes() == (tmp_path / "t.csv").read_bytes()
    for target, expected in (
        ("t.parquet", "a trace file's name ends with .csv, .arrow, .feather"),
        ("t.csv", "is the trace read"),
    ):
        with pytest.raises(TraceFormatError, match=expected):
            convert_trace(tmp_path / "t.csv", tmp_path / target)


def test_devmem_convert_and_plot_take_the_arrow_file_and_a_bad_name_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recorded(300).write_csv(tmp_path / "t.csv")
    assert cli.main(["convert", str(tmp_path / "t.csv"), str(tmp_path / "t.arrow")]) == 0
    assert "Arrow IPC file" in capsys.readouterr().out
    assert Trace.read(tmp_path / "t.arrow") == Trace.read(tmp_path / "t.csv")
    assert cli.main(["plot", str(tmp_path / "t.arrow"), "--mode", "prealloc", "-o", str(tmp_path / "t.html")]) == 0
    assert (tmp_path / "t.html").stat().st_size > 0
    capsys.readouterr()
    assert cli.main(["convert", str(tmp_path / "t.csv"), str(tmp_path / "t.parquet")]) == 2
    error = capsys.readouterr().err
    assert "t.parquet" in error and ".arrow" in error and "Traceback" not in error


def test_bytes_changed_anywhere_in_the_file_read_as_a_trace_or_as_a_named_error(tmp_path: Path) -> None:
    """No checksum guards the file: a changed number may read as another number (as in a CSV), but
    never as a crash, whatever the bytes changed (offsets, dictionary indices, the footer)."""
    import random

    data = trace_ipc.arrow_bytes(recorded(1500)).to_pybytes()
    path = tmp_path / "changed.arrow"
    rng = random.Random(30)
    outcomes = set()
    for _ in range(300):
        changed = bytearray(data)
        for _ in range(rng.choice([1, 2, 8, 64])):
            changed[rng.randrange(len(changed))] = rng.randrange(256)
        path.write_bytes(bytes(changed[: rng.randrange(len(changed))] if rng.random() < 0.2 else changed))
        try:
            Trace.read(path)
            outcomes.add("read")
        except TraceFormatError as exc:
            assert str(exc).startswith(str(path))
            outcomes.add("refused")
    assert outcomes == {"read", "refused"}


def test_reading_either_form_imports_no_pandas(tmp_path: Path) -> None:
    """pyarrow's to_numpy and fill_null import pandas where it is installed: half a second and some
    40 MiB in `devmem replay`, more than reading a million events from the Arrow file takes."""
    import subprocess

    pytest.importorskip("pandas")
    trace = recorded(BY_COLUMN_FROM)
    trace.write_csv(tmp_path / "t.csv")
    trace.write_arrow(tmp_path / "t.arrow")
    for name in ("t.csv", "t.arrow"):
        code = (
            "import sys; from pytest_devmem.model.trace import Trace; "
            f"trace = Trace.read({str(tmp_path / name)!r}); print(len(trace), 'pandas' in sys.modules)"
        )
        found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
        assert found == [str(len(trace)), "False"], name
