"""Small composable Beam steps for documents: read sources, clean, de-duplicate, write.

Streams carry ``Document`` and ``Reject`` values side by side; ``split`` separates them with two
filters (see the package docstring for why not a multi-output ParDo).
"""
from __future__ import annotations

import logging
from pathlib import Path

import apache_beam as beam
from apache_beam.metrics import Metrics

from corpusforge.corpora.books import list_book_files, read_book
from corpusforge.corpora.clean import dedup_key, normalize_text, word_count
from corpusforge.corpora.document import Document, Reject
from corpusforge.corpora.language import detect_language
from corpusforge.corpora.wikipedia import plan_ranges, read_range
from corpusforge.config import BooksConfig, CleanConfig, WikipediaConfig
from corpusforge.pipeline.documents_io import PART_PATTERN, documents_table, part_of, rejects_table, write_table_atomic

log = logging.getLogger(__name__)


def split(records: beam.PCollection, label: str) -> tuple[beam.PCollection, beam.PCollection]:
    """(documents, rejects) of a mixed stream."""
    docs = records | f"{label}Docs" >> beam.Filter(lambda r: isinstance(r, Document))
    rejects = records | f"{label}Rejects" >> beam.Filter(lambda r: isinstance(r, Reject))
    return docs, rejects


class _CountRecords(beam.DoFn):
    """Beam counters per source and reason, plus a periodic progress line."""

    def __init__(self, stage: str, every: int = 2000) -> None:
        self.stage, self.every, self.seen = stage, every, 0

    def process(self, record: Document | Reject):
        if isinstance(record, Document):
            Metrics.counter(self.stage, f"{record.source}.documents").inc()
        else:
            Metrics.counter(self.stage, f"{record.source}.reject.{record.reason}").inc()
        self.seen += 1
        if self.seen % self.every == 0:
            log.info("%s: %d records in this worker", self.stage, self.seen)
        yield record


class _ReadBook(beam.DoFn):
    def process(self, item: tuple[str, str]):
        path, root = item
        yield read_book(Path(path), Path(root))


class ReadBooks(beam.PTransform):
    """One element per book file, read in parallel; one book is one document."""

    def __init__(self, cfg: BooksConfig) -> None:
        super().__init__()
        self.cfg = cfg

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        files = [
            (str(path), str(root))
            for root in self.cfg.paths
            for path in list_book_files(Path(root), tuple(self.cfg.extensions))
        ]
        return (
            pbegin
            | "ListBooks" >> beam.Create(files)
            | "SpreadBooks" >> beam.Reshuffle()
            | "ReadBook" >> beam.ParDo(_ReadBook())
            | "CountBooks" >> beam.ParDo(_CountRecords("books"))
        )


class _ReadRange(beam.DoFn):
    def __init__(self, keep_headings: bool, drop_disambiguation: bool) -> None:
        self.keep_headings, self.drop_disambiguation = keep_headings, drop_disambiguation

    def process(self, dump_range):
        yield from read_range(dump_range, keep_headings=self.keep_headings, drop_disambiguation=self.drop_disambiguation)


class ReadWikipedia(beam.PTransform):
    """Dumps are planned into independently readable byte ranges (multistream), read in parallel."""

    def __init__(self, cfg: WikipediaConfig) -> None:
        super().__init__()
        self.cfg = cfg

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        indexes = list(self.cfg.index_paths) + [None] * (len(self.cfg.paths) - len(self.cfg.index_paths))
        ranges = [
            r
            for path, index in zip(self.cfg.paths, indexes)
            for r in plan_ranges(Path(path), Path(index) if index else None, self.cfg.streams_per_range)
        ]
        return (
            pbegin
            | "PlanRanges" >> beam.Create(ranges)
            | "SpreadRanges" >> beam.Reshuffle()
            | "ReadRange" >> beam.ParDo(_ReadRange(self.cfg.keep_headings, self.cfg.drop_disambiguation))
            | "CountWikipedia" >> beam.ParDo(_CountRecords("wikipedia"))
        )


class _Clean(beam.DoFn):
    """Unicode repair, whitespace normalisation, minimum length, language filter."""

    def __init__(self, cfg: CleanConfig) -> None:
        self.cfg = cfg

    def process(self, doc: Document):
        text = normalize_text(doc.text, fix_unicode=self.cfg.fix_unicode)
        words = word_count(text)
        if words < self.cfg.min_words:
            yield Reject(doc.id, doc.source, "too_short", f"{words} words < {self.cfg.min_words}", doc.title)
            return
        meta = dict(doc.meta)
        if self.cfg.language:
            language, confidence = detect_language(text)
            meta["language"] = language
            if language != self.cfg.language or confidence < self.cfg.language_min_confidence:
                yield Reject(doc.id, doc.source, "language", f"{language}:{confidence:.2f}", doc.title)
                return
        yield doc.replace(text=text, meta=meta)


class Clean(beam.PTransform):
    def __init__(self, cfg: CleanConfig) -> None:
        super().__init__()
        self.cfg = cfg

    def expand(self, docs: beam.PCollection) -> beam.PCollection:
        return docs | "CleanText" >> beam.ParDo(_Clean(self.cfg)) | "CountClean" >> beam.ParDo(_CountRecords("clean"))


def _keep_first(item: tuple[str, list[Document]]):
    """Keep the smallest id of an exact-duplicate group (deterministic), reject the rest."""
    _, group = item
    ordered = sorted(group, key=lambda d: d.id)
    yield ordered[0]
    for dup in ordered[1:]:
        yield Reject(dup.id, dup.source, "duplicate", f"duplicate of {ordered[0].id}", dup.title)


def _dedup_key(doc: Document) -> tuple[str, Document]:
    return dedup_key(doc.text), doc


class ExactDedup(beam.PTransform):
    """Exact duplicates on normalised text, across all sources, through one GroupByKey."""

    def expand(self, docs: beam.PCollection) -> beam.PCollection:
        return (
            docs
            | "DedupKey" >> beam.Map(_dedup_key)
            | "GroupByText" >> beam.GroupByKey()
            | "KeepFirst" >> beam.FlatMap(_keep_first)
            | "CountDedup" >> beam.ParDo(_CountRecords("dedup"))
        )


class _WriteParts(beam.DoFn):
    def __init__(self, directory: str, parts: int, kind: str) -> None:
        self.directory, self.parts, self.kind = directory, parts, kind

    def process(self, item: tuple[int, list]):
        index, records = item
        table = documents_table(records) if self.kind == "documents" else rejects_table(records)
        path = f"{self.directory.rstrip('/')}/{PART_PATTERN.format(index=index, count=self.parts)}"
        yield write_table_atomic(table, path)


class WriteParts(beam.PTransform):
    """Group records by a hash of their id into ``parts`` Parquet files, each written atomically."""

    def __init__(self, directory: str, parts: int, kind: str) -> None:
        super().__init__()
        self.directory, self.parts, self.kind = directory, parts, kind

    def expand(self, records: beam.PCollection) -> beam.PCollection:
        parts = self.parts
        return (
            records
            | "ByPart" >> beam.Map(lambda r: (part_of(r.id, parts), r))
            | "GroupParts" >> beam.GroupByKey()
            | "WriteParquet" >> beam.ParDo(_WriteParts(self.directory, parts, self.kind))
        )
