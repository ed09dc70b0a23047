"""Beam's worker processes forked from one process that has already imported them, instead of started afresh.

In ``multi_processing`` mode Beam's FnApiRunner starts every worker as ``python -m
apache_beam.runners.worker.sdk_worker_main``: each imports Beam (with its IO and cloud modules), numpy,
pyarrow and our steps again, about 3 CPU-seconds a worker, a worker per core, for every job of a build
(documents, BERT, GPT). Here the workers are forked from a ``multiprocessing`` forkserver that imported
all that once per build: the same worker program (``sdk_worker_main.main``) with the same environment
variables, connected to the runner over the same gRPC control, data and logging services.

``ForkedFnApiRunner`` swaps the subprocess environment Beam chose for ``FORKED_SDK_URN``, whose handler
below starts each worker through the forkserver; a worker that fails ends the job as a failed subprocess does.
The processes that cut a stage's shards start from the same server. The server forks from a clean process of
its own, never from the launcher, which runs Beam's and gRPC's threads.
"""

from __future__ import annotations

import gc
import multiprocessing
import multiprocessing.forkserver
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.context import BaseContext

import grpc
from apache_beam.portability import python_urns
from apache_beam.portability.api import beam_fn_api_pb2_grpc, endpoints_pb2
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.runners.portability.fn_api_runner.worker_handlers import GrpcWorkerHandler, WorkerHandler
from apache_beam.runners.portability.local_job_service import BeamFnLoggingServicer
from apache_beam.utils import thread_pool_executor
from google.protobuf import json_format, text_format

FORKED_SDK_URN = "corpusforge:environment:forked_sdk:v1"
PRELOAD = ["corpusforge.pipeline.forkserver_preload"]  # what the server imports once for every worker it forks

_lock = threading.Lock()
_context: BaseContext | None = None
_scopes = 0  # forkserver_scope() blocks entered and not left


def forkserver() -> BaseContext:
    """The forkserver context, with ``PRELOAD`` imported in the server (started by the first worker's fork)."""
    global _context
    with _lock:
        if _context is None:
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(PRELOAD)
            _context = context
        return _context


@contextmanager
def forkserver_scope() -> Iterator[None]:
    """The jobs inside share one forkserver, stopped and waited for when the outermost block is left: its workers'
    CPU time then counts in this process's children as subprocess workers' does, and no later build inherits its
    imports. A build holds one block around all its jobs; ``LocalRunner`` one around each job."""
    global _context, _scopes
    with _lock:
        _scopes += 1
    try:
        yield
    finally:
        with _lock:
            _scopes -= 1
            if _scopes == 0 and _context is not None:
                multiprocessing.forkserver._forkserver._stop()  # closes its "alive" pipe, then waits for it to exit
                _context = None


class ForkedFnApiRunner(fn_runner.FnApiRunner):
    """Beam's FnApiRunner whose ``multi_processing`` workers are forked (``FORKED_SDK_URN``)."""

    def run_via_runner_api(self, pipeline_proto, options):  # noqa: ANN001, ANN201 - Beam's signature
        for environment in pipeline_proto.components.environments.values():
            if environment.urn == python_urns.SUBPROCESS_SDK:
                environment.urn = FORKED_SDK_URN
        return super().run_via_runner_api(pipeline_proto, options)


@WorkerHandler.register_environment(FORKED_SDK_URN, bytes)
class ForkedSdkWorkerHandler(GrpcWorkerHandler):
    """As Beam's ``SubprocessSdkWorkerHandler``: one worker, run by a thread until it ends."""

    def __init__(self, payload: bytes, state, provision_info, grpc_server) -> None:  # noqa: ANN001
        super().__init__(state, provision_info, grpc_server)

    def start_worker(self) -> None:
        self.worker_thread = threading.Thread(name="run_worker", target=self._run)
        self.worker_thread.start()

    def stop_worker(self) -> None:
        self.worker_thread.join()

    def _run(self) -> None:
        """Serve the worker's logs, fork it with the environment Beam's subprocess worker gets, wait for it."""
        # Beam's options for this server: a worker's logging client pings it, and without them a long job's stream was
        # refused ("too_many_pings") and the worker hung at exit waiting for it (seen on 300 MB of 400 B pages).
        options = [("grpc.http2.max_pings_without_data", 0), ("grpc.http2.max_ping_strikes", 0)]
        logging_server = grpc.server(thread_pool_executor.shared_unbounded_instance(), options=options)
        logging_port = logging_server.add_insecure_port("[::]:0")
        logging_server.start()
        beam_fn_api_pb2_grpc.add_BeamFnLoggingServicer_to_server(BeamFnLoggingServicer(), logging_server)
        environment = {
            "CONTROL_API_SERVICE_DESCRIPTOR": text_format.MessageToString(endpoints_pb2.ApiServiceDescriptor(url=self.control_address)),
            "LOGGING_API_SERVICE_DESCRIPTOR": text_format.MessageToString(
                endpoints_pb2.ApiServiceDescriptor(url=f"localhost:{logging_port}")
            ),
            "PIPELINE_OPTIONS": json_format.MessageToJson(self.provision_info.provision_info.pipeline_options),
            "WORKER_ID": self.worker_id,
        }
        process = forkserver().Process(target=_worker_main, args=(dict(os.environ, **environment),), name=f"beam-worker-{self.worker_id}")
        try:
            process.start()
            process.join()
            if process.exitcode:
                raise RuntimeError(f"Worker subprocess exited with return code {process.exitcode}")
        finally:
            if process.is_alive():
                process.kill()
            logging_server.stop(0)


def _worker_main(environment: dict[str, str]) -> None:
    """In the forked worker: Beam's worker program, with the variables its command line would have had.

    What it inherits from the server (~245k objects: Beam, numpy, our steps) lives as long as it does, so it is
    moved out of the collector's sight: a documents worker's collections on 100 MB of articles took 1.0 CPU-s, 0.3
    with it (each full collection walked them all)."""
    gc.freeze()
    os.environ.clear()
    os.environ.update(environment)
    from apache_beam.runners.worker import sdk_worker_main

    sdk_worker_main.main(sys.argv)
