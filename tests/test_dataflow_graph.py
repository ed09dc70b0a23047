"""The Dataflow jobs of every Beam stage (documents, whose writers recount what they wrote; bert and gpt, each with its
shard cut), built offline and checked: what ``corpusforge build`` would submit with ``run.runner =
"DataflowRunner"``, made by DataflowRunner's dry run (no credentials, nothing sent).

A cloud build spells every path as a URI, and a Dataflow worker opens none of the launcher's files: so
every stage's transforms must be in the job, and nothing in the job may name a local path, neither the
request (its pipeline options), nor the pipeline it stages (``pipeline.pb``), nor what is pickled inside it
(DoFns, their closures, the elements of ``beam.Create``), decoded with Beam's own pickler.

The gs:// files live in memory: graph construction lists the books, plans Wikipedia's byte ranges from its
multistream index and reads Parquet footers and the vocabulary, so a ``gs`` filesystem backed by fsspec's
``MemoryFileSystem`` stands in for gcsfs. The dry run itself needs ``apache-beam[gcp]`` (in the dev extra):
DataflowRunner imports the Dataflow API client before it looks at ``--dry_run``.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import tempfile
import types
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import apache_beam as beam
import pytest
from corpus_factory import build_multistream
from fsspec.implementations.memory import MemoryFileSystem
from fsspec.registry import _registry as fsspec_registry  # the dict behind fsspec's read-only registry view
from google.protobuf.message import Message

from corpusforge.core import storage
from corpusforge.core.config import BertConfig, BooksConfig, Config, GptConfig, RunConfig, ShardsConfig, WikipediaConfig
from corpusforge.core.layout import Layout
from corpusforge.corpora.document import Document
from corpusforge.encoding.vocab import train_bpe, train_wordpiece
from corpusforge.pipeline.documents_io import documents_table, output_files, write_table_atomic
from corpusforge.pipeline.documents_job import documents_graph
from corpusforge.pipeline.examples_stage import write_bert_shards, write_gpt_shards
from corpusforge.pipeline.options import pipeline_options, shuffles_through_launcher
from corpusforge.stages import documents_job, documents_parts

try:  # DataflowRunner's module imports the Dataflow API client even for a dry run
    from apache_beam.internal import pickler
    from apache_beam.portability.api import beam_runner_api_pb2
    from apache_beam.runners.dataflow.dataflow_runner import DataflowRunner
    from apache_beam.runners.dataflow.internal import apiclient
except ImportError as missing:  # pragma: no cover - a setup error, said plainly
    pytest.fail(f"DataflowRunner's dry run needs apache-beam[gcp] (pip install -e '.[dev]'): {missing}", pytrace=False)

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "corpusforge" / "samples"
BUCKET = "gs://cf-test"
# What a cloud build passes (the README's Dataflow flags), plus the flags of an offline check: --dry_run=True (a bare
# --dry_run is refused: the option takes a value, and "False" would be truthy), --no_auth (no credentials
# are looked up) and a fixed job name (Beam's default is made from the user name).
DATAFLOW_FLAGS = [
    "--project=test-project",
    "--region=us-central1",
    f"--temp_location={BUCKET}/tmp",
    "--dry_run=True",
    "--no_auth",
    "--job_name=corpusforge-dry-run",
]
DOCUMENTS_STAGES = ["books", "wikipedia", "clean", "dedup", "near_dedup", "documents"]


# --- gs:// in memory -------------------------------------------------------------------------------


class MemoryGcs(MemoryFileSystem):
    """fsspec's in-memory filesystem answering for ``gs://``, with gcsfs's path spelling ("bucket/key")."""

    protocol = "gs"
    root_marker = ""
    store: dict = {}
    pseudo_dirs = [""]

    @classmethod
    def _strip_protocol(cls, path: str) -> str:
        return os.fspath(path).removeprefix("gs://").strip("/")


@pytest.fixture
def gcs(monkeypatch) -> Iterator[None]:
    """``gs://`` served from memory for this test only (fsspec's registry and the store are restored after)."""
    monkeypatch.setitem(fsspec_registry, "gs", MemoryGcs)
    try:
        yield
    finally:
        MemoryGcs.store.clear()
        MemoryGcs.pseudo_dirs[:] = [""]


