"""Reports and baselines as the plugin writes them validate against the JSON Schemas in docs/,
with a real run that has every kind of record: JAX, TensorFlow, pool, a failure, a skip at update."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"


def validator(name: str):  # type: ignore[no-untyped-def]
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((DOCS / name).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_reports_and_baselines_validate_against_their_schemas(
    jax_loaded: object, tensorflow_loaded: object, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(
        """
        import pytest
        import jax.numpy as jnp
        import tensorflow as tf

        @pytest.mark.devmem(frameworks=("jax", "tf"))
        def test_both():
            tf.ones((1024,))
            jnp.ones((1024, 1024)).block_until_ready()

        def test_pool(devmem):
            devmem.pool.alloc(2**20)

        def test_fails(devmem):
            devmem.pool.alloc(2**20)
            assert False

        @pytest.mark.skip(reason="not today")
        def test_skipped(devmem):
            pass

        def test_nothing():
            pass
        """
    )
    pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-update", "--devmem-report=r.json").assert_outcomes(
        passed=3, failed=1, skipped=1
    )
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["format"] == "pytest-devmem-report" and report["version"] == 3
    errors = [f"{list(e.path)}: {e.message}" for e in validator("report.schema.json").iter_errors(report)]
    assert errors == []
    baseline_files = sorted((pytester.path / "baselines").rglob("*.json"))
    assert baseline_files
    for path in baseline_files:
        errors = [
            f"{list(e.path)}: {e.message}"
            for e in validator("baseline.schema.json").iter_errors(json.loads(path.read_text()))
        ]
        assert errors == [], path


def test_devmem_compare_refuses_a_report_of_another_format_or_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_devmem.cli import main

    future = tmp_path / "future.json"
    future.write_text(json.dumps({"format": "pytest-devmem-report", "version": 9, "session": {}, "records": []}))
    assert main(["compare", str(future), str(future)]) == 2
    assert "version '9' report; this devmem reads 'pytest-devmem-report' versions 1, 2, 3" in capsys.readouterr().err
