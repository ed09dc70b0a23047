"""Beam's DaskRunner (``apache_beam.runners.dask``) with its bugs fixed, so the same graphs run on Dask unchanged.

1. Beam computes only the *last* bag of the translated graph ("connected to the full task graph" holds only for
   linear pipelines), so every other branch, e.g. a second writer, silently never runs. Here every leaf bag (a
   transform whose output nothing consumes) is computed, all in one graph so shared upstream steps run once.
2. A multi-output ParDo strips the output tags and hands every consumer (side inputs too) all outputs mixed; it
   also drops what ``finish_bundle`` emits. Here bundles keep tags and ``finish_bundle`` output, and each consumer
   gets only the elements of the output it reads.
3. ``Create`` packs 128 elements per partition, so few-hundred-file jobs used one worker: here each element is a
   partition, up to 32 per worker thread (and 1024).
4. A GroupByKey keeps its input's partition count, which doubles at every CoGroupByKey (a concat of bags): the
   shuffle graphs grew exponentially in the launcher. Here a shuffle has two partitions per worker thread (4-16),
   and int keys (the writers' part numbers) go round-robin over them (``shuffle_hash``). A file shuffle's file
   locations (``file_shuffle.LOCATIONS``), a few per file, are grouped by each reader for its share of the
   buckets, not by a task shuffle.
5. The result never closes the ``dask.distributed.Client`` the runner opened. Here it does once the job is done.
6. Every partition runs on the graph's one DoFn instance, so a worker with several threads runs bundles
   concurrently on shared state (``start_bundle`` of one resets another's). Here each worker thread has its own copy,
   set up once per job.
7. Not Beam's: Dask's nanny starts each worker with ``MALLOC_TRIM_THRESHOLD_=65536`` (to give memory back to the OS),
   and setting any malloc threshold turns glibc's dynamic mmap threshold off (mallopt(3)): every allocation of 128
   KB or more, each numpy array of a language-ID or MinHash batch, became a fresh mmap, faulted in page by page and
   unmapped when freed. Here a worker fixes the mmap threshold at glibc's own dynamic ceiling (``MMAP_THRESHOLD``)
   before its first bundle; the trim threshold stays Dask's.
8. Not Beam's: Dask's fusion of linear task chains keeps each fused chain's last key as an alias of the fused task,
   a task that does nothing and still takes a round trip through the scheduler and a worker. Here the chain's readers
   read the fused task itself, and only a result's key is taken over by its task (``_without_aliases``): the
   scheduler learns durations by key name, and a chain of real work under a shuffle's key (first done that way)
   passed for a millisecond step, so four 0.5 s scatter tasks queued on one worker while the other idled. With fix
   4's per-reader location groups, the 400 MB documents job on one worker ran 444 tasks instead of 820, and its
   seconds with no task running between tasks went 2.3 -> 1.2-1.4.
9. Not Beam's: Dask's scheduler unpickles the graph it is sent, importing Beam and the job's steps to hold every
   task's objects, and pickles each task again for its worker. Here each task is sealed (``sealed_tasks``): pickled
   once by the launcher, forwarded unread by the scheduler, unpickled by the worker that runs it.

The fixes reach into Beam's private runner code: every name they use is listed once in ``BEAM_INTERNALS``, with the
bug it works around, and ``check_beam_internals()`` runs before they are imported, so a Beam release that moved one
fails at once with a one-line message instead of an ImportError or a silently different graph. The upstream issues
are cited at each fix; the README's runner section lists them.
"""

from __future__ import annotations

import collections
import copy
import ctypes
import dataclasses
import functools
import inspect
import os
import pkgutil
import sys
import threading
import uuid

import apache_beam as beam
import dask
import dask.bag as db
import dask.distributed as ddist
from apache_beam import pvalue
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.pipeline import AppliedPTransform, PipelineVisitor
from dask.bag.core import groupby_tasks
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from corpusforge.pipeline import file_shuffle

SUPPORTED_BEAM = ">=2.71,<2.78"  # the range pyproject.toml declares: internals read in 2.71.0 and 2.77.0

