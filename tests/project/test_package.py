"""The package as the index shows it: its licence (the Apache-2.0 text, named by its SPDX
expression), classifiers, URLs, the type marker and the workflow templates shipped as package data,
and a README whose links work on the index's page, where relative links lead nowhere. (.ci/run builds
the wheel and sdist, runs `twine check` and scripts/check_wheel.py on them.)"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = "https://github.com/pytest-devmem/pytest-devmem"

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_licence_is_the_apache_2_text_and_named_by_its_spdx_expression() -> None:
    document = project()
    assert document["project"]["license"] == "Apache-2.0"  # PEP 639; the table form is deprecated
    assert document["project"]["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert not any(c.startswith("License ::") for c in document["project"]["classifiers"])  # refused beside SPDX


def test_the_index_page_says_what_it_is_for_and_where_to_read_more() -> None:
    meta = project()["project"]
    classifiers = set(meta["classifiers"])
    assert {"Framework :: Pytest", "Typing :: Typed", "Topic :: Software Development :: Testing"} <= classifiers
    minimum = int(meta["requires-python"].removeprefix(">=3."))
    assert f"Programming Language :: Python :: 3.{minimum}" in classifiers
    assert {"Documentation", "Changelog", "Issues", "Source"} <= set(meta["urls"])
    assert all(url.startswith(REPOSITORY) for url in meta["urls"].values())


def test_the_type_marker_and_the_workflow_templates_are_package_data() -> None:
    assert (ROOT / "pytest_devmem" / "py.typed").is_file()
    shipped = project()["tool"]["setuptools"]["package-data"]["pytest_devmem"]
    assert "py.typed" in shipped
    templates = sorted(path.name for path in (ROOT / "pytest_devmem" / "cli" / "templates").glob("*.yml"))
    assert templates and all(
        any(Path("cli/templates", name).match(pattern) for pattern in shipped) for name in templates
    )


def test_every_readme_link_works_on_the_index_page() -> None:
    """PyPI renders the README without the repository around it: a link must be absolute, and one into
    the repository must name a file that is there."""
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"!?\[[^\]]*\]\(([^)\s]+)\)", readme)
    assert targets
    for target in targets:
        assert re.match(r"https?://", target), f"relative link on the index page: {target}"
        for prefix in (
            f"{REPOSITORY}/blob/main/",
            "https://raw.githubusercontent.com/pytest-devmem/pytest-devmem/main/",
        ):
            if target.startswith(prefix):
                assert (ROOT / target.removeprefix(prefix).split("#")[0]).exists(), target


def test_the_declared_ranges_are_the_ones_a_session_accepts() -> None:
    """The extras, the Python requirement and the classifiers say pytest_devmem/supported.py's range."""
    from packaging.requirements import Requirement

    from pytest_devmem import supported

    meta = project()["project"]
    assert meta["requires-python"] == ">={}.{}".format(*supported.PYTHON_LOW)
    pythons = {c.rpartition(" :: ")[2] for c in meta["classifiers"] if re.fullmatch(r".*Python :: 3\.\d+", c)}
    low, below = supported.PYTHON_LOW[1], supported.PYTHON_BELOW[1]
    assert pythons == {f"3.{minor}" for minor in range(low, below)}
    extras = meta["optional-dependencies"]
    declared = [Requirement(r) for r in extras["jax"] + extras["tensorflow"] + extras["tensorflow-cpu"]]
    for requirement in declared:
        package = supported.JAX if requirement.name == "jax" else supported.TENSORFLOW
        assert str(requirement.specifier) == f"<{package.below},>={package.low}", requirement


def test_numba_is_the_fast_model_extra_which_the_test_extras_install() -> None:
    """The base install pulls no numba nor llvmlite (numba lags new Python releases); the Python loop is
    the reference form, and the suite, installing the extra, tests both."""
    metadata = project()["project"]
    assert not [need for need in metadata["dependencies"] if need.startswith(("numba", "llvmlite"))]
    extras = metadata["optional-dependencies"]
    assert [need for need in extras["fast-model"] if need.startswith("numba")] == ["numba>=0.60"]
    assert "pytest-devmem[fast-model]" in extras["test-tools"]  # the GPU runner's tools and `test` (through them)
    assert "pytest-devmem[test-tools,tensorflow-cpu]" in extras["test"]
