"""The JAX capture keeps JAX's C++ fast path (jaxlib/pjit.cc calls back only its post-hook) and gives
there exactly the trace of JAX's Python dispatch path, without asking the device anything."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pytest_devmem.capture import TraceRecorder
from pytest_devmem.capture.jax import JaxCapture
from pytest_devmem.capture.jax.executables import parse_donations, parse_signature
from pytest_devmem.units import MiB


def events(recorder: TraceRecorder, work: Callable[[], Any]) -> list[tuple[str, int, int, str, str]]:
    recorder.begin()
    work()
    return [(e.action, e.pointer, e.size, e.label, e.device) for e in recorder.end()]


def test_runs_after_the_first_take_jax_fast_path_and_are_all_traced(capture: tuple[TraceRecorder, JaxCapture]) -> None:
    import jax
    import jax.numpy as jnp
    from jax._src.interpreters import pxla

    recorder, jax_capture = capture
    python_runs = []
    through_python = pxla.ExecuteReplicated.__call__

    def counted(executable: Any, *args: Any) -> Any:
        python_runs.append(executable.name)
        return through_python(executable, *args)

    setattr(pxla.ExecuteReplicated, "__call__", counted)
    try:
        step = jax.jit(lambda x, w: 0.9 * x + 0.1 * (x @ w))
        x, w = jnp.ones((64, 64)), jnp.ones((64, 64))
        python_runs.clear()

        def loop() -> None:
            y = x
            for _ in range(5):
                y = step(y, w)

        trace = events(recorder, loop)
    finally:
        setattr(pxla.ExecuteReplicated, "__call__", through_python)
    assert python_runs == ["jit(<lambda>)"]  # the first run compiles; the other four never reach Python dispatch
    assert jax_capture.window.executables == {"jit(<lambda>)": 5} and jax_capture.window.failure == ""
    assert [(action, size) for action, _, size, _, _ in trace if action == "allocate"] == [
        ("allocate", 64 * 64 * 4)
    ] * 5


def workload() -> None:
    """Every kind of run the capture tells apart: outputs, temps, donation (aliased, by keyword, with
    static arguments), host arguments, constants, PRNG key arrays, compiled calls, transfers, eager ops."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    layer = jax.jit(lambda a, b: jnp.tanh(a @ b) @ b)
    update = jax.jit(
        lambda params, grads, scale: params - scale * grads, donate_argnames=("params",), static_argnames=("scale",)
    )
    weights = jnp.ones((32, 32))
    with_constant = jax.jit(lambda x: x @ weights + np.arange(32.0, dtype=np.float32))
    keyed = jax.jit(lambda key, x: (jax.random.split(key)[0], x + jax.random.normal(key, x.shape)))
    compiled = layer.lower(jnp.ones((64, 64)), jnp.ones((64, 64))).compile()
    host = np.ones((64, 64), np.float32)
    key = jax.random.key(0)
    params = jax.device_put(host)
    x = jnp.zeros((64, 64))
    for _ in range(3):
        x = layer(x, params)
        params = update(params, x, scale=0.5)
        y = layer(host, params)  # a host argument, transferred for the run
        z = with_constant(x[:, :32])
        key, x = keyed(key, x)
        c = compiled(x, params)
        shared = jax.device_put(params, params.sharding)  # its own placement: the buffers are reused
        scalar = x.sum() * 2.0
    del y, z, c, shared, scalar
    x.delete()


def test_fast_and_python_dispatch_give_the_same_trace(capture: tuple[TraceRecorder, JaxCapture]) -> None:
    from jax._src import pjit
    from jax._src.interpreters import pxla
    from jax._src.lib import _jax

    recorder, jax_capture = capture
    workload()  # compiled before either window: both see cache hits only
    fast = events(recorder, workload)
    assert jax_capture.window.failure == ""
    fast_path_data, compiled_call = pjit._get_fastpath_data, pxla.MeshExecutable.create_cpp_call
    setattr(pjit, "_get_fastpath_data", lambda *args, **kwargs: None)
    setattr(pxla.MeshExecutable, "create_cpp_call", lambda executable, params: None)
    _jax.PjitFunctionCache.clear_all()
    try:
        python = events(recorder, workload)
    finally:
        setattr(pjit, "_get_fastpath_data", fast_path_data)
        setattr(pxla.MeshExecutable, "create_cpp_call", compiled_call)
    assert jax_capture.window.failure == ""
    assert fast == python
    labels = {label for _, _, _, label, _ in fast}
    assert {"jit(<lambda>) temp", "jit(<lambda>) argument", "device_put"} <= labels
    assert {device for _, _, _, _, device in fast} == {"cpu:0"}


