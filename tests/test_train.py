"""End-to-end training on real shards built from Project Gutenberg books (shared data).

Thresholds. A model that learned only word frequencies predicts the most frequent training target
every time, so its accuracy anywhere is that token's share. GPT must beat it 1.5x on held-out next
tokens (only context can). bert-tiny after 300 CPU steps is still on the MLM unigram plateau where the
input shows [MASK] (held-out 0.050 vs 0.046; 600 steps did not leave it either), so there it must
only not fall below the frequency guess; what no frequency table can do, and it must, is read its
input: where the input keeps the answer (10% of predictions) it must score 5x the frequency guess. Losses must fall well below the start,
which for an N(0, 0.02)-initialised model is ln(vocab size) (a uniform guess).
"""

from __future__ import annotations

import collections
import json
import logging
import math
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from apache_beam.options.pipeline_options import PipelineOptions
from safetensors.torch import load_file
from shard_factory import FIRST_WORD_ID, bert_tokenizer_json, gpt_tokenizer_json, random_bert_columns, random_gpt_columns, write_shards

from corpusforge.core.config import BertConfig, GptConfig, ShardsConfig, TrainConfig
from corpusforge.corpora.books import read_book
from corpusforge.encoding.vocab import train_bpe, train_wordpiece
from corpusforge.pipeline.documents_io import documents_table
from corpusforge.pipeline.examples_stage import write_bert_shards, write_gpt_shards
from corpusforge.pipeline.options import LOCAL_RUNNER
from corpusforge.shards.reader import ShardError, column_view, open_shard, read_manifest
from corpusforge.trainer.checkpoint import OPTIMIZER_NAME, WEIGHTS_NAME, checkpoint_dir, load_weights, read_state, resolve_checkpoint
from corpusforge.trainer.data import DataWaitTimer, ShardStream, to_model_inputs
from corpusforge.trainer.device import autocast, has_amx
from corpusforge.trainer.loop import train
from corpusforge.trainer.metrics import read_log
from corpusforge.trainer.models import ModelConfig, build_model

TRAIN_BOOKS = ["11-0.txt", "46-0.txt", "43-0.txt", "16-0.txt"]  # Alice, A Christmas Carol, Jekyll & Hyde, Peter Pan
HELD_OUT_BOOKS = ["35-0.txt", "41-0.txt"]  # The Time Machine, Sleepy Hollow: other authors, never trained on
VOCAB = 2000  # small vocabularies keep the tiny models' decoders cheap on CPU


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def books(tmp_path_factory, shared_data) -> dict[str, Path]:
    root = shared_data / "books" / "en"
    out = tmp_path_factory.mktemp("books")
    texts = []
    for split, names in (("train", TRAIN_BOOKS), ("held_out", HELD_OUT_BOOKS)):
        docs = [read_book(root / name, root) for name in names]
        pq.write_table(documents_table(docs), out / f"{split}.parquet")
        texts += [doc.text for doc in docs] if split == "train" else []
    vocab = {"bert": train_wordpiece(texts, out / "wordpiece", VOCAB), "gpt": train_bpe(texts, out / "bpe", VOCAB)}
    options = PipelineOptions([], runner=LOCAL_RUNNER, direct_running_mode="in_memory")
    dirs = {}
    for split in ("train", "held_out"):
        docs = [out / f"{split}.parquet"]
        dirs[f"bert-{split}"] = out / f"bert-{split}"
        write_bert_shards(
            options,
            docs,
            vocab["bert"],
            dirs[f"bert-{split}"],
            BertConfig(max_seq_length=64, max_predictions_per_seq=10, dupe_factor=2),
            ShardsConfig(),
            seed=1,
        )
        dirs[f"gpt-{split}"] = out / f"gpt-{split}"
        write_gpt_shards(options, docs, vocab["gpt"], dirs[f"gpt-{split}"], GptConfig(seq_len=64), ShardsConfig(), seed=1)
    return dirs


