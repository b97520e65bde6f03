"""The project's `pytest_devmem_update_run_info` hook, broken every way a hostile conftest can: the
session's measurements are kept, and the broken hook is named."""

from __future__ import annotations

import json

import pytest

MEASURED = """
def test_one(devmem):
    devmem.pool.alloc(2**20)
"""


def _strict_json(text: str) -> object:
    def refuse(constant: str) -> object:
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ('run_info["ok"] = 1\n    raise RuntimeError("no runner name")', "raised RuntimeError: no runner name"),
        ('cycle = []\n    cycle.append(cycle)\n    run_info["ok"] = 1\n    run_info["loop"] = cycle', "a cycle"),
        ('run_info["ok"] = 1\n    run_info["nested"] = {(1, 2): "x"}', "a key of type tuple"),
        ('run_info["ok"] = 1\n    run_info[(1, 2)] = "x"', "a key of type tuple"),
        ('run_info["ok"] = 1\n    run_info["huge"] = 10**5000', "more digits than are written"),
        ('run_info["ok"] = 1\n    import sys; sys.exit(0)', "called sys.exit(0)"),
        ('run_info["ok"] = 1\n    import sys; sys.exit(3)', "called sys.exit(3)"),
    ],
    ids=["raises", "cycle", "tuple-key-inside", "tuple-key", "10**5000", "sys.exit(0)", "sys.exit(3)"],
)
def test_a_broken_run_info_hook_is_named_and_the_measurements_are_kept(
    pytester: pytest.Pytester, body: str, named: str
) -> None:
    pytester.makeconftest(f"def pytest_devmem_update_run_info(config, run_info):\n    {body}\n")
    pytester.makepyfile(MEASURED)
    result = pytester.runpytest_inprocess(
        "--devmem-mode=ondemand", "--devmem-update", "--devmem-report=r.json", "-p", "no:cacheprovider"
    )
    output = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in output and "Traceback" not in output
    result.stdout.fnmatch_lines([f"*pytest-devmem: pytest_devmem_update_run_info *{named}*"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # what the hook gave is not stored: said, and failed
    report = _strict_json((pytester.path / "r.json").read_text())
    assert report["session"]["run_info"] == {"ok": 1}  # type: ignore[index]  # the good keys kept
    assert [r["test_id"] for r in report["records"]] == [
        "test_a_broken_run_info_hook_is_named_and_the_measurements_are_kept.py::test_one"
    ]  # type: ignore[index]
    assert list((pytester.path / "baselines").rglob("*.json"))  # --devmem-update wrote its baselines


def test_nan_and_infinity_from_the_hook_are_written_as_valid_json(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        def pytest_devmem_update_run_info(config, run_info):
            run_info["loss"] = float("nan")
            run_info["bounds"] = [float("inf"), -float("inf"), 0.5]
            run_info[3] = "three"
        """
    )
    pytester.makepyfile(MEASURED)
    result = pytester.runpytest_inprocess("--devmem-mode=ondemand", "--devmem-report=r.json", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.OK
    report = _strict_json((pytester.path / "r.json").read_text())
    assert report["session"]["run_info"] == {  # type: ignore[index]
        "loss": "NaN",
        "bounds": ["Infinity", "-Infinity", 0.5],
        "3": "three",
    }
