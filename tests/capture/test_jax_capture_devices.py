"""Each JAX allocation on its own device, with known answers, on 4 CPU devices
(`--xla_force_host_platform_device_count=4`, set before JAX starts: the tests run in a child pytest
with the plugin, which writes each test's trace)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from pytest_devmem.model.trace import Trace
from pytest_devmem.units import MiB

PER_DEVICE = """
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

MiB = 2**20
mesh = Mesh(np.array(jax.devices()), ("x",))


def expect(name, value):
    path = Path("expected.json")
    known = json.loads(path.read_text()) if path.exists() else {}
    known[name] = value
    path.write_text(json.dumps(known))


def test_two_devices():
    on_one = jax.device_put(np.zeros(16 * MiB, np.float32), jax.devices()[1])  # 64 MiB
    on_two = jax.device_put(np.zeros(16 * MiB, np.float32), jax.devices()[2])
    assert {on_one.sharding.device_set.pop().id, on_two.sharding.device_set.pop().id} == {1, 2}


def test_pmap_of_a_host_array():
    doubled = jax.pmap(lambda x: x * 2)(np.ones((4, 4 * MiB), np.float32))  # 16 MiB a device, in and out
    assert doubled.shape == (4, 4 * MiB)


def test_sharded_array():
    sharded = jax.device_put(np.zeros((4 * 4096, 1024), np.float32), NamedSharding(mesh, P("x")))  # 64 MiB
    assert len(sharded.addressable_shards) == 4


def test_replicated_array():
    replicated = jax.device_put(np.zeros((4096, 1024), np.float32), NamedSharding(mesh, P()))  # 16 MiB, a copy each
    assert len(replicated.addressable_shards) == 4


def test_spmd_step_and_its_donation():
    layer = jax.jit(lambda a: jnp.tanh(a @ a.T) @ a)
    update = jax.jit(lambda a: a * 0.5, donate_argnums=0)
    a = jax.device_put(np.ones((2048, 256), np.float32), NamedSharding(mesh, P("x")))  # 2 MiB: 512 KiB a device
    expect("temp", layer.lower(a).compile().memory_analysis().temp_size_in_bytes)
    for _ in range(3):  # the first run compiles, the others take JAX's fast path
        out = layer(a)
        a = update(a)  # donated and aliased: a keeps its allocations
    del out
"""


def test_a_sharded_executables_temp_is_named_per_device_and_summed_apart() -> None:
    """XLA's temp_size_in_bytes is per device: 268,435,456 on each of 4 devices is that figure per
    device, and 1,073,741,824 only as the sum over devices."""
    from pytest_devmem.model.executables import executable_summary
    from pytest_devmem.model.trace import ALLOCATE_CODE

    trace = Trace()
    for device in range(4):
        trace.add(
            ALLOCATE_CODE, device + 1, 268_435_456, 0.0, source="jax", label="jit(step) temp", device=f"cpu:{device}"
        )
        trace.add(ALLOCATE_CODE, device + 11, 4 * MiB, 0.0, source="jax", label="jit(step)", device=f"cpu:{device}")
    step = executable_summary(trace, {"jit(step)": 1})["jit(step)"]
    assert step["temp_bytes_per_device"] == 268_435_456 and step["devices"] == 4
    assert step["temp_bytes"] == 1_073_741_824 and step["output_bytes"] == 16 * MiB  # sums, over the devices


COPIES = """
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

mesh = Mesh(np.array(jax.devices()), ("x",))


def test_jit_copies_an_uncommitted_weight():
    w = jnp.ones((1024, 1024), jnp.float32)  # 4 MiB, made without a sharding: on device 0, uncommitted
    x = jax.device_put(np.ones((1024, 1024), np.float32), NamedSharding(mesh, P("x")))  # 1 MiB a device
    jax.jit(lambda w, x: x @ w)(w, x).block_until_ready()


def test_pmap_copies_an_unmapped_weight():
    w = jnp.ones((1024, 1024), jnp.float32)
    jax.pmap(lambda w, x: x @ w, in_axes=(None, 0))(w, np.ones((4, 256, 1024), np.float32)).block_until_ready()
"""


def test_a_weight_jax_copies_to_the_other_devices_is_on_each_of_them(
    jax_loaded: object, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An uncommitted 4 MiB weight used beside an input sharded over 4 devices (or by pmap with
    in_axes=None) is copied by JAX to devices 1-3 for the run (its buffer pointers show it; XLA's
    arguments hold it on every device): each of them holds the 4 MiB, not only device 0."""
    traces = run_on_four_devices(pytester, monkeypatch, "test_copies", COPIES, passed=2)
    for test in ("test_jit_copies", "test_pmap_copies"):
        copies = Counter(
            e.device
            for e in trace_of(traces, test)
            if e.action == "allocate" and e.label.endswith(" argument") and e.size == 4 * MiB
        )
        assert copies == {"cpu:1": 1, "cpu:2": 1, "cpu:3": 1}, test


