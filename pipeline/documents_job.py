"""The documents job as one Beam graph: every source read, cleaned and spilled once where it is read, only
references through the dedup shuffles, documents and rejects written as Parquet parts.

Which sources and filters run is decided above (the stage declarations, ``corpusforge.stages``) and
handed in as a ``DocumentsJob``: this module never looks at stage names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import apache_beam as beam

from corpusforge.core import storage
from corpusforge.core.config import CleanConfig, NearDedupConfig
from corpusforge.pipeline.counters import write_counters
from corpusforge.pipeline.file_shuffle import FileFlatten
from corpusforge.pipeline.options import beam_job
from corpusforge.pipeline.steps import ExactDedup, SpillRejects, WriteDocuments, WriteRejects, split_kinds


@dataclass(frozen=True)
class ReadContext:
    """What every source's reads share: where texts spill, and the per-document filters applied where read."""

    spill: str
    clean: CleanConfig | None
    near: NearDedupConfig | None
    completions: str  # where a finished read task records its output (webtext batches are not tasks: they do not)


# (pipeline, read context) -> the PCollections a source adds, in ReadCleanSpill's (kind, value) shape
SourceRead = Callable[[beam.Pipeline, ReadContext], list[beam.PCollection]]


@dataclass(frozen=True)
class Removal:
    """Pages of ``source`` on, or near-duplicating, ``reference`` are dropped (GPT-2 kept Wikipedia out of WebText)."""

    source: str
    reference: str
    near: NearDedupConfig


@dataclass(frozen=True)
class DocumentsJob:
    reads: list[SourceRead]
    clean: CleanConfig | None
    exact_dedup: bool
    near_dedup: NearDedupConfig | None
    removal: Removal | None
    documents: str  # output folders
    rejects: str
    work: str  # spill, shuffle and scatter files of this job, removed by the caller when it ends
    part_bytes: int
    reject_parts: int
    file_shuffle: bool  # per-document shuffles through files (in-process runners, Dask); else the runner's own

    @property
    def counters(self) -> str:
        return storage.join(self.work, "counters.json")

    @property
    def recounts(self) -> str:
        """Where each writer leaves the recount of the part it wrote (``summary.record_recount``)."""
        return storage.join(self.work, "recounts")


def documents_graph(p: beam.Pipeline, job: DocumentsJob) -> None:
    """Every input record ends as a document or a reject; counters of each stream go to ``job.counters``."""
    shuffle = storage.join(job.work, "shuffle") if job.file_shuffle else None
    context = ReadContext(storage.join(job.work, "spill"), job.clean, job.near_dedup, storage.join(job.work, "completions"))
    reads = [pcoll for read in job.reads for pcoll in read(p, context)]
    refs, rejects, read_counters = split_kinds(tuple(reads) | "AllSources" >> FileFlatten(shuffle), "Read")
    reject_streams = [rejects]
    if job.exact_dedup:
        refs, duplicates = refs | "ExactDedup" >> ExactDedup(shuffle)
        reject_streams.append(duplicates)
    if job.near_dedup is not None:
        from corpusforge.pipeline.near_dedup import KEPT, REJECTS, NearDedup

        near_out = refs | "NearDedup" >> NearDedup(job.near_dedup, shuffle)
        refs = near_out[KEPT]
        reject_streams.append(near_out[REJECTS])
    if job.removal is not None:
        refs = remove_reference_source(refs, reject_streams, job.removal, shuffle)
    document_counters = refs | "WriteDocuments" >> WriteDocuments(
        job.documents, storage.join(job.work, "scatter"), job.part_bytes, job.recounts, shuffle
    )
    rejects = storage.join(job.work, "rejects")
    reject_files = tuple(reject_streams) | "AllRejects" >> SpillRejects(job.reject_parts, rejects)  # a tuple: Beam takes a list for data
    reject_counters = reject_files | "WriteRejects" >> WriteRejects(
        job.rejects, job.reject_parts, storage.join(rejects, "runs"), job.recounts
    )
    write_counters({"read": read_counters, "documents": document_counters, "rejects": reject_counters}, job.counters)


def remove_reference_source(refs: beam.PCollection, reject_streams: list, removal: Removal, shuffle: str | None) -> beam.PCollection:
    """Drop pages of one source that are on, or near-duplicate, another (WebText pages on Wikipedia)."""
    from corpusforge.pipeline.near_dedup import KEPT, REJECTS, WikipediaRemoval

    cleaned, reference = removal.source, removal.reference
    pages = refs | "WebTextRefs" >> beam.Filter(lambda r: r.source == cleaned)
    references = refs | "WikipediaRefs" >> beam.Filter(lambda r: r.source == reference)
    others = refs | "OtherRefs" >> beam.Filter(lambda r: r.source != cleaned)
    removal = pages | "RemoveWikipedia" >> WikipediaRemoval(references, removal.near, shuffle)
    reject_streams.append(removal[REJECTS])
    return (removal[KEPT], others) | "WithoutWikipedia" >> FileFlatten(shuffle)


def run_documents_job(options: beam.options.pipeline_options.PipelineOptions, job: DocumentsJob, made_from: str) -> tuple[dict, int]:
    """Run the job to the end: (its counters ``{stream: {name: count}}``, read tasks found already done).

    The work folder of a run that stopped is kept when it was made from the same ``made_from`` (a
    fingerprint): its finished read tasks and their spill files are reused, everything after the reads
    runs again. Otherwise the folder starts empty.
    """
    stamp = storage.join(job.work, "made-from.json")
    resumable = storage.is_file(stamp) and storage.read_json(stamp).get("fingerprint") == made_from
    for folder in [job.documents, job.rejects] + (
        [storage.join(job.work, n) for n in ("shuffle", "scatter", "rejects", "recounts")] if resumable else [job.work]
    ):
        storage.remove_tree(folder)
    storage.remove(job.counters)
    for folder in (job.documents, job.rejects, job.work):
        storage.makedirs(folder)
    if not resumable:
        storage.write_json(stamp, {"fingerprint": made_from})
    finished = len(storage.listdir(storage.join(job.work, "completions")))
    with beam_job(options) as pipeline:
        documents_graph(pipeline, job)
    return (storage.read_json(job.counters) if storage.is_file(job.counters) else {}), finished
