"""Safe, polite page fetching: an aiohttp crawler per Beam worker, captured to WARC.

Safety: every hop (first URL and each redirect) is checked before connecting: http(s) only,
robots.txt, and the address. Host names resolve through ``SafeResolver``, which refuses the host
when ANY answer is loopback / private / link-local / multicast / reserved / unspecified, and the
connector connects to exactly the addresses it returned (no re-resolution, so no TOCTOU). Bodies
are read raw (no auto-decompression) with a byte cap while streaming; decoding happens later in
``decode_page`` with a decoded-size cap, the same path for live fetches and WARC replays.

Politeness: global and per-host concurrency, a minimum gap between request starts per host
(raised to robots.txt Crawl-delay, capped), bounded retries with backoff on 429 (Retry-After) and 5xx.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import dataclasses
import hashlib
import ipaddress
import logging
import re
import socket
import zlib
from collections.abc import AsyncIterator, Iterable
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from urllib.parse import urljoin, urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from protego import Protego

from corpusforge.core.config import FetchConfig
from corpusforge.corpora.decode import guess_encoding
from corpusforge.corpora.warc import Capture

log = logging.getLogger(__name__)

REDIRECTS = {301, 302, 303, 307, 308}
RETRY_STATUSES = {429, 500, 502, 503, 504}
ROBOTS_MAX_BYTES = 500_000
PROGRESS_EVERY_S = 15.0
ROBOTS_TYPES = ["text/plain", "text/html"]  # some servers mislabel robots.txt
META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([a-zA-Z0-9_\-:.]+)""", re.IGNORECASE)


class BlockedAddress(OSError):
    """A host resolved to (or is) an address the policy refuses."""


class AddressPolicy:
    """Only globally routable unicast addresses, unless a host or network is explicitly allowed."""

    def __init__(self, allow_hosts: Iterable[str] = (), allow_networks: Iterable[str] = ()) -> None:
        self.allow_hosts = {h.lower() for h in allow_hosts}
        self.allow_networks = [ipaddress.ip_network(n, strict=False) for n in allow_networks]

    def check(self, host: str, address: str) -> None:
        """Raise BlockedAddress unless ``address`` (an answer for ``host``) may be connected to."""
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if getattr(ip, "ipv4_mapped", None):
            ip = ip.ipv4_mapped  # type: ignore[union-attr]
        if host.lower() in self.allow_hosts or any(ip in net for net in self.allow_networks):
            return
        if (
            ip.is_loopback
            or ip.is_private
            or ip.is_link_local
            or ip.is_multicast
            or ip.is_reserved
            or ip.is_unspecified
            or not ip.is_global
        ):
            raise BlockedAddress(f"{host} -> {ip} is not a public address")


class SafeResolver(AbstractResolver):
    """System DNS, refusing the whole host if any answer is non-public (DNS rebinding)."""

    def __init__(self, policy: AddressPolicy) -> None:
        self.policy = policy
        self.inner = aiohttp.ThreadedResolver()

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        answers = await self.inner.resolve(host, port, family)
        for answer in answers:
            self.policy.check(host, answer["host"])
        return answers

    async def close(self) -> None:
        await self.inner.close()


def _literal_ip(host: str) -> str | None:
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return None


class HostGate:
    """Per-host concurrency and minimum gap between request starts."""

    def __init__(self, concurrency: int) -> None:
        self.slots = asyncio.Semaphore(concurrency)
        self.lock = asyncio.Lock()
        self.next_start = 0.0
        self.delay = 0.0

    async def wait_turn(self) -> None:
        async with self.lock:
            loop = asyncio.get_running_loop()
            pause = self.next_start - loop.time()
            if pause > 0:
                await asyncio.sleep(pause)
            self.next_start = loop.time() + self.delay


