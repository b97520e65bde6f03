"""Third-party files shipped with the package, each beside its licence: uPlot 1.6.32 (MIT,
https://github.com/leeoniya/uPlot, dist/ of tag 1.6.32, commit e995b061e9fc5476a6d862cd2fb2ebc7452ca012),
the chart library of the HTML pictures (zoom, hover values), inlined into each page so that nothing
is fetched."""

from __future__ import annotations

from importlib import resources


def uplot() -> tuple[str, str]:
    """uPlot's script and style sheet, as text to inline."""
    folder = resources.files(__package__).joinpath("uplot")
    return folder.joinpath("uPlot.iife.min.js").read_text(encoding="utf-8"), folder.joinpath("uPlot.min.css").read_text(
        encoding="utf-8"
    )
