"""The whole WebText job under the DirectRunner: dumps -> links -> real fetches -> documents / rejects,
then the same documents again offline from the WARCs the first run wrote (server stopped)."""

from __future__ import annotations

import json
import lzma
import tarfile
from dataclasses import asdict
from pathlib import Path

import apache_beam as beam
import pytest
import zstandard
from apache_beam.options.pipeline_options import PipelineOptions
from http_fixture import FAST_FETCH, LocalServer, extract_pages

from corpusforge.core.config import Config
from corpusforge.corpora.document import make_id
from corpusforge.corpora.urls import canonical_url
from corpusforge.corpora.warc import Capture, WarcFile, warc_files
from corpusforge.pipeline.options import LOCAL_RUNNER
from corpusforge.pipeline.webtext import build_webtext

FETCH = {**FAST_FETCH, "per_host_concurrency": 32, "concurrency": 32, "allow_networks": ["127.0.0.1/32"]}


def run_job(cfg: Config, out: Path) -> tuple[list[dict], list[dict]]:
    """Run the composite and read its two outputs back from text files."""
    options = PipelineOptions(flags=[], runner=LOCAL_RUNNER, direct_running_mode="in_memory")
    with beam.Pipeline(options=options) as pipeline:
        documents, rejects = build_webtext(pipeline, cfg)
        for name, records in (("documents", documents), ("rejects", rejects)):
            (
                records
                | f"Json{name}" >> beam.Map(lambda r: json.dumps(asdict(r), sort_keys=True))
                | f"Write{name}" >> beam.io.WriteToText(str(out / name), shard_name_template="")
            )
    return (
        [json.loads(line) for line in (out / "documents").read_text().splitlines()],
        [json.loads(line) for line in (out / "rejects").read_text().splitlines()],
    )


def submission(id: str, url: str, score: int = 5, **extra: object) -> str:
    row = {
        "id": id,
        "url": url,
        "score": score,
        "is_self": False,
        "over_18": False,
        "subreddit": "test",
        "title": f"Title {id}",
        "created_utc": 1120000000 + len(id),
    }
    row.update(extra)
    return json.dumps(row)


@pytest.fixture(scope="module")
def pages(shared_data, tmp_path_factory) -> dict[str, bytes]:
    return extract_pages(shared_data, tmp_path_factory.mktemp("pages"), count=6)


def write_dumps(server: LocalServer, pages: dict[str, bytes], where: Path) -> tuple[list[Path], dict[str, str], int]:
    """Two monthly dumps (.zst and .xz). Returns the paths, the expected reject reason of each
    fault URL, and the number of submissions (malformed line included)."""
    names = list(pages)
    good = [submission(f"p{i}", server.url(f"/page/{name}")) for i, name in enumerate(names)]
    variants = [
        submission("v1", server.url(f"/page/{names[0]}#comments"), 1),  # same page, other spelling
        submission("v2", server.url(f"/page/{names[0]}?utm_source=reddit"), 1),
        submission("g1", server.url(f"/gzip/{names[1]}")),
        submission("m1", server.url(f"/moved/{names[2]}")),
        submission("f1", server.url("/flaky/job")),
        submission("r1", server.url("/ratelimit/job")),
        submission("s1", server.url(f"/page/{names[4]}?sum=1"), 2),  # 2 + 2 >= 3 only when summed
        submission("s2", server.url(f"/page/{names[4]}/?sum=1"), 2),
        submission("k1", server.url(f"/page/{names[3]}?low=1"), 2),
        submission("q1", server.url(f"/page/{names[1]}?/base/news-3/1180.xml&amp;coll=1&thispage=23")),  # as linked
    ]
    faults = {
        "/private/a": "robots_disallowed",
        "/to-metadata": "ssrf_blocked",
        "/to-private": "ssrf_blocked",
        "/loop/0": "too_many_redirects",
        "/image": "content_type",
        "/bomb": "decompression_bomb",
        "/huge": "too_large",
        "/missing": "http_error",
        "/slow": "timeout",
    }
    fault_rows = [submission(f"x{i}", server.url(path)) for i, path in enumerate(faults)]
    dropped = [
        submission("d1", "https://www.reddit.com/r/test/comments/d1/", is_self=True),
        submission("d2", server.url(f"/page/{names[5]}?nsfw=1"), over_18=True),
        submission("d3", "https://i.imgur.com/abcdef.png"),
        submission("d4", server.url("/files/photo.jpg")),
        submission("d5", "not a url"),
        '{"id": "d6", "url": ',  # truncated line
    ]
    june = good[:3] + variants[:5] + dropped
    july = good[3:] + variants[5:] + fault_rows
    zst, xz = where / "RS_2005-06.zst", where / "RS_2005-07.xz"
    zst.write_bytes(zstandard.ZstdCompressor().compress("\n".join(june).encode("utf-8")))
    xz.write_bytes(lzma.compress("\n".join(july).encode("utf-8")))
    return [zst, xz], {server.url(path): reason for path, reason in faults.items()}, len(june) + len(july)


