"""BERT example recipe (google-research/bert semantics, with its bugs fixed) and the Beam stage on real text."""

from __future__ import annotations

import itertools
from pathlib import Path
from random import Random

import apache_beam as beam
import numpy as np
import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import given, settings
from hypothesis import strategies as st
from shard_factory import assert_hf_reads_like_pyarrow, bert_tokenizer_json

from corpusforge.core.config import BertConfig, RunConfig, ShardsConfig
from corpusforge.core.hashing import stable_hash
from corpusforge.corpora.document import Document
from corpusforge.corpora.gutenberg import strip_gutenberg
from corpusforge.corpora.sentences import split_sentences
from corpusforge.corpora.wikipedia import plan_ranges, read_range
from corpusforge.encoding import bert_examples
from corpusforge.encoding.bert_examples import (
    MaskingVocab,
    TokenizedDocument,
    create_bucket_examples,
    tokenize_documents,
    truncate_seq_pairs,
)
from corpusforge.encoding.sentence_tokens import SentenceEncoder
from corpusforge.encoding.vocab import load_tokenizer
from corpusforge.pipeline import examples_stage
from corpusforge.pipeline.documents_io import documents_table, write_table_atomic
from corpusforge.pipeline.examples_stage import partner_buckets, write_bert_shards
from corpusforge.pipeline.file_shuffle import FileGroupByKey
from corpusforge.pipeline.options import LOCAL_RUNNER, pipeline_options, shuffles_through_launcher
from corpusforge.shards.reader import open_shard, read_manifest

BOOKS = ["11-0.txt", "35-0.txt", "41-0.txt", "43-0.txt"]


def book_documents(shared: Path, names: list[str]) -> list[Document]:
    docs = []
    for name in names:
        text = strip_gutenberg((shared / "books" / "en" / name).read_text(encoding="utf-8-sig").replace("\r\n", "\n"))
        docs.append(Document(id=name, source="books", title=name, text=text))
    return docs


def wiki_documents(shared: Path, count: int) -> list[Document]:
    path = shared / "wikipedia" / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
    pages = (item for r in plan_ranges(path) for item in read_range(r))
    return list(itertools.islice((d for d in pages if isinstance(d, Document)), count))


