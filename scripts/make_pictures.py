"""Draw the pictures the README and the documentation show, from real runs of the plugin:
`python scripts/make_pictures.py` (about a minute; the HTML screenshots need Chromium).

Each picture is a test run under the plugin with its trace kept, then `devmem plot` as PNG and HTML
into docs/pictures/. The suites are small and written here, so the pictures can be made again on
any machine (JAX and TensorFlow on their CPU backends; four CPU devices for the multi-device one).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "pictures"

TWO_DEVICES_TWO_FRAMEWORKS = """
import jax, jax.numpy as jnp
import tensorflow as tf
from jax.sharding import Mesh, NamedSharding, PartitionSpec

def test_tf_pipeline_then_a_jax_step_on_two_devices():
    batch = tf.random.uniform((2048, 1024))           # TensorFlow, on device 0 (its CPU:0)
    features = tf.nn.relu(batch @ tf.ones((1024, 1024)))
    mesh = Mesh(jax.devices()[:2], ("data",))
    x = jax.device_put(jnp.asarray(features.numpy()), NamedSharding(mesh, PartitionSpec("data", None)))
    w = jax.device_put(jnp.full((1024, 1024), 0.01), NamedSharding(mesh, PartitionSpec()))
    step = jax.jit(lambda w, x: w - 0.1 * jax.grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w))
    for _ in range(2):
        w = step(w, x)
    del features, batch
"""

LONG = """
def test_many_small_steps_and_one_large_one(devmem):
    for step in range(50_000):
        devmem.pool.free(devmem.pool.alloc(4096 + 256 * (step % 64)))
        if step == 31_000:
            big = devmem.pool.alloc(64 * 2**20)
            devmem.pool.free(big)
"""

OUT_OF_MEMORY = """
MiB = 2**20

def test_every_other_buffer_freed(devmem):
    buffers = [devmem.pool.alloc(100 * MiB) for _ in range(7)]
    for handle in buffers[1::2]:
        devmem.pool.free(handle)
    devmem.pool.alloc(200 * MiB)
"""

SEVERAL_TARGETS = """
import jax
import jax.numpy as jnp

@jax.jit
def attention(q, k, v):
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / 8.0
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)

def test_attention_b2_s1024():
    q = jnp.ones((2, 16, 1024, 64), dtype=jnp.float32)  # XLA:GPU keeps the 2x16x1024x1024 scores: 256 MiB
    attention(q, q, q).block_until_ready()

def test_attention_b8_s1024():
    q = jnp.ones((8, 16, 1024, 64), dtype=jnp.float32)  # 1 GiB of scores on a GPU; fused away on the CPU
    attention(q, q, q).block_until_ready()

def test_forty_mib_array():
    (jnp.ones((10 * 2**20,), dtype=jnp.float32) + 1).block_until_ready()

def test_half_gib_array():
    (jnp.ones((2**27,), dtype=jnp.float32) * 2).block_until_ready()
"""


def run_targets(suite: dict[str, str], name: str, *options: str) -> None:
    """One pytest session with --devmem-targets, then `devmem plot --targets` as PNG and HTML."""
    with tempfile.TemporaryDirectory() as work:
        where = Path(work)
        for file, text in suite.items():
            (where / file).write_text(text)
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--devmem-baselines",
            str(where / "b"),
            f"--devmem-report={where / 'r.json'}",
            *options,
            *suite,
        ]
        subprocess.run(command, cwd=where, check=False, capture_output=True)
        for suffix in ("png", "html"):
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest_devmem.cli",
                    "plot",
                    str(where / "r.json"),
                    "--targets",
                    "-o",
                    str(OUT / f"{name}.{suffix}"),
                ],
                check=True,
            )
        print(f"docs/pictures/{name}.png, .html")


def run(suite: dict[str, str] | Path, name: str, *options: str, select: str | None = None) -> None:
    """One pytest session with traces kept, then its picture as PNG and HTML."""
    with tempfile.TemporaryDirectory() as work:
        where = Path(work)
        if isinstance(suite, dict):
            for file, text in suite.items():
                (where / file).write_text(text)
            paths = list(suite)
        else:
            paths = [str(suite)]
        environment = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--devmem-baselines",
            str(where / "b"),
            f"--devmem-traces={where / 'traces'}",
            f"--devmem-report={where / 'r.json'}",
            *options,
            *paths,
        ]
        subprocess.run(
            command, cwd=where if isinstance(suite, dict) else ROOT, env=environment, check=False, capture_output=True
        )
        for suffix in ("png", "html"):
            plot = [
                sys.executable,
                "-m",
                "pytest_devmem.cli",
                "plot",
                str(where / "r.json"),
                "-o",
                str(OUT / f"{name}.{suffix}"),
            ]
            subprocess.run(plot + (["--test", select] if select else []), check=True)
        print(f"docs/pictures/{name}.png, .html")


GROWING_LAYER = """
import os
import jax, jax.numpy as jnp

