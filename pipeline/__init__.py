"""Apache Beam transforms and jobs that compose the corpora readers at any scale.

Rules every transform here follows so the same graph runs on the DirectRunner, Dask, Flink, Spark and
Dataflow (Beam 2.77's DaskRunner silently mishandles the first two):
- no multi-output ParDo (``with_outputs``/``TaggedOutput``/``Partition``): tag elements and ``Filter``;
- no extra positional/keyword arguments to ``Map``/``FlatMap``/``ParDo`` except side inputs: configure
  ``DoFn`` instances through their constructor instead;
- ids and random choices derive from content or (seed, document id), never from bundle or worker order.
"""
