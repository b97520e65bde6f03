"""One field of a JSON object read back (a report, a record, a reading): the value where it has the
type the reader keeps, else None, so that a file's odd value is never taken for a figure. Shared by
every reader of the project's files; the schemas check the files as a whole before this. And the
other way: a record's attributes by name, as its JSON form writes them (`attributes`)."""

from __future__ import annotations

from collections.abc import Mapping


def whole(data: Mapping[str, object], key: str) -> int | None:
    """`data[key]` where it is a whole number (never a bool), else None."""
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def number(data: Mapping[str, object], key: str) -> float | None:
    """`data[key]` where it is a number (never a bool), as the file wrote it, else None."""
    value = data.get(key)
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def text(data: Mapping[str, object], key: str) -> str | None:
    """`data[key]` where it is a string, else None."""
    value = data.get(key)
    return value if isinstance(value, str) else None


def mapping(data: Mapping[str, object], key: str) -> dict[str, object] | None:
    """`data[key]` where it is an object (a copy), else None."""
    value = data.get(key)
    return dict(value) if isinstance(value, dict) else None


def mappings(data: Mapping[str, object], key: str) -> list[dict[str, object]] | None:
    """`data[key]` where it is a list: its objects (copies), else None."""
    value = data.get(key)
    return [dict(item) for item in value if isinstance(item, dict)] if isinstance(value, list) else None


def texts(data: Mapping[str, object], key: str) -> list[str] | None:
    """`data[key]` where it is a list: its items as text, else None."""
    value = data.get(key)
    return [str(item) for item in value] if isinstance(value, list) else None


def counts(data: Mapping[str, object], key: str) -> dict[str, int] | None:
    """`data[key]` where it is an object: its whole-number values by name, else None."""
    found = mapping(data, key)
    if found is None:
        return None
    return {str(name): size for name in found if (size := whole(found, name)) is not None}


def attributes(record: object, names: str) -> dict[str, object]:
    """`record`'s attributes `names` (space-separated), by name and in that order: a JSON form's
    fields that are the record's own as they are."""
    return {name: getattr(record, name) for name in names.split()}
