"""Beam stages that turn documents into globally shuffled BERT / GPT shards.

BERT: documents -> sentences -> token ids (``encoding.sentence_tokens`` over ~1 MB of text at a
time, once per document, before the dupe fan-out) -> for each dupe index ``d`` a random partner
bucket (``encoding.bert_examples`` explains why this draws random-next segments from the whole
corpus) -> a file shuffle (``pipeline.file_shuffle``: the producing worker writes the token arrays
into bucket files, only file names travel through the runner) by group of partner buckets (about
``partner_bucket_bytes`` of text) -> examples of each bucket as numpy columns, spilled per group.
GPT: documents -> token ids -> hash bucket -> the same file shuffle -> windows of one token stream per bucket; a
batch's documents of one bucket travel as one element (``encoding.gpt_examples.DocumentTokens``).

The tokens travel in the shuffle's files rather than staying in one spill file per tokenized batch
with (id, file, row) references travelling: a bucket is a random sample of the whole corpus, so it
had rows in nearly every spill file and read (and decompressed) each of them whole, for every
bucket and dupe index: reading grew with the square of the corpus (decompression alone was 15%
of the BERT stage's CPU at 100 MB of 4 KB articles), and a bucket's rows kept every file's
decoded batch alive. Each document's tokens are now written once per dupe index and read once.

Both then shuffle globally (``shards.writer``): every example gets a 64-bit key from
``(seed, doc id, dupe, example index)`` (GPT: ``(seed, bucket, window index)``), the step that makes
examples writes them straight to spill files, one per (range bucket, producer), and only counters
travel on through Beam; the launching process then plans the cut of the global order into balanced
shards from a listing of the spill files, one shard is written per job (sorting the range buckets it
takes, hashing the shard), and the launcher writes the manifest from the jobs' small entries. The
jobs run in spawned processes beside the launcher on an in-process runner (today's speed), and as
Beam steps on the runner's workers (``cut_with_beam``) when it is distributed. Nothing corpus-sized
passes through the runner, which the in-memory DirectRunner would buffer whole, nor through the
launcher, so peak memory is set by the partner bucket, sort bucket and shard sizes
(``BertConfig``, ``ShardsConfig``), not by the corpus.

Elements are whole documents and buckets, never single examples, so Beam overhead stays small. All randomness is keyed by stable ids, so DirectRunner (any mode, any worker count)
and DaskRunner write byte-identical shards. Every folder is a storage path (``corpusforge.core.storage``):
the spill folder (inside ``work``, by default inside ``out_dir``) and ``out_dir`` must be ones every
worker reaches (a shared local folder or a URI).
"""

from __future__ import annotations

import math
import os
import uuid
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Callable, Iterable, Iterator, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.options.pipeline_options import PipelineOptions

from corpusforge.core import storage
from corpusforge.core.config import BertConfig, GptConfig, ShardsConfig
from corpusforge.core.hashing import mix64, stable_hash
from corpusforge.encoding.bert_examples import BertExamples, MaskingVocab, TokenizedDocument, create_bucket_examples, tokenize_documents
from corpusforge.encoding.gpt_examples import DocumentTokens, cut_windows, stream_buckets, tokenize_texts
from corpusforge.encoding.sentence_tokens import SentenceEncoder
from corpusforge.encoding.vocab import load_tokenizer, vocab_manifest
from corpusforge.pipeline import collector
from corpusforge.pipeline.counters import COUNTERS, merge_counters, only, write_counters
from corpusforge.pipeline.file_shuffle import FileGroupByKey
from corpusforge.pipeline.forked_workers import forkserver, forkserver_scope
from corpusforge.pipeline.options import beam_job
from corpusforge.shards.format import MANIFEST_NAME, bert_schema, gpt_schema, id_type, shard_manifest
from corpusforge.shards.writer import ShardJob, row_bytes, spill_pieces, write_spilled_shards

# Multi-output steps emit (kind, value) pairs split by ``only``: the DaskRunner mixes tagged outputs
# and drops what ``finish_bundle`` emits, so neither is used here.
DOC = "doc"
TOKENIZE_BATCH_CHARS = 1_000_000  # text per encode_batch_fast call
READ_ROWS = 256  # Parquet rows decoded into Python at a time
SHUFFLE_DIR, EXAMPLES_DIR = "shuffle", "examples"  # the document shuffle's and the example spill's folders in the run's temporary folder
COUNTERS_FILE = "counters.json"  # {stream: {name: count}} in the run's temporary folder
ENTRIES_FILE = "shards.json"  # [[shard index, manifest entry], ...] from the shards cut on the runner's workers


