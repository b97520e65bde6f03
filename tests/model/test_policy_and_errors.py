"""Bad input is refused with the value and the rule, and never leaves a pool broken."""

from __future__ import annotations

import pickle

import pytest

from pytest_devmem.errors import InvalidFreeError, InvalidRequestError, InvalidSettingError, OutOfMemoryError
from pytest_devmem.model.device import SimulatedDevice
from pytest_devmem.model.pool import BFCPool, Mode, OnDemandPool, Policy, make_pool
from pytest_devmem.units import GiB, KiB, MiB


@pytest.mark.parametrize(
    ("mode", "fraction", "expected"),
    [
        ("prealloc", None, Policy(Mode.PREALLOC, 0.75)),
        ("PREALLOC", ".5", Policy(Mode.FRACTION, 0.5)),
        ("prealloc", 0.75, Policy(Mode.PREALLOC, 0.75)),
        ("fraction", 0.3, Policy(Mode.FRACTION, 0.3)),
        ("growth", None, Policy(Mode.GROWTH, 0.75)),
        ("ondemand", None, Policy(Mode.ONDEMAND, 1.0)),
        ("platform", None, Policy(Mode.ONDEMAND, 1.0)),
        ("fraction", 1, Policy(Mode.FRACTION, 1.0)),
    ],
)
def test_policy_of(mode: str, fraction: object, expected: Policy) -> None:
    assert Policy.of(mode, fraction) == expected


@pytest.mark.parametrize(
    ("policy", "label"),
    [
        (Policy.of("prealloc"), "prealloc"),
        (Policy.of("fraction", 0.5), "fraction=0.5"),
        (Policy.of("growth", 0.4), "growth(fraction=0.4)"),
        (Policy.of("platform"), "ondemand"),
    ],
)
def test_policy_label(policy: Policy, label: str) -> None:
    assert policy.label == label


@pytest.mark.parametrize(
    ("mode", "fraction", "message"),
    [
        (
            "bogus",
            None,
            "unknown devmem mode 'bogus': allowed are prealloc, fraction, ondemand, growth, compact, platform (= ondemand)",
        ),
        ("fraction", None, "devmem mode 'fraction' needs a fraction in (0, 1]"),
        ("fraction", 0, "invalid devmem fraction 0: must be in (0, 1]"),
        ("fraction", 1.5, "invalid devmem fraction 1.5"),
        ("prealloc", -0.1, "invalid devmem fraction -0.1"),
        ("prealloc", float("nan"), "invalid devmem fraction nan"),
        ("prealloc", "half", "invalid devmem fraction 'half': must be a number in (0, 1]"),
        ("prealloc", True, "invalid devmem fraction True"),
    ],
)
def test_bad_policy_settings_name_value_and_rule(mode: str, fraction: object, message: str) -> None:
    with pytest.raises(InvalidSettingError) as info:
        Policy.of(mode, fraction)
    assert message in str(info.value)


@pytest.fixture(params=["prealloc", "growth", "ondemand"])
def pool(request: pytest.FixtureRequest) -> BFCPool | OnDemandPool:
    return make_pool(SimulatedDevice(GiB), Policy.of(request.param))  # type: ignore[return-value]


@pytest.mark.parametrize("size", [0, -1, 1.5, "1", None, True])
def test_bad_sizes_are_refused_and_change_nothing(pool: BFCPool, size: object) -> None:
    pool.alloc(KiB)
    before = pool.stats()
    with pytest.raises(InvalidRequestError, match="invalid allocation size"):
        pool.alloc(size)  # type: ignore[arg-type]
    assert pool.stats() == before


def test_numpy_integers_are_fine_sizes(pool: BFCPool) -> None:
    numpy = pytest.importorskip("numpy")
    handle = pool.alloc(numpy.int64(4096))
    held = pool.stats()
    assert held["bytes_in_use"] == 4096 and type(held["bytes_in_use"]) is int  # a plain int: reports stay JSON
    assert all(type(value) is not numpy.int64 for value in held.values())
    pool.free(handle)
    assert pool.stats()["bytes_in_use"] == 0


def test_double_free_is_refused_and_changes_nothing(pool: BFCPool) -> None:
    handle = pool.alloc(KiB)
    pool.alloc(KiB)
    pool.free(handle)
    before = pool.stats()
    with pytest.raises(InvalidFreeError, match="free"):
        pool.free(handle)
    assert pool.stats() == before
    if isinstance(pool, BFCPool):
        assert pool.check_invariants() == []


