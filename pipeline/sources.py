"""Each source of the documents job as two functions: the input files it is made from (what the stage's
fingerprint records) and the reads it adds to the job's graph. The stage declarations
(``corpusforge.stages``) pair them with the source's name; nothing here tests a stage name.
"""

from __future__ import annotations

from collections import Counter

import apache_beam as beam

from corpusforge.core.config import Config
from corpusforge.pipeline.counters import COUNTERS
from corpusforge.pipeline.documents_job import ReadContext
from corpusforge.pipeline.steps import (
    ReadCleanSpill,
    WikipediaReader,
    book_tasks,
    read_book_task,
    read_tasks,
    records_of_batch,
    wikipedia_tasks,
)


def books_inputs(cfg: Config) -> list[str]:
    from corpusforge.corpora.books import list_book_files

    return [str(path) for root in cfg.books.paths for path in list_book_files(root, tuple(cfg.books.extensions))]


def read_books(cfg: Config, p: beam.Pipeline, context: ReadContext) -> list[beam.PCollection]:
    listed: Counter[str] = Counter()  # a book is one input, counted where the files are listed
    tasks = book_tasks(cfg.books, listed)
    return [
        read_tasks(p, "books", tasks, read_book_task, context.spill, context.clean, context.near, context.completions),
        p | "BooksListed" >> beam.Create([(COUNTERS, {"books.inputs": listed["inputs"]})]),
    ]


def wikipedia_inputs(cfg: Config) -> list[str]:
    return [str(p) for p in [*cfg.wikipedia.paths, *cfg.wikipedia.index_paths]]


def read_wikipedia(cfg: Config, p: beam.Pipeline, context: ReadContext) -> list[beam.PCollection]:
    reader = WikipediaReader(cfg.wikipedia)
    return [
        read_tasks(p, "wikipedia", wikipedia_tasks(cfg.wikipedia), reader, context.spill, context.clean, context.near, context.completions)
    ]


def webtext_inputs(cfg: Config) -> list[str]:
    """The dumps; offline, the captures too (online the stage itself adds to them)."""
    from corpusforge.corpora.warc import warc_files
    from corpusforge.pipeline.webtext import warc_dir_of

    return [str(p) for p in cfg.webtext.dumps] + ([str(p) for p in warc_files(warc_dir_of(cfg))] if cfg.webtext.offline else [])


def read_webtext(cfg: Config, p: beam.Pipeline, context: ReadContext) -> list[beam.PCollection]:
    from corpusforge.pipeline.webtext import build_webtext, count_inputs, input_paths

    web_docs, web_rejects = build_webtext(p, cfg)
    return [
        p | "WebTextInputs" >> beam.Create(input_paths(cfg)) | "CountWebTextInputs" >> beam.Map(count_inputs, bool(cfg.webtext.dumps)),
        (web_docs, web_rejects)
        | "WebTextRecords" >> beam.Flatten()
        | "WebTextBatches" >> beam.BatchElements(min_batch_size=1, max_batch_size=256)
        | "ReadWebText" >> beam.ParDo(ReadCleanSpill("webtext", records_of_batch, context.spill, context.clean, context.near)),
    ]


def records_inputs(cfg: Config) -> list[str]:
    from corpusforge.corpora.records import record_files

    return record_files(cfg.records)


def read_records(cfg: Config, p: beam.Pipeline, context: ReadContext) -> list[beam.PCollection]:
    from corpusforge.corpora.records import RecordReader, record_tasks

    reader = RecordReader(cfg.records)
    return [read_tasks(p, "records", record_tasks(cfg.records), reader, context.spill, context.clean, context.near, context.completions)]