class _UrlClock:
    """One URL's ``url_deadline_s``: it runs while the URL does its own work and not while the URL
    waits in its host's queue. Before the first request, the time of each stretch of own work
    (DNS, robots.txt) is spent from the budget; from the first request on, the deadline runs."""

    def __init__(self, deadline: asyncio.Timeout, budget_s: float) -> None:
        self.deadline, self.budget_s, self.spent_s = deadline, budget_s, 0.0

    def start(self) -> None:
        if self.deadline.when() is None:
            self.deadline.reschedule(asyncio.get_running_loop().time() + self.budget_s - self.spent_s)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Charge the block to the URL (a no-op once the deadline runs: it already bounds the block)."""
        if self.deadline.when() is not None:
            yield
            return
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            async with asyncio.timeout(self.budget_s - self.spent_s):
                yield
        finally:
            self.spent_s += loop.time() - started


class Fetcher:
    """Fetch URLs concurrently inside one event loop; every outcome is a ``Capture``."""

    def __init__(self, config: FetchConfig) -> None:
        self.config = config
        self.policy = AddressPolicy(config.allow_hosts, config.allow_networks)
        self.resolver = SafeResolver(self.policy)
        self.slots = asyncio.Semaphore(config.concurrency)
        self.gates: dict[str, HostGate] = {}
        self.robots: dict[str, asyncio.Task[Protego | None]] = {}
        connector = aiohttp.TCPConnector(
            resolver=self.resolver, limit=config.concurrency, limit_per_host=config.per_host_concurrency, ttl_dns_cache=300
        )
        self.session = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(
                total=config.total_timeout_s, sock_connect=config.connect_timeout_s, sock_read=config.read_timeout_s
            ),
            headers={
                "User-Agent": config.user_agent,
                "Accept": "text/html,application/xhtml+xml;q=0.9,*/*;q=0.1",
                "Accept-Encoding": "gzip, deflate",
            },
        )

    async def close(self) -> None:
        await self.session.close()

    async def fetch_all(self, urls: list[str]) -> list[Capture]:
        """Captures in input order; logs a progress counter while a batch is slow."""
        tasks = [asyncio.ensure_future(self.fetch(url)) for url in urls]
        pending: set[asyncio.Future[Capture]] = set(tasks)
        while pending:
            _, pending = await asyncio.wait(pending, timeout=PROGRESS_EVERY_S)
            if pending:
                log.info("fetching: %d of %d URLs done", len(urls) - len(pending), len(urls))
        return [task.result() for task in tasks]

    async def fetch(self, url: str) -> Capture:
        """Follow up to ``max_redirects`` hops, each checked. ``url_deadline_s`` bounds the URL's own
        work (DNS, robots.txt, requests): time queued behind a polite host's other URLs does not count.
        Whatever goes wrong ends as this URL's capture, never as an exception that loses the batch."""
        try:
            async with asyncio.timeout(None) as deadline:
                clock = _UrlClock(deadline, self.config.url_deadline_s)
                return await self._follow(url, self.config.content_types, self.config.max_body_bytes, check_robots=True, clock=clock)
        except TimeoutError:
            return Capture(url=url, reason="timeout", detail=f"over {self.config.url_deadline_s}s deadline")
        except Exception as error:  # noqa: BLE001 - one URL's surprise must not end its batch
            log.warning("fetching %s failed unexpectedly", url, exc_info=True)
            return Capture(url=url, reason="fetch_error", detail=f"{type(error).__name__}: {error}"[:300])

    async def _follow(
        self, url: str, content_types: list[str], max_bytes: int, *, check_robots: bool, clock: _UrlClock | None = None
    ) -> Capture:
        current = url
        for _ in range(self.config.max_redirects + 1):
            refusal = await self._refuse(current, check_robots, clock)
            if refusal is not None:
                return Capture(url=url, final_url=current, reason=refusal[0], detail=refusal[1])
            capture = await self._request_with_retries(current, content_types, max_bytes, clock)
            capture = dataclasses.replace(capture, url=url)
            location = capture.header("Location")
            if capture.reason or capture.status not in REDIRECTS or not location:
                return capture
            try:
                current = urljoin(current, location.strip())
            except ValueError as error:  # e.g. "http://[::1" (an unclosed IPv6 literal)
                return dataclasses.replace(capture, reason="bad_url", detail=f"redirect to {location!r}: {error}"[:300])
        return Capture(url=url, final_url=current, reason="too_many_redirects", detail=f"over {self.config.max_redirects} hops")

    async def _refuse(self, url: str, check_robots: bool, clock: _UrlClock | None = None) -> tuple[str, str] | None:
        """Why this hop must not be requested (reason, detail), or None. Its DNS and robots.txt time
        is the URL's own, so it runs on the URL's clock."""
        try:
            parts = urlsplit(url)
            port = parts.port  # raises on ":99999" or ":abc"
        except ValueError as error:
            return "bad_url", f"{url}: {error}"[:300]
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return "bad_url", url
        async with clock.running() if clock is not None else contextlib.nullcontext():
            return await self._check_host(url, parts.scheme, parts.netloc, parts.hostname, port, check_robots)

    async def _check_host(
        self, url: str, scheme: str, netloc: str, host: str, port: int | None, check_robots: bool
    ) -> tuple[str, str] | None:
        try:
            literal = _literal_ip(host)
            if literal is not None:
                self.policy.check(host, literal)
            else:
                await self.resolver.resolve(host, port or 0)
        except BlockedAddress as error:
            return "ssrf_blocked", str(error)
        except OSError as error:
            return "dns_error", f"{host}: {error}"
        if check_robots and self.config.respect_robots:
            robots = await self._robots(f"{scheme}://{netloc}")
            if robots is not None and not robots.can_fetch(url, self.config.user_agent):
                return "robots_disallowed", url
        return None

    async def _robots(self, origin: str) -> Protego | None:
        """robots.txt of an origin, fetched once (RFC 9309: 4xx allows all, 5xx disallows all).
        Shielded: one waiter hitting its deadline must not cancel the fetch the others share."""
        if origin not in self.robots:
            self.robots[origin] = asyncio.ensure_future(self._load_robots(origin))
        return await asyncio.shield(self.robots[origin])

    async def _load_robots(self, origin: str) -> Protego | None:
        capture = await self._follow(origin + "/robots.txt", ROBOTS_TYPES, ROBOTS_MAX_BYTES, check_robots=False)
        if capture.status >= 500:
            return Protego.parse("User-agent: *\nDisallow: /")
        if capture.reason or capture.status != 200:
            return None
        body, _ = decode_body(capture, ROBOTS_MAX_BYTES)
        robots = Protego.parse((body or b"").decode("utf-8", errors="replace"))
        delay = robots.crawl_delay(self.config.user_agent)
        if delay:
            gate = self._gate(urlsplit(origin).netloc)
            gate.delay = max(self.config.per_host_delay_s, min(float(delay), self.config.max_crawl_delay_s))
        return robots

    def _gate(self, netloc: str) -> HostGate:
        if netloc not in self.gates:
            self.gates[netloc] = HostGate(self.config.per_host_concurrency)
            self.gates[netloc].delay = self.config.per_host_delay_s
        return self.gates[netloc]

    async def _request_with_retries(self, url: str, content_types: list[str], max_bytes: int, clock: _UrlClock | None) -> Capture:
        gate = self._gate(urlsplit(url).netloc)
        for attempt in range(self.config.retries + 1):
            async with gate.slots:
                await gate.wait_turn()
                async with self.slots:
                    if clock is not None:  # the URL's clock runs from its first request on
                        clock.start()
                    capture = await self._request(url, content_types, max_bytes)
            retryable = capture.status in RETRY_STATUSES or capture.reason == "connection_error"
            if not retryable or attempt == self.config.retries:
                return capture
            await asyncio.sleep(self._backoff(capture, attempt))
        raise AssertionError("unreachable")

    def _backoff(self, capture: Capture, attempt: int) -> float:
        """Retry-After (seconds or HTTP date) on 429/503, else exponential backoff; both capped."""
        retry_after = capture.header("Retry-After").strip()
        wait = self.config.backoff_s * 2**attempt
        if retry_after.isdigit():
            wait = float(retry_after)
        elif retry_after:
            try:
                wait = (parsedate_to_datetime(retry_after) - datetime.now(timezone.utc)).total_seconds()
            except (TypeError, ValueError):
                pass
        return max(0.0, min(wait, self.config.max_retry_after_s))

    async def _request(self, url: str, content_types: list[str], max_bytes: int) -> Capture:
        """One GET without redirects; the body is streamed and cut off at ``max_bytes``."""
        try:
            async with self.session.get(url, allow_redirects=False) as response:
                peer = response.connection.transport.get_extra_info("peername") if response.connection else None
                headers = tuple((k.decode("latin-1"), v.decode("latin-1")) for k, v in response.raw_headers)
                base = dict(url=url, final_url=str(response.url), status=response.status, headers=headers, ip=peer[0] if peer else "")
                if response.status in REDIRECTS:
                    return Capture(**base)
                if response.status >= 400 or response.status < 200:
                    return Capture(**base, reason="http_error", detail=f"status {response.status}")
                if response.content_type.lower() not in content_types:
                    return Capture(**base, reason="content_type", detail=response.content_type)
                if (response.content_length or 0) > max_bytes:
                    return Capture(**base, reason="too_large", detail=f"Content-Length {response.content_length}")
                body = bytearray()
                async for chunk in response.content.iter_chunked(65536):
                    body += chunk
                    if len(body) > max_bytes:
                        return Capture(**base, reason="too_large", detail=f"over {max_bytes} bytes")
                return Capture(**base, body=bytes(body))
        except aiohttp.ClientConnectorError as error:  # the resolver's refusal arrives wrapped in here
            reason = "ssrf_blocked" if isinstance(error.os_error, BlockedAddress) else "connection_error"
            return Capture(url=url, reason=reason, detail=str(error)[:300])
        except (TimeoutError, aiohttp.ServerTimeoutError) as error:
            return Capture(url=url, reason="timeout", detail=str(error)[:300] or "read timed out")
        except aiohttp.InvalidURL as error:
            return Capture(url=url, reason="bad_url", detail=str(error)[:300])
        except (aiohttp.ClientError, ValueError) as error:
            return Capture(url=url, reason="connection_error", detail=f"{type(error).__name__}: {error}"[:300])


