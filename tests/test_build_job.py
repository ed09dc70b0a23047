"""The documents job end to end: accounting, runner independence (in-process, multi_processing, Dask), bad input."""

from __future__ import annotations

import bz2
import hashlib
import json
import re
import shutil
from pathlib import Path

import apache_beam as beam
import pyarrow.parquet as pq
import pytest
from apache_beam.pipeline import PipelineVisitor
from typer.testing import CliRunner

from corpusforge.build import run_build
from corpusforge.cli import app
from corpusforge.core.config import load_config
from corpusforge.core.layout import Layout
from corpusforge.pipeline.documents_io import output_files
from corpusforge.pipeline.documents_job import documents_graph
from corpusforge.stages import documents_job, documents_parts

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "configs" / "demo.toml"
DOC_STAGES = '["books", "wikipedia", "clean", "dedup", "documents"]'


def _build(out: Path, *overrides: str):
    cfg = load_config(DEMO, [f"run.output_dir={json.dumps(str(out))}", f"run.stages={DOC_STAGES}", *overrides])
    return run_build(cfg)


def _digests(out: Path) -> dict[str, str]:
    files = output_files(out / "documents") + output_files(out / "rejects")
    return {f"{f.parent.name}/{f.name}": hashlib.sha256(f.read_bytes()).hexdigest() for f in map(Path, files)}


def _page_count(xml: Path) -> int:
    return len(re.findall(rb"<page>", xml.read_bytes()))


def test_demo_documents_account_for_every_input(tmp_path: Path, samples: Path) -> None:
    result = _build(tmp_path / "out")
    books = sorted((samples / "books").rglob("*.txt")) + sorted((samples / "books").rglob("*.epub"))
    pages = _page_count(samples / "wikipedia" / "sample-pages-articles.xml")
    assert result.stats["books"].inputs == len(books)
    assert result.stats["wikipedia"].inputs == pages
    ids = pq.read_table(output_files(tmp_path / "out" / "documents")).column("id").to_pylist()
    reject_ids = pq.read_table(output_files(tmp_path / "out" / "rejects")).column("id").to_pylist()
    assert len(ids) == len(set(ids)), "a document was written twice"
    assert not set(ids) & set(reject_ids), "a record is both a document and a reject"
    assert len(ids) + len(reject_ids) == len(books) + pages
    reasons = {r for s in result.stats.values() for r in s.rejects}
    assert {"redirect", "namespace", "language", "duplicate"} <= reasons
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert len(manifest["inputs"]) == len(books) + 1 and all(len(i["sha256"]) == 64 for i in manifest["inputs"])
    assert manifest["config"]["clean"]["language"] == "en"
    assert manifest["counters"]["wikipedia"]["documents"] == result.stats["wikipedia"].documents
    assert {o["path"] for o in manifest["outputs"]} == set(_digests(tmp_path / "out"))


