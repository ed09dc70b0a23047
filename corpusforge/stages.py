"""Every stage of a build, declared once: the only module that knows stages by name.

A build runs big stages in order: documents (one Beam job fed by the source stages and filtered by
the filter stages), vocab, one stage per example format (bert, gpt), train. Each ``Stage`` says
what configuration it reads, which stages' outputs it is made from, the folders it writes, how it
runs, what it shows while running and what a reused one contributes to the summary. Planning,
markers, ``--force``, leftovers, progress, the manifest and the report iterate these declarations.

Adding a source: a reader module (``corpora/``), its reads (``pipeline/sources.py``), its section in
``core/config.py``, and one ``Source`` line below. Adding an example format: its builder and Beam job,
its section, and one ``example_stage`` line below.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import apache_beam as beam

from corpusforge import progress
from corpusforge.core import storage
from corpusforge.core.config import Config
from corpusforge.core.layout import Layout
from corpusforge.markers import Marker, describe_outputs, digest
from corpusforge.pipeline.collector import release_freed_memory
from corpusforge.pipeline.documents_job import DocumentsJob, ReadContext, Removal, run_documents_job
from corpusforge.pipeline.options import shuffles_through_files, shuffles_through_launcher
from corpusforge.pipeline.sources import (
    books_inputs,
    read_books,
    read_records,
    read_webtext,
    read_wikipedia,
    records_inputs,
    webtext_inputs,
    wikipedia_inputs,
)
from corpusforge.processes import in_fresh_process
from corpusforge.shards.format import FORMAT_VERSION as SHARDS_FORMAT

VOCAB_SHORTFALL = 0.1  # a vocabulary under this share of the requested size is a warning


# --- the documents job's parts -------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """A source stage: its configuration section has its name."""

    name: str
    inputs: Callable[[Config], list[str]]  # the files it reads, fingerprinted before they are read
    read: Callable[[Config, beam.Pipeline, ReadContext], list[beam.PCollection]]
    fetches: Callable[[Config], bool] = lambda cfg: False  # reads pages online: the fetch, not its inputs, sets the time


SOURCES = (
    Source("books", books_inputs, read_books),
    Source("wikipedia", wikipedia_inputs, read_wikipedia),
    Source("webtext", webtext_inputs, read_webtext, fetches=lambda cfg: not cfg.webtext.offline),
    Source("records", records_inputs, read_records),
)
FILTERS = ("clean", "dedup", "near_dedup")  # per-document filters of the documents job, in order
REMOVAL = ("webtext", "wikipedia")  # GPT-2 kept Wikipedia out of WebText: (source cleaned, reference source)


def documents_parts(stages: list[str]) -> list[str]:
    """The source and filter stages of a stage list, in pipeline order: what the documents stage runs."""
    return [s for s in (*(source.name for source in SOURCES), *FILTERS) if s in stages]


def documents_job(cfg: Config, layout: Layout, parts: list[str]) -> DocumentsJob:
    near = cfg.near_dedup if "near_dedup" in parts else None
    removal = Removal(*REMOVAL, cfg.near_dedup) if set(REMOVAL) <= set(parts) else None
    return DocumentsJob(
        reads=[_bound(source, cfg) for source in SOURCES if source.name in parts],
        clean=cfg.clean if "clean" in parts else None,
        exact_dedup="dedup" in parts and cfg.dedup.exact,
        near_dedup=near,
        removal=removal,
        documents=layout.documents,
        rejects=layout.rejects,
        work=layout.work("documents"),
        part_bytes=cfg.run.part_bytes,
        reject_parts=cfg.run.reject_parts,
        file_shuffle=shuffles_through_files(cfg.run),
    )


def _bound(source: Source, cfg: Config) -> Callable[[beam.Pipeline, ReadContext], list[beam.PCollection]]:
    return lambda p, context: source.read(cfg, p, context)


# --- stages --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Context:
    """What a running stage may read: nothing in it is written by the stage."""

    cfg: Config
    layout: Layout
    markers: dict[str, Marker]  # the stages it is made from
    fingerprint: str  # of what it is made from (a killed train run with the same one continues)
    force: bool
    inputs: list[dict[str, Any]] = field(default_factory=list)  # its input files as the plan described them (path, bytes, ...)


@dataclass(frozen=True)
class Outcome:
    """What a finished stage returns; the build turns it into the stage's marker."""

    outputs: list[dict[str, Any]]  # every file it wrote, as ``markers.describe_outputs`` describes them
    digests: dict[str, str] = field(default_factory=dict)  # output name -> digest for downstream stages
    data: dict[str, Any] = field(default_factory=dict)  # figures kept in the marker for a reused stage
    note: str = ""  # added to why the stage ran


