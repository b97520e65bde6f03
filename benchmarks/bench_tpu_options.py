"""Would a compile option make libtpu's compiles cheaper and leave every size as it is? Measured on
the programs a suite really compiles for the TPU.

    python -m benchmarks.bench_tpu_options [--suite examples|optax|both] [--corpus DIR]
        [--option NAME=VALUE[,NAME=VALUE...]]...

The suites of benchmarks/bench_tpu.py run once under `sim:TPU-v5e` with the TPU sizer, which keeps
every program it compiles (benchmarks/tpu_corpus_plugin.py: the module JAX lowered for the TPU, its
compile options, its devices); `--corpus` takes a folder kept before instead. Each program is then
compiled again on libtpu's compile-only client, as it was and under each option set given, one after
the other (so drift hits all; the program as it was is compiled again last, to show what the order
alone does), and the table says the seconds each took in all and for how many
programs XLA:TPU's memory analysis (temp, argument, output and alias bytes: what the sizer takes)
differs from the program's own. An option could be adopted only where that count is 0 on every
suite; the generated code's size may differ (the sizer does not use it).

The options are JAX's compile options (`jax.jit(f).lower(x).compile(compiler_options)`): the effort
fields of XLA's ExecutableBuildOptions (`exec_time_optimization_effort`, `memory_fitting_effort`,
`optimization_level`, `memory_fitting_level`; openxla.org/xla/effort_levels) and any XLA or libtpu
flag libtpu takes as a compile option (it refuses an unknown name: "No such compile option").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .bench_tpu import COMMON, prepare

BUILD_OPTIONS = ("exec_time_optimization_effort", "memory_fitting_effort", "optimization_level", "memory_fitting_level")
DEFAULT_SETS = (
    "exec_time_optimization_effort=-1",
    "memory_fitting_effort=-1",
    "xla_jf_llo_level=2",
    "xla_jf_naive_bundle_packer=true,xla_jf_critical_path_scheduler=false,xla_jf_vliw_scheduler=false,xla_jf_vliw_fuel=0",
    "xla_tpu_verify_buffer_assignment=false,xla_tpu_enable_llo_linter=false,xla_tpu_check_llo_types=false",
)
"""Measured with libtpu 0.0.42.1 (docs/tpu.md#cost): the efforts cut the compile time and change
temps; the LLO backend's scheduling and packing and the checks do not cut it."""


def collect(suite: str, scratch: Path, corpus: Path) -> Path:
    """Runs `suite` once under sim:TPU-v5e, keeping every program the TPU sizer compiles in `corpus`."""
    directory, targets, options, title = prepare(suite, scratch, quick=False)
    environment = dict(os.environ)
    environment["DEVMEM_BENCH_TPU_CORPUS"] = str(corpus)
    root = str(Path(__file__).resolve().parent.parent)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, (root, environment.get("PYTHONPATH", ""))))
    command = [sys.executable, "-m", "pytest", *COMMON, "-p", "no:cacheprovider"]
    command += ["-p", "benchmarks.tpu_corpus_plugin", *options, *targets]
    completed = subprocess.run(command, capture_output=True, text=True, check=False, env=environment, cwd=directory)
    if completed.returncode != 0:
        raise SystemExit(f"{title} failed:\n{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}")
    return corpus


def parse_set(text: str) -> dict[str, str]:
    pairs = [part.split("=", 1) for part in text.split(",") if part]
    if any(len(pair) != 2 or not pair[0] for pair in pairs):
        raise SystemExit(f"--option {text!r}: expected NAME=VALUE[,NAME=VALUE...]")
    return dict(pairs)  # type: ignore[arg-type]