def most_common_target(shard_dir: Path) -> int:
    """The most frequent masked-LM target of the training shards: a unigram predictor fitted on the training data."""
    manifest = read_manifest(shard_dir)
    counts = collections.Counter()
    for entry in manifest.shards:
        table = open_shard(manifest.shard_path(entry))
        counts.update(column_view(table, "masked_lm_ids")[column_view(table, "masked_lm_weights") > 0].tolist())
    return counts.most_common(1)[0][0]


def most_common_next_token(shard_dir: Path) -> int:
    """The most frequent next token of the training windows (GPT's unigram predictor)."""
    manifest = read_manifest(shard_dir)
    counts = collections.Counter()
    for entry in manifest.shards:
        table = open_shard(manifest.shard_path(entry))
        ids, length = column_view(table, "input_ids"), column_view(table, "length")
        counts.update(ids[:, 1:][np.arange(ids.shape[1] - 1)[None, :] < (length[:, None] - 1)].tolist())
    return counts.most_common(1)[0][0]


@torch.no_grad()
def masked_lm_accuracy(run: Path, train_shards: Path, held_out: Path) -> dict[str, dict[str, float]]:
    """Held-out accuracy of the model and of a unigram predictor fitted on the training targets, split by what
    the input shows at the predicted position: "masked" ([MASK], 80%: only the context can tell the answer)
    and "kept" (the answer itself, 10%: a model must read its input to profit, which no frequency table does).
    """
    ckpt = resolve_checkpoint(run)
    model = build_model(ModelConfig(**read_state(ckpt)["model_config"]))
    load_weights(ckpt, model)
    model.eval()
    mask_id, unigram = read_manifest(held_out).vocab.special_ids["mask"], most_common_target(train_shards)
    hits = {kind: {"model": 0, "unigram": 0, "count": 0} for kind in ("masked", "kept")}
    for raw in ShardStream(held_out, 64, shuffle=False):
        batch = to_model_inputs(raw, "cpu", "bert")
        predicted = model(**batch)["mlm_logits"].argmax(-1)
        shown = torch.gather(batch["input_ids"], 1, batch["masked_lm_positions"])
        real = batch["masked_lm_weights"] > 0
        for kind, where in (("masked", real & (shown == mask_id)), ("kept", real & (shown == batch["masked_lm_ids"]))):
            targets = batch["masked_lm_ids"][where]
            hits[kind]["model"] += int((predicted[where] == targets).sum())
            hits[kind]["unigram"] += int((targets == unigram).sum())
            hits[kind]["count"] += int(where.sum())
    return {kind: {name: h[name] / h["count"] for name in ("model", "unigram")} for kind, h in hits.items()}


@pytest.mark.slow
def test_bert_tiny_learns_from_books(books, tmp_path):
    cfg = TrainConfig(
        model="bert-tiny",
        steps=300,
        batch_size=32,
        lr=2e-3,
        warmup_steps=30,
        num_workers=0,
        log_every=50,
        checkpoint_every=0,
        eval_batches=10,
    )
    run = tmp_path / "run"
    results = train(cfg, books["bert-train"], run, eval_shards=books["bert-held_out"], progress=False)

    log = [r for r in read_log(run / "metrics.jsonl") if r["split"] == "train"]
    assert [r["step"] for r in log] == [50, 100, 150, 200, 250, 300]
    assert {"mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy", "lr", "tokens_per_s", "examples_per_s", "data_wait"} <= log[-1].keys()
    start = math.log(2048)  # padded vocabulary: the uniform guess of the initial model
    assert log[-1]["mlm_loss"] < start - 1.2 and log[-1]["mlm_loss"] < log[0]["mlm_loss"] - 0.4
    assert log[-1]["lr"] == pytest.approx(2e-3 / 270)  # linear decay: the last step's rate is one step above zero
    accuracy = masked_lm_accuracy(run, books["bert-train"], books["bert-held_out"])
    assert accuracy["kept"]["model"] > 5 * accuracy["kept"]["unigram"], accuracy  # reads its input: no frequency table does
    assert accuracy["masked"]["model"] >= accuracy["masked"]["unigram"], accuracy  # and never below the frequency guess
    assert results["mlm_loss"] < start - 1.0 and results["perplexity"] == pytest.approx(math.exp(results["mlm_loss"]))
    assert 0.0 < results["nsp_accuracy"] < 1.0 and results["examples"] == 320
    assert json.loads((run / "eval.json").read_text()) == results
    assert (run / "curves.png").stat().st_size > 10_000 and any((run / "tensorboard").iterdir())
    state = read_state(checkpoint_dir(run, 300))
    assert state["step"] == 300 and state["reader"]["position"] > 0


