"""The deviceless compiles' disk cache, hostile: an entry with a negative, boolean, infinite or
impossible size, a FIFO, a device or a link to one is a miss (compiled again, written anew, warned
about naming the file), never a figure; what a clean run gives is what a run with such a cache gives."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from compilers import executable_of, needs_compiler, needs_libtpu

from pytest_devmem.capture.jax.gpu_compile import GpuSizer
from pytest_devmem.capture.jax.size_cache import MAX_ENTRY_BYTES, BadEntry, read_entry, writable
from pytest_devmem.capture.jax.sizes import ExecutableSizes
from pytest_devmem.capture.jax.tpu_compile import TpuSizer
from pytest_devmem.model.gpu_targets import gpu_spec
from pytest_devmem.model.tpu_targets import TPU_SPECS
from pytest_devmem.units import GiB, MiB, TiB

FIFO_POSSIBLE = hasattr(os, "mkfifo") and os.path.exists("/dev/zero")
needs_fifo = pytest.mark.skipif(not FIFO_POSSIBLE, reason="POSIX only")

SIZES = ("temp_bytes", "output_bytes")
GOOD = {"devices": 1, "temp_bytes": 4 * MiB, "output_bytes": 640 * 1024}


def _value(value: object) -> Callable[[Path], None]:
    """An attack that sets every size of an entry (never its device count) to `value`."""

    def attack(path: Path) -> None:
        data = json.loads(path.read_text())
        path.write_text(json.dumps({k: v if k == "devices" else value for k, v in data.items()}))

    return attack


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _link_to_dev_zero(path: Path) -> None:
    path.unlink()
    path.symlink_to("/dev/zero")


ATTACKS: dict[str, Callable[[Path], None]] = {
    "negative": _value(-4194560),
    "boolean": _value(True),
    "infinite": _value(float("inf")),  # written as JSON's Infinity
    "beyond-a-float": lambda path: path.write_text(
        '{"devices": 1, "temp_bytes": 1e999, "output_bytes": 1e999, "array_bytes": 1e999}'
    ),
    "impossible": _value(10**15),  # 909 TiB: more than any device holds
    "fifo": _fifo,
    "link-to-dev-zero": _link_to_dev_zero,
}
NEEDS_POSIX = {"fifo", "link-to-dev-zero"}


def attack_params(slow: tuple[str, ...] = ()) -> list[Any]:
    """Every attack, as parameters; those named in `slow` marked slow."""
    return [
        pytest.param(
            name, marks=[*([needs_fifo] if name in NEEDS_POSIX else []), *([pytest.mark.slow] if name in slow else [])]
        )
        for name in ATTACKS
    ]


def attack_all(directory: Path, name: str) -> list[Path]:
    entries = sorted(directory.glob("*.json"))
    assert entries, f"no cache entries in {directory}"
    for entry in entries:
        ATTACKS[name](entry)
    return entries


# -- one entry, read -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", attack_params())
def test_a_hostile_entry_is_refused_naming_the_file_within_a_second(tmp_path: Path, name: str) -> None:
    import time

    entry = tmp_path / "key.json"
    entry.write_text(json.dumps(GOOD))
    assert read_entry(entry, SIZES, 80 * GiB, devices=1) == GOOD
    ATTACKS[name](entry)
    started = time.perf_counter()
    with pytest.raises(BadEntry, match=str(entry)):
        read_entry(entry, SIZES, 80 * GiB, devices=1)
    assert time.perf_counter() - started < 1.0  # a FIFO never blocks, /dev/zero is never read


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"devices": 1, "temp_bytes": 1.5, "output_bytes": 0}', "1.5 is not a whole number of bytes"),
        ('{"devices": 1, "temp_bytes": "4MiB", "output_bytes": 0}', "'4MiB' is not a whole number of bytes"),
        ('{"devices": 1, "temp_bytes": null, "output_bytes": 0}', "None is not a whole number of bytes"),
        ('{"devices": 1, "output_bytes": 0}', "no 'temp_bytes'"),
        ('{"devices": 2, "temp_bytes": 0, "output_bytes": 0}', "'devices' is 2, where the program was compiled for 1"),
        ('{"devices": true, "temp_bytes": 0, "output_bytes": 0}', "'devices' is True"),
        ('{"devices": 1.0, "temp_bytes": 0, "output_bytes": 0}', "'devices' is 1.0"),
        ("[1, 2]", "not a JSON object"),
        ('{"devices": 1, "temp_bytes": ' + "9" * 5000 + ', "output_bytes": 0}', "not usable JSON"),
        (
            '{"devices": 1, "temp_bytes": 1000000000000000, "output_bytes": 0}',
            "(909.49 TiB) is more than 80.00 GiB, what one device of the target holds",
        ),
        ('{"devices": 1, "temp_bytes"', "not valid JSON"),
    ],
)
def test_an_entry_whose_values_a_user_could_not_give_is_refused(tmp_path: Path, text: str, problem: str) -> None:
    entry = tmp_path / "key.json"
    entry.write_text(text)
    with pytest.raises(BadEntry) as raised:
        read_entry(entry, SIZES, 80 * GiB, devices=1)
    assert str(raised.value).startswith(str(entry)) and problem in str(raised.value)


def test_an_entry_that_names_another_or_cannot_be_true_is_refused(tmp_path: Path) -> None:
    entry, about = tmp_path / "key.json", {"fingerprint": "a" * 64, "target": "TPU-v5e"}
    peak = {"buffers": {"buffers": [], "peak_bytes": 4 * MiB}}
    sizes = (*SIZES, "argument_bytes", "alias_bytes")
    good = {**GOOD, "argument_bytes": 0, "alias_bytes": 0}
    for data, problem in [
        ({**good, **about, "fingerprint": "b" * 64}, f"'fingerprint' is '{'b' * 64}', not '{'a' * 64}'"),
        ({**good, **about, "target": "TPU-v4"}, "'target' is 'TPU-v4', not 'TPU-v5e'"),
        (good, "'fingerprint' is None"),  # written before entries named what they size
        ({**good, **about, "temp_bytes": 256, **peak}, "'temp_bytes' is 256, less than the 4194304 bytes"),
        ({**good, **about, "alias_bytes": 1}, "'alias_bytes' is more than"),
    ]:
        entry.write_text(json.dumps(data))
        with pytest.raises(BadEntry, match=re.escape(problem)):
            read_entry(entry, sizes, 80 * GiB, devices=1, kept=("buffers",), about=about)
    entry.write_text(json.dumps({**good, **about, **peak}))
    assert read_entry(entry, sizes, 80 * GiB, devices=1, about=about) == {**good, **about}
    for size in (0, 1):  # a chip never holds fewer bytes than the array's dense size
        entry.write_text(json.dumps({"array_bytes": size}))
        with pytest.raises(BadEntry, match=f"{size} bytes, less than the array's 2048 dense bytes"):
            read_entry(entry, ("array_bytes",), 80 * GiB, least=2048)


def test_a_missing_entry_is_a_plain_miss_and_a_directory_or_a_large_file_is_refused(tmp_path: Path) -> None:
    assert read_entry(tmp_path / "absent.json", SIZES, GiB) is None
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(BadEntry, match="is a directory"):
        read_entry(tmp_path / "dir.json", SIZES, GiB)
    (tmp_path / "large.json").write_text(" " * (MAX_ENTRY_BYTES + 1) + json.dumps(GOOD))
    with pytest.raises(BadEntry, match="more than a cache entry of compiled sizes may have"):
        read_entry(tmp_path / "large.json", SIZES, GiB)


def test_sizes_beyond_a_device_or_a_program_without_its_buffers_are_never_written() -> None:
    buffers = {"buffers": {"buffers": []}}
    assert writable({"devices": 8, "temp_bytes": 80 * GiB, **buffers}, 80 * GiB)
    assert not writable({"devices": 1, "temp_bytes": TiB, **buffers}, 80 * GiB)
    assert not writable({"devices": 1, "temp_bytes": GiB}, 80 * GiB)  # read back, it would be a miss


# -- the sizers: a bad entry is a miss -------------------------------------------------------------


def mlp_gradient(params: tuple[Any, Any], x: Any) -> Any:
    import jax
    import jax.numpy as jnp

    return jax.grad(lambda p, y: jnp.sum(jnp.tanh(y @ p[0]) @ p[1]))(params, x)


def mlp_arguments() -> tuple[Any, ...]:
    import jax.numpy as jnp

    return (jnp.ones((256, 512)), jnp.ones((512, 64))), jnp.ones((1024, 256))


@needs_compiler
@pytest.mark.parametrize("name", attack_params(slow=("boolean", "beyond-a-float", "link-to-dev-zero")))  # 2 s each
def test_the_gpu_sizer_compiles_again_where_an_entry_cannot_be_believed(
    jax_loaded: Any, tmp_path: Path, name: str
) -> None:
    clean, attacked = (GpuSizer(gpu_spec("A100-80GB"), cache_dir=tmp_path) for _ in range(2))
    try:
        assert clean.install()  # before the executable is built: the sizer learns how it was lowered
        executable = executable_of(mlp_gradient, *mlp_arguments())
        compiled = clean.sizes_for(executable)
        assert isinstance(compiled, ExecutableSizes) and compiled.temp_bytes == 4 * MiB  # XLA:GPU's, for an A100
        entries = attack_all(tmp_path, name)
        assert attacked.install()
        again = attacked.sizes_for(executable)
    finally:
        clean.uninstall()
        attacked.uninstall()
    assert isinstance(again, ExecutableSizes)
    assert (again.source, again.temp_bytes, again.output_bytes) == (
        "compiled",
        compiled.temp_bytes,
        compiled.output_bytes,
    )
    assert (attacked.compiles, attacked.disk_hits) == (1, 0)
    problems = attacked.take_cache_problems()
    assert problems and all(str(entries[0]) in problem for problem in problems[:1])
    assert "not believed" in problems[0] and attacked.take_cache_problems() == []
    assert json.loads(entries[0].read_text())["temp_bytes"] == compiled.temp_bytes  # written anew


@needs_libtpu
@pytest.mark.parametrize("name", ["negative", "boolean", pytest.param("fifo", marks=needs_fifo)])
def test_the_tpu_sizer_sizes_arrays_and_executables_again_where_an_entry_cannot_be_believed(
    jax_loaded: Any, tmp_path: Path, name: str
) -> None:
    import jax.numpy as jnp

    clean, attacked = (TpuSizer(TPU_SPECS["TPU-v5e"], cache_dir=tmp_path) for _ in range(2))
    try:
        assert clean.install()
        executable = executable_of(lambda a: a * 2, jnp.ones((8, 3)))
        compiled, array = clean.sizes_for(executable), clean.shard_bytes((1024, 256), "float32")
        attack_all(tmp_path, name)  # the executable's entry and the array's
        assert attacked.install()
        again, array_again = attacked.sizes_for(executable), attacked.shard_bytes((1024, 256), "float32")
    finally:
        clean.uninstall()
        attacked.uninstall()
    assert array == array_again == MiB  # a f32[1024,256] in XLA:TPU's tiles, not -1048576
    assert isinstance(again, ExecutableSizes) and isinstance(compiled, ExecutableSizes)
    assert (again.source, again.output_bytes) == ("compiled", compiled.output_bytes)
    assert (attacked.costs.arrays_from_disk, attacked.costs.arrays_compiled) == (0, 1)
    assert len(attacked.take_cache_problems()) >= 2  # the array's entry and the executable's


# -- a session: the figure is a clean run's, with a warning naming the file ------------------------

GRADIENT_TEST = """
import jax
import jax.numpy as jnp

