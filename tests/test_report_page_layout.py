"""OUT/report.html as a reader meets it: the build's warnings listed, charts as wide as the page, counts
with whole-number ticks, and no duplicate series drawn on top of another. On the bundled demo, built once."""

from __future__ import annotations

import base64
import html
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from corpusforge import report_page
from corpusforge.pipeline.documents_io import output_files
from corpusforge.shards.inspect import summarize

CORPUSFORGE = Path(sys.executable).parent / "corpusforge"  # the installed command, as a user runs it
WHOLE_NUMBER = re.compile(r"\d{1,3}(,\d{3})*")  # 1, 20, 5,000


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report") / "out"
    build = subprocess.run(
        [str(CORPUSFORGE), "build", "-q", "--set", f"run.output_dir={json.dumps(str(out))}"], capture_output=True, text=True
    )
    assert build.returncode == 0, build.stdout + build.stderr
    return out


def _section(page: str, title: str) -> str:
    return page.split(f"<h2>{title}</h2>")[1].split("<h2>")[0]


def test_the_page_lists_every_warning_of_the_manifest_or_says_there_is_none(demo, tmp_path):
    warnings = json.loads((demo / "manifest.json").read_text())["warnings"]
    assert warnings  # the demo's vocabularies fall short of the sizes asked
    listed = _section((demo / "report.html").read_text(encoding="utf-8"), "Warnings")
    assert re.findall(r"<li[^>]*>(.*?)</li>", listed) == [html.escape(w) for w in warnings]

    quiet = tmp_path / "quiet"
    shutil.copytree(demo, quiet)
    manifest = json.loads((quiet / "manifest.json").read_text()) | {"warnings": []}
    (quiet / "manifest.json").write_text(json.dumps(manifest))
    listed = _section(Path(report_page.write_report(quiet)).read_text(encoding="utf-8"), "Warnings")
    assert "<li" not in listed and "no warning" in listed


def test_every_chart_is_drawn_and_shown_at_the_page_width(demo):
    page = (demo / "report.html").read_text(encoding="utf-8")
    style = page.split("<style>")[1].split("</style>")[0]
    page_px = int(re.search(r"body\{[^}]*max-width:(\d+)px", style)[1])
    assert re.search(r"(^|[\s}])img\{[^}]*(?<!-)width:100%", style), "images are not styled to the full width"
    assert not any("<img" in row for row in re.findall(r"<div class=row>(.*?)</div>", page)), "a chart shares a row with a table"
    images = [base64.b64decode(png) for png in re.findall(r'<img alt="[^"]*" src="data:image/png;base64,([^"]+)"', page)]
    assert len(images) >= 5
    widths = {int.from_bytes(png[16:20], "big") for png in images}  # the PNG header's width
    assert widths == {page_px}, "a chart drawn narrower or wider than the page is shown stretched or squeezed"


def _figures(out: Path) -> dict[str, object]:
    """The page's count charts, made by the helpers the page calls, from the demo's files."""
    counters = json.loads((out / "manifest.json").read_text())["counters"]
    return {
        "sources": report_page._sources_figure(counters),
        "lengths": report_page._lengths_figure(counters),
        "duplicates": report_page._duplicates_figure(report_page._cluster_sizes(output_files(out / "rejects"))),
        "shards": report_page._shards_figure({task: summarize(out / "shards" / task) for task in ("bert", "gpt")}),
    }


def _shown_labels(axis) -> list[str]:
    """The tick labels a reader sees: ticks inside the axis' range, major and minor."""
    low, high = sorted(axis.get_view_interval())
    ticks = [*zip(axis.get_majorticklocs(), axis.get_majorticklabels()), *zip(axis.get_minorticklocs(), axis.get_minorticklabels())]
    return [label.get_text() for tick, label in ticks if low <= tick <= high and label.get_text()]


# The count axes of each chart (the other axes name sources and reasons).
COUNT_AXES = {"sources": ["x"], "lengths": ["x", "y"], "duplicates": ["x", "y"], "shards": ["x", "y"]}


def test_count_axes_are_labelled_with_whole_numbers(demo):
    from matplotlib import pyplot as plt

    for name, figure in _figures(demo).items():
        figure.canvas.draw()
        for axes in figure.axes:
            for which in COUNT_AXES[name]:
                labels = _shown_labels(axes.xaxis if which == "x" else axes.yaxis)
                assert labels, (name, axes.get_title(), which)
                assert all(WHOLE_NUMBER.fullmatch(label) for label in labels), (name, axes.get_title(), which, labels)
        plt.close(figure)


def test_duplicate_reasons_are_drawn_side_by_side_with_a_legend(demo):
    """The demo removes one exact and one near-duplicate, each from a cluster of 2: both must show."""
    from matplotlib import pyplot as plt

    sizes = report_page._cluster_sizes(output_files(demo / "rejects"))
    assert set(sizes) == {"duplicate", "near_duplicate"}
    figure = report_page._duplicates_figure(sizes)
    (axes,) = figure.axes
    spans = {container.get_label(): [(bar.get_x(), bar.get_x() + bar.get_width()) for bar in container] for container in axes.containers}
    assert set(spans) == {"duplicate", "near-duplicate"}
    assert [text.get_text() for text in axes.get_legend().get_texts()] == ["duplicate", "near-duplicate"]
    for left, right in zip(spans["duplicate"], spans["near-duplicate"]):
        assert left[1] <= right[0] + 1e-9, "one reason's bar lies over the other's"
    plt.close(figure)
