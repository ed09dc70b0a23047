"""A stage is a declaration: a toy stage registered here (declaration + run function, no other edit) is
planned, fingerprinted, reused on a re-run, rerun when the configuration it reads changes, and shown in
the manifest like the declared ones."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from corpusforge.build import run_build
from corpusforge.core import storage
from corpusforge.core.config import Config
from corpusforge.core.layout import Layout
from corpusforge.markers import describe_outputs, read_marker
from corpusforge.stages import BY_NAME, Context, Outcome, Stage, register, unregister

SAMPLES = Path(__file__).resolve().parents[1] / "corpusforge" / "samples"
RUNS: list[str] = []  # out folders the toy's run function was called for


def count_titles(ctx: Context) -> Outcome:
    """The toy: one JSON file with the number of documents per source, read from the documents stage's parts."""
    from corpusforge.pipeline.documents_io import output_files

    counts: dict[str, int] = {}
    sources = [
        s
        for path in output_files(ctx.layout.documents)
        for s in pq.read_table(storage.arrow_input(path), columns=["source"])["source"].to_pylist()
    ]
    for source in sources:
        counts[source] = counts.get(source, 0) + 1
    path = ctx.layout.path("toy", "counts.json")
    storage.write_json(path, {"counts": counts, "min_words": ctx.cfg.clean.min_words})
    RUNS.append(ctx.layout.out)
    return Outcome(describe_outputs(ctx.layout, [path], checksums=True), digests={"toy": storage.sha256(path)}, data={"counts": counts})


TOY = Stage(
    name="toy",
    format=1,
    view=lambda cfg, parts: {"clean": cfg.clean.model_dump(mode="json")},
    needs=lambda cfg: [("documents", "documents")],
    folders=lambda layout, cfg: [layout.path("toy")],
    run=count_titles,
    figures=lambda layout, marker: {"toy": marker.data["counts"]},
    how_to_run='add "toy" to run.stages',
)


@pytest.fixture
def toy() -> Iterator[Stage]:
    register(TOY)
    RUNS.clear()
    try:
        yield TOY
    finally:
        unregister(TOY.name)


def config(out: Path, *stages: str, min_words: int = 20) -> Config:
    return Config.model_validate(
        {
            "run": {"output_dir": str(out), "stages": list(stages), "direct_running_mode": "in_memory"},
            "books": {"paths": [str(SAMPLES / "books")]},
            "clean": {"min_words": min_words},
        }
    )


def test_a_registered_toy_stage_is_planned_fingerprinted_reused_and_in_the_manifest(toy: Stage, tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = run_build(config(out, "books", "clean", "documents", "toy"))
    layout = Layout.at(out)
    assert first.ran["toy"] == "no earlier result" and RUNS == [layout.out]
    counts = json.loads((out / "toy" / "counts.json").read_text())["counts"]
    assert counts == {"books": sum(s.documents for s in first.stats.values())} and counts["books"] > 0
    marker = read_marker(layout, "toy")
    assert marker is not None and marker.made_from["upstream"] == {
        "documents.documents": read_marker(layout, "documents").digests["documents"]
    }
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["stages"]["toy"] == "ran" and manifest["artifacts"]["toy"] == counts

    again = run_build(config(out, "documents", "toy"))  # documents needed, not requested: made from the same books
    assert again.reused == ["toy"] and RUNS == [layout.out]
    assert json.loads((out / "manifest.json").read_text())["stages"] == {"toy": "reused"}

    changed = run_build(config(out, "books", "clean", "documents", "toy", min_words=21))  # a key both stages read
    assert changed.ran == {"documents": "clean.min_words was 20, now 21", "toy": "documents runs again"} and len(RUNS) == 2
    assert read_marker(layout, "toy").fingerprint != marker.fingerprint


def test_a_toy_stage_missing_its_upstream_says_what_to_run_first(toy: Stage, tmp_path: Path) -> None:
    from corpusforge.markers import PrerequisiteError

    with pytest.raises(PrerequisiteError, match=r"^toy needs the documents stage's output in .*, and there is none: run documents first"):
        run_build(config(tmp_path / "out", "toy"))
    assert not (tmp_path / "out" / "toy").exists() and RUNS.count(str(tmp_path / "out")) == 0


def test_stage_names_are_checked_against_the_declarations(tmp_path: Path) -> None:
    assert "toy" not in BY_NAME
    with pytest.raises(ValueError, match=r"^run.stages: unknown stage\(s\) \['toy'\]"):
        run_build(config(tmp_path / "out", "books", "toy"))
