"""TPU presets, and JAX executables and arrays sized by the TPU compiler without a TPU.

The tests that compile need libtpu (`devmem compilers install`); where it is missing they are skipped
with the reason. JAX runs on the CPU throughout, as on a CPU-only CI machine; the figures expected
are the installed TPU compiler's own, asked here directly.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest
from compilers import executable_of, needs_libtpu

from pytest_devmem.capture.jax.sizes import parse_refusal
from pytest_devmem.capture.jax.tpu_compile import TpuSizer
from pytest_devmem.capture.jax.tpu_plugin import QUIET_LIBTPU, quiet_libtpu
from pytest_devmem.errors import InvalidSettingError
from pytest_devmem.hardware.devices import open_device
from pytest_devmem.model.tpu_targets import TPU_SPECS, tpu_spec
from pytest_devmem.plugin.compile_target import resolve
from pytest_devmem.units import GiB, MiB

ATTENTION = """
import jax
import jax.numpy as jnp

@jax.jit
def attention(q, k, v):
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / 8.0
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)
"""


def attention(q: Any, k: Any, v: Any) -> Any:
    import jax
    import jax.numpy as jnp

    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / 8.0
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)


def tpu_devices(topology: str, bounds: tuple[int, int, int] | None = None) -> list[Any]:
    from jax.experimental import topologies

    with quiet_libtpu():
        return list(
            topologies.get_topology_desc(
                topology_name=topology, platform="tpu", **({"chips_per_host_bounds": bounds} if bounds else {})
            ).devices
        )


# -- the presets: pure data -----------------------------------------------------------------


def test_each_tpu_preset_is_a_device_with_the_hbm_its_compiler_says_is_available() -> None:
    for name, spec in TPU_SPECS.items():
        device = open_device(f"sim:{name.lower()}")
        assert device.capacity == spec.usable_bytes  # (v5p: the compiler states more than the data sheet)
        assert device.device_class == f"sim-{name}" and device.tpu is spec  # type: ignore[attr-defined]
    # the data sheets: v4 32 GiB, v5e 16 GiB, v5p 95 GiB, v6e 32 GiB per chip
    assert [TPU_SPECS[n].hbm_per_chip // GiB for n in ("TPU-v4", "TPU-v5e", "TPU-v5p", "TPU-v6e")] == [32, 16, 95, 32]
    assert TPU_SPECS["TPU-v5e"].usable_bytes == round(15.75 * GiB)
    # a v4 chip in megacore is one device with the whole chip's usable HBM, not a TensorCore's 15.25G
    assert TPU_SPECS["TPU-v4"].usable_bytes == round(30.75 * GiB)


def test_a_preset_runs_megacore_where_jax_says_the_chip_supports_it(jax_loaded: Any) -> None:
    """One JAX device per chip, as a TPU VM shows them: JAX's own table of TPU chips says which
    generations run their two TensorCores as one device (megacore), and the presets follow it."""
    from jax._src.pallas.mosaic.tpu_info import ChipVersion

    for spec in TPU_SPECS.values():
        chip = ChipVersion(spec.generation)
        assert spec.megacore == chip.supports_megacore, spec.preset
        assert spec.devices_per_chip == 1
        assert spec.topology_for(4).chip_config_name == ("megacore" if chip.supports_megacore else None)


def test_sizes_cached_for_a_chip_config_are_never_taken_for_another() -> None:
    """The disk cache's keys name the chip config: a v4 entry cached when its devices were
    TensorCores (split mode) is not read for its megacore devices."""
    assert TpuSizer(TPU_SPECS["TPU-v4"])._target_text() == "tpu:v4:megacore"
    assert TpuSizer(TPU_SPECS["TPU-v5e"])._target_text() == "tpu:v5e"


@pytest.mark.parametrize(
    ("preset", "devices", "topology", "bounds"),
    [
        ("TPU-v5e", 1, "v5e:1x1", (1, 1, 1)),
        ("TPU-v5e", 2, "v5e:2x1", (2, 1, 1)),  # a line of chips on one host where no slice has 2
        ("TPU-v5e", 3, "v5e:3x1", (3, 1, 1)),
        ("TPU-v5e", 4, "v5e:2x2", None),
        ("TPU-v5e", 8, "v5e:2x4", None),
        ("TPU-v5p", 4, "v5p:2x2x1", None),
        ("TPU-v6e", 16, "v6e:4x4", None),
        ("TPU-v6e", 6, "v6e:6x1", (6, 1, 1)),
        ("TPU-v4", 2, "v4:2x1x1", (2, 1, 1)),
        ("TPU-v4", 4, "v4:2x2x1", None),  # 4 chips in megacore, not 2 chips of 2 TensorCores
        ("TPU-v4", 8, "v4:2x2x2", None),
    ],
)
def test_n_devices_form_the_generations_topology(
    preset: str, devices: int, topology: str, bounds: tuple[int, int, int] | None
) -> None:
    wanted = TPU_SPECS[preset].topology_for(devices)
    assert (wanted.name, wanted.chips_per_host_bounds) == (topology, bounds)


@pytest.mark.parametrize("devices", [0, -1, 4097, 10_000])
def test_a_count_with_no_topology_is_refused_naming_the_counts_allowed(devices: int) -> None:
    with pytest.raises(InvalidSettingError) as refused:
        TPU_SPECS["TPU-v5e"].topology_for(devices)
    text = str(refused.value)
    assert repr(devices) in text and "TPU v5e" in text
    if devices > 0:
        assert "1 to 4096" in text and "4 (v5e:2x2), 8 (v5e:2x4)" in text


@needs_libtpu
@pytest.mark.parametrize("preset", sorted(TPU_SPECS))
def test_libtpu_forms_each_count_as_that_many_chips_one_device_each(jax_loaded: Any, preset: str) -> None:
    """Every count the presets offer is that many devices of the installed libtpu, one per chip
    (megacore on v4 and v5p: each device's core_on_chip is 0, and no two share a chip)."""
    spec = TPU_SPECS[preset]
    sizer = TpuSizer(spec)
    assert sizer.install()
    try:
        for count in (1, 2, 3, 4, 8):
            chips = sizer._target_devices(count)
            assert len(chips) == count and {d.core_on_chip for d in chips} == {0}
            assert len({tuple(d.coords) for d in chips}) == count
    finally:
        sizer.uninstall()


@needs_libtpu
def test_a_count_libtpu_cannot_form_is_a_program_that_raises_naming_the_counts(jax_loaded: Any) -> None:
    """Never CPU sizes under a TPU's name: a program on a count libtpu forms no topology of is a
    `NoTopology`, whose error names the counts allowed."""
    from pytest_devmem.capture.jax.sizes import NoTopology

    sizer = TpuSizer(TPU_SPECS["TPU-v5e"])
    assert sizer.install()
    try:
        recipe = type("Recipe", (), {"devices": [object()] * 4097, "arguments": {}, "source": ""})()
        result = sizer._size_recipe(recipe)
        assert isinstance(result, NoTopology)
        assert isinstance(result.error(), InvalidSettingError) and "1 to 4096" in result.reason
    finally:
        sizer.uninstall()


def test_the_compilers_refusal_gives_its_figures() -> None:
    text = "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries (20.33G) exceeds available HBM (15.75G)."
    assert parse_refusal(text) == (round(20.33 * GiB), round(15.75 * GiB))
    assert parse_refusal("INVALID_ARGUMENT: something else") is None


def test_tpu_presets_are_compile_targets_like_gpu_ones() -> None:
    on_tpu = resolve(None, open_device("sim:TPU-v5p"), None, None)
    assert (on_tpu.label, on_tpu.platform, on_tpu.class_suffix) == ("TPU-v5p", "tpu", "")
    assert resolve("TPU-v5e", open_device("sim:16GiB"), None, None).class_suffix == "-TPU-v5e-sizes"
    missing = resolve(None, open_device("sim:TPU-v5e"), None, "libtpu missing")
    assert (missing.label, missing.class_suffix) == (
        "cpu",
        "-cpu-sizes",
    ) and "not a TPU v5e's" in missing.note  # never TPU sizes claimed


# -- the installed compiler agrees with the table -------------------------------------------


@needs_libtpu
@pytest.mark.parametrize("preset", sorted(TPU_SPECS))
def test_the_usable_hbm_is_what_the_installed_tpu_compiler_states(jax_loaded: Any, preset: str) -> None:
    import jax
    import jax.numpy as jnp
    from jax.sharding import SingleDeviceSharding

    spec = TPU_SPECS[preset]
    chip = TpuSizer(spec)._target_devices(1)[0]
    too_big = jax.ShapeDtypeStruct(
        (spec.hbm_per_chip // 4 // 1024, 1024), jnp.float32, sharding=SingleDeviceSharding(chip)
    )
    with pytest.raises(Exception, match="RESOURCE_EXHAUSTED") as refused:
        jax.jit(lambda x: x + 1).lower(too_big).compile()
    assert re.search(r"available HBM \(([\d.]+G)\)", str(refused.value)).group(1) == spec.usable_text  # type: ignore[union-attr]


@needs_libtpu
def test_a_v4_device_holds_what_a_whole_chip_holds_in_megacore_not_a_tensorcores_half(jax_loaded: Any) -> None:
    """19.5 GiB of output compiles for one device of the preset's v4 (megacore, 30.75G); libtpu's
    default split mode, two devices per chip, refuses it ("exceeds available HBM (15.25G)")."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import SingleDeviceSharding

    def fill(chip: Any) -> Any:
        rows = int(19.5 * GiB) // 4 // 1024
        return jax.jit(lambda: jnp.zeros((rows, 1024), jnp.float32), out_shardings=SingleDeviceSharding(chip))

    megacore = TpuSizer(TPU_SPECS["TPU-v4"])._target_devices(4)
    stats = fill(megacore[0]).lower().compile().memory_analysis()
    assert stats.output_size_in_bytes == int(19.5 * GiB)  # type: ignore[union-attr]
    split = tpu_devices("v4:2x2x1")
    assert len(split) == 8
    with pytest.raises(Exception, match=r"RESOURCE_EXHAUSTED.*available HBM \(15.25G\)"):
        fill(split[0]).lower().compile()


@needs_libtpu
def test_an_array_is_as_large_as_the_compiler_lays_it_out(jax_loaded: Any) -> None:
    import jax.numpy as jnp

    sizer = TpuSizer(TPU_SPECS["TPU-v5e"])
    assert sizer.install()
    try:
        assert sizer.shard_bytes((8, 3), jnp.float32) == 2048  # 96 bytes dense: one (8, 128) tile
        assert sizer.shard_bytes((1000, 1000), jnp.bfloat16) == 2_048_000  # 2,000,000 dense
        assert sizer.shard_bytes((0, 3), jnp.float32) == 0
    finally:
        sizer.uninstall()


# Dtypes down to 4 bits, bool among them; dims at and beside the tiles' edges (8, 128, 256...).
ARRAY_DTYPES = (
    "float32",
    "bfloat16",
    "float16",
    "int8",
    "uint8",
    "bool",
    "int16",
    "int32",
    "uint32",
    "int4",
    "float8_e4m3fn",
)
ARRAY_DIMS = (1, 2, 3, 5, 7, 8, 9, 16, 17, 127, 128, 129, 255, 256, 513, 1000)


def identity_argument_bytes(shape: tuple[int, ...], dtype: str, sharding: Any) -> int:
    """What the TPU compiler states for an argument of an identity program: the figure an array's
    size was first taken from, against which the sizer's cheaper program is checked."""
    import jax

    argument = jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)
    return int(jax.jit(lambda x: x).lower(argument).compile().memory_analysis().argument_size_in_bytes)  # type: ignore[union-attr]


@needs_libtpu
@pytest.mark.parametrize(
    ("shape", "dtype"),
    [
        ((), "float32"),
        ((8, 3), "float32"),
        ((5,), "bool"),
        ((3, 5, 7, 9), "int8"),
        ((129, 17), "bfloat16"),
        ((1000,), "int4"),
    ],
)
def test_an_arrays_size_is_what_the_compiler_states_for_an_identity_programs_argument(
    jax_loaded: Any, shape: tuple[int, ...], dtype: str
) -> None:
    from jax.sharding import SingleDeviceSharding

    sizer = TpuSizer(TPU_SPECS["TPU-v5e"])
    assert sizer.install()
    try:
        chip = sizer._target_devices(1)[0]
        assert sizer.shard_bytes(shape, dtype) == identity_argument_bytes(shape, dtype, SingleDeviceSharding(chip))
    finally:
        sizer.uninstall()


@needs_libtpu
def test_an_array_larger_than_half_the_chip_is_sized_by_the_compiler(jax_loaded: Any) -> None:
    """An identity program holds its argument and a copy of it: for an array of more than half the
    chip's HBM the compiler refuses it, and the array's size was not known (kept dense, noted). The
    program that only holds the array is compiled, and the compiler states the size."""
    from jax.sharding import SingleDeviceSharding

    sizer = TpuSizer(TPU_SPECS["TPU-v5e"])
    assert sizer.install()
    shape = (9 * 1024, 1024, 256)  # float32: 9 GiB of the v5e's 15.75G
    try:
        chip = SingleDeviceSharding(sizer._target_devices(1)[0])
        with pytest.raises(Exception, match="RESOURCE_EXHAUSTED"):
            identity_argument_bytes(shape, "float32", chip)
        assert sizer.shard_bytes(shape, "float32") == 9 * GiB
        assert not sizer.unsized_arrays
    finally:
        sizer.uninstall()


@needs_libtpu
@pytest.mark.slow
@pytest.mark.parametrize("preset", sorted(TPU_SPECS))
def test_on_every_generation_an_arrays_size_is_an_identity_programs_argument_size(jax_loaded: Any, preset: str) -> None:
    """The sizer compiles a program that only holds the array, at about half an identity program's
    compile time; the figure must be the same for every shape and dtype, on every generation (a
    libtpu that lays an unused argument out differently fails here)."""
    from hypothesis import HealthCheck, assume, given, settings
    from hypothesis import strategies as st
    from jax.sharding import SingleDeviceSharding

    sizer = TpuSizer(TPU_SPECS[preset])
    assert sizer.install()
    chip = SingleDeviceSharding(sizer._target_devices(1)[0])

    @settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
    @given(st.lists(st.sampled_from(ARRAY_DIMS), min_size=0, max_size=4), st.sampled_from(ARRAY_DTYPES))
    def check(dims: list[int], dtype: str) -> None:
        shape = tuple(dims)
        assume(math.prod(shape) <= 2**24)  # an identity program of both an argument and a copy fits every chip
        assert sizer.shard_bytes(shape, dtype) == identity_argument_bytes(shape, dtype, chip)

    try:
        check()
    finally:
        sizer.uninstall()


@needs_libtpu
@pytest.mark.slow
def test_each_shard_of_a_sharded_array_is_sized_as_the_sharded_identity_program_states(jax_loaded: Any) -> None:
    """A sharded array is sized per chip by its shard shape on one chip: the same figure as the
    per-chip argument size of an identity program sharded over a v5e 2x2."""
    import numpy as np
    from hypothesis import HealthCheck, assume, given, settings
    from hypothesis import strategies as st
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    sizer = TpuSizer(TPU_SPECS["TPU-v5e"])
    assert sizer.install()
    mesh = Mesh(np.array(sizer._target_devices(4)).reshape(2, 2), ("a", "b"))
    axes = st.sampled_from([None, "a", "b", ("a", "b")])

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
    @given(
        st.lists(st.sampled_from((2, 4, 6, 8, 16, 128, 256, 258, 512)), min_size=1, max_size=4),
        st.sampled_from(ARRAY_DTYPES),
        st.lists(axes, min_size=4, max_size=4),
    )
    def check(dims: list[int], dtype: str, spec: list[Any]) -> None:
        shape = tuple(dims)
        named = [axis for axis in spec[: len(shape)] if axis is not None]
        flat = [name for axis in named for name in (axis if isinstance(axis, tuple) else (axis,))]
        assume(len(flat) == len(set(flat)))  # each mesh axis shards one dimension at most
        assume(math.prod(shape) <= 2**26)
        sharding = NamedSharding(mesh, PartitionSpec(*spec[: len(shape)]))
        try:
            shard = sharding.shard_shape(shape)
        except ValueError:
            assume(False)  # not evenly divisible: JAX refuses such an array
        assert sizer.shard_bytes(shard, dtype) == identity_argument_bytes(shape, dtype, sharding)

    try:
        check()
    finally:
        sizer.uninstall()


@needs_libtpu
def test_libtpu_starts_without_a_word_on_a_machine_without_a_tpu(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        probe="""
        from jax.experimental import topologies
        from pytest_devmem.capture.jax.tpu_plugin import quiet_libtpu
        with quiet_libtpu():
            print(len(topologies.get_topology_desc(topology_name="v5e:2x2", platform="tpu").devices))
        """
    )
    result = pytester.run(__import__("sys").executable, "probe.py")
    assert result.ret == 0 and result.outlines[-1] == "4"
    errors = result.errlines
    assert not [line for line in errors if re.search(r"TPU|libtpu|Traceback|worker hostname", line)], errors
    assert set(QUIET_LIBTPU) >= {"ALLOW_MULTIPLE_LIBTPU_LOAD", "TPU_WORKER_HOSTNAMES"}


# -- the plugin under a TPU preset --------------------------------------------------------------


@needs_libtpu
def test_an_attention_step_records_the_v5e_compiles_temp_not_the_gpus_nor_the_cpus(
    jax_loaded: Any, pytester: pytest.Pytester
) -> None:
    import jax
    import jax.numpy as jnp
    from jax.sharding import SingleDeviceSharding

    chip = tpu_devices("v5e:1x1", (1, 1, 1))[0]
    q = jax.ShapeDtypeStruct((2, 16, 1024, 64), jnp.float32, sharding=SingleDeviceSharding(chip))
    expected = int(jax.jit(attention).lower(q, q, q).compile().memory_analysis().temp_size_in_bytes)
    assert 128 * MiB < expected < 129 * MiB  # 128.06 MiB: an H100 takes 256 MiB, the CPU none
    pytester.makepyfile(
        test_attention=ATTENTION
        + "\ndef test_step():\n    q = jnp.ones((2, 16, 1024, 64), jnp.float32)\n    attention(q, q, q).block_until_ready()\n"
    )
    result = pytester.runpytest_inprocess(
        "--devmem-device=sim:TPU-v5e", "--devmem-mode=compact", "--devmem-report=r.json"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*sized as the TPU v5e compiler*"])
    record = json.loads((pytester.path / "r.json").read_text())["records"][0]
    step = record["trace"]["executables"]["jit(attention)"]
    assert (step["temp_bytes"], step["sized_for"], step["cpu_temp_bytes"]) == (expected, "TPU-v5e", 0)
    assert (
        record["compile_target"] == "TPU-v5e"
        and record["tpu"]["target"] == "TPU v5e"
        and record["device_class"] == "sim-TPU-v5e"
    )
    assert record["peak_bytes_in_use"] >= expected + 8 * MiB  # the temp beside the 8 MiB input and output


@needs_libtpu
def test_a_warning_of_the_tests_own_lowering_is_given_once_not_again_as_the_tpu_lowers_it(
    jax_loaded: Any, pytester: pytest.Pytester
) -> None:
    """The program is lowered again for the TPU (lowering.py), and JAX's lowering warns where donated
    buffers are not usable (jax/_src/interpreters/mlir.py): a test counting its warnings saw two."""
    pytester.makepyfile(
        test_warn="""
        import warnings
        import jax
        import jax.numpy as jnp

        def test_donation_warned_once():
            step = jax.jit(lambda x, y: x + jnp.sum(y), donate_argnums=(0, 1))
            with warnings.catch_warnings(record=True) as record:
                warnings.simplefilter("always")
                step(jnp.array(1.0), jnp.ones((10,))).block_until_ready()
            assert [(w.filename.endswith("mlir.py"), "not usable" in str(w.message)) for w in record] == [(True, True)]
        """
    )
    pytester.runpytest_inprocess(
        "--devmem-device=sim:TPU-v5e", "--devmem-mode=compact", "-W", "always"
    ).assert_outcomes(passed=1)


def test_the_padding_at_a_tests_peak_is_told_from_its_own_arrays_alone() -> None:
    """Two shard shapes of different dense sizes may tile alike (one (8, 128) tile each): a tiled size
    then stands for either, and its padding cannot be told. Which shapes count is the test's own,
    never every shard sized in the process, or a test's padding would follow what ran before it."""
    from pytest_devmem.capture.jax.tpu_compile import TpuSizer
    from pytest_devmem.model.tpu_targets import tpu_spec

    sizer = TpuSizer(tpu_spec("TPU-v5e"))
    sizer._arrays = {((8, 3), "float32"): 4096, ((8, 5), "float32"): 4096, ((2,), "int8"): None}
    assert sizer.padded_sizes([((8, 5), "float32")]) == {4096: {160}}  # alone: its padding known
    assert sizer.padded_sizes([((8, 3), "float32"), ((8, 5), "float32")]) == {4096: {96, 160}}
    assert sizer.padded_sizes([((2,), "int8"), ((4, 4), "float32")]) == {}  # unsized, never sized: none


@needs_libtpu
def test_small_arrays_take_their_tiled_size(jax_loaded: Any, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_small="""
        import jax.numpy as jnp

        def test_many():
            held = [jnp.full((8, 3), float(i), jnp.float32) for i in range(2000)]
            assert len(held) == 2000
        """
    )
    pytester.runpytest_inprocess(
        "--devmem-device=sim:TPU-v5e", "--devmem-report=r.json", "--devmem-mode=compact"
    ).assert_outcomes(passed=1)
    record = json.loads((pytester.path / "r.json").read_text())["records"][0]
    assert 2000 * 2048 <= record["peak_bytes_in_use"] < 2000 * 2048 + 64 * 1024  # about 4 MB, not 192 KB


@needs_libtpu
def test_a_numpy_argument_is_copied_into_hbm_at_the_size_a_put_of_it_takes(
    jax_loaded: Any, pytester: pytest.Pytester
) -> None:
    """A TPU copies a host argument into HBM in its tiled layout, as `device_put` does: the same bytes
    for both, libtpu's f32[20000,9] (1,286,144 B), not the 720,000 B NumPy holds."""
    pytester.makepyfile(
        test_host="""
        import jax, numpy as np

        F = jax.jit(lambda v: v.sum())

        def test_numpy():
            F(np.ones((20000, 9), np.float32)).block_until_ready()

        def test_float64_numpy():
            F(np.ones((20000, 9))).block_until_ready()  # float32 on the device without x64

        def test_put():
            F(jax.device_put(np.ones((20000, 9), np.float32))).block_until_ready()
        """
    )
    pytester.runpytest_inprocess(
        "--devmem-device=sim:TPU-v5e", "--devmem-report=r.json", "--devmem-mode=compact"
    ).assert_outcomes(passed=3)
    records = json.loads((pytester.path / "r.json").read_text())["records"]
    peaks = {r["test_id"].rpartition("::")[2]: r["peak_bytes_in_use"] for r in records}
    assert peaks["test_numpy"] == peaks["test_float64_numpy"] == peaks["test_put"] == 1_286_144 + 512


@needs_libtpu
@pytest.mark.parametrize(
    ("preset", "used", "topology", "options"),
    [
        ("TPU-v5e", 4, "v5e:2x2", {}),
        # 4 chips in megacore, each device the chip's whole HBM (the split mode's 8 TensorCores would halve it)
        ("TPU-v4", 4, "v4:2x2x1", {"chip_config_name": "megacore"}),
        # a 2-device mesh inside 4 devices: 2 chips of a host, in a line
        ("TPU-v5e", 2, "v5e:2x1", {"chips_per_host_bounds": (2, 1, 1)}),
    ],
)
def test_a_sharded_step_records_each_chip_at_the_topologys_compiled_size(
    jax_loaded: Any,
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    preset: str,
    used: int,
    topology: str,
    options: dict[str, Any],
) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import topologies
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    with quiet_libtpu():
        chips = list(topologies.get_topology_desc(topology_name=topology, platform="tpu", **options).devices)
    assert len(chips) == used and {chip.core_on_chip for chip in chips} == {0}  # one device per chip
    mesh = Mesh(np.array(chips), ("x",))
    q = jax.ShapeDtypeStruct((8, 16, 1024, 64), jnp.float32, sharding=NamedSharding(mesh, PartitionSpec("x")))
    per_chip = int(jax.jit(attention).lower(q, q, q).compile().memory_analysis().temp_size_in_bytes)
    assert per_chip > 100 * MiB
    pytester.makepyfile(
        test_sharded=ATTENTION
        + f"""
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

def test_sharded_step():
    assert len(jax.devices()) == 4
    mesh = Mesh(np.array(jax.devices()[:{used}]), ("x",))
    q = jax.device_put(jnp.ones((8, 16, 1024, 64), jnp.float32), NamedSharding(mesh, PartitionSpec("x")))
    attention(q, q, q).block_until_ready()
"""
    )
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
    result = pytester.runpytest_subprocess(
        f"--devmem-device=sim:{preset}", "--devmem-mode=compact", "--devmem-report=r.json"
    )
    result.assert_outcomes(passed=1)
    record = json.loads((pytester.path / "r.json").read_text())["records"][0]
    assert record["trace"]["executables"]["jit(attention)"]["temp_bytes"] == used * per_chip
    assert not [note for note in record["trace"]["notes"] if "CPU compile" in note]
    devices = {d["device"]: d for d in record["devices"]}
    assert sorted(devices) == [f"tpu:{n}" for n in range(used)]
    peaks = {d["peak_bytes_in_use"] for d in devices.values()}
    assert len(peaks) == 1 and min(peaks) >= per_chip  # each chip alike
    assert {d["peak_bytes_reserved"] for d in devices.values()} <= {TPU_SPECS[preset].usable_bytes}


@pytest.mark.parametrize("option", ["--devmem-mode=prealloc", "--devmem-mode=growth", "--devmem-fraction=0.5"])
def test_a_gpu_regime_on_a_tpu_preset_is_refused_naming_the_tpu(pytester: pytest.Pytester, option: str) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_inprocess("--devmem-device=sim:TPU-v5e", option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stderr.str()
    assert "is a TPU v5e" in text and "JAX does not preallocate on a TPU" in text and "defragments" in text


def test_a_markers_gpu_regime_on_a_tpu_preset_is_left_out_with_why_and_its_limit_still_applies(
    pytester: pytest.Pytester,
) -> None:
    """One suite gated on GPU and TPU presets alike (the README's `fraction=0.5`): under a TPU preset the
    test runs under the TPU runtime's regime, the record says which keys did not apply and why."""
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.devmem(fraction=0.5)
        def test_gpu_regime(devmem):
            devmem.pool.alloc(1 << 20)

        @pytest.mark.devmem(mode="prealloc", fraction=0.5, limit="64KiB")
        def test_gpu_regime_over_its_limit(devmem):
            devmem.pool.alloc(1 << 20)
        """
    )
    result = pytester.runpytest_inprocess("--devmem-device=sim:TPU-v6e", "--devmem-report=r.json")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*device memory limit exceeded*"])
    records = {r["test_id"].split("::")[-1]: r for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    for name, keys in (("test_gpu_regime", ["fraction"]), ("test_gpu_regime_over_its_limit", ["mode", "fraction"])):
        record = records[name]
        assert record["regime"] == "compact(fraction=1)"  # the TPU runtime's, not JAX's GPU default
        assert record["peak_bytes_in_use"] >= 1 << 20
        not_applied = record["tpu"]["marker_not_applied"]
        assert list(not_applied) == keys
        assert "a GPU regime, and sim:TPU-v6e runs the TPU runtime's" in not_applied["fraction"]


@needs_libtpu
def test_a_program_the_tpu_compiler_refuses_raises_at_its_call_and_never_runs_on_the_cpu(
    jax_loaded: Any, pytester: pytest.Pytester
) -> None:
    """As on a TPU, the call raises the compiler's RESOURCE_EXHAUSTED (a test that expects it sees
    what JAX raises), and the verdict is a compile-time out-of-memory result with the compiler's
    figures. The CPU program would loop for ever: had it run, the session would time out."""
    pytester.makepyfile(
        test_long=ATTENTION
        + """
import pytest
from jax import lax

@jax.jit
def step(long_sequence, q):
    # a TPU takes the long branch's HLO temporaries (20 GB of scores) whichever runs; the CPU run
    # would take the short branch, which never ends
    forever = lambda q: lax.while_loop(lambda x: True, lambda x: x + 1.0, q)
    return lax.cond(long_sequence, lambda q: attention(q, q, q), forever, q)

def test_long_context():
    step(False, jnp.ones((1, 20, 16384, 8), jnp.float32)).block_until_ready()

def test_sees_what_jax_raises():
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"^RESOURCE_EXHAUSTED: .*exceeds available HBM \\(15.75G\\)"):
        step(False, jnp.ones((1, 20, 16384, 8), jnp.float32))
"""
    )
    result = pytester.runpytest_subprocess(
        "--devmem-device=sim:TPU-v5e", "--devmem-mode=compact", "--devmem-report=r.json", timeout=300
    )
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*out of device memory at compile time on sim:TPU-v5e: the TPU v5e compiler refused jit(step)*",
            "*available HBM (15.75G)*",
            "*raised at the call in test_long.py:20",  # the line of the call in test_long_context
        ]
    )
    assert "Traceback" not in result.stdout.str()
    records = {r["test_id"].split("::")[-1]: r for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    for record in records.values():
        assert record["oom"]["kind"] == "capacity" and record["oom"]["compile_time"] is True
        assert record["oom"]["capacity"] == round(15.75 * GiB) and record["oom"]["requested"] > 20 * GiB
        assert record["failed_by_devmem"] is True
        assert record["trace"]["executables"]["jit(step)"]["runs"] == 0  # never run
    from pytest_devmem.cli import main

    report = str(pytester.path / "r.json")
    assert main(["compare", report, report]) == 1  # the gate and compare treat it as any out-of-memory result


def test_tpu_preset_names_are_found_in_any_case() -> None:
    assert tpu_spec("sim:tpu-V5E") is TPU_SPECS["TPU-v5e"] and tpu_spec("H100-80GB") is None


@needs_libtpu
def test_the_plugins_output_carries_no_libtpu_or_cuda_noise(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_plain="import jax.numpy as jnp\n\ndef test_x():\n    assert jnp.ones((8, 3)).sum() == 24\n"
    )
    result = pytester.runpytest_subprocess(
        "--devmem-device=sim:TPU-v5e", "--devmem-mode=compact", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)
    output = result.stdout.str() + result.stderr.str()
    for noise in (
        "cudart_stub",
        "TPU accelerator type",
        "TPU_WORKER_HOSTNAMES",
        "libtpu_lockfile",
        "Traceback",
        "InitializeLog",
        "CUDA",
    ):
        assert noise not in output, output


def test_a_record_on_a_tpu_says_what_compaction_moved_and_when_an_oom_is_capacity(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        def test_holes(devmem):
            MiB = 2**20
            pool = devmem.pool
            held = [pool.alloc(5 * 1024 * MiB) for _ in range(3)]  # 15 GiB of the 15.75 GiB
            pool.free(held[0]); pool.free(held[2])  # 10.75 GiB free, in two holes around the middle buffer
            big = pool.alloc(10 * 1024 * MiB)  # fits only once the runtime moves the middle buffer
            pool.free(big); pool.free(held[1])

        @pytest.mark.devmem(limit="32GiB")
        def test_too_big(devmem):
            devmem.pool.alloc(20 * 2**30)
        """
    )
    result = pytester.runpytest_inprocess(
        "--devmem-device=sim:TPU-v5e", "--devmem-mode=compact", "--devmem-report=r.json"
    )
    result.assert_outcomes(passed=1, failed=1)
    records = {r["test_id"].split("::")[1]: r for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    assert (
        records["test_holes"]["tpu"]["compaction_moved_bytes"] == 5 * GiB
        and records["test_holes"]["tpu"]["compactions"] == 1
    )
    assert (
        records["test_too_big"]["oom"]["kind"] == "capacity"
        and records["test_too_big"]["tpu"]["compaction_moved_bytes"] == 0
    )


def test_tensorflow_figures_under_a_tpu_preset_are_said_to_be_its_cpu_allocators(
    tensorflow_loaded: Any, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(
        """
        import tensorflow as tf

        def test_tf():
            x = tf.ones((256, 256))
            assert float(tf.reduce_sum(x @ x)) > 0
        """
    )
    result = pytester.runpytest_inprocess(
        "--devmem-device=sim:TPU-v5e", "--devmem-mode=compact", "--devmem-report=r.json"
    )
    result.assert_outcomes(passed=1)
    # shown as what they are: the host's, TensorFlow's CPU allocator's
    result.stdout.fnmatch_lines(
        ["*test_tf*(cpu:0: the host's, not a chip's)*2.00 MiB*tensorflow (its CPU allocator, on the host)"]
    )
    record = json.loads((pytester.path / "r.json").read_text())["records"][0]
    assert record["tpu"]["tensorflow"] == "CPU allocator's figures, not sized for the TPU"
    assert any(
        "TensorFlow's figures are its CPU allocator's, not a TPU v5e's" in note for note in record["trace"]["notes"]
    )
    # TensorFlow's CPU allocator grows from 2 MiB (process_state.cc: allow_growth, 64 GiB at most):
    # nothing is derived from a GPU's system reserve (15.75 GiB less 1.5 GiB was 14.25 GiB reserved)
    (allocator,) = record["devices"][0]["allocators"]
    assert record["peak_bytes_reserved"] == 2 * MiB == allocator["peak_bytes_reserved"]
    assert allocator["limit"] == 64 * GiB and allocator["setup"].startswith("its CPU allocator")


REAL_KINDS = {"TPU v5 lite": "TPU-v5e", "TPU v5": "TPU-v5p", "TPU v4": "TPU-v4", "TPU v6 lite": "TPU-v6e"}
"""What `device_kind` a real TPU's JAX devices have, and the preset of that generation."""


@pytest.mark.tpu
def test_real_tpu_devices_are_the_presets_whole_chips_and_refuse_as_the_preset_does(jax_loaded: Any) -> None:
    """On a real TPU VM: one JAX device per chip (megacore on v4 and v5p), each with the usable HBM
    its preset states (the runtime's `bytes_limit`, within 1%), and a program too large for a chip
    raises RESOURCE_EXHAUSTED at its call, as the preset's call does."""
    import jax
    import jax.numpy as jnp

    device = jax.devices()[0]
    preset = REAL_KINDS.get(device.device_kind)
    if preset is None:
        pytest.skip(f"no preset for {device.device_kind}")
    spec = TPU_SPECS[preset]
    assert {d.core_on_chip for d in jax.devices()} == {0}  # one device per chip
    assert len({tuple(d.coords) for d in jax.devices()}) == len(jax.devices())
    limit = int((device.memory_stats() or {}).get("bytes_limit", 0))
    assert abs(limit - spec.usable_bytes) <= spec.usable_bytes // 100, (limit, spec.usable_text)
    rows = spec.hbm_per_chip // 4 // 1024
    with pytest.raises(jax.errors.JaxRuntimeError, match="RESOURCE_EXHAUSTED"):
        jax.jit(lambda: jnp.ones((rows, 1024), jnp.float32) + 1)()


@pytest.mark.tpu
def test_real_tpu_replayed_peak_matches_jax_memory_stats(jax_loaded: Any, pytester: pytest.Pytester) -> None:
    """On a real TPU: the replayed trace (sized by the deviceless compile for the chip's preset) and
    the TPU runtime's own `memory_stats()` peak for the same attention step agree within 10%."""
    import jax

    kind = jax.devices()[0].device_kind  # "TPU v5 lite", "TPU v5", "TPU v4", "TPU v6 lite"
    preset = REAL_KINDS.get(kind)
    if preset is None:
        pytest.skip(f"no preset for {kind}")
    pytester.makepyfile(
        test_attention=ATTENTION
        + "\ndef test_step():\n    q = jnp.ones((2, 16, 1024, 64), jnp.float32)\n    attention(q, q, q).block_until_ready()\n"
    )
    pytester.runpytest_subprocess(
        f"--devmem-device=sim:{preset}", "--devmem-mode=compact", "--devmem-report=r.json"
    ).assert_outcomes(passed=1)
    record = json.loads((pytester.path / "r.json").read_text())["records"][0]
    measured = record["sources"]["jax"]["peak_bytes_in_use"]
    assert abs(record["peak_bytes_in_use"] - measured) <= max(0.1 * measured, MiB)


@needs_libtpu
def test_sizes_are_cached_on_disk_for_the_next_run(jax_loaded: Any, tmp_path: Any) -> None:
    import jax.numpy as jnp

    first, second = (
        TpuSizer(TPU_SPECS["TPU-v5e"], cache_dir=tmp_path),
        TpuSizer(TPU_SPECS["TPU-v5e"], cache_dir=tmp_path),
    )
    assert first.install() and second.install()
    try:
        executable = executable_of(lambda a: jnp.tanh(a @ a.T), jnp.ones((256, 384)))
        compiled, cached = first.sizes_for(executable), second.sizes_for(executable)
        first_array, second_array = first.shard_bytes((8, 3), jnp.float32), second.shard_bytes((8, 3), jnp.float32)
    finally:
        first.uninstall()
        second.uninstall()
    assert (compiled.source, cached.source, second.compiles) == ("compiled", "disk cache", 0)  # type: ignore[union-attr]
    assert cached.temp_bytes == compiled.temp_bytes and first_array == second_array == 2048  # type: ignore[union-attr]
    assert len(list(tmp_path.glob("*.json"))) == 2  # one executable, one array shape


@needs_libtpu
def test_a_fresh_project_finds_the_sizes_in_the_users_cache_and_keeps_them_in_its_own(
    jax_loaded: Any, tmp_path: Any
) -> None:
    import jax.numpy as jnp

    user, first_project, second_project = tmp_path / "user", tmp_path / "one", tmp_path / "two"
    first, second = (
        TpuSizer(TPU_SPECS["TPU-v5e"], cache_dir=first_project, user_cache_dir=user),
        TpuSizer(TPU_SPECS["TPU-v5e"], cache_dir=second_project, user_cache_dir=user),
    )
    assert first.install() and second.install()
    try:
        executable = executable_of(lambda a: jnp.tanh(a @ a.T) + 3, jnp.ones((256, 384)))
        compiled, cached = first.sizes_for(executable), second.sizes_for(executable)
        first_array, second_array = first.shard_bytes((8, 5), jnp.float32), second.shard_bytes((8, 5), jnp.float32)
    finally:
        first.uninstall()
        second.uninstall()
    assert (compiled.source, cached.source, second.compiles, second.costs.arrays_compiled) == (  # type: ignore[union-attr]
        "compiled",
        "disk cache",
        0,
        0,
    )
    assert cached.temp_bytes == compiled.temp_bytes  # type: ignore[union-attr]
    assert first_array == second_array and first_array is not None and first_array > 8 * 5 * 4  # tiled
    assert second.user_cache_hits >= 2  # the executable (under its source key) and the array shape
    # the second project's own cache now holds what it found in the user's, as the first's holds what it compiled
    assert {path.name for path in second_project.glob("*.json")} <= {path.name for path in user.glob("*.json")}
    assert {path.name for path in first_project.glob("*.json")} == {path.name for path in user.glob("*.json")}
    assert len(list(second_project.glob("*.json"))) >= 2


@needs_libtpu
def test_a_session_keeps_its_sizes_in_the_users_cache_where_devmem_cache_dir_names_one(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEVMEM_CACHE_DIR", str(pytester.path / "user-cache"))
    pytester.makepyfile(
        "import jax.numpy as jnp\n\ndef test_x():\n    assert float((jnp.ones((8, 3)) * 2).sum()) == 48.0\n"
    )
    result = pytester.runpytest_subprocess(
        "--devmem-device=sim:TPU-v5e", "--devmem-mode=compact", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)
    assert list((pytester.path / "user-cache" / "devmem-tpu-sizes").glob("*.json"))  # without pytest's cache
    again = pytester.runpytest_subprocess(
        "--devmem-device=sim:TPU-v5e", "--devmem-mode=compact", "-p", "no:cacheprovider"
    )  # issue 53.9: what it read back came from the user's cache, never said to be pytest's
    again.stdout.fnmatch_lines(["JAX sizes: 0 program(s) compiled for the target*, [1-9]* from user-cache"])
    assert "pytest's cache" not in again.stdout.str()


def test_a_users_cache_that_cannot_be_a_directory_is_a_usage_error_naming_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    (pytester.path / "a-file").write_text("not a directory")
    monkeypatch.setenv("DEVMEM_CACHE_DIR", str(pytester.path / "a-file"))
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("--devmem-device=sim:TPU-v5e", "--devmem-mode=compact")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"*invalid devmem cache directory '{pytester.path / 'a-file'}' (from environment variable DEVMEM_CACHE_DIR): it exists and is not a directory*"
        ]
    )
    result = pytester.runpytest_subprocess(
        "--devmem-device=sim:TPU-v5e", "--devmem-mode=compact", f"--devmem-cache-dir={pytester.path / 'a-file' / 'sub'}"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    # the path is named (shortened where long, as under xdist's longer temporary folders)
    result.stderr.fnmatch_lines(["*invalid devmem cache directory '*' (from --devmem-cache-dir): *"])


def test_a_marker_naming_another_tpu_regime_runs_in_a_child_under_the_tpu_preset(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.devmem(mode="ondemand")
        def test_without_defragmentation(devmem):
            devmem.pool.free(devmem.pool.alloc(2**20))

        @pytest.mark.devmem(mode="compact")
        def test_runtime(devmem):
            devmem.pool.free(devmem.pool.alloc(2**20))
        """
    )
    result = pytester.runpytest_subprocess(
        "--devmem-device=sim:TPU-v5e", "--devmem-report=r.json", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=2)
    regimes = sorted(r["regime"] for r in json.loads((pytester.path / "r.json").read_text())["records"])
    assert regimes == ["compact(fraction=1)", "ondemand"]


@needs_libtpu
def test_libtpus_settings_keep_what_the_user_set_and_are_put_back(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from pytest_devmem.capture.jax.tpu_plugin import environment_for_libtpu, tpu_present

    assert not tpu_present()  # this machine: no TPU chip
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "10.0.0.2")
    monkeypatch.delenv("ALLOW_MULTIPLE_LIBTPU_LOAD", raising=False)  # (this session's plugin set it)
    wanted = environment_for_libtpu(os.environ)
    assert "TPU_WORKER_HOSTNAMES" not in wanted and wanted["ALLOW_MULTIPLE_LIBTPU_LOAD"] == "1"
    with quiet_libtpu():
        assert os.environ["ALLOW_MULTIPLE_LIBTPU_LOAD"] == "1" and os.environ["TPU_WORKER_HOSTNAMES"] == "10.0.0.2"
    assert "ALLOW_MULTIPLE_LIBTPU_LOAD" not in os.environ and os.environ["TPU_WORKER_HOSTNAMES"] == "10.0.0.2"


HOLES = """
def test_holes(devmem):
    MiB = 2**20
    pool = devmem.pool
    held = [pool.alloc(5 * 1024 * MiB) for _ in range(3)]
    pool.free(held[0]); pool.free(held[2])  # 10 GiB free in two 5 GiB holes around the middle buffer
    big = pool.alloc(10 * 1024 * MiB)  # fits only where the runtime moves the middle buffer
    pool.free(big); pool.free(held[1])
"""


def test_find_min_fraction_on_a_tpu_preset_is_refused_saying_what_a_tpu_does(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_inprocess("--devmem-device=sim:TPU-v5p", "--devmem-find-min-fraction")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = " ".join(result.stderr.str().split())
    assert "--devmem-find-min-fraction searches the smallest JAX memory fraction" in text
    assert "sim:TPU-v5p is a TPU v5p: JAX does not preallocate on a TPU" in text
    assert "defragments" in text and "95.74G of usable HBM" in text and "--devmem-what-if=SIZE" in text


@pytest.mark.parametrize(("size", "fits"), [("15616MiB", True), ("14GiB", False)])
def test_what_if_on_a_tpu_preset_replays_on_a_chip_of_that_size_defragmenting(
    pytester: pytest.Pytester, size: str, fits: bool
) -> None:
    # 15 GiB live at most, in holes a non-defragmenting pool of 15.25 GiB could not serve
    pytester.makepyfile(HOLES)
    result = pytester.runpytest_inprocess(
        "--devmem-device=sim:TPU-v5e", "--devmem-mode=compact", f"--devmem-what-if={size}", "--devmem-report=r.json"
    )
    result.assert_outcomes(passed=1)
    answer = json.loads((pytester.path / "r.json").read_text())["records"][0]["analysis"]["what_if"]
    assert answer["ok"] is fits
    if not fits:
        assert "capacity" in answer["message"]
    result.stdout.fnmatch_lines([f"*what if the device had*: {0 if fits else 1} of 1 replayed test(s)*"])


def test_a_traces_cpu_devices_are_named_as_the_chips_they_stand_for() -> None:
    from pytest_devmem.model.tpu_devices import as_tpu_chips, chip_label
    from pytest_devmem.model.trace import Trace, TraceEvent

    trace = Trace(
        [
            TraceEvent("allocate", 1, 256, source="jax", label="cpu:1", device="cpu:1"),
            TraceEvent("allocate", 2, 256, source="pool", label="x", device=""),
            TraceEvent("allocate", 3, 256, source="jax", label="y", device="gpu:0"),
        ]
    )
    assert as_tpu_chips(trace).device_names() == ["tpu:1", "tpu:0", "gpu:0"]
    assert [event.label for event in trace.events][0] == "cpu:1"  # only devices are renamed
    assert [chip_label(name) for name in ("cpu:0", "cpu:12", "", "tpu:3")] == ["tpu:0", "tpu:12", "tpu:0", "tpu:3"]


def test_a_tpu_presets_devices_are_chips_in_the_record_the_summary_and_the_report(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(
        test_two="""
import jax
import jax.numpy as jnp

def test_two():
    a = jax.device_put(jnp.ones((256, 256)), jax.devices()[1])
    (a * 2).block_until_ready()
"""
    )
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    result = pytester.runpytest_subprocess(
        "--devmem-device=sim:TPU-v5e",
        "--devmem-mode=compact",
        "--devmem-compile-target=cpu",
        "--devmem-report=r.md",
        "--devmem-traces=traces",
    )
    result.assert_outcomes(passed=1)
    (trace,) = (pytester.path / "traces").glob("*.csv")
    assert ",tpu:1," in trace.read_text() and ",cpu:" not in trace.read_text()
    result.stdout.fnmatch_lines(["*(max of 2 devices: tpu:1)*", "  tpu:0 *", "  tpu:1 *"])
    assert "cpu:" not in result.stdout.str().split("device memory (pytest-devmem)")[1]
    report = (pytester.path / "r.md").read_text()
    assert "|   tpu:1 |" in report and "cpu:" not in report


@needs_libtpu
def test_the_tpu_compile_starts_beside_jaxs_own_and_a_run_waits_only_for_its_sizes(jax_loaded: Any) -> None:
    import jax
    import jax.numpy as jnp

    argument = jnp.ones((128, 256))  # made before: its own helper is not the program to size
    sizer = TpuSizer(TPU_SPECS["TPU-v5e"], beside=True)
    assert sizer.install()
    try:
        jax.jit(lambda a: jnp.tanh(a @ a.T)).lower(argument).compile()  # compiled for the CPU, never run
    finally:
        sizer.uninstall()  # waits for the worker
    costs = sizer.sizing_costs()
    assert [name for name, devices, _ in costs.compiled] == ["<lambda>"] and costs.executables_compiled == 1
    assert costs.executable_seconds > 0 and costs.to_json()["executables_compiled"] == 1


def test_a_trace_replayed_on_a_tpu_preset_takes_the_tpu_runtimes_regime_and_refuses_a_gpu_one() -> None:
    from pytest_devmem.model.pool.policy import Policy
    from pytest_devmem.model.regime import TPU_RUNTIME, tpu_replay_policy

    assert tpu_replay_policy("sim:TPU-v5e", Policy.of("compact")).label == TPU_RUNTIME.label == "compact(fraction=1)"
    assert tpu_replay_policy("sim:tpu-v6e", Policy.of("ondemand")) == Policy.of("ondemand")
    assert tpu_replay_policy("sim:16GiB", Policy.of("prealloc")) == Policy.of("prealloc")  # not a TPU: as given
    with pytest.raises(InvalidSettingError) as refused:
        tpu_replay_policy("sim:TPU-v5e", Policy.of("fraction", 0.5), fraction="0.5")
    assert str(refused.value).startswith("--fraction 0.5 is a GPU regime, and sim:TPU-v5e is a TPU v5e")
    assert "JAX does not preallocate on a TPU" in str(refused.value) and "use --mode compact" in str(refused.value)
    with pytest.raises(InvalidSettingError, match=r"^the regime growth \(from the trace's name\) is a GPU regime"):
        tpu_replay_policy("sim:TPU-v5p", Policy.of("growth"))


def test_devmem_replay_on_a_tpu_preset_uses_the_tpu_runtime_and_refuses_a_gpu_regime_with_exit_2(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_devmem import cli
    from pytest_devmem.model.trace import Trace, TraceEvent

    trace = Trace()
    for index, (action, size) in enumerate((("allocate", 3 << 20), ("allocate", 1 << 20), ("free", 3 << 20))):
        trace.append(
            TraceEvent(action, 0x1000 if size == 3 << 20 else 0x9000, size, float(index), source="jax", device="tpu:0")
        )
    trace.write_csv(tmp_path / "t.csv")
    assert cli.main(["replay", str(tmp_path / "t.csv"), "--device", "sim:TPU-v5e", "--mode", "compact"]) == 0
    out = capsys.readouterr().out
    assert "compact(fraction=1) on sim:TPU-v5e" in out and "| events | 3 |" in out
    assert cli.main(["replay", str(tmp_path / "t.csv"), "--device", "sim:TPU-v5e", "--mode", "prealloc"]) == 2
    error = capsys.readouterr().err
    assert "is a GPU regime" in error and "TPU v5e" in error and "Traceback" not in error


def test_devmem_replay_of_a_cpu_trace_on_a_tpu_preset_counts_no_cuda_context_and_refuses_a_fraction(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """An RMM log names no device: on a TPU preset it is chip 0's, all usable HBM is the runtime's
    (no CUDA context, no GPU allocator's back-off), and a fraction below all of HBM is refused."""
    from pytest_devmem import cli

    (tmp_path / "rmm.csv").write_text("Thread,Time,Action,Pointer,Size,Stream\n1,0.0,allocate,0x1000,16642998272,0\n")
    assert cli.main(["replay", str(tmp_path / "rmm.csv"), "--device", "sim:TPU-v5e"]) == 0  # 15.5 of 15.75 GiB
    out = capsys.readouterr().out
    assert "| TPU runtime: peak in use, held | 16642998272, 16911433728 |" in out and "CUDA" not in out
    for asked in (["--fraction", "0.5"], ["--mode", "compact", "--fraction", "0.75"]):
        assert cli.main(["replay", str(tmp_path / "rmm.csv"), "--device", "sim:TPU-v5e", *asked]) == 2
        assert "is a GPU regime, and sim:TPU-v5e is a TPU v5e" in capsys.readouterr().err


@needs_libtpu
def test_two_jit_objects_of_one_program_compile_once_for_the_tpu(jax_loaded: Any, tmp_path: Any) -> None:
    import jax
    import jax.numpy as jnp
    from jax._src.interpreters import pxla

    from pytest_devmem.capture.framework import Patches

    def first_step(a: Any) -> Any:
        return jnp.tanh(a @ a.T).sum(axis=0)

    def second_step(a: Any) -> Any:  # the same computation under another name: another module name
        return jnp.tanh(a @ a.T).sum(axis=0)

    argument = jnp.ones((136, 264))
    sizer, later = (
        TpuSizer(TPU_SPECS["TPU-v5e"], cache_dir=tmp_path),
        TpuSizer(TPU_SPECS["TPU-v5e"], cache_dir=tmp_path),
    )
    assert sizer.install() and later.install()
    runs: list[Any] = []
    patches = Patches()
    patches.replace(
        pxla.ExecuteReplicated, "__call__", lambda original: lambda self, *a: (runs.append(self), original(self, *a))[1]
    )
    try:
        jax.block_until_ready(jax.jit(first_step)(argument))
        jax.block_until_ready(jax.jit(second_step)(argument))
        one, other = sizer.sizes_for(runs[-2]), sizer.sizes_for(runs[-1])
        from_disk = later.sizes_for(runs[-1])  # a later run: the second program's own entry answers
    finally:
        patches.restore()
        sizer.uninstall()
        later.uninstall()
    assert (sizer.compiles, sizer.session_hits, later.compiles) == (1, 1, 0)
    assert one.temp_bytes == other.temp_bytes == from_disk.temp_bytes  # type: ignore[union-attr]
    assert (one.source, from_disk.source) == ("compiled", "disk cache")  # type: ignore[union-attr]


@needs_libtpu
def test_a_program_lowered_under_the_tests_own_jax_settings_is_sized_in_the_tests_thread(
    jax_loaded: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    import jax
    import jax.numpy as jnp

    argument = jnp.ones((128, 256))
    sizer = TpuSizer(TPU_SPECS["TPU-v5e"], beside=True)
    threads: list[str] = []
    size_recipe = sizer._size_recipe
    monkeypatch.setattr(
        sizer, "_size_recipe", lambda recipe: (threads.append(threading.current_thread().name), size_recipe(recipe))[1]
    )
    assert sizer.install()
    try:
        with jax.default_matmul_precision("float32"):  # a thread-local setting the worker's thread lacks
            sizes = sizer.sizes_for(executable_of(lambda a: jnp.tanh(a @ a.T), argument))
    finally:
        sizer.uninstall()
    assert threads == [threading.current_thread().name] and sizes.source == "compiled"  # type: ignore[union-attr]


@needs_libtpu
def test_a_program_the_tpu_compiler_refuses_in_a_fixture_is_the_out_of_memory_of_every_test_using_it(
    jax_loaded: Any, pytester: pytest.Pytester
) -> None:
    """Issue 53.6: a fixture (of a test, or shared by a module's) that calls a program the compiler
    refuses raises the refusal in setup; each test that uses it is recorded as that out of memory at
    compile time, raised at the fixture's call, never an unrecorded error inside the plugin."""
    pytester.makepyfile(
        test_fixture="""
import jax
import jax.numpy as jnp
import pytest

big = jax.jit(lambda x: jnp.broadcast_to(x, (5, 2**30)) + 1.0)  # 20 GiB out, on a chip of 15.75G

@pytest.fixture
def per_test():
    return big(jnp.ones(()))

@pytest.fixture(scope="module")
def shared():
    return big(jnp.ones(()))

def test_function(per_test):
    pass

def test_module_a(shared):
    pass

def test_module_b(shared):
    pass
"""
    )
    result = pytester.runpytest_subprocess(
        "--devmem-device=sim:TPU-v5e", "--devmem-mode=compact", "--devmem-report=r.json", timeout=300
    )
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines(
        ["*out of device memory at compile time on sim:TPU-v5e*", "*raised at the call in test_fixture.py:9"]
    )
    assert "raise plan.raises.error()" not in result.stdout.str()
    report = json.loads((pytester.path / "r.json").read_text())
    records = {r["test_id"].split("::")[-1]: r for r in report["records"]}
    assert set(records) == {"test_function", "test_module_a", "test_module_b"}, report.get("unrecorded")
    for record in records.values():
        assert record["oom"]["kind"] == "capacity" and record["oom"]["compile_time"] is True, record["oom"]


@needs_libtpu
def test_the_host_running_out_is_said_to_be_the_hosts_not_the_chips(jax_loaded: Any, pytester: pytest.Pytester) -> None:
    """Issue 53.4: a 19.53 GiB output the v4 compile accepts (30.75G) is run on the CPU, whose host
    runs out (here an address space limited to 4 GiB above what the run holds at its start): the
    record says the host ran out, not the chip, and what to do."""
    pytester.makeconftest(
        """
import resource

def pytest_configure(config):
    with open("/proc/self/status") as status:
        held = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize"))
    resource.setrlimit(resource.RLIMIT_AS, (held + 4 * 2**30, resource.RLIM_INFINITY))
"""
    )
    pytester.makepyfile(
        test_host="import jax.numpy as jnp\n\ndef test_big():\n    jnp.ones((20000, 2**18)).block_until_ready()\n"
    )
    result = pytester.runpytest_subprocess(
        "--devmem-device=sim:TPU-v4", "--devmem-mode=compact", "--devmem-report=r.json", timeout=300
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*out of host memory, not sim:TPU-v4's: the CPU that runs the test could not allocate*20971520000 bytes*",
            "*the model of it fit what ran, and the TPU-v4 compiler accepted jit(broadcast_in_dim)*",
            "*smaller shapes in the test, or a runner with more memory*",
            "out of device or host memory: 1 test(s): test_host.py::test_big (host)",
        ]
    )
    assert "out of device memory for real" not in result.stdout.str()
    record = json.loads((pytester.path / "r.json").read_text())["records"][0]
    assert record["oom"]["host"] is True and "kind" not in record["oom"]
    assert record["trace"]["executables"]["jit(broadcast_in_dim)"]["sized_for"] == "TPU-v4"  # needed, never run


@needs_libtpu
def test_a_refusals_requested_bytes_are_the_outputs_exact_bytes_where_the_compilers_figure_rounds_them(
    jax_loaded: Any, pytester: pytest.Pytester
) -> None:
    """Issue 53.9: libtpu prints 19.53G for an output of 20,971,520,000 B; the record keeps the exact
    bytes, not 20,970,177,823 read back from the two decimals."""
    pytester.makepyfile(
        test_out="""
import jax
import jax.numpy as jnp

def test_big():
    jax.jit(lambda x: jnp.broadcast_to(x, (20000, 2**18)) + 1.0)(jnp.ones(()))
"""
    )
    result = pytester.runpytest_subprocess(
        "--devmem-device=sim:TPU-v5e", "--devmem-mode=compact", "--devmem-report=r.json", timeout=300
    )
    result.assert_outcomes(failed=1)
    oom = json.loads((pytester.path / "r.json").read_text())["records"][0]["oom"]
    assert oom["compile_time"] is True and oom["requested"] == 20000 * 2**18 * 4, oom
