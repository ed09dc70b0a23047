"""Beam pipeline options from the typed run configuration.

The in-process runner is pinned explicitly: Beam 2.68+ otherwise first tries its Prism runner, which
downloads a binary (offline that fails and silently falls back). Every other Beam option passes through
``run.beam_args`` unchanged, so the same job runs on Dask, Flink, Spark or Dataflow.
"""

from __future__ import annotations

import os

from apache_beam.options.pipeline_options import PipelineOptions

from corpusforge.core.config import RunConfig

IN_PROCESS_RUNNERS = ("DirectRunner", "FnApiRunner")  # shuffled elements pass through the launching process
# Runners Beam does not register by short name.
RUNNER_ALIASES = {"DaskRunner": "corpusforge.pipeline.dask_runner.DaskRunner"}  # Beam's own, with five bugs fixed


def pipeline_options(run: RunConfig, **extra: object) -> PipelineOptions:
    flags = [f"--runner={RUNNER_ALIASES.get(run.runner, run.runner)}", *run.beam_args]
    if run.runner in IN_PROCESS_RUNNERS:
        flags.append(f"--direct_running_mode={run.direct_running_mode}")
        workers = 1 if run.direct_running_mode == "in_memory" else run.direct_num_workers or os.cpu_count() or 1
        flags.append(f"--direct_num_workers={workers}")
        if not any(flag.startswith("--default_sdk_harness_log_level") for flag in run.beam_args):
            flags.append("--default_sdk_harness_log_level=WARNING")  # worker processes: no per-bundle INFO lines
    return PipelineOptions(flags, **extra)


def shuffles_through_launcher(run: RunConfig) -> bool:
    """Whether the runner routes every shuffled element through the launching process (Beam's in-process
    runners do), so that per-document shuffles should go through files (``pipeline.file_shuffle``);
    distributed runners shuffle on their workers and get Beam's own GroupByKey."""
    return run.runner in IN_PROCESS_RUNNERS
