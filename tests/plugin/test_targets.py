"""--devmem-targets: one run gives every measured test's figures on several targets (the session's
device and each target run again in a child process), and says where each fits: the summary's and
the report's table, and `devmem plot --targets`. The session's own records and baselines stay as
they are without the option."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from compilers import needs_compiler, needs_libtpu

from pytest_devmem.cli import main
from pytest_devmem.errors import InvalidSettingError
from pytest_devmem.gate.record import TestRecord
from pytest_devmem.gate.targets import TargetTable
from pytest_devmem.model.regime import Regime
from pytest_devmem.model.targets import parse_targets, regime_on_target
from pytest_devmem.present.report import render
from pytest_devmem.units import MiB

SUITE = """
import jax
import jax.numpy as jnp
import pytest

@jax.jit
def attention(q, k, v):
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / 8.0
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)

def test_attention_step():
    q = jnp.ones((2, 16, 1024, 64), dtype=jnp.float32)  # batch 2, 16 heads, 1024 tokens, head dim 64: 8 MiB
    attention(q, q, q).block_until_ready()

def test_forty_mib():
    x = jnp.ones((10 * 2**20,), dtype=jnp.float32)
    (x + 1).block_until_ready()

def test_needs_a_large_device(devmem):
    if devmem.device.capacity < 2**30:
        pytest.skip("needs 1 GiB")
    devmem.pool.alloc(2**20)
