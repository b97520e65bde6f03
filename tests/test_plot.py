"""Timelines and pictures: the replay step by step, `devmem plot` to PNG and HTML for a real JAX
test, and --devmem-artifacts leaving a failing test's trace and picture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_devmem.model.pool import Policy
from pytest_devmem.model.trace import Trace, TraceEvent
from pytest_devmem.model.timeline import build_timeline

MiB = 2**20


def test_the_timeline_follows_the_replay_and_names_the_holders_at_the_peak() -> None:
    trace = Trace([
        TraceEvent("allocate", 1, 4 * MiB, source="jax", label="jit(layer)"),
        TraceEvent("allocate", 2, 8 * MiB, source="jax", label="jit(layer) temp"),
        TraceEvent("free", 2, 8 * MiB, source="jax"),
        TraceEvent("allocate", 3, MiB, source="pool"),
    ])
    timeline = build_timeline(trace, Policy.of("growth"), 2**30, "sim:1GiB")
    assert timeline.in_use == [4 * MiB, 12 * MiB, 4 * MiB, 5 * MiB]
    assert timeline.peak_index == 1 and timeline.peak_in_use == 12 * MiB
    assert timeline.at_peak == {"jit(layer) temp": 8 * MiB, "jit(layer)": 4 * MiB}
    assert {chunk.owner for chunk in timeline.chunks_at_peak} == {"jit(layer) temp", "jit(layer)"}
    assert sum(timeline.region_sizes) == timeline.reserved[1]


def test_devmem_plot_draws_a_real_jax_test_as_png_and_html(jax_loaded: object, matplotlib_loaded: object, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import jax
        import jax.numpy as jnp

        @jax.jit
        def forward_layer(x, w):
            return jnp.tanh(x @ w) @ w.T

        def test_layer():
            forward_layer(jnp.ones((512, 512)), jnp.ones((512, 1024))).block_until_ready()
        """
    )
    pytester.runpytest_inprocess("--devmem-mode=growth", "--devmem-traces=traces", "--devmem-report=r.json").assert_outcomes(passed=1)
    from pytest_devmem.cli import main

    png, page = pytester.path / "layer.png", pytester.path / "layer.html"
    assert main(["plot", str(pytester.path / "r.json"), "--test", "test_layer", "-o", str(png)]) == 0
    assert main(["plot", str(pytester.path / "r.json"), "-o", str(page)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    text = page.read_text()
    assert "<svg" in text and "jit(forward_layer) temp" in text and "peak" in text
    assert "<script" not in text and "src=" not in text and "href=" not in text  # self-contained: nothing fetched


def test_devmem_plot_says_what_is_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_devmem.cli import main

    report = tmp_path / "r.json"
    report.write_text(json.dumps({"format": "pytest-devmem-report", "version": 1, "session": {"device_capacity_bytes": 2**30}, "records": [{"test_id": "t", "trace": {"events": 3}}]}))
    assert main(["plot", str(report), "-o", str(tmp_path / "x.html")]) == 2
    assert "no record has a trace file: run pytest with --devmem-traces=DIR" in capsys.readouterr().err
    trace = tmp_path / "t.csv"
    Trace([TraceEvent("allocate", 1, MiB)]).write_csv(trace)
    assert main(["plot", str(trace), "-o", str(tmp_path / "x.svg")]) == 2
    assert "must end in .png or .html" in capsys.readouterr().err
    assert main(["plot", str(trace), "--mode", "growth", "-o", str(tmp_path / "x.html")]) == 0


def test_a_test_failing_the_gate_leaves_its_trace_and_picture(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_big(devmem):\n    devmem.pool.alloc(3 * 2**20)\n")
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-limit=1MiB", "--devmem-artifacts=artifacts")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*artifacts: artifacts/test_a_test_failing_the_gate_leaves_its_trace_and_picture.py_test_big?prealloc?.html (timeline and memory map)*"])
    left = sorted(p.suffix for p in (pytester.path / "artifacts").iterdir())
    assert left == [".csv", ".html"]