@pytest.fixture(scope="module")
def vocab_dir(shared_data, tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("bert-vocab")
    vocab_txt = shared_data / "vocab" / "bert-base-uncased" / "vocab.txt"
    (directory / "vocab.txt").write_bytes(vocab_txt.read_bytes())
    bert_tokenizer_json(vocab_txt, directory)
    return directory


@pytest.fixture(scope="module")
def vocab(vocab_dir) -> MaskingVocab:
    return MaskingVocab.from_tokenizer(load_tokenizer(vocab_dir))


@pytest.fixture(scope="module")
def documents(shared_data) -> list[Document]:
    return book_documents(shared_data, BOOKS) + wiki_documents(shared_data, 40)


@pytest.fixture(scope="module")
def tokenized(documents, vocab_dir, vocab) -> list[TokenizedDocument]:
    docs, counters = tokenize_documents(
        SentenceEncoder(load_tokenizer(vocab_dir), vocab.id_dtype), [(d.id, split_sentences(d.text)) for d in documents]
    )
    assert counters["documents"] == len(documents) == len(docs) + counters["empty_documents"]
    return sorted(docs, key=lambda d: d.id)


def make(tokenized, vocab, dupe: int = 0, seed: int = 1, **overrides):
    cfg = BertConfig(**overrides)
    examples, counters = create_bucket_examples(tokenized, dupe, vocab, cfg, seed)
    return examples, counters, cfg


def restored(examples) -> np.ndarray:
    """input_ids with every masked position given back its original token."""
    ids = examples.input_ids.astype(np.int64).copy()
    rows, slots = np.nonzero(examples.masked_lm_weights)
    ids[rows, examples.masked_lm_positions[rows, slots]] = examples.masked_lm_ids[rows, slots]
    return ids


@pytest.fixture(scope="module")
def made(tokenized, vocab):
    return make(tokenized, vocab)


def test_masking_rates_follow_the_recipe(made, vocab):
    examples, _, cfg = made
    weights = examples.masked_lm_weights
    lengths = examples.length.astype(np.int64)
    expected = np.minimum(cfg.max_predictions_per_seq, np.maximum(1, np.round(lengths * cfg.masked_lm_prob)))
    np.testing.assert_array_equal(weights.sum(axis=1), expected)  # every example has candidates enough
    assert 0.14 < weights.sum() / lengths.sum() < 0.16
    rows, slots = np.nonzero(weights)
    now = examples.input_ids[rows, examples.masked_lm_positions[rows, slots]]
    original = examples.masked_lm_ids[rows, slots]
    n = len(rows)
    assert abs((now == vocab.mask).mean() - 0.8) < 0.02
    assert abs((now == original).mean() - 0.1) < 0.015
    assert abs(((now != vocab.mask) & (now != original)).mean() - 0.1) < 0.015
    assert n > 20000
    assert not np.isin(now[(now != vocab.mask) & (now != original)], [vocab.pad, vocab.cls, vocab.sep, 100]).any()


def test_next_sentence_and_short_sequence_rates(made):
    examples, counters, cfg = made
    assert len(examples) > 1500
    assert abs(examples.next_sentence_label.mean() - 0.5) < 0.05
    assert abs(counters["short_targets"] / len(examples) - cfg.short_seq_prob) < 0.02
    # A short target is uniform in [2, 125], so about 8% of all examples end well below full length.
    assert 0.04 < (examples.length < cfg.max_seq_length - 12).mean() < 0.14


def test_segments_are_well_formed_and_never_masked_at_special_positions(made, vocab):
    examples, _, cfg = made
    ids = restored(examples)
    length, a_length = examples.length.astype(np.int64), examples.a_length.astype(np.int64)
    rows = np.arange(len(ids))
    assert (a_length >= 3).all() and (length - a_length >= 2).all() and (length <= cfg.max_seq_length).all()
    assert (ids[:, 0] == vocab.cls).all()
    assert (ids[rows, a_length - 1] == vocab.sep).all() and (ids[rows, length - 1] == vocab.sep).all()
    pos = np.arange(cfg.max_seq_length)[None, :]
    inside = (pos > 0) & (pos < length[:, None]) & (pos != (a_length - 1)[:, None]) & (pos != (length - 1)[:, None])
    assert not np.isin(ids[inside], [vocab.cls, vocab.sep, vocab.pad, vocab.mask]).any()  # no [SEP]-only or empty segment
    assert (ids[pos >= length[:, None]] == vocab.pad).all()
    masked = examples.masked_lm_positions.astype(np.int64)
    real = examples.masked_lm_weights > 0
    assert inside[np.broadcast_to(rows[:, None], masked.shape)[real], masked[real]].all()
    assert (np.diff(masked, axis=1)[real[:, 1:]] > 0).all()  # sorted, distinct, padding only at the end
    assert (examples.masked_lm_positions[~real] == 0).all() and (examples.masked_lm_ids[~real] == 0).all()


def test_every_token_comes_from_its_source_span_and_random_next_from_another_document(made, tokenized):
    examples, _, _ = made
    flat = np.concatenate([d.tokens for d in tokenized]).astype(np.int64)
    bounds = np.concatenate([[0], np.cumsum([len(d.tokens) for d in tokenized])])
    ids = restored(examples)
    for i in range(len(examples)):
        la, lb = int(examples.a_length[i]) - 2, int(examples.length[i] - examples.a_length[i]) - 1
        a0, b0 = int(examples.a_start[i]), int(examples.b_start[i])
        np.testing.assert_array_equal(ids[i, 1 : 1 + la], flat[a0 : a0 + la])
        np.testing.assert_array_equal(ids[i, la + 2 : la + 2 + lb], flat[b0 : b0 + lb])
        a_doc, b_doc = int(examples.a_doc[i]), int(examples.b_doc[i])
        assert bounds[a_doc] <= a0 and a0 + la <= bounds[a_doc + 1]
        assert bounds[b_doc] <= b0 and b0 + lb <= bounds[b_doc + 1]
        if examples.next_sentence_label[i]:
            assert b_doc != a_doc
        else:
            assert b_doc == a_doc and b0 >= a0 + la


def test_whole_word_masking_masks_whole_words_and_decides_per_word(tokenized, vocab):
    examples, _, _ = make(tokenized[:3], vocab, whole_word_mask=True)
    ids = restored(examples)
    continuation = vocab.is_continuation[ids]
    words_checked = 0
    for i in range(len(examples)):
        real = examples.masked_lm_weights[i] > 0
        positions = examples.masked_lm_positions[i][real].astype(np.int64)
        masked = set(positions.tolist())
        for p in positions:
            start = p
            while continuation[i, start] and start - 1 not in (0, examples.a_length[i] - 1):
                start -= 1
            end = p + 1
            while end < examples.length[i] and continuation[i, end]:
                end += 1
            word = range(start, end)
            assert set(word) <= masked
            is_mask = examples.input_ids[i, list(word)] == vocab.mask
            assert is_mask.all() or not is_mask.any()
            words_checked += len(word) > 1
    assert words_checked > 100


def test_output_depends_only_on_seed_dupe_and_documents(tokenized, vocab):
    part = tokenized[-12:]
    first, _, _ = make(part, vocab, dupe=1, seed=3)
    again, _, _ = make(list(reversed(part)), vocab, dupe=1, seed=3)
    other, _, _ = make(part, vocab, dupe=2, seed=3)
    reseeded, _, _ = make(part, vocab, dupe=1, seed=4)
    for name, column in first.columns().items():
        np.testing.assert_array_equal(column, again.columns()[name])
    for changed in (other, reseeded):
        assert len(changed) != len(first) or not np.array_equal(changed.input_ids, first.input_ids)


@pytest.mark.parametrize("whole_word_mask", [False, True])
def test_output_does_not_depend_on_how_many_examples_are_built_at_a_time(tokenized, vocab, monkeypatch, whole_word_mask):
    """Each kind of random choice reads its own stream row after row, so batches of 7 or 1 examples give the same bytes."""
    part = tokenized[-12:]
    whole, _, _ = make(part, vocab, dupe=1, seed=3, whole_word_mask=whole_word_mask)
    assert len(whole) > 2 * 7 and whole.masked_lm_weights.any()
    for rows in (7, 1):
        monkeypatch.setattr(bert_examples, "BUILD_ROWS", rows)
        batched, _, _ = make(part, vocab, dupe=1, seed=3, whole_word_mask=whole_word_mask)
        for name, column in whole.columns().items():
            np.testing.assert_array_equal(column, batched.columns()[name], err_msg=f"{name} with {rows} rows at a time")


def test_single_document_corpus_has_only_actual_next_pairs(tokenized, vocab):
    doc = max(tokenized, key=lambda d: len(d.tokens))
    examples, counters, cfg = make([doc], vocab)
    assert len(examples) > 100
    assert not examples.next_sentence_label.any()
    assert counters["forced_actual_next"] > 0
    assert counters["examples"] == len(examples)
    # Only a one-sentence chunk lacks a partner. Every sentence here is shorter than a full target, so
    # such a chunk needs a short target or is the document's last sentence.
    assert np.diff(doc.offsets).max() < cfg.max_seq_length - 3
    assert counters["no_partner"] <= counters["short_targets"] + 1


def sentence_document(lengths: list[int]) -> TokenizedDocument:
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return TokenizedDocument("d", np.arange(1000, 1000 + offsets[-1], dtype=np.uint16), offsets)


@pytest.mark.parametrize(
    ("lengths", "no_partner", "examples"),
    [
        ([5] * 6, 0, 2),  # chunks 0-2 and 3-5: each reaches the 13-token target with 3 sentences
        ([20] * 3, 3, 0),  # every sentence fills a target alone: no chunk has a B
        ([5, 5, 5, 20, 5, 5, 5, 5], 2, 2),  # the long sentence 3 and the leftover last sentence 7
    ],
)
def test_single_document_chunks_without_a_partner_are_counted_exactly(vocab, lengths, no_partner, examples):
    """With no short targets the chunks are fixed by the sentence lengths (target = 16 - 3 = 13 tokens)."""
    made, counters, _ = make([sentence_document(lengths)], vocab, max_seq_length=16, short_seq_prob=0.0)
    assert counters["no_partner"] == no_partner
    assert len(made) == counters["examples"] == examples


def test_single_sentence_documents_contribute_random_next_pairs(vocab):
    docs = [TokenizedDocument(f"d{i}", np.arange(200 + i, 230 + i, dtype=np.uint16) + 1000, np.array([0, 30])) for i in range(8)]
    examples, counters, _ = make(docs, vocab)
    assert len(examples) == 8 and examples.next_sentence_label.all()
    assert (examples.b_doc != examples.a_doc).all()
    assert counters["no_partner"] == 0


def reference_truncation(a: int, b: int, limit: int) -> tuple[int, int]:
    cut_a = cut_b = 0
    while a + b > limit:
        if a > b:
            a, cut_a = a - 1, cut_a + 1
        else:
            b, cut_b = b - 1, cut_b + 1
    return cut_a, cut_b


@given(st.lists(st.tuples(st.integers(1, 400), st.integers(1, 400)), min_size=1, max_size=30), st.integers(2, 509))
@settings(max_examples=200, deadline=None)
def test_closed_form_truncation_equals_the_reference_loop(pairs, limit):
    a, b = np.array(pairs).T
    cut_a, cut_b = truncate_seq_pairs(a, b, limit)
    assert [tuple(map(int, c)) for c in zip(cut_a, cut_b)] == [reference_truncation(x, y, limit) for x, y in pairs]


def test_documents_reach_every_partner_bucket_through_the_file_shuffle(tmp_path):
    folder, random = tmp_path / "shuffle", Random(5)
    docs = []
    for i in range(40):
        tokens = [random.randrange(65536) for _ in range(random.randint(1, 60))]
        cuts = sorted(random.sample(range(1, len(tokens)), random.randint(0, len(tokens) - 1)))  # sentence boundaries
        docs.append(TokenizedDocument(f"doc-{i}", np.asarray(tokens, dtype=np.uint16), np.asarray([0, *cuts, len(tokens)], dtype=np.int64)))
    bert = BertConfig(dupe_factor=3)
    with beam.Pipeline(options=PipelineOptions(runner=LOCAL_RUNNER)) as p:
        groups = (
            p
            | beam.Create(docs)
            | beam.FlatMap(partner_buckets, buckets=4, per_group=2, bert=bert, seed=7)
            | FileGroupByKey(str(folder))
            | beam.Map(lambda group: [(group[0], bucket, doc) for bucket, doc in group[1]])
        )
        seen = groups | beam.FlatMap(lambda members: members) | beam.Map(lambda member: (member[2].id, member[0][0]))
        assert_that(seen | beam.combiners.Count.PerElement(), equal_to([((doc.id, dupe), 1) for doc in docs for dupe in range(3)]))
        _ = groups | beam.FlatMap(lambda members: members) | beam.Map(_same_as, {doc.id: doc for doc in docs}, buckets=4, seed=7)
    assert any(folder.rglob("*.pickle"))  # the documents went through files, not Beam's shuffle


def _same_as(member: tuple[tuple[int, int], int, TokenizedDocument], originals: dict, buckets: int, seed: int) -> None:
    (dupe, group), bucket, doc = member
    assert bucket == stable_hash(seed, dupe, doc.id) % buckets and group == bucket // 2
    np.testing.assert_array_equal(doc.tokens, originals[doc.id].tokens)
    np.testing.assert_array_equal(doc.offsets, originals[doc.id].offsets)
    assert doc.tokens.dtype == np.uint16 and doc.offsets.dtype == np.int64


@pytest.fixture(scope="module")
def parquet_documents(shared_data, tmp_path_factory) -> list[Path]:
    docs = book_documents(shared_data, ["41-0.txt", "46-0.txt"]) + wiki_documents(shared_data, 30)
    directory = tmp_path_factory.mktemp("documents")
    paths = []
    for index, part in enumerate([docs[::2], docs[1::2]]):
        paths.append(Path(write_table_atomic(documents_table(part), str(directory / f"part-{index}.parquet"))))
    return paths


@pytest.mark.slow
def test_beam_stage_writes_identical_shards_on_every_runner(parquet_documents, vocab_dir, tmp_path):
    from dask.distributed import Client, LocalCluster

    bert = BertConfig(dupe_factor=2, partner_bucket_size=8)
    shards = ShardsConfig(max_examples=700, sort_bucket_bytes=256 * 1024)
    runs = {}
    for mode, workers in (("in_memory", 1), ("multi_processing", 2)):
        options = PipelineOptions([], runner=LOCAL_RUNNER, direct_running_mode=mode, direct_num_workers=workers)
        runs[mode] = write_bert_shards(options, parquet_documents, vocab_dir, tmp_path / mode, bert, shards, seed=5)
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None) as cluster,
        Client(cluster),
    ):
        run = RunConfig(runner="DaskRunner", beam_args=[f"--dask_client_address={cluster.scheduler_address}"])
        assert not shuffles_through_launcher(run)  # so the build cuts the shards on the Dask workers
        work = tmp_path / "temp" / "bert"  # the spill in the run's temporary area, as a build puts it
        runs["dask"] = write_bert_shards(
            pipeline_options(run),
            parquet_documents,
            vocab_dir,
            tmp_path / "dask",
            bert,
            shards,
            seed=5,
            work=str(work),
            cut_on_workers=True,
        )
    assert not list(tmp_path.glob("*/.sort-*")) and not list(work.iterdir())  # spill folders removed
    one = runs["in_memory"]
    for other in (runs["multi_processing"], runs["dask"]):
        assert [s["sha256"] for s in one["shards"]] == [s["sha256"] for s in other["shards"]]
        assert one["totals"] == other["totals"]
    counts = [s["examples"] for s in one["shards"]]
    assert len(counts) > 1 and max(counts) - min(counts) <= 1 and max(counts) <= 700
    assert one["totals"]["examples"] == sum(counts) == one["totals"]["examples"]
    assert one["totals"]["documents"] == 32

    manifest = read_manifest(tmp_path / "in_memory")
    assert manifest.vocab.special_ids == {"pad": 0, "unk": 100, "cls": 101, "sep": 102, "mask": 103}
    labels = []
    for entry in manifest.shards:
        table = open_shard(manifest.shard_path(entry), expected=entry, check_sha=True, schema=manifest.arrow_schema())
        assert table.column("input_ids").num_chunks == 1
        labels.append(table.column("next_sentence_label").to_numpy())
    labels = np.concatenate(labels)
    # Globally shuffled: both labels appear in every stretch of the order, not in runs per bucket.
    assert all(0.3 < chunk.mean() < 0.7 for chunk in np.array_split(labels, 4))
    assert_hf_reads_like_pyarrow(manifest.shard_path(manifest.shards[-1]), tmp_path / "hf")


