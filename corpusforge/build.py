"""``corpusforge build``: run the stages a configuration asks for and write the run manifest.

documents (one Beam job: read sources -> clean -> exact/near dedup -> Parquet documents + rejects)
  -> vocab (HF tokenizers on a deterministic sample) -> bert / gpt shards (Beam jobs) -> train.
The manifest is written last, so a run that stopped half way never looks complete.
"""
from __future__ import annotations

import json
from collections import Counter
import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apache_beam as beam

from corpusforge import progress
from corpusforge.config import Config
from corpusforge.pipeline.documents_io import output_files
from corpusforge.files import write_json_atomic
from corpusforge.pipeline.manifest import describe_files, package_versions
from corpusforge.pipeline.options import pipeline_options
from corpusforge.pipeline.steps import (COUNTERS, ExactDedup, ReadCleanSpill, WikipediaReader, WriteDocuments, WriteRejects, book_tasks,
                                        read_book_task, read_tasks, records_of_batch, split_kinds, wikipedia_tasks,
                                        write_counters)
from corpusforge.pipeline.summary import SourceStats, check_accounting, collect_stats, stats_to_json

log = logging.getLogger(__name__)
SOURCE_STAGES = ("books", "wikipedia", "webtext")
WORK_DIR = ".work"  # spill and scatter files of running stages; removed when a stage ends


@dataclass
class BuildResult:
    output_dir: Path
    stats: dict[str, SourceStats] = field(default_factory=dict)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    artifacts: dict[str, Any] = field(default_factory=dict)
    manifest_path: Path | None = None


def input_files(cfg: Config) -> list[Path]:
    stages = set(cfg.run.stages)
    files: list[Path] = []
    if "books" in stages:
        from corpusforge.corpora.books import list_book_files

        for root in cfg.books.paths:
            files += list_book_files(Path(root), tuple(cfg.books.extensions))
    if "wikipedia" in stages:
        files += [Path(p) for p in [*cfg.wikipedia.paths, *cfg.wikipedia.index_paths]]
    if "webtext" in stages:
        files += [Path(p) for p in cfg.webtext.dumps]
    return files


def documents_graph(p: beam.Pipeline, cfg: Config, work: Path) -> None:
    """The documents job as one Beam graph: texts are spilled once where they are read, only
    references go through the dedup shuffles, and every input record ends as a document or a reject."""
    stages = set(cfg.run.stages)
    out = cfg.run.output_dir.resolve()
    spill = str(work / "spill")
    clean = cfg.clean if "clean" in stages else None
    near = cfg.near_dedup if "near_dedup" in stages else None
    reads, listed = [], Counter()
    if "books" in stages:
        reads.append(read_tasks(p, "books", book_tasks(cfg.books, listed), read_book_task, spill, clean, near))
        reads.append(p | "BooksListed" >> beam.Create([(COUNTERS, {"books.inputs": listed["inputs"]})]))
    if "wikipedia" in stages:
        reads.append(read_tasks(p, "wikipedia", wikipedia_tasks(cfg.wikipedia), WikipediaReader(cfg.wikipedia), spill, clean, near))
    if "webtext" in stages:
        from corpusforge.pipeline.webtext import build_webtext

        web_docs, web_rejects = build_webtext(p, cfg)
        reads.append(
            (web_docs, web_rejects)
            | "WebTextRecords" >> beam.Flatten()
            | "WebTextBatches" >> beam.BatchElements(min_batch_size=1, max_batch_size=256)
            | "ReadWebText" >> beam.ParDo(ReadCleanSpill("webtext", records_of_batch, spill, clean, near))
        )
    refs, rejects, read_counters = split_kinds(reads | "AllSources" >> beam.Flatten(), "Read")
    reject_streams = [rejects]
    if "dedup" in stages and cfg.dedup.exact:
        refs, duplicates = refs | "ExactDedup" >> ExactDedup()
        reject_streams.append(duplicates)
    if "near_dedup" in stages:
        from corpusforge.pipeline.near_dedup import KEPT, REJECTS, NearDedup

        near_out = refs | "NearDedup" >> NearDedup(cfg.near_dedup)
        refs = near_out[KEPT]
        reject_streams.append(near_out[REJECTS])
    if "webtext" in stages and "wikipedia" in stages:
        refs = remove_wikipedia_from_webtext(refs, reject_streams, cfg)
    document_counters = refs | "WriteDocuments" >> WriteDocuments(str(out / "documents"), str(work / "scatter"), cfg.run.part_bytes)
    reject_counters = (
        reject_streams
        | "AllRejects" >> beam.Flatten()
        | "WriteRejects" >> WriteRejects(str(out / "rejects"), cfg.run.reject_parts)
    )
    write_counters({"read": read_counters, "documents": document_counters, "rejects": reject_counters}, str(work / "counters.json"))


