"""Options, ini keys, environment variables and marker arguments, good and bad, through the real plugin."""

from __future__ import annotations

import json
import os
import re

import pytest

PASSING = """
def test_one():
    pass
"""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--devmem-mode=turbo"],
            "unknown devmem mode 'turbo': allowed are prealloc, fraction, ondemand, growth, compact, platform (= ondemand) (from --devmem-mode)",
        ),
        (
            ["--devmem-fraction=1.5"],
            "invalid devmem fraction '1.5': must be in (0, 1], e.g. 0.5 (from --devmem-fraction)",
        ),
        (["--devmem-fraction=0"], "invalid devmem fraction '0'"),
        (["--devmem-fraction=half"], "invalid devmem fraction 'half': must be a number in (0, 1]"),
        (
            ["--devmem-device=tpu:0"],
            "invalid device 'tpu:0': allowed are auto, sim, sim:SIZE (e.g. sim:16GiB), sim:PRESET (H100-80GB, H200, A100-40GB, A100-80GB, L4, A10G, V100-16GB, T4, TPU-v4, TPU-v5e, TPU-v5p, TPU-v6e), cuda or cuda:N (from --devmem-device)",
        ),
        (["--devmem-device=sim:16G"], "ambiguous size '16G': write 16GiB (powers of 1024) or 16GB (powers of 1000)"),
        (  # more than the device: a context takes part of it, at most all of it
            ["--devmem-cuda-context=20GiB"],
            "--devmem-cuda-context=20.00 GiB is more than the device sim:16GiB holds (16.00 GiB): a CUDA context takes part of a device, at most all of it",
        ),
        (
            ["--devmem-report=out.xml"],
            "invalid devmem report file 'out.xml' (from --devmem-report): the extension must be one of .json, .csv, .md",
        ),
    ],
)
def test_bad_option_is_a_usage_error_naming_value_and_rule(
    pytester: pytest.Pytester, args: list[str], message: str
) -> None:
    pytester.makepyfile(PASSING)
    result = pytester.runpytest_inprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()
    assert "INTERNALERROR" not in result.stderr.str() + result.stdout.str()


def test_bad_ini_value_says_where_it_came_from(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ndevmem_mode = fast\n")
    pytester.makepyfile(PASSING)
    result = pytester.runpytest_inprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "unknown devmem mode 'fast'" in result.stderr.str() and "(from ini key devmem_mode)" in result.stderr.str()


def test_bad_environment_value_says_where_it_came_from(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEVMEM_FRACTION", "2")
    pytester.makepyfile(PASSING)
    result = pytester.runpytest_inprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "(from environment variable DEVMEM_FRACTION)" in result.stderr.str()


def test_bad_device_from_the_environment_says_so(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEVMEM_DEVICE", "tpu")
    pytester.makepyfile(PASSING)
    result = pytester.runpytest_inprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        "invalid device 'tpu'" in result.stderr.str()
        and "(from environment variable DEVMEM_DEVICE)" in result.stderr.str()
    )


@pytest.mark.parametrize("variable", ["DEVMEM_UPDATE", "DEVMEM_STRICT", "DEVMEM_FIND_MIN_FRACTION"])
def test_bad_switch_value_is_a_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, "maybe")
    pytester.makepyfile(PASSING)
    result = pytester.runpytest_inprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        f"invalid switch value 'maybe': use true/false, yes/no, on/off or 1/0 (from environment variable {variable})"
        in result.stderr.str()
    )


def test_failed_configure_leaves_no_framework_variable_behind(pytester: pytest.Pytester) -> None:
    before = os.environ.get("XLA_CLIENT_MEM_FRACTION")
    pytester.makepyfile(PASSING)
    result = pytester.runpytest_inprocess("--devmem-mode=fraction", "--devmem-fraction=.3", "--devmem-device=bogus")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert os.environ.get("XLA_CLIENT_MEM_FRACTION") == before