def test_partner_buckets_spilled_together_make_the_same_shards(parquet_documents, vocab_dir, tmp_path, monkeypatch):
    """A group of partner buckets is one producer of spill files (a file per sort bucket each), its examples those
    its buckets make alone: the same shards as a producer per bucket, from a fraction of the files."""
    bert = BertConfig(dupe_factor=2, partner_bucket_size=4)  # 8 buckets of the 32 documents, all in one group
    shards = ShardsConfig(max_examples=700, sort_bucket_bytes=64 * 1024)
    options = PipelineOptions([], runner=LOCAL_RUNNER, direct_running_mode="in_memory")
    spill, producers, manifests = examples_stage.spill_pieces, {}, {}
    for grouped in (True, False):
        if not grouped:
            monkeypatch.setattr(examples_stage, "partner_group_size", lambda buckets, text_bytes, bert: 1)
        seen = producers[grouped] = []
        monkeypatch.setattr(
            examples_stage, "spill_pieces", lambda folder, origin, *rest: (seen.append(origin), spill(folder, origin, *rest))
        )
        manifests[grouped] = write_bert_shards(options, parquet_documents, vocab_dir, tmp_path / str(grouped), bert, shards, seed=5)
    ids = [i for path in parquet_documents for i in pq.read_table(path, columns=["id"]).column("id").to_pylist()]
    buckets = {f"{dupe}-{stable_hash(5, dupe, i) % 8}" for dupe in range(2) for i in ids}
    assert sorted(producers[True]) == ["0-0", "1-0"] and sorted(producers[False]) == sorted(buckets) and len(buckets) > 8
    assert [s["sha256"] for s in manifests[True]["shards"]] == [s["sha256"] for s in manifests[False]["shards"]]
    assert len(manifests[True]["shards"]) > 1 and manifests[True]["totals"] == manifests[False]["totals"]


