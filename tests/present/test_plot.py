"""Pictures from the one machine run: each device's lane, the peak and its holders, thinning that
keeps every peak of a long trace, an out-of-memory trace drawn as one, `devmem plot` to PNG and HTML
for a real JAX test, and --devmem-artifacts leaving a failing test's trace and picture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_devmem.model.frameworks import setups_for
from pytest_devmem.model.machine import MachineSpec, run_machine
from pytest_devmem.model.pool import Policy
from pytest_devmem.model.timeline import build_view, thin
from pytest_devmem.model.trace import Trace, TraceEvent
from pytest_devmem.present.plot_html import render_html
from pytest_devmem.present.plot_parts import peak_text
from pytest_devmem.units import MiB


def view_of(trace: Trace, mode: str = "growth", capacity: int = 2**30):  # type: ignore[no-untyped-def]
    run = run_machine(trace, setups_for(Policy.of(mode), capacity), MachineSpec(capacity, "sim:1GiB"), timeline=True)
    return build_view(run, trace, mode)


def test_the_view_follows_the_machine_and_names_the_holders_at_each_devices_peak() -> None:
    trace = Trace(
        [
            TraceEvent("allocate", 1, 4 * MiB, source="jax", label="jit(layer)", device="cpu:0"),
            TraceEvent("allocate", 2, 8 * MiB, source="jax", label="jit(layer) temp", device="cpu:0"),
            TraceEvent("free", 2, 8 * MiB, source="jax", device="cpu:0"),
            TraceEvent("allocate", 3, MiB, source="pool", device="cpu:1"),
        ]
    )
    view = view_of(trace)
    first, second = view.lanes
    assert (first.device, first.in_use, first.events) == ("cpu:0", [4 * MiB, 12 * MiB, 4 * MiB], [0, 1, 2])
    assert first.peak_event == 1 and first.peak_in_use == 12 * MiB and view.peak_in_use == 12 * MiB
    assert first.at_peak == {"jit(layer) temp": 8 * MiB, "jit(layer)": 4 * MiB}
    assert {chunk.owner for pool in first.pools_at_peak for chunk in pool.chunks} - {""} == {
        "jit(layer) temp",
        "jit(layer)",
    }
    assert sum(size for pool in first.pools_at_peak for size in pool.region_sizes) == first.reserved[1]
    assert (second.device, second.in_use, second.at_peak) == ("cpu:1", [MiB], {"pool": MiB})


def test_a_lane_names_its_chunks_peak_apart_from_the_moment_of_its_live_data_peak() -> None:
    """BFC counts whole chunks (a freed 6 MiB chunk handed whole to a 4 MiB request: `bfc_allocator.cc`
    splits a chunk only where the rest is at least the request), so the peak in use can come later
    than, and above, the peak of live data the lane draws: the title names each with what is true of
    it, and the mark on the line is at the live data's figure, where the map is taken."""
    trace = Trace(
        [
            TraceEvent("allocate", 1, 6 * MiB, source="jax", label="a", device="cpu:0"),
            TraceEvent("allocate", 2, 4 * MiB, source="jax", label="b", device="cpu:0"),
            TraceEvent("free", 1, 6 * MiB, source="jax", device="cpu:0"),
            TraceEvent("allocate", 3, 4 * MiB, source="jax", label="c", device="cpu:0"),
            TraceEvent("allocate", 4, 2 * MiB, source="jax", label="d", device="cpu:0"),
        ]
    )
    (lane,) = view_of(trace, "prealloc").lanes
    assert (lane.peak_in_use, lane.peak_live, lane.peak_event) == (12 * MiB, 10 * MiB, 1)
    assert peak_text(lane).startswith("cpu:0: peak in use 12.00 MiB in chunks; live data 10.00 MiB at event 1 (")
    assert max(lane.in_use) == lane.peak_live


