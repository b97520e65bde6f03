"""The compatibility matrix: each supported Python, JAX and TensorFlow in a venv of its own, and the
releases just outside the range refused.

    python scripts/compat.py                      # every combination; prints the table
    python scripts/compat.py --only py3.12-jax0.12.0.1 --tests   # one (what .ci/run runs)
    python scripts/compat.py --write docs/compatibility.md       # the table into the docs

Each venv (under ~/.cache/pytest-devmem/compat, or --root) holds this checkout, editable, with the
combination's releases from the package index (pip's cache makes a second build fast). In each it:
- runs the examples its frameworks can run under `prealloc` against the committed baselines
  (baselines/sim-16GiB): every one must be `ok`;
- under `sim:TPU-v5e` (libtpu as that JAX's `jax[tpu]` pins it, `devmem compilers install --tpu`):
  the examples against baselines/sim-TPU-v5e, and a `device_put` f32[20000,9] that libtpu tiles to
  1,286,144 B; no executable may keep the CPU compile's sizes;
- with --gpu, the examples under `sim:H100-80GB`: no executable may keep the CPU compile's sizes;
- with --tests, the capture tests of its frameworks;
- for a release outside the range: pytest must stop at start with a usage error naming it.
Exit 1 where any row fails.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JAX_EXAMPLES = ("test_jax_mlp.py", "test_jax_sharded.py", "test_tpu_attention.py", "test_jax_fragmentation.py")
TF_EXAMPLES = ("test_tf_conv.py", "test_tf_data.py")
TPU_PROBE = """
import jax, numpy as np

F = jax.jit(lambda v: v.sum())

def test_tiled_put():
    F(jax.device_put(np.ones((20000, 9), np.float32))).block_until_ready()
"""
TPU_PROBE_BYTES = 1_286_144  # libtpu's f32[20000,9] (8x128 tiles), not the dense 720,000 B
JAX_TESTS = (
    "tests/capture/test_trace_capture.py",
    "tests/capture/test_jax_fast_path.py",
    "tests/plugin/test_held_lines.py",
    "tests/plugin/test_mark_levels.py",
)
TF_TESTS = ("tests/capture/test_tensorflow_trace.py",)


@dataclass(frozen=True)
class Row:
    python: str
    jax: str | None = None
    tensorflow: str | None = None
    refused: bool = False

    @property
    def name(self) -> str:
        parts = [f"py{self.python}"] + [f"{k}{v}" for k, v in (("jax", self.jax), ("tf", self.tensorflow)) if v]
        return "-".join(parts)


ROWS = (
    Row("3.11", jax="0.10.2", tensorflow="2.21.0"),  # the test extra's pins (.venv): the reference row
    Row("3.11", jax="0.9.2"),  # the range's first release
    Row("3.11", jax="0.10.0"),
    Row("3.12", jax="0.11.2", tensorflow="2.19.1"),
    Row("3.12", jax="0.12.0.1"),  # the newest: .ci/run runs it
    Row("3.13", jax="0.12.0.1", tensorflow="2.20.0"),
    Row("3.11", tensorflow="2.16.2"),  # TensorFlow 2.16 to 2.18 pin ml_dtypes below what JAX 0.9 needs
    Row("3.12", tensorflow="2.18.1"),
    Row("3.11", jax="0.9.0", refused=True),  # below the range: pmap's compiles go uncounted
    Row("3.11", jax="0.8.3", refused=True),
    Row("3.11", jax="0.6.2", refused=True),
    Row("3.11", jax="0.4.38", refused=True),
)


def python_for(version: str) -> str:
    """A working `pythonX.Y` on PATH, else pyenv's."""
    try:
        if subprocess.run([f"python{version}", "--version"], capture_output=True).returncode == 0:
            return f"python{version}"
    except OSError:
        pass
    try:
        pyenv = subprocess.run(["pyenv", "root"], capture_output=True, text=True).stdout.strip()
    except OSError:
        pyenv = ""
    found = Path(pyenv, "versions").glob(f"{version}.*/bin/python") if pyenv else ()
    numbered = [path for path in found if path.parent.parent.name.replace(".", "").isdigit()]  # not 3.13.0t
    matches = sorted(numbered, key=lambda path: [int(part) for part in path.parent.parent.name.split(".")])
    if not matches:
        raise SystemExit(f"no Python {version}: install it (pyenv install {version}) or put python{version} on PATH")
    return str(matches[-1])


def run(command: list[str], cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    own = {name: value for name, value in os.environ.items() if not name.startswith("DEVMEM_")}  # the row's defaults
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, env={**own, **(env or {})})


