"""Beam pipeline options from the typed run configuration, and the block that runs a graph built with them.

The in-process runner is ours (``pipeline.local_runner``): Beam 2.68+'s DirectRunner first tries its Prism
runner, which downloads a binary (offline that fails and falls back, online the job runs on Prism). Every other
Beam option passes through ``run.beam_args`` unchanged, so the same job runs on Dask, Flink, Spark or Dataflow.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, PipelineOptionsT

from corpusforge.core import storage
from corpusforge.core.config import RunConfig

IN_PROCESS_RUNNERS = ("DirectRunner", "FnApiRunner")  # shuffled elements pass through the launching process
FILE_SHUFFLE_RUNNERS = (*IN_PROCESS_RUNNERS, "DaskRunner")  # per-document shuffles through files: shuffles_through_files
LOCAL_RUNNER = "corpusforge.pipeline.local_runner.LocalRunner"  # Beam's batch DirectRunner, minus the Prism attempt
# Runners Beam does not register by short name.
RUNNER_ALIASES = {
    "DirectRunner": LOCAL_RUNNER,
    "FnApiRunner": LOCAL_RUNNER,
    "DaskRunner": "corpusforge.pipeline.dask_runner.DaskRunner",  # Beam's own, with eight fixes
}
COMPRESSED = (".bz2", ".gz", ".xz", ".zst")
COMPRESSED_TEXT_RATIO = 4  # text per compressed byte, about (a Wikipedia dump's bz2: 3.2)


def pipeline_options(run: RunConfig, text_bytes: int | None = None, **extra: object) -> PipelineOptions:
    """Options of a job reading about ``text_bytes`` of text (None: unknown; it only matters to the auto running mode)."""
    flags = [f"--runner={RUNNER_ALIASES.get(run.runner, run.runner)}", *run.beam_args]
    if run.runner in IN_PROCESS_RUNNERS:
        mode = running_mode(run, text_bytes)
        flags.append(f"--direct_running_mode={mode}")
        workers = 1 if mode == "in_memory" else run.direct_num_workers or os.cpu_count() or 1
        flags.append(f"--direct_num_workers={workers}")
        if not any(flag.startswith("--default_sdk_harness_log_level") for flag in run.beam_args):
            flags.append("--default_sdk_harness_log_level=WARNING")  # worker processes: no per-bundle INFO lines
    return ViewOnce(flags, **extra)


class ViewOnce(PipelineOptions):
    """Beam's options with each view made once. Beam asks the pipeline's options for a view at every transform it
    applies (type checks, result types), and ``view_as`` parses every flag anew with a parser of every option: the
    documents job on Dask asked 1,249 times, ~0.6 s of the launcher before its first task. A view only reads and
    writes the options' one shared dict, so the first view of a class serves for every later one."""

    def view_as(self, cls: type[PipelineOptionsT]) -> PipelineOptionsT:
        views = self.__dict__.setdefault("_views", {})  # not an option: Beam's __setattr__ takes only those
        if cls not in views:
            views[cls] = super().view_as(cls)
        return views[cls]


@contextmanager
def beam_job(options: PipelineOptions) -> Iterator[beam.Pipeline]:
    """A pipeline to build in the block, run to the end when the block ends.

    Beam removes the temp folder a ``Pipeline`` makes in the system temp only inside ``run``: a graph that
    failed to build (a bad input named in one line) left a ``beam-pipeline-temp*`` folder behind.
    """
    pipeline = beam.Pipeline(options=options)
    try:
        yield pipeline
        # No round trip through the Runner API protos first, which Beam makes for a runner that is not Fn API
        # compatible (Dask alone of ours): a check that pickled every DoFn again, 0.6 s of the launcher per job.
        pipeline.run(test_runner_api=False).wait_until_finish()
    finally:
        storage.remove_tree(pipeline.local_tempdir)


def running_mode(run: RunConfig, text_bytes: int | None) -> str:
    """The DirectRunner mode of a job reading ``text_bytes``: auto runs a small job in this process, where a worker
    process's start (mostly importing Beam, 2-3 CPU-seconds a process) would cost more than the process saves.

    Measured on 2 cores (the full build of N MB of books, wall / CPU seconds, in-process against a worker per core):
    1 MB 14 / 14 against 28 / 37, 12 MB 32 / 36 against 45 / 67, 40 MB 76 / 88 against 78 / 125, and 100 MB of
    Wikipedia-shaped text 244 / 280 against 173 / 301. With 30 MB of Wikipedia-shaped text, the examples stages
    in-process (a 32 MB bound) cost 6% more wall for 14% less CPU: hence the default of 16 MB.
    """
    if run.direct_running_mode != "auto":
        return run.direct_running_mode
    return "in_memory" if text_bytes is not None and text_bytes < run.in_process_bytes else "multi_processing"


def input_text_bytes(files: Iterable[tuple[str, int]]) -> int:
    """The text in input files (path, size), about: a compressed file's size counts ``COMPRESSED_TEXT_RATIO`` times."""
    return sum(size * (COMPRESSED_TEXT_RATIO if path.lower().endswith(COMPRESSED) else 1) for path, size in files)


def shuffles_through_files(run: RunConfig) -> bool:
    """Whether the documents job's per-document shuffles (dedup keys, LSH bands, joins) go through files in its
    work folder (``pipeline.file_shuffle``), which every worker reaches as it reaches the spill, rather than through
    the runner's GroupByKey. The in-process runners' route every element through the launcher; on Dask, Beam's is
    a task shuffle of pickled Python lists, a window wrapper per element: Wikipedia-shaped articles (14 band keys
    each) took 64-68 CPU-s on one worker and 91 on two for 100 MB, against 53 with files on either. Flink, Spark and
    Dataflow keep their own shuffles."""
    return run.runner in FILE_SHUFFLE_RUNNERS


def shuffles_through_launcher(run: RunConfig) -> bool:
    """Whether the runner routes every shuffled element through the launching process (Beam's in-process
    runners do): there the shards are cut by the build's own processes, elsewhere on the cluster's workers.
    Which shuffles go through files is ``shuffles_through_files``."""
    return run.runner in IN_PROCESS_RUNNERS
