"""What a person watching a build sees: stage lines, -v/-q, the live view, and OUT/report.html against the manifest."""

from __future__ import annotations

import base64
import io
import json
import logging
import re
import time
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from rich.console import Console
from typer.testing import CliRunner

from corpusforge import progress
from corpusforge.cli import app
from corpusforge.encoding.vocab import load_tokenizer
from corpusforge.pipeline.documents_io import output_files

runner = CliRunner()
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def restore_logging():
    """``build`` configures the root logger (as a command does); give the next test the logging it had."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _build(out: Path, *args: str, stages: str | None = None):
    sets = ["--set", f"run.output_dir={json.dumps(str(out))}"] + (["--set", f"run.stages={stages}"] if stages else [])
    return runner.invoke(app, ["build", *sets, *args])


@pytest.fixture(scope="module")
def demo_build(tmp_path_factory) -> tuple[Path, str]:
    """The bundled demo, every stage up to the shards, through the command line (piped: log lines)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    out = tmp_path_factory.mktemp("demo") / "out"
    result = _build(out)
    root.handlers[:] = handlers
    root.setLevel(level)
    assert result.exit_code == 0, result.output
    return out, result.output


def test_piped_build_logs_every_stage_start_and_end(demo_build):
    out, output = demo_build
    for stage in ("documents", "vocab", "bert", "gpt", "report"):
        assert re.search(rf"stage {stage} started", output), stage
        assert re.search(rf"stage {stage} done after [0-9.]+s", output), stage
    assert re.search(r"stage documents done after [0-9.]+s: documents \d+, rejects \d+", output)
    assert f"report:   {out / 'report.html'}" in output
    assert "\r" not in output, "a third-party progress bar leaked into the piped output"


def _figures(page: str) -> dict[str, object]:
    return {key: json.loads(value.replace("&quot;", '"')) for key, value in re.findall(r'data-key="([^"]+)" data-value="([^"]+)"', page)}


def _lookup(out: Path, manifest: dict, key: str) -> object:
    """The value a report figure names: a path into manifest.json, or into a shard manifest (shards.TASK...)."""
    parts = key.split(".")
    if parts[0] == "shards":
        node = json.loads((out / "shards" / parts[1] / "manifest.json").read_text())
        if parts[2:] == ["shards"]:
            return len(node["shards"])
        parts = parts[2:]
    else:
        node = manifest
    for index, part in enumerate(parts):
        if part == "rejects" and index == len(parts) - 1:
            return sum(node["rejects"].values())
        node = node[part]
    return node


def test_report_figures_equal_the_manifests_and_images_are_pngs(demo_build):
    out, _ = demo_build
    page = (out / "report.html").read_text(encoding="utf-8")
    manifest = json.loads((out / "manifest.json").read_text())
    figures = _figures(page)
    for source in manifest["counters"]:
        for name in ("inputs", "documents", "rejects", "words"):
            assert f"counters.{source}.{name}" in figures
    assert {"shards.bert.totals.examples", "shards.gpt.totals.tokens", "config.vocab.wordpiece_vocab_size", "stage_seconds.total"} <= set(
        figures
    )
    for key, value in figures.items():
        assert value == _lookup(out, manifest, key), key
    images = re.findall(r'<img alt="[^"]*" src="data:image/png;base64,([^"]+)"', page)
    assert len(images) >= 5  # sources + reject reasons, lengths, duplicates, bert + gpt, stage times
    assert all(base64.b64decode(image).startswith(PNG) for image in images)
    assert "<script" not in page and "http" not in page.split("</style>")[0]  # self-contained, no external assets


def test_document_lengths_come_from_the_recount_and_match_the_files(demo_build):
    """The page's length figures are the recount's (one read of the documents), and they are the files' own."""
    out, _ = demo_build
    manifest = json.loads((out / "manifest.json").read_text())
    page = (out / "report.html").read_text(encoding="utf-8")
    table = pq.read_table(output_files(out / "documents"), columns=["source", "text"])
    for source, counters in manifest["counters"].items():
        words = sorted(len(text.split()) for src, text in zip(table["source"].to_pylist(), table["text"].to_pylist()) if src == source)
        lengths = counters["lengths"]
        assert (lengths["min"], lengths["max"]) == (words[0], words[-1])
        assert lengths["mean"] == pytest.approx(sum(words) / len(words))
        middle = len(words) // 2
        assert lengths["median"] == (words[middle] if len(words) % 2 else (words[middle - 1] + words[middle]) / 2)
        assert sum(lengths["counts"]) == counters["documents"] == len(words)  # every document falls in a bin
        assert f"<td>{lengths['median']:,.0f}</td>" in page.split("Document lengths")[1]


def test_report_shows_vocabulary_shortfall_and_duplicate_clusters(demo_build):
    out, _ = demo_build
    page = (out / "report.html").read_text(encoding="utf-8")
    reached = json.loads((out / "shards" / "bert" / "manifest.json").read_text())["vocab"]["size"]
    assert f"<td>{reached:,}</td>" in page and f"{reached / 30522:.0%} of the requested size" in page


