"""A pytest plugin that keeps every program the TPU sizer compiles (`-p benchmarks.tpu_corpus_plugin`):
its module as JAX lowered it for the TPU, its compile options and its devices, in the folder named by
DEVMEM_BENCH_TPU_CORPUS, for benchmarks/bench_tpu_options.py to compile again under other compile
options. Nothing where that is unset."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

CORPUS_FOLDER = "DEVMEM_BENCH_TPU_CORPUS"
_lock = threading.Lock()


def pytest_configure(config: pytest.Config) -> None:
    folder = os.environ.get(CORPUS_FOLDER)
    if not folder:
        return
    from jax._src import compiler  # type: ignore[import-not-found]

    from pytest_devmem.capture.jax.lowering import compiling_for_target

    Path(folder).mkdir(parents=True, exist_ok=True)
    original = compiler.backend_compile_and_load

    def keeping(backend: Any, module: Any, devices: Any, options: Any, callbacks: Any) -> Any:
        if not compiling_for_target() or getattr(backend, "platform", "") != "tpu":
            return original(backend, module, devices, options, callbacks)
        started = time.perf_counter()
        executable = original(backend, module, devices, options, callbacks)
        keep(Path(folder), module, devices, options, time.perf_counter() - started)
        return executable

    compiler.backend_compile_and_load = keeping


def keep(folder: Path, module: Any, devices: Any, options: Any, seconds: float) -> None:
    from jax._src.interpreters import mlir  # type: ignore[import-not-found]

    with _lock:
        stem = folder / f"{len(list(folder.glob('*.json'))):05d}"
        stem.with_suffix(".mlir").write_text(mlir.module_to_string(module, enable_debug_info=False))
        stem.with_suffix(".options").write_bytes(options.SerializeAsString())
        stem.with_suffix(".json").write_text(json.dumps({"devices": [d.id for d in devices], "seconds": seconds}))