@pytest.mark.parametrize(
    ("source", "args"),
    [("cli", ["--devmem-mode=growth"]), ("ini", []), ("env", [])],
)
def test_mode_from_cli_ini_or_environment_measures_every_test(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, source: str, args: list[str]
) -> None:
    if source == "ini":
        pytester.makeini("[pytest]\ndevmem_mode = growth\n")
    if source == "env":
        monkeypatch.setenv("DEVMEM_MODE", "growth")
    pytester.makepyfile(
        """
        import os
        def test_sees_growth_settings(devmem):
            assert devmem.regime.label == "growth"
            assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
            assert os.environ["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
        def test_unmarked():
            pass
        """
    )
    result = pytester.runpytest_inprocess(*args)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["*device memory (pytest-devmem)*", "*2 measured test(s)*", "*test_sees_growth_settings*growth*"]
    )
    assert (
        "XLA_PYTHON_CLIENT_PREALLOCATE" not in os.environ or os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE") != "false"
    )


def test_cli_beats_environment_beats_ini(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeini("[pytest]\ndevmem_mode = growth\n")
    monkeypatch.setenv("DEVMEM_MODE", "ondemand")
    pytester.makepyfile("def test_regime(devmem):\n    print('REGIME', devmem.regime.label)\n")
    pytester.runpytest_inprocess("-s").stdout.fnmatch_lines(["*REGIME ondemand*"])
    pytester.runpytest_inprocess("-s", "--devmem-mode=prealloc").stdout.fnmatch_lines(["*REGIME prealloc*"])


def test_without_mode_only_marked_tests_are_measured(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        @pytest.mark.devmem
        def test_marked(devmem):
            devmem.pool.alloc(1024)
        def test_plain():
            pass
        """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["*1 measured test(s)*", "*test_marked*prealloc*"]
    )  # JAX's and TensorFlow's defaults: prealloc
    result.stdout.no_fnmatch_line("*test_plain*prealloc*")


def test_no_mode_and_no_marker_prints_nothing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PASSING)
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*device memory (pytest-devmem)*")


def test_header_names_device_and_regime(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PASSING)
    result = pytester.runpytest_inprocess("--devmem-mode=fraction", "--devmem-fraction=.25", "--devmem-device=sim:8GiB")
    result.stdout.fnmatch_lines(["devmem: device sim:8GiB, regime fraction=0.25"])


def test_help_documents_options_and_default_device(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess("--help")
    result.stdout.fnmatch_lines(
        [
            "*--devmem-mode=MODE*",
            "*--devmem-fraction=F*",
            "*--devmem-device=SPEC*",
            "*simulated 16.00 GiB device*",
            "*--devmem-report=FILE*",
        ]
    )


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ("devmem(mode='warp')", "@pytest.mark.devmem: unknown devmem mode 'warp'"),
        ("devmem(fraction=2)", "@pytest.mark.devmem: invalid devmem fraction 2: must be in (0, 1]"),
        ("devmem(mode='fraction')", "@pytest.mark.devmem(mode='fraction') needs a fraction in (0, 1]"),
        ("devmem(limit='lots')", "@pytest.mark.devmem: invalid size 'lots'"),
        ("devmem(limit=0)", "limit=0: must be more than 0 bytes"),
        ("devmem(tolerance=5)", "tolerance=5: must be a string such as '5%'"),
        ("devmem(frameworks=('jax', 'torch'))", "unknown framework 'torch'"),
        ("devmem(colour='red')", "unknown argument(s) colour; allowed: mode, fraction, limit, tolerance, frameworks"),
        ("devmem('prealloc')", "takes keyword arguments only"),
    ],
)
def test_bad_marker_errors_that_test_only(pytester: pytest.Pytester, marker: str, message: str) -> None:
    pytester.makepyfile(
        f"""
        import pytest
        @pytest.mark.{marker}
        def test_bad():
            pass
        def test_good():
            pass
        """
    )
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc")
    result.assert_outcomes(passed=1, errors=1)
    assert message in result.stdout.str()
    result.stdout.fnmatch_lines(["*UsageError*"])
    assert "INTERNALERROR" not in result.stdout.str()


def test_limit_fails_the_test_with_the_numbers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        @pytest.mark.devmem(limit="1MiB")
        def test_over(devmem):
            devmem.pool.alloc(3 * 2**20)
        @pytest.mark.devmem(limit="4MiB")
        def test_under(devmem):
            devmem.pool.alloc(3 * 2**20)
        """
    )
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc")  # a big region: chunks are split to size
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*device memory limit exceeded: peak 3.00 MiB (3145728 bytes) > limit 1.00 MiB (1048576 bytes), over by 2.00 MiB (200.0%)*"
        ]
    )


