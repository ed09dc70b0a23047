"""The fetcher against a real HTTP server on 127.0.0.1: faults, SSRF refusals, politeness, WARC."""

from __future__ import annotations

import asyncio
import gzip
import time
from pathlib import Path

import pytest
from http_fixture import FAST_FETCH, LocalServer, extract_pages

from corpusforge.core.config import FetchConfig
from corpusforge.corpora.fetch import (
    AddressPolicy,
    BlockedAddress,
    Fetcher,
    SafeResolver,
    batch_warc_name,
    decode_body,
    decode_page,
    html_to_text,
)
from corpusforge.corpora.warc import Capture, WarcFile, index_warcs, iter_captures, read_capture
from corpusforge.pipeline.fetch import FetchDoFn

FAST = FAST_FETCH


@pytest.fixture(scope="module")
def pages(shared_data, tmp_path_factory) -> dict[str, bytes]:
    return extract_pages(shared_data, tmp_path_factory.mktemp("pages"), count=6)


@pytest.fixture()
def server(pages):
    with LocalServer(pages) as running:
        yield running


def fetch(urls: list[str], **overrides: object) -> list[Capture]:
    config = FetchConfig(**{**FAST, "allow_networks": ["127.0.0.1/32"], **overrides})

    async def run() -> list[Capture]:
        fetcher = Fetcher(config)
        try:
            return await fetcher.fetch_all(urls)
        finally:
            await fetcher.close()

    return asyncio.run(run())


def test_real_pages_plain_gzip_and_redirected(server, pages):
    name = next(iter(pages))
    plain, zipped, moved = fetch([server.url(f"/page/{name}"), server.url(f"/gzip/{name}"), server.url(f"/moved/{name}")])
    assert (plain.status, plain.reason, plain.body) == (200, "", pages[name])
    assert zipped.header("Content-Encoding") == "gzip" and decode_body(zipped, 10**7) == (pages[name], "")
    assert moved.url == server.url(f"/moved/{name}") and moved.final_url == server.url(f"/page/{name}")
    assert moved.body == pages[name] and moved.ip == "127.0.0.1"
    assert server.user_agents == {"corpusforge/0.1 (+https://github.com/corpusforge)"}


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/private/secret", "robots_disallowed"),
        ("/broken/x", "http_error"),
        ("/missing", "http_error"),
        ("/loop/0", "too_many_redirects"),
        ("/to-private", "ssrf_blocked"),
        ("/to-metadata", "ssrf_blocked"),
        ("/image", "content_type"),
        ("/huge", "too_large"),
        ("/slow", "timeout"),
        ("/stall", "timeout"),
    ],
)
def test_fault_endpoints_end_with_their_reason(server, path, reason):
    started = time.monotonic()
    (capture,) = fetch([server.url(path)])
    assert capture.reason == reason, capture.detail
    assert time.monotonic() - started < 6  # every loop is bounded
    if path == "/to-metadata":
        assert "169.254.169.254" in capture.detail and server.hits["/to-metadata"] == 1
    if path == "/loop/0":
        assert sum(n for p, n in server.hits.items() if p.startswith("/loop/")) == 6  # first + 5 redirects


def test_retries_are_bounded_and_recover(server):
    flaky, limited, broken = fetch([server.url("/flaky/a"), server.url("/ratelimit/a"), server.url("/broken/b")])
    assert (flaky.status, flaky.reason) == (200, "") and server.hits["/flaky/a"] == 2
    assert (limited.status, limited.reason) == (200, "") and server.hits["/ratelimit/a"] == 2
    assert broken.reason == "http_error" and server.hits["/broken/b"] == 3  # 1 + retries


def test_retry_after_is_honoured_but_capped(server):
    started = time.monotonic()
    fetch([server.url("/ratelimit/b")])
    assert time.monotonic() - started >= 1.0  # Retry-After: 1
    started = time.monotonic()
    (capture,) = fetch([server.url("/ratelimit/c")], max_retry_after_s=0.2)
    assert capture.reason == "" and time.monotonic() - started < 1.0


