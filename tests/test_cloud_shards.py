"""Shards on a real S3 server (moto on 127.0.0.1): ``shards verify/inspect`` and ``train`` read a build that was
uploaded there, through a bounded local cache checked against the manifest; training from the URI logs the
same losses as from the local copy, a rewritten object is named and refused, the cache is reused and evicted."""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from shard_factory import bert_tokenizer_json, gpt_tokenizer_json, random_bert_columns, random_gpt_columns, write_shards
from typer.testing import CliRunner

from corpusforge.cli import app
from corpusforge.core import storage
from corpusforge.encoding.vocab import vocab_manifest
from corpusforge.shards import cache as shard_cache
from corpusforge.shards.cache import ShardCache, release
from corpusforge.shards.reader import read_manifest
from corpusforge.trainer.generate import generate
from corpusforge.trainer.metrics import read_log
from tests.s3_fixture import make_buckets, s3_server, upload

runner = CliRunner()
BUCKET = "s3://cf-shards"
SHARDS = "shards/bert"  # inside a build folder, beside vocab/wordpiece: the manifest says ../../vocab/wordpiece
QUICK = ["--batch-size", "8", "--device", "cpu", "--no-compile", "--set", "train.num_workers=0", "--set", "train.log_every=1"]
TRAIN = ["--model", "bert-tiny", "--steps", "20", *QUICK, "--set", "train.checkpoint_every=0"]


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """One OpenMP thread: faster on a shared 2-core runner, and the same arithmetic in every run."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    """A build folder: vocab/wordpiece and three BERT shards in shards/bert, the vocabulary recorded relative to them."""
    root = tmp_path_factory.mktemp("build")
    vocab = root / "vocab" / "wordpiece"
    vocab.mkdir(parents=True)
    shutil.copy(shared_data / "vocab" / "bert-base-uncased" / "vocab.txt", vocab)
    bert_tokenizer_json(vocab / "vocab.txt", vocab)
    columns = random_bert_columns(240, max_seq_length=32, max_predictions=5, seed=7)
    write_shards(root / SHARDS, columns, [80, 80, 80], vocab={**vocab_manifest(vocab), "path": "../../vocab/wordpiece"})
    return root


@pytest.fixture(scope="module")
def s3() -> Iterator[str]:
    with s3_server():
        make_buckets(BUCKET.removeprefix("s3://"))
        yield BUCKET


def uploaded(build: Path, uri: str) -> str:
    """The build copied to ``uri`` (shards and vocabulary); returns its shard folder's URI."""
    upload(build, uri)
    return f"{uri}/{SHARDS}"


