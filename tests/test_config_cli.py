"""``config show``/``config reference``, docs/config.md, ``--version``, ``--set`` errors and the help text."""

from __future__ import annotations

import tomllib
from pathlib import Path

from typer.testing import CliRunner

import corpusforge
from corpusforge.cli import DEMO_CONFIG, app
from corpusforge.config_reference import keys, reference_markdown
from corpusforge.core.config import Config, load_config

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def test_docs_config_md_is_up_to_date():
    assert (ROOT / "docs" / "config.md").read_text(encoding="utf-8") == reference_markdown(), (
        "docs/config.md is stale: run `corpusforge config reference > docs/config.md`"
    )


def test_every_key_has_a_meaning_and_is_in_the_reference():
    reference = reference_markdown()
    for key in keys(Config()):
        assert key.meaning, f"{key.name} has no description= in core/config.py"
        assert f"| `{key.name.rsplit('.', 1)[1]}` |" in reference


def test_config_show_prints_every_key_as_toml_that_loads_back():
    result = runner.invoke(app, ["config", "show", "--set", "clean.min_words=50", "--set", "webtext.fetch.retries=7"])
    assert result.exit_code == 0, result.output
    expected = load_config(DEMO_CONFIG, ["clean.min_words=50", "webtext.fetch.retries=7"])
    shown = Config.model_validate(tomllib.loads(result.output))  # unset keys are comments: their default is None
    assert shown == expected
    assert "min_words = 50" in result.output and "# documents with fewer words are rejected" in result.output
    lines = [line for line in result.output.splitlines() if line and not line.startswith("[")]
    assert len(lines) == len(keys(expected))


def test_set_typo_names_the_flag_and_suggests_the_key():
    result = runner.invoke(app, ["build", "--set", "clean.min_word=50"])
    assert result.exit_code == 2
    assert "--set clean.min_word=50: no key 'clean.min_word'; did you mean 'clean.min_words'?" in result.output
    assert "demo.toml" not in result.output and "Extra inputs" not in result.output
    bad_value = runner.invoke(app, ["config", "show", "--set", "bert.dupe_factor=many"])
    assert bad_value.exit_code == 2 and "--set bert.dupe_factor=many: bert.dupe_factor expects a whole number" in bad_value.output
    no_equals = runner.invoke(app, ["config", "show", "--set", "clean.min_words"])
    assert no_equals.exit_code == 2 and "--set expects key=value" in no_equals.output


def test_a_bad_key_in_the_file_blames_the_file(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("[vocab]\nbpe_vocab_sise = 100\n")
    result = runner.invoke(app, ["config", "show", str(config)])
    assert result.exit_code == 2 and f"{config}: no key 'vocab.bpe_vocab_sise'; did you mean 'vocab.bpe_vocab_size'?" in result.output


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"corpusforge {corpusforge.__version__}"


def test_train_help_is_literal_uncut_and_shows_defaults():
    result = runner.invoke(app, ["train", "--help"], terminal_width=80)
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "its [train] section is the base" in text
    assert "…" not in result.output
    assert "[default: train.steps = 1000]" in text and "[default: train.batch_size = 32]" in text
    assert "gpt-small for GPT shards" in text


def test_train_picks_the_model_family_from_the_shards(tmp_path, shared_data):
    from shard_factory import gpt_tokenizer_json, random_gpt_columns, write_shards

    from corpusforge.trainer.checkpoint import read_state, resolve_checkpoint

    vocab = shared_data / "vocab" / "gpt2"
    (tmp_path / "gpt").mkdir()
    shards = write_shards(
        tmp_path / "gpt",
        random_gpt_columns(16, seq_len=16),
        [16],
        task="gpt",
        tokenizer_json=gpt_tokenizer_json(vocab / "vocab.json", vocab / "merges.txt", tmp_path / "gpt"),
    )
    quick = ["--steps", "1", "--batch-size", "2", "--holdout-examples", "0", "--set", "train.num_workers=0", "--no-compile"]
    trained = runner.invoke(app, ["train", "--shards", str(shards), "--out", str(tmp_path / "run"), *quick])
    assert trained.exit_code == 0, trained.output
    state = read_state(resolve_checkpoint(tmp_path / "run"))
    assert state["train_config"]["model"] == "gpt-small" and state["task"] == "gpt"
    wrong = runner.invoke(app, ["train", "--shards", str(shards), "--model", "bert-tiny", *quick])
    assert (
        wrong.exit_code == 2
        and "--model bert-tiny is a BERT model but" in wrong.output
        and "GPT shards (e.g. --model gpt-small)" in wrong.output
    )
