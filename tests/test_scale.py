"""The documents job at scale: only references travel, parts are sized by bytes, a lost record fails the
build, and a 20 MB corpus gives identical bytes on every runner with a small Dask launcher."""

from __future__ import annotations

import hashlib
import math
import pickle
import socket
import subprocess
import sys
import threading
import time
from dataclasses import fields
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from corpusforge.build import run_build
from corpusforge.core.config import load_config
from corpusforge.corpora.document import AccountingError
from corpusforge.pipeline.document_spill import DocRef
from corpusforge.pipeline.documents_io import output_files

sys.path.insert(0, str(Path(__file__).parent))
from corpus_factory import make_books  # noqa: E402

DOCS_ONLY = 'run.stages=["books","clean","dedup","near_dedup","documents"]'


def build(out: Path, books: Path, *overrides: str):
    return run_build(load_config(None, [f'books.paths=["{books}"]', f'run.output_dir="{out}"', DOCS_ONLY, *overrides]))


def digests(out: Path) -> dict[str, str]:
    return {
        f"{p.parent.name}/{p.name}": hashlib.sha256(p.read_bytes()).hexdigest()
        for sub in ("documents", "rejects")
        for p in map(Path, output_files(out / sub))
    }


@pytest.fixture(scope="module")
def small_books(tmp_path_factory, shared_data: Path) -> Path:
    books = tmp_path_factory.mktemp("books")
    make_books(shared_data / "books", books, 600_000, book_bytes=40_000, seed=1)
    return books


def test_references_carry_no_text(small_books: Path, tmp_path: Path) -> None:
    """What the dedup shuffles carry is bounded whatever the document size."""
    assert "text" not in {f.name for f in fields(DocRef)}
    from corpusforge.core.config import NearDedupConfig
    from corpusforge.corpora.document import Document
    from corpusforge.pipeline.document_spill import RefMaker

    huge = Document("x" * 20, "books", "t", "word " * 400_000)  # 2 MB of text
    (ref,) = RefMaker(NearDedupConfig()).spill(tmp_path / "spill.arrow", [huge])
    assert len(pickle.dumps(ref)) < 1_000 < len(huge.text)


def test_references_read_back_share_their_file_strings(tmp_path: Path) -> None:
    """The in-process runners hold grouped values decoded in the launcher: references of one spill file
    share its path and source strings once unpickled, and pickle without field names."""
    from corpusforge.core.config import NearDedupConfig
    from corpusforge.corpora.document import Document
    from corpusforge.pipeline.document_spill import RefMaker

    docs = [Document(f"books:{i}", "books", f"t{i}", f"word{i} " * 50) for i in range(2)]
    refs = RefMaker(NearDedupConfig()).spill(str(tmp_path / "spill.arrow"), docs)
    back = [pickle.loads(pickle.dumps(ref)) for ref in refs]
    assert back == refs
    assert back[0].spill is back[1].spill and back[0].source is back[1].source
    assert b"text_key" not in pickle.dumps(refs[0])
    assert len(list(refs[0].band_keys())) == len(refs[0].bands) // 10 > 1


def test_parts_are_sized_by_bytes(small_books: Path, tmp_path: Path) -> None:
    part_bytes = 100_000
    result = build(tmp_path / "out", small_books, 'run.direct_running_mode="in_memory"', f"run.part_bytes={part_bytes}")
    parts = [Path(p) for p in output_files(tmp_path / "out" / "documents")]
    total = sum(s.bytes for s in result.stats.values())
    assert len(parts) == math.ceil(total / part_bytes) > 3
    assert all(p.name.endswith(f"-of-{len(parts):05d}.parquet") for p in parts)
    ids = [i for p in parts for i in pq.read_table(p, columns=["id"])["id"].to_pylist()]
    assert len(ids) == len(set(ids)) == result.stats["books"].documents
    for part in parts:
        part_ids = pq.read_table(part, columns=["id"])["id"].to_pylist()
        assert part_ids == sorted(part_ids)