def test_gpt_tiny_learns_from_books(books, tmp_path):
    cfg = TrainConfig(
        task="gpt",
        model="gpt-tiny",
        steps=150,
        batch_size=16,
        lr=3e-3,
        warmup_steps=15,
        num_workers=0,
        log_every=50,
        checkpoint_every=0,
        eval_batches=10,
    )
    results = train(cfg, books["gpt-train"], tmp_path / "run", eval_shards=books["gpt-held_out"], progress=False)
    log = [r for r in read_log(tmp_path / "run" / "metrics.jsonl") if r["split"] == "train"]
    assert log[-1]["loss"] < math.log(2048) - 1.5 and log[-1]["loss"] < log[0]["loss"] - 0.5  # 4.5x below uniform perplexity
    assert log[-1]["lr"] == pytest.approx(0.1 * 3e-3, rel=1e-2)  # cosine ends at lr/10
    unigram = most_common_next_token(books["gpt-train"])  # a frequency-only model predicts it everywhere
    held_out = read_manifest(books["gpt-held_out"])
    hits = total = 0
    for entry in held_out.shards:
        table = open_shard(held_out.shard_path(entry))
        ids, length = column_view(table, "input_ids"), column_view(table, "length")
        targets = ids[:, 1:][np.arange(ids.shape[1] - 1)[None, :] < (length[:, None] - 1)]
        hits, total = hits + int((targets == unigram).sum()), total + targets.size
    assert results["accuracy"] > 1.5 * hits / total, (results, hits / total)
    assert results["perplexity"] < 2048 / 4


def test_resume_is_bit_identical(books, tmp_path):
    """4 steps, checkpoint, resume for 4 more == 8 straight steps: weights and optimizer, bit for bit.

    Dropout is on (0.1), gradients accumulate over 2 micro-batches and the loader has 2 workers, so
    reader position, step seeds, AdamW moments and the schedule must all round-trip exactly.
    """
    cfg = TrainConfig(
        model="bert-tiny",
        steps=8,
        batch_size=8,
        global_batch_size=16,
        lr=1e-3,
        num_workers=2,
        log_every=4,
        checkpoint_every=4,
        verify_shards=False,
        eval_batches=2,
    )
    train(cfg, books["bert-train"], tmp_path / "straight", progress=False)
    train(cfg, books["bert-train"], tmp_path / "resumed", resume=checkpoint_dir(tmp_path / "straight", 4), progress=False)

    straight, resumed = Path(checkpoint_dir(tmp_path / "straight", 8)), Path(checkpoint_dir(tmp_path / "resumed", 8))
    a, b = load_file(str(straight / WEIGHTS_NAME)), load_file(str(resumed / WEIGHTS_NAME))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    start = load_file(str(Path(checkpoint_dir(tmp_path / "straight", 4)) / WEIGHTS_NAME))
    assert not all(torch.equal(a[k], start[k]) for k in a)  # the last 4 steps did change the weights
    opt_a = torch.load(straight / OPTIMIZER_NAME, weights_only=True)["state"]
    opt_b = torch.load(resumed / OPTIMIZER_NAME, weights_only=True)["state"]
    assert all(torch.equal(opt_a[i][k], opt_b[i][k]) for i in opt_a for k in opt_a[i])
    assert read_state(straight)["reader"] == read_state(resumed)["reader"]
    assert read_state(straight)["scheduler"] == read_state(resumed)["scheduler"]
    # the resumed run logs only its own steps, with the straight run's losses
    log_a = [r for r in read_log(tmp_path / "straight" / "metrics.jsonl") if r["split"] == "train"]
    log_b = [r for r in read_log(tmp_path / "resumed" / "metrics.jsonl") if r["split"] == "train"]
    assert [r["step"] for r in log_b] == [8] and log_b[0]["loss"] == log_a[-1]["loss"]


