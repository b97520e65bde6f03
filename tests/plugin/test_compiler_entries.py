"""Warm from the first clone: what the TPU compiler said is stored beside the baselines by
`--devmem-update`, and a fresh clone (no pytest cache) compiles only the programs that changed.
Each run is a real pytest session with the plugin and libtpu's deviceless compiler (or the CUDA
plugin's, for a GPU preset), in its own process (as a CI job starts), on small programs."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from compilers import needs_compiler, needs_libtpu

STORE = Path("baselines", "sim-TPU-v5e", ".compiled")  # under sim:TPU-v5e
OPTIONS = ("--devmem-device=sim:TPU-v5e", "--devmem-mode=compact", "-p", "no:xdist")

STEP = """
import jax
import jax.numpy as jnp

@jax.jit
def step(x):
    return jnp.tanh(x * {factor})

def test_step():
    assert step(jnp.ones((8, 128))).shape == (8, 128)
"""

OTHER = """
import jax
import jax.numpy as jnp

@jax.jit
def scale(x):
    return x @ x.T

def test_scale():
    assert scale(jnp.ones((16, 256))).shape == (16, 16)
"""


def counts(result: pytest.RunResult) -> tuple[int, int]:
    """(programs compiled, entries from the store), as the summary says them."""
    text = result.stdout.str()
    found = re.search(
        r"JAX sizes: (\d+) program\(s\) compiled for the target in [\d.]+ s; (\d+) from the compiler entries", text
    )
    assert found is not None, text
    return int(found.group(1)), int(found.group(2))


def stored(root: Path) -> set[str]:
    return {path.stem for path in (root / STORE).glob("*.json")}


def named(root: Path) -> set[str]:
    """Every key the stored baselines name."""
    keys: set[str] = set()
    for path in (root / "baselines" / "sim-TPU-v5e").glob("*.json"):
        for regimes in json.loads(path.read_text())["records"].values():
            for data in regimes.values():
                keys.update(data.get("compiler_entries", []))
    return keys


def clone(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, name: str) -> Path:
    """The project as a fresh clone has it: its files and baselines, no pytest cache; the runs after go there."""
    target = pytester.path.parent / name
    shutil.copytree(pytester.path, target, ignore=shutil.ignore_patterns(".pytest_cache", "__pycache__"))
    monkeypatch.chdir(target)
    return target


@needs_libtpu
def test_an_update_stores_the_entries_and_a_fresh_clone_compiles_nothing(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_step=STEP.format(factor="2.0"))
    update = pytester.runpytest_subprocess(*OPTIONS, "--devmem-update")
    update.assert_outcomes(passed=1)
    compiled, from_store = counts(update)
    keys = stored(pytester.path)
    assert compiled >= 2 and from_store == 0  # the step and its arrays' shapes at least
    assert keys and keys == named(pytester.path)  # what the baseline names, and nothing else
    update.stdout.fnmatch_lines([f"compiler entries stored in {STORE}: {len(keys)} written, 0 removed *"])

    fresh = clone(pytester, monkeypatch, "fresh-clone")
    result = pytester.runpytest_subprocess(*OPTIONS, str(fresh / "test_step.py"))
    result.assert_outcomes(passed=1)
    assert counts(result) == (0, len(keys))
    result.stdout.fnmatch_lines(["*baselines (baselines/sim-TPU-v5e): 1 ok*"])

    # a damaged entry is a miss, with a warning naming its file: compiled again, the figures the same
    damaged = fresh / STORE / f"{sorted(keys)[0]}.json"
    damaged.write_text('{"array_bytes": -1}')
    shutil.rmtree(fresh / ".pytest_cache")
    result = pytester.runpytest_subprocess(*OPTIONS, "-W", "always", str(fresh / "test_step.py"))
    result.assert_outcomes(passed=1, warnings=1)
    assert counts(result) == (1, len(keys) - 1)
    result.stdout.fnmatch_lines([f"*{damaged}: *-1*not believed: compiled again*", "*1 ok*"])


SHARDED = """
import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec

@jax.jit
def train_step(weights, batch):
    return weights - 0.1 * jax.grad(lambda w: jnp.mean(jnp.tanh(batch @ w) ** 2))(weights)

