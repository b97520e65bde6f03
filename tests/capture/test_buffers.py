"""The buffers at a program's peak, read from XLA's own statement of it: on the CPU from the executable
JAX compiled (no compile of ours), for a GPU and a TPU from the dump of the sizer's own compile. The
protocol buffers are read without the protobuf package, and held here to the generated classes of
XLA's hlo.proto (TensorFlow's copy) where TensorFlow is installed."""

from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path
from typing import Any

import pytest
from compilers import executable_of, needs_compiler, needs_libtpu

from pytest_devmem.capture.jax.buffers import dump_options, from_executable, read_dump
from pytest_devmem.capture.jax.hlo_proto import ProtoError, fields, read_hlo_proto, read_program
from pytest_devmem.model.buffers import ProgramBuffers
from pytest_devmem.units import MiB

HERE = Path(__file__).name
WIDE_LINE = 29  # the line of `wide = ...` below


def step(x: Any, w: Any) -> Any:
    import jax.numpy as jnp

    y = x @ w
    wide = jnp.sort(jnp.exp(jnp.concatenate([x] * 16, axis=0)), axis=0)  # the injected wide intermediate
    return y.sum() + wide.sum()


def inputs() -> tuple[Any, Any]:
    import jax.numpy as jnp

    return jnp.ones((256, 512), jnp.float32), jnp.ones((512, 512), jnp.float32)


def test_the_wide_line_is_where_this_file_says() -> None:
    assert "wide = " in Path(__file__).read_text().splitlines()[WIDE_LINE - 1]


def lines_of(found: ProgramBuffers) -> set[str]:
    return {line.strip().split("/")[-1] for buffer in found.buffers for line in buffer.at.split(",") if line}


def test_cpu_buffers_come_from_the_executable_with_the_users_line(jax_loaded: Any) -> None:
    found = from_executable(executable_of(step, *inputs()).xla_executable)
    assert found.peak_bytes == int(
        executable_of(step, *inputs()).xla_executable.get_compiled_memory_stats().temp_size_in_bytes
    )
    assert found.buffers[0].shape == "f32[4096,512]" and found.buffers[0].bytes == 8 * MiB
    assert f"{HERE}:{WIDE_LINE}" in lines_of(ProgramBuffers(found.buffers[:1]))
    assert found.source == "the module's schedule"


def test_the_schedules_peak_is_xlas_heap_simulation_on_the_same_program(jax_loaded: Any) -> None:
    """On the CPU, the executable states no heap simulation: the module's schedule stands for it. The
    dump of the same program has XLA's own; both name the same buffers at the peak."""
    import jax

    x, w = inputs()
    scheduled = from_executable(executable_of(step, x, w).xla_executable)
    with tempfile.TemporaryDirectory() as directory:
        jax.jit(step).lower(x, w).compile(compiler_options=dump_options(directory))
        simulated = read_dump(directory)
    assert simulated.source == "XLA's heap simulation"
    assert simulated.peak_bytes == scheduled.peak_bytes
    assert {(b.shape, b.op, b.bytes) for b in simulated.buffers} == {
        (b.shape, b.op, b.bytes) for b in scheduled.buffers
    }


def test_no_frame_of_the_plugin_or_of_pythons_own_library_is_taken_for_the_users_line() -> None:
    """A program lowered again for a GPU or TPU runs JAX's lowering rules in the plugin's worker
    thread: the ops they make carry that call's frames (the plugin's lowering.py, concurrent.futures),
    which a buffer named as its line."""
    import threading

    import pytest_devmem.capture.jax.lowering as lowering
    from pytest_devmem.capture.jax.buffers import users_file

    assert users_file(__file__) and users_file("tests/test_model.py")
    assert not users_file(lowering.__file__) and not users_file(threading.__file__) and not users_file("")