def remove_wikipedia_from_webtext(refs: beam.PCollection, reject_streams: list, cfg: Config) -> beam.PCollection:
    """GPT-2 kept Wikipedia out of WebText: drop WebText pages on Wikipedia or near-duplicating it."""
    from corpusforge.pipeline.near_dedup import KEPT, REJECTS, WikipediaRemoval

    web = refs | "WebTextRefs" >> beam.Filter(lambda r: r.source == "webtext")
    wikipedia = refs | "WikipediaRefs" >> beam.Filter(lambda r: r.source == "wikipedia")
    others = refs | "OtherRefs" >> beam.Filter(lambda r: r.source != "webtext")
    removal = web | "RemoveWikipedia" >> WikipediaRemoval(wikipedia, cfg.near_dedup)
    reject_streams.append(removal[REJECTS])
    return (removal[KEPT], others) | "WithoutWikipedia" >> beam.Flatten()


def run_documents(cfg: Config, result: BuildResult) -> None:
    out = cfg.run.output_dir.resolve()
    work = out / WORK_DIR / "documents"
    for sub in (out / "documents", out / "rejects", work):
        shutil.rmtree(sub, ignore_errors=True)
        sub.mkdir(parents=True)
    pipeline = beam.Pipeline(options=pipeline_options(cfg.run))
    documents_graph(pipeline, cfg, work)
    pipeline.run().wait_until_finish()
    counters = json.loads((work / "counters.json").read_text(encoding="utf-8")) if (work / "counters.json").is_file() else {}
    result.stats = collect_stats(out / "documents", out / "rejects")
    check_accounting(counters, result.stats)
    progress.count("documents", sum(s.documents for s in result.stats.values()))
    progress.count("rejects", sum(s.inputs - s.documents for s in result.stats.values()))
    result.artifacts["counters"] = counters
    shutil.rmtree(work)
    if not any(work.parent.iterdir()):
        work.parent.rmdir()


def run_build(cfg: Config) -> BuildResult:
    out = cfg.run.output_dir.resolve()
    out.mkdir(parents=True, exist_ok=True)
    stages = list(cfg.run.stages)
    result = BuildResult(output_dir=out)
    inputs = input_files(cfg)
    started = time.perf_counter()

    def timed(name: str, fn, *args) -> Any:
        t0 = time.perf_counter()
        with progress.stage(name):
            value = fn(*args)
        result.stage_seconds[name] = round(time.perf_counter() - t0, 3)
        return value

    if set(stages) & set(SOURCE_STAGES):
        timed("documents", run_documents, cfg, result)
    doc_paths = output_files(out / "documents")
    if "vocab" in stages:
        from corpusforge.examples.vocab import train_vocab_from_documents

        result.artifacts["vocab"] = timed("vocab", train_vocab_from_documents, doc_paths, out / "vocab", cfg.vocab)
    vocab_dirs = result.artifacts.get("vocab") or {}
    if "bert" in stages:
        from corpusforge.pipeline.examples_stage import write_bert_shards

        result.artifacts["bert"] = timed(
            "bert", write_bert_shards, pipeline_options(cfg.run), doc_paths, Path(vocab_dirs.get("wordpiece", out / "vocab" / "wordpiece")),
            out / "shards" / "bert", cfg.bert, cfg.shards, cfg.run.seed,
        )
    if "gpt" in stages:
        from corpusforge.pipeline.examples_stage import write_gpt_shards

        result.artifacts["gpt"] = timed(
            "gpt", write_gpt_shards, pipeline_options(cfg.run), doc_paths, Path(vocab_dirs.get("bpe", out / "vocab" / "bpe")),
            out / "shards" / "gpt", cfg.gpt, cfg.shards, cfg.run.seed,
        )
    if "train" in stages:
        from corpusforge.trainer.loop import train
        from corpusforge.trainer.sizes import get_size

        family = get_size(cfg.train.model).family
        train_cfg = cfg.train.model_copy(update={"task": family})
        result.artifacts["train"] = timed("train", train, train_cfg, out / "shards" / family, out / "train" / cfg.train.model)
    result.stage_seconds["total"] = round(time.perf_counter() - started, 3)
    result.manifest_path = write_json_atomic(
        {
            "kind": "corpusforge-build",
            "inputs": describe_files(inputs),
            "config": cfg.model_dump(mode="json"),
            "versions": package_versions(),
            "counters": stats_to_json(result.stats),
            "stage_seconds": result.stage_seconds,
            "artifacts": result.artifacts,
            "outputs": describe_files([*doc_paths, *output_files(out / "rejects")], out),
        },
        out / "manifest.json",
    )
    from corpusforge.report_page import write_report

    with progress.stage("report"):
        write_report(out)
    return result
