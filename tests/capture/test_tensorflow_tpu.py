"""TensorFlow under a TPU preset (real TensorFlow on CPU): its figures are its CPU allocator's, the
host's, so a limit never judges them as a chip's and the benchmark file names them as the host's."""

from __future__ import annotations

import json

import pytest

from pytest_devmem.gate.record import TestRecord
from pytest_devmem.units import MiB


def test_a_limit_judges_the_chips_peak_never_the_hosts() -> None:
    devices = [{"device": "tpu:0", "peak_bytes_in_use": 5 * MiB}, {"device": "cpu:0", "peak_bytes_in_use": 9 * MiB}]
    both = TestRecord("t", "compact", "sim:TPU-v5e", "TPU-v5e", 9 * MiB, 9 * MiB, 0.0, None, "passed")
    both.devices, both.peak_device, both.tpu = devices, "cpu:0", {"generation": "v5e"}
    assert both.chip_peak_bytes_in_use == 5 * MiB
    both.devices = devices[1:]  # TensorFlow alone: no chip's figure
    assert both.chip_peak_bytes_in_use is None
    both.tpu = None  # not a TPU preset: the headline, whichever device it is
    assert both.chip_peak_bytes_in_use == 9 * MiB


def test_a_host_figure_under_a_tpu_preset_is_not_judged_by_a_limit_nor_exported_as_a_chips(
    tensorflow_loaded: object, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(
        """
        import tensorflow as tf

        def test_tf():
            x = tf.ones((1024, 1024))
            assert float(tf.reduce_sum(x @ x)) > 0
        """
    )
    result = pytester.runpytest_inprocess(
        "--devmem-device=sim:TPU-v5e",
        "--devmem-mode=compact",
        "--devmem-limit=1MiB",
        "--devmem-report=r.json",
        "--devmem-benchmark-json=bench.json",
    )
    result.assert_outcomes(passed=1)
    record = json.loads((pytester.path / "r.json").read_text())["records"][0]
    assert record["peak_bytes_in_use"] > 4 * MiB and record["failed_check"] is None
    assert any("limit 1.00 MiB judges a chip's memory" in note for note in record["trace"]["notes"])
    (entry,) = json.loads((pytester.path / "bench.json").read_text())
    assert entry["name"].endswith("] (the host's)") and entry["value"] == record["peak_bytes_in_use"]
    assert "TensorFlow's CPU allocator on the host, not a chip of sim:TPU-v5e" in entry["extra"]
