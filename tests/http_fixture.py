"""A real HTTP server on 127.0.0.1 (ephemeral port) serving real pages plus every fault a crawler meets.

Pages come from the trafilatura evaluation set in the shared data. Fault endpoints:
/slow (drips a byte every 0.2 s), /stall (sends nothing), /flaky/<t> (500 then page),
/ratelimit/<t> (429 + Retry-After then page), /loop/<n> (endless redirects), /to-private and
/to-metadata (redirects to 10.0.0.1 and 169.254.169.254), /huge (unbounded body), /bomb (gzip
bomb), /image (wrong content type), /private/... (robots.txt disallow), /latin1-declared-utf8 and
/unknown-charset (bad charsets), /missing (404). Every loop on the server is bounded in time.
"""

from __future__ import annotations

import functools
import gzip
import tarfile
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PAGES_TAR = Path("html") / "trafilatura_eval" / "html_eval_and_cache.tar.xz"
ROBOTS = b"User-agent: *\nDisallow: /private/\n"
LATIN1_PAGE = (
    "<html><head><title>Caf\u00e9</title></head><body><article><p>"
    + "Le caf\u00e9 cr\u00e8me co\u00fbte deux euros \u00e0 la gare, d\u00e9j\u00e0 servi avec du pain. " * 20
    + "</p></article></body></html>"
).encode("latin-1")


# Fetch settings for servers on 127.0.0.1: no politeness delay, short timeouts, quick retries.
FAST_FETCH = dict(
    per_host_delay_s=0.0,
    per_host_concurrency=16,
    concurrency=16,
    connect_timeout_s=2,
    read_timeout_s=1.0,
    total_timeout_s=2.5,
    url_deadline_s=5,
    max_body_bytes=2_000_000,
    max_decoded_bytes=5_000_000,
    backoff_s=0.1,
    retries=2,
)


def extract_pages(shared_data: Path, dest: Path, count: int = 30, min_bytes: int = 20_000) -> dict[str, bytes]:
    """The first ``count`` eval pages of at least ``min_bytes`` (streamed; stops early)."""
    pages: dict[str, bytes] = {}
    with tarfile.open(shared_data / PAGES_TAR, "r:xz") as archive:
        for member in archive:
            if not (member.isfile() and member.name.startswith("eval/") and member.size >= min_bytes):
                continue
            data = archive.extractfile(member).read()  # type: ignore[union-attr]
            name = Path(member.name).name.replace(".html", "")
            (dest / f"{name}.html").write_bytes(data)
            pages[name] = data
            if len(pages) == count:
                break
    return pages


@functools.cache
@functools.lru_cache(maxsize=1)
def gzip_bomb() -> bytes:
    """50 MB of zeros in ~50 KB of gzip (~1 s of CPU: made once, before the server answers anything)."""
    return gzip.compress(b"\0" * 50_000_000, compresslevel=9)


class LocalServer:
    """Threaded HTTP server; ``hits`` counts requests per path, ``user_agents`` records who asked,
    ``max_in_flight`` the most requests handled at once; ``latency_s`` delays every reply."""

    def __init__(self, pages: dict[str, bytes], latency_s: float = 0.0, robots: bytes | int = ROBOTS) -> None:
        self.pages = pages
        self.robots = robots  # the robots.txt body, or an HTTP status to answer it with
        self.latency_s = latency_s
        self.hits: Counter[str] = Counter()
        self.user_agents: set[str] = set()
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # keep test output quiet
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server naming)
                with server.lock:
                    server.hits[self.path] += 1
                    count = server.hits[self.path]
                    server.user_agents.add(self.headers.get("User-Agent", ""))
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    if server.latency_s:
                        time.sleep(server.latency_s)
                    server.route(self, self.path, count)
                finally:
                    with server.lock:
                        server.in_flight -= 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def __enter__(self) -> "LocalServer":
        gzip_bomb()  # built here, not inside a request's short fetch timeout on a loaded machine
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    @staticmethod
    def send(
        handler: BaseHTTPRequestHandler,
        status: int,
        body: bytes = b"",
        content_type: str = "text/html",
        headers: dict[str, str] | None = None,
    ) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(body)

    def route(self, h: BaseHTTPRequestHandler, path: str, count: int) -> None:  # noqa: C901 (one branch per endpoint)
        parts = path.split("?", 1)[0].strip("/").split("/")
        head = parts[0]
        first_page = next(iter(self.pages.values()))
        try:
            if path == "/robots.txt":
                if isinstance(self.robots, int):
                    self.send(h, self.robots, b"robots unavailable")
                else:
                    self.send(h, 200, self.robots, "text/plain")
            elif head == "page" and parts[1] in self.pages:
                self.send(h, 200, self.pages[parts[1]])
            elif head == "gzip" and parts[1] in self.pages:
                self.send(h, 200, gzip.compress(self.pages[parts[1]]), headers={"Content-Encoding": "gzip"})
            elif head == "moved" and parts[1] in self.pages:
                self.send(h, 301, headers={"Location": f"/page/{parts[1]}"})
            elif head == "private":
                self.send(h, 200, first_page)
            elif head == "flaky":
                self.send(h, 500, b"oops") if count == 1 else self.send(h, 200, first_page)
            elif head == "ratelimit":
                if count == 1:
                    self.send(h, 429, b"slow down", headers={"Retry-After": "1"})
                else:
                    self.send(h, 200, first_page)
            elif head == "broken":
                self.send(h, 503, b"down")
            elif head == "loop":
                self.send(h, 302, headers={"Location": f"/loop/{int(parts[1]) + 1}"})
            elif head == "to-private":
                self.send(h, 302, headers={"Location": "http://10.0.0.1/admin"})
            elif head == "to-metadata":
                self.send(h, 302, headers={"Location": "http://169.254.169.254/latest/meta-data/"})
            elif head == "to-localhost":
                self.send(h, 302, headers={"Location": f"http://localhost:{self.port}/page/{next(iter(self.pages))}"})
            elif head == "image":
                self.send(h, 200, b"\x89PNG\r\n\x1a\n" + b"\0" * 1000, "image/png")
            elif head == "bomb":
                self.send(h, 200, gzip_bomb(), headers={"Content-Encoding": "gzip"})
            elif head == "latin1-declared-utf8":
                self.send(h, 200, LATIN1_PAGE, "text/html; charset=utf-8")
            elif head == "unknown-charset":
                self.send(h, 200, LATIN1_PAGE, "text/html; charset=x-no-such-charset")
            elif head == "huge":  # no Content-Length: the cap must act while streaming
                h.send_response(200)
                h.send_header("Content-Type", "text/html")
                h.send_header("Connection", "close")
                h.end_headers()
                chunk = b"<p>" + b"x" * 65_533
                for _ in range(400):  # 26 MB at most
                    h.wfile.write(chunk)
            elif head == "slow":  # each byte well inside the read timeout, the whole far past the total
                h.send_response(200)
                h.send_header("Content-Type", "text/html")
                h.send_header("Connection", "close")
                h.end_headers()
                for _ in range(100):  # 20 s at most
                    h.wfile.write(b"<p>")
                    h.wfile.flush()
                    time.sleep(0.2)
            elif head == "stall":
                time.sleep(10)
                self.send(h, 200, first_page)
            else:
                self.send(h, 404, b"not found")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up, as it should
