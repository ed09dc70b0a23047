"""GPT windows: every token accounted for (windows + dropped), per-bucket tails, the Beam stage on real books."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from hypothesis import given, settings
from hypothesis import strategies as st
from shard_factory import assert_hf_reads_like_pyarrow, gpt_tokenizer_json

from corpusforge.core import storage
from corpusforge.core.config import GptConfig, ShardsConfig
from corpusforge.core.hashing import stable_hash
from corpusforge.corpora.document import Document
from corpusforge.corpora.gutenberg import strip_gutenberg
from corpusforge.encoding.bert_examples import tokenize_documents
from corpusforge.encoding.gpt_examples import cut_windows, stream_buckets, tokenize_texts
from corpusforge.encoding.sentence_tokens import SentenceEncoder
from corpusforge.encoding.vocab import load_tokenizer
from corpusforge.pipeline.documents_io import documents_table, write_table_atomic
from corpusforge.pipeline.examples_stage import write_gpt_shards
from corpusforge.pipeline.options import LOCAL_RUNNER
from corpusforge.shards.reader import column_view, open_shard, read_manifest

EOT = 50256

documents = st.lists(
    st.tuples(st.text("abcdef", min_size=1, max_size=6), st.lists(st.integers(0, 50255), max_size=60)),
    max_size=12,
    unique_by=lambda doc: doc[0],
)


@given(documents, st.integers(1, 40), st.booleans(), st.integers(0, 3))
@settings(max_examples=300, deadline=None)
def test_windows_hold_the_whole_stream_in_order(docs, seq_len, keep_tail, seed):
    arrays = [(doc_id, np.asarray(tokens, dtype=np.uint16)) for doc_id, tokens in docs]
    windows, counters = cut_windows(arrays, EOT, seq_len, keep_tail, seed)
    width = seq_len + 1
    stream_tokens = sum(len(t) + 1 for _, t in docs)
    assert counters["stream_tokens"] == stream_tokens == int(windows.length.sum()) + counters["dropped_tokens"]
    assert windows.input_ids.shape == (len(windows), width)
    assert (windows.length[: counters["full_windows"]] == width).all()
    kept = np.concatenate([row[:n] for row, n in zip(windows.input_ids, windows.length)]) if len(windows) else np.zeros(0, np.uint16)
    # The kept tokens are the stream's start: documents, each followed by <|endoftext|>.
    pieces = np.split(kept, np.flatnonzero(kept == EOT) + 1)
    complete = sorted(tuple(p[:-1].tolist()) for p in pieces if len(p) and p[-1] == EOT)
    originals = sorted(tuple(t) for _, t in docs)
    if keep_tail:
        assert counters["dropped_tokens"] == 0 and complete == originals
        if counters["tail_windows"]:
            assert windows.length[-1] < width and (windows.input_ids[-1, windows.length[-1] :] == EOT).all()
    else:
        assert counters["dropped_tokens"] == stream_tokens % width
        assert all(originals.count(c) >= complete.count(c) for c in complete)
    again, _ = cut_windows(list(reversed(arrays)), EOT, seq_len, keep_tail, seed)
    np.testing.assert_array_equal(again.input_ids, windows.input_ids)


@pytest.fixture(scope="module")
def bpe_dir(shared_data, tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("gpt2-vocab")
    for name in ("vocab.json", "merges.txt"):
        (directory / name).write_bytes((shared_data / "vocab" / "gpt2" / name).read_bytes())
    gpt_tokenizer_json(directory / "vocab.json", directory / "merges.txt", directory)
    return directory


@pytest.fixture(scope="module")
def book_parquet(shared_data, tmp_path_factory) -> list[Path]:
    docs = []
    for name in ("41-0.txt", "46-0.txt", "43-0.txt", "pg1080.txt"):
        text = strip_gutenberg((shared_data / "books" / "en" / name).read_text(encoding="utf-8-sig").replace("\r\n", "\n"))
        docs.append(Document(id=name, source="books", title=name, text=text))
    path = tmp_path_factory.mktemp("gpt-docs") / "part-0.parquet"
    return [Path(write_table_atomic(documents_table(docs), str(path)))]


@pytest.mark.parametrize("keep_tail", [True, False])
def test_beam_stage_accounts_for_every_token(book_parquet, bpe_dir, tmp_path, keep_tail):
    gpt = GptConfig(seq_len=128, keep_tail=keep_tail, docs_per_bucket=2)  # 4 documents: 2 streams, 2 tails
    options = PipelineOptions([], runner=LOCAL_RUNNER, direct_running_mode="in_memory")
    manifest = write_gpt_shards(
        options, book_parquet, bpe_dir, tmp_path, gpt, ShardsConfig(max_examples=400, sort_bucket_bytes=64 * 1024), seed=3
    )
    assert not list(tmp_path.glob(".sort-*"))  # spill folders removed
    totals = manifest["totals"]
    assert totals["documents"] == 4
    assert totals["stream_tokens"] == totals["input_tokens"] + totals["documents"]  # one <|endoftext|> per document
    assert totals["stream_tokens"] == totals["tokens"] + totals["dropped_tokens"]
    assert totals.get("tail_windows", 0) == (2 if keep_tail else 0)
    assert (totals["dropped_tokens"] > 0) == (not keep_tail)

    read = read_manifest(tmp_path)
    assert read.vocab.special_ids == {"eot": EOT} and read.vocab.size == 50257
    lengths, eots = [], 0
    for entry in read.shards:
        table = open_shard(read.shard_path(entry), expected=entry, check_sha=True, schema=read.arrow_schema())
        ids, length = column_view(table, "input_ids"), column_view(table, "length")
        lengths.append(length)
        eots += int(sum((row[:n] == EOT).sum() for row, n in zip(ids, length)))
    lengths = np.concatenate(lengths)
    assert int(lengths.sum()) == totals["tokens"] and (lengths < 129).sum() == totals.get("tail_windows", 0)
    assert eots == 4 or not keep_tail
    assert_hf_reads_like_pyarrow(read.shard_path(read.shards[0]), tmp_path / "hf")

    tokenizer = load_tokenizer(bpe_dir)
    assert totals["input_tokens"] == sum(len(tokenizer.encode(d).ids) for d in documents_text(book_parquet))


def test_spill_goes_to_the_work_folder_and_beam_steps_cut_the_same_shards(book_parquet, bpe_dir, tmp_path, monkeypatch):
    """With ``work`` (the run's temporary area) the shard folder only ever gets the shards and the manifest, and
    cutting on the runner's workers (forced here on the in-process runner) writes the same bytes as the processes."""
    gpt, shards = GptConfig(seq_len=128, docs_per_bucket=2), ShardsConfig(max_examples=400, sort_bucket_bytes=64 * 1024)
    options = PipelineOptions([], runner=LOCAL_RUNNER, direct_running_mode="in_memory")
    reference = write_gpt_shards(options, book_parquet, bpe_dir, tmp_path / "local", gpt, shards, seed=3)
    written = []
    for name in ("makedirs", "writing", "local_output"):
        monkeypatch.setattr(storage, name, _recording(getattr(storage, name), written))
    out, work = tmp_path / "out", tmp_path / "temp" / "gpt"
    manifest = write_gpt_shards(options, book_parquet, bpe_dir, out, gpt, shards, seed=3, work=str(work), cut_on_workers=True)
    assert len(reference["shards"]) > 1 and manifest == reference
    shard_files = {str(out / entry["file"]) for entry in manifest["shards"]} | {str(out / "manifest.json")}
    assert any(path.startswith(f"{work}/.sort-") for path in written)
    assert all(path.startswith(f"{work}/") or path in shard_files | {str(out)} for path in written)
    assert storage.walk(out) == sorted(shard_files) and storage.walk(work) == []
    assert all((out / name).read_bytes() == (tmp_path / "local" / name).read_bytes() for name in map(storage.name, shard_files))


def _recording(function, written: list[str]):
    def record(path, *args, **kwargs):
        written.append(storage.normpath(path))
        return function(path, *args, **kwargs)

    return record


def documents_text(paths: list[Path]) -> list[str]:
    return [text for path in paths for text in pq.read_table(path, columns=["text"]).column("text").to_pylist()]


def test_documents_follow_the_seeded_order_of_their_ids():
    """Each document is tagged by its own tokens, so the stream shows the order: stable_hash(seed, id), not input
    order or content; another seed gives another order."""
    docs = [(f"doc-{i}", np.array([i + 1] * 3, dtype=np.uint16)) for i in range(20)]
    orders = []
    for seed in (0, 1):
        windows, _ = cut_windows(docs, EOT, 7, True, seed)
        stream = np.concatenate([row[:n] for row, n in zip(windows.input_ids, windows.length)])
        order = [f"doc-{int(token) - 1}" for token in stream[::4]]  # 3 tokens and <|endoftext|> per document
        assert order == sorted((doc_id for doc_id, _ in docs), key=lambda doc_id: stable_hash(seed, doc_id))
        orders.append(order)
    assert orders[0] != orders[1]


def test_a_batch_travels_as_the_documents_and_counters_of_one_per_document(bpe_dir):
    """``tokenize_texts`` keeps what ``tokenize_documents`` keeps (empty documents left out, the same counters), and
    ``stream_buckets`` hands each bucket exactly its documents' tokens."""
    encoder = SentenceEncoder(load_tokenizer(bpe_dir), np.dtype(np.uint16))
    batch = [(f"doc-{i}", [text]) for i, text in enumerate(["Hello world.", "", "Ünïcode ¶ text", "a", "", "The end<|endoftext|>"])]
    [packed], counters = tokenize_texts(encoder, batch)
    docs, want = tokenize_documents(encoder, batch)
    assert counters == want and counters["empty_documents"] == 2
    assert [(doc_id, tokens.tolist()) for doc_id, tokens in packed.documents()] == [(d.id, d.tokens.tolist()) for d in docs]
    split = {(bucket, doc_id): tokens.tolist() for bucket, part in stream_buckets(packed, 3, seed=5) for doc_id, tokens in part.documents()}
    assert split == {(stable_hash(5, "gpt", doc.id) % 3, doc.id): doc.tokens.tolist() for doc in docs}