_BRANCHES = "fix 1, only the last bag runs (a regression of apache/beam#33805)"
_TAGS = "fix 2, multi-output ParDo mixes its outputs and drops finish_bundle output"
_CREATE = "fix 3, Create packs 128 elements per partition (apache/beam#26669 again, via #33805)"
_SHUFFLE = "fix 4, GroupByKey partitions double at every CoGroupByKey"
_CLIENT = "fix 5, the result never closes its client"

# Every private Beam name the fixes use: (dotted name, what they use of it, the upstream bug they work around).
# ``name`` is an attribute (or an attribute its ``__init__`` sets); ``name=`` is a keyword the fixes pass to it.
BEAM_INTERNALS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("apache_beam.runners.dask.dask_runner.DaskRunner", ("run_pipeline",), _BRANCHES),
    ("apache_beam.runners.dask.dask_runner.DaskOptions", ("_extract_bag_kwargs",), _BRANCHES),
    # Only DaskOptions reach Client(**options): upstream's own fix for apache/beam#30528 (PR #37101), Beam 2.71+.
    ("apache_beam.options.pipeline_options.PipelineOptions.get_all_options", ("drop_default=", "current_only="), _BRANCHES),
    ("apache_beam.runners.dask.overrides.dask_overrides", (), _BRANCHES),
    ("apache_beam.runners.dask.transform_evaluator.TRANSLATIONS", (), _BRANCHES),
    ("apache_beam.runners.dask.transform_evaluator.DaskBagOp", ("applied=", "bag_kwargs=", "apply"), _BRANCHES),
    ("apache_beam.runners.dask.transform_evaluator.DaskBagOp.apply", ("input_bag=", "side_inputs="), _BRANCHES),
    ("apache_beam.runners.dask.transform_evaluator.NoOp", (), _BRANCHES),
    ("apache_beam.runners.dask.transform_evaluator.Flatten", (), _BRANCHES),
    ("apache_beam.runners.dask.transform_evaluator.DaskBagWindowedIterator", ("bag=", "window_fn="), _TAGS),
    ("apache_beam.transforms.sideinputs.SideInputMap", ("view_class=", "view_options=", "iterable="), _TAGS),
    ("apache_beam.pvalue.AsSideInput", ("pvalue", "_view_options", "_window_mapping_fn"), _TAGS),
    ("apache_beam.runners.dask.transform_evaluator.ParDo", ("transform",), _TAGS),
    ("apache_beam.runners.dask.transform_evaluator.get_windowed_value", ("item=", "window_fn="), _TAGS),
    ("apache_beam.runners.dask.transform_evaluator.OneReceiver", ("values=",), _TAGS),
    (
        "apache_beam.runners.common._OutputHandler",
        (
            "window_fn=",
            "main_receivers=",
            "tagged_receivers=",
            "per_element_output_counter=",
            "output_batch_converter=",
            "process_yields_batches=",
            "process_batch_yields_elements=",
        ),
        _TAGS,
    ),
    (
        "apache_beam.runners.common.DoFnInvoker.create_invoker",
        (
            "signature=",
            "output_handler=",
            "context=",
            "side_inputs=",
            "input_args=",
            "input_kwargs=",
            "user_state_context=",
            "bundle_finalizer_param=",
        ),
        _TAGS,
    ),
    (
        "apache_beam.runners.common.DoFnInvoker",
        ("invoke_start_bundle", "invoke_process", "invoke_finish_bundle"),
        _TAGS,
    ),
    ("apache_beam.runners.common.DoFnContext", ("label=", "state="), _TAGS),
    ("apache_beam.runners.common.DoFnSignature", ("do_fn",), _TAGS),
    ("apache_beam.runners.dask.transform_evaluator.Create", ("apply",), _CREATE),
    ("apache_beam.runners.dask.overrides._Create", ("values",), _CREATE),
    ("apache_beam.runners.dask.transform_evaluator.GroupByKey", ("apply",), _SHUFFLE),
    ("apache_beam.runners.dask.transform_evaluator.defenestrate", (), _SHUFFLE),
    ("apache_beam.runners.dask.overrides._GroupByKeyOnly", (), _SHUFFLE),
    ("apache_beam.runners.dask.dask_runner.DaskRunnerResult", ("client=", "futures=", "wait_until_finish"), _CLIENT),
)


