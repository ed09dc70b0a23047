"""Beam pipeline options from the typed run configuration.

The in-process runner is pinned explicitly: Beam 2.68+ otherwise first tries its Prism runner, which
downloads a binary (offline that fails and silently falls back). Every other Beam option passes through
``run.beam_args`` unchanged, so the same job runs on Dask, Flink, Spark or Dataflow.
"""

from __future__ import annotations

import os

from apache_beam.options.pipeline_options import PipelineOptions

from corpusforge.core.config import RunConfig

# Runners Beam does not register by short name.
RUNNER_ALIASES = {"DaskRunner": "corpusforge.pipeline.dask_runner.DaskRunner"}  # Beam's own, with two bugs fixed


def pipeline_options(run: RunConfig, **extra: object) -> PipelineOptions:
    flags = [f"--runner={RUNNER_ALIASES.get(run.runner, run.runner)}", *run.beam_args]
    if run.runner in ("DirectRunner", "FnApiRunner"):
        flags.append(f"--direct_running_mode={run.direct_running_mode}")
        workers = 1 if run.direct_running_mode == "in_memory" else run.direct_num_workers or os.cpu_count() or 1
        flags.append(f"--direct_num_workers={workers}")
        if not any(flag.startswith("--default_sdk_harness_log_level") for flag in run.beam_args):
            flags.append("--default_sdk_harness_log_level=WARNING")  # worker processes: no per-bundle INFO lines
    return PipelineOptions(flags, **extra)
