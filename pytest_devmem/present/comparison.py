"""`devmem compare`'s output: one verdict per test (gate/compare.py) as a Markdown table for a
pull-request comment, as JSON, or as CSV, failures first."""

from __future__ import annotations

import io
import json

from ..gate.compare import FAILING, ORDER, TestVerdict, counts
from ..gate.tolerance import format_metric
from ..spreadsheet import csv_cell, csv_writer
from .text import markdown, markdown_code


VERDICT_MARK = {
    "regressed": "❌ regressed", "out of memory": "❌ out of memory", "improved": "✅ improved", "ok": "ok", "unmeasured": "n/a",
    "new": "🆕 new", "missing": "⚠️ not run", "not measured": "⚠️ not measured", "not baselined": "⚠️ not baselined",
}


def compare_rows(found: list[TestVerdict], show_all: bool) -> list[dict[str, object]]:
    """One row per figure that needs a reviewer's eye (every figure with `show_all`), failures first."""
    rows: list[dict[str, object]] = []
    peak = "peak_bytes_in_use"
    for verdict in found:
        test_id, regime, device_class = verdict.key
        base = verdict.base.metrics.get(peak) if verdict.base is not None else None
        now = verdict.new.metrics.get(peak) if verdict.new is not None else None
        row = {"test": test_id, "regime": regime, "device_class": device_class, "tolerance": verdict.tolerance, "status": verdict.status}
        changes = verdict.comparison.changes if verdict.comparison is not None else []
        shown = [c for c in changes if show_all or c.verdict not in ("ok",)]
        if verdict.status in ("ok", "improved", "regressed", "unmeasured") and changes:
            for change in shown:
                rows.append({**row, "metric": change.name, "baseline": change.baseline, "now": change.now, "delta": change.delta, "percent": change.percent, "verdict": change.verdict})
            continue
        detail = verdict.new.oom if verdict.status == "out of memory" and verdict.new is not None else verdict.comparison.reason if verdict.comparison is not None and verdict.comparison.reason else ""
        rows.append({**row, "metric": peak, "baseline": base, "now": now, "delta": None if base is None or now is None else now - base, "percent": None, "verdict": verdict.status, "detail": detail})
    rows.sort(key=lambda r: (r["verdict"] not in FAILING, ORDER.index(str(r["status"])) if r["status"] in ORDER else len(ORDER)))
    return rows


def compare_markdown(found: list[TestVerdict], tolerance_spec: str, show_all: bool) -> str:
    """The Markdown report of NEW against BASE, for a pull-request comment."""
    rows = compare_rows(found, show_all)
    tally = counts(found)
    summary = ", ".join(f"{count} {status}" for status, count in tally.items())
    own = sorted({v.tolerance for v in found if v.tolerance and v.tolerance != tolerance_spec})
    lines = [f"### Device memory: {summary or 'nothing to compare'}", "", f"Tolerance: `{tolerance_spec}`" + (f"; tests with their own: {', '.join(f'`{t}`' for t in own)}." if own else "."), ""]  # each parsed: no backtick
    if rows:
        lines += ["| test | regime | device | metric | baseline | now | Δ | verdict |", "|---|---|---|---|---|---|---|---|"]
        for row in rows:
            metric = str(row["metric"])
            name = metric.split(" on ")[0]
            verdict = VERDICT_MARK.get(str(row["verdict"]), str(row["verdict"]))
            if row.get("detail"):
                verdict += f": {row['detail']}"
            delta = row["delta"]
            shown_delta = "—" if delta is None else ("+" if delta >= 0 else "-") + format_metric(name, abs(delta)) + (f" ({row['percent']:+.1f}%)" if row["percent"] is not None else "")  # type: ignore[operator, arg-type]
            cells = (row["test"], row["regime"], row["device_class"], metric, _shown(name, row["baseline"]), _shown(name, row["now"]), shown_delta, verdict)
            lines.append("| " + " | ".join(markdown(str(cell)) for cell in cells) + " |")
    elif tally:
        lines.append("Every compared test is within tolerance.")
    growth = [f"- {markdown_code(v.key[0])} [{markdown(v.key[1])}]: {markdown(v.comparison.growth_text())}" for v in found if v.comparison is not None and v.comparison.grew]
    if growth:
        lines += ["", "What grew at the peak:", *growth]
    return "\n".join(lines) + "\n"


def _shown(metric: str, value: object) -> str:
    return "—" if value is None else format_metric(metric, value)  # type: ignore[arg-type]


def compare_json(found: list[TestVerdict], tolerance_spec: str) -> str:
    """Machine-readable verdicts: one object per test, with each figure's comparison."""
    tests = []
    for verdict in found:
        test_id, regime, device_class = verdict.key
        tests.append({
            "test_id": test_id, "regime": regime, "device_class": device_class, "status": verdict.status, "failing": verdict.failing,
            "tolerance": verdict.tolerance, "oom": verdict.new.oom if verdict.new is not None else None,
            "comparison": verdict.comparison.to_json() if verdict.comparison is not None else None,
        })
    document = {"format": "pytest-devmem-comparison", "version": 1, "tolerance": tolerance_spec, "counts": counts(found), "failing": any(v.failing for v in found), "tests": tests}
    return json.dumps(document, indent=2) + "\n"


def compare_csv(found: list[TestVerdict], show_all: bool = True) -> str:
    """One line per figure compared, raw numbers, for spreadsheets and pandas."""
    out = io.StringIO()
    writer = csv_writer(out)
    columns = ["test", "regime", "device_class", "status", "metric", "baseline", "now", "delta", "percent", "verdict", "tolerance"]
    writer.writerow(columns)
    for row in compare_rows(found, show_all):
        writer.writerow(["" if row.get(c) is None else csv_cell(row.get(c)) for c in columns])  # no cell a spreadsheet would run
    return out.getvalue()
