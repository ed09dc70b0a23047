"""Beam stages that turn documents into globally shuffled BERT / GPT shards.

BERT: documents -> sentences -> token ids (one ``encode_batch_fast`` per ~1 MB of text, once per
document, before the dupe fan-out) -> for each dupe index ``d`` a random partner bucket
(``pipeline.bert_examples`` explains why this draws random-next segments from the whole corpus)
-> GroupByKey -> examples of a bucket as numpy columns.
GPT: documents -> token ids -> hash bucket -> GroupByKey -> windows of one token stream per bucket.

Both then shuffle globally (``shards.writer``): every example gets a 64-bit key from
``(seed, doc id, dupe, example index)`` (GPT: ``(seed, bucket, window index)``), pieces travel as
small Arrow batches to range buckets, each bucket is sorted and written as a temporary Arrow file,
and the launching process cuts the global order into balanced shards and writes the manifest.

Elements are whole documents, buckets and Arrow batches, never single examples, so Beam overhead
stays small. All randomness is keyed by stable ids, so DirectRunner (any mode, any worker count)
and DaskRunner write byte-identical shards. Workers must share the filesystem of ``out_dir``.
"""
from __future__ import annotations

import json
import math
import shutil
import uuid
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from corpusforge.config import BertConfig, GptConfig, ShardsConfig
from pipeline.bert_examples import MaskingVocab, TokenizedDocument, create_bucket_examples, stable_hash, tokenize_documents
from pipeline.gpt_examples import cut_windows
from pipeline.vocab import EOT, load_tokenizer, vocab_manifest
from shards.format import FORMAT_VERSION, bert_schema, gpt_schema, id_type
from shards.writer import iter_sorted_buckets, keyed_schema, range_buckets, record_batch, row_bytes, write_shards, write_sort_bucket

COUNTERS = "counters"
TOKENIZE_BATCH_CHARS = 1_000_000  # text per encode_batch_fast call


