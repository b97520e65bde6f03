"""This repository's own memory gate: the workflows `devmem init-ci` writes for a user's repository,
filled in for the examples and installing the plugin from this checkout. Run it after changing the
templates (pytest_devmem/cli/templates/); tests/project/test_workflows.py checks the files match.

    python scripts/project_workflows.py
"""

from __future__ import annotations

from pathlib import Path

from pytest_devmem.cli.init_ci import WORKFLOWS, Gate, render

ROOT = Path(__file__).resolve().parents[1]

PROJECT_GATE = Gate(
    tests=("examples",),
    # the plugin from this checkout, with the frameworks the examples use
    measure_install="python -m pip install -e '.[ci,jax,tensorflow-cpu]'",
    gate_install="python -m pip install -e .",  # the devmem command alone: no framework
)


def main() -> None:
    for name in WORKFLOWS:
        path = ROOT / ".github" / "workflows" / name
        path.write_text(render(name, PROJECT_GATE), encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