def test_sharded_step():
    mesh = Mesh(jax.devices()[:2], ("data",))
    batch = jax.device_put(jnp.ones((256, 128)), NamedSharding(mesh, PartitionSpec("data", None)))
    weights = jax.device_put(jnp.full((128, 128), 0.01), NamedSharding(mesh, PartitionSpec()))
    for _ in range(2):
        weights = train_step(weights, batch)
    assert weights.shape == (128, 128)
"""
TWO_DEVICES = 'import os\nos.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"\n'


FIXTURE_PROGRAM = """
import jax
import jax.numpy as jnp
import pytest

@jax.jit
def init(key):
    return jax.random.normal(key, (64, 128))

@pytest.fixture(scope="module")
def params():
    return init(jax.random.key(0))  # a program the fixture runs: its memory is no test's

def test_a(params):
    assert (params * 2.0).shape == (64, 128)

def test_b(params):
    assert (params + 1.0).shape == (64, 128)
"""


@needs_libtpu
def test_every_program_a_test_needed_is_stored_and_a_fresh_clone_compiles_none(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two kinds of program a record named none of, so a fresh clone compiled them every time:
    a step JAX compiled again for its weights placed as the first step's output (one program for
    the CPU, two for the TPU: both are named), and what a module-scoped fixture ran, in whichever
    test set it up (each test that uses the fixture names its entries: plugin/shared_fixtures.py).
    The update stores them all, the same in any order; a fresh clone, even one test alone, compiles
    nothing."""
    pytester.makeconftest(TWO_DEVICES)
    pytester.makepyfile(test_sharded=SHARDED, test_fixture=FIXTURE_PROGRAM)
    pytester.runpytest_subprocess(*OPTIONS, "--devmem-update").assert_outcomes(passed=3)
    keys = stored(pytester.path)
    assert keys == named(pytester.path)
    fresh = clone(pytester, monkeypatch, "every-program-clone")
    result = pytester.runpytest_subprocess(
        *OPTIONS, str(fresh / "test_sharded.py"), str(fresh / "test_fixture.py") + "::test_b"
    )
    result.assert_outcomes(passed=2)
    assert counts(result)[0] == 0


@needs_libtpu
def test_a_changed_program_compiles_alone_and_its_old_entry_goes(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_step=STEP.format(factor="2.0"), test_other=OTHER)
    pytester.runpytest_subprocess(*OPTIONS, "--devmem-update").assert_outcomes(passed=2)
    before = stored(pytester.path)

    fresh = clone(pytester, monkeypatch, "changed-clone")
    (fresh / "test_step.py").write_text(STEP.format(factor="3.0"))  # one program changed, its shapes the same
    result = pytester.runpytest_subprocess(*OPTIONS, "--devmem-update", str(fresh))
    result.assert_outcomes(passed=2)
    after = stored(fresh)
    assert counts(result) == (1, len(before) - 1)
    assert len(after - before) == 1 and len(before - after) == 1  # the new program's entry in, the old one's out
    assert after == named(fresh)
    result.stdout.fnmatch_lines([f"compiler entries stored in {STORE}: 1 written, 1 removed *, {len(after)} in all"])