def mix64(values: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser over uint64 arrays: consecutive inputs give independent-looking keys."""
    z = values.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def example_keys(bases: Sequence[int], owner: np.ndarray) -> np.ndarray:
    """Shuffle key of every example: ``mix64(base of its owner + its index within the owner)``.

    ``owner`` must be non-decreasing (examples grouped by owner, in order).
    """
    within = np.arange(len(owner)) - np.searchsorted(owner, owner, side="left")
    return mix64(np.asarray(bases, dtype=np.uint64)[owner] + within.astype(np.uint64))


def sort_bucket_count(estimated_examples: float, bytes_per_example: int, shards: ShardsConfig) -> int:
    return max(1, math.ceil(estimated_examples * bytes_per_example / shards.sort_bucket_bytes))


class TokenizeDocuments(beam.DoFn):
    """(doc id, sentences) -> TokenizedDocument, batching documents into large ``encode_batch_fast`` calls."""

    def __init__(self, vocab_dir: Path) -> None:
        self._vocab_dir = str(vocab_dir)

    def setup(self) -> None:
        tokenizer = load_tokenizer(Path(self._vocab_dir))
        self._tokenizer = tokenizer
        self._dtype = np.dtype(np.uint16) if tokenizer.get_vocab_size(with_added_tokens=True) <= 65535 else np.dtype(np.int32)

    def start_bundle(self) -> None:
        self._buffer: list[tuple[str, list[str]]] = []
        self._chars = 0

    def process(self, doc: tuple[str, list[str]]) -> Iterator:
        self._buffer.append(doc)
        self._chars += sum(map(len, doc[1]))
        if self._chars >= TOKENIZE_BATCH_CHARS:
            yield from self._flush()

    def finish_bundle(self) -> Iterator:
        for value in self._flush():
            if isinstance(value, beam.pvalue.TaggedOutput):
                yield beam.pvalue.TaggedOutput(value.tag, WindowedValue(value.value, MIN_TIMESTAMP, [GlobalWindow()]))
            else:
                yield WindowedValue(value, MIN_TIMESTAMP, [GlobalWindow()])

    def _flush(self) -> Iterator:
        if not self._buffer:
            return
        docs, counters = tokenize_documents(self._tokenizer, self._buffer, self._dtype)
        self._buffer, self._chars = [], 0
        yield from docs
        yield beam.pvalue.TaggedOutput(COUNTERS, dict(counters))


def partner_buckets(doc: TokenizedDocument, n_docs: int, bert: BertConfig, seed: int) -> Iterator[tuple[tuple[int, int], TokenizedDocument]]:
    """One copy of the document per dupe index, each in a bucket drawn afresh from the whole corpus."""
    buckets = max(1, n_docs // bert.partner_bucket_size)
    for dupe in range(bert.dupe_factor):
        yield (dupe, stable_hash(seed, dupe, doc.id) % buckets), doc


def _keyed_pieces(origin: str, keys: np.ndarray, columns: dict[str, np.ndarray], schema: pa.Schema, buckets: int) -> Iterator[tuple[int, tuple[str, pa.RecordBatch]]]:
    """Split examples by global-order range bucket into small keyed Arrow batches."""
    batch = record_batch(keyed_schema(schema), {"key": keys, **columns})
    owner = range_buckets(keys, buckets)
    order = np.argsort(owner, kind="stable")
    bounds = np.flatnonzero(np.diff(owner[order])) + 1
    for rows in np.split(order, bounds):
        if len(rows):
            yield int(owner[rows[0]]), (origin, batch.take(pa.array(rows)))


class MakeBertExamples(beam.DoFn):
    def __init__(self, vocab_dir: Path, bert: BertConfig, shards: ShardsConfig, seed: int) -> None:
        self._vocab_dir, self._bert, self._shards, self._seed = str(vocab_dir), bert, shards, seed

    def setup(self) -> None:
        self._vocab = MaskingVocab.from_tokenizer(load_tokenizer(Path(self._vocab_dir)))
        self._schema = bert_schema(self._bert.max_seq_length, self._bert.max_predictions_per_seq, self._vocab.size)

    def process(self, element: tuple[tuple[int, int], Iterable[TokenizedDocument]], total_tokens: int) -> Iterator:
        (dupe, bucket), docs = element
        docs = sorted(docs, key=lambda d: d.id)
        examples, counters = create_bucket_examples(docs, dupe, self._vocab, self._bert, self._seed)
        yield beam.pvalue.TaggedOutput(COUNTERS, dict(counters))
        if not len(examples):
            return
        keys = example_keys([stable_hash(self._seed, "order", doc.id, dupe) for doc in docs], examples.a_doc)
        per_example = total_tokens * self._bert.dupe_factor / (0.8 * (self._bert.max_seq_length - 3))
        buckets = sort_bucket_count(per_example, row_bytes(self._schema), self._shards)
        yield from _keyed_pieces(f"{dupe}/{bucket}", keys, examples.columns(), self._schema, buckets)


class MakeGptWindows(beam.DoFn):
    def __init__(self, vocab_dir: Path, gpt: GptConfig, shards: ShardsConfig, seed: int) -> None:
        self._vocab_dir, self._gpt, self._shards, self._seed = str(vocab_dir), gpt, shards, seed

    def setup(self) -> None:
        tokenizer = load_tokenizer(Path(self._vocab_dir))
        self._eot = tokenizer.token_to_id(EOT)
        self._schema = gpt_schema(self._gpt.seq_len, tokenizer.get_vocab_size(with_added_tokens=True))

    def process(self, element: tuple[int, Iterable[TokenizedDocument]], total_tokens: int) -> Iterator:
        bucket, docs = element
        windows, counters = cut_windows([(d.id, d.tokens) for d in docs], self._eot, self._gpt.seq_len, self._gpt.keep_tail, self._seed)
        yield beam.pvalue.TaggedOutput(COUNTERS, dict(counters))
        if not len(windows):
            return
        keys = example_keys([stable_hash(self._seed, "gpt-order", bucket)], np.zeros(len(windows), dtype=np.int64))
        buckets = sort_bucket_count(total_tokens / (self._gpt.seq_len + 1), row_bytes(self._schema), self._shards)
        yield from _keyed_pieces(f"{bucket}", keys, windows.columns(), self._schema, buckets)


class WriteSortBucket(beam.DoFn):
    def __init__(self, directory: Path) -> None:
        self._directory = str(directory)

    def process(self, element: tuple[int, Iterable[tuple[str, pa.RecordBatch]]]) -> Iterator[int]:
        bucket, pieces = element
        yield write_sort_bucket(Path(self._directory) / f"bucket-{bucket:08d}.arrow", pieces)


def merge_counters(parts: Iterable[dict]) -> dict:
    total: Counter = Counter()
    for part in parts:
        total.update(part)
    return dict(total)


def _write_json(value: dict, path: str) -> None:
    Path(path).write_text(json.dumps(value, sort_keys=True), encoding="utf-8")


def _tokenize_and_count(docs: beam.PCollection, vocab_dir: Path) -> tuple[beam.PCollection, beam.PCollection, beam.PCollection, beam.PCollection]:
    tokenized = docs | "Tokenize" >> beam.ParDo(TokenizeDocuments(vocab_dir)).with_outputs(COUNTERS, main="docs")
    n_docs = tokenized.docs | "CountDocs" >> beam.combiners.Count.Globally()
    total_tokens = tokenized.docs | "DocTokens" >> beam.Map(lambda d: len(d.tokens)) | "SumTokens" >> beam.CombineGlobally(sum)
    return tokenized.docs, tokenized[COUNTERS], n_docs, total_tokens


def _finish_graph(pieces: beam.PCollection, counter_parts: list[beam.PCollection], temp: Path) -> None:
    _ = pieces | "ByRange" >> beam.GroupByKey() | "WriteSortBuckets" >> beam.ParDo(WriteSortBucket(temp))
    _ = (
        counter_parts
        | "AllCounters" >> beam.Flatten()
        | "MergeCounters" >> beam.CombineGlobally(merge_counters)
        | "WriteCounters" >> beam.Map(_write_json, str(temp / "counters.json"))
    )


def _run(
    pipeline_options: PipelineOptions,
    graph: Callable[[beam.Pipeline, Path], None],
    out_dir: Path,
    schema: pa.Schema,
    manifest: dict,
    shards: ShardsConfig,
) -> dict:
    """Run the Beam graph writing sort buckets into a temporary folder, then cut the shards here."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    temp = out_dir / f".sort-{uuid.uuid4().hex}"
    temp.mkdir()
    try:
        with beam.Pipeline(options=pipeline_options) as p:
            graph(p, temp)
        counters = json.loads((temp / "counters.json").read_text(encoding="utf-8"))
        buckets = sorted(temp.glob("bucket-*.arrow"))
        examples = sum(_row_count(path) for path in buckets)
        announced = counters.get("examples", counters.get("full_windows", 0) + counters.get("tail_windows", 0))
        if examples != announced:
            raise RuntimeError(f"sort buckets hold {examples} examples, the example stage made {announced}")
        manifest["totals"] = counters
        return write_shards(
            iter_sorted_buckets(buckets),
            examples,
            schema,
            out_dir,
            manifest,
            target_bytes=shards.target_bytes,
            max_examples=shards.max_examples,
            compression=shards.compression,
        )
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def _row_count(path: Path) -> int:
    reader = pa.ipc.open_file(pa.memory_map(str(path), "r"))
    return sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))


