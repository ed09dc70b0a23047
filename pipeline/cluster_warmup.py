"""A Dask cluster's workers made ready for a build's jobs while the launcher still plans them.

Before a job's first task runs, each worker unpickles it, importing every module the task names (Beam, most of
it, the runner and the job's steps: ~2.2 CPU-s). ``warm_cluster`` has every worker import those modules at once,
while the launcher imports Beam itself (the command line warms before its own import), describes the inputs and
builds the graph. The scheduler imports none of them: it forwards sealed tasks (``sealed_tasks``) unread.

A cluster started for builds can import them sooner, as each worker starts: ``dask worker ADDRESS --preload
corpusforge.pipeline.cluster_warmup`` (Dask's preload calls ``dask_setup``), so a build's first tasks wait for no
import and the launcher plans with the cores to itself; the launcher's warm-up then finds them imported.

Only imports: a job reads and writes the same whether the warm-up ran, is still running or failed (a cluster that
cannot be reached fails the job's own connection, with its own message). Each worker imports on its event loop's
thread, where it also unpickles a job's tasks, and only while it holds no task: imports of the same modules in two
threads at once can fail (Beam's circular imports then meet a partially initialised module). Loading the
language-ID model there as well was measured and left out: the worker's work then took 66-68 CPU-s instead of
59-63 (400 MB of books, 1 worker, two runs each), for a load of under a second.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import threading
from collections.abc import Sequence

from corpusforge.core.config import RunConfig
from corpusforge.pipeline import collector

log = logging.getLogger(__name__)
MODULES = ("corpusforge.pipeline.dask_runner", "corpusforge.pipeline.steps")  # Beam and the runner; the documents job's steps
_warmed: set[tuple] = set()  # (client keywords, modules) this process has warmed
_warmed_lock = threading.Lock()


def warm_runner(run: RunConfig, modules: Sequence[str] = MODULES) -> threading.Thread | None:
    """On a Dask cluster named by ``run.beam_args``, every worker starts importing ``modules`` now,
    once per process: the command line asks before it imports Beam itself, so the cluster's imports run beside its
    own (the build asks again as it starts: a no-op then). Other runners start their workers per job; Beam's
    DaskRunner without an address starts a cluster of its own for the job, with nothing to warm before."""
    keywords = client_keywords(run.beam_args) if run.runner == "DaskRunner" else {}
    key = (tuple(sorted(keywords.items())), tuple(modules))
    with _warmed_lock:
        if not keywords.keys() & {"address", "scheduler_file"} or key in _warmed:
            return None
        _warmed.add(key)
    import dask.distributed  # noqa: F401  (here, not in the thread: no import races the launcher's own of Beam)

    return warm_cluster(keywords, modules)


def client_keywords(beam_args: Sequence[str]) -> dict:
    """The ``dask.distributed.Client`` keywords a warm-up needs from a job's Beam flags, read as Beam's DaskOptions
    reads them (the job connects with its own; ``tests/test_cluster_warmup.py`` holds the two together) without
    importing Beam."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--dask_client_address", dest="address")
    parser.add_argument("--dask_scheduler_file", dest="scheduler_file")
    parser.add_argument("--dask_connection_timeout", dest="timeout", type=_timeout)
    found, _ = parser.parse_known_args(list(beam_args))
    return {key: value for key, value in vars(found).items() if value is not None}


def _timeout(flag: str) -> int | None:
    """Beam's ``DaskOptions._parse_timeout``: whole seconds, anything else Dask's default."""
    try:
        return int(flag)
    except ValueError:
        return None


def warm_cluster(client_options: dict, modules: Sequence[str]) -> threading.Thread:
    """Have every worker import ``modules``, all at once, from a thread of this process that ends when the request
    is answered."""

    def send() -> None:
        try:
            asyncio.run(_send(client_options, list(modules)))
        except Exception as error:  # best effort: the job connects on its own and says what is wrong
            log.debug("the Dask cluster was not warmed: %s", error)

    thread = threading.Thread(target=send, name="corpusforge-warm-cluster", daemon=True)
    thread.start()
    return thread


async def _send(client_options: dict, modules: list[str]) -> None:
    import dask.distributed as ddist

    async with ddist.Client(**client_options, asynchronous=True, set_as_default=False) as client:  # the job's own stays Dask's default
        await client.run(_warm_worker, modules, wait=False)  # answered once every worker has its import scheduled


def dask_setup(worker) -> None:
    """Dask's preload hook (``dask worker --preload corpusforge.pipeline.cluster_warmup``): the job's modules imported
    as the worker starts, on its event loop before it takes a task."""
    _import(list(MODULES))


async def _warm_worker(modules: list[str], dask_worker) -> None:
    """A coroutine only so that ``Client.run`` need not wait for it; it runs on the worker's loop and holds it."""
    if not dask_worker.state.tasks:
        _import(modules)


def _import(modules: list[str]) -> None:
    """The modules imported for the rest of the process (``collector.import_for_good``, as the forkserver's are)."""
    try:
        collector.import_for_good(modules)
    except Exception as error:  # the job's own unpickling raises it where it matters
        log.warning("warming this Dask process failed: %s", error)
