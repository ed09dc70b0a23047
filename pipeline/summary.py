"""Counts read back from the written documents and rejects, checked against the counters the job
carried as data: what was read (counted where it was read) must equal what was written.

The same pass keeps each source's document lengths (figures and a log-scale histogram) for the
report, so a build reads its documents back once, not once for the check and again for the page.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from corpusforge.core import storage
from corpusforge.corpora.document import AccountingError
from corpusforge.corpora.document_files import iter_row_groups, word_counts
from corpusforge.pipeline.documents_io import output_files

LENGTH_BIN_EDGES = 40  # log-spaced, from 1 word to the longest document of any source


@dataclass
class Lengths:
    """Words per document of one source: its figures, and its histogram on bins shared by every source."""

    min: int
    median: float
    mean: float
    max: int
    bins: list[float]
    counts: list[int]


@dataclass
class SourceStats:
    documents: int = 0
    words: int = 0
    bytes: int = 0
    rejects: Counter[str] = field(default_factory=Counter)
    inputs: int = 0  # records the readers saw, counted where they were read (not documents + rejects)
    lengths: Lengths | None = None  # None for a source with no documents


def collect_stats(documents_dir: storage.PathLike, rejects_dir: storage.PathLike) -> dict[str, SourceStats]:
    stats: dict[str, SourceStats] = defaultdict(SourceStats)
    words: dict[str, list[np.ndarray]] = defaultdict(list)
    for table in iter_row_groups(output_files(documents_dir), ["source", "text"]):  # a part can be 128 MB, a row group ~8 MB
        counts = word_counts(table["text"])
        for source in pc.unique(table["source"]).to_pylist():
            chosen = pc.equal(table["source"], source)
            texts, per_document = table["text"].filter(chosen), counts.filter(chosen).to_numpy()
            entry = stats[source]
            entry.documents += len(texts)
            entry.bytes += pc.sum(pc.binary_length(texts)).as_py() or 0
            entry.words += int(per_document.sum())
            words[source].append(per_document)
    per_source = {source: np.concatenate(parts) for source, parts in words.items()}
    if per_source:
        top = max(int(lengths.max()) for lengths in per_source.values())
        bins = np.logspace(0, np.log10(max(top, 10)) + 0.05, LENGTH_BIN_EDGES)
        for source, lengths in per_source.items():
            stats[source].lengths = length_summary(lengths, bins)
    for path in output_files(rejects_dir):
        with storage.arrow_input_unmapped(path) as source:
            table = pq.read_table(source, columns=["source", "reason"])
        for source, reason in zip(table["source"].to_pylist(), table["reason"].to_pylist()):
            stats[source].rejects[reason] += 1
    return dict(sorted(stats.items()))


def length_summary(lengths: np.ndarray, bins: np.ndarray) -> Lengths:
    counts, _ = np.histogram(lengths, bins=bins)
    return Lengths(int(lengths.min()), float(np.median(lengths)), float(lengths.mean()), int(lengths.max()), bins.tolist(), counts.tolist())


def stats_to_json(stats: dict[str, SourceStats]) -> dict[str, dict]:
    return {
        source: {
            "inputs": s.inputs,
            "documents": s.documents,
            "words": s.words,
            "bytes": s.bytes,
            "rejects": dict(sorted(s.rejects.items())),
            "lengths": asdict(s.lengths) if s.lengths else None,
        }
        for source, s in stats.items()
    }


def stats_from_json(data: dict[str, dict]) -> dict[str, SourceStats]:
    """``stats_to_json`` read back (a reused documents stage's figures, from its marker)."""
    return {
        source: SourceStats(
            documents=s["documents"],
            words=s["words"],
            bytes=s["bytes"],
            rejects=Counter(s["rejects"]),
            inputs=s["inputs"],
            lengths=Lengths(**s["lengths"]) if s["lengths"] else None,
        )
        for source, s in data.items()
    }


def check_accounting(counters: dict[str, dict[str, int]], stats: dict[str, SourceStats]) -> None:
    """Per source: inputs read == documents + rejects written, and the job's counters == the files' recount.

    Fills ``inputs`` from the readers' counts; raises ``AccountingError`` with the numbers on any mismatch.
    """
    read, documents, rejects = (counters.get(k, {}) for k in ("read", "documents", "rejects"))
    problems = []
    sources = sorted({name.split(".")[0] for name in [*read, *documents, *rejects]} | set(stats))
    for source in sources:
        entry = stats.setdefault(source, SourceStats())
        entry.inputs = read.get(f"{source}.inputs", read.get(f"{source}.records", 0))
        written = entry.documents + sum(entry.rejects.values())
        if entry.inputs != written:
            problems.append(
                f"{source}: {entry.inputs} records read but {entry.documents} documents + {sum(entry.rejects.values())} rejects written"
            )
        if documents.get(f"{source}.documents", 0) != entry.documents:
            problems.append(
                f"{source}: the job wrote {documents.get(f'{source}.documents', 0)} documents, the files hold {entry.documents}"
            )
        for reason in sorted(set(entry.rejects) | {n.split(".", 2)[2] for n in rejects if n.startswith(f"{source}.")}):
            counted = rejects.get(f"{source}.rejects.{reason}", 0)
            if counted != entry.rejects.get(reason, 0):
                problems.append(f"{source}: the job wrote {counted} '{reason}' rejects, the files hold {entry.rejects.get(reason, 0)}")
    if problems:
        raise AccountingError("accounting mismatch: " + "; ".join(problems))