def test_loopback_refused_without_allow_option(server, pages):
    name = next(iter(pages))
    by_ip, by_name = fetch([server.url(f"/page/{name}"), f"http://localhost:{server.port}/page/{name}"], allow_networks=[])
    assert by_ip.reason == "ssrf_blocked" and by_name.reason == "ssrf_blocked"
    assert server.hits == {}  # nothing, not even robots.txt, reached the server


def test_redirect_to_named_loopback_refused_when_only_the_ip_literal_is_allowed(server):
    (capture,) = fetch([server.url("/to-localhost")], allow_networks=[], allow_hosts=["127.0.0.1"])
    assert capture.reason == "ssrf_blocked" and "localhost" in capture.detail


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.0.0.1",
        "172.16.5.4",
        "192.168.1.1",
        "169.254.169.254",
        "0.0.0.0",
        "224.0.0.1",
        "240.0.0.1",
        "100.64.0.1",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "ff02::1",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
    ],
)
def test_policy_refuses_non_public_addresses(address):
    with pytest.raises(BlockedAddress):
        AddressPolicy().check("h", address)


def test_policy_allows_public_and_explicit_exceptions():
    AddressPolicy().check("h", "93.184.216.34")
    AddressPolicy().check("h", "2606:2800:220:1:248:1893:25c8:1946")
    AddressPolicy(allow_networks=["10.0.0.0/8"]).check("h", "10.1.2.3")
    AddressPolicy(allow_hosts=["intranet"]).check("INTRANET", "10.1.2.3")
    with pytest.raises(BlockedAddress):
        AddressPolicy(allow_networks=["10.0.0.0/8"]).check("h", "169.254.169.254")


def test_resolver_refuses_names_with_private_answers():
    async def resolve() -> None:
        resolver = SafeResolver(AddressPolicy())
        try:
            await resolver.resolve("localhost", 80)
        finally:
            await resolver.close()

    with pytest.raises(BlockedAddress):
        asyncio.run(resolve())


def test_global_and_per_host_limits(pages):
    name = next(iter(pages))
    with LocalServer(pages, latency_s=0.15) as slow:
        urls = [slow.url(f"/page/{name}?n={i}") for i in range(12)]
        fetch(urls, concurrency=8, per_host_concurrency=3)
        assert slow.max_in_flight <= 3
        slow.max_in_flight = 0
        fetch(urls, concurrency=2, per_host_concurrency=8)
        assert slow.max_in_flight <= 2
    with LocalServer(pages) as polite:
        started = time.monotonic()
        fetch([polite.url(f"/page/{name}?n={i}") for i in range(4)], per_host_delay_s=0.2)
        assert time.monotonic() - started >= 0.2 * 4  # robots.txt + 4 pages, 0.2 s apart


def test_decompression_bomb_and_charsets(server):
    bomb, declared, unknown = fetch([server.url("/bomb"), server.url("/latin1-declared-utf8"), server.url("/unknown-charset")])
    assert len(bomb.body) < 100_000 and decode_page(bomb, 5_000_000) == (None, "decompression_bomb")
    for capture in (declared, unknown):
        html, reason = decode_page(capture, 5_000_000)
        assert reason == "" and "Le café crème coûte" in html  # type: ignore[operator]
    assert html_to_text('<meta charset="windows-1251"><p>Привет'.encode("cp1251"), "text/html")[0].endswith("Привет")
    assert decode_body(Capture(url="u", headers=(("Content-Encoding", "br"),), body=b"x"), 100) == (None, "bad_encoding")
    assert decode_body(Capture(url="u", headers=(("Content-Encoding", "gzip"),), body=gzip.compress(b"a" * 101)), 100) == (
        None,
        "decompression_bomb",
    )


