"""A counting TCP proxy for the object-store benchmark: S3 clients talk to it instead of the server, and it
counts the bytes each way (requests ~ bytes written to the store, responses ~ bytes read from it; HTTP
headers included), so a build's traffic on the store is measured without touching the clients.

    with CountingProxy("127.0.0.1", 9000) as proxy:
        env = {"AWS_ENDPOINT_URL": proxy.endpoint}
        ...
        print(proxy.counts())  # {"to_store": ..., "from_store": ...}
        print(proxy.breakdown())  # the same per kind of request: "GET <bucket>/tmp-#/documents/part-#.parquet"

The breakdown reads the request line at the start of each chunk a client sends (HTTP/1.1 requests on one
connection follow each other, and clients send the headers in one write) and charges the response bytes
that follow on that connection to it: a diagnostic, exact enough to find what is read many times.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections import Counter

import psutil

CHUNK = 1 << 18
_REQUEST = re.compile(rb"^(GET|PUT|POST|HEAD|DELETE) (\S+) HTTP/1\.[01]\r\n")
_VARYING = re.compile(r"[0-9a-f]{8,}|\d+")  # uuids, hashes, part numbers: one kind of request for all of them


class CountingProxy:
    """Forwards every connection on a free 127.0.0.1 port to ``host:port``, from an asyncio loop in a thread."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self._counts = {"to_store": 0, "from_store": 0}
        self._kinds: dict[str, Counter] = {}  # kind of request -> requests, to_store, from_store
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._native_id = 0
        self._open: set[asyncio.Task] = set()  # the loop keeps only weak references to tasks
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def counts(self) -> dict[str, int]:
        """Bytes forwarded so far, each way (a snapshot; the loop thread keeps adding)."""
        return dict(self._counts)

    def breakdown(self) -> dict[str, dict[str, int]]:
        """Per kind of request so far: {"requests", "to_store", "from_store"} (a snapshot)."""
        return {kind: dict(counts) for kind, counts in list(self._kinds.items())}

    def cpu_seconds(self) -> float:
        """CPU seconds of the proxy's thread: the instrument's own cost, which a real store would not add."""
        for thread in psutil.Process().threads():
            if thread.id == self._native_id:
                return thread.user_time + thread.system_time
        return 0.0

    def __enter__(self) -> CountingProxy:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the counting proxy did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _serve(self) -> None:
        self._native_id = threading.get_native_id()
        self._loop = asyncio.new_event_loop()
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            self._loop.close()

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._open.add(task)
        try:
            store_reader, store_writer = await asyncio.open_connection(*self.target)
        except OSError:
            client_writer.close()
            self._open.discard(task)
            return
        current = [Counter()]  # the kind of the request this connection is serving
        try:
            await asyncio.gather(
                self._pipe(client_reader, store_writer, "to_store", current),
                self._pipe(store_reader, client_writer, "from_store", current),
            )
        finally:
            for writer in (store_writer, client_writer):
                writer.close()
            self._open.discard(task)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: str, current: list[Counter]) -> None:
        """Copy one direction until its end of file, then pass the end of file on (HTTP keep-alive closes cleanly)."""
        try:
            while data := await reader.read(CHUNK):
                self._counts[direction] += len(data)
                if direction == "to_store" and (request := _REQUEST.match(data)):
                    current[0] = self._kind(request.group(1).decode(), request.group(2).decode("latin-1"))
                    current[0]["requests"] += 1
                current[0][direction] += len(data)
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError):
            writer.close()

    def _kind(self, method: str, target: str) -> Counter:
        path, _, query = target.partition("?")
        kind = f"{method} {_VARYING.sub('#', path)}" + (f"?{query.split('=')[0]}" if query else "")
        return self._kinds.setdefault(kind, Counter())
