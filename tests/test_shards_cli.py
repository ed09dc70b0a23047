"""The shards sub-app: inspect figures on shards with known masks, --show decoding, verify exit codes."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from shard_factory import (
    bert_tokenizer_json,
    gpt_tokenizer_json,
    random_bert_columns,
    random_gpt_columns,
    write_bert_shards_from_sentences,
    write_shards,
)
from tokenizers import Tokenizer
from torch.utils.data import DataLoader
from typer.testing import CliRunner

from corpusforge.core.config import BertConfig, RunConfig, ShardsConfig
from corpusforge.encoding.vocab import vocab_manifest
from corpusforge.pipeline.options import pipeline_options
from corpusforge.shards.cli import app
from corpusforge.trainer.data import ShardStream

runner = CliRunner()
WORDS = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "home", "quickly"]


def known_bert_columns(tokenizer: Tokenizer) -> dict[str, np.ndarray]:
    """10 examples, lengths 16 x5 and 8 x5, 2 predictions each: 16 [MASK], 2 random, 2 unchanged; NSP 3/10."""
    word = [tokenizer.token_to_id(w) for w in WORDS]
    count, L, P = 10, 16, 4
    length = np.array([16] * 5 + [8] * 5)
    input_ids = np.zeros((count, L), dtype=np.int64)
    for i in range(count):
        body = [word[(i + j) % len(word)] for j in range(length[i])]
        input_ids[i, : length[i]] = body
        input_ids[i, 0], input_ids[i, 4], input_ids[i, length[i] - 1] = 101, 102, 102
    positions = np.zeros((count, P), dtype=np.int64)
    positions[:, :2] = [1, 2]
    masked_ids = np.zeros((count, P), dtype=np.int64)
    masked_ids[:, :2] = input_ids[:, 1:3]
    input_ids[:8, 1:3] = 103
    input_ids[8:, 1] = word[4]  # a random replacement: "a" is not the original ("home", "quickly")
    return {
        "input_ids": input_ids.astype(np.uint16),
        "length": length.astype(np.uint16),
        "a_length": np.full(count, 5, dtype=np.uint16),
        "masked_lm_positions": positions.astype(np.uint16),
        "masked_lm_ids": masked_ids.astype(np.uint16),
        "masked_lm_weights": (np.arange(P)[None, :] < 2).repeat(count, axis=0).astype(np.float32),
        "next_sentence_label": np.array([1, 0, 0, 1, 0, 0, 1, 0, 0, 0], dtype=np.int8),
    }


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory, shared_data) -> Path:
    directory = tmp_path_factory.mktemp("known")
    tokenizer_json = bert_tokenizer_json(shared_data / "vocab" / "bert-base-uncased" / "vocab.txt", directory)
    columns = known_bert_columns(Tokenizer.from_file(str(tokenizer_json)))
    return write_shards(directory, columns, [6, 4], tokenizer_json=tokenizer_json)


@pytest.fixture
def scratch(bert_dir, tmp_path) -> Path:
    return Path(shutil.copytree(bert_dir, tmp_path / "copy"))


def test_inspect_json_figures_on_known_masks(bert_dir):
    result = runner.invoke(app, ["inspect", str(bert_dir), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["shards"], summary["examples"], summary["tokens"], summary["sampled"]) == (2, 10, 120, False)
    assert summary["padding_fraction"] == pytest.approx(40 / 160)
    assert summary["predictions"] == 20 and summary["masked_fraction"] == pytest.approx(20 / 120)
    assert summary["mask_token_fraction"] == pytest.approx(16 / 20)
    assert summary["random_token_fraction"] == pytest.approx(2 / 20)
    assert summary["unchanged_fraction"] == pytest.approx(2 / 20)
    assert summary["nsp_random_next_fraction"] == pytest.approx(0.3)
    counts = summary["length_histogram"]["counts"]
    assert counts[8] == 5 and counts[15] == 5 and sum(counts) == 10


def test_inspect_writes_nothing_into_the_shards_and_plots_only_where_asked(bert_dir, tmp_path):
    before = sorted(p.name for p in bert_dir.iterdir())
    assert runner.invoke(app, ["inspect", str(bert_dir)]).exit_code == 0
    assert sorted(p.name for p in bert_dir.iterdir()) == before
    plot = tmp_path / "plots" / "lengths.png"
    plot.parent.mkdir()
    result = runner.invoke(app, ["inspect", str(bert_dir), "--plot", str(plot)])
    assert result.exit_code == 0 and f"histogram written to {plot}" in result.output
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and [p.name for p in plot.parent.iterdir()] == ["lengths.png"]
    assert sorted(p.name for p in bert_dir.iterdir()) == before


def test_histogram_has_a_title_and_a_log_count_axis():
    from corpusforge.shards.inspect import length_histogram_figure

    figure = length_histogram_figure({"counts": [1, 1000], "edges": [0, 8, 16]}, "BERT sequence lengths")
    axes = figure.axes[0]
    assert axes.get_title() == "BERT sequence lengths" and axes.get_yscale() == "log"


def test_inspect_sampling_is_announced(bert_dir):
    result = runner.invoke(app, ["inspect", str(bert_dir), "--sample", "7"])
    assert result.exit_code == 0, result.output
    assert "first 7 of 10 examples (sampled)" in result.output
    assert "100.00%" in result.output  # the first 7 examples only have [MASK] predictions


def test_inspect_table_and_show_decodes_tokens(bert_dir):
    result = runner.invoke(app, ["inspect", str(bert_dir), "--show", "0"])
    assert result.exit_code == 0, result.output
    assert "80.00%" in result.output and "NSP random next" in result.output
    assert "[CLS] [MASK](cat) [MASK](sat) on [SEP] mat and" in result.output
    assert "2 predictions, NSP: random next" in result.output
    shown = runner.invoke(app, ["inspect", str(bert_dir), "--show", "8"])
    assert "[CLS] a(home) quickly(quickly) the [SEP]" in shown.output  # random and unchanged predictions


def test_inspect_show_out_of_range_fails(bert_dir):
    result = runner.invoke(app, ["inspect", str(bert_dir), "--show", "10"])
    assert result.exit_code == 1 and "out of range" in result.output


def test_inspect_gpt_windows(tmp_path, shared_data):
    vocab = shared_data / "vocab" / "gpt2"
    tokenizer_json = gpt_tokenizer_json(vocab / "vocab.json", vocab / "merges.txt", tmp_path)
    ids = Tokenizer.from_file(str(tokenizer_json)).encode(" Hello world, this is a shard of text." * 20).ids
    columns = random_gpt_columns(12, seq_len=16)
    columns["input_ids"][:-1] = np.array(ids[: 11 * 17]).reshape(11, 17)
    write_shards(tmp_path, columns, [12], task="gpt", tokenizer_json=tokenizer_json)
    summary = json.loads(runner.invoke(app, ["inspect", str(tmp_path), "--json"]).stdout)
    assert (summary["windows"], summary["partial_windows"], summary["tokens"]) == (12, 1, 11 * 17 + 17 // 3)
    shown = runner.invoke(app, ["inspect", str(tmp_path), "--show", "0"])
    assert " Hello world, this is a shard" in shown.output


def test_verify_accepts_a_sound_directory(bert_dir):
    result = runner.invoke(app, ["verify", str(bert_dir)])
    assert result.exit_code == 0 and "OK" in result.output


def test_verify_reports_a_corrupted_shard(scratch):
    shard = scratch / "train-00001-of-00002.arrow"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    result = runner.invoke(app, ["verify", str(scratch)])
    assert result.exit_code == 1
    assert f"{shard}: sha256 mismatch" in result.output


def test_verify_reports_a_manifest_checksum_that_is_not_the_files(scratch):
    manifest = json.loads((scratch / "manifest.json").read_text())
    manifest["shards"][0]["sha256"] = "0" * 64
    (scratch / "manifest.json").write_text(json.dumps(manifest))
    result = runner.invoke(app, ["verify", str(scratch)])
    assert result.exit_code == 1
    assert f"{scratch / 'train-00000-of-00002.arrow'}: sha256 mismatch (manifest 000000000000" in result.output


def test_verify_reports_missing_stray_and_miscounted_files(scratch):
    (scratch / "train-00000-of-00002.arrow").unlink()
    (scratch / "train-00002-of-00002.arrow.tmp-0a1b").write_bytes(b"half written")
    manifest = json.loads((scratch / "manifest.json").read_text())
    manifest["shards"][1]["tokens"] += 1
    manifest["totals"]["examples"] = 11
    (scratch / "manifest.json").write_text(json.dumps(manifest))
    result = runner.invoke(app, ["verify", str(scratch)])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert any("train-00000-of-00002.arrow: shard file missing" in line for line in lines)
    assert any(".tmp-0a1b: not in the manifest" in line for line in lines)
    assert any("train-00001-of-00002.arrow: 32 tokens, manifest says 33" in line for line in lines)
    assert any("totals.examples is 11, shards add up to 10" in line for line in lines)


def test_verify_reports_bad_values_and_vocabulary(scratch, tmp_path):
    columns = random_bert_columns(20, max_seq_length=32, max_predictions=5)
    columns["masked_lm_positions"][3, 0] = 31
    columns["length"][3] = 20
    broken = write_shards(tmp_path / "values", columns, [20], tokenizer_json=scratch / "tokenizer.json")
    result = runner.invoke(app, ["verify", str(broken)])
    assert result.exit_code == 1 and "masked_lm_position past the example's length" in result.output
    (scratch / "tokenizer.json").write_text("{}")
    result = runner.invoke(app, ["verify", str(scratch)])
    assert result.exit_code == 1 and "vocabulary sha256 differs" in result.output


def test_verify_reports_a_missing_manifest(tmp_path):
    result = runner.invoke(app, ["verify", str(tmp_path)])
    assert result.exit_code == 1 and "manifest.json: manifest missing" in result.output


def test_vocabulary_directory_as_the_build_records_it(tmp_path, shared_data):
    vocab_dir = tmp_path / "vocab"
    vocab_dir.mkdir()
    shutil.copy(shared_data / "vocab" / "bert-base-uncased" / "vocab.txt", vocab_dir)
    tokenizer = Tokenizer.from_file(str(bert_tokenizer_json(vocab_dir / "vocab.txt", vocab_dir)))
    shards = write_shards(tmp_path / "shards", known_bert_columns(tokenizer), [10], vocab=vocab_manifest(vocab_dir))
    assert runner.invoke(app, ["verify", str(shards)]).exit_code == 0
    assert "[CLS] [MASK](cat) [MASK](sat) on [SEP]" in runner.invoke(app, ["inspect", str(shards), "--show", "0"]).output
    (vocab_dir / "vocab.txt").write_text("[PAD]\n")
    result = runner.invoke(app, ["verify", str(shards)])
    assert result.exit_code == 1 and f"{vocab_dir}: vocabulary sha256 differs" in result.output


def test_shards_from_the_real_beam_pipeline_verify_inspect_and_stream(tmp_path, shared_data):
    vocab_dir = tmp_path / "vocab"
    vocab_dir.mkdir()
    shutil.copy(shared_data / "vocab" / "bert-base-uncased" / "vocab.txt", vocab_dir)
    bert_tokenizer_json(vocab_dir / "vocab.txt", vocab_dir)
    text = (shared_data / "books" / "en" / "11-0.txt").read_text(encoding="utf-8")
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if len(s.split()) > 3]
    docs = [(f"alice-{i}", sentences[i * 40 : (i + 1) * 40]) for i in range(20)]
    out = tmp_path / "shards"
    write_bert_shards_from_sentences(
        pipeline_options(RunConfig()), docs, vocab_dir, out, BertConfig(dupe_factor=2), ShardsConfig(max_examples=150), 1
    )

    assert runner.invoke(app, ["verify", str(out)]).exit_code == 0
    summary = json.loads(runner.invoke(app, ["inspect", str(out), "--json"]).stdout)
    assert 0.12 < summary["masked_fraction"] < 0.16  # 15% of the tokens, [CLS]/[SEP] never masked
    assert summary["mask_token_fraction"] == pytest.approx(0.8, abs=0.05)
    assert summary["random_token_fraction"] == pytest.approx(0.1, abs=0.04)
    assert summary["unchanged_fraction"] == pytest.approx(0.1, abs=0.04)
    assert summary["nsp_random_next_fraction"] == pytest.approx(0.5, abs=0.08)

    stream = ShardStream(out, 16, world_size=1, seed=0)
    loader = DataLoader(stream, batch_size=None, num_workers=2)
    rows = [tuple(row) for batch in loader for row in batch["input_ids"].tolist()]
    assert len(rows) == summary["examples"] - stream.dropped_per_epoch


def test_inspect_points_build_and_document_folders_to_docs_inspect(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "out" / "documents").mkdir(parents=True)
    pq.write_table(pa.table({"id": ["a"], "text": ["x"]}), tmp_path / "out" / "documents" / "part-00000-of-00001.parquet")
    build = runner.invoke(app, ["inspect", str(tmp_path / "out")])
    assert (
        build.exit_code == 1
        and f"is a build output folder: for its documents use `corpusforge docs inspect {tmp_path / 'out'}`" in build.output
    )
    documents = runner.invoke(app, ["verify", str(tmp_path / "out" / "documents")])
    assert documents.exit_code == 1 and "not shards: use `corpusforge docs inspect" in documents.output


def test_inspect_show_fails_before_printing_figures(bert_dir):
    result = runner.invoke(app, ["inspect", str(bert_dir), "--show", "99"])
    assert result.exit_code == 1 and "out of range" in result.output
    assert "padding" not in result.output and "BERT shards" not in result.output


def test_datasets_loads_the_shards_with_the_printed_command(bert_dir, tmp_path):
    """Shards are named as HF datasets' splits, so ``load_dataset("arrow", data_dir=...)`` (what inspect prints)
    reads them and not manifest.json beside them."""
    import datasets

    output = runner.invoke(app, ["inspect", str(bert_dir)]).output
    directory = re.search(r'load_dataset\("arrow", data_dir="([^"]+)", split="train"\)', output)[1]
    assert (Path(directory) / "manifest.json").is_file()
    loaded = datasets.load_dataset("arrow", data_dir=directory, split="train", cache_dir=str(tmp_path / "cache"))
    assert loaded.num_rows == 10 and loaded.column_names[0] == "input_ids"
    stream = ShardStream(bert_dir, 10, world_size=1, seed=0, shuffle=False)
    assert sorted(map(tuple, loaded["input_ids"])) == sorted(map(tuple, next(iter(stream))["input_ids"].tolist()))


def test_moved_shards_keep_their_vocabulary_or_take_vocab(tmp_path, shared_data):
    """The manifest names the vocabulary relative to the shard folder: moving both keeps it; moving the shards
    alone fails verify with a hint, and --vocab repairs verify and --show."""
    build = tmp_path / "build"
    vocab_dir = build / "vocab"
    vocab_dir.mkdir(parents=True)
    shutil.copy(shared_data / "vocab" / "bert-base-uncased" / "vocab.txt", vocab_dir)
    bert_tokenizer_json(vocab_dir / "vocab.txt", vocab_dir)
    docs = [(f"doc-{i}", [f"{w} {WORDS[(i + j) % len(WORDS)]} sat on the mat ." for j, w in enumerate(WORDS)]) for i in range(6)]
    write_bert_shards_from_sentences(
        pipeline_options(RunConfig()), docs, vocab_dir, build / "shards", BertConfig(dupe_factor=1), ShardsConfig(), 1
    )
    assert json.loads((build / "shards" / "manifest.json").read_text())["vocab"]["path"] == "../vocab"

    moved = Path(shutil.move(str(build), tmp_path / "moved"))
    assert runner.invoke(app, ["verify", str(moved / "shards")]).exit_code == 0
    alone = Path(shutil.copytree(moved / "shards", tmp_path / "elsewhere" / "deep" / "shards"))
    lost = runner.invoke(app, ["verify", str(alone)])
    assert lost.exit_code == 1 and "vocabulary missing (shards moved without it? pass --vocab DIR)" in lost.output
    assert runner.invoke(app, ["verify", str(alone), "--vocab", str(moved / "vocab")]).exit_code == 0
    no_vocab = runner.invoke(app, ["inspect", str(alone), "--show", "0"])
    assert no_vocab.exit_code == 1 and "pass --vocab DIR" in no_vocab.output and "Traceback" not in no_vocab.output
    shown = runner.invoke(app, ["inspect", str(alone), "--show", "0", "--vocab", str(moved / "vocab")])
    assert shown.exit_code == 0 and "[CLS]" in shown.output
