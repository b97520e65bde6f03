"""The pool and devices import nothing heavy (no pytest, JAX, TensorFlow or NVML bindings), and the package's imports
form no cycle and point one way, down the pipeline (docs/architecture.md)."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path


def test_pool_imports_no_framework_or_pytest() -> None:
    code = (
        "import sys; import pytest_devmem.model.pool, pytest_devmem.model.device, pytest_devmem.units; "
        "heavy = {'pytest', '_pytest', 'jax', 'tensorflow', 'pynvml', 'pandas', 'numpy'} & set(sys.modules); "
        "print(sorted(heavy))"
    )
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert output.strip() == "[]"


def test_the_devmem_command_imports_neither_pytest_nor_the_plugin_nor_a_heavy_package() -> None:
    """`devmem` starts without pytest, the plugin (its flags come from options.py), a framework, or the optional
    packages only a picture or a fast read needs (matplotlib, pyarrow, pandas, numpy: imported where used)."""
    code = (
        "import sys; import pytest_devmem.cli; pytest_devmem.cli.build_parser(); "
        "heavy = {'pytest', '_pytest', 'pytest_devmem.plugin', 'jax', 'tensorflow', 'pynvml', 'matplotlib', "
        "'pyarrow', 'pandas', 'numpy'} & set(sys.modules); print(sorted(heavy))"
    )
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert output.strip() == "[]"


FOREIGN_TO_THE_MODEL = {"pytest", "_pytest", "jax", "jaxlib", "tensorflow", "pynvml", "ctypes"}
"""What `model/` never imports, at module level or inside a function: pytest, the frameworks, and the drivers
(NVML's bindings, ctypes for libcuda); those live in plugin/, capture/ and hardware/."""


def test_the_model_imports_no_pytest_framework_or_driver() -> None:
    found = []
    for path in sorted((PACKAGE / "model").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            found += [
                f"{path.relative_to(PACKAGE)}: {name}" for name in names if name.split(".")[0] in FOREIGN_TO_THE_MODEL
            ]
        source = path.read_text(encoding="utf-8")
        found += [f"{path.relative_to(PACKAGE)}: sys.modules" for _ in range(source.count("sys.modules"))]
    assert found == []


# -- the import graph: one way down, no cycles --------------------------------------------------------------------

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_devmem"

LAYERS = {
    "plugin": 4,
    "cli": 4,
    "hookspec": 3,
    "options": 3,
    "capture": 2,
    "gate": 2,
    "present": 2,
    "hardware": 2,
    "model": 1,
}
"""docs/architecture.md's pipeline: plugin and cli drive capture, gate and present (and hardware, the drivers);
those use model; everything may use the shared ground (units, errors, files, provenance, spreadsheet, compile_store:
layer 0).
The settings both drivers build their flags from (options.py) sit between them and the stages they configure, and
the hooks a project may implement (hookspec.py) below the plugin that registers them."""

SIDE_PATHS = {("present", "gate"), ("gate", "capture.sources")}
"""The two imports across the middle layer that docs/architecture.md names: present shows gate's comparisons, and a
record keeps the raw sources' readings as capture/sources defines them."""

KNOWN_CYCLES: list[set[str]] = []
"""Cycles still there (none): a cycle found fails the test below, and an entry here whose cycle is gone fails it too."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import a module holds: at module level (`if TYPE_CHECKING:` blocks included, since a type checker
    follows them) and inside functions, which run later but tie the modules together all the same."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node


def import_graph() -> dict[str, set[str]]:
    """Each module of the package and the package's modules it imports, anywhere in it."""
    files = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        imported: set[str] = set()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                names = [f"{base}.{alias.name}" for alias in node.names]
            for name in names:
                while name and name not in files:  # `from .a import b`: the module a.b, else a
                    name = name.rpartition(".")[0]
                if name and name != module:
                    imported.add(name)
        graph[module] = imported
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in graph[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(component)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def _layer(module: str) -> tuple[int, str]:
    parts = module.split(".")
    if len(parts) == 1:
        return 4, "plugin"  # the package's __init__: what `import pytest_devmem` runs
    return LAYERS.get(parts[1], 0), parts[1]


def test_the_import_graph_has_no_cycle() -> None:
    found = cycles(import_graph())
    assert [c for c in found if c not in KNOWN_CYCLES] == []
    assert [c for c in KNOWN_CYCLES if c not in found] == [], "a known cycle is gone: remove it from KNOWN_CYCLES"


def test_imports_point_down_the_pipeline() -> None:
    upward = []
    for module, imported in sorted(import_graph().items()):
        layer, folder = _layer(module)
        for other in sorted(imported):
            other_layer, other_folder = _layer(other)
            across = other_layer == layer and other_folder != folder and layer != 0
            allowed = any(
                folder == source and (other + ".").startswith(f"pytest_devmem.{target}.")
                for source, target in SIDE_PATHS
            )
            if (other_layer > layer or across) and not allowed:
                upward.append(f"{module} -> {other}")
    assert upward == []


def test_the_import_graph_test_sees_cycles_and_upward_imports() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [{"a", "b", "c"}]
    assert "pytest_devmem.model.machine" in import_graph()["pytest_devmem.plugin.recording"]
    assert "pytest_devmem.model.trace.by_column" in import_graph()["pytest_devmem.model.trace.columns"]  # in a function
    assert (
        _layer("pytest_devmem.model.trace")
        < _layer("pytest_devmem.gate.record")
        < _layer("pytest_devmem.plugin.session")
    )
    assert _layer("pytest_devmem.units")[0] == 0
    assert (
        _layer("pytest_devmem.gate.tolerance") < _layer("pytest_devmem.options") < _layer("pytest_devmem.cli.compare")
    )


KNOWN_PRIVATE_READS = {
    "model/machine/loops/ondemand_columns.py: pool._held",  # the on-demand pool's buffers, set by column
    "model/machine/allocator_rules.py: pool._fragmentation",  # XLA's measure, which every pool's counters compute
}
"""Reads of a pool's private attributes from outside its module that are still there (none of a BFC pool's
chunk table)."""


def test_no_module_reads_a_pools_private_attributes() -> None:
    """State that several modules read is a public type in one module: a BFC pool's chunks are its
    `ChunkTable` (`pool.table`), never its private attributes read from outside its own module, and
    the replay's state is `model/machine/state.py`'s public types."""
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
                continue
            owner = node.value.id if isinstance(node.value, ast.Name) else ""
            if owner in ("pool", "solo", "table") or (owner not in ("self", "cls") and "pool" in owner):
                found.add(f"{path.relative_to(PACKAGE)}: {owner}.{node.attr}")
        found |= {
            f"{path.relative_to(PACKAGE)}: {name}" for name in ("_Replay", "_Device", "_Allocator") if name in source
        }
    assert found - KNOWN_PRIVATE_READS == set()
    assert KNOWN_PRIVATE_READS - found == set(), "a known private read is gone: remove it from KNOWN_PRIVATE_READS"


def test_only_the_internals_module_reaches_jax_private_modules() -> None:
    """JAX's private modules change between releases: one module reaches them (docs/compatibility.md),
    so a new release is one file to read. An import of `jax._src`, or its name looked up in
    `sys.modules`, anywhere else fails here."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [node.value] if isinstance(node, ast.Constant) and isinstance(node.value, str) else []
            found += [
                f"{path.relative_to(PACKAGE)}: {n}" for n in names if n == "jax._src" or n.startswith("jax._src.")
            ]
    assert [f for f in found if not f.startswith("capture/jax/internals.py")] == []
    assert found, "the internals module names no jax._src module: the test looks at nothing"