def test_warc_round_trip_of_pages_and_failures(server, pages, tmp_path):
    name = next(iter(pages))
    captures = fetch([server.url(f"/gzip/{name}"), server.url(f"/moved/{name}"), server.url("/to-metadata")])
    with WarcFile(tmp_path / "a.warc.gz") as warc:
        written = [warc.write(c) for c in captures]
    assert [p.name for p in tmp_path.iterdir()] == ["a.warc.gz"]  # no temporary file left behind
    replayed = list(iter_captures(tmp_path / "a.warc.gz"))
    assert [(c.url, c.final_url, c.status, c.reason, c.body, c.record_id) for c in replayed] == [
        (c.url, c.final_url, c.status, c.reason, c.body, c.record_id) for c in written
    ]
    index = index_warcs(tmp_path)
    assert set(index) == {c.url for c in captures}
    assert decode_body(read_capture(*index[server.url(f"/gzip/{name}")]), 10**7) == (pages[name], "")


def test_failed_warc_write_leaves_nothing(tmp_path: Path):
    with pytest.raises(RuntimeError):
        with WarcFile(tmp_path / "b.warc.gz") as warc:
            warc.write(Capture(url="http://x/", reason="timeout"))
            raise RuntimeError("worker died")
    assert list(tmp_path.iterdir()) == []


def test_connection_layer_refuses_even_if_the_pre_check_is_skipped(server, pages):
    """The connector resolves through SafeResolver, so a name that turns private between the hop
    check and the connect (DNS rebinding) is still refused: no request reaches the server."""
    name = next(iter(pages))

    async def run() -> Capture:
        fetcher = Fetcher(FetchConfig(**FAST))
        try:
            return await fetcher._request(f"http://localhost:{server.port}/page/{name}", ["text/html"], 10**6)
        finally:
            await fetcher.close()

    capture = asyncio.run(run())
    assert capture.reason == "ssrf_blocked" and server.hits == {}


def test_deadline_starts_at_the_first_request_not_in_the_host_queue(pages):
    name = next(iter(pages))
    with LocalServer(pages, latency_s=0.3) as slow:
        captures = fetch([slow.url(f"/page/{name}?q={i}") for i in range(6)], per_host_concurrency=1, url_deadline_s=1.0)
    assert [c.reason for c in captures] == [""] * 6  # 7 requests x 0.3 s in a row, each URL well inside 1 s


def test_backoff_reads_retry_after_seconds_and_dates_and_caps_them():
    async def backoffs() -> list[float]:
        fetcher = Fetcher(FetchConfig(backoff_s=0.5, max_retry_after_s=30))
        try:

            def after(value: str) -> Capture:
                return Capture(url="u", status=429, headers=(("Retry-After", value),))

            return [
                fetcher._backoff(after("7"), 0),
                fetcher._backoff(after("3600"), 0),
                fetcher._backoff(after("Wed, 21 Oct 2015 07:28:00 GMT"), 0),
                fetcher._backoff(after("soon"), 2),
                fetcher._backoff(Capture(url="u", status=503), 1),
            ]
        finally:
            await fetcher.close()

    assert asyncio.run(backoffs()) == [7.0, 30.0, 0.0, 2.0, 1.0]


def test_fetch_dofn_writes_one_warc_per_batch_and_replays_it(server, pages, tmp_path):
    name = next(iter(pages))
    urls = [server.url(f"/page/{name}"), server.url("/to-metadata")]
    config = FetchConfig(**FAST, allow_networks=["127.0.0.1/32"])

    def run(batch: list[tuple[str, str]], offline: bool) -> list[tuple[str, Capture]]:
        dofn = FetchDoFn(config, str(tmp_path), offline=offline)
        dofn.setup()
        try:
            return list(dofn.process(batch))
        finally:
            dofn.teardown()

    first = run([(url, f"payload{i}") for i, url in enumerate(urls)], offline=False)
    assert [p.name for p in tmp_path.iterdir()] == [batch_warc_name(urls)]
    assert [(payload, c.reason) for payload, c in first] == [("payload0", ""), ("payload1", "ssrf_blocked")]
    hits = dict(server.hits)
    again = run([(url, "p") for url in urls] + [(server.url("/never-fetched"), "new")], offline=True)
    assert {c.url: (c.reason, c.record_id) for _, c in again} == {
        **{c.url: (c.reason, c.record_id) for _, c in first},
        server.url("/never-fetched"): ("not_in_warc", ""),
    }
    assert dict(server.hits) == hits  # replay and offline miss touch no server