def test_a_long_trace_keeps_its_true_peak_when_thinned() -> None:
    """100,000 events of a 1 MiB buffer allocated and freed, and one 64 MiB spike in the middle:
    every picture must show the spike."""
    trace = Trace()
    for step in range(50_000):
        size = 64 * MiB if step == 31_337 else MiB
        trace.add(0, step + 1, size, float(step), source="jax", device="cpu:0")
        trace.add(1, step + 1, size, float(step), source="jax", device="cpu:0")
    view = view_of(trace, "prealloc", 16 * 2**30)
    lane = view.lanes[0]
    assert len(lane.in_use) <= 2100 and max(lane.in_use) == 64 * MiB == lane.peak_in_use
    assert lane.events[lane.in_use.index(64 * MiB)] == 2 * 31_337
    page = render_html(view, "spike")
    assert "live data 64.00 MiB" in page and "64.00 MiB</text>" in page  # the scale's top is the spike
    assert thin(list(range(10)), [0] * 10) == list(range(10))  # short series are drawn whole


def test_an_out_of_memory_trace_is_drawn_and_said_as_one_and_replay_agrees(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_devmem.cli import main

    trace = Trace(
        [TraceEvent("allocate", 1, 600 * MiB, source="jax"), TraceEvent("allocate", 2, 600 * MiB, source="jax")]
    )
    path = tmp_path / "t.csv"
    trace.write_csv(path)
    assert main(["replay", str(path), "--mode", "prealloc", "--device", "sim:1GiB"]) == 1
    assert "JAX could not allocate 600.00 MiB" in capsys.readouterr().out
    assert main(["plot", str(path), "--mode", "prealloc", "--device", "sim:1GiB", "-o", str(tmp_path / "t.html")]) == 0
    page = (tmp_path / "t.html").read_text()
    assert "out of memory at event 1: JAX asked 600.00 MiB on cpu:0" in page and "when it ran out of memory" in page
    said = capsys.readouterr().out.splitlines()  # the command says it too, not only "wrote t.html"
    assert said[0] == f"wrote {tmp_path / 't.html'}: t.csv under prealloc on sim:1GiB" and said[1].startswith(
        "out of memory at event 1: JAX asked 600.00 MiB on cpu:0 ("
    )


def test_devmem_plot_draws_a_real_jax_test_as_png_and_html(
    jax_loaded: object, matplotlib_loaded: object, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(
        """
        import jax
        import jax.numpy as jnp

        @jax.jit
        def forward_layer(x, w):
            return jnp.tanh(x @ w) @ w.T

        def test_layer():
            forward_layer(jnp.ones((512, 512)), jnp.ones((512, 1024))).block_until_ready()
        """
    )
    pytester.runpytest_inprocess(
        "--devmem-mode=growth", "--devmem-traces=traces", "--devmem-report=r.json"
    ).assert_outcomes(passed=1)
    from pytest_devmem.cli import main

    png, page = pytester.path / "layer.png", pytester.path / "layer.html"
    assert main(["plot", str(pytester.path / "r.json"), "--test", "test_layer", "-o", str(png)]) == 0
    assert main(["plot", str(pytester.path / "r.json"), "-o", str(page)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    text = page.read_text()
    assert "<svg" in text and "jit(forward_layer) temp" in text and "peak" in text
    # self-contained: nothing fetched, the chart library inlined
    assert "src=" not in text and "href=" not in text and "<link" not in text and "fetch(" not in text
    assert "uPlot (v1.6.32)" not in text or "https://github.com/leeoniya/uPlot (v1.6.32)" in text  # its notice kept
    assert text.count("class='devmem-chart'") == 1  # one interactive chart per device


def test_devmem_plot_says_what_is_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_devmem.cli import main

    report = tmp_path / "r.json"
    report.write_text(
        json.dumps(
            {
                "format": "pytest-devmem-report",
                "version": 1,
                "session": {"device_capacity_bytes": 2**30},
                "records": [{"test_id": "t", "trace": {"events": 3}}],
            }
        )
    )
    assert main(["plot", str(report), "-o", str(tmp_path / "x.html")]) == 2
    assert "no record has a trace file: run pytest with --devmem-traces=DIR" in capsys.readouterr().err
    trace = tmp_path / "t.csv"
    Trace([TraceEvent("allocate", 1, MiB)]).write_csv(trace)
    assert main(["plot", str(trace), "-o", str(tmp_path / "x.svg")]) == 2
    assert "must end in .png or .html" in capsys.readouterr().err
    assert main(["plot", str(trace), "--mode", "growth", "-o", str(tmp_path / "x.html")]) == 0
    assert (
        main(["plot", str(report), "--mode", "growth", "-o", str(tmp_path / "x.html")]) == 2
    )  # never ignored silently
    assert "--mode applies only to a trace file (.csv, .arrow)" in capsys.readouterr().err
    assert main(["plot", str(report), "--test", "nowhere", "-o", str(tmp_path / "x.html")]) == 2
    assert "no record's test id contains 'nowhere'" in capsys.readouterr().err
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"format": "pytest-devmem-report", "version": 1, "session": {}, "records": []}))
    assert main(["plot", str(empty), "-o", str(tmp_path / "x.html")]) == 2
    assert f"{empty}: a report with no records (no test was measured): nothing to draw" in capsys.readouterr().err


def test_devmem_plot_says_which_record_it_drew_where_several_match(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_devmem.cli import main

    trace = tmp_path / "t.csv"
    Trace([TraceEvent("allocate", 1, MiB)]).write_csv(trace)
    records = [
        {"test_id": f"test_a[{n}]", "regime": "prealloc", "peak_bytes_in_use": n * MiB, "trace": {"file": str(trace)}}
        for n in (1, 2)
    ]
    records.append({**records[1], "test_id": "test_a", "peak_bytes_in_use": MiB})  # an id inside the others
    report = tmp_path / "r.json"
    session = {"device": "sim:1GiB", "device_capacity_bytes": 2**30}
    report.write_text(
        json.dumps({"format": "pytest-devmem-report", "version": 1, "session": session, "records": records})
    )
    assert main(["plot", str(report), "--test", "test_", "-o", str(tmp_path / "x.html")]) == 0
    assert (
        f"wrote {tmp_path / 'x.html'}: test_a[2] under prealloc on sim:1GiB (the largest peak of 3 records whose "
        "test id contains 'test_'; --test with more of an id draws another)"
    ) in capsys.readouterr().out
    assert main(["plot", str(report), "--test", "test_a[1]", "-o", str(tmp_path / "x.html")]) == 0
    assert capsys.readouterr().out == f"wrote {tmp_path / 'x.html'}: test_a[1] under prealloc on sim:1GiB\n"
    assert main(["plot", str(report), "--test", "test_a", "-o", str(tmp_path / "x.html")]) == 0  # all of its id
    assert capsys.readouterr().out == f"wrote {tmp_path / 'x.html'}: test_a under prealloc on sim:1GiB\n"


def test_a_trace_with_no_events_is_drawn_as_png_and_html(matplotlib_loaded: object, tmp_path: Path) -> None:
    from pytest_devmem.cli import main

    empty = tmp_path / "empty.csv"
    empty.write_text("Thread,Time,Action,Pointer,Size,Stream\n")
    assert main(["plot", str(empty), "-o", str(tmp_path / "e.png")]) == 0
    assert main(["plot", str(empty), "-o", str(tmp_path / "e.html")]) == 0
    assert (tmp_path / "e.png").stat().st_size > 0


def test_events_naming_no_device_are_on_device_0_of_the_traces_platform(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The fixture's pool names no device; beside a GPU's JAX events it was on gpu:0, whichever machine replays it."""
    from pytest_devmem.cli import main

    trace = tmp_path / "gpu.csv"
    Trace(
        [
            TraceEvent("allocate", 1, 8 * 2**30, source="jax", device="gpu:0"),
            TraceEvent("allocate", 2, 8 * 2**30, source="pool"),
        ]
    ).write_csv(trace)
    assert (
        main(["replay", str(trace), "--mode", "prealloc", "--device", "sim:16GiB"]) == 1
    )  # one device: they do not fit
    assert "on gpu:0" in capsys.readouterr().out


def test_a_test_failing_the_gate_leaves_its_trace_and_picture(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_big(devmem):\n    devmem.pool.alloc(3 * 2**20)\n")
    result = pytester.runpytest_inprocess(
        "--devmem-mode=prealloc", "--devmem-limit=1MiB", "--devmem-artifacts=artifacts"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*artifacts: artifacts/test_a_test_failing_the_gate_leaves_its_trace_and_picture.py_test_big?prealloc?--*.html (timeline and memory map)*"
        ]
    )
    left = sorted(p.suffix for p in (pytester.path / "artifacts").iterdir())
    assert left == [".csv", ".html"]


def _svg_ys(svg: str, element: str) -> list[float]:
    start = svg.index(f"<{element} ")
    points = svg[start:].split("points='", 1)[1].split("'", 1)[0]
    return [float(pair.split(",")[1]) for pair in points.split()]


def test_a_lane_draws_held_with_in_use_on_one_scale_and_numbers_its_events() -> None:
    """36 MiB in use under a 12 GiB reservation: in use has a panel of its own scale, and in the
    held panel both share one scale, so in use is never drawn above what holds it."""
    trace = Trace(
        [
            TraceEvent("allocate", 1, 36 * MiB, source="jax", label="jit(step)", device="cpu:0"),
            TraceEvent("free", 1, 36 * MiB, source="jax", device="cpu:0"),
        ]
    )
    html = render_html(view_of(trace, "prealloc", 16 * 2**30), "t")
    held_band = html.split("held from the device (grey", 1)[1].split("</svg>", 1)[0]
    held_top = min(_svg_ys(held_band, "polygon"))
    in_use_top = min(_svg_ys(held_band, "polyline"))
    assert in_use_top > held_top  # lower on the page: less than what is held
    in_use_band = html.split("in use, on its own scale", 1)[1].split("held from the device (grey", 1)[0]
    assert "36 MiB</text>" in in_use_band and "12 GiB</text>" in held_band  # each band's axis in its one unit
    assert ">event</text>" in held_band and "text-anchor='middle'>0</text>" in held_band  # the x axis is numbered
    heading = html.split("<noscript><h3>", 1)[1]  # the lane as SVG, for a reader without scripts
    assert heading.startswith(
        "cpu:0: live data 36.00 MiB at event 0 (jit(step) 36.00 MiB)"
    )  # named above the lane, not over it


def test_the_failure_artifact_shows_the_baseline_beside_the_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(
        test_layer="import os\n\ndef test_layer(devmem):\n    devmem.pool.alloc(int(os.environ['LAYER_MIB']) * 2**20)\n"
    )
    monkeypatch.setenv("LAYER_MIB", "8")
    pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-update").assert_outcomes(passed=1)
    stored = json.loads((pytester.path / "baselines" / "sim-16GiB" / "test_layer.py.json").read_text())["records"][
        "test_layer.py::test_layer"
    ]["prealloc"]
    assert stored["profile"] == {"device": "cpu:0", "events": 1, "in_use": "0:0 0:8388608"}
    monkeypatch.setenv("LAYER_MIB", "16")
    pytester.runpytest_inprocess("--devmem-mode=prealloc", "--devmem-artifacts=artifacts").assert_outcomes(failed=1)
    (picture,) = (pytester.path / "artifacts").glob("*.html")
    html = picture.read_text()
    assert (
        "<h2>Baseline beside this run</h2><p>baselines/sim-16GiB/test_layer.py.json: peak in use 8.00 MiB; this run: 16.00 MiB on cpu:0.</p>"
        in html
    )
    assert (  # issue 53.9: the stored profile is live data (requests rounded to 256 B), not the allocator's count
        "cpu:0 at the baseline: its live data (each request rounded to 256 B, not the allocator's chunks) over its 1 event, drawn dashed over this run's in-use line above"
        in html
    )
    assert "<tr><td>pool</td><td>8.00 MiB</td><td>16.00 MiB</td></tr>" in html  # the holders at both peaks
    # the baseline is a series of the run's own chart, not a panel of its own
    (chart,) = [
        json.loads(part.split("class='devmem-chart'>", 1)[1])
        for part in html.split("</script>")
        if "devmem-chart'>" in part
    ]
    by_label = {series["label"].split(" (")[0]: series["values"] for series in chart["series"]}
    assert max(v for v in by_label["in use"] if v is not None) == 16 * MiB
    assert max(v for v in by_label["baseline live data"] if v is not None) == 8 * MiB
    assert chart["series"][1]["show"] is False  # held from the device: drawn on request, never dwarfing in use
    svg = html.split("<noscript>", 1)[1].split("</noscript>", 1)[0]
    assert "stroke='#444444' stroke-width='1.5' stroke-dasharray='5 3'" in svg  # and over the SVG lane too
    assert "<svg" not in html.split("Baseline beside this run", 1)[1].split("<h3>Who held", 1)[0]


def test_the_fragmentation_map_is_drawn_where_memory_is_still_held() -> None:
    """Four 10 MiB activations, each followed by a 256 KiB summary, then the activations freed: the
    pool (52 MiB: 5% of 1 GiB, rounded up to 2 MiB as XLA sizes it) is most fragmented (0.78) at the
    very end, when 1 MiB of its 41 MiB peak is left and no
    allocation of the test waits for the holes. The picture maps the last moment that still holds a
    tenth of the peak, with the summaries that pin its holes outlined."""
    events = []
    for i in range(4):
        events += [
            TraceEvent("allocate", 2 * i + 1, 10 * MiB, source="pool", label=f"activation {i}"),
            TraceEvent("allocate", 2 * i + 2, 256 * 1024, source="pool", label=f"summary {i}"),
        ]
    events += [TraceEvent("free", 2 * i + 1, 10 * MiB, source="pool") for i in range(4)]
    trace = Trace(events)
    policy = Policy.of("fraction", "0.05")
    setups = setups_for(policy, 2**30)
    run = run_machine(trace, setups, MachineSpec(2**30, "sim:1GiB"), timeline=True)
    replayed = build_view(run, trace, policy.label).lanes[0]
    assert (replayed.worst_map_event, round(replayed.worst_fragmentation or 0, 2)) == (
        11,
        0.78,
    )  # the replay's own worst moment
    lane = build_view(run, trace, policy.label, setups).lanes[0]
    assert lane.worst_map_event == 10 and round(lane.map_fragmentation or 0, 2) == 0.73
    held = sum(chunk.size for pool in lane.pools_at_worst for chunk in pool.chunks if chunk.owner)
    assert held >= lane.peak_in_use // 10 and len(lane.pins) == 2
    assert (
        "memory map of cpu:0 at its most fragmented while it held memory (event 10, fragmentation 0.73)"
        in render_html(build_view(run, trace, policy.label, setups), "t")
    )


def test_devmem_plot_of_an_emoji_test_id_warns_of_no_missing_glyph_and_shows_its_escape(
    matplotlib_loaded: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import warnings

    from pytest_devmem.cli import main
    from pytest_devmem.present.text import matplotlib_text

    trace = tmp_path / "test_x[\U0001f525-ünï].csv"
    trace.write_text(
        "Thread,Time,Action,Pointer,Size,Stream,Source,Label,Device,Process\n"
        "0,0,allocate,0x1,4096,0,pool,\U0001f525 buffer,cpu:0,0\n0,1,free,0x1,4096,0,pool,\U0001f525 buffer,cpu:0,0\n"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's "Glyph 128293 (\N{FIRE}) missing from font(s) DejaVu Sans"
        assert main(["plot", str(trace), "--mode", "growth", "-o", str(tmp_path / "e.png")]) == 0
    assert "Warning" not in capsys.readouterr().err
    assert matplotlib_text("test_x[\U0001f525-ünï] $5") == "test_x[\\U0001f525-ünï] \\$5"  # DejaVu Sans has ü, ï
