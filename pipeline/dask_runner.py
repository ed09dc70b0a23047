"""Beam's DaskRunner with two of its bugs fixed (Beam 2.77), so the same graphs run on Dask unchanged.

1. It computes only the *last* bag of the translated graph ("connected to the full task graph" holds
   only for linear pipelines), so every other branch, e.g. a second writer, silently never runs.
   Here every leaf bag (a transform whose output nothing consumes) is computed, all in one graph so
   shared upstream steps run once (optimising the leaves one by one would re-run them per leaf).
4. A GroupByKey keeps its input's partition count, which doubles at every CoGroupByKey (a concat of
   bags): the shuffle graphs grew exponentially in the launcher. Here shuffles have a bounded count.
3. ``Create`` packs 128 elements per partition, so few-hundred-file jobs used one worker: here each
   element is a partition (up to 1024).
2. A multi-output ParDo strips the output tags and hands every consumer all outputs mixed; it also
   drops what ``finish_bundle`` emits. Here bundles keep tags and ``finish_bundle`` output, and each
   consumer gets only the elements of the output it reads.
"""

from __future__ import annotations

import collections

import apache_beam as beam
import dask.bag as db
import dask.distributed as ddist
from apache_beam import pvalue
from apache_beam.pipeline import AppliedPTransform, PipelineVisitor
from apache_beam.runners.common import DoFnContext, DoFnInvoker, DoFnSignature, _OutputHandler
from apache_beam.runners.dask.dask_runner import DaskOptions, DaskRunnerResult
from apache_beam.runners.dask.dask_runner import DaskRunner as BeamDaskRunner
from apache_beam.runners.dask.overrides import _Create, _GroupByKeyOnly, dask_overrides
from apache_beam.runners.dask.transform_evaluator import (
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
from apache_beam.transforms.sideinputs import SideInputMap


def _run_bundle(items, label: str, fn: beam.DoFn, window_fn, side_inputs, args: list, kwargs: dict) -> list:
    """One Dask partition as one bundle, with fresh receivers; tagged outputs stay tagged."""
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
        DoFnSignature(fn),
        handler,
        context=DoFnContext(label, state=None),
        side_inputs=side_inputs,
        input_args=args,
        input_kwargs=kwargs,
        user_state_context=None,
        bundle_finalizer_param=beam.DoFn.BundleFinalizerParam(),
    )
    invoker.invoke_setup()
    invoker.invoke_start_bundle()
    for item in items:
        invoker.invoke_process(item)
    invoker.invoke_finish_bundle()
    invoker.invoke_teardown()
    return [pvalue.TaggedOutput(v.tag, v.value.value) if isinstance(v, pvalue.TaggedOutput) else v.value for v in receivers.values]


class _TaggedParDo(ParDo):
    def apply(self, input_bag: db.Bag, side_inputs=None) -> db.Bag:
        transform = self.transform
        args, kwargs = transform.raw_side_inputs
        main_input = next(iter(self.applied.main_inputs.values()))
        window_fn = main_input.windowing.windowfn if hasattr(main_input, "windowing") else None
        return input_bag.map(get_windowed_value, window_fn).map_partitions(
            _run_bundle, transform.label, transform.fn, window_fn, side_inputs, list(args), kwargs
        )


class _SpreadCreate(Create):
    """One partition per element up to ``MAX_CREATE_PARTITIONS``: Beam's translation packs 128 elements
    into a partition, so a job over a few hundred input files ran on one or two workers."""

    def apply(self, input_bag=None, side_inputs=None) -> db.Bag:
        if self.bag_kwargs.get("npartitions") or self.bag_kwargs.get("partition_size"):
            return super().apply(input_bag, side_inputs)
        items = self.transform.values
        return db.from_sequence(items, npartitions=max(1, min(len(items), MAX_CREATE_PARTITIONS)))


class _BoundedGroupByKey(GroupByKey):
    """Beam's translation keeps the input's partition count, and a CoGroupByKey's input is a concat of
    bags: partitions doubled at every join (connected components: ~2^20 after eight rounds) and the
    launcher spent gigabytes building the shuffle graph. Here a shuffle has at most
    ``MAX_SHUFFLE_PARTITIONS`` outputs."""

    def apply(self, input_bag: db.Bag, side_inputs=None) -> db.Bag:
        def key(item):
            return item[0]

        def value(item):
            k, v = item
            return k, [defenestrate(elm[1]) for elm in v]

        limit = self.bag_kwargs.get("npartitions") or MAX_SHUFFLE_PARTITIONS
        if input_bag.npartitions > limit:
            input_bag = input_bag.repartition(limit)
        return input_bag.groupby(key).map(value)


MAX_CREATE_PARTITIONS = 1024
MAX_SHUFFLE_PARTITIONS = 16  # tasks per shuffle grow ~n^2: 16 keeps the scheduler small; --dask_npartitions raises it
_TRANSLATIONS = {**TRANSLATIONS, beam.ParDo: _TaggedParDo, _Create: _SpreadCreate, _GroupByKeyOnly: _BoundedGroupByKey}


def _only_tag(bag: db.Bag, tag: str | None) -> db.Bag:
    """The elements of one output of a (possibly multi-output) ParDo bag."""
    if tag is None or tag == "None":
        return bag.filter(lambda v: not isinstance(v, pvalue.TaggedOutput))
    return bag.filter(lambda v: isinstance(v, pvalue.TaggedOutput) and v.tag == tag).map(lambda v: v.value)


class _Visitor(PipelineVisitor):
    def __init__(self, bag_kwargs: dict) -> None:
        self.bag_kwargs = bag_kwargs
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
        op = _TRANSLATIONS.get(node.transform.__class__, NoOp)(node, bag_kwargs=self.bag_kwargs)
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


class _Result(DaskRunnerResult):
    """Closes the client it opened once the job is done, so no reconnect loop outlives the cluster."""

    def wait_until_finish(self, duration=None) -> str:
        try:
            return super().wait_until_finish(duration)
        finally:
            self.client.close()


class DaskRunner(BeamDaskRunner):
    """Use as ``--runner=pipeline.dask_runner.DaskRunner --dask_client_address=HOST:PORT``."""

    def run_pipeline(self, pipeline, options):
        dask_options = options.view_as(DaskOptions).get_all_options(drop_default=True, current_only=True)
        bag_kwargs = DaskOptions._extract_bag_kwargs(dask_options)
        client = ddist.Client(**dask_options)
        pipeline.replace_all(dask_overrides())
        visitor = _Visitor(bag_kwargs)
        pipeline.visit(visitor)
        futures = client.compute(visitor.leaves())  # one graph: shared upstream tasks run once
        return _Result(client, futures)