"""


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("sim:H100-80GB, sim:t4,sim:16GiB,", ("sim:H100-80GB", "sim:T4", "sim:16GiB")),
        ("sim", ("sim:16GiB",)),
        ("", ()),
    ],
)
def test_targets_are_named_as_their_devices(value: str, expected: tuple[str, ...]) -> None:
    assert parse_targets(value) == expected


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("cuda:0", "a target is simulated"),
        ("auto", "a target is simulated"),
        ("sim:H99", "invalid devmem target 'sim:H99'"),
        ("sim:0GiB", "more than 0 bytes"),
        ("sim:T4,sim:t4", "sim:T4 is given twice"),
    ],
)
def test_a_bad_target_names_itself_and_what_is_allowed(value: str, words: str) -> None:
    with pytest.raises(
        InvalidSettingError,
        match="allowed: a comma-separated list of simulated devices" if "twice" not in words else "twice",
    ) as caught:
        parse_targets(value)
    assert words in str(caught.value)


@pytest.mark.parametrize("where", ["option", "ini", "env"])
def test_a_bad_targets_setting_is_a_usage_error_saying_where_it_came_from(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    arguments = []
    if where == "option":
        arguments.append("--devmem-targets=sim:T4,cuda:1")
    elif where == "ini":
        pytester.makeini("[pytest]\ndevmem_targets = sim:T4,cuda:1\n")
    else:
        monkeypatch.setenv("DEVMEM_TARGETS", "sim:T4,cuda:1")
    result = pytester.runpytest_inprocess(*arguments)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    shown = {
        "option": "--devmem-targets",
        "ini": "ini key devmem_targets",
        "env": "environment variable DEVMEM_TARGETS",
    }[where]
    assert "invalid devmem target 'cuda:1'" in result.stderr.str() and f"(from {shown})" in result.stderr.str()


def test_a_tpu_target_runs_under_its_runtimes_regime_and_others_under_the_tests() -> None:
    for mode in ("prealloc", "growth", "ondemand"):
        assert regime_on_target("sim:TPU-v5e", Regime.of(mode)) == Regime.of(
            "compact", 1.0
        )  # over all usable HBM, as a TPU preset runs
        assert regime_on_target("sim:H100-80GB", Regime.of(mode)) == Regime.of(mode)
    assert regime_on_target("sim:64MiB", Regime.of("fraction", 0.5)) == Regime.of("fraction", 0.5)


def _cells(report: dict[str, object]) -> dict[tuple[str, str], dict[str, object]]:
    table = report["targets"]
    assert isinstance(table, dict)
    return {(str(r["test_id"]).split("::")[-1], str(r["target"])): r for r in table["results"]}


@needs_compiler
def test_one_run_gives_each_tests_figures_on_every_target_and_where_it_fits(
    jax_loaded: object, matplotlib_loaded: object, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_inprocess(
        "--devmem-mode=prealloc",
        "--devmem-update",
        "--devmem-report=r.json",
        "--devmem-traces=tr",
        "--devmem-targets=sim:H100-80GB,sim:64MiB,sim:16GiB",
    )
    result.assert_outcomes(passed=3)  # a test that does not fit on a target fails nothing: a what-if view
    assert result.ret == pytest.ExitCode.OK
    report = json.loads((pytester.path / "r.json").read_text())
    targets = report["targets"]
    assert [(t["name"], t["session"]) for t in targets["targets"]] == [
        ("sim:16GiB", True),
        ("sim:H100-80GB", False),
        ("sim:64MiB", False),
    ]
    assert targets["children"] == 2  # one per target run again and regime, not one per test
    cells = _cells(report)
    # the attention step: XLA:CPU fuses the 2x16x1024x1024 scores away (temp 0), XLA:GPU for an H100
    # keeps them, 256 MiB of temp (tests/plugin/test_compile_target.py); q and the output are 8 MiB each
    assert cells["test_attention_step", "sim:16GiB"]["peak_bytes_in_use"] == 16 * MiB
    assert cells["test_attention_step", "sim:16GiB"]["sized_by"] == "cpu"
    assert cells["test_attention_step", "sim:H100-80GB"]["peak_bytes_in_use"] == 16 * MiB + 256 * MiB
    assert cells["test_attention_step", "sim:H100-80GB"]["sized_by"] == "H100-80GB"
    assert cells["test_attention_step", "sim:64MiB"]["status"] == "fits"
    # 40 MiB in and 40 MiB out do not fit in 75% of 64 MiB: out of memory there, and only there
    assert {
        (target, cells["test_forty_mib", target]["status"]) for target in ("sim:16GiB", "sim:H100-80GB", "sim:64MiB")
    } == {("sim:16GiB", "fits"), ("sim:H100-80GB", "fits"), ("sim:64MiB", "oom")}
    assert cells["test_forty_mib", "sim:64MiB"]["oom_kind"] == "capacity"
    assert cells["test_forty_mib", "sim:64MiB"]["reason"] is None  # its failure there is the out-of-memory itself
    assert cells["test_forty_mib", "sim:64MiB"]["capacity_bytes"] == 64 * MiB
    # skipped on the small device: not measured, with the reason, and no figure
    small = cells["test_needs_a_large_device", "sim:64MiB"]
    assert (small["status"], small["peak_bytes_in_use"], small["reason"]) == (
        "not measured",
        None,
        "skipped: needs 1 GiB",
    )
    # the session's own records and baselines are this device's alone
    assert {r["device"] for r in report["records"]} == {"sim:16GiB"} and len(report["records"]) == 3
    assert sorted(path.name for path in (pytester.path / "baselines").iterdir()) == ["sim-16GiB"]
    plain = pytester.runpytest_inprocess(
        "--devmem-mode=prealloc", "--devmem-update", "--devmem-baselines=plain", "--devmem-report=plain.json"
    )
    plain.assert_outcomes(passed=3)
    written = pytester.path / "baselines" / "sim-16GiB" / "test_suite.py.json"
    assert (
        written.read_bytes() == (pytester.path / "plain" / "sim-16GiB" / "test_suite.py.json").read_bytes()
    )  # as without the option
    without = json.loads((pytester.path / "plain.json").read_text())
    figures = (
        "test_id",
        "regime",
        "device",
        "device_class",
        "peak_bytes_in_use",
        "peak_bytes_reserved",
        "devices",
        "oom",
        "outcome",
        "compile_target",
    )
    assert [[r[k] for k in figures] for r in without["records"]] == [[r[k] for k in figures] for r in report["records"]]
    assert "targets" not in without
    traces = sorted((pytester.path / "tr").iterdir())
    assert len(traces) == 3 and all(
        str(256 * MiB) not in path.read_text() for path in traces
    )  # the session's own, not the H100's
    summary = result.stdout.str()
    assert "each measured test run again on 2 target(s), 2 child process(es)" in summary
    assert "sim:64MiB: 1 fit, 1 out of memory, 1 not measured" in summary
    result.stdout.fnmatch_lines(
        ["*test_suite.py::test_forty_mib*prealloc*80.00 MiB (0.5%)*80.00 MiB (0.1%)*OOM (capacity)*"]
    )
    check_the_schema(report)
    check_markdown_and_csv(report)
    check_the_pictures(pytester.path / "r.json", pytester.path)


def check_the_schema(report: dict[str, object]) -> None:
    from tests.present.test_schemas import validator

    assert [f"{list(e.path)}: {e.message}" for e in validator("report.schema.json").iter_errors(report)] == []


def check_markdown_and_csv(report: dict[str, object]) -> None:
    records = [TestRecord.from_json(r) for r in report["records"]]  # type: ignore[union-attr]
    table = TargetTable.from_json(report["targets"])
    text = render("r.md", records, report["session"], targets=table)  # type: ignore[arg-type]
    assert "## On several targets (--devmem-targets)" in text
    assert f"| prealloc | sim:64MiB | prealloc | {64 * MiB} | " in text and "| OOM (capacity) | cpu |" in text
    assert (
        "| n/a | n/a | not measured | no JAX | skipped: needs 1 GiB |" in text
    )  # skipped before any JAX executable ran there
    rows = list(csv.DictReader(io.StringIO(render("r.csv", records, report["session"], targets=table))))  # type: ignore[arg-type]
    forty = next(row for row in rows if row["test_id"].endswith("test_forty_mib"))
    assert (forty["sim:64MiB status"], forty["sim:64MiB oom_kind"], forty["sim:64MiB capacity_bytes"]) == (
        "oom",
        "capacity",
        str(64 * MiB),
    )
    assert forty["sim:H100-80GB status"] == "fits" and forty["sim:H100-80GB sized_by"] == "H100-80GB"
    assert "sim:16GiB status" not in forty  # the session's own figures are the record's columns


def check_the_pictures(report: Path, directory: Path) -> None:
    for suffix in (".png", ".html"):
        picture = directory / f"targets{suffix}"
        assert main(["plot", str(report), "--targets", "-o", str(picture)]) == 0
        data = picture.read_bytes()
        if suffix == ".png":
            assert data.startswith(b"\x89PNG") and len(data) > 10_000
        else:
            text = data.decode()
            assert (
                "sim:H100-80GB" in text and "out of memory" in text and "not measured" in text and "<script" not in text
            )


TINY = """
import jax.numpy as jnp

