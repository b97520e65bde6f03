"""Whose compile sizes JAX's executables: a sim: GPU preset is sized as that GPU (a deviceless compile),
`cpu` keeps the CPU's, and the device class says which, so baselines of one compile's sizes are never
compared with another's."""

from __future__ import annotations

import json

import pytest

from pytest_devmem.capture.jax.gpu_compile import cuda_compiler_problem
from pytest_devmem.hardware.devices import open_device
from pytest_devmem.plugin.compile_target import parse_compile_target, resolve
from pytest_devmem.units import GiB, MiB

needs_compiler = pytest.mark.skipif(
    cuda_compiler_problem() is not None, reason=f"needs the gpu-compile extra: {cuda_compiler_problem()}"
)

ATTENTION = """
import jax
import jax.numpy as jnp

@jax.jit
def attention(q, k, v):
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / 8.0
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)

def test_attention_step():
    q = jnp.ones((8, 16, 1024, 64), dtype=jnp.float32)  # batch 8, 16 heads, 1024 tokens, head dim 64
    attention(q, q, q).block_until_ready()
"""


@pytest.mark.parametrize(
    ("setting", "device", "problem", "label", "suffix"),
    [
        (None, "sim:H100-80GB", None, "H100-80GB", ""),
        ("cpu", "sim:H100-80GB", None, "cpu", "-cpu-sizes"),
        (None, "sim:16GiB", None, "cpu", ""),  # a capacity names no GPU
        ("T4", "sim:16GiB", None, "T4", "-T4-sizes"),
        ("A100-40GB", "sim:H100-80GB", None, "A100-40GB", "-A100-40GB-sizes"),
        (
            None,
            "sim:H100-80GB",
            "the CUDA compiler for JAX is not installed",
            "cpu",
            "-cpu-sizes",
        ),  # never GPU sizes claimed
    ],
)
def test_the_target_and_the_device_class_it_gives(
    setting: str | None, device: str, problem: str | None, label: str, suffix: str
) -> None:
    target = resolve(setting, open_device(device), problem)
    assert (target.label, target.class_suffix) == (label, suffix)
    if problem:
        assert problem in target.note


@pytest.mark.parametrize("value", ["gpu", "H100", "", "auto;cpu"])
def test_a_bad_target_names_the_choices(value: str) -> None:
    with pytest.raises(ValueError, match="allowed are auto, cpu, H100-80GB"):
        parse_compile_target(value)


def test_a_bad_target_option_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_inprocess("--devmem-compile-target=V100")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        "invalid devmem compile target 'V100'" in result.stderr.str()
        and "(from --devmem-compile-target)" in result.stderr.str()
    )


@needs_compiler
def test_an_attention_step_is_sized_as_an_h100_sizes_it_and_cpu_keeps_the_cpu_figure(
    jax_loaded: object, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(test_attention=ATTENTION)
    pytester.runpytest_inprocess(
        "--devmem-mode=prealloc", "--devmem-device=sim:H100-80GB", "--devmem-report=gpu.json"
    ).assert_outcomes(passed=1)
    pytester.runpytest_inprocess(
        "--devmem-mode=prealloc",
        "--devmem-device=sim:H100-80GB",
        "--devmem-compile-target=cpu",
        "--devmem-report=cpu.json",
    ).assert_outcomes(passed=1)
    gpu = json.loads((pytester.path / "gpu.json").read_text())
    cpu = json.loads((pytester.path / "cpu.json").read_text())
    on_gpu, on_cpu = gpu["records"][0], cpu["records"][0]
    step = on_gpu["trace"]["executables"]["jit(attention)"]
    # XLA:GPU keeps the 8x16x1024x1024 scores: 1 GiB of temp; XLA:CPU fuses them away
    assert step["temp_bytes"] == GiB and step["cpu_temp_bytes"] == 0 and step["sized_for"] == "H100-80GB"
    assert on_gpu["peak_bytes_in_use"] >= GiB + 64 * MiB and on_gpu["compile_target"] == "H100-80GB"
    assert on_cpu["peak_bytes_in_use"] == 64 * MiB and on_cpu["compile_target"] == "cpu"
    assert gpu["session"]["compile_target"]["target"] == "H100-80GB"
    assert (on_gpu["device_class"], on_cpu["device_class"]) == (
        "sim-H100-80GB",
        "sim-H100-80GB-cpu-sizes",
    )  # never compared with each other


@pytest.mark.gpu
@needs_compiler
def test_real_gpu_native_compile_and_the_deviceless_compile_for_its_preset_size_alike(
    pytester: pytest.Pytester,
) -> None:
    """On a GPU whose name is a preset's, the attention step's peak from JAX's own compile (native) and
    from the deviceless compile for that preset (what a CPU-only CI gets) agree within 10%."""
    import jax

    from pytest_devmem.model.gpu_targets import GPU_SPECS

    kind = jax.devices()[0].device_kind
    presets = [name for name, spec in GPU_SPECS.items() if spec.description == kind]
    if jax.default_backend() != "gpu" or not presets:
        pytest.skip(f"no preset describes this device ({kind!r} on {jax.default_backend()})")
    pytester.makepyfile(test_attention=ATTENTION)
    peaks = {}
    for target in ("auto", presets[0]):
        result = pytester.runpytest_subprocess(
            "--devmem-mode=prealloc",
            "--devmem-device=cuda:0",
            f"--devmem-compile-target={target}",
            f"--devmem-report={target}.json",
        )
        result.assert_outcomes(passed=1)
        record = json.loads((pytester.path / f"{target}.json").read_text())["records"][0]
        peaks[target] = record["peak_bytes_in_use"]
    native, deviceless = peaks["auto"], peaks[presets[0]]
    assert abs(native - deviceless) <= 0.1 * native, peaks
