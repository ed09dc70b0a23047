"""GroupByKey and CoGroupByKey through files, for the shuffles that carry an element per document.

Beam's in-process runners (the default ``multi_processing`` mode included) route every shuffled
element through the launching process and hold it there decoded until the consuming stage runs, so
the launcher grew by kilobytes per document: fine for books, gigabytes for Wikipedia's millions of
articles; on Dask, Beam's GroupByKey is a task shuffle of pickled Python lists, which cost more CPU than
these files (``pipeline.options.shuffles_through_files``). Here the producing workers write their (key,
value) pairs into files, a pickle per bucket one after another in each, and only where each bucket's pieces
lie (file, offset, size) goes through the runner; a worker then groups one bucket (a 64th of the elements)
at a time, reading its pieces by range, in several passes when that is more than ``GROUP_BYTES``. Grouping
semantics are Beam's: each key once, with all its values, in no promised order.

The folder is any storage path (``corpusforge.core.storage``) every worker can reach, as the spill
folder is: a local folder they share, or a URI. Without a folder, Beam's own transforms.
"""

from __future__ import annotations

import pickle
import uuid
import zlib
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from corpusforge.core import storage

BUCKETS = 64
FLUSH_ELEMENTS = 100_000  # pairs a worker holds before writing them out, at most
# ... and at most this many bytes of them, pickled (as objects, two to three times that): 100,000 DocRefs
# had held ~90 MB in each reading worker, reached only past ~100 MB of 400 B pages.
FLUSH_BYTES = 8 << 20
SAMPLE = 32  # pairs pickled one by one for their size, until a flush measures it
# A bucket whose files hold more than this (pickled) is grouped in as many passes over them, a share of its
# keys each: a bucket is a fixed 64th of a shuffle, so it grows with the corpus while its groups must not.
GROUP_BYTES = 32 << 20
# The label of the GroupByKey of the writers' (bucket, location) pairs, a few per file whatever the elements carry:
# a runner may group them in one step (the Dask runner does, ``dask_runner._BoundedGroupByKey``).
LOCATIONS = "FilesByBucket"


def bucket_of(key: Any, buckets: int = BUCKETS) -> int:
    """The same bucket for the same key in every process (``hash`` is salted per process): CRC-32 of a
    str's or bytes' own bytes, of ``repr`` for other keys. Every shuffled element is hashed, and this is
    about 5x cheaper than blake2b of the repr (near-dedup shuffles ~14 band keys per document)."""
    return _key_hash(key) % buckets


def _key_hash(key: Any) -> int:
    if isinstance(key, str):
        data = key.encode("utf-8")
    elif isinstance(key, bytes):
        data = key
    else:
        data = repr(key).encode("utf-8")
    return zlib.crc32(data)


