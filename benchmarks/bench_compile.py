"""Compiles for a target: what the GPU sizer compiles, and what its disk cache spares a rerun.

    python -m benchmarks.bench_compile [--target H100-80GB] [--functions 6]

A small suite of jitted functions runs under the JAX capture with a GPU sizer (deviceless
XLA:GPU compiles, `capture/jax/gpu_compile.py`), twice, each time in a fresh process sharing one cache
directory (what pytest's cache directory is to a session, and to its xdist workers): the first
run compiles each executable for the target; the rerun of the unchanged suite should compile
nothing, every size read from the disk cache. Printed per run and target: compiles done, seconds
spent compiling, disk-cache answers. Needs XLA:GPU's compiler (`devmem compilers install`); without it
the benchmark says so. TPU targets are not sized here yet.
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

ROOT = Path(__file__).resolve().parents[1]


def run_suite(cache_dir: str, target: str, functions: int) -> dict[str, object]:
    """Run `functions` jitted functions (each its own executable) under the capture with a GPU
    sizer whose disk cache is `cache_dir`; the sizer's counts. Run it in a fresh process."""
    from pytest_devmem.capture.jax import compilers

    compilers.load("gpu")  # from the compilers' folder, before JAX imports the CUDA kernels' handlers
    import jax
    import jax.numpy as jnp

    from pytest_devmem.capture.jax import JaxCapture
    from pytest_devmem.capture.jax.gpu_compile import GpuSizer
    from pytest_devmem.capture.recorder import TraceRecorder
    from pytest_devmem.model.gpu_targets import gpu_spec

    problem = compilers.problem("gpu")
    if problem is not None:
        return {"problem": problem}
    sizer = GpuSizer(gpu_spec(target), cache_dir)
    recorder = TraceRecorder()
    capture = JaxCapture(recorder, sizer)
    if not capture.install():
        return {"problem": capture.note}
    if not sizer.installed:
        return {"problem": sizer.note}
    recorder.begin()
    capture.begin()
    started = time.perf_counter()
    x = jnp.ones((256, 256), jnp.float32)
    for power in range(1, functions + 1):
        step = jax.jit(lambda value, power=power: jnp.tanh(value @ value) ** power + value.sum(axis=0))
        step(x).block_until_ready()
    seconds = time.perf_counter() - started
    recorder.end()
    capture.uninstall()
    return {
        "target": sizer.target,
        "compiles": sizer.compiles,
        "compile_seconds": sizer.compile_seconds,
        "disk_hits": sizer.disk_hits,
        "session_hits": sizer.session_hits,
        "seconds": seconds,
    }


def run_in_fresh_process(cache_dir: str, target: str, functions: int) -> dict[str, object]:
    code = f"import json; from benchmarks.bench_compile import run_suite; print('RESULT', json.dumps(run_suite({cache_dir!r}, {target!r}, {functions})))"
    environment = dict(os.environ, JAX_PLATFORMS="cpu")
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=environment, check=False
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        return {"problem": f"the run failed: {(result.stderr or result.stdout).strip().splitlines()[-1:]}"}
    return json.loads(lines[-1][len("RESULT ") :])  # type: ignore[no-any-return]


def figures(target: str, functions: int) -> list[tuple[str, dict[str, object]]]:
    """(run, its counts) for a first run and a rerun sharing one cache directory."""
    with tempfile.TemporaryDirectory(prefix="devmem-compile-") as cache_dir:
        first = run_in_fresh_process(cache_dir, target, functions)
        if "problem" in first:
            return [("first run", first)]
        return [("first run", first), ("rerun, same cache", run_in_fresh_process(cache_dir, target, functions))]


def describe(counts: dict[str, object]) -> str:
    if "problem" in counts:
        return f"not measured: {counts['problem']}"
    return (
        f"{counts['compiles']} compiled in {float(counts['compile_seconds']):.2f} s, {counts['disk_hits']} from the disk cache, "  # type: ignore[arg-type]
        f"{counts['session_hits']} from the session's cache"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="H100-80GB", help="GPU preset to compile for (default H100-80GB)")
    parser.add_argument("--functions", type=int, default=6, help="Jitted functions in the suite (default 6)")
    args = parser.parse_args(argv)
    print(
        f"deviceless compiles for {args.target}, {args.functions} executables, two fresh processes sharing one cache directory"
    )
    for run, counts in figures(args.target, args.functions):
        print(f"  {run:<18} {describe(counts)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