def test_plus_one():
    x = jnp.ones((8, 3), dtype=jnp.float32)
    (x + 1).block_until_ready()

def test_pool_only(devmem):
    devmem.pool.alloc(2**20)
"""


@needs_libtpu
def test_a_tpu_target_fills_the_row_of_the_tests_own_regime_beside_a_gpu_preset(
    jax_loaded: object, matplotlib_loaded: object, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(test_tiny=TINY)
    result = pytester.runpytest_inprocess(
        "--devmem-mode=prealloc", "--devmem-report=r.json", "--devmem-targets=sim:TPU-v5e,sim:H100-80GB"
    )
    result.assert_outcomes(passed=2)
    report = json.loads((pytester.path / "r.json").read_text())
    table = TargetTable.from_json(report["targets"])
    rows = table.rows()
    assert [(test.split("::")[-1], regime, sorted(cells)) for test, regime, cells in rows] == [
        (name, "prealloc", ["sim:16GiB", "sim:H100-80GB", "sim:TPU-v5e"])
        for name in ("test_plus_one", "test_pool_only")
    ]  # one row per test, under the regime the session ran it under: the TPU's cell in it
    tpu = table.cell(rows[0][0], "prealloc", "sim:TPU-v5e")
    assert tpu is not None and (tpu.regime, tpu.row_regime, tpu.sized_by) == (
        "compact(fraction=1)",
        "prealloc",
        "TPU-v5e",
    )
    assert (
        tpu.peak_bytes_in_use == 2 * 2048
    )  # x and x + 1: an f32[8,3] is one (8, 128) tile on a v5e (tests/capture/test_tpu_compile.py), 512 B on the CPU
    assert table.cell(rows[0][0], "prealloc", "sim:16GiB").peak_bytes_in_use == 512  # type: ignore[union-attr]
    assert table.cell(rows[1][0], "prealloc", "sim:TPU-v5e").peak_bytes_in_use == 2**20  # type: ignore[union-attr]
    gpu = table.cell(rows[0][0], "prealloc", "sim:H100-80GB")
    assert gpu is not None and not gpu.other_regime and gpu.regime == "prealloc"
    summary = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "  test  *regime  *sim:16GiB  *sim:TPU-v5e  *sim:H100-80GB",
            "  test_tiny.py::test_plus_one  *prealloc  512 B (0.0%)  *4.00 KiB (0.0%)[*]  *512 B (0.0%)",
            "  test_tiny.py::test_pool_only  *prealloc  *",
            "  [*] sim:TPU-v5e: run under compact(fraction=1) (that target's regime), not the row's",
        ]
    )
    assert "sim:TPU-v5e: 15.75 GiB per device, run again, regime compact(fraction=1)" in summary
    assert (
        len([line for line in summary.splitlines() if line.startswith("  test_tiny.py::")]) == 2
    )  # a line per test in the targets' table
    check_the_schema(report)
    records = [TestRecord.from_json(r) for r in report["records"]]
    lines = list(csv.DictReader(io.StringIO(render("r.csv", records, report["session"], targets=table))))
    assert [(line["test_id"].split("::")[-1], line["regime"]) for line in lines] == [
        ("test_plus_one", "prealloc"),
        ("test_pool_only", "prealloc"),
    ]
    assert (
        lines[0]["sim:TPU-v5e peak_bytes_in_use"],
        lines[0]["sim:TPU-v5e regime"],
        lines[0]["sim:H100-80GB regime"],
    ) == ("4096", "compact(fraction=1)", "prealloc")
    text = render("r.md", records, report["session"], targets=table)
    assert "| test_tiny.py::test_plus_one | prealloc | 512 B (0.0%) | 4.00 KiB (0.0%)\\* |" in text
    assert "| test_tiny.py::test_plus_one | prealloc | sim:TPU-v5e | compact(fraction=1) | " in text
    page = pytester.path / "t.html"
    assert main(["plot", str(pytester.path / "r.json"), "--targets", "-o", str(page)]) == 0
    html = page.read_text()
    assert html.count("<tr><th class='test'>") == 2 and "* run under compact(fraction=1)" in html
    assert main(["plot", str(pytester.path / "r.json"), "--targets", "-o", str(pytester.path / "t.png")]) == 0


def test_an_older_reports_tpu_rows_join_their_tests_row() -> None:
    """A report written before results named their session's regime: the TPU's result is put in the
    row of the session's own record of the test, as a report written now has it."""

    def row(target: str, regime: str, peak: int) -> dict[str, object]:
        return {
            "test_id": "t.py::test_a",
            "target": target,
            "regime": regime,
            "status": "fits",
            "capacity_bytes": 2**34,
            "peak_bytes_in_use": peak,
        }

    older = {
        "targets": [
            {"name": "sim:16GiB", "capacity_bytes": 2**34, "session": True},
            {"name": "sim:TPU-v5e", "capacity_bytes": 2**34},
        ],
        "results": [row("sim:TPU-v5e", "compact(fraction=1)", 4096), row("sim:16GiB", "prealloc", 512)],
    }
    table = TargetTable.from_json(older)
    assert [(test, regime, sorted(cells)) for test, regime, cells in table.rows()] == [
        ("t.py::test_a", "prealloc", ["sim:16GiB", "sim:TPU-v5e"])
    ]
    assert table.cell("t.py::test_a", "prealloc", "sim:TPU-v5e").peak_bytes_in_use == 4096  # type: ignore[union-attr]
    assert TargetTable.from_json(table.to_json()).to_json() == table.to_json()