def test_a_jax_helpers_buffers_name_no_line_and_plans_of_one_name_are_taken_in_an_order_of_their_own() -> None:
    """A helper of JAX's (`jit(_normal)`) is traced once per shape in a process: its lines are those
    of whichever test called it first. And which of two plans of one name a record shows must not
    follow which ran first on JAX's fast path."""
    from pytest_devmem.capture.jax.executables import ExecutablePlan
    from pytest_devmem.capture.jax.window import JaxWindow
    from pytest_devmem.model.buffers import PeakBuffer

    def plan(signature: str, defined_in: str) -> ExecutablePlan:
        held = ProgramBuffers(
            (PeakBuffer(256, "u32[2,2]", "threefry2x32", at="tests/test_other.py:9"),), peak_bytes=256
        )
        return ExecutablePlan(
            "jit(_normal)",
            ("cpu:0",),
            (),
            True,
            {},
            (),
            (),
            (),
            signature=signature,
            defined_in=defined_in,
            buffers=held,
        )

    import jax._src.random as jax_random  # a file of JAX's own

    helper = f"_normal at {jax_random.__file__}:100"
    first, second = plan("u32[3,2]", helper), plan("u32[2,2]", helper)
    one, other = (
        JaxWindow(used={"jit(_normal)": {1: first, 2: second}}),
        JaxWindow(used={"jit(_normal)": {2: second, 1: first}}),
    )
    assert one.buffers() == other.buffers() and one.sizes() == other.sizes()
    assert one.buffers()["jit(_normal)"]["buffers"][0]["at"] == ""  # type: ignore[index]
    mine = JaxWindow(used={"jit(_normal)": {1: plan("f32[2]", "_normal at tests/test_model.py:3")}})
    assert mine.buffers()["jit(_normal)"]["buffers"][0]["at"] == "tests/test_other.py:9"  # type: ignore[index]


def test_bad_bytes_are_refused_and_an_empty_dump_says_so(tmp_path: Path) -> None:
    with pytest.raises(ProtoError):
        fields(b"\x0a\x10abc")  # a field longer than the bytes left
    with pytest.raises(ProtoError):
        fields(b"\x0f")  # wire type 7
    with pytest.raises(ProtoError, match="no buffer assignment"):
        read_dump(tmp_path)


@pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None, reason="TensorFlow's copy of XLA's hlo.proto is not installed"
)
def test_the_reading_matches_xlas_generated_protobuf_classes(jax_loaded: Any, tensorflow_loaded: Any) -> None:
    from tensorflow.compiler.xla.service import hlo_pb2

    xla_executable = executable_of(step, *inputs()).xla_executable
    module = xla_executable.hlo_modules()[0].as_serialized_hlo_module_proto()
    assignment = xla_executable.get_compiled_memory_stats().serialized_buffer_assignment_proto
    program = read_program(module, assignment)
    expected_module = hlo_pb2.HloModuleProto.FromString(module)
    expected = hlo_pb2.BufferAssignmentProto.FromString(assignment)
    assert program.name == expected_module.name and program.entry == expected_module.entry_computation_id
    assert {i.id: (i.name, i.opcode, tuple(i.operand_ids)) for i in program.instructions.values()} == {
        i.id: (i.name, i.opcode, tuple(i.operand_ids)) for c in expected_module.computations for i in c.instructions
    }
    assert {i.id: (list(i.shape.dimensions), i.op_name, i.stack_frame_id) for i in program.instructions.values()} == {
        i.id: (list(i.shape.dimensions), i.metadata.op_name, i.metadata.stack_frame_id)
        for c in expected_module.computations
        for i in c.instructions
    }
    assert program.sequences == {k: list(v.instruction_ids) for k, v in expected_module.schedule.sequences.items()}
    frames = expected_module.stack_frame_index
    assert program.files == list(frames.file_names)
    assert program.frames == [(f.file_location_id, f.parent_frame_id) for f in frames.stack_frames]
    assert {b.id: (b.size, b.instruction, b.color) for b in program.buffers.values()} == {
        b.id: (b.size, b.defined_at.instruction_id, b.color) for b in expected.logical_buffers
    }
    assert [(a.index, a.size, a.assigned) for a in program.allocations] == [
        (a.index, a.size, tuple((x.logical_buffer_id, x.offset, x.size) for x in a.assigned))
        for a in expected.buffer_allocations
    ]
    assert [a.temp for a in program.allocations] == [
        not (a.is_thread_local or a.is_entry_computation_parameter or a.maybe_live_out or a.is_constant)
        for a in expected.buffer_allocations
    ]
    with tempfile.TemporaryDirectory() as directory:  # a dump's HloProto, with its heap simulation
        import jax

        jax.jit(step).lower(*inputs()).compile(compiler_options=dump_options(directory))
        data = next(Path(directory).glob("*after_optimizations.hlo.pb")).read_bytes()
    dumped, proto = read_hlo_proto(data), hlo_pb2.HloProto.FromString(data)
    assert dumped.traces == [
        [(e.kind, e.buffer_id, e.share_with_canonical_id) for e in t.events]
        for t in proto.buffer_assignment.heap_simulator_traces
    ]