def trace_of(directory: Path, test: str) -> Trace:
    [path] = list(directory.glob(f"*{test}*.csv"))
    return Trace.read_csv(path)


def allocations(trace: Trace, label: str | None = None) -> Counter[tuple[str, int]]:
    return Counter((e.device, e.size) for e in trace if e.action == "allocate" and (label is None or e.label == label))


def run_on_four_devices(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, name: str, suite: str, passed: int
) -> Path:
    """`suite` run under prealloc in a fresh process with 4 CPU devices (set before JAX starts), its
    traces and report written; the traces' folder."""
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
    pytester.makepyfile(**{name: suite})
    result = pytester.runpytest_subprocess(
        "--devmem-mode=prealloc", "--devmem-traces=traces", "--devmem-report=r.json", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=passed)
    return pytester.path / "traces"


@pytest.mark.slow  # about 15 s: a sharded JAX suite in a fresh process
def test_each_allocation_is_on_its_device(
    jax_loaded: object, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    traces = run_on_four_devices(pytester, monkeypatch, "test_devices", PER_DEVICE, passed=5)

    assert allocations(trace_of(traces, "test_two_devices")) == Counter(
        {("cpu:1", 64 * MiB): 1, ("cpu:2", 64 * MiB): 1}
    )

    pmap = trace_of(traces, "test_pmap_of_a_host_array")
    arguments = Counter((e.device, e.size) for e in pmap if e.action == "allocate" and e.label.endswith(" argument"))
    outputs = Counter(
        (e.device, e.size) for e in pmap if e.action == "allocate" and not e.label.endswith((" argument", " temp"))
    )
    per_device = Counter({(f"cpu:{k}", 16 * MiB): 1 for k in range(4)})
    assert arguments == per_device and outputs == per_device

    assert allocations(trace_of(traces, "test_sharded_array")) == per_device
    assert allocations(trace_of(traces, "test_replicated_array")) == per_device

    spmd = trace_of(traces, "test_spmd_step_and_its_donation")
    temp = json.loads((pytester.path / "expected.json").read_text())["temp"]
    assert temp > 0
    assert allocations(spmd, "device_put") == Counter({(f"cpu:{k}", 512 * 1024): 1 for k in range(4)})
    assert allocations(spmd, "jit(<lambda>) temp") == Counter(
        {(f"cpu:{k}", temp): 3 for k in range(4)}
    )  # per device, per run
    layer_outputs = allocations(spmd, "jit(<lambda>)")
    assert layer_outputs == Counter(
        {(f"cpu:{k}", 512 * 1024): 3 for k in range(4)}
    )  # the donated update allocated nothing
    live = {e.pointer for e in spmd if e.action == "allocate"} - {e.pointer for e in spmd if e.action == "free"}
    assert not live  # everything the test made was freed when it ended
    [record] = [
        r
        for r in json.loads((pytester.path / "r.json").read_text())["records"]
        if r["test_id"].endswith("spmd_step_and_its_donation")
    ]
    step = record["trace"]["executables"]["jit(<lambda>)"]
    assert step["temp_bytes_per_device"] == temp and step["devices"] == 4  # XLA's figure, per device
    assert step["temp_bytes"] == 3 * 4 * temp  # the sum over its runs and devices, named as one


PUTS = """
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

mesh = Mesh(np.array(jax.devices()), ("x",))


def pointer(array, device=0):
    return array.addressable_shards[device].data.unsafe_buffer_pointer()


@pytest.fixture(scope="module")
def table():
    return jnp.ones((1024, 1024), jnp.float32)  # 4 MiB on cpu:0, made before the tests


@pytest.fixture(scope="module")
def weights():  # (one test donates it)
    return jnp.ones((1024, 1024), jnp.float32)


def test_replicating_keeps_the_array_on_its_own_device():
    a = jnp.ones((1024, 1024), jnp.float32)
    b = jax.device_put(a, NamedSharding(mesh, P()))
    assert pointer(b) == pointer(a)  # JAX kept a's buffer as cpu:0's replica; cpu:1-3 got copies
    del a  # b still holds it
    c = jax.device_put(b, jax.devices()[0])
    assert pointer(c) == pointer(b)  # gathered onto cpu:0: its replica itself
    del b  # cpu:1-3 freed; c holds cpu:0's, and only it
    again = jax.device_put(np.ones((1024, 1024), np.float32), jax.devices()[1])  # where b's copy was
    again.block_until_ready()
    c.block_until_ready()


def test_a_fixtures_array_put_where_it_is_is_not_the_tests(table):
    assert pointer(jax.device_put(table, jax.devices()[0])) == pointer(table)
    assert pointer(jax.device_put(table)) == pointer(table)
    replicated = jax.device_put(table, NamedSharding(mesh, P()))  # cpu:1-3's copies are the test's
    assert pointer(replicated) == pointer(table)


def test_a_donated_fixtures_array_is_not_the_tests(weights):
    step = jax.jit(lambda w: w * 0.5, donate_argnums=0)
    before = pointer(weights)
    assert pointer(step(weights)) == before  # XLA aliased it: the output is the fixture's buffer
"""


def test_a_shard_jax_keeps_in_place_is_counted_once_and_a_fixtures_never(
    jax_loaded: object, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """JAX keeps an array's buffer where it already holds the slice asked for (replicating a
    one-device array keeps it as that device's replica; gathering a replica onto its device takes
    it: jax/_src/array.py, `shard_device_array` and `shard_sharded_device_array_slow_path`), as the
    buffer pointers asserted in the tests show: such a shard is the array's allocation, not a copy,
    and where that array was made before the test (a fixture's), it is none of the test's memory."""
    traces = run_on_four_devices(pytester, monkeypatch, "test_puts", PUTS, passed=3)
    copies = Counter({(f"cpu:{k}", 4 * MiB): 1 for k in (1, 2, 3)})
    replicating = trace_of(traces, "test_replicating")
    assert allocations(replicating, "device_put") == copies + Counter({("cpu:1", 4 * MiB): 1})
    peaks = {
        r["test_id"].split("::")[-1]: {d["device"]: d["peak_bytes_requested"] for d in r["devices"]}
        for r in json.loads((pytester.path / "r.json").read_text())["records"]
    }
    # (cpu:0's 256 bytes more: jnp.ones's fill value, a scalar argument of its run)
    assert peaks["test_replicating_keeps_the_array_on_its_own_device"] == {
        "cpu:0": 4 * MiB + 256,
        **{f"cpu:{k}": 4 * MiB for k in (1, 2, 3)},
    }
    held = {e.pointer for e in replicating if e.action == "allocate"} - {
        e.pointer for e in replicating if e.action == "free"
    }
    assert not held  # the kept buffer freed once, when c, its last holder, went
    assert allocations(trace_of(traces, "test_a_fixtures_array")) == copies
    assert allocations(trace_of(traces, "test_a_donated_fixtures")) == Counter()


ASSEMBLED = """
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

MESH = Mesh(np.array(jax.devices()), ("data",))


def test_zeros_like_a_replicated_array():
    p = jax.device_put(np.ones((1024, 1024), np.float32), NamedSharding(MESH, P()))
    z = jnp.zeros_like(p)  # an optimizer's state of replicated parameters
    assert len(z.addressable_shards) == 4
    jax.block_until_ready(z)


def test_zeros_onto_rows():
    z = jnp.zeros((1024, 1024), jnp.float32, device=NamedSharding(MESH, P("data")))
    jax.block_until_ready(z)


def test_an_array_made_from_a_callback():
    data = np.ones((1024, 1024), np.float32)
    x = jax.make_array_from_callback(data.shape, NamedSharding(MESH, P("data")), lambda index: data[index])
    jax.block_until_ready(x)
"""


@pytest.mark.slow  # about 10 s: a sharded JAX suite in a fresh process
def test_an_array_jax_assembles_per_device_is_counted_on_every_device(
    jax_loaded: object, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`jax.make_array_from_callback` puts a value per device through `pxla.batched_device_put`, not
    through `jax.device_put`; `lax.full` onto a concrete sharding (`jnp.zeros`, `ones`, `full` and
    `*_like` of a sharded array) does so with a shard computed on the first device and taken from it
    by `addressable_data(0)` (jax/_src/lax/lax.py `full`, jax/_src/array.py): that device keeps the
    buffer, the others get copies. Not traced, a replicated optimizer state was missing from every
    device's figure (8 MiB where 12)."""
    traces = run_on_four_devices(pytester, monkeypatch, "test_assembled", ASSEMBLED, passed=3)
    peaks = {
        r["test_id"].split("::")[-1]: {d["device"]: d["peak_bytes_requested"] for d in r["devices"]}
        for r in json.loads((pytester.path / "r.json").read_text())["records"]
    }
    expected = {
        "test_zeros_like_a_replicated_array": 8 * MiB,  # p and its zeros, on each device
        "test_zeros_onto_rows": MiB,
        "test_an_array_made_from_a_callback": MiB,
    }
    for test, per_device in expected.items():
        assert {device: peak - peak % MiB for device, peak in peaks[test].items()} == {
            f"cpu:{k}": per_device for k in range(4)
        }, (test, peaks[test])
        assert peaks[test]["cpu:0"] - per_device < 4096, peaks[test]  # the fill value's scalars at most
        trace = trace_of(traces, test)
        held = {e.pointer for e in trace if e.action == "allocate"} - {e.pointer for e in trace if e.action == "free"}
        assert not held, test  # the kept buffer freed once, when its last holder went
    assert allocations(trace_of(traces, "test_zeros_onto_rows"), "device_put") == Counter(
        {(f"cpu:{k}", MiB): 1 for k in (1, 2, 3)}
    )
