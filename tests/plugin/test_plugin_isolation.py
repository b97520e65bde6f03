"""Tests under another regime run in one child process per regime; results come back as if in place."""

from __future__ import annotations

import os
import time

import pytest


def test_fraction_marker_runs_in_a_child_with_the_jax_variable_set_before_jax_starts(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import os
        import pytest
        from pytest_devmem.capture.jax import jax_backend_started

        @pytest.mark.devmem(fraction=.5)
        def test_child():
            assert os.environ["XLA_CLIENT_MEM_FRACTION"] == "0.5"  # the one jaxlib 0.10 reads
            assert "XLA_PYTHON_CLIENT_MEM_FRACTION" not in os.environ
            assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "true"
            assert not jax_backend_started()
            import jax
            assert float(jax.numpy.ones(4).sum()) == 4.0
            assert jax_backend_started()
            print("CHILD PID", os.getpid())
            assert False, "show me the output"
        """
    )
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc", "-rA")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*AssertionError: show me the output*",
            "*Captured stdout call*",
            "CHILD PID *",
            "*isolated regimes: fraction=0.5 (1 child process(es))*",
        ]
    )
    child_pid = int(next(line for line in result.outlines if line.startswith("CHILD PID")).split()[-1])
    assert child_pid != os.getpid()


def test_one_child_per_regime_not_per_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import os
        import pytest

        def record(label):
            with open("pids.txt", "a") as f:
                f.write(f"{label} {os.getpid()}\\n")

        @pytest.mark.devmem(fraction=.5)
        @pytest.mark.parametrize("n", range(3))
        def test_half(n):
            record("half")

        @pytest.mark.devmem(mode="growth")
        @pytest.mark.parametrize("n", range(2))
        def test_growth(n):
            record("growth")

        @pytest.mark.devmem(mode="prealloc")
        def test_same_as_session():
            record("session")
        """
    )
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc")
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(["*isolated regimes: fraction=0.5, growth (2 child process(es))*"])
    pids: dict[str, set[int]] = {}
    for line in (pytester.path / "pids.txt").read_text().splitlines():
        label, pid = line.split()
        pids.setdefault(label, set()).add(int(pid))
    assert len(pids["half"]) == len(pids["growth"]) == 1
    assert pids["half"] != pids["growth"]
    assert pids["session"] == {os.getpid()}


def test_child_crash_fails_that_test_and_the_session_goes_on(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import os, signal
        import pytest

        @pytest.mark.devmem(mode="growth")
        def test_a_dies():
            print("about to die")
            os.kill(os.getpid(), signal.SIGKILL)

        @pytest.mark.devmem(mode="growth")
        def test_b_after_the_crash():
            pass

        def test_c_in_process():
            pass
        """
    )
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*the child process for regime growth died while running this test: killed by SIGKILL (signal 9) (a real out-of-memory kill looks like this)*",
            "*isolated regimes: growth (2 child process(es))*",
        ]
    )


def test_skips_xfails_and_records_come_back(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.devmem(mode="ondemand")
        def test_skipped():
            pytest.skip("no accelerator today")

        @pytest.mark.devmem(mode="ondemand")
        @pytest.mark.xfail(reason="known leak")
        def test_xfail():
            assert 0

        @pytest.mark.devmem(mode="ondemand")
        def test_measured(devmem):
            devmem.pool.alloc(5 * 2**20)
        """
    )
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc", "-rsx", "--devmem-report=r.json")
    result.assert_outcomes(passed=1, skipped=1, xfailed=1)
    result.stdout.fnmatch_lines(
        ["*test_measured*ondemand*5.00 MiB*", "*SKIPPED*no accelerator today*", "*XFAIL*known leak*"]
    )
    import json

    records = json.loads((pytester.path / "r.json").read_text())["records"]
    measured = next(r for r in records if r["test_id"].endswith("test_measured"))
    assert measured["regime"] == "ondemand" and measured["peak_bytes_in_use"] == 5 * 2**20


def test_fixtures_of_the_previous_module_are_torn_down_around_an_isolated_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_one="""
        import pytest
        @pytest.fixture(scope="module")
        def resource():
            yield 1
            print("TEARDOWN one")
        def test_a(resource):
            pass
        @pytest.mark.devmem(mode="growth")
        def test_b():
            pass
        """,
        test_two="""
        def test_c():
            pass
        """,
    )
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc", "-s")
    result.assert_outcomes(passed=3)
    assert "previous item was not torn down properly" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*TEARDOWN one*"])