@needs_libtpu
@pytest.mark.slow
def test_xdist_workers_send_what_they_used_and_the_controller_stores_it(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(test_step=STEP.format(factor="2.0"), test_other=OTHER)
    options = [option for option in OPTIONS if option not in ("-p", "no:xdist")]
    result = pytester.runpytest_subprocess(*options, "--devmem-update", "-n", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    keys = stored(pytester.path)
    assert keys and keys == named(pytester.path)
    assert counts(result)[0] >= 2  # the workers' compiles, summed


@needs_libtpu
@pytest.mark.slow
def test_a_child_process_of_another_regime_sends_what_it_used_and_the_parent_stores_it(
    pytester: pytest.Pytester,
) -> None:
    marked = STEP.format(factor="2.0").replace("def test_step", '@pytest.mark.devmem(mode="ondemand")\ndef test_step')
    pytester.makepyfile(test_step="import pytest\n" + marked)
    result = pytester.runpytest_subprocess(*OPTIONS, "--devmem-update", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_step.py::test_step*ondemand*"])  # measured in its child
    keys = stored(pytester.path)
    assert keys and keys == named(pytester.path)


@needs_compiler
def test_a_gpu_presets_deviceless_compiles_are_stored_the_same_way(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = ("--devmem-device=sim:H100-80GB", "--devmem-mode=prealloc", "-p", "no:xdist")
    pytester.makepyfile(test_step=STEP.format(factor="2.0"))
    update = pytester.runpytest_subprocess(*options, "--devmem-update")
    update.assert_outcomes(passed=1)
    store = pytester.path / "baselines" / "sim-H100-80GB" / ".compiled"
    keys = {path.stem for path in store.glob("*.json")}
    assert keys and counts(update)[0] == len(keys)

    fresh = clone(pytester, monkeypatch, "gpu-clone")
    result = pytester.runpytest_subprocess(*options, str(fresh / "test_step.py"))
    result.assert_outcomes(passed=1)
    assert counts(result) == (0, len(keys))


SORTED = """
import jax
import jax.numpy as jnp

@jax.jit
def top(x):
    return jnp.sort(jnp.tanh(x) * 2, axis=0)[:8]

def test_top():
    jax.block_until_ready(top(jnp.ones((2048, 512))))
"""


def entries_of(root: Path) -> dict[str, dict[str, object]]:
    return {path.name: json.loads(path.read_text()) for path in (root / STORE).glob("*.json")}


@needs_libtpu
def test_plausible_but_wrong_entries_are_misses_and_the_figure_stays_true(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry whose temp is below its own buffers' peak, two entries' contents swapped, and an
    array's entry below the array's dense bytes (0, 1): each names what it sizes, and is checked."""
    pytester.makepyfile(test_top=SORTED)
    clean = pytester.runpytest_subprocess(*OPTIONS, "--devmem-update", "--devmem-report=clean.json")
    clean.assert_outcomes(passed=1)
    fresh = clone(pytester, monkeypatch, "wrong-entries-clone")
    entries = entries_of(fresh)
    programs = sorted(name for name, entry in entries.items() if "temp_bytes" in entry)
    arrays = sorted(name for name, entry in entries.items() if "array_bytes" in entry and entry["shape"])
    with_temp = next(name for name in programs if entries[name]["temp_bytes"])
    others = [name for name in programs if name != with_temp][:2]
    attacked = {
        with_temp: {**entries[with_temp], "temp_bytes": 256},
        arrays[0]: {**entries[arrays[0]], "array_bytes": 1},
    }
    attacked.update({others[0]: entries[others[1]], others[1]: entries[others[0]]})  # swapped
    for name, entry in attacked.items():
        (fresh / STORE / name).write_text(json.dumps(entry))
    result = pytester.runpytest_subprocess(*OPTIONS, "-W", "always", "--devmem-report=attacked.json")
    result.assert_outcomes(passed=1)
    peaks = [
        json.loads((root / report).read_text())["records"][0]["peak_bytes_in_use"]
        for root, report in ((pytester.path, "clean.json"), (fresh, "attacked.json"))
    ]
    assert peaks[0] == peaks[1]
    assert counts(result)[0] == len(attacked)  # each compiled again
    result.stdout.fnmatch_lines_random(
        [
            f"*{with_temp}: 'temp_bytes' is 256, less than the * bytes its buffers at the peak hold*not believed*",
            f"*{arrays[0]}: 'array_bytes': 1 bytes, less than the array's * dense bytes*",
            f"*{others[0]}: 'fingerprint' is '{others[1][:-5]}', not '{others[0][:-5]}'*",
        ]
    )


@needs_libtpu
def test_a_refresh_writes_anew_what_it_did_not_believe(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry with another device count, or without its buffers (its compile's dump unread): a
    miss, compiled again, and `--devmem-update` stores what the compiler said in its place."""
    pytester.makepyfile(test_top=SORTED)
    pytester.runpytest_subprocess(*OPTIONS, "--devmem-update").assert_outcomes(passed=1)
    fresh = clone(pytester, monkeypatch, "repair-clone")
    before = entries_of(fresh)
    programs = sorted(name for name, entry in before.items() if "temp_bytes" in entry)
    wrong = {programs[0]: {**before[programs[0]], "devices": 2}}
    wrong[programs[1]] = {k: v for k, v in before[programs[1]].items() if k != "buffers"}
    for name, entry in wrong.items():
        (fresh / STORE / name).write_text(json.dumps(entry))
    result = pytester.runpytest_subprocess(*OPTIONS, "-W", "always", "--devmem-update")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines_random(
        [f"*{programs[0]}: 'devices' is 2, where the program was compiled for 1*", f"*{programs[1]}: no 'buffers'*"]
    )
    assert counts(result)[0] == 2 and entries_of(fresh) == before
    result.stdout.fnmatch_lines([f"compiler entries stored in {STORE}: 2 written, 0 removed *"])


@needs_libtpu
def test_a_figure_from_a_stored_entry_names_its_file_and_a_linked_store_is_not_read(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_top=SORTED)
    pytester.runpytest_subprocess(*OPTIONS, "--devmem-update").assert_outcomes(passed=1)
    fresh = clone(pytester, monkeypatch, "large-clone")
    entries = entries_of(fresh)
    name = next(name for name, entry in entries.items() if entry.get("temp_bytes"))
    huge = {**entries[name], "temp_bytes": 14 << 30}  # below the chip's 15.75 GiB: believable, and fails the test
    huge["buffers"] = {**entries[name]["buffers"], "peak_bytes": 14 << 30}  # type: ignore[dict-item]
    (fresh / STORE / name).write_text(json.dumps(huge))
    result = pytester.runpytest_subprocess(*OPTIONS)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*now 14.0* GiB*", f"*sized by stored compiler entries, not compiled: {STORE / name}*"]
    )

    elsewhere = fresh.parent / "elsewhere"
    (fresh / STORE).rename(elsewhere)
    (fresh / STORE).symlink_to(elsewhere, target_is_directory=True)
    shutil.rmtree(fresh / ".pytest_cache")
    result = pytester.runpytest_subprocess(*OPTIONS, "-W", "always")
    result.assert_outcomes(passed=1)  # compiled: the 14 GiB behind the link is not read
    assert counts(result)[1] == 0
    result.stdout.fnmatch_lines([f"*{STORE}: a link, whose entries are not read*"])


def git(root: Path, *arguments: str) -> str:
    import subprocess

    command = ["git", "-c", "user.email=ci@example.com", "-c", "user.name=ci", *arguments]
    return subprocess.run(command, cwd=root, capture_output=True, text=True, check=True).stdout.strip()


@needs_libtpu
def test_ci_compiles_again_the_entries_a_pull_request_edits_and_fails_on_a_mismatch(
    pytester: pytest.Pytester,
) -> None:
    """A temp edited to a value its buffers allow is believed, but not under --devmem-verify-entries=BASE:
    the entries that differ from BASE's are compiled again, and the test they contradict fails."""
    pytester.makepyfile(test_top=SORTED)
    pytester.runpytest_subprocess(*OPTIONS, "--devmem-update").assert_outcomes(passed=1)
    git(pytester.path, "init", "-q")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-qm", "base")
    base = git(pytester.path, "rev-parse", "HEAD")
    entries = entries_of(pytester.path)
    name = next(name for name, entry in entries.items() if entry.get("temp_bytes"))
    edited = entries[name]["buffers"]["peak_bytes"]  # type: ignore[index]  # plausible: what its buffers hold
    (pytester.path / STORE / name).write_text(json.dumps({**entries[name], "temp_bytes": edited}))
    shutil.rmtree(pytester.path / ".pytest_cache")

    verified = pytester.runpytest_subprocess(*OPTIONS, f"--devmem-verify-entries={base}")
    verified.assert_outcomes(failed=1)
    verified.stdout.fnmatch_lines(
        [
            f"*{STORE / name}: an entry the compiler contradicts: temp_bytes {edited} stored, {entries[name]['temp_bytes']} compiled*"
        ]
    )
    assert counts(verified)[0] == 1  # that entry's program alone
    refused = pytester.runpytest_subprocess(*OPTIONS, "--devmem-verify-entries=--output=x")
    refused.stderr.fnmatch_lines(["*'--output=x' is not a git revision*"])
