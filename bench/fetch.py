"""Fetch throughput: corpusforge's async fetcher vs a naive sequential urllib loop, same server.

The server (tests/http_fixture.py, real trafilatura eval pages) runs in a child process on
127.0.0.1 and delays every reply by --latency-ms to stand in for the network. Politeness limits
are lifted (one host here stands for many); SSRF, robots.txt, size caps and timeouts stay on.
Peak memory is tracemalloc's peak of Python allocations in the fetching process.

    .venv/bin/python bench/fetch.py --latency-ms 50 --pages 200
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import sys
import tempfile
import time
import tracemalloc
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from http_fixture import LocalServer, extract_pages  # noqa: E402

from corpusforge.core.config import FetchConfig  # noqa: E402
from corpusforge.corpora.fetch import Fetcher  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"


def serve(latency_s: float, ready: multiprocessing.Queue, stop: multiprocessing.Event) -> None:  # type: ignore[type-arg]
    pages = extract_pages(SHARED, Path(tempfile.mkdtemp()), count=20)
    with LocalServer(pages, latency_s=latency_s) as server:
        ready.put((server.port, list(pages)))
        stop.wait()


def naive(urls: list[str]) -> tuple[float, int]:
    """The reference: one urllib request after another."""
    started, ok = time.perf_counter(), 0
    for url in urls:
        with urllib.request.urlopen(url, timeout=30) as response:
            ok += len(response.read()) > 0
    return time.perf_counter() - started, ok


def ours(urls: list[str], concurrency: int) -> tuple[float, int, int]:
    config = FetchConfig(concurrency=concurrency, per_host_concurrency=concurrency, per_host_delay_s=0.0, allow_networks=["127.0.0.1/32"])

    async def run() -> int:
        fetcher = Fetcher(config)
        try:
            return sum(1 for capture in await fetcher.fetch_all(urls) if not capture.reason)
        finally:
            await fetcher.close()

    tracemalloc.start()
    started = time.perf_counter()
    ok = asyncio.run(run())
    elapsed = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return elapsed, ok, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--pages", type=int, default=200, help="URLs per concurrent run")
    parser.add_argument("--naive-pages", type=int, default=40, help="URLs for the sequential reference")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 64])
    args = parser.parse_args()

    context = multiprocessing.get_context("spawn")
    ready, stop = context.Queue(), context.Event()
    server = context.Process(target=serve, args=(args.latency_ms / 1000, ready, stop), daemon=True)
    server.start()
    try:
        port, names = ready.get(timeout=60)

        def urls(count: int, tag: str) -> list[str]:  # distinct URLs, real pages
            return [f"http://127.0.0.1:{port}/page/{names[i % len(names)]}?{tag}={i}" for i in range(count)]

        naive_s, naive_ok = naive(urls(args.naive_pages, "naive"))
        naive_rate = naive_ok / naive_s
        print(
            f"latency {args.latency_ms:.0f} ms per reply; reference: sequential urllib "
            f"{naive_ok} pages in {naive_s:.2f} s = {naive_rate:.1f} pages/s"
        )
        print(f"{'concurrency':>11} {'pages':>6} {'ok':>5} {'seconds':>8} {'pages/s':>8} {'vs urllib':>9} {'peak MiB':>9}")
        for concurrency in args.concurrency:
            count = min(args.pages, max(20, concurrency * 10))
            elapsed, ok, peak = ours(urls(count, f"c{concurrency}"), concurrency)
            rate = ok / elapsed
            print(f"{concurrency:>11} {count:>6} {ok:>5} {elapsed:>8.2f} {rate:>8.1f} {rate / naive_rate:>8.1f}x {peak / 2**20:>9.1f}")
    finally:
        stop.set()
        server.join(timeout=10)


if __name__ == "__main__":
    main()
