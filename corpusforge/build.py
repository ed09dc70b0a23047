"""``corpusforge build``: run the stages a configuration asks for and write the run manifest.

documents (one Beam job: read sources -> clean -> exact/near dedup -> Parquet documents + rejects)
  -> vocab (HF tokenizers on a deterministic sample) -> bert / gpt shards (Beam jobs) -> train.
Each stage leaves a marker of what it was made from (``corpusforge.stages``): a re-run reuses every
stage whose marker still matches and reruns the others and everything downstream of them. The run
manifest is removed before anything in the folder changes and written last, so a run that stopped
half way never looks complete.
"""

from __future__ import annotations

import ctypes
import fcntl
import gc
import json
import logging
import multiprocessing
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import apache_beam as beam

from corpusforge import progress
from corpusforge.core.config import Config
from corpusforge.core.files import sha256_file, write_json_atomic
from corpusforge.pipeline.documents_io import output_files
from corpusforge.pipeline.manifest import package_versions
from corpusforge.pipeline.options import pipeline_options
from corpusforge.pipeline.steps import (
    COUNTERS,
    ExactDedup,
    ReadCleanSpill,
    WikipediaReader,
    WriteDocuments,
    WriteRejects,
    book_tasks,
    read_book_task,
    read_tasks,
    records_of_batch,
    split_kinds,
    wikipedia_tasks,
    write_counters,
)
from corpusforge.pipeline.summary import SourceStats, check_accounting, collect_stats, stats_from_json, stats_to_json
from corpusforge.plan import Plan, made_from, plan_build
from corpusforge.stages import (
    MARKERS_DIR,
    WORK_DIR,
    Marker,
    describe_outputs,
    digest,
    files_under,
    fingerprint,
    remove_leftovers,
    remove_marker,
    write_marker,
)

T = TypeVar("T")
log = logging.getLogger(__name__)
RUN_FILES = ("manifest.json", "report.html")  # the run's own summary files: removed first, written last
VOCAB_SHORTFALL = 0.1  # a vocabulary under this share of the requested size is a warning


@dataclass
class BuildResult:
    output_dir: Path
    stats: dict[str, SourceStats] = field(default_factory=dict)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    artifacts: dict[str, Any] = field(default_factory=dict)
    manifest_path: Path | None = None
    reused: list[str] = field(default_factory=list)  # stages whose earlier outputs still matched
    ran: dict[str, str] = field(default_factory=dict)  # stage -> why it ran
    warnings: list[str] = field(default_factory=list)


def documents_graph(p: beam.Pipeline, cfg: Config, work: Path) -> None:
    """The documents job as one Beam graph: texts are spilled once where they are read, only
    references go through the dedup shuffles, and every input record ends as a document or a reject."""
    stages = set(cfg.run.stages)
    out = cfg.run.output_dir.resolve()
    spill, shuffle = str(work / "spill"), str(work / "shuffle")
    clean = cfg.clean if "clean" in stages else None
    near = cfg.near_dedup if "near_dedup" in stages else None
    reads, listed = [], Counter()
    if "books" in stages:
        reads.append(read_tasks(p, "books", book_tasks(cfg.books, listed), read_book_task, spill, clean, near))
        reads.append(p | "BooksListed" >> beam.Create([(COUNTERS, {"books.inputs": listed["inputs"]})]))
    if "wikipedia" in stages:
        reads.append(read_tasks(p, "wikipedia", wikipedia_tasks(cfg.wikipedia), WikipediaReader(cfg.wikipedia), spill, clean, near))
    if "webtext" in stages:
        from corpusforge.pipeline.webtext import build_webtext, count_inputs, input_paths

        web_docs, web_rejects = build_webtext(p, cfg)
        reads.append(
            p | "WebTextInputs" >> beam.Create(input_paths(cfg)) | "CountWebTextInputs" >> beam.Map(count_inputs, bool(cfg.webtext.dumps))
        )
        reads.append(
            (web_docs, web_rejects)
            | "WebTextRecords" >> beam.Flatten()
            | "WebTextBatches" >> beam.BatchElements(min_batch_size=1, max_batch_size=256)
            | "ReadWebText" >> beam.ParDo(ReadCleanSpill("webtext", records_of_batch, spill, clean, near))
        )
    refs, rejects, read_counters = split_kinds(reads | "AllSources" >> beam.Flatten(), "Read")
    reject_streams = [rejects]
    if "dedup" in stages and cfg.dedup.exact:
        refs, duplicates = refs | "ExactDedup" >> ExactDedup(shuffle)
        reject_streams.append(duplicates)
    if "near_dedup" in stages:
        from corpusforge.pipeline.near_dedup import KEPT, REJECTS, NearDedup

        near_out = refs | "NearDedup" >> NearDedup(cfg.near_dedup, shuffle)
        refs = near_out[KEPT]
        reject_streams.append(near_out[REJECTS])
    if "webtext" in stages and "wikipedia" in stages:
        refs = remove_wikipedia_from_webtext(refs, reject_streams, cfg, shuffle)
    document_counters = refs | "WriteDocuments" >> WriteDocuments(
        str(out / "documents"), str(work / "scatter"), cfg.run.part_bytes, shuffle
    )
    reject_counters = (
        reject_streams | "AllRejects" >> beam.Flatten() | "WriteRejects" >> WriteRejects(str(out / "rejects"), cfg.run.reject_parts)
    )
    write_counters({"read": read_counters, "documents": document_counters, "rejects": reject_counters}, str(work / "counters.json"))