def example_keys(bases: Sequence[int], owner: np.ndarray) -> np.ndarray:
    """Shuffle key of every example: ``mix64(base of its owner + its index within the owner)``.

    ``owner`` must be non-decreasing (examples grouped by owner, in order).
    """
    within = np.arange(len(owner)) - np.searchsorted(owner, owner, side="left")
    return mix64(np.asarray(bases, dtype=np.uint64)[owner] + within.astype(np.uint64))


BYTES_PER_TOKEN = 4.0  # text bytes per token, to size sort buckets before anything is tokenized


def sort_bucket_count(estimated_examples: float, bytes_per_example: int, shards: ShardsConfig) -> int:
    return max(1, math.ceil(estimated_examples * bytes_per_example / shards.sort_bucket_bytes))


def corpus_size(paths: Sequence[storage.PathLike], text_column: str) -> tuple[int, int]:
    """(rows, uncompressed text bytes) from the Parquet footers alone.

    Bucket counts come from here, in the launching process, rather than from Beam side inputs:
    they are exact and deterministic, and the DaskRunner miscounts side inputs built by combiners.
    """
    rows = text_bytes = 0
    for path in paths:
        with storage.arrow_input_unmapped(path) as source:
            metadata = pq.ParquetFile(source).metadata
        rows += metadata.num_rows
        for group in range(metadata.num_row_groups):
            for column in range(metadata.num_columns):
                chunk = metadata.row_group(group).column(column)
                if chunk.path_in_schema.split(".")[0] == text_column:
                    text_bytes += chunk.total_uncompressed_size
    return rows, text_bytes


BatchTokenizer = Callable[[SentenceEncoder, list[tuple[str, list[str]]]], tuple[list, Counter]]  # a batch -> its elements, counters


class TokenizeBatch(beam.DoFn):
    """A batch of (doc id, sentences) -> (DOC, element)..., (COUNTERS, dict): ``tokenize``'s elements (BERT: a
    ``TokenizedDocument`` per document, GPT: one ``DocumentTokens`` per batch).

    The tokenizer and its ``SentenceEncoder`` (and word cache) are built once per DoFn instance.
    """

    def __init__(self, vocab_dir: str, tokenize: BatchTokenizer) -> None:
        self._vocab_dir, self._tokenize = vocab_dir, tokenize

    def setup(self) -> None:
        collector.relax()
        tokenizer = load_tokenizer(self._vocab_dir)
        dtype = np.dtype(np.uint16) if tokenizer.get_vocab_size(with_added_tokens=True) <= 65535 else np.dtype(np.int32)
        self._encoder = SentenceEncoder(tokenizer, dtype)

    def process(self, batch: list[tuple[str, list[str]]]) -> Iterator[tuple[str, object]]:
        docs, counters = self._tokenize(self._encoder, batch)
        for doc in docs:
            yield DOC, doc
        yield COUNTERS, dict(counters)


