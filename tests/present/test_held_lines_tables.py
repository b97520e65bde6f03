"""The arrays held at the peak by the line that made them, as tables: each line of the HTML picture
links to its file (below the project's root), a line not known reads "line unknown" unlinked, and
the baseline's bytes stand beside this run's."""

from __future__ import annotations

from pathlib import Path

from pytest_devmem.model.buffers import PeakBuffer, ProgramBuffers
from pytest_devmem.present.buffers import html_lines_section, line_rows, markdown_lines_table, markdown_table
from pytest_devmem.units import KiB, MiB


def test_each_line_links_to_its_file_and_an_unknown_line_is_said_so(tmp_path: Path) -> None:
    now = {"device_put": {"tests/test_model.py:12": 4 * MiB}, "MatMul": {"": 256 * KiB}}
    before = {"device_put": {"tests/test_model.py:12": 256 * KiB}}
    html = html_lines_section(now, before, tmp_path)
    target = (tmp_path / "tests" / "test_model.py").resolve().as_uri()
    assert f"<a href='{target}'>tests/test_model.py:12</a>" in html
    assert "<td>line unknown</td>" in html and "<a href=''>" not in html
    assert "<td>256.00 KiB</td><td>4.00 MiB</td>" in html  # the baseline's beside this run's
    assert html_lines_section({}, None) == ""


def test_devmem_shows_each_holders_lines_largest_first() -> None:
    lines = {"jit(step)": {"model.py:3": KiB, "model.py:9": MiB}}
    assert line_rows(lines) == [("jit(step)", "model.py:9", None, MiB), ("jit(step)", "model.py:3", None, KiB)]
    table = markdown_lines_table("test_a [ondemand, sim-16GiB]", lines)
    assert table.index("| jit(step) | model.py:9 | 1.00 MiB |") < table.index("| jit(step) | model.py:3 | 1.00 KiB |")


def test_two_alike_buffers_of_a_program_are_two_rows() -> None:
    """Two values of one shape, op and line live at a program's peak (jax.random's `_normal` holds two
    `u32[512,64] add`): each is a row, never one hiding the other."""
    add = PeakBuffer(131072, "u32[512,64]", "add", "src/model.py:8")
    shown = markdown_table("t", {"jit(_normal)": ProgramBuffers((add, add, PeakBuffer(4, "u32[4]", "copy")), more=11)})
    assert shown.count("| jit(_normal) | u32[512,64] | add | src/model.py:8 | 128.00 KiB |") == 2
    assert "11 more, smaller" in shown