def test_plot_targets_refuses_a_report_without_them_and_options_for_traces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "plain.json"
    report.write_text(
        json.dumps({"format": "pytest-devmem-report", "version": 2, "session": {"device": "sim:16GiB"}, "records": []})
    )
    assert main(["plot", str(report), "--targets", "-o", str(tmp_path / "t.png")]) == 2
    assert "the report has no targets table: run pytest with --devmem-targets" in capsys.readouterr().err
    assert main(["plot", str(report), "--targets", "--device", "sim:T4", "-o", str(tmp_path / "t.png")]) == 2
    assert "--device applies only to a trace file" in capsys.readouterr().err
    report.write_text(
        json.dumps(
            {
                "format": "pytest-devmem-report",
                "version": 2,
                "session": {},
                "records": [],
                "targets": {"targets": [], "results": [{"status": "maybe"}]},
            }
        )
    )
    assert main(["plot", str(report), "--targets", "-o", str(tmp_path / "t.png")]) == 2
    assert '"targets": an entry cannot be read' in capsys.readouterr().err


XDIST_SUITE = """
import jax.numpy as jnp

def test_forty_mib():
    (jnp.ones((10 * 2**20,), dtype=jnp.float32) + 1).block_until_ready()

def test_one_mib():
    (jnp.ones((2**18,), dtype=jnp.float32) + 1).block_until_ready()
"""


