"""Decontamination: documents sharing a 13-gram with an evaluation set are rejected, counted, with where it came from."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from corpusforge.build import run_build
from corpusforge.cli import app
from corpusforge.core.config import load_config
from corpusforge.corpora.decontaminate import Decontaminator, comparable
from corpusforge.pipeline.documents_io import output_files

ROOT = Path(__file__).resolve().parents[1]
# SST-2 dev.tsv line 7 (PTB-tokenised, 20 words), line 6 and line 10 (a split contraction)
LONG = "although laced with humor and a few fanciful touches , the film is a refreshingly serious look at young women ."
LONG_AS_PROSE = "Although laced with humor and a few fanciful touches, the film is a refreshingly serious look at young women."
SHORT_AS_PROSE = "It's slow -- very, very slow."  # 5 words: under min_words, never a text
CONTRACTED = "You don't have to know about music to appreciate the film's easygoing blend of comedy and romance."  # line 10


@pytest.fixture(scope="module")
def sst2_dev(shared_data: Path) -> str:
    return str(shared_data / "glue" / "SST-2" / "dev.tsv")


def test_contractions_and_punctuation_compare_equal() -> None:
    assert comparable("it 's a charming journey .") == comparable("It's a charming journey.") == b"its a charming journey"
    assert comparable("you do n't -lrb- ever -rrb- know") == comparable("You don't (ever) know")


def test_an_evaluation_sentence_inside_prose_is_found_with_its_file_and_line(sst2_dev: str) -> None:
    table = Decontaminator.from_files([sst2_dev])
    assert 700 < table.texts < 872  # the dev sentences of 8 words or more (767 of 872); the labels are not texts
    book = "The weather was mild that spring. " * 50 + LONG_AS_PROSE + " And then they left for the coast. " * 50
    assert table.match(book) == "SST-2/dev.tsv:7"
    assert table.match("The weather was mild that spring. " * 200) is None
    assert table.match(f"Chapter one. {CONTRACTED} The end.") == "SST-2/dev.tsv:10"


def test_thirteen_consecutive_words_are_enough_and_twelve_are_not(sst2_dev: str) -> None:
    table = Decontaminator.from_files([sst2_dev])
    words = LONG_AS_PROSE.split()
    assert table.match("Prologue. " + " ".join(words[:13]) + " Epilogue.") == "SST-2/dev.tsv:7"
    assert table.match("Prologue. " + " ".join(words[:12]) + " Epilogue.") is None


def test_short_texts_count_whole_and_fields_under_min_words_do_not(tmp_path: Path) -> None:
    evaluation = tmp_path / "eval.jsonl"
    evaluation.write_text(
        json.dumps({"id": "q1", "text": "the quick brown fox jumps over the lazy dog"}) + "\n" + json.dumps({"text": SHORT_AS_PROSE}) + "\n"
    )
    table = Decontaminator.from_files([str(evaluation)])
    assert table.texts == 1
    assert table.match("Yesterday the quick brown fox jumps over the lazy dog again.") == "tmp/eval.jsonl:1".replace("tmp", tmp_path.name)
    assert table.match("Yesterday the quick brown fox jumps over the lazy cat again.") is None
    assert table.match(f"He said: {SHORT_AS_PROSE}") is None


def test_a_book_holding_an_sst2_dev_sentence_is_rejected_as_contaminated(tmp_path: Path, samples: Path, sst2_dev: str) -> None:
    books = tmp_path / "books"
    shutil.copytree(samples / "books", books, ignore=shutil.ignore_patterns("copies", "fr", "README.md"))
    planted = books / "salt_and_iron.txt"
    paragraphs = planted.read_text(encoding="utf-8").split("\n\n")
    paragraphs.insert(len(paragraphs) // 2, LONG_AS_PROSE)
    planted.write_text("\n\n".join(paragraphs), encoding="utf-8")
    cfg = load_config(
        ROOT / "configs" / "demo.toml",
        [
            f"run.output_dir={json.dumps(str(tmp_path / 'out'))}",
            'run.stages=["books", "clean", "dedup", "documents"]',
            f"books.paths=[{json.dumps(str(books))}]",
            f"clean.decontaminate=[{json.dumps(sst2_dev)}]",
        ],
    )
    result = run_build(cfg)
    rejects = pq.read_table(output_files(tmp_path / "out" / "rejects")).to_pylist()
    contaminated = [r for r in rejects if r["reason"] == "contaminated"]
    assert [(r["key"], r["detail"]) for r in contaminated] == [("Salt and Iron", "shares a 13-gram with SST-2/dev.tsv:7")]
    assert result.stats["books"].rejects["contaminated"] == 1
    kept = pq.read_table(output_files(tmp_path / "out" / "documents"), columns=["title"]).column("title").to_pylist()
    assert "Salt and Iron" not in kept and len(kept) == len(list(books.glob("*.txt"))) - 1


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "clean.decontaminate file does not exist: "), ('{"text": "a b c d e f g h i"}\n{oops\n', ":2: not a JSON line")],
)
def test_a_missing_or_broken_evaluation_file_is_one_line_before_anything_runs(tmp_path: Path, content: str | None, message: str) -> None:
    evaluation = tmp_path / "eval.jsonl"
    if content is not None:
        evaluation.write_text(content)
    result = CliRunner().invoke(
        app, ["build", "--set", f'run.output_dir="{tmp_path / "out"}"', "--set", f'clean.decontaminate=["{evaluation}"]']
    )
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output, result.output
    assert not (tmp_path / "out").exists()