# --- the cloud build's inputs and configuration ----------------------------------------------------


def cloud_config(**run: object) -> Config:
    """A build whose inputs, outputs and temporaries are all URIs, run on Dataflow."""
    settings = {
        "output_dir": f"{BUCKET}/run",
        "temp_location": f"{BUCKET}/tmp",
        "stages": DOCUMENTS_STAGES,
        "runner": "DataflowRunner",
        "beam_args": DATAFLOW_FLAGS,
    }
    return Config(
        run=RunConfig(**(settings | run)),
        books=BooksConfig(paths=[f"{BUCKET}/in/books"]),
        wikipedia=WikipediaConfig(paths=[f"{BUCKET}/in/wikipedia/enwiki-multistream.xml.bz2"], streams_per_range=1),
        bert=BertConfig(dupe_factor=2),
        gpt=GptConfig(seq_len=64),
        shards=ShardsConfig(max_examples=100),
    )


@pytest.fixture
def cloud_inputs(gcs, monkeypatch, tmp_path) -> Layout:
    """The sample books and a multistream Wikipedia dump under ``gs://cf-test/in``; documents and both
    vocabularies in the build folder, as the documents and vocab stages leave them for the example stages."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # Beam's stager leaves its temporaries: pytest sweeps these
    layout = Layout.at(f"{BUCKET}/run", f"{BUCKET}/tmp")
    texts = []
    for book in sorted((SAMPLES / "books").rglob("*.txt")):
        data = book.read_bytes()  # the samples mix encodings on purpose: copied as they are
        storage.write_bytes(f"{BUCKET}/in/books/{book.relative_to(SAMPLES / 'books').as_posix()}", data)
        texts.append(data.decode("utf-8", "replace"))
    wiki = f"{BUCKET}/in/wikipedia"
    build_multistream(
        SAMPLES / "wikipedia" / "sample-pages-articles.xml",
        f"{wiki}/enwiki-multistream.xml.bz2",
        f"{wiki}/enwiki-multistream-index.txt.bz2",
        pages_per_stream=1,
    )
    docs = [Document(id=f"books-{i}", source="books", title=str(i), text=text) for i, text in enumerate(texts)]
    write_table_atomic(documents_table(docs), storage.join(layout.documents, "part-00000-of-00001.parquet"))
    train_wordpiece(texts, layout.vocab("wordpiece"), vocab_size=300)
    train_bpe(texts, layout.vocab("bpe"), vocab_size=400)
    return layout


# --- the job Dataflow would receive ----------------------------------------------------------------


@pytest.fixture
def submitted(monkeypatch) -> list:
    """The ``apiclient.Job`` of every DataflowRunner run in the test, in order (a dry run returns it)."""
    jobs = []
    run_pipeline = DataflowRunner.run_pipeline

    def recording(self, pipeline, options, pipeline_proto=None):
        result = run_pipeline(self, pipeline, options, pipeline_proto)
        jobs.append(result.job)
        return result

    monkeypatch.setattr(DataflowRunner, "run_pipeline", recording)
    return jobs


@dataclass(frozen=True)
class Request:
    """What Dataflow receives for one job: the create-job request and the pipeline staged beside it."""

    job: dict  # the Job message as JSON (its environment holds the pipeline options)
    pipeline: beam_runner_api_pb2.Pipeline  # the staged pipeline.pb

    def transform_names(self) -> set[str]:
        return {t.unique_name for t in self.pipeline.components.transforms.values()}


def dataflow_request(job: apiclient.Job) -> Request:
    """Finish what the dry run stops short of: ``DataflowApplicationClient.create_job_description`` (Beam 2.77)
    stages the pipeline and the SDK's files, rewriting their local temporaries to staging URLs, and fills
    in the job's environment; the files are kept here instead of uploaded, and nothing is submitted."""
    client = apiclient.DataflowApplicationClient(job.options)
    staged: dict[str, bytes] = {}

    def stage_file(folder: str, name: str, stream, mime_type: str | None = None, total_size: int | None = None) -> None:
        staged[name] = stream.read()

    client.stage_file = stage_file
    client.create_job_description(job)
    return Request(json.loads(job.json()), beam_runner_api_pb2.Pipeline.FromString(staged["pipeline.pb"]))