@dataclass(frozen=True)
class Stage:
    name: str
    format: int  # bumped when the stage writes different bytes from the same inputs
    view: Callable[[Config, list[str]], dict[str, Any]]  # the configuration it reads (documents: given its parts)
    needs: Callable[[Config], list[tuple[str, str]]]  # (stage, output) pairs it is made from
    folders: Callable[[Layout, Config], list[str]]  # where it writes: cleared of temporaries after a killed build
    run: Callable[[Context], Outcome]
    figures: Callable[[Layout, Marker], dict[str, Any]]  # what the summary and manifest show of a finished stage
    how_to_run: str
    makes: Callable[[Config], list[str]] = lambda cfg: []  # names of its outputs other stages are made from
    missing_output_hint: str = ""  # what to change when a stage needs an output this one does not make
    live: Callable[[Layout], dict[str, int]] = lambda layout: {}
    warnings: Callable[[Config, dict[str, Any]], list[str]] = lambda cfg, figures: []
    inputs: Callable[[Config, list[str]], list[str]] | None = None  # input files, for a stage reading outside OUT
    resumes: bool = False  # its work folder outlives a killed build: the stage decides what in it to reuse


# documents


def _documents_view(cfg: Config, parts: list[str]) -> dict[str, Any]:
    sections = list(parts)
    if set(REMOVAL) <= set(parts) and "near_dedup" not in sections:
        sections.append("near_dedup")  # Wikipedia removal from WebText uses its settings
    view = {"stages": parts, "part_bytes": cfg.run.part_bytes, "reject_parts": cfg.run.reject_parts}
    return view | {name: getattr(cfg, name).model_dump(mode="json") for name in sections}


def _documents_inputs(cfg: Config, parts: list[str]) -> list[str]:
    """The sources' files, and the evaluation files the clean stage keeps out (their texts decide rejects)."""
    evaluation = cfg.clean.decontaminate if "clean" in parts else []
    return [path for source in SOURCES if source.name in parts for path in source.inputs(cfg)] + list(evaluation)


def _source_text_bytes(cfg: Config, parts: list[str], inputs: list[dict[str, Any]]) -> int | None:
    """The text the ``inputs`` (as the plan described them) hold, about; None when a source fetches pages online."""
    from corpusforge.pipeline.options import input_text_bytes

    if any(source.fetches(cfg) for source in SOURCES if source.name in parts):
        return None
    return input_text_bytes((entry["path"], entry["bytes"]) for entry in inputs)


def _run_documents(ctx: Context) -> Outcome:
    from corpusforge.pipeline.documents_io import output_files
    from corpusforge.pipeline.options import pipeline_options
    from corpusforge.pipeline.summary import check_accounting, gather_recounts, merge_counts, stats_to_json

    parts = documents_parts(ctx.cfg.run.stages)
    layout, options = ctx.layout, pipeline_options(ctx.cfg.run, _source_text_bytes(ctx.cfg, parts, ctx.inputs))
    job = documents_job(ctx.cfg, layout, parts)
    made_from = f"force-{uuid.uuid4().hex}" if ctx.force else ctx.fingerprint  # --force: no finished task is reused
    counters, finished = run_documents_job(options, job, made_from)
    release_freed_memory()
    counts = gather_recounts(job.recounts, output_files(layout.documents) + output_files(layout.rejects))
    stats = merge_counts(counts)
    check_accounting(counters, stats)
    progress.count("documents", sum(s.documents for s in stats.values()))
    progress.count("rejects", sum(s.inputs - s.documents for s in stats.values()))
    storage.remove_tree(job.work)
    if not storage.listdir(layout.temp):
        storage.remove_tree(layout.temp)
    outputs = sorted(({"path": layout.relative(c.path), "bytes": c.bytes, "sha256": c.sha256} for c in counts), key=lambda e: e["path"])
    documents = [entry for entry in outputs if storage.is_inside(layout.path(entry["path"]), layout.documents)]
    note = f"; resumed: {finished:,} read tasks were already done" if finished else ""
    return Outcome(outputs, digests={"documents": digest(documents)}, data={"stats": stats_to_json(stats), "counters": counters}, note=note)


def _documents_figures(layout: Layout, marker: Marker) -> dict[str, Any]:
    from corpusforge.pipeline.summary import stats_from_json

    return {"stats": stats_from_json(marker.data["stats"]), "counters": marker.data["counters"]}


def _documents_live(layout: Layout) -> dict[str, int]:
    work = layout.work("documents")
    return {
        "tasks spilled": len(storage.glob(storage.join(work, "spill", "*.arrow"))),
        "parts written": len(storage.glob(storage.join(layout.documents, "part-*.parquet"))),
    }