@pytest.fixture(scope="module")
def real_inputs(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> tuple[Path, Path]:
    """A few shared books and the enwiki excerpt rebuilt as a bz2 multistream dump (several ranges)."""
    from corpus_factory import build_multistream

    root = tmp_path_factory.mktemp("inputs")
    books = root / "books"
    for name in ("en/11-0.txt", "en/219-0.txt", "en/1155-0.txt", "fr/Candide.txt"):
        (books / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(shared_data / "books" / name, books / name)
    dump = root / "enwiki-multistream.xml.bz2"
    build_multistream(
        next((shared_data / "wikipedia").glob("enwiki-latest-pages-articles1*")),
        dump,
        root / "enwiki-multistream-index.txt.bz2",
        pages_per_stream=20,
    )
    return books, dump


def _real_build(out: Path, inputs: tuple[Path, Path], *overrides: str):
    books, dump = inputs
    return _build(
        out,
        f"books.paths=[{json.dumps(str(books))}]",
        f"wikipedia.paths=[{json.dumps(str(dump))}]",
        "wikipedia.streams_per_range=2",
        *overrides,
    )


class _Labels(PipelineVisitor):
    def __init__(self) -> None:
        self.labels: set[str] = set()

    def enter_composite_transform(self, node) -> None:
        self.labels.add(node.full_label)

    def visit_transform(self, node) -> None:
        self.labels.add(node.full_label)


def _visit_documents_graph(cfg, visitor: PipelineVisitor) -> None:
    """The documents job's graph as built for ``cfg``, walked by ``visitor`` (built only, never run)."""
    pipeline = beam.Pipeline()
    try:
        documents_graph(pipeline, documents_job(cfg, Layout.at(cfg.run.output_dir, cfg.run.temp_location), documents_parts(cfg.run.stages)))
        pipeline.visit(visitor)
    finally:
        shutil.rmtree(pipeline.local_tempdir)


def _documents_labels(out: Path, runner: str) -> set[str]:
    """The steps of the documents job's graph as built for ``runner``."""
    visitor = _Labels()
    _visit_documents_graph(load_config(DEMO, [f"run.output_dir={json.dumps(str(out))}", f'run.runner="{runner}"']), visitor)
    return visitor.labels


class _Flattens(PipelineVisitor):
    """Each Flatten of several inputs: (its label, the labels of the steps producing its inputs)."""

    def __init__(self) -> None:
        self.flattens: dict[str, list[str]] = {}

    def visit_transform(self, node) -> None:
        if isinstance(node.transform, beam.Flatten) and len(node.inputs) > 1:
            self.flattens[node.full_label] = [pcoll.producer.full_label for pcoll in node.inputs]


def test_no_flatten_of_several_inputs_carries_an_element_per_document(tmp_path: Path, shared_data: Path) -> None:
    """The in-process runners run a Flatten of several inputs themselves, holding every element it carries: with
    books, Wikipedia and WebText (and the removal of Wikipedia from WebText) built together, the ones the runner
    runs carry only what writers wrote (file locations) or counters; WebText's own steps (links, fetching, by
    Beam's own shuffles before their spill) apart."""
    dumps = sorted((shared_data / "reddit").glob("RS_*.xz"))
    cfg = load_config(
        DEMO,
        [
            f"run.output_dir={json.dumps(str(tmp_path / 'out'))}",
            'run.stages=["books", "wikipedia", "webtext", "clean", "dedup", "near_dedup", "documents"]',
            f"webtext.dumps={json.dumps([str(d) for d in dumps])}",
            "webtext.offline=true",
            f"webtext.warc_dir={json.dumps(str(shared_data / 'html' / 'warc'))}",
        ],
    )
    visitor = _Flattens()
    _visit_documents_graph(cfg, visitor)
    flattens = {label: inputs for label, inputs in visitor.flattens.items() if not label.startswith("WebText")}
    assert "AllSources/AllFiles" in flattens and "RemoveWikipedia/ByBand/AllFiles" in flattens  # the graph has them
    for label, inputs in flattens.items():
        if label != "AllCounters":
            assert all(re.search(r"/(Write|Spill)\w*$", producer) for producer in inputs), (label, inputs)


def test_per_document_shuffles_go_through_files_on_dask_and_not_on_flink(tmp_path: Path) -> None:
    """On Dask, Beam's GroupByKey is a task shuffle of pickled lists (100 MB of 4 KB articles: 91 CPU-s on two
    workers against 53 through files); engines with a shuffle service of their own keep it."""
    dask, flink = (_documents_labels(tmp_path / runner, runner) for runner in ("DaskRunner", "FlinkRunner"))
    for shuffle in ("ExactDedup/GroupByText", "NearDedup/ByBand", "WriteDocuments/GroupSpill"):
        assert f"{shuffle}/WriteBuckets" in dask and f"{shuffle}/GroupByKey" not in dask
        assert f"{shuffle}/GroupByKey" in flink and f"{shuffle}/WriteBuckets" not in flink


@pytest.mark.slow
def test_output_identical_across_runners(tmp_path: Path, real_inputs: tuple[Path, Path]) -> None:
    from dask.distributed import Client, LocalCluster

    in_process = _real_build(tmp_path / "in_memory", real_inputs)
    _real_build(tmp_path / "multi", real_inputs, 'run.direct_running_mode="multi_processing"', "run.direct_num_workers=2")
    with (  # 2 threads a worker, as `dask worker` runs by default (a thread per core): bundles run concurrently
        LocalCluster(n_workers=2, threads_per_worker=2, processes=True, host="127.0.0.1", dashboard_address=None) as cluster,
        Client(cluster),
    ):
        _real_build(
            tmp_path / "dask",
            real_inputs,
            'run.runner="DaskRunner"',
            f'run.beam_args=["--dask_client_address={cluster.scheduler_address}"]',
        )
    reference = _digests(tmp_path / "in_memory")
    assert in_process.stats["wikipedia"].documents > 50 and in_process.stats["books"].documents == 3
    assert _digests(tmp_path / "multi") == reference
    assert _digests(tmp_path / "dask") == reference


def test_bad_inputs_become_counted_rejects(tmp_path: Path, shared_data: Path) -> None:
    books = tmp_path / "books"
    books.mkdir()
    (books / "junk.txt").write_bytes(bytes(range(256)) * 64)
    shutil.copy(shared_data / "books" / "en" / "11-0.txt", books / "alice.txt")
    raw = bz2.decompress(next((shared_data / "wikipedia").glob("enwiki-latest-pages-articles1*")).read_bytes())
    truncated = tmp_path / "truncated.xml.bz2"
    truncated.write_bytes(bz2.compress(raw)[:400_000])
    malformed = tmp_path / "malformed.xml"
    malformed.write_bytes(raw[: raw.index(b"</page>", 200_000)] + b"<page><title>x</broken>")
    result = _build(
        tmp_path / "out",
        f"books.paths=[{json.dumps(str(books))}]",
        f"wikipedia.paths=[{json.dumps(str(truncated))}, {json.dumps(str(malformed))}]",
    )
    assert result.stats["books"].documents == 1
    assert result.stats["books"].rejects["decode_error"] == 1
    damaged = result.stats["wikipedia"].rejects
    # the cut bz2 ends in one corrupt_input; the page the XML breaks in (and a page cut mid-way) are malformed_xml
    assert damaged["corrupt_input"] == 1 and 1 <= damaged["malformed_xml"] <= 2, damaged
    assert result.stats["wikipedia"].documents >= 5, "pages read before the damage must be kept"


def test_cli_reports_unusable_input_in_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    runner = CliRunner()
    outcome = runner.invoke(
        app,
        [
            "build",
            str(DEMO),
            "--set",
            f"books.paths=[{json.dumps(str(empty))}]",
            "--set",
            f"run.output_dir={json.dumps(str(tmp_path / 'o'))}",
        ],
    )
    assert outcome.exit_code == 2
    assert "error:" in outcome.output and str(empty) in outcome.output
    assert "Traceback" not in outcome.output
    bad_key = runner.invoke(app, ["build", str(DEMO), "--set", "clean.min_wordz=3"])
    assert bad_key.exit_code == 2 and "min_wordz" in bad_key.output


def test_an_unreachable_dask_scheduler_is_one_line(tmp_path: Path) -> None:
    unreachable = 'run.beam_args=["--dask_client_address=127.0.0.1:9", "--dask_connection_timeout=1"]'
    overrides = [f"run.output_dir={json.dumps(str(tmp_path / 'o'))}", 'run.runner="DaskRunner"', unreachable]
    outcome = CliRunner().invoke(app, ["build", str(DEMO), *(arg for value in overrides for arg in ("--set", value))])
    assert outcome.exit_code == 2
    assert "no Dask scheduler answered at 127.0.0.1:9" in outcome.output and "Traceback" not in outcome.output


def test_docs_inspect_shows_counts_and_a_document(tmp_path: Path) -> None:
    _build(tmp_path / "out")
    runner = CliRunner()
    summary = runner.invoke(app, ["docs", "inspect", str(tmp_path / "out"), "--json"])
    assert summary.exit_code == 0, summary.output
    data = json.loads(summary.output)
    assert data["sources"]["books"]["documents"] >= 3 and data["lengths"]["words_min"] >= 20
    shown = runner.invoke(app, ["docs", "inspect", str(tmp_path / "out"), "--show", "0"])
    assert shown.exit_code == 0 and "meta:" in shown.output