class UnsupportedBeam(ImportError):
    """The installed Beam lacks an internal the Dask fixes are written against."""


def check_beam_internals() -> None:
    """Raise ``UnsupportedBeam`` naming the first internal in ``BEAM_INTERNALS`` this Beam lacks or changed."""
    for name, uses, _bug in BEAM_INTERNALS:
        try:
            target = pkgutil.resolve_name(name)
        except (ImportError, AttributeError):
            raise _unsupported(name) from None
        for attribute in (use for use in uses if not use.endswith("=")):
            if not hasattr(target, attribute) and attribute not in _init_names(target):
                raise _unsupported(f"{name}.{attribute}")
        keywords = [use[:-1] for use in uses if use.endswith("=")]
        if keywords and not _accepts(target, keywords):
            raise _unsupported(f"{name}({'=, '.join(keywords)}=)")


def _unsupported(internal: str) -> UnsupportedBeam:
    return UnsupportedBeam(
        f"corpusforge's Dask fixes need {internal}, which Beam {beam.__version__} does not have; supported Beam: {SUPPORTED_BEAM}"
    )


def _init_names(target: object) -> set[str]:
    """Names the ``__init__`` methods of a (pure-Python) class use, which include the attributes they set."""
    inits = (vars(cls).get("__init__") for cls in getattr(target, "__mro__", ()))
    return {name for init in inits if hasattr(init, "__code__") for name in init.__code__.co_names}


def _accepts(target: object, keywords: list[str]) -> bool:
    """Whether ``target`` takes these keywords: from its signature, or for a Cython class (no signature; Beam
    compiles apache_beam.runners.common) by building one with every keyword None."""
    try:
        signature = inspect.signature(target)
    except ValueError:
        try:
            target(**dict.fromkeys(keywords))
        except TypeError:
            return False
        return True
    try:
        signature.bind_partial(**dict.fromkeys(keywords))
    except TypeError:
        return False
    return True


check_beam_internals()  # before the imports below, so a Beam that moved one fails with the one-line message

from apache_beam.runners.common import DoFnContext, DoFnInvoker, DoFnSignature, _OutputHandler  # noqa: E402
from apache_beam.runners.dask.dask_runner import DaskOptions, DaskRunnerResult  # noqa: E402
from apache_beam.runners.dask.dask_runner import DaskRunner as BeamDaskRunner  # noqa: E402
from apache_beam.runners.dask.overrides import _Create, _GroupByKeyOnly, dask_overrides  # noqa: E402
from apache_beam.runners.dask.transform_evaluator import (  # noqa: E402
    TRANSLATIONS,
    Create,
    DaskBagWindowedIterator,
    Flatten,
    GroupByKey,
    NoOp,
    OneReceiver,
    ParDo,
    defenestrate,
    get_windowed_value,
)
from apache_beam.transforms.sideinputs import SideInputMap  # noqa: E402


def _run_bundle(items, job: str, label: str, fn: beam.DoFn, window_fn, side_inputs, args: list, kwargs: dict) -> list:
    """One Dask partition as one bundle, with fresh receivers (Beam shares one set across partitions), read after
    ``finish_bundle`` (Beam reads before it), tagged outputs kept tagged (Beam strips the tags). Fix 2; no upstream
    issue found. And on this thread's own copy of the DoFn (``_held_dofn``): Beam runs every partition on the one
    instance in the graph, so a worker with several threads (``dask worker``'s default: one per core) ran bundles
    concurrently on shared bundle state (a GroupByKey of 400 elements on 3 threads came out as 339). Fix 6; no
    upstream issue found. Before the process's first bundle, fix 7 (``_arrays_from_the_heap``, once per process)."""
    _arrays_from_the_heap()
    signature = _held_dofn(fn, job, label)
    receivers = OneReceiver()
    handler = _OutputHandler(
        window_fn=window_fn,
        main_receivers=receivers[None],
        tagged_receivers=receivers,
        per_element_output_counter=None,
        output_batch_converter=None,
        process_yields_batches=False,
        process_batch_yields_elements=False,
    )
    invoker = DoFnInvoker.create_invoker(
        signature,
        handler,
        context=DoFnContext(label, state=None),
        side_inputs=side_inputs,
        input_args=args,
        input_kwargs=kwargs,
        user_state_context=None,
        bundle_finalizer_param=beam.DoFn.BundleFinalizerParam(),
    )
    try:
        invoker.invoke_start_bundle()
        for item in items:
            invoker.invoke_process(item)
        invoker.invoke_finish_bundle()
    except BaseException:
        _HELD.dofns.pop(label, None)  # a failed bundle's copy is not reused: a retry starts from a fresh one
        raise
    return [pvalue.TaggedOutput(v.tag, v.value.value) if isinstance(v, pvalue.TaggedOutput) else v.value for v in receivers.values]