def test_bf16_precision_computes_in_bf16_on_the_cpu_and_resumes_bit_identical(books, tmp_path):
    """``train.precision=bf16`` autocasts the CPU steps (other weights than fp32's after the same steps) and a resumed
    bf16 run still equals a straight one bit for bit; ``auto`` is bf16 only on a CPU with AMX."""
    cpu = torch.device("cpu")
    x, w = torch.randn(4, 8), torch.randn(3, 8)
    with autocast(cpu, "bf16"):
        assert torch.nn.functional.linear(x, w).dtype == torch.bfloat16
    with autocast(cpu, "fp32"):
        assert torch.nn.functional.linear(x, w).dtype == torch.float32
    with autocast(cpu, "auto"):  # bf16 where the CPU has AMX tiles (this project's machines do), else fp32
        assert torch.nn.functional.linear(x, w).dtype == (torch.bfloat16 if has_amx() else torch.float32)

    def run(precision: str, out: str, steps: int = 6, resume: str | None = None) -> dict[str, torch.Tensor]:
        cfg = TrainConfig(
            model="bert-tiny", steps=steps, batch_size=8, lr=1e-3, num_workers=0, checkpoint_every=3, verify_shards=False,
            eval_batches=1, precision=precision,
        )  # fmt: skip
        train(cfg, books["bert-train"], tmp_path / out, resume=resume, progress=False)
        assert read_state(checkpoint_dir(tmp_path / out, steps))["train_config"]["precision"] == precision
        return load_file(str(Path(checkpoint_dir(tmp_path / out, steps)) / WEIGHTS_NAME))

    fp32, bf16 = run("fp32", "fp32"), run("bf16", "bf16")
    resumed = run("bf16", "resumed", resume=checkpoint_dir(tmp_path / "bf16", 3))
    assert all(torch.equal(bf16[k], resumed[k]) for k in bf16)
    assert not all(torch.equal(bf16[k], fp32[k]) for k in bf16)  # the autocast did change the arithmetic


LABELLED = 300  # held out: min(holdout_examples, 300 // 10) = the last 30


@pytest.fixture(scope="module")
def labelled(tmp_path_factory, shared_data) -> dict[str, Path]:
    """Random BERT and GPT examples whose second token is FIRST_WORD_ID + manifest index."""
    vocab = shared_data / "vocab"
    dirs = {}
    for task in ("bert", "gpt"):
        directory = tmp_path_factory.mktemp(f"labelled-{task}")
        if task == "bert":
            columns = random_bert_columns(LABELLED, max_seq_length=32, max_predictions=5, seed=4)
            tokenizer = bert_tokenizer_json(vocab / "bert-base-uncased" / "vocab.txt", directory)
        else:
            columns = random_gpt_columns(LABELLED, seq_len=32, partial_last=False, seed=4)
            tokenizer = gpt_tokenizer_json(vocab / "gpt2" / "vocab.json", vocab / "gpt2" / "merges.txt", directory)
        columns["input_ids"][:, 1] = FIRST_WORD_ID + np.arange(LABELLED)
        dirs[task] = write_shards(directory, columns, [170, 130], task=task, tokenizer_json=tokenizer, batch_rows=50)
    return dirs


