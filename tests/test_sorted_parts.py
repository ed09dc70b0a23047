"""``write_sorted``: a part written from pieces with bounded memory has the bytes of the part written whole."""

from __future__ import annotations

import dataclasses
import hashlib
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet  # noqa: F401 - pa.parquet
import pytest

from corpusforge.corpora.document import Document, Reject
from corpusforge.pipeline import documents_io
from corpusforge.pipeline.documents_io import documents_table, rejects_table, write_sorted, write_table_atomic


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _documents(n: int, rng: random.Random) -> list[Document]:
    docs = []
    for i in range(n):
        words = " ".join(rng.choice(["alpha", "beta", "gamma", "delta", "épsilon"]) for _ in range(rng.randint(1, 400)))
        doc_id = f"{rng.getrandbits(80):020x}" if i % 50 else "0" * 20  # some equal ids: ties keep the pieces' order
        docs.append(Document(doc_id, "wikipedia", f"title {i}", words, meta={"page_id": str(i)} if i % 3 else {}))
    return docs


@pytest.mark.parametrize("run_bytes", [1 << 30, 20_000, 1])
def test_documents_part_same_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_bytes: int) -> None:
    monkeypatch.setattr(documents_io, "RUN_BYTES", run_bytes)
    monkeypatch.setattr(documents_io, "ROW_GROUP_TEXT_BYTES", 50_000)  # several row groups
    monkeypatch.setattr(documents_io, "MERGE_BATCH_BYTES", 7_000)
    monkeypatch.setattr(documents_io, "MERGE_CHUNK_ROWS", 37)  # a row group taken from the runs in several chunks
    rng = random.Random(3)
    docs = _documents(1500, rng)
    bounds = [0, 300, 317, 600, 900, 1200, 1500]  # uneven pieces, as a part's share of each spill file is
    pieces = [documents_table(docs[a:b], sort=False) for a, b in zip(bounds, bounds[1:])]
    whole = pa.concat_tables(pieces)
    write_table_atomic(whole, str(tmp_path / "old.parquet"), pc.sort_indices(whole, [("id", "ascending")]))
    write_sorted(iter(pieces), str(tmp_path / "new.parquet"), ["id"], str(tmp_path / "runs"))
    assert _digest(tmp_path / "new.parquet") == _digest(tmp_path / "old.parquet")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # the sorted runs are removed


def test_documents_part_bytes_do_not_depend_on_the_pieces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same rows from one spill per document or from one spill per thousand (small books read together)
    make the same part: row groups are sized from the rows, not from how Arrow chunks them."""
    monkeypatch.setattr(documents_io, "ROW_GROUP_TEXT_BYTES", 20_000)
    docs = [dataclasses.replace(doc, text=doc.text[:60]) for doc in _documents(1500, random.Random(4))]  # short pages
    for name, size in (("one", 1), ("many", 1000)):
        pieces = [documents_table(docs[i : i + size], sort=False) for i in range(0, len(docs), size)]
        write_sorted(iter(pieces), str(tmp_path / f"{name}.parquet"), ["id"], str(tmp_path / "runs"))
    assert pa.parquet.ParquetFile(tmp_path / "one.parquet").num_row_groups > 3
    assert _digest(tmp_path / "one.parquet") == _digest(tmp_path / "many.parquet")


@pytest.mark.parametrize("run_bytes", [1 << 30, 5_000])
def test_rejects_part_same_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_bytes: int) -> None:
    monkeypatch.setattr(documents_io, "RUN_BYTES", run_bytes)
    monkeypatch.setattr(documents_io, "ROW_GROUP_TEXT_BYTES", 20_000)
    monkeypatch.setattr(documents_io, "MERGE_BATCH_BYTES", 3_000)
    monkeypatch.setattr(documents_io, "MERGE_CHUNK_ROWS", 37)
    rng = random.Random(5)
    rejects = [
        Reject(
            f"{rng.getrandbits(80):020x}", "wikipedia", rng.choice(["near_duplicate", "language", "duplicate"]), f"of {i}", f"Title {i} é"
        )
        for i in range(2000)
    ]
    write_table_atomic(rejects_table(rejects), str(tmp_path / "old.parquet"))
    pieces = [rejects_table(rejects[i : i + 10]) for i in range(0, 2000, 10)]  # row groups sized from 200 pieces' sizes
    write_sorted(iter(pieces), str(tmp_path / "new.parquet"), ["id", "reason", "key"], str(tmp_path / "runs"))
    assert _digest(tmp_path / "new.parquet") == _digest(tmp_path / "old.parquet")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # the sorted runs are removed


def test_rejects_part_same_bytes_at_full_page_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Row groups with columns past Parquet's 1 MB data page, each taken from the runs in many chunks: the
    pages are cut where a part written whole cuts them."""
    monkeypatch.setattr(documents_io, "RUN_BYTES", 1 << 20)
    monkeypatch.setattr(documents_io, "MERGE_CHUNK_ROWS", 1_000)
    rng = random.Random(7)
    rejects = [
        Reject(f"{rng.getrandbits(160):040x}", "wikipedia", "near_duplicate", f"{rng.getrandbits(160):040x}", f"T{i}")
        for i in range(60_000)
    ]
    write_table_atomic(rejects_table(rejects), str(tmp_path / "old.parquet"))
    pieces = [rejects_table(rejects[i : i + 5_000]) for i in range(0, 60_000, 5_000)]
    write_sorted(iter(pieces), str(tmp_path / "new.parquet"), ["id", "reason", "key"], str(tmp_path / "runs"))
    assert _digest(tmp_path / "new.parquet") == _digest(tmp_path / "old.parquet")
