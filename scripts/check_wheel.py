"""What the index would get: the wheel built from this tree holds every module of the package, its
data (py.typed, the workflows `devmem init-ci` writes, uPlot and its licence), the licence, the entry points, and nothing
else (no tests, benchmarks or docs). Run by .ci/run after `python -m build`:

    python scripts/check_wheel.py dist/pytest_devmem-*.whl
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def problems(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = next(name.split("/")[0] for name in names if name.endswith(".dist-info/METADATA"))
        metadata = archive.read(f"{info}/METADATA").decode()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    package = {path.relative_to(ROOT).as_posix() for path in (ROOT / "pytest_devmem").rglob("*.py")}
    data = {
        path.relative_to(ROOT).as_posix()
        for folder in ("cli/templates", "present/vendor/uplot")
        for path in (ROOT / "pytest_devmem" / folder).iterdir()
        if path.is_file()
    }
    found = []
    found += [f"missing: {name}" for name in sorted(package | data | {"pytest_devmem/py.typed"}) if name not in names]
    found += [
        f"not the package's: {name}"
        for name in sorted(names)
        if not name.startswith(("pytest_devmem/", info + "/")) or "__pycache__" in name
    ]
    if f"{info}/licenses/LICENSE" not in names:
        found.append("the licence file is not in the wheel")
    for line in ("License-Expression: Apache-2.0", "Classifier: Framework :: Pytest", "Classifier: Typing :: Typed"):
        if line not in metadata:
            found.append(f"METADATA lacks {line!r}")
    if "Project-URL: Documentation" not in metadata or "Project-URL: Changelog" not in metadata:
        found.append("METADATA lacks its documentation or changelog URL")
    if "devmem = pytest_devmem.plugin" not in entry_points or "devmem = pytest_devmem.cli:main" not in entry_points:
        found.append("the pytest11 entry point or the devmem command is missing")
    return found


def main(paths: list[str]) -> int:
    if not paths:
        print("usage: python scripts/check_wheel.py WHEEL", file=sys.stderr)
        return 2
    failed = False
    for path in paths:
        for problem in problems(Path(path)):
            print(f"{path}: {problem}", file=sys.stderr)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