@pytest.mark.slow  # a deviceless XLA:GPU compile
@needs_compiler
def test_a_gpu_compile_states_the_wide_buffer_and_its_line(jax_loaded: Any) -> None:
    from pytest_devmem.capture.jax.gpu_compile import GpuSizer
    from pytest_devmem.capture.jax.sizes import ExecutableSizes
    from pytest_devmem.model.gpu_targets import gpu_spec

    sizer = GpuSizer(gpu_spec("H100-80GB"))
    assert sizer.install(), sizer.note
    try:
        sizes = sizer.sizes_for(executable_of(step, *inputs()))
    finally:
        sizer.uninstall()
    assert isinstance(sizes, ExecutableSizes) and sizes.buffers is not None, sizes
    largest = sizes.buffers.buffers[0]
    assert largest.shape == "f32[4096,512]" and largest.bytes == 8 * MiB
    assert f"{HERE}:{WIDE_LINE}" in lines_of(sizes.buffers)
    assert sizes.buffers.source == "XLA's heap simulation"


@pytest.mark.slow  # a deviceless XLA:TPU compile
@needs_libtpu
def test_a_tpu_compile_states_its_buffers_memory_spaces_and_padding(jax_loaded: Any) -> None:
    import jax.numpy as jnp

    from pytest_devmem.capture.jax.sizes import ExecutableSizes
    from pytest_devmem.capture.jax.tpu_compile import TpuSizer
    from pytest_devmem.model.tpu_targets import tpu_spec

    def small(x: Any) -> Any:
        return jnp.sort(x * 2.0, axis=0).sum(axis=0)  # an f32[8,3] intermediate: tiled (8, 128)

    sizer = TpuSizer(tpu_spec("TPU-v5e"))
    assert sizer.install(), sizer.note
    try:
        sizes = sizer.sizes_for(executable_of(step, *inputs()))
        tiled = sizer.sizes_for(executable_of(small, jnp.ones((8, 3), jnp.float32)))
    finally:
        sizer.uninstall()
    assert isinstance(sizes, ExecutableSizes) and sizes.buffers is not None, sizes
    hbm = [buffer for buffer in sizes.buffers.buffers if buffer.memory_space == 0]
    assert hbm and hbm[0].bytes == 8 * MiB and hbm[0].shape.endswith("[4096,512]")
    assert f"{HERE}:{WIDE_LINE}" in lines_of(sizes.buffers)
    assert any(buffer.memory_space == 1 for buffer in sizes.buffers.buffers)  # VMEM, outside HBM's figure
    assert sizes.buffers.peak_bytes <= sizes.temp_bytes
    assert isinstance(tiled, ExecutableSizes) and tiled.buffers is not None, tiled
    padded = [buffer for buffer in tiled.buffers.buffers if buffer.shape == "f32[8,3]" and buffer.memory_space == 0]
    for buffer in padded:  # XLA:TPU lays an f32[8,3] out in one (8, 128) tile: 4,096 bytes for 96
        assert buffer.logical_bytes == 96 and buffer.bytes > 96 and buffer.padding == buffer.bytes - 96
