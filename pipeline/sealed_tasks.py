"""A job's Dask tasks sealed for the scheduler: each task's code and arguments pickled into bytes it forwards.

Dask's scheduler unpickles the whole graph it is sent, so it imported Beam, the runner and the job's steps (the
modules a task's DoFns name: ~2.2 CPU-s, on a 2-core cluster the cores the launcher and the workers were importing
on), held every task's objects, then pickled each one again to send it to a worker. A sealed task is the same key
and the same dependencies around the original task pickled once by the launcher; only the worker that runs it
unpickles it, on its event loop's thread as Dask unpickles a task it is sent: that thread also unpickles the data
other workers send and runs the cluster's warm-up (``cluster_warmup``), and imports of Beam in two threads at once
can fail on its circular imports (a worker's first sealed task unpickled on its own thread met a partially
initialised ``apache_beam.runners``). The scheduler then needs nothing of the job's environment but this module,
which imports no more than the standard library, cloudpickle and Dask.
"""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Mapping

import cloudpickle
import distributed
from dask._task_spec import Alias, GraphNode, Task, TaskRef


def seal(graph: Mapping) -> dict:
    """The graph with every node but an alias (which names only a key) replaced by its sealed task."""
    sealed = {}
    for key, node in graph.items():
        if isinstance(node, Alias):
            sealed[key] = node
            continue
        keys = tuple(node.dependencies)
        blob = cloudpickle.dumps(node, protocol=pickle.HIGHEST_PROTOCOL)
        sealed[key] = Task(key, run_sealed, blob, keys, *map(TaskRef, keys), _data_producer=node.data_producer)
    return sealed


def run_sealed(blob: bytes, keys: tuple, *values: object) -> object:
    """The sealed task's result, from the values of its dependencies (``keys``, in that order)."""
    return _unsealed(blob)(dict(zip(keys, values)))


def _unsealed(blob: bytes) -> GraphNode:
    """The task, unpickled on this worker's event loop thread (on this thread when it is that one, or no worker's)."""
    try:
        loop = distributed.get_worker().loop.asyncio_loop
    except ValueError:  # not on a worker (Dask's synchronous scheduler): nothing else unpickles beside us
        return pickle.loads(blob)
    try:
        here = asyncio.get_running_loop()
    except RuntimeError:
        here = None
    if here is loop or not loop.is_running():  # on the loop itself, or a worker closing: nothing to wait for
        return pickle.loads(blob)
    return asyncio.run_coroutine_threadsafe(_loads(blob), loop).result()


async def _loads(blob: bytes) -> GraphNode:
    return pickle.loads(blob)