def decode_body(capture: Capture, max_decoded: int) -> tuple[bytes | None, str]:
    """Undo Content-Encoding with a decoded-size cap: (bytes, "") or (None, reason)."""
    encoding = capture.header("Content-Encoding").strip().lower()
    if encoding in ("", "identity"):
        return (capture.body, "") if len(capture.body) <= max_decoded else (None, "too_large")
    if encoding in ("gzip", "x-gzip", "deflate"):
        wbits = 16 + zlib.MAX_WBITS if "gzip" in encoding else zlib.MAX_WBITS
        try:
            decoder = zlib.decompressobj(wbits)
            out = decoder.decompress(capture.body, max_decoded + 1)
        except zlib.error:
            if encoding != "deflate":
                return None, "bad_encoding"
            try:  # servers often send raw deflate without the zlib header
                decoder = zlib.decompressobj(-zlib.MAX_WBITS)
                out = decoder.decompress(capture.body, max_decoded + 1)
            except zlib.error:
                return None, "bad_encoding"
        if len(out) > max_decoded:
            return None, "decompression_bomb"
        return out, ""
    return None, "bad_encoding"


def _charset_from_header(content_type: str) -> str | None:
    for param in content_type.split(";")[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            return value.strip().strip("\"'")
    return None


def html_to_text(body: bytes, content_type: str) -> tuple[str, str]:
    """Decode HTML bytes: declared header charset, then <meta>, then UTF-8, then a guess; each
    declaration is accepted only if it decodes the page strictly. Returns (text, charset used)."""
    candidates = [_charset_from_header(content_type)]
    meta = META_CHARSET.search(body[:4096])
    candidates += [meta.group(1).decode("ascii", "ignore") if meta else None, "utf-8"]
    for name in candidates:
        if not name:
            continue
        try:
            return body.decode(codecs.lookup(name).name), name
        except (LookupError, UnicodeDecodeError):
            continue
    charset = guess_encoding(body)
    return body.decode(charset, errors="replace"), charset


def decode_page(
    capture: Capture, max_decoded: int, content_types: Iterable[str] = ("text/html", "application/xhtml+xml")
) -> tuple[str | None, str]:
    """A captured response as text: (html, "") or (None, reject reason). Re-checks status and type,
    since foreign WARCs also hold redirects, errors and images."""
    if capture.reason:
        return None, capture.reason
    if capture.status in REDIRECTS:
        return None, "redirect"
    if capture.status != 200:
        return None, "http_error"
    if capture.header("Content-Type").split(";")[0].strip().lower() not in content_types:
        return None, "content_type"
    body, reason = decode_body(capture, max_decoded)
    if body is None:
        return None, reason
    text, _ = html_to_text(body, capture.header("Content-Type"))
    return text, ""


def batch_warc_name(urls: Iterable[str]) -> str:
    """Named by content, so a retried bundle replaces its own file instead of adding one."""
    digest = hashlib.sha1("\n".join(sorted(urls)).encode("utf-8")).hexdigest()[:20]
    return f"fetch-{digest}.warc.gz"