def build(row: Row, root: Path, tests: bool, gpu: bool) -> tuple[Path, str]:
    """The row's venv, made or brought up to date; and what went wrong ("" where nothing)."""
    venv = root / row.name
    python = venv / "bin" / "python"
    if not python.exists():
        made = run([python_for(row.python), "-m", "venv", str(venv)])
        if made.returncode:
            return venv, f"venv: {made.stderr.strip()[-300:]}"
    wanted = [f"-e{ROOT}[test-tools]" if tests else f"-e{ROOT}"]
    wanted += [f"jax=={row.jax}", f"jaxlib=={row.jax}"] if row.jax else []
    wanted += [f"tensorflow-cpu=={row.tensorflow}"] if row.tensorflow else []
    pip = run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *wanted])
    if pip.returncode:
        return venv, f"install: {pip.stderr.strip()[-400:]}"
    if row.jax and not row.refused:
        platforms = [] if gpu else ["--tpu"]  # both at once: a folder one platform filled asks for --force
        made = run([str(venv / "bin" / "devmem"), "compilers", "install", *platforms, "--", "--quiet"])
        if made.returncode:
            return venv, f"compilers install: {(made.stdout + made.stderr).strip()[-400:]}"
    return venv, ""


def pytest_report(venv: Path, arguments: list[str], cwd: Path = ROOT) -> tuple[int, str, dict]:
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        done = run(
            [
                str(venv / "bin" / "python"),
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "-q",
                *arguments,
                f"--devmem-report={report}",
            ],
            cwd=cwd,
        )
        data = json.loads(report.read_text()) if report.exists() else {}
    return done.returncode, done.stdout + done.stderr, data


REFERENCE: dict[str, dict[str, dict]] = {}
"""The first row's records by check and test id: what another row's are held to where a baseline moved."""


def notes_of(record: dict) -> list[str]:
    return (record.get("trace") or {}).get("notes") or []


def compiled_sizes(record: dict) -> dict[str, tuple[int, int]]:
    """Each executable's (temp per device, output) bytes as its compiler stated them."""
    found = (record.get("trace") or {}).get("executables") or {}
    return {
        label: (sizes.get("temp_bytes_per_device", 0), sizes.get("output_bytes", 0)) for label, sizes in found.items()
    }


def baseline_verdict(check: str, code: int, output: str, report: dict) -> str:
    """ "N ok, M new" where every figure is the baselines'; a figure that moved is explained only where
    this release's compiler stated other sizes for the same executables than the first row's did."""
    records = report.get("records", [])
    last = output.strip().splitlines()[-1] if output.strip() else ""
    kept = [r["test_id"] for r in records if any("kept the CPU compile's sizes" in n for n in notes_of(r))]
    if not records:
        return f"FAILED (exit {code}): {last}"
    if kept:
        return f"FAILED: CPU sizes kept in {', '.join(kept)}"
    reference = REFERENCE.setdefault(check, {r["test_id"]: r for r in records})
    statuses = [r.get("baseline", {}).get("status") for r in records]
    moved = [r for r in records if r.get("baseline", {}).get("status") not in ("ok", "new", None)]
    explained = []
    for record in moved:
        now, then = compiled_sizes(record), compiled_sizes(reference.get(record["test_id"], {}))
        differs = [label for label in now if label in then and now[label] != then[label]]
        if not differs:
            return f"FAILED: {record['test_id']} {record['baseline']['status']}, its compiler's sizes unchanged"
        label = differs[0]
        explained.append(
            f"{record['test_id'].rpartition('::')[2]} {record['peak_bytes_in_use'] / 2**20:.2f} MiB: this XLA "
            f"states {label} temp {now[label][0] / 2**20:.2f} MiB a device (first row {then[label][0] / 2**20:.2f} MiB)"
        )
    failed = [r["test_id"] for r in records if r.get("outcome") == "failed" and r not in moved]
    if code and (failed or not moved):
        return f"FAILED (exit {code}): {', '.join(failed) or last}"
    compared = [s for s in statuses if s not in ("new", None)]
    return f"{len(compared) - len(moved)} ok, {len(statuses) - len(compared)} new" + "".join(
        f"; {text}" for text in explained
    )