def _documents_warnings(cfg: Config, figures: dict[str, Any]) -> list[str]:
    if not sum(s.documents for s in figures["stats"].values()):
        return ["documents: 0 documents written (every input was rejected: see the rejects)"]
    return []


DOCUMENTS = Stage(
    name="documents",
    format=1,
    view=_documents_view,
    needs=lambda cfg: [],
    folders=lambda layout, cfg: [layout.documents, layout.rejects],
    run=_run_documents,
    figures=_documents_figures,
    how_to_run='add its sources, e.g. "books", "wikipedia", to run.stages',
    makes=lambda cfg: ["documents"],
    live=_documents_live,
    warnings=_documents_warnings,
    inputs=_documents_inputs,
    resumes=True,
)


# vocab


def _run_vocab(ctx: Context) -> Outcome:
    from corpusforge.encoding.vocab import train_and_measure, vocab_sha256
    from corpusforge.pipeline.documents_io import output_files

    layout = ctx.layout
    dirs, figures = in_fresh_process(train_and_measure, output_files(layout.documents), layout.vocab_root, ctx.cfg.vocab)
    outputs = [path for directory in dirs.values() for path in storage.files_under(directory)]
    return Outcome(
        describe_outputs(layout, outputs),
        digests={kind: vocab_sha256(directory) for kind, directory in dirs.items()},
        data={"vocab": {kind: layout.relative(directory) for kind, directory in dirs.items()}, "vocab_figures": figures},
    )


def _vocab_warnings(cfg: Config, figures: dict[str, Any]) -> list[str]:
    from corpusforge.encoding.vocab import vocab_manifest

    warnings = []
    for kind, directory in figures["vocab"].items():
        size = figures["vocab_figures"].get(kind, {}).get("size") or vocab_manifest(directory)["size"]
        asked = cfg.vocab.wordpiece_vocab_size if kind == "wordpiece" else cfg.vocab.bpe_vocab_size
        if size < VOCAB_SHORTFALL * asked:
            warnings.append(
                f"vocab: the {kind} vocabulary has {size:,} tokens, under {VOCAB_SHORTFALL:.0%} of the {asked:,} asked "
                "(the documents are too few for it)"
            )
    return warnings


VOCAB = Stage(
    name="vocab",
    format=1,
    view=lambda cfg, parts: {"vocab": cfg.vocab.model_dump(mode="json")},
    needs=lambda cfg: [("documents", "documents")],
    folders=lambda layout, cfg: [layout.vocab_root],
    run=_run_vocab,
    figures=lambda layout, marker: {
        "vocab": {kind: layout.path(path) for kind, path in marker.data["vocab"].items()},
        "vocab_figures": marker.data.get("vocab_figures", {}),  # absent in a marker of an earlier version
    },
    how_to_run='add "vocab" to run.stages',
    makes=lambda cfg: list(cfg.vocab.kinds),
    missing_output_hint="add {output!r} to vocab.kinds",
    warnings=_vocab_warnings,
)


# example formats: one stage each, writing shards from the documents with one vocabulary


def example_stage(name: str, vocab_kind: str, write: Callable[..., dict]) -> Stage:
    """The stage of one example format: ``write(options, documents, vocab, folder, section, shards, seed)``
    makes ``OUT/shards/<name>/`` from the documents and the ``vocab_kind`` vocabulary."""

    def run(ctx: Context) -> Outcome:
        from corpusforge.pipeline.documents_io import output_files
        from corpusforge.pipeline.options import pipeline_options

        layout, cfg = ctx.layout, ctx.cfg
        folder = layout.shards(name)
        vocab = layout.path(ctx.markers["vocab"].data["vocab"][vocab_kind])
        text_bytes = sum(stats["bytes"] for stats in ctx.markers["documents"].data["stats"].values())  # recounted by the documents stage
        options, work, on_workers = pipeline_options(cfg.run, text_bytes), layout.work(name), not shuffles_through_launcher(cfg.run)
        write(
            options,
            output_files(layout.documents),
            vocab,
            folder,
            getattr(cfg, name),
            cfg.shards,
            cfg.run.seed,
            work=work,
            cut_on_workers=on_workers,
        )
        storage.remove_tree(work)
        if not storage.listdir(layout.temp):
            storage.remove_tree(layout.temp)
        return Outcome(
            describe_outputs(layout, storage.files_under(folder)), digests={name: storage.sha256(storage.join(folder, "manifest.json"))}
        )

    def live(layout: Layout) -> dict[str, int]:
        work = layout.work(name)
        return {
            "token batches": len(storage.glob(storage.join(work, ".sort-*", "docs", "*.arrow"))),
            "example files": len(storage.glob(storage.join(work, ".sort-*", "examples", "bucket-*", "*.arrow"))),
            "shards written": len(storage.glob(storage.join(layout.shards(name), "train-*.arrow"))),
        }

    def warnings(cfg: Config, figures: dict[str, Any]) -> list[str]:
        if not figures[name].get("totals", {}).get("examples"):
            return [f"{name}: 0 examples written (no document is long enough to make one)"]
        return []

    return Stage(
        name=name,
        format=SHARDS_FORMAT,
        view=lambda cfg, parts: {
            name: getattr(cfg, name).model_dump(mode="json"),
            "shards": cfg.shards.model_dump(mode="json"),
            "seed": cfg.run.seed,
        },
        needs=lambda cfg: [("documents", "documents"), ("vocab", vocab_kind)],
        folders=lambda layout, cfg: [layout.shards(name)],
        run=run,
        figures=lambda layout, marker: {name: storage.read_json(storage.join(layout.shards(name), "manifest.json"))},
        how_to_run=f'add "{name}" to run.stages',
        makes=lambda cfg: [name],
        live=live,
        warnings=warnings,
    )


