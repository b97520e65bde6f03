"""Conventions that could trap a user, each pinned down: decimal units are powers of 1000 (unlike
pytest-memray's), `sources` means one thing in every report, a test measured without a regime of its
own runs under prealloc and says so, and older files that said "default" read as prealloc."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from pytest_devmem.capture.sources.base import Reading
from pytest_devmem.cli import main
from pytest_devmem.gate.baseline_files import read_file
from pytest_devmem.gate.record import TestRecord, TraceFacts
from pytest_devmem.model.pool import Policy
from pytest_devmem.model.pool.policy import canonical_label
from pytest_devmem.present.report import COLUMNS, csv_text, terminal_table
from pytest_devmem.units import MiB, parse_size

# -- sizes: MB is 10**6 bytes, MiB is 2**20 --------------------------------------------------------


def test_decimal_units_are_powers_of_1000_unlike_pytest_memray() -> None:
    assert parse_size("24 MB") == 24_000_000  # pytest-memray's limit_memory("24 MB") is 24 MiB
    assert parse_size("24MiB") == 24 * MiB == 25_165_824


def test_a_limit_ported_from_pytest_memray_shows_its_bytes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.devmem(limit="24 MB")
        def test_ported(devmem):
            devmem.pool.alloc(23 * 2**20)  # under pytest-memray's 24 MiB, over 24,000,000 bytes
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*limit 22.89 MiB (24000000 bytes)*"])


# -- sources vs allocators ---------------------------------------------------------------------------


def record_measured_by_nvml_with_jax_in_the_trace() -> TestRecord:
    record = TestRecord(
        "t.py::test_x", "prealloc", "cuda:0 (GPU)", "cuda-GPU", 8 * MiB, 12 * 1024 * MiB, 0.0, False, "passed"
    )
    record.sources = {
        "nvml": Reading("nvml", True, peak_bytes_reserved=9 * MiB),
        "jax": Reading("jax", False, note="no statistics"),
    }
    record.trace = TraceFacts(4, {"jax": {"peak_live_bytes": 8 * MiB}, "pool": {"peak_live_bytes": MiB}})
    return record


def test_sources_means_the_raw_sources_and_allocators_whose_allocations_the_trace_holds() -> None:
    record = record_measured_by_nvml_with_jax_in_the_trace()
    rows = list(csv.DictReader(csv_text([record]).splitlines()))
    assert rows[0]["sources"] == "nvml"  # as the JSON record's "sources": what measured, raw
    assert rows[0]["allocators"] == "jax;pool"  # as the terminal's column
    assert list(rows[0])[11:13] == [
        "sources",
        "allocators",
    ]  # columns added at the end: readers by position keep working
    assert COLUMNS[-1] == "allocators" and "sources" not in COLUMNS
    assert terminal_table([record])[1].endswith("jax, pool")
    assert record.to_json()["sources"]["nvml"]["available"] is True  # type: ignore[index]


# -- the regime of a test measured without --devmem-mode --------------------------------------------


def test_a_marked_test_without_a_regime_runs_and_is_stored_under_prealloc(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.devmem(limit="1GiB")
        def test_marked(devmem):
            assert devmem.regime.label == "prealloc"
            devmem.pool.alloc(2**20)
            assert devmem.pool.stats()["pool_bytes"] == int(0.75 * 16 * 2**30) // 256 * 256

        def test_unmarked(devmem):
            assert devmem.regime.label == "prealloc"  # not measured, same pool
        """
    )
    result = pytester.runpytest_inprocess("--devmem-update", "--devmem-report=r.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    records = json.loads((pytester.path / "r.json").read_text())["records"]
    assert [(r["test_id"], r["regime"]) for r in records] == [
        ("test_a_marked_test_without_a_regime_runs_and_is_stored_under_prealloc.py::test_marked", "prealloc")
    ]
    stored = json.loads(next((pytester.path / "baselines").rglob("*.json")).read_text())["records"]
    assert list(next(iter(stored.values()))) == ["prealloc"]
    result.stdout.fnmatch_lines(
        ["devmem: device sim:16GiB, regime none (marked tests only, under prealloc unless the marker names one)"]
    )


LEGACY_BASELINE = {
    "format": "pytest-devmem-baseline",
    "version": 1,
    "device_class": "sim-16GiB",
    "records": {
        "test_old.py::test_marked": {
            "default": {
                "device": "sim:16GiB",
                "metrics": {"peak_bytes_in_use": MiB, "peak_bytes_reserved": 12 * 1024 * MiB, "fragmentation": 0.0},
                "versions": {},
            }
        }
    },
}


def test_an_older_baseline_that_says_default_is_read_as_prealloc(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_old="import pytest\n\n@pytest.mark.devmem()\ndef test_marked(devmem):\n    devmem.pool.alloc(2**20)\n"
    )
    baseline = pytester.path / "baselines" / "sim-16GiB" / "test_old.py.json"
    baseline.parent.mkdir(parents=True)
    baseline.write_text(json.dumps(LEGACY_BASELINE))
    assert [entry.regime for entry in read_file(baseline)] == ["prealloc"]
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*baselines (*sim-16GiB): 1 ok*"])  # compared, not "new"
    pytester.runpytest_inprocess("--devmem-update", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert list(json.loads(baseline.read_text())["records"]["test_old.py::test_marked"]) == [
        "prealloc"
    ]  # rewritten under its name


def test_when_a_file_has_both_names_the_explicit_one_wins(tmp_path: Path) -> None:
    document = json.loads(json.dumps(LEGACY_BASELINE))
    explicit = {"device": "sim:16GiB", "metrics": {"peak_bytes_in_use": 2 * MiB}, "versions": {}}
    document["records"]["test_old.py::test_marked"]["prealloc"] = explicit
    path = tmp_path / "test_old.py.json"
    path.write_text(json.dumps(document))
    entries = read_file(path)
    # a version 1 file: its peak reads as the requested bytes (baseline.py, VERSION)
    assert [(entry.regime, entry.metrics["peak_bytes_requested"]) for entry in entries] == [("prealloc", 2 * MiB)]


def test_an_older_report_that_says_default_compares_with_prealloc(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def report(regime: str, peak: int) -> Path:
        record = TestRecord(
            "t.py::test_x", regime, "sim:16GiB", "sim-16GiB", peak, 12 * 1024 * MiB, 0.0, False, "passed"
        )
        path = tmp_path / f"{regime}.json"
        path.write_text(json.dumps({"session": {"versions": {}}, "records": [record.to_json()]}))
        return path

    old, new = report("default", 8 * MiB), report("prealloc", 8 * MiB)
    assert main(["compare", str(old), str(new)]) == 0
    assert "1 ok" in capsys.readouterr().out  # one test matched, not one missing and one new
    assert TestRecord.from_json(json.loads(old.read_text())["records"][0]).regime == "prealloc"
    assert canonical_label("default") == "prealloc" and canonical_label("growth") == "growth"
    assert Policy.from_label("default") == Policy.of("prealloc")