def test_small_books_read_together_write_the_bytes_of_one_task_per_file(small_books: Path, tmp_path: Path, monkeypatch) -> None:
    """Consecutive small book files share a read task (``BOOK_TASK_BYTES``): fewer spills and markers, the
    same output bytes as one task per file, every file listed once and counted."""
    from collections import Counter

    import corpusforge.pipeline.steps as steps
    from corpusforge.core.config import BooksConfig
    from corpusforge.corpora.books import list_book_files
    from corpusforge.pipeline import documents_io

    monkeypatch.setattr(documents_io, "ROW_GROUP_TEXT_BYTES", 50_000)  # parts of several row groups
    files, made = list_book_files(small_books), {}
    for task_bytes in (0, 100_000, 1 << 20):
        monkeypatch.setattr(steps, "BOOK_TASK_BYTES", task_bytes)
        listed: Counter[str] = Counter()
        tasks = steps.book_tasks(BooksConfig(paths=[str(small_books)]), listed)
        assert [path for _, paths in tasks for path in paths] == files and listed["inputs"] == len(files)
        build(tmp_path / str(task_bytes), small_books, 'run.direct_running_mode="in_memory"')
        made[len(tasks)] = digests(tmp_path / str(task_bytes))
    assert len(made) == 3 and min(made) == 1 and max(made) == len(files)  # three groupings, one file each to all in one
    assert pq.ParquetFile(next((tmp_path / "0" / "documents").glob("*.parquet"))).num_row_groups > 1
    assert len({tuple(sorted(d.items())) for d in made.values()}) == 1


def test_a_record_lost_after_reading_fails_the_build(small_books: Path, tmp_path: Path, monkeypatch) -> None:
    """Books are counted where the files are listed: a reader that loses one fails the accounting."""
    import corpusforge.pipeline.sources as sources

    real = sources.read_book_task

    def lossy(task, counts):
        root, paths = task
        return real((root, tuple(p for p in paths if not p.endswith("book-00003.txt"))), counts)

    monkeypatch.setattr(sources, "read_book_task", lossy)
    with pytest.raises(AccountingError, match="books"):
        build(tmp_path / "out", small_books, 'run.direct_running_mode="in_memory"')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_20mb_identical_on_every_runner_with_a_small_dask_launcher(tmp_path_factory, shared_data: Path) -> None:
    books = tmp_path_factory.mktemp("books20")
    make_books(shared_data / "books", books, 20 << 20, seed=20)
    work = tmp_path_factory.mktemp("runs")
    in_memory = build(work / "in_memory", books, 'run.direct_running_mode="in_memory"')
    assert in_memory.stats["books"].documents >= 20
    build(work / "multi", books, 'run.direct_running_mode="multi_processing"', "run.direct_num_workers=2")

    port, bin_dir = free_port(), Path(sys.executable).parent
    cluster = [subprocess.Popen([str(bin_dir / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"])]
    time.sleep(3)
    cluster += [
        subprocess.Popen([str(bin_dir / "dask"), "worker", f"127.0.0.1:{port}", "--nthreads", "1", "--no-dashboard"]) for _ in range(2)
    ]
    me, peak, done = psutil.Process(), [0], threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], me.memory_info().rss)
            time.sleep(0.1)

    try:
        time.sleep(5)
        before = me.memory_info().rss
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        build(work / "dask", books, 'run.runner="DaskRunner"', f'run.beam_args=["--dask_client_address=127.0.0.1:{port}"]')
        done.set()
        watcher.join()
    finally:
        for proc in cluster:
            proc.terminate()
            proc.wait()
    reference = digests(work / "in_memory")
    assert reference and digests(work / "multi") == reference and digests(work / "dask") == reference
    # the launcher only builds the graph: it grows by far less than the corpus it sends through the workers
    assert peak[0] - before < 300 << 20, f"launcher grew {(peak[0] - before) >> 20} MB"


def test_webtext_inputs_are_the_dump_lines(tmp_path: Path, shared_data: Path) -> None:
    """WebText's inputs are counted by reading the dumps (not as documents + rejects): every line is accounted for."""
    import lzma

    dumps = sorted((shared_data / "reddit").glob("RS_*.xz"))
    lines = sum(1 for dump in dumps for line in lzma.open(dump, "rt", encoding="utf-8") if line.strip())
    result = run_build(
        load_config(
            None,
            [
                f"webtext.dumps={[str(d) for d in dumps]!r}".replace("'", '"'),
                "webtext.offline=true",
                f'webtext.warc_dir="{shared_data / "html" / "warc"}"',
                'run.stages=["webtext","clean","dedup","documents"]',
                f'run.output_dir="{tmp_path / "out"}"',
                'run.direct_running_mode="in_memory"',
            ],
        )
    )
    web = result.stats["webtext"]
    assert result.artifacts["counters"]["read"]["webtext.inputs"] == lines  # counted by the dump read itself
    assert web.inputs == lines == web.documents + sum(web.rejects.values())