def test_fixture_gives_regime_pool_and_device(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_fixture(devmem):
            assert devmem.regime.label == "fraction=0.5"
            assert devmem.device.name == "sim:4GiB"
            handle = devmem.pool.alloc(1000)
            assert devmem.pool.stats()["bytes_limit"] == 2 * 2**30
            devmem.pool.free(handle)
            assert devmem.pool.stats()["bytes_in_use"] == 0
        """
    )
    result = pytester.runpytest_inprocess("--devmem-fraction=.5", "--devmem-device=sim:4GiB")
    result.assert_outcomes(passed=1)


def test_pool_oom_in_a_test_is_recorded(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_too_big(devmem):
            devmem.pool.alloc(15 * 2**30)
        """
    )
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-report=r.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*OutOfMemoryError: out of device memory: asked 15.00 GiB*", "*fix: raise the fraction to at least 0.94*"]
    )
    import json

    record = json.loads((pytester.path / "r.json").read_text())["records"][0]
    assert record["oom"]["real"] is True and record["outcome"] == "failed"
    assert record["oom"]["error"].startswith("OutOfMemoryError: out of device memory: asked 15.00 GiB")


def test_a_pool_that_backed_off_beside_the_cuda_context_names_the_context_as_what_holds_the_rest(
    pytester: pytest.Pytester,
) -> None:
    # 0.95 of 1 GiB does not fit beside the process's 128 MiB context: the preallocation backs off
    # below the 880 MiB asked, while nothing but the context holds the device
    pytester.makepyfile("def test_big(devmem):\n    devmem.pool.free(devmem.pool.alloc(880 * 2**20))\n")
    result = pytester.runpytest_inprocess("--devmem-fraction=0.95", "--devmem-device=sim:1GiB")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*-- another tenant: another framework or process, or the CUDA context, holds the rest of the device*",
            "*also held: CUDA context 128.00 MiB*",
        ]
    )


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"XLA_PYTHON_CLIENT_MEM_FRACTION": ".5"},
            "XLA_PYTHON_CLIENT_MEM_FRACTION=.5 in the environment contradicts regime prealloc, which sets 0.75",
        ),
        (
            {"XLA_CLIENT_MEM_FRACTION": ".75", "XLA_PYTHON_CLIENT_MEM_FRACTION": ".75"},
            "XLA_CLIENT_MEM_FRACTION=.75 and XLA_PYTHON_CLIENT_MEM_FRACTION=.75 are both set, which jaxlib refuses",
        ),
    ],
)
def test_a_jax_variable_that_contradicts_the_regime_is_a_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], message: str
) -> None:
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    pytester.makepyfile(PASSING)
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()
    assert {name: os.environ.get(name) for name in environ} == environ  # nothing of the user's was touched


def test_a_traces_directory_that_is_a_file_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PASSING)
    (pytester.path / "traces").write_text("not a directory")
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-traces=traces")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        "invalid devmem traces directory 'traces' (from --devmem-traces): it exists and is not a directory"
        in result.stderr.str()
    )


def test_a_pool_kept_after_its_test_refuses_to_allocate(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        from pytest_devmem.errors import InvalidRequestError

        kept = []

        def test_keeps(devmem):
            kept.append(devmem.pool)
            devmem.pool.alloc(2**20)

        def test_uses_it_later():
            with pytest.raises(InvalidRequestError, match="after its test ended"):
                kept[0].alloc(2**20)
        """
    )
    pytester.runpytest_inprocess("--devmem-mode=prealloc").assert_outcomes(passed=2)


def test_a_bad_xdist_worker_count_is_a_usage_error(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "abc")
    pytester.makepyfile(PASSING)
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "invalid PYTEST_XDIST_WORKER_COUNT='abc'" in result.stderr.str()


def test_a_session_limit_fails_tests_above_it_and_the_marker_overrides_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        def test_big(devmem):
            devmem.pool.alloc(3 * 2**20)

        def test_small(devmem):
            devmem.pool.alloc(2**19)

        @pytest.mark.devmem(limit="4MiB")
        def test_allowed_more(devmem):
            devmem.pool.alloc(3 * 2**20)
        """
    )
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-limit=1MiB")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        ["*device memory limit exceeded: peak 3.00 MiB (3145728 bytes) > limit 1.00 MiB (1048576 bytes)*"]
    )


