"""HF export: transformers loads the exported directory and computes the same logits as our model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from shard_factory import bert_tokenizer_json, gpt_tokenizer_json, random_bert_columns, random_gpt_columns, write_shards
from transformers import AutoTokenizer, BertForPreTraining, GPT2LMHeadModel
from typer.testing import CliRunner

from corpusforge.core import storage
from corpusforge.core.config import TrainConfig
from corpusforge.trainer.checkpoint import checkpoint_dir, load_weights, read_state, resolve_checkpoint
from corpusforge.trainer.cli import app
from corpusforge.trainer.data import ShardStream, to_model_inputs
from corpusforge.trainer.export import export_hf
from corpusforge.trainer.loop import train
from corpusforge.trainer.models import ModelConfig, build_model, gpt_inputs


def trained_checkpoint(shards: Path, run_dir: Path, model: str) -> str:
    """A few real optimizer steps, so no weight is still at its initial value (biases, LayerNorms)."""
    cfg = TrainConfig(model=model, steps=3, batch_size=8, lr=1e-3, num_workers=0, log_every=1, seed=3)
    train(cfg, shards, run_dir, progress=False)
    return resolve_checkpoint(run_dir)


def ours(checkpoint: str) -> torch.nn.Module:
    model = build_model(ModelConfig(**read_state(checkpoint)["model_config"]))
    load_weights(checkpoint, model)
    return model.eval()


def first_batch(shards: Path) -> dict[str, torch.Tensor]:
    stream = ShardStream(shards, 8, shuffle=False)
    return to_model_inputs(next(iter(stream)), "cpu", stream.task)


@pytest.fixture(scope="module")
def bert_shards(tmp_path_factory, shared_data) -> Path:
    directory = tmp_path_factory.mktemp("bert-shards")
    tokenizer = bert_tokenizer_json(shared_data / "vocab" / "bert-base-uncased" / "vocab.txt", directory)
    return write_shards(directory, random_bert_columns(64, max_seq_length=64, max_predictions=10), [64], tokenizer_json=tokenizer)


@pytest.fixture(scope="module")
def gpt_shards(tmp_path_factory, shared_data) -> Path:
    directory = tmp_path_factory.mktemp("gpt-shards")
    vocab = shared_data / "vocab" / "gpt2"
    tokenizer = gpt_tokenizer_json(vocab / "vocab.json", vocab / "merges.txt", directory)
    return write_shards(directory, random_gpt_columns(64, seq_len=48), [64], task="gpt", tokenizer_json=tokenizer)


def test_bert_export_logits_match_transformers(bert_shards, tmp_path):
    """Through the command line: ``train`` a few steps, then ``export RUN OUT --format hf``."""
    run, out = tmp_path / "run", tmp_path / "hf"
    trained = CliRunner().invoke(
        app,
        [
            "train",
            "--shards",
            str(bert_shards),
            "--out",
            str(run),
            "--model",
            "bert-tiny",
            "--steps",
            "3",
            "--batch-size",
            "8",
            "--lr",
            "1e-3",
            "--set",
            "train.num_workers=0",
            "--set",
            "train.seed=3",
        ],
    )
    assert trained.exit_code == 0, trained.output
    exported = CliRunner().invoke(app, ["export", str(run), str(out), "--format", "hf"])
    assert exported.exit_code == 0 and str(out) in exported.output, exported.output
    ckpt = resolve_checkpoint(run)
    assert Path(ckpt).name == "step-00000003" and read_state(ckpt)["train_config"]["task"] == "bert"
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= {p.name for p in out.iterdir()}

    batch = first_batch(bert_shards)
    hf = BertForPreTraining.from_pretrained(out, attn_implementation="eager").eval()
    with torch.no_grad():
        mine = ours(ckpt)(**batch)
        theirs = hf(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"].long(),
            token_type_ids=batch["token_type_ids"],
        )
    index = batch["masked_lm_positions"].unsqueeze(-1).expand(-1, -1, theirs.prediction_logits.size(-1))
    their_mlm = torch.gather(theirs.prediction_logits, 1, index)
    vocab = their_mlm.size(-1)
    assert vocab == 30522 and mine["mlm_logits"].size(-1) == 30528  # padded to a multiple of 64 in training only
    assert (mine["mlm_logits"][..., :vocab] - their_mlm).abs().max().item() < 1e-4
    assert (mine["nsp_logits"] - theirs.seq_relationship_logits).abs().max().item() < 1e-4
    # the tokenizer files come along and encode with the training vocabulary
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.mask_token == "[MASK]" and tokenizer.convert_tokens_to_ids("[MASK]") == 103
    assert tokenizer("the cat")["input_ids"] == [101, 1996, 4937, 102]
    assert tokenizer.model_max_length == 512 and tokenizer("THE Cat")["input_ids"] == [101, 1996, 4937, 102]
    # a class every supported transformers version resolves (5.x's own "TokenizersBackend" is unknown to 4.x)
    assert json.loads((out / "tokenizer_config.json").read_text())["tokenizer_class"] == "BertTokenizerFast"


def test_gpt_export_logits_match_transformers(gpt_shards, tmp_path):
    ckpt = trained_checkpoint(gpt_shards, tmp_path / "run", "gpt-tiny")
    out = Path(export_hf(ckpt, tmp_path / "hf"))
    batch = first_batch(gpt_shards)
    idx = gpt_inputs(batch["input_ids"], batch["length"])["idx"]
    hf = GPT2LMHeadModel.from_pretrained(out, attn_implementation="eager").eval()
    with torch.no_grad():
        mine = ours(ckpt)(idx)["logits"]
        theirs = hf(input_ids=idx).logits
    assert theirs.shape == (8, 48, 50257) and mine.shape == (8, 48, 50304)
    assert (mine[..., :50257] - theirs).abs().max().item() < 1e-4
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.eos_token == "<|endoftext|>" and tokenizer("Hello world")["input_ids"] == [15496, 995]
    assert tokenizer.pad_token == "<|endoftext|>" and tokenizer.model_max_length == 1024
    assert tokenizer(["Hi", "Hello world"], padding=True)["input_ids"][0] == [17250, 50256]
    assert json.loads((out / "tokenizer_config.json").read_text())["tokenizer_class"] == "GPT2TokenizerFast"


def test_pre_ln_bert_refuses_export(bert_shards, tmp_path):
    cfg = TrainConfig(model="bert-tiny", steps=1, batch_size=8, num_workers=0, pre_ln=True)
    train(cfg, bert_shards, tmp_path / "run", progress=False)
    with pytest.raises(ValueError, match="pre-LN"):
        export_hf(tmp_path / "run", tmp_path / "hf")
    refused = CliRunner().invoke(app, ["export", str(tmp_path / "run"), str(tmp_path / "hf")])
    assert refused.exit_code == 2 and "pre-LN" in refused.output and not (tmp_path / "hf").exists()


def test_export_never_deletes_what_it_did_not_write(bert_shards, tmp_path):
    """A non-empty folder is refused and left as it was; only a previous export is replaced, and only with --force."""
    ckpt = trained_checkpoint(bert_shards, tmp_path / "run", "bert-tiny")
    runner = CliRunner()
    build = tmp_path / "build"
    (build / "shards").mkdir(parents=True)
    (build / "manifest.json").write_text("{}")
    (build / "shards" / "part-0.arrow").write_bytes(b"data")
    for args in ([], ["--force"]):
        refused = runner.invoke(app, ["export", str(ckpt), str(build), *args])
        assert refused.exit_code == 2 and "not empty" in refused.output, refused.output
    assert sorted(str(p.relative_to(build)) for p in build.rglob("*")) == ["manifest.json", "shards", "shards/part-0.arrow"]
    assert (build / "manifest.json").read_text() == "{}"

    empty = tmp_path / "empty"
    empty.mkdir()
    assert runner.invoke(app, ["export", str(ckpt), str(empty)]).exit_code == 0
    first = (empty / "model.safetensors").read_bytes()
    again = runner.invoke(app, ["export", str(ckpt), str(empty)])
    assert again.exit_code == 2 and "--force" in again.output
    forced = runner.invoke(app, ["export", str(ckpt), str(empty), "--force"])
    assert forced.exit_code == 0 and (empty / "model.safetensors").read_bytes() == first
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]  # no leftovers beside it

    (empty / "notes.txt").write_text("mine")  # a file the export did not write: --force no longer replaces the folder
    kept = runner.invoke(app, ["export", str(ckpt), str(empty), "--force"])
    assert kept.exit_code == 2 and "notes.txt" in kept.output
    assert (empty / "notes.txt").read_text() == "mine" and (empty / "config.json").is_file()


def test_a_run_folder_and_an_export_may_live_behind_a_uri(gpt_shards, tmp_path):
    """fsspec's memory:// stands in for s3:// or gs://: trained, resumed and exported there, a run ends as a local one does."""
    cfg = TrainConfig(model="gpt-tiny", steps=4, batch_size=8, lr=1e-3, num_workers=0, log_every=2, checkpoint_every=2, seed=3)
    local, remote = str(tmp_path / "run"), f"memory://{tmp_path.name}/run"
    train(cfg, gpt_shards, local, progress=False)
    train(cfg, gpt_shards, remote, progress=False)
    storage.remove_tree(checkpoint_dir(remote, 4))  # as if stopped after step 2
    train(cfg, gpt_shards, remote, resume=remote, progress=False)
    assert resolve_checkpoint(remote) == checkpoint_dir(remote, 4)
    mine, theirs = ours(checkpoint_dir(local, 4)).state_dict(), ours(checkpoint_dir(remote, 4)).state_dict()
    assert all(torch.equal(mine[name], theirs[name]) for name in mine)
    assert storage.read_json(storage.join(remote, "eval.json")) == storage.read_json(storage.join(local, "eval.json"))
    assert {"metrics.jsonl", "curves.png", "tensorboard"} <= {storage.name(path) for path in storage.listdir(remote)}

    exported = export_hf(local, tmp_path / "hf"), export_hf(remote, f"memory://{tmp_path.name}/hf")
    assert [storage.name(path) for path in storage.listdir(exported[0])] == [storage.name(path) for path in storage.listdir(exported[1])]
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        assert storage.sha256(storage.join(exported[0], name)) == storage.sha256(storage.join(exported[1], name))
