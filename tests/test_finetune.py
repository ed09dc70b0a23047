"""GLUE fine-tuning, its metrics, and sampling from GPT checkpoints: real files, real torch steps.

The dev metric is checked against an independent reading of the real GLUE dev file (the ``csv``
module, not our reader) and an independent formula; MCC is checked against Pearson's correlation of
the two binary vectors (equal by definition) and F1 against precision and recall.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from shard_factory import bert_tokenizer_json, gpt_tokenizer_json, random_bert_columns, random_gpt_columns, write_shards
from typer.testing import CliRunner

from corpusforge.cli import app
from corpusforge.core.config import FinetuneConfig, TrainConfig
from corpusforge.trainer.checkpoint import WEIGHTS_NAME, resolve_checkpoint
from corpusforge.trainer.finetune import load_encoder
from corpusforge.trainer.generate import generate, load_gpt, sample
from corpusforge.trainer.glue import f1, get_task, matthews, read_tsv, subset
from corpusforge.trainer.loop import train

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def bert_run(tmp_path_factory, shared_data) -> Path:
    """bert-tiny after 3 real steps on shards with the bert-base-uncased vocabulary."""
    directory = tmp_path_factory.mktemp("bert")
    tokenizer = bert_tokenizer_json(shared_data / "vocab" / "bert-base-uncased" / "vocab.txt", directory)
    shards = write_shards(
        directory / "shards", random_bert_columns(64, max_seq_length=64, max_predictions=10), [64], tokenizer_json=tokenizer
    )
    cfg = TrainConfig(model="bert-tiny", steps=3, batch_size=16, lr=1e-3, num_workers=0, log_every=1, holdout_examples=0)
    train(cfg, shards, directory / "run", progress=False)
    return directory / "run"


@pytest.fixture(scope="module")
def gpt_run(tmp_path_factory, shared_data) -> Path:
    directory = tmp_path_factory.mktemp("gpt")
    vocab = shared_data / "vocab" / "gpt2"
    tokenizer = gpt_tokenizer_json(vocab / "vocab.json", vocab / "merges.txt", directory)
    shards = write_shards(directory / "shards", random_gpt_columns(32, seq_len=32), [32], task="gpt", tokenizer_json=tokenizer)
    cfg = TrainConfig(task="gpt", model="gpt-tiny", steps=2, batch_size=8, num_workers=0, log_every=1, holdout_examples=0)
    train(cfg, shards, directory / "run", progress=False)
    return directory / "run"


def sst2_dev_labels(glue: Path) -> list[int]:
    with open(glue / "SST-2" / "dev.tsv", encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [int(row["label"]) for row in rows]


def test_finetune_sst2_dev_accuracy_matches_an_independent_count(bert_run, shared_data, tmp_path):
    out = tmp_path / "sst2"
    result = CliRunner().invoke(
        app,
        [
            "finetune",
            str(bert_run),
            "--task",
            "sst2",
            "--glue-dir",
            str(shared_data / "glue"),
            "--out",
            str(out),
            "--epochs",
            "2",
            "--max-train-examples",
            "192",
            "--max-seq-length",
            "48",
            "--seed",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    results = json.loads((out / "results.json").read_text())
    labels = sst2_dev_labels(shared_data / "glue")
    predictions = [int(line) for line in (out / "dev_predictions.txt").read_text().split()]
    assert len(labels) == len(predictions) == results["dev_examples"] == 872  # the whole official dev set
    assert results["task"] == "sst2" and results["metric"] == "accuracy"
    assert results["dev"] == pytest.approx(np.mean(np.array(predictions) == np.array(labels)))
    assert f"accuracy {results['dev']:.4f}" in result.output
    assert [e["epoch"] for e in results["epochs"]] == [1, 2] and results["epochs"][-1]["accuracy"] == results["dev"]
    assert results["train_examples"] == 192 and results["settings"]["steps"] == 2 * 6 and results["settings"]["warmup_steps"] == 1
    ckpt = resolve_checkpoint(bert_run)
    assert results["checkpoint"]["step"] == 3 and results["checkpoint"]["path"] == str(Path(ckpt).resolve())
    assert len(results["checkpoint"]["weights_sha256"]) == 64
    assert (out / "dev_curve.png").stat().st_size > 5_000


def test_several_seeds_give_each_run_and_their_mean_and_std(bert_run, shared_data, tmp_path):
    out = tmp_path / "mrpc"
    args = ["finetune", str(bert_run), "--task", "mrpc", "--glue-dir", str(shared_data / "glue"), "--out", str(out)]
    args += ["--epochs", "1", "--max-train-examples", "64", "--max-seq-length", "32", "--seed", "3", "--seeds", "2"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "results.json").read_text())
    runs = [json.loads((out / f"seed-{seed}" / "results.json").read_text()) for seed in (3, 4)]
    assert summary["seeds"] == [3, 4] and [run["settings"]["seed"] for run in runs] == [3, 4]
    assert summary["dev_per_seed"] == [run["dev"] for run in runs]
    assert summary["dev"] == pytest.approx(np.mean(summary["dev_per_seed"]))
    assert summary["dev_std"] == pytest.approx(np.std(summary["dev_per_seed"], ddof=1))
    assert summary["metric"] == "f1" and set(summary["dev_metrics"]) == {"f1", "accuracy"}
    assert "mean of seeds 3, 4" in result.output and f"f1 {summary['dev']:.4f} +- {summary['dev_std']:.4f}" in result.output


def test_random_init_keeps_architecture_and_vocabulary_but_not_the_weights(bert_run):
    pretrained = load_file(str(Path(resolve_checkpoint(bert_run)) / WEIGHTS_NAME))
    start, _, _ = load_encoder(bert_run, FinetuneConfig())
    fresh, state, identity = load_encoder(bert_run, FinetuneConfig(random_init=True))
    assert all(torch.equal(start.state_dict()[k], pretrained[k]) for k in pretrained)
    assert fresh.state_dict().keys() == pretrained.keys() and fresh.cfg == start.cfg
    assert all(fresh.state_dict()[k].shape == pretrained[k].shape for k in pretrained)
    assert not torch.equal(fresh.state_dict()["wte.weight"], pretrained["wte.weight"])
    assert not torch.equal(fresh.state_dict()["h.0.attn.c_attn.weight"], pretrained["h.0.attn.c_attn.weight"])
    other, _, _ = load_encoder(bert_run, FinetuneConfig(random_init=True, seed=5))
    assert not torch.equal(other.state_dict()["wte.weight"], fresh.state_dict()["wte.weight"])


def test_bad_glue_dir_and_gpt_checkpoint_fail_in_one_line(bert_run, gpt_run, shared_data, tmp_path):
    runner = CliRunner()
    missing = runner.invoke(app, ["finetune", str(bert_run), "--task", "cola", "--glue-dir", str(tmp_path), "--out", str(tmp_path / "o")])
    assert missing.exit_code == 2 and "CoLA" in missing.output and len(missing.output.strip().splitlines()) == 1
    gpt = runner.invoke(
        app, ["finetune", str(gpt_run), "--task", "sst2", "--glue-dir", str(shared_data / "glue"), "--out", str(tmp_path / "o")]
    )
    assert gpt.exit_code == 2 and "GPT checkpoint" in gpt.output and len(gpt.output.strip().splitlines()) == 1
    task = runner.invoke(
        app, ["finetune", str(bert_run), "--task", "qnli", "--glue-dir", str(shared_data / "glue"), "--out", str(tmp_path / "o")]
    )
    assert task.exit_code == 2 and "task" in task.output
    assert not (tmp_path / "o").exists()


def test_glue_readers_count_the_official_splits(shared_data):
    glue = shared_data / "glue"
    cola = get_task("cola")
    assert len(read_tsv(glue / "CoLA" / "train.tsv", cola)) + len(read_tsv(glue / "CoLA" / "val.tsv", cola)) == 8551
    dev = read_tsv(glue / "CoLA" / "dev.tsv", cola)
    assert len(dev) == 1043 and sum(e.label for e in dev) == 721
    mrpc = read_tsv(glue / "MRPC" / "dev.tsv", get_task("mrpc"))
    assert len(mrpc) == 408 and sum(e.label for e in mrpc) == 279 and all(e.text_b for e in mrpc)
    assert mrpc[0].text_a.startswith("He said the foodservice pie business")  # the BOM'd header is skipped
    sst = read_tsv(glue / "SST-2" / "dev.tsv", get_task("sst2"))
    assert [e.label for e in sst] == sst2_dev_labels(glue)
    picked = subset(sst, 100, seed=3)
    assert picked == subset(sst, 100, seed=3) and picked != subset(sst, 100, seed=4) and len(set(picked)) == 100


def test_malformed_glue_row_is_named(tmp_path):
    (tmp_path / "SST-2").mkdir()
    (tmp_path / "SST-2" / "dev.tsv").write_text("sentence\tlabel\ngood film\t1\nno label here\n")
    with pytest.raises(ValueError, match=r"dev.tsv:3"):
        read_tsv(tmp_path / "SST-2" / "dev.tsv", get_task("sst2"))


FIXED = [  # (predictions, labels)
    ([1, 1, 0, 0, 1, 0, 1, 1, 0, 1], [1, 0, 0, 1, 1, 0, 1, 0, 0, 1]),
    ([1, 0, 1, 1, 1, 1, 0, 1], [1, 1, 1, 0, 1, 1, 0, 1]),
    ([0, 1, 0, 1, 0, 1], [1, 0, 1, 0, 1, 0]),
]


@pytest.mark.parametrize("predictions, labels", FIXED)
def test_mcc_and_f1_match_reference_formulas(predictions, labels):
    p, y = np.array(predictions, dtype=float), np.array(labels, dtype=float)
    assert matthews(predictions, labels) == pytest.approx(np.corrcoef(p, y)[0, 1])  # MCC is Pearson's r of binary vectors
    precision = (p * y).sum() / p.sum()
    recall = (p * y).sum() / y.sum()
    expected_f1 = 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)
    assert f1(predictions, labels) == pytest.approx(expected_f1)


def test_mcc_of_a_constant_guess_is_zero():
    assert matthews([1, 1, 1, 1], [1, 0, 1, 0]) == 0.0 and f1([0, 0], [1, 0]) == 0.0
    assert matthews([1, 0, 1, 0], [1, 0, 1, 0]) == 1.0 and matthews([0, 1, 0, 1], [1, 0, 1, 0]) == -1.0


def test_generate_is_deterministic_under_a_seed_and_adds_tokens(gpt_run):
    first = generate(gpt_run, "The cat sat on the", 12, temperature=1.0, seed=7, device="cpu")
    assert first == generate(gpt_run, "The cat sat on the", 12, temperature=1.0, seed=7, device="cpu")
    assert first != generate(gpt_run, "The cat sat on the", 12, temperature=1.0, seed=8, device="cpu")
    model, state = load_gpt(gpt_run, torch.device("cpu"))
    ids = sample(model, [464, 3797], 12, seed=7)
    assert len(ids) == 12 and all(0 <= i < 50257 for i in ids)  # never a padding id past the tokenizer's vocabulary
    assert sample(model, [464, 3797], 12, seed=7) == ids
    top1 = sample(model, [464, 3797], 5, top_k=1, seed=1)
    assert top1 == sample(model, [464, 3797], 5, top_k=1, seed=2)  # top-1 is greedy: the seed no longer matters
    logits = model(torch.tensor([[464, 3797]]))["logits"][0, -1, :50257]
    assert top1[0] == int(logits.argmax())


def test_generate_command_prints_the_continuation_and_refuses_bert(gpt_run, bert_run):
    runner = CliRunner()
    result = runner.invoke(
        app, ["generate", str(gpt_run), "--prompt", "Once upon a time", "--max-new-tokens", "8", "--seed", "3", "--device", "cpu"]
    )
    assert result.exit_code == 0, result.output
    assert result.output.rstrip("\n") == generate(gpt_run, "Once upon a time", 8, seed=3, device="cpu")
    refused = runner.invoke(app, ["generate", str(bert_run), "--prompt", "hi"])
    assert refused.exit_code == 2 and "BERT checkpoint" in refused.output
