"""Counts read back from the written documents and rejects, so the summary holds whatever the runner.

Beam counters are not reported by every runner (Dask drops them), the files always exist.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from corpusforge.pipeline.documents_io import output_files


@dataclass
class SourceStats:
    documents: int = 0
    words: int = 0
    bytes: int = 0
    rejects: Counter[str] = field(default_factory=Counter)

    @property
    def inputs(self) -> int:
        return self.documents + sum(self.rejects.values())


def collect_stats(documents_dir: Path, rejects_dir: Path) -> dict[str, SourceStats]:
    stats: dict[str, SourceStats] = defaultdict(SourceStats)
    for path in output_files(documents_dir):
        table = pq.read_table(path, columns=["source", "text"])
        for source in pc.unique(table["source"]).to_pylist():
            texts = table.filter(pc.equal(table["source"], source))["text"]
            entry = stats[source]
            entry.documents += len(texts)
            entry.bytes += pc.sum(pc.binary_length(texts)).as_py() or 0
            entry.words += pc.sum(pc.list_value_length(pc.utf8_split_whitespace(texts))).as_py() or 0
    for path in output_files(rejects_dir):
        table = pq.read_table(path, columns=["source", "reason"])
        for source, reason in zip(table["source"].to_pylist(), table["reason"].to_pylist()):
            stats[source].rejects[reason] += 1
    return dict(sorted(stats.items()))


def stats_to_json(stats: dict[str, SourceStats]) -> dict[str, dict]:
    return {
        source: {"inputs": s.inputs, "documents": s.documents, "words": s.words, "bytes": s.bytes, "rejects": dict(sorted(s.rejects.items()))}
        for source, s in stats.items()
    }