_HELD = threading.local()  # per worker thread: the job it last ran a bundle of, and the signatures of its DoFn copies


def _held_dofn(fn: beam.DoFn, job: str, label: str) -> DoFnSignature:
    """The signature of this thread's copy of the DoFn of transform ``label`` in ``job``, set up once and kept for
    the job's later bundles, as Beam's own workers keep a bundle processor: a copy and its signature per bundle
    (Beam inspects every method) cost ~3 ms, 6% of a worker's bundle time on 100 MB of books. A bundle of another
    job tears down the copies held for the last one (teardown is best effort in Beam too)."""
    if getattr(_HELD, "job", None) != job:
        for signature in getattr(_HELD, "dofns", {}).values():
            signature.do_fn.teardown()
        _HELD.job, _HELD.dofns = job, {}
    if label not in _HELD.dofns:
        own = copy.deepcopy(fn)  # the graph's instance stays untouched: other threads copy it too
        own.setup()
        _HELD.dofns[label] = DoFnSignature(own)
    return _HELD.dofns[label]


MMAP_THRESHOLD = 32 << 20  # glibc's ceiling for its dynamic mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
M_MMAP_THRESHOLD = -3  # mallopt(3)'s parameter number


@functools.cache
def _arrays_from_the_heap() -> bool:
    """Fix 7, once per worker process: with a malloc trim threshold set in the environment (Dask's nanny sets one)
    and no mmap threshold of the user's, the mmap threshold fixed at ``MMAP_THRESHOLD``, where glibc's dynamic one
    would have grown to; True if set. On Wikipedia-shaped articles (4 KB) every language-ID and MinHash batch made
    fresh mappings: the documents job of 100 MB on one worker took 88-95 CPU-s against 64 with this, 39 locally."""
    if not sys.platform.startswith("linux"):
        return False
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    trimmed = "MALLOC_TRIM_THRESHOLD_" in os.environ or "glibc.malloc.trim_threshold" in tunables
    if not trimmed or "MALLOC_MMAP_THRESHOLD_" in os.environ or "glibc.malloc.mmap_threshold" in tunables:
        return False
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)  # glibc's (musl has none, and keeps its own policy)
    return bool(mallopt and mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))


@dataclasses.dataclass
class _TaggedParDo(ParDo):
    job: str = ""  # which job's graph the bundles belong to: a worker thread keeps its DoFn copies for one job at a time

    def apply(self, input_bag: db.Bag, side_inputs=None) -> db.Bag:
        transform = self.transform
        args, kwargs = transform.raw_side_inputs
        main_input = next(iter(self.applied.main_inputs.values()))
        window_fn = main_input.windowing.windowfn if hasattr(main_input, "windowing") else None
        return input_bag.map(get_windowed_value, window_fn).map_partitions(
            _run_bundle, self.job, self.applied.full_label, transform.fn, window_fn, side_inputs, list(args), kwargs
        )


MAX_CREATE_PARTITIONS = 1024
CREATE_PARTITIONS_PER_THREAD = 32
MIN_SHUFFLE_PARTITIONS = 4
MAX_SHUFFLE_PARTITIONS = 16  # tasks per shuffle grow ~n^2: 16 keeps the scheduler small; --dask_npartitions raises it