# --- every string in it ----------------------------------------------------------------------------

PAYLOADS = {  # FunctionSpec payloads that are protobuf messages themselves
    "beam:transform:pardo:v1": beam_runner_api_pb2.ParDoPayload,
    "beam:transform:combine_per_key:v1": beam_runner_api_pb2.CombinePayload,
    "beam:transform:combine_globally:v1": beam_runner_api_pb2.CombinePayload,
    "beam:transform:combine_grouped_values:v1": beam_runner_api_pb2.CombinePayload,
    "beam:transform:window_into:v1": beam_runner_api_pb2.WindowIntoPayload,
    "beam:artifact:type:file:v1": beam_runner_api_pb2.ArtifactFilePayload,
    "beam:artifact:type:url:v1": beam_runner_api_pb2.ArtifactUrlPayload,
    "beam:env:docker:v1": beam_runner_api_pb2.DockerPayload,
}
DATA = (str, bytes, int, float, bool, type(None), tuple, list, dict, set, frozenset)


def strings_in(request: Request) -> list[tuple[str, str | bytes]]:
    """(where, value) of every string and bytes in the request: the job, the staged pipeline, and what
    Beam pickled in it (bytes left are encoded elements, e.g. ``beam.Create``'s)."""
    seen: dict[int, object] = {}
    found = list(strings_in_object(request.job, "job", seen))
    for where, value in strings_in_proto(request.pipeline, "pipeline"):
        found.append((where, value))
        if isinstance(value, bytes):
            found += strings_in_pickle(value, where, seen)
    return found


def texts_in(request: Request) -> set[str]:
    return {value for _, value in strings_in(request) if isinstance(value, str)}


def strings_in_proto(value: object, where: str) -> Iterator[tuple[str, str | bytes]]:
    """Every string and bytes value in a protobuf message, nested payloads parsed where their type is known."""
    if isinstance(value, (str, bytes)):
        yield where, value
    elif isinstance(value, Message):
        for field, item in value.ListFields():
            yield from strings_in_proto(item, f"{where}.{field.name}")
        if isinstance(value, beam_runner_api_pb2.FunctionSpec) and value.urn in PAYLOADS:
            yield from strings_in_proto(PAYLOADS[value.urn].FromString(value.payload), f"{where}<{value.urn}>")
    elif hasattr(value, "items"):  # a map field
        for key, item in value.items():
            yield f"{where}.keys()", key
            yield from strings_in_proto(item, f"{where}[{key!r}]")
    elif isinstance(value, Iterable):  # a repeated field
        for index, item in enumerate(value):
            yield from strings_in_proto(item, f"{where}[{index}]")


def strings_in_pickle(data: bytes, where: str, seen: dict[int, object]) -> list[tuple[str, str | bytes]]:
    """The strings inside a payload Beam pickled (a DoFn with its arguments, a CombineFn, a coder); none for other bytes."""
    try:
        value = pickler.loads(data)
    except Exception:
        return []
    return list(strings_in_object(value, f"{where}<unpickled>", seen))


