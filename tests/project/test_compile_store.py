"""The store of the compilers' entries beside the baselines (pytest_devmem/compile_store.py): what
an entry must hold to be believed, the one way a file of it is read, and a refresh's writes and
removals. No compiler runs here: the entries are the sizers' plain JSON."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pytest_devmem.compile_store import (
    ENTRY_LIMIT,
    STORE_DIRECTORY,
    entry_problem,
    read_entry,
    render_entry,
    update_store,
)
from pytest_devmem.gate.baseline_files import json_files

EXECUTABLE = {
    "devices": 1,
    "temp_bytes": 131072,
    "output_bytes": 2048,
    "argument_bytes": 4096,
    "alias_bytes": 0,
    "code_bytes": 38400,
}
ARRAY = {"array_bytes": 2048}
KEY_A, KEY_B, KEY_C = "a" * 64, "b" * 64, "c" * 64


def test_an_executables_and_an_arrays_entry_are_believed() -> None:
    assert entry_problem(EXECUTABLE) is None
    assert entry_problem({**EXECUTABLE, "buffers": {"buffers": []}}) is None
    assert entry_problem(ARRAY) is None


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ([1, 2], "holds list, not an object of sizes"),
        ({**EXECUTABLE, "temp_bytes": -1}, '"temp_bytes" is -1: a size lies between 0 and 2**63'),
        ({**EXECUTABLE, "temp_bytes": True}, '"temp_bytes" is True, not a whole number of bytes'),
        ({**EXECUTABLE, "temp_bytes": 1.5}, '"temp_bytes" is 1.5, not a whole number of bytes'),
        ({**EXECUTABLE, "temp_bytes": float("nan")}, '"temp_bytes" is nan, not a whole number of bytes'),
        ({**EXECUTABLE, "temp_bytes": 2**63}, f'"temp_bytes" is {2**63}: a size lies between 0 and 2**63'),
        ({**EXECUTABLE, "devices": 0}, '"devices" is 0: a program runs on one device or more'),
        ({k: v for k, v in EXECUTABLE.items() if k != "code_bytes"}, 'has no "code_bytes"'),
        ({**EXECUTABLE, "buffers": [1]}, '"buffers" is not an object'),
        ({"array_bytes": "2048"}, "\"array_bytes\" is '2048', not a whole number of bytes"),
        ({"array_bytes": float("inf")}, '"array_bytes" is inf, not a whole number of bytes'),
    ],
)
def test_an_entry_with_a_size_no_compiler_states_is_not_believed(entry: object, problem: str) -> None:
    assert entry_problem(entry) == problem


def test_reading_an_entry_checks_the_file_and_its_sizes(tmp_path: Path) -> None:
    good = tmp_path / f"{KEY_A}.json"
    good.write_text(render_entry(EXECUTABLE))
    assert read_entry(good) == (EXECUTABLE, None)
    assert read_entry(tmp_path / f"{KEY_B}.json") == (None, None)  # no such entry: a plain miss

    cut = tmp_path / "cut.json"
    cut.write_text('{"array_bytes": 20')
    entry, problem = read_entry(cut)
    assert entry is None and problem is not None and str(cut) in problem and "not valid JSON" in problem

    negative = tmp_path / "negative.json"
    negative.write_text(json.dumps({"array_bytes": -2048}))
    assert read_entry(negative) == (None, f'{negative}: "array_bytes" is -2048: a size lies between 0 and 2**63')

    nan = tmp_path / "nan.json"
    nan.write_text('{"array_bytes": NaN}')
    assert read_entry(nan) == (None, f'{nan}: "array_bytes" is nan, not a whole number of bytes')

    twice = tmp_path / "twice.json"  # a hand merge that kept both sides: which size is meant, nothing tells
    twice.write_text('{"array_bytes": 2048, "array_bytes": 4096}')
    assert read_entry(twice) == (None, f'{twice}: not usable JSON (the key "array_bytes" is in one object twice)')

    huge = tmp_path / "huge.json"
    huge.write_text('{"array_bytes": 1' + " " * ENTRY_LIMIT + "}")
    entry, problem = read_entry(huge)
    assert entry is None and problem is not None and str(huge) in problem


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this OS")
def test_a_fifo_in_place_of_an_entry_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / f"{KEY_A}.json"
    os.mkfifo(fifo)
    entry, problem = read_entry(fifo)
    assert entry is None and problem is not None and str(fifo) in problem


def test_a_refresh_writes_the_named_entries_and_removes_those_no_baseline_names(tmp_path: Path) -> None:
    store = tmp_path / "sim-TPU-v5e" / STORE_DIRECTORY
    first = update_store(store, {KEY_A: EXECUTABLE, KEY_B: ARRAY}, [KEY_A, KEY_B], tmp_path)
    assert (first.written, first.removed, first.kept, first.problems) == ([KEY_A, KEY_B], [], 2, [])
    assert json.loads((store / f"{KEY_A}.json").read_text()) == EXECUTABLE
    assert (store / f"{KEY_B}.json").read_text() == '{\n "array_bytes": 2048\n}\n'  # sorted keys, one a line

    (store / "notes.json").write_text("a file of the user's, not an entry")
    # KEY_A is no longer named by any baseline; KEY_B still is, though this session did not use it
    second = update_store(store, {KEY_C: ARRAY}, [KEY_B, KEY_C], tmp_path)
    assert (second.written, second.removed, second.kept) == ([KEY_C], [KEY_A], 2)
    assert sorted(path.name for path in store.iterdir()) == [f"{KEY_B}.json", f"{KEY_C}.json", "notes.json"]


def test_a_stored_entry_is_never_written_again_and_a_bad_or_wrong_one_is_replaced(tmp_path: Path) -> None:
    store = tmp_path / "class" / STORE_DIRECTORY
    frames = {"buffers": {"buffers": [{"bytes": 512, "op": "dot", "shape": "f32[8]", "at": "/ci/x.py:3"}]}}
    update_store(store, {KEY_A: {**EXECUTABLE, **frames}}, [KEY_A], tmp_path)
    other_checkout = {**EXECUTABLE, "buffers": {"buffers": [{**frames["buffers"]["buffers"][0], "at": "/home/x.py:3"}]}}
    assert update_store(store, {KEY_A: other_checkout}, [KEY_A], tmp_path).written == []  # no churn in review
    for stored in ("{", render_entry({**EXECUTABLE, "devices": 2}), render_entry(EXECUTABLE)):  # bad, wrong, partial
        (store / f"{KEY_A}.json").write_text(stored)
        assert update_store(store, {KEY_A: {**EXECUTABLE, **frames}}, [KEY_A], tmp_path).written == [KEY_A]
        assert read_entry(store / f"{KEY_A}.json") == ({**EXECUTABLE, **frames}, None)


def test_an_entry_a_damaged_report_sends_is_never_stored(tmp_path: Path) -> None:
    store = tmp_path / "class" / STORE_DIRECTORY
    update = update_store(store, {KEY_A: {"array_bytes": -1}}, [KEY_A], tmp_path)
    assert (update.written, list(store.glob("*.json")) if store.exists() else []) == ([], [])


def test_the_baselines_reader_passes_the_store_by(tmp_path: Path) -> None:
    (tmp_path / STORE_DIRECTORY).mkdir()
    (tmp_path / STORE_DIRECTORY / f"{KEY_A}.json").write_text(render_entry(ARRAY))
    (tmp_path / "test_x.py.json").write_text("{}")
    assert json_files(tmp_path) == [tmp_path / "test_x.py.json"]


def test_the_stored_entries_name_the_projects_files_from_its_root(tmp_path: Path) -> None:
    project = tmp_path / "checkout"
    frames = f"{project}/tests/test_model.py:26, {project}/src/model.py:33, /usr/lib/jax/core.py:9"
    entry = {**EXECUTABLE, "buffers": {"buffers": [{"bytes": 512, "op": "dot", "shape": "f32[8]", "at": frames}]}}
    store = tmp_path / "baselines" / "class" / STORE_DIRECTORY
    update_store(store, {KEY_A: entry}, [KEY_A], tmp_path / "baselines", project)
    stored, _ = read_entry(store / f"{KEY_A}.json")
    assert stored is not None
    assert stored["buffers"]["buffers"][0]["at"] == "tests/test_model.py:26, src/model.py:33, /usr/lib/jax/core.py:9"


def test_a_store_that_is_a_link_is_neither_written_nor_pruned_through(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / f"{KEY_B}.json").write_text(render_entry(ARRAY))
    store = tmp_path / "baselines" / "class" / STORE_DIRECTORY
    store.parent.mkdir(parents=True)
    store.symlink_to(elsewhere, target_is_directory=True)
    update = update_store(store, {KEY_A: ARRAY}, [KEY_A], tmp_path / "baselines")
    assert update.problems == [f"{store}: a link: put the directory itself there"]
    assert sorted(path.name for path in elsewhere.iterdir()) == [f"{KEY_B}.json"]