@pytest.mark.slow  # two xdist workers each starting JAX and compiling for every target
def test_xdist_workers_give_the_same_table_as_one_process(jax_loaded: object, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=XDIST_SUITE)
    tables = []
    for workers in (["-p", "no:xdist"], ["-n", "2"]):
        result = pytester.runpytest_subprocess(
            "--devmem-mode=prealloc", "--devmem-report=r.json", "--devmem-targets=sim:64MiB", *workers
        )
        result.assert_outcomes(passed=2)
        table = json.loads((pytester.path / "r.json").read_text())["targets"]
        tables.append((table["targets"], [{k: v for k, v in r.items() if k != "outcome"} for r in table["results"]]))
    assert tables[0] == tables[1]
    statuses = {(r["test_id"].split("::")[-1], r["target"]): r["status"] for r in tables[1][1]}
    assert statuses == {
        ("test_forty_mib", "sim:16GiB"): "fits",
        ("test_forty_mib", "sim:64MiB"): "oom",
        ("test_one_mib", "sim:16GiB"): "fits",
        ("test_one_mib", "sim:64MiB"): "fits",
    }


def _shard(path: Path, rows: list[tuple[str, str, str]], targets: tuple[str, ...] = ("sim:16GiB", "sim:64MiB")) -> Path:
    """A shard's report with a targets table: rows of (test, target, status)."""
    capacity = {"sim:16GiB": 16 * 2**30, "sim:64MiB": 64 * MiB}
    table = {
        "targets": [
            {"name": name, "capacity_bytes": capacity[name], "session": name == "sim:16GiB"} for name in targets
        ],
        "children": 1,
        "results": [
            {
                "test_id": test,
                "target": target,
                "regime": "prealloc",
                "status": status,
                "capacity_bytes": capacity[target],
                "peak_bytes_in_use": None if status == "not measured" else MiB,
                "oom_kind": "capacity" if status == "oom" else None,
            }
            for test, target, status in rows
        ],
    }
    session = {
        "device": "sim:16GiB",
        "device_class": "sim-16GiB",
        "device_capacity_bytes": 16 * 2**30,
        "regime": "prealloc",
        "versions": {},
    }
    path.write_text(
        json.dumps(
            {
                "format": "pytest-devmem-report",
                "version": 2,
                "session": session,
                "records": [],
                "unrecorded": [],
                "targets": table,
            }
        )
    )
    return path


def test_shards_targets_tables_merge_into_one_run_s_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    second = _shard(tmp_path / "b.json", [("t.py::test_b", "sim:64MiB", "oom"), ("t.py::test_b", "sim:16GiB", "fits")])
    first = _shard(tmp_path / "a.json", [("t.py::test_a", "sim:64MiB", "fits"), ("t.py::test_a", "sim:16GiB", "fits")])
    assert main(["merge", str(second), str(first), "-o", str(tmp_path / "m.json")]) == 0
    merged = json.loads((tmp_path / "m.json").read_text())["targets"]
    assert [(r["test_id"], r["target"], r["status"]) for r in merged["results"]] == [
        ("t.py::test_a", "sim:16GiB", "fits"),
        ("t.py::test_a", "sim:64MiB", "fits"),
        ("t.py::test_b", "sim:16GiB", "fits"),
        ("t.py::test_b", "sim:64MiB", "oom"),
    ]
    assert merged["children"] == 2
    other = _shard(tmp_path / "c.json", [("t.py::test_c", "sim:16GiB", "fits")], targets=("sim:16GiB",))
    assert main(["merge", str(first), str(other), "-o", str(tmp_path / "m2.json")]) == 2
    assert "run every shard with the same --devmem-targets" in capsys.readouterr().err


