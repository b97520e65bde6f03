"""Print the table of docs/tpu.md: what the CPU, an H100 and each TPU generation's compiler say an
attention step and small arrays take, on this machine without a GPU or TPU.

    python scripts/tpu_figures.py [--hbm]
    python scripts/tpu_figures.py --presets

Each figure is the compiler's own (memory analysis of a deviceless compile through pytest-devmem's
GPU and TPU targets); a column whose compiler is not installed says so. `--hbm` adds the HBM each
TPU compiler says is available (the figure in its refusal of a program too large for the chip)
beside the presets' own. `--presets` prints docs/tpu.md's table of the presets (no compiler needed;
tests/project/test_docs.py checks the page holds it).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from typing import Any

MiB = 2**20


def attention(q: Any, k: Any, v: Any) -> Any:
    import jax
    import jax.numpy as jnp

    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / 8.0
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)


def compiled(
    function: Callable[..., Any],
    devices: list[Any],
    shape: tuple[int, ...],
    dtype: Any,
    arguments: int,
    shard: bool = False,
) -> Any:
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    sharding = NamedSharding(Mesh(np.array(devices), ("x",)), PartitionSpec("x") if shard else PartitionSpec())
    argument = jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)
    return jax.jit(function).lower(*[argument] * arguments).compile().memory_analysis()


def targets() -> dict[str, Callable[[int], list[Any]] | str]:
    """Column name -> devices of that target for N chips, or why it is not available here."""
    import jax

    from pytest_devmem.capture.jax import compilers
    from pytest_devmem.capture.jax.gpu_compile import GpuSizer
    from pytest_devmem.capture.jax.tpu_compile import TpuSizer
    from pytest_devmem.model.gpu_targets import GPU_SPECS
    from pytest_devmem.model.tpu_targets import TPU_SPECS

    found: dict[str, Callable[[int], list[Any]] | str] = {"CPU": lambda n: jax.devices("cpu")[:n]}
    problem = compilers.problem("gpu")
    found["H100"] = problem or GpuSizer(GPU_SPECS["H100-80GB"])._target_devices
    for preset in ("TPU-v5e", "TPU-v5p", "TPU-v4", "TPU-v6e"):
        problem = compilers.problem("tpu")
        found[preset.removeprefix("TPU-")] = problem or TpuSizer(TPU_SPECS[preset])._target_devices
    return found


def figure(target: Callable[[int], list[Any]] | str, measure: Callable[[Callable[[int], list[Any]]], int]) -> str:
    if isinstance(target, str):
        return "n/a"
    try:
        return format(measure(target), ",") + " B"
    except Exception as exc:  # a compile this target refuses: say which
        return f"({type(exc).__name__})"


def quiet_start() -> None:
    """What the plugin does before JAX starts on a machine without a GPU or TPU: the compilers loaded
    from their folder (`devmem compilers install`), and the CUDA plugin's and libtpu's start-up
    without tracebacks or warnings (see docs/tpu.md)."""
    import os

    from pytest_devmem.capture.jax import compilers

    for platform in compilers.PLATFORMS:
        compilers.load(platform)
    from pytest_devmem.capture.jax.cuda_plugin import environment_for_deviceless_compile
    from pytest_devmem.capture.jax.tpu_plugin import environment_for_libtpu

    os.environ.update(environment_for_libtpu(os.environ))
    if compilers.problem("gpu") is None:
        os.environ.update(environment_for_deviceless_compile(os.environ, gpu_present=False))


def mib(value: str) -> str:
    if value == "0 B":
        return value
    if value.endswith(" B") and value[:-2].replace(",", "").isdigit():
        return f"{int(value[:-2].replace(',', '')) / MiB:.2f} MiB"
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hbm", action="store_true", help="also the HBM each TPU compiler says is available")
    parser.add_argument("--presets", action="store_true", help="only docs/tpu.md's table of the presets")
    args = parser.parse_args(argv)
    if args.presets:
        print(presets_table())
        return 0
    quiet_start()
    import jax.numpy as jnp

    from pytest_devmem.capture.jax.tpu_plugin import quiet_libtpu

    with quiet_libtpu():
        columns = targets()
        rows: list[tuple[str, dict[str, str]]] = []
        b2 = (2, 16, 1024, 64)
        rows.append(
            (
                "attention f32 b2 h16 s1024 d64, temp",
                {
                    n: mib(figure(t, lambda d: compiled(attention, d(1), b2, jnp.float32, 3).temp_size_in_bytes))
                    for n, t in columns.items()
                },
            )
        )
        sharded = {n: "" for n in columns}
        sharded["v5e"] = mib(
            figure(
                columns["v5e"],
                lambda d: compiled(attention, d(4), (8, 16, 1024, 64), jnp.float32, 3, shard=True).temp_size_in_bytes,
            )
        )
        rows.append(("same at b8 sharded over 4 chips (v5e 2x2), temp per chip", sharded))
        rows.append(
            (
                "`x + 1` on f32[8,3] (96 B in numpy), argument",
                {
                    n: figure(
                        t, lambda d: compiled(lambda x: x + 1, d(1), (8, 3), jnp.float32, 1).argument_size_in_bytes
                    )
                    for n, t in columns.items()
                    if n != "H100"
                }
                | {"H100": ""},
            )
        )
        bf16 = {n: "" for n in columns}
        bf16["v5e"] = figure(
            columns["v5e"],
            lambda d: compiled(lambda x: x + 1, d(1), (1000, 1000), jnp.bfloat16, 1).argument_size_in_bytes,
        )
        rows.append(("bf16[1000,1000] (2,000,000 B), argument", bf16))
        names = list(columns)
        print("| executable | " + " | ".join("TPU " + n if n[0] == "v" else n for n in names) + " |")
        print("| --- | " + " | ".join("---" for _ in names) + " |")
        for label, values in rows:
            print(f"| {label} | " + " | ".join(values.get(n, "") for n in names) + " |")
        if args.hbm:
            print()
            print(hbm_table())
    return 0


def presets_table() -> str:
    """docs/tpu.md's table of the TPU presets, from the presets themselves."""
    from pytest_devmem.model.tpu_targets import TPU_SPECS

    lines = [
        "| preset | HBM per chip (data sheet) | JAX devices per chip (a TPU VM's `jax.devices()`) "
        '| usable per device (the compiler\'s "available HBM") |',
        "| --- | --- | --- | --- |",
    ]
    for name, spec in TPU_SPECS.items():
        per_chip = f"{spec.devices_per_chip} (megacore)" if spec.megacore else str(spec.devices_per_chip)
        lines.append(f"| `sim:{name}` | {spec.hbm_per_chip // 2**30} GiB | {per_chip} | {spec.usable_text} |")
    return "\n".join(lines)


