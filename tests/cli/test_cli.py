"""The `devmem` command: compare tables and exit codes, show, bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_devmem.cli import main
from pytest_devmem.gate.baseline import BaselineStore
from pytest_devmem.gate.record import TestRecord
from pytest_devmem.units import MiB


def record(
    test: str, peak: int, regime: str = "prealloc", device_class: str = "sim-16GiB", fragmentation: float = 0.0
) -> TestRecord:
    return TestRecord(
        f"tests/test_m.py::{test}",
        regime,
        f"sim:{device_class[4:]}" if device_class.startswith("sim-") else f"cuda:0 ({device_class[5:]})",
        device_class,
        peak,
        12 * 1024 * MiB,
        fragmentation,
        False,
        "passed",
    )


def write_baselines(root: Path, records: list[TestRecord]) -> Path:
    for device_class in {r.device_class for r in records}:
        BaselineStore(root, device_class).write(
            [r for r in records if r.device_class == device_class], {"pytest-devmem": "0.1.0"}
        )
    return root


def write_report(path: Path, records: list[TestRecord]) -> Path:
    path.write_text(json.dumps({"session": {"versions": {}}, "records": [r.to_json() for r in records]}))
    return path


def test_compare_regression_exits_1_with_a_markdown_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write_baselines(
        tmp_path / "baselines", [record("test_a", 10 * MiB), record("test_b", 10 * MiB), record("test_gone", MiB)]
    )
    new = write_report(
        tmp_path / "new.json", [record("test_a", 20 * MiB), record("test_b", 5 * MiB), record("test_added", MiB)]
    )
    assert main(["compare", str(base), str(new)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("### Device memory: 1 regressed, 1 improved, 1 new, 1 missing")
    assert "| test | regime | device | metric | baseline | now | Δ | verdict |" in out
    assert (
        "| tests/test_m.py::test_a | prealloc | sim-16GiB | peak_bytes_in_use | 10.00 MiB | 20.00 MiB | +10.00 MiB (+100.0%) | ❌ regressed |"
        in out
    )
    assert (
        "| tests/test_m.py::test_b | prealloc | sim-16GiB | peak_bytes_in_use | 10.00 MiB | 5.00 MiB | -5.00 MiB (-50.0%) | ✅ improved |"
        in out
    )
    assert "test_added | prealloc | sim-16GiB | peak_bytes_in_use | — | 1.00 MiB | — | 🆕 new |" in out
    assert "test_gone | prealloc | sim-16GiB | peak_bytes_in_use | 1.00 MiB | — | — | ⚠️ not run |" in out


def test_compare_within_tolerance_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write_report(tmp_path / "base.json", [record("test_a", 10 * MiB)])
    new = write_report(tmp_path / "new.json", [record("test_a", 11 * MiB)])
    assert main(["compare", str(base), str(new), "--tolerance", "15%"]) == 0
    assert "Every compared test is within tolerance." in capsys.readouterr().out
    assert main(["compare", str(base), str(new), "--tolerance", "15%", "--all"]) == 0
    assert "| ok |" in capsys.readouterr().out
    assert (
        main(["compare", str(base), str(new), "--tolerance", "5%"]) == 0
    )  # +1 MiB: within the floor a percentage keeps
    assert main(["compare", str(base), str(new), "--tolerance", "5%,0B"]) == 1


def test_compare_never_matches_different_device_classes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write_report(tmp_path / "base.json", [record("test_a", 10 * MiB, device_class="cuda-NVIDIA-H100")])
    new = write_report(tmp_path / "new.json", [record("test_a", 99 * MiB)])
    assert main(["compare", str(base), str(new), "--all-classes"]) == 0
    assert "1 new, 1 missing" in capsys.readouterr().out


def test_compare_on_baselines_of_two_classes_reports_only_the_measured_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gpu = [record(name, 10 * MiB, device_class="cuda-NVIDIA-H100-80GB-HBM3") for name in ("test_a", "test_b", "test_c")]
    base = write_baselines(tmp_path / "baselines", [record("test_a", 10 * MiB), record("test_b", 10 * MiB), *gpu])
    new = write_report(tmp_path / "new.json", [record("test_a", 10 * MiB), record("test_b", 10 * MiB)])
    assert main(["compare", str(base), str(new), "--all"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "### Device memory: 2 ok\n"
    )  # not "2 ok, 3 missing": the GPU runner's baselines are not this run's
    assert "cuda-NVIDIA" not in out.split("Not compared")[0] and "| cuda-" not in out
    assert "Not compared: baselines of device classes this run did not measure: `cuda-NVIDIA-H100-80GB-HBM3` (3)" in out
    assert main(["compare", str(base), str(new), "--all-classes"]) == 0
    assert capsys.readouterr().out.startswith("### Device memory: 2 ok, 3 missing")
    for picked in ("cuda-NVIDIA-H100-80GB-HBM3", "sim-80GiB"):  # never "3 missing" and a pass
        assert main(["compare", str(base), str(new), "--device-class", picked]) == 2
        assert f"--device-class {picked!r}: NEW measured nothing of it; NEW holds sim-16GiB" in capsys.readouterr().err
    assert main(["compare", str(base), str(new), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["not_compared_classes"] == {"cuda-NVIDIA-H100-80GB-HBM3": 3}


def test_compare_never_says_a_class_it_left_out_was_not_measured_nor_drops_a_flag_silently(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gpu = [record(name, 10 * MiB, device_class="cuda-NVIDIA-H100-80GB-HBM3") for name in ("test_a", "test_b")]
    base = write_baselines(tmp_path / "baselines", [record("test_a", 10 * MiB), *gpu])
    new = write_report(tmp_path / "new.json", [record("test_a", 10 * MiB), *gpu])
    assert main(["compare", str(base), str(new), "--device-class", "cuda-NVIDIA-H100-80GB-HBM3"]) == 0
    out = capsys.readouterr().out
    assert "Not compared: baselines of device classes left out by `--device-class`: `sim-16GiB` (1)" in out
    assert "did not measure" not in out  # NEW did measure sim-16GiB
    for flags, message in [
        (
            ["--device-class", "sim-16GiB", "--all-classes"],
            "--device-class picks device classes and --all-classes keeps every one",
        ),
        (
            ["--columns", "test,now", "--csv"],
            "--columns chooses the Markdown table's columns; CSV output has every column",
        ),
        (
            ["--columns", "test,now", "--format=json"],
            "--columns chooses the Markdown table's columns; JSON output has every column",
        ),
    ]:
        with pytest.raises(SystemExit) as exited:
            main(["compare", str(base), str(new), *flags])
        assert exited.value.code == 2, flags
        assert message in capsys.readouterr().err, flags


def test_compare_sorts_and_picks_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write_report(
        tmp_path / "base.json", [record("test_a", 10 * MiB), record("test_b", 10 * MiB), record("test_c", 10 * MiB)]
    )
    new = write_report(
        tmp_path / "new.json", [record("test_a", 30 * MiB), record("test_b", 12 * MiB), record("test_c", 50 * MiB)]
    )
    assert main(["compare", str(base), str(new), "--sort", "delta", "--columns", "test,now,delta"]) == 1
    out = capsys.readouterr().out
    assert "| test | now | Δ |\n|---|---|---|\n" in out
    rows = [line for line in out.splitlines() if line.startswith("| tests/")]
    assert [row.split("::")[1][:6] for row in rows] == ["test_c", "test_a", "test_b"]
    assert rows[0] == "| tests/test_m.py::test_c | 50.00 MiB | +40.00 MiB (+400.0%) |"
    assert main(["compare", str(base), str(new), "--sort", "test"]) == 1
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| tests/")]
    assert [row.split("::")[1][:6] for row in rows] == ["test_a", "test_b", "test_c"]
    assert main(["compare", str(base), str(new), "--columns", "test,size"]) == 2
    assert (
        "--columns 'test,size': unknown column 'size'; allowed are test, regime, device, metric, baseline, now, delta, verdict"
        in capsys.readouterr().err
    )


def test_compare_counts_measured_failures_and_names_unmeasured_tests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    failed = record("test_a", 99 * MiB)  # failed by the gate itself: its measurement is what matters
    failed.outcome = "failed"
    unmeasured = record("test_b", 0)
    unmeasured.peak_bytes_in_use = None
    base = write_report(tmp_path / "base.json", [record("test_a", MiB), record("test_b", MiB)])
    new = write_report(tmp_path / "new.json", [failed, unmeasured])
    assert main(["compare", str(base), str(new)]) == 1
    out = capsys.readouterr().out
    assert "1 regressed, 1 not measured" in out  # it ran: "not measured", never "not run", never "improved"
    assert (
        "| tests/test_m.py::test_b | prealloc | sim-16GiB | peak_bytes_in_use | 1.00 MiB | — | — | ⚠️ not measured |"
        in out
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["compare", "nowhere", "nowhere.json"], "devmem: error: nowhere: no such file or directory"),
        (["compare", "bad.json", "bad.json"], "bad.json:1: not valid JSON"),
        (["compare", "foreign.json", "foreign.json"], "foreign.json:1: not a pytest-devmem baseline"),
        (["compare", "empty", "empty", "--tolerance", "fast"], "invalid devmem tolerance 'fast'"),
    ],
)
def test_bad_input_exits_2_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.json").write_text("{nope")
    (tmp_path / "foreign.json").write_text('{"hello": 1}')
    (tmp_path / "empty").mkdir()
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_show_lists_baselines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write_baselines(
        tmp_path / "baselines",
        [record("test_a", 3 * MiB, fragmentation=0.25), record("test_a", 4 * MiB, regime="growth")],
    )
    assert main(["show", str(base)]) == 0
    out = capsys.readouterr().out
    assert (
        "| tests/test_m.py::test_a | growth | sim-16GiB | 4.00 MiB | 12.00 GiB | 0.0000 | pytest-devmem 0.1.0 |" in out
    )
    assert (
        "| tests/test_m.py::test_a | prealloc | sim-16GiB | 3.00 MiB | 12.00 GiB | 0.2500 | pytest-devmem 0.1.0 |"
        in out
    )


def test_console_script_is_installed(tmp_path: Path) -> None:
    executable = shutil.which("devmem") or str(Path(__import__("sys").executable).with_name("devmem"))
    result = subprocess.run([executable, "compare", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "Compare NEW against BASE" not in result.stderr
    assert "--tolerance" in result.stdout


def test_version_is_printed_as_other_tools_print_it(capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_devmem import __version__

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"devmem (pytest-devmem) {__version__}\n"


def test_project_examples_have_baselines() -> None:
    root = Path(__file__).resolve().parents[2] / "baselines" / "sim-16GiB" / "examples"
    examples = sorted(path.name for path in (root.parents[2] / "examples").glob("test_*.py"))
    assert sorted(p.name for p in root.glob("*.json")) == [f"{name}.json" for name in examples]


def report_with(
    path: Path, session: object = None, peak: object = MiB, test_id: str = "tests/test_m.py::test_a"
) -> Path:
    data = {
        "session": {"versions": {}} if session is None else session,
        "records": [dict(record("test_a", MiB).to_json(), peak_bytes_in_use=peak, test_id=test_id)],
    }
    path.write_text(
        json.dumps(data).replace('"PEAK"', str(peak))
        if isinstance(peak, str) and peak.startswith("1e")
        else json.dumps(data)
    )
    return path


@pytest.mark.parametrize(
    ("session", "peak", "message"),
    [
        ("text", MiB, '"session" must be an object, not str'),
        ([1], MiB, '"session" must be an object, not list'),
        (None, "abc", "peak_bytes_in_use is 'abc', not a number"),
        (None, [1], "peak_bytes_in_use is [1], not a number"),
        (None, 10**400, "peak_bytes_in_use is a 401-digit number, far beyond any device"),
        (None, -5, "peak_bytes_in_use is -5: figures are never negative"),
    ],
)
def test_compare_rejects_a_bad_report_naming_it_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], session: object, peak: object, message: str
) -> None:
    base = report_with(tmp_path / "base.json")
    bad = report_with(tmp_path / "bad.json", session, peak)
    assert main(["compare", str(base), str(bad)]) == 2
    error = capsys.readouterr().err
    assert str(bad) in error and message in error


def test_a_nan_peak_is_a_bad_input_never_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = report_with(tmp_path / "base.json")
    bad = tmp_path / "nan.json"
    bad.write_text(
        report_with(tmp_path / "tmp.json")
        .read_text()
        .replace(f'"peak_bytes_in_use": {MiB}', '"peak_bytes_in_use": NaN')
    )
    assert main(["compare", str(base), str(bad)]) == 2
    assert "peak_bytes_in_use is nan, not a finite number" in capsys.readouterr().err


@pytest.mark.parametrize("content", [b"\xff\xfe\x00garbage", bytes(range(256))], ids=["non-utf8", "binary"])
def test_compare_names_a_binary_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes) -> None:
    base = report_with(tmp_path / "base.json")
    bad = tmp_path / "binary.json"
    bad.write_bytes(content)
    assert main(["compare", str(base), str(bad)]) == 2
    error = capsys.readouterr().err
    assert f"{bad}:" in error and ": not UTF-8 text" in error


def test_an_empty_baseline_directory_is_an_error_not_all_new(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["compare", str(tmp_path / "empty"), str(report_with(tmp_path / "new.json"))]) == 2
    assert "no baseline files (*.json) in it" in capsys.readouterr().err


def test_a_subdirectory_named_json_is_searched_and_a_dangling_link_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = write_baselines(tmp_path / "baselines", [record("test_a", MiB)])
    package = TestRecord(
        "pkg.json/test_p.py::test_p", "prealloc", "sim:16GiB", "sim-16GiB", MiB, MiB, 0.0, False, "passed"
    )
    BaselineStore(base, "sim-16GiB").write([package], {})  # a test package named pkg.json: its baselines are found
    assert main(["show", str(base)]) == 0
    assert "pkg.json/test_p.py::test_p" in capsys.readouterr().out
    (base / "sim-16GiB" / "more.json").mkdir()  # holding no baseline: it stands where one belongs
    assert main(["show", str(base)]) == 2
    assert "more.json: a directory where a baseline file belongs" in capsys.readouterr().err
    (base / "sim-16GiB" / "more.json").rmdir()
    (base / "sim-16GiB" / "gone.json").symlink_to(base / "nowhere")
    assert main(["show", str(base)]) == 2
    assert "gone.json: cannot be read" in capsys.readouterr().err


def test_a_line_break_in_a_test_id_cannot_inject_markdown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = report_with(tmp_path / "base.json", test_id="tests/test_m.py::test_a[x\n### fake heading]")
    new = report_with(tmp_path / "new.json", peak=64 * MiB, test_id="tests/test_m.py::test_a[x\n### fake heading]")
    assert main(["compare", str(base), str(new)]) == 1
    out = capsys.readouterr().out
    assert "\n### fake heading" not in out and "test_a[x\\n### fake heading]" in out


def test_compare_lists_regressions_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write_report(tmp_path / "base.json", [record("test_a", 10 * MiB), record("test_z", 10 * MiB)])
    new = write_report(tmp_path / "new.json", [record("test_a", 5 * MiB), record("test_z", 30 * MiB)])
    assert main(["compare", str(base), str(new)]) == 1
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| tests/")]
    assert "test_z" in rows[0] and "regressed" in rows[0] and "test_a" in rows[1]


@pytest.mark.parametrize(
    ("name", "regime"),
    [
        ("test_m.py__test_a[growth].csv", "growth"),
        ("test_m.py__test_a[1024][fraction=0.5]--0123456789ab.csv", "fraction=0.5"),
        ("test_m.py__test_a[growth_fraction=0.5_]--0123456789ab.csv", "growth(fraction=0.5)"),
    ],
)
def test_replay_takes_the_regime_from_the_traces_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, regime: str
) -> None:
    trace = tmp_path / name
    trace.write_text(
        "Thread,Time,Action,Pointer,Size,Stream,Source,Label\n0,0.0,allocate,0x1,4194304,0,pool,\n0,1.0,free,0x1,4194304,0,pool,\n"
    )
    assert main(["replay", str(trace)]) == 0
    assert f"replayed under regime {regime} (from the trace's name) on sim:16GiB" in capsys.readouterr().out
    assert main(["replay", str(trace), "--mode", "ondemand"]) == 0  # given: it wins
    assert "replayed under regime ondemand on" in capsys.readouterr().out


def test_replay_of_a_trace_whose_name_says_no_regime_asks_for_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "rmm-log.csv"
    trace.write_text("Thread,Time,Action,Pointer,Size,Stream\n0,0.0,allocate,0x1,1048576,0\n")
    assert main(["replay", str(trace)]) == 2
    assert "rmm-log.csv: its name does not say its regime" in capsys.readouterr().err


SHARED_FLAGS = ("mode", "fraction", "device", "tolerance", "baselines")
"""The settings the command shares with the plugin (`plot --targets`, a switch to draw the targets table, is not
`--devmem-targets`'s list of devices)."""


def test_the_flags_the_plugin_has_too_are_built_from_its_options() -> None:
    """`--mode`, `--fraction`, `--device`, `--tolerance` and `--baselines` of every subcommand take their
    metavar, allowed values and default from `options.OPTIONS`, as `--devmem-*` does: the two cannot drift."""
    import argparse

    from pytest_devmem.cli import build_parser
    from pytest_devmem.options import OPTION

    parser = build_parser()
    commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    shared = {}
    for name, sub in commands.choices.items():
        for action in sub._actions:
            flag = next((f for f in action.option_strings if f.removeprefix("--") in SHARED_FLAGS), None)
            if flag is not None:
                shared[f"{name} {flag}"] = action
    assert set(shared) >= {
        "compare --tolerance",
        "history --tolerance",
        "merge --baselines",
        "replay --mode",
        "replay --fraction",
        "replay --device",
        "plot --mode",
        "plot --fraction",
        "plot --device",
    }
    for where, action in shared.items():
        option = OPTION[where.split("--")[1]]
        assert action.metavar == option.metavar, where
        assert option.values.replace("%", "%%") in (action.help or ""), where
    assert shared["compare --tolerance"].default == shared["history --tolerance"].default == OPTION["tolerance"].default


def test_a_bad_mode_is_the_plugins_message_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("Thread,Time,Action,Pointer,Size,Stream,Source,Label\n")
    assert main(["replay", str(trace), "--mode", "warp"]) == 2
    assert "devmem: error: unknown devmem mode 'warp': allowed are prealloc, fraction" in capsys.readouterr().err


def test_show_and_replay_print_json_and_csv_as_compare_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import csv
    import io

    base = write_baselines(tmp_path / "baselines", [record("test_a", 3 * MiB, fragmentation=0.25)])
    assert main(["show", str(base), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["format"] == "pytest-devmem-baselines-list"
    assert shown["baselines"][0]["test_id"] == "tests/test_m.py::test_a"
    assert shown["baselines"][0]["metrics"]["peak_bytes_in_use"] == 3 * MiB
    assert main(["show", str(base), "--format=csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert rows[0]["test"] == "tests/test_m.py::test_a" and int(rows[0]["peak_bytes_in_use"]) == 3 * MiB
    assert float(rows[0]["fragmentation"]) == 0.25

    trace = tmp_path / "test_m.py__test_a[prealloc].csv"
    trace.write_text(
        "Thread,Time,Action,Pointer,Size,Stream,Source,Label\n0,0.0,allocate,0x1,4194304,0,pool,\n0,1.0,free,0x1,4194304,0,pool,\n"
    )
    assert main(["replay", str(trace), "--json"]) == 0
    replayed = json.loads(capsys.readouterr().out)
    assert replayed["fits"] is True and replayed["regime"] == "prealloc" and replayed["events"] == 2
    assert replayed["devices"][0]["peak_bytes_in_use"] >= MiB and replayed["oom"] is None
    assert main(["replay", str(trace), "--csv"]) == 0
    figures = {row["figure"]: row["value"] for row in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    assert figures["events"] == "2" and int(figures["peak_bytes_in_use"]) == replayed["devices"][0]["peak_bytes_in_use"]
    assert int(figures["pool: peak_bytes_reserved"]) >= MiB
    assert main(["replay", str(trace), "--mode", "prealloc", "--fraction", "0.00001", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["oom"]["kind"]  # the out-of-memory result, raw


@pytest.mark.parametrize("command", ["compare", "show", "replay", "history"])
def test_every_table_command_takes_the_same_format_flags(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_devmem.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._subparsers._group_actions[0].choices.items() if a[0] == command)[1]  # type: ignore[union-attr]
    flags = {flag: action for action in sub._actions for flag in action.option_strings}
    assert flags["--format"].choices == ("markdown", "json", "csv")
    assert {"--json", "--csv"} <= set(flags)
    args = {"compare": ["a", "b"], "show": ["d"], "replay": ["t.csv"], "history": ["r.json"]}[command]
    with pytest.raises(SystemExit) as stopped:
        main([command, *args, "--json", "--csv"])
    assert stopped.value.code == 2
    assert "ask for csv and json output at once" in capsys.readouterr().err


def test_ctrl_c_during_a_merges_refresh_names_the_files_refreshed_and_leaves_no_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import pytest_devmem.gate.baseline as baseline

    report = tmp_path / "r.json"
    records = [record(f"test_{n}", MiB).to_json() for n in "ab"]
    records[1]["test_id"] = "tests/test_n.py::test_b"  # another module: another baseline file
    session = {"device_class": "sim-16GiB", "versions": {"pytest-devmem": "0.1.0"}}
    report.write_text(json.dumps({"session": session, "records": records}))
    written = baseline.write_atomic
    calls: list[object] = []

    def interrupted(*args: object, **kwargs: object) -> None:
        if calls:
            raise KeyboardInterrupt  # Ctrl-C after the first file
        calls.append(args[0])
        written(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(baseline, "write_atomic", interrupted)
    assert main(["merge", str(report), "--baselines", str(tmp_path / "baselines")]) == 130
    error = capsys.readouterr().err
    assert "Traceback" not in error and "KeyboardInterrupt" not in error
    assert "devmem: interrupted: 1 baseline file(s) refreshed before it, each whole" in error
    assert f"  refreshed: {calls[0]}" in error
    assert [p.name for p in (tmp_path / "baselines").rglob("*.json")] == [Path(str(calls[0])).name]


@pytest.mark.parametrize(
    ("where", "device_class"),
    [
        ("session", "."),
        ("session", ".."),
        ("session", "a/b"),
        ("session", "sim-16GiB/.compiled"),
        ("session", "sim-32GiB"),  # a plain name, but not the class of the session's device
        ("records", "sim-32GiB"),  # every record edited: each would be "new" against the baselines
        ("baseline", "sim-32GiB"),  # a baseline file's class edited and the file moved with it
    ],
)
def test_a_device_class_is_a_plain_name_made_from_its_device_wherever_it_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str, device_class: str
) -> None:
    baselines = write_baselines(tmp_path / "work" / "baselines", [record("test_a", MiB)])
    records = [record("test_a", MiB).to_json()]
    session = {"device": "sim:16GiB", "device_class": "sim-16GiB", "versions": {"pytest-devmem": "0.1.0"}}
    if where == "session":
        session["device_class"] = device_class
    elif where == "records":
        records[0]["device_class"] = device_class
    else:
        stored = baselines / "sim-16GiB" / "tests" / "test_m.py.json"
        document = json.loads(stored.read_text())
        (baselines / device_class / "tests").mkdir(parents=True)
        (baselines / device_class / "tests" / "test_m.py.json").write_text(
            json.dumps({**document, "device_class": device_class})
        )
        shutil.rmtree(baselines / "sim-16GiB")
    report = tmp_path / "work" / "r.json"
    report.write_text(json.dumps({"session": session, "records": records}))
    before = sorted(tmp_path.rglob("*"))
    assert main(["compare", str(baselines), str(report)]) == 2
    assert f"device class {device_class!r}" in capsys.readouterr().err
    if where != "baseline":
        assert main(["merge", str(report), "--baselines", str(baselines)]) == 2
        assert f"device class {device_class!r}" in capsys.readouterr().err
    assert sorted(tmp_path.rglob("*")) == before  # nothing written, inside the baselines or beside them


def test_ctrl_c_before_a_merge_writes_anything_is_a_clean_exit_130(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import pytest_devmem.cli.merge as merge

    report = write_report(tmp_path / "r.json", [record("test_a", MiB)])

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt  # Ctrl-C while the reports are read, before any file is written

    monkeypatch.setattr(merge, "merged", interrupted)
    assert main(["merge", str(report), "--baselines", str(tmp_path / "baselines")]) == 130
    error = capsys.readouterr().err
    assert "Traceback" not in error and "KeyboardInterrupt" not in error
    assert "devmem: interrupted (Ctrl-C)" in error and not (tmp_path / "baselines").exists()


RANDOM_STEP = """
import jax, jax.numpy as jnp

def wide(x, w):
    big = jnp.concatenate([x @ w] * 8, axis=0)
    return jnp.tanh(big).sum()

def test_step():
    key = jax.random.PRNGKey(0)
    x = jax.random.normal(key, (1024, 512))
    w = jax.random.uniform(key, (512, 512))
    jax.jit(wide)(x, w).block_until_ready()
"""


def test_show_hides_jaxs_own_programs_and_small_rows_unless_all(
    jax_loaded: object, pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """jax.random's programs name no line of the user's (`(not known)`), and 8-byte holders are noise:
    hidden by default, counted, and shown with --all."""
    pytester.makepyfile(mymodel=RANDOM_STEP)
    pytester.runpytest_inprocess("mymodel.py", "--devmem-mode=ondemand", "--devmem-update").assert_outcomes(passed=1)
    capsys.readouterr()
    assert main(["show", "baselines"]) == 0
    quiet = capsys.readouterr().out
    assert main(["show", "baselines", "--all"]) == 0
    everything = capsys.readouterr().out
    assert "| jit(_normal) | u32[1024,512]" in everything and "(not known)" in everything
    assert "jit(_normal) |" not in quiet.split("buffers at each program's peak")[1].split("arrays held")[0]
    assert "| jit(wide) | f32[8192,512]" in quiet and "(not known)" not in quiet
    assert "| jit(_threefry_seed) | mymodel.py:8 | 8 B |" in everything and "8 B |" not in quiet
    assert "| jit(_normal) | mymodel.py:9 | 2.00 MiB |" in quiet  # the user's line of a JAX helper's output stays
    hidden = quiet.strip().splitlines()[-1]
    assert hidden.startswith("hidden: 2 program(s) of JAX's own") and "--all shows them" in hidden
    assert len(quiet.splitlines()) < len(everything.splitlines()) - 10
    assert "hidden" not in everything
