"""The documentation site: its references are generated from the code (every option, marker
argument, subcommand and schema field), its pages link only to what exists, and it builds with
warnings as errors."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_devmem.gate.marks import MARK_ARGUMENTS, MARK_KEYS
from pytest_devmem.options import OPTIONS

ROOT = Path(__file__).resolve().parents[2]


def hooks():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "scripts" / "mkdocs_hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_marker_table_describes_every_argument_the_marker_takes() -> None:
    assert tuple(MARK_ARGUMENTS) == MARK_KEYS


def test_the_generated_references_name_every_option_marker_argument_and_subcommand() -> None:
    docs = hooks()
    options = docs.options_reference()
    assert all(f"`{option.option}" in options and f"`{option.env}`" in options for option in OPTIONS)
    assert "--devmem-disable" in options and "--devmem-only" in options
    marker = docs.marker_reference()
    assert all(f"`{name}=`" in marker for name in MARK_KEYS)
    cli = docs.cli_reference()
    for command in ("compare", "merge", "show", "replay", "plot", "history"):
        assert f"## devmem {command}" in cli
    assert "`--device-class`" in cli and "`--all-classes`" in cli
    report = docs.schema_reference("report")
    assert "`session.run_info`" in report and "`records[].peak_bytes_in_use`" in report
    assert "`records.*.*.profile`" in docs.schema_reference("baseline")


def test_the_reference_pages_hold_what_is_generated_for_them_now() -> None:
    """A reader of the repository (GitHub shows Markdown as it is) sees every option, subcommand and
    field; the site makes the same parts again at every build."""
    docs = hooks()
    pages = sorted((ROOT / "docs" / "reference").glob("*.md"))
    assert pages
    stale = [page.name for page in pages if docs.with_references(page.read_text()) != page.read_text()]
    assert stale == [], "out of date: run python scripts/mkdocs_hooks.py"
    assert "## devmem compare" in (ROOT / "docs" / "reference" / "cli.md").read_text()


def test_every_page_in_the_docs_folder_is_in_the_navigation_or_left_for_others() -> None:
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def pages(nav: object) -> list[str]:
        if isinstance(nav, str):
            return [nav]
        if isinstance(nav, list):
            return [page for item in nav for page in pages(item)]
        if isinstance(nav, dict):
            return [page for value in nav.values() for page in pages(value)]
        return []

    listed = set(pages(config["nav"]))
    present = {str(path.relative_to(ROOT / "docs")) for path in (ROOT / "docs").rglob("*.md")}
    assert present - listed == set() and listed - present == set()


def build(root: Path, site: Path) -> tuple[int, list[str]]:
    """`mkdocs build --strict` of the site at `root`: its exit status and every warning it logged.
    Never `--quiet`: under it MkDocs drops warnings before strict mode counts them, and exits 0."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=root,
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "NO_MKDOCS_2_WARNING": "1",
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        },
    )
    output = done.stdout + done.stderr
    return done.returncode, [line for line in output.splitlines() if re.match(r"(WARNING|ERROR) +-|Aborted", line)]


@pytest.mark.slow
def test_the_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    code, warnings = build(ROOT, tmp_path / "site")
    assert (code, warnings) == (0, [])
    built = tmp_path / "site"
    assert (built / "pictures" / "built" / "out-of-memory.png").stat().st_size > 0  # drawn in the build
    assert "--devmem-only" in (built / "reference" / "options" / "index.html").read_text()


@pytest.mark.slow
def test_a_link_to_an_anchor_no_page_has_fails_the_build(tmp_path: Path) -> None:
    """The check above, on a copy of the site with one broken anchor: it must see it."""
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "docs", copy / "docs")
    (copy / "scripts").mkdir()
    for name in ("mkdocs.yml", "CHANGELOG.md", "scripts/mkdocs_hooks.py"):
        shutil.copy(ROOT / name, copy / name)
    page = copy / "docs" / "ci.md"
    page.write_text(page.read_text() + "\nSee [the gate](#no-such-heading).\n")
    code, warnings = build(copy, tmp_path / "site")
    assert code != 0
    assert any("'#no-such-heading'" in line and "ci.md" in line for line in warnings), warnings


def test_the_tpu_page_holds_the_presets_table_the_tool_prints() -> None:
    """docs/tpu.md's table of the presets is `scripts/tpu_figures.py --presets`'s output, verbatim."""
    spec = importlib.util.spec_from_file_location("tpu_figures", ROOT / "scripts" / "tpu_figures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.presets_table() in (ROOT / "docs" / "tpu.md").read_text()
