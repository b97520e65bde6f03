"""MkDocs hooks (mkdocs.yml `hooks:`): the reference pages are generated from the code they describe,
and one picture is drawn by the tool in every build, so the site cannot drift from the package.

- `<!-- generated: cli -->`: the `devmem` command's subcommands and options, from its argparse parser;
- `<!-- generated: options -->` and `<!-- generated: marker -->`: the options, ini keys and
  environment variables from `options.OPTIONS`, the marker's arguments from `gate/marks.MARK_ARGUMENTS`;
- `<!-- generated: schema NAME -->`: the fields of `docs/NAME.schema.json`;
- `<!-- generated: changelog -->`: CHANGELOG.md;
- the reference pages (docs/reference/) hold what was generated, up to `<!-- end generated -->`, so
  that they read whole where Markdown is shown as it is (GitHub): `python scripts/mkdocs_hooks.py`
  makes them again, and a test fails where one is out of date;
- `pictures/built/out-of-memory.png` and `.html`: a pool that runs out of memory with enough bytes
  free, replayed on the model of the machine and drawn by `devmem plot`'s renderers (no framework
  needed, well under a second). The pictures of real JAX and TensorFlow runs are committed under
  docs/pictures/ and made again by `python scripts/make_pictures.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the checkout's package, whatever is installed

_BUILT = tempfile.TemporaryDirectory(prefix="devmem-docs-")
MARKER = re.compile(r"<!-- generated: (\w+)(?: (\w+))? -->(?:\n.*?\n<!-- end generated -->)?", re.DOTALL)
"""A generated part: its marker, and what was generated there before where the page holds it (the
reference pages do, so that they read whole where Markdown is shown as it is: `write_references`)."""
REFERENCE_PAGES = ROOT / "docs" / "reference"


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def usage_of(parser: argparse.ArgumentParser, width: int = 88) -> str:
    """The parser's usage, wrapped at `width` whatever the terminal (argparse reads COLUMNS)."""
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)
    try:
        return parser.format_usage().replace("usage: ", "").strip()
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


def cli_reference() -> str:
    from pytest_devmem.cli import build_parser

    parser = build_parser()
    lines = [f"`devmem` (the console script, or `python -m pytest_devmem.cli`): {parser.description}", ""]
    commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in commands._choices_actions}
    for name, sub in commands.choices.items():
        lines += [
            f"## devmem {name}",
            "",
            cell(helps.get(name) or ""),
            "",
            "```",
            usage_of(sub),
            "```",
            "",
        ]
        lines += ["| argument | meaning | default |", "|---|---|---|"]
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            names = ", ".join(f"`{flag}`" for flag in action.option_strings) or f"`{action.dest.upper()}`" + (
                " ..." if action.nargs in ("+", "*") else ""
            )
            choices = f" (one of {', '.join(map(str, action.choices))})" if action.choices else ""
            default = (
                ""
                if action.default in (None, False, argparse.SUPPRESS) or action.option_strings == []
                else f"`{action.default}`"
            )
            lines.append(f"| {names} | {cell((action.help or '').replace('%%', '%'))}{choices} | {default} |")
        lines.append("")
    lines += [
        "Exit status: 0 when nothing regressed, 1 on a regression, an out-of-memory result (compare, replay) or a moved test (history), 2 on bad input.",
        "",
    ]
    return "\n".join(lines)


def options_reference() -> str:
    from pytest_devmem.options import OPTIONS

    lines = ["| option | ini key | environment variable | meaning |", "|---|---|---|---|"]
    for option in OPTIONS:
        shown = f"`{option.option}`" if option.flag else f"`{option.option}={option.metavar}`"
        lines.append(f"| {shown} | `{option.ini}` | `{option.env}` | {cell(option.help)} |")
    return "\n".join(lines) + "\n"


def marker_reference() -> str:
    from pytest_devmem.gate.marks import MARK_ARGUMENTS

    lines = ["| argument | meaning |", "|---|---|"]
    lines += [f"| `{name}=` | {cell(text)} |" for name, text in MARK_ARGUMENTS.items()]
    return "\n".join(lines) + "\n"


def _resolved(spec: Any, root: dict[str, Any]) -> Any:
    """A `{"$ref": "#/$defs/NAME"}` as the definition it names."""
    if isinstance(spec, dict) and isinstance(spec.get("$ref"), str) and spec["$ref"].startswith("#/$defs/"):
        return root.get("$defs", {}).get(spec["$ref"].split("/")[-1], spec)
    return spec