def test_marked_tests_run_in_children_under_xdist(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import os, pytest
        @pytest.mark.devmem(fraction=.25)
        def test_quarter():
            assert os.environ["XLA_CLIENT_MEM_FRACTION"] == "0.25"
        def test_plain():
            pass
        """
    )
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc", "-n", "2")
    result.assert_outcomes(passed=2)


def test_a_child_starts_from_the_users_variables_not_the_parents_regime(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TF_FORCE_GPU_ALLOW_GROWTH", raising=False)
    pytester.makepyfile(
        """
        import os, pytest
        def test_parent():
            assert os.environ["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"  # the session's growth regime
        @pytest.mark.devmem(mode="fraction", fraction=.5)
        def test_child():
            assert os.environ["TF_FORCE_GPU_ALLOW_GROWTH"] == "false"  # the child's own regime, not the parent's
            assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "true"
        """
    )
    result = pytester.runpytest_inprocess("--devmem-mode=growth")
    result.assert_outcomes(passed=2)


def test_under_xdist_a_child_starts_from_the_users_variables_not_the_controllers_regime(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An xdist worker inherits the regime variables its controller set: a `growth`-marked test of a
    `prealloc` session kept TF_FORCE_GPU_ALLOW_GROWTH=false as if the user had set it (TensorFlow then
    took all but its reserve: a false out-of-memory verdict under -n 2 only). The user's own values
    travel in DEVMEM_USER_ENVIRONMENT, and a TensorFlow variable the user set still wins."""
    monkeypatch.delenv("TF_FORCE_GPU_ALLOW_GROWTH", raising=False)
    monkeypatch.delenv("DEVMEM_USER_ENVIRONMENT", raising=False)
    monkeypatch.setenv("TF_GPU_ALLOCATOR", "cuda_malloc_async")
    pytester.makepyfile(
        """
        import os, pytest
        @pytest.mark.devmem(mode="growth")
        def test_growth():
            assert os.environ["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
            assert os.environ["TF_GPU_ALLOCATOR"] == "cuda_malloc_async"  # the user's
        def test_plain():
            assert os.environ["TF_FORCE_GPU_ALLOW_GROWTH"] == "false"
        """
    )
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc", "-n", "2")
    result.assert_outcomes(passed=2)
    assert "DEVMEM_USER_ENVIRONMENT" not in os.environ and "TF_FORCE_GPU_ALLOW_GROWTH" not in os.environ


def test_what_a_test_sets_in_the_environment_never_reaches_a_later_tests_child(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DEVMEM_TEST_LEAK", raising=False)
    monkeypatch.setenv("DEVMEM_TEST_KEPT", "the session's")
    pytester.makepyfile(
        """
        import os, pytest
        def test_sets_the_environment():
            os.environ["DEVMEM_TEST_LEAK"] = "cuda"  # as a test might set JAX_PLATFORMS=cuda
            os.environ["DEVMEM_TEST_KEPT"] = "changed"
        @pytest.mark.devmem(mode="ondemand")
        def test_in_a_child():
            assert "DEVMEM_TEST_LEAK" not in os.environ
            assert os.environ["DEVMEM_TEST_KEPT"] == "the session's"
        """
    )
    try:
        result = pytester.runpytest_inprocess()
    finally:
        os.environ.pop("DEVMEM_TEST_LEAK", None)  # set by the inner test in this process
    result.assert_outcomes(passed=2)


def test_a_child_sees_the_parents_command_line_options(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        def pytest_addoption(parser):
            parser.addoption("--dataset", default=None)
        """
    )
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.devmem(mode="growth")
        def test_isolated(request):
            assert request.config.getoption("dataset") == "small"

        def test_in_place(request):
            assert request.config.getoption("dataset") == "small"
        """
    )
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc", "--dataset=small", "--junitxml=parent.xml")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*isolated regimes: growth (1 child process(es))*"])
    assert "test_isolated" in (pytester.path / "parent.xml").read_text()  # the child did not write over it


def test_an_isolated_test_that_hangs_fails_alone_under_pytest_timeout(pytester: pytest.Pytester) -> None:
    pytest.importorskip("pytest_timeout")
    pytester.makepyfile(
        """
        import time
        import pytest

        @pytest.mark.devmem(mode="growth")
        def test_hangs():
            time.sleep(60)

        @pytest.mark.devmem(mode="growth")
        def test_after_it():
            pass

        def test_in_place():
            pass
        """
    )
    started = time.perf_counter()
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc", "--timeout=3")
    assert time.perf_counter() - started < 40
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*Timeout*"])
    assert "INTERNALERROR" not in result.stdout.str()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["tests", "--dataset=small", "-k", "model"], ["--dataset=small", "-k", "model"]),
        (["--junitxml", "out.xml", "tests", "-x"], ["-x"]),
        (["--junitxml=out.xml", "--basetemp=/tmp/b", "-o", "x=1"], ["-o", "x=1"]),
        (["--cov", "pkg", "--cov-report=term", "tests"], []),
        (["--cov", "--timeout=5", "tests"], ["--timeout=5"]),
    ],
)
def test_parent_arguments_keep_options_and_drop_paths_and_the_parents_files(
    args: list[str], expected: list[str]
) -> None:
    from types import SimpleNamespace

    from pytest_devmem.plugin.isolation import parent_arguments

    config = SimpleNamespace(
        option=SimpleNamespace(file_or_dir=["tests"]), invocation_params=SimpleNamespace(args=tuple(args))
    )
    assert parent_arguments(config) == expected  # type: ignore[arg-type]
