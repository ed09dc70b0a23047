"""Counters carried as data: steps emit ``(kind, value)`` pairs split by ``only`` (rather than tagged outputs,
which the DaskRunner mixes), and every job writes its counter streams once, through ``write_counters``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator

import apache_beam as beam

from corpusforge.core import storage

COUNTERS = "counters"


def only(element: tuple[str, object], kind: str) -> Iterator[object]:
    """The value of a ``(kind, value)`` pair of the wanted kind (``beam.FlatMap(only, kind)``)."""
    if element[0] == kind:
        yield element[1]


def merge_counters(parts: Iterable[dict]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for part in parts:
        total.update(part)
    return dict(sorted(total.items()))


def write_counters(counters: dict[str, beam.PCollection], path: str) -> beam.PCollection:
    """Every counter stream merged into one JSON file ``{stream: {name: count}}``, written atomically.

    One GroupByKey under a single key, so the file is written once, after every count arrived; the
    returned step is the graph's last (the DaskRunner computes only the last step of a graph). No
    file when no counter came in at all.
    """

    names = list(counters)

    def write(item: tuple[int, Iterable[tuple[str, dict]]]) -> None:
        merged: dict[str, list[dict]] = {name: [] for name in names}
        for name, values in item[1]:
            merged[name].append(values)
        storage.write_json(path, {name: merge_counters(v) for name, v in merged.items()})

    streams = [pcoll | f"Name{name.title()}" >> beam.Map(lambda c, n: (0, (n, c)), name) for name, pcoll in counters.items()]
    return streams | "AllCounters" >> beam.Flatten() | "GatherCounters" >> beam.GroupByKey() | "WriteCounters" >> beam.Map(write)