def test_double_free_of_a_bfc_chunk_says_so() -> None:
    pool = BFCPool(SimulatedDevice(GiB), Policy.of("growth"))
    handle = pool.alloc(KiB)
    pool.alloc(KiB)
    pool.free(handle)
    with pytest.raises(InvalidFreeError, match=f"double free of {handle:#x}"):
        pool.free(handle)


@pytest.mark.parametrize("offset", [256, 1])
def test_interior_pointer_free_is_refused(offset: int) -> None:
    pool = BFCPool(SimulatedDevice(GiB), Policy.of("growth"))
    handle = pool.alloc(KiB)
    with pytest.raises(InvalidFreeError, match="not the start of one in use"):
        pool.free(handle + offset)
    assert pool.check_invariants() == []


@pytest.mark.parametrize("pointer", [0xDEAD, 0, -5, "x", None])
def test_foreign_pointer_free_is_refused(pool: BFCPool, pointer: object) -> None:
    pool.alloc(KiB)
    before = pool.stats()
    with pytest.raises(InvalidFreeError, match="never allocated"):
        pool.free(pointer)  # type: ignore[arg-type]
    assert pool.stats() == before


def test_out_of_memory_message_says_what_helps() -> None:
    pool = BFCPool(SimulatedDevice(16 * GiB), Policy.of("prealloc"))
    pool.alloc(10 * GiB)
    with pytest.raises(OutOfMemoryError) as info:
        pool.alloc(3 * GiB)
    message = str(info.value)
    for text in (
        "asked 3.00 GiB (3221225472 bytes",
        "under regime prealloc on sim:16GiB",
        "in use 10.00 GiB",
        "pool holds 12.00 GiB of a 12.00 GiB limit, 2.00 GiB of it free",
        "largest free block 2.00 GiB",
        "fix: raise the fraction to at least 0.82: XLA_CLIENT_MEM_FRACTION=0.82",
    ):
        assert text in message
    assert isinstance(info.value, MemoryError)
    figures = info.value.figures
    assert (figures.requested, figures.bytes_in_use, figures.largest_free_block) == (3 * GiB, 10 * GiB, 2 * GiB)


def test_out_of_memory_beyond_the_device_says_so() -> None:
    pool = OnDemandPool(SimulatedDevice(GiB), Policy.of("ondemand"))
    pool.alloc(900 * MiB)
    with pytest.raises(OutOfMemoryError, match="more than the whole device"):
        pool.alloc(200 * MiB)


def test_out_of_memory_from_another_tenant_says_so() -> None:
    device = SimulatedDevice(GiB)
    BFCPool(device, Policy.of("prealloc")).preallocate()  # someone took 75%
    pool = BFCPool(device, Policy.of("growth"))
    with pytest.raises(OutOfMemoryError, match="other users of this device hold 768.00 MiB"):
        pool.alloc(300 * MiB)


def test_out_of_memory_error_survives_pickling() -> None:
    pool = BFCPool(SimulatedDevice(GiB), Policy.of("fraction", 0.1))
    with pytest.raises(OutOfMemoryError) as info:
        pool.alloc(GiB // 2)
    copy = pickle.loads(pickle.dumps(info.value))
    assert str(copy) == str(info.value)
    assert copy.figures == info.value.figures


def test_ondemand_allocates_exactly_and_frees_at_once() -> None:
    device = SimulatedDevice(GiB)
    pool = OnDemandPool(device, Policy.of("platform"))
    handle = pool.alloc(1000)
    assert device.used == 1024
    stats = pool.stats()
    assert (stats["bytes_in_use"], stats["bytes_reserved"], stats["pool_bytes"], stats["fragmentation"]) == (
        1024,
        1024,
        0,
        0.0,
    )
    pool.free(handle)
    assert device.used == 0
    assert pool.stats()["peak_bytes_reserved"] == 1024


def test_ondemand_respects_a_fraction_limit() -> None:
    pool = OnDemandPool(SimulatedDevice(GiB), Policy.of("ondemand", 0.5))
    pool.alloc(400 * MiB)
    with pytest.raises(OutOfMemoryError, match="raise the limit to at least fraction=0.59"):
        pool.alloc(200 * MiB)


@pytest.mark.parametrize("mode", ["prealloc", "growth", "ondemand"])
@pytest.mark.parametrize("handle", [[1], {}, "0x10", None, 1.5])
def test_a_foreign_handle_of_any_type_is_an_invalid_free(mode: str, handle: object) -> None:
    from pytest_devmem.model.pool import make_pool

    pool = make_pool(SimulatedDevice(GiB), Policy.of(mode))
    kept = pool.alloc(MiB)
    with pytest.raises(InvalidFreeError, match="invalid free of"):
        pool.free(handle)  # type: ignore[arg-type]
    pool.free(kept)
    assert pool.stats()["bytes_in_use"] == 0