def _read_documents(p: beam.Pipeline, doc_paths: Sequence[Path]) -> beam.PCollection:
    """(id, text) of every document in the Parquet files."""
    reads = [p | f"Read{index}" >> beam.io.ReadFromParquet(str(path), columns=["id", "text"]) for index, path in enumerate(sorted(doc_paths))]
    if not reads:
        return p | "NoDocuments" >> beam.Create([])
    return reads | "Documents" >> beam.Flatten() | "IdText" >> beam.Map(lambda row: (row["id"], row["text"]))


def _split_into_sentences(doc: tuple[str, str]) -> tuple[str, list[str]]:
    from corpora.sentences import split_sentences

    return doc[0], split_sentences(doc[1])


def _bert_manifest(vocab_dir: Path, bert: BertConfig, shards: ShardsConfig, seed: int, inputs: list[str]) -> tuple[pa.Schema, dict]:
    vocab = vocab_manifest(vocab_dir)
    schema = bert_schema(bert.max_seq_length, bert.max_predictions_per_seq, vocab["size"])
    manifest = {
        "format_version": FORMAT_VERSION,
        "task": "bert",
        "params": {"seed": seed, "bert": bert.model_dump(mode="json"), "shards": shards.model_dump(mode="json"), "inputs": inputs},
        "vocab": vocab,
        "schema": {"max_seq_length": bert.max_seq_length, "max_predictions_per_seq": bert.max_predictions_per_seq, "id_type": str(id_type(vocab["size"]))},
    }
    return schema, manifest