def _write_bert(*args: Any, **kwargs: Any) -> dict:
    from corpusforge.pipeline.examples_stage import write_bert_shards

    return write_bert_shards(*args, **kwargs)


def _write_gpt(*args: Any, **kwargs: Any) -> dict:
    from corpusforge.pipeline.examples_stage import write_gpt_shards

    return write_gpt_shards(*args, **kwargs)


EXAMPLE_FORMATS = (example_stage("bert", "wordpiece", _write_bert), example_stage("gpt", "bpe", _write_gpt))


# train


def _trained_family(cfg: Config) -> str:
    from corpusforge.trainer.sizes import get_size

    return get_size(cfg.train.model).family


def _run_train(ctx: Context) -> Outcome:
    """Train; a run killed part way with this same fingerprint continues from its newest checkpoint."""
    from corpusforge.trainer.checkpoint import resolve_checkpoint
    from corpusforge.trainer.loop import train

    cfg, layout = ctx.cfg, ctx.layout
    family = _trained_family(cfg)
    run_dir = layout.train(cfg.train.model)
    started = layout.marker("train.started")
    same = storage.is_file(started) and storage.read_json(started).get("fingerprint") == ctx.fingerprint
    resume = None
    if same and not ctx.force:
        try:
            resolve_checkpoint(run_dir)
            resume = run_dir  # the trainer picks its newest checkpoint
        except FileNotFoundError:
            pass
    storage.write_json(started, {"fingerprint": ctx.fingerprint})
    evaluation = train(cfg.train.model_copy(update={"task": family}), layout.shards(family), run_dir, resume=resume)
    storage.remove(started)
    note = "; continued from its newest checkpoint" if resume is not None else ""
    return Outcome(describe_outputs(layout, storage.files_under(run_dir)), data={"eval": evaluation}, note=note)


TRAIN = Stage(
    name="train",
    format=1,
    view=lambda cfg, parts: {"train": cfg.train.model_dump(mode="json", exclude={"task"})},
    needs=lambda cfg: [(_trained_family(cfg), _trained_family(cfg))],
    folders=lambda layout, cfg: [],  # train/: the trainer's own (checkpoints are resumed, not swept)
    run=_run_train,
    figures=lambda layout, marker: {"train": marker.data["eval"]},
    how_to_run='add "train" to run.stages',
)


STAGES: list[Stage] = [DOCUMENTS, VOCAB, *EXAMPLE_FORMATS, TRAIN]  # in pipeline order
BY_NAME = {stage.name: stage for stage in STAGES}


def register(stage: Stage) -> None:
    """Add a stage after the declared ones (a plugin's, or a test's): planning, markers, the manifest and
    the report take it from here like any other."""
    if stage.name in known_stages():
        raise ValueError(f"a stage named {stage.name!r} is already declared")
    STAGES.append(stage)
    BY_NAME[stage.name] = stage


def unregister(name: str) -> None:
    STAGES.remove(BY_NAME.pop(name))


def known_stages() -> list[str]:
    return [*(source.name for source in SOURCES), *FILTERS, *BY_NAME]


def check_stage_names(cfg: Config) -> None:
    """One line naming what ``run.stages`` lists that no declaration knows."""
    unknown = sorted(set(cfg.run.stages) - set(known_stages()))
    if unknown:
        raise ValueError(f"run.stages: unknown stage(s) {unknown}; known: {known_stages()}")


def requested_stages(cfg: Config) -> list[Stage]:
    """The stages ``run.stages`` asks for, in pipeline order: documents whenever a source is listed."""
    check_stage_names(cfg)
    asked = set(cfg.run.stages) - {DOCUMENTS.name}
    if asked & {source.name for source in SOURCES}:
        asked.add(DOCUMENTS.name)
    return [stage for stage in STAGES if stage.name in asked]