def test_robots_unavailable_missing_and_crawl_delay(pages):
    name = next(iter(pages))
    with LocalServer(pages, robots=503) as down:  # RFC 9309: server error means disallow everything
        (capture,) = fetch([down.url(f"/page/{name}")], retries=0)
        assert capture.reason == "robots_disallowed" and down.hits[f"/page/{name}"] == 0
    with LocalServer(pages, robots=404) as missing:  # no robots.txt: everything allowed
        (capture,) = fetch([missing.url("/private/x")])
        assert capture.reason == ""
    with LocalServer(pages, robots=b"User-agent: *\nCrawl-delay: 0.3\n") as delayed:
        started = time.monotonic()
        fetch([delayed.url(f"/page/{name}?d={i}") for i in range(3)])
        assert time.monotonic() - started >= 0.6  # three page starts, 0.3 s apart


class FaultyRedirects(LocalServer):
    """Redirects to Locations no URL parser accepts, and a robots.txt that takes 3 s."""

    def route(self, h, path: str, count: int) -> None:  # type: ignore[no-untyped-def]
        if path.startswith("/bad-location/"):
            self.send(h, 302, headers={"Location": path.removeprefix("/bad-location/").replace("~", "/")})
        elif path == "/robots.txt" and self.robots == b"slow":
            time.sleep(3)
            self.send(h, 200, b"User-agent: *\n", "text/plain")
        else:
            super().route(h, path, count)


def test_redirect_to_a_bad_port_fails_that_url_not_the_batch(pages):
    name = next(iter(pages))
    with FaultyRedirects(pages) as server:
        bad = [server.url(f"/bad-location/http:~~127.0.0.1:{port}~x") for port in ("99999", "abc", "-1")]
        bad.append(server.url("/bad-location/http:~~[::1~x"))  # an unclosed IPv6 literal
        captures = fetch([*bad, server.url(f"/page/{name}")])
    assert [c.reason for c in captures] == ["bad_url"] * 4 + [""]
    assert all(c.url == url for c, url in zip(captures, bad))


def test_robots_txt_time_counts_inside_the_url_deadline(pages):
    name = next(iter(pages))
    with FaultyRedirects(pages, robots=b"slow") as server:
        started = time.monotonic()
        (capture,) = fetch([server.url(f"/page/{name}")], url_deadline_s=1.0)
        elapsed = time.monotonic() - started
    assert capture.reason == "timeout" and elapsed < 2.5  # not the 3 s robots.txt answer
    assert server.hits[f"/page/{name}"] == 0


def test_fetches_run_concurrently_up_to_each_limit(pages):
    """The limits are reached, not only respected: a serial fetcher would take 12 x 0.3 s and never overlap."""
    name = next(iter(pages))
    latency = 0.3
    with LocalServer(pages, latency_s=latency) as slow:
        urls = [slow.url(f"/page/{name}?n={i}") for i in range(12)]
        started = time.monotonic()
        captures = fetch(urls, concurrency=8, per_host_concurrency=3)
        elapsed = time.monotonic() - started
        assert [c.status for c in captures] == [200] * 12
        assert slow.max_in_flight == 3
        assert elapsed < 0.8 * 12 * latency  # robots.txt then 4 rounds of 3: about 1.5 s
        slow.max_in_flight = 0
        fetch(urls, concurrency=4, per_host_concurrency=8)
        assert slow.max_in_flight == 4