def remove_wikipedia_from_webtext(refs: beam.PCollection, reject_streams: list, cfg: Config, shuffle: str) -> beam.PCollection:
    """GPT-2 kept Wikipedia out of WebText: drop WebText pages on Wikipedia or near-duplicating it."""
    from corpusforge.pipeline.near_dedup import KEPT, REJECTS, WikipediaRemoval

    web = refs | "WebTextRefs" >> beam.Filter(lambda r: r.source == "webtext")
    wikipedia = refs | "WikipediaRefs" >> beam.Filter(lambda r: r.source == "wikipedia")
    others = refs | "OtherRefs" >> beam.Filter(lambda r: r.source != "webtext")
    removal = web | "RemoveWikipedia" >> WikipediaRemoval(wikipedia, cfg.near_dedup, shuffle)
    reject_streams.append(removal[REJECTS])
    return (removal[KEPT], others) | "WithoutWikipedia" >> beam.Flatten()


def run_documents(cfg: Config, result: BuildResult, plan: Plan, made: dict[str, Any]) -> Marker:
    out = cfg.run.output_dir.resolve()
    work = out / WORK_DIR / "documents"
    for sub in (out / "documents", out / "rejects", work):
        shutil.rmtree(sub, ignore_errors=True)
        sub.mkdir(parents=True)
    pipeline = beam.Pipeline(options=pipeline_options(cfg.run))
    documents_graph(pipeline, cfg, work)
    pipeline.run().wait_until_finish()
    del pipeline
    release_freed_memory()
    counters = json.loads((work / "counters.json").read_text(encoding="utf-8")) if (work / "counters.json").is_file() else {}
    result.stats = collect_stats(out / "documents", out / "rejects")
    check_accounting(counters, result.stats)
    progress.count("documents", sum(s.documents for s in result.stats.values()))
    progress.count("rejects", sum(s.inputs - s.documents for s in result.stats.values()))
    result.artifacts["counters"] = counters
    shutil.rmtree(work)
    if not any(work.parent.iterdir()):
        work.parent.rmdir()
    outputs = describe_outputs(out, output_files(out / "documents") + output_files(out / "rejects"), checksums=True)
    documents = [entry for entry in outputs if entry["path"].startswith("documents/")]
    data = {"stats": stats_to_json(result.stats), "counters": counters, "inputs": plan.inputs}
    return Marker("documents", fingerprint(made), made, outputs, {"documents": digest(documents)}, data)


def release_freed_memory() -> None:
    """Hand the heap the in-process runner freed back to the system (glibc keeps it otherwise), so the
    recount and the later stages do not stack on the runner's high-water mark."""
    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def reuse_documents(marker: Marker, result: BuildResult) -> None:
    """The figures of documents made by an earlier build, as if they had just been made."""
    result.stats = stats_from_json(marker.data["stats"])
    result.artifacts["counters"] = marker.data["counters"]


def in_fresh_process(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a spawned process: the trainers' memory goes back to the system when it exits,
    and the launcher's heap (Beam's runner state from the documents job) is not added to theirs."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def run_vocab(cfg: Config, result: BuildResult, plan: Plan, made: dict[str, Any]) -> Marker:
    from corpusforge.encoding.vocab import train_vocab_from_documents, vocab_sha256

    out = plan.out
    dirs = in_fresh_process(train_vocab_from_documents, output_files(out / "documents"), out / "vocab", cfg.vocab)
    result.artifacts["vocab"] = dirs
    outputs = describe_outputs(out, [path for directory in dirs.values() for path in files_under(directory)])
    digests = {kind: vocab_sha256(directory) for kind, directory in dirs.items()}
    return Marker(
        "vocab", fingerprint(made), made, outputs, digests, {"vocab": {kind: d.relative_to(out).as_posix() for kind, d in dirs.items()}}
    )


