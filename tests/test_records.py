"""Records source: JSON lines (plain, .gz, .zst), Parquet and datasets' save_to_disk folders give the same
documents and ids; bad records become rejects with their reasons; every record read is accounted for."""

from __future__ import annotations

import gzip
import json
import lzma
import pickle
import re
from collections import Counter
from pathlib import Path

import datasets
import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from corpusforge.core.config import RecordsConfig
from corpusforge.corpora.document import Document, Reject, check_accounted, make_id
from corpusforge.corpora.records import RecordReader, RecordTask, record_files, record_tasks

ROWS = [
    {"id": 100 + 7 * i, "title": f"Title {i}", "text": f"Record {i} opens here.\n\nIts second paragraph, number {i}."} for i in range(7)
]


def write_jsonl(path: Path, rows: list[dict], opener=open, blank_lines: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with opener(path, "wt", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + ("\n\n" if blank_lines else "\n"))
    return path


def write_zst(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(zstandard.ZstdCompressor().compress("".join(json.dumps(r) + "\n" for r in rows).encode("utf-8")))
    return path


def write_parquet(path: Path, rows: list[dict], row_group_size: int = 3) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=row_group_size)
    return path


def save_to_disk(path: Path, rows: list[dict], num_shards: int = 2) -> Path:
    datasets.Dataset.from_list(rows).save_to_disk(str(path), num_shards=num_shards)
    return path


def read_all(cfg: RecordsConfig) -> tuple[list[Document | Reject], Counter[str]]:
    counts: Counter[str] = Counter()
    reader = pickle.loads(pickle.dumps(RecordReader(cfg)))  # Beam ships the reader and its tasks pickled
    records = [record for task in record_tasks(cfg) for record in reader(pickle.loads(pickle.dumps(task)), counts)]
    check_accounted("records", counts, len(records))
    return records, counts


@pytest.fixture
def every_format(tmp_path: Path) -> dict[str, Path]:
    """The same seven records as one entry named ``corpus`` in each format (and split over two files)."""
    write_jsonl(tmp_path / "split" / "corpus" / "a.json", ROWS[:4])
    write_jsonl(tmp_path / "split" / "corpus" / "b.jsonl.gz", ROWS[4:], opener=gzip.open)
    return {
        "jsonl": write_jsonl(tmp_path / "plain" / "corpus.jsonl", ROWS, blank_lines=True),
        "gz": write_jsonl(tmp_path / "gz" / "corpus.jsonl.gz", ROWS, opener=gzip.open),
        "zst": write_zst(tmp_path / "zst" / "corpus.ndjson.zst", ROWS),
        "xz": write_jsonl(tmp_path / "xz" / "corpus.jsonl.xz", ROWS, opener=lzma.open),
        "parquet": write_parquet(tmp_path / "parquet" / "corpus.parquet", ROWS),
        "save_to_disk": save_to_disk(tmp_path / "hf" / "corpus", ROWS),
        "split": tmp_path / "split" / "corpus",
    }


def test_positions_give_the_same_ids_in_every_format(every_format: dict[str, Path]) -> None:
    expected = [(make_id("records", f"corpus:{i}"), row["text"], "") for i, row in enumerate(ROWS)]
    for name, path in every_format.items():
        records, counts = read_all(RecordsConfig(paths=[str(path)]))
        assert [(r.id, r.text, r.title) for r in records] == expected, name
        assert counts["inputs"] == len(ROWS), name


def test_a_uri_reads_like_a_local_path(every_format: dict[str, Path], tmp_path: Path) -> None:
    memory = fsspec.filesystem("memory")
    root = f"/{tmp_path.name}"
    try:
        for name, path in every_format.items():
            memory.put(str(path), f"{root}/{name}/{path.name}", recursive=path.is_dir())
        expected = [(make_id("records", f"corpus:{i}"), row["text"]) for i, row in enumerate(ROWS)]
        for name, path in every_format.items():
            records, _ = read_all(RecordsConfig(paths=[f"memory:/{root}/{name}/{path.name}"]))
            assert [(r.id, r.text) for r in records] == expected, name
    finally:
        memory.rm(root, recursive=True)


def test_id_field_gives_the_same_ids_and_titles_in_every_format(every_format: dict[str, Path]) -> None:
    expected = [(make_id("records", str(row["id"])), row["text"], row["title"]) for row in ROWS]
    for name, path in every_format.items():
        records, _ = read_all(RecordsConfig(paths=[str(path)], id_field="id", title_field="title"))
        assert [(r.id, r.text, r.title) for r in records] == expected, name


def test_meta_file_is_the_entry_name_in_every_format(every_format: dict[str, Path]) -> None:
    """Documents say which entry they came from, not which file of it: the same records give byte-identical
    documents whatever format they come in (a reject's key names the file and line)."""
    files = {name: [r.meta["file"] for r in read_all(RecordsConfig(paths=[str(path)]))[0]] for name, path in every_format.items()}
    assert {name: set(found) for name, found in files.items()} == {name: {"corpus"} for name in every_format}
    assert all(len(found) == 7 for found in files.values())


def test_parquet_is_read_one_task_per_row_group(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "corpus.parquet", ROWS, row_group_size=3)
    cfg = RecordsConfig(paths=[str(path)])
    tasks = record_tasks(cfg)
    assert tasks == [
        RecordTask(str(path), "parquet", "corpus.parquet", "corpus", first, first, group) for group, first in enumerate((0, 3, 6))
    ]
    reader = RecordReader(cfg)
    assert [[r.text for r in reader(task)] for task in tasks] == [[row["text"] for row in ROWS[i : i + 3]] for i in (0, 3, 6)]


def test_a_folder_is_numbered_over_its_files_in_order(tmp_path: Path) -> None:
    root = tmp_path / "mixed"
    write_jsonl(root / "a.jsonl", ROWS[:2], blank_lines=True)
    write_parquet(root / "b" / "c.parquet", ROWS[2:5], row_group_size=2)
    save_to_disk(root / "d", ROWS[5:], num_shards=1)
    (root / "notes.txt").write_text("not a records file")
    cfg = RecordsConfig(paths=[str(root)])
    assert record_files(cfg) == [str(root / f) for f in ("a.jsonl", "b/c.parquet", "d/data-00000-of-00001.arrow", "d/state.json")]
    tasks = record_tasks(cfg)
    assert [(t.kind, t.file, t.first, t.row_group) for t in tasks] == [
        ("jsonl", "a.jsonl", 0, 0),
        ("parquet", "b/c.parquet", 2, 0),
        ("parquet", "b/c.parquet", 4, 1),
        ("arrow", "d/data-00000-of-00001.arrow", 5, 0),
    ]


def test_a_dataset_dict_is_read_split_by_split(tmp_path: Path) -> None:
    root = tmp_path / "dict"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS[:5]), "test": datasets.Dataset.from_list(ROWS[5:])}).save_to_disk(
        str(root)
    )
    records, counts = read_all(RecordsConfig(paths=[str(root)]))
    assert [(r.meta["file"], r.text) for r in records] == [("dict", row["text"]) for row in ROWS[5:] + ROWS[:5]]  # splits in name order
    assert counts["inputs"] == 7


