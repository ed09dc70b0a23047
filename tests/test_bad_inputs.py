"""Malformed input, rebuilt from the shared data in tmp_path: each case ends as a counted reject (or, for a
file in the wrong format, one error naming it), never a crash and never silent loss; and reader-level
accounting that notices a dropped record."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import re
import time
from collections import Counter
from pathlib import Path

import pytest
import zstandard
from typer.testing import CliRunner

from corpusforge.cli import app
from corpusforge.corpora import books, reddit, wikipedia
from corpusforge.corpora.books import read_book, read_books
from corpusforge.corpora.document import AccountingError, Document, InputFormatError, Reject, check_accounted
from corpusforge.corpora.extract import ExtractorProcess
from corpusforge.corpora.gutenberg import gutenberg_title
from corpusforge.corpora.reddit import Submission, read_submissions
from corpusforge.corpora.warc import Capture, WarcFile, iter_captures
from corpusforge.corpora.wikipedia import plan_ranges, read_range
from corpusforge.corpora.wikitext import wikitext_to_text

ENWIKI = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
CODECS = {
    ".zst": lambda data: zstandard.ZstdCompressor().compress(data),
    ".xz": lzma.compress,
    ".bz2": lambda data: bz2.compress(data, compresslevel=1),  # 100 kB blocks: a cut keeps whole blocks
    ".gz": gzip.compress,
    ".ndjson": lambda data: data,
}


@pytest.fixture(scope="module")
def july(shared_data: Path) -> bytes:
    """The raw NDJSON of a real Pushshift month (1,079 submissions)."""
    return lzma.decompress((shared_data / "reddit" / "RS_v2_2005-07.xz").read_bytes())


def records_of(path: Path) -> tuple[list[Submission | Reject], Counter[str]]:
    counts: Counter[str] = Counter()
    return list(read_submissions(path, counts)), counts


# --- Reddit: lines a real dump can hold ---------------------------------------------------------------------

NESTED = '{"id": "n1", "url": "https://example.com/", "x": ' + "[" * 200_000 + "]" * 200_000 + "}"


@pytest.mark.parametrize(
    ("line", "check"),
    [
        ('{"id": "c1", "url": "https://www.reddit.com/r/a/", "crosspost_parent_list": 7}', lambda s: s.url.endswith("/r/a/")),
        ('{"id": "c2", "url": "", "crosspost_parent_list": true}', lambda s: s.url == ""),
        ('{"id": "c3", "url": "", "crosspost_parent_list": 2.5}', lambda s: s.url == ""),
        ('{"id": "c4", "url": "", "crosspost_parent_list": {"url": "https://x.org/"}}', lambda s: s.url == ""),
        ('{"id": "c5", "url": "", "crosspost_parent_list": [{"url": ["https://x.org/"]}, 3]}', lambda s: s.url == ""),
        ('{"id": "s1", "url": "https://x.org/", "score": "inf"}', lambda s: s.score == 0),
        ('{"id": "s2", "url": "https://x.org/", "score": 1e999}', lambda s: s.score == 0),
        ('{"id": "s3", "url": "https://x.org/", "score": NaN, "created_utc": -Infinity}', lambda s: (s.score, s.created_utc) == (0, 0)),
        ('{"id": "s4", "url": "https://x.org/", "score": ' + "9" * 400 + "}", lambda s: s.score == 2**53),
        (
            '{"id": "s5", "url": "https://x.org/", "score": "12", "created_utc": "1.6e9"}',
            lambda s: (s.score, s.created_utc) == (12, 1600000000),
        ),
        (
            '{"id": "s6", "url": "https://x.org/", "score": true, "title": {"a": 1}, "subreddit": [1]}',
            lambda s: (s.score, s.title, s.subreddit) == (0, "", ""),
        ),
        ('{"id": "b1", "url": "https://x.org/", "is_self": "false", "over_18": "true"}', lambda s: (s.is_self, s.over_18) == (False, True)),
        ('{"id": "b2", "url": "https://x.org/", "is_self": "True", "over_18": 0}', lambda s: (s.is_self, s.over_18) == (True, False)),
        ('{"id": 42, "url": 17, "title": 3.5}', lambda s: (s.id, s.url, s.title) == ("42", "17", "3.5")),
    ],
)
def test_odd_field_types_read_as_values_not_crashes(line: str, check) -> None:
    record = reddit.parse_submission(line, "RS_x.zst:1")
    assert isinstance(record, Submission) and check(record)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (NESTED, "malformed_json"),  # RecursionError inside json
        ("[" * 100_000, "malformed_json"),
        ('{"id": {"a": 1}, "url": "https://x.org/"}', "malformed_json"),
        ('{"id": "k1", "body": "a comment", "link_id": "t3_x"}', "not_a_submission"),
        ("\x00\x01\x02", "malformed_json"),
    ],
)
def test_unreadable_lines_are_rejects_with_file_and_line(tmp_path: Path, july: bytes, line: str, reason: str) -> None:
    good = july.splitlines()[:3]
    path = tmp_path / "RS_odd.zst"
    path.write_bytes(CODECS[".zst"](b"\n".join([good[0], line.encode(), *good[1:]]) + b"\n"))
    records, counts = records_of(path)
    assert len(records) == counts["inputs"] == 4
    bad = records[1]
    assert isinstance(bad, Reject) and bad.reason == reason and bad.key == "RS_odd.zst:2"


def test_any_exception_on_a_line_is_a_parse_error_reject(tmp_path: Path, july: bytes, monkeypatch) -> None:
    path = tmp_path / "RS_2005-07.ndjson"
    path.write_bytes(july)
    original = reddit.parse_submission

    def flaky(line: bytes, where: str):  # a bug no one has found yet, on line 5
        if where.endswith(":5"):
            raise KeyError("surprise")
        return original(line, where)

    monkeypatch.setattr(reddit, "parse_submission", flaky)
    records, counts = records_of(path)
    assert len(records) == counts["inputs"] == 1079
    assert records[4] == reddit.submission_reject("parse_error", "RS_2005-07.ndjson:5", "KeyError: 'surprise'")


def test_a_huge_line_is_skipped_in_bounded_memory(tmp_path: Path, july: bytes, monkeypatch) -> None:
    monkeypatch.setattr(reddit, "MAX_LINE_BYTES", 10_000)
    lines = july.splitlines()[:4]
    path = tmp_path / "RS_huge.gz"
    path.write_bytes(gzip.compress(b"\n".join([lines[0], b'{"id": "h", "title": "' + b"x" * 50_000 + b'"}', *lines[1:]])))
    records, counts = records_of(path)
    assert [getattr(r, "reason", "ok") for r in records] == ["ok", "line_too_long", "ok", "ok", "ok"]
    assert counts["inputs"] == 5


@pytest.mark.parametrize("suffix", sorted(CODECS))
def test_truncated_dump_keeps_what_came_before_in_every_codec(tmp_path: Path, july: bytes, suffix: str) -> None:
    whole = tmp_path / f"RS_whole{suffix}"
    whole.write_bytes(CODECS[suffix](july))
    intact, _ = records_of(whole)
    cut = tmp_path / f"RS_cut{suffix}"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    records, counts = records_of(cut)
    assert counts["inputs"] == len(records)
    *kept, last = records
    if suffix == ".ndjson":  # plain text cannot tell a cut from an end: the cut line is one malformed line
        assert isinstance(last, Reject) and last.reason == "malformed_json" and kept == intact[: len(kept)]
        return
    assert isinstance(last, Reject) and last.reason == "corrupt_input" and str(cut) in last.detail
    assert 100 < len(kept) < len(intact) and kept == intact[: len(kept)]


@pytest.mark.parametrize("suffix", [".zst", ".xz", ".bz2", ".gz"])
def test_garbage_with_a_codec_suffix_is_one_corrupt_input(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"RS_junk{suffix}"
    path.write_bytes(bytes(range(256)) * 64)
    records, counts = records_of(path)
    assert [r.reason for r in records] == ["corrupt_input"] and counts["inputs"] == 1  # type: ignore[union-attr]


def _wrong_formats(july: bytes) -> dict[str, bytes]:
    rows = [json.loads(line) for line in july.splitlines()[:50]]
    comments = [{"id": f"k{i}", "body": "I agree", "link_id": "t3_abc", "parent_id": "t3_abc", "score": 2} for i in range(30)]
    return {
        "array.json": json.dumps(rows).encode(),
        "pretty.json": json.dumps(rows, indent=2).encode(),
        "RC_2005-12.ndjson": "\n".join(json.dumps(c) for c in comments).encode(),
        "notes.txt": b"just some text\nnot json at all\n",
    }


@pytest.mark.parametrize("name", ["array.json", "pretty.json", "RC_2005-12.ndjson", "notes.txt"])
def test_a_file_that_is_not_a_submission_dump_is_one_clear_error(tmp_path: Path, july: bytes, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(_wrong_formats(july)[name])
    with pytest.raises(InputFormatError, match=re.escape(str(path)) + ".*expected a Pushshift submissions dump"):
        list(read_submissions(path))


def test_wrong_format_is_found_before_a_build_and_damage_is_not_one(tmp_path: Path, july: bytes) -> None:
    wrong = tmp_path / "array.json"
    wrong.write_bytes(_wrong_formats(july)["array.json"])
    with pytest.raises(InputFormatError, match="array.json"):
        reddit.check_dump_format(wrong)
    cut = tmp_path / "RS_cut.xz"
    cut.write_bytes(lzma.compress(july)[:300])  # damaged before its first line ends: counted at build time
    reddit.check_dump_format(cut)
    with pytest.raises(FileNotFoundError, match="RS_missing.zst"):
        reddit.check_dump_format(tmp_path / "RS_missing.zst")


def test_wrong_format_stops_early_on_a_big_file(tmp_path: Path, july: bytes) -> None:
    path = tmp_path / "RC_big.ndjson"
    path.write_bytes(b'{"id": "k", "body": "x"}\n' * 50_000)
    seen = []
    with pytest.raises(InputFormatError):
        for record in read_submissions(path):
            seen.append(record)
    assert len(seen) == reddit.SNIFF_LINES


def test_cli_names_a_wrong_format_dump_in_one_line(tmp_path: Path, july: bytes) -> None:
    path = tmp_path / "pretty.json"
    path.write_bytes(_wrong_formats(july)["pretty.json"])
    outcome = CliRunner().invoke(
        app,
        [
            "build",
            "--set",
            'run.stages=["webtext"]',
            "--set",
            f"webtext.dumps=[{json.dumps(str(path))}]",
            "--set",
            "webtext.offline=true",
            "--set",
            f"run.output_dir={json.dumps(str(tmp_path / 'out'))}",
        ],
    )
    assert outcome.exit_code == 2, outcome.output
    message = " ".join(outcome.output.split())  # rich wraps the one line at the terminal width
    message = message[message.index("error: ") :]  # after the piped progress lines (stage started / FAILED)
    assert message.startswith(f"error: {path}: none of its") and message.endswith("or plain NDJSON"), message
    assert "Traceback" not in outcome.output


# --- Wikipedia markup: bounded time ------------------------------------------------------------------------

PATHOLOGICAL = {
    "unclosed ref": "<ref>" * 4000,
    "ref + template": "<ref>{{" * 8000,
    "ref + brackets": "<ref>[[[[" * 8000,
    "table openers on one line": "{|" * 30_000,
    "nested brackets": "[{" * 30_000 + "{[" * 30_000,
    "heading with a long blank run": "\n=a" + " " * 100_000 + "b\n",
}


@pytest.mark.parametrize("name", sorted(PATHOLOGICAL))
def test_pathological_markup_converts_in_linear_time(name: str) -> None:
    markup = PATHOLOGICAL[name]
    started = time.perf_counter()
    wikitext_to_text(markup)
    assert time.perf_counter() - started < 1.0 + len(markup) / 100_000  # was 13 s to hours


def test_a_page_over_its_budget_is_a_markup_timeout_reject(shared_data: Path) -> None:
    (dump_range,) = plan_ranges(shared_data / "wikipedia" / ENWIKI)
    counts: Counter[str] = Counter()
    records = list(read_range(dump_range, page_budget_s=0.0, counts=counts))
    reasons = Counter(getattr(r, "reason", "document") for r in records)
    assert reasons["markup_timeout"] == 98 and "document" not in reasons  # every article, and nothing else
    assert counts["inputs"] == len(records) == 206


# --- Books, extraction -------------------------------------------------------------------------------------


def test_title_glued_to_the_line_before_is_still_found(shared_data: Path, tmp_path: Path) -> None:
    data = (shared_data / "books" / "en" / "11-0.txt").read_bytes()
    glued = re.sub(rb"(www\.gutenberg\.org)\s+(Title:)", rb"\1\2", data, count=1)
    assert b"www.gutenberg.orgTitle:" in glued
    (tmp_path / "glued.txt").write_bytes(glued)
    record = read_book(tmp_path / "glued.txt", tmp_path)
    assert isinstance(record, Document) and record.title == "Alice’s Adventures in Wonderland"
    assert gutenberg_title("Title: Emma\nwww.gutenberg.orgTitle: Other") == "Emma"  # a real line wins


def test_a_worker_that_cannot_start_rejects_the_page() -> None:
    process = ExtractorProcess(timeout_s=5.0, extractor=lambda html, url, **_: "never runs")  # spawn cannot pickle it
    try:
        assert process(b"<html><p>text</p></html>", "https://x.org/", {}) == (None, "extraction_error")
        assert process(b"<html><p>text</p></html>", "https://x.org/", {}) == (None, "extraction_error")
        assert process.restarts == 2 and process.pid is None
    finally:
        process.close()


# --- Accounting: counted where read, so a dropped record shows ----------------------------------------------


def _records(items) -> int:
    return sum(isinstance(x, (Document, Reject, Submission, Capture)) for x in items)


def test_reader_counts_match_the_raw_inputs(shared_data: Path, tmp_path: Path, july: bytes) -> None:
    counts: Counter[str] = Counter()
    dump = tmp_path / "RS_2005-07.ndjson"
    dump.write_bytes(july)
    check_accounted("webtext", counts, _records(read_submissions(dump, counts)))
    assert counts["inputs"] == sum(1 for line in july.splitlines() if line.strip())

    counts = Counter()
    enwiki = shared_data / "wikipedia" / ENWIKI
    check_accounted("wikipedia", counts, _records(x for r in plan_ranges(enwiki) for x in read_range(r, counts=counts)))
    assert counts["inputs"] == bz2.decompress(enwiki.read_bytes()).count(b"<page>")

    counts = Counter()
    check_accounted("books", counts, _records(read_books(shared_data / "books", counts=counts)))
    assert counts["inputs"] == len([p for p in (shared_data / "books").rglob("*") if p.suffix in (".txt", ".epub")])

    counts = Counter()
    with WarcFile(tmp_path / "w.warc.gz") as warc:
        for i in range(5):
            warc.write(Capture(url=f"https://x.org/{i}", status=200, headers=(("Content-Type", "text/html"),), body=b"<p>hi</p>"))
        warc.write(Capture(url="https://x.org/gone", reason="timeout"))
    check_accounted("webtext", counts, _records(iter_captures(tmp_path / "w.warc.gz", counts=counts)))
    assert counts["inputs"] == 6


def test_a_silently_dropped_record_fails_the_check(shared_data: Path, tmp_path: Path, july: bytes, monkeypatch) -> None:
    """Inject a drop inside each reader (the record converter loses one record) and the counts disagree."""

    def dropping(convert, nth: int):
        calls = Counter()

        def wrapper(*args, **kwargs):
            calls["n"] += 1
            return None if calls["n"] == nth else convert(*args, **kwargs)

        return wrapper

    dump = tmp_path / "RS_2005-07.ndjson"
    dump.write_bytes(july)
    monkeypatch.setattr(reddit, "_parse_line", dropping(reddit._parse_line, 10))
    counts: Counter[str] = Counter()
    with pytest.raises(AccountingError, match="webtext: 1079 inputs read but 1078"):
        check_accounted("webtext", counts, _records(read_submissions(dump, counts)))

    monkeypatch.setattr(wikipedia, "_page", dropping(wikipedia._page, 100))
    counts = Counter()
    ranges = plan_ranges(shared_data / "wikipedia" / ENWIKI)
    with pytest.raises(AccountingError, match="wikipedia: 206 inputs read but 205"):
        check_accounted("wikipedia", counts, _records(x for r in ranges for x in read_range(r, counts=counts)))

    monkeypatch.setattr(books, "read_book", dropping(books.read_book, 2))
    counts = Counter()
    with pytest.raises(AccountingError, match="books: .* inputs read"):
        check_accounted("books", counts, _records(read_books(shared_data / "books" / "fr", counts=counts)))