def test_webtext_job_online_then_offline(pages, tmp_path):
    warc_dir = tmp_path / "warc"
    settings = {
        "dumps": [],
        "exclude_over_18": True,
        "warc_dir": str(warc_dir),
        "fetch": FETCH,
        "extract": {"languages": [], "timeout_s": 20, "min_words": 30},
    }
    with LocalServer(pages) as server:
        dumps, fault_reasons, submitted = write_dumps(server, pages, tmp_path)
        cfg = Config.model_validate(
            {"run": {"output_dir": str(tmp_path / "out")}, "webtext": {**settings, "dumps": [str(p) for p in dumps]}}
        )
        (tmp_path / "run1").mkdir()
        documents, rejects = run_job(cfg, tmp_path / "run1")
        hits = dict(server.hits)

    # every submission is accounted for, exactly once
    assert len(documents) + len(rejects) == submitted
    assert len({r["id"] for r in rejects} | {d["id"] for d in documents}) == submitted
    by_key = {r["key"]: r["reason"] for r in rejects}
    for url, reason in fault_reasons.items():
        assert by_key[url] == reason, (url, by_key.get(url))
    reasons = sorted(r["reason"] for r in rejects)
    for reason in ("self_post", "over_18", "blocked_domain", "blocked_extension", "bad_url", "malformed_json", "low_karma"):
        assert reason in reasons
    assert reasons.count("duplicate_url") == 3  # v1, v2 under p0; s2 under s1

    # pages became documents with their karma, subreddit and WARC record
    by_id = {d["id"]: d for d in documents}
    names = list(pages)

    def document_for(path: str) -> dict:
        return by_id[make_id("webtext", canonical_url(server.url(path)))]  # type: ignore[arg-type]

    first = document_for(f"/page/{names[0]}")
    assert first["meta"]["score"] == "7" and first["meta"]["subreddit"] == "test" and first["title"] == "Title p0"
    assert first["meta"]["warc_record_id"].startswith("<urn:uuid:")
    assert document_for(f"/moved/{names[2]}")["url"] == server.url(f"/page/{names[2]}")  # final URL of the redirect
    assert document_for(f"/page/{names[4]}?sum=1")["meta"]["score"] == "4"
    assert document_for("/flaky/job")["text"] == document_for(f"/page/{names[0]}")["text"]
    assert document_for("/ratelimit/job")["text"] and document_for(f"/gzip/{names[1]}")["text"]
    assert len(documents) >= 6
    assert all("\n\n\n" not in d["text"] and d["source"] == "webtext" for d in documents)
    assert hits["/robots.txt"] == 1 and hits["/to-metadata"] == 1 and hits.get("/files/photo.jpg") is None
    # fetched as submitted: slashes, bare key and parameter order intact, only "&amp;" undone
    assert hits[f"/page/{names[1]}?/base/news-3/1180.xml&coll=1&thispage=23"] == 1
    assert document_for(f"/page/{names[1]}?/base/news-3/1180.xml&coll=1&thispage=23")["text"]

    # second run: the server is gone, the WARCs answer; same documents, same rejects
    written = warc_files(warc_dir)
    assert written and not [p for p in warc_dir.iterdir() if ".tmp-" in p.name]
    offline = Config.model_validate(
        {"run": {"output_dir": str(tmp_path / "out")}, "webtext": {**settings, "dumps": [str(p) for p in dumps], "offline": True}}
    )
    (tmp_path / "run2").mkdir()
    documents2, rejects2 = run_job(offline, tmp_path / "run2")
    key = lambda d: d["id"]  # noqa: E731
    assert sorted(documents2, key=key) == sorted(documents, key=key)
    assert sorted((r["id"], r["reason"]) for r in rejects2) == sorted((r["id"], r["reason"]) for r in rejects)
    assert warc_files(warc_dir) == written  # nothing fetched, nothing written