def example_ids(batch: dict[str, torch.Tensor]) -> list[int]:
    return (batch["input_ids"][:, 1].long() - FIRST_WORD_ID).tolist()


def record_examples(monkeypatch) -> tuple[list[int], list[int]]:
    """(training examples, every example the loop converted): spies on the real timer and converter.

    Only training batches pass the loop's DataWaitTimer; evaluation also goes through to_model_inputs.
    """
    import corpusforge.trainer.evaluate as evaluate
    import corpusforge.trainer.loop as loop

    trained, converted = [], []
    convert = loop.to_model_inputs

    class RecordingTimer(DataWaitTimer):
        def wrap(self, batches):
            for batch in super().wrap(batches):
                trained.extend(example_ids(batch))
                yield batch

    def recording_convert(batch, device, task):
        converted.extend(example_ids(batch))
        return convert(batch, device, task)

    monkeypatch.setattr(loop, "DataWaitTimer", RecordingTimer)
    monkeypatch.setattr(loop, "to_model_inputs", recording_convert)
    monkeypatch.setattr(evaluate, "to_model_inputs", recording_convert)
    return trained, converted


def test_held_out_tail_is_evaluated_and_never_trained_on(labelled, tmp_path, monkeypatch):
    trained, converted = record_examples(monkeypatch)
    cfg = TrainConfig(model="bert-tiny", steps=24, batch_size=8, global_batch_size=16, num_workers=2, log_every=12, checkpoint_every=12)
    results = train(cfg, labelled["bert"], tmp_path / "run", progress=False)

    cut = LABELLED - 30
    first_epoch = cut // 8 * 8
    assert len(trained) == 24 * 16 > first_epoch  # into the second epoch
    assert all(i < cut for i in trained) and len(set(trained[:first_epoch])) == first_epoch
    assert converted[: len(trained)] == trained
    assert converted[len(trained) :] == list(range(cut, LABELLED))  # 3 batches of 8 in file order, then the last 6
    assert results["example_range"] == [cut, LABELLED] and results["examples"] == 30
    assert results["shards"] == str(labelled["bert"].resolve())
    assert results["perplexity"] == pytest.approx(math.exp(results["mlm_loss"])) and results["mlm_loss"] > 0
    assert 0.0 <= results["mlm_accuracy"] <= 1.0 and 0.0 <= results["nsp_accuracy"] <= 1.0 and results["nsp_loss"] > 0
    assert json.loads((tmp_path / "run" / "eval.json").read_text()) == results
    state = read_state(checkpoint_dir(tmp_path / "run", 24))
    assert state["split"] == {"examples": LABELLED, "train": [0, cut], "held_out": [cut, LABELLED]}
    assert state["reader"]["example_range"] == [0, cut]

    # a resume keeps the checkpoint's split even when the configuration now holds nothing out
    trained.clear(), converted.clear()
    resumed = train(
        cfg.model_copy(update={"holdout_examples": 0}),
        labelled["bert"],
        tmp_path / "resumed",
        resume=checkpoint_dir(tmp_path / "run", 12),
        progress=False,
    )
    assert all(i < cut for i in trained) and len(trained) == 12 * 16
    assert read_state(checkpoint_dir(tmp_path / "resumed", 24))["reader"] == state["reader"]
    assert resumed["example_range"] == [cut, LABELLED]


def test_gpt_held_out_perplexity(labelled, tmp_path, monkeypatch):
    trained, converted = record_examples(monkeypatch)
    cfg = TrainConfig(
        task="gpt", model="gpt-tiny", steps=4, batch_size=8, num_workers=0, log_every=4, checkpoint_every=0, holdout_examples=16
    )
    results = train(cfg, labelled["gpt"], tmp_path / "run", progress=False)
    assert all(i < LABELLED - 16 for i in trained) and converted[len(trained) :] == list(range(LABELLED - 16, LABELLED))
    assert {"loss", "accuracy", "perplexity"} <= results.keys() and results["example_range"] == [LABELLED - 16, LABELLED]
    assert results["perplexity"] == pytest.approx(math.exp(results["loss"])) and results["examples"] == 16
    assert json.loads((tmp_path / "run" / "eval.json").read_text()) == results


