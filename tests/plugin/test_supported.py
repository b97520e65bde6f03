"""A session outside the tested releases stops at start, naming what is installed and the range.

The matrix (scripts/compat.py) runs the same refusal against real JAX 0.9.0, 0.8.3, 0.6.2 and 0.4.38 in venvs
of their own; here a distribution's metadata ahead of the real one on the path stands for them.
"""

from __future__ import annotations

import pytest

from pytest_devmem import supported


@pytest.mark.parametrize(
    ("version", "in_range"),
    [
        ("0.9.2", True),
        ("0.9.1", False),
        ("0.10.2", True),
        ("0.12.0.1", True),
        ("0.8.3", False),
        ("0.7.2", False),
        ("0.6.2", False),
        ("0.4.38", False),
        ("0.12.1", False),
        ("0.12.1rc1", False),
        ("0.12.1.dev20261201", False),
        ("0.10.2+cuda12", True),
        ("1.0.0", False),
        ("not-a-version", False),
    ],
)
def test_the_jax_range_is_the_tested_one(version: str, in_range: bool) -> None:
    problem = supported.JAX.problem(version)
    assert (problem is None) == in_range
    if problem:
        assert f"jax {version} is installed" in problem and "0.9.2 to 0.12.0.1" in problem
        assert "pip install 'jax>=0.9.2,<0.12.1'" in problem


@pytest.mark.parametrize(("python", "refused"), [((3, 10), True), ((3, 11), False), ((3, 13), False), ((3, 14), True)])
def test_a_python_outside_the_range_is_named(python: tuple[int, int], refused: bool) -> None:
    named = [p for p in supported.problems(python) if p.startswith("Python")]
    assert bool(named) == refused
    if refused:
        assert f"Python {python[0]}.{python[1]}" in named[0] and "3.11 to 3.13" in named[0]


def fake_distribution(pytester: pytest.Pytester, name: str, version: str) -> None:
    info = pytester.mkdir("shadow").joinpath(f"{name}-{version}.dist-info")
    info.mkdir()
    info.joinpath("METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


@pytest.mark.parametrize(
    ("name", "version", "named"),
    [("jax", "0.6.2", "jax 0.6.2 is installed"), ("tensorflow", "2.15.1", "tensorflow 2.15.1 is installed")],
)
def test_a_session_with_an_untested_release_stops_at_start_never_not_traced(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, name: str, version: str, named: str
) -> None:
    fake_distribution(pytester, name, version)
    monkeypatch.setenv("PYTHONPATH", str(pytester.path / "shadow"))
    pytester.makepyfile("def test_one():\n    pass\n")
    result = pytester.runpytest_subprocess("--devmem-mode=prealloc", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{named}, and pytest-devmem supports {name} *docs/compatibility.md*pip install*"])
    assert "passed" not in result.stdout.str()
    disabled = pytester.runpytest_subprocess("--devmem-disable", "-p", "no:cacheprovider")
    assert disabled.ret == pytest.ExitCode.OK  # a session that measures nothing is the user's own