def _bert_graph(sentences: Callable[[beam.Pipeline, Path], beam.PCollection], vocab_dir: Path, bert: BertConfig, shards: ShardsConfig, seed: int) -> Callable[[beam.Pipeline, Path], None]:
    def graph(p: beam.Pipeline, temp: Path) -> None:
        docs, tokenize_counters, n_docs, total_tokens = _tokenize_and_count(sentences(p, temp), vocab_dir)
        made = (
            docs
            | "PartnerBuckets" >> beam.FlatMap(partner_buckets, beam.pvalue.AsSingleton(n_docs), bert, seed)
            | "ByPartnerBucket" >> beam.GroupByKey()
            | "Examples" >> beam.ParDo(MakeBertExamples(vocab_dir, bert, shards, seed), beam.pvalue.AsSingleton(total_tokens)).with_outputs(COUNTERS, main="pieces")
        )
        _finish_graph(made.pieces, [tokenize_counters, made[COUNTERS]], temp)

    return graph


def write_bert_shards(
    pipeline_options: PipelineOptions, doc_paths: list[Path], vocab_dir: Path, out_dir: Path, bert: BertConfig, shards: ShardsConfig, seed: int
) -> dict:
    """BERT shards from Parquet documents (columns id, text); returns the manifest written."""
    schema, manifest = _bert_manifest(vocab_dir, bert, shards, seed, [str(p) for p in doc_paths])

    def sentences(p: beam.Pipeline, temp: Path) -> beam.PCollection:
        return _read_documents(p, doc_paths) | "Sentences" >> beam.Map(_split_into_sentences)

    return _run(pipeline_options, _bert_graph(sentences, vocab_dir, bert, shards, seed), out_dir, schema, manifest, shards)


def write_bert_shards_from_sentences(
    pipeline_options: PipelineOptions,
    docs: Sequence[tuple[str, list[str]]],
    vocab_dir: Path,
    out_dir: Path,
    bert: BertConfig,
    shards: ShardsConfig,
    seed: int,
) -> dict:
    """BERT shards from documents already split into sentences (benchmarks, tests, custom splitters)."""
    schema, manifest = _bert_manifest(vocab_dir, bert, shards, seed, [])

    def sentences(p: beam.Pipeline, temp: Path) -> beam.PCollection:
        # Through a file rather than beam.Create, which would pickle (and bz2) the corpus into the graph.
        path = temp / "sentences.parquet"
        pq.write_table(pa.table({"id": [d[0] for d in docs], "sentences": [list(d[1]) for d in docs]}), path)
        rows = p | "ReadSentences" >> beam.io.ReadFromParquet(str(path))
        return rows | "IdSentences" >> beam.Map(lambda row: (row["id"], row["sentences"]))

    return _run(pipeline_options, _bert_graph(sentences, vocab_dir, bert, shards, seed), out_dir, schema, manifest, shards)


def gpt_bucket(doc: TokenizedDocument, n_docs: int, gpt: GptConfig, seed: int) -> tuple[int, TokenizedDocument]:
    return stable_hash(seed, "gpt", doc.id) % max(1, n_docs // gpt.docs_per_bucket), doc


def write_gpt_shards(
    pipeline_options: PipelineOptions, doc_paths: list[Path], vocab_dir: Path, out_dir: Path, gpt: GptConfig, shards: ShardsConfig, seed: int
) -> dict:
    """GPT shards from Parquet documents (columns id, text); returns the manifest written."""
    vocab = vocab_manifest(vocab_dir)
    schema = gpt_schema(gpt.seq_len, vocab["size"])
    manifest = {
        "format_version": FORMAT_VERSION,
        "task": "gpt",
        "params": {"seed": seed, "gpt": gpt.model_dump(mode="json"), "shards": shards.model_dump(mode="json"), "inputs": [str(p) for p in doc_paths]},
        "vocab": vocab,
        "schema": {"seq_len": gpt.seq_len, "id_type": str(id_type(vocab["size"]))},
    }

    def graph(p: beam.Pipeline, temp: Path) -> None:
        texts = _read_documents(p, doc_paths) | "OneText" >> beam.Map(lambda doc: (doc[0], [doc[1]]))
        docs, tokenize_counters, n_docs, total_tokens = _tokenize_and_count(texts, vocab_dir)
        made = (
            docs
            | "StreamBuckets" >> beam.Map(gpt_bucket, beam.pvalue.AsSingleton(n_docs), gpt, seed)
            | "ByStream" >> beam.GroupByKey()
            | "Windows" >> beam.ParDo(MakeGptWindows(vocab_dir, gpt, shards, seed), beam.pvalue.AsSingleton(total_tokens)).with_outputs(COUNTERS, main="pieces")
        )
        _finish_graph(made.pieces, [tokenize_counters, made[COUNTERS]], temp)

    return _run(pipeline_options, graph, out_dir, schema, manifest, shards)