def bucket_count(n_docs: int, text_bytes: int, docs_per_bucket: int, bytes_per_bucket: int) -> int:
    """Buckets of at most ``docs_per_bucket`` documents and about ``bytes_per_bucket`` of text, whichever
    gives more: a worker holds one bucket, so 1 MB books must not fill a bucket sized for web pages."""
    return max(1, n_docs // docs_per_bucket, text_bytes // bytes_per_bucket)


def partner_group_size(buckets: int, text_bytes: int, bert: BertConfig) -> int:
    """Partner buckets spilled together: as many as hold about ``partner_bucket_bytes`` of text (1 for books, whose
    buckets are that size already), so a worker holds no more than a bucket of books."""
    return max(1, bert.partner_bucket_bytes * buckets // max(text_bytes, 1))


def partner_buckets(
    doc: TokenizedDocument, buckets: int, per_group: int, bert: BertConfig, seed: int
) -> Iterator[tuple[tuple[int, int], tuple[int, TokenizedDocument]]]:
    """The document once per dupe index, each time in a bucket drawn afresh from the whole corpus, keyed by the
    bucket's group (``MakeBertExamples``) and carrying the bucket: it is not hashed again there."""
    for dupe in range(bert.dupe_factor):
        bucket = stable_hash(seed, dupe, doc.id) % buckets
        yield (dupe, bucket // per_group), (bucket, doc)


class MakeBertExamples(beam.DoFn):
    """(dupe, partner group) -> the examples of each partner bucket in it, spilled to ``temp/examples`` together;
    yields only the counters.

    A group is as many partner buckets as hold about ``partner_bucket_bytes`` of text (``partner_group_size``):
    every producer writes a file per sort bucket, so 4 KB articles in buckets of 256 documents had made a
    hundred producers and ~5,200 small files per 100 MB, whose creation, renaming, reading and removal cost
    13-21% of the BERT stage's CPU. Each bucket's examples are those it makes alone: the bytes do not change.
    """

    def __init__(self, vocab_dir: str, bert: BertConfig, temp: str, sort_buckets: int, seed: int) -> None:
        self._vocab_dir, self._bert, self._temp, self._sort_buckets, self._seed = vocab_dir, bert, temp, sort_buckets, seed

    def setup(self) -> None:
        collector.relax()
        self._vocab = MaskingVocab.from_tokenizer(load_tokenizer(self._vocab_dir))
        self._schema = bert_schema(self._bert.max_seq_length, self._bert.max_predictions_per_seq, self._vocab.size)

    def process(self, element: tuple[tuple[int, int], Iterable[tuple[int, TokenizedDocument]]]) -> Iterator[dict]:
        (dupe, group), members = element
        by_bucket: dict[int, list[TokenizedDocument]] = {}
        for bucket, doc in members:
            by_bucket.setdefault(bucket, []).append(doc)
        parts, keys, counters = [], [], Counter()
        for bucket in sorted(by_bucket):
            bucket_docs = sorted(by_bucket[bucket], key=lambda d: d.id)
            examples, made = create_bucket_examples(bucket_docs, dupe, self._vocab, self._bert, self._seed)
            counters.update(made)
            if len(examples):
                parts.append(examples)
                keys.append(example_keys([stable_hash(self._seed, "order", doc.id, dupe) for doc in bucket_docs], examples.a_doc))
        if parts:
            examples = BertExamples.concatenate(parts) if len(parts) > 1 else parts[0]
            del parts
            spill_pieces(
                storage.join(self._temp, EXAMPLES_DIR),
                f"{dupe}-{group}",
                np.concatenate(keys),
                examples.columns(),
                self._schema,
                self._sort_buckets,
            )
        yield dict(counters)


class MakeGptWindows(beam.DoFn):
    """Stream bucket -> its windows spilled to ``temp/examples``; yields only the counters.

    ``eot`` and ``schema`` come from the launcher's layout: a worker loading the tokenizer for them cost 0.15 CPU-s.
    """

    def __init__(self, eot: int, schema: pa.Schema, gpt: GptConfig, temp: str, sort_buckets: int, seed: int) -> None:
        self._eot, self._schema, self._gpt, self._temp, self._sort_buckets, self._seed = eot, schema, gpt, temp, sort_buckets, seed

    def setup(self) -> None:
        collector.relax()

    def process(self, element: tuple[int, Iterable[DocumentTokens]]) -> Iterator[dict]:
        bucket, parts = element
        docs = [doc for part in parts for doc in part.documents()]
        windows, counters = cut_windows(docs, self._eot, self._gpt.seq_len, self._gpt.keep_tail, self._seed)
        if len(windows):
            keys = example_keys([stable_hash(self._seed, "gpt-order", bucket)], np.zeros(len(windows), dtype=np.int64))
            spill_pieces(storage.join(self._temp, EXAMPLES_DIR), f"{bucket}", keys, windows.columns(), self._schema, self._sort_buckets)
        yield dict(counters)


class Tokenize(beam.PTransform):
    """Batches of (doc id, sentences) -> (``tokenize``'s elements, counters)."""

    def __init__(self, vocab_dir: str, tokenize: BatchTokenizer) -> None:
        super().__init__()
        self.vocab_dir, self.tokenize = vocab_dir, tokenize

    def expand(self, batches: beam.PCollection) -> tuple[beam.PCollection, beam.PCollection]:
        tokenized = batches | "Tokenize" >> beam.ParDo(TokenizeBatch(self.vocab_dir, self.tokenize))
        return tokenized | "Docs" >> beam.FlatMap(only, DOC), tokenized | "Counters" >> beam.FlatMap(only, COUNTERS)


class ReadBatches(beam.PTransform):
    """Batches of (column 0, column 1) rows holding about ``TOKENIZE_BATCH_CHARS`` of text, one task per row group.

    Row groups through Create + FlatMap rather than ``ReadFromParquet``: the DaskRunner cannot
    translate Beam's ``Read`` primitive. Batches make one tokenizer call cover many documents.
    """

    def __init__(self, paths: Sequence[storage.PathLike], columns: tuple[str, str], split_sentences: bool = False) -> None:
        super().__init__()
        self.paths, self.columns, self.split_sentences = [os.fspath(path) for path in paths], columns, split_sentences

    def expand(self, begin: beam.pvalue.PBegin) -> beam.PCollection:
        parts = [(path, group) for path in sorted(self.paths) for group in range(_row_groups(path))]
        batches = begin | "Parts" >> beam.Create(parts) | "Rows" >> beam.FlatMap(_read_row_group, self.columns)
        return batches | "Sentences" >> beam.Map(_split_into_sentences) if self.split_sentences else batches


def _row_groups(path: str) -> int:
    with storage.arrow_input_unmapped(path) as source:
        return pq.ParquetFile(source).num_row_groups


class SpillExamples(beam.PTransform):
    """Batches of (doc id, sentences) -> the counters file: ``tokenize``'s elements grouped by ``assign`` (BERT: a
    partner bucket per dupe index; GPT: a stream bucket) through files in ``temp/shuffle``, and each group's
    examples spilled by ``make`` into ``temp/examples``."""

    def __init__(
        self, job: Job, tokenize: BatchTokenizer, assign: Callable[[object], Iterable[tuple[object, object]]], make: beam.DoFn
    ) -> None:
        super().__init__()
        self.job, self.tokenize, self.assign, self.make = job, tokenize, assign, make

    def expand(self, batches: beam.PCollection) -> beam.PCollection:
        docs, tokenize_counters = batches | "Tokenize" >> Tokenize(self.job.vocab_dir, self.tokenize)
        example_counters = (
            docs
            | "Buckets" >> beam.FlatMap(self.assign)
            | "ByBucket" >> FileGroupByKey(storage.join(self.job.temp, SHUFFLE_DIR))
            | "Examples" >> beam.ParDo(self.make)
        )
        # the graph's single sink, reached only once every example is spilled
        counters = {"tokenize": tokenize_counters, "examples": example_counters}
        return write_counters(counters, storage.join(self.job.temp, COUNTERS_FILE))


def bert_examples(job: Job, bert: BertConfig, size: tuple[int, int]) -> beam.PTransform:
    """Batches of (doc id, sentences) -> the counters file; examples spilled by group of partner buckets."""
    buckets = bucket_count(*size, bert.partner_bucket_size, bert.partner_bucket_bytes)
    per_group = partner_group_size(buckets, size[1], bert)
    make = MakeBertExamples(job.vocab_dir, bert, job.temp, job.sort_buckets, job.seed)
    assign = partial(partner_buckets, buckets=buckets, per_group=per_group, bert=bert, seed=job.seed)
    return SpillExamples(job, tokenize_documents, assign, make)


def gpt_windows(job: Job, gpt: GptConfig, size: tuple[int, int], layout: Layout) -> beam.PTransform:
    """Batches of (doc id, text) -> the counters file; windows of each stream bucket spilled."""
    buckets = bucket_count(*size, gpt.docs_per_bucket, gpt.bucket_bytes)
    make = MakeGptWindows(layout.manifest["vocab"]["special_ids"]["eot"], layout.schema, gpt, job.temp, job.sort_buckets, job.seed)
    return "OneText" >> beam.Map(_as_one_sentence) | "Windows" >> SpillExamples(
        job, tokenize_texts, partial(stream_buckets, buckets=buckets, seed=job.seed), make
    )


@dataclass(frozen=True)
class Job:
    """What every step of one shard job shares: the vocabulary, the spill folder, the sort buckets, the seed."""

    vocab_dir: str
    temp: str
    sort_buckets: int
    seed: int


@contextmanager
def spill_folder(out_dir: storage.PathLike, work: storage.PathLike | None = None) -> Iterator[str]:
    """A fresh ``.sort-*`` folder in ``work`` (default: ``out_dir``) for the job's spill files, removed afterwards.

    The previous manifest in ``out_dir`` goes first: the folder is visibly incomplete until the new one is written.
    """
    storage.remove(storage.join(out_dir, MANIFEST_NAME))
    temp = storage.join(out_dir if work is None else work, f".sort-{uuid.uuid4().hex}")
    storage.makedirs(temp)
    try:
        yield temp
    finally:
        storage.remove_tree(temp)


def run_job(
    pipeline_options: PipelineOptions,
    source: beam.PTransform,
    graph: beam.PTransform,
    job: Job,
    out_dir: storage.PathLike,
    layout: Layout,
    shards: ShardsConfig,
    cut_on_workers: bool = False,
) -> dict:
    """Run ``source | graph`` (which spills examples and writes the counters), then cut the shards, checking the spill holds what the counters announce.

    ``cut_on_workers``: the shards are cut by a second Beam job on the runner's workers (a distributed
    runner), not by processes spawned beside the launcher.
    """
    with beam_job(pipeline_options) as p:
        _ = p | "Read" >> source | "Examples" >> graph
    counts_file = storage.join(job.temp, COUNTERS_FILE)  # absent only when no batch came in (an empty corpus)
    counters = merge_counters(storage.read_json(counts_file).values()) if storage.is_file(counts_file) else {}
    with forkserver_scope():  # the build's forkserver, or one for this job
        return write_spilled_shards(
            storage.join(job.temp, EXAMPLES_DIR),
            layout.schema,
            out_dir,
            dict(layout.manifest, totals=counters),
            target_bytes=shards.target_bytes,
            max_examples=shards.max_examples,
            compression=shards.compression,
            expected=counters.get("examples", counters.get("full_windows", 0) + counters.get("tail_windows", 0)),
            cut=partial(cut_with_beam, pipeline_options, job.temp) if cut_on_workers else None,
            processes=forkserver(),  # its processes start with the shard writer imported
        )


def cut_with_beam(pipeline_options: PipelineOptions, temp: str, jobs: list[ShardJob]) -> list[dict]:
    """Each shard cut by a Beam step on the runner's workers (its range buckets read, the shard written and hashed
    there, all by path); only the small manifest entries come back, gathered in one file in ``temp``.

    A ``shards.writer.Cut``. Jobs are single elements (``Create`` spreads them: a reshuffle on Beam's
    runners, one partition each on Dask), so the shards are written in parallel, each by one worker.
    """
    path = storage.join(temp, ENTRIES_FILE)
    with beam_job(pipeline_options) as p:
        _ = (
            p
            | "ShardJobs" >> beam.Create(list(enumerate(jobs)))
            | "CutShard" >> beam.MapTuple(_cut_shard)
            | "GatherEntries" >> beam.GroupByKey()
            | "WriteEntries" >> beam.Map(_write_entries, path)
        )
    return [entry for _, entry in storage.read_json(path)]  # in job order: written sorted by index


def _cut_shard(index: int, job: ShardJob) -> tuple[int, tuple[int, dict]]:
    """The shard written; its entry under the single key that gathers them all (the graph's sink must be one step)."""
    return 0, (index, job.write())


def _write_entries(item: tuple[int, Iterable[tuple[int, dict]]], path: str) -> None:
    storage.write_json(path, sorted(item[1], key=lambda entry: entry[0]))


def _read_row_group(part: tuple[str, int], columns: tuple[str, str]) -> Iterator[list[tuple]]:
    """Decoded ``READ_ROWS`` at a time, so a large row group never sits in memory as Python strings."""
    path, group = part
    batch: list[tuple] = []
    chars = 0
    with storage.arrow_input_unmapped(path) as source:
        for rows in pq.ParquetFile(source).iter_batches(batch_size=READ_ROWS, row_groups=[group], columns=list(columns)):
            for row in zip(*(rows.column(name).to_pylist() for name in columns)):
                batch.append(row)
                chars += _chars(row[1])
                if chars >= TOKENIZE_BATCH_CHARS:
                    yield batch
                    batch, chars = [], 0
    if batch:
        yield batch


def _chars(text: str | list[str]) -> int:
    return len(text) if isinstance(text, str) else sum(map(len, text))


def _split_into_sentences(batch: list[tuple[str, str]]) -> list[tuple[str, list[str]]]:
    from corpusforge.corpora.sentences import split_sentences

    return [(doc_id, split_sentences(text)) for doc_id, text in batch]


def _as_one_sentence(batch: list[tuple[str, str]]) -> list[tuple[str, list[str]]]:
    return [(doc_id, [text]) for doc_id, text in batch]


@dataclass(frozen=True)
class Layout:
    """A shard job's Arrow schema and its manifest before shards and totals."""

    schema: pa.Schema
    manifest: dict


def bert_layout(vocab_dir: storage.PathLike, bert: BertConfig, shards: ShardsConfig, seed: int, inputs: list[str]) -> Layout:
    vocab = vocab_manifest(vocab_dir)
    params = {"seed": seed, "bert": bert.model_dump(mode="json"), "shards": shards.model_dump(mode="json"), "inputs": inputs}
    manifest = shard_manifest(
        "bert",
        vocab,
        params,
        max_seq_length=bert.max_seq_length,
        max_predictions_per_seq=bert.max_predictions_per_seq,
        id_type=str(id_type(vocab["size"])),
    )
    return Layout(bert_schema(bert.max_seq_length, bert.max_predictions_per_seq, vocab["size"]), manifest)


def gpt_layout(vocab_dir: storage.PathLike, gpt: GptConfig, shards: ShardsConfig, seed: int, inputs: list[str]) -> Layout:
    vocab = vocab_manifest(vocab_dir)
    params = {"seed": seed, "gpt": gpt.model_dump(mode="json"), "shards": shards.model_dump(mode="json"), "inputs": inputs}
    manifest = shard_manifest("gpt", vocab, params, seq_len=gpt.seq_len, id_type=str(id_type(vocab["size"])))
    return Layout(gpt_schema(gpt.seq_len, vocab["size"]), manifest)


def bert_sort_buckets(text_bytes: int, layout: Layout, bert: BertConfig, shards: ShardsConfig) -> int:
    examples = text_bytes / BYTES_PER_TOKEN * bert.dupe_factor / (0.8 * (bert.max_seq_length - 3))
    return sort_bucket_count(examples, row_bytes(layout.schema), shards)


def write_bert_shards(
    pipeline_options: PipelineOptions,
    doc_paths: Sequence[storage.PathLike],
    vocab_dir: storage.PathLike,
    out_dir: storage.PathLike,
    bert: BertConfig,
    shards: ShardsConfig,
    seed: int,
    *,
    work: storage.PathLike | None = None,
    cut_on_workers: bool = False,
) -> dict:
    """BERT shards from Parquet documents (columns id, text); returns the manifest written.

    ``work``: where the spill folder goes (the run's temporary area; default ``out_dir``), a folder
    every worker reaches. ``cut_on_workers``: cut the shards as Beam steps (a distributed runner).
    """
    layout = bert_layout(vocab_dir, bert, shards, seed, [os.fspath(p) for p in doc_paths])
    size = corpus_size(doc_paths, "text")
    with spill_folder(out_dir, work) as temp:
        job = Job(os.fspath(vocab_dir), temp, bert_sort_buckets(size[1], layout, bert, shards), seed)
        source = ReadBatches(doc_paths, ("id", "text"), split_sentences=True)
        return run_job(pipeline_options, source, bert_examples(job, bert, size), job, out_dir, layout, shards, cut_on_workers)


def write_gpt_shards(
    pipeline_options: PipelineOptions,
    doc_paths: Sequence[storage.PathLike],
    vocab_dir: storage.PathLike,
    out_dir: storage.PathLike,
    gpt: GptConfig,
    shards: ShardsConfig,
    seed: int,
    *,
    work: storage.PathLike | None = None,
    cut_on_workers: bool = False,
) -> dict:
    """GPT shards from Parquet documents (columns id, text); returns the manifest written (``work``,
    ``cut_on_workers``: as for ``write_bert_shards``)."""
    layout = gpt_layout(vocab_dir, gpt, shards, seed, [os.fspath(p) for p in doc_paths])
    size = corpus_size(doc_paths, "text")
    sort_buckets = sort_bucket_count(size[1] / BYTES_PER_TOKEN / (gpt.seq_len + 1), row_bytes(layout.schema), shards)
    with spill_folder(out_dir, work) as temp:
        job = Job(os.fspath(vocab_dir), temp, sort_buckets, seed)
        graph = gpt_windows(job, gpt, size, layout)
        return run_job(pipeline_options, ReadBatches(doc_paths, ("id", "text")), graph, job, out_dir, layout, shards, cut_on_workers)