def test_gradient():
    params = (jnp.ones((256, 512)), jnp.ones((512, 64)))
    loss = lambda p, x: jnp.sum(jnp.tanh(x @ p[0]) @ p[1])
    jax.block_until_ready(jax.grad(loss)(params, jnp.ones((1024, 256))))
"""


def _peak(pytester: pytest.Pytester, report: str) -> int:
    return int(json.loads((pytester.path / report).read_text())["records"][0]["peak_bytes_in_use"])


@needs_compiler
@pytest.mark.parametrize(
    ("device", "cache", "names"),
    [
        pytest.param(
            "sim:A100-80GB",
            "devmem-gpu-sizes",
            # a fifo: a whole run never blocks on one (every attack: the sizer tests above, in-process)
            ["negative", *(["fifo"] if FIFO_POSSIBLE else [])],
            marks=pytest.mark.slow,  # 4 s a session
        ),
        pytest.param("sim:TPU-v5e", "devmem-tpu-sizes", ["negative"], marks=[pytest.mark.slow, needs_libtpu]),
    ],
    ids=["gpu", "tpu"],
)
def test_a_run_with_a_hostile_cache_gives_a_clean_runs_figure_and_names_the_file(
    pytester: pytest.Pytester, device: str, cache: str, names: list[str]
) -> None:
    pytester.makepyfile(test_gradient=GRADIENT_TEST)
    mode = "--devmem-mode=compact" if "TPU" in device else "--devmem-mode=ondemand"
    arguments = (mode, f"--devmem-device={device}", "-W", "default::RuntimeWarning")
    # each session in its own process: JAX's caches in this one would answer a second session's compiles
    pytester.runpytest_subprocess(*arguments, "--devmem-report=clean.json", "--devmem-update").assert_outcomes(passed=1)
    clean = _peak(pytester, "clean.json")
    for name in names:
        entries = attack_all(pytester.path / ".pytest_cache" / "d" / cache, name)
        result = pytester.runpytest_subprocess(*arguments, f"--devmem-report={name}.json")
        result.assert_outcomes(passed=1)
        assert _peak(pytester, f"{name}.json") == clean, name
        output = result.stdout.str()
        assert "improved" not in output and "regress" not in output, name
        assert f"{entries[0]}" in output and "not believed" in output, name