def invoke(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def train_losses(run: str) -> list[tuple[int, float]]:
    return [(record["step"], record["loss"]) for record in read_log(storage.join(run, "metrics.jsonl")) if record["split"] == "train"]


def cached(folder: Path) -> dict[str, int]:
    """Name -> inode of every cached shard: a download renames a new file into place, a reuse keeps the inode."""
    return {path.name: path.stat().st_ino for path in folder.glob("*.arrow")}


def test_verify_and_inspect_read_the_bucket(build: Path, s3: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(shard_cache.DIR_ENV, str(tmp_path / "cache"))
    shards = uploaded(build, f"{s3}/inspected")
    assert invoke("shards", "verify", shards).strip().endswith(f"{shards}: OK")
    assert not (tmp_path / "cache").exists()  # verify streams each object, it caches nothing
    summary = json.loads(invoke("shards", "inspect", shards, "--json"))
    assert summary["examples"] == 240 and summary["shards"] == 3 and not summary["sampled"]
    assert summary == json.loads(invoke("shards", "inspect", str(build / SHARDS), "--json"))
    shown = invoke("shards", "inspect", shards, "--show", "100")
    assert "example 100 (train-00001-of-00003.arrow, row 20)" in shown and "[CLS]" in shown
    manifest = read_manifest(build / SHARDS)
    assert sorted(cached(tmp_path / "cache")) == sorted(f"{entry.sha256}.arrow" for entry in manifest.shards)


@pytest.mark.slow
def test_training_from_the_bucket_logs_the_local_losses_and_reuses_its_cache(
    build: Path, s3: str, tmp_path: Path, shared_data: Path
) -> None:
    shards, run, cache = uploaded(build, f"{s3}/trained"), f"{s3}/trained/train/bert-tiny", tmp_path / "cache"
    # unverified, so that two DataLoader processes fetch the shards: one downloads each, the other waits and reuses it
    workers = ["--set", "train.num_workers=2", "--set", "train.verify_shards=false"]
    invoke("train", "--shards", shards, "--out", run, "--cache-dir", str(cache), *TRAIN, *workers)
    invoke("train", "--shards", str(build / SHARDS), "--out", str(tmp_path / "local"), "--cache-dir", str(tmp_path / "unused"), *TRAIN)
    assert train_losses(run) == train_losses(tmp_path / "local") and len(train_losses(run)) == 20
    assert not (tmp_path / "unused").exists()  # a local folder is read in place
    first = cached(cache)
    assert len(first) == 3 and storage.is_file(f"{run}/checkpoints/step-00000020/model.safetensors")

    invoke("train", "--shards", shards, "--out", run, "--resume", run, "--cache-dir", str(cache), *TRAIN, "--steps", "22")
    assert cached(cache) == first  # the second run downloaded nothing
    assert [step for step, _ in train_losses(run)] == [*range(1, 21), 21, 22]

    invoke("export", run, f"{s3}/trained/hf")
    assert storage.is_file(f"{s3}/trained/hf/model.safetensors") and storage.is_file(f"{s3}/trained/hf/vocab.txt")
    glue, tuned = str(shared_data / "glue"), f"{s3}/trained/sst2"
    small = "--epochs 1 --max-train-examples 32 --max-seq-length 32".split()
    invoke("finetune", run, "--task", "sst2", "--glue-dir", glue, "--out", tuned, *small)
    assert storage.read_json(f"{tuned}/results.json")["checkpoint"]["path"] == f"{run}/checkpoints/step-00000022"


def test_generate_reads_a_run_in_the_bucket(s3: str, tmp_path: Path, shared_data: Path) -> None:
    vocab = shared_data / "vocab" / "gpt2"
    tokenizer = gpt_tokenizer_json(vocab / "vocab.json", vocab / "merges.txt", tmp_path)
    write_shards(tmp_path / "shards", random_gpt_columns(32, seq_len=32), [32], task="gpt", tokenizer_json=tokenizer)
    upload(tmp_path / "shards", f"{s3}/gpt/shards")
    run = f"{s3}/gpt/run"
    cache = ["--cache-dir", str(tmp_path / "cache")]
    invoke("train", "--shards", f"{s3}/gpt/shards", "--out", run, *cache, "--model", "gpt-tiny", "--steps", "2", *QUICK)
    text = invoke("generate", run, "--prompt", "Once upon a time", "--max-new-tokens", "8", "--seed", "3", "--device", "cpu")
    assert text.rstrip("\n") == generate(run, "Once upon a time", 8, seed=3, device="cpu")


def test_a_rewritten_object_is_named_and_refused(build: Path, s3: str, tmp_path: Path) -> None:
    shards = uploaded(build, f"{s3}/damaged")
    damaged = f"{shards}/train-00001-of-00003.arrow"
    data = bytearray(storage.read_bytes(damaged))
    data[len(data) // 2] ^= 0xFF  # same size: only the checksum can tell
    storage.write_bytes(damaged, bytes(data))

    verified = runner.invoke(app, ["shards", "verify", shards])
    assert verified.exit_code == 1 and f"{damaged}: sha256 mismatch" in verified.output
    cache = tmp_path / "cache"
    trained = runner.invoke(app, ["train", "--shards", shards, "--out", str(tmp_path / "run"), "--cache-dir", str(cache), *TRAIN])
    assert trained.exit_code == 2 and f"{damaged}: sha256 mismatch" in trained.output
    entry = read_manifest(build / SHARDS).shards[1]
    assert entry.sha256 in trained.output and not (cache / f"{entry.sha256}.arrow").exists()
    assert not [path for path in cache.iterdir() if storage.is_temporary(path)]  # the bad download was discarded


def test_the_cache_evicts_the_least_recently_used_shard_it_does_not_hold(
    build: Path, s3: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    shards = uploaded(build, f"{s3}/evicted")
    entries = read_manifest(build / SHARDS).shards
    size = entries[0].bytes
    assert all(entry.bytes == size for entry in entries)
    cache = ShardCache(str(tmp_path / "cache"), limit=2 * size)

    def fetch(index: int) -> str:
        return cache.local_copy(f"{shards}/{entries[index].file}", entries[index].sha256, size)

    held = fetch(0)
    release(fetch(1))
    release(fetch(2))  # room for it: shard 1 goes, shard 0 is held
    assert set(cached(tmp_path / "cache")) == {f"{entries[i].sha256}.arrow" for i in (0, 2)}
    release(held)
    release(fetch(1))  # now the least recently used is shard 0
    assert set(cached(tmp_path / "cache")) == {f"{entries[i].sha256}.arrow" for i in (1, 2)}
    assert sum(path.stat().st_size for path in (tmp_path / "cache").iterdir()) <= cache.limit

    run, small = tmp_path / "run", tmp_path / "small"
    limit = str(2.5 * size / 1e9)  # fewer shards than the run reads: they are downloaded again after an eviction
    with caplog.at_level(logging.WARNING, logger=shard_cache.__name__):
        invoke("train", "--shards", shards, "--out", str(run), "--cache-dir", str(small), "--cache-gb", limit, *TRAIN)
    assert len(train_losses(run)) == 20 and len(cached(small)) == 2 and not caplog.records
    assert sum(path.stat().st_size for path in small.iterdir()) <= float(limit) * 1e9
