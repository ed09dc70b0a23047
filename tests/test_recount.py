"""The writers' recounts: each written part is read back where it was written, and the launcher only gathers."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from corpusforge.corpora.document import AccountingError, Document, Reject
from corpusforge.pipeline.documents_io import documents_table, rejects_table
from corpusforge.pipeline.summary import gather_recounts, merge_counts, record_recount


def _parts(root: Path) -> tuple[str, str]:
    """A documents part and a rejects part with the same part name, as every build has."""
    (root / "documents").mkdir(parents=True)
    (root / "rejects").mkdir()
    docs, rejects = root / "documents" / "part-00000-of-00001.parquet", root / "rejects" / "part-00000-of-00001.parquet"
    pq.write_table(documents_table([Document("b1", "books", "T", "one two three"), Document("b2", "books", "U", "four five")]), docs)
    pq.write_table(rejects_table([Reject("w1", "wikipedia", "redirect")]), rejects)
    return str(docs), str(rejects)


def test_recounts_of_both_folders_are_gathered_and_merged(tmp_path: Path) -> None:
    docs, rejects = _parts(tmp_path)
    for path in (docs, rejects):
        record_recount(path, str(tmp_path / "recounts"))
    stats = merge_counts(gather_recounts(str(tmp_path / "recounts"), [docs, rejects]))
    assert (stats["books"].documents, stats["books"].words, stats["books"].bytes) == (2, 5, len("one two three four five") - 1)
    assert dict(stats["wikipedia"].rejects) == {"redirect": 1}


def test_a_part_without_its_recount_is_an_accounting_error(tmp_path: Path) -> None:
    docs, rejects = _parts(tmp_path)
    record_recount(docs, str(tmp_path / "recounts"))
    with pytest.raises(AccountingError, match="rejects/part-00000-of-00001.parquet"):
        gather_recounts(str(tmp_path / "recounts"), [docs, rejects])
    with pytest.raises(AccountingError, match="documents/part-00000-of-00001.parquet"):  # a recount whose part is gone
        gather_recounts(str(tmp_path / "recounts"), [])
