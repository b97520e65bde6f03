"""`devmem replay TRACE [--mode M] [--fraction F] [--device D] [--format markdown|json|csv]`: what a
regime makes of a recorded trace on the model of the machine; exit 1 when it does not fit."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from ..model.explain import oom_lines
from ..model.machine import MachineRun, run_machine
from ..model.regime import jax_fraction_variable
from ..model.trace import Trace
from ..model.whatif import proven_fixes
from ..present.text import markdown, terminal
from ..spreadsheet import csv_table
from ..units import format_size
from .common import (
    add_format_arguments,
    add_replay_settings,
    json_text,
    output_format,
    print_text,
    trace_on_machine,
)

HELP = "Replay a recorded trace (--devmem-traces) under a regime; exit 1 if it does not fit"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", type=Path, help="Trace file (RMM-style CSV, or its Arrow IPC file)")
    add_replay_settings(parser, "the one the trace's name carries, as --devmem-traces names it", device_default="sim")
    add_format_arguments(parser, "A Markdown table (default), or JSON / CSV for tools")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    output = output_format(parser, args)  # before any work
    replayed = replay_trace(args.trace, args.mode, args.fraction, args.device)
    print_text({"json": replayed.json, "csv": replayed.csv}.get(output, replayed.markdown)())
    return 0 if replayed.fits else 1


@dataclass
class Replayed:
    """One trace replayed under a regime on the model of the machine, ready to be shown."""

    path: Path
    regime: str  # the policy's label
    origin: str  # where the regime came from, as a phrase (" (from the trace's name)")
    device: str
    trace: Trace
    run: MachineRun
    oom: dict[str, object] | None  # the out-of-memory result, with the fixes a replay proved

    @property
    def fits(self) -> bool:
        return self.oom is None

    def rows(self) -> list[tuple[str, object, str]]:
        """(figure, raw value, readable), in the table's order; a value is a number, a pair, or None."""
        run = self.run
        asked = "peak_live_bytes (asked" + (", all devices together)" if len(run.devices) > 1 else ")")
        peak_live = self.trace.peak_live_bytes()
        rows: list[tuple[str, object, str]] = [("events", run.events, ""), (asked, peak_live, format_size(peak_live))]
        for figures in run.devices:
            where = f" on {figures.device}" if len(run.devices) > 1 else ""
            rows += [
                (f"peak_bytes_in_use{where}", figures.peak_bytes_in_use, format_size(figures.peak_bytes_in_use)),
                (f"peak_bytes_reserved{where}", figures.peak_bytes_reserved, format_size(figures.peak_bytes_reserved)),
                (f"fragmentation{where}", figures.fragmentation, ""),
            ]
            for allocator in figures.allocators:
                rows.append(
                    (
                        f"{allocator.name}{where}: peak in use, held",
                        (allocator.peak_bytes_in_use, allocator.peak_bytes_reserved),
                        f"{format_size(allocator.peak_bytes_in_use)}, {format_size(allocator.peak_bytes_reserved)}",
                    )
                )
        for source, share in sorted(run.by_source.items()):
            rows.append((f"{source}: peak live", share.peak_live_bytes, format_size(share.peak_live_bytes)))
        return rows

    def markdown(self) -> str:
        lines = [
            f"### Trace {markdown(str(self.path))} replayed under regime {markdown(self.regime)}{self.origin} on {markdown(self.device)}",
            "",
            "| figure | value | readable |",
            "|---|---|---|",
        ]
        for figure, value, readable in self.rows():
            if isinstance(value, tuple):
                shown = ", ".join(str(v) for v in value)
            elif isinstance(value, float):
                shown = f"{value:.4f}"
            else:
                shown = "n/a" if value is None else str(value)
            lines.append(f"| {markdown(figure)} | {shown} | {readable} |")
        if self.oom is not None:
            devices = [d.to_json() for d in self.run.devices]
            lines += [
                "",
                "```",
                *(terminal(line) for line in oom_lines(self.oom, devices, self.regime, self.device)),
                "```",
            ]
        return "\n".join(lines) + "\n"

    def json(self) -> str:
        """Everything the replay found, raw: per device and allocator, per source, and the out-of-memory result."""
        return json_text(
            {
                "format": "pytest-devmem-replay",
                "version": 1,
                "trace": str(self.path),
                "regime": self.regime,
                "device": self.device,
                "fits": self.fits,
                "events": self.run.events,
                "peak_live_bytes": self.trace.peak_live_bytes(),
                "devices": [d.to_json() for d in self.run.devices],
                "by_source": {name: share.to_json() for name, share in sorted(self.run.by_source.items())},
                "oom": self.oom,
            }
        )

    def csv(self) -> str:
        """The table's figures, raw: one line per figure (an allocator's two figures on two lines)."""
        rows: list[tuple[str, object]] = []
        for figure, value, _ in self.rows():
            if isinstance(value, tuple):
                name = figure.removesuffix(": peak in use, held")
                rows += [(f"{name}: peak_bytes_in_use", value[0]), (f"{name}: peak_bytes_reserved", value[1])]
            else:
                rows.append((figure, value))
        return csv_table(["figure", "value"], rows)


def replay_trace(path: Path, mode: str | None, fraction: str | None, device_spec: str) -> Replayed:
    """What a regime makes of a recorded trace (RMM-style CSV) on the model of the machine. The same
    replay as the plugin's and `devmem plot`'s."""
    replay = trace_on_machine(path, mode, fraction, device_spec)
    trace, spec, setups = replay.trace, replay.spec, replay.setups
    run = run_machine(trace, setups, spec)
    oom = None
    if run.oom is not None:
        oom = run.oom.to_json()
        proven_fixes(trace, setups, spec, run, jax_fraction_variable()).record(oom)
    return Replayed(path, replay.policy.label, replay.origin, spec.name, trace, run, oom)