@dataclasses.dataclass
class _SpreadCreate(Create):
    """One partition per element up to ``limit``: Beam's translation packs 128 elements into a partition, so a
    job over a few hundred input files ran on one or two workers. Fix 3: the symptom of apache/beam#26669, back
    since apache/beam#33805 made 128 the default."""

    limit: int = MAX_CREATE_PARTITIONS

    def apply(self, input_bag=None, side_inputs=None) -> db.Bag:
        if self.bag_kwargs.get("npartitions") or self.bag_kwargs.get("partition_size"):
            return super().apply(input_bag, side_inputs)
        items = self.transform.values
        return db.from_sequence(items, npartitions=max(1, min(len(items), self.limit)))


@dataclasses.dataclass
class _BoundedGroupByKey(GroupByKey):
    """Beam's translation keeps the input's partition count, and a CoGroupByKey's input is a concat of bags:
    partitions doubled at every join (connected components: ~2^20 after eight rounds) and the launcher spent
    gigabytes building the shuffle graph. Here a shuffle has at most ``limit`` outputs. Fix 4; no upstream
    issue found (apache/beam#29365 is another GroupByKey partitioning bug, fixed in Dask)."""

    limit: int = MAX_SHUFFLE_PARTITIONS

    def apply(self, input_bag: db.Bag, side_inputs=None) -> db.Bag:
        limit = self.bag_kwargs.get("npartitions") or self.limit
        if _inside(self.applied, file_shuffle.LOCATIONS):
            # A few (bucket, location) pairs per file written: each of ``limit`` reader partitions groups its share of
            # the buckets from every writer's pairs, in one task. A task shuffle of n partitions is ~n^2 + 3n tasks in
            # ~4 steps one after another, each waiting on the scheduler (the near-dedup chain's ~20 file shuffles held
            # the 400 MB documents job 3.4-3.6 s with no task running on one worker); gathering the pairs in one task
            # and splitting it again still made three steps per shuffle (concat, group, split) before the readers.
            return _grouped_shares(input_bag, limit)
        if input_bag.npartitions > limit:
            input_bag = input_bag.repartition(limit)
        return groupby_tasks(input_bag, _key, hash=shuffle_hash).map(_key_and_values)  # Beam's, with our hash


def _inside(applied: AppliedPTransform | None, label: str) -> bool:
    """Whether a transform is, or is part of, a transform labelled ``label`` (the runner sees composites' types as
    plain ``PTransform``: their labels are what stays)."""
    while applied is not None:
        if applied.full_label.rsplit("/", 1)[-1] == label:
            return True
        applied = applied.parent
    return False


def _grouped_shares(bag: db.Bag, shares: int) -> db.Bag:
    """``shares`` partitions, the i-th holding (key, [values]) for the keys whose ``shuffle_hash`` is i modulo
    ``shares``, each grouped by one task from all of ``bag``'s partitions (small ones: a few pairs per file)."""
    name = f"file-locations-{tokenize(bag.name, shares)}"
    parts = [(bag.name, i) for i in range(bag.npartitions)]
    # A layer of its own over the bag's graph (``to_delayed`` would copy the whole graph so far, at every shuffle).
    layer = {(name, share): (_group_share, parts, share, shares) for share in range(shares)}
    return db.Bag(HighLevelGraph.from_collections(name, layer, dependencies=[bag]), name, shares)


def _group_share(parts: list[list[tuple]], share: int, shares: int) -> list[tuple]:
    """The (key, windowed value) pairs of every partition whose key falls in ``share``, as (key, [values]) in the
    order met, as ``groupby_tasks`` and ``_key_and_values`` give."""
    groups: dict = {}
    for part in parts:
        for key, value in part:
            if shuffle_hash(key) % shares == share:
                groups.setdefault(key, []).append(defenestrate(value))
    return list(groups.items())


def _key(item: tuple) -> object:
    return item[0]


def _key_and_values(group: tuple) -> tuple:
    key, items = group
    return key, [defenestrate(item[1]) for item in items]