def strings_in_object(value: object, where: str, seen: dict[int, object]) -> Iterator[tuple[str, str | bytes]]:
    """Every string and bytes reachable from an unpickled object: attributes, containers, ``partial``
    arguments, a function's defaults, closure cells, constants and the data globals it names.

    A function's ``co_filename`` is left out: cloudpickle keeps it for tracebacks (every lambda pickled by
    value, Beam's own included, names its source file in the checkout or the virtualenv), no worker opens it.
    Classes and modules travel by reference, so nothing of theirs is in the job."""
    if id(value) in seen or isinstance(value, (type, types.ModuleType)):
        return
    seen[id(value)] = value  # kept alive: an id is unique only while its object lives
    if isinstance(value, (str, bytes)):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings_in_object(key, f"{where}.keys()", seen)
            yield from strings_in_object(item, f"{where}[{key!r}]", seen)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for index, item in enumerate(value):
            yield from strings_in_object(item, f"{where}[{index}]", seen)
    elif isinstance(value, functools.partial):
        yield from strings_in_object((value.func, value.args, value.keywords), f"{where}<partial>", seen)
    elif isinstance(value, types.FunctionType):
        code = value.__code__
        yield from strings_in_object(code, f"{where}.__code__", seen)
        yield from strings_in_object((value.__defaults__ or (), value.__kwdefaults__ or {}), f"{where}<defaults>", seen)
        for name, cell in zip(code.co_freevars, value.__closure__ or ()):
            yield from strings_in_object(cell.cell_contents, f"{where}<closure {name}>", seen)
        for name in code.co_names:  # constants the function reads; live objects (a logger) are not configuration
            if name in value.__globals__ and isinstance(value.__globals__[name], DATA) and not name.startswith("__"):
                yield from strings_in_object(value.__globals__[name], f"{where}<global {name}>", seen)
    elif isinstance(value, types.CodeType):
        yield from strings_in_object(value.co_consts, f"{where}.co_consts", seen)
    else:
        if isinstance(getattr(value, "__dict__", None), dict):
            yield from strings_in_object(value.__dict__, f"{where}.__dict__", seen)
        for name in getattr(type(value), "__slots__", ()):
            if hasattr(value, name):
                yield from strings_in_object(getattr(value, name), f"{where}.{name}", seen)


# --- local paths -----------------------------------------------------------------------------------


def local_roots(*extra: str | os.PathLike) -> list[str]:
    """Folders no Dataflow worker has: this machine's temporary, home and work folders, the checkout."""
    roots = {"/tmp", "/work", "/home", "/root", tempfile.gettempdir(), str(Path.home()), os.getcwd(), str(ROOT)}
    roots |= {os.fspath(path) for path in extra}
    return sorted({os.path.realpath(root) for root in roots} | roots, key=len, reverse=True)


def local_paths(request: Request, *extra: str | os.PathLike) -> list[tuple[str, str]]:
    """(where, path) of every local path in the request.

    In a string a root counts at its start, after a character no path holds ("=", a quote, a space) or
    as a file:// URI: ``gs://cf-test/tmp`` does not name ``/tmp``. In encoded bytes a length prefix may be
    any character, so there a root counts unless it continues a URI."""
    roots = "|".join(re.escape(root.rstrip("/")) for root in local_roots(*extra))
    path = rf"(?:{roots})(?![\w.\-])[^\x00-\x20\"']*"
    in_text, in_bytes = re.compile(rf"(?<![\w.\-/])(?:file://)?{path}"), re.compile(path)
    found = []
    for where, value in strings_in(request):
        if isinstance(value, str):
            found += [(where, match.group(0)) for match in in_text.finditer(value)]
        else:
            text = value.decode("latin-1")
            found += [(where, match.group(0)) for match in in_bytes.finditer(text) if not continues_uri(text[: match.start()])]
    return found


def continues_uri(before: str) -> bool:
    """Whether what precedes a match, back to the last separator, is a URI's start (``gs://cf-test``)."""
    token = re.split(r"[\x00-\x20\"']", before)[-1]
    return "://" in token and not token.endswith("file://")


# --- the stages' jobs ------------------------------------------------------------------------------


def documents_request(cfg: Config) -> Request:
    """The documents stage's Beam job: its graph on a pipeline with the build's options, run dry."""
    job = documents_job(cfg, Layout.at(cfg.run.output_dir, cfg.run.temp_location), documents_parts(cfg.run.stages))
    pipeline = beam.Pipeline(options=pipeline_options(cfg.run))
    documents_graph(pipeline, job)
    return dataflow_request(pipeline.run().job)