def test_offline_from_real_warcs_without_dumps(shared_data, tmp_path):
    """wget's WARCs from the shared data: every capture becomes a document or a counted reject."""
    cfg = Config.model_validate(
        {
            "run": {"output_dir": str(tmp_path)},
            "webtext": {"offline": True, "warc_dir": str(shared_data / "html" / "warc"), "extract": {"languages": ["en"]}},
        }
    )
    documents, rejects = run_job(cfg, tmp_path)
    assert len(documents) + len(rejects) == 37  # response records in sample-0000/0001 (35 distinct URIs)
    assert sum(r["reason"] == "duplicate_url" for r in rejects) == 2
    assert len(documents) >= 25 and len({d["id"] for d in documents}) == len(documents)
    urls = {d["url"] for d in documents}
    assert "https://commoncrawl.org/faq" in urls
    assert all(d["meta"]["warc_record_id"].startswith("<urn:uuid:") and d["meta"]["timestamp"].startswith("2024-") for d in documents)


def test_offline_replay_finds_captures_under_other_spellings(pages, tmp_path):
    """Another crawler captured the pages under the spelling it saw; the dump links other spellings of the
    same canonical URLs (parameter order, an empty parameter, a #fragment, "&amp;"): all replay."""
    names = list(pages)[:3]
    captured = [
        f"http://news.example.org/a/{names[0]}?b=2&a=1",
        f"http://news.example.org/b/{names[1]}?id=7&page=",
        f"http://www.news.example.org/c/{names[2]}#comments",
    ]
    submitted = [
        f"http://news.example.org/a/{names[0]}?a=1&amp;b=2",
        f"http://news.example.org/b/{names[1]}?id=7&page",
        f"https://news.example.org/c/{names[2]}/",
    ]
    warc_dir = tmp_path / "warc"
    with WarcFile(warc_dir / "foreign.warc.gz") as warc:
        for url, name in zip(captured, names):
            warc.write(Capture(url=url, final_url=url, status=200, headers=(("Content-Type", "text/html"),), body=pages[name]))
    dump = tmp_path / "RS_2005-08.ndjson"
    dump.write_text("\n".join(submission(f"o{i}", url) for i, url in enumerate(submitted)), encoding="utf-8")
    cfg = Config.model_validate(
        {
            "run": {"output_dir": str(tmp_path / "out")},
            "webtext": {"dumps": [str(dump)], "offline": True, "warc_dir": str(warc_dir), "extract": {"languages": [], "min_words": 30}},
        }
    )
    documents, rejects = run_job(cfg, tmp_path)
    assert [r["reason"] for r in rejects if r["reason"] == "not_in_warc"] == []
    assert sorted(d["url"] for d in documents) == sorted(captured)


def test_description_lead_only_where_the_host_does_not_share_it(shared_data, tmp_path):
    """wired's page lacks its visible standfirst in trafilatura's text. Captured once on one host it gets it
    back as its lead; captured on two pages of another host, the shared description is the site's: no lead."""
    with tarfile.open(shared_data / "html" / "trafilatura_eval" / "html_eval_and_cache.tar.xz", "r|xz") as archive:
        page = next(archive.extractfile(m).read() for m in archive if m.name.endswith("/wired.com.burn.html"))
    urls = ["http://alone.example.org/burn", "http://shared.example.org/a", "http://shared.example.org/b"]
    warc_dir = tmp_path / "warc"
    with WarcFile(warc_dir / "wired.warc.gz") as warc:
        for url in urls:
            warc.write(Capture(url=url, final_url=url, status=200, headers=(("Content-Type", "text/html"),), body=page))
    settings = {"offline": True, "warc_dir": str(warc_dir), "extract": {"languages": ["en"]}}
    runs = {}
    for lead in (True, False):
        cfg = Config.model_validate(
            {"run": {"output_dir": str(tmp_path / f"out{lead}")}, "webtext": {**settings, "extract": {"lead_from_description": lead}}}
        )
        (tmp_path / f"run{lead}").mkdir()
        documents, _ = run_job(cfg, tmp_path / f"run{lead}")
        runs[lead] = {d["url"]: d["text"] for d in documents}
    assert sorted(runs[True]) == sorted(runs[False]) == sorted(urls)
    standfirst = "The computing power required for AI landmarks"
    assert runs[True][urls[0]].startswith(standfirst) and runs[True][urls[0]].endswith(runs[False][urls[0]])
    assert all(runs[True][url] == runs[False][url] and standfirst not in runs[True][url] for url in urls[1:])