def test_holdout_zero_trains_on_everything_and_says_there_is_no_evaluation(labelled, tmp_path, monkeypatch, caplog):
    trained, _ = record_examples(monkeypatch)
    cfg = TrainConfig(model="bert-tiny", steps=20, batch_size=16, num_workers=0, log_every=10, checkpoint_every=0, holdout_examples=0)
    with caplog.at_level(logging.WARNING, logger="corpusforge.trainer.loop"):
        assert train(cfg, labelled["bert"], tmp_path / "run", progress=False) == {}
    assert "no held-out evaluation" in caplog.text
    assert not (tmp_path / "run" / "eval.json").exists()
    first_epoch = trained[: LABELLED // 16 * 16]
    assert len(set(first_epoch)) == len(first_epoch) and max(first_epoch) >= LABELLED - 30  # the default held-out tail too
    assert read_state(checkpoint_dir(tmp_path / "run", 20))["split"]["held_out"] is None


def corrupt_copy(source: Path, target: Path, how: str) -> Path:
    shutil.copytree(source, target)
    shard = target / read_manifest(target).shards[0].file
    data = bytearray(shard.read_bytes())
    if how == "truncate":
        shard.write_bytes(data[: len(data) // 2])
    else:  # same size, one flipped byte in the middle of the token ids: only the checksum can tell
        data[len(data) // 2] ^= 0xFF
        shard.write_bytes(bytes(data))
    return shard


@pytest.mark.parametrize("how", ["truncate", "flip"])
def test_damaged_shard_fails_naming_the_file(books, tmp_path, how):
    shard = corrupt_copy(books["bert-train"], tmp_path / "shards", how)
    cfg = TrainConfig(model="bert-tiny", steps=2, batch_size=8, num_workers=0)
    with pytest.raises(ShardError, match=shard.name) as error:
        train(cfg, tmp_path / "shards", tmp_path / "run", progress=False)
    assert ("bytes" in str(error.value)) if how == "truncate" else ("sha256" in str(error.value))
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_truncated_shard_fails_by_name_even_unverified(books, tmp_path):
    """With verification off the reader still checks sizes when it opens a shard."""
    shard = corrupt_copy(books["bert-train"], tmp_path / "shards", "truncate")
    cfg = TrainConfig(model="bert-tiny", steps=2, batch_size=8, num_workers=0, verify_shards=False)
    with pytest.raises(ShardError, match=shard.name):
        train(cfg, tmp_path / "shards", tmp_path / "run", progress=False)


def test_interrupted_checkpoint_leaves_the_previous_one(tmp_path, monkeypatch):
    """A crash while saving step 2 leaves step 1 whole and no half directory that --resume could pick."""
    import corpusforge.trainer.checkpoint as checkpoint
    from corpusforge.trainer.models import build_model, model_config
    from corpusforge.trainer.optim import make_optimizer, make_scheduler, recipe

    model = build_model(model_config("bert-tiny", 100))
    r = recipe("bert", 10)
    optimizer = make_optimizer(model, r, torch.device("cpu"))
    scheduler = make_scheduler(optimizer, 10, r)
    checkpoint.save_checkpoint(checkpoint_dir(tmp_path, 1), model, optimizer, scheduler, {"step": 1})

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint.torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        checkpoint.save_checkpoint(checkpoint_dir(tmp_path, 2), model, optimizer, scheduler, {"step": 2})
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-00000001"]
    (tmp_path / "checkpoints" / "step-00000002.tmp-0123456789").mkdir()  # left by a killed process
    assert checkpoint.resolve_checkpoint(tmp_path) == checkpoint_dir(tmp_path, 1)
    assert read_state(checkpoint_dir(tmp_path, 1))["step"] == 1


def test_eval_every_scores_every_held_out_example_during_training(labelled, tmp_path, monkeypatch, capsys):
    trained, converted = record_examples(monkeypatch)
    cfg = TrainConfig(model="bert-tiny", steps=6, batch_size=8, num_workers=0, log_every=3, checkpoint_every=0, eval_every=2)
    results = train(cfg, labelled["bert"], tmp_path / "run", progress=False)

    cut = LABELLED - 30
    held = [r for r in read_log(tmp_path / "run" / "metrics.jsonl") if r["split"] == "held_out"]
    assert [r["step"] for r in held] == [2, 4, 6]  # every 2 steps, the last one the final evaluation
    assert all(r["examples"] == 30 and r["example_range"] == [cut, LABELLED] for r in held)
    assert held[-1] == {"step": 6, "split": "held_out", **results}
    assert held[0]["mlm_loss"] != held[1]["mlm_loss"]  # evaluated with the weights of that moment
    assert sorted(i for i in converted if i >= cut) == sorted(list(range(cut, LABELLED)) * 3)  # each example, 3 times
    assert all(i < cut for i in trained)
    train_lines = [r for r in read_log(tmp_path / "run" / "metrics.jsonl") if r["split"] == "train"]
    assert [r["step"] for r in train_lines] == [3, 6] and all("lr" in r for r in train_lines)
    assert (tmp_path / "run" / "curves.png").stat().st_size > 10_000
    closing = capsys.readouterr().out.strip().splitlines()[-1]
    assert closing.startswith("done: train loss") and f"held-out loss {results['loss']:.4f}" in closing
    assert "tokens/s" in closing and str(checkpoint_dir(tmp_path / "run", 6)) in closing


def test_partial_last_batch_counts_by_example(labelled, tmp_path):
    """Means over 30 examples in batches of 8, 8, 8, 6 equal the mean over one batch of 30."""
    from corpusforge.trainer.distributed import World
    from corpusforge.trainer.evaluate import HeldOut, evaluate
    from corpusforge.trainer.models import build_model, model_config

    model = build_model(model_config("bert-tiny", read_manifest(labelled["bert"]).vocab.size)).eval()
    world = World(0, 1, 0, torch.device("cpu"))
    held_out = HeldOut(labelled["bert"], (LABELLED - 30, LABELLED))
    vocab = read_manifest(labelled["bert"]).vocab.sha256
    in_eights = evaluate(model, held_out, TrainConfig(batch_size=8), world, vocab)
    whole = evaluate(model, held_out, TrainConfig(batch_size=30), world, vocab)
    assert in_eights["examples"] == whole["examples"] == 30
    for key in ("mlm_accuracy", "nsp_accuracy"):
        assert in_eights[key] == pytest.approx(whole[key])


def damage(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "truncate":
        path.write_bytes(data[: len(data) // 2])
    else:
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "name, how", [(WEIGHTS_NAME, "truncate"), (WEIGHTS_NAME, "flip"), (OPTIMIZER_NAME, "flip"), ("state.json", "truncate")]
)
def test_damaged_latest_checkpoint_falls_back_to_the_previous_one(labelled, tmp_path, caplog, name, how):
    from corpusforge.trainer.checkpoint import CheckpointError, resolve_checkpoint

    cfg = TrainConfig(model="bert-tiny", steps=4, batch_size=8, num_workers=0, log_every=2, checkpoint_every=2, verify_shards=False)
    run = tmp_path / "run"
    train(cfg, labelled["bert"], run, progress=False)
    damaged = Path(checkpoint_dir(run, 4)) / name
    damage(damaged, how)
    with caplog.at_level(logging.WARNING, logger="corpusforge.trainer.checkpoint"):
        assert resolve_checkpoint(run) == checkpoint_dir(run, 2)
    assert str(damaged) in caplog.text and "falling back" in caplog.text
    with pytest.raises(CheckpointError, match=str(damaged)):  # named directly, it is an error naming the file
        resolve_checkpoint(checkpoint_dir(run, 4))
    # a resume from the run directory continues from step 2 and ends where an unbroken run ends
    train(cfg, labelled["bert"], tmp_path / "resumed", resume=run, progress=False)
    train(cfg, labelled["bert"], tmp_path / "straight", progress=False)
    a = load_file(str(Path(checkpoint_dir(tmp_path / "resumed", 4)) / WEIGHTS_NAME))
    b = load_file(str(Path(checkpoint_dir(tmp_path / "straight", 4)) / WEIGHTS_NAME))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_keep_checkpoints_keeps_the_newest(labelled, tmp_path):
    cfg = TrainConfig(
        model="bert-tiny",
        steps=5,
        batch_size=8,
        num_workers=0,
        log_every=5,
        checkpoint_every=1,
        keep_checkpoints=2,
        verify_shards=False,
        holdout_examples=0,
    )
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "run" / "checkpoints" / "notes.txt").write_text("mine")  # not a checkpoint: never touched
    train(cfg, labelled["bert"], tmp_path / "run", progress=False)
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["notes.txt", "step-00000004", "step-00000005"]
    for step in (4, 5):
        files = read_state(checkpoint_dir(tmp_path / "run", step))["files"]
        assert set(files) == {WEIGHTS_NAME, OPTIMIZER_NAME} and all(len(v) == 64 for v in files.values())


def test_sigterm_writes_a_checkpoint_before_stopping(labelled, tmp_path, monkeypatch):
    """A SIGTERM during step 3 finishes that step, writes checkpoint 3 and stops; resuming it ends like a straight run."""
    import os
    import signal

    import corpusforge.trainer.loop as loop

    convert, calls = loop.to_model_inputs, []

    def signalling_convert(batch, device, task):
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return convert(batch, device, task)

    cfg = TrainConfig(
        model="bert-tiny", steps=6, batch_size=8, num_workers=0, log_every=2, checkpoint_every=0, verify_shards=False, holdout_examples=0
    )
    monkeypatch.setattr(loop, "to_model_inputs", signalling_convert)
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        train(cfg, labelled["bert"], tmp_path / "run", progress=False)
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step-00000003"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is gone after the run
    monkeypatch.setattr(loop, "to_model_inputs", convert)
    train(cfg, labelled["bert"], tmp_path / "run", resume=tmp_path / "run", progress=False)
    train(cfg, labelled["bert"], tmp_path / "straight", progress=False)
    a = load_file(str(Path(checkpoint_dir(tmp_path / "run", 6)) / WEIGHTS_NAME))
    b = load_file(str(Path(checkpoint_dir(tmp_path / "straight", 6)) / WEIGHTS_NAME))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_diverging_run_stops_with_one_line_instead_of_training_on_nan(labelled, tmp_path):
    """lr 1e30 overflows the weights after one step: the next gradient is NaN, and the run says so and stops."""
    from corpusforge.trainer.loop import TrainingDiverged

    cfg = TrainConfig(
        model="bert-tiny", steps=10, batch_size=8, lr=1e30, warmup_steps=0, log_every=1, checkpoint_every=1, holdout_examples=0
    )
    with pytest.raises(TrainingDiverged, match=r"training diverged at step \d+: gradient norm nan .* try a lower train.lr") as error:
        train(cfg, labelled["bert"], tmp_path / "run", progress=False)
    step = int(str(error.value).split("step ")[1].split(":")[0])
    saved = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    assert saved == [Path(checkpoint_dir(tmp_path / "run", s)).name for s in range(1, step)]  # none with or after the NaN