def test_the_capture_never_asks_the_device_for_pointers_or_sizes(capture: tuple[TraceRecorder, JaxCapture]) -> None:
    from jax._src.lib import xla_client

    recorder, jax_capture = capture
    asked = []
    originals = {
        name: getattr(xla_client.ArrayImpl, name) for name in ("unsafe_buffer_pointer", "on_device_size_in_bytes")
    }

    def refuse(name: str) -> Callable[..., Any]:
        def ask(array: Any) -> Any:
            asked.append(name)
            return originals[name](array)

        return ask

    for name in originals:
        setattr(xla_client.ArrayImpl, name, refuse(name))
    try:
        trace = events(recorder, workload)
    finally:
        for name, original in originals.items():
            setattr(xla_client.ArrayImpl, name, original)
    assert asked == [] and trace and jax_capture.window.failure == ""


def test_a_donated_device_put_array_keeps_its_one_allocation(capture: tuple[TraceRecorder, JaxCapture]) -> None:
    import jax
    import numpy as np

    recorder, _ = capture
    step = jax.jit(lambda x: x + 1, donate_argnums=0)

    def donate() -> None:
        x = jax.device_put(np.zeros(16 * MiB, np.float32))  # 64 MiB
        for _ in range(3):
            x = step(x)  # the first run compiles, the others take the fast path
        del x

    trace = events(recorder, donate)
    assert trace == [("allocate", 1, 64 * MiB, "device_put", "cpu:0"), ("free", 1, 64 * MiB, "device_put", "cpu:0")]


def test_debug_nans_keeps_its_check_and_the_fast_path_stays_traced(capture: tuple[TraceRecorder, JaxCapture]) -> None:
    import jax
    import jax.numpy as jnp

    recorder, jax_capture = capture
    root = jax.jit(jnp.sqrt)
    ones, negative = jnp.ones(8), -jnp.ones(8)
    # the context manager sets this thread's check (a global `config.update` is shadowed, in JAX
    # itself, by the None a `debug_nans(False)` block leaves on the thread: see post_hook.py)
    with jax.debug_nans(True):
        trace = events(recorder, lambda: [root(ones) for _ in range(3)])
        with pytest.raises(FloatingPointError):
            root(negative)
    assert jax_capture.window.executables == {"jit(sqrt)": 3}
    assert [action for action, *_ in trace].count("allocate") == 3
    after = events(recorder, lambda: [root(ones) for _ in range(3)])
    assert [action for action, *_ in after].count("allocate") == 3 and jax_capture.window.failure == ""


def test_a_capture_installed_after_jax_left_its_thread_post_hook_set_still_sees_the_fast_path(
    jax_loaded: object,
) -> None:
    """Every `with config.debug_nans(False)` (core.jaxpr_as_fun enters one, so differentiating a
    model does) leaves the thread's post-hook set to None, which shadows the global hook for good
    (jax/_src/api.py, `_update_debug_special_thread_local`). A capture installed after that, as in a
    run where an unmeasured test ran first, must still see every run on the fast path."""
    import jax
    import jax.numpy as jnp
    from jax._src import api, config

    with config.debug_nans(False):
        pass
    assert api._post_hook_state.get_local() is None  # what JAX leaves behind
    recorder = TraceRecorder()
    jax_capture = JaxCapture(recorder)
    assert jax_capture.install(), jax_capture.note
    try:
        step = jax.jit(lambda a: jnp.tanh(a) * 2)
        x = jnp.ones(1024)
        trace = events(recorder, lambda: [step(x) for _ in range(4)])
        assert jax_capture.window.executables["jit(<lambda>)"] == 4
        assert [event[3] for event in trace].count("jit(<lambda>)") == 8  # four outputs allocated and freed
    finally:
        jax_capture.uninstall()
    assert api._post_hook_state.get_local() is None  # the thread's value back as JAX set it


def test_an_executables_signature_is_read_from_the_compiled_module_header() -> None:
    header = "HloModule jit_f, entry_computation_layout={(f32[4,3]{1,0}, /*index=1*/bf16[3]{0:T(256)})->(f32[4]{0}, s32[])}, x={}"
    assert parse_signature(header) == "(f32[4,3], bf16[3])->(f32[4], s32[])"
    assert parse_signature("HloModule jit_f") == ""


def test_donations_are_read_from_the_compiled_module_header() -> None:
    header = (
        "HloModule jit_f, is_scheduled=true, input_output_alias={ {0}: (0, {}, may-alias), {2}: (3, {}, must-alias), {1,0}: (1, {}, may-alias) }, "
        "buffer_donor={ (1, {}), (4, {}) }, entry_computation_layout={(f32[8]{0})->f32[8]{0}}"
    )
    assert parse_donations(header) == ({0: 0, 2: 3}, {1, 4})  # an alias into a nested output is left out
    assert parse_donations("HloModule jit_f, input_output_alias={ {}: (0, {}, may-alias) }") == ({0: 0}, set())
    assert parse_donations("HloModule jit_f, entry_computation_layout={()->f32[]}") == ({}, set())


