"""`devmem` markers on a module, a class, a function and a parametrized case combine key by key, the
closest winning (as `get_closest_marker` would pick a whole marker, and `iter_markers` would give
them all); two values for one key on one level are that test's error."""

from __future__ import annotations

import json

import pytest

from pytest_devmem.gate.marks import combine_marks


def test_a_modules_limit_holds_when_the_function_names_only_its_mode(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        pytestmark = pytest.mark.devmem(limit="3MiB")

        @pytest.mark.devmem(mode="ondemand")
        def test_over(devmem):
            devmem.pool.alloc(4 * 2**20)

        @pytest.mark.devmem(mode="ondemand")
        def test_under(devmem):
            devmem.pool.alloc(2 * 2**20)
        """
    )
    result = pytester.runpytest_inprocess("--devmem-mode=ondemand", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_over*", "*device memory limit exceeded*limit 3.00 MiB*"])


def test_class_then_function_then_case_the_closest_wins_key_by_key(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        pytestmark = pytest.mark.devmem(limit="1MiB", tolerance="50%")

        @pytest.mark.devmem(limit="5MiB")
        class TestSteps:
            @pytest.mark.devmem(max_leak="64MiB")
            @pytest.mark.parametrize("size", [6, pytest.param(7, marks=pytest.mark.devmem(limit="8MiB"))])
            def test_step(self, devmem, size):
                devmem.pool.alloc(size * 2**20)

            def test_over_the_class_limit(self, devmem):
                devmem.pool.alloc(6 * 2**20)

        def test_over_the_module_limit(devmem):
            devmem.pool.alloc(2 * 2**20)

        @pytest.mark.devmem(limit=None)
        def test_no_limit_here(devmem):
            devmem.pool.alloc(2 * 2**20)
        """
    )
    result = pytester.runpytest_inprocess("--devmem-mode=ondemand", "-p", "no:cacheprovider", "--devmem-report=r.json")
    result.assert_outcomes(passed=2, failed=3)
    records = json.loads((pytester.path / "r.json").read_text())["records"]
    outcomes = {record["test_id"].split("::", 1)[1]: record["outcome"].upper() for record in records}
    assert outcomes == {
        "TestSteps::test_step[6]": "FAILED",  # the class's 5 MiB: the function's own marker names no limit
        "TestSteps::test_step[7]": "PASSED",  # its case's 8 MiB, over the class's 5 MiB
        "TestSteps::test_over_the_class_limit": "FAILED",  # the class's 5 MiB, over the module's 1 MiB
        "test_over_the_module_limit": "FAILED",  # the module's 1 MiB
        "test_no_limit_here": "PASSED",  # limit=None takes the module's away
    }


def test_stacked_markers_combine_and_two_values_for_one_key_on_one_level_are_that_tests_error(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.devmem(tolerance="5%")
        @pytest.mark.devmem(mode="fraction", fraction=0.5)
        def test_mode_and_fraction_kept(devmem):
            assert devmem.regime.label == "fraction=0.5"

        @pytest.mark.devmem(limit="4MiB")
        @pytest.mark.devmem(limit="2MiB")
        def test_two_limits(devmem):
            pass

        @pytest.mark.devmem(limit="2MiB")
        @pytest.mark.devmem(limit="2MiB", max_leak="1MiB")
        def test_the_same_limit_twice(devmem):
            pass

        def test_other():
            pass
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*@pytest.mark.devmem: two values for limit on function test_two_limits, '2MiB' and '4MiB': give one "
            "(markers combine key by key from module to class to function*the closest level wins)*"
        ]
    )


def test_combining_is_pure_and_names_the_level() -> None:
    module = ("module m.py", [((), {"limit": "3MiB", "mode": "growth"})])
    function = ("function test_x", [((), {"mode": "ondemand"}), ((), {"tolerance": "5%"})])
    assert combine_marks([module, function]) == ((), {"limit": "3MiB", "mode": "ondemand", "tolerance": "5%"})
    clash = ("class TestA", [((), {"fraction": 0.5}), ((), {"fraction": 0.25})])
    assert "two values for fraction on class TestA, 0.5 and 0.25" in str(combine_marks([module, clash]))
    assert combine_marks([("function f", [((), {"fraction": 1}), ((), {"fraction": True})])]) == (
        "@pytest.mark.devmem: two values for fraction on function f, 1 and True: give one "
        "(markers combine key by key from module to class to function (a parametrized case's marks= last), "
        "the closest level wins)"
    )
    carried = {"step": 1}  # whatever form a key's value has, it is carried as given, for parse_mark to judge
    assert combine_marks([module, ("function f", [((), {"max_compiles": carried})])])[1]["max_compiles"] is carried  # type: ignore[index]