def test_tokens_per_word_are_measured_by_the_vocab_stage_and_shown(demo_build):
    """The vocab stage measures them where its tokenizers are loaded; the page shows the manifest's figures."""
    out, _ = demo_build
    page = (out / "report.html").read_text(encoding="utf-8")
    figures = json.loads((out / "manifest.json").read_text())["artifacts"]["vocab_figures"]
    assert set(figures) == {"wordpiece", "bpe"}
    for kind, measured in figures.items():
        assert measured["size"] == load_tokenizer(out / "vocab" / kind).get_vocab_size(with_added_tokens=True)
        assert 1.0 < measured["tokens_per_word"] < 3.0
        assert re.search(rf"<tr><td>{kind}</td>.*?<td>{measured['tokens_per_word']:.3f}</td></tr>", page)
    rejects = pq.read_table(output_files(out / "rejects"))
    near = rejects.filter(pc.equal(rejects["reason"], "near_duplicate"))
    clusters = len(set(near["detail"].to_pylist()))
    assert clusters >= 1
    row = re.search(r"<tr><td>near_duplicate</td><td>([\d,]+)</td><td>([\d,]+)</td>", page)
    assert row and (int(row[1].replace(",", "")), int(row[2].replace(",", ""))) == (clusters, near.num_rows)


def test_quiet_prints_where_the_outputs_are_and_verbose_shows_library_lines(tmp_path):
    stages = '["books", "clean", "documents"]'
    quiet = _build(tmp_path / "q", "-q", stages=stages)
    assert quiet.exit_code == 0 and quiet.output.splitlines() == [
        f"outputs in {tmp_path / 'q'}",
        f"report: {tmp_path / 'q' / 'report.html'}",
    ]
    assert (tmp_path / "q" / "report.html").is_file()
    verbose = _build(tmp_path / "v", "-v", stages=stages)
    assert verbose.exit_code == 0 and re.search(r"INFO apache_beam[.\w]*: ", verbose.output)
    plain = _build(tmp_path / "p", stages=stages)
    assert "stage documents done" in plain.output and "INFO apache_beam" not in plain.output


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_live_view_shows_counters_and_time_left_and_keeps_other_bars_out(monkeypatch):
    from tqdm import tqdm

    terminal = _Terminal()
    monkeypatch.setattr("sys.stderr", terminal)  # where tqdm would draw on a real terminal
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=120)
    with progress.display(console, live=True):
        with progress.stage("shards", total=10, unit="examples"):
            for _ in tqdm(range(3), desc="third-party-bar", disable=None):  # as the shard writer's bar
                pass
            progress.count("examples", 4)
            time.sleep(0.3)
            progress.count("examples", 1)
            progress.count("shards", 1)
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buffer.getvalue())
    assert "shards" in screen and "examples 5, shards 1" in screen
    assert "third-party-bar" not in screen + terminal.getvalue()
    assert re.search(r"0:00:0\d", screen)  # elapsed and remaining columns


def test_log_view_reports_periodic_counters_and_failures(caplog):
    caplog.set_level(logging.INFO, logger="corpusforge.progress")
    with progress.display(Console(file=io.StringIO()), live=False, interval_s=0.05):
        with progress.stage("examples", total=100, unit="examples"):
            progress.count("examples", 25)
            time.sleep(0.2)
        with pytest.raises(RuntimeError), progress.stage("broken"):
            raise RuntimeError("boom")
    lines = [r.getMessage() for r in caplog.records]
    assert any(re.match(r"stage examples running for \d+s: examples 25 \(25% of 100, about [0-9]+s left\)", line) for line in lines), lines
    assert "stage examples started (100 examples)" in lines
    assert any(line.startswith("stage broken FAILED after") for line in lines)


def test_polled_counters_show_while_a_stage_runs_and_leave_its_final_line(caplog, monkeypatch, tmp_path):
    from corpusforge.core.layout import Layout
    from corpusforge.stages import DOCUMENTS

    monkeypatch.setattr(progress, "POLL_S", 0.02)
    caplog.set_level(logging.INFO, logger="corpusforge.progress")
    spill = tmp_path / ".work" / "documents" / "spill"
    spill.mkdir(parents=True)
    with progress.display(Console(file=io.StringIO()), live=False, interval_s=0.1):
        with progress.stage("documents", poll=lambda: DOCUMENTS.live(Layout.at(tmp_path))):
            for index in range(3):
                (spill / f"books-{index}.arrow").write_bytes(b"")
            time.sleep(0.4)
            progress.count("documents", 7)
    lines = [r.getMessage() for r in caplog.records]
    assert any(re.match(r"stage documents running for \d+s: tasks spilled 3, parts written 0", line) for line in lines), lines
    assert re.match(r"stage documents done after [0-9.]+s: documents 7$", lines[-1]), lines


def test_docs_inspect_reads_rejects_and_fails_a_bad_show_first(demo_build):
    out, _ = demo_build
    rejects = runner.invoke(app, ["docs", "inspect", str(out / "rejects")])
    assert rejects.exit_code == 0, rejects.output
    assert "rejects only" in rejects.output and "near_duplicate" in rejects.output
    as_json = json.loads(runner.invoke(app, ["docs", "inspect", str(out / "rejects"), "--json"]).output)
    manifest = json.loads((out / "manifest.json").read_text())
    assert {s: v["rejects"] for s, v in as_json["sources"].items()} == {s: v["rejects"] for s, v in manifest["counters"].items()}
    shown = runner.invoke(app, ["docs", "inspect", str(out / "rejects"), "--show", "0"])
    assert shown.exit_code == 0 and "reason:" in shown.output
    bad = runner.invoke(app, ["docs", "inspect", str(out), "--show", "99"])
    assert bad.exit_code == 2 and "no record '99'" in bad.output and "documents per source" not in bad.output
    shards = runner.invoke(app, ["docs", "inspect", str(out / "shards" / "bert")])
    assert shards.exit_code == 2 and "use `corpusforge shards inspect" in shards.output
