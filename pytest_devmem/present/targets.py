"""The targets table (`--devmem-targets`) as people read it: tests down (one row per test, under the
regime the session ran it under), targets across, each cell the test's peak there and whether it
fits, out of memory (of what kind) or was not measured, marked `*` where the target ran it under
another regime (a TPU's own), with a note naming it; the same in Markdown with a row per test and
target, and as CSV columns. Takes plain data."""

from __future__ import annotations

from collections.abc import Sequence

from ..gate.targets import FAILED, FITS, NOT_MEASURED, OOM, Target, TargetResult, TargetTable
from ..units import format_size
from .text import markdown, markdown_rows

ROWS_SHOWN = 20
"""Tests the terminal shows without -v: those that do not fit (or were not measured) somewhere first."""
OTHER_REGIME = "*"
"""After a cell whose target ran the test under another regime than its row's."""


def cell_text(result: TargetResult | None) -> str:
    """`256.0 MiB (0.3%)`, `OOM (capacity) at 1.2 GiB`, `not measured`; `-` where the test has no row."""
    if result is None:
        return "-"
    if result.status == NOT_MEASURED:
        return "not measured"
    peak = "n/a" if result.peak_bytes_in_use is None else format_size(result.peak_bytes_in_use)
    if result.status == OOM:
        return f"OOM ({result.oom_kind or 'out of memory'})"
    if result.status == FAILED:
        return f"failed (at {peak})"
    share = result.share
    return f"{peak} ({share:.1%})" if share is not None else peak


def sized_by(table: TargetTable, target: str) -> str:
    """Whose compile sized JAX's executables on `target`, as its results say (one or several)."""
    found = sorted({r.sized_by for r in table.results if r.target == target and r.sized_by})
    if not found:
        return "no JAX executable"
    return ", ".join(
        f"{name}'s compile"
        if name not in ("cpu", "native")
        else ("the CPU compile" if name == "cpu" else "the GPU's own compile")
        for name in found
    )


def target_lines(table: TargetTable) -> list[str]:
    """One line per target: its capacity, regime and compile; the session's own marked."""
    lines = []
    for target in table.targets:
        regimes = sorted({r.regime for r in table.results if r.target == target.name})
        own = "this run's own device" if target.session else "run again"
        lines.append(
            f"{target.name}: {format_size(target.capacity_bytes)} per device, {own}, regime {', '.join(regimes) or 'n/a'}, sized by {sized_by(table, target.name)}"
        )
    return lines


def verdict_counts(table: TargetTable) -> list[str]:
    """Per target: how many tests fit, ran out of memory, or were not measured."""
    lines = []
    for target in table.targets:
        results = [r for r in table.results if r.target == target.name]
        counts = {status: sum(1 for r in results if r.status == status) for status in (FITS, OOM, FAILED, NOT_MEASURED)}
        lines.append(
            f"{target.name}: {counts[FITS]} fit, {counts[OOM]} out of memory, "
            + (f"{counts[FAILED]} failed, " if counts[FAILED] else "")
            + f"{counts[NOT_MEASURED]} not measured"
        )
    return lines


def marked_cell(result: TargetResult | None) -> str:
    """The cell's text, `*` after it where the target ran the test under another regime than the row's."""
    text = cell_text(result)
    return text + OTHER_REGIME if result is not None and result.other_regime else text


def other_regimes(table: TargetTable, target: str) -> list[str]:
    """The regimes `target` ran some test under that are not the test's row's (a TPU's own), sorted."""
    return sorted({r.regime for r in table.results if r.target == target and r.other_regime})


def other_regime_notes(table: TargetTable) -> list[str]:
    """What `*` means, per target that ran some test under another regime than its row's."""
    return [
        f"{OTHER_REGIME} {target.name}: run under {', '.join(regimes)} (that target's regime), not the row's"
        for target in table.targets
        if (regimes := other_regimes(table, target.name))
    ]


Row = tuple[str, str, dict[str, TargetResult]]
"""A test's row of the table: its id, the regime the session ran it under, its cell per target."""


