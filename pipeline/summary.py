"""Counts read back from the written documents and rejects, checked against the counters the job
carried as data: what was read (counted where it was read) must equal what was written.

The same pass keeps each source's document lengths (figures and a log-scale histogram) for the
report, so a build reads its documents back once, not once for the check and again for the page.
"""

from __future__ import annotations

import pickle
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from corpusforge.core import storage
from corpusforge.corpora.document import AccountingError
from corpusforge.corpora.document_files import word_counts
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


@dataclass
class FileCount:
    """One written file recounted: its size and sha256, and per source its documents (bytes, words per
    document) or its rejects per reason. Made wherever the file is read (a worker, on a cluster)."""

    path: str
    bytes: int
    sha256: str
    documents: dict[str, tuple[int, bytes]] = field(default_factory=dict)  # source -> (text bytes, int32 words per document)
    rejects: dict[str, dict[str, int]] = field(default_factory=dict)  # source -> reason -> count


def recount_file(path: str) -> FileCount:
    """Read one documents or rejects part back (a row group at a time) and checksum it."""
    count = FileCount(path, storage.size(path), storage.sha256(path))
    with storage.arrow_input_unmapped(path) as source:
        parquet = pq.ParquetFile(source)
        is_rejects = "reason" in parquet.schema_arrow.names
        for group in range(parquet.num_row_groups):
            if is_rejects:
                table = parquet.read_row_group(group, columns=["source", "reason"])
                for name, reason in zip(table["source"].to_pylist(), table["reason"].to_pylist()):
                    reasons = count.rejects.setdefault(name, {})
                    reasons[reason] = reasons.get(reason, 0) + 1
                continue
            table = parquet.read_row_group(group, columns=["source", "text"])  # a part can be 128 MB, a row group ~8 MB
            counts = word_counts(table["text"])
            for name in pc.unique(table["source"]).to_pylist():
                chosen = pc.equal(table["source"], name)
                texts, words = table["text"].filter(chosen), counts.filter(chosen).to_numpy().astype(np.int32)
                size, earlier = count.documents.get(name, (0, b""))
                count.documents[name] = (size + (pc.sum(pc.binary_length(texts)).as_py() or 0), earlier + words.tobytes())
    return count


def record_recount(path: str, folder: str) -> None:
    """Recount a part its writer just wrote, where it wrote it, into ``folder`` (one small pickle per part):
    the launcher gathers these instead of reading the corpus back, or starting a second job to."""
    name = f"{storage.name(storage.parent(path))}-{storage.name(path)}.pickle"  # documents/ and rejects/ share part names
    storage.write_bytes(storage.join(folder, name), pickle.dumps(recount_file(path), protocol=pickle.HIGHEST_PROTOCOL))


def gather_recounts(folder: str, files: list[str]) -> list[FileCount]:
    """The writers' recounts of ``files``; a file written without one (or a recount without its file) is an error."""
    counts = [pickle.loads(storage.read_bytes(path)) for path in storage.glob(storage.join(folder, "*.pickle"))]
    counted, written = sorted(c.path for c in counts), sorted(files)
    if counted != written:
        raise AccountingError(f"the written parts and their recounts differ: {sorted(set(counted) ^ set(written))[:5]}")
    return counts


def collect_stats(documents_dir: storage.PathLike, rejects_dir: storage.PathLike) -> dict[str, SourceStats]:
    """Each source's figures, read back from the written files (here, in this process)."""
    return merge_counts([recount_file(path) for path in [*output_files(documents_dir), *output_files(rejects_dir)]])


def merge_counts(counts: list[FileCount]) -> dict[str, SourceStats]:
    stats: dict[str, SourceStats] = defaultdict(SourceStats)
    words: dict[str, list[np.ndarray]] = defaultdict(list)
    for count in sorted(counts, key=lambda c: c.path):
        for source, (size, per_document) in count.documents.items():
            lengths = np.frombuffer(per_document, dtype=np.int32)
            entry = stats[source]
            entry.documents += len(lengths)
            entry.bytes += size
            entry.words += int(lengths.sum())
            words[source].append(lengths)
        for source, reasons in count.rejects.items():
            stats[source].rejects.update(reasons)
    per_source = {source: np.concatenate(parts) for source, parts in words.items()}
    if per_source:
        top = max(int(lengths.max()) for lengths in per_source.values())
        bins = np.logspace(0, np.log10(max(top, 10)) + 0.05, LENGTH_BIN_EDGES)
        for source, lengths in per_source.items():
            stats[source].lengths = length_summary(lengths, bins)
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
