from __future__ import annotations

import pytest

from pytest_devmem.units import format_size, parse_size, round_up


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("16GiB", 16 * 2**30),
        ("512MiB", 512 * 2**20),
        ("1.5GB", 1_500_000_000),
        ("1.5GiB", 1_610_612_736),
        ("2kB", 2000),
        ("2KiB", 2048),
        ("100", 100),
        ("100B", 100),
        (" 4 gib ", 4 * 2**30),
        ("0.5KiB", 512),
        ("1e3MB", 10**9),
        (4096, 4096),
    ],
)
def test_parse_size_accepts_binary_and_decimal_units(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("16G", "ambiguous size '16G': write 16GiB (powers of 1024) or 16GB (powers of 1000)"),
        ("lots", "invalid size 'lots'"),
        ("-5MiB", "invalid size '-5MiB'"),
        ("5XB", "unknown unit 'XB'"),
        ("", "invalid size ''"),
        (-1, "cannot be negative"),
        (True, "invalid size True"),
        (None, "invalid size None"),
    ],
)
def test_parse_size_names_the_bad_value(text: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_size(text)  # type: ignore[arg-type]
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("nbytes", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.00 KiB"),
        (1536 * 2**20, "1.50 GiB"),
        (-2048, "-2.00 KiB"),
        (2**50, "1024.00 TiB"),
    ],
)
def test_format_size(nbytes: int, text: str) -> None:
    assert format_size(nbytes) == text


def test_round_up() -> None:
    assert [round_up(n, 256) for n in (1, 256, 257, 512)] == [256, 256, 512, 512]