WIDTH = int(os.environ.get("LAYER_WIDTH", "1024"))

def test_forward():
    w = jnp.full((1024, WIDTH), 0.01)
    x = jnp.ones((512, 1024))
    forward = jax.jit(lambda w, x: jnp.tanh(x @ w).sum())
    assert forward(w, x) > 0
"""


def failure_artifact() -> None:
    """A test whose layer was made twice as wide, failing its baseline: the artifact
    (--devmem-artifacts) that shows the baseline beside the run."""
    with tempfile.TemporaryDirectory() as work:
        where = Path(work)
        (where / "test_model.py").write_text(GROWING_LAYER)
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--devmem-mode=prealloc",
            "test_model.py",
        ]
        subprocess.run([*command, "--devmem-update"], cwd=where, check=True, capture_output=True)
        subprocess.run(
            [*command, "--devmem-artifacts=artifacts"],
            cwd=where,
            env={**os.environ, "LAYER_WIDTH": "2048"},
            check=False,
            capture_output=True,
        )
        (picture,) = (where / "artifacts").glob("*.html")
        (OUT / "failure-artifact.html").write_text(picture.read_text())
    print("docs/pictures/failure-artifact.html")


HOVER = """
<script>
// the pointer over the first chart, as a reader's would be: uPlot lists the values under it
window.addEventListener("load", function () {
  var over = document.querySelector(".u-over");
  if (!over) return;
  var box = over.getBoundingClientRect();
  over.dispatchEvent(new MouseEvent("mouseenter", { bubbles: true }));
  over.dispatchEvent(new MouseEvent("mousemove", {
    bubbles: true, clientX: box.left + box.width * POSITION, clientY: box.top + box.height * 0.4 }));
});
</script>
"""


def screenshots() -> None:
    """The HTML pictures as a browser draws them (headless Chromium, where installed): as the page
    opens, and with the pointer over its first chart (the hover values)."""
    browser = next((name for name in ("chromium", "chromium-browser", "google-chrome") if shutil.which(name)), None)
    if browser is None:
        print("no Chromium found: the HTML screenshots were not remade")
        return
    shots = (
        ("two-devices-two-frameworks", "", 1500, None),
        ("failure-artifact", "", 1500, None),
        ("failure-artifact", "-hover", 900, 0.75),
    )
    with tempfile.TemporaryDirectory() as work:
        for name, suffix, height, position in shots:
            page = OUT / f"{name}.html"
            if position is not None:  # a copy with the pointer placed: the page itself is left as written
                page = Path(work) / f"{name}{suffix}.html"
                text = (OUT / f"{name}.html").read_text()
                page.write_text(text.replace("</body>", HOVER.replace("POSITION", str(position)) + "</body>"))
            target = OUT / f"{name}{suffix}.html-screenshot.png"
            subprocess.run(
                [
                    browser,
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--hide-scrollbars",
                    "--virtual-time-budget=3000",
                    f"--window-size=1100,{height}",
                    f"--screenshot={target}",
                    page.as_uri(),
                ],
                check=True,
                capture_output=True,
            )
            print(f"docs/pictures/{name}{suffix}.html-screenshot.png")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    if sys.argv[1:] == ["html"]:  # the HTML pictures and their screenshots alone
        run({"test_two.py": TWO_DEVICES_TWO_FRAMEWORKS}, "two-devices-two-frameworks", "--devmem-mode=prealloc")
        failure_artifact()
        screenshots()
        return
    run(ROOT / "examples" / "test_jax_mlp.py", "short-trace", "--devmem-mode=growth", select="1024")
    run({"test_two.py": TWO_DEVICES_TWO_FRAMEWORKS}, "two-devices-two-frameworks", "--devmem-mode=prealloc")
    run(ROOT / "examples" / "test_jax_sharded.py", "four-devices", "--devmem-mode=prealloc")
    run(ROOT / "examples" / "test_jax_fragmentation.py", "fragmentation-pins")
    run({"test_long.py": LONG}, "100k-events", "--devmem-mode=growth")
    run({"test_oom.py": OUT_OF_MEMORY}, "out-of-memory", "--devmem-mode=prealloc", "--devmem-device=sim:1GiB")
    run_targets(
        {"test_targets.py": SEVERAL_TARGETS},
        "several-targets",
        "--devmem-mode=prealloc",
        "--devmem-targets=sim:H100-80GB,sim:TPU-v5e,sim:T4,sim:1GiB,sim:64MiB",
    )
    failure_artifact()
    screenshots()


if __name__ == "__main__":
    main()