def hbm_table() -> str:
    """Per TPU preset: the data sheet's HBM, and what the installed compiler says is available."""
    import importlib.metadata

    import jax
    import jax.numpy as jnp
    from jax.sharding import SingleDeviceSharding

    from pytest_devmem.capture.jax.tpu_compile import TpuSizer
    from pytest_devmem.model.tpu_targets import TPU_SPECS

    lines = [
        f"| preset | HBM per chip (data sheet) | JAX devices per chip | available HBM per device (libtpu {importlib.metadata.version('libtpu')}) | pytest-devmem's table |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, spec in TPU_SPECS.items():
        chip = TpuSizer(spec)._target_devices(1)[0]
        too_big = jax.ShapeDtypeStruct(
            (spec.hbm_per_chip // 4 // 1024, 1024), jnp.float32, sharding=SingleDeviceSharding(chip)
        )
        try:
            jax.jit(lambda x: x + 1).lower(too_big).compile()
            stated = "(compiled: no refusal)"
        except Exception as exc:
            match = re.search(r"available HBM \(([\d.]+G)\)", str(exc))
            stated = match.group(1) if match else f"({type(exc).__name__})"
        per_chip = f"{spec.devices_per_chip} (megacore)" if spec.megacore else str(spec.devices_per_chip)
        lines.append(f"| sim:{name} | {spec.hbm_per_chip // 2**30} GiB | {per_chip} | {stated} | {spec.usable_text} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