def test_a_memory_failure_has_its_own_letter_and_summary_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_big(devmem):
            devmem.pool.alloc(3 * 2**20)

        def test_plain():
            assert True
        """
    )
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-limit=1MiB")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*.py M.*", "*MEMORY PROBLEMS: 1 test(s) failed by pytest-devmem's checks alone: *test_big*"]
    )
    verbose = pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-limit=1MiB", "-v")
    verbose.stdout.fnmatch_lines(["*::test_big MEMORY PROBLEMS*"])


# -- conventions from pytest-benchmark: --devmem-disable, --devmem-only, a hook for the run's metadata

MEASURED_AND_NOT = """
import pytest

@pytest.mark.devmem(limit="1MiB")
def test_marked(devmem):
    devmem.pool.alloc(4 * 2**20)  # over its limit: fails when measured

def test_plain(devmem):
    devmem.pool.alloc(2**20)

def test_no_fixture():
    pass
"""


def test_disable_measures_nothing_and_keeps_markers_and_fixture_working(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(MEASURED_AND_NOT)
    pytester.makepyfile(
        test_env="import os\ndef test_frameworks_environment_untouched():\n    assert os.environ.get('TF_CPU_ALLOCATOR_USE_BFC') is None\n"
    )
    monkeypatch.delenv("TF_CPU_ALLOCATOR_USE_BFC", raising=False)
    measured = pytester.runpytest_inprocess("--strict-markers")
    measured.assert_outcomes(passed=2, failed=2)  # the plugin set TensorFlow's CPU allocator variable
    monkeypatch.delenv("TF_CPU_ALLOCATOR_USE_BFC", raising=False)
    result = pytester.runpytest_inprocess("--strict-markers", "--devmem-disable")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["devmem: disabled (--devmem-disable): no test is measured, compared or recorded"])
    assert not (pytester.path / "r.json").exists() and not (pytester.path / "baselines").exists()


def test_disable_still_errors_a_bad_marker(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import pytest\n@pytest.mark.devmem(fraction=3)\ndef test_bad():\n    pass\n")
    result = pytester.runpytest_inprocess("--devmem-disable")
    result.assert_outcomes(errors=1)
    assert "invalid devmem fraction" in result.stdout.str()


def test_only_runs_the_measured_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(MEASURED_AND_NOT)
    result = pytester.runpytest_inprocess("--devmem-only")
    result.assert_outcomes(failed=1, deselected=2)  # only the marked test: measured, over its limit
    every = pytester.runpytest_inprocess("--devmem-only", "--devmem-mode=ondemand", "--devmem-limit=64MiB")
    every.assert_outcomes(passed=2, failed=1)  # with a session regime every test is measured


def test_disable_and_only_together_are_refused(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PASSING)
    result = pytester.runpytest_inprocess("--devmem-disable", "--devmem-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--devmem-disable and --devmem-only contradict each other" in result.stderr.str()


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--devmem-update"], "--devmem-update"),
        (["--devmem-report=r.json"], "--devmem-report"),
        (["--devmem-strict"], "--devmem-strict"),
        (["--devmem-targets=sim:T4"], "--devmem-targets"),
        (["-o", "devmem_report=r.md"], "--devmem-report (ini key devmem_report)"),
        (["--devmem-benchmark-json=r.json"], "--devmem-benchmark-json"),  # a CI's benchmark history
        (["--devmem-autosave"], "--devmem-autosave"),
        (["--devmem-traces=r.json"], "--devmem-traces"),
        (["--devmem-artifacts=r.json"], "--devmem-artifacts"),
        (["--devmem-what-if=sim:T4"], "--devmem-what-if"),
        (["--devmem-find-min-fraction", "--devmem-traces=t"], "--devmem-traces and --devmem-find-min-fraction"),
    ],
)
def test_disable_with_an_output_only_a_measuring_session_gives_is_refused(
    pytester: pytest.Pytester, args: list[str], named: str
) -> None:
    pytester.makepyfile(PASSING)
    result = pytester.runpytest_inprocess("--devmem-disable", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"--devmem-disable measures nothing, so {named} would have nothing to write" in result.stderr.str()
    assert not (pytester.path / "r.json").exists() and not (pytester.path / "r.md").exists()


def test_disable_with_a_switch_turned_off_runs(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEVMEM_UPDATE", "false")
    pytester.makepyfile(PASSING)
    pytester.runpytest_inprocess("--devmem-disable").assert_outcomes(passed=1)


def test_a_conftest_hook_adds_to_the_runs_metadata(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        import pathlib

        def pytest_devmem_update_run_info(config, run_info):
            run_info["runner"] = "gpu-box-7"
            run_info["where"] = pathlib.Path("/data")  # not JSON: kept as its text
        """
    )
    pytester.makepyfile(MEASURED_AND_NOT)
    pytester.runpytest_inprocess("--devmem-mode=ondemand", "--devmem-report=r.json")
    import json

    session = json.loads((pytester.path / "r.json").read_text())["session"]
    assert session["run_info"] == {"runner": "gpu-box-7", "where": "/data"}
    jsonschema = pytest.importorskip("jsonschema")
    from pathlib import Path

    schema = json.loads((Path(__file__).resolve().parents[2] / "docs" / "report.schema.json").read_text())
    jsonschema.validate(json.loads((pytester.path / "r.json").read_text()), schema)


