"""`devmem compare`'s output: one verdict per test (gate/compare.py) as a Markdown table for a
pull-request comment, as JSON, or as CSV, failures first."""

from __future__ import annotations

import json

from ..gate.compare import FAILING, ORDER, TestVerdict, counts
from ..gate.tolerance import format_metric
from ..spreadsheet import csv_table
from .text import markdown, markdown_code, markdown_rows

COLUMNS = ("test", "regime", "device", "metric", "baseline", "now", "delta", "verdict")
"""The Markdown table's columns, in their default order (`devmem compare --columns` picks and orders them)."""
HEADINGS = {**{name: name for name in COLUMNS}, "delta": "Δ"}
"""Each column's heading: its name, but for the delta's."""
SORT_KEYS = ("status", "test", "delta", "percent", "now", "baseline")
"""`devmem compare --sort`: by status (failures first), by test id, or by a figure, largest first."""


def parse_columns(spec: str | None) -> tuple[str, ...]:
    """`--columns test,now,verdict`: the columns named, in that order; ValueError naming a bad one."""
    if spec is None:
        return COLUMNS
    names = tuple(name.strip() for name in spec.split(",") if name.strip())
    bad = [name for name in names if name not in COLUMNS]
    if bad or not names:
        raise ValueError(
            f"--columns {spec!r}: {'unknown column ' + repr(bad[0]) if bad else 'no column named'}; allowed are {', '.join(COLUMNS)}"
        )
    return names


def _row_sort_key(sort: str) -> object:
    def key(row: dict[str, object]) -> tuple[object, ...]:
        if sort == "test":
            return (str(row["test"]), str(row["regime"]), str(row["device_class"]), str(row["metric"]))
        value = row.get(sort)
        number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        return (number is None, -(number or 0.0), str(row["test"]))

    return key


def sort_verdicts(found: list[TestVerdict], sort: str) -> list[TestVerdict]:
    """The verdicts in `--sort` order (JSON output); tables sort their rows the same way."""
    if sort == "status":
        return sorted(
            found, key=lambda v: (not v.failing, ORDER.index(v.status) if v.status in ORDER else len(ORDER), v.key)
        )
    if sort == "test":
        return sorted(found, key=lambda v: v.key)
    peak = "peak_bytes_in_use"

    def figure(verdict: TestVerdict) -> float | None:
        base = verdict.base.metrics.get(peak) if verdict.base is not None else None
        now = verdict.new.metrics.get(peak) if verdict.new is not None else None
        if sort == "now":
            return now
        if sort == "baseline":
            return base
        if base is None or now is None:
            return None
        if sort == "delta":
            return now - base
        return (now - base) / base * 100 if base else None

    return sorted(found, key=lambda v: (figure(v) is None, -(figure(v) or 0.0), v.key))


VERDICT_MARK = {
    "regressed": "❌ regressed",
    "out of memory": "❌ out of memory",
    "improved": "✅ improved",
    "ok": "ok",
    "unmeasured": "n/a",
    "new": "🆕 new",
    "missing": "⚠️ not run",
    "not measured": "⚠️ not measured",
    "not baselined": "⚠️ not baselined",
}


def compare_rows(found: list[TestVerdict], show_all: bool, sort: str = "status") -> list[dict[str, object]]:
    """One row per figure that needs a reviewer's eye (every figure with `show_all`), failures first."""
    rows: list[dict[str, object]] = []
    peak = "peak_bytes_in_use"
    for verdict in found:
        test_id, regime, device_class = verdict.key
        base = verdict.base.metrics.get(peak) if verdict.base is not None else None
        now = verdict.new.metrics.get(peak) if verdict.new is not None else None
        row = {
            "test": test_id,
            "regime": regime,
            "device_class": device_class,
            "tolerance": verdict.tolerance,
            "status": verdict.status,
        }
        changes = verdict.comparison.changes if verdict.comparison is not None else []
        shown = [c for c in changes if show_all or c.verdict not in ("ok",)]
        if verdict.status in ("ok", "improved", "regressed", "unmeasured") and changes:
            for change in shown:
                rows.append(
                    {
                        **row,
                        "metric": change.name,
                        "baseline": change.baseline,
                        "now": change.now,
                        "delta": change.delta,
                        "percent": change.percent,
                        "verdict": change.verdict,
                    }
                )
            continue
        detail = (
            verdict.new.oom
            if verdict.status == "out of memory" and verdict.new is not None
            else verdict.comparison.reason
            if verdict.comparison is not None and verdict.comparison.reason
            else verdict.new.reason  # why a test that ran has no figures (skipped, xfailed)
            if verdict.new is not None
            else ""
        )
        rows.append(
            {
                **row,
                "metric": peak,
                "baseline": base,
                "now": now,
                "delta": None if base is None or now is None else now - base,
                "percent": None,
                "verdict": verdict.status,
                "detail": detail,
            }
        )
    if sort == "status":
        rows.sort(
            key=lambda r: (
                r["verdict"] not in FAILING,
                ORDER.index(str(r["status"])) if r["status"] in ORDER else len(ORDER),
            )
        )
    else:
        rows.sort(key=_row_sort_key(sort))  # type: ignore[arg-type]
    return rows