def shuffle_hash(key: object) -> int:
    """Dask's shuffle hash (``tokenize``), but an int key, or a tuple of ints, by its value: the part numbers the
    writers group by then go round-robin over a shuffle's partitions. Hashed, 4 document parts fell in 3 of 4
    partitions (8 parts in 2), and the two parts of one were the 400 MB documents job's last 2.5 s, on one worker.
    (Mixed by a prime, coprime with any partition count below it, so (part, parts) keys go round-robin too.)"""
    if isinstance(key, int):
        return key
    if isinstance(key, tuple) and key and all(isinstance(k, int) for k in key):
        return functools.reduce(lambda mixed, k: mixed * 1_000_003 + k, key, 0)
    return int(tokenize(key), 16)


def shuffle_partitions(threads: int) -> int:
    """Outputs per shuffle: two per worker thread, so no thread waits on another's one large task, and no more.

    A shuffle of n partitions is ~n^2 tasks, all passing through the scheduler, which on a small cluster
    shares the workers' cores: the near-dedup job has ~36 shuffles, so 16 partitions on 2 threads made
    15,300 tasks where 4 make ~4,000 (the 400 MB documents job took 9% less CPU in one interleaved pair per
    cluster size).
    """
    return min(MAX_SHUFFLE_PARTITIONS, max(MIN_SHUFFLE_PARTITIONS, 2 * threads))


def create_partitions(threads: int) -> int:
    """Partitions of a ``Create`` (read tasks, mostly): ``CREATE_PARTITIONS_PER_THREAD`` per worker thread, and
    no more. Each partition of a read is ~9 Dask tasks (the read, and a task per branch of its outputs), each
    costing the scheduler and the worker a few milliseconds: with a partition per ~1 MB book, the 400 MB documents
    job spent ~55 ms of cluster CPU per book beside the book's own work. Thirty-two per thread still leave a
    thread's last partition a small part of its work."""
    return min(MAX_CREATE_PARTITIONS, CREATE_PARTITIONS_PER_THREAD * max(1, threads))


def _translations(threads: int) -> dict:
    create = functools.partial(_SpreadCreate, limit=create_partitions(threads))
    shuffle = functools.partial(_BoundedGroupByKey, limit=shuffle_partitions(threads))
    pardo = functools.partial(_TaggedParDo, job=uuid.uuid4().hex)
    return {**TRANSLATIONS, beam.ParDo: pardo, _Create: create, _GroupByKeyOnly: shuffle}


def _only_tag(bag: db.Bag, tag: str | None) -> db.Bag:
    """The elements of one output of a (possibly multi-output) ParDo bag."""
    if tag is None or tag == "None":
        return bag.filter(lambda v: not isinstance(v, pvalue.TaggedOutput))
    return bag.filter(lambda v: isinstance(v, pvalue.TaggedOutput) and v.tag == tag).map(lambda v: v.value)


class _Visitor(PipelineVisitor):
    """Beam's graph walk, with our translations (fixes 2-4), each consumer reading only its output (fix 2), and
    the leaves remembered (fix 1)."""

    def __init__(self, bag_kwargs: dict, threads: int) -> None:
        self.bag_kwargs = bag_kwargs
        self.translations = _translations(threads)
        self.bags: dict[AppliedPTransform, db.Bag] = collections.OrderedDict()
        self.consumed: set[AppliedPTransform] = set()

    def _bag_of(self, value: pvalue.PValue) -> db.Bag | None:
        producer = value.producer
        if producer not in self.bags:
            return None
        self.consumed.add(producer)
        bag = self.bags[producer]
        return _only_tag(bag, value.tag) if len(producer.outputs) > 1 else bag

    def visit_transform(self, node: AppliedPTransform) -> None:
        op = self.translations.get(node.transform.__class__, NoOp)(node, bag_kwargs=self.bag_kwargs)
        kwargs: dict = {"input_bag": None, "side_inputs": None}
        inputs = [b for b in (self._bag_of(v) for v in node.inputs if not isinstance(v, pvalue.PBegin)) if b is not None]
        if inputs:
            kwargs["input_bag"] = inputs[0] if len(inputs) == 1 and not isinstance(op, Flatten) else inputs
        if node.side_inputs:
            kwargs["side_inputs"] = [
                SideInputMap(type(si), si._view_options(), DaskBagWindowedIterator(self._bag_of(si.pvalue), si._window_mapping_fn))
                for si in node.side_inputs
            ]
        self.bags[node] = op.apply(**kwargs)

    def leaves(self) -> list[db.Bag]:
        return [bag for node, bag in self.bags.items() if node not in self.consumed]


