"""What grew, down to the line: a regression of a jitted step's temp names the buffer that grew by its
shape, op and the user's `file:line`, on the CPU's sizes, a GPU preset's and a TPU preset's; a record
on a TPU preset states the bytes lost to tiled layouts at its peak."""

from __future__ import annotations

import json

import pytest
from compilers import needs_compiler, needs_libtpu

STEP = """
import jax
import jax.numpy as jnp
WIDTH = {width}

def update(x, w):
    wide = jnp.sort(jnp.exp(jnp.concatenate([x] * WIDTH, axis=0)), axis=0)
    return (x @ w).sum() + wide.sum()

def test_step():
    x = jnp.ones((256, 512)); w = jnp.ones((512, 512))
    jax.block_until_ready(jax.jit(update)(x, w))
"""
WIDE_LINE = "mymodel.py:" + str(next(n for n, line in enumerate(STEP.strip().splitlines(), 1) if "wide = " in line))


def regression_of(pytester: pytest.Pytester, *options: str) -> str:
    """The failure text of the step once its wide intermediate grew 16-fold over its baseline's."""
    pytester.makepyfile(mymodel=STEP.format(width=1))
    pytester.runpytest_inprocess("mymodel.py", "--devmem-mode=ondemand", "--devmem-update", *options).assert_outcomes(
        passed=1
    )
    baseline = next((pytester.path / "baselines").rglob("*.json")).read_text()
    pytester.makepyfile(mymodel=STEP.format(width=16))
    result = pytester.runpytest_inprocess("mymodel.py", "--devmem-mode=ondemand", "--devmem-report=now.json", *options)
    result.assert_outcomes(failed=1)
    assert '"buffers"' in baseline  # the baseline keeps the buffers at the peak
    return result.stdout.str()


def test_on_cpu_sizes_the_message_names_the_wide_buffer_and_its_line(
    jax_loaded: object, pytester: pytest.Pytester
) -> None:
    text = regression_of(pytester)
    assert "what grew at the peak: jit(update) temp" in text
    assert f"f32[4096,512] sort at {WIDE_LINE}" in text or f"f32[4096,512] exp at {WIDE_LINE}" in text
    assert "(new, 8.00 MiB)" in text
    record = json.loads((pytester.path / "now.json").read_text())["records"][0]
    buffers = record["baseline"]["buffers"]["jit(update)"]
    assert buffers["now"]["buffers"][0]["shape"] == "f32[4096,512]" and buffers["baseline"] is not None


@pytest.mark.slow  # deviceless XLA:GPU compiles
@needs_compiler
def test_on_a_gpu_preset_the_message_names_the_wide_buffer_and_its_line(
    jax_loaded: object, pytester: pytest.Pytester
) -> None:
    text = regression_of(pytester, "--devmem-device=sim:H100-80GB")
    assert "f32[4096,512]" in text and WIDE_LINE in text.split("what grew at the peak:")[1]


@pytest.mark.slow  # deviceless XLA:TPU compiles
@needs_libtpu
def test_on_a_tpu_preset_the_message_names_the_wide_buffer_and_its_line(
    jax_loaded: object, pytester: pytest.Pytester
) -> None:
    text = regression_of(pytester, "--devmem-device=sim:TPU-v5e")
    grew = text.split("what grew at the peak:")[1].split("\n")[0]
    assert "[4096,512]" in grew and WIDE_LINE in grew and "memory space" not in grew  # HBM's buffers, not VMEM's


@pytest.mark.slow  # deviceless XLA:TPU compiles
@needs_libtpu
def test_two_thousand_small_arrays_on_a_v5e_lose_most_of_their_bytes_to_tiles(
    jax_loaded: object, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(
        test_small="""
        import jax, numpy as np

        def test_many_small():
            held = [jax.device_put(np.ones((8, 3), np.float32)) for _ in range(2000)]
            jax.block_until_ready(held)
        """
    )
    pytester.runpytest_inprocess(
        "--devmem-mode=ondemand", "--devmem-device=sim:TPU-v5e", "--devmem-report=r.json"
    ).assert_outcomes(passed=1)
    record = json.loads((pytester.path / "r.json").read_text())["records"][0]
    padding = record["tpu"]["padding_at_peak"]
    # each f32[8,3] (96 bytes) takes one (8, 128) tile of 2,048 bytes, as the TPU compiler states it
    assert padding["bytes"] == pytest.approx(3_904_000, rel=0.05)
    assert padding["unknown_bytes"] == 0 and padding["largest"][0]["name"] == "device_put (arrays)"
    assert record["peak_bytes_in_use"] >= padding["bytes"]


SCORE = """
import jax
import jax.numpy as jnp
{padding}
@jax.jit
def score(w, x):
    h = jnp.tanh(x @ w)
    return jnp.sum(h @ w.T, axis=1)
"""


@pytest.mark.slow  # deviceless XLA:GPU compiles
@needs_compiler
def test_a_program_sized_from_anothers_entry_never_names_the_others_lines(
    jax_loaded: object, pytester: pytest.Pytester
) -> None:
    """The target compiler's entry of a program is keyed by its text without source lines, so the same
    function in two files shares one; the buffers it keeps name the first file's lines. A program
    whose own module has not those lines names none (never another file's, nor a line an edit moved)."""
    pytester.makepyfile(heads=SCORE.format(padding=""), probe=SCORE.format(padding="# a probe\n# of the heads\n"))
    pytester.makepyfile(
        test_heads="""
        import jax.numpy as jnp
        import heads, probe

        def test_head():
            heads.score(jnp.ones((512, 2048)), jnp.ones((256, 512))).block_until_ready()

        def test_probe():
            probe.score(jnp.ones((512, 2048)), jnp.ones((256, 512))).block_until_ready()
        """
    )
    result = pytester.runpytest_subprocess(
        "--devmem-device=sim:A100-40GB", "--devmem-mode=ondemand", "--devmem-report=r.json", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=2)
    lines = {
        r["test_id"].split("::")[-1]: {b["at"] for b in r["trace"]["buffers"]["jit(score)"]["buffers"]}
        for r in json.loads((pytester.path / "r.json").read_text())["records"]
    }
    assert lines["test_head"] and all(at.startswith("heads.py:") for at in lines["test_head"]), lines
    assert not any("heads.py" in at for at in lines["test_probe"]), lines


@pytest.mark.parametrize(
    ("options", "headline"),
    [
        (("--devmem-limit=4MiB",), "device memory limit exceeded"),
        (("--devmem-device=sim:6MiB",), "out of device memory"),
    ],
)
def test_a_limit_or_oom_failure_names_the_largest_holders_at_the_peak_by_line(
    jax_loaded: object, pytester: pytest.Pytester, options: tuple[str, ...], headline: str
) -> None:
    """As a regression names what grew: the limit's (memray lists stacks on its limit failure) and an OOM's."""
    pytester.makepyfile(mymodel=STEP.format(width=16))
    result = pytester.runpytest_inprocess("mymodel.py", "--devmem-mode=ondemand", *options)
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert headline in text
    named = text.split("largest at the peak")[1].split("\n")[0]
    if "out of" in headline:  # the peak before it: the step's inputs; the temp it asked for, by its buffers
        assert named.startswith(" before it ran out: jit(broadcast_in_dim) 1.50 MiB: made at mymodel.py:10")
        named = text.split("the jit(update) temp it asked for:")[1].split("\n")[0]
    assert "f32[4096,512]" in named and WIDE_LINE in named
    assert "(8.00 MiB)" in named and "new" not in named and "baseline" not in named