def test_executables_that_share_a_first_output_but_run_differently_leave_the_fast_path() -> None:
    from pytest_devmem.capture.jax.executables import ExecutablePlan, Executables

    cleared = []
    executables = Executables(lambda: cleared.append(True))
    aval, sharding = object(), object()

    def plan(temp: int) -> ExecutablePlan:
        return ExecutablePlan(
            label="jit(f)",
            devices=("cpu:0",),
            temps=(("cpu:0", temp),),
            temp_known=True,
            aliases={},
            donated=(),
            kept=(0,),
            in_shardings=(sharding,),
        )

    class Output:
        def __init__(self) -> None:
            self.aval, self.sharding = aval, sharding

    first = plan(1024)
    assert executables.remember(aval, sharding, first) and executables.named_by(Output()) is first
    assert executables.remember(aval, sharding, plan(1024))  # runs the same: either may stand for the other
    assert not executables.remember(aval, sharding, plan(4096)) and cleared == [True]  # JAX's fast-path entries go
    assert executables.named_by(Output()) is None and not executables.remember(aval, sharding, first)


def test_a_run_that_learns_it_reads_host_values_is_no_step_any_more_on_the_fast_path(
    capture: tuple[TraceRecorder, JaxCapture],
) -> None:
    """A function run as a step (device arrays in) and then given a host array: its first run with
    the host array teaches the capture that its runs read arguments, so the runs after it, on JAX's
    fast path with the same output objects, record the host array's transfer, as the Python path
    does (the post-hook forgets the last step it matched, not only the look-up table)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    recorder, jax_capture = capture
    double = jax.jit(lambda x: x * 2)
    device, host = jnp.ones((16, 16)), np.ones((16, 16), np.float32)

    def work() -> None:
        y = device
        for _ in range(3):
            y = double(y)  # steps: the post-hook's last match
        for _ in range(3):
            y = double(host)  # the first on the Python path, the next two on the fast path

    double(device)  # compiled before the window
    trace = events(recorder, work)
    assert jax_capture.window.failure == ""
    transfers = [size for action, _, size, label, _ in trace if action == "allocate" and label.endswith(" argument")]
    assert transfers == [16 * 16 * 4] * 3


def test_a_step_loop_makes_no_collector_pass_and_its_records_are_written_as_they_accumulate(
    capture: tuple[TraceRecorder, JaxCapture], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run on the fast path leaves nothing the garbage collector tracks (its record and its output's
    free are plain numbers in one list), so a loop of them triggers no collection; and with no
    collection to flush them, the records are still written into the trace's columns once FLUSH_AT
    are held (checked every FLUSH_CHECK ids), so a long loop's memory stays bounded."""
    import gc

    import jax
    import jax.numpy as jnp

    from pytest_devmem.capture import recorder as recorder_module
    from pytest_devmem.capture.jax import capture as capture_module

    monkeypatch.setattr(recorder_module, "FLUSH_AT", 256)
    monkeypatch.setattr(capture_module, "FLUSH_CHECK", 64)
    recorder, jax_capture = capture
    step = jax.jit(lambda x, w: 0.9 * x + 0.1 * (x @ w))
    x, w = jnp.ones((32, 32)), jnp.ones((32, 32))
    x = step(x, w)  # compiled, and a step already, before the window
    passes: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            passes.append(info["generation"])

    recorder.begin()
    x = step(x, w)
    gc.callbacks.append(count)
    try:
        for _ in range(3000):
            x = step(x, w)
        held = len(recorder._pending) // 4
    finally:
        gc.callbacks.remove(count)
    trace = recorder.end()
    assert passes == []
    assert held <= 256 + 2 * 64  # written as they accumulate, not only at the window's end
    assert jax_capture.window.executables == {"jit(<lambda>)": 3001}
    assert [e.action for e in trace][:4] == ["allocate", "allocate", "free", "allocate"]
    assert len(trace) == 3001 + 3000  # every output allocated, and each but the last one freed


def test_a_fault_while_writing_the_records_inside_a_run_stops_the_capture_not_the_test(
    capture: tuple[TraceRecorder, JaxCapture], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The records are written from inside JAX's call once enough are held: a fault there (a bug of
    the capture's) reaches the window's notes, never the jitted call that happened to trigger it."""
    import jax
    import jax.numpy as jnp

    from pytest_devmem.capture import recorder as recorder_module
    from pytest_devmem.capture.jax import capture as capture_module

    monkeypatch.setattr(recorder_module, "FLUSH_AT", 16)
    monkeypatch.setattr(capture_module, "FLUSH_CHECK", 8)
    recorder, jax_capture = capture
    step = jax.jit(lambda x: x + 1)
    x = step(jnp.ones((8,)))
    recorder.begin()
    jax_capture.begin()

    def broken() -> None:
        raise RuntimeError("a bug while writing")

    monkeypatch.setattr(recorder, "_write_pending", broken)
    for _ in range(200):
        x = step(x)  # never raises
    monkeypatch.undo()
    recorder.end()
    assert float(x[0]) == 202.0  # 1, then 201 runs
    assert "RuntimeError: a bug while writing" in jax_capture.window.failure
