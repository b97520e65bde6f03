"""Whose compile sizes JAX's executables: a sim: GPU preset is sized as that GPU (a deviceless compile),
`cpu` keeps the CPU's, and the device class says which, so baselines of one compile's sizes are never
compared with another's."""

from __future__ import annotations

import json

import pytest
from compilers import needs_compiler

from pytest_devmem.hardware.devices import open_device
from pytest_devmem.options import parse_compile_target
from pytest_devmem.plugin.compile_target import resolve
from pytest_devmem.units import GiB, MiB

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


def test_on_a_real_gpu_its_own_compile_sizes_and_a_target_set_for_simulated_devices_says_it_is_unused() -> None:
    """Measured on an H200: JAX's own compile sizes the executables of a real GPU whatever the setting
    (a team's ini may name a target for its CPU-only runners); the note says the setting was not used."""
    from pytest_devmem.hardware.devices import CudaDevice

    class OneGpu:  # the CUDA driver's few calls, for an H200 (faked: no GPU here)
        def device_count(self) -> int:
            return 1

        def device_name(self, index: int) -> str:
            return "NVIDIA H200"

        def mem_get_info(self, index: int) -> tuple[int, int]:
            return 140 * 2**30, 141 * 2**30

        def compute_capability(self, index: int) -> tuple[int, int]:
            return (9, 0)

        def device_uuid(self, index: int) -> str | None:
            return None

    gpu = CudaDevice(0, driver=OneGpu())  # type: ignore[arg-type]
    assert resolve(None, gpu, None).note == "JAX compiles for the real GPU: its own sizes"
    target = resolve("H100-80GB", gpu, None)
    assert (target.label, target.class_suffix) == ("native", "")
    assert "--devmem-compile-target=H100-80GB sizes simulated devices only" in target.note


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


@needs_compiler
def test_the_summary_names_the_tests_whose_executables_kept_the_cpu_sizes(
    jax_loaded: object, pytester: pytest.Pytester
) -> None:
    """A session sized for a GPU says, beside whose compile sized JAX, which tests ran executables that
    compile could not size (here a host callback): their figures are partly the CPU's."""
    pytester.makepyfile(
        test_callback="""
        import jax
        import jax.numpy as jnp

        def test_noisy():
            jax.jit(lambda x: jax.debug.print("sum {}", x.sum()) or x * 2)(jnp.ones(4)).block_until_ready()

        def test_quiet():
            jax.jit(lambda x: x * 3)(jnp.ones(4)).block_until_ready()
        """
    )
    result = pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-device=sim:H100-80GB")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["JAX sizes: 1 test(s) ran executables that kept the CPU compile's sizes (*): test_callback.py::test_noisy"]
    )


@pytest.mark.gpu
@needs_compiler
def test_real_gpu_native_compile_and_the_deviceless_compile_for_its_preset_size_alike(
    pytester: pytest.Pytester,
) -> None:
    """On a GPU whose name is a preset's, the attention step's peak from JAX's own compile on the GPU
    (native) and from what a CPU-only CI records for that preset (JAX on the CPU, sized by the
    deviceless compile) agree within 10%. XLA:GPU's autotuner is off in both: a deviceless compile
    cannot autotune, and on the GPU autotuning may pick kernels with another workspace."""
    import jax

    from pytest_devmem.model.gpu_targets import GPU_SPECS

    kind = jax.devices()[0].device_kind
    presets = [name for name, spec in GPU_SPECS.items() if spec.description == kind]
    if jax.default_backend() != "gpu" or not presets:
        pytest.skip(f"no preset describes this device ({kind!r} on {jax.default_backend()})")
    pytester.makepyfile(test_attention=ATTENTION)
    runs = {"native": ("cuda:0", {}), "deviceless": (f"sim:{presets[0]}", {"JAX_PLATFORMS": "cpu"})}
    records = {}
    for name, (device, environment) in runs.items():
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("XLA_FLAGS", "--xla_gpu_autotune_level=0")
            for key, value in environment.items():
                patch.setenv(key, value)
            result = pytester.runpytest_subprocess(
                "--devmem-mode=prealloc", f"--devmem-device={device}", f"--devmem-report={name}.json"
            )
        result.assert_outcomes(passed=1)
        records[name] = json.loads((pytester.path / f"{name}.json").read_text())["records"][0]
    assert records["native"]["compile_target"] == "native"
    assert records["deviceless"]["compile_target"] == presets[0]  # sized by the deviceless compile, not the CPU's
    native, deviceless = (records[name]["peak_bytes_in_use"] for name in ("native", "deviceless"))
    assert abs(native - deviceless) <= 0.1 * native, (native, deviceless)


def test_baselines_under_another_targets_sizes_are_read_back_by_the_next_session(pytester: pytest.Pytester) -> None:
    """`--devmem-compile-target=TPU-v5p` on sim:16GiB writes the class sim-16GiB-TPU-v5p-sizes; a device
    class checked against its device (hostile inputs, round five) still takes that suffix."""
    from pytest_devmem.model.device import device_class_problem

    pytester.makepyfile("def test_a(devmem):\n    devmem.pool.free(devmem.pool.alloc(2**20))\n")
    options = ["--devmem-mode=ondemand", "--devmem-compile-target=TPU-v5p", "-p", "no:cacheprovider"]
    pytester.runpytest_subprocess(*options, "--devmem-update").assert_outcomes(passed=1)
    assert [path.name for path in (pytester.path / "baselines").iterdir()] == ["sim-16GiB-TPU-v5p-sizes"]
    again = pytester.runpytest_subprocess(*options)
    again.assert_outcomes(passed=1)
    again.stdout.fnmatch_lines(["*1 ok*"])
    assert device_class_problem("sim-16GiB-H100-80GB-sizes-onednn", "sim:16GiB") is None
    assert device_class_problem("sim-16GiB-evil-sizes", "sim:16GiB") is not None
