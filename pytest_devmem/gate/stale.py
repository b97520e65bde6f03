"""Which stored baselines are stale: their test no longer exists. No pytest here.

"Exists" is what pytest collected, before any selection: a test module, once pytest collects it,
lists all its tests and classes, even when the command line names one test (`file.py::test_a`),
and `-k`, `-m`, `--deselect`, `--lf` and shard plugins (pytest-split, pytest-shard) only choose
among them afterwards. So the session keeps, for every collector pytest expanded, the node ids it
held (`SuiteShape`), and a baseline is stale only when that proves its test gone: its module (or
class) was expanded and no longer holds it. A baseline whose module was not collected at all (a
path not on the command line, `--ignore`, a module that failed to import, a class that was never
expanded) cannot be judged and is never called stale; nor can a module that collected no test at
all (what `--lf` reports for each file it skips), until the file itself is deleted.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from .baseline_files import module_of
from .record import BaselineEntry


def node_path(test_id: str) -> list[str]:
    """The node ids from a test's module down to the test: `m.py::C::t[a::b]` gives `m.py`,
    `m.py::C`, `m.py::C::t[a::b]` (a parameter id may itself hold `::` or `[`)."""
    module, separator, rest = test_id.partition("::")
    if not separator:
        return [test_id]
    bracket = rest.find("[")
    head, parameters = (rest, "") if bracket < 0 else (rest[:bracket], rest[bracket:])
    names = head.split("::")
    names[-1] += parameters
    chain = [module]
    for name in names:
        chain.append(chain[-1] + "::" + name)
    return chain


class SuiteShape:
    """What pytest collected: each expanded collector's node id, and the node ids it held."""

    def __init__(self, root: Path | None = None) -> None:
        self.children: dict[str, set[str]] = {}
        self.known: set[str] = set()
        self.root = root  # the rootdir test ids are relative to: where a deleted module is looked for
        self._deleted: dict[str, bool] = {}  # per module: one look at the disk, however many baselines it held

    def expanded(self, collector: str, children: Iterable[str]) -> None:
        held = self.children.setdefault(collector, set())
        for child in children:
            held.add(child)
            self.known.add(child)

    def add_items(self, node_ids: Iterable[str]) -> None:
        """Tests a plugin added after collection (they exist, whatever their parents say)."""
        self.known.update(node_ids)

    def exists(self, test_id: str) -> bool | None:
        """True: collected; False: its module or class was collected and holds it no longer;
        None: nothing collected can tell."""
        if test_id in self.known:
            return True
        chain = node_path(test_id)
        for parent, child in zip(chain, chain[1:]):
            held = self.children.get(parent)
            if held is None:
                return False if self.module_deleted(test_id) else None
            if child not in held:
                return False
        return False if self.module_deleted(test_id) else None

    def module_deleted(self, test_id: str) -> bool:
        """Whether the test's module file is gone from the disk and the directory that held it (or,
        gone too, the nearest one above that still exists) was collected."""
        module = module_of(test_id)
        known = self._deleted.get(module)
        if known is None:
            known = self._deleted[module] = self._module_deleted(module)
        return known

    def _module_deleted(self, module: str) -> bool:
        parts = module.split("/")
        if (
            self.root is None
            or not module
            or ".." in parts
            or os.path.isabs(module)
            or os.path.lexists(self.root / module)
        ):
            return False
        directory = parts[:-1]
        while directory and not (self.root / "/".join(directory)).is_dir():
            directory.pop()
        return ("/".join(directory) or ".") in self.children


def stale_baselines(entries: Iterable[BaselineEntry], shape: SuiteShape) -> list[str]:
    """`test id [regime]` of each stored entry whose test the collected suite proves gone, sorted."""
    return sorted(f"{entry.test_id} [{entry.regime}]" for entry in entries if shape.exists(entry.test_id) is False)


def stale_key(name: str) -> tuple[str, str]:
    """(test id, regime) of a name `stale_baselines` gave (a worker sends the names)."""
    test_id, _, regime = name.removesuffix("]").rpartition(" [")
    return test_id, regime