class _WriteBuckets(beam.DoFn):
    """(key, value) pairs -> (bucket, (file, offset, size)) for each bucket of each file written: a file per flush,
    a flush every ``flush_elements`` pairs or ``FLUSH_BYTES`` of them, whichever comes first. ``many_keys``: the
    elements are (keys, value), a pair per key (one element through the runner, not one per key)."""

    def __init__(self, folder: str, buckets: int, flush_elements: int | None = None, many_keys: bool = False) -> None:
        self.folder, self.buckets, self.flush_elements, self.many_keys = folder, buckets, flush_elements, many_keys
        self._measured = [0, 0]  # (pickled bytes, pairs) sampled or written so far: the size of a pair
        self._held = self._limit()  # ``_limit()`` of ``_measured``, kept by ``_measure``: not recomputed per pair

    def start_bundle(self) -> None:
        self._pending: defaultdict[int, list] = defaultdict(list)
        self._count = 0

    def process(self, element: tuple[Any, Any]) -> Iterator[tuple[int, tuple[str, int, int]]]:
        pairs = _each_key(element) if self.many_keys else (element,)
        for pair in pairs:
            self._pending[bucket_of(pair[0], self.buckets)].append(pair)
            if self._measured[1] < SAMPLE:
                self._measure(len(pickle.dumps(pair, protocol=pickle.HIGHEST_PROTOCOL)), 1)
        self._count += len(pairs)
        if self._count >= self._held:
            yield from self._flush()

    def _measure(self, nbytes: int, pairs: int) -> None:
        self._measured[0] += nbytes
        self._measured[1] += pairs
        self._held = self._limit()

    def _limit(self) -> int:
        """Pairs held before a flush: ``flush_elements``, fewer where that many would pickle past ``FLUSH_BYTES``."""
        size, pairs = self._measured
        return max(1, min(self.flush_elements or FLUSH_ELEMENTS, FLUSH_BYTES * pairs // max(1, size)))

    def finish_bundle(self) -> Iterator[WindowedValue]:
        for written in self._flush():
            yield WindowedValue(written, MIN_TIMESTAMP, [GlobalWindow()])

    def _flush(self) -> list[tuple[int, tuple[str, int, int]]]:
        """The held pairs as one file, a pickle per bucket one after another: (bucket, (file, offset, size)) each.
        One file per flush, not per bucket: a 64th of the files to create (or objects to put on a store)."""
        if not self._pending:
            return []
        path = storage.join(self.folder, f"{uuid.uuid4().hex}.pickle")
        written, offset = [], 0
        with storage.writing(path) as handle:  # atomic: a bundle that is retried writes a new file; only committed names are read
            for bucket, pairs in sorted(self._pending.items()):
                data = pickle.dumps(pairs, protocol=pickle.HIGHEST_PROTOCOL)
                handle.write(data)
                self._measure(len(data), len(pairs))
                written.append((bucket, (path, offset, len(data))))
                offset += len(data)
        self._pending.clear()
        self._count = 0
        return written


def _each_key(element: tuple[Any, Any]) -> list[tuple[Any, Any]]:
    """(keys, value) -> a (key, value) pair per key."""
    keys, value = element
    return [(key, value) for key in keys]


def _group_bucket(item: tuple[int, list[tuple[str, int, int]]], min_values: int = 1) -> Iterator[tuple[Any, list]]:
    """Every key of one bucket with all its values (``min_values`` of them at least), read from its pieces of the
    files: in one pass, or in one pass per ``GROUP_BYTES`` of them, each keeping a share of the keys, so a worker
    holds a bounded group."""
    bucket, pieces = item
    pieces = sorted(pieces)
    passes = max(1, -(-sum(size for _, _, size in pieces) // GROUP_BYTES))
    for share in range(passes):
        groups: defaultdict[Any, list] = defaultdict(list)
        for path, offset, size in pieces:
            for key, value in pickle.loads(storage.read_range(path, offset, size)):
                if passes == 1 or _key_hash(key) // BUCKETS % passes == share:
                    groups[key].append(value)
        yield from (group for group in groups.items() if len(group[1]) >= min_values)


class FileGroupByKey(beam.PTransform):
    """``beam.GroupByKey()`` whose elements travel through files under ``folder`` (None: Beam's own).

    The input may be several PCollections (a tuple), grouped as one and each written where it is produced: a
    Flatten of several inputs is run by the in-process runners themselves, which hold every element it carries.

    ``flush_elements``: pairs a producing worker holds before writing them out (None: ``FLUSH_ELEMENTS``);
    fewer for large values (shingle sets), so that its buffer stays a few tens of MB. ``many_keys``: the elements
    are (keys, value), the value grouped under each of its keys (a document's band keys: one element per
    document through the runner rather than one per band). ``min_values``: only the keys with at least that many
    values (a band key of one document is no candidate), dropped where they are grouped.
    """

    def __init__(
        self, folder: str | None, buckets: int = BUCKETS, flush_elements: int | None = None, many_keys: bool = False, min_values: int = 1
    ) -> None:
        super().__init__()
        self.folder, self.buckets, self.flush_elements = folder, buckets, flush_elements
        self.many_keys, self.min_values = many_keys, min_values

    def expand(self, pairs: beam.PCollection | tuple[beam.PCollection, ...]) -> beam.PCollection:
        inputs = pairs if isinstance(pairs, tuple) else (pairs,)
        if self.folder is None:
            pairs = inputs[0] if len(inputs) == 1 else inputs | "AllInputs" >> beam.Flatten()
            if self.many_keys:
                pairs = pairs | "EachKey" >> beam.FlatMap(_each_key)
            grouped = pairs | "GroupByKey" >> beam.GroupByKey()
            if self.min_values <= 1:
                return grouped
            return grouped | "MinValues" >> beam.Filter(lambda group, least: len(group[1]) >= least, self.min_values)
        folder = _unique(self.folder)
        writer = _WriteBuckets(folder, self.buckets, self.flush_elements, self.many_keys)
        files = [pcoll | f"WriteBuckets{i or ''}" >> beam.ParDo(writer) for i, pcoll in enumerate(inputs)]
        return (
            files
            | "AllFiles" >> beam.Flatten()
            | LOCATIONS >> beam.GroupByKey()
            | "GroupBucket" >> beam.FlatMap(_group_bucket, self.min_values)
        )


class FileCoGroupByKey(beam.PTransform):
    """``beam.CoGroupByKey()`` on a dict of keyed PCollections: (key, {name: [values]}), through files.

    Each input writes its own bucket files where it is produced (a Flatten before writing would have
    the runner gather every element first); only the file names are flattened. A name may have several
    PCollections (a tuple), grouped as one and each written where it is produced, for the same reason.
    """

    def __init__(self, folder: str | None, buckets: int = BUCKETS) -> None:
        super().__init__()
        self.folder, self.buckets = folder, buckets

    def expand(self, inputs: dict[str, beam.PCollection | tuple[beam.PCollection, ...]]) -> beam.PCollection:
        parts = {name: pcolls if isinstance(pcolls, tuple) else (pcolls,) for name, pcolls in inputs.items()}
        if self.folder is None:
            whole = {
                name: pcolls[0] if len(pcolls) == 1 else pcolls | f"All{name.title()}" >> beam.Flatten() for name, pcolls in parts.items()
            }
            return whole | "CoGroupByKey" >> beam.CoGroupByKey()
        folder, names = _unique(self.folder), list(inputs)
        files = [
            pcoll
            | f"Tag{name.title()}{i or ''}" >> beam.Map(lambda kv, n: (kv[0], (n, kv[1])), name)
            | f"Write{name.title()}{i or ''}" >> beam.ParDo(_WriteBuckets(folder, self.buckets))
            for name, pcolls in parts.items()
            for i, pcoll in enumerate(pcolls)
        ]

        def split(item: tuple[Any, list[tuple[str, Any]]]) -> tuple[Any, dict[str, list]]:
            key, values = item
            out: dict[str, list] = {name: [] for name in names}
            for name, value in values:
                out[name].append(value)
            return key, out

        return (
            files
            | "AllFiles" >> beam.Flatten()
            | LOCATIONS >> beam.GroupByKey()
            | "GroupBucket" >> beam.FlatMap(_group_bucket)
            | "Split" >> beam.Map(split)
        )


class FileFlatten(beam.PTransform):
    """``beam.Flatten()`` of several PCollections through files: each input written where it is produced and
    read back a file piece at a time, so only the pieces' locations are flattened by the runner (the
    in-process runners run a Flatten of several inputs themselves, holding every element: a DocRef of every
    document of every source). One input, or no folder: Beam's own."""

    def __init__(self, folder: str | None) -> None:
        super().__init__()
        self.folder = folder

    def expand(self, pcolls: tuple[beam.PCollection, ...]) -> beam.PCollection:
        if self.folder is None or len(pcolls) == 1:
            return pcolls | "Flatten" >> beam.Flatten()
        writer = _WriteBuckets(_unique(self.folder), 1)
        files = [
            pcoll | f"Unkeyed{i}" >> beam.Map(lambda e: (None, e)) | f"Write{i}" >> beam.ParDo(writer) for i, pcoll in enumerate(pcolls)
        ]
        return files | "AllFiles" >> beam.Flatten() | "Read" >> beam.FlatMap(_read_piece)


def _read_piece(location: tuple[int, tuple[str, int, int]]) -> Iterator[Any]:
    _, (path, offset, size) = location
    for _, element in pickle.loads(storage.read_range(path, offset, size)):
        yield element


class FileDistinct(beam.PTransform):
    """``beam.Distinct()`` through files: Beam's lifts it into a combine that holds up to 100,000 elements
    per worker and sends the rest through the runner; here each bucket file is made distinct in turn."""

    def __init__(self, folder: str | None) -> None:
        super().__init__()
        self.folder = folder

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        if self.folder is None:
            return pcoll | "Distinct" >> beam.Distinct()
        return (
            pcoll
            | "AsKey" >> beam.Map(lambda element: (element, None))
            | "Group" >> FileGroupByKey(self.folder)
            | "Key" >> beam.Map(lambda item: item[0])
        )


def _unique(folder: str) -> str:
    """A folder of its own for each shuffle in the graph."""
    return storage.join(folder, uuid.uuid4().hex)