def test_bad_lines_become_rejects_with_their_reasons(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    lines = [
        '{"text": "A good first record."}',
        "   ",
        "not json at all",
        "[1, 2]",
        '{"body": "the text is elsewhere"}',
        '{"text": 42}',
        '{"text": " \\n\\n "}',
        b'{"text": "\xff"}'.decode("latin-1"),
        '{"text": "The last record, without a newline."}',
    ]
    path.write_bytes("\n".join(lines).encode("latin-1"))
    records, counts = read_all(RecordsConfig(paths=[str(path)]))
    rejects = [(r.reason, r.key, r.id) for r in records if isinstance(r, Reject)]
    assert rejects == [
        ("not_json", "bad.jsonl:3", make_id("records", "bad:1")),
        ("not_json", "bad.jsonl:4", make_id("records", "bad:2")),
        ("missing_text", "bad.jsonl:5", make_id("records", "bad:3")),
        ("missing_text", "bad.jsonl:6", make_id("records", "bad:4")),
        ("empty", "bad.jsonl:7", make_id("records", "bad:5")),
        ("not_json", "bad.jsonl:8", make_id("records", "bad:6")),
    ]
    details = [r.detail for r in records if isinstance(r, Reject) and r.reason == "not_json"]
    assert details[0].startswith("line 3: JSONDecodeError: Expecting value")
    assert details[1] == "line 4: a JSON list, not an object"
    assert details[2].startswith("line 8: UnicodeDecodeError")
    documents = [(r.id, r.text) for r in records if isinstance(r, Document)]
    assert documents == [
        (make_id("records", "bad:0"), "A good first record."),
        (make_id("records", "bad:7"), "The last record, without a newline."),
    ]
    assert counts["inputs"] == 8 == len(documents) + len(rejects)


def test_table_rows_without_text_or_id_are_rejects(tmp_path: Path) -> None:
    rows = [{"id": "a", "text": "Kept."}, {"id": "b", "text": None}, {"id": None, "text": "No id."}, {"id": "", "text": "Empty id."}]
    path = write_parquet(tmp_path / "t.parquet", rows, row_group_size=2)
    records, counts = read_all(RecordsConfig(paths=[str(path)], id_field="id"))
    assert [(type(r).__name__, r.id, getattr(r, "reason", ""), getattr(r, "key", "")) for r in records] == [
        ("Document", make_id("records", "a"), "", ""),
        ("Reject", make_id("records", "b"), "missing_text", "t.parquet#1"),
        ("Reject", make_id("records", "t:2"), "missing_id", "t.parquet#2"),
        ("Reject", make_id("records", "t:3"), "missing_id", "t.parquet#3"),
    ]
    assert counts["inputs"] == 4
    other, _ = read_all(RecordsConfig(paths=[str(path)], text_field="body"))
    assert [r.reason for r in other] == ["missing_text"] * 4


@pytest.mark.parametrize("suffix", [".jsonl.gz", ".jsonl.zst"])
def test_a_cut_compressed_file_ends_in_one_corrupt_input(tmp_path: Path, suffix: str) -> None:
    rows = [{"text": f"Record number {i} with some words that do not repeat {i * 7919}."} for i in range(20000)]
    path = (
        write_jsonl(tmp_path / f"whole{suffix}", rows, opener=gzip.open)
        if suffix.endswith(".gz")
        else write_zst(tmp_path / f"whole{suffix}", rows)
    )
    cut = tmp_path / f"cut{suffix}"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    records, counts = read_all(RecordsConfig(paths=[str(cut)]))
    documents, last = records[:-1], records[-1]
    assert isinstance(last, Reject) and last.reason == "corrupt_input" and last.key == cut.name
    assert 0 < len(documents) < len(rows)
    assert [d.text for d in documents] == [row["text"] for row in rows[: len(documents)]]
    assert last.id == make_id("records", f"cut:{len(documents)}")
    assert counts["inputs"] == len(documents) + 1


def test_a_missing_or_empty_path_is_a_one_line_error(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.jsonl"
    with pytest.raises(ValueError) as error:
        record_tasks(RecordsConfig(paths=[str(missing)]))
    assert str(error.value) == f"records path does not exist: {missing}"
    with pytest.raises(ValueError, match=f"^records path does not exist: {missing}$"):
        record_files(RecordsConfig(paths=[str(missing)]))
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "a.txt").write_text("plain text is the books source")
    with pytest.raises(ValueError, match=r"^no records files in .*texts: expected \.jsonl") as error:
        record_tasks(RecordsConfig(paths=[str(tmp_path / "texts")]))
    assert "\n" not in str(error.value)


def test_two_entries_of_one_name_need_an_id_field(tmp_path: Path) -> None:
    one = write_jsonl(tmp_path / "a" / "corpus.jsonl", ROWS[:1])
    two = write_parquet(tmp_path / "b" / "corpus.parquet", ROWS[1:2])
    with pytest.raises(ValueError, match="share the name 'corpus'"):
        record_tasks(RecordsConfig(paths=[str(one), str(two)]))
    records, _ = read_all(RecordsConfig(paths=[str(one), str(two)], id_field="id"))
    assert [r.id for r in records] == [make_id("records", str(row["id"])) for row in ROWS[:2]]


def test_a_damaged_file_still_numbers_the_files_after_it(tmp_path: Path) -> None:
    rows = [{"text": f"Record number {i} with some words that do not repeat {i * 7919}."} for i in range(20000)]
    whole = write_jsonl(tmp_path / "whole.jsonl.gz", rows, opener=gzip.open)
    (tmp_path / "both").mkdir()
    (tmp_path / "both" / "a.jsonl.gz").write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    write_jsonl(tmp_path / "both" / "b.jsonl", ROWS[:2])
    records, _ = read_all(RecordsConfig(paths=[str(tmp_path / "both")]))
    damaged = next(i for i, r in enumerate(records) if isinstance(r, Reject))
    assert records[damaged].reason == "corrupt_input" and records[damaged].id == make_id("records", f"both:{damaged}")
    assert [r.id for r in records[damaged + 1 :]] == [make_id("records", f"both:{damaged + 1 + i}") for i in range(2)]


def test_a_records_build_gives_the_same_documents_from_every_format(tmp_path: Path) -> None:
    """``run.stages = ["records", "clean", "documents"]``: the same texts as JSON lines, Parquet and a
    datasets folder give byte-identical documents; a line that is not JSON is a counted reject."""
    from corpusforge.build import run_build
    from corpusforge.core.config import Config

    wiki = Path(__file__).resolve().parents[1] / "corpusforge" / "samples" / "wikipedia" / "sample-pages-articles.xml"
    words = " ".join(re.sub(r"<[^>]+>|[\[\]{}|=']", " ", wiki.read_text(encoding="utf-8")).split()[:3000])
    rows = [{"text": " ".join(words.split()[i : i + 60]), "title": f"part {i // 60}"} for i in range(0, 3000, 60)]
    rows[7] = dict(rows[3])  # an exact duplicate
    inputs = {
        "jsonl": write_jsonl(tmp_path / "jsonl" / "corpus.jsonl", rows),
        "parquet": write_parquet(tmp_path / "parquet" / "corpus.parquet", rows, row_group_size=16),
        "datasets": save_to_disk(tmp_path / "datasets" / "corpus", rows, num_shards=3),
    }
    with open(inputs["jsonl"], "a", encoding="utf-8") as f:
        f.write("{not json\n")
    made = {}
    for name, path in inputs.items():
        out = tmp_path / f"out-{name}"
        cfg = Config.model_validate(
            {
                "run": {"output_dir": str(out), "stages": ["records", "clean", "dedup", "documents"], "direct_running_mode": "in_memory"},
                "records": {"paths": [str(path)], "title_field": "title"},
            }
        )
        stats = run_build(cfg).stats["records"]
        made[name] = {p.name: p.read_bytes() for p in (out / "documents").glob("part-*.parquet")}
        table = pq.read_table(out / "documents")
        assert table.num_rows == stats.documents == len(rows) - 1, name
        assert stats.rejects == ({"duplicate": 1, "not_json": 1} if name == "jsonl" else {"duplicate": 1}), name
        assert stats.inputs == len(rows) + (name == "jsonl"), name
    assert made["jsonl"] == made["parquet"] == made["datasets"] and made["jsonl"]