def run_shards(task: str, cfg: Config, result: BuildResult, plan: Plan, made: dict[str, Any]) -> Marker:
    from corpusforge.pipeline.examples_stage import write_bert_shards, write_gpt_shards

    out = plan.out
    folder = out / "shards" / task
    vocab = out / plan.markers["vocab"].data["vocab"]["wordpiece" if task == "bert" else "bpe"]
    write, params = (write_bert_shards, cfg.bert) if task == "bert" else (write_gpt_shards, cfg.gpt)
    manifest = write(pipeline_options(cfg.run), output_files(out / "documents"), vocab, folder, params, cfg.shards, cfg.run.seed)
    result.artifacts[task] = manifest
    return Marker(task, fingerprint(made), made, describe_outputs(out, files_under(folder)), {task: sha256_file(folder / "manifest.json")})


def run_train(cfg: Config, result: BuildResult, plan: Plan, made: dict[str, Any]) -> Marker:
    """Train; a run killed part way with this same fingerprint continues from its newest checkpoint."""
    from corpusforge.trainer.checkpoint import resolve_checkpoint
    from corpusforge.trainer.loop import train
    from corpusforge.trainer.sizes import get_size

    family = get_size(cfg.train.model).family
    run_dir = plan.out / "train" / cfg.train.model
    started = plan.out / MARKERS_DIR / "train.started.json"
    same = started.is_file() and json.loads(started.read_text(encoding="utf-8")).get("fingerprint") == fingerprint(made)
    resume = None
    if same and not plan.force:
        try:
            resolve_checkpoint(run_dir)
            resume = run_dir  # the trainer picks its newest checkpoint
        except FileNotFoundError:
            pass
    if resume is not None:
        plan.reasons["train"] += "; continued from its newest checkpoint"
    write_json_atomic({"fingerprint": fingerprint(made)}, started)
    evaluation = train(cfg.train.model_copy(update={"task": family}), plan.out / "shards" / family, run_dir, resume=resume)
    started.unlink()
    result.artifacts["train"] = evaluation
    return Marker("train", fingerprint(made), made, describe_outputs(plan.out, files_under(run_dir)), {}, {"eval": evaluation})


def reuse(stage: str, marker: Marker, result: BuildResult, out: Path) -> None:
    if stage == "documents":
        reuse_documents(marker, result)
    elif stage == "vocab":
        result.artifacts["vocab"] = {kind: out / path for kind, path in marker.data["vocab"].items()}
    elif stage in ("bert", "gpt"):
        result.artifacts[stage] = json.loads((out / "shards" / stage / "manifest.json").read_text(encoding="utf-8"))
    else:
        result.artifacts["train"] = marker.data["eval"]


RUNNERS = {
    "documents": run_documents,
    "vocab": run_vocab,
    "bert": lambda *args: run_shards("bert", *args),
    "gpt": lambda *args: run_shards("gpt", *args),
    "train": run_train,
}


@contextmanager
def build_lock(out: Path) -> Iterator[None]:
    """One build at a time per output folder: the next one removes what a killed one left, never a live one's files."""
    path = out / MARKERS_DIR / "build.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(f"another corpusforge build is writing {out}: wait for it or use another run.output_dir") from None
        yield


def stage_warnings(cfg: Config, result: BuildResult, stages: list[str]) -> list[str]:
    """Results that are legal but almost certainly not what was wanted."""
    warnings = []
    if "documents" in stages and not sum(s.documents for s in result.stats.values()):
        warnings.append("documents: 0 documents written (every input was rejected: see the rejects)")
    if "vocab" in stages:
        from corpusforge.encoding.vocab import vocab_manifest

        for kind, directory in result.artifacts.get("vocab", {}).items():
            size = vocab_manifest(Path(directory))["size"]
            asked = cfg.vocab.wordpiece_vocab_size if kind == "wordpiece" else cfg.vocab.bpe_vocab_size
            if size < VOCAB_SHORTFALL * asked:
                warnings.append(
                    f"vocab: the {kind} vocabulary has {size:,} tokens, under {VOCAB_SHORTFALL:.0%} of the {asked:,} asked "
                    "(the documents are too few for it)"
                )
    for task in ("bert", "gpt"):
        if task in stages and not result.artifacts[task].get("totals", {}).get("examples"):
            warnings.append(f"{task}: 0 examples written (no document is long enough to make one)")
    return warnings