def examples_requests(cfg: Config, layout: Layout, name: str, submitted: list) -> tuple[Request, Request]:
    """The ``bert`` or ``gpt`` stage's two Beam jobs on a cluster, called as the stage calls them: the examples
    spilled under the run's temporary area, then the shards cut on the workers. A dry run makes no example,
    so the cut plans one empty shard, and reading back its entries fails."""
    write, vocab = {"bert": (write_bert_shards, "wordpiece"), "gpt": (write_gpt_shards, "bpe")}[name]
    options, on_workers = pipeline_options(cfg.run), not shuffles_through_launcher(cfg.run)
    with pytest.raises(FileNotFoundError):
        write(
            options,
            output_files(layout.documents),
            layout.vocab(vocab),
            layout.shards(name),
            getattr(cfg, name),
            cfg.shards,
            cfg.run.seed,
            work=layout.work(name),
            cut_on_workers=on_workers,
        )
    examples, cut = submitted
    return dataflow_request(examples), dataflow_request(cut)


def test_documents_job_has_every_stage_and_names_no_local_path(cloud_inputs, tmp_path):
    request = documents_request(cloud_config())
    steps = {name.split("/")[0] for name in request.transform_names()}
    assert {"ListBooks", "SpreadBooks", "ReadBooks", "BooksListed", "ListWikipedia", "ReadWikipedia", "AllSources"} <= steps
    assert {"ExactDedup", "NearDedup", "WriteDocuments", "AllRejects", "WriteRejects", "WriteCounters"} <= steps
    options = request.job["environment"]["sdkPipelineOptions"]["options"]
    assert options["runner"] == "DataflowRunner" and options["project"] == "test-project"
    texts = texts_in(request)  # the job reaches its URIs: the books, the spill, the outputs, the writers' recounts
    assert {f"{BUCKET}/in/books", f"{BUCKET}/tmp/documents/spill", f"{BUCKET}/run/documents", f"{BUCKET}/run/rejects"} <= texts
    assert f"{BUCKET}/tmp/documents/recounts" in texts
    assert local_paths(request, tmp_path) == []


EXAMPLE_STEPS = {
    "bert": {"Read/Parts", "Read/Rows", "Read/Sentences", "Examples/Tokenize/Tokenize", "Examples/ByBucket", "Examples/Examples"},
    "gpt": {"Read/Parts", "Read/Rows", "Examples/OneText", "Examples/Windows/Tokenize/Tokenize", "Examples/Windows/ByBucket"},
}


@pytest.mark.parametrize("name", ["bert", "gpt"])
def test_example_jobs_have_every_step_and_name_no_local_path(cloud_inputs, submitted, tmp_path, name):
    examples, cut = examples_requests(cloud_config(), cloud_inputs, name, submitted)
    names = examples.transform_names()
    assert EXAMPLE_STEPS[name] <= names and any(step.endswith("/WriteCounters") for step in names)
    texts = texts_in(examples)
    assert cloud_inputs.vocab({"bert": "wordpiece", "gpt": "bpe"}[name]) in texts
    assert any(text.startswith(f"{cloud_inputs.work(name)}/.sort-") for text in texts)  # the spill folder
    assert {"ShardJobs", "CutShard", "GatherEntries", "WriteEntries"} <= {step.split("/")[0] for step in cut.transform_names()}
    assert f"{cloud_inputs.shards(name)}/train-00000-of-00001.arrow" in texts_in(cut)
    assert local_paths(examples, tmp_path) == [] and local_paths(cut, tmp_path) == []


def test_a_local_path_in_the_configuration_is_caught(cloud_inputs, tmp_path):
    """Books read from this machine and a local temp_location: both are found where a worker would look
    for them (the listed book files among Create's elements, the spill folder in the reading DoFn)."""
    books, work = tmp_path / "books", tmp_path / "work"
    shutil.copytree(SAMPLES / "books", books)
    cfg = cloud_config(temp_location=str(work))
    cfg.books.paths = [str(books)]
    found = local_paths(documents_request(cfg), tmp_path)
    assert found and all(path.startswith(str(tmp_path)) for _, path in found)
    # a task is (root, its files), pickled: a match may run on from the root through the files' names
    assert any("serialized_values" in where and str(books / "salt_and_iron.txt") in path for where, path in found)
    assert any(
        where.endswith("<unpickled>[0].__dict__['spill_dir']") and path == str(work / "documents" / "spill") for where, path in found
    )
