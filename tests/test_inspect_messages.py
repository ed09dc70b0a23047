"""What ``docs inspect`` and ``shards inspect/verify`` tell a new user: the build's input counts, what the GPT
window width means, a missing folder as one error line, and what an OK stands for."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
from shard_factory import bert_tokenizer_json, random_bert_columns, random_gpt_columns, write_shards
from typer.testing import CliRunner

from corpusforge.cli import app

runner = CliRunner()
DOCUMENT_STAGES = '["books", "wikipedia", "clean", "dedup", "near_dedup", "documents"]'


@pytest.fixture(scope="module")
def documents_build(tmp_path_factory) -> Path:
    """The bundled demo up to its documents (no vocabulary or shards: they play no part here)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    out = tmp_path_factory.mktemp("demo") / "out"
    sets = [f"run.output_dir={json.dumps(str(out))}", f"run.stages={DOCUMENT_STAGES}", 'run.direct_running_mode="in_memory"']
    result = runner.invoke(app, ["build", "-q", *[arg for value in sets for arg in ("--set", value)]])
    root.handlers[:], root.level = handlers, level  # ``build`` configures the root logger, as a command does
    assert result.exit_code == 0, result.output
    return out


def _inputs(path: Path) -> dict[str, int | None]:
    result = runner.invoke(app, ["docs", "inspect", str(path), "--json"])
    assert result.exit_code == 0, result.output
    return {source: figures["inputs"] for source, figures in json.loads(result.stdout)["sources"].items()}


def test_docs_inspect_shows_the_records_the_build_read(documents_build):
    counters = json.loads((documents_build / "manifest.json").read_text())["counters"]
    read = {source: figures["inputs"] for source, figures in counters.items()}
    assert set(read) == {"books", "wikipedia"} and all(count > 0 for count in read.values())
    assert _inputs(documents_build) == read
    assert _inputs(documents_build / "documents") == read
    table = runner.invoke(app, ["docs", "inspect", str(documents_build)]).stdout
    for source, figures in counters.items():
        row = next(line for line in table.splitlines() if f" {source} " in line)
        assert row.split("│")[2:4] == [f"{figures['inputs']:>7} ", f"{figures['documents']:>10} "], row


def test_docs_inspect_of_a_lone_parquet_file_shows_no_input_count(documents_build):
    part = next((documents_build / "documents").glob("part-*.parquet"))
    assert set(_inputs(part).values()) == {None}
    table = runner.invoke(app, ["docs", "inspect", str(part)]).stdout
    assert "inputs" not in table.split("length in words")[0].split("\n", 3)[2]  # the header row
    assert "no inputs column: records read per source are counted in a build's manifest.json" in table


def test_shards_inspect_explains_the_gpt_window(tmp_path):
    gpt = write_shards(tmp_path / "gpt", random_gpt_columns(6, seq_len=16), [6], task="gpt")
    shown = runner.invoke(app, ["shards", "inspect", str(gpt)])
    assert shown.exit_code == 0, shown.output
    assert re.search(r"│ window +│ +17 tokens \(16 inputs \+ 1 shifted target\) │", shown.stdout), shown.stdout
    bert = write_shards(tmp_path / "bert", random_bert_columns(6, max_seq_length=32, max_predictions=5), [6])
    kept = runner.invoke(app, ["shards", "inspect", str(bert)]).stdout
    assert "sequence length" in kept and "shifted target" not in kept


@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_shards_commands_on_a_missing_folder_exit_2_with_one_line(command, tmp_path):
    result = runner.invoke(app, ["shards", command, str(tmp_path / "nowhere")])
    assert result.exit_code == 2
    assert result.output.splitlines() == [f"error: {tmp_path / 'nowhere'}: no such directory"]


def test_shards_verify_says_what_it_checked(tmp_path, shared_data):
    tokenizer_json = bert_tokenizer_json(shared_data / "vocab" / "bert-base-uncased" / "vocab.txt", tmp_path)
    columns = random_bert_columns(10, max_seq_length=32, max_predictions=5)
    shards = write_shards(tmp_path, columns, [6, 4], tokenizer_json=tokenizer_json)
    result = runner.invoke(app, ["shards", "verify", str(shards)])
    assert result.exit_code == 0, result.output
    tokens = int(columns["length"].sum())
    assert result.stdout.splitlines()[-2:] == [
        f"checked 2 shards, 10 examples, {tokens:,} tokens: every listed file present and named in order, "
        "no stray, half-written or spill files; sizes and sha256 match the manifest; Arrow schema, example and token counts, "
        "no nulls, lengths within 1..32; BERT segment lengths, masked positions and weights, NSP labels; totals; "
        "vocabulary sha256 and id type",
        f"{shards}: OK",
    ]