def test_sentences_without_tokens_are_dropped_and_counted(vocab_dir, vocab):
    encoder = SentenceEncoder(load_tokenizer(vocab_dir), vocab.id_dtype)
    docs, counters = tokenize_documents(encoder, [("a", ["Hello there.", "", "   ", "Goodbye now."]), ("b", ["", "\u200b"])])
    assert [doc.id for doc in docs] == ["a"] and len(docs[0].offsets) == 3  # two sentences left
    assert (np.diff(docs[0].offsets) > 0).all()
    assert (counters["empty_sentences"], counters["empty_documents"], counters["sentences"], counters["documents"]) == (4, 1, 2, 2)


def test_short_examples_predict_one_token_and_an_empty_bucket_gives_empty_columns(vocab):
    docs = [
        TokenizedDocument(f"d{i}", np.arange(1000 + 10 * i, 1006 + 10 * i).astype(vocab.id_dtype), np.array([0, 2, 4, 6])) for i in range(8)
    ]
    examples, _, cfg = make(docs, vocab)
    lengths = examples.length.astype(np.int64)
    assert len(examples) >= 8 and (lengths < 10).sum() >= 5  # 0.15 x length rounds to 1 or less: one prediction
    np.testing.assert_array_equal(examples.masked_lm_weights.sum(axis=1), np.maximum(1, np.round(lengths * cfg.masked_lm_prob)))
    empty, counters, cfg = make([], vocab)
    assert len(empty) == 0 and counters["examples"] == 0
    assert empty.input_ids.shape == (0, cfg.max_seq_length) and empty.masked_lm_positions.shape == (0, cfg.max_predictions_per_seq)
    assert all(len(column) == 0 for column in empty.columns().values())
