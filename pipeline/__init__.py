"""Apache Beam transforms and jobs that compose the corpora readers at any scale.

Every transform derives ids and random choices from content or (seed, document id), never from
bundle or worker order, so outputs are identical on the DirectRunner, Dask (``pipeline.dask_runner``,
Beam's runner with its branch and multi-output bugs fixed), Flink, Spark and Dataflow.
"""
