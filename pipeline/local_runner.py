"""The in-process runner: Beam's DirectRunner for batch jobs, without its attempt to run the job on Prism first.

Beam 2.68+'s ``DirectRunner`` first hands a job to its Prism runner, which downloads a Go binary from GitHub:
offline that fails and falls back (leaving an empty ``beam-temp*`` folder in the system temp for every job), online
the job runs on a runner our ``direct_running_mode``, file shuffles and tests never saw. ``LocalRunner`` goes
straight to what the DirectRunner falls back to for a batch job: Beam's FnApiRunner, given the pipeline options
for its worker processes as the DirectRunner gives them; in ``multi_processing`` mode its workers are forked from
one process that imported them once per build (``pipeline.forked_workers``) rather than each started afresh.
"""

from __future__ import annotations

from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability.api import beam_provision_api_pb2
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.runners.portability.portable_runner import JobServiceHandle
from apache_beam.runners.runner import PipelineResult, PipelineRunner

from corpusforge.pipeline.forked_workers import ForkedFnApiRunner, forkserver_scope


class LocalRunner(PipelineRunner):
    """Use as ``--runner=corpusforge.pipeline.local_runner.LocalRunner`` (``run.runner="DirectRunner"`` maps here)."""

    def run_pipeline(self, pipeline, options: PipelineOptions) -> PipelineResult:
        encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
        provision = fn_runner.ExtendedProvisionInfo(beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
        with forkserver_scope():  # inside a build's own block, the build's server lives on
            return ForkedFnApiRunner(provision_info=provision).run_pipeline(pipeline, options)