def run_build(cfg: Config, force: bool = False) -> BuildResult:
    """Run the requested stages that are not already done (all of them with ``force``), then the manifest."""
    out = cfg.run.output_dir.resolve()
    out.mkdir(parents=True, exist_ok=True)
    result = BuildResult(output_dir=out)
    started = time.perf_counter()
    with build_lock(out):
        plan = plan_build(cfg, force)  # reads only: a missing prerequisite stops the build before anything changes
        current = not plan.reasons and manifest_describes(out, cfg)
        if not current:
            for name in RUN_FILES:
                (out / name).unlink(missing_ok=True)
        leftovers = remove_leftovers(out)
        if leftovers:
            log.warning("removed what an interrupted build left: %s", ", ".join(str(p.relative_to(out)) for p in leftovers))
        run_stages(cfg, plan, result)
        result.warnings = stage_warnings(cfg, result, plan.requested)
        result.stage_seconds["total"] = round(time.perf_counter() - started, 3)
        result.manifest_path = out / "manifest.json"
        if current:  # nothing ran and the manifest already describes this configuration: the folder stays as it is
            return result
        write_run_manifest(cfg, plan, result)
        from corpusforge.report_page import write_report

        with progress.stage("report"):
            write_report(out)
    return result


def manifest_describes(out: Path, cfg: Config) -> bool:
    """Whether OUT's manifest and report were written for this very configuration."""
    try:
        manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (out / "report.html").is_file() and manifest.get("config") == cfg.model_dump(mode="json")


def run_stages(cfg: Config, plan: Plan, result: BuildResult) -> None:
    """Each requested stage in order: reused as its marker describes it, or run and marked."""
    for stage in plan.requested:
        if stage in plan.reused:
            progress.log.info("stage %s reused (unchanged since it was made)", stage)
            reuse(stage, plan.markers[stage], result, plan.out)
            result.reused.append(stage)
            continue
        remove_marker(plan.out, stage)  # before its outputs change
        made = made_from(stage, cfg, plan, None)
        t0 = time.perf_counter()
        with progress.stage(stage, poll=partial(files_so_far, plan.out, stage)):
            marker = RUNNERS[stage](cfg, result, plan, made)
        result.stage_seconds[stage] = round(time.perf_counter() - t0, 3)
        write_marker(plan.out, marker)
        plan.markers[stage] = marker
        result.ran[stage] = plan.reasons[stage]
    if "documents" in plan.markers and "documents" not in plan.requested:
        reuse_documents(plan.markers["documents"], result)  # the figures of what the later stages were made from


def files_so_far(out: Path, stage: str) -> dict[str, int]:
    """The running stage's files written so far (by Beam's workers, wherever they run): its live counters."""

    def count(folder: Path, pattern: str) -> int:
        return sum(1 for _ in folder.glob(pattern))

    if stage == "documents":
        work = out / WORK_DIR / "documents"
        return {"tasks spilled": count(work / "spill", "*.arrow"), "parts written": count(out / "documents", "part-*.parquet")}
    if stage in ("bert", "gpt"):
        folder = out / "shards" / stage
        return {
            "token batches": count(folder, ".sort-*/docs/*.arrow"),
            "example files": count(folder, ".sort-*/examples/bucket-*/*.arrow"),
            "shards written": count(folder, "train-*.arrow"),
        }
    return {}


def write_run_manifest(cfg: Config, plan: Plan, result: BuildResult) -> None:
    documents = plan.markers.get("documents")
    write_json_atomic(
        {
            "kind": "corpusforge-build",
            "inputs": documents.made_from["inputs"] if documents else [],
            "config": cfg.model_dump(mode="json"),
            "versions": package_versions(),
            "counters": stats_to_json(result.stats),
            "stages": {stage: "reused" if stage in result.reused else "ran" for stage in plan.requested},
            "stage_seconds": result.stage_seconds,
            "warnings": result.warnings,
            "artifacts": result.artifacts,
            "outputs": documents.outputs if documents else [],
        },
        plan.out / "manifest.json",
    )
