"""The Dask runner's fixes against the installed Beam: the private Beam names they use are all listed and present,
a Beam that lacks one fails with a one-line message naming it, pyproject.toml declares the range the module
supports, and the fixes work (every branch runs, outputs stay apart, finish_bundle output is kept, shuffles run)."""

from __future__ import annotations

import ast
import contextlib
import os
import sys
import time
import tomllib
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam import pvalue
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.dask import dask_runner as beam_dask_runner
from apache_beam.runners.dask import transform_evaluator
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from corpusforge.pipeline import dask_runner

ROOT = Path(__file__).resolve().parents[1]


def test_the_installed_beam_has_every_internal() -> None:
    dask_runner.check_beam_internals()


@pytest.mark.parametrize(
    ("owner", "attribute", "internal"),
    [
        (transform_evaluator, "OneReceiver", "apache_beam.runners.dask.transform_evaluator.OneReceiver"),
        (beam_dask_runner.DaskOptions, "_extract_bag_kwargs", "apache_beam.runners.dask.dask_runner.DaskOptions._extract_bag_kwargs"),
    ],
)
def test_a_missing_internal_is_named_with_the_supported_range(
    monkeypatch: pytest.MonkeyPatch, owner: object, attribute: str, internal: str
) -> None:
    monkeypatch.delattr(owner, attribute)
    with pytest.raises(dask_runner.UnsupportedBeam) as raised:
        dask_runner.check_beam_internals()
    message = str(raised.value)
    assert "\n" not in message
    assert f"need {internal}, which Beam {beam.__version__} does not have" in message
    assert message.endswith(f"supported Beam: {dask_runner.SUPPORTED_BEAM}")


def test_a_changed_signature_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    def get_all_options(self, drop_default=False):  # Beam before 2.71: no current_only
        return {}

    monkeypatch.setattr(PipelineOptions, "get_all_options", get_all_options)
    with pytest.raises(dask_runner.UnsupportedBeam, match=r"PipelineOptions\.get_all_options\(drop_default=, current_only=\)"):
        dask_runner.check_beam_internals()


def test_every_private_beam_name_the_module_uses_is_listed() -> None:
    listed = {name for name, _uses, _bug in dask_runner.BEAM_INTERNALS}
    uses = {use.rstrip("=") for _name, used, _bug in dask_runner.BEAM_INTERNALS for use in used}
    tree = ast.parse((ROOT / "pipeline" / "dask_runner.py").read_text())
    imported = {
        f"{node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("apache_beam")
        for alias in node.names
        if node.module.startswith("apache_beam.runners") or alias.name.startswith("_")
    }
    unlisted = {name for name in imported if not any(entry == name or entry.startswith(f"{name}.") for entry in listed)}
    assert imported and not unlisted
    private = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and not (isinstance(node.value, ast.Name) and node.value.id == "self")
    }
    assert private and private <= uses


def test_the_installed_beam_is_in_the_range_pyproject_declares() -> None:
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    declared = next(r.specifier for r in map(Requirement, dependencies) if r.name == "apache-beam")
    assert declared == SpecifierSet(dask_runner.SUPPORTED_BEAM)
    assert any(s.operator in ("<", "<=") for s in declared), "an upper bound: the next Beam may move the internals"
    assert Version(beam.__version__) in declared


@contextlib.contextmanager
def _dask_pipeline(threads: int) -> Iterator[beam.Pipeline]:
    """A pipeline on our DaskRunner against a one-worker LocalCluster with ``threads`` threads, run on exit."""
    from dask.distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=threads, processes=False, dashboard_address=None) as cluster:
        with _pipeline_on(cluster.scheduler_address) as p:
            yield p


def _pipeline_on(address: str) -> beam.Pipeline:
    """A pipeline on our DaskRunner against the scheduler at ``address``, run when its block ends."""
    options = PipelineOptions(["--runner=corpusforge.pipeline.dask_runner.DaskRunner", f"--dask_client_address={address}"])
    return beam.Pipeline(options=options)


class _Split(beam.DoFn):
    """Evens to the main output, odds to "odd", and one marker per bundle from finish_bundle."""

    def process(self, x: int):
        yield x if x % 2 == 0 else pvalue.TaggedOutput("odd", x)

    def finish_bundle(self):
        yield WindowedValue("end", 0, (GlobalWindow(),))


