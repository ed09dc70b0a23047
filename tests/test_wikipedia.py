"""Dump reading: filtering with counts, encodings, multistream ranges, damaged input, the sample."""

from __future__ import annotations

import bz2
import pickle
import re
from collections import Counter
from pathlib import Path

import pytest
from corpus_factory import build_multistream

from corpusforge.corpora.document import Document, Reject, make_id
from corpusforge.corpora.wikipedia import DumpRange, plan_ranges, read_range, read_stream_offsets

ENWIKI = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


def read_all(path: Path, **kwargs: object) -> list[Document | Reject]:
    return [x for r in plan_ranges(path, **kwargs) for x in read_range(r)]  # type: ignore[arg-type]


def outcomes(records: list[Document | Reject]) -> Counter[str]:
    return Counter("document" if isinstance(x, Document) else x.reason for x in records)


@pytest.fixture(scope="session")
def enwiki(shared_data: Path) -> Path:
    return shared_data / "wikipedia" / ENWIKI


@pytest.fixture(scope="session")
def enwiki_records(enwiki: Path) -> list[Document | Reject]:
    return read_all(enwiki)


@pytest.fixture(scope="session")
def multistream(enwiki: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("multistream")
    dump = folder / "enwiki-test-pages-articles-multistream.xml.bz2"
    build_multistream(enwiki, dump, folder / "enwiki-test-pages-articles-multistream-index.txt.bz2", pages_per_stream=10)
    return dump


def test_enwiki_every_page_accounted_for(enwiki: Path, enwiki_records: list[Document | Reject]) -> None:
    pages = bz2.decompress(enwiki.read_bytes()).count(b"<page>")
    assert pages == 206 == len(enwiki_records)
    # 106 ns-0 non-redirect pages (8 of them disambiguation pages), 99 ns-0 redirects, and
    # one ns-4 page (itself a redirect, counted under its namespace).
    assert outcomes(enwiki_records) == {"document": 98, "disambiguation": 8, "redirect": 99, "namespace": 1}
    kept = outcomes([x for r in plan_ranges(enwiki) for x in read_range(r, drop_disambiguation=False)])
    assert kept["document"] == 106 and "disambiguation" not in kept


def test_enwiki_document_fields(enwiki: Path, enwiki_records: list[Document | Reject]) -> None:
    docs = [x for x in enwiki_records if isinstance(x, Document)]
    assert len({d.id for d in docs}) == len(docs)
    anarchism = next(d for d in docs if d.title == "Anarchism")
    assert anarchism.id == make_id("wikipedia", "enwiki:12")
    assert anarchism.url == "https://en.wikipedia.org/wiki/Anarchism"
    assert anarchism.meta == {"page_id": "12", "revision_id": "716551092", "timestamp": "2016-04-22T10:19:33Z"}
    assert anarchism.text.startswith("Anarchism is a political philosophy")
    assert "\n\nHistory\n\n" in anarchism.text
    no_headings = next(x for x in read_range(plan_ranges(enwiki)[0], keep_headings=False) if isinstance(x, Document))
    assert "\n\nHistory\n\n" not in no_headings.text
    project = next(x for x in enwiki_records if isinstance(x, Reject) and x.reason == "namespace")
    assert project.key.startswith("Wikipedia:") and project.detail == "ns=4"


def test_utf16_bgwiki(shared_data: Path) -> None:
    path = shared_data / "wikipedia" / "bgwiki-latest-pages-articles-shortened.xml.bz2"
    assert bz2.decompress(path.read_bytes())[:2] == b"\xff\xfe"  # UTF-16 with BOM
    records = read_all(path)
    assert outcomes(records) == {"document": 1, "namespace": 2}
    doc = next(x for x in records if isinstance(x, Document))
    assert doc.title == "Григориански календар"
    assert doc.url == "https://bg.wikipedia.org/wiki/Григориански_календар"
    assert doc.text.startswith("Григорианският календар")
    assert doc.id == make_id("wikipedia", "bgwiki:558")


def test_table_markup_dump_without_siteinfo(shared_data: Path) -> None:
    records = read_all(shared_data / "wikipedia" / "enwiki-table-markup.xml.bz2")
    assert outcomes(records) == {"document": 5}
    first = records[0]
    assert isinstance(first, Document)
    assert first.id == make_id("wikipedia", "enwiki-table-markup:217916")  # file stem: no dbname
    assert first.url == "https://en.wikipedia.org/wiki/Constructive_vote_of_no_confidence"  # from xml:lang
    for doc in records:
        assert isinstance(doc, Document)
        assert not any(token in doc.text for token in ("{|", "|}", "|-", "||", "!!", "{{", "[["))


def test_multistream_ranges_read_like_the_whole_file(multistream: Path, enwiki_records: list[Document | Reject]) -> None:
    index = multistream.with_name("enwiki-test-pages-articles-multistream-index.txt.bz2")
    offsets = read_stream_offsets(index)
    assert len(offsets) == 21  # 206 pages, 10 per stream
    for offset in offsets[:3]:  # every indexed offset starts a bz2 stream of whole pages
        with open(multistream, "rb") as f:
            f.seek(offset)
            assert bz2.BZ2Decompressor().decompress(f.read(1 << 20)).lstrip().startswith(b"<page>")
    ranges = plan_ranges(multistream, streams_per_range=3, min_ranges=1)  # index found beside the dump
    assert len(ranges) == 7 and all(r.kind == "multistream" for r in ranges)
    assert ranges == plan_ranges(multistream, index, streams_per_range=3, min_ranges=1)
    assert len(plan_ranges(multistream, streams_per_range=3, min_ranges=10)) == 11  # 2 streams a range: 10 workers busy
    assert len(plan_ranges(multistream)) == 21  # fewer streams than MIN_RANGES: one range each
    assert pickle.loads(pickle.dumps(ranges)) == ranges
    assert [r.end for r in ranges[:-1]] == [r.start for r in ranges[1:]] and ranges[-1].end is None
    parts = [list(read_range(r)) for r in reversed(ranges)]  # any order, any worker
    assert all(parts)
    union = [x for part in reversed(parts) for x in part]
    assert union == enwiki_records
    assert Counter(map(repr, union)) == Counter(map(repr, enwiki_records))


def test_whole_single_stream_files_are_one_range(shared_data: Path, enwiki: Path) -> None:
    assert plan_ranges(enwiki) == [DumpRange(str(enwiki), 0, None, "bz2")]
    viwiki = shared_data / "wikipedia" / "wikiextractor_viwiki_sample" / "viwiki_10pages.xml"
    assert plan_ranges(viwiki) == [DumpRange(str(viwiki), 0, None, "plain")]
    # this export stops after its last </page> (no </mediawiki>): nothing is lost, so no reject
    assert outcomes(read_all(viwiki)) == {"document": 5, "redirect": 3, "empty": 1, "namespace": 1}


def test_missing_or_empty_input_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not found"):
        plan_ranges(tmp_path / "nowhere.xml.bz2")
    (tmp_path / "empty.xml").write_bytes(b"")
    with pytest.raises(ValueError, match="empty"):
        plan_ranges(tmp_path / "empty.xml")


def _assert_prefix_then_corrupt(records: list[Document | Reject], whole: list[Document | Reject], readable: bytes) -> None:
    """Every page complete in the readable part comes out, as in an intact read, then one reject."""
    *pages, last = records
    assert isinstance(last, Reject) and last.reason == "corrupt_input" and "\n" not in last.detail
    assert len(pages) == readable.count(b"</page>") and pages == whole[: len(pages)]


def test_truncated_bz2_keeps_earlier_pages(enwiki: Path, enwiki_records: list[Document | Reject], tmp_path: Path) -> None:
    cut = tmp_path / "cut.xml.bz2"
    cut.write_bytes(enwiki.read_bytes()[: enwiki.stat().st_size // 2])
    records = read_all(cut)
    readable = bz2.BZ2Decompressor().decompress(cut.read_bytes())  # all that the cut data holds
    _assert_prefix_then_corrupt(records, enwiki_records, readable)
    assert "EOFError" in records[-1].detail and records[-1].key == str(cut)


def test_cut_plain_xml_keeps_earlier_pages(enwiki: Path, enwiki_records: list[Document | Reject], tmp_path: Path) -> None:
    xml = bz2.decompress(enwiki.read_bytes())
    cut = tmp_path / "cut.xml"
    cut.write_bytes(xml[: len(xml) // 3])  # ends inside a page
    _assert_prefix_then_corrupt(read_all(cut), enwiki_records, xml[: len(xml) // 3])


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "bz2"])
@pytest.mark.parametrize(
    ("damage", "error"),
    [
        (lambda page: page.replace(b"<text", b"\x01<text", 1), "invalid token"),  # a character XML forbids
        (lambda page: page.replace(b"</title>", b"</tite>", 1), "mismatched tag"),
        (lambda page: page.replace(b"</revision>", b"", 1), "mismatched tag"),  # an element never closed
    ],
    ids=["invalid-char", "bad-end-tag", "unclosed"],
)
def test_damaged_page_is_one_reject_and_reading_resumes(
    enwiki: Path, enwiki_records: list[Document | Reject], tmp_path: Path, compress: bool, damage, error: str
) -> None:
    """One broken page (page 104 of 206) is one ``malformed_xml`` reject; the 102 after it still read."""
    xml = bz2.decompress(enwiki.read_bytes())
    starts = [m.start() for m in re.finditer(b"<page>", xml)]
    start, end = starts[103], starts[104]
    bad = tmp_path / ("bad.xml.bz2" if compress else "bad.xml")
    data = xml[:start] + damage(xml[start:end]) + xml[end:]
    bad.write_bytes(bz2.compress(data) if compress else data)
    counts: Counter[str] = Counter()
    records = [x for r in plan_ranges(bad) for x in read_range(r, counts=counts)]
    broken = records[103]
    assert isinstance(broken, Reject) and broken.reason == "malformed_xml" and error in broken.detail
    intact = enwiki_records[103]
    assert broken.id == intact.id and broken.key == getattr(intact, "title", getattr(intact, "key", ""))
    assert records[:103] + records[104:] == enwiki_records[:103] + enwiki_records[104:]
    assert counts["inputs"] == len(records) == 206


def test_damage_in_many_pages_and_after_the_last(enwiki: Path, enwiki_records: list[Document | Reject], tmp_path: Path) -> None:
    xml = bz2.decompress(enwiki.read_bytes())
    pages = xml.split(b"<page>")
    broken = {3, 4, 100, 206}  # two in a row, and the last page
    damaged = pages[0] + b"".join(
        b"<page>" + (p.replace(b"<title>", b"<title>\x02", 1) if i in broken else p) for i, p in enumerate(pages[1:], start=1)
    )
    bad = tmp_path / "bad.xml"
    bad.write_bytes(damaged)
    records = read_all(bad)
    assert [i for i, r in enumerate(records, start=1) if getattr(r, "reason", "") == "malformed_xml"] == sorted(broken)
    assert [r for i, r in enumerate(records, start=1) if i not in broken] == [
        r for i, r in enumerate(enwiki_records, start=1) if i not in broken
    ]


def test_truncated_multistream_reports_every_damaged_range(multistream: Path, tmp_path: Path) -> None:
    index = multistream.with_name("enwiki-test-pages-articles-multistream-index.txt.bz2")
    cut = tmp_path / "cut-multistream.xml.bz2"
    cut.write_bytes(multistream.read_bytes()[: multistream.stat().st_size // 2])
    ranges = plan_ranges(cut, index, streams_per_range=3)
    per_range = [list(read_range(r)) for r in ranges]
    reasons = [Counter(getattr(x, "reason", "document") for x in records) for records in per_range]
    damaged = [i for i, counts in enumerate(reasons) if counts["corrupt_input"]]
    assert damaged and damaged == list(range(damaged[0], len(ranges)))  # the cut range and all after
    assert all(counts["corrupt_input"] == 1 for counts in reasons[damaged[0] :])
    assert all(isinstance(records[-1], Reject) for records in per_range[damaged[0] :])


def test_bundled_sample(samples: Path, tmp_path: Path) -> None:
    path = samples / "wikipedia" / "sample-pages-articles.xml"
    assert path.stat().st_size < 80_000
    records = read_all(path)
    assert outcomes(records) == {"document": 8, "redirect": 1, "disambiguation": 1, "namespace": 2}
    docs = {x.title: x for x in records if isinstance(x, Document)}
    for doc in docs.values():
        assert 300 <= len(doc.text.split()) <= 800, doc.title
        assert doc.id == make_id("wikipedia", f"samplewiki:{doc.meta['page_id']}")
        assert not any(token in doc.text for token in ("{{", "[[", "<ref", "{|", "<!--", "'''", "Category:"))
    original, copy = set(docs["Sourdough bread"].text.split()), set(docs["Sourdough"].text.split())
    assert 0.9 < len(original & copy) / len(original | copy) < 1.0  # a near-duplicate, not an exact one
    assert "characteristic" in docs["Lighthouse"].text and "Harrow Point" not in docs["Lighthouse"].text  # infobox gone
    assert "The lantern room" not in docs["Lighthouse"].text  # File caption gone with its link
    # the same sample as a multistream dump gives the same records
    dump, index = tmp_path / "sample-multistream.xml.bz2", tmp_path / "sample-index.txt.bz2"
    build_multistream(path, dump, index, pages_per_stream=2)
    assert read_all(dump, index_path=index, streams_per_range=2) == records
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sample-index.txt.bz2", "sample-multistream.xml.bz2"]