def ranked_rows(table: TargetTable, limit: int | None, test: str | None = None) -> tuple[list[Row], int]:
    """The rows whose test id contains `test` (every row: None), in the table's order; where there
    are more than `limit`, the `limit` that matter most (those that do not fit or were not measured
    somewhere first, then the largest); and how many are left out."""
    rows = [row for row in table.rows() if test is None or test in row[0]]
    if limit is None or len(rows) <= limit:
        return rows, 0

    def key(row: Row) -> tuple[int, int]:
        cells = row[2].values()
        return (0 if any(c.status != FITS for c in cells) else 1, -max((c.peak_bytes_in_use or 0) for c in cells))

    kept = {(t, r) for t, r, _ in sorted(rows, key=key)[:limit]}
    return [row for row in rows if (row[0], row[1]) in kept], len(rows) - len(kept)


def pivot_rows(table: TargetTable, everything: bool = True) -> tuple[list[tuple[str, ...]], int]:
    """The header and a row per test (under the regime the session ran it under), a cell per target;
    without `everything`, at most ROWS_SHOWN rows (`ranked_rows`); and how many are hidden."""
    rows, hidden = ranked_rows(table, None if everything else ROWS_SHOWN)
    header = ("test", "regime", *(target.name for target in table.targets))
    body = [
        (test, regime, *(marked_cell(cells.get(target.name)) for target in table.targets))
        for test, regime, cells in rows
    ]
    return [header, *body], hidden


def aligned(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows of text cells as lines, each column as wide as its widest cell."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]


def reasons(table: TargetTable) -> list[str]:
    """Why each test not measured on a target was not, and what else a row notes."""
    return [f"{r.test_id} [{r.row_regime}] on {r.target}: {r.reason}" for r in table.results if r.reason]


def markdown_section(table: TargetTable) -> str:
    """The report's Markdown: the targets, a grid of tests by targets, then a row per test and target
    with the figures in bytes and the regime the target ran it under."""
    lines = ["", "## On several targets (--devmem-targets)", ""]
    lines += [f"- {markdown(line)}" for line in target_lines(table)]
    if table.skipped:
        lines.append(f"- {markdown(table.skipped)}")
    grid, _ = pivot_rows(table)
    lines += ["", *markdown_rows(grid[0], grid[1:])]
    notes = other_regime_notes(table)
    if notes:
        lines += [""] + [f"{markdown(line)}  " for line in notes]
    header = ["test", "regime", "target", "regime there", "capacity (bytes)", "peak in use (bytes)"]
    header += ["peak reserved (bytes)", "verdict", "sized by", "note"]
    rows = [
        (
            r.test_id,
            r.row_regime,
            r.target,
            r.regime,
            str(r.capacity_bytes),
            _bytes(r.peak_bytes_in_use),
            _bytes(r.peak_bytes_reserved),
            f"OOM ({r.oom_kind})" if r.status == OOM else r.status,
            r.sized_by or "no JAX",
            r.reason or "",
        )
        for r in table.results
    ]
    return "\n".join([*lines, "", *markdown_rows(header, rows)]) + "\n"


def _bytes(value: int | None) -> str:
    return "n/a" if value is None else str(value)


CSV_FIELDS = (
    "status",
    "peak_bytes_in_use",
    "peak_bytes_reserved",
    "capacity_bytes",
    "oom_kind",
    "sized_by",
    "reason",
    "regime",
)
"""Per target run again; `regime`: the one it ran the test under there (a TPU's own, or the line's)."""


def csv_header(targets: Sequence[Target]) -> list[str]:
    """The CSV report's columns for the targets run again (the session's own are the record's): `sim:T4 status`, ..."""
    return [f"{target.name} {name}" for target in targets if not target.session for name in CSV_FIELDS]


def csv_cells(table: TargetTable, test_id: str, regime: str) -> list[object]:
    """A record's line's cells for the targets run again: the test under `regime`, its session's, on each."""
    cells: list[object] = []
    for target in table.targets:
        if target.session:
            continue
        result = table.cell(test_id, regime, target.name)
        for name in CSV_FIELDS:
            value = getattr(result, name) if result is not None else None
            cells.append("" if value is None else value)
    return cells