class _Record(beam.DoFn):
    """One empty file per element: the leaves' only output, so a branch that never ran leaves no files."""

    def __init__(self, folder: str, kind: str) -> None:
        self.folder, self.kind = folder, kind

    def process(self, x) -> None:
        with open(os.path.join(self.folder, f"{self.kind}-{x}"), "w"):
            pass


def test_every_branch_runs_with_its_own_output(tmp_path: Path) -> None:
    folder = str(tmp_path)
    with _dask_pipeline(threads=2) as p:
        split = p | beam.Create(range(40)) | beam.ParDo(_Split()).with_outputs("odd", main="even")
        _ = split.even | "even" >> beam.ParDo(_Record(folder, "even"))
        _ = split.odd | "odd" >> beam.ParDo(_Record(folder, "odd"))
        grouped = split.odd | beam.Map(lambda x: (x % 3, x)) | beam.GroupByKey()
        _ = grouped | beam.MapTuple(lambda k, xs: f"{k}:{sum(xs)}") | "group" >> beam.ParDo(_Record(folder, "group"))
    expected = {f"even-{x}" for x in range(0, 40, 2)} | {"even-end"} | {f"odd-{x}" for x in range(1, 40, 2)}
    expected |= {f"group-{k}:{sum(x for x in range(1, 40, 2) if x % 3 == k)}" for k in range(3)}
    assert set(os.listdir(folder)) == expected


def test_shuffles_have_two_partitions_per_worker_thread_within_bounds() -> None:
    from corpusforge.pipeline.dask_runner import MAX_SHUFFLE_PARTITIONS, MIN_SHUFFLE_PARTITIONS, shuffle_partitions

    assert [shuffle_partitions(n) for n in (0, 1, 2, 3, 8, 100)] == [4, 4, 4, 6, 16, 16]
    assert (MIN_SHUFFLE_PARTITIONS, MAX_SHUFFLE_PARTITIONS) == (4, 16)


def test_a_create_has_thirty_two_partitions_per_worker_thread_within_bounds() -> None:
    from corpusforge.pipeline.dask_runner import MAX_CREATE_PARTITIONS, create_partitions

    assert [create_partitions(n) for n in (0, 1, 2, 3, 31, 32, 100)] == [32, 32, 64, 96, 992, 1024, 1024]
    assert MAX_CREATE_PARTITIONS == 1024


def test_a_create_on_the_cluster_has_the_partitions_of_its_threads(tmp_path: Path) -> None:
    """400 read tasks on 2 threads: 64 partitions asked for (a partition per input file cost each file ~9 Dask
    tasks), every element in one of them; 40 elements: a bundle each (a small job still spreads over every thread)."""
    import dask.bag as db

    for elements, asked in ((400, 64), (40, 40)):
        folder = tmp_path / str(elements)
        folder.mkdir()
        with _dask_pipeline(threads=2) as p:
            _ = p | beam.Create(range(elements)) | beam.ParDo(_RecordBundle(str(folder)))
        counts = [int((folder / name).read_text()) for name in os.listdir(folder)]
        assert sum(counts) == elements
        assert len(counts) == db.from_sequence(range(elements), npartitions=asked).npartitions  # 67 of ~6 for 64 asked


def test_a_shuffle_on_the_cluster_has_the_partitions_of_its_threads(tmp_path: Path) -> None:
    """The GroupByKey of a 400-partition Create is cut to 2 x 3 threads = 6 partitions: 6 distinct tasks group."""
    folder = str(tmp_path)
    with _dask_pipeline(threads=3) as p:
        grouped = p | beam.Create(range(400)) | beam.Map(lambda x: (x % 97, x)) | beam.GroupByKey()
        _ = grouped | beam.ParDo(_RecordBundle(folder))
    bundles = os.listdir(folder)
    assert len(bundles) == 6
    assert sum(int(open(os.path.join(folder, b)).read()) for b in bundles) == 97


