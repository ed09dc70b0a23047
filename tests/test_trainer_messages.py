"""What ``train``, ``finetune``, ``generate`` and ``export`` tell a new user, and who may read what they write.

Real commands through typer's CliRunner on tiny shards: a bert-tiny run of 4 steps (held-out figures
every 2), its export, a 1-epoch SST-2 fine-tune on 32 examples, and a 2-step gpt-tiny run to sample from.
"""

from __future__ import annotations

import csv
import json
import os
import re
from pathlib import Path

import pytest
from shard_factory import bert_tokenizer_json, gpt_tokenizer_json, random_bert_columns, random_gpt_columns, write_shards
from typer.testing import CliRunner

from corpusforge.cli import app

EXAMPLES = 100  # 10 held out: min(train.holdout_examples, N // 10)
QUIET = ["--set", "train.num_workers=0"]


@pytest.fixture(scope="module")
def bert(tmp_path_factory, shared_data, one_thread) -> dict:
    """``train`` (4 steps, --eval-every 2) then ``export`` under umask 022: their output and folders."""
    directory = tmp_path_factory.mktemp("bert")
    tokenizer = bert_tokenizer_json(shared_data / "vocab" / "bert-base-uncased" / "vocab.txt", directory)
    shards = write_shards(
        directory / "shards", random_bert_columns(EXAMPLES, max_seq_length=32, max_predictions=5), [EXAMPLES], tokenizer_json=tokenizer
    )
    run, hf = directory / "run", directory / "hf"
    previous = os.umask(0o022)
    try:
        trained = CliRunner().invoke(
            app,
            ["train", "--shards", str(shards), "--out", str(run), "--model", "bert-tiny", "--steps", "4", "--batch-size", "8"]
            + ["--eval-every", "2", *QUIET],
        )
        exported = CliRunner().invoke(app, ["export", str(run), str(hf)])
    finally:
        os.umask(previous)
    assert trained.exit_code == 0, trained.output
    assert exported.exit_code == 0, exported.output
    return {"output": trained.output, "run": run, "hf": hf}


def test_train_prints_what_it_is_about_to_do(bert):
    header = bert["output"].split("eval:")[0]
    assert re.search(r"bert-tiny, [\d,]+ parameters", header), header
    assert "cpu, torch threads 1" in header
    assert "90 training, 10 held out" in header
    assert "4 x 256 tokens (8 examples x 32 tokens)" in header
    assert header.index("parameters") < header.index("step 2  held-out")  # before the steps, not after


def test_held_out_figures_at_eval_every_reach_the_terminal(bert):
    lines = re.findall(r"step \d+  held-out [^\r\n]*", bert["output"])  # the final evaluation has its own "eval:" line
    assert len(lines) == 1 and lines[0].startswith("step 2  held-out loss "), bert["output"]
    logged = [json.loads(line) for line in (bert["run"] / "metrics.jsonl").read_text().splitlines()]
    at_2 = next(r for r in logged if r["split"] == "held_out" and r["step"] == 2)
    assert f"mlm_accuracy {at_2['mlm_accuracy']:.4g}" in lines[0]


def test_train_and_export_files_are_readable_by_group_and_others(bert):
    written = [p for folder in (bert["run"], bert["hf"]) for p in folder.rglob("*") if p.is_file()]
    assert {"model.safetensors", "config.json", "tokenizer.json", "state.json"} <= {p.name for p in written}
    private = {str(p): oct(p.stat().st_mode & 0o777) for p in written if p.stat().st_mode & 0o044 != 0o044}
    assert not private


def dev_labels(glue: Path, folder: str, column: int, header: bool) -> list[int]:
    with open(glue / folder / "dev.tsv", encoding="utf-8-sig", newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [int(row[column]) for row in rows[1 if header else 0 :]]


def test_finetune_reports_the_majority_baseline_and_says_when_it_is_not_beaten(bert, shared_data, tmp_path):
    out = tmp_path / "sst2"
    args = ["--epochs", "1", "--max-train-examples", "32", "--max-seq-length", "32", "--lr", "1e-7", "--device", "cpu"]
    result = CliRunner().invoke(
        app, ["finetune", str(bert["run"]), "--task", "sst2", "--glue-dir", str(shared_data / "glue"), "--out", str(out), *args]
    )
    assert result.exit_code == 0, result.output
    labels = dev_labels(shared_data / "glue", "SST-2", 1, header=True)
    majority = max(labels.count(0), labels.count(1)) / len(labels)  # 444 of 872 positive
    results = json.loads((out / "results.json").read_text())
    assert results["majority_baseline"] == {"label": 1, "accuracy": pytest.approx(majority)}
    assert f"majority-class baseline accuracy {majority:.4f}" in result.output
    assert results["dev"] <= majority  # a classifier barely moved from its initial weights
    verdict = f"dev accuracy {results['dev']:.4f} is not above the majority-class baseline {majority:.4f}"
    assert verdict in result.output and "learnt nothing yet" in result.output


def test_majority_baselines_of_the_other_tasks(shared_data):
    from corpusforge.trainer.glue import get_task, majority_baseline

    cola = dev_labels(shared_data / "glue", "CoLA", 1, header=False)
    assert majority_baseline(get_task("cola"), cola) == {"label": 1, "mcc": 0.0, "accuracy": pytest.approx(721 / 1043)}
    mrpc = dev_labels(shared_data / "glue", "MRPC", 0, header=True)  # 279 of 408 paraphrases: always "yes" has F1 2p/(1+p)
    assert majority_baseline(get_task("mrpc"), mrpc) == {
        "label": 1,
        "f1": pytest.approx(2 * 279 / (2 * 279 + 129)),
        "accuracy": pytest.approx(279 / 408),
    }


def test_generate_shows_the_prompt_then_the_continuation(tmp_path, shared_data, one_thread):
    vocab = shared_data / "vocab" / "gpt2"
    tokenizer = gpt_tokenizer_json(vocab / "vocab.json", vocab / "merges.txt", tmp_path)
    shards = write_shards(tmp_path / "shards", random_gpt_columns(32, seq_len=32), [32], task="gpt", tokenizer_json=tokenizer)
    runner = CliRunner()
    trained = runner.invoke(
        app,
        [
            "train",
            "--shards",
            str(shards),
            "--out",
            str(tmp_path / "run"),
            "--model",
            "gpt-tiny",
            "--steps",
            "2",
            "--batch-size",
            "8",
            *QUIET,
        ],
    )
    assert trained.exit_code == 0, trained.output
    result = runner.invoke(
        app, ["generate", str(tmp_path / "run"), "--prompt", "Once upon a time", "--max-new-tokens", "12", "--device", "cpu"]
    )
    assert result.exit_code == 0, result.output
    text = result.output.removesuffix("\n")
    assert text.startswith("Once upon a time") and len(text) > len("Once upon a time"), result.output
    assert text.strip() and text.splitlines()[-1].strip()  # no blank lines at the end
