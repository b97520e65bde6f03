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


def test_argument_bytes_are_what_the_runs_copied_in_as_the_schema_says(
    jax_loaded: object, pytester: pytest.Pytester
) -> None:
    """`executables[].argument_bytes` counts the host values a run transfers in, not the
    executable's parameters: 0 for a step fed device arrays; the schema says so."""
    pytester.makepyfile(
        """
        import jax
        import jax.numpy as jnp
        import numpy as np

        @jax.jit
        def on_device(x, w):
            return jnp.tanh(x @ w)

        @jax.jit
        def from_host(x, w):
            return jnp.tanh(x @ w)

        def test_steps():
            x, w = jnp.ones((256, 256)), jnp.ones((256, 128))
            for _ in range(2):
                on_device(x, w).block_until_ready()
                from_host(np.ones((256, 256), np.float32), w).block_until_ready()  # x from the host, w on the device
        """
    )
    pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-report=r.json").assert_outcomes(passed=1)
    executables = json.loads((pytester.path / "r.json").read_text())["records"][0]["trace"]["executables"]
    on_device, from_host = executables["jit(on_device)"], executables["jit(from_host)"]
    assert on_device["runs"] == from_host["runs"] == 2
    assert on_device["argument_bytes"] == 0 and from_host["argument_bytes"] == 2 * 256 * 256 * 4
    schema = json.loads((DOCS / "report.schema.json").read_text())
    described = schema["$defs"]["record"]["properties"]["trace"]["properties"]["executables"]
    figures = described["additionalProperties"]["properties"]
    assert set(figures) >= {"runs", "output_bytes", "temp_bytes", "argument_bytes", "temp_bytes_per_device", "devices"}
    assert all(figure.get("description") for figure in figures.values())
    said = figures["argument_bytes"]["description"]
    assert "host values" in said and "0 for a step fed only arrays already on its devices" in said
    assert "not the size of the executable's parameters (XLA's argument_size_in_bytes)" in said
    validator("report.schema.json")  # still a valid schema
