"""What one JAX run or put allocates and frees, as the capture records it: per run of a compiled
executable, each output allocated (one allocation per addressable shard, on that shard's device,
sized from its shape, dtype and sharding) or handed a donated input's allocation where XLA aliased
them, one temp buffer of the executable's `temp_size_in_bytes` per device for the run, donated
inputs that were not aliased freed after it, and host values (or device arrays on other devices)
transferred for the run; per `jax.device_put`, each result a transfer of its own unless it shares
or took over the value's buffers, and so per array JAX assembles from values per device
(`make_array_from_callback`); per `Array.delete`, its allocation freed once no array holds it.
Each allocation is made at the user's line of the call (`call_sites.py`).

`RunRecording` is a part of `JaxCapture` (capture.py): the attributes it declares are the capture's.
Imports no framework."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from threading import get_ident
from typing import Any

from ..call_sites import CallSites
from ..recorder import TraceRecorder
from .executables import ExecutablePlan, Executables
from .holdings import Held, Holdings, Owner
from .shards import Asked, ShardSizes, device_label, kept_by_put, put_took_over, shards_of
from .window import JaxWindow

SOURCE = "jax"
DEVICE_PUT = "device_put"


class _Depth(threading.local):
    """How many of the capture's own puts and runs this thread is inside (each records its transfers)."""

    depth = 0