MARKED = """
import jax.numpy as jnp
import pytest

@pytest.mark.devmem(mode="growth")
def test_marked_growth():
    (jnp.ones((2**18,), dtype=jnp.float32) + 1).block_until_ready()

def test_not_measured_here():
    pass

@pytest.mark.devmem
def test_fails_there(devmem):
    devmem.pool.alloc(2**20)
    assert devmem.device.capacity > 2**30, "too small a device"
"""


def test_without_a_session_mode_the_marked_tests_run_on_the_targets_under_their_own_regime(
    jax_loaded: object, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(test_marked=MARKED)
    result = pytester.runpytest_inprocess("--devmem-report=r.json", "--devmem-targets=sim:64MiB")
    result.assert_outcomes(passed=3)
    table = json.loads((pytester.path / "r.json").read_text())["targets"]
    rows = {(r["test_id"].split("::")[-1], r["target"]): r for r in table["results"]}
    assert sorted(rows) == [
        ("test_fails_there", "sim:16GiB"),
        ("test_fails_there", "sim:64MiB"),
        ("test_marked_growth", "sim:16GiB"),
        ("test_marked_growth", "sim:64MiB"),
    ]
    assert (
        rows["test_marked_growth", "sim:64MiB"]["regime"] == "growth"
        and rows["test_fails_there", "sim:64MiB"]["regime"] == "prealloc"
    )
    assert table["children"] == 2  # one per regime on the one target run again
    failed = rows["test_fails_there", "sim:64MiB"]  # measured up to its failure there, and it says so
    assert (failed["status"], failed["peak_bytes_in_use"], failed["outcome"]) == (
        "failed",
        MiB,
        "failed",
    )  # never counted as fitting
    assert failed["reason"].startswith("failed at call: AssertionError: too small a device")


def test_a_test_whose_rerun_never_came_back_counts_as_not_measured_and_a_failure_never_as_fitting() -> None:
    """An xdist worker that crashed sends none of its tests' reruns: their cells say why, and the
    counts cover them; a test that failed on a target (not by running out of memory) is `failed`."""
    from pytest_devmem.gate.targets import Target, TargetResult
    from pytest_devmem.present.targets import cell_text, verdict_counts

    def record(test: str, outcome: str = "passed", by_devmem: bool = False) -> TestRecord:
        made = TestRecord(f"t.py::{test}", "prealloc", "sim:16GiB", "sim-16GiB", MiB, 16 * 2**30, 0.0, None, outcome)
        made.failed_by_devmem = by_devmem
        return made

    table = TargetTable([Target("sim:16GiB", 16 * 2**30, session=True), Target("sim:T4", 15 * 2**30)])
    table.add(
        TargetResult.from_record(record(name), "sim:16GiB", 16 * 2**30) for name in ("test_a", "test_b", "test_c")
    )
    table.add(
        [
            TargetResult.from_record(
                record("test_a", "failed"), "sim:T4", 15 * 2**30, "failed at call: AssertionError"
            ),
            TargetResult.from_record(
                record("test_c", "failed", by_devmem=True), "sim:T4", 15 * 2**30, "over its limit"
            ),
        ]
    )
    table.sort()
    table.fill_missing("no result came back from the target's run (the xdist worker that ran it crashed?)")
    assert verdict_counts(table) == [
        "sim:16GiB: 3 fit, 0 out of memory, 0 not measured",
        "sim:T4: 1 fit, 0 out of memory, 1 failed, 1 not measured",  # test_c failed by its limit alone: it fits
    ]
    cells = {(r.test_id, r.target): r for r in table.results}
    assert cell_text(cells["t.py::test_a", "sim:T4"]) == "failed (at 1.00 MiB)"
    missing = cells["t.py::test_b", "sim:T4"]
    assert (missing.status, missing.peak_bytes_in_use, cell_text(missing)) == ("not measured", None, "not measured")
    assert "the xdist worker that ran it crashed?" in str(missing.reason)
    assert TargetTable.from_json(json.loads(json.dumps(table.to_json()))).results == table.results