def test_part_keys_go_round_robin_over_a_shuffles_partitions() -> None:
    from corpusforge.pipeline.dask_runner import shuffle_hash

    for partitions in (4, 6, 16):
        for parts in (1, 3, 4, 8, 40):
            for keys in ([(part, parts) for part in range(parts)], list(range(parts))):
                hit = [shuffle_hash(key) % partitions for key in keys]
                assert max(map(hit.count, hit)) == -(-parts // partitions), (partitions, keys)
    assert shuffle_hash("doc-1") == shuffle_hash("doc-1") != shuffle_hash("doc-2")  # other keys: Dask's tokenize


def test_a_writers_parts_are_grouped_one_per_partition_on_the_cluster(tmp_path: Path) -> None:
    """Four (part, parts) keys on 2 threads (a 4-partition shuffle): each part's group alone in its bundle, so two
    workers write two parts each (Dask's own hash put two of them in one partition)."""
    folder = str(tmp_path)
    with _dask_pipeline(threads=2) as p:
        grouped = p | beam.Create([((part, 4), x) for part in range(4) for x in range(25)]) | beam.GroupByKey()
        _ = grouped | beam.ParDo(_RecordBundle(folder))
    counts = [int(open(os.path.join(folder, b)).read()) for b in os.listdir(folder)]
    assert sorted(c for c in counts if c) == [1, 1, 1, 1]


class _RecordGroup(beam.DoFn):
    """One file per group, named by its key, holding its values sorted."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def process(self, group) -> None:
        key, values = group
        with open(os.path.join(self.folder, str(key)), "w") as f:
            f.write(",".join(map(str, sorted(values))))


def test_a_file_shuffle_runs_as_its_writers_and_readers_only(tmp_path: Path) -> None:
    """``FileGroupByKey``'s (bucket, location) pairs, a few per file, are grouped by each reader for its share of the
    buckets: no task shuffle (~n^2 tasks in steps that each wait on the scheduler), no task gathering them and none
    splitting them again, no alias task left by Dask's fusion; a task per read partition (read, key, write fused),
    one per reader, and the same groups as Beam's."""
    import dask.bag as db
    from dask.distributed import Client, LocalCluster, get_task_stream

    from corpusforge.pipeline.file_shuffle import FileGroupByKey

    folder = tmp_path / "groups"
    folder.mkdir()
    with (
        LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as client,
        get_task_stream(client) as stream,
    ):
        with _pipeline_on(cluster.scheduler_address) as p:
            pairs = p | beam.Create(range(400)) | beam.Map(lambda x: (x % 97, x))
            _ = pairs | FileGroupByKey(str(tmp_path / "shuffle"), flush_elements=50) | beam.ParDo(_RecordGroup(str(folder)))
    stages = Counter(task["key"][0] for task in stream.data if isinstance(task["key"], tuple))  # by fused task name
    reads = db.from_sequence(range(400), npartitions=dask_runner.create_partitions(2)).npartitions  # as _SpreadCreate
    assert sorted(stages.values()) == sorted([reads, dask_runner.shuffle_partitions(2)]), stages
    groups = {path.name: path.read_text() for path in folder.iterdir()}
    assert groups == {str(k): ",".join(map(str, range(k, 400, 97))) for k in range(97)}


def test_fused_chains_keep_their_own_keys() -> None:
    """Dask's fusion leaves an alias task per fused chain whose end others read; the runner's graph has none, and
    computes the same."""
    import dask
    import dask.bag as db
    from dask._task_spec import Alias

    numbers = db.from_sequence(range(40), npartitions=8).map(lambda x: x * 3).map(lambda x: x + 1)
    bags = [numbers.map(lambda x: x % 7).distinct(), numbers.filter(lambda x: x % 2).map(str)]

    def aliases(graph) -> int:
        return sum(isinstance(node, Alias) for node in dict(graph).values())

    dasks = dict(dask.optimize(*bags)[0].__dask_graph__())
    assert aliases(dasks) >= 8  # what Dask's own optimization leaves
    ours = dask_runner._without_aliases(bags)
    assert aliases(ours[0].__dask_graph__()) == 0
    # A fused task keeps the name Dask gave it (the scheduler learns task durations by name): only a result's key,
    # which the job's futures wait for, is taken over. Under a shuffle's key, a chain of real work passed for one
    # of its millisecond steps, and four 0.5 s tasks queued on one worker while the other idled.
    outputs = {key for bag in ours for key in bag.__dask_keys__()}
    assert {key for key, node in dasks.items() if isinstance(node, Alias)} & set(dict(ours[0].__dask_graph__())) <= outputs
    expected = dask.compute(*bags, scheduler="sync")
    assert dask.compute(*ours, scheduler="sync", optimize_graph=False) == expected


def test_bundles_on_a_multithreaded_worker_do_not_share_dofn_state(tmp_path: Path) -> None:
    """``dask worker`` runs a thread per core: 400 elements in 128 partitions on 4 threads, each bundle counting its
    own elements, add up to 400 (on Beam's shared instance, one bundle's start_bundle reset another's count)."""
    folder = str(tmp_path)
    with _dask_pipeline(threads=4) as p:
        _ = p | beam.Create(range(400)) | beam.ParDo(_RecordBundle(folder, pause=0.002))
    assert sum(int(open(os.path.join(folder, b)).read()) for b in os.listdir(folder)) == 400


class _Lifecycle(beam.DoFn):
    """An empty file per setup, bundle and teardown, named by its kind."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def _mark(self, kind: str) -> None:
        with open(os.path.join(self.folder, f"{kind}-{uuid.uuid4().hex}"), "w"):
            pass

    def setup(self) -> None:
        self._mark("setup")

    def start_bundle(self) -> None:
        self._mark("bundle")

    def process(self, x) -> None:
        time.sleep(0.005)  # both threads take bundles

    def teardown(self) -> None:
        self._mark("teardown")


def test_a_worker_thread_sets_a_dofn_up_once_per_job(tmp_path: Path) -> None:
    """Two jobs of 40 one-element bundles on one 2-thread worker: a setup per thread and job, not per bundle (a copy
    and its signature per bundle cost ~3 ms); the second job's bundles tear the first job's copies down."""
    from dask.distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster:
        for job in ("first", "second"):
            (tmp_path / job).mkdir()
            with _pipeline_on(cluster.scheduler_address) as p:
                _ = p | beam.Create(range(40)) | beam.ParDo(_Lifecycle(str(tmp_path / job)))
    first, second = ([name.split("-")[0] for name in os.listdir(tmp_path / job)] for job in ("first", "second"))
    assert first.count("bundle") == second.count("bundle") == 40
    assert 1 <= first.count("setup") <= 2 and 1 <= second.count("setup") <= 2
    assert 1 <= first.count("teardown") <= first.count("setup") and second.count("teardown") == 0


class _RecordBundle(beam.DoFn):
    """One file per bundle (a Dask partition) holding how many elements (or groups) it saw."""

    def __init__(self, folder: str, pause: float = 0.0) -> None:
        self.folder, self.pause = folder, pause

    def start_bundle(self) -> None:
        self.groups = 0

    def process(self, item) -> None:
        time.sleep(self.pause)  # other threads' bundles start meanwhile
        self.groups += 1

    def finish_bundle(self) -> None:
        with open(os.path.join(self.folder, uuid.uuid4().hex), "w") as f:
            f.write(str(self.groups))


class _ReuseFaults(beam.DoFn):
    """Page faults of the worker thread while it frees and reallocates one 1 MB block 100 times (a second block held
    after it, so the freed one is not the heap's top and is not trimmed), written to ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def process(self, _) -> None:
        import resource

        before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        block, held = b"x" * (1 << 20), b"y" * (1 << 20)
        for _ in range(100):
            del block
            block = b"x" * (1 << 20)
        faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before
        with open(self.path, "w") as out:
            out.write(f"{faults} {len(block) + len(held)} {os.environ.get('MALLOC_TRIM_THRESHOLD_')}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc thresholds")
def test_a_nanny_started_worker_reuses_freed_megabytes_without_page_faults(tmp_path: Path) -> None:
    """A worker its nanny started (with Dask's ``MALLOC_TRIM_THRESHOLD_``): a freed 1 MB block is reused from the
    heap, not mapped afresh and faulted in page by page (256 faults each: ~25,600 for 100) as under Dask's setting alone."""
    from dask.distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with _pipeline_on(cluster.scheduler_address) as p:
            _ = p | beam.Create([0]) | beam.ParDo(_ReuseFaults(str(tmp_path / "faults")))
    faults, _, trim = (tmp_path / "faults").read_text().split()
    assert trim == "65536"  # the nanny's setting reached the worker: what this fix is for
    assert int(faults) < 2_000


def test_the_mmap_threshold_is_left_alone_without_a_trim_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    """glibc's dynamic mmap threshold stays on where nothing turned it off, and a user's own mmap threshold wins."""
    for name in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES"):
        monkeypatch.delenv(name, raising=False)
    dask_runner._arrays_from_the_heap.cache_clear()
    assert dask_runner._arrays_from_the_heap() is False
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    dask_runner._arrays_from_the_heap.cache_clear()
    assert dask_runner._arrays_from_the_heap() is False
    dask_runner._arrays_from_the_heap.cache_clear()