def _without_aliases(bags: list[db.Bag]) -> list[db.Bag]:
    """The bags optimized as ``compute`` would (culled, linear chains fused), with no alias of a fused chain left.

    Dask's fusion names a fused task anew and keeps the chain's last key as an ``Alias`` of it, a task that does
    nothing but still takes a round trip through the scheduler and a worker: 24 of the 48 tasks of a Create, a Map
    and a ``FileGroupByKey`` over 20 partitions. Without its private task classes (Dask before 2024.12) the graph
    runs as Dask optimized it."""
    optimized = dask.optimize(*bags)
    try:
        from dask._task_spec import Alias, Task
    except ImportError:
        return list(optimized)
    graph = _one_graph(optimized)
    referenced = collections.Counter(dependency for node in graph.values() for dependency in node.dependencies)
    outputs = {key for bag in optimized for key in bag.__dask_keys__()}
    redirected = {}  # alias -> the fused task it named: its dependents read the task itself
    for key, node in list(graph.items()):
        if isinstance(node, Alias) and referenced[node.target] == 1 and isinstance(graph.get(node.target), Task):
            if key in outputs:  # a result the job's futures wait for: the task takes the alias's key
                graph[key] = graph.pop(node.target).substitute({}, key=key)
            else:
                redirected[key] = node.target
                del graph[key]
    for key, node in list(graph.items()):
        if node.dependencies & redirected.keys():
            graph[key] = node.substitute(redirected)
    return [db.Bag(graph, bag.name, bag.npartitions) for bag in optimized]


def _sealed(bags: list[db.Bag]) -> list[db.Bag]:
    """The bags' tasks sealed (``sealed_tasks``): the scheduler forwards them unread, importing nothing of the
    job's. Fix 9, not Beam's. Dask before 2024.12 (no task classes) gets the graph as it is."""
    try:
        from corpusforge.pipeline.sealed_tasks import seal
    except ImportError:
        return bags
    sealed = seal(_one_graph(bags))
    return [db.Bag(sealed, bag.name, bag.npartitions) for bag in bags]


def _one_graph(bags: list[db.Bag]) -> dict:
    """The bags' tasks in one dict (optimized together, they share a graph: each adds what the others lack, if any)."""
    graph: dict = {}
    for bag in bags:
        graph.update(bag.__dask_graph__())
    return graph


class _Result(DaskRunnerResult):
    """Closes the client it opened once the job is done, so no reconnect loop outlives the cluster. Fix 5; no
    upstream issue found."""

    def wait_until_finish(self, duration=None) -> str:
        try:
            return super().wait_until_finish(duration)
        finally:
            self.client.close()


def client_options(options: PipelineOptions) -> tuple[dict, dict]:
    """(``dask.distributed.Client``'s keywords, ``dask.bag``'s) from a job's DaskOptions."""
    dask_options = options.view_as(DaskOptions).get_all_options(drop_default=True, current_only=True)
    return dask_options, DaskOptions._extract_bag_kwargs(dask_options)


class DaskRunner(BeamDaskRunner):
    """Use as ``--runner=corpusforge.pipeline.dask_runner.DaskRunner --dask_client_address=HOST:PORT``."""

    def run_pipeline(self, pipeline, options):
        """Beam's ``run_pipeline`` computing every leaf, not the last bag only: fix 1, a regression of
        apache/beam#33805 (Beam 2.60-2.62 computed every bag); no issue filed upstream that we found."""
        dask_options, bag_kwargs = client_options(options)
        try:
            client = ddist.Client(**dask_options)
        except OSError as error:  # nothing answers at the address: the user's to fix, said in one line
            raise ValueError(f"no Dask scheduler answered at {dask_options.get('address')}: {error}") from error
        pipeline.replace_all(dask_overrides())
        visitor = _Visitor(bag_kwargs, sum(client.nthreads().values()))
        pipeline.visit(visitor)
        futures = client.compute(_sealed(_without_aliases(visitor.leaves())), optimize_graph=False)  # one graph: shared tasks run once
        return _Result(client, futures)