def test_an_unknown_devmem_hook_in_a_conftest_is_refused_as_pytest_refuses_any(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("def pytest_devmem_update_run_infos(config, run_info):\n    pass\n")
    pytester.makepyfile(PASSING)
    result = pytester.runpytest_inprocess()
    assert "pytest_devmem_update_run_infos" in result.stdout.str() + result.stderr.str()


FRAGMENTING = """
import pytest

MiB = 2**20


def fragment(devmem):
    pool = devmem.pool
    buffers = [pool.alloc(100 * MiB) for _ in range(6)]
    for handle in buffers[::2]:
        pool.free(handle)
    return buffers


@pytest.mark.devmem(max_fragmentation=None)
def test_unbounded(devmem):
    fragment(devmem)


def test_bounded_by_the_session(devmem):
    fragment(devmem)
"""


def test_a_markers_max_fragmentation_none_turns_the_sessions_bound_off(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_frag=FRAGMENTING)
    result = pytester.runpytest_inprocess(
        "--devmem-mode=prealloc",
        "--devmem-device=sim:1GiB",
        "--devmem-max-fragmentation=0.1",
        "-rf",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_frag.py::test_bounded_by_the_session - device memory fra*"])


def test_the_fixtures_pool_events_name_their_device(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_pool="def test_alloc(devmem):\n    devmem.pool.free(devmem.pool.alloc(4096))\n")
    pytester.runpytest_inprocess(
        "--devmem-mode=prealloc", "--devmem-traces=traces", "-p", "no:cacheprovider"
    ).assert_outcomes(passed=1)
    [path] = list((pytester.path / "traces").glob("*.csv"))
    from pytest_devmem.model.trace import Trace

    assert {(event.source, event.device) for event in Trace.read_csv(path)} == {("pool", "cpu:0")}


def test_the_compile_target_note_names_the_environment_variable_that_set_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEVMEM_COMPILE_TARGET", "cpu")
    pytester.makepyfile(test_pool="def test_alloc(devmem):\n    devmem.pool.free(devmem.pool.alloc(4096))\n")
    result = pytester.runpytest_inprocess(
        "--devmem-mode=prealloc", "--devmem-device=sim:H100-80GB", "--devmem-report=r.json", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)
    note = json.loads((pytester.path / "r.json").read_text())["session"]["compile_target"]["note"]
    assert "DEVMEM_COMPILE_TARGET=cpu" in note and "--devmem-compile-target" not in note


def test_pytest_help_lists_the_switches_as_bool_and_the_ini_file_takes_their_words(pytester: pytest.Pytester) -> None:
    from pytest_devmem.options import OPTIONS

    help_text = pytester.runpytest_inprocess("--help").stdout.str()
    for option in OPTIONS:
        kind = "(bool)" if option.flag else "(string)"
        assert re.search(rf"^\s+{option.ini} \({kind[1:-1]}\):", help_text, re.MULTILINE), (option.ini, kind)
    pytester.makeini("[pytest]\ndevmem_update = yes\n")
    pytester.makepyfile(test_one="def test_one(devmem):\n    devmem.pool.alloc(2**20)\n")
    pytester.runpytest_inprocess("--devmem-mode=prealloc").assert_outcomes(passed=1)
    assert (pytester.path / "baselines" / "sim-16GiB" / "test_one.py.json").is_file()  # `yes` turned it on
    pytester.makeini("[pytest]\ndevmem_strict = maybe\n")
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "(from ini key devmem_strict): use true/false" in result.stderr.str()
