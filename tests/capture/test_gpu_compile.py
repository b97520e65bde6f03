"""GPU targets for the presets, and JAX executables compiled for them without a GPU.

The tests that compile need XLA:GPU's compiler (jax-cuda12-pjrt, jax-cuda12-plugin,
nvidia-cuda-nvcc-cu12: `devmem compilers install`); where it is missing they are skipped with the reason. JAX runs on the CPU
throughout, as on a CPU-only CI machine.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from compilers import GPU_COMPILER_PROBLEM, executable_of, needs_compiler

from pytest_devmem.capture.jax import cuda_plugin, lowering
from pytest_devmem.capture.jax.gpu_compile import GpuSizer
from pytest_devmem.capture.jax.sizes import ExecutableSizes, Unavailable
from pytest_devmem.errors import InvalidSettingError
from pytest_devmem.model.device import DEFAULT_COMPUTE_CAPABILITY, PRESETS
from pytest_devmem.model.gpu_targets import CAPABILITY_LIMITS, DEFAULT_TARGET, GPU_SPECS, gpu_spec
from pytest_devmem.units import GiB, MiB

# -- the targets: pure data -----------------------------------------------------------------


def test_every_preset_has_a_gpu_target_with_the_presets_memory_and_capability() -> None:
    assert set(GPU_SPECS) == set(PRESETS)
    for name, spec in GPU_SPECS.items():
        assert (spec.memory_bytes, spec.compute_capability) == PRESETS[name]
        assert spec.compute_capability in CAPABILITY_LIMITS


@pytest.mark.parametrize("preset", sorted(GPU_SPECS))
def test_target_config_is_the_gpu_target_config_proto_text(preset: str) -> None:
    spec = GPU_SPECS[preset]
    text = spec.target_config()
    major, minor = spec.compute_capability
    assert text.startswith("gpu_device_info {\n")
    assert f"  core_count: {spec.sm_count}\n" in text
    assert f"  device_memory_size: {spec.memory_bytes}\n" in text
    assert f"  cuda_compute_capability {{ major: {major} minor: {minor} }}\n" in text
    assert f"  shared_memory_per_core: {spec.limits.shared_memory_per_sm}\n" in text
    assert 'platform_name: "CUDA"\n' in text
    assert f'device_description_str: "{spec.description}"' in text
    assert spec.limits.shared_memory_per_block_optin <= spec.limits.shared_memory_per_sm


def test_sim_size_compiles_for_the_default_gpu_with_its_own_memory() -> None:
    spec = gpu_spec(None, 24 * GiB)
    assert spec.preset == DEFAULT_TARGET
    assert spec.compute_capability == DEFAULT_COMPUTE_CAPABILITY  # what a sim:SIZE device already models
    assert spec.memory_bytes == 24 * GiB
    assert f"device_memory_size: {24 * GiB}" in spec.target_config()


def test_gpu_spec_takes_a_preset_in_any_case_and_names_the_allowed_ones() -> None:
    assert gpu_spec("h100-80gb") is GPU_SPECS["H100-80GB"]
    with pytest.raises(InvalidSettingError, match=r"unknown GPU 'B200': allowed are H100-80GB, .*T4"):
        gpu_spec("B200")
    with pytest.raises(InvalidSettingError, match="invalid memory size 0 for T4"):
        GPU_SPECS["T4"].with_memory(0)


def test_targets_and_sizer_import_no_framework() -> None:
    code = (
        "import sys; import pytest_devmem.model.gpu_targets, pytest_devmem.capture.jax.gpu_compile; "
        "heavy = {'pytest', 'jax', 'jaxlib', 'tensorflow', 'numpy'} & set(sys.modules); print(sorted(heavy))"
    )
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert output.strip() == "[]"


# -- without the compiler ---------------------------------------------------------------------


@pytest.mark.skipif(GPU_COMPILER_PROBLEM is None, reason="XLA:GPU's compiler is installed here")
def test_without_the_compiler_the_sizer_says_how_to_install_it(jax_loaded: Any) -> None:
    sizer = GpuSizer(gpu_spec("H100-80GB"))
    assert not sizer.install()
    assert "devmem compilers install" in sizer.note
    assert sizer.sizes_for(object()) == Unavailable(sizer.note)
    assert cuda_plugin.environment_for_deviceless_compile({}, gpu_present=False) == {}


@needs_compiler
def test_environment_lets_the_plugin_register_only_where_nobody_chose() -> None:
    assert cuda_plugin.environment_for_deviceless_compile({}, gpu_present=False) == {
        "JAX_SKIP_CUDA_CONSTRAINTS_CHECK": "1"
    }
    assert cuda_plugin.environment_for_deviceless_compile({"JAX_PLATFORMS": "cpu"}, gpu_present=False) == {}
    assert cuda_plugin.environment_for_deviceless_compile({}, gpu_present=True) == {}


# -- compiling for a GPU ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def h100(jax_loaded: Any) -> Iterator[GpuSizer]:
    sizer = GpuSizer(gpu_spec("H100-80GB"))
    assert sizer.install(), sizer.note
    yield sizer
    sizer.uninstall()


def cpu_temp(executable: Any) -> int:
    return int(executable.xla_executable.get_compiled_memory_stats().temp_size_in_bytes)


def attention(q: Any, k: Any, v: Any) -> Any:
    import jax
    import jax.numpy as jnp

    weights = jax.nn.softmax(jnp.einsum("bhqd,bhkd->bhqk", q, k) / 8.0, axis=-1)
    return jnp.einsum("bhqk,bhkd->bhqd", weights, v)


def mlp_loss(params: tuple[Any, Any], x: Any) -> Any:
    import jax.numpy as jnp

    w1, w2 = params
    return jnp.sum(jnp.tanh(x @ w1) @ w2)


@pytest.mark.slow  # 5-16 s: deviceless XLA:GPU compiles
@needs_compiler
def test_attention_has_no_temporary_on_cpu_and_1GiB_on_an_h100(h100: GpuSizer) -> None:
    import jax.numpy as jnp

    q = jnp.ones((8, 16, 1024, 64), jnp.float32)  # batch 8, 16 heads, 1024 tokens, head dim 64
    executable = executable_of(attention, q, q, q)
    sizes = h100.sizes_for(executable)
    assert isinstance(sizes, ExecutableSizes), sizes
    assert cpu_temp(executable) == 0
    assert sizes.temp_bytes == 1 * GiB  # the 8x16x1024x1024 float32 attention weights
    assert (sizes.target, sizes.devices, sizes.source) == ("H100-80GB", 1, "compiled")
    assert (sizes.output_bytes, sizes.argument_bytes) == (32 * MiB, 96 * MiB)
    assert h100.sizes_for(executable) is sizes  # once per executable


@pytest.mark.slow  # 5-16 s: deviceless XLA:GPU compiles
@needs_compiler
def test_mlp_gradient_needs_32MiB_on_cpu_and_16MiB_on_an_h100(h100: GpuSizer) -> None:
    import jax
    import jax.numpy as jnp

    w = jnp.full((4096, 4096), 0.01, jnp.float32)
    executable = executable_of(jax.grad(mlp_loss), (w, w), jnp.ones((1024, 4096), jnp.float32))
    sizes = h100.sizes_for(executable)
    assert isinstance(sizes, ExecutableSizes), sizes
    assert (cpu_temp(executable), sizes.temp_bytes) == (32 * MiB, 16 * MiB)


@needs_compiler
def test_a_host_callback_keeps_its_cpu_sizes_with_the_reason(h100: GpuSizer) -> None:
    import jax
    import jax.numpy as jnp

    def noisy(x: Any) -> Any:
        jax.debug.print("sum {}", x.sum())
        return x * 2

    result = h100.sizes_for(executable_of(noisy, jnp.ones(4)))
    assert isinstance(result, Unavailable)
    assert "calls back to Python" in result.reason and "Unknown backend: 'gpu'" in result.reason


@needs_compiler
def test_an_executable_not_lowered_by_jit_is_unavailable(h100: GpuSizer) -> None:
    class Executable:  # what the capture would pass for an executable JAX built elsewhere
        pass

    result = h100.sizes_for(Executable())
    assert isinstance(result, Unavailable) and "outside jit's lowering" in result.reason


@needs_compiler
def test_the_sizer_compiles_nothing_the_test_would_count(h100: GpuSizer) -> None:
    import jax
    import jax.numpy as jnp

    events: list[bool] = []

    def listen(event: str, duration_secs: float, **details: str | int) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            events.append(lowering.compiling_for_target())

    x = jnp.ones(8)
    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        h100.sizes_for(executable_of(lambda x: jnp.sin(x) * 3, x))
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert events == [False, True]  # the CPU compile is the test's; the GPU compile is marked


@needs_compiler
def test_retargeted_compiles_stay_out_of_jaxs_persistent_cache(h100: GpuSizer) -> None:
    from jax._src import compiler

    from pytest_devmem.capture.jax import lowering as jax_lowering

    with jax_lowering.retargeting():  # a compile-only executable stored there fails to load next run
        get_cache_key: Any = compiler._get_cache_key
        assert get_cache_key(None, None, None, None) is None


@needs_compiler
def test_disk_cache_answers_a_second_run_with_the_same_sizes(jax_loaded: Any, tmp_path: Path) -> None:
    import jax.numpy as jnp

    executable = executable_of(lambda a, b: jnp.tanh(a @ b), jnp.ones((512, 512)), jnp.ones((512, 512)))
    first, second = (
        GpuSizer(gpu_spec("A100-80GB"), cache_dir=tmp_path),
        GpuSizer(gpu_spec("A100-80GB"), cache_dir=tmp_path),
    )
    try:
        assert first.install() and second.install()
        compiled, cached = first.sizes_for(executable), second.sizes_for(executable)
    finally:
        first.uninstall()
        second.uninstall()
    assert isinstance(compiled, ExecutableSizes) and isinstance(cached, ExecutableSizes)
    assert (compiled.source, cached.source, second.compiles, second.disk_hits) == ("compiled", "disk cache", 0, 1)
    assert cached.temp_bytes == compiled.temp_bytes and cached.output_bytes == compiled.output_bytes
    assert len(list(tmp_path.glob("*.json"))) == 1


@needs_compiler
def test_a_second_executable_of_the_same_module_compiles_nothing_without_a_cache_directory(jax_loaded: Any) -> None:
    import jax.numpy as jnp

    def step(a: Any, b: Any) -> Any:
        return jnp.tanh(a @ b) * 3

    sizer = GpuSizer(gpu_spec("A100-80GB"))  # no cache directory (pytest -p no:cacheprovider)
    try:
        assert sizer.install()  # before the executables are built: the sizer learns how each was lowered
        first = executable_of(step, jnp.ones((256, 256)), jnp.ones((256, 256)))
        again = executable_of(
            lambda a, b: jnp.tanh(a @ b) * 3, jnp.ones((256, 256)), jnp.ones((256, 256))
        )  # another jit: another executable
        assert again is not first
        compiled, reused = sizer.sizes_for(first), sizer.sizes_for(again)
    finally:
        sizer.uninstall()
    assert isinstance(compiled, ExecutableSizes) and isinstance(reused, ExecutableSizes)
    assert (compiled.source, reused.source, reused.compile_seconds) == ("compiled", "cache", 0.0)
    assert dataclasses.replace(reused, source="compiled", compile_seconds=compiled.compile_seconds) == compiled
    assert (sizer.compiles, sizer.session_hits, sizer.disk_hits) == (1, 1, 0)


@needs_compiler
@pytest.mark.parametrize("preset", sorted(GPU_SPECS))
def test_xla_compiles_for_every_preset(jax_loaded: Any, preset: str) -> None:
    import jax.numpy as jnp

    q = jnp.ones((1, 2, 128, 64), jnp.float32)
    sizer = GpuSizer(gpu_spec(preset))
    try:
        assert sizer.install()
        sizes = sizer.sizes_for(executable_of(attention, q, q, q))
    finally:
        sizer.uninstall()
    assert isinstance(sizes, ExecutableSizes), sizes
    assert sizes.target == preset and sizes.temp_bytes >= 1 * 2 * 128 * 128 * 4  # the weights, at least


SHARDED_SCRIPT = textwrap.dedent(
    """
    import json, jax, jax.numpy as jnp, numpy as np
    from jax._src.interpreters import pxla
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from pytest_devmem.capture.jax.gpu_compile import GpuSizer
    from pytest_devmem.model.gpu_targets import gpu_spec

    sizer = GpuSizer(gpu_spec("H100-80GB"))
    assert sizer.install(), sizer.note
    runs = []
    original = pxla.ExecuteReplicated.__call__
    pxla.ExecuteReplicated.__call__ = lambda self, *a: (runs.append(self), original(self, *a))[1]
    mesh = Mesh(np.array(jax.devices()).reshape(2, 2), ("data", "model"))

    def loss(params, x):
        w1, w2 = params
        h = jax.lax.with_sharding_constraint(jnp.tanh(x @ w1), NamedSharding(mesh, P("data", "model")))
        return jnp.sum(h @ w2)

    w1 = jax.device_put(jnp.full((4096, 4096), 0.01), NamedSharding(mesh, P(None, "model")))
    w2 = jax.device_put(jnp.full((4096, 4096), 0.01), NamedSharding(mesh, P("model", None)))
    x = jax.device_put(jnp.ones((1024, 4096)), NamedSharding(mesh, P("data", None)))
    jax.block_until_ready(jax.jit(jax.grad(loss))((w1, w2), x))
    sizes = sizer.sizes_for(runs[-1])
    stats = runs[-1].xla_executable.get_compiled_memory_stats()
    print(json.dumps({"gpu": sizes.to_json() if hasattr(sizes, "to_json") else {"reason": sizes.reason},
                      "cpu_temp": stats.temp_size_in_bytes, "cpu_output": stats.output_size_in_bytes}))
    """
)


@pytest.mark.slow  # 5-16 s: deviceless XLA:GPU compiles
@needs_compiler
def test_a_sharded_executable_is_compiled_for_as_many_gpus(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
        "JAX_SKIP_CUDA_CONSTRAINTS_CHECK": "1",
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).parents[2]), env.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", SHARDED_SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    gpu = result["gpu"]
    assert gpu.get("devices") == 4, gpu
    # per device: half of each 64 MiB gradient (sharded over "model"), plus the output tuple's address table
    assert gpu["output_bytes"] == result["cpu_output"] == 64 * MiB + 2 * 8
    assert gpu["temp_bytes"] < result["cpu_temp"]
