"""Pushshift dumps: every compression, old and new schema, karma selection, full accounting."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from corpusforge.corpora.document import Reject
from corpusforge.corpora.reddit import Link, Submission, parse_submission, read_submissions, screen, select_link
from corpusforge.corpora.urls import Blocklist


@pytest.fixture(scope="module")
def june_july(shared_data) -> list[Path]:
    return [shared_data / "reddit" / "RS_v2_2005-06.xz", shared_data / "reddit" / "RS_v2_2005-07.xz"]


def test_real_dumps_parse_completely(june_july):
    june = list(read_submissions(june_july[0]))
    july = list(read_submissions(june_july[1]))
    assert len(june) + len(july) == 1182
    assert not any(isinstance(r, Reject) for r in june + july)
    assert sum(1 for s in july if s.score >= 3) == 757  # the OpenWebText karma filter, per SOURCES.md
    assert all(s.url.startswith("http") and not s.is_self for s in june + july)


@pytest.mark.parametrize("suffix", [".zst", ".bz2", ".gz", ".ndjson"])
def test_every_compression_reads_the_same(june_july, tmp_path, suffix):
    raw = lzma.decompress(june_july[1].read_bytes())
    path = tmp_path / f"RS_2005-07{suffix}"
    if suffix == ".zst":  # Pushshift writes long-window frames; the reader must accept them
        params = zstandard.ZstdCompressionParameters.from_level(3, window_log=27)
        path.write_bytes(zstandard.ZstdCompressor(compression_params=params).compress(raw))
    else:
        writers = {".bz2": bz2.compress, ".gz": gzip.compress, ".ndjson": lambda data: data}
        path.write_bytes(writers[suffix](raw))
    assert list(read_submissions(path)) == list(read_submissions(june_july[1]))


def test_new_schema_and_malformed_lines(tmp_path):
    lines = [
        json.dumps(
            {
                "id": "a1",
                "url": "https://example.com/story",
                "score": None,
                "created_utc": 1600000000.0,
                "is_self": False,
                "over_18": None,
                "_meta": {"retrieved_2nd_on": 1600000100},
                "subreddit": None,
            }
        ),
        '{"id": "a2", "url": "https://exa',  # truncated line
        "[1, 2, 3]",
        json.dumps(
            {
                "id": "a3",
                "url": "https://www.reddit.com/r/x/comments/a3/",
                "is_self": False,
                "score": 7,
                "created_utc": "1600000200",
                "crosspost_parent_list": [{"url": "https://example.org/original", "is_self": False}],
            }
        ),
        "",
        json.dumps({"id": "a4", "title": "no url at all"}),
    ]
    path = tmp_path / "RS_new.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress("\n".join(lines).encode("utf-8")))
    records = list(read_submissions(path))
    assert [r.reason for r in records if isinstance(r, Reject)] == ["malformed_json", "malformed_json"]
    a1, a3, a4 = [r for r in records if isinstance(r, Submission)]
    assert (a1.score, a1.created_utc, a1.over_18, a1.subreddit) == (0, 1600000000, False, "")
    assert a3.url == "https://example.org/original" and a3.created_utc == 1600000200
    assert isinstance(screen(a4, Blocklist(), False), Reject)
    assert parse_submission(b"\xff\xfe", "x:1").reason == "malformed_json"  # type: ignore[union-attr]


def sub(id: str, url: str, score: int, **kw: object) -> Submission:
    fields = dict(subreddit="news", title=f"t{id}", is_self=False, over_18=False, created_utc=int(id, 36))
    fields.update(kw)
    return Submission(id=id, url=url, score=score, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("submission", "exclude_over_18", "reason"),
    [
        (sub("s1", "https://www.reddit.com/r/x/comments/s1/", 9, is_self=True), False, "self_post"),
        (sub("s2", "https://example.com/a", 9, over_18=True), True, "over_18"),
        (sub("s3", "not a url", 9), False, "bad_url"),
        (sub("s4", "https://i.imgur.com/abc.jpg", 9), False, "blocked_domain"),
        (sub("s5", "https://example.com/cat.gifv", 9), False, "blocked_extension"),
        (sub("s6", "https://en.wikipedia.org/wiki/Cat", 9), False, "blocked_domain"),
    ],
)
def test_screen_reasons(submission, exclude_over_18, reason):
    result = screen(submission, Blocklist(), exclude_over_18)
    assert isinstance(result, Reject) and result.reason == reason and result.source == "webtext"


def test_over_18_kept_unless_excluded():
    assert not isinstance(screen(sub("s2", "https://example.com/a", 9, over_18=True), Blocklist(), False), Reject)


def test_sum_versus_single_karma():
    group = [sub("b1", "http://www.example.com/a/", 1), sub("b2", "https://example.com/a", 1), sub("b3", "http://example.com/a#c", 2)]
    summed = list(select_link("http://example.com/a", group, karma_mode="sum", min_karma=3))
    links = [r for r in summed if isinstance(r, Link)]
    assert len(links) == 1 and links[0].score == 4 and links[0].submission_ids == ("b1", "b2", "b3")
    assert links[0].title == "tb3"  # the top-scoring submission names the page
    assert sorted(r.reason for r in summed if isinstance(r, Reject)) == ["duplicate_url", "duplicate_url"]
    single = list(select_link("http://example.com/a", group, karma_mode="single", min_karma=3))
    assert [r.reason for r in single] == ["low_karma"] * 3  # type: ignore[union-attr]


def test_real_dumps_account_for_every_submission(june_july):
    """Each submission ends as exactly one Link or one Reject (inputs == outputs)."""
    blocklist, outcomes, groups = Blocklist(), Counter(), defaultdict(list)
    for path in june_july:
        for record in read_submissions(path):
            screened = screen(record, blocklist, False)  # type: ignore[arg-type]
            if isinstance(screened, Reject):
                outcomes[screened.reason] += 1
            else:
                groups[screened[0]].append(screened[1])
    for key, group in groups.items():
        for result in select_link(key, group, karma_mode="sum", min_karma=3):
            outcomes[result.reason if isinstance(result, Reject) else "link"] += 1
    assert sum(outcomes.values()) == 1182
    assert outcomes["duplicate_url"] >= 4 and outcomes["blocked_extension"] >= 2
    assert 757 <= outcomes["link"] < 1182 - outcomes["low_karma"] + 1


@settings(max_examples=50, deadline=None)
@given(scores=st.lists(st.integers(min_value=-5, max_value=6), min_size=1, max_size=6), seed=st.randoms())
def test_selection_is_order_independent(scores, seed):
    group = [sub(f"c{i}", f"http://example.com/p{'/' * (i % 2)}", s) for i, s in enumerate(scores)]
    shuffled = group[:]
    seed.shuffle(shuffled)
    for mode in ("sum", "single"):
        first = list(select_link("k", group, karma_mode=mode, min_karma=3))
        assert first == list(select_link("k", shuffled, karma_mode=mode, min_karma=3))
        assert len(first) == len(group)