class Client:
    """libtpu's compile-only client for a TPU v5e, one topology per device count."""

    def __init__(self) -> None:
        from pytest_devmem.model.tpu_targets import TPU_SPECS

        self.spec = TPU_SPECS["TPU-v5e"]
        self.devices: dict[int, list[Any]] = {}

    def chips(self, count: int) -> list[Any]:
        if count not in self.devices:
            from jax.experimental import topologies  # type: ignore[import-not-found]

            from pytest_devmem.capture.jax.tpu_plugin import quiet_libtpu

            wanted = self.spec.topology_for(count)
            with quiet_libtpu():
                topology = topologies.get_topology_desc(topology_name=wanted.name, platform="tpu", **wanted.options())
            self.devices[count] = list(topology.devices)
        return self.devices[count]

    def compile(
        self, text: str, options: bytes, ids: list[int], overrides: dict[str, str]
    ) -> tuple[float, tuple[int, ...]]:
        """(seconds, (temp, argument, output, alias bytes)) of one compile of the module."""
        from jax._src.interpreters import mlir  # type: ignore[import-not-found]
        from jax._src.lib import xla_client  # type: ignore[import-not-found]
        from jax._src.lib.mlir import ir  # type: ignore[import-not-found]

        compile_options = xla_client.CompileOptions()
        compile_options.ParseFromString(options)
        build = compile_options.executable_build_options
        extra = list(compile_options.env_option_overrides)
        for name, value in overrides.items():
            if name in BUILD_OPTIONS:
                setattr(build, name, float(value) if "effort" in name else int(value))
            else:
                extra.append((name, value))
        compile_options.env_option_overrides = extra
        chips = {chip.id: chip for chip in self.chips(len(ids))}
        devices = xla_client.DeviceList(tuple(chips[i] for i in ids))
        with mlir.make_ir_context():
            module = ir.Module.parse(text)
            started = time.perf_counter()
            executable = chips[ids[0]].client.compile(
                module, executable_devices=devices, compile_options=compile_options
            )
            seconds = time.perf_counter() - started
        stats = executable.get_compiled_memory_stats()
        sizes = (
            stats.temp_size_in_bytes,
            stats.argument_size_in_bytes,
            stats.output_size_in_bytes,
            stats.alias_size_in_bytes,
        )
        return seconds, sizes


def measure(corpus: Path, sets: list[str]) -> None:
    client = Client()
    programs = sorted(corpus.glob("*.json"))
    again = "as compiled, again (last: what order alone does)"
    seconds = {name: 0.0 for name in ("as compiled", *sets, again)}
    differing = {name: 0 for name in sets}
    refused: dict[str, str] = {}
    for path in programs:
        ids = json.loads(path.read_text())["devices"]
        text, options = path.with_suffix(".mlir").read_text(), path.with_suffix(".options").read_bytes()
        own_seconds, own = client.compile(text, options, ids, {})
        seconds["as compiled"] += own_seconds
        for name in sets:
            try:
                taken, sizes = client.compile(text, options, ids, parse_set(name))
            except Exception as exc:  # noqa: BLE001  # libtpu refuses an option or fails on it: said, not raised
                refused.setdefault(name, str(exc).strip().splitlines()[0][:160])
                continue
            seconds[name] += taken
            differing[name] += sizes != own
        seconds[again] += client.compile(text, options, ids, {})[0]
    print(f"{len(programs)} programs ({corpus})")
    print(f"{'compile options':<60} {'seconds':>8} {'ratio':>6}  sizes differ in")
    for name, total in seconds.items():
        shown = name if len(name) <= 60 else name[:57] + "..."
        if name in refused:
            print(f"{shown:<60} refused by libtpu on some programs: {refused[name]}")
            continue
        ratio = total / seconds["as compiled"] if seconds["as compiled"] else 0.0
        tail = f"  {differing[name]} of {len(programs)}" if name in differing else ""
        print(f"{shown:<60} {total:>8.2f} {ratio:>5.2f}x{tail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", choices=("examples", "optax", "both"), default="examples")
    parser.add_argument(
        "--corpus",
        type=Path,
        help="A folder for the programs: those it holds are measured (kept by an earlier run); where it holds none, the suite's are kept in it",
    )
    parser.add_argument(
        "--option", action="append", default=[], help="NAME=VALUE[,NAME=VALUE...]: one set of options (repeatable)"
    )
    args = parser.parse_args(argv)
    from pytest_devmem.capture.jax import compilers  # imports no framework

    problem = compilers.load("tpu")  # libtpu from the compilers' folder, before JAX starts here
    if problem is not None:
        print(f"TPU compile options benchmark skipped: {problem}")
        return 0
    sets = args.option or list(DEFAULT_SETS)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # this process only compiles, on libtpu's compile-only client
    if args.corpus is not None and any(args.corpus.glob("*.json")):
        measure(args.corpus, sets)
        return 0
    with tempfile.TemporaryDirectory(prefix="devmem-bench-tpu-options-") as scratch:
        for suite in ("examples", "optax") if args.suite == "both" else (args.suite,):
            folder = args.corpus / suite if args.corpus is not None else Path(scratch) / f"corpus-{suite}"
            measure(collect(suite, Path(scratch), folder), sets)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