def compare_markdown(
    found: list[TestVerdict],
    tolerance_spec: str,
    show_all: bool,
    left_out: dict[str, int] | None = None,
    columns: tuple[str, ...] = COLUMNS,
    sort: str = "status",
    picked: bool = False,
) -> str:
    """The Markdown report of NEW against BASE, for a pull-request comment; `left_out` counts BASE's
    entries of device classes that were not compared: NEW did not measure them, or, `picked`, the
    user's `--device-class` left them out."""
    rows = compare_rows(found, show_all, sort)
    tally = counts(found)
    summary = ", ".join(f"{count} {status}" for status, count in tally.items())
    own = sorted({v.tolerance for v in found if v.tolerance and v.tolerance != tolerance_spec})
    lines = [
        f"### Device memory: {summary or 'nothing to compare'}",
        "",
        f"Tolerance: `{tolerance_spec}`"
        + (f"; tests with their own: {', '.join(f'`{t}`' for t in own)}." if own else "."),
        "",
    ]  # each parsed: no backtick
    if left_out:
        shown = ", ".join(f"{markdown_code(name)} ({count})" for name, count in left_out.items())
        why = "left out by `--device-class`" if picked else "this run did not measure"
        lines += [
            f"Not compared: baselines of device classes {why}: {shown} (`--all-classes` lists them, `--device-class` picks).",
            "",
        ]
    if rows:
        table = []
        for row in rows:
            metric = str(row["metric"])
            name = metric.split(" on ")[0]
            verdict = VERDICT_MARK.get(str(row["verdict"]), str(row["verdict"]))
            if row.get("detail"):
                verdict += f": {row['detail']}"
            delta = row["delta"]
            shown_delta = (
                "—"
                if delta is None
                else ("+" if delta >= 0 else "-")  # type: ignore[operator]
                + format_metric(name, abs(delta))  # type: ignore[operator, arg-type]
                + (f" ({row['percent']:+.1f}%)" if row["percent"] is not None else "")
            )
            cells = {
                "test": row["test"],
                "regime": row["regime"],
                "device": row["device_class"],
                "metric": metric,
                "baseline": _shown(name, row["baseline"]),
                "now": _shown(name, row["now"]),
                "delta": shown_delta,
                "verdict": verdict,
            }
            table.append([str(cells[c]) for c in columns])
        lines += markdown_rows([HEADINGS[c] for c in columns], table)
    elif tally:
        lines.append("Every compared test is within tolerance.")
    growth = [
        f"- {markdown_code(v.key[0])} [{markdown(v.key[1])}]: {markdown(v.comparison.growth_text())}"
        for v in found
        if v.comparison is not None and v.comparison.grew
    ]
    if growth:
        lines += ["", "What grew at the peak:", *growth]
    return "\n".join(lines) + "\n"


def _shown(metric: str, value: object) -> str:
    return "—" if value is None else format_metric(metric, value)  # type: ignore[arg-type]


def compare_json(found: list[TestVerdict], tolerance_spec: str, left_out: dict[str, int] | None = None) -> str:
    """Machine-readable verdicts: one object per test, with each figure's comparison."""
    tests = []
    for verdict in found:
        test_id, regime, device_class = verdict.key
        tests.append(
            {
                "test_id": test_id,
                "regime": regime,
                "device_class": device_class,
                "status": verdict.status,
                "failing": verdict.failing,
                "tolerance": verdict.tolerance,
                "oom": verdict.new.oom if verdict.new is not None else None,
                "comparison": verdict.comparison.to_json() if verdict.comparison is not None else None,
            }
        )
    document = {
        "format": "pytest-devmem-comparison",
        "version": 1,
        "tolerance": tolerance_spec,
        "counts": counts(found),
        "failing": any(v.failing for v in found),
        "not_compared_classes": left_out or {},
        "tests": tests,
    }
    return json.dumps(document, indent=2) + "\n"


def compare_csv(found: list[TestVerdict], show_all: bool = True, sort: str = "status") -> str:
    """One line per figure compared, raw numbers, for spreadsheets and pandas."""
    columns = [
        "test",
        "regime",
        "device_class",
        "status",
        "metric",
        "baseline",
        "now",
        "delta",
        "percent",
        "verdict",
        "tolerance",
    ]
    return csv_table(columns, ([row.get(c) for c in columns] for row in compare_rows(found, show_all, sort)))