class RunRecording:
    """The capture's recording of runs, puts and deletions (a part of `JaxCapture`)."""

    _recorder: TraceRecorder
    _holdings: Holdings
    _shards: ShardSizes
    _array_type: Any
    _jax_array: Any
    _flatten: Callable[[Any], list[Any]]
    _donate_input: Any
    _always_copy: Any
    _window: JaxWindow
    _failed: bool
    _executables: Executables
    _step_plans: list[ExecutablePlan]
    _step_asked: list[Asked]
    call_sites: CallSites

    _inside = _Depth()

    def _fail(self, exc: Exception) -> None:
        raise NotImplementedError  # the capture's own (capture.py)

    def _execute(self, original: Callable[..., Any], executable: Any, args: tuple[Any, ...]) -> Any:
        raise NotImplementedError  # the capture's own (capture.py)

    def _wrap_execute(self, original: Callable[..., Any]) -> Callable[..., Any]:
        capture, inside = self, self._inside

        def __call__(executable: Any, *args: Any) -> Any:
            inside.depth += 1  # the host values it transfers are the run's (`_transfer`)
            try:
                return capture._execute(original, executable, args)
            finally:
                inside.depth -= 1

        return __call__

    def _record_step(self, plan: ExecutablePlan, output: Any, site: str) -> None:
        """`_record_run` for a run with one array out, nothing donated and no host values (its
        output's allocations, then its temps), as a compact step of the recorder's; this and every
        later run of it from the same line on the fast path (`_fast_hook`)."""
        record = self._recorder.step_record
        if record is None:
            return
        aval, sharding = output.aval, output.sharding
        known = self._executables.step_of(aval, sharding, plan, site)
        if known is None:
            outputs = tuple((size, SOURCE, plan.label, device) for device, size in self._shards.of(output) if size > 0)
            temps = tuple((size, SOURCE, plan.temp_label, device) for device, size in plan.temps if size > 0)
            step = self._recorder.step(outputs, temps, site)
            self._step_plans.append(plan)
            self._step_asked.append(self._shards.asked_of(output))
            assert len(self._step_plans) == step + 1
            known = self._executables.remember_step(aval, sharding, plan, step, site)
        buffer_id = next(self._recorder.ids)
        record((known[3], buffer_id, self._recorder.clock(), get_ident()))
        owner = Owner(output, self._holdings.collected_callback)
        owner.held = buffer_id  # its id alone: a Held is made only if it comes to be shared
        self._holdings.owners.add(owner)

    def _fast_parameters(
        self, plan: ExecutablePlan, function: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> list[Any]:
        """The executable's parameters in a fast-path call: its arguments flattened as JAX flattens
        them (static ones left out, keywords by name), behind the constants JAX passes first."""
        info = getattr(function, "_jit_info", None)
        static_numbers = tuple(getattr(info, "static_argnums", ()) or ())
        static_names = tuple(getattr(info, "static_argnames", ()) or ())
        if static_numbers and args:
            statics = {number % len(args) if number < 0 else number for number in static_numbers}
            args = tuple(value for position, value in enumerate(args) if position not in statics)
        if static_names:
            kwargs = {name: value for name, value in kwargs.items() if name not in static_names}
        flat = self._flatten((args, kwargs))
        constants = plan.arguments - len(flat)
        if plan.arguments < 0 or constants < 0:
            raise LookupError(
                f"{plan.label} was called on JAX's fast path with {len(flat)} arguments, its runs took {plan.arguments}"
            )
        return [flat[position - constants] if position >= constants else None for position in plan.kept]

    def _is_host(self, value: Any) -> bool:
        return value is not None and not isinstance(value, self._jax_array) and bool(getattr(value, "nbytes", 0))

    def _copies(self, plan: ExecutablePlan, position: int, value: Any) -> tuple[tuple[str, int], ...]:
        """A device array the executable wants on devices it is not on (an uncommitted `jnp.ones`
        beside an input sharded over 4 devices, a pmap's `in_axes=None`): JAX copies it there for
        the run (`shard_args`), each of those devices its share under the executable's sharding."""
        if not isinstance(value, self._jax_array) or position >= len(plan.in_shardings):
            return ()
        try:
            have = {device_label(device) for device in value.sharding.device_set}
            wanted = self._shards.copied(value, plan.in_shardings[position])
        except Exception:  # a value or sharding this cannot read: no copy assumed
            return ()
        return tuple((device, size) for device, size in wanted if device not in have)

    def _transfer(self, plan: ExecutablePlan, parameters: list[Any], site: str = "") -> list[int]:
        """Host values among the parameters, allocated on their parameter's devices for the run; and
        device arrays copied to the devices they are not on. Both are freed when the run ends."""
        transfers: list[int] = []
        for position, value in enumerate(parameters):
            if not self._is_host(value):
                for device, part in self._copies(plan, position, value):
                    transfers.append(self._recorder.allocate(part, SOURCE, plan.argument_label, device, site))
                continue
            sharding = plan.in_shardings[position] if position < len(plan.in_shardings) else None
            shards = (
                self._shards.copied(value, sharding)
                if sharding is not None
                else ((plan.devices[0] if plan.devices else "", int(value.nbytes)),)
            )
            for device, part in shards:
                transfers.append(self._recorder.allocate(part, SOURCE, plan.argument_label, device, site))
        return transfers

    def _record_run(
        self,
        plan: ExecutablePlan,
        parameters: list[Any] | None,
        outputs: Sequence[Any],
        transfers: list[int],
        site: str = "",
    ) -> None:
        """Outputs allocated (or handed a donated input's allocation), the temp buffers for the run,
        donated inputs and transfers freed; what it allocates made at `site`, the user's line of the call."""
        allocate, label, holdings, shards_of, array_type = (
            self._recorder.allocate,
            plan.label,
            self._holdings,
            self._shards.of,
            self._array_type,
        )
        runs = self._window.executables
        runs[label] = runs.get(label, 0) + 1
        self._window.ran(plan)
        if not plan.temp_known:
            self._window.temp_unknown.add(label)
        for index, output in enumerate(outputs):
            if (
                type(output) is not array_type
                and not isinstance(output, array_type)
                or holdings.held_by(output) is not None
            ):
                continue  # not an array, or one the run was given and gave back
            if parameters is not None and index in plan.aliases:
                donor = (
                    self._device_array(parameters[plan.aliases[index]])
                    if plan.aliases[index] < len(parameters)
                    else None
                )
                if donor is not None and donor.is_deleted():  # XLA aliased them: the output is the donor's buffer
                    held = holdings.hand_over(donor)
                    if held is not None:
                        holdings.hold(output, held)
                    continue  # (held by nothing: a buffer made before the test, as a fixture's, is not the test's)
            holdings.hold_new(
                output, [allocate(size, SOURCE, label, device, site) for device, size in shards_of(output)]
            )
        if plan.temps:
            free = self._recorder.free
            for temp in [allocate(size, SOURCE, plan.temp_label, device, site) for device, size in plan.temps]:
                free(temp)
        if parameters is not None:
            for position in plan.donated:  # donated, and its buffers became no output's
                donor = self._device_array(parameters[position]) if position < len(parameters) else None
                if donor is not None and donor.is_deleted():
                    holdings.release(donor)
        for transfer in transfers:
            self._recorder.free(transfer)

    def _note(
        self,
        values: Sequence[Any],
        plan: ExecutablePlan | None = None,
        parameters: Sequence[Any] | None = None,
        kept: frozenset[str] = frozenset(),
    ) -> None:
        """Inside a shared fixture's pause (`FixtureNotes.noting`): the arrays among `values`, each
        shard's device and bytes (as the target sizes them), noted as what JAX holds for that fixture;
        and the target compiler's entry that sized the run that made them (`plan`'s, or that of the
        executable the first of them names), as what the fixture needed. An output of `plan`'s run
        that XLA aliased to a donated one of its `parameters`, and a shard on a device in `kept` (a
        put that kept its value's shard there), hold what the donor or the value held: another
        holder of it where this fixture made it (`FixtureNotes.share`), else nothing new."""
        if plan is None and values and isinstance(values[0], self._array_type):
            plan = self._executables.named_by(values[0])
        given, fixtures, target = parameters or (), self._recorder.fixtures, self._shards.size_of
        aliased = {
            output: donor
            for output, position in (plan.aliases.items() if plan is not None else ())
            if position < len(given)
            and (donor := self._device_array(given[position])) is not None
            and donor.is_deleted()
        }

        def size_of(extents: tuple[int, ...], dtype: Any) -> int | None:  # the shapes asked, as entries needed
            fixtures.note_entry((tuple(extents), str(dtype)))
            return target(extents, dtype) if target is not None else None

        for index, value in enumerate(values):
            if index in aliased:
                fixtures.share(value, aliased[index])
            elif isinstance(value, self._array_type):
                aval = value.aval
                shards = shards_of(aval.shape, aval.dtype.itemsize, value.sharding, size_of, aval.dtype)
                fixtures.note(SOURCE, value, [shard for shard in shards if shard[0] not in kept], _deleted)
        if plan is not None and plan.sized_key:
            fixtures.note_entry(plan.sized_key)

    def _note_fast(self, function: Any, args: tuple[Any, ...], kwargs: dict[str, Any], outputs: Any) -> None:
        """`_note` for a run on JAX's fast path, its parameters read where its plan aliases any (and
        its runs' arguments are known)."""
        try:
            leaves = [outputs] if type(outputs) is self._array_type else self._flatten(outputs)
            plan = self._executables.named_by(leaves[0]) if leaves else None
            parameters = None
            if plan is not None and plan.aliases and plan.arguments >= 0:
                parameters = self._fast_parameters(plan, function, args, kwargs)
            self._note(leaves, plan, parameters)
        except Exception as exc:  # inside JAX's call: a fault of the capture's never reaches the fixture
            self._fail(exc)

    def _device_array(self, value: Any) -> Any:
        """The ArrayImpl behind a parameter (a PRNG key array wraps one); None for anything else."""
        if type(value) is self._array_type:
            return value
        if isinstance(value, self._jax_array):
            leaves = self._flatten(value)
            if len(leaves) == 1 and isinstance(leaves[0], self._array_type):
                return leaves[0]
        return None

    # -- transfers and deletions --------------------------------------------------------

    def _wrap_device_put(self, original: Callable[..., Any]) -> Callable[..., Any]:
        capture = self

        def batched_device_put(*values: Any, **kwargs: Any) -> Any:
            capture._inside.depth += 1  # JAX's `pxla.batched_device_put` below it is this put
            try:
                results = original(*values, **kwargs)
            finally:
                capture._inside.depth -= 1
            if capture._recorder.recording and not capture._failed:
                try:
                    site = capture.call_sites.site_of(sys._getframe(1))
                    capture._after_device_put(values, kwargs.get("copy_semantics") or (), results, site)
                except Exception as exc:
                    capture._fail(exc)
            elif capture._recorder.fixtures.noting:
                copies = kwargs.get("copy_semantics") or ()
                for position, result in enumerate(results):
                    source = capture._device_array(values[position]) if position < len(values) else None
                    if source is not result:  # the value itself: noted where it was made
                        copy = copies[position] if position < len(copies) else None
                        kept = kept_by_put(source, result, copy, capture._donate_input, capture._always_copy)
                        capture._note([result], kept=kept)
                        if kept:
                            capture._recorder.fixtures.share(result, source)
            return results

        return batched_device_put

    def _after_device_put(
        self, values: Sequence[Any], copy_semantics: Sequence[Any], results: Sequence[Any], site: str = ""
    ) -> None:
        """Each result is a transfer of its own, made at `site`, except where it is the value itself,
        took the value's buffers over (donated), or kept the value's shard in place on a device
        (`kept_in_place`: put onto the placement it had, or replicated from the device it is on):
        there it holds the value's allocation, or nothing new where the value was made before the
        test (a fixture's array: its memory is not the test's)."""
        holdings, allocate = self._holdings, self._recorder.allocate
        for position, result in enumerate(results):
            if not isinstance(result, self._array_type) or holdings.held_by(result) is not None:
                continue
            source = self._device_array(values[position]) if position < len(values) else None
            if source is result:
                continue  # the value itself: held as it was, or made before the test
            shards, kept, shared, held = self._shards.of(result), frozenset[str](), [], None
            if source is not None:
                copy = copy_semantics[position] if position < len(copy_semantics) else None
                donated = put_took_over(source, copy, self._donate_input)
                if donated:
                    held = holdings.hand_over(source)
                    if held is not None:
                        holdings.hold(result, held)
                        continue
                kept = kept_by_put(source, result, copy, self._donate_input, self._always_copy)  # donated: taken over
                held = None if donated or not kept else holdings.held_by(source)
                shared = self._shared_shards(source, held, kept) if held is not None else []
            made = [allocate(size, SOURCE, DEVICE_PUT, device, site) for device, size in shards if device not in kept]
            if held is not None and not made and shared == list(held.ids):
                holdings.hold(result, held)  # all of the value's buffers and no more: one Held, as JAX keeps one set
            elif shared:
                holdings.hold_sharing(result, shared, made)
            elif made:
                holdings.hold_new(result, made)

    def _wrap_sharded_put(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """JAX's `pxla.batched_device_put`, where no put or run of the capture's called it: an array
        JAX assembles from a value per device, as `jax.make_array_from_callback` does, and with it
        `lax.full` onto a sharding (`jnp.zeros`, `ones`, `full` and `*_like` of a sharded array,
        an optimizer's state: jax/_src/array.py, jax/_src/lax/lax.py)."""
        capture = self

        def batched_device_put(aval: Any, sharding: Any, values: Any, devices: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(aval, sharding, values, devices, *args, **kwargs)
            if capture._inside.depth == 0 and capture._recorder.recording and not capture._failed:
                try:
                    site = capture.call_sites.site_of(sys._getframe(1))
                    capture._after_sharded_put(list(zip(values, devices)), result, site)
                except Exception as exc:
                    capture._fail(exc)
            elif capture._inside.depth == 0 and capture._recorder.fixtures.noting:
                capture._note([result])
            return result

        return batched_device_put

    def _after_sharded_put(self, placed: list[tuple[Any, Any]], result: Any, site: str) -> None:
        """`result`'s shard on each device a transfer of its own, made at `site`, except where its
        value is a one-device array on that device: `batched_device_put` keeps that buffer as the
        shard (jax/_src/interpreters/pxla.py; its buffer pointer is the shard's), which then shares
        the value's allocation, or adds nothing where the value was made before the test."""
        holdings = self._holdings
        if not isinstance(result, self._array_type) or holdings.held_by(result) is not None:
            return
        on_device = {device_label(device): value for value, device in placed}
        shared: list[int] = []
        made: list[int] = []
        for device, size in self._shards.of(result):
            value = on_device.get(device)
            if isinstance(value, self._array_type) and [device_label(d) for d in value.devices()] == [device]:
                held = holdings.held_by(value)
                shared.extend(held.ids if held is not None else ())
                continue
            made.append(self._recorder.allocate(size, SOURCE, DEVICE_PUT, device, site))
        if shared:
            holdings.hold_sharing(result, shared, made)
        elif made:
            holdings.hold_new(result, made)

    def _wrap_addressable_data(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """`Array.addressable_data(i)`: a new array object around the buffer of the array's shard on
        one device (cached on a replicated array: `_fully_replicated_shard`), which `lax.full` onto a
        sharding hands to `make_array_from_callback` and then drops the array it came from. It
        shares that shard's allocation, so the buffer is freed once neither holds it."""
        capture = self

        def addressable_data(array: Any, index: int) -> Any:
            data = original(array, index)
            if data is not array:
                try:
                    capture._hold_view(array, data)
                except Exception as exc:
                    capture._fail(exc)
            return data

        return addressable_data

    def _hold_view(self, array: Any, view: Any) -> None:
        holdings = self._holdings
        held = holdings.held_by(array)
        if held is None or holdings.held_by(view) is not None:
            return
        devices = [device for device, _ in self._shards.of(array)]
        if len(devices) == len(held.ids):  # else one allocation stands for every shard: not one shard's
            (device,) = [device_label(d) for d in view.devices()]
            shared = [buffer_id for label, buffer_id in zip(devices, held.ids) if label == device][:1]
            if shared:
                holdings.hold_sharing(view, shared, [])

    def _shared_shards(self, source: Any, held: Held, kept: frozenset[str]) -> list[int]:
        """Of what `source` holds (`held`), the allocations of its shards on the devices in `kept`; all
        of them where one allocation stands for all its shards (a run's output on JAX's fast path)."""
        devices = [device for device, _ in self._shards.of(source)]
        if len(devices) != len(held.ids):
            return list(held.ids)
        return [buffer_id for device, buffer_id in zip(devices, held.ids) if device in kept]

    def _wrap_delete(self, original: Callable[..., Any]) -> Callable[..., Any]:
        capture = self

        def delete(array: Any) -> Any:
            result = original(array)
            try:
                capture._holdings.delete(array)
            except Exception as exc:
                capture._fail(exc)
            return result

        return delete


def _deleted(array: Any) -> bool:
    """Whether a JAX array was deleted (donated: its buffers another's now)."""
    return bool(array.is_deleted())
