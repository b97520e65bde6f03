"""`devmem replay TRACE [--mode M] [--fraction F] [--device D]`: what a regime makes of a recorded
trace on the model of the machine; exit 1 when it does not fit."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..model.explain import oom_lines
from ..model.machine import run_machine
from ..model.regime import jax_fraction_variable
from ..model.tpu_replay import tpu_replay_policy
from ..model.tpu_targets import tpu_spec
from ..model.whatif import proven_fixes
from ..options import OPTION, add_option
from ..present.text import markdown, terminal
from ..units import format_size
from .common import TRACE_REGIME, machine, on_chips, print_text, read_trace, regime_of_trace, unnamed_device

HELP = "Replay a recorded trace (--devmem-traces) under a regime; exit 1 if it does not fit"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", type=Path, help="Trace file (RMM-style CSV, or its Arrow IPC file)")
    add_option(
        parser.add_argument,
        OPTION["mode"],
        prefix="",
        help=f"The regime: {OPTION['mode'].values} (default: the regime the trace's name carries, as --devmem-traces names it)",
    )
    add_option(
        parser.add_argument, OPTION["fraction"], prefix="", help=f"Fraction of the device, {OPTION['fraction'].values}"
    )
    add_option(
        parser.add_argument,
        OPTION["device"],
        prefix="",
        help=f"Device whose capacity to use: {OPTION['device'].values} (default: sim, 16 GiB)",
        default="sim",
    )


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    text, fitted = replay_table(args.trace, args.mode, args.fraction, args.device)
    print_text(text)
    return 0 if fitted else 1


def replay_table(path: Path, mode: str | None, fraction: str | None, device_spec: str) -> tuple[str, bool]:
    """What a regime makes of a recorded trace (RMM-style CSV) on the model of the machine, as
    Markdown; and whether it fitted. The same replay as the plugin's and `devmem plot`'s."""
    if mode is None and fraction is None and tpu_spec(device_spec) is not None and not TRACE_REGIME.search(path.stem):
        mode = "compact"  # a TPU has one regime: its runtime's (the trace's name says none)
    policy, origin = regime_of_trace(path, mode, fraction)
    policy = tpu_replay_policy(device_spec, policy, mode, fraction)
    trace = on_chips(read_trace(path), device_spec)
    spec, setups = machine(device_spec, policy, unnamed_device(trace))
    run = run_machine(trace, setups, spec)
    asked = "peak_live_bytes (asked" + (", all devices together)" if len(run.devices) > 1 else ")")
    peak_live = trace.peak_live_bytes()
    rows = [("events", str(run.events), ""), (asked, str(peak_live), format_size(peak_live))]
    for figures in run.devices:
        where = f" on {figures.device}" if len(run.devices) > 1 else ""
        rows += [
            (f"peak_bytes_in_use{where}", str(figures.peak_bytes_in_use), format_size(figures.peak_bytes_in_use)),
            (f"peak_bytes_reserved{where}", str(figures.peak_bytes_reserved), format_size(figures.peak_bytes_reserved)),
            (f"fragmentation{where}", "n/a" if figures.fragmentation is None else f"{figures.fragmentation:.4f}", ""),
        ]
        for allocator in figures.allocators:
            rows.append(
                (
                    f"{allocator.name}{where}: peak in use, held",
                    f"{allocator.peak_bytes_in_use}, {allocator.peak_bytes_reserved}",
                    f"{format_size(allocator.peak_bytes_in_use)}, {format_size(allocator.peak_bytes_reserved)}",
                )
            )
    for source, share in sorted(run.by_source.items()):
        rows.append((f"{source}: peak live", str(share.peak_live_bytes), format_size(share.peak_live_bytes)))
    lines = [
        f"### Trace {markdown(str(path))} replayed under regime {markdown(policy.label)}{origin} on {markdown(spec.name)}",
        "",
        "| figure | value | readable |",
        "|---|---|---|",
    ]
    lines += [f"| {markdown(figure)} | {value} | {readable} |" for figure, value, readable in rows]
    if run.oom is not None:
        oom = run.oom.to_json()
        proven_fixes(trace, setups, spec, run, jax_fraction_variable()).record(oom)
        lines += [
            "",
            "```",
            *(terminal(line) for line in oom_lines(oom, [d.to_json() for d in run.devices], policy.label, spec.name)),
            "```",
        ]
    return "\n".join(lines) + "\n", run.oom is None