def _fields(
    schema: dict[str, Any], prefix: str, rows: list[str], depth: int, root: dict[str, Any] | None = None
) -> None:
    root = root if root is not None else schema
    for name, spec in schema.get("properties", {}).items():
        spec = _resolved(spec, root)
        kind = spec.get("type", "")
        kind = " or ".join(kind) if isinstance(kind, list) else kind
        required = name in schema.get("required", [])
        rows.append(
            f"| `{prefix}{name}` | {kind}{' (required)' if required else ''} | {cell(spec.get('description', ''))} |"
        )
        if depth > 0:
            if "properties" in spec:
                _fields(spec, f"{prefix}{name}.", rows, depth - 1, root)
            items = _resolved(spec.get("items"), root)
            if isinstance(items, dict) and "properties" in items:
                _fields(items, f"{prefix}{name}[].", rows, depth - 1, root)
            extra = _resolved(spec.get("additionalProperties"), root)
            if isinstance(extra, dict) and ("properties" in extra or "additionalProperties" in extra):
                inner = extra if "properties" in extra else _resolved(extra.get("additionalProperties", {}), root)
                if isinstance(inner, dict) and "properties" in inner:
                    _fields(inner, f"{prefix}{name}.*.{'*.' if inner is not extra else ''}", rows, depth - 1, root)


def schema_reference(name: str) -> str:
    path = ROOT / "docs" / f"{name}.schema.json"
    schema = json.loads(path.read_text())
    rows = ["| field | type | meaning |", "|---|---|---|"]
    _fields(schema, "", rows, 3)
    return (
        f"{cell(schema.get('description', ''))}\n\nThe schema itself: [{path.name}](../{path.name}).\n\n"
        + "\n".join(rows)
        + "\n"
    )


def changelog() -> str:
    """CHANGELOG.md, its links to `docs/PAGE.md` made relative to the docs folder it is shown in."""
    text = (ROOT / "CHANGELOG.md").read_text()
    text = text.split("\n", 1)[1] if text.startswith("# ") else text
    return text.replace("](docs/", "](")


GENERATORS = {"cli": cli_reference, "options": options_reference, "marker": marker_reference, "changelog": changelog}


def generated(match: re.Match[str]) -> str:
    """What a marker stands for, made now."""
    kind, argument = match.group(1), match.group(2)
    if kind == "schema":
        return schema_reference(argument)
    return GENERATORS[kind]()


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return MARKER.sub(generated, markdown)


def with_references(markdown: str) -> str:
    """`markdown` with each generated part made now, between its marker and an end marker."""
    return MARKER.sub(
        lambda match: f"{match.group(0).split(chr(10))[0]}\n{generated(match)}\n<!-- end generated -->", markdown
    )


def write_references() -> list[Path]:
    """Each reference page with its generated parts made now (`python scripts/mkdocs_hooks.py`):
    the pages that changed."""
    changed = []
    for page in sorted(REFERENCE_PAGES.glob("*.md")):
        text = page.read_text()
        made = with_references(text)
        if made != text:
            page.write_text(made)
            changed.append(page)
    return changed


def built_pictures(directory: Path) -> list[str]:
    """The out-of-memory example of the fragmentation page, replayed and drawn now."""
    from pytest_devmem.model.frameworks import setups_for
    from pytest_devmem.model.machine import MachineSpec, run_machine
    from pytest_devmem.model.pool import Policy
    from pytest_devmem.model.timeline import build_view
    from pytest_devmem.model.trace import Trace, TraceEvent
    from pytest_devmem.present.plot import write_plot

    mib, capacity = 2**20, 2**30
    events = [
        TraceEvent("allocate", pointer, 100 * mib, source="pool", label=f"test_frag.py:4 buffer {pointer}")
        for pointer in range(1, 8)
    ]
    events += [TraceEvent("free", pointer, 100 * mib, source="pool") for pointer in (2, 4, 6)]
    events.append(TraceEvent("allocate", 8, 200 * mib, source="pool", label="test_frag.py:7 the large one"))
    trace = Trace(events)
    policy = Policy.of("prealloc")
    spec = MachineSpec(capacity, "sim:1GiB", context_bytes=capacity // 8)
    view = build_view(run_machine(trace, setups_for(policy, capacity), spec, timeline=True), trace, policy.label)
    written = []
    for suffix in (".png", ".html"):
        target = directory / "pictures" / "built" / f"out-of-memory{suffix}"
        target.parent.mkdir(parents=True, exist_ok=True)
        write_plot(view, target, "every other 100 MiB buffer freed, then 200 MiB asked, on sim:1GiB under prealloc")
        written.append(f"pictures/built/out-of-memory{suffix}")
    return written


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    directory = Path(_BUILT.name)
    for path in built_pictures(directory):
        files.append(File(path, str(directory), config["site_dir"], config["use_directory_urls"]))
    return files


if __name__ == "__main__":
    for written in write_references():
        print(f"wrote {written.relative_to(ROOT)}")
