"""The fetch step as a Beam DoFn: replay captures from WARCs, fetch the rest with ``corpora.fetch``."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from typing import TypeVar

import apache_beam as beam

from corpusforge.core import storage
from corpusforge.core.config import FetchConfig
from corpusforge.corpora.fetch import Fetcher, batch_warc_name
from corpusforge.corpora.urls import canonical_url
from corpusforge.corpora.warc import Capture, WarcFile, index_warcs, read_capture

log = logging.getLogger(__name__)
T = TypeVar("T")


def replay_key(url: str) -> str:
    """Captures are found by canonical URL on both sides: another crawler's spelling still replays."""
    return canonical_url(url) or url


class FetchDoFn(beam.DoFn):
    """A batch of (url, payload) in -> (payload, Capture) out. Replays captures found in ``warc_dir``,
    fetches the rest (unless offline) and writes them to one WARC per batch. The payload (e.g. the
    Reddit link) rides along so no join is needed afterwards."""

    def __init__(self, config: FetchConfig, warc_dir: str, offline: bool = False) -> None:
        self.config = config
        self.warc_dir = warc_dir
        self.offline = offline

    def setup(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.fetcher: Fetcher | None = None
        self.index = index_warcs(self.warc_dir, key=replay_key)
        self.fetched = beam.metrics.Metrics.counter("webtext", "urls_fetched")
        self.replayed = beam.metrics.Metrics.counter("webtext", "urls_replayed")
        self.started = time.monotonic()
        self.done = 0

    def process(self, batch: list[tuple[str, T]]) -> Iterator[tuple[T, Capture]]:
        todo = [(url, payload) for url, payload in batch if replay_key(url) not in self.index]
        for url, payload in batch:
            if replay_key(url) in self.index:
                self.replayed.inc()
                yield payload, read_capture(*self.index[replay_key(url)], max_bytes=self.config.max_body_bytes)
        if not todo:
            return
        if self.offline:
            for url, payload in todo:
                yield (
                    payload,
                    Capture(url=url, reason="not_in_warc", detail="no capture in webtext.warc_dir"),
                )  # not its path: the bytes must not depend on where inputs live
            return
        if self.fetcher is None:
            self.fetcher = self.loop.run_until_complete(self._open())
        captures = self.loop.run_until_complete(self.fetcher.fetch_all([url for url, _ in todo]))
        with WarcFile(storage.join(self.warc_dir, batch_warc_name(url for url, _ in todo))) as warc:
            captures = [warc.write(capture) for capture in captures]
        self.fetched.inc(len(captures))
        self.done += len(captures)
        log.info(
            "fetched %d URLs (%.1f/s), %d ok in this batch",
            self.done,
            self.done / (time.monotonic() - self.started),
            sum(1 for c in captures if not c.reason),
        )
        for (_, payload), capture in zip(todo, captures):
            yield payload, capture

    async def _open(self) -> Fetcher:
        return Fetcher(self.config)

    def teardown(self) -> None:
        if getattr(self, "fetcher", None) is not None:
            self.loop.run_until_complete(self.fetcher.close())  # type: ignore[union-attr]
        self.loop.close()
