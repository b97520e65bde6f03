"""CSV cells a spreadsheet will not run: every CSV pytest-devmem writes (the report, `devmem compare
--csv`, traces) passes its cells through `csv_cell`.

A cell that starts with `=`, `+`, `-`, `@`, a tab or a carriage return is read by Excel, LibreOffice
and Google Sheets as a formula (OWASP, "CSV Injection"): a test id or a label such as
`=HYPERLINK(...)` would run when a reviewer opens the file. Such a cell is written with a single
quote in front, as OWASP advises, which spreadsheets show as text. A number stays a number: a
cell that is a plain number (`-1048576`, `-0.5`, `1e3`) holds no formula, and a negative delta
must remain one for pandas and for sums. A text cell that already starts with quotes before one of
those characters gets one more, so that `csv_text` gives back exactly what was written.

`csv_writer` writes rows ending in `\n` and quotes a cell that holds a carriage return: Python's
csv.writer quotes only the characters of its own line terminator, so with `\n` a bare CR would
end the row for every reader.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable
from typing import TextIO

_FORMULA = re.compile(r"'*[=+\-@\t\r]")
"""What a spreadsheet would run (after any quotes a neutralised cell already carries)."""
_NEUTRALISED = re.compile(r"'+[=+\-@\t\r]")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def csv_cell(value: object) -> object:
    """The cell to write for `value`: numbers and plain numeric text as they are, text that a
    spreadsheet would take for a formula with a single quote in front."""
    if isinstance(value, (int, float)) or not isinstance(value, str):
        return value
    if _FORMULA.match(value) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def csv_text(cell: str) -> str:
    """A text cell as it was before `csv_cell` (the quote it added taken off)."""
    return cell[1:] if _NEUTRALISED.match(cell) else cell


class CsvWriter:
    """csv.writer's `writerow` with `\n` line ends, a cell holding a CR quoted."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._plain = csv.writer(out, lineterminator="\n")
        self._buffer = io.StringIO()
        self._quoting = csv.writer(self._buffer, lineterminator="\r\n")  # quotes a cell with \r or \n

    def writerow(self, row: Iterable[object]) -> None:
        cells = list(row)
        if not any(isinstance(cell, str) and "\r" in cell for cell in cells):
            self._plain.writerow(cells)
            return
        self._buffer.seek(0)
        self._buffer.truncate()
        self._quoting.writerow(cells)
        self._out.write(self._buffer.getvalue()[:-2] + "\n")


def csv_writer(out: TextIO) -> CsvWriter:
    return CsvWriter(out)


def csv_table(header: Iterable[str], rows: Iterable[Iterable[object]]) -> str:
    """A whole CSV text: the header line, then one line per row; None is an empty cell, and every
    other cell passes through `csv_cell`."""
    out = io.StringIO()
    writer = csv_writer(out)
    writer.writerow([csv_cell(cell) for cell in header])
    for row in rows:
        writer.writerow(["" if cell is None else csv_cell(cell) for cell in row])
    return out.getvalue()