def check(row: Row, venv: Path, tests: bool, gpu: bool) -> dict[str, str]:
    """The row's results by check."""
    if row.refused:
        code, output, _ = pytest_report(venv, ["examples/test_jax_mlp.py", "--devmem-mode=prealloc"])
        named = f"jax {row.jax} is installed" in output and "0.9.2 to 0.12.0.1" in output
        return {"refusal": "refused at start, naming it" if code == 4 and named else f"FAILED (exit {code})"}
    examples = (JAX_EXAMPLES if row.jax else ()) + (TF_EXAMPLES if row.tensorflow else ())
    if row.jax and row.tensorflow:
        examples += ("test_jax_and_tf_together.py",)
    results = {}
    code, output, report = pytest_report(venv, [f"examples/{name}" for name in examples] + ["--devmem-mode=prealloc"])
    results["cpu"] = baseline_verdict("cpu", code, output, report)
    if row.jax:
        jax_examples = [f"examples/{name}" for name in JAX_EXAMPLES[:3]]
        code, output, report = pytest_report(
            venv, [*jax_examples, "--devmem-device=sim:TPU-v5e", "--devmem-mode=compact"]
        )
        results["tpu"] = baseline_verdict("tpu", code, output, report)
        with tempfile.TemporaryDirectory() as project:
            Path(project, "test_probe.py").write_text(TPU_PROBE)
            code, output, report = pytest_report(
                venv, ["test_probe.py", "--devmem-device=sim:TPU-v5e", "--devmem-mode=compact"], cwd=Path(project)
            )
        peaks = [r["peak_bytes_in_use"] for r in report.get("records", [])]
        tiled = bool(peaks) and peaks[0] >= TPU_PROBE_BYTES
        results["tpu tiles"] = f"{peaks[0]:,} B" if tiled else f"FAILED ({peaks or output.strip()[-200:]})"
        if gpu:
            code, output, report = pytest_report(
                venv, [*jax_examples, "--devmem-device=sim:H100-80GB", "--devmem-mode=prealloc"]
            )
            results["gpu"] = baseline_verdict("gpu", code, output, report)
    if tests:
        files = (JAX_TESTS if row.jax else ()) + (TF_TESTS if row.tensorflow else ())
        done = run(
            [
                str(venv / "bin" / "python"),
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-m",
                "slow or not slow",
                *files,
            ]
        )
        last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr.strip()[-200:]
        results["tests"] = last if done.returncode == 0 else f"FAILED: {last}"
    return results


def table(results: list[tuple[Row, dict[str, str]]]) -> str:
    columns = ["cpu", "tpu", "tpu tiles", "gpu", "tests", "refusal"]
    used = [c for c in columns if any(c in r for _, r in results)]
    lines = [
        "| Python | JAX | TensorFlow | " + " | ".join(used) + " |",
        "| --- | --- | --- | " + " | ".join("---" for _ in used) + " |",
    ]
    for row, found in results:
        cells = [" ".join(found.get(c, "").split()).replace("|", "/") for c in used]
        lines.append(f"| {row.python} | {row.jax or '-'} | {row.tensorflow or '-'} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="a row's name (py3.12-jax0.12.0.1); repeatable")
    parser.add_argument("--root", type=Path, default=Path.home() / ".cache" / "pytest-devmem" / "compat")
    parser.add_argument("--tests", action="store_true", help="also the capture tests of each row's frameworks")
    parser.add_argument("--gpu", action="store_true", help="also XLA:GPU's compiler (575 MB a JAX release)")
    parser.add_argument("--write", type=Path, help="put the table into this page between its markers")
    options = parser.parse_args()
    rows = [row for row in ROWS if not options.only or row.name in options.only]
    if options.only and len(rows) != len(options.only):
        known = ", ".join(row.name for row in ROWS)
        raise SystemExit(f"unknown row in --only {options.only}: the rows are {known}")
    results = []
    for row in rows:
        venv, problem = build(row, options.root, options.tests, options.gpu)
        found = {"cpu": f"FAILED: {problem}"} if problem else check(row, venv, options.tests, options.gpu)
        print(f"{row.name}: {found}", flush=True)
        results.append((row, found))
    text = table(results)
    print(text)
    if options.write:
        page = options.write.read_text()
        start, end = "<!-- matrix -->", "<!-- /matrix -->"
        head, _, rest = page.partition(start)
        _, _, tail = rest.partition(end)
        stamp = f"{datetime.date.today().isoformat()}, `python scripts/compat.py{' --tests' if options.tests else ''}{' --gpu' if options.gpu else ''}`"
        options.write.write_text(f"{head}{start}\n{stamp}:\n\n{text}\n{end}{tail}")
    return 1 if any("FAILED" in value for _, found in results for value in found.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
